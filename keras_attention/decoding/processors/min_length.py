"""`MinLength`: the end token forbidden before a number of tokens."""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.processors.base import LogitsProcessor, register
from keras_attention.decoding.runtime_fields import RuntimeField

__all__ = ["MinLength"]


@register("min_length")
class MinLength(LogitsProcessor):
    """The end token is forbidden at the steps producing tokens `t < min_length`
    (0-based), so a hypothesis has at least `min_length` tokens before its
    end. An example's own limit wins: where `RelativeMaxLength` forces the end
    (at its last token), the end is allowed whatever `min_length` says.

    Shapes: the logits `(N, V)`; a run-time `min_length` is `(N,)`, one per row.

    Example:

    ```python
    keras_attention.decoding.processors.MinLength(3)
    ```
    """

    order = 20
    keywords = ("min_length",)
    runtime_fields = (
        RuntimeField(
            "min_length",
            "int32",
            0,
            maximum="below max_length",
            meaning="the end token is forbidden before this many tokens",
        ),
    )

    def __init__(self, min_length=0):
        self.min_length = _checks.check_int(type(self).__name__, "min_length", min_length, 0, "an integer")

    def acts(self):
        return self.min_length > 0

    def check(self, owner, end_token, max_length):
        if self.min_length >= max_length:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `min_length` must be below `max_length` {max_length} "
                f"(the end token needs a step); got {self.min_length!r}."
            )

    def process(self, logits, forbidden, state, step):
        min_length = self.value(state, "min_length")
        if _loop.is_rows(min_length):
            min_length = ops.expand_dims(min_length, 1)
        return logits, self.forbid(forbidden, ops.logical_and(step.is_end, ops.less(step.time, min_length))), state
