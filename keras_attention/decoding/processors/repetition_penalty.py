"""`RepetitionPenalty`: CTRL's penalty on the logits of the tokens already produced."""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.processors.base import LogitsProcessor, register
from keras_attention.decoding.runtime_fields import RuntimeField

__all__ = ["RepetitionPenalty", "check_repetition_penalty", "one_hot_ids"]


def check_repetition_penalty(owner, value):
    return _checks.check_number(owner, "repetition_penalty", value, minimum=1)


def one_hot_ids(ids, vocabulary):
    """`(..., V)` bool: True at each id of `ids` (negative ids mark nothing)."""
    ids = ops.where(ops.greater_equal(ids, 0), ids, vocabulary)
    return ops.cast(ops.one_hot(ids, vocabulary + 1)[..., :vocabulary], "bool")


@register("repetition_penalty")
class RepetitionPenalty(LogitsProcessor):
    """The logit `l` of a token already produced becomes `l / r` if positive,
    `l * r` if not, `r = repetition_penalty >= 1` (1: none).

    Paper: Keskar et al. 2019, CTRL, arXiv:1909.05858.

    Shapes: the logits `(N, V)`; a run-time value is `(N,)`, one per row.

    Example:

    ```python
    keras_attention.decoding.processors.RepetitionPenalty(1.3)
    ```
    """

    order = 10
    keywords = ("repetition_penalty",)
    reads_history = True
    runtime_fields = (RuntimeField("repetition_penalty", "float32", 1, meaning="CTRL repetition penalty"),)

    def __init__(self, repetition_penalty=1.0):
        self.repetition_penalty = check_repetition_penalty(type(self).__name__, repetition_penalty)

    def acts(self):
        return self.repetition_penalty != 1

    def process(self, logits, forbidden, state, step):
        penalty = self.value(state, "repetition_penalty")
        produced = ops.any(one_hot_ids(step.history, ops.shape(logits)[-1]), axis=1)
        if _loop.is_rows(penalty):
            penalty = ops.expand_dims(penalty, 1)
        penalized = ops.where(ops.greater(logits, 0), logits / penalty, logits * penalty)
        return ops.where(produced, penalized, logits), forbidden, state
