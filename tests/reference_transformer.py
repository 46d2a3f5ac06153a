"""NumPy references of the Transformer layers, written from the formulas, not the library's code.

Every function reads a built layer's weights as NumPy arrays and computes in
float64 with explicit per-head loops: the paper's equations (Vaswani et al.
2017), pre-norm or post-norm, the sinusoids, learned positions and the
rotary rotation (Su et al. 2021) written pair by pair.
"""

import math

import numpy as np
from keras import ops

from tests.reference import masked_softmax


def numpy_weights(layer):
    return {w.path.split("/")[-1]: np.asarray(ops.convert_to_numpy(w), np.float64) for w in layer.weights}


def sinusoids(positions, size, max_wavelength=10000.0):
    table = np.zeros((len(positions), size))
    for row, p in enumerate(positions):
        for j in range(size):
            angle = p / max_wavelength ** (2 * (j // 2) / size)
            table[row, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table


def rotate(x, positions, max_wavelength=10000.0):
    """RoPE on `x (B, T, ..., d)`: feature i paired with i + d/2, turned by p * theta_i."""
    x = np.asarray(x, np.float64)
    half = x.shape[-1] // 2
    out = np.empty_like(x)
    for t, p in enumerate(positions):
        for i in range(half):
            theta = p * max_wavelength ** (-2 * i / x.shape[-1])
            a, b = x[:, t, ..., i], x[:, t, ..., i + half]
            out[:, t, ..., i] = a * math.cos(theta) - b * math.sin(theta)
            out[:, t, ..., i + half] = b * math.cos(theta) + a * math.sin(theta)
    return out


def layer_norm(x, layer):
    w = numpy_weights(layer)
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + layer.epsilon) * w["gamma"] + w["beta"]


def dense(x, layer):
    w = numpy_weights(layer)
    return x @ w["kernel"] + w["bias"]


def multi_head(attention, query, memory, mask, rotary_positions=None):
    """MHA(Q, K, V) with the layer's weights; `mask (B, Tq, Tv)`; rows with no
    valid key give zero (the library's contract)."""
    w = numpy_weights(attention)
    heads = []
    for h in range(attention.num_heads):
        q = query @ w["query_kernel"][:, h] + w["query_bias"][h]
        k = memory @ w["key_kernel"][:, h] + w["key_bias"][h]
        v = memory @ w["value_kernel"][:, h] + w["value_bias"][h]
        if rotary_positions is not None:
            q, k = rotate(q, rotary_positions), rotate(k, rotary_positions)
        scores = q @ np.swapaxes(k, 1, 2) / math.sqrt(attention.key_dim)
        heads.append(masked_softmax(scores, mask) @ v)
    output = sum(heads[h] @ w["output_kernel"][h] for h in range(attention.num_heads)) + w["output_bias"]
    return np.where(np.broadcast_to(mask, scores.shape).any(-1, keepdims=True), output, 0.0)


def _mask(batch, tq, tk, query_valid, key_valid, causal=False):
    mask = np.ones((batch, tq, tk), bool)
    if key_valid is not None:
        mask &= np.asarray(key_valid, bool)[:, None, :]
    if query_valid is not None:
        mask &= np.asarray(query_valid, bool)[:, :, None]
    if causal:
        mask &= np.tril(np.ones((tq, tk), bool))[None]
    return mask


def _residual(x, norm, sublayer, norm_first):
    if norm_first:
        return x + sublayer(layer_norm(x, norm))
    return layer_norm(x + sublayer(x), norm)


def _feed_forward(layer, h):
    return dense(np.maximum(dense(h, layer.feed_forward_in), 0.0), layer.feed_forward_out)


def encoder_layer(layer, x, valid=None):
    x = np.asarray(x, np.float64)
    batch, steps = x.shape[:2]
    mask = _mask(batch, steps, steps, valid, valid)
    positions = list(range(steps)) if layer.use_rotary else None
    x = _residual(
        x,
        layer.self_attention_norm,
        lambda h: multi_head(layer.self_attention, h, h, mask, positions),
        layer.norm_first,
    )
    return _residual(x, layer.feed_forward_norm, lambda h: _feed_forward(layer, h), layer.norm_first)


def decoder_layer(layer, x, memory, valid=None, memory_valid=None):
    x, memory = np.asarray(x, np.float64), np.asarray(memory, np.float64)
    batch, steps = x.shape[:2]
    self_mask = _mask(batch, steps, steps, valid, valid, causal=True)
    cross_mask = _mask(batch, steps, memory.shape[1], valid, memory_valid)
    positions = list(range(steps)) if layer.use_rotary else None
    x = _residual(
        x,
        layer.self_attention_norm,
        lambda h: multi_head(layer.self_attention, h, h, self_mask, positions),
        layer.norm_first,
    )
    x = _residual(
        x,
        layer.cross_attention_norm,
        lambda h: multi_head(layer.cross_attention, h, memory, cross_mask),
        layer.norm_first,
    )
    return _residual(x, layer.feed_forward_norm, lambda h: _feed_forward(layer, h), layer.norm_first)


def encoder_stack(stack, x, valid=None):
    for layer in stack.transformer_layers:
        x = encoder_layer(layer, x, valid)
    return x if stack.output_norm is None else layer_norm(x, stack.output_norm)


def decoder_stack(stack, x, memory, valid=None, memory_valid=None):
    for layer in stack.transformer_layers:
        x = decoder_layer(layer, x, memory, valid, memory_valid)
    return x if stack.output_norm is None else layer_norm(x, stack.output_norm)
