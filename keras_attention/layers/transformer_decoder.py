"""The Transformer decoder (Vaswani et al. 2017): one layer, a stack, and their cached steps."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.layers.transformer_block import TransformerBlock, TransformerStackBase, padding_and_causal_mask

__all__ = ["TransformerDecoderLayer", "TransformerDecoderStack"]


def _position_rows(cache, time):
    """The `(N * H, 2)` indices `(row, time)` of a cache `(N, H, L, k)`'s
    `(N * H, L, k)` view: one step's writes, the same for its keys and values."""
    count = ops.shape(cache)[0] * ops.shape(cache)[1]
    position = ops.zeros((count,), "int32") + ops.cast(time, "int32")
    return ops.stack([ops.arange(count, dtype="int32"), position], axis=1)


def _write_position(cache, rows, values):
    """`cache[:, :, time] = values` for a cache `(N, H, L, k)` laid out by
    head and values `(N, H, k)`: a scatter at `rows` (`_position_rows`) into
    the `(N * H, L, k)` view, the cache's shape fixed. `slice_update`
    inside a loop does not convert to ONNX (a scatter becomes ScatterND),
    and a masked `where` over the whole cache, which does, rewrote all of it
    at every step: a third of a cached greedy step under XLA on a CPU (d
    256, 3 layers, batch 64, length 32)."""
    shape = ops.shape(cache)
    flat = ops.reshape(cache, (-1, shape[2], shape[3]))
    written = ops.scatter_update(flat, rows, ops.reshape(values, (-1, shape[3])))
    return ops.reshape(written, shape)


def _step_self_mask(cache, time):
    """`(N, 1, L)`: a step at `time` sees the cached positions `0..time` of a cache `(N, H, L, k)`."""
    rows, length = ops.shape(cache)[0], ops.shape(cache)[2]
    seen = ops.less_equal(ops.arange(length), time)
    return ops.broadcast_to(ops.reshape(seen, (1, 1, length)), (rows, 1, length))


def _by_head(projected):
    """`(B, T, H, k)` -> `(B, H, T, k)`: the layout `MultiHeadAttention.attend_heads` multiplies as it is."""
    return ops.transpose(projected, (0, 2, 1, 3))


def _cross_mask(memory_mask):
    return None if memory_mask is None else ops.expand_dims(ops.cast(memory_mask, "bool"), 1)


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoderLayer(TransformerBlock):
    """One Transformer decoder layer: causal self-attention, cross-attention over the memory, feed-forward.

        post-norm:  h = LN(x + Drop(MHA_self(x, x, causal)))
                    g = LN(h + Drop(MHA_cross(h, memory)));  y = LN(g + Drop(FFN(g)))
        pre-norm:   h = x + Drop(MHA_self(LN(x), LN(x), causal))
                    g = h + Drop(MHA_cross(LN(h), memory));  y = g + Drop(FFN(LN(g)))

    with the options, dropouts and rotary embedding (self-attention only) of
    `TransformerEncoderLayer`. Position `t` sees the valid positions `<= t`
    of the inputs and every valid position of the memory.

    Cached decoding runs the same layer one position at a time:
    `project_memory(memory)` projects the cross-attention's keys and values
    once per sequence, `(B, H, Ts, key_dim)` each; `initial_cache(batch,
    max_length)` preallocates the self-attention's keys and values, `(N, H,
    max_length, key_dim)` each (laid out by head, the layout a step
    multiplies them in);
    `step(x, cache, projected_memory, memory_mask, time)` writes the step's
    key and value at `time` (a scatter: fixed shapes for XLA and ONNX
    loops) and attends over positions `0..time`. Its output equals the
    full-sequence call's at position `time`.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: inputs `(B, T, d)`, memory `(B, Ts, dm)`, mask `(B, T)`,
    memory_mask `(B, Ts)`; output `(B, T, d)`. `step`: x `(N, 1, d)`,
    returns `(y (N, 1, d), cache, cross weights (N, H, Ts) or None)`.

    Args: those of `TransformerEncoderLayer`.

    Example:

    ```python
    layer = keras_attention.TransformerDecoderLayer(num_heads=2, intermediate_dim=32)
    target = np.random.rand(2, 4, 16).astype("float32")
    memory = np.random.rand(2, 6, 16).astype("float32")
    y = layer(target, memory, memory_mask=np.array([[True] * 6, [True] * 3 + [False] * 3]))  # (2, 4, 16)
    ```
    """

    def build(self, inputs_shape, memory_shape=None):
        model_dim = _checks.check_known_last_dim(self, "inputs", inputs_shape)
        memory_dim = model_dim if memory_shape is None else _checks.check_known_last_dim(self, "memory", memory_shape)
        self.self_attention = self._attention("self_attention", model_dim)
        self.self_attention_norm = self._norm("self_attention_norm")
        self.cross_attention = self._attention("cross_attention", model_dim, memory_dim)
        self.cross_attention_norm = self._norm("cross_attention_norm")
        self._make_feed_forward()
        self._build_feed_forward(model_dim)
        self.feed_forward_norm = self._norm("feed_forward_norm")
        for norm in (self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm):
            norm.build(inputs_shape)
        self.built = True

    # ------------------------------------------------------- whole sequences

    def project_memory(self, memory):
        """The cross-attention's `(keys, values)` for cached steps, `(B, H,
        Ts, key_dim)` each: once per sequence, laid out by head."""
        attention = self.cross_attention
        return _by_head(attention.project_key(memory)), _by_head(attention.project_value(memory))

    def _cross_sublayer(self, keys, values, mask, training, return_weights=False, attend=None):
        """`attend` (the attention's `attend`, or `attend_heads` for keys and values by head)."""
        attend = attend or self.cross_attention.attend

        def sublayer(h):
            query = self.cross_attention.project_query(h)
            return attend(query, keys, values, mask, training=training, return_attention_scores=return_weights)

        return sublayer

    def call(self, inputs, memory, mask=None, memory_mask=None, training=None):
        keys, values = self.cross_attention.project_key(memory), self.cross_attention.project_value(memory)
        self_mask = padding_and_causal_mask(mask, mask, causal_length=ops.shape(inputs)[1])
        attend = self._self_attention_sublayer(self.self_attention, self_mask, training)
        x, _ = self._residual(inputs, self.self_attention_norm, attend, training)
        cross_mask = padding_and_causal_mask(mask, memory_mask)
        x, _ = self._residual(
            x, self.cross_attention_norm, self._cross_sublayer(keys, values, cross_mask, training), training
        )
        x, _ = self._residual(x, self.feed_forward_norm, lambda h: self._feed_forward(h, training), training)
        return x

    def compute_mask(self, inputs, memory=None, mask=None, memory_mask=None):
        return mask

    # ------------------------------------------------------------ one step

    def initial_cache(self, batch, max_length):
        """Zero `(keys, values)` of `(batch, H, max_length, key_dim)`, in the compute dtype."""
        attention = self.self_attention
        shape = (batch, attention.num_heads, max_length, attention.key_dim)
        return ops.zeros(shape, self.compute_dtype), ops.zeros(shape, self.compute_dtype)

    def step(self, x, cache, projected_memory, memory_mask, time, training=False, return_weights=False):
        """One position `time` of the inputs `x (N, 1, d)` against the cache
        of the positions before it: `(y (N, 1, d), new cache, weights)`."""
        attention = self.self_attention
        key_cache, value_cache = cache
        x = ops.cast(ops.convert_to_tensor(x), self.compute_dtype)  # a method, not `__call__`: nothing converted it

        def self_sublayer(h):
            query = self._rotate(attention.project_query(h), time)
            key = self._rotate(attention.project_key(h), time)
            rows = _position_rows(key_cache, time)
            keys = _write_position(key_cache, rows, ops.squeeze(key, 1))
            values = _write_position(value_cache, rows, ops.squeeze(attention.project_value(h), 1))
            output, _ = attention.attend_heads(query, keys, values, _step_self_mask(keys, time), training=training)
            return output, (keys, values)

        x, cache = self._residual(x, self.self_attention_norm, self_sublayer, training)
        memory_keys, memory_values = projected_memory
        cross = self._cross_sublayer(
            memory_keys,
            memory_values,
            _cross_mask(memory_mask),
            training,
            return_weights,
            attend=self.cross_attention.attend_heads,
        )
        x, weights = self._residual(x, self.cross_attention_norm, cross, training)
        x, _ = self._residual(x, self.feed_forward_norm, lambda h: self._feed_forward(h, training), training)
        if weights is not None:
            weights = ops.squeeze(weights, 2)
        return x, cache, weights


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerDecoderStack(TransformerStackBase):
    """`num_layers` `TransformerDecoderLayer`s over one memory (the Transformer's decoder).

        x_0 = inputs;  x_l = DecoderLayer_l(x_{l-1}, memory);  output = LN(x_L) with `final_norm`

    For training (teacher forcing) call it on the embedded target inputs
    (positions added) and the encoder output; for decoding, give it to
    `TransformerInferenceDecoder`, which runs `step` with one cache per layer
    (preallocated to the maximum length, written at the step index,
    reordered by beam search like every state) and the memory projected once
    (`project_memory`). Named a stack so as not to be mistaken for
    keras-hub's `TransformerDecoder`, which is one layer.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: inputs `(B, T, d)`, memory `(B, Ts, dm)`, mask `(B, T)`,
    memory_mask `(B, Ts)`; output `(B, T, d)`.

    Args:
        num_layers: the number of layers `L`.
        final_norm: a layer normalisation after the last layer (default:
            `norm_first`).
        **layer_options: `TransformerDecoderLayer`'s arguments, the same
            for every layer.

    Example:

    ```python
    decoder = keras_attention.TransformerDecoderStack(2, num_heads=2, intermediate_dim=32)
    target = np.random.rand(2, 4, 16).astype("float32")
    memory = np.random.rand(2, 6, 16).astype("float32")
    hidden = decoder(target, memory)                                   # (2, 4, 16)
    projected = decoder.project_memory(memory)
    caches = decoder.initial_cache(2, max_length=4)
    first, caches, _ = decoder.step(target[:, :1], caches, projected, None, 0)  # == hidden[:, :1]
    ```
    """

    layer_class = TransformerDecoderLayer

    def build(self, inputs_shape, memory_shape=None):
        super().build(inputs_shape, memory_shape)

    def call(self, inputs, memory, mask=None, memory_mask=None, training=None):
        x = inputs
        for layer in self.transformer_layers:
            x = layer(x, memory, mask=mask, memory_mask=memory_mask, training=training)
        return self._normed(x)

    def project_memory(self, memory):
        """Every layer's cross-attention `(keys, values)`: once per sequence."""
        return [layer.project_memory(memory) for layer in self.transformer_layers]

    def initial_cache(self, batch, max_length):
        """Every layer's zero self-attention cache (see `TransformerDecoderLayer.initial_cache`)."""
        return [layer.initial_cache(batch, max_length) for layer in self.transformer_layers]

    def step(self, x, caches, projected_memory, memory_mask, time, training=False, return_weights=False):
        """Position `time` through every layer: `(y (N, 1, d), caches, the
        last layer's cross-attention weights (N, H, Ts) or None)`."""
        new_caches, weights = [], None
        for index, (layer, cache, projected) in enumerate(zip(self.transformer_layers, caches, projected_memory)):
            last = index == self.num_layers - 1
            x, cache, weights = layer.step(
                x, cache, projected, memory_mask, time, training=training, return_weights=return_weights and last
            )
            new_caches.append(cache)
        return self._normed(x), new_caches, weights
