"""Beam search's step, piece by piece, on hand-computed NumPy cases."""

import inspect
import re

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention import _reductions
from keras_attention._reductions import first_top_k
from keras_attention.decoding import (
    NEG_INF,
    beam_rows,
    candidate_scores,
    coverage_penalty,
    extend_hypotheses,
    gather_beams,
    length_penalty,
    reorder_beams,
    search_is_decided,
    select_candidates,
    write_step,
)
from tests.layer_cases import top_k_with_ties_to_the_highest_index

pytestmark = pytest.mark.any_backend

LOG_THIRD = np.log(1 / 3)


def test_length_penalty_is_the_gnmt_formula():
    np.testing.assert_allclose(length_penalty(np.array([1, 7, 13]), 1.0), [1.0, 2.0, 3.0], rtol=1e-6)
    np.testing.assert_allclose(length_penalty(np.array([2]), 2.0), [(7 / 6) ** 2], rtol=1e-6)
    np.testing.assert_array_equal(length_penalty(np.array([1, 50]), 0.0), [1.0, 1.0])


def test_coverage_penalty_sums_the_log_of_capped_attended_coverage():
    coverage = np.array([[0.5, 2.0, 0.0], [1.0, 0.25, 0.25], [0.0, 0.0, 0.0]], "float32")
    # Row 0: only 0.5 is below the cap (2.0 -> log 1 = 0) and 0.0 was never
    # attended; row 1: two quarters; row 2: nothing attended, no penalty.
    want = 0.5 * np.array([np.log(0.5), 2 * np.log(0.25), 0.0])
    np.testing.assert_allclose(coverage_penalty(coverage, 0.5), want, rtol=1e-6)
    assert coverage_penalty(coverage[None], 0.5).shape == (1, 3)


def test_extend_hypotheses_adds_log_probabilities_and_finished_beams_only_end():
    log_probs = np.array([[-1.0, -2.0], [NEG_INF, -0.5]], "float32")
    step = np.array(
        [
            [[LOG_THIRD] * 3, [LOG_THIRD] * 3],
            [[-1.0, -2.0, -3.0], [-0.1, -2.5, -3.0]],
        ],
        "float32",
    )
    finished = np.array([[False, True], [False, True]])
    total = ops.convert_to_numpy(extend_hypotheses(log_probs, step, finished, end_token=0))
    want = np.array(
        [
            [[-1 + LOG_THIRD] * 3, [-2.0, NEG_INF, NEG_INF]],
            # A dead beam (NEG_INF) stays at the floor instead of overflowing
            # to -inf; the finished beam keeps -0.5 whatever its step says.
            [[NEG_INF] * 3, [-0.5, NEG_INF, NEG_INF]],
        ],
        "float32",
    )
    np.testing.assert_allclose(total, want, rtol=1e-6)
    assert np.isfinite(total).all()


def test_extend_hypotheses_puts_the_end_token_where_it_is():
    total = ops.convert_to_numpy(
        extend_hypotheses(
            np.zeros((1, 1), "float32"), np.full((1, 1, 3), -1.0, "float32"), np.array([[True]]), end_token=2
        )
    )
    np.testing.assert_array_equal(total, [[[NEG_INF, NEG_INF, 0.0]]])


def test_candidate_scores_divide_by_the_length_penalty_and_add_coverage_at_the_end():
    total = np.array([[[-2.0, -3.0], [-1.5, NEG_INF]]], "float32")
    finished = np.array([[False, True]])
    lengths = np.array([[1, 2]])
    penalty = np.array([[-0.5, -0.25]], "float32")
    lp2 = 7 / 6  # ((5 + 2) / 6) ** 1
    got = ops.convert_to_numpy(candidate_scores(total, finished, lengths, 0, 1.0, penalty))
    # Beam 0 runs: its candidates have 2 tokens, and only the one ending
    # (token 0) pays the coverage penalty. Beam 1 has finished with 2 tokens:
    # it keeps its length and pays the penalty on every candidate.
    want = [[[-2.0 / lp2 - 0.5, -3.0 / lp2], [-1.5 / lp2 - 0.25, NEG_INF / lp2 - 0.25]]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(
        candidate_scores(total, finished, lengths, 0, 1.0),
        [[[-2.0 / lp2, -3.0 / lp2], [-1.5 / lp2, NEG_INF / lp2]]],
        rtol=1e-6,
    )
    # No length penalty: the scores are the log-probabilities.
    np.testing.assert_array_equal(candidate_scores(total, finished, lengths, 0, 0.0), total)
    # The end token's column takes the penalty, wherever it is.
    np.testing.assert_allclose(
        candidate_scores(total, finished, lengths, 1, 1.0, penalty)[0, 0], [-2.0 / lp2, -3.0 / lp2 - 0.5], rtol=1e-6
    )


def test_select_candidates_keeps_the_best_and_follows_their_parents():
    scores = np.array(
        [
            [[-1.0, -4.0, -5.0], [-2.0, -3.0, -0.5]],  # example 0: both beams run
            [[-0.3, NEG_INF, NEG_INF], [-1.0, -2.0, -0.7]],  # example 1: beam 0 has ended
        ],
        "float32",
    )
    total = 2 * scores  # distinct from the scores: log_probs must come from total
    finished = np.array([[False, False], [True, False]])
    lengths = np.array([[1, 1], [3, 1]])
    chosen = {
        k: ops.convert_to_numpy(v)
        for k, v in select_candidates(scores, total, finished, lengths, end_token=0, pad_token=9).items()
    }
    # Example 0: -0.5 (beam 1, token 2), then -1.0 (beam 0, token 0 = end).
    # Example 1: -0.3 (finished beam 0 continues: pad, length kept), then
    # -0.7 (beam 1, token 2).
    np.testing.assert_array_equal(chosen["scores"], np.float32([[-0.5, -1.0], [-0.3, -0.7]]))
    np.testing.assert_array_equal(chosen["log_probs"], 2 * np.float32([[-0.5, -1.0], [-0.3, -0.7]]))
    np.testing.assert_array_equal(chosen["parents"], [[1, 0], [0, 1]])
    np.testing.assert_array_equal(chosen["tokens"], [[2, 0], [9, 2]])
    np.testing.assert_array_equal(chosen["lengths"], [[2, 2], [3, 2]])
    np.testing.assert_array_equal(chosen["finished"], [[False, True], [True, False]])


def test_select_candidates_matches_a_numpy_reference_on_random_beams():
    rng = np.random.default_rng(0)
    batch, width, vocabulary, end, pad = 3, 4, 5, 1, 7
    for _ in range(5):
        scores = rng.normal(size=(batch, width, vocabulary)).astype("float32")
        total = rng.normal(size=(batch, width, vocabulary)).astype("float32")
        finished = rng.random((batch, width)) < 0.3
        lengths = rng.integers(1, 6, size=(batch, width))
        chosen = {
            k: ops.convert_to_numpy(v) for k, v in select_candidates(scores, total, finished, lengths, end, pad).items()
        }
        for b in range(batch):
            order = np.argsort(-scores[b].reshape(-1), kind="stable")[:width]
            parents, tokens = order // vocabulary, order % vocabulary
            np.testing.assert_array_equal(chosen["parents"][b], parents)
            np.testing.assert_array_equal(chosen["scores"][b], scores[b].reshape(-1)[order])
            np.testing.assert_array_equal(chosen["log_probs"][b], total[b].reshape(-1)[order])
            np.testing.assert_array_equal(chosen["tokens"][b], np.where(finished[b, parents], pad, tokens))
            np.testing.assert_array_equal(chosen["lengths"][b], lengths[b, parents] + ~finished[b, parents])
            np.testing.assert_array_equal(
                chosen["finished"][b], finished[b, parents] | (np.where(finished[b, parents], pad, tokens) == end)
            )


@pytest.mark.parametrize("tie_order", ["backend", "highest_first"])
def test_select_candidates_breaks_ties_at_the_lowest_candidate_on_every_backend(tie_order, monkeypatch):
    # torch's topk returns equal values in no promised order (e.g. index 3
    # before 0 among four zeros); with "highest_first" a top_k that always
    # returns the highest index first shows the choice does not lean on it.
    if tie_order == "highest_first":
        monkeypatch.setattr(ops, "top_k", top_k_with_ties_to_the_highest_index(ops.top_k))
        monkeypatch.setattr(_reductions, "TOP_K_TIES_TO_THE_LOWEST_INDEX", ())
    width, vocabulary = 3, 4
    scores = np.zeros((2, width, vocabulary), "float32")  # example 0: all 12 candidates tie
    scores[1] = -1.0
    scores[1, 2, [1, 3]] = -0.5  # example 1: candidates 9 and 11 lead, then 0 among ten at -1
    chosen = select_candidates(scores, scores, np.zeros((2, width), bool), np.ones((2, width), "int32"), 0, 0)
    chosen = {k: ops.convert_to_numpy(v) for k, v in chosen.items()}
    np.testing.assert_array_equal(chosen["parents"] * vocabulary + chosen["tokens"], [[0, 1, 2], [9, 11, 0]])
    np.testing.assert_array_equal(chosen["scores"], [[0, 0, 0], [-0.5, -0.5, -1]])


@pytest.mark.parametrize("tie_order", ["backend", "highest_first"])
def test_first_top_k_takes_equal_values_from_the_lowest_index(tie_order, monkeypatch):
    if tie_order == "highest_first":
        monkeypatch.setattr(ops, "top_k", top_k_with_ties_to_the_highest_index(ops.top_k))
        monkeypatch.setattr(_reductions, "TOP_K_TIES_TO_THE_LOWEST_INDEX", ())
    rng = np.random.default_rng(3)
    x = rng.integers(0, 4, size=(5, 300)).astype("float32")  # many ties of four values
    x[:, ::7] = -np.inf  # ties of -inf too (what masked candidates may be)
    x[4] = -np.inf  # a row of nothing else
    for k in (1, 6, 90):  # 90: past every value's count in some row
        values, indices = first_top_k(ops.convert_to_tensor(x), k)
        want = np.argsort(-x, axis=1, kind="stable")[:, :k]
        np.testing.assert_array_equal(ops.convert_to_numpy(indices), want, err_msg=f"k={k}")
        np.testing.assert_array_equal(ops.convert_to_numpy(values), np.take_along_axis(x, want, 1))
        assert keras.backend.standardize_dtype(indices.dtype) == "int32"
    with pytest.raises(ValueError, match=r"`k` must be a Python int .* got None"):
        first_top_k(ops.convert_to_tensor(x), None)


# Both ways `gather_beams` takes rows: a comparison mask (small rows) and a gather.
SELECTIONS = {"mask": 10**9, "gather": 0}


@pytest.mark.parametrize("selection", SELECTIONS)
def test_beam_rows_gather_beams_reorder_beams_and_write_step(selection, monkeypatch):
    monkeypatch.setattr(keras_attention.decoding.beams, "SELECT_BY_MASK_ELEMENTS", SELECTIONS[selection])
    parents = np.array([[1, 1, 0], [2, 0, 1]], "int32")
    np.testing.assert_array_equal(beam_rows(parents), [1, 1, 0, 5, 3, 4])
    tensor = np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2)
    want = tensor[np.arange(2)[:, None], parents]
    np.testing.assert_array_equal(gather_beams(tensor, parents), want)
    # k rows of n: two of three (a pool), four of three (candidates), as many as it holds.
    for picked in (np.array([[2, 0], [1, 1]], "int32"), np.array([[2, 0, 0, 1], [1, 1, 2, 0]], "int32")):
        got = gather_beams(ops.convert_to_tensor(tensor), ops.convert_to_tensor(picked))
        np.testing.assert_array_equal(got, tensor[np.arange(2)[:, None], picked])
    state = {"h": tensor.reshape(6, 2, 2), "c": (np.arange(6.0),)}
    reordered = reorder_beams(state, parents)
    np.testing.assert_array_equal(reordered["h"], want.reshape(6, 2, 2))
    np.testing.assert_array_equal(reordered["c"][0], [1.0, 1.0, 0.0, 5.0, 3.0, 4.0])
    history = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    values = np.array([[-1, -2, -3], [-4, -5, -6]])
    written = ops.convert_to_numpy(write_step(history, parents, 2, values))
    want = history[np.arange(2)[:, None], parents].copy()
    want[:, :, 2] = values
    np.testing.assert_array_equal(written, want)
    # The alignment history: a trailing source axis after the time axis.
    alignments = np.random.default_rng(1).random((2, 3, 4, 5)).astype("float32")
    step = np.random.default_rng(2).random((2, 3, 5)).astype("float32")
    want = alignments[np.arange(2)[:, None], parents].copy()
    want[:, :, 1] = step
    np.testing.assert_array_equal(write_step(alignments, parents, 1, step), want)


@pytest.mark.parametrize("selection", SELECTIONS)
def test_gather_beams_is_exact_for_every_dtype_and_for_infinities(selection, monkeypatch):
    monkeypatch.setattr(keras_attention.decoding.beams, "SELECT_BY_MASK_ELEMENTS", SELECTIONS[selection])
    rng = np.random.default_rng(4)
    parents = rng.integers(0, 4, size=(3, 4)).astype("int32")
    floats = rng.standard_normal((3, 4, 6)).astype("float32")
    floats[0, :, 0] = [-np.inf, np.inf, NEG_INF, -0.0]  # a mask that multiplied would give NaN
    # (-0.0 may come back +0.0 from the mask's sum: equal, as the test compares.)
    floats[1, 2, 3] = np.nan  # only the beams that take row 2 may see it
    cases = {
        "float32": floats,
        "float16": np.where(np.isfinite(floats), floats, 0.0).astype("float16"),
        "int32": rng.integers(-(2**31), 2**31 - 1, size=(3, 4, 6)).astype("int32"),
        "int8": rng.integers(-128, 128, size=(3, 4, 6)).astype("int8"),
        "uint8": rng.integers(0, 256, size=(3, 4, 6)).astype("uint8"),
        "bool": rng.random((3, 4, 6)) < 0.5,
    }
    for dtype, tensor in cases.items():
        got = ops.convert_to_numpy(gather_beams(ops.convert_to_tensor(tensor), parents))
        want = tensor[np.arange(3)[:, None], parents]
        assert keras.backend.standardize_dtype(got.dtype) == dtype
        np.testing.assert_array_equal(got, want, err_msg=dtype)

    # An empty batch keeps its shape.
    empty = gather_beams(ops.zeros((0, 4, 6), "float32"), ops.zeros((0, 4), "int32"))
    assert tuple(ops.shape(empty)) == (0, 4, 6)


def test_search_is_decided_compares_the_best_finished_with_the_best_reachable():
    finished_log_prob, running_log_prob = np.log(0.5) + np.log(0.98), np.log(0.45)  # -0.713, -0.799
    lp = lambda n: ((5 + n) / 6) ** 2  # noqa: E731
    log_probs = np.float32([[finished_log_prob, running_log_prob]] * 4)
    finished = np.array([[True, False], [False, False], [True, True], [True, False]])
    scores = log_probs.copy()
    scores[3, 1] = 0.0  # a running beam's current score is not what counts
    # Without a length penalty a running hypothesis can reach its own log p.
    np.testing.assert_array_equal(search_is_decided(scores, log_probs, finished, 10, 0.0), [True, False, True, True])
    # alpha = 2: -0.713 / lp(2) = -0.524 against -0.799 / lp(10) = -0.128.
    scores = log_probs / np.float32([[lp(2), lp(2)]])
    np.testing.assert_array_equal(search_is_decided(scores, log_probs, finished, 10, 2.0), [False, False, True, False])
    # With max_length 2 the running beam cannot grow past lp(2): decided.
    np.testing.assert_array_equal(search_is_decided(scores, log_probs, finished, 2, 2.0), [True, False, True, True])


STEP_FUNCTIONS = [
    keras_attention.decoding.length_penalty,
    keras_attention.decoding.coverage_penalty,
    keras_attention.decoding.extend_hypotheses,
    keras_attention.decoding.candidate_scores,
    keras_attention.decoding.select_candidates,
    keras_attention.decoding.search_is_decided,
    keras_attention.decoding.beam_rows,
    keras_attention.decoding.gather_beams,
    keras_attention.decoding.reorder_beams,
    keras_attention.decoding.write_step,
]


@pytest.mark.parametrize("function", STEP_FUNCTIONS, ids=lambda f: f.__name__)
def test_docstring_examples_run(function):
    (example,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(function), re.S)
    exec(
        compile(example, f"<{function.__name__} example>", "exec"),
        {"np": np, "keras": keras, "keras_attention": keras_attention},
    )
