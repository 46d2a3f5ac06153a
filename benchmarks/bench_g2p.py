"""Measure 7: the G2P model's design choices, on real CMUdict batches.

The model is the flagship example's (keras_attention/g2p/model.py: embedding 64,
2-layer BiLSTM encoder of 128 per direction, LSTM decoder of 256, additive
attention of 128, dropout 0.2), fed length-bucketed batches of 128 CMUdict
training words (`LengthBucketedBatches`, as the example trains).

- decoder: one training step (`train_on_batch`, no XLA) with the input-
  feeding decoder (`AttentionLSTMCell`: the attention runs inside the
  per-step loop) against the decoder without input feeding
  (`AttentionWrapper(LSTMCell, input_feeding=False)`, which
  `AttentionDecoder` runs as one LSTM pass then one attention call over all
  steps), and a lower bound that is not a competitor: the same encoder with
  a plain Keras LSTM decoder and no attention.
- fit: one pass over the same 16 batches with `model.fit` on the
  `LengthBucketedBatches` (progress bar off) against a `train_on_batch`
  loop over them; per step.
- alignments: beam-5 decoding of 256 test words with and without the
  alignment history (`InferenceDecoder(return_alignments=...)`). The weights
  are untrained, so every word runs to `max_length` = 16 steps: the figure
  is the cost per decoding step.
"""

import dataclasses

import numpy as np

from benchmarks import common

FULL = dict(batch=128, fit_batches=16, decode_words=256, max_length=16)
QUICK = dict(batch=8, fit_batches=2, decode_words=8, max_length=4)
TINY_MODEL = dict(embedding=8, encoder_units=8, encoder_layers=1, decoder_units=16, attention_units=8)


def _example():
    from examples.g2p import data
    from keras_attention.g2p import model, training, vocabularies

    return data, model, vocabularies, training


def _no_attention_trainer(letters, phones, config):
    """The example's encoder with a plain LSTM decoder started from its final states."""
    import keras

    import keras_attention as ka

    source, previous = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    hidden = keras.layers.Embedding(len(letters), config.embedding, mask_zero=True)(source)
    for _ in range(config.encoder_layers):
        hidden = keras.layers.Dropout(config.dropout)(hidden)
        hidden, *states = keras.layers.Bidirectional(
            keras.layers.LSTM(config.encoder_units, return_sequences=True, return_state=True)
        )(hidden)
    forward_h, forward_c, backward_h, backward_c = states
    initial = [
        keras.layers.Dense(config.decoder_units, activation="tanh")(
            keras.layers.Concatenate()([forward_h, backward_h])
        ),
        keras.layers.Dense(config.decoder_units)(keras.layers.Concatenate()([forward_c, backward_c])),
    ]
    outputs = keras.layers.LSTM(config.decoder_units, return_sequences=True)(
        keras.layers.Embedding(len(phones), config.embedding, mask_zero=True)(previous), initial_state=initial
    )
    logits = keras.layers.Dense(len(phones))(keras.layers.Dropout(config.dropout)(outputs))
    model = keras.Model([source, previous], logits)
    model.compile(keras.optimizers.Adam(1e-3), ka.SequenceLoss())
    return ka.training.build_optimizer(model)


def run(quick, log, repeats=None):
    import keras

    import keras_attention as ka
    from keras_attention.batching import LengthBucketedBatches

    data, g2p_model, vocabularies, training = _example()
    cfg = QUICK if quick else FULL
    repeats = repeats or (2 if quick else 7)
    split = data.cmudict_split()
    letters, phones = vocabularies.vocabularies(split["train"])
    words = dict(list(split["train"].items())[: cfg["batch"] * cfg["fit_batches"]])
    inputs, targets = training.teacher_forcing_data(words, letters, phones)
    batches = LengthBucketedBatches(inputs, targets, batch_size=cfg["batch"], seed=0, weigh_targets=True)
    # The step's batch: the most common length bucket (the middle of the order).
    step_batch = batches[len(batches) // 2]
    model_config = g2p_model.ModelConfig(**(TINY_MODEL if quick else {}), max_length=cfg["max_length"])

    def compiled(decoder, beam_alignments=False):
        keras.utils.set_random_seed(0)
        config = dataclasses.replace(model_config, decoder=decoder)
        models = g2p_model.build_models(letters, phones, config, beam_alignments=beam_alignments)
        models.trainer.compile(keras.optimizers.Adam(1e-3), ka.SequenceLoss())
        return ka.training.build_optimizer(models.trainer), models.beam

    trainers = {name: compiled(name)[0] for name in g2p_model.DECODERS}
    trainers["no_attention"] = _no_attention_trainer(letters, phones, model_config)
    x, y, weights = step_batch
    log(f"  decoder step: batch {x[0].shape[0]}, {x[0].shape[1]} letters, {x[1].shape[1]} phones")
    sides = {name: (lambda m=model: m.train_on_batch(x, y, sample_weight=weights)) for name, model in trainers.items()}
    step = {name: common.summary(t) for name, t in common.alternate(sides, repeats, log=log).items()}
    result = {"config": cfg, "model": dataclasses.asdict(model_config), "decoder_step": step}
    result["decoder_speedup"] = round(step["input_feeding"]["median_ms"] / step["luong"]["median_ms"], 3)
    log(f"  no input feeding: {result['decoder_speedup']:.2f}x faster a step than input feeding")

    trainer = trainers["luong"]
    all_batches = [batches[i] for i in range(len(batches))]

    def loop():
        for bx, by, bw in all_batches:
            trainer.train_on_batch(bx, by, sample_weight=bw)

    fit_times = common.alternate(
        {"fit": lambda: trainer.fit(batches, epochs=1, verbose=0), "train_on_batch": loop}, repeats, log=log
    )
    result["fit_step"] = {name: common.summary(np.asarray(t) / len(batches)) for name, t in fit_times.items()}
    result["fit_vs_train_on_batch"] = round(
        result["fit_step"]["fit"]["median_ms"] / result["fit_step"]["train_on_batch"]["median_ms"], 3
    )

    test_words = sorted(split["test"])[: cfg["decode_words"]]
    encoded = letters.encode(test_words)
    beams = {}
    for with_alignments in (False, True):
        _, beam = compiled("luong", beam_alignments=with_alignments)
        beam.predict_on_batch(encoded)  # trace
        beams["with_alignments" if with_alignments else "without_alignments"] = beam
    decode = common.alternate(
        {name: (lambda m=model: m.predict_on_batch(encoded)) for name, model in beams.items()}, repeats, log=log
    )
    result["beam_decode"] = {name: common.summary(t) for name, t in decode.items()}
    for summary in result["beam_decode"].values():
        summary["words_per_second"] = round(len(test_words) / (summary["median_ms"] / 1000.0), 1)
    result["alignments_cost"] = round(
        result["beam_decode"]["with_alignments"]["median_ms"]
        / result["beam_decode"]["without_alignments"]["median_ms"],
        3,
    )
    return result
