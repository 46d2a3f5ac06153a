"""MultiHeadAttention's two paths agree on every backend, and the reductions under
them keep the shapes of an empty batch and an empty sequence."""

import keras
import numpy as np
import pytest

from keras_attention._reductions import max_along
from keras_attention.layers.multi_head import MultiHeadAttention
from tests.layer_cases import lengths_mask, randomize

pytestmark = pytest.mark.any_backend


def numpy_attention(layer, query, value, mask):
    """The formula head by head in float64, `mask` (B, Tq, Tv)."""
    w = {v.path.split("/")[-1]: np.asarray(keras.ops.convert_to_numpy(v), np.float64) for v in layer.weights}
    heads = []
    for h in range(w["query_kernel"].shape[1]):
        q = query @ w["query_kernel"][:, h] + w["query_bias"][h]
        k = value @ w["key_kernel"][:, h] + w["key_bias"][h]
        v = value @ w["value_kernel"][:, h] + w["value_bias"][h]
        scores = np.where(mask, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), -np.inf)
        alpha = np.exp(scores - scores.max(-1, keepdims=True))
        heads.append(alpha / alpha.sum(-1, keepdims=True) @ v)
    out = sum(heads[h] @ w["output_kernel"][h] for h in range(len(heads))) + w["output_bias"]
    return out


@pytest.mark.parametrize("causal", [False, True], ids=["padding", "causal"])
def test_with_and_without_weights_the_same_output(causal):
    """Without weights JAX and PyTorch run their fused op, with weights every backend
    the explicit matmuls: both equal the formula."""
    rng = np.random.default_rng(0)
    query = rng.normal(size=(3, 5, 4)).astype("float32") * 3
    value = rng.normal(size=(3, 5, 4)).astype("float32") * 3
    layer = MultiHeadAttention(num_heads=2, key_dim=3)
    layer(query, value)
    randomize(layer, rng)
    value_mask = lengths_mask([5, 2, 4], 5)
    mask = np.broadcast_to(value_mask[:, None, :], (3, 5, 5))
    if causal:
        mask = mask & np.tril(np.ones((5, 5), bool))
    fast = keras.ops.convert_to_numpy(layer(query, value, value_mask=value_mask, causal=causal))
    explicit, weights = layer(query, value, value_mask=value_mask, causal=causal, return_attention_scores=True)
    want = numpy_attention(layer, query.astype(np.float64), value.astype(np.float64), mask)
    np.testing.assert_allclose(fast, want, atol=1e-4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(explicit), want, atol=1e-4)
    assert np.abs(want).max() > 1.0
    np.testing.assert_allclose(keras.ops.convert_to_numpy(weights).sum(-1), 1.0, atol=1e-5)


def test_self_attention_over_an_empty_sequence_and_an_empty_batch():
    layer = MultiHeadAttention(num_heads=2, key_dim=3)
    layer(np.ones((1, 2, 4), "float32"), np.ones((1, 2, 4), "float32"))
    for shape in [(2, 0, 4), (0, 3, 4)]:
        x = np.zeros(shape, "float32")
        out = layer(x, x, value_mask=np.ones(shape[:2], bool))
        assert tuple(out.shape) == shape


def test_max_along_keeps_an_empty_batch_and_floors_an_empty_axis():
    x = np.array([[[1.0, 5.0], [3.0, -2.0]]], "float32")  # (1, 2, 2)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(max_along(x, -1, -9.0)), [[[5.0], [3.0]]])
    empty_axis = keras.ops.convert_to_numpy(max_along(np.zeros((2, 3, 0), "float32"), -1, -9.0))
    np.testing.assert_array_equal(empty_axis, np.full((2, 3, 1), -9.0))
    empty_batch = max_along(np.zeros((0, 3, 4), "float32"), -1, -9.0)
    assert tuple(empty_batch.shape) == (0, 3, 1)
