"""The exponential decay length penalty (Hugging Face's `exponential_decay_length_penalty`):
the raise against NumPy, its limits, greedy search against a brute-force
simulation, a decoder's keywords and run-time values (the export parity:
test_runtime_options_export.py)."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import NEG_INF, greedy_search, processors
from keras_attention.decoding.processors import ExponentialDecayLengthPenalty, Step, processed_step
from tests.table_steps import numpy_greedy as table_greedy
from tests.table_steps import table_step

pytestmark = pytest.mark.any_backend

END = 2


def step_at(time, vocabulary):
    token = ops.expand_dims(ops.arange(vocabulary, dtype="int32"), 0)
    return Step(None, time, END, token, ops.equal(token, END), None)


def numpy_raise(logits, time, start, factor):
    """The logits after the penalty, in float64: the end's logit plus
    -log p(end) * (factor ** (time - start) - 1) from `start` on."""
    logits = logits.astype("float64")
    log_probs = (
        logits
        - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
        - logits.max(1, keepdims=True)
    )
    k = time - np.reshape(start, (-1,))
    growth = np.where(k >= 0, np.power(np.reshape(factor, (-1,)), np.maximum(k, 0)) - 1, 0)
    raised = logits.copy()
    raised[:, END] += np.minimum(-log_probs[:, END] * growth, 1e4)
    return raised


@pytest.mark.parametrize("time", [0, 2, 3, 7])
def test_the_raise_is_numpys_for_one_value_and_one_per_row(time):
    rng = np.random.default_rng(time)
    logits = rng.normal(0, 2, size=(5, 9)).astype("float32")
    for start, factor in ((3, 1.7), (0, 1.0), (np.array([0, 2, 3, 5, 9]), np.array([1.0, 1.2, 2.0, 3.5, 1.5]))):
        penalty = ExponentialDecayLengthPenalty(3, 1.7)
        state = {}
        if isinstance(start, np.ndarray):  # a request's rows ride in the processor's state
            state = {"length_decay_start": ops.convert_to_tensor(start.astype("int32"))}
            state["length_decay_factor"] = ops.convert_to_tensor(factor.astype("float32"))
        else:
            penalty = ExponentialDecayLengthPenalty(start, factor)
        got, forbidden, _ = penalty.process(ops.convert_to_tensor(logits), None, state, step_at(time, 9))
        want = numpy_raise(logits, time, start, factor)
        np.testing.assert_allclose(ops.convert_to_numpy(got), want, rtol=1e-5, atol=1e-4)
        assert forbidden is None
        # Only the end token's logit moves, and never down.
        others = np.arange(9) != END
        np.testing.assert_array_equal(ops.convert_to_numpy(got)[:, others], logits[:, others])


def test_a_hand_computed_case():
    # p = (0.1, 0.2, 0.4, 0.3), the end (id 2) at 0.4; the fourth token (t = 3) of a decay
    # from t = 1 by 3: the end's logit rises by -log 0.4 * (3 ** 2 - 1) = 7.330.
    logits = np.log(np.array([[0.1, 0.2, 0.4, 0.3]], "float32"))
    got, _, _ = ExponentialDecayLengthPenalty(1, 3.0).process(ops.convert_to_tensor(logits), None, {}, step_at(3, 4))
    np.testing.assert_allclose(ops.convert_to_numpy(got)[0, END], np.log(0.4) + 7.33032, rtol=1e-5)


def test_extreme_values_stay_finite():
    logits = np.array([[0.0, 0.0, NEG_INF, 0.0], [-50.0, -50.0, 60.0, -50.0], [1e30, 0.0, -1e30, 0.0]], "float32")
    got, _, _ = ExponentialDecayLengthPenalty(0, 1e6).process(ops.convert_to_tensor(logits), None, {}, step_at(900, 4))
    got = ops.convert_to_numpy(got)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got[:, END], logits[:, END] + [1e4, 0.0, 1e4], rtol=1e-6)  # p(end) = 1: nothing


def test_bad_values_are_refused():
    with pytest.raises(ValueError, match=r"ExponentialDecayLengthPenalty: `length_decay_factor` must be a finite"):
        ExponentialDecayLengthPenalty(2, 0.5)
    with pytest.raises(ValueError, match=r"ExponentialDecayLengthPenalty: `length_decay_start` must be an integer"):
        ExponentialDecayLengthPenalty(-1, 2.0)


VOCABULARY, STEPS = 5, 6


def table(seed=0, batch=4):
    """Logits by (example, time, previous id), the end (id 2) never the favourite on its own."""
    logits = np.random.default_rng(seed).normal(size=(batch, STEPS, VOCABULARY, VOCABULARY)).astype("float32")
    logits[..., END] -= 1.5
    return logits


def numpy_greedy(logits, start, factor):
    """Greedy decoding of the table with the penalty, one row at a time."""
    return table_greedy(logits, END, lambda row, time, ids: np.argmax(numpy_raise(row[None], time, start, factor)[0]))


@pytest.mark.parametrize("start, factor", [(0, 1.0), (1, 2.0), (3, 1.5), (0, 5.0)])
def test_greedy_search_with_the_penalty_is_the_brute_force_one(start, factor):
    logits = table()

    penalty = ExponentialDecayLengthPenalty(start, factor)
    wrapped, state = processed_step(table_step(logits), ops.arange(len(logits), dtype="int32"), [penalty], END, {})
    ids = ops.convert_to_numpy(greedy_search(wrapped, state, 0, END, STEPS)["ids"])
    np.testing.assert_array_equal(ids, numpy_greedy(logits, start, factor))
    if factor == 5.0:  # from the first token on: every row ends by its second token
        assert (ids[:, 1] == END).all()


def test_a_decoder_takes_the_keywords_and_the_values_per_request():
    keras.utils.set_random_seed(0)
    parts = (
        ka.AttentionGRUCell(8, ka.AdditiveAttention(4)),
        keras.layers.Embedding(9, 4),
        keras.layers.Dense(9),
        1,
        END,
        8,
    )
    names = ["length_decay_start", "length_decay_factor"]
    decoder = ka.InferenceDecoder(*parts, length_decay_start=2, length_decay_factor=1.5, runtime_options=names)
    assert decoder.processors == [ExponentialDecayLengthPenalty(2, 1.5)]
    assert decoder.option_specs()["length_decay_factor"] == {
        "dtype": "float32",
        "default": 1.5,
        "minimum": 1,
        "strict": False,
        "maximum": None,
    }
    assert processors.get(keras.saving.serialize_keras_object(decoder.processors[0])) == decoder.processors[0]
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    plain = ka.InferenceDecoder(*parts)
    free = ops.convert_to_numpy(plain(memory)["lengths"])
    # A factor of 1 per request is no penalty; a steep one from the start ends every row at once.
    relaxed = decoder(memory, options={"length_decay_factor": [1.0] * 3, "length_decay_start": [0] * 3})
    np.testing.assert_array_equal(ops.convert_to_numpy(relaxed["lengths"]), free)
    steep = decoder(memory, options={"length_decay_factor": [1e3] * 3, "length_decay_start": [0] * 3})
    np.testing.assert_array_equal(ops.convert_to_numpy(steep["lengths"]), np.minimum(free, 2))
    assert (free > 2).any()  # the penalty shortened something
