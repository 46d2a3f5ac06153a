"""The monotonic attention alignment of one decoder step (Raffel et al. 2017,
arXiv:1704.00784), in its three forms: the recursion, tfa's parallel closed
form and the hard test-time process.

The layers that compute the choosing probabilities and carry the previous
alignment are in `keras_attention.layers.monotonic`.
"""

import keras
from keras import ops

from keras_attention.ops import safe_cumprod

__all__ = ["MODES", "monotonic_alignment"]

MODES = ("parallel", "recursive", "hard")
# tfa clips the exclusive cumprod at this floor before dividing by it.
_CUMPROD_FLOOR = 1e-10


def _shift_right(x):
    """`[0, x_0, ..., x_{T-2}]` along the last axis (an exclusive prefix)."""
    return ops.concatenate([ops.zeros_like(x[..., :1]), x[..., :-1]], axis=-1)


def _exclusive_cumprod(x):
    """`prod_{k<j} x_k` along the last axis, for `x` in [0, 1] (tfa's
    `safe_cumprod`: through logs, since ONNX has no CumProd)."""
    return safe_cumprod(x, axis=-1, exclusive=True)


def _parallel(p_choose, previous):
    # tfa's closed form of the recursion: the division by a clipped cumprod
    # is inexact when p is close to 1 (the cumprod falls under the floor), the
    # price of an O(Ts) vectorised step.
    cumprod = _exclusive_cumprod(1.0 - p_choose)
    ratio = previous / ops.clip(cumprod, _CUMPROD_FLOOR, 1.0)
    return p_choose * cumprod * ops.cumsum(ratio, axis=-1)


def _recursive(p_choose, previous):
    # q_j = (1 - p_{j-1}) q_{j-1} + a_prev_j, one position per iteration. A
    # while_loop with masked `where` writes rather than `ops.scan`: scan does
    # not convert to ONNX, while_loop does (ONNX Loop).
    length = ops.shape(p_choose)[-1]
    carry_factor = _shift_right(1.0 - p_choose)  # (1 - p_{j-1}); 0 at j = 0
    positions = ops.arange(length)

    def column(x, at):
        # x[..., j] as a product with the one-hot `at` (exact: the other
        # terms are +0). A masked sum over the axis gave onnxruntime's
        # ReduceSum an empty tensor to reduce for an empty batch, which it
        # broadcast wrongly.
        # (The one-hot has x's rank, so the product needs no reshape of x:
        # ONNX cannot infer a reshape's -1 from an empty tensor.)
        one_hot = ops.reshape(ops.cast(at, x.dtype), (1,) * (len(x.shape) - 2) + (-1, 1))
        return ops.squeeze(ops.matmul(x, one_hot), -1)

    def body(j, q, alignment):
        at = ops.equal(positions, j)
        q = column(carry_factor, at) * q + column(previous, at)
        alignment = ops.where(at, ops.expand_dims(q, -1) * p_choose, alignment)
        return j + 1, q, alignment

    # (zeros of the shape, not of `p_choose[..., 0]`: an empty memory has no position 0)
    q, alignment = ops.zeros(ops.shape(p_choose)[:-1], p_choose.dtype), ops.zeros_like(p_choose)
    if keras.backend.backend() == "jax":
        # JAX differentiates a loop in reverse only with static bounds, which
        # `fori_loop` lowers to a scan (shapes are static under JAX tracing).
        # Elsewhere the while_loop stays: TensorFlow's exports as an ONNX
        # Loop, and its `maximum_iterations` bounds it for XLA's gradient.
        _, alignment = ops.fori_loop(0, length, lambda j, carry: body(j, *carry)[1:], (q, alignment))
        return alignment
    _, _, alignment = ops.while_loop(
        lambda j, q, alignment: ops.less(j, length),
        body,
        (ops.convert_to_tensor(0, "int32"), q, alignment),
        maximum_iterations=length,
    )
    return alignment


def _hard(p_choose, previous):
    # Candidates are positions at or after the previous choice (any previous
    # mass at or before j); the first candidate with p = 1 is taken. Counting
    # earlier candidates (rather than a cumprod of 1 - p) keeps the result
    # exactly 0 / 1 whatever the previous alignment holds.
    reached = ops.cast(ops.greater(ops.cumsum(previous, axis=-1), 0.0), p_choose.dtype)
    candidates = p_choose * reached
    earlier = _shift_right(ops.cumsum(candidates, axis=-1))
    return candidates * ops.cast(ops.equal(earlier, 0.0), p_choose.dtype)


def monotonic_alignment(p_choose, previous_alignment, mode):
    """The monotonic attention alignment `a` of one step.

    Given the choosing probabilities `p (..., Ts)` (0 at padded positions) and
    the previous step's alignment `a_prev (..., Ts)`:

        recursive: q_j = (1 - p_{j-1}) q_{j-1} + a_prev_j,  a_j = p_j q_j
        parallel:  a = p * cumprod_excl(1 - p) * cumsum(a_prev / clip(cumprod_excl(1 - p), 1e-10, 1))
        hard:      a_j = 1 for the first j at or after the previous choice
                   with p_j = 1 (p must be 0 / 1), else 0

    "parallel" equals "recursive" up to rounding (except when some `p` is so
    close to 1 that the cumulative product falls under 1e-10). Use the dtype
    you want the maths in (float32 or float64).
    """
    if mode not in MODES:
        raise ValueError(
            f"monotonic_alignment: unknown `mode` {mode!r}; expected one of {', '.join(repr(m) for m in MODES)}."
        )
    p_choose = ops.convert_to_tensor(p_choose)
    previous_alignment = ops.cast(previous_alignment, p_choose.dtype)
    return {"parallel": _parallel, "recursive": _recursive, "hard": _hard}[mode](p_choose, previous_alignment)
