"""Lexically constrained beam search (Post and Vilar 2018): without constraints
it is beam search; every finished hypothesis holds its constraints (phrases
and disjunctive groups) and `constraints_met` says which, checked on the
ids; a beam wide enough to keep every hypothesis finds the brute-force best
sequence that meets them."""

import itertools

import numpy as np
import pytest
from keras import ops

from keras_attention.decoding import NEG_INF, beam_search
from keras_attention.decoding.constrained_beam import constrained_beam_search, groups_met
from tests.table_steps import table_step

pytestmark = pytest.mark.any_backend

END = 2


def transitions(seed, examples=3, steps=6, vocabulary=6):
    logits = np.random.default_rng(seed).normal(size=(examples, steps, vocabulary, vocabulary)).astype("float32")
    logits[..., END] -= 0.5
    return logits


def search(logits, constraints, width, groups=None, **options):
    steps = logits.shape[1]
    result = constrained_beam_search(
        table_step(logits),
        ops.arange(len(logits), dtype="int32"),
        0,
        END,
        steps,
        width,
        ops.convert_to_tensor(np.asarray(constraints, "int32")),
        groups=None if groups is None else ops.convert_to_tensor(np.asarray(groups, "int32")),
        **options,
    )
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


def contains(ids, phrase):
    return any(list(ids[i : i + len(phrase)]) == list(phrase) for i in range(len(ids) - len(phrase) + 1))


def phrases_of(row):
    """The phrases of one example's `(C, L)` rows, in order (a row of -1 is none)."""
    return [[int(t) for t in phrase if t >= 0] for phrase in row if (phrase >= 0).any()]


def test_groups_met_counts_each_group_once():
    met = np.array([[[True, True, False, True], [False, False, True, False]]])
    groups = np.array([[0, 0, 1, 2]], "int32")
    np.testing.assert_array_equal(ops.convert_to_numpy(groups_met(met, groups)), [[2, 1]])


@pytest.mark.parametrize("seed", [0, 1])
def test_without_constraints_it_is_beam_search(seed):
    logits = transitions(seed)
    none = np.full((3, 2, 2), -1, "int32")
    got = search(logits, none, 3)
    want = beam_search(table_step(logits), ops.arange(3, dtype="int32"), 0, END, logits.shape[1], 3)
    for name in ("ids", "lengths", "finished"):
        np.testing.assert_array_equal(got[name], ops.convert_to_numpy(want[name]), err_msg=name)
    np.testing.assert_allclose(got["log_probs"], ops.convert_to_numpy(want["log_probs"]), atol=1e-5)
    assert not got["constraints_met"].any()


@pytest.mark.parametrize("seed", [0, 1])
def test_every_finished_hypothesis_holds_its_constraints(seed):
    logits = transitions(seed, steps=8)
    logits[:, 4:, :, END] += 2.0  # the end likely from the fifth token on
    free = search(logits, np.full((3, 1, 1), -1), 4)["ids"][:, 0]
    rng = np.random.default_rng(seed)
    # Phrases the free search did not produce: one or two tokens, not the end.
    constraints = np.full((3, 3, 2), -1, "int32")
    groups = np.array([[0, 1, 2], [0, 0, 1], [0, 1, 1]], "int32")  # example 1, 2: "one of" sets
    for b in range(3):
        for c in range(3):
            while True:
                phrase = [int(t) for t in rng.choice([0, 1, 3, 4, 5], size=1 + (c == 1))]
                if not contains(free[b], phrase):
                    break
            constraints[b, c, : len(phrase)] = phrase
    got = search(logits, constraints, 4, groups=groups)
    # The best of each example met every group; the end waited for them (free search ended before).
    np.testing.assert_array_equal(ops.convert_to_numpy(groups_met(got["constraints_met"], groups))[:, 0], [3, 2, 2])
    assert got["finished"].any() and (got["lengths"][:, 0] > np.argmax(free == END, axis=1) + 1).any()
    for b in range(3):
        phrases = phrases_of(constraints[b])
        for k in range(4):
            ids = got["ids"][b, k, : got["lengths"][b, k]]
            present = [contains(ids, phrase) for phrase in phrases]
            np.testing.assert_array_equal(got["constraints_met"][b, k], present, err_msg=f"{b}, {k}: {ids}")
            if got["finished"][b, k]:
                for group in set(groups[b]):
                    assert any(p for p, g in zip(present, groups[b]) if g == group), (b, k, ids, phrases)
    # Ranked by groups met, then score.
    counts = ops.convert_to_numpy(groups_met(got["constraints_met"], groups))
    assert (np.diff(counts, axis=1) <= 0).all()


def brute_force_best(logits, example, phrases, steps):
    """The likeliest sequence (ended, or cut at `steps`) that holds every phrase, scored as the
    search scores: the end token forbidden (and the rest renormalised) until every phrase appeared."""
    vocabulary = logits.shape[-1]
    best, best_score = None, -np.inf
    for length in range(1, steps + 1):
        for body in itertools.product([t for t in range(vocabulary) if t != END], repeat=length):
            for ends in (True, False):
                if not ends and length != steps:  # only the longest may stop without the end
                    continue
                tokens = list(body[:-1]) + [END] if ends else list(body)
                score, previous = 0.0, 0
                for time, token in enumerate(tokens):
                    row = logits[example, time, previous].astype("float64")
                    if not all(contains(tokens[:time], p) for p in phrases):
                        row = row.copy()
                        row[END] = NEG_INF
                    log_probs = row - np.log(np.exp(row - row.max()).sum()) - row.max()
                    score += log_probs[token]
                    previous = token
                if all(contains(tokens, p) for p in phrases) and score > best_score:
                    best, best_score = tokens, score
    return best, best_score


def test_a_beam_wide_enough_finds_the_brute_force_best_constrained_sequence():
    logits = transitions(3, examples=2, steps=3, vocabulary=4)
    constraints = np.array([[[3, 1], [-1, -1]], [[0, -1], [3, -1]]], "int32")
    got = search(logits, constraints, 32)
    for b in range(2):
        tokens, score = brute_force_best(logits, b, phrases_of(constraints[b]), 3)
        np.testing.assert_array_equal(got["ids"][b, 0, : len(tokens)], tokens)
        np.testing.assert_allclose(got["log_probs"][b, 0], score, atol=1e-4)
        assert got["constraints_met"][b, 0][: len(phrases_of(constraints[b]))].all()


def test_a_decoder_takes_constraints_with_the_call_serializes_and_refuses_bad_ones():
    import keras

    import keras_attention as ka

    keras.utils.set_random_seed(0)
    parts = (ka.AttentionGRUCell(8, ka.AdditiveAttention(4)), keras.layers.Embedding(9, 4), keras.layers.Dense(9))
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32") * 3
    decoder = ka.InferenceDecoder(*parts, 1, END, 8, method="constrained_beam", beam_width=3, max_constraints=2)
    free = {k: ops.convert_to_numpy(v) for k, v in decoder(memory).items()}
    plain = ops.convert_to_numpy(ka.InferenceDecoder(*parts, 1, END, 8, method="beam", beam_width=3)(memory)["ids"])
    np.testing.assert_array_equal(free["ids"], plain)  # no constraint: beam search
    assert free["constraints_met"].shape == (3, 3, 2) and not free["constraints_met"].any()
    constraints = np.array([[[5, 6], [-1, -1]], [[7, -1], [4, -1]], [[-1, -1], [-1, -1]]], "int32")
    groups = np.array([[0, 1], [0, 0], [0, 1]], "int32")  # example 1: 7 or 4
    result = {k: ops.convert_to_numpy(v) for k, v in decoder(memory, constraints=constraints).items()}
    either = {
        k: ops.convert_to_numpy(v)
        for k, v in decoder(memory, constraints=constraints, constraint_groups=groups).items()
    }
    for got, group_of in ((result, np.array([[0, 1]] * 3)), (either, groups)):
        for b in range(3):
            ids = got["ids"][b, 0, : got["lengths"][b, 0]]
            phrases = phrases_of(constraints[b])
            present = [contains(ids, phrase) for phrase in phrases]
            np.testing.assert_array_equal(got["constraints_met"][b, 0, : len(phrases)], present)
            for group in set(group_of[b, : len(phrases)].tolist()):  # each group met by one of its phrases
                assert any(p for p, g in zip(present, group_of[b]) if g == group), (b, ids, phrases)
    # Example 1 needs both 7 and 4, or only one of them with the groups.
    assert result["constraints_met"][1, 0].all() and either["constraints_met"][1, 0].sum() >= 1
    np.testing.assert_array_equal(result["ids"][2], plain[2])  # no phrase for example 2
    assert decoder.output_spec_for(3, 4)["constraints_met"].shape == (3, 3, 2)
    restored = ka.InferenceDecoder.from_config(decoder.get_config())
    assert (restored.method, restored.max_constraints) == ("constrained_beam", 2)
    with pytest.raises(ValueError, match=r"`constraints` holds 3 sequences per example, more than the 2"):
        decoder(memory, constraints=np.full((3, 3, 1), 4))
    with pytest.raises(ValueError, match=r"`constraints` holds the end token 2"):
        decoder(memory, constraints=np.array([[[END]], [[4]], [[4]]]))
    with pytest.raises(ValueError, match=r"`constraint_groups` must be \(batch, phrases\) = \(3, 2\)"):
        decoder(memory, constraints=constraints, constraint_groups=groups[:, :1])
    beam = ka.InferenceDecoder(*parts, 1, END, 8, method="beam")
    with pytest.raises(ValueError, match=r"`constraints` needs a search that meets constraints"):
        beam(memory, constraints=constraints)
