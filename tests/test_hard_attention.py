"""HardAttention specifics: one value per query, sampling, straight-through gradients."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.ops import masked_softmax
from tests.layer_cases import lengths_mask, top_k_with_ties_to_the_highest_index


def _memory(rng, batch=2, tv=5, d=4):
    return rng.normal(size=(batch, tv, d)).astype("float32")


@pytest.mark.parametrize("mode", ["argmax", "sample"])
def test_inference_returns_exactly_one_valid_value_per_query(mode):
    rng = np.random.default_rng(0)
    memory = _memory(rng, batch=3, tv=6)
    query = rng.normal(size=(3, 7, 4)).astype("float32")
    mask = lengths_mask([6, 2, 4], 6)
    layer = ka.HardAttention("dot", mode=mode, seed=3)
    context, weights = layer(query, memory, value_mask=mask, return_attention_scores=True)
    context, weights = np.asarray(context), np.asarray(weights)
    assert set(np.unique(weights)) == {0.0, 1.0}
    np.testing.assert_array_equal(weights.sum(-1), 1.0)
    chosen = weights.argmax(-1)
    assert mask[np.arange(3)[:, None], chosen].all(), "picked a padded position"
    np.testing.assert_array_equal(context, memory[np.arange(3)[:, None], chosen])


def test_ties_go_to_the_lowest_valid_position_whatever_the_backends_tie_order(monkeypatch):
    # top_k's order among equal scores is the backend's (torch promises
    # none, issue 18): a top_k that breaks ties the other way changes nothing.
    monkeypatch.setattr(keras.ops, "top_k", top_k_with_ties_to_the_highest_index(keras.ops.top_k))
    memory = np.array(
        [
            [[1, 0], [2, 0], [1, 0], [2, 0], [0, 0]],  # dot scores 1 2 1 2 0: positions 1 and 3 tie
            [[3, 0], [1, 0], [2, 0], [3, 0], [3, 0]],  # 3 1 2 3 3, position 0 masked: 3 and 4 tie
            [[1, 0], [1, 0], [1, 0], [1, 0], [1, 0]],  # all equal
        ],
        "float32",
    )
    query = np.array([[1, 0], [1, 0], [1, 0]], "float32")
    mask = np.array([[1, 1, 1, 1, 1], [0, 1, 1, 1, 1], [1, 1, 1, 1, 1]], bool)
    context, weights = ka.HardAttention("dot")(query, memory, value_mask=mask, return_attention_scores=True)
    np.testing.assert_array_equal(np.asarray(weights), np.eye(5, dtype="float32")[[1, 3, 0]])
    np.testing.assert_array_equal(np.asarray(context), memory[[0, 1, 2], [1, 3, 0]])


def test_sample_mode_draws_from_the_attention_distribution():
    # Keys chosen so that dot scores are log([0.5, 0.3, 0.2]) for the query 1.
    probabilities = np.array([0.5, 0.3, 0.2])
    keys = np.log(probabilities)[None, :, None].astype("float32")
    queries = np.ones((1, 20000, 1), "float32")
    layer = ka.HardAttention("dot", mode="sample", seed=11)
    _, weights = layer(queries, keys, return_attention_scores=True)
    frequencies = np.asarray(weights)[0].mean(0)
    # 20000 draws: the standard error of each frequency is below 0.004.
    np.testing.assert_allclose(frequencies, probabilities, atol=0.015)


def test_sampling_is_reproducible_with_a_seed():
    rng = np.random.default_rng(1)
    memory = _memory(rng, tv=8)
    query = rng.normal(size=(2, 30, 4)).astype("float32") * 0.1
    draws = [
        np.asarray(ka.HardAttention("dot", mode="sample", seed=5)(query, memory, return_attention_scores=True)[1])
        for _ in range(2)
    ]
    np.testing.assert_array_equal(draws[0], draws[1])
    assert len(np.unique(draws[0].argmax(-1))) > 1, "samples should vary across queries"


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_straight_through_gradient_is_the_relaxed_softmax_gradient(temperature):
    rng = np.random.default_rng(2)
    memory = tf.constant(_memory(rng, tv=5))
    query = tf.constant(rng.normal(size=(2, 3, 4)).astype("float32"))
    readout = tf.constant(rng.normal(size=(2, 3, 4)).astype("float32"))
    mask = lengths_mask([5, 3], 5)[:, None, :]
    layer = ka.HardAttention("dot", temperature=temperature)

    with tf.GradientTape() as tape:
        tape.watch(query)
        context, weights = layer(query, memory, value_mask=mask[:, 0], training=True, return_attention_scores=True)
        loss = tf.reduce_sum(context * readout)
    straight_through = tape.gradient(loss, query)
    assert set(np.unique(np.asarray(weights))) <= {0.0, 1.0}, "forward pass stays one-hot"

    with tf.GradientTape() as tape:
        tape.watch(query)
        soft = masked_softmax(tf.matmul(query, memory, transpose_b=True) / temperature, mask)
        relaxed_loss = tf.reduce_sum(tf.matmul(soft, memory) * readout)
    np.testing.assert_allclose(straight_through, tape.gradient(relaxed_loss, query), atol=1e-5)


def test_without_straight_through_no_gradient_reaches_the_score():
    rng = np.random.default_rng(3)
    memory = tf.constant(_memory(rng))
    query = tf.constant(rng.normal(size=(2, 4)).astype("float32"))
    layer = ka.HardAttention(ka.AdditiveAttention(3), straight_through=False)
    with tf.GradientTape() as tape:
        tape.watch([query, memory])
        loss = tf.reduce_sum(layer(query, memory, training=True) ** 2)
    grads = tape.gradient(loss, [query, memory] + layer.trainable_weights)
    for grad in [grads[0]] + grads[2:]:
        assert grad is None or not np.asarray(grad).any()
    assert np.asarray(grads[1]).any(), "the chosen values still get their gradient"


def test_straight_through_trains_the_score_weights():
    rng = np.random.default_rng(4)
    memory = tf.constant(_memory(rng))
    query = tf.constant(rng.normal(size=(2, 4)).astype("float32"))
    layer = ka.HardAttention(ka.AdditiveAttention(3))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(query, memory, training=True) * 1.7)
    grads = tape.gradient(loss, layer.trainable_weights)
    assert len(grads) == 3 and all(np.asarray(g).any() for g in grads)


def test_score_layer_takes_the_hard_layer_dtype_policy():
    layer = ka.HardAttention(ka.GeneralAttention(), dtype="float64")
    layer(np.zeros((1, 2), "float64"), np.zeros((1, 3, 2), "float64"))
    assert layer.score_layer.bilinear_kernel.dtype == "float64"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mode": "top"}, r"HardAttention: unknown `mode` 'top'; expected one of 'argmax', 'sample'"),
        ({"score": "cosine"}, r"HardAttention: unknown `score` 'cosine'; expected one of 'dot', 'scaled_dot'"),
        ({"score": "additive"}, r"`score='additive'` needs a size; pass `score=AdditiveAttention\(units=...\)`"),
        ({"score": 3}, r"`score` must be a score layer of this library .* got 3"),
        ({"temperature": 0.0}, r"`temperature` must be a finite number > 0; got 0.0"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ka.HardAttention(**kwargs)


def test_a_built_score_layer_is_refused():
    score = ka.DotAttention()
    score(np.zeros((1, 2), "float32"), np.zeros((1, 3, 2), "float32"))
    with pytest.raises(ValueError, match=r"`score` must be an unbuilt layer"):
        ka.HardAttention(score)
