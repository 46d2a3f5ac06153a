"""Token sequences matched against the end of what a search has produced:
what `BannedSequences` and `StopSequences` share (their base class, their
check, their table and the match, `O(sequences * longest)` a step)."""

import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention.decoding.processors.base import LogitsProcessor

__all__ = [
    "SequencesInputProcessor",
    "TokenSequencesProcessor",
    "check_token_sequences",
    "check_in_vocabulary",
    "ends_with",
    "ends_with_rows",
    "sequence_table",
]


def check_token_sequences(owner, name, sequences, end_token=None):
    """`sequences` as a list of lists of ids (None stays None): each a
    non-empty list of non-negative integers without the end token."""
    if sequences is None:
        return None
    if not isinstance(sequences, (list, tuple)) or not all(
        isinstance(sequence, (list, tuple)) and sequence and all(_checks.is_int(i) and i >= 0 for i in sequence)
        for sequence in sequences
    ):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `{name}` must be a list of token sequences, each a non-empty list of "
            f"integer ids >= 0 (e.g. [[4, 7], [9]]); got {sequences!r:.120}."
        )
    sequences = [[int(i) for i in sequence] for sequence in sequences]
    if end_token is not None:
        for sequence in sequences:
            if end_token in sequence:
                raise ValueError(
                    f"{_checks.owner_name(owner)}: `{name}` holds {sequence}, which contains the end token "
                    f"{end_token}: nothing is produced after it."
                )
    return sequences


def check_in_vocabulary(owner, name, sequences, vocabulary):
    """Refuse an id outside the `vocabulary` ids of the logits (it would match nothing, silently)."""
    if vocabulary is None:
        return
    for sequence in sequences:
        if max(sequence) >= vocabulary:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `{name}` holds {sequence}, with an id outside the decoder's "
                f"{vocabulary} ids (0 to {vocabulary - 1})."
            )


def sequence_table(sequences):
    """`(table, lengths)`: NumPy int32 `(S, longest)` right-padded with -1, and `(S,)`."""
    lengths = np.array([len(sequence) for sequence in sequences], "int32")
    table = np.full((len(sequences), lengths.max()), -1, "int32")
    for row, sequence in enumerate(sequences):
        table[row, : len(sequence)] = sequence
    return table, lengths


def ends_with(history, time, table, lengths):
    """`(N, S)` bool: whether the `time` tokens produced so far (`history`
    `(N, max_length)`, its first `time` columns) end with the first
    `lengths[s]` tokens of `table[s]` (a NumPy `(S, L)` table; `lengths`
    NumPy `(S,)`, a length 0 always matches).

    Token `k` of sequence `s` must sit at column `time - lengths[s] + k`:
    one gather of the `S * L` columns, compared with the table at once.
    """
    rows, width = table.shape
    columns = np.arange(width)[None, :]
    needed = columns < lengths[:, None]  # (S, L): the positions that must match
    offsets = ops.convert_to_tensor((columns - lengths[:, None]).reshape(-1), "int32")
    positions = ops.clip(ops.cast(time, "int32") + offsets, 0, ops.shape(history)[1] - 1)
    produced = ops.reshape(ops.take(history, positions, axis=1), (-1, rows, width))
    agrees = ops.logical_or(ops.equal(produced, table[None]), np.logical_not(needed)[None])
    long_enough = ops.greater_equal(ops.cast(time, "int32"), ops.convert_to_tensor(lengths, "int32"))
    return ops.logical_and(ops.all(agrees, axis=2), ops.expand_dims(long_enough, 0))


class TokenSequencesProcessor(LogitsProcessor):
    """A processor configured by one list of token sequences, its only
    keyword: checked when built and against the search's end token, its
    NumPy table built once (not at every step of a search)."""

    reads_history = True

    def __init__(self, sequences):
        (name,) = self.keywords
        setattr(self, name, check_token_sequences(type(self).__name__, name, sequences))
        self._table = sequence_table(getattr(self, name)) if getattr(self, name) else None

    def acts(self):
        return self._table is not None

    def check(self, owner, end_token, max_length):
        check_token_sequences(owner, self.keywords[0], getattr(self, self.keywords[0]), end_token)

    def table(self, logits):
        """`(table, lengths)` (`sequence_table`), its ids checked against the width of `logits`."""
        check_in_vocabulary(type(self).__name__, self.keywords[0], getattr(self, self.keywords[0]), logits.shape[-1])
        return self._table


def ends_with_rows(history, time, table, lengths):
    """`ends_with` with each row's own sequences: `table` `(N, S, L)` int32
    (-1 pads) and `lengths` `(N, S)` tensors; `(N, S)` bool, whether the
    `time` tokens produced so far end with the first `lengths[n, s]` tokens
    of `table[n, s]` (a length 0 always matches)."""
    columns = ops.reshape(ops.arange(ops.shape(table)[2], dtype="int32"), (1, 1, -1))
    lengths = ops.expand_dims(ops.cast(lengths, "int32"), 2)
    needed = ops.less(columns, lengths)
    positions = ops.clip(ops.cast(time, "int32") - lengths + columns, 0, ops.shape(history)[1] - 1)
    produced = ops.take_along_axis(history, ops.reshape(positions, (ops.shape(table)[0], -1)), axis=1)
    agrees = ops.logical_or(ops.equal(ops.reshape(produced, ops.shape(table)), table), ops.logical_not(needed))
    long_enough = ops.greater_equal(ops.cast(time, "int32"), lengths[..., 0])
    return ops.logical_and(ops.all(agrees, axis=2), long_enough)


class SequencesInputProcessor(LogitsProcessor):
    """A processor whose token sequences come with the call, one set per
    example: `(B, S, L)` ids, each sequence right-padded with -1 and a row
    of -1 no sequence (so examples may have different counts). Its state is
    the table and each sequence's length, which beam search tiles and
    reorders with the hypotheses. The ids are checked where they are fed
    (`check_sequence_values`)."""

    reads_history = True

    def start(self, batch, inputs):
        # One pad column: sequences of width 0 (none) still have a column to read.
        table = ops.pad(ops.cast(inputs[self.call_input], "int32"), [[0, 0], [0, 0], [0, 1]], constant_values=-1)
        return {"table": table, "lengths": ops.sum(ops.cast(ops.greater_equal(table, 0), "int32"), axis=2)}
