"""Concat attention: the linear concat score and Luong's concat score."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._precision import to_score_dtype
from keras_attention._weights import WeightSettings
from keras_attention.layers.additive import additive_score, check_chunk_size
from keras_attention.layers.base import BaseAttention

__all__ = ["ConcatAttention"]


@keras.saving.register_keras_serializable(package="keras_attention")
class ConcatAttention(WeightSettings, BaseAttention):
    """Concat attention: a score computed from the concatenation `[k_i ; q]`.

    Two forms:

        units=None:  e_i = w^T [k_i ; q]                    w: (dk + dq,)
        units=u:     e_i = v^T act(W [k_i ; q])              W: (u, dk + dq), v: (u,)
        alpha = softmax(e) over valid positions,   c = sum_i alpha_i v_i

    The linear form (one weight vector over the concatenation, no hidden
    layer) is how attention tutorials often write the "concat" score. Its
    query part `w_q^T q` is the same for every position, so it cancels in the
    softmax: the weights depend on the keys alone, and the layer acts as
    attention pooling with a learned vector. It is offered for completeness
    and as a baseline; use `units` for a query-dependent score.

    With `units` it is Luong's concat score (with `act=tanh`, the same family
    as Bahdanau's additive score, with one concatenated matrix `W`). `W` is
    applied to the key and query halves separately, so the keys' half is
    computed once per sequence and `[k_i ; q]` is never materialised.

    Paper: Luong, Pham & Manning, "Effective Approaches to Attention-based
    Neural Machine Translation", arXiv:1508.04025.

    Weights (Keras `(input, output)` layout, rows ordered `[key ; query]`):
        units=None: score_vector `(dk + dq,)`;
        units=u: kernel `(dk + dq, u)` = `W^T`, score_vector `(u,)` = `v`.

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Tv, dv)`, key
    `(B, Tv, dk)` (default: value); output `(B, dv)` or `(B, Tq, dv)`. See
    `BaseAttention` for masks and the other call arguments.

    Args:
        units: None for the linear form, else the hidden size `u`.
        activation: `act` (used only with `units`), any Keras activation.
        kernel_initializer: for `W`, `w` and `v`.
        kernel_regularizer: for `W`, `w` and `v`.
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.
        chunk_size: with `units`, queries per block of the score's
            `(B, Tq, Tv, units)` intermediate: "auto" (default) keeps a block
            under the backend's budget (64 MiB on TensorFlow and JAX, 1 GiB
            on PyTorch: `AdditiveAttention` has the measurements), an
            integer fixes the chunk, None never chunks. Same result either way.

    Example:

    ```python
    layer = keras_attention.ConcatAttention(units=32)
    decoder_states = np.random.rand(2, 4, 8).astype("float32")
    encoder_states = np.random.rand(2, 7, 10).astype("float32")
    context = layer(decoder_states, encoder_states)   # (2, 4, 10)
    ```
    """

    def __init__(
        self,
        units=None,
        activation="tanh",
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        dropout=0.0,
        seed=None,
        chunk_size="auto",
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.units = _checks.check_positive_int(self, "units", units, allow_none=True)
        self.chunk_size = check_chunk_size(self, chunk_size)
        self.activation = keras.activations.get(activation)
        self._set_weight_settings(kernel_initializer, kernel_regularizer)

    def build_score(self, query_dim, key_dim):
        self.key_dim = key_dim
        if self.units is None:
            self.kernel = None
            self.score_vector = self._add_kernel("score_vector", (key_dim + query_dim,))
        else:
            self.kernel = self._add_kernel("kernel", (key_dim + query_dim, self.units))
            self.score_vector = self._add_kernel("score_vector", (self.units,))

    def _halves(self):
        """The rows of `W^T` (or `w`) that multiply the key and the query."""
        weights = self.score_vector if self.kernel is None else self.kernel
        weights = ops.convert_to_tensor(weights)
        if self.kernel is None:
            weights = ops.expand_dims(weights, -1)
        return weights[: self.key_dim], weights[self.key_dim :]

    def project_query(self, query):
        return self._project(query, self._halves()[1])

    def project_key(self, key):
        return self._project(key, self._halves()[0])

    def _project(self, x, weights):
        if self.kernel is None:
            # The linear form's projections are its scores: float32 under
            # float16, where a sum of dk products of inputs of a few hundred
            # overflows.
            x, weights = to_score_dtype(x, weights)
        return ops.matmul(x, weights)

    def score(self, projected_query, projected_key):
        if self.kernel is None:
            # (B, Tq, 1) + (B, 1, Tv): the linear form has no hidden layer.
            # (Squeeze/expand rather than a transpose: tf2onnx turns that
            # transpose of a size-1 axis into a reshape with wrong dims.)
            return projected_query + ops.expand_dims(ops.squeeze(projected_key, -1), 1)
        return additive_score(
            projected_query,
            projected_key,
            self.score_vector,
            self.activation,
            chunk_size=self.chunk_size,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "activation": keras.activations.serialize(self.activation),
                "chunk_size": self.chunk_size,
                **self._weight_settings_config(),
            }
        )
        return config
