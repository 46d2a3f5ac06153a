"""TargetedAttention (Liu & Zhang 2017): the three modes against NumPy references,
context splitting inside the batch, edge cases, gradients, serialisation, mixed
precision, XLA training and export."""

import inspect
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention
from keras_attention import _checks
from keras_attention.layers.targeted import TargetedAttention
from keras_attention.training import build_optimizer
from tests.export_check import assert_export_parity
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import lengths_mask, randomize_model, token_batch

MODES = ["vanilla", "contextualized", "gated"]
D, UNITS = 4, 3

# One batch with spans at the start, middle and end of sentences, with and
# without padding. Columns: length, span (first, last).
LENGTHS = [7, 5, 4, 6, 7]
SPANS = [(0, 1), (2, 3), (3, 3), (2, 4), (5, 6)]
T = max(LENGTHS)


def span_mask(spans, maxlen):
    positions = np.arange(maxlen)[None, :]
    first, last = np.asarray(spans).T
    return (positions >= first[:, None]) & (positions <= last[:, None])


def weights_of(layer):
    return {v.path.split("/")[-1]: np.asarray(v.numpy(), np.float64) for v in layer.trainable_weights}


def randomize(layer, rng):
    for variable in layer.trainable_weights:
        variable.assign(rng.normal(0.0, 0.6, variable.shape).astype(variable.dtype))


def built_layer(mode, rng, hidden, target, dtype=None, **kwargs):
    layer = TargetedAttention(UNITS, mode=mode, dtype=dtype, **kwargs)
    layer(hidden, target)
    randomize(layer, rng)
    return layer


def random_batch(rng, dtype="float32"):
    hidden = rng.normal(size=(len(LENGTHS), T, D)).astype(dtype)
    return hidden, span_mask(SPANS, T), lengths_mask(LENGTHS, T)


# ------------------------------------------------------------ NumPy reference


def reference(w, hidden, target, valid, mode):
    """The paper's formulas, one example and one position at a time.

    Returns (output, {part: (B, T) weights}, gates (B, 3, d) or None). An empty
    span follows the documented convention: h_t = 0, empty left and right.
    """
    hidden = np.asarray(hidden, np.float64)
    batch, length, dim = hidden.shape
    parts = ["whole"] if mode == "vanilla" else ["whole", "left", "right"]
    weights = {part: np.zeros((batch, length)) for part in parts}
    outputs, all_gates = [], []
    for b in range(batch):
        positions = [i for i in range(length) if valid[b, i]]
        span = [i for i in positions if target[b, i]]
        h_t = hidden[b, span].mean(axis=0) if span else np.zeros(dim)
        sets = {
            "whole": positions,
            "left": [i for i in positions if span and i < span[0]],
            "right": [i for i in positions if span and i > span[-1]],
        }
        states = []
        for p, part in enumerate(parts):
            # W_1 acts on [h_i ; h_t]: stack its two blocks in that order.
            w_1 = np.concatenate([w["kernel"][p], w["target_kernel"][p]], axis=0)
            state = np.zeros(dim)
            if sets[part]:
                beta = np.array(
                    [
                        w["score_vector"][p] @ np.tanh(np.concatenate([hidden[b, i], h_t]) @ w_1 + w["bias"][p])
                        for i in sets[part]
                    ]
                )
                alpha = np.exp(beta - beta.max())
                alpha /= alpha.sum()
                for a, i in zip(alpha, sets[part]):
                    weights[part][b, i] = a
                    state += a * hidden[b, i]
            states.append(state)
        if mode == "vanilla":
            outputs.append(states[0])
        elif mode == "contextualized":
            outputs.append(np.concatenate(states))
        else:
            unnormalised = [
                np.exp(states[k] @ w["gate_kernels"][k] + h_t @ w["gate_target_kernels"][k] + w["gate_bias"][k])
                for k in range(3)
            ]
            total = sum(unnormalised)
            gates = [u / total for u in unnormalised]
            all_gates.append(np.stack(gates))
            outputs.append(sum(g * s for g, s in zip(gates, states)))
    return np.stack(outputs), weights, (np.stack(all_gates) if all_gates else None)


def as_dict(scores):
    return {"whole": scores} if not isinstance(scores, dict) else scores


@pytest.mark.parametrize("mode", MODES)
def test_matches_numpy_reference(mode):
    rng = np.random.default_rng(0)
    hidden, target, valid = random_batch(rng)
    layer = built_layer(mode, rng, hidden, target)
    output, scores = layer(hidden, target, hidden_mask=valid, return_attention_scores=True)
    want, want_weights, want_gates = reference(weights_of(layer), hidden, target, valid, mode)
    np.testing.assert_allclose(output, want, atol=1e-5)
    scores = as_dict(scores)
    for part, expected in want_weights.items():
        np.testing.assert_allclose(scores[part], expected, atol=1e-5, err_msg=part)
    if mode == "gated":
        np.testing.assert_allclose(scores["gates"], want_gates, atol=1e-5)
    width = 3 * D if mode == "contextualized" else D
    assert tuple(output.shape) == (len(LENGTHS), width)


def test_context_masks_are_split_per_example_inside_the_batch():
    layer = TargetedAttention(UNITS, mode="contextualized")
    target, left, right = map(np.asarray, layer.context_masks(span_mask(SPANS, T), lengths_mask(LENGTHS, T)))
    as_rows = lambda m: ["".join("x" if v else "." for v in row) for row in m]  # noqa: E731
    assert as_rows(target) == ["xx.....", "..xx...", "...x...", "..xxx..", ".....xx"]
    assert as_rows(left) == [".......", "xx.....", "xxx....", "xx.....", "xxxxx.."]
    assert as_rows(right) == ["..xxxxx", "....x..", ".......", ".....x.", "......."]


@pytest.mark.parametrize("mode", MODES)
def test_rows_sum_to_one_and_padding_and_other_parts_get_exactly_zero(mode):
    rng = np.random.default_rng(1)
    hidden, target, valid = random_batch(rng)
    layer = built_layer(mode, rng, hidden * 4, target)  # sharp distributions too
    _, scores = layer(hidden * 4, target, hidden_mask=valid, return_attention_scores=True)
    scores = {part: np.asarray(w) for part, w in as_dict(scores).items()}
    _, left, right = map(np.asarray, layer.context_masks(target, valid))
    allowed = {"whole": valid, "left": left, "right": right}
    for part in layer.parts:
        weights = scores[part]
        assert (weights >= 0).all()
        assert (weights[~allowed[part]] == 0.0).all(), part
        nonempty = allowed[part].any(axis=1)
        np.testing.assert_allclose(weights.sum(-1), nonempty.astype(float), atol=1e-6, err_msg=part)
    if mode == "gated":
        gates = np.asarray(scores["gates"])
        assert gates.shape == (len(LENGTHS), 3, D) and (gates > 0).all()
        np.testing.assert_allclose(gates.sum(axis=1), 1.0, atol=1e-6)


@pytest.mark.parametrize("mode", ["contextualized", "gated"])
def test_empty_contexts_give_zeros_and_finite_gradients(mode):
    rng = np.random.default_rng(2)
    hidden, target, valid = random_batch(rng)
    layer = built_layer(mode, rng, hidden, target)
    hidden = tf.constant(hidden)
    with tf.GradientTape() as tape:
        tape.watch(hidden)
        output, scores = layer(hidden, target, hidden_mask=valid, return_attention_scores=True)
        loss = tf.reduce_sum(output**2) + sum(tf.reduce_sum(w**2) for w in scores.values())
    grads = tape.gradient(loss, [hidden] + layer.trainable_weights)
    output = np.asarray(output)
    # Example 0 starts with its target (no left context); examples 2 and 4 end
    # with theirs (no right context).
    assert (np.asarray(scores["left"])[0] == 0).all()
    assert (np.asarray(scores["right"])[[2, 4]] == 0).all()
    if mode == "contextualized":
        assert (output[0, D : 2 * D] == 0).all(), "s_l of example 0"
        assert (output[[2, 4], 2 * D :] == 0).all(), "s_r of examples 2 and 4"
        assert (output[:, :D] != 0).all() and (output[1, D:] != 0).all()
    assert np.isfinite(output).all()
    for grad in grads:
        assert grad is not None and np.isfinite(np.asarray(grad)).all()


def test_target_positions_on_padding_are_ignored():
    rng = np.random.default_rng(3)
    hidden, target, valid = random_batch(rng)
    layer = built_layer("gated", rng, hidden, target)
    noisy = target | ~valid  # also flag every padding position
    np.testing.assert_array_equal(layer(hidden, noisy, hidden_mask=valid), layer(hidden, target, hidden_mask=valid))


def test_padding_mask_is_read_from_the_keras_mask_of_hidden():
    rng = np.random.default_rng(4)
    ids = token_batch(rng, 4, 6)
    ids[:, 0] = 1  # every row keeps its first token as the target
    target = np.zeros(ids.shape, bool)
    target[:, 0] = True
    embedded = keras.layers.Embedding(20, D, mask_zero=True)(ids)
    layer = built_layer("contextualized", rng, np.asarray(embedded), target)
    explicit = layer(np.asarray(embedded), target, hidden_mask=ids != 0)
    np.testing.assert_array_equal(layer(embedded, target), explicit)
    unmasked = layer(np.asarray(embedded), target)
    assert not np.allclose(unmasked, explicit), "the padding mask changed nothing: the test is void"


# ------------------------------------------------------------ empty target


def test_empty_target_span_is_a_clear_error_in_eager_calls():
    hidden, target, valid = random_batch(np.random.default_rng(5))
    target[1] = False
    target[3] = ~valid[3]  # a span on padding only is empty too
    layer = TargetedAttention(UNITS, mode="vanilla")
    with pytest.raises(ValueError, match=r"`target_mask` must mark at least one valid position.*examples \[1, 3\]"):
        layer(hidden, target, hidden_mask=valid)
    with pytest.raises(ValueError, match=r"examples \[1, 3\]"):
        layer(tf.constant(hidden), tf.constant(target), hidden_mask=tf.constant(valid))


def test_empty_target_span_is_an_error_with_the_backends_own_eager_tensors():
    # The check used to key on TensorFlow's `.numpy`: JAX arrays have none,
    # so there it never ran (issue 18).
    hidden, target, valid = random_batch(np.random.default_rng(5))
    target[2] = False
    layer = TargetedAttention(UNITS, mode="contextualized")
    tensors = [keras.ops.convert_to_tensor(x) for x in (hidden, target, valid)]
    with pytest.raises(ValueError, match=r"`target_mask` must mark at least one valid position.*examples \[2\]"):
        layer(tensors[0], tensors[1], hidden_mask=tensors[2])


class _ArrayWithoutNumpyMethod:
    """An eager array as JAX's is: NumPy reads it (`__array__`), but it has no `.numpy()`."""

    def __init__(self, array):
        self._array = array

    def __array__(self, dtype=None, copy=None):
        return self._array if dtype is None else self._array.astype(dtype)


def test_concrete_values_are_found_whatever_the_tensor_type_and_only_when_known():
    target = np.array([[True, False], [False, False]])
    np.testing.assert_array_equal(_checks.concrete_values(_ArrayWithoutNumpyMethod(target)), target)
    np.testing.assert_array_equal(_checks.concrete_values(keras.ops.convert_to_tensor(target)), target)
    assert _checks.concrete_values(None) is None
    assert _checks.concrete_values(keras.KerasTensor((2, 2), dtype="bool")) is None
    # A traced tensor has no values yet: the check is skipped.
    seen = []
    record = lambda t: seen.append(_checks.concrete_values(t)) or t  # noqa: E731
    if keras.backend.backend() == "tensorflow":
        tf.function(record)(tf.constant(target))
    elif keras.backend.backend() == "jax":
        import jax

        jax.jit(record)(target)
    else:
        seen.append(None)  # torch traces nothing in an eager call
    assert seen == [None]


@pytest.mark.parametrize("mode", MODES)
def test_empty_target_span_inside_a_traced_function_is_finite(mode):
    rng = np.random.default_rng(6)
    hidden, target, valid = random_batch(rng)
    layer = built_layer(mode, rng, hidden, target)
    target[1] = False
    traced = tf.function(lambda h, t, m: layer(h, t, hidden_mask=m, return_attention_scores=True))
    output, scores = traced(hidden, target, valid)
    want, want_weights, _ = reference(weights_of(layer), hidden, target, valid, mode)
    assert np.isfinite(np.asarray(output)).all()
    np.testing.assert_allclose(output, want, atol=1e-5)  # h_t = 0, no left or right context
    for part, expected in want_weights.items():
        np.testing.assert_allclose(as_dict(scores)[part], expected, atol=1e-5)


# ------------------------------------------------------------------ gradients


@pytest.mark.parametrize("mode", MODES)
def test_gradients_match_finite_differences_in_float64(mode):
    rng = np.random.default_rng(7)
    length, dim = 5, 3
    hidden = rng.normal(size=(2, length, dim))
    target = span_mask([(0, 0), (1, 2)], length)  # no left context / both contexts
    valid = lengths_mask([5, 4], length)
    layer = TargetedAttention(2, mode=mode, dtype="float64")
    layer(hidden, target, hidden_mask=valid)
    randomize(layer, rng)
    readout = rng.normal(size=(2, 3 * dim if mode == "contextualized" else dim))

    def loss(h):
        return tf.reduce_sum(layer(h, target, hidden_mask=valid) * readout)

    tensor = tf.constant(hidden)
    with tf.GradientTape() as tape:
        tape.watch(tensor)
        value = loss(tensor)
    assert value.dtype == tf.float64
    analytic = tape.gradient(value, [tensor] + layer.trainable_weights)

    assert_input_gradients_match(loss, [hidden], analytic, names=["hidden"])
    assert_weight_gradients_match(layer, lambda: loss(tensor), analytic[1:], min_effect=1e-4)


# -------------------------------------------------------------- serialisation


def bilstm_model(mode, vocabulary=20, **layer_kwargs):
    """token ids -> Embedding(mask_zero) -> BiLSTM -> TargetedAttention -> Dense(3)."""
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    target = keras.Input((None,), dtype="bool", name="target")
    embedded = keras.layers.Embedding(vocabulary, 6, mask_zero=True)(tokens)
    hidden = keras.layers.Bidirectional(keras.layers.LSTM(3, return_sequences=True))(embedded)
    sentence = TargetedAttention(UNITS, mode=mode, name="attention", **layer_kwargs)(hidden, target)
    return keras.Model([tokens, target], keras.layers.Dense(3)(sentence))


def target_batch(rng, ids):
    """A random contiguous span inside each row's valid (non-zero) tokens."""
    lengths = (ids != 0).sum(axis=1)
    first = rng.integers(0, lengths)
    last = rng.integers(first, lengths)
    return span_mask(np.stack([first, last], axis=1), ids.shape[1])


@pytest.mark.parametrize("mode", MODES)
def test_get_config_round_trip_gives_identical_outputs(mode):
    rng = np.random.default_rng(8)
    hidden, target, valid = random_batch(rng)
    layer = built_layer(mode, rng, hidden, target, dropout=0.25, seed=3, kernel_initializer="he_normal")
    config = layer.get_config()
    clone = TargetedAttention.from_config(config)
    assert clone.get_config() == config
    assert (clone.mode, clone.units, clone.dropout, clone.seed) == (mode, UNITS, 0.25, 3)
    clone(hidden, target)
    clone.set_weights(layer.get_weights())
    np.testing.assert_array_equal(clone(hidden, target, hidden_mask=valid), layer(hidden, target, hidden_mask=valid))


@pytest.mark.parametrize("mode", MODES)
def test_functional_model_honours_the_keras_mask(mode):
    """Extra padding must not change a prediction: the embedding's mask reaches the layer."""
    rng = np.random.default_rng(14)
    model = bilstm_model(mode)
    randomize_model(model, rng)
    ids = token_batch(rng, 3, 5)
    target = target_batch(rng, ids)
    padded_ids = np.pad(ids, ((0, 0), (0, 3)))
    padded_target = np.pad(target, ((0, 0), (0, 3)))
    np.testing.assert_allclose(model([padded_ids, padded_target]), model([ids, target]), atol=1e-6)


def test_symbolic_shapes_of_outputs_and_scores():
    hidden = keras.Input((None, D))
    target = keras.Input((None,), dtype="bool")
    vanilla, weights = TargetedAttention(UNITS)(hidden, target, return_attention_scores=True)
    assert vanilla.shape == (None, D) and weights.shape == (None, None)
    context, scores = TargetedAttention(UNITS, mode="contextualized")(hidden, target, return_attention_scores=True)
    assert context.shape == (None, 3 * D) and sorted(scores) == ["left", "right", "whole"]
    gated, scores = TargetedAttention(UNITS, mode="gated")(hidden, target, return_attention_scores=True)
    assert gated.shape == (None, D) and scores["gates"].shape == (None, 3, D)


# ------------------------------------------------------------ mixed precision


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(mode, policy):
    rng = np.random.default_rng(10)
    hidden, target, valid = random_batch(rng)
    layer = TargetedAttention(UNITS, mode=mode, dtype=policy)
    # Large states give large logits: a float16 softmax would overflow.
    output, scores = layer(hidden * 30, target, hidden_mask=valid, return_attention_scores=True)
    compute = policy.split("_")[1]
    assert output.dtype == compute
    assert all(w.dtype == compute for w in as_dict(scores).values())
    assert all(variable.dtype == "float32" for variable in layer.weights)
    assert np.isfinite(np.asarray(output, np.float32)).all()
    whole = np.asarray(as_dict(scores)["whole"], np.float32)
    np.testing.assert_allclose(whole.sum(-1), 1.0, atol=1e-2)
    assert (whole[~valid] == 0).all()
    if mode == "gated":
        np.testing.assert_allclose(np.asarray(scores["gates"], np.float32).sum(1), 1.0, atol=1e-2)


# ------------------------------------------------------------------- dropout


def test_dropout_acts_only_in_training():
    rng = np.random.default_rng(11)
    hidden, target, valid = random_batch(rng)
    layer = built_layer("vanilla", rng, hidden, target, dropout=0.5, seed=1)
    _, inference = layer(hidden, target, hidden_mask=valid, return_attention_scores=True)
    _, again = layer(hidden, target, hidden_mask=valid, return_attention_scores=True, training=False)
    np.testing.assert_array_equal(inference, again)
    _, dropped = layer(hidden, target, hidden_mask=valid, return_attention_scores=True, training=True)
    dropped, inference = np.asarray(dropped), np.asarray(inference)
    assert (dropped[valid] == 0).any()
    kept = dropped != 0
    np.testing.assert_allclose(dropped[kept], inference[kept] * 2, rtol=1e-6)


# ----------------------------------------------------------------- XLA training


@pytest.mark.parametrize("mode", MODES)
def test_bilstm_model_with_unknown_lengths_fits_with_xla(mode):
    rng = np.random.default_rng(12)
    model = bilstm_model(mode)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    build_optimizer(model)
    assert model.jit_compile, "Keras turned XLA off for this model"
    attention = model.get_layer("attention")
    before = [w.numpy().copy() for w in attention.trainable_weights]
    ids = token_batch(rng, 16, 7, min_length=2)
    y = rng.integers(0, 3, size=16)
    history = model.fit([ids, target_batch(rng, ids)], y, batch_size=8, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    other = token_batch(rng, 4, 11)
    predictions = model.predict([other, target_batch(rng, other)], verbose=0)
    assert predictions.shape == (4, 3) and np.isfinite(predictions).all()
    for old, new in zip(before, attention.trainable_weights):
        assert not np.allclose(old, new.numpy()), f"{new.path} did not train"


# --------------------------------------------------------------------- export


@pytest.mark.parametrize("mode", MODES)
def test_exports_to_saved_model_and_onnx_with_parity(mode, tmp_path):
    rng = np.random.default_rng(13)
    model = bilstm_model(mode)
    randomize_model(model, rng)
    batches = []
    for batch, length in [(3, 6), (1, 9)]:
        ids = token_batch(rng, batch, length)
        batches.append({"tokens": ids, "target": target_batch(rng, ids)})
    assert model.inputs[1].dtype == "bool"
    assert_export_parity(model, batches, tmp_path, atol=1e-5)


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"units": 0}, r"`units` must be a positive integer; got 0"),
        ({"units": -2}, r"`units` must be a positive integer; got -2"),
        ({"units": 2.5}, r"`units` must be a positive integer; got 2.5"),
        (
            {"units": 4, "mode": "gates"},
            r"unknown `mode` 'gates'; expected one of 'vanilla', 'contextualized', 'gated'",
        ),
        ({"units": 4, "dropout": 1.0}, r"`dropout` must be a number in \[0, 1\); got 1.0"),
    ],
    ids=["units_zero", "units_negative", "units_float", "mode", "dropout"],
)
def test_bad_constructor_arguments(kwargs, message):
    with pytest.raises(ValueError, match="TargetedAttention: " + message):
        TargetedAttention(**kwargs)


def _zeros(*shape, dtype="float32"):
    return np.zeros(shape, dtype)


@pytest.mark.parametrize(
    "hidden, target, mask, message",
    [
        ((2, 5), (2, 5), None, r"`hidden` must have rank 3 \(batch, T, d\); got shape \(2, 5\)"),
        (
            (2, 5, 4),
            (2, 6),
            None,
            r"`target_mask` must have shape \(batch, T\) = \(2, 5\), matching `hidden` \(2, 5, 4\); got shape \(2, 6\)",
        ),
        ((2, 5, 4), (2, 5, 1), None, r"`target_mask` must have shape \(batch, T\) = \(2, 5\).*got shape \(2, 5, 1\)"),
        ((2, 5, 4), (3, 5), None, r"`target_mask` must have shape \(batch, T\) = \(2, 5\).*got shape \(3, 5\)"),
        ((2, 5, 4), (2, 5), (2, 4), r"`hidden_mask` must have shape \(batch, T\) = \(2, 5\).*got shape \(2, 4\)"),
    ],
    ids=["hidden_rank", "target_length", "target_rank", "target_batch", "mask"],
)
def test_bad_shapes(hidden, target, mask, message):
    target = _zeros(*target, dtype=bool)
    target[..., 0] = True
    kwargs = {} if mask is None else {"hidden_mask": np.ones(mask, bool)}
    with pytest.raises(ValueError, match="TargetedAttention: " + message):
        TargetedAttention(UNITS)(_zeros(*hidden), target, **kwargs)


def test_bad_shapes_are_caught_symbolically_and_unknown_size_at_build():
    with pytest.raises(ValueError, match=r"`target_mask` must have shape \(batch, T\) = \(None, 5\)"):
        TargetedAttention(UNITS)(keras.Input((5, 4)), keras.Input((6,)))
    with pytest.raises(ValueError, match=r"the last dimension of `hidden` must be known"):
        TargetedAttention(UNITS)(keras.Input((None, None)), keras.Input((None,)))


# ------------------------------------------------------------------------ docs


def test_docstring_has_formulas_paper_shapes_and_a_running_example():
    doc = inspect.getdoc(TargetedAttention)
    for text in ("Paper:", "Shapes:", "Example:", "arXiv:", "Liu & Zhang", "s~  = z * s"):
        assert text in doc
    (example,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    namespace = {"np": np, "keras_attention": keras_attention}
    exec(compile(example, "<TargetedAttention example>", "exec"), namespace)
    assert tuple(namespace["sentence"].shape) == (2, 8)
    assert (np.asarray(namespace["scores"]["left"])[1] == 0).all()
    np.testing.assert_allclose(np.asarray(namespace["scores"]["gates"]).sum(1), 1.0, atol=1e-6)
