"""Batches of sequences of similar length, for `model.fit` on variable-length data.

Padding every sequence to the longest in the data set wastes most of a
sequence model's work; padding each random batch to its own longest wastes
less but still much (a batch of 64 random words almost always holds a long
one). `LengthBucketedBatches` sorts the examples by length with a random
tie-break, cuts the order into batches and shuffles the batches, so each
batch holds sequences of nearly one length and is padded only to its own
longest. It is a `keras.utils.PyDataset`: `fit` keeps its progress bar,
callbacks, validation and `BackupAndRestore`.
"""

import math

import keras
import numpy as np

from keras_attention import _checks
from keras_attention.text import pad_sequences

__all__ = ["LengthBucketedBatches"]


def _check_ragged(argument, sequences):
    if isinstance(sequences, np.ndarray) and sequences.ndim == 2:
        # A padded array: its rows, with the padding (0) at the end cut off.
        return [row[: _unpadded_length(row)].tolist() for row in sequences]
    try:
        rows = [list(row) for row in sequences]
    except TypeError:
        raise ValueError(
            f"LengthBucketedBatches: `{argument}` must be a list of id sequences or a padded 2-D array; "
            f"got {type(sequences).__name__}."
        ) from None
    return rows


def _unpadded_length(row):
    nonzero = np.flatnonzero(np.asarray(row) != 0)
    return int(nonzero[-1]) + 1 if len(nonzero) else 0


class LengthBucketedBatches(keras.utils.PyDataset):
    """Length-bucketed, per-batch padded batches of id sequences.

    Each epoch the examples are ordered by the length of the `sort_by` input
    (random order among equal lengths), cut into batches of `batch_size`,
    and the batches are shuffled; every array of a batch is right-padded
    with 0 to the batch's longest sequence (rounded up to a multiple of
    `length_multiple`, which bounds the number of distinct shapes: each one
    is a separate XLA compilation). The first two batches are chosen so
    that their shapes differ in every dimension that varies at all: Keras
    infers which dimensions vary from the first two batches it sees.

    Args:
        inputs: the model's inputs: one list of id sequences (lists or 1-D
            arrays), a tuple of such lists (several inputs), or a dict
            {input name: sequences}; padded 2-D arrays are accepted and
            un-padded first (trailing zeros are padding).
        targets: id sequences (or None, for prediction).
        batch_size: examples per batch.
        sort_by: which input's lengths order the examples (an index or a
            dict key); default the first.
        shuffle: shuffle the batch order (and the order within equal
            lengths) every epoch; False gives one fixed order, for evaluation.
        seed: seed of the shuffling.
        length_multiple: pad lengths up to a multiple of this.
        weigh_targets: also yield `sample_weight = (targets != 0)`, so the
            loss ignores padded target steps even when the model's output
            carries no Keras mask (a `keras.Sequential` read-out drops it).
        **kwargs: `keras.utils.PyDataset` options (`workers`, ...).

    Example:

    ```python
    words = [[3, 4], [5, 6, 7, 8], [3], [4, 5, 6]]
    labels = [[1, 2], [2, 2, 1, 1], [1], [2, 1, 2]]
    batches = keras_attention.batching.LengthBucketedBatches(words, labels, batch_size=2, seed=0)
    x, y = batches[0]   # two words of similar length, padded to the longer one
    model = keras.Sequential([keras.layers.Embedding(9, 4, mask_zero=True), keras.layers.Dense(3)])
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(batches, epochs=2, verbose=0)
    ```
    """

    def __init__(
        self,
        inputs,
        targets=None,
        batch_size=64,
        sort_by=None,
        shuffle=True,
        seed=None,
        length_multiple=1,
        weigh_targets=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        batch_size = _checks.check_positive_int(self, "batch_size", batch_size)
        length_multiple = _checks.check_positive_int(self, "length_multiple", length_multiple)
        # Several inputs come as a dict or a tuple; anything else is one input.
        if isinstance(inputs, dict):
            self._structure, names = "dict", list(inputs)
            columns = [_check_ragged(f"inputs[{k!r}]", inputs[k]) for k in names]
        elif isinstance(inputs, tuple):
            self._structure, names = "tuple", list(range(len(inputs)))
            columns = [_check_ragged(f"inputs[{i}]", column) for i, column in enumerate(inputs)]
        else:
            self._structure, names = "single", [0]
            columns = [_check_ragged("inputs", inputs)]
        self._keys = names
        self._targets = None if targets is None else _check_ragged("targets", targets)
        sizes = {len(column) for column in columns} | ({len(self._targets)} if self._targets is not None else set())
        if len(sizes) != 1:
            raise ValueError(
                f"LengthBucketedBatches: `inputs` and `targets` must have the same number of examples; got sizes {sorted(sizes)}."
            )
        (self.size,) = sizes
        if self.size == 0:
            raise ValueError("LengthBucketedBatches: no examples.")
        if sort_by is None:
            sort_by = names[0]
        if isinstance(sort_by, bool) or sort_by not in names:
            raise ValueError(f"LengthBucketedBatches: `sort_by` must name one of the inputs; got {sort_by!r}.")
        self._columns = columns
        self._lengths = np.array([len(row) for row in columns[names.index(sort_by)]])
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.length_multiple = int(length_multiple)
        self.weigh_targets = bool(weigh_targets)
        if self.weigh_targets and self._targets is None:
            raise ValueError("LengthBucketedBatches: `weigh_targets=True` needs `targets`.")
        self._rng = np.random.default_rng(seed)
        self._batches = self._plan()

    def _plan(self):
        tie_break = self._rng.random(self.size) if self.shuffle else np.arange(self.size)
        order = np.lexsort((tie_break, self._lengths))
        batches = [order[i : i + self.batch_size] for i in range(0, self.size, self.batch_size)]
        if self.shuffle:
            self._rng.shuffle(batches)
        if len(batches) > 2:
            first, second = self._varying_pair(batches)
            rest = [b for i, b in enumerate(batches) if i not in (first, second)]
            batches = [batches[first], batches[second]] + rest
        return batches

    def _varying_pair(self, batches):
        """Two batches whose shapes differ wherever any two batches' shapes do.

        Keras reads which dimensions vary from the first two batches it sees
        and fixes the others; a length fixed that way would make every later
        batch of another length fail inside `fit`.
        """
        columns = self._columns + ([self._targets] if self._targets is not None else [])
        shapes = np.array(
            [[len(rows)] + [self._padded_length([column[i] for i in rows]) for column in columns] for rows in batches]
        )
        varying = np.array([len(set(shapes[:, c])) > 1 for c in range(shapes.shape[1])])
        for first in np.argsort(shapes[:, 0], kind="stable"):  # a partial batch first: it varies the batch size
            differs = np.all((shapes != shapes[first])[:, varying], axis=1)
            if differs.any():
                return int(first), int(np.flatnonzero(differs)[0])
        return 0, 1

    def _padded_length(self, rows):
        longest = max(max((len(row) for row in rows), default=0), 1)
        return -(-longest // self.length_multiple) * self.length_multiple

    def __len__(self):
        return math.ceil(self.size / self.batch_size)

    def _pad(self, rows):
        return pad_sequences(rows, length=self._padded_length(rows))

    def __getitem__(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"LengthBucketedBatches: batch {index} of {len(self)}.")
        rows = self._batches[index]
        arrays = [self._pad([column[i] for i in rows]) for column in self._columns]
        if self._structure == "dict":
            x = dict(zip(self._keys, arrays))
        elif self._structure == "tuple":
            x = tuple(arrays)
        else:
            (x,) = arrays
        if self._targets is None:
            return (x,)
        y = self._pad([self._targets[i] for i in rows])
        if self.weigh_targets:
            return x, y, (y != 0).astype("float32")
        return x, y

    def on_epoch_end(self):
        if self.shuffle:
            self._batches = self._plan()

    @property
    def example_order(self):
        """Example indices in batch order (to align predictions with the data)."""
        return np.concatenate(self._batches)
