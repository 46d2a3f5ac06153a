"""`NoRepeatNgram`: no n-gram produced twice."""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.processors.base import LogitsProcessor, register
from keras_attention.decoding.processors.repetition_penalty import one_hot_ids
from keras_attention.decoding.runtime_fields import RuntimeField

__all__ = ["NoRepeatNgram"]


def _suffix_matches(previous, history, ids, time):
    """`(N, L)` int: entry `j` is the length of the longest common suffix of
    the tokens `0..j` and `0..time-1` (the latest, `ids`, just written at
    `time - 1`), for `j < time - 1`; 0 elsewhere.

    One step of the recurrence `S[j] = (h[j] == h[t-1]) * (1 + S_prev[j-1])`,
    so n-gram blocking costs `O(L)` a step whatever `n`, and `n` may differ
    per example.
    """
    shifted = ops.pad(previous[:, :-1], [[0, 0], [1, 0]])
    columns = ops.expand_dims(ops.arange(ops.shape(history)[1], dtype="int32"), 0)
    extends = ops.logical_and(
        ops.equal(history, ops.expand_dims(ops.cast(ids, "int32"), 1)),
        ops.less(columns, time - 1),
    )
    return ops.where(extends, shifted + 1, 0)


def _repeated_ngram_ends(history, suffix_matches, n, vocabulary):
    """`(N, V)` bool: the tokens that would complete an n-gram already in
    `history` (`n` an int or `(N,)` ints; 0: none).

    With `n >= 2`, token `h[j+1]` is forbidden when the `n - 1` tokens
    ending at `j` are the last `n - 1` produced (`suffix_matches[j] >= n -
    1`); with `n = 1` every token produced is.
    """
    if not _loop.is_rows(n):
        n = ops.full((ops.shape(history)[0],), n, "int32")
    n = ops.expand_dims(n, 1)
    repeats = ops.logical_and(ops.greater_equal(n, 2), ops.greater_equal(suffix_matches[:, :-1], n - 1))
    completing = ops.where(repeats, history[:, 1:], -1)
    forbidden = ops.any(one_hot_ids(completing, vocabulary), axis=1)
    produced = ops.any(one_hot_ids(history, vocabulary), axis=1)
    return ops.logical_or(forbidden, ops.logical_and(ops.equal(n, 1), produced))


@register("no_repeat_ngram")
class NoRepeatNgram(LogitsProcessor):
    """A token that would repeat an n-gram already produced is forbidden,
    `n = no_repeat_ngram_size` (0: none; 1: no token twice). Each step costs
    `O(max_length)` whatever `n` (a table of common suffix lengths rides in
    the state), and `n` may differ per example (a run-time `(N,)` value).

    Example:

    ```python
    keras_attention.decoding.processors.NoRepeatNgram(3)
    ```
    """

    order = 60
    keywords = ("no_repeat_ngram_size",)
    reads_history = True
    runtime_fields = (RuntimeField("no_repeat_ngram_size", "int32", 0, meaning="no n-gram twice (0: none)"),)

    def __init__(self, no_repeat_ngram_size=0):
        self.no_repeat_ngram_size = _checks.check_int(
            type(self).__name__, "no_repeat_ngram_size", no_repeat_ngram_size, 0, "an integer"
        )

    def acts(self):
        return self.no_repeat_ngram_size > 0

    def start(self, batch, inputs):
        state = super().start(batch, inputs)
        state["suffix_matches"] = ops.zeros((batch, inputs["max_length"]), "int32")
        return state

    def process(self, logits, forbidden, state, step):
        state["suffix_matches"] = _suffix_matches(state["suffix_matches"], step.history, step.ids, step.time)
        size = self.value(state, "no_repeat_ngram_size")
        repeated = _repeated_ngram_ends(step.history, state["suffix_matches"], size, ops.shape(logits)[-1])
        return logits, self.forbid(forbidden, repeated), state
