"""The test discipline every attention layer meets, run over `layer_cases.CASES`.

NumPy references of each formula, hand-computed cases, masking invariants,
finite-difference gradients, serialisation, mixed precision, XLA training with
unknown lengths and export to SavedModel / ONNX.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests import reference
from tests.export_check import assert_export_parity
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import (
    SOFT_CASES,
    built_layer,
    case_params,
    dims,
    keras_model,
    lengths_mask,
    randomize_model,
    token_batch,
    unknown_shape_dataset,
    weights_of,
)

B, TQ, TV = 3, 4, 6


def random_inputs(rng, case, rank, separate_key, dtype="float32"):
    dq, dk, dv = dims(case, separate_key)
    query_shape = (B, dq) if rank == 2 else (B, TQ, dq)
    query = rng.normal(size=query_shape).astype(dtype)
    value = rng.normal(size=(B, TV, dv)).astype(dtype)
    key = rng.normal(size=(B, TV, dk)).astype(dtype) if separate_key else None
    return query, value, key


# ----------------------------------------------------------------- the formula


@case_params()
@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("separate_key", [False, True], ids=["key=value", "key!=value"])
def test_matches_numpy_reference(case, rank, masked, separate_key):
    rng = np.random.default_rng(0)
    query, value, key = random_inputs(rng, case, rank, separate_key)
    layer = built_layer(case, rng, query, value, key)
    kwargs = {}
    value_mask = query_mask = None
    if masked:
        value_mask = lengths_mask([6, 3, 1], TV)
        kwargs["value_mask"] = value_mask
        if rank == 3:
            query_mask = lengths_mask([4, 2, 3], TQ)
            kwargs["query_mask"] = query_mask
    context, weights = layer(query, value, key=key, return_attention_scores=True, **kwargs)

    q3 = query[:, None, :] if rank == 2 else query
    k = value if key is None else key
    mask = reference.combined_mask(B, q3.shape[1], TV, query_mask, value_mask)
    want_context, want_weights = case.reference(weights_of(layer), q3.astype(float), value, k.astype(float), mask)
    if rank == 2:
        want_context, want_weights = want_context[:, 0], want_weights[:, 0]
    np.testing.assert_allclose(weights, want_weights, atol=1e-5)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    expected_shape = (B, value.shape[-1]) if rank == 2 else (B, TQ, value.shape[-1])
    assert tuple(context.shape) == expected_shape


# ----------------------------------------------------------------- hand cases


@case_params()
def test_identical_keys_give_the_mean_of_the_valid_values(case):
    """All keys equal -> all scores equal -> uniform weights over valid positions."""
    rng = np.random.default_rng(1)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    key = np.repeat(key[:, :1], TV, axis=1)
    lengths = [6, 2, 4]
    layer = built_layer(case, rng, query, value, key)
    context = np.asarray(layer(query, value, key=key, value_mask=lengths_mask(lengths, TV)))
    for b, length in enumerate(lengths):
        # Hard attention breaks the tie at the lowest position.
        want = value[b, 0] if case.hard else value[b, :length].mean(axis=0)
        np.testing.assert_allclose(context[b], np.broadcast_to(want, context[b].shape), atol=1e-5)


@case_params(SOFT_CASES)
def test_ones_over_ones_with_lengths_1_to_4(case):
    dq, dk, dv = dims(case, separate_key=False)
    query = np.ones((4, dq), "float32")
    memory = np.ones((4, 4, dk), "float32")
    layer = built_layer(case, np.random.default_rng(2), query, memory)
    _, weights = layer(query, memory, value_mask=lengths_mask([1, 2, 3, 4], 4), return_attention_scores=True)
    want = [[1, 0, 0, 0], [1 / 2, 1 / 2, 0, 0], [1 / 3, 1 / 3, 1 / 3, 0], [1 / 4] * 4]
    np.testing.assert_allclose(weights, want, atol=1e-6)


# ----------------------------------------------------------------- invariants


@case_params()
def test_rows_sum_to_one_and_padding_gets_exactly_zero(case):
    rng = np.random.default_rng(3)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    query, value, key = query * 4, value * 4, key * 4  # sharp distributions too
    lengths = [1, 5, 6]
    layer = built_layer(case, rng, query, value, key)
    _, weights = layer(query, value, key=key, value_mask=lengths_mask(lengths, TV), return_attention_scores=True)
    weights = np.asarray(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    for b, length in enumerate(lengths):
        assert (weights[b, :, length:] == 0.0).all()
    if case.hard:
        assert set(np.unique(weights)) <= {0.0, 1.0}


@case_params()
@pytest.mark.parametrize("training", [False, True])
def test_fully_masked_row_gives_zeros_and_finite_gradients(case, training):
    rng = np.random.default_rng(4)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    layer = built_layer(case, rng, query, value, key)
    value_mask = lengths_mask([0, 3, 6], TV)  # example 0 has no valid position
    query_mask = lengths_mask([4, 0, 2], TQ)  # example 1 has no valid query
    query, value, key = map(tf.constant, (query, value, key))
    with tf.GradientTape() as tape:
        tape.watch([query, value, key])
        context, weights = layer(
            query,
            value,
            key=key,
            value_mask=value_mask,
            query_mask=query_mask,
            return_attention_scores=True,
            training=training,
        )
        loss = tf.reduce_sum(context**2) + tf.reduce_sum(weights)
    grads = tape.gradient(loss, [query, value, key] + layer.trainable_weights)
    context, weights = np.asarray(context), np.asarray(weights)
    assert (context[0] == 0).all() and (weights[0] == 0).all()
    assert (context[1] == 0).all() and (weights[1] == 0).all()
    assert (context[2, 2:] == 0).all(), "masked query positions give zero output"
    assert np.isfinite(context).all() and np.isfinite(weights).all()
    for grad in grads:
        if grad is not None:
            assert np.isfinite(np.asarray(grad)).all()


# ------------------------------------------------------------------ gradients


@case_params()
def test_gradients_match_finite_differences_in_float64(case):
    rng = np.random.default_rng(5)
    b, tq, tv = 2, 2, 3
    dq, dk, dv = dims(case)
    query = rng.normal(size=(b, tq, dq))
    value = rng.normal(size=(b, tv, dv))
    key = rng.normal(size=(b, tv, dk))
    value_mask = lengths_mask([3, 2], tv)
    layer = built_layer(case, rng, query, value, key, dtype="float64")
    readout = rng.normal(size=(b, tq, dv))

    def loss(q, v, k):
        return tf.reduce_sum(layer(q, v, key=k, value_mask=value_mask) * readout)

    tensors = [tf.constant(x) for x in (query, value, key)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value_of_loss = loss(*tensors)
    analytic = tape.gradient(value_of_loss, tensors + layer.trainable_weights)
    assert value_of_loss.dtype == tf.float64

    # Hard selection is piecewise constant in the query, key and score weights:
    # only the value's gradient is a true derivative (checked); the others are
    # straight-through estimates (checked in test_hard_attention.py).
    arrays = [query, value, key]
    checks = [1] if case.hard else [0, 1, 2]
    assert_input_gradients_match(loss, arrays, analytic, indices=checks)
    if case.hard:
        return
    assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[3:])


# -------------------------------------------------------------- serialisation


@case_params()
def test_get_config_round_trip_gives_identical_outputs(case):
    rng = np.random.default_rng(6)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    layer = built_layer(case, rng, query, value, key)
    config = layer.get_config()
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    clone(query, value, key=key)
    clone.set_weights(layer.get_weights())
    mask = lengths_mask([6, 2, 4], TV)
    np.testing.assert_array_equal(
        clone(query, value, key=key, value_mask=mask), layer(query, value, key=key, value_mask=mask)
    )


@case_params()
def test_keras_file_round_trip_without_custom_objects(case, tmp_path):
    rng = np.random.default_rng(7)
    model = keras_model(case, *dims(case))
    randomize_model(model, rng)
    inputs = [token_batch(rng, 3, 6), token_batch(rng, 3, 4)]
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe mode, no custom_objects
    assert type(loaded.get_layer("attention")) is type(model.get_layer("attention"))
    np.testing.assert_array_equal(loaded(inputs), model(inputs))


# ------------------------------------------------------------ mixed precision


@case_params()
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(case, policy):
    rng = np.random.default_rng(8)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    layer = case.make(dtype=policy)
    # Large inputs give large logits: a float16 softmax or a float16 masking
    # constant would overflow to inf and turn into NaN.
    query, key = query * 30, key * 30
    mask = lengths_mask([6, 1, 3], TV)
    context, weights = layer(query, value, key=key, value_mask=mask, return_attention_scores=True)
    compute = policy.split("_")[1]
    assert context.dtype == compute and weights.dtype == compute
    assert all(variable.dtype == "float32" for variable in layer.weights)
    weights = np.asarray(weights, np.float32)
    assert np.isfinite(np.asarray(context, np.float32)).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-2)
    assert (weights[1, :, 1:] == 0).all()


# ----------------------------------------------------------------- XLA training


@case_params()
def test_functional_model_with_unknown_lengths_fits_with_xla(case):
    rng = np.random.default_rng(9)
    model = keras_model(case, *dims(case))
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    attention = model.get_layer("attention")
    before = [w.numpy().copy() for w in attention.trainable_weights]
    batches = [
        (
            (token_batch(rng, batch, source_length), token_batch(rng, batch, target_length)),
            rng.integers(0, 3, size=batch),
        )
        for batch, source_length, target_length in ((8, 7, 5), (5, 4, 6))
    ]
    history = model.fit(unknown_shape_dataset(batches), epochs=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    # Other lengths reuse the same model (the shapes were never fixed).
    predictions = model.predict([token_batch(rng, 4, 11), token_batch(rng, 4, 3)], verbose=0)
    assert predictions.shape == (4, 3) and np.isfinite(predictions).all()
    for old, new in zip(before, attention.trainable_weights):
        assert not np.allclose(old, new.numpy()), f"{new.path} did not train"


# --------------------------------------------------------------------- export


@case_params()
def test_exports_to_saved_model_and_onnx_with_parity(case, tmp_path):
    rng = np.random.default_rng(10)
    model = keras_model(case, *dims(case))
    randomize_model(model, rng)
    batches = [
        {"source": token_batch(rng, 3, 6), "target": token_batch(rng, 3, 4)},
        {"source": token_batch(rng, 1, 9), "target": token_batch(rng, 1, 2)},
    ]
    assert_export_parity(model, batches, tmp_path, atol=1e-5)
