"""Random numbers inside decoder loops (issue 18): attention dropout and
monotonic attention's pre-sigmoid noise are drawn before the loop
(`step_noise`), sampling's Gumbel noise is hashed from per-example seeds
drawn before the loop. A seed generator advanced inside a loop leaks
tracers on JAX and does not compile with XLA.

Backend-neutral: runs as it is under KERAS_BACKEND=jax or torch."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import sampling_search
from keras_attention.decoding.hashed_random import hashed_uniform

pytestmark = pytest.mark.any_backend

B, TT, TS = 3, 6, 8


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(B, TT, 3)).astype("float32"), rng.normal(size=(B, TS, 5)).astype("float32")


ATTENTIONS = {
    "dropout": lambda seed: ka.AdditiveAttention(4, dropout=0.5, seed=seed),
    "sigmoid_noise": lambda seed: ka.BahdanauMonotonicAttention(4, sigmoid_noise=1.0, seed=seed),
}


def _decoder(kind, seed=1):
    keras.utils.set_random_seed(0)  # the same weights for the same kind
    return ka.AttentionDecoder(ka.AttentionGRUCell(6, ATTENTIONS[kind](seed)), return_alignments=True)


def _alignments(decoder, training):
    inputs, memory = _data()
    return ops.convert_to_numpy(decoder(inputs, memory, training=training)[1])


def test_attention_dropout_in_a_decoder_is_per_step_and_in_training_only():
    decoder = _decoder("dropout")
    inference = _alignments(decoder, False)
    np.testing.assert_array_equal(inference, _alignments(decoder, False))
    np.testing.assert_allclose(inference.sum(-1), 1.0, rtol=1e-5)
    trained = _alignments(decoder, True)
    dropped = trained == 0
    assert 0.3 < dropped.mean() < 0.7
    # The first step's query is the zero initial state in both runs: the
    # kept weights are the inference weights over the keep probability.
    np.testing.assert_allclose(trained[:, 0], np.where(dropped[:, 0], 0.0, inference[:, 0] / 0.5), rtol=1e-5)
    # Every step has a mask of its own, and so does every call.
    assert len({dropped[:, t].tobytes() for t in range(TT)}) == TT
    assert not np.array_equal(dropped, _alignments(decoder, True) == 0)


@pytest.mark.parametrize("kind", sorted(ATTENTIONS))
def test_the_same_seed_draws_the_same_noise_in_a_decoder(kind):
    first, again = _alignments(_decoder(kind, seed=4), True), _alignments(_decoder(kind, seed=4), True)
    np.testing.assert_array_equal(first, again)
    assert not np.allclose(first, _alignments(_decoder(kind, seed=5), True))


def test_sigmoid_noise_in_a_decoder_in_training_only():
    decoder = _decoder("sigmoid_noise")
    inference = _alignments(decoder, False)
    np.testing.assert_array_equal(inference, _alignments(decoder, False))
    trained = _alignments(decoder, True)
    assert np.abs(trained - inference).max() > 1e-2
    assert np.all(trained >= 0) and np.all(trained.sum(-1) <= 1 + 1e-5)


@pytest.mark.parametrize("kind", sorted(ATTENTIONS))
def test_step_noise_is_drawn_for_every_step_in_training_only(kind):
    attention = ATTENTIONS[kind](3)
    assert attention.step_noise(2, 4, 5, training=False) is None
    noise = ops.convert_to_numpy(attention.step_noise(2, 4, 5, training=True))
    assert noise.shape == (2, 4, 5)
    assert len({noise[:, t].tobytes() for t in range(4)}) == 4
    if kind == "dropout":
        assert noise.min() >= 0 and noise.max() < 1
    np.testing.assert_array_equal(noise, ops.convert_to_numpy(ATTENTIONS[kind](3).step_noise(2, 4, 5, True)))


@pytest.mark.parametrize("kind", sorted(ATTENTIONS))
def test_a_training_step_through_the_noisy_loop_reaches_the_attention(kind):
    inputs, memory = _data()
    decoder = _decoder(kind)
    target_in, memory_in = keras.Input((None, 3)), keras.Input((None, 5))
    outputs, _ = decoder(target_in, memory_in)
    model = keras.Model([target_in, memory_in], keras.layers.Dense(2)(outputs))
    model.compile(keras.optimizers.SGD(0.5), "mse")
    ka.training.build_optimizer(model)
    attention = decoder.cell.attention
    before = [ops.convert_to_numpy(w) for w in attention.trainable_weights]
    loss = model.train_on_batch([inputs, memory], np.ones((B, TT, 2), "float32"))
    assert np.isfinite(loss)
    after = [ops.convert_to_numpy(w) for w in attention.trainable_weights]
    assert all(not np.allclose(a, b) for a, b in zip(before, after))


def test_scheduled_sampling_with_attention_dropout_trains_its_loop():
    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(6, ka.AdditiveAttention(4, dropout=0.5, seed=2))
    decoder = ka.ScheduledSamplingDecoder(
        cell, keras.layers.Embedding(7, 3), keras.layers.Dense(7), sampling_probability=0.5, return_alignments=True
    )
    ids = np.array([[1, 4, 5, 2, 3, 6]] * B)
    _, memory = _data()
    _, alignments = decoder(ids, memory, training=True)
    dropped = ops.convert_to_numpy(alignments) == 0
    assert 0.3 < dropped.mean() < 0.7
    _, alignments = decoder(ids, memory, training=False)
    np.testing.assert_allclose(ops.convert_to_numpy(alignments).sum(-1), 1.0, rtol=1e-5)


def _hash_reference(seeds, time, vocabulary):
    """`hashed_uniform` in NumPy int64, as it was first written."""
    modulus, key, step = 2**31, (0x42B2AE35, 0x05EBCA6B), 0x1E3779B9

    def mix(x):
        x = x % modulus
        y = (x * key[0]) % modulus
        z = (y + key[1]) % modulus
        for add in (y, z, y, z):
            x = (x * x + add) % modulus
            x = (x % 2**16) * 2**15 + x // 2**16
        return x

    row = mix(mix(np.asarray(seeds, np.int64)) + (time + 1) * step)
    cell = mix(row[:, None] + (np.arange(vocabulary, dtype=np.int64) + 1)[None, :] * step)
    return ((cell // 256).astype(np.float32) + 0.5) / 2**23


@pytest.mark.parametrize("time", [0, 7, 100_000, 2**31 - 2])
def test_hashed_uniform_needs_no_int64_and_keeps_its_values(time):
    # Without int64 (JAX's default), the same bits as the int64 arithmetic.
    seeds = np.array([0, 1, 12345, 2**31 - 2, 2**31 - 1], "int32")
    got = ops.convert_to_numpy(hashed_uniform(seeds, time, 50))
    np.testing.assert_array_equal(got, _hash_reference(seeds, time, 50))


class _Model:
    """A step function over a fixed table of logits per previous token."""

    def __init__(self):
        self.table = np.log(np.random.default_rng(1).dirichlet(np.ones(6), size=6)).astype("float32")

    def __call__(self, ids, states):
        return ops.take(self.table, ids, axis=0), states, ops.zeros((ops.shape(ids)[0], 2))


def test_sampling_draws_per_example_seeds_from_its_generator_before_the_loop():
    model, state = _Model(), [np.zeros((4, 1), "float32")]

    def ids(seed):
        return ops.convert_to_numpy(sampling_search(model, state, 0, 5, 5, seed=seed)["ids"])

    first = ids(keras.random.SeedGenerator(3))
    rows = keras.random.randint((4,), 0, 2**31 - 1, dtype="int32", seed=keras.random.SeedGenerator(3))
    np.testing.assert_array_equal(first, ids(rows))
    assert not np.array_equal(first, ids(keras.random.SeedGenerator(4)))


def test_one_integer_seed_gives_each_row_its_own_reproducible_stream():
    # Issue 34 item 11: one seed for a batch used to give every row the same
    # draws; row b now draws with row_seeds(seed, b), row 0 with the seed.
    model, state = _Model(), [np.zeros((16, 1), "float32")]

    def ids(seed, rows=16):
        return ops.convert_to_numpy(sampling_search(model, [state[0][:rows]], 0, 5, 5, seed=seed)["ids"])

    first = ids(3)
    np.testing.assert_array_equal(first, ids(3))
    assert len({row.tobytes() for row in first}) > 8  # identical rows, drawn apart
    streams = ka.decoding.row_seeds(np.full(16, 3), np.arange(16))
    np.testing.assert_array_equal(first, ids(streams))
    np.testing.assert_array_equal(first[:1], ids(np.array([3], "int32"), rows=1))
    # The formula, in int64: no two rows of one seed meet.
    want = (3 + np.arange(16, dtype=np.int64) * 0x2545F491) % 2**31
    np.testing.assert_array_equal(ops.convert_to_numpy(streams), want)
    top = ops.convert_to_numpy(ka.decoding.row_seeds(np.array([2**31 - 1]), np.array([2**31 - 1])))
    assert top[0] == (2**31 - 1 + (2**31 - 1) * 0x2545F491) % 2**31
    with pytest.raises(ValueError, match=r"`seed` must be an integer seed from 0 to 2147483647; got -1"):
        ids(-1)


def test_a_sampling_decoder_in_a_compiled_predict_gives_new_samples_per_call():
    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(6, ka.AdditiveAttention(4))
    decoder = ka.InferenceDecoder(
        cell, keras.layers.Embedding(7, 3), keras.layers.Dense(7), 0, 1, 5, method="sample", seed=3
    )
    memory_in = keras.Input((None, 5))
    model = keras.Model(memory_in, decoder(memory_in)["ids"])
    memory = np.repeat(_data()[1][:1], 16, axis=0)
    first, second = model.predict(memory, verbose=0), model.predict(memory, verbose=0)
    assert first.shape == (16, 5) and first.min() >= 0 and first.max() < 7
    # Identical rows of the batch sample apart (a seed each), and so do calls.
    assert len({row.tobytes() for row in first}) > 1
    assert not np.array_equal(first, second)


def _hard_sampling_decoder(method, seed):
    keras.utils.set_random_seed(0)  # the same weights for every seed
    cell = ka.AttentionGRUCell(5, ka.HardAttention(score="dot", mode="sample", seed=seed))
    return ka.InferenceDecoder(
        cell, keras.layers.Embedding(7, 5), keras.layers.Dense(7), 0, 1, 5, method=method, beam_width=2
    )


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_hard_attention_samples_inside_a_search_loop_from_noise_drawn_before_it(method):
    """HardAttention's "sample" mode draws Gumbel noise at every step: an
    in-graph search draws it for all steps before its loop (on JAX a draw
    inside the loop raised UnexpectedTracerError)."""
    # Small memory values: near-equal scores, so the noise picks the position.
    memory = 0.05 * _data()[1]
    mask = np.arange(TS)[None] < np.array([8, 5, 2])[:, None]

    def alignments(decoder):
        result = decoder(memory, memory_mask=mask)
        weights = ops.convert_to_numpy(result["alignments"])
        return weights if method == "greedy" else weights[:, 0]  # the best beam

    decoder = _hard_sampling_decoder(method, seed=4)
    first = alignments(decoder)
    # One-hot rows on valid positions, or zero rows after the end.
    assert set(np.unique(first)) <= {0.0, 1.0}
    assert set(np.unique(first.sum(-1))) <= {0.0, 1.0} and first[:, 0].sum() == B
    assert (first[~np.broadcast_to(mask[:, None], first.shape)] == 0).all()
    # A second call draws anew (on JAX it met the generator's state as a
    # tracer leaked from the first call's loop).
    second = alignments(decoder)
    assert set(np.unique(second.sum(-1))) <= {0.0, 1.0} and not np.array_equal(first, second)
    # The same seed, the same draws; another seed, others.
    np.testing.assert_array_equal(first, alignments(_hard_sampling_decoder(method, seed=4)))
    assert not np.array_equal(first, alignments(_hard_sampling_decoder(method, seed=5)))
