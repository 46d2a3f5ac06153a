"""Typical, epsilon and eta sampling (arXiv:2202.00666, arXiv:2210.15191): each
filter against NumPy and a hand-computed case, the searches' limits, a
decoder's option per request (the export parity: test_runtime_options_export.py)."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import NEG_INF, EpsilonSampling, EtaSampling, TypicalSampling, sampling_search
from keras_attention.decoding.epsilon_sampling import epsilon_filter
from keras_attention.decoding.eta_sampling import eta_filter
from keras_attention.decoding.typical_sampling import entropy, typical_filter

pytestmark = pytest.mark.any_backend


def numpy_probabilities(logits):
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    return probabilities / probabilities.sum(-1, keepdims=True)


def numpy_entropy(probabilities):
    return -np.sum(
        np.where(probabilities > 0, probabilities * np.log(np.where(probabilities > 0, probabilities, 1)), 0), -1
    )


def numpy_typical(logits, typical_p):
    """The tokens typical sampling keeps, by a sort: ranked by
    |surprisal - entropy|, the shortest prefix reaching `typical_p`, and
    every token tied with its last."""
    probabilities = numpy_probabilities(logits)
    kept = np.zeros(logits.shape, bool)
    for row, (p, mass) in enumerate(zip(probabilities, np.broadcast_to(typical_p, len(logits)))):
        distance = np.abs(-np.log(p) - numpy_entropy(p))
        order = np.argsort(distance, kind="stable")
        before = np.cumsum(p[order]) - p[order]
        last = order[before < mass][-1] if mass < 1 else order[-1]
        kept[row] = distance <= distance[last]
    return kept


def numpy_cutoff(logits, threshold):
    """Tokens of probability >= threshold (per row), and each row's best."""
    probabilities = numpy_probabilities(logits)
    best = probabilities == probabilities.max(-1, keepdims=True)
    return (probabilities >= np.reshape(threshold, (-1, 1))) | best


def numpy_eta(logits, eta):
    eta = np.broadcast_to(eta, len(logits))
    threshold = np.minimum(eta, np.sqrt(eta) * np.exp(-numpy_entropy(numpy_probabilities(logits))))
    return numpy_cutoff(logits, threshold)


FILTERS = {
    "typical": (typical_filter, numpy_typical, [1.0, 0.95, 0.5, 0.2, 1e-3]),
    "epsilon": (epsilon_filter, numpy_cutoff, [0.0, 0.01, 0.05, 0.2, 1.0]),
    "eta": (eta_filter, numpy_eta, [0.0, 0.01, 0.05, 0.3, 1.0]),
}


def as_kept(filtered):
    return ops.convert_to_numpy(filtered) > NEG_INF / 2


@pytest.mark.parametrize("name", list(FILTERS))
def test_each_filter_keeps_what_numpy_keeps_for_one_value_and_one_per_row(name):
    function, reference, values = FILTERS[name]
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, size=(6, 30)).astype("float32")
    for value in values:
        got = ops.convert_to_numpy(function(logits, value))
        kept = reference(logits.astype("float64"), value)
        np.testing.assert_array_equal(got > NEG_INF / 2, kept, err_msg=f"{name} {value}")
        np.testing.assert_array_equal(got[kept], logits[kept])  # kept logits untouched
        assert kept.any(-1).all()
    rows = np.array(values + [values[2]], "float32")
    got = as_kept(function(logits, ops.convert_to_tensor(rows)))
    np.testing.assert_array_equal(got, reference(logits.astype("float64"), rows))


def test_the_hand_computed_cases_of_the_docstrings():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32"))
    # Entropy 1.1421 nats; |surprisal - entropy|: 0.449, 0.062, 0.755, 1.854.
    np.testing.assert_allclose(ops.convert_to_numpy(entropy(ops.log_softmax(logits))), [[1.14212]], rtol=1e-5)
    # The most typical (0.3), then 0.5: 0.8 >= 0.4.
    np.testing.assert_array_equal(as_kept(typical_filter(logits, 0.4)), [[True, True, False, False]])
    # 0.3 alone reaches 0.25: the most likely token goes.
    np.testing.assert_array_equal(as_kept(typical_filter(logits, 0.25)), [[False, True, False, False]])
    np.testing.assert_array_equal(as_kept(epsilon_filter(logits, 0.1)), [[True, True, True, False]])
    # The best token stays whatever the cutoff.
    np.testing.assert_array_equal(as_kept(epsilon_filter(logits, 0.9)), [[True, False, False, False]])
    # eta = min(0.2, sqrt(0.2) exp(-1.1421)) = 0.1427: 0.15 stays, 0.05 goes.
    np.testing.assert_array_equal(as_kept(eta_filter(logits, 0.2)), [[True, True, True, False]])
    # eta = min(0.35, 0.5916 * 0.3191) = 0.1888: 0.15 goes too.
    np.testing.assert_array_equal(as_kept(eta_filter(logits, 0.35)), [[True, True, False, False]])


def test_typical_sampling_may_drop_the_most_likely_token_but_keeps_ties():
    # One likely token among many equal unlikely ones: the unlikely ones are
    # the typical set (their surprisal is nearest the entropy).
    probabilities = np.array([[0.4] + [0.6 / 12] * 12], "float32")
    kept = as_kept(typical_filter(np.log(probabilities), 0.5))
    np.testing.assert_array_equal(kept, [[False] + [True] * 12])  # ties: all twelve, 0.6 >= 0.5
    uniform = np.zeros((1, 7), "float32")
    assert as_kept(typical_filter(uniform, 0.1)).all()  # all tied with the most typical


def test_tokens_another_constraint_forbade_stay_forbidden_and_do_not_count_in_the_entropy():
    logits = np.array([[1.0, 0.5, NEG_INF, 0.0, NEG_INF]], "float32")
    with_floor = ops.convert_to_numpy(entropy(ops.log_softmax(logits)))
    without = ops.convert_to_numpy(entropy(ops.log_softmax(logits[:, [0, 1, 3]])))
    np.testing.assert_allclose(with_floor, without, rtol=1e-6)
    for function, value in ((typical_filter, 0.99999), (epsilon_filter, 1e-9), (eta_filter, 1e-9)):
        got = ops.convert_to_numpy(function(logits, value))
        assert (got[0, [2, 4]] <= NEG_INF).all() and np.isfinite(got).all()
        assert (got[0, [0, 1, 3]] > NEG_INF / 2).all()


def test_the_filters_take_an_empty_batch():
    for function, value in ((typical_filter, 0.5), (epsilon_filter, 0.1), (eta_filter, 0.1)):
        assert ops.convert_to_numpy(function(np.zeros((0, 5), "float32"), value)).shape == (0, 5)
        rows = ops.convert_to_tensor(np.zeros((0,), "float32") + value)
        assert ops.convert_to_numpy(function(np.zeros((0, 5), "float32"), rows)).shape == (0, 5)


def test_bad_values_are_refused_by_the_filter_and_the_strategy():
    logits = np.zeros((1, 3), "float32")
    with pytest.raises(ValueError, match=r"typical_filter: `typical_p` must be a finite number > 0; got 0"):
        typical_filter(logits, 0)
    with pytest.raises(ValueError, match=r"TypicalSampling: `typical_p` must be in \(0, 1\]; got 1.5"):
        TypicalSampling(typical_p=1.5)
    with pytest.raises(ValueError, match=r"epsilon_filter: `epsilon_cutoff` must be in \[0, 1\]; got 2"):
        epsilon_filter(logits, 2)
    with pytest.raises(ValueError, match=r"EtaSampling: `eta_cutoff` must be a finite number >= 0; got -0.1"):
        EtaSampling(eta_cutoff=-0.1)
    with pytest.raises(ValueError, match=r"EpsilonSampling: `epsilon_cutoff` must be a finite number >= 0; got nan"):
        EpsilonSampling(epsilon_cutoff=float("nan"))


def one_step_table(rows=400, vocabulary=12, seed=1):
    logits = np.random.default_rng(seed).normal(0, 1.5, size=(rows, vocabulary)).astype("float32")

    def step(ids, state, time):
        return ops.convert_to_tensor(logits), state

    return step, ops.zeros((rows, 1)), logits


STRATEGIES = {
    "typical": (TypicalSampling, "typical_p", 0.3, numpy_typical, 1.0),
    "epsilon": (EpsilonSampling, "epsilon_cutoff", 0.12, numpy_cutoff, 0.0),
    "eta": (EtaSampling, "eta_cutoff", 0.3, numpy_eta, 0.0),
}


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_every_sampled_token_is_among_those_kept_and_the_neutral_value_is_plain_sampling(name):
    strategy, field, value, reference, neutral = STRATEGIES[name]
    step, state, logits = one_step_table()
    common = dict(start_tokens=0, end_token=11, max_length=1)
    ids = ops.convert_to_numpy(strategy(seed=3, **{field: value}).search(step, state, **common)["ids"])[:, 0]
    kept = reference(logits.astype("float64"), value)
    assert kept[np.arange(len(ids)), ids].all()
    assert len(set(ids.tolist())) > 1 and not kept.all()  # a real cut, still sampling
    # A run-time value per row overrides the field: the neutral value is sampling's.
    runtime = {field: ops.convert_to_tensor(np.full(len(logits), neutral, "float32"))}
    again = strategy(seed=5, **{field: value}).search(step, state, runtime, **common)["ids"]
    plain = sampling_search(step, state, 0, 11, 1, seed=5)["ids"]
    np.testing.assert_array_equal(ops.convert_to_numpy(again), ops.convert_to_numpy(plain))
    assert type(ka.decoding.get(name)) is strategy
    assert ka.decoding.get(keras.saving.serialize_keras_object(strategy(**{field: value}))).get_config()[field] == value


def test_a_decoder_takes_each_value_as_a_keyword_and_per_request():
    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    embedding, output = keras.layers.Embedding(9, 4), keras.layers.Dense(9)
    decoders = {}
    for name, (_, field, value, _, _) in STRATEGIES.items():
        options = dict(method=name, seed=4, runtime_options=[field])
        decoders[name] = decoder = ka.InferenceDecoder(cell, embedding, output, 1, 2, 5, **{field: value}, **options)
        assert getattr(decoder, field) == value and decoder.get_config()[field] == value
        spec = decoder.option_specs()[field]
        assert spec["default"] == value and spec["maximum"] == 1 and spec["strict"] == (name == "typical")
        with pytest.raises(ValueError, match=rf"`runtime_options` names '{field}', which method='beam'"):
            ka.InferenceDecoder(cell, embedding, output, 1, 2, 5, method="beam", runtime_options=[field])
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    # typical_p = 1 per request decodes what a plain sampling decoder does
    # with the same seed (one decoder run per backend: a loop's compilation
    # on JAX takes seconds; the searches above run each strategy).
    relaxed = ops.convert_to_numpy(decoders["typical"](memory, options={"typical_p": [1.0] * 3})["ids"])
    sample = ka.InferenceDecoder(cell, embedding, output, 1, 2, 5, method="sample", seed=4)
    np.testing.assert_array_equal(relaxed, ops.convert_to_numpy(sample(memory)["ids"]))
    cut = ops.convert_to_numpy(decoders["typical"](memory, options={"typical_p": [0.05] * 3})["ids"])
    assert not np.array_equal(cut, relaxed)  # the request's value reached the loop
