"""`StopSequences`: the output ends once it ends with one of the given token sequences."""

from keras import ops

from keras_attention.decoding.processors.base import register
from keras_attention.decoding.processors.token_sequences import (
    SequencesInputProcessor,
    TokenSequencesProcessor,
    ends_with,
    ends_with_rows,
)

__all__ = ["StopSequences", "StopSequencesInput"]


def stop_after(stopped, forbidden, step):
    """`forbidden` where `stopped` `(N, 1)` rows may produce only the end token."""
    only_end = ops.logical_and(stopped, ops.logical_not(step.is_end))
    if forbidden is None:
        return only_end
    # Logical ops, not a select: onnxruntime has no boolean Where.
    return ops.logical_or(only_end, ops.logical_and(ops.logical_not(stopped), forbidden))


@register("stop_sequences")
class StopSequences(TokenSequencesProcessor):
    """Once the tokens produced end with one of `stop_sequences`, the next
    token is the end token: the output keeps the stop sequence, then ends
    (Hugging Face's `stop_strings` in tokens; CTranslate2's `end_token`
    takes single tokens). It wins over every processor but the forced
    prefix: a stop sequence ends the output even before `min_length`, and
    one inside a `target_prefix` does not cut the prefix.

    Fixed when the decoder is built (exported as constants); a step costs
    `O(S * L)` for `S` sequences of at most `L` tokens. The end token cannot
    be part of a sequence, nor an id outside the vocabulary.

    Example:

    ```python
    from keras import ops

    stop = keras_attention.decoding.processors.StopSequences([[4, 5]])
    produced = ops.convert_to_tensor([[4, 5, -1], [5, 4, -1]], "int32")  # two tokens each
    step = keras_attention.decoding.processors.Step(
        None, 2, 2, ops.arange(8)[None], ops.equal(ops.arange(8), 2)[None], produced)
    _, forbidden, _ = stop.process(ops.zeros((2, 8)), None, {}, step)
    # Row 0 ends with [4, 5]: every token but the end (id 2) is forbidden.
    assert ops.convert_to_numpy(forbidden).sum(axis=1).tolist() == [7, 0]
    ```
    """

    order = 90  # after every processor that forbids, before the forced prefix
    keywords = ("stop_sequences",)

    def __init__(self, stop_sequences=None):
        super().__init__(stop_sequences)

    def process(self, logits, forbidden, state, step):
        if not self.acts():
            return logits, forbidden, state
        table, lengths = self.table(logits)
        stopped = ops.any(ends_with(step.history, step.time, table, lengths), axis=1, keepdims=True)  # (N, 1)
        return logits, stop_after(stopped, forbidden, step), state


@register("stop_sequences_input")
class StopSequencesInput(SequencesInputProcessor):
    """`StopSequences` per request: the call's `stop_sequences` `(B, S, L)`
    gives each example its own sequences (ids right-padded with -1, a row of
    -1 no sequence); a decoder adds this processor when a call gives them,
    beside any it was built with.

    Example:

    ```python
    keras_attention.decoding.processors.StopSequencesInput()
    ```
    """

    order = 91
    call_input = "stop_sequences"

    def process(self, logits, forbidden, state, step):
        table, lengths = state["table"], state["lengths"]
        ends = ops.logical_and(ends_with_rows(step.history, step.time, table, lengths), ops.greater(lengths, 0))
        return logits, stop_after(ops.any(ends, axis=1, keepdims=True), forbidden, step), state
