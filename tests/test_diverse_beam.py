"""Diverse beam search (arXiv:1610.02424): against a NumPy reference of the paper's
algorithm, its limits (one group, no diversity), its invariants and a decoder's option."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention import decoding
from keras_attention.decoding import BeamSearch, DiverseBeamSearch
from keras_attention.decoding.diverse_beam import select_by_group

pytestmark = pytest.mark.any_backend

VOCABULARY, END, STEPS = 5, 4, 4


def table(seed=0, batch=2):
    """Random logits indexed by (example, time, previous token)."""
    return np.random.default_rng(seed).normal(size=(batch, STEPS, VOCABULARY, VOCABULARY)).astype("float32") * 2


def table_step(logits):
    def step(ids, state, time):  # state: each row's example, which the search tiles
        rows = ops.take(ops.convert_to_tensor(logits), state, axis=0)
        at_time = ops.take(rows, ops.minimum(time, STEPS - 1), axis=1)  # (rows, V, V)
        return ops.take_along_axis(at_time, ops.reshape(ops.cast(ids, "int32"), (-1, 1, 1)), axis=1)[:, 0], state

    return step, ops.arange(len(logits), dtype="int32")


def log_softmax(x):
    x = x.astype("float64")
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def reference(logits, beam_width, num_groups, strength, alpha=0.0, start=0):
    """Diverse beam search as the paper's Algorithm 1 spells it, one example
    at a time, in Python: groups expand in order, each ranks its candidates
    by GNMT score - strength * (times groups before it chose the token at
    this step); a finished hypothesis continues with the end token at no
    cost. Returns every hypothesis of every group sorted by score, best first."""
    size = beam_width // num_groups
    results = []
    for example in logits:
        # A hypothesis: (tokens, log-probability, finished); a group starts from one.
        groups = [[([], 0.0, False)] for _ in range(num_groups)]
        for time in range(STEPS):
            counts = np.zeros(VOCABULARY)
            for g in range(num_groups):
                candidates = []
                for k, (tokens, log_prob, finished) in enumerate(groups[g]):
                    if finished:
                        score = log_prob / ((5 + len(tokens)) / 6) ** alpha
                        candidates.append((score, k * VOCABULARY + END, (tokens + [END], log_prob, True), None))
                        continue
                    step = log_softmax(example[time, tokens[-1] if tokens else start])
                    for v in range(VOCABULARY):
                        total = log_prob + step[v]
                        score = total / ((5 + len(tokens) + 1) / 6) ** alpha
                        rank = score - strength * counts[v]
                        candidates.append((rank, k * VOCABULARY + v, (tokens + [v], total, v == END), v))
                candidates.sort(key=lambda c: (-c[0], c[1]))
                groups[g] = [hypothesis for _, _, hypothesis, _ in candidates[:size]]
                for _, _, _, token in candidates[:size]:
                    if token is not None:  # a running hypothesis' choice
                        counts[token] += 1
        hypotheses = []
        for group in groups:
            for tokens, log_prob, _ in group:
                length = tokens.index(END) + 1 if END in tokens else len(tokens)
                hypotheses.append((log_prob / ((5 + length) / 6) ** alpha, tokens, log_prob, length))
        hypotheses = sorted(enumerate(hypotheses), key=lambda h: (-h[1][0], h[0]))
        results.append([h for _, h in hypotheses])
    ids = np.array([[h[1] for h in example] for example in results])
    return {
        "ids": ids,
        "scores": np.array([[h[0] for h in example] for example in results]),
        "log_probs": np.array([[h[2] for h in example] for example in results]),
        "lengths": np.array([[h[3] for h in example] for example in results]),
    }


def numpy_of(result):
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


@pytest.mark.parametrize(
    "beam_width, num_groups, strength, alpha",
    [(4, 2, 0.5, 0.0), (6, 3, 2.0, 0.0), (4, 4, 1.0, 0.7), (6, 2, 0.3, 1.0)],
)
def test_the_search_is_the_papers_algorithm(beam_width, num_groups, strength, alpha):
    logits = table(seed=beam_width + num_groups)
    step, state = table_step(logits)
    got = numpy_of(
        DiverseBeamSearch(beam_width, alpha, num_groups=num_groups, diversity_strength=strength).search(
            step, state, start_tokens=0, end_token=END, max_length=STEPS
        )
    )
    want = reference(logits, beam_width, num_groups, strength, alpha)
    np.testing.assert_array_equal(got["ids"], want["ids"])
    np.testing.assert_array_equal(got["lengths"], want["lengths"])
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["log_probs"], want["log_probs"], rtol=1e-5, atol=1e-5)
    # The scores are the undiverted ones, sorted best first.
    assert (np.diff(got["scores"], axis=1) <= 0).all()


@pytest.mark.parametrize("strength", [0.0, 5.0])
def test_one_group_is_beam_search(strength):
    step, state = table_step(table(seed=3))
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    got = numpy_of(DiverseBeamSearch(3, 0.6, num_groups=1, diversity_strength=strength).search(step, state, **common))
    want = numpy_of(BeamSearch(3, 0.6).search(step, state, **common))
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_without_diversity_each_group_is_a_beam_search_of_its_own():
    step, state = table_step(table(seed=4))
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    got = numpy_of(DiverseBeamSearch(6, num_groups=2, diversity_strength=0.0).search(step, state, **common))
    want = numpy_of(BeamSearch(3).search(step, state, **common))
    # The two groups find the same hypotheses, which the sort interleaves.
    for name in want:
        np.testing.assert_array_equal(got[name][:, 0::2], want[name], err_msg=name)
        np.testing.assert_array_equal(got[name][:, 1::2], want[name], err_msg=name)


def test_a_strong_diversity_gives_each_group_its_own_first_token():
    step, state = table_step(table(seed=5, batch=4))
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    ids = numpy_of(DiverseBeamSearch(4, num_groups=4, diversity_strength=100.0).search(step, state, **common))["ids"]
    for example in ids:
        assert len(set(example[:, 0].tolist())) == 4, example
    plain = numpy_of(BeamSearch(4).search(step, state, **common))["ids"]
    assert any(len(set(example[:, 0].tolist())) < 4 for example in plain)  # beam search alone repeats


def test_the_strength_per_example_is_each_examples_own_search():
    logits = table(seed=6)
    step, state = table_step(logits)
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    strategy = DiverseBeamSearch(4, num_groups=4, diversity_strength=0.0, num_hypotheses=3)
    got = numpy_of(strategy.search(step, state, {"diversity_strength": ops.convert_to_tensor([0.0, 3.0])}, **common))
    for b, strength in enumerate((0.0, 3.0)):
        want = reference(logits[b : b + 1], 4, 4, strength)
        np.testing.assert_array_equal(got["ids"][b], want["ids"][0, :3])
        np.testing.assert_allclose(got["scores"][b], want["scores"][0, :3], rtol=1e-5)


def test_select_by_group_diverts_the_later_groups_only():
    scores = np.log(np.array([[[0.6, 0.3, 0.1], [0.6, 0.3, 0.1]]], "float32"))
    chosen = numpy_of(select_by_group(scores, scores, np.array([[False, False]]), np.array([[0, 0]]), 2, 2, 2, 1.0))
    np.testing.assert_array_equal(chosen["tokens"], [[0, 1]])
    np.testing.assert_array_equal(chosen["parents"], [[0, 1]])
    np.testing.assert_allclose(chosen["scores"], np.log([[0.6, 0.3]]), rtol=1e-6)  # undiverted


def test_bad_fields_are_refused_by_the_strategys_name():
    with pytest.raises(ValueError, match=r"DiverseBeamSearch: `num_groups` must divide `beam_width` 4 .*got 3"):
        DiverseBeamSearch(4, num_groups=3)
    with pytest.raises(ValueError, match=r"DiverseBeamSearch: `diversity_strength` must be a finite number >= 0"):
        DiverseBeamSearch(diversity_strength=-1.0)
    with pytest.raises(ValueError, match=r"DiverseBeamSearch: `num_groups` must be a positive integer"):
        DiverseBeamSearch(num_groups=0)


def test_the_strategy_round_trips_through_its_config():
    strategy = DiverseBeamSearch(6, 0.6, num_hypotheses=2, num_groups=3, diversity_strength=1.5)
    again = decoding.get(keras.saving.serialize_keras_object(strategy))
    assert type(again) is DiverseBeamSearch and again.get_config() == strategy.get_config()
    assert decoding.get("diverse_beam").num_groups == 2
    assert strategy.beams == 6 and strategy.hypotheses == 2


def test_a_decoder_takes_the_strategy_and_saves_it(tmp_path):
    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    decoder = ka.InferenceDecoder(
        cell,
        keras.layers.Embedding(9, 4),
        keras.layers.Dense(9),
        1,
        2,
        5,
        method="diverse_beam",
        beam_width=4,
        num_groups=2,
        diversity_strength=2.0,
        num_hypotheses=3,
        runtime_options=["diversity_strength"],
    )
    assert decoder.get_config()["diversity_strength"] == 2.0 and decoder.get_config()["num_groups"] == 2
    memory = np.random.default_rng(1).normal(size=(2, 4, 6)).astype("float32")
    result = numpy_of(decoder(memory))
    assert result["ids"].shape == (2, 3, 5) and result["alignments"].shape == (2, 3, 5, 4)
    # Strength 0 per request: each group the decoder's beam search of width 2.
    plain = numpy_of(decoder(memory, options={"diversity_strength": [0.0]}))
    beam = ka.InferenceDecoder(
        decoder.cell, decoder.embedding, decoder.output_layer, 1, 2, 5, method="beam", beam_width=2
    )
    np.testing.assert_array_equal(plain["ids"][:, 0], numpy_of(beam(memory))["ids"][:, 0])
    source = keras.Input((4, 6))
    model = keras.Model(source, decoder(source))
    model.save(tmp_path / "diverse.keras")
    loaded = keras.saving.load_model(tmp_path / "diverse.keras")
    layer = [layer for layer in loaded.layers if isinstance(layer, ka.InferenceDecoder)][0]
    assert layer.method == "diverse_beam" and layer.num_groups == 2 and layer.diversity_strength == 2.0
    np.testing.assert_array_equal(numpy_of(loaded(memory))["ids"], result["ids"])


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="XLA through tf.function")
def test_the_search_compiles_with_xla():
    import tensorflow as tf

    step, state = table_step(table(seed=2))
    strategy = DiverseBeamSearch(6, 0.5, early_stopping=True, num_groups=3, diversity_strength=1.0)
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    eager = numpy_of(strategy.search(step, state, **common))
    compiled = numpy_of(tf.function(lambda: strategy.search(step, state, **common), jit_compile=True)())
    for name in eager:
        np.testing.assert_array_equal(compiled[name], eager[name], err_msg=name)
