"""Sequence and token error rates against brute-force references."""

import itertools

import numpy as np
import pytest

from keras_attention.evaluation import edit_distance, error_rates, sequence_log_likelihoods


def brute_force_distance(a, b):
    """The fewest edits, by breadth-first search over edit scripts (tiny inputs only)."""
    alphabet = sorted(set(a) | set(b))
    frontier, seen, distance = {tuple(a)}, {tuple(a)}, 0
    while tuple(b) not in frontier:
        following = set()
        for s in frontier:
            for i in range(len(s) + 1):
                candidates = [s[:i] + (c,) + s[i:] for c in alphabet]
                if i < len(s):
                    candidates.append(s[:i] + s[i + 1 :])
                    candidates += [s[:i] + (c,) + s[i + 1 :] for c in alphabet]
                following.update(c for c in candidates if len(c) <= max(len(a), len(b)) + 1)
        frontier = following - seen
        seen |= following
        distance += 1
    return distance


def test_edit_distance_equals_breadth_first_search():
    rng = np.random.default_rng(0)
    for _ in range(40):
        a = list(rng.choice(list("xyz"), rng.integers(0, 4)))
        b = list(rng.choice(list("xyz"), rng.integers(0, 4)))
        assert edit_distance(a, b) == brute_force_distance(a, b), (a, b)
    assert edit_distance("kitten", "sitting") == 3
    assert edit_distance(["AH", "B"], []) == 2


def test_error_rates_use_the_closest_of_several_references():
    predictions = [["K", "AE", "T"], ["D", "AA"], ["T", "AH", "M", "EY", "T", "OW"]]
    references = [
        [["K", "AE", "T"]],
        [["D", "AO", "G"], ["D", "AA", "G"]],
        [["T", "AH", "M", "AA", "T", "OW"], ["T", "AH", "M", "EY", "T", "OW"]],
    ]
    rates = error_rates(predictions, references)
    assert rates["examples"] == 3
    assert rates["sequence_error_rate"] == pytest.approx(100 / 3)
    # One deletion against "D AA G" (3 tokens); the other two are exact.
    assert rates["token_error_rate"] == pytest.approx(100 * 1 / (3 + 3 + 6))
    # A single reference may be given bare.
    assert error_rates([["a"]], [["b"]])["sequence_error_rate"] == 100.0


def test_ties_between_references_count_the_shorter_one():
    # "x" is one edit from both "a" and "a x": the shorter reference is counted.
    rates = error_rates([["x"]], [[["a"], ["a", "x"]]])
    assert rates["token_error_rate"] == pytest.approx(100 * 1 / 1)


@pytest.mark.parametrize(
    "args, message",
    [
        (([["a"]], []), r"one entry per example; got 1 and 0"),
        (([], []), r"no examples to score"),
        ((["ab"], [["a", "b"]]), r"example 0: expected token sequences \(lists\), got a string"),
    ],
)
def test_errors(args, message):
    with pytest.raises(ValueError, match=message):
        error_rates(*args)


def test_brute_force_helper_is_exhaustive_on_a_known_case():
    assert brute_force_distance(list("ab"), list("ba")) == 2
    assert all(
        brute_force_distance(list(p), list("xyz")) == edit_distance(p, "xyz") for p in itertools.permutations("xyz")
    )


def test_sequence_log_likelihoods_equal_a_product_of_softmax_probabilities():
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(3, 4, 5)) * 3
    targets = np.array([[1, 4, 2, 0], [3, 0, 0, 0], [0, 0, 0, 0]])
    expected = []
    for row, ids in zip(logits, targets):
        total = 0.0
        for step, token in zip(row, ids):
            if token != 0:
                total += np.log(np.exp(step[token]) / np.exp(step).sum())
        expected.append(total)
    np.testing.assert_allclose(sequence_log_likelihoods(logits, targets), expected, rtol=1e-12)
    assert sequence_log_likelihoods(logits, targets)[2] == 0.0  # all padding
    # Another pad id leaves id 0 scored.
    scored = sequence_log_likelihoods(logits[:1], np.array([[0, 1, 4, 4]]), pad_id=4)
    manual = logits[0, 0, 0] - np.log(np.exp(logits[0, 0]).sum()) + logits[0, 1, 1] - np.log(np.exp(logits[0, 1]).sum())
    np.testing.assert_allclose(scored, [manual], rtol=1e-12)


def test_sequence_log_likelihoods_stay_finite_for_large_logits():
    logits = np.array([[[1000.0, 0.0], [0.0, -1000.0]]], "float32")
    np.testing.assert_allclose(sequence_log_likelihoods(logits, np.array([[1, 1]])), [-1000.0 - 1000.0], rtol=1e-9)


@pytest.mark.parametrize(
    ("logits_shape", "targets", "message"),
    [
        ((2, 3), np.zeros((2, 3), "int32"), "got shapes (2, 3) and (2, 3)"),
        ((2, 3, 4), np.zeros((2, 2), "int32"), "got shapes (2, 3, 4) and (2, 2)"),
        ((1, 2, 4), np.array([[1, 4]]), "`targets` must be ids in [0, 4); got values from 1 to 4"),
    ],
)
def test_sequence_log_likelihoods_refuse_bad_shapes_and_ids(logits_shape, targets, message):
    with pytest.raises(ValueError) as error:
        sequence_log_likelihoods(np.zeros(logits_shape), targets)
    assert message in str(error.value)
