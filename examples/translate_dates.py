"""Translate human-written dates ("tuesday 3 march 2015", "3/3/15", "Mar 3, 2015") to ISO 2015-03-03.

The main example (run by `make demo`): a character-level encoder-decoder with
Bahdanau attention. A bidirectional GRU reads the date; an `AttentionGRUCell`
with additive attention writes the ISO date one character at a time, its
initial state computed from the encoder's backward state as in Bahdanau et
al. 2014. Training uses teacher forcing; evaluation decodes in-graph, greedily
and with beam search, and reports exact-match accuracy on held-out dates.

    python -m examples.translate_dates [--epochs N] [--samples N] [--out DIR] [--smoke] ...
        [--scheduled-sampling P]   (train feeding back its own predictions, p rising to P)
        [--distribute none|data|model|multiworker]

With `--distribute multiworker` (one process a machine, `TF_CONFIG` naming the
cluster) it trains with examples/multi_worker.py's loop instead of `fit`,
which fails under that strategy: each step's batch decided by the step's
number, a backup after every epoch in `OUT/multiworker_backup` (a directory
every worker reads), so a cluster restarted after losing a worker resumes
there. The chief (worker 0) then evaluates and writes the outputs.

With `--distribute model` (on JAX: `KERAS_BACKEND=jax`, and on CPUs
`XLA_FLAGS=--xla_force_host_platform_device_count=4`) it trains with `fit`
under `keras.distribution.ModelParallel`, the library's layout map splitting
the attention, embedding and read-out weights over two devices; it prints how
many weights were split. Without matplotlib (the `plot` extra) it skips the
pictures and says so.

Numeric dates are read day first (3/4/15 is 3 April 2015) and two-digit years
name 1950-2049, so every input has exactly one answer. The data is generated
with a fixed seed: nothing is downloaded.
"""

import datetime
import importlib.util
import json
import os

import keras
import numpy as np

import keras_attention as ka
from examples import common
from keras_attention.export.vocabulary import vocabulary_json
from keras_attention.text import Vocabulary

MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
FIRST_DAY, DAYS = datetime.date(1950, 1, 1), 36524  # 1950-01-01 .. 2049-12-31

SOURCE_ALPHABET = " ,-./0123456789abcdefghijklmnopqrstuvwxyz"
# Lower-cased characters, anything else <unk>. Written next to the exported
# model as vocabulary.json, so the serving side tokenises exactly as training did.
SOURCE = Vocabulary(["<pad>", "<unk>", *SOURCE_ALPHABET], unknown_token="<unk>", lowercase=True)
TARGET = Vocabulary(["<pad>", "<start>", "<end>", *"-0123456789"], start_token="<start>", end_token="<end>")
START, END = TARGET.start_id, TARGET.end_id
TARGET_LENGTH = 11  # "YYYY-MM-DD" and the end token


def ordinal(day):
    suffix = "th" if 10 <= day % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _fields(date):
    month = MONTHS[date.month - 1]
    return {
        "d": date.day,
        "dd": f"{date.day:02d}",
        "m": date.month,
        "mm": f"{date.month:02d}",
        "yyyy": date.year,
        "yy": f"{date.year % 100:02d}",
        "month": month,
        "mon": month[:3],
        "weekday": WEEKDAYS[date.weekday()],
        "wd": WEEKDAYS[date.weekday()][:3],
        "nth": ordinal(date.day),
    }


FORMATS = [
    "{weekday} {d} {month} {yyyy}",  # tuesday 3 march 2015
    "{d}/{m}/{yy}",  # 3/3/15
    "{Mon} {d}, {yyyy}",  # Mar 3, 2015
    "{dd}.{mm}.{yyyy}",  # 03.03.2015
    "{d} {month} {yyyy}",
    "{Month} {nth}, {yyyy}",
    "{yyyy}/{mm}/{dd}",
    "{dd}-{mm}-{yyyy}",
    "{d} {mon} {yy}",
    "{Weekday}, {Month} {d}, {yyyy}",
    "{MONTH} {d} {yyyy}",
    "{d}.{m}.{yyyy}",
    "{dd}/{mm}/{yyyy}",
    "the {nth} of {month} {yyyy}",
    "{wd} {dd} {mon} {yyyy}",
    "{yyyy}-{m}-{d}",
    "{mon}. {d}, {yy}",
    "{d}-{mon}-{yyyy}",
]


def format_date(date, template):
    fields = _fields(date)
    fields.update({k.capitalize(): str(v).capitalize() for k, v in fields.items()})
    fields["MONTH"] = fields["month"].upper()
    return template.format(**fields)


def make_dates(count, rng, exclude=()):
    """`count` (human date, ISO date) pairs, none of whose inputs is in `exclude`."""
    pairs, seen = [], set(exclude)
    while len(pairs) < count:
        date = FIRST_DAY + datetime.timedelta(days=int(rng.integers(DAYS)))
        human = format_date(date, FORMATS[rng.integers(len(FORMATS))])
        if human.lower() in seen:
            continue
        seen.add(human.lower())
        pairs.append((human, date.isoformat()))
    return pairs


# ----------------------------------------------------------------------- model


def build_models(units=128, embedding=32, attention_units=64, beam_width=5, sampling_probability=None):
    """The teacher-forced training model and two in-graph decoding models.

    All three share every layer, so training the first trains the others.
    With a `sampling_probability` (a number or a schedule of the training
    step) the training model is a `ScheduledSamplingDecoder`: it feeds the
    decoder its own previous prediction with that probability.
    """
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    memory, _, backward = keras.layers.Bidirectional(
        keras.layers.GRU(units // 2, return_sequences=True, return_state=True), name="encoder"
    )(keras.layers.Embedding(len(SOURCE), embedding, mask_zero=True, name="source_embedding")(source))
    initial_state = keras.layers.Dense(units, activation="tanh", name="initial_state")(backward)

    cell = ka.AttentionGRUCell(units, ka.AdditiveAttention(attention_units), name="attention_gru")
    target_embedding = keras.layers.Embedding(len(TARGET), embedding, name="target_embedding")
    readout = keras.layers.Dense(len(TARGET), dtype="float32", name="readout")
    if sampling_probability is None:
        outputs = ka.AttentionDecoder(cell, name="decoder")(
            target_embedding(target_in), memory, initial_state=[initial_state]
        )
        logits = readout(outputs)
    else:
        logits = ka.ScheduledSamplingDecoder(
            cell, target_embedding, readout, sampling_probability=sampling_probability, name="decoder"
        )(target_in, memory, initial_state=[initial_state])
    trainer = keras.Model([source, target_in], logits, name="dates_trainer")

    def decoder_model(method):
        decoded = ka.InferenceDecoder(
            cell,
            target_embedding,
            readout,
            START,
            END,
            TARGET_LENGTH,
            method=method,
            beam_width=beam_width,
            name=f"{method}_decoder",
        )(memory, initial_state=[initial_state])
        return keras.Model(source, decoded, name=f"dates_{method}")

    return trainer, decoder_model("greedy"), decoder_model("beam")


def translate(model, texts, batch_size=500):
    """Decoded ISO strings (best beam for beam search) and, per text, the
    produced token labels with their alignment rows."""
    results, alignments = [], []
    for start in range(0, len(texts), batch_size):
        batch = SOURCE.encode(texts[start : start + batch_size])
        output = common.predict(model, batch, batch_size=len(batch))
        ids, align, lengths = (np.asarray(output[k]) for k in ("ids", "alignments", "lengths"))
        if ids.ndim == 3:  # beam search: keep the best beam
            ids, align, lengths = ids[:, 0], align[:, 0], lengths[:, 0]
        results += TARGET.detokenize(ids)
        alignments += [
            ([TARGET.id_to_token(t) for t in row[:length]], weights[:length])
            for row, weights, length in zip(ids, align, lengths)
        ]
    return results, alignments


def plot_examples(texts, predictions, alignments, out, count=4):
    """The first `count` alignments as pictures in `out`; none, said, without matplotlib."""
    if importlib.util.find_spec("matplotlib") is None:
        print("attention plots skipped: matplotlib is not installed (pip install 'keras-attention-decoders[plot]')")
        return []
    paths = []
    for i in range(count):
        source = SOURCE.tokenize(texts[i])
        target, weights = alignments[i]
        weights = weights[:, : len(source)]
        path = os.path.join(out, f"attention_{i}.png")
        ka.plot_attention(weights, source, target, path=path, title=f"{texts[i]} -> {predictions[i]}")
        paths.append(path)
    return paths


# ------------------------------------------------------------------------ main


def whole_shares(inputs, targets, replicas, fraction=0.05):
    """`fit`'s rows under `--distribute model`: `validation_split=fraction`'s
    parts (the last rows held out), each cut to a multiple of `replicas`.

    JAX shards a batch over the mesh's batch axis only in equal parts; the
    batch size is a multiple of the replicas, so then every batch is, the
    last of each part too. At most `replicas - 1` rows of each part go
    unused. Returns `(inputs, targets, {"validation_data": ...})`."""
    rows = len(targets)
    end = rows - int(fraction * rows)
    train, validation = end - end % replicas, (rows - end) - (rows - end) % replicas
    return (
        [x[:train] for x in inputs],
        targets[:train],
        {"validation_data": ([x[end : end + validation] for x in inputs], targets[end : end + validation])},
    )


def train_on_workers(args, strategy, trainer, train_source, train_in, train_out):
    """`--distribute multiworker`: examples/multi_worker.py's loop over the rows `fit` would
    train on (validation_split=0.05 keeps the last 5% out), `args.epochs` epochs of full
    global batches. The batch of step `s` is read from a permutation of the rows seeded by
    its epoch, so a resumed run trains on the batches the lost one would have. The mean
    loss of each epoch's steps run here."""
    # TensorFlow's: imported here, so that `--distribute model` runs on JAX without it.
    from examples import multi_worker

    rows = len(train_source) - int(0.05 * len(train_source))
    steps_per_epoch = rows // args.batch_size
    if steps_per_epoch < 1:
        raise SystemExit(f"--batch-size: expected at most the {rows} training rows; got {args.batch_size}")
    with strategy.scope():
        optimizer = keras.optimizers.Adam(2e-3)
        optimizer.build(trainer.trainable_variables)

    def share(step, replica, replicas):
        epoch, batch = divmod(step, steps_per_epoch)
        order = np.random.default_rng([args.seed, epoch]).permutation(rows)
        width = args.batch_size // replicas
        taken = order[batch * args.batch_size + replica * width :][:width]
        return [train_source[taken], train_in[taken]], train_out[taken]

    losses = {}

    def on_step(step, loss):
        epoch = step // steps_per_epoch
        losses.setdefault(epoch, []).append(loss)
        if (step + 1) % steps_per_epoch == 0:
            print(f"epoch {epoch + 1}/{args.epochs}: loss {np.mean(losses[epoch]):.4f}", flush=True)

    def loss_fn(target, logits):
        return keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)

    first, _ = multi_worker.train(
        strategy,
        trainer,
        optimizer,
        loss_fn,
        share,
        args.epochs * steps_per_epoch,
        os.path.join(args.out, "multiworker_backup"),
        save_every=steps_per_epoch,
        on_step=on_step,
    )
    print(f"trained steps {first} to {args.epochs * steps_per_epoch} ({steps_per_epoch} an epoch)", flush=True)
    return [float(np.mean(losses[epoch])) for epoch in sorted(losses)]


def main(argv=None):
    args = common.parse_args(
        __doc__.splitlines()[0],
        argv,
        multiworker_loop=True,
        model_parallel=True,
        epochs=12,
        batch_size=128,
        samples=30000,
        out="runs/dates",
        smoke_epochs=1,
        smoke_samples=512,
        smoke_batch_size=64,
        refuse=lambda args: (
            "--scheduled-sampling: examples/multi_worker.py's loop trains without it; expected no "
            f"--scheduled-sampling with --distribute multiworker; got {args.scheduled_sampling}"
            if args.distribute == "multiworker" and args.scheduled_sampling is not None
            else None
        ),
        extra=lambda parser: parser.add_argument(
            "--scheduled-sampling",
            type=float,
            default=None,
            metavar="P",
            help="train with scheduled sampling, the probability rising linearly from 0 to P over the training",
        ),
    )
    multiworker = args.distribute == "multiworker"
    strategy = common.setup(args)
    if args.distribute in ("multiworker", "model") and args.batch_size % strategy.num_replicas_in_sync:
        raise SystemExit(
            f"--batch-size: expected a multiple of the {strategy.num_replicas_in_sync} replicas (equal shares "
            f"under --distribute {args.distribute}); got {args.batch_size}"
        )
    rng = np.random.default_rng(args.seed)
    test_size = 200 if args.smoke else 2000
    test = make_dates(test_size, np.random.default_rng(10_000 + args.seed))
    train = make_dates(args.samples, rng, exclude=[human.lower() for human, _ in test])
    train_source = SOURCE.encode([h for h, _ in train])
    train_in, train_out = TARGET.encode_targets([iso for _, iso in train])

    schedule = None
    if args.scheduled_sampling is not None:
        if not 0 <= args.scheduled_sampling <= 1:
            raise SystemExit(f"--scheduled-sampling must be in [0, 1]; got {args.scheduled_sampling}")
        steps = args.epochs * -(-int(0.95 * len(train)) // args.batch_size)  # validation_split=0.05
        schedule = keras.optimizers.schedules.PolynomialDecay(0.0, steps, args.scheduled_sampling)
    with strategy.scope():
        trainer, greedy, beam = build_models(sampling_probability=schedule)
        trainer.compile(
            optimizer=keras.optimizers.Adam(2e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
            jit_compile=args.jit,
        )
        ka.training.build_optimizer(trainer)
    trainer.summary()
    if args.distribute == "model":
        split = strategy.split_weights(trainer)
        print(
            f"model parallel: {len(split)} of {len(trainer.weights)} weights split over the mesh's model axis: "
            + ", ".join(split),
            flush=True,
        )
    with common.Timer() as training:
        if multiworker:
            epoch_losses = train_on_workers(args, strategy, trainer, train_source, train_in, train_out)
        else:
            inputs, targets, validation = [train_source, train_in], train_out, {"validation_split": 0.05}
            if args.distribute == "model":
                inputs, targets, validation = whole_shares(inputs, targets, strategy.num_replicas_in_sync)
            history = trainer.fit(
                inputs,
                targets,
                **validation,
                batch_size=args.batch_size,
                epochs=args.epochs,
                callbacks=common.callbacks(args),
                verbose=2 if args.smoke else "auto",
            )
            epoch_losses = history.history["loss"]
    if multiworker:
        from examples import multi_worker

        worker, chief = multi_worker.task(strategy)
        if not chief:
            print(f"worker {worker}: trained; the chief evaluates and writes the outputs")
            return {"worker": worker, "final_loss": epoch_losses[-1], "replicas": strategy.num_replicas_in_sync}
        # The cluster's models gather across the workers in predict; the chief goes on alone
        # with the trained weights in models of its own.
        weights = trainer.get_weights()
        trainer, greedy, beam = build_models(sampling_probability=schedule)
        trainer.set_weights(weights)
    trainer.save(os.path.join(args.out, "dates_trainer.keras"))
    greedy.save(os.path.join(args.out, "dates_greedy.keras"))
    beam.save(os.path.join(args.out, "dates_beam.keras"))

    texts, answers = [h for h, _ in test], [iso for _, iso in test]
    with common.Timer() as greedy_time:
        greedy_predictions, alignments = translate(greedy, texts)
    with common.Timer() as beam_time:
        beam_predictions, _ = translate(beam, texts)
    greedy_accuracy = float(np.mean([p == a for p, a in zip(greedy_predictions, answers)]))
    beam_accuracy = float(np.mean([p == a for p, a in zip(beam_predictions, answers)]))
    character_accuracy = float(
        np.mean([np.mean([x == y for x, y in zip(p.ljust(10), a)]) for p, a in zip(greedy_predictions, answers)])
    )
    plots = plot_examples(texts, greedy_predictions, alignments, args.out)
    with open(os.path.join(args.out, "vocabulary.json"), "w", encoding="utf-8") as f:
        f.write(vocabulary_json({"source": SOURCE, "target": TARGET}))

    # Real dates for the export's parity check, per signature: the decoders
    # take date strings (tokenised with vocabulary.json), the teacher-forced
    # model ids and its shifted targets.
    decoder_batches = [{"source": texts[:8]}, {"source": texts[8:11]}]
    target_in, _ = TARGET.encode_targets(answers[:8])
    samples = {
        "serving_default": [{"source": SOURCE.encode(texts[:8]).tolist(), "target_in": target_in.tolist()}],
        "translate": decoder_batches,
        "translate_beam": decoder_batches,
    }
    with open(os.path.join(args.out, "sample_inputs.json"), "w") as f:
        json.dump(samples, f, indent=1)

    results = {
        "task": "dates",
        "samples": args.samples,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "test_dates": test_size,
        "greedy_exact_match": greedy_accuracy,
        "beam_exact_match": beam_accuracy,
        "greedy_character_accuracy": character_accuracy,
        "final_loss": float(epoch_losses[-1]),
        "scheduled_sampling": args.scheduled_sampling,
        "train_seconds": training.seconds,
        "greedy_decode_seconds": greedy_time.seconds,
        "beam_decode_seconds": beam_time.seconds,
        "plots": plots,
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "distribute": args.distribute,
        "replicas": strategy.num_replicas_in_sync,
    }
    common.write_results(args, results)
    errors = [(t, p, a) for t, p, a in zip(texts, greedy_predictions, answers) if p != a]
    print(f"\nexact match on {test_size} held-out dates: greedy {greedy_accuracy:.2%}, beam(5) {beam_accuracy:.2%}")
    print(
        f"training {training.seconds:.0f} s; decoding {greedy_time.seconds:.1f} s greedy, {beam_time.seconds:.1f} s beam"
    )
    for text, prediction, answer in errors[:5]:
        print(f"  miss: {text!r} -> {prediction} (expected {answer})")
    for text, prediction in list(zip(texts, greedy_predictions))[:5]:
        print(f"  {text!r:>34} -> {prediction}")
    return results


if __name__ == "__main__":
    main()
