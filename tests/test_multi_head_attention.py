"""MultiHeadAttention: the formula, Keras parity, masks, gradients, saving, precision, XLA, export."""

import inspect
import math
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention
from keras_attention.layers.multi_head import MultiHeadAttention
from keras_attention.training import build_optimizer
from tests import reference
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import lengths_mask, randomize, token_batch

B, TQ, TV = 3, 4, 6
DQ, DK, DV = 4, 3, 5
HEADS, KEY_DIM, VALUE_DIM = 2, 3, 2


def make(**kwargs):
    kwargs = {"num_heads": HEADS, "key_dim": KEY_DIM, "value_dim": VALUE_DIM, **kwargs}
    return MultiHeadAttention(**kwargs)


def inputs(rng, rank=3, separate_key=True, dtype="float32", b=B, tq=TQ, tv=TV, dq=DQ, dk=DK, dv=DV):
    query = rng.normal(size=(b, dq) if rank == 2 else (b, tq, dq)).astype(dtype)
    value = rng.normal(size=(b, tv, dv)).astype(dtype)
    key = rng.normal(size=(b, tv, dk)).astype(dtype) if separate_key else None
    return query, value, key


def built(rng, query, value, key=None, **kwargs):
    layer = make(**kwargs)
    layer(query, value, key=key)
    randomize(layer, rng)
    return layer


def weights_of(layer):
    return {variable.path.split("/")[-1]: np.asarray(variable.numpy(), np.float64) for variable in layer.weights}


def reference_mha(w, query, value, key, mask, weights=None):
    """The formula literally, head by head, in float64; `query` is rank 3.

    With `weights` given (B, H, Tq, Tv), they replace the softmax (to check
    what dropout returned was what the layer used).
    """
    query, value, key = (np.asarray(x, np.float64) for x in (query, value, key))
    heads, all_weights = [], []
    for h in range(w["query_kernel"].shape[1]):
        q = query @ w["query_kernel"][:, h] + w.get("query_bias", np.zeros((1, 1)))[h]
        k = key @ w["key_kernel"][:, h] + w.get("key_bias", np.zeros((1, 1)))[h]
        v = value @ w["value_kernel"][:, h] + w.get("value_bias", np.zeros((1, 1)))[h]
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        alpha = reference.masked_softmax(scores, mask) if weights is None else weights[:, h]
        heads.append(alpha @ v)
        all_weights.append(alpha)
    concat = np.concatenate(heads, axis=-1)  # (B, Tq, H * value_dim)
    kernel = w["output_kernel"]
    output = concat @ kernel.reshape(-1, kernel.shape[-1]) + w.get("output_bias", 0.0)
    # A row with no valid position outputs zero (the library's contract).
    output = output * np.broadcast_to(mask, concat.shape[:2] + (key.shape[1],)).any(-1, keepdims=True)
    return output, np.stack(all_weights, axis=1)


def both_paths(layer, *args, **kwargs):
    """(output without weights = fused path, output with weights = explicit path, weights)."""
    fast = layer(*args, **kwargs)
    explicit, weights = layer(*args, return_attention_scores=True, **kwargs)
    return np.asarray(fast), np.asarray(explicit), np.asarray(weights)


# ----------------------------------------------------------------- the formula


@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
@pytest.mark.parametrize("separate_key", [False, True], ids=["key=value", "key!=value"])
def test_matches_numpy_reference(rank, masked, separate_key):
    rng = np.random.default_rng(0)
    dk = DK if separate_key else DV
    query, value, key = inputs(rng, rank, separate_key, dk=dk)
    layer = built(rng, query, value, key, output_dim=7)
    kwargs, query_mask, value_mask = {}, None, None
    if masked:
        value_mask = kwargs["value_mask"] = lengths_mask([6, 3, 1], TV)
        query_mask = kwargs["query_mask"] = lengths_mask([4, 2, 3], TQ) if rank == 3 else np.array([True, False, True])
    fast, explicit, weights = both_paths(layer, query, value, key=key, **kwargs)

    q3 = query[:, None] if rank == 2 else query
    qm = None if query_mask is None else (query_mask[:, None] if rank == 2 else query_mask)
    mask = reference.combined_mask(B, q3.shape[1], TV, qm, value_mask)
    want, want_weights = reference_mha(weights_of(layer), q3, value, value if key is None else key, mask)
    if rank == 2:
        want, want_weights = want[:, 0], want_weights[:, :, 0]
    assert fast.shape == want.shape == ((B, 7) if rank == 2 else (B, TQ, 7))
    assert weights.shape == ((B, HEADS, TV) if rank == 2 else (B, HEADS, TQ, TV))
    np.testing.assert_allclose(weights, want_weights, atol=1e-5)
    np.testing.assert_allclose(explicit, want, atol=1e-5)
    np.testing.assert_allclose(fast, want, atol=1e-5)


@pytest.mark.parametrize("tq, tv", [(5, 5), (3, 6), (6, 3)])
def test_causal_with_masks_matches_numpy_reference(tq, tv):
    rng = np.random.default_rng(1)
    query, value, key = inputs(rng, tq=tq, tv=tv)
    layer = built(rng, query, value, key)
    value_mask = lengths_mask([tv, 2, 1], tv)
    attention_mask = rng.random((B, tq, tv)) > 0.3
    for kwargs in ({}, {"value_mask": value_mask, "attention_mask": attention_mask}):
        fast, explicit, weights = both_paths(layer, query, value, key=key, causal=True, **kwargs)
        mask = reference.combined_mask(B, tq, tv, causal=True, **kwargs)
        want, want_weights = reference_mha(weights_of(layer), query, value, key, mask)
        np.testing.assert_allclose(weights, want_weights, atol=1e-5)
        np.testing.assert_allclose(explicit, want, atol=1e-5)
        np.testing.assert_allclose(fast, want, atol=1e-5)
        assert (weights[:, :, np.triu_indices(tq, 1, tv)[0], np.triu_indices(tq, 1, tv)[1]] == 0).all()


def test_tensorflow_takes_the_explicit_path_with_and_without_weights(monkeypatch):
    rng = np.random.default_rng(2)
    query, value, key = inputs(rng, tq=5, tv=7)
    query, value, key = query * 3, value * 3, key * 3
    # One head size for queries, keys and values: what the fused op takes.
    layer = built(rng, query, value, key, output_dim=6, value_dim=KEY_DIM)
    calls = []
    fused = keras.ops.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("mask") is not None)
        return fused(*args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", spy)
    masks = [
        {},
        {"value_mask": lengths_mask([7, 0, 3], 7)},  # example 1: every key masked
        {"query_mask": lengths_mask([5, 0, 2], 5), "value_mask": lengths_mask([1, 4, 7], 7)},
        {"attention_mask": rng.random((B, 5, 7)) > 0.6, "causal": True},
    ]
    for kwargs in masks:
        calls.clear()
        fast, explicit, _ = both_paths(layer, query, value, key=key, **kwargs)
        # TensorFlow's fused op is the same two einsums, which do not export over empty
        # sequences: TensorFlow always takes the explicit path (see `attend`). The fused
        # path's agreement on JAX and PyTorch: tests/test_attention_paths.py.
        assert calls == [], "TensorFlow takes the explicit path"
        np.testing.assert_allclose(fast, explicit, atol=1e-5)
        assert np.abs(fast).max() > 1.0  # not trivially zero


def test_a_value_head_size_of_its_own_takes_the_explicit_path_with_the_same_numbers(monkeypatch):
    # JAX's fused op refuses a value head of another size than the query's
    # and key's (issue 18); this spy holds every backend to that contract.
    rng = np.random.default_rng(3)
    query, value, key = inputs(rng, tq=5, tv=7)
    layer = built(rng, query, value, key, key_dim=3, value_dim=2, output_dim=6)
    calls = []
    fused = keras.ops.dot_product_attention

    def jax_contract(query, key, value, *args, **kwargs):
        calls.append(True)
        if not query.shape[-1] == key.shape[-1] == value.shape[-1]:
            raise ValueError(f"value head size {value.shape[-1]} != query head size {query.shape[-1]}")
        return fused(query, key, value, *args, **kwargs)

    monkeypatch.setattr(keras.ops, "dot_product_attention", jax_contract)
    value_mask = lengths_mask([7, 0, 3], 7)
    for kwargs in ({}, {"value_mask": value_mask}, {"value_mask": value_mask, "causal": True}):
        fast = keras.ops.convert_to_numpy(layer(query, value, key=key, **kwargs))
        mask = reference.combined_mask(B, 5, 7, **kwargs)
        want, _ = reference_mha(weights_of(layer), query, value, key, mask)
        np.testing.assert_allclose(fast, want, atol=1e-5)
    assert calls == []


# --------------------------------------------------------------- Keras parity

KERAS_CONFIGS = [
    {"num_heads": 2, "key_dim": 3, "value_dim": 4, "output_dim": 5},
    {"num_heads": 3, "key_dim": 2, "use_bias": False},
]


def keras_pair(rng, config, query, value, key):
    ours = MultiHeadAttention(**config)
    theirs_config = dict(config)
    if "output_dim" in theirs_config:
        theirs_config["output_shape"] = theirs_config.pop("output_dim")
    theirs = keras.layers.MultiHeadAttention(**theirs_config)
    ours(query, value, key=key)
    theirs(query, value, key=key)
    weights = [rng.normal(0, 0.5, w.shape).astype("float32") for w in theirs.get_weights()]
    theirs.set_weights(weights)
    ours.set_weights(weights)  # same layout and order: copies directly
    return ours, theirs


@pytest.mark.parametrize("config", KERAS_CONFIGS, ids=["biases", "no_bias"])
@pytest.mark.parametrize("masks", ["none", "attention_mask", "value_mask", "causal", "causal+value_mask"])
def test_matches_keras_multi_head_attention(config, masks):
    rng = np.random.default_rng(3)
    query, value, key = inputs(rng, tq=5, tv=5)
    ours, theirs = keras_pair(rng, config, query, value, key)
    value_mask = lengths_mask([5, 2, 1], 5)
    attention_mask = rng.random((B, 5, 5)) > 0.4
    attention_mask[:, :, 0] = True  # Keras's fully masked rows differ from ours
    kwargs_ours, kwargs_keras = {
        "none": ({}, {}),
        "attention_mask": ({"attention_mask": attention_mask}, {"attention_mask": attention_mask}),
        "value_mask": ({"value_mask": value_mask}, {"value_mask": value_mask}),
        "causal": ({"causal": True}, {"use_causal_mask": True}),
        "causal+value_mask": (
            {"causal": True, "value_mask": value_mask},
            {"use_causal_mask": True, "value_mask": value_mask},
        ),
    }[masks]
    want, want_weights = theirs(query, value, key=key, return_attention_scores=True, **kwargs_keras)
    want_fused = theirs(query, value, key=key, **kwargs_keras)
    fast, explicit, weights = both_paths(ours, query, value, key=key, **kwargs_ours)
    np.testing.assert_allclose(weights, want_weights, atol=1e-5)
    np.testing.assert_allclose(explicit, want, atol=1e-5)
    np.testing.assert_allclose(fast, want_fused, atol=1e-5)
    assert np.abs(want).max() > 0.5


@pytest.mark.parametrize("config", KERAS_CONFIGS, ids=["biases", "no_bias"])
def test_matches_keras_with_keras_masks_and_honours_an_explicit_query_mask(config):
    """Masking-layer masks on query and value reach both layers; on valid query
    rows the outputs agree. Masked query rows give zero here (Keras gives the
    output bias), and an explicit query_mask acts as the query's Keras mask
    (Keras ignores it)."""
    rng = np.random.default_rng(4)
    query, value, key = inputs(rng, tq=5, tv=6)
    ours, theirs = keras_pair(rng, config, query, value, key)
    query[0, 3:] = 0.0  # rows the Masking layer masks
    value[1, 2:] = 0.0
    value[2, 5:] = 0.0
    query_mask = np.any(query != 0, -1)

    q_in, v_in, k_in = keras.Input((None, DQ)), keras.Input((None, DV)), keras.Input((None, DK))
    explicit_mask = keras.Input((None,), dtype="bool")
    masked_q, masked_v = keras.layers.Masking(0.0)(q_in), keras.layers.Masking(0.0)(v_in)
    outputs = [
        theirs(masked_q, masked_v, key=k_in),
        ours(masked_q, masked_v, key=k_in),
        ours(masked_q, masked_v, key=k_in, return_attention_scores=True)[0],
        ours(q_in, masked_v, key=k_in, query_mask=explicit_mask),
        theirs(q_in, masked_v, key=k_in, query_mask=explicit_mask),
    ]
    model = keras.Model([q_in, v_in, k_in, explicit_mask], outputs)
    want, fast, explicit, explicit_query_mask, keras_ignoring = model.predict(
        [query, value, key, query_mask], verbose=0
    )
    np.testing.assert_allclose(fast[query_mask], want[query_mask], atol=1e-5)
    np.testing.assert_allclose(explicit, fast, atol=1e-5)
    assert (fast[~query_mask] == 0).all() and (explicit[~query_mask] == 0).all()
    np.testing.assert_array_equal(explicit_query_mask, fast)
    # Keras's layer, given the same explicit mask, attends from the masked rows.
    assert (keras_ignoring[~query_mask] != 0).any()


# ----------------------------------------------------------------- invariants


def test_rows_sum_to_one_and_padding_gets_exactly_zero():
    rng = np.random.default_rng(5)
    query, value, key = inputs(rng)
    query, key = query * 4, key * 4  # sharp distributions too
    layer = built(rng, query, value, key)
    lengths = [1, 5, 6]
    _, weights = layer(query, value, key=key, value_mask=lengths_mask(lengths, TV), return_attention_scores=True)
    weights = np.asarray(weights)
    assert weights.shape == (B, HEADS, TQ, TV)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    for b, length in enumerate(lengths):
        assert (weights[b, :, :, length:] == 0.0).all()
    assert not np.allclose(weights[:, 0], weights[:, 1]), "heads should differ"


@pytest.mark.parametrize("mode", ["fused", "weights", "dropout_training"])
def test_fully_masked_row_gives_zeros_and_finite_gradients(mode):
    rng = np.random.default_rng(6)
    query, value, key = inputs(rng)
    layer = built(rng, query, value, key, dropout=0.3 if mode == "dropout_training" else 0.0, seed=1)
    value_mask = lengths_mask([0, 3, 6], TV)  # example 0 has no valid position
    query_mask = lengths_mask([4, 0, 2], TQ)  # example 1 has no valid query
    query, value, key = map(tf.constant, (query, value, key))
    with tf.GradientTape() as tape:
        tape.watch([query, value, key])
        result = layer(
            query,
            value,
            key=key,
            value_mask=value_mask,
            query_mask=query_mask,
            return_attention_scores=mode != "fused",
            training=mode == "dropout_training",
        )
        output, weights = result if mode != "fused" else (result, None)
        loss = tf.reduce_sum(output**2) + (0.0 if weights is None else tf.reduce_sum(weights))
    grads = tape.gradient(loss, [query, value, key] + layer.trainable_weights)
    output = np.asarray(output)
    assert (output[0] == 0).all() and (output[1] == 0).all()
    assert (output[2, 2:] == 0).all(), "masked query positions give zero output"
    assert (np.abs(output[2, :2]) > 0).all()
    if weights is not None:
        weights = np.asarray(weights)
        assert (weights[0] == 0).all() and (weights[1] == 0).all() and (weights[2, :, 2:] == 0).all()
    assert np.isfinite(output).all()
    for grad in grads:
        assert grad is not None and np.isfinite(np.asarray(grad)).all()
    assert np.asarray(grads[0])[2, :2].any() and not np.asarray(grads[0])[0].any()


# ------------------------------------------------------------------ gradients


@pytest.mark.parametrize("return_weights", [False, True], ids=["fused", "explicit"])
def test_gradients_match_finite_differences_in_float64(return_weights):
    rng = np.random.default_rng(7)
    b, tq, tv, dq, dk, dv = 2, 2, 3, 3, 2, 3
    query, value, key = inputs(rng, b=b, tq=tq, tv=tv, dq=dq, dk=dk, dv=dv, dtype="float64")
    layer = built(rng, query, value, key, num_heads=2, key_dim=2, value_dim=2, dtype="float64")
    value_mask = lengths_mask([3, 2], tv)
    readout = rng.normal(size=(b, tq, dq))

    def loss(q, v, k):
        output = layer(q, v, key=k, value_mask=value_mask, causal=True, return_attention_scores=return_weights)
        output = output[0] if return_weights else output
        return tf.reduce_sum(output * readout)

    tensors = [tf.constant(x) for x in (query, value, key)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value_of_loss = loss(*tensors)
    analytic = tape.gradient(value_of_loss, tensors + layer.trainable_weights)
    assert value_of_loss.dtype == tf.float64
    assert len(layer.trainable_weights) == 8

    arrays = [query, value, key]
    assert_input_gradients_match(loss, arrays, analytic)
    assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[3:])


# -------------------------------------------------------------- serialisation


def test_get_config_round_trip_gives_identical_outputs():
    rng = np.random.default_rng(8)
    query, value, key = inputs(rng)
    layer = built(
        rng,
        query,
        value,
        key,
        output_dim=3,
        dropout=0.2,
        seed=5,
        use_bias=False,
        kernel_initializer="he_normal",
        kernel_regularizer="l2",
        bias_regularizer="l1",
    )
    config = layer.get_config()
    assert {
        k: config[k] for k in ("num_heads", "key_dim", "value_dim", "output_dim", "dropout", "use_bias", "seed")
    } == {
        "num_heads": HEADS,
        "key_dim": KEY_DIM,
        "value_dim": VALUE_DIM,
        "output_dim": 3,
        "dropout": 0.2,
        "use_bias": False,
        "seed": 5,
    }
    clone = MultiHeadAttention.from_config(config)
    assert clone.get_config() == config
    clone(query, value, key=key)
    clone.set_weights(layer.get_weights())
    mask = lengths_mask([6, 2, 4], TV)
    np.testing.assert_array_equal(
        clone(query, value, key=key, value_mask=mask), layer(query, value, key=key, value_mask=mask)
    )
    assert len(clone.losses) == 4  # l2 on the four kernels; no biases to regularise


# ------------------------------------------------------------ mixed precision


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
    rng = np.random.default_rng(10)
    query, value, key = inputs(rng)
    layer = make(dtype=policy)
    # Large inputs give large logits: a float16 softmax or a float16 masking
    # constant would overflow to inf and turn into NaN.
    query, key = query * 30, key * 30
    mask = lengths_mask([6, 1, 3], TV)
    fast = layer(query, value, key=key, value_mask=mask)
    output, weights = layer(query, value, key=key, value_mask=mask, return_attention_scores=True)
    compute = policy.split("_")[1]
    assert fast.dtype == output.dtype == weights.dtype == compute
    assert len(layer.weights) == 8 and all(variable.dtype == "float32" for variable in layer.weights)
    weights = np.asarray(weights, np.float32)
    fast, output = np.asarray(fast, np.float32), np.asarray(output, np.float32)
    assert np.isfinite(fast).all() and np.isfinite(output).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-2)
    assert (weights[1, :, :, 1:] == 0).all()
    np.testing.assert_allclose(fast, output, rtol=0.05, atol=0.05 * np.abs(output).max())


# --------------------------------------------------------------------- errors


def _attention_model(vocabulary=20):
    """Functional model, unknown lengths, Keras masks from padding id 0: causal
    self-attention (explicit path, weights returned) then cross-attention (fused)."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    value = keras.layers.Embedding(vocabulary, DV, mask_zero=True)(source)
    key = keras.layers.Dense(DK)(value)
    query = keras.layers.Embedding(vocabulary, DQ, mask_zero=True)(target)
    query, _ = make(name="self_attention")(query, query, causal=True, return_attention_scores=True)
    context = make(name="attention", output_dim=6)(query, value, key=key)
    pooled = keras.layers.GlobalAveragePooling1D()(context)
    return keras.Model([source, target], keras.layers.Dense(3)(pooled))


def test_functional_model_with_unknown_lengths_fits_with_xla():
    rng = np.random.default_rng(11)
    model = _attention_model()
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    build_optimizer(model)
    layers = [model.get_layer("self_attention"), model.get_layer("attention")]
    before = [w.numpy().copy() for layer in layers for w in layer.trainable_weights]
    x = [token_batch(rng, 16, 7), token_batch(rng, 16, 5)]
    y = rng.integers(0, 3, size=16)
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    predictions = model.predict([token_batch(rng, 4, 11), token_batch(rng, 4, 3)], verbose=0)
    assert predictions.shape == (4, 3) and np.isfinite(predictions).all()
    after = [w for layer in layers for w in layer.trainable_weights]
    assert len(after) == 16
    for old, new in zip(before, after):
        if new.path.endswith("key_bias"):
            # q . (k + b_k) = q . k + q . b_k: the same for every key of a
            # query, so it cancels in the softmax; its gradient is exactly 0
            # (up to rounding), as in every Transformer.
            np.testing.assert_allclose(new.numpy(), old, atol=1e-6)
            continue
        assert not np.allclose(old, new.numpy()), f"{new.path} did not train"


# --------------------------------------------------------------------- export


def _zeros(*shape):
    return np.zeros(shape, "float32")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 0}, r"MultiHeadAttention: `num_heads` must be a positive integer; got 0\."),
        ({"key_dim": -2}, r"MultiHeadAttention: `key_dim` must be a positive integer; got -2\."),
        ({"key_dim": 2.5}, r"`key_dim` must be a positive integer; got 2\.5\."),
        ({"value_dim": 0}, r"`value_dim` must be a positive integer or None; got 0\."),
        ({"output_dim": "8"}, r"`output_dim` must be a positive integer or None; got '8'\."),
        ({"dropout": 1.0}, r"MultiHeadAttention: `dropout` must be a number in \[0, 1\); got 1\.0\."),
        ({"dropout": -0.1}, r"`dropout` must be a number in \[0, 1\); got -0\.1\."),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


@pytest.mark.parametrize(
    "query, value, key, kwargs, message",
    [
        (
            (2, 3, 4, 4),
            (2, 5, 4),
            None,
            {},
            r"`query` must have rank 2 \(batch, dq\) or 3 \(batch, Tq, dq\); got shape \(2, 3, 4, 4\)",
        ),
        ((2, 4), (2, 4), None, {}, r"`value` must have rank 3 \(batch, Tv, d\); got shape \(2, 4\)"),
        (
            (2, 4),
            (2, 5, 4),
            (2, 6, 4),
            {},
            r"`key` and `value` must have the same length Tv; got key shape \(2, 6, 4\)",
        ),
        (
            (3, 4),
            (2, 5, 4),
            None,
            {},
            r"`query`, `value` and `key` must have the same batch size; got shapes \(3, 4\), \(2, 5, 4\)",
        ),
        (
            (2, 3, 4),
            (2, 5, 4),
            None,
            {"value_mask": np.ones((2, 4), bool)},
            r"`value_mask` must have shape \(batch, Tv\) = \(2, 5\); got shape \(2, 4\)",
        ),
        (
            (2, 3, 4),
            (2, 5, 4),
            None,
            {"query_mask": np.ones((2, 5), bool)},
            r"`query_mask` must have shape \(batch, Tq\) = \(2, 3\); got shape \(2, 5\)",
        ),
        (
            (2, 3, 4),
            (2, 5, 4),
            None,
            {"attention_mask": np.ones((2, 5), bool)},
            r"`attention_mask` must have shape \(batch, Tq, Tv\) = \(2, 3, 5\); got shape \(2, 5\)",
        ),
        ((2, 4), (2, 5, 4), None, {"causal": True}, r"`causal=True` needs a rank-3 query"),
    ],
    ids=[
        "query_rank",
        "value_rank",
        "key_length",
        "batch",
        "value_mask",
        "query_mask",
        "attention_mask",
        "causal_single",
    ],
)
def test_wrong_shapes_and_masks(query, value, key, kwargs, message):
    with pytest.raises(ValueError, match="MultiHeadAttention: " + message):
        make()(_zeros(*query), _zeros(*value), key=None if key is None else _zeros(*key), **kwargs)


def test_unknown_feature_size_is_rejected_at_build():
    with pytest.raises(
        ValueError,
        match=r"MultiHeadAttention: the last dimension of `value` must be known .* got shape \(None, None, None\)",
    ):
        make()(keras.Input((None, 4)), keras.Input((None, None)), key=keras.Input((None, 3)))


# -------------------------------------------------------------------- dropout


def test_dropout_applies_in_training_only_and_is_seeded():
    rng = np.random.default_rng(13)
    query, value, key = inputs(rng, tq=6, tv=40)
    layer = built(rng, query, value, key, dropout=0.5, seed=7)
    plain = make()
    plain(query, value, key=key)
    plain.set_weights(layer.get_weights())
    inference, inference_weights = layer(query, value, key=key, return_attention_scores=True)
    np.testing.assert_allclose(inference, plain(query, value, key=key), atol=1e-6)
    np.testing.assert_array_equal(layer(query, value, key=key), layer(query, value, key=key, training=False))

    output, trained = layer(query, value, key=key, return_attention_scores=True, training=True)
    trained = np.asarray(trained)
    dropped = trained == 0
    assert 0.4 < dropped.mean() < 0.6
    # Kept weights are scaled by 1 / (1 - rate), and are the weights used.
    np.testing.assert_allclose(trained[~dropped], 2 * np.asarray(inference_weights)[~dropped], rtol=1e-5)
    want, _ = reference_mha(weights_of(layer), query, value, key, True, weights=trained)
    np.testing.assert_allclose(output, want, atol=1e-5)
    assert not np.allclose(output, inference, atol=1e-3)

    # Same seed, same draws, whether or not the weights are asked for.
    again = built(np.random.default_rng(0), query, value, key, dropout=0.5, seed=7)
    again.set_weights(layer.get_weights())
    np.testing.assert_allclose(again(query, value, key=key, training=True), output, atol=1e-6)


# ------------------------------------------------------- decoder use and shapes


def test_memory_is_projected_once_and_queries_step_by_step():
    rng = np.random.default_rng(14)
    query, memory, _ = inputs(rng, tq=5, tv=5, dv=DQ)
    layer = built(rng, query, memory)
    value_mask = lengths_mask([5, 3, 2], 5)
    full = np.asarray(layer(query, memory, value_mask=value_mask, causal=True))
    projected_key, projected_value = layer.project_key(memory), layer.project_value(memory)
    assert tuple(projected_key.shape) == (B, 5, HEADS, KEY_DIM)
    assert tuple(projected_value.shape) == (B, 5, HEADS, VALUE_DIM)
    for t in range(5):
        step_mask = (value_mask & (np.arange(5) <= t))[:, None, :]  # (B, 1, Tv)
        step, _ = layer.attend(layer.project_query(query[:, t : t + 1]), projected_key, projected_value, step_mask)
        np.testing.assert_allclose(np.asarray(step)[:, 0], full[:, t], atol=1e-5)


@pytest.mark.parametrize("rank", [2, 3])
def test_symbolic_shapes_match_eager_shapes(rank):
    query = keras.Input((8,) if rank == 2 else (None, 8), batch_size=2)
    value, key = keras.Input((None, 6), batch_size=2), keras.Input((None, 3), batch_size=2)
    layer = make(output_dim=5)
    output, weights = layer(query, value, key=key, return_attention_scores=True)
    if rank == 2:
        assert output.shape == (2, 5) and weights.shape == (2, HEADS, None)
    else:
        assert output.shape == (2, None, 5) and weights.shape == (2, HEADS, None, None)
    assert make().compute_output_shape((2, 3, 8), (2, 7, 6)) == (2, 3, 8)
    model = keras.Model([query, value, key], [output, weights])
    eager = model([_zeros(*((2, 8) if rank == 2 else (2, 4, 8))), _zeros(2, 7, 6), _zeros(2, 7, 3)])
    assert eager[0].shape == ((2, 5) if rank == 2 else (2, 4, 5))
    assert eager[1].shape == ((2, HEADS, 7) if rank == 2 else (2, HEADS, 4, 7))


def test_output_carries_the_query_mask():
    target, source = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    embed = keras.layers.Embedding(10, 4, mask_zero=True)
    output = make()(embed(target), embed(source))
    pooled = keras.layers.GlobalAveragePooling1D()(output)  # mask-aware mean
    model = keras.Model([target, source], [output, pooled])
    output_value, pooled_value = model.predict([np.array([[1, 2, 0]], "int32"), np.array([[1, 2]], "int32")], verbose=0)
    assert (output_value[0, 2] == 0).all() and output_value[0, :2].any()
    np.testing.assert_allclose(pooled_value[0], output_value[0, :2].mean(0), atol=1e-6)


# ---------------------------------------------------------------------- docs


def test_docstring_has_formula_paper_shapes_and_a_running_example():
    doc = inspect.getdoc(MultiHeadAttention)
    for section in (
        "Paper:",
        "Shapes:",
        "Example:",
        "arXiv:1706.03762",
        "head_h = Attention(Q W_q^h, K W_k^h, V W_v^h)",
    ):
        assert section in doc
    (example,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    namespace = {"np": np, "keras_attention": keras_attention}
    exec(compile(example, "<MultiHeadAttention example>", "exec"), namespace)
    assert namespace["output"].shape == (2, 6, 16) and namespace["weights"].shape == (2, 4, 6, 6)
    assert (np.asarray(namespace["weights"])[1, :, :, 4:] == 0).all()
