"""`ForcedPrefix`: each example's first tokens forced, given with the call."""

from keras import ops

from keras_attention.decoding.processors.base import LogitsProcessor, register

__all__ = ["ForcedPrefix", "prefix_lengths"]


def prefix_lengths(target_prefix, batch=None):
    """`(B,)` int32: each row's count of forced ids (`target_prefix` `(B, P)`,
    right-padded with -1); zeros for a `batch` without one (None)."""
    if target_prefix is None:
        return ops.zeros((batch,), "int32")
    return ops.sum(ops.cast(ops.greater_equal(ops.cast(target_prefix, "int32"), 0), "int32"), axis=1)


@register("forced_prefix")
class ForcedPrefix(LogitsProcessor):
    """While `t < prefix_lengths[b]` the token is forced to `target_prefix[b,
    t]`, whatever the other processors say (it composes last); decoding goes
    on freely after it. The prefix `(B, P)` comes with the call
    (`target_prefix`, right-padded with -1: a row's length is its count of
    non-negative ids); a decoder adds this processor when a call gives one.

    Example:

    ```python
    keras_attention.decoding.processors.ForcedPrefix()
    ```
    """

    order = 100
    call_input = "target_prefix"

    def start(self, batch, inputs):
        prefix = ops.cast(inputs["target_prefix"], "int32")
        lengths = inputs.get("prefix_lengths")
        if lengths is None:
            lengths = prefix_lengths(prefix)
        # One pad column: a prefix of width 0 still has a column to read.
        prefix = ops.pad(prefix, [[0, 0], [0, 1]], constant_values=-1)
        return {"prefix": prefix, "prefix_lengths": ops.cast(lengths, "int32")}

    def process(self, logits, forbidden, state, step):
        prefix = state["prefix"]
        in_prefix = ops.less(step.time, ops.expand_dims(state["prefix_lengths"], 1))  # (N, 1)
        column = ops.minimum(step.time, ops.shape(prefix)[1] - 1)
        forced = ops.expand_dims(ops.take(prefix, ops.maximum(column, 0), axis=1), 1)  # (N, 1)
        others = ops.logical_and(in_prefix, ops.not_equal(step.token, forced))
        if forbidden is None:
            return logits, others, state
        # Logical ops, not a select: onnxruntime has no boolean Where.
        return logits, ops.logical_or(others, ops.logical_and(ops.logical_not(in_prefix), forbidden)), state
