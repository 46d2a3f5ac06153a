"""Additive (Bahdanau) attention."""

import math

import keras
from keras import ops

from keras_attention.layers import _checks
from keras_attention.layers._weights import WeightSettings
from keras_attention.layers.base import BaseAttention

__all__ = ["AdditiveAttention", "additive_score"]


def additive_score(projected_query, projected_key, vector, activation=ops.tanh):
    """`e[b, i, j] = vector . activation(pq[b, i] + pk[b, j])`.

    The score of both Bahdanau's additive and Luong's concat attention once
    the query and key have been projected to the same `units` space.
    """
    hidden = activation(
        ops.expand_dims(projected_query, 2) + ops.expand_dims(projected_key, 1)
    )  # (B, Tq, Tv, units)
    # Multiply-and-sum rather than a (B, Tq, Tv, u) x (u, 1) matmul: that
    # lowers to a tensordot whose dynamic reshapes XLA cannot compile inside
    # a decoder's loop gradient.
    return ops.sum(hidden * vector, axis=-1)


@keras.saving.register_keras_serializable(package="keras_attention")
class AdditiveAttention(WeightSettings, BaseAttention):
    """Additive attention (Bahdanau et al. 2014).

    Score, for a query `q` and each key `k_i`:

        e_i = w_v^T tanh(W_q q + W_k k_i [+ b])
        alpha = softmax(e) over valid positions,   c = sum_i alpha_i v_i

    With `normalize=True` the score vector is weight-normalised (Salimans &
    Kingma 2016, as TensorFlow Addons' `BahdanauAttention(normalize=True)`):
    `w_v` becomes `g * w_v / ||w_v||` with a learned scalar `g` (initialised to
    `sqrt(1 / units)`), and the bias `b` is always used.

    The query and key sizes may differ. The key projection `W_k k_i + b` is
    done once per sequence (`project_key`); a decoder reuses it at each step.

    Paper: Bahdanau, Cho & Bengio, "Neural Machine Translation by Jointly
    Learning to Align and Translate", arXiv:1409.0473.

    Weights (stored as Keras kernels, `(input, output)`, so `W_q = query_kernel^T`):
        query_kernel `(dq, units)`, key_kernel `(dk, units)`,
        score_vector `(units,)`, bias `(units,)` (with `use_bias` or
        `normalize`), scale `()` (with `normalize`).

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Tv, dv)`, key
    `(B, Tv, dk)` (default: value); output `(B, dv)` or `(B, Tq, dv)`. See
    `BaseAttention` for masks and the other call arguments.

    Args:
        units: size `u` of the hidden layer inside the score.
        use_bias: add the bias `b` inside the tanh.
        normalize: use the weight-normalised score vector (implies a bias).
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer: as in `keras.layers.Dense`.
        dropout, seed: dropout on the attention weights in training.

    Example:

    ```python
    layer = keras_attention.AdditiveAttention(units=16)
    decoder_state = np.random.rand(2, 8).astype("float32")      # (B, dq)
    encoder_states = np.random.rand(2, 5, 12).astype("float32")  # (B, Tv, dv)
    context, weights = layer(decoder_state, encoder_states,
                             return_attention_scores=True)
    # context: (2, 12), weights: (2, 5), each row of weights sums to 1
    ```
    """

    def __init__(
        self,
        units,
        use_bias=False,
        normalize=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        _checks.check_positive_int(self, "units", units)
        self.units = units
        self.use_bias = bool(use_bias)
        self.normalize = bool(normalize)
        self._set_weight_settings(
            kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer
        )

    def build_score(self, query_dim, key_dim):
        self.query_kernel = self._add_kernel("query_kernel", (query_dim, self.units))
        self.key_kernel = self._add_kernel("key_kernel", (key_dim, self.units))
        self.score_vector = self._add_kernel("score_vector", (self.units,))
        self.bias = None
        if self.use_bias or self.normalize:
            self.bias = self._add_bias("bias", (self.units,))
        self.scale = None
        if self.normalize:
            self.scale = self.add_weight(
                name="scale",
                shape=(),
                initializer=keras.initializers.Constant(math.sqrt(1.0 / self.units)),
            )

    def project_query(self, query):
        return ops.matmul(query, self.query_kernel)

    def project_key(self, key):
        projected = ops.matmul(key, self.key_kernel)
        # The bias sits with the keys: it is then added once per sequence
        # rather than once per decoder step.
        if self.bias is not None:
            projected = projected + self.bias
        return projected

    def score(self, projected_query, projected_key):
        vector = ops.convert_to_tensor(self.score_vector)
        if self.normalize:
            vector = self.scale * vector / ops.sqrt(ops.sum(ops.square(vector)))
        return additive_score(projected_query, projected_key, vector)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "use_bias": self.use_bias,
                "normalize": self.normalize,
                **self._weight_settings_config(),
            }
        )
        return config
