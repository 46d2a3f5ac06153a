"""Accuracy against sentence length: a fixed-size context fails where attention does not.

Reproduces the shape of figure 2 of Bahdanau et al. 2014 (arXiv:1409.0473) on
a generated translation-like task. A source sentence is 5 to 60 random words
out of 24, a quarter of them "adjectives"; its translation maps every word
through a fixed permutation of the vocabulary and, as French does, puts an
adjective after the noun that follows it ("a0 n7 n9 a2 a3 n8" -> "N7 A0 N9 A2
N8 A3", the translation of a word written in capitals). Every source word must
come out, in a locally reordered place, so the difficulty grows with length.
Two models with about the same number of parameters learn it, with the same
batches, for the same number of steps:

- plain (RNNencdec, Cho et al. 2014): a bidirectional GRU reads the source and
  its two last states are the whole context; a GRU decoder starts from it and
  reads it at every step;
- attention (RNNsearch, Bahdanau et al. 2014): the same encoder, and an
  `AttentionGRUCell` with additive attention looks back at every source
  position while writing.

Both decode greedily, in-graph, on held-out sentences grouped by source length
(5-10, 11-20, ..., 51-60). The plain model's token and exact-match accuracy fall
as sentences get longer; the attention model's stay flat.

    python -m examples.length_study [--epochs N] [--samples N] [--max-length 60] [--out DIR] [--smoke] ...

It writes `length_study.csv` and `length_study.png` (token accuracy and exact
match per length bucket, both models), `attention_long.png` (the alignment of
one long sentence: a diagonal with the adjectives' detours), both trained models as `.keras` and
`results.json`. `--max-length` (default 60; 20 with `--smoke`) sets the longest
sentence. The data is generated with fixed seeds: nothing is downloaded.
"""

import argparse
import csv
import json
import os

import keras
import numpy as np
import tensorflow as tf
from keras import ops

import keras_attention as ka
from examples import common

WORDS = 24  # source and target words
PAD, START, END = 0, 1, 2
VOCABULARY = 3 + WORDS
MIN_LENGTH = 5
TASK_SEED = 1409  # the permutation is part of the task, not of a run's seed
TRANSLATION = np.concatenate([[PAD, START, END], 3 + np.random.default_rng(TASK_SEED).permutation(WORDS)])
ADJECTIVES = frozenset(range(3, 3 + WORDS // 4))  # come after their noun in the translation
SOURCE_OF = np.argsort(TRANSLATION)


def word_name(token):
    return f"{'a' if token in ADJECTIVES else 'n'}{token - 3}"


# ------------------------------------------------------------------------ data


def translate_ids(source):
    """The reference translation of one sentence of word ids (no padding)."""
    source, order, i = list(source), [], 0
    while i < len(source):
        if source[i] in ADJECTIVES and i + 1 < len(source) and source[i + 1] not in ADJECTIVES:
            order += [i + 1, i]
            i += 2
        else:
            order.append(i)
            i += 1
    return TRANSLATION[np.asarray(source)[order]]


def make_sentences(lengths, rng, exclude=frozenset()):
    """One random sentence per length, none of them in `exclude`."""
    sentences = []
    for length in lengths:
        while True:
            sentence = tuple(int(t) for t in rng.integers(3, VOCABULARY, size=length))
            if sentence not in exclude:
                break
        sentences.append(sentence)
    return sentences


def buckets_for(max_length):
    """(low, high) source-length buckets: 5-10, 11-20, ... up to `max_length`."""
    highs = [h for h in range(10, max_length, 10)] + [max_length]
    lows = [MIN_LENGTH] + [h + 1 for h in highs[:-1]]
    return list(zip(lows, highs))


def pad(rows, length=None):
    ids = np.zeros((len(rows), length or max(map(len, rows))), "int32")
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
    return ids


def encode(sentences, multiple=1):
    """Padded source ids, teacher-forcing inputs, targets and their weights;
    source lengths rounded up to `multiple`."""
    targets = [list(translate_ids(s)) + [END] for s in sentences]
    length = -(-max(map(len, sentences)) // multiple) * multiple
    source = pad(sentences, length)
    target_out = pad(targets, length + 1)
    target_in = np.concatenate([np.full((len(targets), 1), START, "int32"), target_out[:, :-1]], axis=1)
    return source, target_in, target_out, (target_out != PAD).astype("float32")


def length_batches(sentences, batch_size, seed, multiple=1):
    """Batches of sentences of similar length, so a batch of 5-token sentences
    does not pay for 60 steps of padding; their order is shuffled every epoch.
    XLA compiles once per padded length: `multiple` keeps those few."""
    rng = np.random.default_rng(seed)
    by_length = sorted(range(len(sentences)), key=lambda i: (len(sentences[i]), rng.random()))
    batches = [
        encode([sentences[i] for i in by_length[s : s + batch_size]], multiple)
        for s in range(0, len(sentences), batch_size)
    ]
    spec = tf.TensorSpec((None, None), "int32")

    def generate():
        for b in rng.permutation(len(batches)):
            source, target_in, target_out, weights = batches[b]
            yield (source, target_in), target_out, weights

    dataset = tf.data.Dataset.from_generator(
        generate, output_signature=((spec, spec), spec, tf.TensorSpec((None, None), "float32"))
    )
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)


# ---------------------------------------------------------------------- models


@keras.saving.register_keras_serializable(package="length_study")
class RepeatOverTime(keras.layers.Layer):
    """`(B, d)` repeated along the time axis of `like` `(B, T, ...)`: `(B, T, d)`."""

    def call(self, inputs, like):
        return ops.broadcast_to(ops.expand_dims(inputs, 1), (*ops.shape(like)[:2], ops.shape(inputs)[-1]))

    def compute_output_shape(self, inputs_shape, like_shape):
        return (inputs_shape[0], like_shape[1], inputs_shape[-1])


class PlainGreedyDecoder(keras.layers.Layer):
    """Greedy decoding of the plain decoder, in-graph, with the trained layers.

    Each step embeds the previous word, appends the fixed context (Cho et al.
    feed it to every step) and runs the decoder GRU's cell: the same weights
    the teacher-forced model trains.
    """

    def __init__(self, cell, embedding, readout, max_length, **kwargs):
        super().__init__(**kwargs)
        self.cell, self.embedding, self.readout, self.max_length = cell, embedding, readout, max_length

    def call(self, context, initial_state):
        def step(ids, states):
            inputs = ops.concatenate([self.embedding(ids), context], -1)
            output, states = self.cell(inputs, states)
            return self.readout(ops.concatenate([output, context], -1)), states

        return ka.decoding.greedy_search(step, [initial_state], START, END, self.max_length)


def build_plain(max_length, units=128, embedding=32):
    """Teacher-forced trainer and greedy decoder of the plain encoder-decoder."""
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    # The same encoder as the attention model's, but only its two last states
    # go on. Masked steps leave a state alone, so the forward one is the state
    # after the last word; the backward one, after the first, holds the start
    # of the sentence, which the decoder writes first.
    context = keras.layers.Bidirectional(keras.layers.GRU(units // 2), name="encoder")(
        keras.layers.Embedding(VOCABULARY, embedding, mask_zero=True, name="source_embedding")(source)
    )
    initial_state = keras.layers.Dense(units, activation="tanh", name="initial_state")(context)
    target_embedding = keras.layers.Embedding(VOCABULARY, embedding, name="target_embedding")
    decoder = keras.layers.GRU(units, return_sequences=True, name="decoder")
    readout = keras.layers.Dense(VOCABULARY, dtype="float32", name="readout")

    embedded = target_embedding(target_in)
    repeated = RepeatOverTime(name="repeat_context")(context, embedded)
    states = decoder(keras.layers.Concatenate()([embedded, repeated]), initial_state=initial_state)
    trainer = keras.Model(
        [source, target_in], readout(keras.layers.Concatenate()([states, repeated])), name="plain_trainer"
    )
    decoded = PlainGreedyDecoder(decoder.cell, target_embedding, readout, max_length, name="greedy_decoder")(
        context, initial_state
    )
    return trainer, keras.Model(source, decoded, name="plain_greedy")


def build_attention(max_length, units=128, embedding=32, attention_units=64):
    """Teacher-forced trainer and greedy decoder of the attention model; they share every layer."""
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    memory, _, backward = keras.layers.Bidirectional(
        keras.layers.GRU(units // 2, return_sequences=True, return_state=True), name="encoder"
    )(keras.layers.Embedding(VOCABULARY, embedding, mask_zero=True, name="source_embedding")(source))
    initial_state = keras.layers.Dense(units, activation="tanh", name="initial_state")(backward)
    cell = ka.AttentionGRUCell(units, ka.AdditiveAttention(attention_units), name="attention_gru")
    target_embedding = keras.layers.Embedding(VOCABULARY, embedding, name="target_embedding")
    readout = keras.layers.Dense(VOCABULARY, dtype="float32", name="readout")
    outputs = ka.AttentionDecoder(cell, name="decoder")(
        target_embedding(target_in), memory, initial_state=[initial_state]
    )
    trainer = keras.Model([source, target_in], readout(outputs), name="attention_trainer")
    decoded = ka.InferenceDecoder(cell, target_embedding, readout, START, END, max_length, name="greedy_decoder")(
        memory, initial_state=[initial_state]
    )
    return trainer, keras.Model(source, decoded, name="attention_greedy")


# ------------------------------------------------------------------ training


def train(name, build, args, strategy, sentences):
    """Train one model; a finished model of the same settings is reloaded, not retrained,
    so a run killed while training the second model resumes there."""
    sub = argparse.Namespace(**{**vars(args), "out": os.path.join(args.out, name)})
    os.makedirs(sub.out, exist_ok=True)
    settings = {k: getattr(args, k) for k in ("epochs", "batch_size", "samples", "seed", "max_length", "learning_rate")}
    # Decaying to a tenth settles the end of training: a late spike at full rate
    # can cost the longest sentences several points.
    schedule = keras.optimizers.schedules.CosineDecay(
        args.learning_rate, args.epochs * -(-len(sentences) // args.batch_size), alpha=0.1
    )
    done_path = os.path.join(args.out, f"{name}_done.json")
    model_path = os.path.join(args.out, f"{name}_trainer.keras")
    with strategy.scope():
        trainer, greedy = build()
        trainer.compile(
            optimizer=keras.optimizers.Adam(schedule, clipnorm=1.0),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="mean_with_sample_weight"),
            weighted_metrics=["accuracy"],
            jit_compile=args.jit,
        )
        ka.training.build_optimizer(trainer)
    parameters = trainer.count_params()
    print(f"\n{name}: {parameters:,} parameters")
    if os.path.exists(done_path) and os.path.exists(model_path):
        with open(done_path) as f:
            done = json.load(f)
        if done["settings"] == settings:
            trainer.load_weights(model_path)
            print(f"{name}: reloaded the trained model from {model_path}")
            return trainer, greedy, {**done["summary"], "parameters": parameters}
    with common.Timer() as timer:
        history = trainer.fit(
            # Both models see the same batches in the same order.
            length_batches(sentences, args.batch_size, args.seed, 10 if args.jit else 1),
            epochs=args.epochs,
            shuffle=False,
            callbacks=common.callbacks(sub),
            verbose=2 if args.smoke else "auto",
        )
    trainer.save(model_path)
    summary = {
        "train_seconds": timer.seconds,
        "final_loss": float(history.history["loss"][-1]),
        "final_token_accuracy_teacher_forced": float(history.history["accuracy"][-1]),
    }
    with open(done_path, "w") as f:
        json.dump({"settings": settings, "summary": summary}, f, indent=1)
    return trainer, greedy, {**summary, "parameters": parameters}


# ---------------------------------------------------------------- evaluation


def decode(greedy, sentences, length, batch_size):
    """Greedy translations (word ids up to the end token) and attention weights when there are any."""
    hypotheses, alignments = [], []
    for start in range(0, len(sentences), batch_size):
        # One padded length for every batch: one trace of the decoding graph.
        batch = pad(sentences[start : start + batch_size], length)
        output = common.predict(greedy, batch, batch_size=len(batch))
        for i, row in enumerate(np.asarray(output["ids"])):
            ends = np.flatnonzero(row == END)
            hypotheses.append(row[: ends[0]] if len(ends) else row)
            if "alignments" in output:
                alignments.append(np.asarray(output["alignments"][i]))
    return hypotheses, alignments


def scores(hypotheses, sentences):
    """Per sentence: fraction of reference tokens (end included) produced in place, and exact match."""
    token, exact = [], []
    for hypothesis, sentence in zip(hypotheses, sentences):
        reference = np.append(translate_ids(sentence), END)
        produced = np.full(len(reference), -1)
        written = np.append(hypothesis, END)[: len(reference)]
        produced[: len(written)] = written
        token.append(float(np.mean(produced == reference)))
        exact.append(len(hypothesis) == len(reference) - 1 and bool(np.all(hypothesis == reference[:-1])))
    return np.array(token), np.array(exact, "float64")


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def plot_curves(path, rows, parameters):
    # The Figure class needs no display and no global pyplot state.
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4), layout="constrained")
    labels = [row["bucket"] for row in rows]
    for axes, metric, title in zip(
        figure.subplots(1, 2), ("token_accuracy", "exact_match"), ("Token accuracy", "Exact match")
    ):
        for name, style in (("attention", "o-"), ("plain", "s--")):
            axes.plot(
                labels,
                [row[f"{name}_{metric}"] for row in rows],
                style,
                label=f"{name} ({parameters[name] / 1000:.0f}k params)",
            )
        axes.set(title=title, xlabel="source length", ylim=(-0.02, 1.02))
        axes.grid(alpha=0.3)
        axes.legend()
    figure.suptitle("Greedy decoding on held-out sentences, by source length")
    figure.savefig(path, dpi=120)
    return path


# ------------------------------------------------------------------------ main


def main(argv=None):
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--max-length", type=int)
    extra.add_argument("--learning-rate", type=float, default=3e-3)
    extra_args, rest = extra.parse_known_args(argv)
    args = common.parse_args(
        __doc__.splitlines()[0] + " (also: --max-length N, --learning-rate LR)",
        rest,
        epochs=10,
        batch_size=64,
        samples=16000,
        out="runs/length_study",
        smoke_epochs=1,
        smoke_samples=256,
        smoke_batch_size=64,
    )
    args.max_length = extra_args.max_length or (20 if args.smoke else 60)
    args.learning_rate = extra_args.learning_rate
    if args.max_length < 10:
        raise SystemExit(f"--max-length must be >= 10; got {args.max_length}")
    strategy = common.setup(args)

    buckets = buckets_for(args.max_length)
    per_bucket = 20 if args.smoke else 200
    test_rng = np.random.default_rng(10_000 + args.seed)
    test = make_sentences([n for lo, hi in buckets for n in test_rng.integers(lo, hi + 1, size=per_bucket)], test_rng)
    rng = np.random.default_rng(args.seed)
    held_out = set(test)
    train_sentences = make_sentences(rng.integers(MIN_LENGTH, args.max_length + 1, size=args.samples), rng, held_out)
    # Room for a few words too many: a model that overshoots is wrong, not cut short.
    decode_length = args.max_length + 5

    models = {}
    for name, build in (("plain", build_plain), ("attention", build_attention)):
        _, greedy, summary = train(name, lambda build=build: build(decode_length), args, strategy, train_sentences)
        models[name] = (greedy, summary)
    parameters = {name: summary["parameters"] for name, (_, summary) in models.items()}
    ratio = parameters["plain"] / parameters["attention"]
    print(f"\nparameters: plain {parameters['plain']:,}, attention {parameters['attention']:,} (ratio {ratio:.2f})")

    per_model, decode_seconds, alignments = {}, {}, None
    for name, (greedy, _) in models.items():
        with common.Timer() as timer:
            # The test sentences come bucket by bucket: a batch's decoding stops near its longest.
            hypotheses, aligns = decode(greedy, test, args.max_length, per_bucket)
        decode_seconds[name] = timer.seconds
        per_model[name] = scores(hypotheses, test)
        if aligns:
            alignments, attention_hypotheses = aligns, hypotheses

    lengths = np.array([len(s) for s in test])
    rows = []
    for lo, hi in buckets:
        selected = (lengths >= lo) & (lengths <= hi)
        row = {"bucket": f"{lo}-{hi}", "min_length": lo, "max_length": hi, "sentences": int(selected.sum())}
        for name, (token, exact) in per_model.items():
            row[f"{name}_token_accuracy"] = float(token[selected].mean())
            row[f"{name}_exact_match"] = float(exact[selected].mean())
        rows.append(row)
    csv_path = os.path.join(args.out, "length_study.csv")
    write_csv(csv_path, rows)
    plot_path = plot_curves(os.path.join(args.out, "length_study.png"), rows, parameters)

    longest = int(np.argmax(lengths))
    source_words = [word_name(t) for t in test[longest]]
    target_words = ([word_name(SOURCE_OF[t]).upper() for t in attention_hypotheses[longest]] + ["<end>"])[
        :decode_length
    ]
    heat_map = os.path.join(args.out, "attention_long.png")
    ka.plot_attention(
        alignments[longest][: len(target_words), : len(source_words)],
        source_words,
        target_words,
        path=heat_map,
        title=f"attention, a {len(source_words)}-word sentence",
    )

    first, last = rows[0], rows[-1]
    results = {
        "task": "length_study",
        "samples": args.samples,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "max_length": args.max_length,
        "words": WORDS,
        "test_sentences_per_bucket": per_bucket,
        "learning_rate": args.learning_rate,
        "buckets": rows,
        "parameters": parameters,
        "parameter_ratio_plain_to_attention": ratio,
        "models": {name: summary for name, (_, summary) in models.items()},
        "decode_seconds": decode_seconds,
        "overall": {
            f"{name}_{metric}": float(values.mean())
            for name, (token, exact) in per_model.items()
            for metric, values in (("token_accuracy", token), ("exact_match", exact))
        },
        "flatness": {
            # Longest bucket over shortest: about 1 for a flat curve, far below for a falling one.
            f"{name}_{metric}_longest_over_shortest": float(last[f"{name}_{metric}"] / first[f"{name}_{metric}"])
            if first[f"{name}_{metric}"]
            else 0.0
            for name in per_model
            for metric in ("token_accuracy", "exact_match")
        }
        | {
            f"{name}_min_token_accuracy": float(min(row[f"{name}_token_accuracy"] for row in rows))
            for name in per_model
        },
        "csv": csv_path,
        "plots": [plot_path, heat_map],
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "distribute": args.distribute,
        "replicas": strategy.num_replicas_in_sync,
    }
    common.write_results(args, results)

    print(f"\n{'source length':>13} | {'plain token':>11} {'exact':>6} | {'attention token':>15} {'exact':>6}")
    for row in rows:
        print(
            f"{row['bucket']:>13} | {row['plain_token_accuracy']:>11.1%} {row['plain_exact_match']:>6.1%} | "
            f"{row['attention_token_accuracy']:>15.1%} {row['attention_exact_match']:>6.1%}"
        )
    print(
        f"training {models['plain'][1]['train_seconds']:.0f} s plain, "
        f"{models['attention'][1]['train_seconds']:.0f} s attention"
    )
    return results


if __name__ == "__main__":
    main()
