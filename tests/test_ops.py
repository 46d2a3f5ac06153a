"""keras_attention.ops: masked_softmax and sequence_mask."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from keras_attention.ops import masked_softmax, safe_cumprod, sequence_mask
from tests import reference


def test_masked_softmax_hand_case():
    got = masked_softmax(np.array([[1.0, 2.0, 3.0]], "float32"), np.array([[True, True, False]]))
    e = np.exp([1.0, 2.0])
    np.testing.assert_allclose(got, [[e[0] / e.sum(), e[1] / e.sum(), 0.0]], atol=1e-7)


def test_masked_softmax_without_mask_is_softmax():
    scores = np.random.default_rng(0).normal(size=(3, 5)).astype("float32")
    np.testing.assert_allclose(masked_softmax(scores), reference.masked_softmax(scores), atol=1e-6)


def test_masked_softmax_along_another_axis():
    scores = np.random.default_rng(1).normal(size=(4, 3)).astype("float32")
    mask = np.array([[1], [1], [0], [1]], bool)
    got = np.asarray(masked_softmax(scores, mask, axis=0))
    want = reference.masked_softmax(scores.T, mask.T).T
    np.testing.assert_allclose(got, want, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    scores=hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=6),
        elements=st.floats(-1e4, 1e4, width=32),
    ),
    data=st.data(),
)
def test_masked_softmax_invariants(scores, data):
    mask = data.draw(hnp.arrays(bool, scores.shape))
    weights = np.asarray(masked_softmax(scores, mask))
    assert np.isfinite(weights).all()
    assert (weights[~mask] == 0).all(), "padding gets exactly zero"
    sums = weights.sum(-1)
    has_valid = mask.any(-1)
    np.testing.assert_allclose(sums[has_valid], 1.0, atol=1e-5)
    assert (sums[~has_valid] == 0).all(), "a fully masked row gives zeros"
    np.testing.assert_allclose(weights, reference.masked_softmax(scores, mask), atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_masked_softmax_low_precision_large_logits(dtype):
    """Logits near the float16 limit: no overflow to inf, no NaN from masking."""
    scores = tf.constant([[6.0e4, 5.99e4, -6.0e4, 6.0e4]], dtype=dtype)
    mask = np.array([[True, True, True, False]])
    weights = masked_softmax(scores, mask)
    assert weights.dtype == dtype
    got = np.asarray(tf.cast(weights, "float32"))
    want = reference.masked_softmax(np.asarray(tf.cast(scores, "float32")), mask)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, atol=1e-2)
    assert got[0, 3] == 0


def test_masked_softmax_fully_masked_row_has_finite_zero_gradient():
    scores = tf.constant([[1.0, 2.0], [3.0, 4.0]])
    mask = np.array([[False, False], [True, True]])
    with tf.GradientTape() as tape:
        tape.watch(scores)
        out = masked_softmax(scores, mask)
        loss = tf.reduce_sum(out * tf.constant([[1.0, 2.0], [3.0, 5.0]]))
    grad = tape.gradient(loss, scores).numpy()
    assert np.isfinite(grad).all()
    np.testing.assert_array_equal(grad[0], [0.0, 0.0])


def test_masked_softmax_float64_stays_float64():
    out = masked_softmax(np.array([[1.0, 2.0]]), np.array([[True, True]]))
    assert out.dtype == "float64"


def test_masked_softmax_rejects_mask_of_other_rank():
    with pytest.raises(ValueError, match=r"`mask` must have the same rank.*\(3,\).*\(1, 3\)"):
        masked_softmax(np.zeros((1, 3), "float32"), np.ones((3,), bool))


def test_sequence_mask():
    np.testing.assert_array_equal(
        sequence_mask([1, 3, 0], maxlen=4),
        [[1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]],
    )
    assert sequence_mask(np.array([2, 5])).shape == (2, 5)


def test_sequence_mask_errors():
    with pytest.raises(ValueError, match=r"`lengths` must be a rank-1 tensor.*\(2, 2\)"):
        sequence_mask(np.ones((2, 2), "int32"))
    with pytest.raises(ValueError, match=r"sequence_mask: `maxlen` must be an integer >= 0; got -1"):
        sequence_mask([1], maxlen=-1)


@pytest.mark.parametrize("dtype", ["int32", "int64", "uint8", "bool"])
def test_masked_softmax_of_integer_scores_is_computed_and_returned_in_float32(dtype):
    scores = np.array([[1, 2, 3], [0, 1, 1]]).astype(dtype)
    mask = np.array([[True, True, False], [True, True, True]])
    weights = masked_softmax(scores, mask)
    assert weights.dtype == "float32"
    logits = scores.astype(np.float64)
    want = np.where(mask, np.exp(logits), 0.0)
    np.testing.assert_allclose(weights, want / want.sum(-1, keepdims=True), rtol=1e-6)
    plain = masked_softmax(scores)
    assert plain.dtype == "float32"
    np.testing.assert_allclose(plain, np.exp(logits) / np.exp(logits).sum(-1, keepdims=True), rtol=1e-6)


def _tfa_safe_cumprod(x, axis=0, exclusive=False, reverse=False):
    """tfa.seq2seq.safe_cumprod in NumPy, the product spelled out with a loop."""
    x = np.moveaxis(np.clip(x, np.finfo(x.dtype).tiny, 1.0), axis, -1)
    if reverse:
        x = x[..., ::-1]
    out = np.empty_like(x)
    running = np.ones(x.shape[:-1], x.dtype)
    for j in range(x.shape[-1]):
        if exclusive:
            out[..., j] = running
        running = running * x[..., j]
        if not exclusive:
            out[..., j] = running
    if reverse:
        out = out[..., ::-1]
    return np.moveaxis(out, -1, axis)


def test_safe_cumprod_hand_case():
    p = np.array([[0.9, 0.5, 0.0, 0.3]], "float32")
    np.testing.assert_allclose(safe_cumprod(1.0 - p, axis=-1, exclusive=True), [[1.0, 0.1, 0.05, 0.05]], rtol=1e-6)
    np.testing.assert_allclose(safe_cumprod(1.0 - p, axis=-1), [[0.1, 0.05, 0.05, 0.035]], rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_safe_cumprod_matches_tfa_definition(axis, exclusive, reverse, dtype):
    x = np.random.default_rng(0).uniform(0.0, 1.0, (3, 5, 4)).astype(dtype)
    x[0, 1, 2] = 0.0  # a zero: the product below it is the dtype's tiny number, not 0
    got = np.asarray(safe_cumprod(x, axis=axis, exclusive=exclusive, reverse=reverse))
    assert got.dtype == dtype
    # Past the zero the products are subnormal, where only an absolute bound means anything.
    tolerance = dict(rtol=1e-5 if dtype == "float32" else 1e-12, atol=np.finfo(dtype).tiny)
    np.testing.assert_allclose(got, _tfa_safe_cumprod(x, axis, exclusive, reverse), **tolerance)


def test_safe_cumprod_gradient_is_finite_at_zero():
    x = tf.constant([[1.0, 0.0, 0.5]])
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.reduce_sum(safe_cumprod(x, axis=-1))
    gradient = tape.gradient(y, x).numpy()
    assert np.all(np.isfinite(gradient))
    # d/dx0 of x0 + x0 x1 + x0 x1 x2 at x1 = 0 is 1 (the product is clipped at tiny, not 0).
    np.testing.assert_allclose(gradient[0, 0], 1.0, rtol=1e-6)


def test_safe_cumprod_errors():
    with pytest.raises(ValueError, match=r"safe_cumprod: `axis` must be an integer in \[-2, 2\).*got 2"):
        safe_cumprod(np.ones((2, 3), "float32"), axis=2)
    with pytest.raises(ValueError, match=r"safe_cumprod: `x` must be a float tensor; got dtype int32"):
        safe_cumprod(np.ones((2, 3), "int32"))


def test_first_max_index_takes_the_lowest_index_among_ties_and_zero_for_no_candidate():
    from keras_attention._reductions import first_max_index

    x = np.array([[1.0, 3.0, 3.0, 0.0], [-np.inf, -np.inf, -np.inf, -np.inf], [2.0, 2.0, 2.0, 2.0]], "float32")
    np.testing.assert_array_equal(first_max_index(x), [1, 0, 0])
    valid = np.array([[True, False, True, True], [False, True, True, False], [False] * 4])
    np.testing.assert_array_equal(first_max_index(x, valid), [2, 1, 0])  # no valid entry: 0
    assert np.asarray(first_max_index(np.zeros((3, 0), "float32"))).tolist() == [0, 0, 0]
    assert np.asarray(first_max_index(np.zeros((0, 4), "float32"))).shape == (0,)
