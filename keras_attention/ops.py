"""Backend-neutral attention operations built only from `keras.ops`.

These are the two primitives every layer of the library is built on. They are
public so that users writing their own attention can get the same masking
semantics: padding receives exactly zero weight, and a row with no valid
position yields all-zero weights (never NaN, never a uniform spread).
"""

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._precision import softmax_dtype
from keras_attention._reductions import max_along, positive_axis

__all__ = ["masked_softmax", "safe_cumprod", "sequence_mask"]


def masked_softmax(scores, mask=None, axis=-1):
    """Softmax over `axis` that gives masked positions exactly zero weight.

    Formula, for valid positions `i` (where `mask` is true):

        alpha_i = exp(e_i - max_j e_j) / sum_{j valid} exp(e_j - max_j e_j)

    and `alpha_i = 0` where `mask` is false. A slice along `axis` with no
    valid position gives all zeros (its gradient is zero and finite).

    The computation runs in float32 (float64 for float64 input) whatever the
    dtype of `scores`, and masked logits are replaced by that dtype's finite
    minimum rather than `-inf`, so neither float16 nor a fully masked row can
    produce NaN. The result is cast back to the dtype of float `scores`;
    integer (or boolean) scores give float32 weights.

    Args:
        scores: tensor of logits, any rank.
        mask: optional boolean (or 0/1) tensor broadcastable to `scores`;
            true marks a valid position.
        axis: the axis to normalise over.

    Returns:
        A tensor of the shape of `scores`, in its dtype if it is a float
        dtype, else in float32.

    Example:

    ```python
    scores = np.array([[1.0, 2.0, 3.0]], "float32")
    weights = keras_attention.ops.masked_softmax(scores, np.array([[True, True, False]]))
    # [[0.2689, 0.7311, 0.0]]: the padded third position gets exactly zero
    ```
    """
    scores = ops.convert_to_tensor(scores)
    out_dtype = scores.dtype
    if not keras.backend.is_float_dtype(out_dtype):
        # Weights in [0, 1] cast back to an integer dtype are all zero.
        out_dtype = "float32"
    work_dtype = softmax_dtype(out_dtype)
    logits = ops.cast(scores, work_dtype)
    if mask is None:
        return ops.cast(ops.softmax(logits, axis=axis), out_dtype)

    mask = ops.cast(mask, "bool")
    if len(mask.shape) != len(logits.shape):
        raise ValueError(
            "masked_softmax: `mask` must have the same rank as `scores` "
            f"(broadcastable); got mask shape {tuple(mask.shape)} for scores "
            f"shape {tuple(logits.shape)}."
        )
    finite_min = ops.cast(np.finfo(work_dtype).min, work_dtype)
    logits = ops.where(mask, logits, finite_min)
    # Subtracting the maximum does not change the softmax, so its gradient is
    # not needed; stopping it also keeps ties in the max from leaking gradient.
    logits = logits - ops.stop_gradient(max_along(logits, axis, finite_min))
    unnormalised = ops.exp(logits) * ops.cast(mask, work_dtype)
    total = ops.sum(unnormalised, axis=positive_axis(unnormalised, axis), keepdims=True)
    # A row with no valid position has total == 0; dividing by a tiny positive
    # number instead keeps its weights (and their gradients) exactly zero.
    tiny = ops.cast(np.finfo(work_dtype).tiny, work_dtype)
    weights = unnormalised / ops.maximum(total, tiny)
    return ops.cast(weights, out_dtype)


def sequence_mask(lengths, maxlen=None):
    """Boolean mask of shape `(batch, maxlen)`: true at positions `< length`.

    Args:
        lengths: integer tensor of shape `(batch,)`.
        maxlen: the length of the mask's second axis; defaults to
            `max(lengths)`.

    Returns:
        A boolean tensor `mask[b, t] = t < lengths[b]`.

    Example:

    ```python
    mask = keras_attention.ops.sequence_mask([1, 3], maxlen=4)
    # [[True, False, False, False],
    #  [True, True,  True,  False]]
    ```
    """
    lengths = ops.convert_to_tensor(lengths)
    if len(lengths.shape) != 1:
        raise ValueError(
            f"sequence_mask: `lengths` must be a rank-1 tensor of shape (batch,); got shape {tuple(lengths.shape)}."
        )
    if _checks.is_int(maxlen):
        maxlen = _checks.check_int("sequence_mask", "maxlen", maxlen, 0)
    lengths = ops.cast(lengths, "int32")
    if maxlen is None:
        maxlen = ops.max(lengths)
    positions = ops.arange(maxlen, dtype="int32")
    return ops.less(ops.expand_dims(positions, 0), ops.expand_dims(lengths, 1))


def safe_cumprod(x, axis=0, exclusive=False, reverse=False):
    """Cumulative product of numbers in [0, 1] whose gradient stays finite at 0.

        safe_cumprod(x) = exp(cumsum(log(clip(x, tiny, 1))))

    with `tiny` the smallest normal number of `x`'s dtype, as
    `tfa.seq2seq.safe_cumprod` computed it (its arguments went on to
    `tf.cumsum`, hence the same `axis=0` default, `exclusive` and `reverse`).
    A product through logs also exports: ONNX has a CumSum but no CumProd.
    Monotonic attention (Raffel et al. 2017, arXiv:1704.00784) divides by
    such a product of `1 - p`.

    Args:
        x: a float tensor, values in [0, 1] (others are clipped into it).
        axis: the axis of the product (default 0, as `tf.cumsum`).
        exclusive: entry `j` is the product of the entries before `j` (the
            first is 1).
        reverse: the product runs from the end of `axis`.

    Returns:
        A tensor of `x`'s shape and dtype.

    Example:

    ```python
    p = np.array([[0.9, 0.5, 0.0, 0.3]], "float32")
    keras_attention.ops.safe_cumprod(1.0 - p, axis=-1, exclusive=True)
    # [[1.0, 0.1, 0.05, 0.05]]
    ```
    """
    x = ops.convert_to_tensor(x)
    if not keras.backend.is_float_dtype(x.dtype):
        raise ValueError(
            f"safe_cumprod: `x` must be a float tensor; got dtype {keras.backend.standardize_dtype(x.dtype)}."
        )
    rank = len(x.shape)
    if not (_checks.is_int(axis) and -rank <= axis < rank):
        raise ValueError(
            f"safe_cumprod: `axis` must be an integer in [{-rank}, {rank}) (an axis of `x`); got {axis!r}."
        )
    axis = int(axis)
    tiny = float(np.finfo(keras.backend.standardize_dtype(x.dtype)).tiny)
    # The product is taken along the last axis, from its start.
    logs = ops.moveaxis(ops.log(ops.clip(x, tiny, 1.0)), axis, -1)
    if reverse:
        logs = ops.flip(logs, axis=-1)
    sums = ops.cumsum(logs, axis=-1)
    if exclusive:
        sums = ops.concatenate([ops.zeros_like(sums[..., :1]), sums[..., :-1]], axis=-1)
    if reverse:
        sums = ops.flip(sums, axis=-1)
    return ops.moveaxis(ops.exp(sums), -1, axis)
