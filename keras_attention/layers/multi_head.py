"""Multi-head attention (Vaswani et al. 2017)."""

import math

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._precision import to_score_dtype
from keras_attention._reductions import any_along
from keras_attention._weights import WeightSettings
from keras_attention.layers.attention_layer import AttentionLayer
from keras_attention.layers.base import combine_masks, prepare_call
from keras_attention.ops import masked_softmax

__all__ = ["MultiHeadAttention"]


@keras.saving.register_keras_serializable(package="keras_attention")
class MultiHeadAttention(WeightSettings, AttentionLayer):
    """Multi-head scaled dot-product attention (Vaswani et al. 2017).

    Each of the `H` heads attends with its own projections of the query, key
    and value; the heads are concatenated and projected:

        head_h = Attention(Q W_q^h, K W_k^h, V W_v^h)
        Attention(Q, K, V) = softmax(Q K^T / sqrt(key_dim)) V   (valid positions only)
        MHA(Q, K, V) = concat(head_1, ..., head_H) W_o

    (each projection adds its bias with `use_bias`). The weights have the
    layout of `keras.layers.MultiHeadAttention`, in the same order, so
    `layer.set_weights(keras_mha.get_weights())` copies a Keras layer of the
    same configuration. (The key bias adds `q . b_k`, the same for every key
    of a query, so it cancels in the softmax and never trains; it is kept
    for that compatibility.)

    Masks follow the library's contract: padding gets exactly zero weight in
    every head, and a query row with no valid position (a masked query, or
    every key masked) gets zero weights and an output of exactly zero (the
    output bias included), with finite gradients. Unlike Keras's layer, an
    explicit `query_mask` is honoured.

    When no weights are returned, dropout is inactive and `value_dim`
    equals `key_dim`, the heads are computed by
    `keras.ops.dot_product_attention` (flash attention where the backend and
    device allow; the TensorFlow backend has none, but the op compiles with
    XLA and exports to ONNX with boolean masks); otherwise by an explicit
    masked softmax (the fused op needs one head size for queries, keys and
    values on JAX). Both give the same output. Under a float16
    policy the scores and softmax run in float32 on the explicit path (a
    float16 score overflows for inputs of a few hundred); the output stays
    float16.

    A decoder projects its memory once per sequence and only the query at
    each step:

        projected_key = layer.project_key(memory)       # once per sequence
        projected_value = layer.project_value(memory)   # once per sequence
        output, _ = layer.attend(layer.project_query(query), projected_key,
                                 projected_value, mask)

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Weights (`d*` are the input sizes, `out` = `output_dim` or `dq`):
        query_kernel `(dq, H, key_dim)`, key_kernel `(dk, H, key_dim)`,
        value_kernel `(dv, H, value_dim)`, output_kernel `(H, value_dim, out)`;
        with `use_bias`: query_bias and key_bias `(H, key_dim)`, value_bias
        `(H, value_dim)`, output_bias `(out,)`.

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Tv, dv)`, key
    `(B, Tv, dk)` (default: value); output `(B, out)` or `(B, Tq, out)`;
    weights (with `return_attention_scores=True`) `(B, H, Tv)` or
    `(B, H, Tq, Tv)`. Masks and the other call arguments are those of
    `BaseAttention`.

    Args:
        num_heads: number of heads `H`.
        key_dim: size of each head's query and key projections.
        value_dim: size of each head's value projection; defaults to `key_dim`.
        dropout: fraction of attention weights to drop in training.
        use_bias: add biases to the four projections.
        output_dim: size of the output; defaults to the query size `dq`.
        kernel_initializer: as in `keras.layers.Dense`.
        bias_initializer: as in `keras.layers.Dense`.
        kernel_regularizer: as in `keras.layers.Dense`.
        bias_regularizer: as in `keras.layers.Dense`.
        seed: seed for the dropout.

    Example:

    ```python
    layer = keras_attention.MultiHeadAttention(num_heads=4, key_dim=8)
    x = np.random.rand(2, 6, 16).astype("float32")         # (B, T, d)
    padding = np.array([[True] * 6, [True] * 4 + [False] * 2])
    output, weights = layer(x, x, value_mask=padding, causal=True,
                            return_attention_scores=True)
    # output: (2, 6, 16); weights: (2, 4, 6, 6), zero on padding
    ```
    """

    def __init__(
        self,
        num_heads,
        key_dim,
        value_dim=None,
        dropout=0.0,
        use_bias=True,
        output_dim=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.num_heads = _checks.check_positive_int(self, "num_heads", num_heads)
        self.key_dim = _checks.check_positive_int(self, "key_dim", key_dim)
        self.value_dim = _checks.check_positive_int(self, "value_dim", value_dim, allow_none=True)
        self.output_dim = _checks.check_positive_int(self, "output_dim", output_dim, allow_none=True)
        self.use_bias = bool(use_bias)
        self._set_weight_settings(kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer)

    @property
    def _head_value_dim(self):
        return self.key_dim if self.value_dim is None else self.value_dim

    # ---------------------------------------------------------------- weights

    def _add_bias(self, name, shape):
        # `use_bias` covers every projection, so each bias slot may stay empty.
        if not self.use_bias:
            return None
        return super()._add_bias(name, shape)

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _checks.check_input_shapes(self, query_shape, value_shape, key_shape)
        dims = {
            argument: _checks.check_known_last_dim(self, argument, shape)
            for argument, shape in (("query", query_shape), ("key", key_shape), ("value", value_shape))
        }
        heads, value_dim = self.num_heads, self._head_value_dim
        out = self.output_dim or dims["query"]
        # Creation order = Keras MHA's get_weights() order, so weights copy over.
        self.query_kernel = self._add_kernel("query_kernel", (dims["query"], heads, self.key_dim))
        self.query_bias = self._add_bias("query_bias", (heads, self.key_dim))
        self.key_kernel = self._add_kernel("key_kernel", (dims["key"], heads, self.key_dim))
        self.key_bias = self._add_bias("key_bias", (heads, self.key_dim))
        self.value_kernel = self._add_kernel("value_kernel", (dims["value"], heads, value_dim))
        self.value_bias = self._add_bias("value_bias", (heads, value_dim))
        self.output_kernel = self._add_kernel("output_kernel", (heads, value_dim, out))
        self.output_bias = self._add_bias("output_bias", (out,))
        self.built = True

    # ------------------------------------------------------------ projections

    @staticmethod
    def _contract(x, kernel, axes):
        """`x (B, T, *kernel.shape[:axes])` times `kernel` -> `(B, T, *kernel.shape[axes:])`.

        One matrix product of two matrices, not `ops.einsum`: Keras's
        TensorFlow einsum reshapes with -1 for these subscripts, which turns
        an empty batch into a batch of one; and a three-dimensional `x` goes
        through `tensordot` there, a dozen graph ops per projection where a
        matrix product is one (a decoder's graph traces, converts and runs
        each step's projections).
        """
        inner, outer = kernel.shape[:axes], kernel.shape[axes:]
        shape = ops.shape(x)
        batch, steps = shape[0], shape[1]
        flat = ops.matmul(
            ops.reshape(x, (batch * steps, math.prod(inner))),
            ops.reshape(kernel, (math.prod(inner), math.prod(outer))),
        )
        return ops.reshape(flat, (batch, steps, *outer))

    def _project(self, x, kernel, bias):
        projected = self._contract(x, kernel, 1)
        return projected if bias is None else projected + bias

    def project_query(self, query):
        """`(B, Tq, dq)` -> `(B, Tq, H, key_dim)`, already divided by `sqrt(key_dim)`."""
        projected = self._project(query, self.query_kernel, self.query_bias)
        # Scaling before the product keeps float16 scores further from overflow.
        return projected * ops.cast(1.0 / math.sqrt(self.key_dim), projected.dtype)

    def project_key(self, key):
        """`(B, Tv, dk)` -> `(B, Tv, H, key_dim)`. Once per sequence in a decoder."""
        return self._project(key, self.key_kernel, self.key_bias)

    def project_value(self, value):
        """`(B, Tv, dv)` -> `(B, Tv, H, value_dim)`. Once per sequence in a decoder."""
        return self._project(value, self.value_kernel, self.value_bias)

    # ------------------------------------------------------------------- core

    def attend(
        self,
        projected_query,
        projected_key,
        projected_value,
        mask=None,
        causal=False,
        training=None,
        return_attention_scores=False,
    ):
        """Output from projected rank-4 queries, keys and values.

        `mask` is boolean, broadcastable to `(B, Tq, Tv)`; `causal` adds the
        causal constraint. Returns `(output (B, Tq, out), weights)` with
        weights `(B, H, Tq, Tv)` when `return_attention_scores` is true or
        dropout is active, else None.
        """
        dropping = bool(training) and self.dropout > 0
        # The fused op computes its scores in the inputs' dtype: in float16
        # they overflow for inputs of a few hundred (as in Keras's own
        # layer), so float16 takes the explicit path, scored in float32.
        float16 = keras.backend.standardize_dtype(projected_query.dtype) == "float16"
        # The fused op takes one head size for queries, keys and values on
        # JAX (`jax.nn.dot_product_attention` refuses a value head of its
        # own size); torch's and TensorFlow's would accept one, but every
        # backend takes the same path, so the numbers do not depend on it.
        head_sizes = {projected_query.shape[-1], projected_key.shape[-1], projected_value.shape[-1]}
        same_head_size = len(head_sizes) == 1 and all(_checks.is_int(size) for size in head_sizes)
        # TensorFlow's "fused" op is two einsums, no kernel: the explicit
        # path computes the same with batched matmuls. tf2onnx rewrites an
        # einsum into Reshapes and MatMuls that onnxruntime refuses when
        # queries and keys both have 0 steps (self-attention over an empty
        # source); a batched matmul stays one MatMul.
        fused_kernel = keras.backend.backend() != "tensorflow"
        explicit = return_attention_scores or dropping or float16 or not same_head_size or not fused_kernel
        full_mask = None
        if explicit or mask is not None:
            full_mask = combine_masks(projected_query, projected_key, None, None, mask, causal)
        if explicit:
            query_heads, key_heads = to_score_dtype(projected_query, projected_key)
            # (B, H, Tq, k) x (B, H, k, Tv): batched matmuls, no Reshape in the exported graph.
            scores = ops.matmul(ops.transpose(query_heads, (0, 2, 1, 3)), ops.transpose(key_heads, (0, 2, 3, 1)))
            weights = masked_softmax(scores, None if full_mask is None else ops.expand_dims(full_mask, 1))
            weights = self.drop_weights(weights, training)
            weights = ops.cast(weights, projected_value.dtype)
            heads = ops.transpose(ops.matmul(weights, ops.transpose(projected_value, (0, 2, 1, 3))), (0, 2, 1, 3))
            if not (return_attention_scores or dropping):
                weights = None
        else:
            weights = None
            heads = ops.dot_product_attention(
                projected_query,
                projected_key,
                projected_value,
                mask=None if mask is None else ops.expand_dims(ops.cast(mask, "bool"), 1),
                scale=1.0,  # project_query has scaled already
                is_causal=causal,
            )
            # The op spreads a row with no valid position uniformly; the row
            # is zeroed below.
        return self._output(heads, full_mask if mask is not None else None), weights

    def attend_heads(
        self, projected_query, key_heads, value_heads, mask=None, training=None, return_attention_scores=False
    ):
        """`attend` for keys and values laid out by head, `(B, H, Tv, k)`.

        A decoder step keeps its cache and projected memory in this layout,
        so each step multiplies them as they are: `attend` takes `(B, Tv, H,
        k)` and moves every key and value to this layout at every call,
        which, over a beam search's caches, was the largest part of an
        exported Transformer step (onnxruntime: 1.4 of 4.3 s for 256 words
        at beam 5). `projected_query` is `(B, Tq, H, k)`, `mask` boolean
        broadcastable to `(B, Tq, Tv)`; returns what `attend` returns.
        """
        dropping = bool(training) and self.dropout > 0
        query_heads, key_heads = to_score_dtype(ops.transpose(projected_query, (0, 2, 1, 3)), key_heads)
        # Only the last two axes swap: XLA contracts them in place, onnxruntime fuses it into its MatMul.
        scores = ops.matmul(query_heads, ops.swapaxes(key_heads, -1, -2))
        full_mask = None if mask is None else ops.cast(mask, "bool")
        weights = masked_softmax(scores, None if full_mask is None else ops.expand_dims(full_mask, 1))
        weights = self.drop_weights(weights, training)
        heads = ops.matmul(ops.cast(weights, value_heads.dtype), value_heads)
        output = self._output(ops.transpose(heads, (0, 2, 1, 3)), full_mask)
        return output, weights if return_attention_scores or dropping else None

    def _output(self, heads, full_mask):
        """`(B, Tq, H, v)` heads -> `(B, Tq, out)`, zero where `full_mask` leaves a row no position."""
        output = self._contract(heads, self.output_kernel, 2)
        if self.output_bias is not None:
            output = output + self.output_bias
        # A row with no valid position outputs zero, not the output bias: it
        # is padding, and must not leak into pooling or a residual sum. With
        # the causal mask alone every row sees position 0, so none is empty.
        # A select, not a product: the fused op's result for such a row is
        # not guaranteed finite (onnxruntime, over an empty memory), and
        # NaN * 0 is NaN.
        if full_mask is not None:
            has_valid = any_along(full_mask, axis=-1, keepdims=True)
            output = ops.where(has_valid, output, ops.zeros_like(output))
        return output

    def call(
        self,
        query,
        value,
        key=None,
        query_mask=None,
        value_mask=None,
        attention_mask=None,
        causal=False,
        return_attention_scores=False,
        training=None,
    ):
        # The causal part goes to `attend` separately so that the fused op can
        # use its own causal kernel rather than a materialised (Tq, Tv) mask.
        query, value, key, mask, single_query = prepare_call(
            self,
            query,
            value,
            key,
            query_mask,
            value_mask,
            attention_mask,
            causal,
            causal_in_mask=False,
        )
        output, weights = self.attend(
            self.project_query(query),
            self.project_key(key),
            self.project_value(value),
            mask,
            causal=causal,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        if single_query:
            output = ops.squeeze(output, 1)
        if not return_attention_scores:
            return output
        if single_query:
            weights = ops.squeeze(weights, 2)
        return output, weights

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return (*query_shape[:-1], self.output_dim or query_shape[-1])

    def weights_shape(self, query_shape, value_shape):
        """`(B, H, Tq, Tv)`, or `(B, H, Tv)` for one query."""
        return (query_shape[0], self.num_heads, *query_shape[1:-1], value_shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "key_dim": self.key_dim,
                "value_dim": self.value_dim,
                "use_bias": self.use_bias,
                "output_dim": self.output_dim,
                **self._weight_settings_config(),
            }
        )
        return config
