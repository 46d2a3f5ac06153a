"""ScheduledSamplingDecoder: teacher forcing at p = 0, the model's own
predictions fed back (argmax or a draw) as a hand-written `cell.step` loop
feeds them, masks, gradients, schedules, XLA and `.keras` files."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from tests.layer_cases import top_k_with_ties_to_the_highest_index

VOCABULARY, UNITS, EMBEDDING = 11, 8, 5


def make(sampling_probability=0.0, mask_zero=True, output_uses_inputs=False, **options):
    keras.utils.set_random_seed(0)
    return ka.ScheduledSamplingDecoder(
        ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(6)),
        keras.layers.Embedding(VOCABULARY, EMBEDDING, mask_zero=mask_zero),
        keras.layers.Dense(VOCABULARY),
        sampling_probability=sampling_probability,
        output_uses_inputs=output_uses_inputs,
        **options,
    )


def batch(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCABULARY, size=(3, 6)).astype("int32")
    ids[1, 4:] = 0  # a padded target
    memory = rng.normal(size=(3, 5, 7)).astype("float32")
    memory_mask = np.arange(5)[None] < np.array([5, 2, 4])[:, None]
    return ids, memory, memory_mask


def copy_weights(target, source, ids, memory, memory_mask):
    """The cell's, embedding's and read-out's weights (not a schedule's step count)."""
    target(ids, memory, memory_mask=memory_mask)
    for name in ("cell", "embedding", "output_layer"):
        getattr(target, name).set_weights(getattr(source, name).get_weights())


def reference_logits(decoder, ids, memory, memory_mask, probability, seed):
    """The loop by hand with `cell.step`: at step t > 0, where the coin
    (the layer's first draw) falls below `probability`, the input is the
    embedding of the previous step's argmax (or of the inverse CDF at the
    second draw, sampling); else the gold token's."""
    draws = np.asarray(keras.random.uniform((ids.shape[0], ids.shape[1], 2), seed=keras.random.SeedGenerator(seed)))
    cell, embedding, output_layer = decoder.cell, decoder.embedding, decoder.output_layer
    prepared = cell.prepare_memory(memory, memory_mask)
    states = cell.get_initial_state(ids.shape[0], memory=prepared)
    gold = np.asarray(embedding(ids))
    outputs, previous = [], None
    for t in range(ids.shape[1]):
        x = gold[:, t]
        if t > 0:
            logits = np.asarray(output_layer(previous[:, None]))[:, 0]
            if decoder.sampling == "argmax":
                chosen = logits.argmax(-1)
            else:
                probabilities = np.exp(logits - logits.max(-1, keepdims=True))
                cumulative = np.cumsum(probabilities / probabilities.sum(-1, keepdims=True), -1)
                chosen = np.minimum((cumulative < draws[:, t, 1:2]).sum(-1), VOCABULARY - 1)
            fed = np.asarray(embedding(chosen[:, None]))[:, 0]
            x = np.where((draws[:, t, 0] < probability)[:, None], fed, x)
        output, states, _ = cell.step(x, states, prepared)
        output = np.asarray(output)
        previous = np.concatenate([output, x], -1) if decoder.output_uses_inputs else output
        outputs.append(previous)
    return np.asarray(output_layer(np.stack(outputs, 1)))


def test_at_p_0_it_is_teacher_forcing_exactly():
    ids, memory, memory_mask = batch()
    decoder = make(0.0)
    got = np.asarray(decoder(ids, memory, memory_mask=memory_mask, training=True))
    hidden = ka.AttentionDecoder(decoder.cell)(decoder.embedding(ids), memory, memory_mask=memory_mask)
    want = np.asarray(decoder.output_layer(hidden))
    np.testing.assert_array_equal(got, want)
    assert decoder.weights and all("sampling" not in w.name for w in decoder.weights)
    # A schedule that is still at 0 runs the feedback loop, and changes nothing.
    rising = make(keras.optimizers.schedules.PolynomialDecay(0.0, 100, 0.0), seed=3)
    copy_weights(rising, decoder, ids, memory, memory_mask)
    looped = np.asarray(rising(ids, memory, memory_mask=memory_mask, training=True))
    np.testing.assert_allclose(looped, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "probability, sampling, output_uses_inputs",
    [(1.0, "argmax", False), (1.0, "argmax", True), (0.5, "argmax", False), (1.0, "sample", False)],
)
def test_fed_back_predictions_match_a_cell_step_loop(probability, sampling, output_uses_inputs):
    ids, memory, memory_mask = batch(1)
    decoder = make(probability, sampling=sampling, output_uses_inputs=output_uses_inputs, seed=7)
    decoder(ids, memory, memory_mask=memory_mask)  # built; inference draws nothing
    kernel, bias = decoder.output_layer.get_weights()
    decoder.output_layer.set_weights([kernel * 4, bias])  # predictions that differ from the gold tokens
    got = np.asarray(decoder(ids, memory, memory_mask=memory_mask, training=True))
    want = reference_logits(decoder, ids, memory, memory_mask, probability, seed=7)
    valid = ids != 0
    np.testing.assert_allclose(got[valid], want[valid], rtol=1e-5, atol=1e-5)
    forced = np.asarray(decoder(ids, memory, memory_mask=memory_mask, training=False))
    assert np.abs(got - forced)[valid].max() > 1e-2  # feeding back changed the outputs
    np.testing.assert_allclose(got[:, 0], forced[:, 0], rtol=1e-6)  # the first step is always gold


def test_the_fed_back_argmax_takes_the_lowest_id_among_ties(monkeypatch):
    # Whatever order the backend's top_k gives equal logits (torch's is
    # unspecified, issue 18).
    monkeypatch.setattr(keras.ops, "top_k", top_k_with_ties_to_the_highest_index(keras.ops.top_k))
    logits = np.array([[0.0, 2.0, 1.0, 2.0], [5.0, 5.0, 5.0, 5.0], [0.0, 1.0, 3.0, 3.0]], "float32")
    chosen = make()._choose(keras.ops.convert_to_tensor(logits), np.zeros(3, "float32"))
    np.testing.assert_array_equal(np.asarray(chosen), [1, 0, 2])


def test_padded_targets_are_masked():
    ids, memory, memory_mask = batch(2)
    decoder = make(1.0, seed=1)
    logits = decoder(ids, memory, memory_mask=memory_mask, training=True)
    np.testing.assert_array_equal(logits._keras_mask, ids != 0)
    # The padded example's valid steps are those of its unpadded target alone.
    alone = make(1.0, seed=1)
    copy_weights(alone, decoder, ids, memory, memory_mask)
    short = np.asarray(alone(ids[1:2, :4], memory[1:2], memory_mask=memory_mask[1:2], training=True))
    want = reference_logits(decoder, ids[1:2, :4], memory[1:2], memory_mask[1:2], 1.0, seed=1)
    np.testing.assert_allclose(short, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(logits)[1, :4], want[0], rtol=1e-5, atol=1e-5)


def test_gradients_reach_every_weight_through_the_fed_back_loop():
    ids, memory, memory_mask = batch(3)
    decoder = make(1.0, seed=2)
    decoder(ids, memory, memory_mask=memory_mask)
    targets = np.roll(ids, -1, axis=1)
    with tf.GradientTape() as tape:
        logits = decoder(ids, memory, memory_mask=memory_mask, training=True)
        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True))
    gradients = tape.gradient(loss, decoder.trainable_weights)
    assert len(gradients) == len(decoder.trainable_weights) > 0
    for weight, gradient in zip(decoder.trainable_weights, gradients):
        values = np.asarray(tf.convert_to_tensor(gradient))
        assert np.isfinite(values).all() and np.abs(values).max() > 0, weight.name
    # The embedding's gradient reaches the rows of predicted tokens too (not only the gold ones).
    rows = np.nonzero(np.abs(np.asarray(tf.convert_to_tensor(gradients[-3]))).sum(1))[0]
    assert set(rows) - set(ids[:, 0]) - set(ids[ids != 0].ravel()) or len(rows) > len(set(ids[:, 0]))


def test_a_schedule_counts_training_steps_and_survives_saving(tmp_path):
    schedule = keras.optimizers.schedules.PolynomialDecay(0.0, 4, 1.0)  # p = step / 4, then 1
    decoder = make(schedule, seed=5)
    ids, memory, memory_mask = batch()
    assert decoder.current_sampling_probability() == 0.0  # before any step
    decoder(ids, memory, memory_mask=memory_mask)  # inference: not a training step
    assert decoder.current_sampling_probability() == 0.0
    for _ in range(3):
        decoder(ids, memory, memory_mask=memory_mask, training=True)
    assert int(decoder.sampling_steps.numpy()) == 3
    assert decoder.current_sampling_probability() == pytest.approx(0.75)
    config = decoder.get_config()
    assert config["sampling_probability"]["class_name"] == "PolynomialDecay"
    source = keras.Input((None,), dtype="int32", name="ids")
    memory_input = keras.Input((None, 7), name="memory")
    model = keras.Model([source, memory_input], decoder(source, memory_input))
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    layer = loaded.layers[-1]
    assert isinstance(layer, ka.ScheduledSamplingDecoder) and int(layer.sampling_steps.numpy()) == 3
    assert layer.current_sampling_probability() == pytest.approx(0.75)
    np.testing.assert_array_equal(loaded([ids, memory]), model([ids, memory]))


def test_a_translation_model_trains_with_xla_and_decodes_with_the_same_layers(tmp_path):
    keras.utils.set_random_seed(1)
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    memory = keras.layers.GRU(8, return_sequences=True)(keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source))
    decoder = ka.ScheduledSamplingDecoder(
        ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(6)),
        keras.layers.Embedding(VOCABULARY, EMBEDDING, mask_zero=True),
        keras.layers.Dense(VOCABULARY),
        sampling_probability=keras.optimizers.schedules.PolynomialDecay(0.2, 6, 0.8),
        sampling="sample",
        seed=0,
    )
    model = keras.Model([source, target_in], decoder(target_in, memory))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    ka.training.build_optimizer(model)
    rng = np.random.default_rng(0)
    x = rng.integers(1, VOCABULARY, size=(16, 5)).astype("int32")
    y_in = np.concatenate([np.ones((16, 1), "int32"), x[:, :-1]], 1)
    y_in[:4, 3:] = 0  # padded targets, masked in the loss
    history = model.fit([x, y_in], x, batch_size=4, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert int(decoder.sampling_steps.numpy()) == 8  # one per training step
    assert decoder.current_sampling_probability() == pytest.approx(0.8)
    greedy = ka.InferenceDecoder(decoder.cell, decoder.embedding, decoder.output_layer, 1, 2, 5)
    ids = np.asarray(greedy(keras.Model(source, memory)(x))["ids"])
    assert ids.shape == (16, 5) and ((ids >= 0) & (ids < VOCABULARY)).all()
    model.save(tmp_path / "trainer.keras")
    loaded = keras.saving.load_model(tmp_path / "trainer.keras")
    np.testing.assert_allclose(loaded.predict([x, y_in], verbose=0), model.predict([x, y_in], verbose=0), atol=1e-6)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(sampling_probability=1.5), r"`sampling_probability` must be a number in \[0, 1\] or a keras"),
        (dict(sampling_probability=-0.1), r"`sampling_probability` must be a number in \[0, 1\]"),
        (dict(sampling_probability="often"), r"`sampling_probability` must be a number in \[0, 1\].*got 'often'"),
        (dict(sampling="beam"), r"unknown `sampling` 'beam'; expected one of 'argmax', 'sample'"),
        (dict(seed=-3), r"`seed` must be an integer >= 0 or None; got -3"),
    ],
)
def test_bad_arguments_are_named(options, message):
    with pytest.raises(ValueError, match=f"ScheduledSamplingDecoder: {message}"):
        make(**options)
