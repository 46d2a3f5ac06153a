"""`BannedSequences`: token sequences never produced whole."""

import numpy as np
from keras import ops

from keras_attention.decoding.processors.base import register
from keras_attention.decoding.processors.token_sequences import (
    SequencesInputProcessor,
    TokenSequencesProcessor,
    ends_with,
    ends_with_rows,
)

__all__ = ["BannedSequences", "BannedSequencesInput"]


@register("banned_sequences")
class BannedSequences(TokenSequencesProcessor):
    """None of the token sequences `banned_sequences` appears in the output:
    when the tokens produced so far end with all but the last token of one,
    its last token is forbidden at this step (a sequence of one token is
    never produced, as `suppress_tokens`). Hugging Face calls it
    `bad_words_ids`, CTranslate2 `suppress_sequences`.

    The sequences are fixed when the decoder is built (exported as
    constants); a step costs `O(S * L)` for `S` sequences of at most `L`
    tokens, one `(N, S) x (S, V)` product to forbid the tokens. The end
    token cannot be part of a sequence, nor an id outside the vocabulary.

    Example:

    ```python
    from keras import ops

    banned = keras_attention.decoding.processors.BannedSequences([[4, 5], [7]])
    produced = ops.convert_to_tensor([[3, 4, -1], [4, 3, -1]], "int32")  # two tokens each
    step = keras_attention.decoding.processors.Step(
        None, 2, 2, ops.arange(8)[None], ops.equal(ops.arange(8), 2)[None], produced)
    _, forbidden, _ = banned.process(ops.zeros((2, 8)), None, {}, step)
    forbidden = ops.convert_to_numpy(forbidden)
    assert forbidden[0].nonzero()[0].tolist() == [5, 7]  # row 0 ends with 4: no 5 next
    assert forbidden[1].nonzero()[0].tolist() == [7]
    ```
    """

    order = 65
    keywords = ("banned_sequences",)

    def __init__(self, banned_sequences=None):
        super().__init__(banned_sequences)

    def process(self, logits, forbidden, state, step):
        if not self.acts():
            return logits, forbidden, state
        table, lengths = self.table(logits)
        # All but the last token produced: the last is the one to forbid.
        ready = ends_with(step.history, step.time, table, lengths - 1)  # (N, S)
        last = table[np.arange(len(lengths)), lengths - 1]
        is_last = ops.equal(ops.expand_dims(ops.convert_to_tensor(last, "int32"), 1), step.token)  # (S, V)
        banned = ops.greater(ops.matmul(ops.cast(ready, "float32"), ops.cast(is_last, "float32")), 0.0)
        return logits, self.forbid(forbidden, banned), state


@register("banned_sequences_input")
class BannedSequencesInput(SequencesInputProcessor):
    """`BannedSequences` per request: the call's `banned_sequences` `(B, S,
    L)` gives each example its own sequences (ids right-padded with -1, a
    row of -1 no sequence); a decoder adds this processor when a call gives
    them, beside any it was built with. A step costs `O(S * L)` gathers and
    one `(N, S, V)` comparison.

    Example:

    ```python
    keras_attention.decoding.processors.BannedSequencesInput()
    ```
    """

    order = 66
    call_input = "banned_sequences"

    def process(self, logits, forbidden, state, step):
        table, lengths = state["table"], state["lengths"]
        ready = ops.logical_and(ends_with_rows(step.history, step.time, table, lengths - 1), ops.greater(lengths, 0))
        last = ops.take_along_axis(table, ops.expand_dims(ops.maximum(lengths - 1, 0), 2), axis=2)  # (N, S, 1)
        is_last = ops.equal(last, ops.expand_dims(step.token, 0))  # (N, S, V)
        banned = ops.any(ops.logical_and(ops.expand_dims(ready, 2), is_last), axis=1)
        return logits, self.forbid(forbidden, banned), state
