"""The step protocol: every search passes `step(ids, state, time)` its own loop counter."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import beam_search, constrained_step, greedy_search, sampling_search

pytestmark = pytest.mark.any_backend

VOCABULARY, END, STEPS = 7, 6, 5


def counting_step(ids, state, time):
    """Prefers token `time + 1` by a wide margin: the ids spell the clock."""
    batch = ops.shape(ids)[0]
    wanted = ops.one_hot(ops.zeros((batch,), "int32") + time + 1, VOCABULARY)
    return 20.0 * wanted, state


SEARCHES = {
    "greedy": lambda step, state, **kw: greedy_search(step, state, 0, END, STEPS, **kw),
    "sample": lambda step, state, **kw: sampling_search(step, state, 0, END, STEPS, seed=1, **kw),
    "beam": lambda step, state, **kw: beam_search(step, state, 0, END, STEPS, 3, **kw),
}


def best_ids(result):
    ids = ops.convert_to_numpy(result["ids"])
    return ids[:, 0] if ids.ndim == 3 else ids


@pytest.mark.parametrize("method", sorted(SEARCHES))
def test_every_search_passes_its_counter_as_the_time(method):
    result = SEARCHES[method](counting_step, ops.zeros((2, 1)))
    # Token t is t + 1 at every step: the time is the index of the token
    # being produced, 0 at the first step (outside the loop) as inside it.
    np.testing.assert_array_equal(best_ids(result), [[1, 2, 3, 4, 5]] * 2)


@pytest.mark.parametrize("method", sorted(SEARCHES))
def test_a_step_without_the_time_still_decodes(method):
    def step(ids, state):  # a step written before the protocol: the time rides in its state
        logits, _ = counting_step(ids, state, state[0])
        return logits, ops.add(state, 1)

    state = ops.zeros((2,), "int32")
    np.testing.assert_array_equal(best_ids(SEARCHES[method](step, state)), [[1, 2, 3, 4, 5]] * 2)


def test_a_third_parameter_with_a_default_is_not_given_the_time():
    seen = []

    def step(ids, state, training=False):
        seen.append(training)
        return counting_step(ids, state, state[0])[0], ops.add(state, 1)

    ids = best_ids(greedy_search(step, ops.zeros((2,), "int32"), 0, END, STEPS))
    np.testing.assert_array_equal(ids, [[1, 2, 3, 4, 5]] * 2)
    assert seen and all(value is False for value in seen)


def test_a_step_taking_one_argument_is_refused_by_name():
    with pytest.raises(ValueError, match=r"`step_fn` must take `\(ids, state, time\)`.*got lonely\(ids\)"):

        def lonely(ids):
            return ids

        greedy_search(lonely, ops.zeros((2, 1)), 0, END, STEPS)


def test_constrained_step_reads_the_searchs_clock_not_a_counter_of_its_own():
    step, state = constrained_step(counting_step, ops.zeros((2, 1)), END, min_length=2, suppress_tokens=[3])
    # Only per-example values and buffers ride in the state: no counter (each
    # processor's own state is empty here).
    assert keras.tree.flatten(state[1]) == [] and state[1] == {"processors": [{}, {}]}
    ids = best_ids(greedy_search(step, state, 0, END, STEPS))
    # Step 2 wants token 3, suppressed: the next best (token 0, all logits
    # but the wanted one equal) is the lowest id left.
    np.testing.assert_array_equal(ids, [[1, 2, 0, 4, 5]] * 2)
    prefix = np.array([[5, 5, -1], [4, -1, -1]], "int32")
    step, state = constrained_step(counting_step, ops.zeros((2, 1)), END, prefix=prefix)
    ids = best_ids(beam_search(step, state, 0, END, STEPS, 2))
    np.testing.assert_array_equal(ids, [[5, 5, 3, 4, 5], [4, 2, 3, 4, 5]])


def hard_decoder(mode="sample", seed=3):
    cell = ka.AttentionGRUCell(6, ka.HardAttention(score="dot", mode=mode, seed=seed))
    return ka.InferenceDecoder(
        cell, keras.layers.Embedding(VOCABULARY, 6), keras.layers.Dense(VOCABULARY), 1, END, STEPS
    )


def forced_noise(rows, source_length, steps):
    """Gumbel draws that send step `t`'s attention to position `t % Ts`."""
    noise = np.full((rows, steps, source_length), 1e-30, "float32")
    noise[:, np.arange(steps), np.arange(steps) % source_length] = 1 - 1e-7
    return ops.convert_to_tensor(noise)


def aligned_positions(result):
    alignments = ops.convert_to_numpy(result["alignments"])
    if alignments.ndim == 4:
        alignments = alignments[:, 0]
    lengths = ops.convert_to_numpy(result["lengths"])
    lengths = lengths[:, 0] if lengths.ndim == 2 else lengths
    return [alignments[b, : lengths[b]].argmax(-1).tolist() for b in range(len(alignments))]


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_the_noise_is_read_at_the_searchs_counter(method):
    memory = 0.3 * np.random.default_rng(0).normal(size=(2, 3, 6)).astype("float32")
    decoder = hard_decoder()
    decoder(memory)  # built
    decoder.step_noise = lambda rows, source_length: forced_noise(rows, source_length, STEPS)
    if method == "beam":
        decoder = ka.EnsembleDecoder([decoder], method="beam", beam_width=2)
        result = decoder([memory])
    else:
        result = decoder(memory)
    for positions in aligned_positions(result):
        assert positions == [t % 3 for t in range(len(positions))]
        assert positions  # at least one step


def test_the_ensemble_passes_each_member_its_own_noise():
    memory = np.random.default_rng(1).normal(size=(2, 3, 6)).astype("float32")
    plain, noisy = hard_decoder("argmax", seed=4), hard_decoder(seed=5)  # argmax draws nothing
    noisy(memory)
    noisy.step_noise = lambda rows, source_length: forced_noise(rows, source_length, STEPS)
    ensemble = ka.EnsembleDecoder([plain, noisy])
    noises = ensemble.step_noise(2, 3)
    assert noises[0] is None and tuple(noises[1].shape) == (2, STEPS, 3)
    assert ka.EnsembleDecoder([plain]).step_noise(2, 3) is None
    result = ensemble([memory, memory])
    assert tuple(result["ids"].shape) == (2, STEPS)
