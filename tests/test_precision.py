"""Half precision: every layer stays finite on large inputs under float16 and
bfloat16 policies and agrees with float32 on ordinary ones.

Backend-neutral: runs on TensorFlow, JAX and PyTorch (every row of
tests/layer_cases.py: the public layers, the cells and the decoders)."""

import functools

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests import layer_cases
from tests.layer_cases import DRIVERS, check_weights, driver_params

pytestmark = pytest.mark.any_backend

# PointerNetwork has no attention weights and its ids depend on ties broken
# by rounding; its precision is covered in test_pointer.
PRECISION_DRIVERS = [d for d in DRIVERS.values() if d.id not in ("pointer_network",)]
LENGTHS = dict(query_lengths=[3, 2, 0], value_lengths=[4, 1, 3])


def _built(driver, dtype):
    """A row's layer, built by a symbolic call: an eager call, as the test's
    first was, only built it, and cost a run of every loop and op."""
    layer = driver.make(dtype=dtype)
    driver.run(layer, *layer_cases.model_inputs().values())
    return layer


@functools.cache
def _float32_twin(driver_id):
    """A row's float32 weights (random) and, unless it draws random numbers,
    its outputs on the ordinary inputs: the same for both policies, computed
    once for the two (with the symbolic builds, the module's CPU time on
    TensorFlow 58 -> 40 s, on JAX 126 -> 115 s)."""
    driver = DRIVERS[driver_id]
    full = _built(driver, "float32")
    rng = np.random.default_rng(1)
    for variable in full.weights:
        if variable.trainable:
            variable.assign(rng.normal(0, 0.5, variable.shape).astype(variable.dtype))
    want = None
    if not driver.random:
        want = {name: ops.convert_to_numpy(v) for name, v in driver.run(full, *_ordinary()).items()}
    return full.get_weights(), want


def _ordinary():
    """The ordinary inputs: the test's first draw of its generator."""
    return layer_cases.data(np.random.default_rng(0), 3, 3, 4, **LENGTHS)


@driver_params(PRECISION_DRIVERS)
@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_large_inputs_stay_finite_and_ordinary_ones_match_float32(driver, policy):
    rng = np.random.default_rng(0)
    lengths = LENGTHS
    ordinary = layer_cases.data(rng, 3, 3, 4, **lengths)
    weights, want = _float32_twin(driver.id)
    low = _built(driver, policy)
    low.set_weights(weights)

    # x300: a float16 dot product of such inputs is far past 65504.
    query, value, query_valid, value_valid = layer_cases.data(rng, 3, 3, 4, scale=300.0, **lengths)
    outputs = driver.run(low, query, value, query_valid, value_valid)
    results = {k: ops.convert_to_numpy(v).astype(np.float64) for k, v in outputs.items()}
    for name, result in results.items():
        assert np.isfinite(result).all(), f"{driver.id} {name} under {policy} is not finite at x300"
    if "weights" in results and driver.weights is not None:
        check_weights(driver, results["weights"], query_valid, value_valid, atol=2e-2)
    compute = policy.split("_")[1]
    for name, tensor in outputs.items():
        # The decodings return their alignments in float32.
        if name == "output" or (name == "weights" and driver.zero_context):
            assert keras.backend.standardize_dtype(tensor.dtype) == compute, f"{driver.id} {name}"
    assert all(
        keras.backend.standardize_dtype(v.dtype) == "float32"
        for v in low.weights
        if keras.backend.is_float_dtype(v.dtype)
    )

    # x30, the tighter tolerance: large logits still, a float16 masking
    # constant or softmax would overflow.
    inputs = layer_cases.data(rng, 3, 3, 4, scale=30.0, **lengths)
    if driver.weights is not None and "weights" in results:
        check_weights(driver, ops.convert_to_numpy(driver.run(low, *inputs)["weights"]), *inputs[2:], atol=1e-2)

    if driver.random:
        return
    got = driver.run(low, *ordinary)
    for name in want:
        if name in driver.ids:
            continue
        if name == "scores":  # a sum of decoding log-probabilities
            continue
        np.testing.assert_allclose(
            ops.convert_to_numpy(got[name]).astype(np.float32),
            want[name].astype(np.float32),
            atol=5e-2 if policy == "mixed_bfloat16" else 1e-2,
            err_msg=f"{driver.id} {name}",
        )


@pytest.mark.parametrize(
    "make",
    [lambda: ka.ConcatAttention(dtype="mixed_float16"), lambda: ka.GeneralAttention(dtype="mixed_float16")],
    ids=["concat_linear", "general"],
)
def test_projections_that_are_scores_do_not_overflow_float16(make):
    """The linear concat score w^T [k ; q] and the general key projection
    k^T W are sums of d products: with d = 512, inputs of 300 and weights of
    0.5 each is 76800, past float16's 65504 (inf + inf in the score, then
    inf - inf in the softmax: NaN)."""
    layer = make()
    query, value = np.full((2, 3, 512), 300.0, "float32"), np.full((2, 5, 512), 300.0, "float32")
    value[1] *= -1
    layer(query, value)
    for variable in layer.weights:
        variable.assign(np.full(variable.shape, 0.5, "float32"))
    context, weights = layer(
        query, value, value_mask=np.array([[1, 1, 1, 0, 0], [1] * 5], bool), return_attention_scores=True
    )
    weights = ops.convert_to_numpy(weights).astype(np.float32)
    assert np.isfinite(ops.convert_to_numpy(context).astype(np.float32)).all() and np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-3)
    assert (weights[0, :, 3:] == 0).all()
