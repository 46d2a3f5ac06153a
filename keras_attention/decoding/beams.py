"""Beam bookkeeping in plain ops.

`tile_batch` and `gather_tree` keep tfa.seq2seq's names; `gather_beams`,
`reorder_beams` and `write_step` move a beam search's per-hypothesis tensors
after each step's selection, with `take` and masked `where` writes (ONNX
converts both).
"""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop

__all__ = ["beam_rows", "gather_beams", "gather_tree", "reorder_beams", "tile_batch", "write_step"]


def tile_batch(tensors, multiplier):
    """Repeat each batch entry `multiplier` times in place: `t0, t0, t1, t1, ...`.

    Works on any nest of tensors with a leading batch dimension, as
    `tfa.seq2seq.tile_batch` did; used to give every beam its own copy of the
    encoder memory and decoder state.

    Args:
        tensors: a tensor or a nest of tensors of shape `(batch, ...)`.
        multiplier: a positive Python int.

    Returns:
        The same nest with shapes `(batch * multiplier, ...)`.
    """
    multiplier = _checks.check_positive_int("tile_batch", "multiplier", multiplier)
    return keras.tree.map_structure(lambda t: ops.repeat(t, multiplier, axis=0), tensors)


def gather_tree(step_ids, parent_ids, max_sequence_lengths, end_token):
    """Rebuild the full token sequence of each final beam from parent pointers.

    With `tfa.seq2seq.gather_tree`'s convention: `step_ids[t, b, k]` is the
    token beam `k` of example `b` chose at step `t`, and `parent_ids[t, b, k]`
    the beam at step `t - 1` it extends. Following the parents back from the
    last valid step `max_sequence_lengths[b] - 1` gives each beam's sequence.
    Steps at or after `max_sequence_lengths[b]` are `end_token`, and so is
    everything after the first `end_token` of a sequence.

    Args:
        step_ids: int `(max_time, batch, beam)`.
        parent_ids: int `(max_time, batch, beam)`.
        max_sequence_lengths: int `(batch,)`.
        end_token: int.

    Returns:
        int `(max_time, batch, beam)`, the dtype of `step_ids`.
    """
    step_ids = ops.convert_to_tensor(step_ids)
    parent_ids = ops.cast(parent_ids, "int32")
    for name, tensor in (("step_ids", step_ids), ("parent_ids", parent_ids)):
        if len(tensor.shape) != 3:
            raise ValueError(
                f"gather_tree: `{name}` must have shape (max_time, batch, beam); got shape {tuple(tensor.shape)}."
            )
    max_sequence_lengths = ops.cast(max_sequence_lengths, "int32")
    max_time, batch, beam = ops.shape(step_ids)[0], ops.shape(step_ids)[1], ops.shape(step_ids)[2]
    end = ops.cast(end_token, step_ids.dtype)

    # `beams[b, k]`: the beam at the current step whose token belongs in output
    # beam k. Past a sequence's length it stays k, so the walk back starts at
    # the final beam itself.
    beams = ops.broadcast_to(ops.expand_dims(ops.arange(beam, dtype="int32"), 0), (batch, beam))
    output = ops.full((max_time, batch, beam), end, dtype=step_ids.dtype)
    time_index = ops.reshape(ops.arange(max_time, dtype="int32"), (-1, 1, 1))

    def body(time, beams, output):
        valid = ops.expand_dims(ops.less(time, max_sequence_lengths), 1)  # (batch, 1)
        ids_now = ops.take_along_axis(ops.take(step_ids, time, axis=0), beams, axis=1)
        write = ops.logical_and(ops.equal(time_index, time), valid)
        output = ops.where(write, ops.expand_dims(ids_now, 0), output)
        parents = ops.take_along_axis(ops.take(parent_ids, time, axis=0), beams, axis=1)
        return time - 1, ops.where(valid, parents, beams), output

    _, _, output = ops.while_loop(
        lambda time, *unused: ops.greater_equal(time, 0),
        body,
        (ops.cast(max_time - 1, "int32"), beams, output),
    )
    # Anything after a sequence's first end token becomes the end token.
    is_end = ops.cast(ops.equal(output, end), "int32")
    ends_before = ops.cumsum(is_end, axis=0) - is_end
    return ops.where(ops.greater(ends_before, 0), end, output)


def beam_rows(parents):
    """Flat row of each chosen parent: `rows[b * width + k] = b * width + parents[b, k]`.

    A beam search runs its step function on `batch * width` rows, row
    `b * width + k` holding beam `k` of example `b` (the `tile_batch` order).

    Args:
        parents: int `(batch, width)`, beam indices in `[0, width)`.

    Returns:
        int32 `(batch * width,)`.

    Example:

    ```python
    keras_attention.decoding.beam_rows(np.array([[1, 1], [0, 1]], "int32"))  # [1, 1, 2, 3]
    ```
    """
    parents = ops.cast(parents, "int32")
    batch, width = ops.shape(parents)[0], ops.shape(parents)[1]
    offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * width, 1)
    return ops.reshape(offsets + parents, (-1,))


def gather_beams(tensor, parents):
    """`out[b, k, ...] = tensor[b, parents[b, k], ...]`: each new beam takes its parent's row.

    `parents` may pick a different number of rows than `tensor` holds
    (`(batch, k)` from `(batch, n, ...)`, e.g. the best of a beam and a pool
    of finished hypotheses put together); `n` must then be known when traced.

    Args:
        tensor: `(batch, width, ...)`.
        parents: int `(batch, width)` (or `(batch, k)`), beam indices in `[0, width)`.

    Returns:
        `(batch, width, ...)` (or `(batch, k, ...)`), the dtype of `tensor`.

    Example:

    ```python
    keras_attention.decoding.gather_beams(np.array([[10, 11], [20, 21]]), np.array([[1, 1], [0, 1]], "int32"))
    # [[11, 11], [20, 21]]
    ```
    """
    tensor = ops.convert_to_tensor(tensor)
    width = tensor.shape[1]
    picked = parents.shape[1] if hasattr(parents, "shape") else len(parents[0])
    picked = width if picked is None else picked  # unknown when traced: as many as it holds
    row_size = _static_size(tensor.shape[2:])
    if width is not None and row_size is not None and width * picked * row_size <= SELECT_BY_MASK_ELEMENTS:
        return _select_beams(tensor, parents, width)
    shape = ops.shape(tensor)
    if width is not None and picked != width:
        # Rows of `width` per example, `picked` taken from each: the offsets are the source's.
        parents = ops.cast(parents, "int32")
        batch = ops.shape(parents)[0]
        flat = ops.reshape(tensor, (batch * width, *shape[2:]))
        rows = ops.reshape(ops.expand_dims(ops.arange(batch, dtype="int32") * width, 1) + parents, (-1,))
        return ops.reshape(ops.take(flat, rows, axis=0), (batch, picked, *shape[2:]))
    # The row count from `parents`, not from `tensor`'s own dimensions:
    # tf2onnx rewrites a reshape to its input's merged dimensions as one with
    # a -1, which ONNX cannot infer from an empty tensor (a source of length 0).
    rows = ops.shape(parents)[0] * ops.shape(parents)[1]
    flat = ops.reshape(tensor, (rows, *shape[2:]))
    return ops.reshape(ops.take(flat, beam_rows(parents), axis=0), shape)


# Up to this many elements per example (width * width * the row's size),
# `gather_beams` selects each new beam's row with a comparison mask instead
# of a gather: in an exported graph a gather of the flat rows costs some forty
# shape and index operations per step (reshapes, and Keras's handling of
# negative indices), which outweigh the arithmetic of a small mask (a
# beam's token history: width 5, 32 steps). Both are exact.
SELECT_BY_MASK_ELEMENTS = 4096


def _static_size(dimensions):
    size = 1
    for dimension in dimensions:
        if dimension is None:
            return None
        size *= dimension
    return size


def _select_beams(tensor, parents, width):
    """`gather_beams` as a masked sum over the parent axis: exactly one term
    of each sum is taken, the others are zeros (False for booleans)."""
    is_parent = ops.equal(ops.expand_dims(ops.cast(parents, "int32"), -1), ops.arange(width, dtype="int32"))
    is_parent = ops.reshape(is_parent, (*ops.shape(is_parent), *([1] * (len(tensor.shape) - 2))))
    candidates = ops.expand_dims(tensor, 1)  # [b, 1, j, ...]: every parent j for every new beam k
    dtype = keras.backend.standardize_dtype(tensor.dtype)
    # The parent axis is 2, counted from the front (an empty batch).
    if dtype == "bool":
        return ops.any(ops.logical_and(is_parent, candidates), axis=2)
    if "int" in dtype:
        # A product: tf2onnx spells an integer `where` as five arithmetic
        # operations. The sum widens small integers: cast back.
        return ops.cast(ops.sum(candidates * ops.cast(is_parent, tensor.dtype), axis=2), dtype)
    # A select, not a product: 0 * inf would be NaN. (Exact but for the sign
    # of a zero: the sum starts from +0.0.)
    return ops.sum(ops.where(is_parent, candidates, ops.zeros((), tensor.dtype)), axis=2)


def reorder_beams(state, parents):
    """Every tensor of a flat-row nest follows its hypothesis: `gather_beams` on `(batch * width, ...)` rows.

    `out[b * width + k] = state[b * width + parents[b, k]]` for every tensor of
    `state`, the decoder state the step function reads.

    Args:
        state: a nest of tensors of shape `(batch * width, ...)`.
        parents: int `(batch, width)`.

    Returns:
        The same nest, rows reordered.

    Example:

    ```python
    keras_attention.decoding.reorder_beams({"h": np.array([[0.0], [1.0], [2.0], [3.0]])}, np.array([[1, 1], [0, 1]], "int32"))
    # {"h": [[1.0], [1.0], [2.0], [3.0]]}
    ```
    """
    rows = beam_rows(parents)
    return keras.tree.map_structure(lambda s: ops.take(s, rows, axis=0), state)


def write_step(history, parents, time, values):
    """A per-beam history after a step: `gather_beams(history, parents)`, then `[:, :, time] = values`.

    The history of each new beam is its parent's, with this step's values
    written at `time` (a masked `where`, as `slice_update` does not convert
    to ONNX).

    Args:
        history: `(batch, width, max_length, ...)`, e.g. ids or alignments.
        parents: int `(batch, width)`.
        time: int scalar, the step written.
        values: `(batch, width, ...)`, already in the new beams' order.

    Returns:
        `(batch, width, max_length, ...)`.

    Example:

    ```python
    keras_attention.decoding.write_step(np.array([[[1, 0], [2, 0]]]), np.array([[1, 1]], "int32"), 1, np.array([[7, 8]]))
    # [[[2, 7], [2, 8]]]
    ```
    """
    return _loop.write_at(gather_beams(history, parents), time, values, time_axis=2)
