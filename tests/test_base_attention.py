"""Behaviour the base class gives every layer: masks, causality, dropout, shapes."""

import keras
import numpy as np
import pytest

import keras_attention as ka
from tests import reference
from tests.layer_cases import lengths_mask


def _inputs(rng, batch=2, tq=5, tv=5, d=4):
    return (
        rng.normal(size=(batch, tq, d)).astype("float32"),
        rng.normal(size=(batch, tv, d)).astype("float32"),
    )


def test_causal_weights_are_lower_triangular_and_match_reference():
    rng = np.random.default_rng(0)
    query, value = _inputs(rng, tq=5, tv=7)
    context, weights = ka.DotAttention()(query, value, causal=True, return_attention_scores=True)
    mask = reference.combined_mask(2, 5, 7, causal=True)
    want_context, want_weights = reference.attend(np.einsum("bid,bjd->bij", query, value), value, mask)
    np.testing.assert_allclose(weights, want_weights, atol=1e-6)
    np.testing.assert_allclose(context, want_context, atol=1e-5)
    assert (np.asarray(weights)[:, np.triu_indices(5, 1, 7)[0], np.triu_indices(5, 1, 7)[1]] == 0).all()


def test_attention_mask_combines_with_value_mask():
    rng = np.random.default_rng(1)
    query, value = _inputs(rng, tq=3, tv=4)
    attention_mask = rng.random((2, 3, 4)) > 0.4
    value_mask = lengths_mask([3, 4], 4)
    _, weights = ka.ScaledDotAttention()(
        query, value, value_mask=value_mask, attention_mask=attention_mask, return_attention_scores=True
    )
    allowed = reference.combined_mask(2, 3, 4, value_mask=value_mask, attention_mask=attention_mask)
    weights = np.asarray(weights)
    assert (weights[~allowed] == 0).all()
    rows_with_any = allowed.any(-1)
    np.testing.assert_allclose(weights.sum(-1)[rows_with_any], 1.0, atol=1e-6)
    assert (weights.sum(-1)[~rows_with_any] == 0).all()


def test_attention_mask_for_a_single_query_is_batch_by_tv():
    rng = np.random.default_rng(2)
    query = rng.normal(size=(2, 4)).astype("float32")
    value = rng.normal(size=(2, 3, 4)).astype("float32")
    attention_mask = np.array([[True, False, True], [False, False, True]])
    _, weights = ka.DotAttention()(query, value, attention_mask=attention_mask, return_attention_scores=True)
    assert weights.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(weights)[1], [0, 0, 1])
    assert np.asarray(weights)[0, 1] == 0


def test_keras_masks_are_used_and_an_explicit_query_mask_is_honoured():
    """Keras masks fill the *_mask arguments; an explicit query_mask is not ignored
    (keras.layers.MultiHeadAttention ignores it)."""
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    explicit_query_mask = keras.Input((None,), dtype="bool")
    embed = keras.layers.Embedding(10, 4, mask_zero=True)
    query, value = embed(target), embed(source)
    layer = ka.DotAttention()
    _, auto_weights = layer(query, value, return_attention_scores=True)
    explicit_context, explicit_weights = layer(
        query, value, query_mask=explicit_query_mask, return_attention_scores=True
    )
    model = keras.Model([source, target, explicit_query_mask], [auto_weights, explicit_weights, explicit_context])
    source_ids = np.array([[1, 2, 0, 0]], "int32")
    target_ids = np.array([[3, 4, 5]], "int32")
    explicit = np.array([[True, False, True]])
    auto_w, explicit_w, explicit_c = model.predict([source_ids, target_ids, explicit], verbose=0)
    assert (auto_w[0, :, 2:] == 0).all(), "the value's Keras mask was not applied"
    assert (explicit_w[0, 1] == 0).all() and (explicit_c[0, 1] == 0).all()
    np.testing.assert_allclose(explicit_w[0, [0, 2]].sum(-1), 1.0, atol=1e-6)


def test_output_carries_the_query_mask():
    target = keras.Input((None,), dtype="int32")
    source = keras.Input((None,), dtype="int32")
    embed = keras.layers.Embedding(10, 4, mask_zero=True)
    context = ka.DotAttention()(embed(target), embed(source))
    pooled = keras.layers.GlobalAveragePooling1D()(context)  # mask-aware mean
    model = keras.Model([target, source], [context, pooled])
    target_ids = np.array([[1, 2, 0]], "int32")
    context_value, pooled_value = model.predict([target_ids, np.array([[1, 2]], "int32")], verbose=0)
    np.testing.assert_allclose(pooled_value[0], context_value[0, :2].mean(0), atol=1e-6)
    assert ka.DotAttention().compute_mask(np.zeros((1, 3, 4)), np.array([[True, True, False]])) is not None
    assert ka.DotAttention().compute_mask(np.zeros((1, 4)), None) is None


def test_dropout_applies_in_training_only_and_is_seeded():
    rng = np.random.default_rng(3)
    query, value = _inputs(rng, tq=6, tv=50, d=4)
    layer = ka.ScaledDotAttention(dropout=0.5, seed=7)
    _, inference = layer(query, value, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(inference).sum(-1), 1.0, atol=1e-6)
    _, trained = layer(query, value, return_attention_scores=True, training=True)
    trained = np.asarray(trained)
    dropped = trained == 0
    assert 0.3 < dropped.mean() < 0.7
    # Kept weights are scaled by 1 / (1 - rate).
    np.testing.assert_allclose(trained[~dropped], 2 * np.asarray(inference)[~dropped], rtol=1e-5)
    _, again = ka.ScaledDotAttention(dropout=0.5, seed=7)(query, value, return_attention_scores=True, training=True)
    np.testing.assert_array_equal(again, trained)


@pytest.mark.parametrize("rank", [2, 3])
def test_symbolic_shapes(rank):
    query = keras.Input((8,) if rank == 2 else (None, 8))
    value = keras.Input((None, 6))
    key = keras.Input((None, 3))
    context, weights = ka.AdditiveAttention(4)(query, value, key=key, return_attention_scores=True)
    if rank == 2:
        assert context.shape == (None, 6) and weights.shape == (None, None)
    else:
        assert context.shape == (None, None, 6) and weights.shape == (None, None, None)
    layer = ka.GeneralAttention()
    assert layer.compute_output_shape((2, 8), (2, 5, 6)) == (2, 6)
    assert layer.compute_output_shape((2, 3, 8), (2, 5, 6), (2, 5, 7)) == (2, 3, 6)


def test_key_projection_is_separate_from_the_query_step():
    """project_key / project_query / attend reproduce call: what a decoder uses."""
    rng = np.random.default_rng(4)
    query = rng.normal(size=(2, 3, 4)).astype("float32")
    value = rng.normal(size=(2, 5, 6)).astype("float32")
    layer = ka.AdditiveAttention(8, use_bias=True)
    full = layer(query, value)
    keys = layer.project_key(value)
    stepped = [layer.attend(layer.project_query(query[:, t : t + 1]), keys, value)[0] for t in range(3)]
    np.testing.assert_allclose(np.concatenate(stepped, axis=1), full, atol=1e-6)


def test_a_single_query_takes_a_batch_mask():
    """A rank-2 query from Embedding(mask_zero=True) of one id carries a (B,) mask."""
    rng = np.random.default_rng(5)
    query = rng.normal(size=(3, 4)).astype("float32")
    value = rng.normal(size=(3, 5, 4)).astype("float32")
    context, weights = ka.DotAttention()(
        query, value, query_mask=np.array([True, False, True]), return_attention_scores=True
    )
    context, weights = np.asarray(context), np.asarray(weights)
    assert (context[1] == 0).all() and (weights[1] == 0).all()
    np.testing.assert_allclose(weights[[0, 2]].sum(-1), 1.0, atol=1e-6)
