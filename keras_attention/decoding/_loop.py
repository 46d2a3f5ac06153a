"""Pieces every in-graph decoder shares: step calls, buffers and masked writes.

The decoders are written for export: the loop is `keras.ops.while_loop`
(ONNX Loop), per-step results go into preallocated buffers through masked
`where` writes (`slice_update` does not convert to ONNX), and a single best
token is the first position equal to the max (`_reductions.first_max_index`:
`argmax` does not convert either, and `top_k` leaves ties to the backend).

A buffer a decoder does not need (alignments the caller turned off, coverage
that is not penalised) is the empty tuple `ABSENT` in the loop variables:
`while_loop` takes nested structures and an empty one carries nothing, so the
loop variables keep one layout whatever is carried.
"""

import inspect
import numbers

import keras
import numpy as np
from keras import ops

from keras_attention import _checks

NEG_INF = float(np.finfo("float32").min) / 2  # finite: survives sums without overflow
ABSENT = ()


def is_carried(value):
    """False for the `ABSENT` placeholder, True for a tensor."""
    return not (isinstance(value, tuple) and not value)


def timed_step(step_fn):
    """`step_fn` as a step of the protocol, `step(ids, state, time)`.

    Every search passes the step its loop counter, the int32 scalar index of
    the token being produced (0 at the first step): the one clock a step
    reads (constraints, pre-drawn noise, a cache position). A step written
    before the protocol, `step(ids, state)`, still works: it is recognised
    once here, by its signature, and called without the time. A step gets
    the time when it has a third positional parameter without a default
    (or one named `time`, or `*args`); one whose positional parameters
    beyond two all have defaults (e.g. `training=False`) does not, so that
    the time is never passed into a parameter that means something else.
    """
    try:
        parameters = list(inspect.signature(step_fn).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a builtin): the protocol
        return step_fn
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_time = any(p.kind == p.VAR_POSITIONAL for p in parameters) or any(
        index >= 2 and (p.default is p.empty or p.name == "time") for index, p in enumerate(positional)
    )
    if takes_time:
        return step_fn
    if len(positional) < 2:
        raise ValueError(
            "decoding: `step_fn` must take `(ids, state, time)` (or `(ids, state)`); "
            f"got {getattr(step_fn, '__name__', type(step_fn).__name__)}{inspect.signature(step_fn)}."
        )

    def step_without_time(ids, state, time):
        return step_fn(ids, state)

    return step_without_time


def call_step(step_fn, ids, state, time):
    """Run `step_fn(ids, state, time)` (a step from `timed_step`); returns
    `(logits, state, alignment or None)`."""
    result = step_fn(ids, state, time)
    if not isinstance(result, (tuple, list)) or len(result) not in (2, 3):
        raise ValueError(
            "decoding: `step_fn(ids, state, time)` must return `(logits, state)` or "
            f"`(logits, state, alignment)`; got {type(result).__name__} "
            f"{'of length ' + str(len(result)) if isinstance(result, (tuple, list)) else ''}."
        )
    logits, new_state = result[0], result[1]
    alignment = result[2] if len(result) == 3 else None
    if len(logits.shape) != 2:
        raise ValueError(
            f"decoding: `step_fn` must return logits of shape (batch, vocabulary); got shape {tuple(logits.shape)}."
        )
    return logits, new_state, alignment


def first_time():
    """The loop counter's value at the first step, outside the loop: an
    int32 scalar tensor, as the loop's own counter is."""
    return ops.convert_to_tensor(0, "int32")


def log_probabilities(logits):
    return ops.log_softmax(ops.cast(logits, "float32"), axis=-1)


def write_at(buffer, time, values, time_axis):
    """`buffer[..., time, ...] = values` along `time_axis`, as a masked select."""
    length = ops.shape(buffer)[time_axis]
    shape = [1] * len(buffer.shape)
    shape[time_axis] = length
    at_time = ops.reshape(ops.equal(ops.arange(length), time), shape)
    return ops.where(at_time, ops.expand_dims(values, time_axis), buffer)


def batch_size_of(start_tokens, initial_state):
    if _checks.is_int(start_tokens):
        leaves = keras.tree.flatten(initial_state)
        if not leaves:
            raise ValueError(
                "decoding: with an integer `start_tokens`, `initial_state` must hold "
                "at least one tensor to take the batch size from."
            )
        return ops.shape(leaves[0])[0]
    return ops.shape(start_tokens)[0]


def start_ids(start_tokens, batch_size):
    if _checks.is_int(start_tokens):
        return ops.full((batch_size,), int(start_tokens), dtype="int32")
    start_tokens = ops.convert_to_tensor(start_tokens)
    if len(start_tokens.shape) != 1:
        raise ValueError(
            "decoding: `start_tokens` must be an int or a rank-1 tensor of shape "
            f"(batch,); got shape {tuple(start_tokens.shape)}."
        )
    return ops.cast(start_tokens, "int32")


def check_tokens(end_token, pad_token):
    """`end_token` and `pad_token` (default: the end token) as Python ints."""
    end_token = _checks.check_int("decoding", "end_token", end_token, 0, "an integer id")
    pad_token = _checks.check_int("decoding", "pad_token", pad_token, 0, "an integer id", allow_none=True)
    return end_token, end_token if pad_token is None else pad_token


def check_max_length(max_length):
    return _checks.check_positive_int("decoding", "max_length", max_length)


def is_rows(value):
    """Whether a search option is per example (a `(batch,)` tensor, from
    `option_rows`) rather than one Python number for every example."""
    return value is not None and not isinstance(value, numbers.Number)


def option_rows(value, dtype, check):
    """A search option: a number (or None), checked by `check` and kept as a
    constant of the graph, or `(batch,)` values, one per example, cast to
    `dtype` (their values are checked where they are fed: they may be
    unknown until run time)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value.item()
    if value is None or isinstance(value, numbers.Number):
        return check(value)
    value = ops.cast(value, dtype)
    if len(value.shape) != 1:
        raise ValueError(f"decoding: a per-example option must have shape (batch,); got shape {tuple(value.shape)}.")
    return value


def ended(ids, lengths, end_token):
    """Whether each hypothesis ended with `end_token` (bool, `lengths`'
    shape): its last token, at `lengths - 1`, is the end. One cut by a
    length limit, or left running by early stopping, is not (its ids are
    padded with the pad token all the same, which may be the end id)."""
    last_axis = len(ids.shape) - 1  # not -1: onnxruntime and an empty batch
    # A comparison with the positions, not a gather: a third of the ONNX nodes.
    last = ops.equal(ops.arange(ops.shape(ids)[last_axis], dtype="int32"), ops.expand_dims(lengths - 1, last_axis))
    return ops.any(ops.logical_and(last, ops.equal(ids, end_token)), axis=last_axis)
