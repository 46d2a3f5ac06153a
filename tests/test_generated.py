"""keras_attention.generated.GeneratedBatches: fresh, reproducible batches every epoch."""

import keras
import numpy as np
import pytest

from keras_attention.generated import GeneratedBatches
from keras_attention.training import build_optimizer


def _sums(rng, batch_size):
    x = rng.random((batch_size, 3)).astype("float32")
    return x, x.sum(axis=1, keepdims=True)


def test_batch_is_the_generator_seeded_by_seed_epoch_and_index():
    batches = GeneratedBatches(_sums, batch_size=4, batches_per_epoch=3, seed=7)
    expected = np.random.default_rng((7, 5, 2)).random((4, 3)).astype("float32")
    x, y = batches.draw(2, epoch=5)
    np.testing.assert_array_equal(x, expected)
    np.testing.assert_allclose(y[:, 0], expected.sum(axis=1), rtol=1e-6)
    np.testing.assert_array_equal(batches.draw(2, epoch=5)[0], x)  # drawing does not count
    assert len(batches) == 3


def test_the_kth_request_of_a_batch_is_its_kth_epoch_in_any_order():
    first = GeneratedBatches(_sums, batch_size=5, batches_per_epoch=2, seed=1)
    # Batch 1 asked before batch 0, and batch 0 twice in a row: each index
    # counts its own draws, so the order of the requests does not matter.
    b1_e0, b0_e0, b0_e1, b1_e1 = first[1][0], first[0][0], first[0][0], first[1][0]
    np.testing.assert_array_equal(b0_e0, first.draw(0, 0)[0])
    np.testing.assert_array_equal(b0_e1, first.draw(0, 1)[0])
    np.testing.assert_array_equal(b1_e1, first.draw(1, 1)[0])
    assert len({a.tobytes() for a in (b0_e0, b0_e1, b1_e0, b1_e1)}) == 4
    again = GeneratedBatches(_sums, batch_size=5, batches_per_epoch=2, seed=1)
    np.testing.assert_array_equal(again[1][0], b1_e0)
    other_seed = GeneratedBatches(_sums, batch_size=5, batches_per_epoch=2, seed=2)
    assert not np.array_equal(other_seed[1][0], b1_e0)


def test_fit_sees_new_batches_every_epoch_and_a_rerun_sees_the_same():
    def run():
        asked = []

        def generate(rng, batch_size):
            x, y = _sums(rng, batch_size)
            asked.append(x[0, 0])
            return x, y

        batches = GeneratedBatches(generate, batch_size=8, batches_per_epoch=4, seed=0)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        build_optimizer(model)
        model.fit(batches, epochs=3, verbose=0)
        return asked

    asked = run()
    assert len(asked) >= 12 and len(set(asked)) == len(asked)  # never one batch twice
    assert sorted(run()) == sorted(asked)


def test_three_part_batches_and_dict_inputs_pass():
    def generate(rng, batch_size):
        x, y = _sums(rng, batch_size)
        return {"x": x}, y, np.ones(batch_size, "float32")

    inputs, _, weights = GeneratedBatches(generate, batch_size=2, batches_per_epoch=1)[0]
    assert inputs["x"].shape == (2, 3) and weights.shape == (2,)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"generate": "sums"}, "`generate` must be a function (rng, batch_size) -> batch; got str"),
        ({"batch_size": 0}, "`batch_size` must be a positive integer; got 0"),
        ({"batches_per_epoch": 2.5}, "`batches_per_epoch` must be a positive integer; got 2.5"),
        ({"seed": -1}, "`seed` must be a non-negative integer; got -1"),
    ],
)
def test_bad_arguments_are_named(kwargs, message):
    arguments = {"generate": _sums, "batch_size": 4, "batches_per_epoch": 2, **kwargs}
    with pytest.raises(ValueError) as error:
        GeneratedBatches(**arguments)
    assert message in str(error.value) and "GeneratedBatches" in str(error.value)


@pytest.mark.parametrize(
    ("generate", "message"),
    [
        (
            lambda rng, n: rng.random((n, 3)),
            "must return a tuple (inputs, targets) or (inputs, targets, sample_weights); got ndarray",
        ),
        (lambda rng, n: [rng.random((n, 3)), rng.random(n)], "got a list of 2 items"),
        (lambda rng, n: (rng.random((n + 1, 3)), rng.random(n)), "batch_size=4 rows; got an array of shape (5, 3)"),
        (lambda rng, n: (rng.random((n, 3)), 1.0), "batch_size=4 rows; got an array of shape ()"),
    ],
)
def test_a_bad_batch_is_refused_when_drawn(generate, message):
    batches = GeneratedBatches(generate, batch_size=4, batches_per_epoch=2)
    with pytest.raises(ValueError) as error:
        batches[0]
    assert message in str(error.value)


def test_index_past_the_epoch_is_an_index_error_and_processes_are_refused():
    batches = GeneratedBatches(_sums, batch_size=4, batches_per_epoch=2)
    with pytest.raises(IndexError, match="batch 2 of an epoch of 2 batches"):
        batches[2]
    with pytest.raises(ValueError, match="`epoch` must be a non-negative integer; got -1"):
        batches.draw(0, epoch=-1)
    with pytest.raises(ValueError, match="`use_multiprocessing` must be False"):
        GeneratedBatches(_sums, batch_size=4, batches_per_epoch=2, use_multiprocessing=True, workers=2)
