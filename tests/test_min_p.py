"""Min-p sampling (arXiv:2407.01082): the filter against NumPy, the search's limits, a decoder's option."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import NEG_INF, MinPSampling, greedy_search, sampling_search
from keras_attention.decoding.min_p import min_p_filter

pytestmark = pytest.mark.any_backend


def numpy_min_p(logits, min_p):
    """The tokens min-p keeps: p >= min_p * max p, per row."""
    probabilities = np.exp(logits - logits.max(-1, keepdims=True))
    probabilities /= probabilities.sum(-1, keepdims=True)
    return probabilities >= np.reshape(min_p, (-1, 1)) * probabilities.max(-1, keepdims=True)


@pytest.mark.parametrize("min_p", [0.0, 0.05, 0.3, 1.0, "rows"])
def test_the_filter_keeps_what_numpy_keeps(min_p):
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, size=(6, 30)).astype("float32")
    value = rng.uniform(0, 1, size=6).astype("float32") if min_p == "rows" else min_p
    got = ops.convert_to_numpy(min_p_filter(logits, value if min_p != "rows" else ops.convert_to_tensor(value)))
    kept = numpy_min_p(logits.astype("float64"), value)
    np.testing.assert_array_equal(got > NEG_INF / 2, kept)
    np.testing.assert_array_equal(got[kept], logits[kept])  # kept logits untouched
    assert kept.any(-1).all()  # the best token always stays


def test_the_filter_refuses_a_value_outside_zero_one():
    with pytest.raises(ValueError, match=r"min_p_filter: `min_p` must be in \[0, 1\]; got 1.5"):
        min_p_filter(np.zeros((1, 3), "float32"), 1.5)
    with pytest.raises(ValueError, match=r"MinPSampling: `min_p` must be a finite number >= 0; got -0.1"):
        MinPSampling(min_p=-0.1)


def one_step_table(rows=400, vocabulary=12, seed=1):
    logits = np.random.default_rng(seed).normal(0, 1.5, size=(rows, vocabulary)).astype("float32")

    def step(ids, state, time):
        return ops.convert_to_tensor(logits), state

    return step, ops.zeros((rows, 1)), logits


def test_every_sampled_token_is_among_those_kept():
    step, state, logits = one_step_table()
    common = dict(start_tokens=0, end_token=11, max_length=1)
    ids = ops.convert_to_numpy(MinPSampling(min_p=0.4, seed=3).search(step, state, **common)["ids"])[:, 0]
    kept = numpy_min_p(logits.astype("float64"), 0.4)
    assert kept[np.arange(len(ids)), ids].all()
    assert len(set(ids.tolist())) > 1  # still sampling, not argmax


def test_min_p_one_is_greedy_and_zero_is_plain_sampling():
    step, state, _ = one_step_table(rows=50)
    common = dict(start_tokens=0, end_token=11, max_length=1)
    greedy = ops.convert_to_numpy(greedy_search(step, state, 0, 11, 1)["ids"])
    np.testing.assert_array_equal(
        ops.convert_to_numpy(MinPSampling(min_p=1.0, seed=2).search(step, state, **common)["ids"]), greedy
    )
    plain = ops.convert_to_numpy(sampling_search(step, state, 0, 11, 1, seed=5)["ids"])
    np.testing.assert_array_equal(
        ops.convert_to_numpy(MinPSampling(min_p=0.0, seed=5).search(step, state, **common)["ids"]), plain
    )


def test_a_decoder_takes_min_p_as_a_keyword_and_saves_it(tmp_path):
    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    decoder = ka.InferenceDecoder(
        cell,
        keras.layers.Embedding(9, 4),
        keras.layers.Dense(9),
        1,
        2,
        5,
        method="min_p",
        min_p=0.25,
        seed=4,
        runtime_options=["min_p"],
    )
    assert decoder.min_p == 0.25 and decoder.get_config()["min_p"] == 0.25
    assert decoder.option_specs()["min_p"] == {
        "dtype": "float32",
        "default": 0.25,
        "minimum": 0,
        "strict": False,
        "maximum": 1,
    }
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32")
    # min_p = 1 per request: the argmax at every step, whatever the seed.
    sharp = ops.convert_to_numpy(decoder(memory, options={"min_p": [1.0]})["ids"])
    greedy = ka.InferenceDecoder(decoder.cell, decoder.embedding, decoder.output_layer, 1, 2, 5)
    np.testing.assert_array_equal(sharp, ops.convert_to_numpy(greedy(memory)["ids"]))
    source = keras.Input((4, 6))
    model = keras.Model(source, decoder(source))
    model.save(tmp_path / "min_p.keras")
    loaded = [
        layer
        for layer in keras.saving.load_model(tmp_path / "min_p.keras").layers
        if isinstance(layer, ka.InferenceDecoder)
    ][0]
    assert loaded.method == "min_p" and loaded.min_p == 0.25
    with pytest.raises(ValueError, match=r"InferenceDecoder: `runtime_options` names 'min_p', which method='beam'"):
        ka.InferenceDecoder(
            cell, decoder.embedding, decoder.output_layer, 1, 2, 5, method="beam", runtime_options=["min_p"]
        )
