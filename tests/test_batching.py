"""LengthBucketedBatches: every example once per epoch, in batches of near-equal length."""

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.batching import LengthBucketedBatches


def ragged(rng, count, low=1, high=12, vocabulary=9):
    return [list(rng.integers(1, vocabulary, rng.integers(low, high))) for _ in range(count)]


def unpad(row):
    row = list(row)
    while row and row[-1] == 0:
        row.pop()
    return row


def test_every_example_once_per_epoch_padded_to_its_batch():
    rng = np.random.default_rng(0)
    sources, targets = ragged(rng, 103), ragged(rng, 103)
    batches = LengthBucketedBatches((sources, targets), targets, batch_size=10, seed=1)
    assert len(batches) == 11
    for _ in range(2):
        seen = []
        for index in range(len(batches)):
            (x_source, x_target), y = batches[index]
            rows = batches._batches[index]
            lengths = [len(sources[i]) for i in rows]
            assert x_source.shape == (len(rows), max(lengths)) == (len(rows), max(1, max(lengths)))
            for array, column in ((x_source, sources), (x_target, targets), (y, targets)):
                assert [unpad(r) for r in array] == [column[i] for i in rows]
            seen += list(rows)
        assert sorted(seen) == list(range(103))
        batches.on_epoch_end()


def test_batches_hold_near_equal_lengths():
    rng = np.random.default_rng(1)
    sources = ragged(rng, 400, high=30)
    batches = LengthBucketedBatches(sources, batch_size=20, seed=0)
    # Each batch is a run of the length-sorted examples: no two batches' length ranges interleave.
    ranges = sorted(
        (min(lengths), max(lengths)) for lengths in ([len(sources[i]) for i in rows] for rows in batches._batches)
    )
    assert all(high <= next_low for (_, high), (next_low, _) in zip(ranges, ranges[1:]))
    padded = sum(np.prod(batches[i][0].shape) for i in range(len(batches)))
    assert padded <= 1.05 * sum(map(len, sources))


def test_shuffling_is_seeded_and_off_gives_a_fixed_sorted_order():
    rng = np.random.default_rng(2)
    sources = ragged(rng, 50)
    first = LengthBucketedBatches(sources, batch_size=8, seed=3).example_order
    np.testing.assert_array_equal(first, LengthBucketedBatches(sources, batch_size=8, seed=3).example_order)
    shuffled = LengthBucketedBatches(sources, batch_size=8, seed=3)
    shuffled.on_epoch_end()
    assert not np.array_equal(first, shuffled.example_order)
    fixed = LengthBucketedBatches(sources, batch_size=8, shuffle=False)
    order = fixed.example_order
    # Unshuffled, the batches are the sorted runs (the two that lead are
    # the shape probes for Keras; see the next test).
    runs = sorted(([len(sources[i]) for i in rows] for rows in fixed._batches), key=lambda run: (min(run), max(run)))
    assert sum(runs, []) == sorted(map(len, sources))
    fixed.on_epoch_end()
    np.testing.assert_array_equal(order, fixed.example_order)


def test_length_multiple_and_dict_inputs_and_padded_arrays():
    sources = np.array([[1, 2, 3, 0, 0], [4, 0, 0, 0, 0], [5, 6, 0, 0, 0]])
    batches = LengthBucketedBatches(
        {"source": sources, "extra": sources}, batch_size=3, length_multiple=4, shuffle=False
    )
    (x,) = batches[0]
    assert set(x) == {"source", "extra"}
    np.testing.assert_array_equal(x["source"], [[4, 0, 0, 0], [5, 6, 0, 0], [1, 2, 3, 0]])


def test_fit_trains_a_seq2seq_model_on_bucketed_batches():
    rng = np.random.default_rng(3)
    sources = ragged(rng, 64, high=8)
    targets = [row[::-1] + [1] for row in sources]  # reverse, then an end token
    inputs = [[2] + row[:-1] for row in targets]
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(10, 8, mask_zero=True)(source)
    outputs = ka.AttentionDecoder(ka.AttentionGRUCell(16, ka.DotAttention()))(
        keras.layers.Embedding(10, 8, mask_zero=True)(target_in), keras.layers.Dense(16)(memory)
    )
    model = keras.Model([source, target_in], keras.layers.Dense(10)(outputs))
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ka.training.build_optimizer(model)
    batches = LengthBucketedBatches((sources, inputs), targets, batch_size=16, seed=0)
    history = model.fit(batches, epochs=3, verbose=0)
    assert len(history.history["loss"]) == 3
    assert history.history["loss"][-1] < history.history["loss"][0]


def test_target_weights_mark_the_real_target_steps():
    batches = LengthBucketedBatches([[1, 2], [3]], [[4, 5, 6], [7]], batch_size=2, shuffle=False, weigh_targets=True)
    x, y, weights = batches[0]
    np.testing.assert_array_equal(y, [[7, 0, 0], [4, 5, 6]])
    np.testing.assert_array_equal(weights, [[1, 0, 0], [1, 1, 1]])
    assert weights.dtype == np.float32


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: LengthBucketedBatches([[1]], batch_size=0), r"`batch_size` must be a positive integer; got 0"),
        (
            lambda: LengthBucketedBatches([[1]], length_multiple=True),
            r"`length_multiple` must be a positive integer; got True",
        ),
        (lambda: LengthBucketedBatches([[1], [2]], [[1]]), r"same number of examples; got sizes \[1, 2\]"),
        (lambda: LengthBucketedBatches([]), r"no examples"),
        (lambda: LengthBucketedBatches(([[1]], [[2]]), sort_by=2), r"`sort_by` must name one of the inputs; got 2"),
        (lambda: LengthBucketedBatches([[1]], weigh_targets=True), r"`weigh_targets=True` needs `targets`"),
        (lambda: LengthBucketedBatches(5), r"`inputs` must be a list of id sequences or a padded 2-D array; got int"),
    ],
)
def test_errors(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_keras_sees_every_length_dimension_as_variable():
    # Keras fixes any dimension the first two batches share; a fixed length
    # would make every later batch of another length fail inside `fit`.
    from keras.src.trainers.data_adapters import data_adapter_utils  # what fit itself calls

    rng = np.random.default_rng(5)
    sources, targets = ragged(rng, 250, high=20), ragged(rng, 250, high=20)
    batches = LengthBucketedBatches((sources, targets), targets, batch_size=32, seed=1)
    for _ in range(3):
        spec = data_adapter_utils.get_keras_tensor_spec([batches[0], batches[1]])
        for tensor in keras.tree.flatten(spec):
            assert tensor.shape == (None, None), tensor.shape
        batches.on_epoch_end()
