"""Reductions that also run on empty axes, in Keras and once exported to ONNX.

Shared by `ops` (the masked softmax), the layers and the cells.
"""

import keras
from keras import ops

__all__ = ["any_along", "first_max_index", "first_top_k", "max_along", "pad_one", "positive_axis"]

# Empty inputs (a batch of 0, a memory of length 0) must also run once a
# model is exported to ONNX, where three things break on them:
# - onnxruntime's reductions leave an empty tensor unreduced when the axis
#   is given as negative: reductions here name their axis from the front;
# - tf2onnx turns a max over the last axis of a rank-3 tensor into a
#   GlobalMaxPool, which onnxruntime refuses for any empty axis but the
#   batch: the max is taken with one more trailing axis, which it leaves;
# - the max of an empty axis has no value (Keras's eager `max` refuses it):
#   one more entry of the finite minimum is padded in, which changes nothing
#   for a non-empty axis.


def positive_axis(x, axis):
    """`axis` counted from the front."""
    return axis % len(x.shape)


def pad_one(x, axis, value):
    """`x` with one more entry of `value` at the end of `axis`."""
    padding = [[0, 0]] * len(x.shape)
    padding[positive_axis(x, axis)] = [0, 1]
    return ops.pad(x, padding, constant_values=value)


def max_along(x, axis, floor):
    """`max(x, axis, keepdims=True)`, and `floor` for an empty axis."""
    axis = positive_axis(x, axis)
    padded = ops.expand_dims(pad_one(x, axis, floor), -1)
    if keras.backend.backend() == "torch":
        # Keras's torch `max(initial=)` builds its fill on the CPU, beside a
        # CUDA `x` (training on a GPU failed), and answers an empty batch with
        # a (1, 1, 1) tensor; torch's own amax reduces an empty batch as it is.
        reduced = ops.amax(padded, axis=axis, keepdims=True)
    else:
        # `initial`: TensorFlow's eager max refuses an empty batch without it.
        reduced = ops.max(padded, axis=axis, keepdims=True, initial=floor)
    return ops.squeeze(reduced, -1)


def any_along(mask, axis=-1, keepdims=False):
    """`ops.any(mask, axis)`, false for an empty axis, also once exported to ONNX."""
    # One zero entry is padded in, so no runtime ever reduces an empty axis
    # (whose sum onnxruntime need not define).
    counts = pad_one(ops.cast(mask, "float32"), axis, 0.0)
    total = ops.sum(counts, axis=positive_axis(counts, axis), keepdims=keepdims)
    return ops.greater(total, 0.0)


def first_max_index(x, valid=None):
    """The index of the largest entry of `x` along its last axis, the
    lowest one among equals: int32, the last axis removed.

    Neither `argmax` nor `top_k(x, 1)` fixes the tie: which of equal entries
    they return is the backend's choice (torch promises no order), and
    `argmax` does not export to ONNX. Here the rule is spelled out: the
    entries equal to the max, and the number of entries before the first of
    them (those whose running count of maxima is still 0). With `valid`
    (boolean, broadcastable to `x`) only valid entries count. A row with no
    candidate (an empty axis, nothing valid, only NaN) gives 0.
    """
    axis = positive_axis(x, -1)
    if valid is not None:
        valid = ops.broadcast_to(ops.cast(valid, "bool"), ops.shape(x))
        x = ops.where(valid, x, float("-inf"))
    is_best = ops.equal(x, max_along(x, axis, float("-inf")))
    if valid is not None:
        is_best = ops.logical_and(is_best, valid)
    # One entry that is no maximum, padded at the end, keeps the sum off an
    # empty axis and makes a row with no candidate count past the last index.
    running = ops.cumsum(pad_one(ops.cast(is_best, "int32"), axis, 0), axis=axis)
    first = ops.sum(ops.cast(ops.equal(running, 0), "int32"), axis=axis)
    return ops.where(ops.less(first, ops.shape(x)[axis]), first, ops.zeros_like(first))


# The backends whose `top_k` promises ties to the lowest index, so
# `first_top_k` is `top_k` there: TensorFlow's `tf.math.top_k` (with XLA
# too) and JAX's `lax.top_k` document it, and so does ONNX's TopK, which
# TensorFlow's exported graphs run (each checked on tie-heavy rows up to
# 160,000 wide). Recomputing the indices costs every beam-search step some
# fifteen more operations; torch's `topk` promises no order, so it pays them.
TOP_K_TIES_TO_THE_LOWEST_INDEX = ("tensorflow", "jax")


def first_top_k(x, k):
    """`ops.top_k(x, k)` over the last axis of a rank-2 `x`, with ties to the
    lowest index: the `k` entries a stable sort by decreasing value puts
    first, in that order. `k` is a Python int.

    The values are `top_k`'s own (the `k` largest, as a multiset, do not
    depend on the tie order); only the indices are recomputed, in
    `O(batch * (n + k * k))` memory and without a loop:
    - the chosen set: every entry above the k-th value, then the entries
      equal to it from the lowest index up, as many as there is room for;
    - those positions in increasing order, from a second `top_k` over a key
      that is unique to each chosen position and larger for lower ones;
    - their order: each one's rank counts the larger values and the equal
      ones at lower positions (a stable sort of `k` entries).
    A row where fewer than `k` entries compare (NaN) keeps `top_k`'s indices.
    """
    if not isinstance(k, int) or isinstance(k, bool):
        # The pairwise ranks are (k, k): the number of slots must be known when traced.
        raise ValueError(f"first_top_k: `k` must be a Python int (a static size), got {k!r}")
    if keras.backend.backend() in TOP_K_TIES_TO_THE_LOWEST_INDEX:
        values, indices = ops.top_k(x, k)
        return values, ops.cast(indices, "int32")
    values, fallback = ops.top_k(x, k)
    fallback = ops.cast(fallback, "int32")
    n = ops.shape(x)[1]
    threshold = values[:, k - 1 : k]
    above = ops.greater(x, threshold)
    at = ops.equal(x, threshold)
    room = k - ops.sum(ops.cast(above, "int32"), axis=1, keepdims=True)
    chosen = ops.logical_or(above, ops.logical_and(at, ops.less_equal(ops.cumsum(ops.cast(at, "int32"), axis=1), room)))
    # float32 keys (exact below 2**24 positions): TopK of every runtime takes them.
    positions = ops.arange(n, dtype="int32")
    key = ops.where(chosen, ops.cast(n - positions, "float32")[None, :], 0.0)
    by_position = ops.cast(ops.top_k(key, k)[1], "int32")  # (batch, k), increasing positions
    chosen_values = ops.take_along_axis(x, by_position, axis=1)
    larger = ops.greater(chosen_values[:, None, :], chosen_values[:, :, None])  # [b, a, c]: entry c beats a
    slots = ops.arange(k, dtype="int32")
    lower = ops.less(slots[None, :], slots[:, None])[None]  # [_, a, c]: c sits before a
    equal_before = ops.logical_and(ops.equal(chosen_values[:, None, :], chosen_values[:, :, None]), lower)
    rank = ops.sum(ops.cast(ops.logical_or(larger, equal_before), "int32"), axis=2)  # (batch, k)
    # Slot r takes the entry of rank r.
    at_slot = ops.equal(rank[:, None, :], slots[None, :, None])  # [b, r, a]
    indices = ops.sum(ops.where(at_slot, by_position[:, None, :], 0), axis=2)
    complete = ops.equal(ops.sum(ops.cast(chosen, "int32"), axis=1, keepdims=True), k)
    return values, ops.where(complete, indices, fallback)
