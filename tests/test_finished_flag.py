"""The searches' `finished` output (issue 34 item 13): a hypothesis cut by a
length limit is padded with end ids like one that ended, so only an
explicit flag tells them apart.

Backend-neutral: runs as it is under KERAS_BACKEND=jax or torch."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import beam_search, greedy_search, sampling_search

pytestmark = pytest.mark.any_backend

START, END = 0, 1
# From each previous token the next: 0 -> 2 -> 3 -> end, sharply.
TABLE = np.full((4, 4), -8.0, "float32")
TABLE[0, 2] = TABLE[2, 3] = TABLE[3, END] = TABLE[1, END] = 0.0


def _step(ids, state, time):
    return ops.take(TABLE, ids, axis=0), state


def _numpy(result):
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


def _ends_with_end(ids, lengths):
    """The flag by its definition: the last produced token is the end id."""
    last = np.take_along_axis(ids, np.maximum(lengths - 1, 0)[..., None], axis=-1)[..., 0]
    return (lengths > 0) & (last == END)


@pytest.mark.parametrize("search", [greedy_search, sampling_search])
def test_a_row_cut_by_its_length_limit_is_not_finished(search):
    state = np.zeros((2, 1), "float32")
    result = _numpy(search(_step, state, START, END, 5, length_limits=np.array([2, 5])))
    # Both rows read "2 3" followed by end ids; only row 1 produced the end.
    np.testing.assert_array_equal(result["ids"], [[2, 3, END, END, END], [2, 3, END, END, END]])
    np.testing.assert_array_equal(result["lengths"], [2, 3])
    np.testing.assert_array_equal(result["finished"], [False, True])
    assert result["finished"].dtype == bool
    cut = _numpy(search(_step, state, START, END, 2))  # the loop bound cuts too
    np.testing.assert_array_equal(cut["finished"], [False, False])


def test_beams_cut_by_a_length_limit_and_empty_beams_are_not_finished():
    state = np.zeros((2, 1), "float32")
    result = _numpy(beam_search(_step, state, START, END, 5, 3, length_limits=np.array([2, 5])))
    np.testing.assert_array_equal(result["ids"][:, 0], [[2, 3, END, END, END], [2, 3, END, END, END]])
    np.testing.assert_array_equal(result["finished"][:, 0], [False, True])
    np.testing.assert_array_equal(result["finished"], _ends_with_end(result["ids"], result["lengths"]))
    # A vocabulary of 4 and one step: no fifth hypothesis, an empty beam.
    short = _numpy(beam_search(_step, state, START, END, 1, 5))
    assert short["lengths"][0, -1] == 0 and not short["finished"][:, -1].any()
    np.testing.assert_array_equal(short["finished"], _ends_with_end(short["ids"], short["lengths"]))


def test_early_stopping_leaves_lower_beams_unfinished_and_says_so():
    state = np.zeros((1, 1), "float32")
    result = _numpy(beam_search(_step, state, START, END, 6, 3, early_stopping=True))
    assert result["finished"][0, 0]
    np.testing.assert_array_equal(result["finished"], _ends_with_end(result["ids"], result["lengths"]))
    assert not result["finished"].all()


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_the_decoder_returns_the_flag_and_declares_it(method):
    keras.utils.set_random_seed(0)
    decoder = ka.InferenceDecoder(
        ka.AttentionGRUCell(6, ka.AdditiveAttention(4)),
        keras.layers.Embedding(7, 3),
        keras.layers.Dense(7),
        0,
        1,
        6,
        method=method,
        beam_width=2,
        runtime_options=("max_length",),
    )
    memory = np.random.default_rng(0).normal(size=(3, 4, 5)).astype("float32")
    result = _numpy(decoder(memory, options={"max_length": [1, 6, 3]}))
    np.testing.assert_array_equal(result["finished"], _ends_with_end(result["ids"], result["lengths"]))
    spec = decoder.compute_output_spec(keras.KerasTensor((None, None, 5)))["finished"]
    assert spec.dtype == "bool" and spec.shape == result["finished"].shape[:0] + (None,) + result["finished"].shape[1:]
