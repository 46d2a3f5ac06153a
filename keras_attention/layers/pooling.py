"""Attention pooling: a sequence to one vector with a learned context vector."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._weights import WeightSettings
from keras_attention.layers.base import BaseAttention
from keras_attention.layers.dot import dot_scores

__all__ = ["AttentionPooling"]


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionPooling(WeightSettings, BaseAttention):
    """Attention pooling with a learned context vector (Yang et al. 2016).

    For a sequence `h_1 .. h_T`:

        u_i = tanh(W h_i + b)
        alpha_i = softmax_i(u_i^T u_ctx) over valid positions
        s = sum_i alpha_i h_i

    `u_ctx` is a learned vector: it is the query of an attention whose keys
    are the projected states `u_i` and whose values are the states `h_i`
    themselves. This is the word and sentence attention of a Hierarchical
    Attention Network, and the single-head case of Lin et al.'s structured
    self-attentive pooling.

    Padding gets exactly zero weight; a sequence with no valid position gives
    a zero vector and all-zero weights (finite gradients). The output is one
    vector per sequence, so it carries no Keras mask.

    Paper: Yang, Yang, Dyer, He, Smola & Hovy 2016, "Hierarchical Attention
    Networks for Document Classification", NAACL-HLT (no arXiv id); Lin et
    al. 2017, "A Structured Self-attentive Sentence Embedding",
    arXiv:1703.03130.

    Weights (stored as Keras kernels, `(input, output)`, so `W = kernel^T`):
        kernel `(d, units)`, bias `(units,)` (with `use_bias`),
        context_vector `(units,)`.

    Shapes: inputs `(B, T, d)`, mask `(B, T)` (taken from the input's Keras
    mask when not given); output `(B, d)`, weights `(B, T)`.

    Args:
        units: size of `u_i` and of the context vector.
        use_bias: add `b` inside the tanh.
        kernel_initializer: for `kernel` and `context_vector`, as in
            `keras.layers.Dense`.
        kernel_regularizer: for `kernel` and `context_vector`, as in
            `keras.layers.Dense`.
        bias_initializer: for `bias`.
        bias_regularizer: for `bias`.
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.

    Call arguments:
        inputs: `(B, T, d)`.
        mask: optional boolean `(B, T)`; false marks padding.
        return_attention_scores: if true, also return the weights `(B, T)`.
        training: enables dropout on the weights.

    Example:

    ```python
    layer = keras_attention.AttentionPooling(units=16)
    states = np.random.rand(2, 5, 12).astype("float32")       # (B, T, d)
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)  # (B, T)
    pooled, weights = layer(states, mask=mask, return_attention_scores=True)
    # pooled: (2, 12); weights: (2, 5), rows sum to 1, weights[0, 3:] == 0
    ```
    """

    def __init__(
        self,
        units,
        use_bias=True,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.units = _checks.check_positive_int(self, "units", units)
        self.use_bias = bool(use_bias)
        self._set_weight_settings(kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer)

    # ----------------------------------------------------------------- hooks

    def build_score(self, query_dim, key_dim):
        # The query is learned, so only the key size `d` matters.
        self.kernel = self._add_kernel("kernel", (key_dim, self.units))
        self.bias = None
        if self.use_bias:
            self.bias = self._add_bias("bias", (self.units,))
        self.context_vector = self._add_kernel("context_vector", (self.units,))

    def project_query(self, query):
        """The context vector `u_ctx` in place of each query: `(B, Tq, units)`."""
        length = query.shape[1] if query.shape[1] is not None else ops.shape(query)[1]
        return self._learned_query(ops.shape(query)[0], length)

    def _learned_query(self, batch, length):
        vector = ops.cast(self.context_vector, self.compute_dtype)
        return ops.broadcast_to(ops.reshape(vector, (1, 1, self.units)), (batch, length, self.units))

    def project_key(self, key):
        projected = ops.matmul(key, self.kernel)
        if self.bias is not None:
            projected = projected + self.bias
        return ops.tanh(projected)

    def score(self, projected_query, projected_key):
        return dot_scores(projected_query, projected_key)

    # ------------------------------------------------------------------ core

    def _check_inputs(self, shape):
        shape = _checks.static_shape(shape)
        if len(shape) != 3:
            raise ValueError(f"{type(self).__name__}: `inputs` must have rank 3 (batch, T, d); got shape {shape}.")
        return shape

    def build(self, inputs_shape):
        dim = _checks.check_known_last_dim(self, "inputs", self._check_inputs(inputs_shape))
        self.build_score(None, dim)
        self.built = True

    def call(self, inputs, mask=None, return_attention_scores=False, training=None):
        batch, length, _ = self._check_inputs(inputs.shape)
        if mask is not None:
            _checks.check_mask_shape(self, "mask", mask, (batch, length), "(batch, T)")
            mask = ops.expand_dims(ops.cast(mask, "bool"), 1)  # one query: (B, 1, T)
        inputs = ops.cast(inputs, self.compute_dtype)
        query = self._learned_query(ops.shape(inputs)[0], 1)  # one query per example
        pooled, weights = self.attend(query, self.project_key(inputs), inputs, mask, training)
        pooled, weights = ops.squeeze(pooled, 1), ops.squeeze(weights, 1)
        if return_attention_scores:
            return pooled, weights
        return pooled

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_shape(self, inputs_shape):
        shape = self._check_inputs(inputs_shape)
        return (shape[0], shape[2])

    def compute_output_spec(self, inputs, mask=None, return_attention_scores=False, training=None):
        batch, length, dim = self._check_inputs(inputs.shape)
        return self.output_spec((batch, dim), (batch, length) if return_attention_scores else None)

    def compute_mask(self, inputs, previous_mask=None):
        # The time axis is pooled away: nothing is left to mask.
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "use_bias": self.use_bias,
                **self._weight_settings_config(),
            }
        )
        return config
