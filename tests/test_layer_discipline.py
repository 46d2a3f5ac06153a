"""The test discipline every attention layer meets, run over `layer_cases.CASES`.

NumPy references of each formula, hand-computed cases, masking invariants,
finite-difference gradients, serialisation, mixed precision, XLA training with
unknown lengths and export to SavedModel / ONNX.

Backend-neutral: it runs on TensorFlow, JAX and PyTorch (`make test-jax`,
`make test-torch`), with gradients from tests/backend_gradients.py.
"""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests import reference
from tests.backend_gradients import value_and_gradients
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import (
    CASES,
    INPUT_NAMES,
    SCORE_CASES,
    SOFT_CASES,
    VaryingLengthBatches,
    built_layer,
    case_params,
    data,
    dims,
    functional_model,
    lengths_mask,
    model_inputs,
    randomize,
    randomize_model,
    unknown_shape_dataset,
    weights_of,
)

pytestmark = pytest.mark.any_backend

B, TQ, TV = 3, 4, 6
BACKEND = keras.backend.backend()

# The float64 finite-difference checks run on TensorFlow only: a float32
# finite difference is too coarse to hold the analytic gradients to 1e-5.
_FLOAT64_SKIPS = {
    "jax": "float64: JAX computes in float32 unless jax_enable_x64 is set, which the suite does not set",
    "torch": "float64: on PyTorch, Keras's type promotion (keras.backend.result_type) turns float64 into "
    "float32, so keras.ops.matmul of two float64 tensors gives float32 and a float64 layer mixes dtypes",
}
float64_only_where_supported = pytest.mark.skipif(
    BACKEND in _FLOAT64_SKIPS,
    reason=_FLOAT64_SKIPS.get(BACKEND, "") + " (TensorFlow runs these finite-difference checks)",
)


# The fit test compiles its train step with XLA on TensorFlow, with jax.jit
# on JAX; on PyTorch it trains eagerly (jit_compile=True there is torch.compile).
FIT_JIT_COMPILE = BACKEND != "torch"


def to_numpy(x):
    return ops.convert_to_numpy(x)


def random_inputs(rng, case, rank, separate_key, dtype="float32"):
    dq, dk, dv = dims(case, separate_key)
    query_shape = (B, dq) if rank == 2 else (B, TQ, dq)
    query = rng.normal(size=query_shape).astype(dtype)
    value = rng.normal(size=(B, TV, dv)).astype(dtype)
    key = rng.normal(size=(B, TV, dk)).astype(dtype) if separate_key else None
    return query, value, key


# ----------------------------------------------------------------- the formula


@case_params(SCORE_CASES)
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
    np.testing.assert_allclose(to_numpy(weights), want_weights, atol=1e-5)
    np.testing.assert_allclose(to_numpy(context), want_context, atol=1e-5)
    expected_shape = (B, value.shape[-1]) if rank == 2 else (B, TQ, value.shape[-1])
    assert tuple(context.shape) == expected_shape


# ----------------------------------------------------------------- hand cases


@case_params(SCORE_CASES)
def test_identical_keys_give_the_mean_of_the_valid_values(case):
    """All keys equal -> all scores equal -> uniform weights over valid positions."""
    rng = np.random.default_rng(1)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    key = np.repeat(key[:, :1], TV, axis=1)
    lengths = [6, 2, 4]
    layer = built_layer(case, rng, query, value, key)
    context = to_numpy(layer(query, value, key=key, value_mask=lengths_mask(lengths, TV)))
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
    np.testing.assert_allclose(to_numpy(weights), want, atol=1e-6)


# ----------------------------------------------------------------- invariants


@case_params(SCORE_CASES)
def test_rows_sum_to_one_and_padding_gets_exactly_zero(case):
    rng = np.random.default_rng(3)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    query, value, key = query * 4, value * 4, key * 4  # sharp distributions too
    lengths = [1, 5, 6]
    layer = built_layer(case, rng, query, value, key)
    _, weights = layer(query, value, key=key, value_mask=lengths_mask(lengths, TV), return_attention_scores=True)
    weights = to_numpy(weights)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    for b, length in enumerate(lengths):
        assert (weights[b, :, length:] == 0.0).all()
    if case.hard:
        assert set(np.unique(weights)) <= {0.0, 1.0}


@case_params(SCORE_CASES)
@pytest.mark.parametrize("training", [False, True])
def test_fully_masked_row_gives_zeros_and_finite_gradients(case, training):
    rng = np.random.default_rng(4)
    query, value, key = random_inputs(rng, case, 3, separate_key=True)
    layer = built_layer(case, rng, query, value, key)
    value_mask = lengths_mask([0, 3, 6], TV)  # example 0 has no valid position
    query_mask = lengths_mask([4, 0, 2], TQ)  # example 1 has no valid query
    outputs = {}

    def loss(query, value, key):
        context, weights = layer(
            query,
            value,
            key=key,
            value_mask=value_mask,
            query_mask=query_mask,
            return_attention_scores=True,
            training=training,
        )
        outputs.update(context=context, weights=weights)
        return ops.sum(context**2) + ops.sum(weights)

    # Outside the gradient computation (JAX traces it), the same call.
    _, grads = value_and_gradients(loss, [query, value, key], layer.trainable_weights)
    loss(query, value, key)
    context, weights = to_numpy(outputs["context"]), to_numpy(outputs["weights"])
    assert (context[0] == 0).all() and (weights[0] == 0).all()
    assert (context[1] == 0).all() and (weights[1] == 0).all()
    assert (context[2, 2:] == 0).all(), "masked query positions give zero output"
    assert np.isfinite(context).all() and np.isfinite(weights).all()
    for grad in grads:
        if grad is not None:
            assert np.isfinite(grad).all()


# ------------------------------------------------------------------ gradients


@float64_only_where_supported
@case_params(SCORE_CASES)
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
        return ops.sum(layer(q, v, key=k, value_mask=value_mask) * readout)

    arrays = [query, value, key]
    value_of_loss, analytic = value_and_gradients(loss, arrays, layer.trainable_weights)
    assert keras.backend.standardize_dtype(value_of_loss.dtype) == "float64"

    # Hard selection is piecewise constant in the query, key and score weights:
    # only the value's gradient is a true derivative (checked); the others are
    # straight-through estimates (checked in test_hard_attention.py).
    checks = [1] if case.hard else [0, 1, 2]
    assert_input_gradients_match(loss, arrays, analytic, indices=checks)
    if case.hard:
        return
    tensors = [ops.convert_to_tensor(x) for x in arrays]
    assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[3:])


# ------------------------------------------------- every row of the table
# The checks below run over every row (score layers, the other layers, the
# cells through AttentionDecoder, the decoders), driven on the shared inputs.
# Masks, empty inputs and fully masked rows: test_empty_inputs.py; both mixed
# policies: test_precision.py; random shapes and policies: test_properties.py.


def _public_layer_classes():
    classes = {getattr(ka, name) for name in ka.__all__}
    return {c for c in classes if isinstance(c, type) and issubclass(c, keras.layers.Layer)}


# Public classes that are bases, not mechanisms: every row's layer is one.
BASES = {ka.AttentionLayer, ka.BaseAttention}


def test_every_public_layer_cell_and_decoder_has_a_row():
    covered = set()
    for case in CASES:
        layer = case.make(dtype="float32")
        covered.update(type(sub) for sub in layer._flatten_layers(include_self=True, recursive=True))
        if case.scores is not None:
            assert isinstance(layer, (ka.BaseAttention, ka.HardAttention))
    missing = _public_layer_classes() - BASES - covered
    assert not missing, f"no row of tests/layer_cases.py uses {sorted(c.__name__ for c in missing)}"
    # Today's score layers keep their NumPy-reference rows (a new score layer
    # adds its own row; nothing else needs to change here).
    assert {type(case.make()) for case in SCORE_CASES} >= {
        ka.AdditiveAttention,
        ka.DotAttention,
        ka.ScaledDotAttention,
        ka.GeneralAttention,
        ka.ConcatAttention,
        ka.HardAttention,
    }
    assert len({case.id for case in CASES}) == len(CASES)


def _ordinary(rng, dtype="float32", batch=3, query_length=3, value_length=4):
    """A batch where every example has at least one valid query and value."""
    lengths = dict(
        query_lengths=rng.integers(1, query_length + 1, size=batch),
        value_lengths=rng.integers(1, value_length + 1, size=batch),
    )
    return data(rng, batch, query_length, value_length, dtype=dtype, **lengths)


def _build(case, layer, dtype="float32"):
    """Build `layer` by a symbolic call on the shared inputs: an eager call
    only built it too, at the cost of a run of every op and loop (on JAX a
    decoder's loop traced and compiled for each)."""
    case.run(layer, *model_inputs(dtype).values())
    return layer


def _built(case, rng, dtype="float32"):
    layer = _build(case, case.make(dtype=dtype), dtype)
    randomize(layer, rng)
    return layer


@case_params()
def test_get_config_round_trip_gives_identical_outputs(case):
    rng = np.random.default_rng(6)
    inputs = _ordinary(rng)
    layer = _built(case, rng)
    config = layer.get_config()
    assert {key: config[key] for key in case.config} == case.config
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    _build(case, clone)
    clone.set_weights(layer.get_weights())
    got, want = case.run(clone, *inputs), case.run(layer, *inputs)
    assert got.keys() == want.keys() and len(clone.losses) == len(layer.losses)
    for name in want:
        assert got[name].shape == want[name].shape
        if not case.random:
            np.testing.assert_array_equal(to_numpy(got[name]), to_numpy(want[name]), err_msg=f"{case.id} {name}")


@case_params(check="model")
def test_keras_file_round_trip_without_custom_objects(case, tmp_path):
    rng = np.random.default_rng(7)
    model, _ = functional_model([case])
    randomize_model(model, rng)
    inputs = dict(zip(INPUT_NAMES, _ordinary(rng)))
    want = model(inputs)
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")  # safe mode, no custom_objects
    layer, original = loaded.get_layer(case.id), model.get_layer(case.id)
    assert type(layer) is type(original)

    # Nested layers (cells, embeddings, an ensemble's members) may be
    # renamed when loaded: every entry but theirs (a layer's config has a name).
    def is_layer(value):
        return isinstance(value, dict) and "name" in (value.get("config") or {})

    def own(config):
        return {
            k: v
            for k, v in config.items()
            if not (is_layer(v) or (isinstance(v, list) and v and all(map(is_layer, v))))
        }

    assert own(layer.get_config()) == own(original.get_config())
    assert [type(sub) for sub in layer._flatten_layers()] == [type(sub) for sub in original._flatten_layers()]
    got = loaded(inputs)
    for name in want:
        if not case.random:
            np.testing.assert_array_equal(to_numpy(got[name]), to_numpy(want[name]), err_msg=f"{case.id} {name}")


@float64_only_where_supported
@case_params([case for case in CASES if case.scores is None], check="gradients")
def test_every_row_s_gradients_match_finite_differences_in_float64(case):
    """Input gradients (of the inputs the output reads) and weight gradients;
    the score layers also check the key's in the test above."""
    rng = np.random.default_rng(5)
    query, value, query_valid, value_valid = data(
        rng, 2, 2, 3, query_lengths=[2, 1], value_lengths=[3, 2], dtype="float64"
    )
    layer = _built(case, rng, dtype="float64")
    shape = case.readout(case.run(layer, query, value, query_valid, value_valid)).shape
    readout = rng.normal(size=shape)

    def loss(q, v):
        output = case.readout(case.run(layer, q, v, query_valid, value_valid))
        return ops.sum(output * readout) + sum(layer.losses)

    value_of_loss, analytic = value_and_gradients(loss, [query, value], layer.trainable_weights)
    assert keras.backend.standardize_dtype(value_of_loss.dtype) == "float64"
    # Arrays of more than 8 entries along 3 random directions (gradient_check):
    # the Transformer stacks' rows have dozens of weights of thousands of
    # entries; entry by entry they took minutes each.
    assert_input_gradients_match(
        loss, [query, value], analytic, indices=case.inputs_used, names=["query", "value"], max_entries=8
    )
    if "weight_gradients" not in case.skip:
        tensors = [ops.convert_to_tensor(x) for x in (query, value)]
        assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[2:], max_entries=8)


@float64_only_where_supported
def test_the_directional_gradient_check_finds_an_error_in_any_one_entry():
    """The check above samples directions, not entries: every one-entry error
    of 0.1% of the gradient's norm, in a weight or an input, must still fail."""
    rng = np.random.default_rng(3)
    inputs = rng.normal(size=(3, 4))
    layer = keras.layers.Dense(6, activation="tanh", dtype="float64")
    layer.build((3, 4))
    randomize(layer, rng)
    readout = rng.normal(size=(3, 6))

    def loss(x):
        return ops.sum(layer(x) * readout)

    _, analytic = value_and_gradients(loss, [inputs], layer.trainable_weights)
    tensor = ops.convert_to_tensor(inputs)

    def weight_loss():
        return loss(tensor)

    assert_input_gradients_match(loss, [inputs], analytic, max_entries=8)
    assert_weight_gradients_match(layer, weight_loss, analytic[1:], max_entries=8)
    for which, grad in enumerate(analytic[:2]):  # the input (12 entries), the kernel (24)
        for index in np.ndindex(grad.shape):
            wrong = [g.copy() for g in analytic]
            wrong[which][index] += 1e-3 * np.linalg.norm(grad)
            with pytest.raises(AssertionError):
                if which == 0:
                    assert_input_gradients_match(loss, [inputs], wrong, max_entries=8)
                else:
                    assert_weight_gradients_match(layer, weight_loss, wrong[1:], max_entries=8)


@case_params(check="fit")
def test_functional_model_with_unknown_lengths_fits_with_xla(case):
    rng = np.random.default_rng(9)
    inputs = model_inputs()
    output = case.readout(case.run(case.make(name=case.id), *inputs.values()))
    axes = tuple(range(1, len(output.shape)))  # every axis but the batch
    features = keras.ops.stack([keras.ops.mean(output, axes), keras.ops.mean(output**2, axes)], axis=-1)
    model = keras.Model(inputs, keras.layers.Dense(3)(features))
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=FIT_JIT_COMPILE,
    )
    # On TensorFlow the step is then traced once per shape, not twice for the
    # first (this test's 33 rows: 147 -> 105 s of CPU).
    ka.training.build_optimizer(model)
    attention = model.get_layer(case.id)
    before = [w.numpy().copy() for w in attention.trainable_weights]
    batches = [
        (dict(zip(INPUT_NAMES, _ordinary(rng, "float32", *shape))), rng.integers(0, 3, size=shape[0]))
        for shape in ((8, 5, 7), (5, 6, 4))
    ]
    if BACKEND == "tensorflow":
        # A tf.data pipeline: every dimension unknown when XLA compiles the step.
        dataset = unknown_shape_dataset(batches, features_known=True)
    else:
        # NumPy batches of varying batch size and lengths, one per step.
        dataset = VaryingLengthBatches(batches)
    history = model.fit(dataset, epochs=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    # Other lengths reuse the same model (the shapes were never fixed), called
    # directly: predict would compile a third XLA program for what the train
    # step already ran compiled at two shapes.
    predictions = ops.convert_to_numpy(model(dict(zip(INPUT_NAMES, _ordinary(rng, "float32", 4, 3, 11)))))
    assert predictions.shape == (4, 3) and np.isfinite(predictions).all()
    for old, new in zip(before, attention.trainable_weights):
        assert not np.allclose(old, new.numpy()), f"{new.path} did not train"


# Export parity of every row (each exported alone): test_empty_inputs_exported.py,
# on ordinary batches of two sizes and on empty ones.
