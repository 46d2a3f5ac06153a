"""AttentionPooling: a sequence to one vector with a learned context vector.

The same discipline as the score layers (tests/test_layer_discipline.py), for
a layer that takes one sequence instead of a query and a memory.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention
from keras_attention.layers.pooling import AttentionPooling
from tests import reference
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import lengths_mask, randomize, token_batch
from tests.test_docs import _python_blocks

B, T, D, UNITS = 3, 6, 5, 4


def built_pooling(rng, inputs, **kwargs):
    layer = AttentionPooling(UNITS, **kwargs)
    layer(inputs)
    randomize(layer, rng)
    return layer


def reference_pooling(layer, inputs, mask=None):
    """u_i = tanh(W h_i + b), alpha = softmax(u_i . u_ctx) over valid i, s = sum alpha_i h_i."""
    w = {v.path.split("/")[-1]: np.asarray(v.numpy(), np.float64) for v in layer.weights}
    h = np.asarray(inputs, np.float64)
    u = np.tanh(h @ w["kernel"] + w.get("bias", 0.0))
    scores = u @ w["context_vector"]  # (B, T)
    weights = reference.masked_softmax(scores, mask)
    return np.einsum("bt,btd->bd", weights, h), weights


# ----------------------------------------------------------------- the formula


@pytest.mark.parametrize("use_bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("masked", [False, True], ids=["unmasked", "masked"])
def test_matches_numpy_reference(masked, use_bias):
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(B, T, D)).astype("float32")
    layer = built_pooling(rng, inputs, use_bias=use_bias)
    assert [v.path.split("/")[-1] for v in layer.weights] == (
        ["kernel", "bias", "context_vector"] if use_bias else ["kernel", "context_vector"]
    )
    mask = lengths_mask([6, 3, 1], T) if masked else None
    pooled, weights = layer(inputs, mask=mask, return_attention_scores=True)
    want_pooled, want_weights = reference_pooling(layer, inputs, mask)
    assert tuple(pooled.shape) == (B, D) and tuple(weights.shape) == (B, T)
    np.testing.assert_allclose(weights, want_weights, atol=1e-5)
    np.testing.assert_allclose(pooled, want_pooled, atol=1e-5)
    # The weights are not trivially uniform: the reference is a real check.
    assert np.ptp(np.asarray(weights)[0]) > 0.05


def test_keras_mask_is_used_and_an_explicit_mask_wins():
    rng = np.random.default_rng(1)
    ids = token_batch(rng, B, T)
    ids[:, 0] = 1  # every row has at least one real token
    embedding = keras.layers.Embedding(20, D, mask_zero=True)
    layer = AttentionPooling(UNITS)
    states = embedding(ids)
    from_keras_mask, weights = layer(states, return_attention_scores=True)
    explicit = ids != 0
    np.testing.assert_array_equal(from_keras_mask, layer(states, mask=explicit))
    assert (np.asarray(weights)[~explicit] == 0).all()
    # An explicit mask replaces the Keras mask rather than being ignored.
    only_first = np.zeros_like(explicit)
    only_first[:, 0] = True
    np.testing.assert_allclose(layer(states, mask=only_first), np.asarray(states)[:, 0], atol=1e-6)


# ----------------------------------------------------------------- hand cases


def test_zero_context_vector_gives_the_mean_of_the_valid_rows():
    """u_ctx = 0 -> every score is 0 -> uniform weights over the valid rows."""
    rng = np.random.default_rng(2)
    inputs = rng.normal(size=(B, T, D)).astype("float32")
    layer = built_pooling(rng, inputs)
    layer.context_vector.assign(np.zeros(UNITS, "float32"))
    lengths = [6, 2, 4]
    pooled, weights = layer(inputs, mask=lengths_mask(lengths, T), return_attention_scores=True)
    for b, length in enumerate(lengths):
        np.testing.assert_allclose(pooled[b], inputs[b, :length].mean(0), atol=1e-6)
        np.testing.assert_allclose(weights[b], [1 / length] * length + [0] * (T - length), atol=1e-7)


def test_identical_valid_rows_give_that_row_whatever_the_padding_holds():
    rng = np.random.default_rng(3)
    inputs = 10 * rng.normal(size=(B, T, D)).astype("float32")  # padding: large noise
    lengths = [1, 3, 5]
    for b, length in enumerate(lengths):
        inputs[b, :length] = inputs[b, -1]  # the valid rows are copies of one row
    layer = built_pooling(rng, inputs)
    pooled, weights = layer(inputs, mask=lengths_mask(lengths, T), return_attention_scores=True)
    for b, length in enumerate(lengths):
        np.testing.assert_allclose(pooled[b], inputs[b, 0], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(weights[b, :length], 1 / length, atol=1e-6)


# ----------------------------------------------------------------- invariants


def test_rows_sum_to_one_and_padding_gets_exactly_zero():
    rng = np.random.default_rng(4)
    inputs = 4 * rng.normal(size=(B, T, D)).astype("float32")  # sharp distributions too
    layer = built_pooling(rng, inputs)
    layer.context_vector.assign(40 * layer.context_vector.numpy())
    lengths = [1, 5, 6]
    _, weights = layer(inputs, mask=lengths_mask(lengths, T), return_attention_scores=True)
    weights = np.asarray(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    for b, length in enumerate(lengths):
        assert (weights[b, length:] == 0.0).all()
    assert weights[1, :5].max() > 0.5, "expected a sharp distribution"


@pytest.mark.parametrize("training", [False, True])
def test_fully_masked_sequence_gives_zeros_and_finite_gradients(training):
    rng = np.random.default_rng(5)
    inputs = rng.normal(size=(B, T, D)).astype("float32")
    layer = built_pooling(rng, inputs, dropout=0.3, seed=1)
    inputs = tf.constant(inputs)
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        pooled, weights = layer(
            inputs, mask=lengths_mask([0, 3, 6], T), return_attention_scores=True, training=training
        )
        loss = tf.reduce_sum(pooled**2) + tf.reduce_sum(weights)
    grads = tape.gradient(loss, [inputs] + layer.trainable_weights)
    pooled, weights = np.asarray(pooled), np.asarray(weights)
    assert (pooled[0] == 0).all() and (weights[0] == 0).all()
    assert np.isfinite(pooled).all() and np.isfinite(weights).all()
    assert (np.asarray(grads[0])[0] == 0).all(), "a fully masked row gets no gradient"
    for grad in grads:
        assert np.isfinite(np.asarray(grad)).all()
    assert np.abs(np.asarray(grads[0])[2]).sum() > 0


def test_dropout_only_in_training():
    rng = np.random.default_rng(6)
    inputs = rng.normal(size=(B, T, D)).astype("float32")
    layer = built_pooling(rng, inputs, dropout=0.5, seed=3)
    _, inference = layer(inputs, return_attention_scores=True)
    _, dropped = layer(inputs, return_attention_scores=True, training=True)
    np.testing.assert_allclose(np.asarray(inference).sum(-1), 1.0, atol=1e-6)
    assert (np.asarray(dropped) == 0).any() and not np.allclose(dropped, inference)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_large_context_vector_stays_finite_under_mixed_precision(policy):
    """The generic precision check (test_precision.py) scales the inputs, but
    tanh bounds what reaches the context vector: only a large context vector
    gives the large logits that a float16 softmax or masking constant would
    overflow on."""
    rng = np.random.default_rng(10)
    inputs = 30 * rng.normal(size=(B, T, D)).astype("float32")
    layer = AttentionPooling(UNITS, dtype=policy)
    layer(inputs)
    layer.context_vector.assign(200 * np.ones(UNITS, "float32"))
    pooled, weights = layer(inputs, mask=lengths_mask([6, 1, 3], T), return_attention_scores=True)
    weights = np.asarray(weights, np.float32)
    assert np.isfinite(np.asarray(pooled, np.float32)).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-2)
    assert (weights[1, 1:] == 0).all()


# ------------------------------------------------------------------ gradients


def test_gradients_match_finite_differences_in_float64():
    rng = np.random.default_rng(7)
    inputs = rng.normal(size=(2, 3, 3))
    mask = lengths_mask([3, 2], 3)
    layer = AttentionPooling(2, dtype="float64")
    layer(inputs)
    randomize(layer, rng)
    readout = rng.normal(size=(2, 3))

    def loss(x):
        return tf.reduce_sum(layer(x, mask=mask) * readout)

    tensor = tf.constant(inputs)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        value = loss(tensor)
    assert value.dtype == tf.float64
    analytic = tape.gradient(value, [tensor] + layer.trainable_weights)
    assert_input_gradients_match(loss, [inputs], analytic)
    assert_weight_gradients_match(layer, lambda: loss(tensor), analytic[1:])


# -------------------------------------------------------------- serialisation


def test_get_config_round_trip_gives_identical_outputs():
    rng = np.random.default_rng(8)
    inputs = rng.normal(size=(B, T, D)).astype("float32")
    layer = built_pooling(
        rng,
        inputs,
        use_bias=False,
        kernel_initializer="he_normal",
        kernel_regularizer="l2",
        dropout=0.25,
        seed=7,
    )
    config = layer.get_config()
    assert config["units"] == UNITS and config["use_bias"] is False and config["dropout"] == 0.25
    clone = AttentionPooling.from_config(config)
    assert clone.get_config() == config
    clone(inputs)
    clone.set_weights(layer.get_weights())
    mask = lengths_mask([6, 2, 4], T)
    np.testing.assert_array_equal(clone(inputs, mask=mask), layer(inputs, mask=mask))


def test_output_carries_no_mask_and_symbolic_shapes():
    ids = keras.Input((None,), dtype="int32")
    states = keras.layers.Embedding(20, D, mask_zero=True)(ids)
    pooled, weights = AttentionPooling(UNITS)(states, return_attention_scores=True)
    assert tuple(pooled.shape) == (None, D) and tuple(weights.shape) == (None, None)
    assert getattr(pooled, "_keras_mask", None) is None
    eager = AttentionPooling(UNITS)(keras.layers.Embedding(20, D, mask_zero=True)(np.array([[1, 2, 0]])))
    assert getattr(eager, "_keras_mask", None) is None


# --------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 5), r"AttentionPooling: `inputs` must have rank 3 \(batch, T, d\); got shape \(2, 5\)"),
        ((2, 5, 3, 4), r"`inputs` must have rank 3 \(batch, T, d\); got shape \(2, 5, 3, 4\)"),
    ],
    ids=["rank2", "rank4"],
)
def test_wrong_rank(shape, message):
    with pytest.raises(ValueError, match=message):
        AttentionPooling(UNITS)(np.zeros(shape, "float32"))


def test_wrong_rank_on_a_built_layer():
    layer = AttentionPooling(UNITS)
    layer(np.zeros((2, 5, 3), "float32"))
    with pytest.raises(ValueError, match=r"got shape \(2, 3\)"):
        layer(np.zeros((2, 3), "float32"))


@pytest.mark.parametrize(
    "mask_shape, message",
    [
        ((2, 4), r"AttentionPooling: `mask` must have shape \(batch, T\) = \(2, 5\); got shape \(2, 4\)"),
        ((2, 5, 1), r"`mask` must have shape \(batch, T\) = \(2, 5\); got shape \(2, 5, 1\)"),
        ((3, 5), r"`mask` must have shape \(batch, T\) = \(2, 5\); got shape \(3, 5\)"),
    ],
)
def test_mask_shape_mismatch(mask_shape, message):
    with pytest.raises(ValueError, match=message):
        AttentionPooling(UNITS)(np.zeros((2, 5, 3), "float32"), mask=np.ones(mask_shape, bool))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"units": 0}, r"AttentionPooling: `units` must be a positive integer; got 0"),
        ({"units": -2}, r"`units` must be a positive integer; got -2"),
        ({"units": 2.5}, r"`units` must be a positive integer; got 2.5"),
        ({"units": True}, r"`units` must be a positive integer; got True"),
        ({"units": 4, "dropout": 1.0}, r"AttentionPooling: `dropout` must be a number in \[0, 1\); got 1.0"),
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        AttentionPooling(**kwargs)


def test_unknown_feature_size_is_rejected_at_build():
    with pytest.raises(ValueError, match=r"AttentionPooling: the last dimension of `inputs` must be known"):
        AttentionPooling(UNITS)(keras.Input((None, None)))


# ----------------------------------------------------------------------- docs


def test_docstring_example_runs():
    doc = AttentionPooling.__doc__
    for section in ("Paper:", "Shapes:", "Example:", "arXiv:"):
        assert section in doc
    (example,) = _python_blocks(__import__("inspect").getdoc(AttentionPooling))
    scope = {"np": np, "keras_attention": keras_attention}
    exec(compile(example, "<AttentionPooling example>", "exec"), scope)
    assert tuple(scope["pooled"].shape) == (2, 12)
    assert (np.asarray(scope["weights"])[0, 3:] == 0).all()
