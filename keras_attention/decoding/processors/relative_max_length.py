"""`RelativeMaxLength`: each example's most tokens, a function of its source length."""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding.processors.base import LogitsProcessor, register

__all__ = ["RelativeMaxLength", "relative_max_lengths"]


def relative_max_lengths(source_lengths, ratio, offset, max_length):
    """Per example `min(max_length, floor(ratio * source_length + offset))`,
    at least 1: the most tokens (the end token included) an example may have.

    Example:

    ```python
    keras_attention.decoding.relative_max_lengths(np.array([3, 10]), 1.5, 2, max_length=12)
    # [6, 12]
    ```
    """
    ratio = _checks.check_number("decoding", "max_length_ratio", ratio, minimum=0)
    offset = _checks.check_number("decoding", "max_length_offset", offset)
    lengths = ops.floor(ops.cast(source_lengths, "float32") * ratio + offset)
    return ops.cast(ops.clip(lengths, 1, max_length), "int32")


@register("relative_max_length")
class RelativeMaxLength(LogitsProcessor):
    """Example `b` has at most `L_b = min(max_length, floor(max_length_ratio *
    source_length_b + max_length_offset))` tokens, the end included (at
    least 1; a run-time `max_length` lowers it further): at the step
    producing token `L_b - 1` every id but the end is forbidden, and the end
    is allowed, whatever the processors before it (`MinLength`) say: the
    limit wins over a `min_length` at or above it.

    Shapes: the source lengths `(B,)` (read from the memory mask).

    Example:

    ```python
    keras_attention.decoding.processors.RelativeMaxLength(1.5, 2)
    ```
    """

    order = 30
    keywords = ("max_length_ratio", "max_length_offset")
    reads_source_lengths = True

    def __init__(self, max_length_ratio=None, max_length_offset=0.0):
        owner = type(self).__name__
        self.max_length_ratio = _checks.check_number(
            owner, "max_length_ratio", max_length_ratio, minimum=0, strict=True, allow_none=True
        )
        self.max_length_offset = _checks.check_number(owner, "max_length_offset", max_length_offset)

    def acts(self):
        return self.max_length_ratio is not None

    def start(self, batch, inputs):
        max_lengths = inputs.get("max_lengths")
        if max_lengths is None:
            max_lengths = relative_max_lengths(
                inputs["source_lengths"], self.max_length_ratio, self.max_length_offset, inputs["max_length"]
            )
            if inputs.get("length_limits") is not None:  # as a decoder built with that max_length
                max_lengths = ops.minimum(max_lengths, inputs["length_limits"])
        return {"max_lengths": ops.cast(max_lengths, "int32")}

    def process(self, logits, forbidden, state, step):
        at_last = ops.greater_equal(step.time, ops.expand_dims(state["max_lengths"], 1) - 1)
        only_end = ops.logical_and(at_last, ops.logical_not(step.is_end))
        if forbidden is not None:  # the end allowed at the last token, even before a min_length
            only_end = ops.logical_or(only_end, ops.logical_and(ops.logical_not(at_last), forbidden))
        return logits, only_end, state
