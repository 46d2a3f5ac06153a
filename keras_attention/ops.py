"""Backend-neutral attention operations built only from `keras.ops`.

These are the two primitives every layer of the library is built on. They are
public so that users writing their own attention can get the same masking
semantics: padding receives exactly zero weight, and a row with no valid
position yields all-zero weights (never NaN, never a uniform spread).
"""

import keras
import numpy as np
from keras import ops

from keras_attention._precision import softmax_dtype
from keras_attention.layers import _checks

__all__ = ["masked_softmax", "sequence_mask"]


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
    logits = logits - ops.stop_gradient(ops.max(logits, axis=axis, keepdims=True))
    unnormalised = ops.exp(logits) * ops.cast(mask, work_dtype)
    total = ops.sum(unnormalised, axis=axis, keepdims=True)
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
            "sequence_mask: `lengths` must be a rank-1 tensor of shape "
            f"(batch,); got shape {tuple(lengths.shape)}."
        )
    if _checks.is_int(maxlen):
        maxlen = _checks.check_int("sequence_mask", "maxlen", maxlen, 0)
    lengths = ops.cast(lengths, "int32")
    if maxlen is None:
        maxlen = ops.max(lengths)
    positions = ops.arange(maxlen, dtype="int32")
    return ops.less(ops.expand_dims(positions, 0), ops.expand_dims(lengths, 1))
