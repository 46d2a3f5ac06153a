"""Beam search's `length_convention="tfa"`: tfa.seq2seq's length-penalty
bookkeeping, against a NumPy transcription of tfa's BeamSearchDecoder step
and against ids and scores tfa 0.23 itself produced (tests/fixtures/tfa_beam)."""

import json
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import beam_search, candidate_scores

FIXTURE = Path(__file__).parent / "fixtures" / "tfa_beam" / "beams.json"
START, END = 1, 0


def lp(n, alpha):
    return ((5.0 + n) / 6.0) ** alpha


def test_tfa_convention_does_not_count_the_end_token_at_the_step_it_is_chosen():
    total = np.array([[[-2.0, -3.0], [-1.0, -4.0]]], "float32")  # beams x tokens; token 0 ends
    finished, lengths = np.array([[False, True]]), np.array([[2, 3]])
    penalty = np.array([[-0.5, -0.25]], "float32")
    got = np.asarray(candidate_scores(total, finished, lengths, 0, 1.0, penalty, length_convention="tfa"))
    # Running beam: ending keeps length 2 and gets no coverage penalty yet;
    # continuing counts 3. Finished beam: its stored 3, with its penalty.
    want = [[[-2.0 / lp(2, 1), -3.0 / lp(3, 1)], [-1.0 / lp(3, 1) - 0.25, -4.0 / lp(3, 1) - 0.25]]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    default = np.asarray(candidate_scores(total, finished, lengths, 0, 1.0, penalty))
    np.testing.assert_allclose(default[0, 0], [-2.0 / lp(3, 1) - 0.5, -3.0 / lp(3, 1)], rtol=1e-6)
    np.testing.assert_allclose(default[0, 1], got[0, 1], rtol=1e-6)


def tfa_beam_search(table, width, max_length, alpha):
    """tfa 0.23's BeamSearchDecoder on a step whose logits are `table[b, t,
    previous id]`, transcribed in NumPy: returns ids (B, K, steps), scores
    and lengths (B, K), in tfa's final beam order."""
    batch, _, vocabulary, _ = table.shape
    log_probs = np.full((batch, width), -np.inf)
    log_probs[:, 0] = 0.0
    finished = np.zeros((batch, width), bool)
    lengths = np.zeros((batch, width), np.int64)
    previous = np.full((batch, width), START)
    history, parents_history = [], []
    floor = np.finfo(np.float32).min
    for t in range(max_length):
        logits = table[np.arange(batch)[:, None], t, previous]  # (B, K, V)
        step = logits - np.log(np.exp(logits - logits.max(-1, keepdims=True)).sum(-1, keepdims=True))
        step -= logits.max(-1, keepdims=True)
        finished_row = np.where(np.arange(vocabulary) == END, 0.0, floor)
        step = np.where(finished[..., None], finished_row, step)
        total = log_probs[..., None] + step
        to_add = (np.arange(vocabulary) != END)[None, None, :] & ~finished[..., None]
        scores = total / lp(lengths[..., None] + to_add, alpha)
        flat = scores.reshape(batch, -1)
        chosen = np.argsort(-flat, axis=1, kind="stable")[:, :width]
        parents, words = chosen // vocabulary, chosen % vocabulary
        log_probs = np.take_along_axis(total.reshape(batch, -1), chosen, 1)
        best_scores = np.take_along_axis(flat, chosen, 1)
        parent_finished = np.take_along_axis(finished, parents, 1)
        lengths = np.take_along_axis(lengths, parents, 1) + ~parent_finished
        finished = parent_finished | (words == END)
        history.append(words)
        parents_history.append(parents)
        previous = words
        if finished.all():
            break
    # gather_tree: follow the parents back from the last step.
    steps = len(history)
    ids = np.zeros((batch, width, steps), np.int64)
    beam = np.tile(np.arange(width), (batch, 1))
    for t in reversed(range(steps)):
        ids[:, :, t] = np.take_along_axis(history[t], beam, 1)
        beam = np.take_along_axis(parents_history[t], beam, 1)
    return ids, best_scores, lengths


def ours(table, width, max_length, alpha, convention):
    batch, steps, vocabulary, _ = table.shape
    flat_table = ops.convert_to_tensor(table.reshape(-1, vocabulary).astype("float32"))

    def step_fn(ids, state):
        time, example = state
        row = ((example * steps + time) * vocabulary) + ops.cast(ids, "int32")
        return ops.take(flat_table, row, axis=0), (time + 1, example)

    state = (ops.zeros((batch,), "int32"), ops.arange(batch, dtype="int32"))
    result = beam_search(
        step_fn, state, START, END, max_length, width, length_penalty_weight=alpha, length_convention=convention
    )
    return {name: np.asarray(value) for name, value in result.items()}


def random_table(seed, batch=16, steps=6, vocabulary=5, spread=2.0):
    rng = np.random.default_rng(seed)
    table = rng.normal(0.0, spread, size=(batch, steps, vocabulary, vocabulary))
    table[..., END] += rng.normal(0.0, 1.0, size=(batch, steps, vocabulary))  # end at varied steps
    return table


@pytest.mark.parametrize("alpha", [0.6, 1.0, 2.0])
def test_tfa_convention_matches_a_transcription_of_tfas_beam_search(alpha):
    differs = 0
    for seed in range(4):
        table = random_table(seed)
        want_ids, want_scores, want_lengths = tfa_beam_search(table, 3, 6, alpha)
        got = ours(table, 3, 6, alpha, "tfa")
        np.testing.assert_array_equal(got["lengths"], want_lengths)
        np.testing.assert_allclose(got["scores"], want_scores, rtol=1e-5)
        for b in range(len(table)):
            for k in range(3):
                n = want_lengths[b, k]
                np.testing.assert_array_equal(got["ids"][b, k, :n], want_ids[b, k, :n], err_msg=f"{b} {k}")
        default = ours(table, 3, 6, alpha, "default")
        differs += int(np.any(default["ids"] != got["ids"]))
    # The two conventions really rank differently on such tables.
    assert differs > 0


def test_without_a_length_penalty_the_conventions_agree():
    table = random_table(9)
    tfa, default = ours(table, 3, 6, 0.0, "tfa"), ours(table, 3, 6, 0.0, "default")
    for name in ("ids", "scores", "lengths"):
        np.testing.assert_array_equal(tfa[name], default[name])


def test_tfa_convention_gives_the_ids_and_scores_tfa_itself_gave():
    fixture = json.loads(FIXTURE.read_text())
    table = np.asarray(fixture["table"], np.float32)
    for case in fixture["cases"]:
        got = ours(table, fixture["beam_width"], fixture["max_length"], case["length_penalty_weight"], "tfa")
        want_ids = np.asarray(case["ids"])  # (B, K, steps), tfa's gather_tree output
        np.testing.assert_array_equal(got["lengths"], case["lengths"])
        np.testing.assert_allclose(got["scores"], case["scores"], rtol=1e-5, atol=1e-6)
        for b, row in enumerate(case["lengths"]):
            for k, n in enumerate(row):
                np.testing.assert_array_equal(got["ids"][b, k, :n], want_ids[b, k, :n])
        # The fixture tells the conventions apart: the default one gives other numbers.
        default = ours(table, fixture["beam_width"], fixture["max_length"], case["length_penalty_weight"], "default")
        assert np.abs(default["scores"] - np.asarray(case["scores"])).max() > 1e-3


def test_inference_decoder_takes_the_convention_and_saves_it():
    vocabulary = 7
    embedding, output_layer = keras.layers.Embedding(vocabulary, 4), keras.layers.Dense(vocabulary)
    cell = ka.AttentionGRUCell(6, ka.DotAttention())
    decoder = ka.InferenceDecoder(
        cell, embedding, output_layer, 1, 2, 5, method="beam", beam_width=3, length_convention="tfa"
    )
    assert decoder.get_config()["length_convention"] == "tfa"
    assert ka.InferenceDecoder.from_config(decoder.get_config()).length_convention == "tfa"


def test_a_bad_convention_is_named():
    with pytest.raises(
        ValueError, match=r"beam_search: unknown `length_convention` 'tf'; expected one of 'default', 'tfa'"
    ):
        ours(random_table(0, batch=1), 2, 3, 0.6, "tf")
    cell = ka.AttentionGRUCell(6, ka.DotAttention())
    with pytest.raises(ValueError, match=r"unknown `length_convention` 'TFA'; expected one of 'default', 'tfa'"):
        ka.InferenceDecoder(
            cell, keras.layers.Embedding(7, 4), keras.layers.Dense(7), 1, 2, 5, method="beam", length_convention="TFA"
        )
