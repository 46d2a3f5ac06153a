"""SelfAttention: NumPy references, windows, the seed's worked example, the
Lin et al. regulariser, masking, gradients, serialisation, mixed precision,
XLA training with unknown lengths, export and error messages."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attention.layers.additive import AdditiveAttention
from keras_attention.layers.dot import DotAttention
from keras_attention.layers.hard import HardAttention
from keras_attention.layers.self_attention import SelfAttention
from keras_attention.training import build_optimizer
from tests import reference
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import lengths_mask, randomize, token_batch, weights_of

B, T, D, UNITS = 3, 7, 5, 4

SCORES = {
    "scaled_dot": reference.scaled_dot_scores,
    "dot": reference.dot_scores,
    "general": reference.general_scores,
    "additive": reference.additive_scores,
}


# ------------------------------------------------------------- the reference


def allowed_positions(length, causal=False, window=None):
    """`(T, T)` boolean: may row i attend to j? Written from the docstring's cases."""
    allowed = np.ones((length, length), bool)
    for i in range(length):
        for j in range(length):
            if causal and j > i:
                allowed[i, j] = False
            if window is None:
                continue
            if causal:
                ok = i - window < j <= i
            elif window % 2:
                ok = abs(i - j) <= (window - 1) / 2
            else:
                ok = i - window / 2 <= j <= i + window / 2 - 1
            allowed[i, j] &= ok
    return allowed


def reference_self_attention(layer, x, score, mask=None, attention_mask=None):
    """(output, weights) in float64 from the layer's own weights."""
    x = np.asarray(x, np.float64)

    def project(part):
        out = x @ getattr(layer, f"{part}_kernel").numpy().astype(np.float64)
        bias = getattr(layer, f"{part}_bias")
        return out if bias is None else out + bias.numpy()

    q, k, v = project("query"), project("key"), project("value")
    scores = SCORES[score](weights_of(layer.score_layer), q, k)
    band = allowed_positions(x.shape[1], layer.causal, layer.window)[None]
    if attention_mask is not None:
        band = band & attention_mask
    full = reference.combined_mask(
        x.shape[0],
        x.shape[1],
        x.shape[1],
        query_mask=mask,
        value_mask=mask,
        attention_mask=np.broadcast_to(band, (x.shape[0],) + band.shape[1:]),
    )
    out, weights = reference.attend(scores, v, full)
    return out, weights, full


def reference_regularization(weight, weights, lengths):
    """weight * mean_b ||A_b A_b^T - I||_F^2 over each example's unpadded block."""
    total = 0.0
    for b, length in enumerate(lengths):
        block = weights[b, :length, :length]
        total += np.sum((block @ block.T - np.eye(length)) ** 2)
    return weight * total / len(lengths)


def built(rng, x, **kwargs):
    layer = SelfAttention(UNITS, **kwargs)
    layer(x)
    randomize(layer, rng)
    return layer


CONFIGS = {
    "plain": dict(),
    "plain_bias": dict(use_bias=True),
    "causal": dict(causal=True),
    "window3": dict(window=3),
    "window4": dict(window=4),
    "window1": dict(window=1),
    "causal_window3": dict(causal=True, window=3),
    "causal_window2": dict(causal=True, window=2),
    "additive": dict(score="additive", use_bias=True),
    "additive_window4": dict(score="additive", window=4),
    "dot_causal": dict(score="dot", causal=True),
    "general_window5": dict(score="general", window=5),
}
# A score passed as a layer: its reference and its own size differ from `units`.
LAYER_SCORES = {
    "additive_layer": (lambda: AdditiveAttention(6, use_bias=True), "additive"),
    "dot_scale_layer": (lambda: DotAttention(use_scale=True), "dot"),
}


def _score_name(kwargs):
    return kwargs.get("score", "scaled_dot")


@pytest.mark.parametrize("config", list(CONFIGS) + list(LAYER_SCORES))
def test_matches_numpy_reference_with_and_without_padding(config):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(B, T, D)).astype("float32")
    if config in LAYER_SCORES:
        make, score = LAYER_SCORES[config]
        layer = built(rng, x, score=make(), window=4, causal=config.startswith("dot"))
    else:
        kwargs = CONFIGS[config]
        layer, score = built(rng, x, **kwargs), _score_name(kwargs)
    for mask in (None, lengths_mask([7, 4, 1], T)):
        out, weights = layer(x, mask=mask, return_attention_scores=True)
        want_out, want_weights, _ = reference_self_attention(layer, x, score, mask)
        np.testing.assert_allclose(weights, want_weights, atol=1e-5)
        np.testing.assert_allclose(out, want_out, atol=1e-5)
        assert tuple(out.shape) == (B, T, UNITS) and tuple(weights.shape) == (B, T, T)


@pytest.mark.parametrize("config", ["plain", "causal_window3", "window4"])
def test_attention_mask_combines_with_window_causal_and_padding(config):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(B, T, D)).astype("float32")
    layer = built(rng, x, **CONFIGS[config])
    mask = lengths_mask([7, 5, 3], T)
    attention_mask = rng.random((B, T, T)) > 0.3
    out, weights = layer(x, mask=mask, attention_mask=attention_mask, return_attention_scores=True)
    want_out, want_weights, full = reference_self_attention(layer, x, "scaled_dot", mask, attention_mask)
    np.testing.assert_allclose(weights, want_weights, atol=1e-5)
    np.testing.assert_allclose(out, want_out, atol=1e-5)
    assert (np.asarray(weights)[~full] == 0).all()


# ---------------------------------------------------------------- the window


@pytest.mark.parametrize("causal", [False, True], ids=["centred", "causal"])
def test_window_weights_are_exactly_zero_outside_and_rows_sum_to_one(causal):
    for window in (1, 2, 3, 4, 5):
        _check_window(causal, window)


def _check_window(causal, window):
    rng = np.random.default_rng(2)
    length = 9
    x = rng.normal(size=(2, length, D)).astype("float32")
    layer = SelfAttention(UNITS, causal=causal, window=window)
    _, weights = layer(x, return_attention_scores=True)
    weights = np.asarray(weights)
    offsets = np.arange(length)[None, :] - np.arange(length)[:, None]  # j - i
    if causal:
        inside = (offsets <= 0) & (offsets > -window)
    else:
        inside = (offsets >= -(window // 2)) & (offsets <= (window - 1) // 2)
    assert (weights[:, ~inside] == 0.0).all()
    assert (weights[:, inside] > 0.0).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    # Away from the ends every row sees exactly `window` positions.
    row = length - 1 if causal else length // 2
    assert ((weights[:, row] > 0).sum(-1) == window).all()


def test_even_window_reaches_further_left_than_right():
    """w=4: offsets -2..1 (two to the left, one to the right)."""
    x = np.random.default_rng(3).normal(size=(1, 8, D)).astype("float32")
    _, weights = SelfAttention(UNITS, window=4)(x, return_attention_scores=True)
    np.testing.assert_array_equal(np.flatnonzero(np.asarray(weights)[0, 4]), [2, 3, 4, 5])


# --------------------------------------------------------- the seed's example


def test_reproduces_the_seed_worked_example():
    """The TensorFlow example of seed 004, section 3 (self-attention).

    It computes keys = x W_k, querys = x W_q, values = x W_v, scores
    Q K^T divided by sqrt(d_k) = sqrt(3), `tf.nn.softmax(axis=-1)` (over the
    keys) and `softmax @ values`: the default scaled-dot SelfAttention with
    units=3 and no bias. The seed prints no numbers; the expected values
    below follow from its matrices (scores [[2,4,4],[4,16,12],[4,12,10]]).
    """
    x = np.array([[1, 0, 1, 0], [0, 2, 0, 2], [1, 1, 1, 1]], "float32")[None]
    w_key = np.array([[0, 0, 1], [1, 1, 0], [0, 1, 0], [1, 1, 0]], "float32")
    w_query = np.array([[1, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 1]], "float32")
    w_value = np.array([[0, 2, 0], [0, 3, 0], [1, 0, 3], [1, 1, 0]], "float32")
    layer = SelfAttention(3)
    layer.build(x.shape)
    layer.query_kernel.assign(w_query)
    layer.key_kernel.assign(w_key)
    layer.value_kernel.assign(w_value)
    output, weights = layer(x, return_attention_scores=True)

    # The seed's intermediate values, by hand.
    np.testing.assert_array_equal(x[0] @ w_key, [[0, 1, 1], [4, 4, 0], [2, 3, 1]])
    np.testing.assert_array_equal(x[0] @ w_query, [[1, 0, 2], [2, 2, 2], [2, 1, 3]])
    np.testing.assert_array_equal(x[0] @ w_value, [[1, 2, 3], [2, 8, 0], [2, 6, 3]])
    want_weights = [
        [0.1361257976, 0.4319371012, 0.4319371012],
        [0.0008904474, 0.9088426472, 0.0902669054],
        [0.0074448924, 0.7547075806, 0.2378475270],
    ]
    want_output = [
        [1.863874202, 6.319371012, 1.704188696],
        [1.999109553, 7.814123505, 0.273472058],
        [1.992555108, 7.479635592, 0.735877258],
    ]
    np.testing.assert_allclose(weights[0], want_weights, atol=1e-6)
    np.testing.assert_allclose(output[0], want_output, rtol=1e-6, atol=1e-5)


# ----------------------------------------------------------- the regulariser


@pytest.mark.parametrize("config", ["plain", "causal_window3", "additive_window4"])
def test_regularization_loss_matches_numpy(config):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(B + 1, T, D)).astype("float32")
    lengths = [7, 4, 1, 0]  # the last example is all padding
    layer = SelfAttention(UNITS, regularization_weight=0.3, **CONFIGS[config])
    layer(x)
    randomize(layer, rng)
    mask = lengths_mask(lengths, T)
    _, weights = layer(x, mask=mask, return_attention_scores=True)
    (loss,) = layer.losses
    want = reference_regularization(0.3, np.asarray(weights, np.float64), lengths)
    assert want > 0.1
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    # Padding contributes nothing: the same examples without their padding
    # (one at a time, so each has its own length) give the same penalty.
    singles = []
    for b, length in enumerate(lengths):
        if length:
            layer(x[b : b + 1, :length], mask=np.ones((1, length), bool))
            singles.append(float(layer.losses[0]))
        else:
            singles.append(0.0)
    np.testing.assert_allclose(float(loss), np.mean(singles), rtol=1e-5)


def test_regularization_is_zero_without_weight_and_does_not_accumulate():
    x = np.random.default_rng(5).normal(size=(2, 5, D)).astype("float32")
    layer = SelfAttention(UNITS)
    layer(x)
    assert sum(float(loss) for loss in layer.losses) == 0.0
    regularised = SelfAttention(UNITS, regularization_weight=1.0)
    regularised(x)
    regularised(x)
    assert len(regularised.losses) == 1 and float(regularised.losses[0]) > 0


def test_regularization_uses_the_weights_before_dropout():
    x = np.random.default_rng(6).normal(size=(2, 6, D)).astype("float32")
    layer = SelfAttention(UNITS, regularization_weight=1.0, dropout=0.5, seed=1)
    _, inference = layer(x, return_attention_scores=True)
    (at_inference,) = layer.losses
    _, trained = layer(x, return_attention_scores=True, training=True)
    (in_training,) = layer.losses
    assert not np.allclose(trained, inference), "dropout should change the weights"
    np.testing.assert_allclose(float(in_training), float(at_inference), rtol=1e-6)


def test_identity_weights_give_zero_penalty():
    """window=1 makes A = I on valid rows, so ||A A^T - I|| = 0 even with padding."""
    x = np.random.default_rng(7).normal(size=(2, 5, D)).astype("float32")
    layer = SelfAttention(UNITS, window=1, regularization_weight=2.0)
    layer(x, mask=lengths_mask([5, 2], 5))
    assert float(layer.losses[0]) == pytest.approx(0.0, abs=1e-6)


# ------------------------------------------------------------------- masking


@pytest.mark.parametrize("training", [False, True])
def test_fully_masked_rows_give_zeros_and_finite_gradients(training):
    rng = np.random.default_rng(8)
    x = tf.constant(rng.normal(size=(B, T, D)).astype("float32"))
    layer = SelfAttention(
        UNITS, score="additive", causal=True, window=3, regularization_weight=0.5, dropout=0.2, seed=0
    )
    mask = lengths_mask([0, 4, 7], T)  # example 0 is all padding
    attention_mask = np.ones((B, T, T), bool)
    attention_mask[2, 3] = False  # a valid query with nothing to attend to
    with tf.GradientTape() as tape:
        tape.watch(x)
        out, weights = layer(
            x, mask=mask, attention_mask=attention_mask, return_attention_scores=True, training=training
        )
        loss = tf.reduce_sum(out**2) + tf.reduce_sum(weights) + tf.add_n(layer.losses)
    grads = tape.gradient(loss, [x] + layer.trainable_weights)
    out, weights = np.asarray(out), np.asarray(weights)
    assert (out[0] == 0).all() and (weights[0] == 0).all()
    assert (out[1, 4:] == 0).all() and (weights[1, :, 4:] == 0).all()
    assert (out[2, 3] == 0).all() and (weights[2, 3] == 0).all()
    assert np.abs(out[2, 4]).sum() > 0
    if not training:
        np.testing.assert_allclose(weights[1, :4].sum(-1), 1.0, atol=1e-6)
    assert np.isfinite(out).all() and np.isfinite(float(loss))
    for grad in grads:
        assert grad is not None and np.isfinite(np.asarray(grad)).all()
    assert np.abs(np.asarray(grads[0])[0]).sum() == 0, "padding gets no gradient"


def test_keras_mask_is_used_and_passed_on():
    rng = np.random.default_rng(9)
    ids = np.array([[3, 5, 2, 0, 0], [4, 1, 7, 9, 6]], "int32")
    tokens = keras.Input((None,), dtype="int32")
    embedded = keras.layers.Embedding(12, D, mask_zero=True)(tokens)
    layer = SelfAttention(UNITS, causal=True)
    attended = layer(embedded)
    pooled = keras.layers.GlobalAveragePooling1D()(attended)  # uses the mask
    model = keras.Model(tokens, [attended, pooled])
    randomize(layer, rng)
    attended, pooled = (np.asarray(t) for t in model(ids))
    want = np.asarray(layer(model.layers[1](ids), mask=ids != 0))
    np.testing.assert_allclose(attended, want, atol=1e-6)
    assert (attended[0, 3:] == 0).all()
    np.testing.assert_allclose(pooled[0], attended[0, :3].mean(0), atol=1e-6)
    np.testing.assert_allclose(pooled[1], attended[1].mean(0), atol=1e-6)
    mask = layer.compute_mask(embedded, tf.constant(ids != 0))
    np.testing.assert_array_equal(mask, ids != 0)


def test_symbolic_shapes_with_unknown_length():
    inputs = keras.Input((None, D))
    out, weights = SelfAttention(6, window=2)(inputs, return_attention_scores=True)
    assert tuple(out.shape) == (None, None, 6) and tuple(weights.shape) == (None, None, None)


# ----------------------------------------------------------------- gradients


@pytest.mark.parametrize(
    "kwargs",
    [dict(causal=True, window=2), dict(score="additive", use_bias=True, window=3)],
    ids=["scaled_dot_causal_window", "additive_window"],
)
def test_gradients_match_finite_differences_in_float64(kwargs):
    rng = np.random.default_rng(10)
    x = rng.normal(size=(2, 4, 3))
    mask = lengths_mask([4, 3], 4)
    layer = SelfAttention(2, regularization_weight=0.7, dtype="float64", **kwargs)
    layer(x)
    randomize(layer, rng)
    readout = rng.normal(size=(2, 4, 2))

    def loss(inputs):
        out = layer(inputs, mask=mask)
        return tf.reduce_sum(out * readout) + layer.losses[0]

    tensor = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        value = loss(tensor)
    assert value.dtype == tf.float64
    analytic = tape.gradient(value, [tensor] + layer.trainable_weights)
    assert_input_gradients_match(loss, [x], analytic)
    assert_weight_gradients_match(layer, lambda: loss(tensor), analytic[1:])


# ------------------------------------------------------------- serialisation


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(score="additive", causal=True, window=4, regularization_weight=0.2, use_bias=True),
        dict(score=DotAttention(use_scale=True), window=3, dropout=0.1, seed=4),
        dict(score="general", kernel_initializer="he_normal", bias_initializer="ones", use_bias=True),
    ],
    ids=["additive_causal_window", "dot_layer", "general"],
)
def test_get_config_round_trip_gives_identical_outputs(kwargs):
    rng = np.random.default_rng(11)
    x = rng.normal(size=(B, T, D)).astype("float32")
    layer = built(rng, x, **kwargs)
    config = layer.get_config()
    clone = SelfAttention.from_config(config)
    assert clone.get_config() == config
    assert type(clone.score_layer) is type(layer.score_layer)
    clone(x)
    clone.set_weights(layer.get_weights())
    mask = lengths_mask([7, 2, 5], T)
    np.testing.assert_array_equal(clone(x, mask=mask), layer(x, mask=mask))
    np.testing.assert_array_equal(clone.losses, layer.losses)


def _model(vocabulary=20, **kwargs):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    embedded = keras.layers.Embedding(vocabulary, D, mask_zero=True)(tokens)
    attended = SelfAttention(UNITS, name="attention", **kwargs)(embedded)
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    # A one-element input list: the export helper passes its inputs as a list.
    return keras.Model([tokens], keras.layers.Dense(3)(pooled))


# ----------------------------------------------------------- mixed precision


@pytest.mark.parametrize("score", ["scaled_dot", "additive"])
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy, score):
    rng = np.random.default_rng(13)
    # Large inputs give large logits: a float16 softmax would overflow.
    x = rng.normal(size=(B, T, D)).astype("float32") * 30
    layer = SelfAttention(UNITS, score=score, window=4, regularization_weight=0.5, dtype=policy)
    mask = lengths_mask([7, 1, 3], T)
    out, weights = layer(x, mask=mask, return_attention_scores=True)
    compute = policy.split("_")[1]
    assert out.dtype == compute and weights.dtype == compute
    assert len(layer.weights) >= 3
    assert all(variable.dtype == "float32" for variable in layer.weights)
    weights = np.asarray(weights, np.float32)
    assert np.isfinite(np.asarray(out, np.float32)).all() and np.isfinite(weights).all()
    valid_rows = lengths_mask([7, 1, 3], T)
    np.testing.assert_allclose(weights.sum(-1)[valid_rows], 1.0, atol=1e-2)
    assert (weights[1, :, 1:] == 0).all() and (weights[1, 1:] == 0).all()
    (loss,) = layer.losses
    assert loss.dtype == "float32" and np.isfinite(float(loss))


# --------------------------------------------------------------- XLA training


def test_functional_model_with_unknown_lengths_fits_with_xla():
    rng = np.random.default_rng(14)
    model = _model(causal=True, window=3, regularization_weight=0.1, use_bias=True)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    build_optimizer(model)
    attention = model.get_layer("attention")
    before = [w.numpy().copy() for w in attention.trainable_weights]
    x, y = token_batch(rng, 16, 7), rng.integers(0, 3, size=16)
    history = model.fit([x], y, batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    predictions = model.predict([token_batch(rng, 4, 11)], verbose=0)
    assert predictions.shape == (4, 3) and np.isfinite(predictions).all()
    for old, new in zip(before, attention.trainable_weights):
        assert not np.allclose(old, new.numpy()), f"{new.path} did not train"
    model([x[:4]])
    assert len(model.losses) == 1 and float(model.losses[0]) > 0


# ---------------------------------------------------------------------- errors


def _zeros(*shape):
    return np.zeros(shape, "float32")


@pytest.mark.parametrize(
    "shape, message",
    [
        ((2, 5), r"SelfAttention: `inputs` must have rank 3 \(batch, T, d\); got shape \(2, 5\)"),
        ((2, 3, 4, 5), r"SelfAttention: `inputs` must have rank 3 \(batch, T, d\); got shape \(2, 3, 4, 5\)"),
    ],
)
def test_wrong_rank(shape, message):
    with pytest.raises(ValueError, match=message):
        SelfAttention(UNITS)(_zeros(*shape))


def test_unknown_feature_size_is_rejected_at_build():
    with pytest.raises(ValueError, match=r"last dimension of `inputs` must be known .*got shape \(None, None, None\)"):
        SelfAttention(UNITS)(keras.Input((None, None)))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mask=np.ones((2, 6), bool)), r"`mask` must have shape \(batch, T\) = \(2, 5\); got shape \(2, 6\)"),
        (dict(mask=np.ones((2, 5, 5), bool)), r"`mask` must have shape \(batch, T\) = \(2, 5\); got shape \(2, 5, 5\)"),
        (
            dict(attention_mask=np.ones((2, 5), bool)),
            r"`attention_mask` must have shape \(batch, T, T\) = \(2, 5, 5\); got shape \(2, 5\)",
        ),
        (
            dict(attention_mask=np.ones((2, 5, 4), bool)),
            r"`attention_mask` must have shape \(batch, T, T\) = \(2, 5, 5\); got shape \(2, 5, 4\)",
        ),
    ],
    ids=["mask_length", "mask_rank", "attention_mask_rank", "attention_mask_length"],
)
def test_bad_mask_shapes(kwargs, message):
    with pytest.raises(ValueError, match="SelfAttention: " + message):
        SelfAttention(UNITS)(_zeros(2, 5, 3), **kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(window=0), r"`window` must be a positive integer or None; got 0"),
        (dict(window=-2), r"`window` must be a positive integer or None; got -2"),
        (dict(window=2.5), r"`window` must be a positive integer or None; got 2.5"),
        (dict(score="cosine"), r"unknown `score` 'cosine'; expected one of 'scaled_dot', 'dot', 'additive', 'general'"),
        (dict(score=keras.layers.Dense(3)), r"`score` must be a soft score layer of this library .* got <Dense"),
        (dict(score=HardAttention("dot")), r"`score` must be a soft score layer of this library"),
        (
            dict(score=DotAttention(dropout=0.3)),
            r"`score` must have dropout=0 .*got 'dot_attention.*' with dropout=0.3",
        ),
        (dict(regularization_weight=-1.0), r"`regularization_weight` must be a finite number >= 0; got -1.0"),
        (dict(regularization_weight="big"), r"`regularization_weight` must be a finite number >= 0; got 'big'"),
        (dict(dropout=1.0), r"`dropout` must be a number in \[0, 1\); got 1.0"),
    ],
    ids=[
        "window_zero",
        "window_negative",
        "window_float",
        "unknown_score",
        "not_a_score",
        "hard_score",
        "score_dropout",
        "negative_weight",
        "weight_string",
        "dropout",
    ],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match="SelfAttention: " + message):
        SelfAttention(UNITS, **kwargs)


def test_bad_units():
    for units in (0, -1, 2.0, None):
        with pytest.raises(ValueError, match=rf"SelfAttention: `units` must be a positive integer; got {units}"):
            SelfAttention(units)


def test_built_score_layer_is_rejected():
    score = DotAttention()
    score(_zeros(2, 3), _zeros(2, 4, 3))
    with pytest.raises(ValueError, match=r"`score` must be an unbuilt layer .*units=4.*got the built layer"):
        SelfAttention(4, score=score)
