"""Beam bookkeeping in plain ops: `tile_batch` and `gather_tree` (tfa.seq2seq names)."""

import keras
from keras import ops

from keras_attention.layers import _checks

__all__ = ["gather_tree", "tile_batch"]


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
                f"gather_tree: `{name}` must have shape (max_time, batch, beam); "
                f"got shape {tuple(tensor.shape)}."
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
