"""EnsembleDecoder: one search over several decoders, checked against NumPy
step by step, an exhaustive search, a `.keras` round trip and ONNX."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests.layer_cases import randomize_model

pytestmark = pytest.mark.any_backend

VOCABULARY, START, END, MAX_LENGTH = 5, 1, 2, 3


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def member(seed, attention, units=6, vocabulary=VOCABULARY):
    keras.utils.set_random_seed(seed)
    cell = ka.AttentionGRUCell(units, attention)
    return ka.InferenceDecoder(
        cell, keras.layers.Embedding(vocabulary, 4), keras.layers.Dense(vocabulary), START, END, MAX_LENGTH
    )


def randomized(decoders, memory, seed=0, scale=1.0):
    """Build the members on `memory` and give every weight a N(0, scale) value."""
    rng = np.random.default_rng(seed)
    for decoder in decoders:
        decoder(memory)
        for variable in decoder.trainable_weights:
            variable.assign(rng.normal(0, scale, variable.shape).astype(variable.dtype))
    return decoders


def two_members(memory):
    return randomized([member(0, ka.AdditiveAttention(3)), member(1, ka.GeneralAttention())], memory)


def memory_batch(seed=0, batch=3, length=4, features=5):
    rng = np.random.default_rng(seed)
    memory = rng.normal(0, 1, (batch, length, features)).astype("float32")
    mask = np.arange(length)[None] < rng.integers(1, length + 1, size=batch)[:, None]
    return memory, mask


def combined_log_probs(log_probs, combine):
    """NumPy: the members' (M, N, V) log-probabilities combined."""
    if combine == "probabilities":
        return np.log(np.mean(np.exp(log_probs), axis=0))
    return log_softmax(np.mean(log_probs, axis=0))


def sequence_log_prob(members, memory, mask, tokens, combine):
    """log P(tokens) under the ensemble, one example, teacher forced in NumPy
    over the members' own steps (the reference the searches must follow)."""
    total, ids = 0.0, np.array([START], "int32")
    prepared = [m.cell.prepare_memory(memory[None], mask[None]) for m in members]
    states = [m.cell.initial_state_for(p, 1) for m, p in zip(members, prepared)]
    for time, token in enumerate(tokens):
        steps = [m.decode_step(ids, s, p, time) for m, s, p in zip(members, states, prepared)]
        states = [step[1] for step in steps]
        log_probs = np.stack([log_softmax(ops.convert_to_numpy(step[0]).astype("float64")) for step in steps])
        total += combined_log_probs(log_probs, combine)[0, token]
        ids = np.array([token], "int32")
    return total


def every_hypothesis(vocabulary=VOCABULARY, length=MAX_LENGTH):
    """Every sequence a search can return: ended by END within `length`, or `length` tokens without it."""
    others = [t for t in range(vocabulary) if t != END]
    for n in range(1, length + 1):
        for head in itertools.product(others, repeat=n - 1):
            yield (*head, END)
    yield from itertools.product(others, repeat=length)


@pytest.mark.parametrize("combine", ["probabilities", "log_probabilities"])
def test_greedy_takes_the_best_combined_token_at_every_step(combine):
    memory, mask = memory_batch()
    members = two_members(memory)
    result = ka.EnsembleDecoder(members, combine=combine)([memory, memory], memory_mask=mask)
    ids, lengths, scores = (ops.convert_to_numpy(result[k]) for k in ("ids", "lengths", "scores"))
    for b in range(len(memory)):
        # Greedy in NumPy: extend the chosen prefix by the best combined token.
        prefix = []
        for _ in range(MAX_LENGTH):
            candidates = [sequence_log_prob(members, memory[b], mask[b], prefix + [t], combine) for t in range(5)]
            prefix.append(int(np.argmax(candidates)))
            if prefix[-1] == END:
                break
        assert ids[b, : len(prefix)].tolist() == prefix
        assert lengths[b] == len(prefix)
        np.testing.assert_allclose(
            scores[b], sequence_log_prob(members, memory[b], mask[b], prefix, combine), rtol=1e-5, atol=1e-5
        )


def test_a_wide_beam_returns_the_exhaustive_ranking():
    memory, mask = memory_batch(seed=2, batch=2)
    members = two_members(memory)
    # Width 25 keeps every hypothesis of two steps (21), so the last step's
    # choice is the exact top 25 of all 85 hypotheses.
    result = ka.EnsembleDecoder(members, method="beam", beam_width=25)([memory, memory], memory_mask=mask)
    log_probs, ids, lengths = (ops.convert_to_numpy(result[k]) for k in ("log_probs", "ids", "lengths"))
    for b in range(len(memory)):
        ranked = sorted(
            ((sequence_log_prob(members, memory[b], mask[b], list(h), "probabilities"), h) for h in every_hypothesis()),
            reverse=True,
        )
        np.testing.assert_allclose(log_probs[b], [score for score, _ in ranked[:25]], rtol=1e-4, atol=1e-4)
        best = ranked[0][1]
        assert ids[b, 0, : len(best)].tolist() == list(best) and lengths[b, 0] == len(best)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_one_member_decodes_what_it_decodes_alone(method):
    memory, mask = memory_batch(seed=3)
    (alone,) = randomized([member(0, ka.AdditiveAttention(3))], memory)
    options = dict(method=method, beam_width=3)
    decoder = ka.InferenceDecoder(
        alone.cell, alone.embedding, alone.output_layer, START, END, MAX_LENGTH, return_alignments=True, **options
    )
    want = decoder(memory, memory_mask=mask)
    got = ka.EnsembleDecoder([alone], **options)([memory], memory_mask=mask)
    for name in ("ids", "lengths"):
        np.testing.assert_array_equal(ops.convert_to_numpy(got[name]), ops.convert_to_numpy(want[name]))
    for name in ("scores", "alignments"):
        np.testing.assert_allclose(ops.convert_to_numpy(got[name]), ops.convert_to_numpy(want[name]), atol=1e-5)


def test_members_keep_their_own_initial_states_and_memory_sizes():
    """Members of other sizes over other memories of one source: each state follows its member."""
    rng = np.random.default_rng(4)
    memory, mask = memory_batch(seed=4)
    wide = np.concatenate([memory, rng.normal(0, 1, memory.shape).astype("float32")], -1)
    small = member(0, ka.AdditiveAttention(3), units=6)
    large = member(1, ka.AdditiveAttention(4), units=9)
    randomized([small], memory)
    randomized([large], wide, seed=1)
    states = [[rng.normal(0, 1, (3, 6)).astype("float32")], [rng.normal(0, 1, (3, 9)).astype("float32")]]
    result = ka.EnsembleDecoder([small, large])([memory, wide], memory_mask=mask, initial_state=states)
    # The reference: the first step by hand from the given states.
    first = []
    for decoder, source, state in zip((small, large), (memory, wide), states):
        prepared = decoder.cell.prepare_memory(source, mask)
        full = decoder.cell.initial_state_for(prepared, 3, state)
        logits, _, _ = decoder.decode_step(np.full((3,), START, "int32"), full, prepared, 0)
        first.append(log_softmax(ops.convert_to_numpy(logits).astype("float64")))
    want = np.argmax(combined_log_probs(np.stack(first), "probabilities"), -1)
    np.testing.assert_array_equal(ops.convert_to_numpy(result["ids"])[:, 0], want)


def ensemble_model(method="beam"):
    """Two encoders of one source, two decoders, one ensemble search."""
    keras.utils.set_random_seed(5)
    source = keras.Input((None,), dtype="int32", name="source")
    memories, states, members = [], [], []
    for units, attention in ((6, ka.AdditiveAttention(3)), (7, ka.GeneralAttention())):
        embedded = keras.layers.Embedding(9, 4, mask_zero=True)(source)
        memory, state = keras.layers.GRU(units, return_sequences=True, return_state=True)(embedded)
        memories.append(memory)
        states.append([state])
        members.append(
            ka.InferenceDecoder(
                ka.AttentionGRUCell(units, attention),
                keras.layers.Embedding(VOCABULARY, 4),
                keras.layers.Dense(VOCABULARY),
                START,
                END,
                6,
            )
        )
    ensemble = ka.EnsembleDecoder(members, method=method, beam_width=3, return_alignments=False, name="ensemble")
    model = keras.Model(source, ensemble(memories, initial_state=states))
    randomize_model(model, np.random.default_rng(6), scale=0.8)
    return model


def source_batch():
    rng = np.random.default_rng(7)
    source = rng.integers(1, 9, size=(4, 5)).astype("int32")
    source[1, 3:] = 0
    source[2, 1:] = 0
    return source


def test_saves_and_loads_with_the_same_outputs(tmp_path):
    model = ensemble_model()
    source = source_batch()
    want = model.predict(source, verbose=0)
    model.save(tmp_path / "ensemble.keras")
    loaded = keras.saving.load_model(tmp_path / "ensemble.keras")
    got = loaded.predict(source, verbose=0)
    assert isinstance(loaded.get_layer("ensemble"), ka.EnsembleDecoder)
    np.testing.assert_array_equal(got["ids"], want["ids"])
    np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-6)


def test_bad_members_and_memories_are_named():
    memory, _ = memory_batch()
    (one,) = randomized([member(0, ka.AdditiveAttention(3))], memory)
    with pytest.raises(ValueError, match=r"`members` must be a non-empty list of InferenceDecoders; got \[\]"):
        ka.EnsembleDecoder([])
    with pytest.raises(
        ValueError, match=r"`members\[1\]` must be an InferenceDecoder or a TransformerInferenceDecoder; got <Dense"
    ):
        ka.EnsembleDecoder([one, keras.layers.Dense(3)])
    with pytest.raises(
        ValueError, match=r"unknown `combine` 'max'; expected one of 'probabilities', 'log_probabilities'"
    ):
        ka.EnsembleDecoder([one], combine="max")
    with pytest.raises(ValueError, match=r"`memories` must be a list of 2 \(one per member\)"):
        ka.EnsembleDecoder([one, one])([memory])
    other = member(1, ka.AdditiveAttention(3), vocabulary=VOCABULARY + 2)
    with pytest.raises(ValueError, match=r"every member must predict over one vocabulary; got output sizes \[5, 7\]"):
        ka.EnsembleDecoder([one, other])([memory, memory])
