"""Fresh training examples every epoch, for tasks whose data is generated.

When examples come from a generator (sorting, convex hulls, synthetic
translation), a fixed training set is a choice, not a necessity: a model
that never sees an example twice cannot memorise its training set, and its
training loss is an unbiased estimate of its test loss. `GeneratedBatches`
is a `keras.utils.PyDataset` that calls a user function for each batch with
a NumPy generator seeded by `(seed, epoch, batch index)`, so every epoch is
new data, and a run is reproducible batch by batch whatever order (or
thread) Keras asks for the batches in.

The epoch of a batch is how many times that batch index was drawn before,
not Keras's epoch hooks: Keras's input pipeline may start drawing the next
epoch's first batches before it calls `on_epoch_begin`, which would give
those batches the old epoch's seed on one run and the new one's on another.
"""

import threading

import keras
import numpy as np

from keras_attention import _checks

__all__ = ["GeneratedBatches"]


class GeneratedBatches(keras.utils.PyDataset):
    """Batches drawn afresh every epoch by `generate(rng, batch_size)`.

    The `e`-th draw of batch `i` (counting from 0) is `draw(i, e)` =
    `generate(np.random.default_rng((seed, e, i)), batch_size)`: the same on
    every run with the same seed, different for every epoch and batch. Keras
    draws each batch once per epoch (and the first ones once more before
    training, to learn the shapes), so each epoch is new data. A run
    resumed by `keras.callbacks.BackupAndRestore` starts counting again,
    so it sees the first epochs' data again: with generated data that costs
    nothing but the repetition. Worker threads are fine (`workers=N`);
    worker processes are refused, as each would count on its own and
    repeat the others' batches.

    Args:
        generate: a function `(rng, batch_size) -> batch`, where batch is
            `(inputs, targets)` or `(inputs, targets, sample_weights)` as
            `model.fit` takes them (inputs may be a list, tuple or dict of
            arrays). Every array must have `batch_size` rows.
        batch_size: examples per batch.
        batches_per_epoch: the epoch's length, in batches.
        seed: the run's seed (a non-negative integer).
        **kwargs: `keras.utils.PyDataset` arguments (`workers`,
            `max_queue_size`).

    Example:

    ```python
    def sums(rng, batch_size):
        x = rng.random((batch_size, 3)).astype("float32")
        return x, x.sum(axis=1, keepdims=True)

    batches = keras_attention.generated.GeneratedBatches(sums, batch_size=8, batches_per_epoch=4)
    x, y = batches.draw(0, epoch=0)    # (8, 3), (8, 1)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("adam", "mse")
    model.fit(batches, epochs=2, verbose=0)   # 8 different batches
    ```
    """

    def __init__(self, generate, batch_size, batches_per_epoch, seed=0, **kwargs):
        if kwargs.get("use_multiprocessing"):
            raise ValueError(
                "GeneratedBatches: `use_multiprocessing` must be False (worker processes would each "
                "count the draws of a batch on their own and repeat each other's data); got True. "
                "Use `workers=N` threads."
            )
        super().__init__(**kwargs)
        if not callable(generate):
            raise ValueError(
                "GeneratedBatches: `generate` must be a function (rng, batch_size) -> batch; "
                f"got {type(generate).__name__}."
            )
        self.generate = generate
        self.batch_size = _checks.check_positive_int(self, "batch_size", batch_size)
        self.batches_per_epoch = _checks.check_positive_int(self, "batches_per_epoch", batches_per_epoch)
        if not _checks.is_int(seed) or seed < 0:
            raise ValueError(f"GeneratedBatches: `seed` must be a non-negative integer; got {seed!r}.")
        self.seed = int(seed)
        self._draws = [0] * self.batches_per_epoch
        self._lock = threading.Lock()

    def __len__(self):
        return self.batches_per_epoch

    def __getitem__(self, index):
        self._check_index(index)
        with self._lock:
            epoch = self._draws[index]
            self._draws[index] += 1
        return self.draw(index, epoch)

    def draw(self, index, epoch):
        """Batch `index` of epoch `epoch`, without counting it as drawn."""
        self._check_index(index)
        if not _checks.is_int(epoch) or epoch < 0:
            raise ValueError(f"GeneratedBatches: `epoch` must be a non-negative integer; got {epoch!r}.")
        batch = self.generate(np.random.default_rng((self.seed, int(epoch), int(index))), self.batch_size)
        self._check_batch(batch)
        return batch

    def _check_index(self, index):
        if not _checks.is_int(index) or not 0 <= index < self.batches_per_epoch:
            raise IndexError(f"GeneratedBatches: batch {index!r} of an epoch of {self.batches_per_epoch} batches.")

    def _check_batch(self, batch):
        if not isinstance(batch, tuple) or len(batch) not in (2, 3):
            raise ValueError(
                "GeneratedBatches: `generate` must return a tuple (inputs, targets) or "
                f"(inputs, targets, sample_weights); got {_describe(batch)}."
            )
        for array in keras.tree.flatten(batch):
            rows = np.shape(array)[0] if np.ndim(array) else None
            if rows != self.batch_size:
                raise ValueError(
                    f"GeneratedBatches: every array `generate` returns must have batch_size="
                    f"{self.batch_size} rows; got an array of shape {np.shape(array)}."
                )


def _describe(value):
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} items"
    return type(value).__name__
