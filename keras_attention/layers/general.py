"""General (bilinear) attention, Luong's "general" score."""

import keras
from keras import ops

from keras_attention._precision import to_score_dtype
from keras_attention._weights import WeightSettings
from keras_attention.layers.base import BaseAttention
from keras_attention.layers.dot import dot_scores

__all__ = ["GeneralAttention"]


@keras.saving.register_keras_serializable(package="keras_attention")
class GeneralAttention(WeightSettings, BaseAttention):
    """General / bilinear attention (Luong et al. 2015, "general").

    Score, for a query `q` (size `dq`) and each key `k_i` (size `dk`):

        e_i = k_i^T W q            W: (dk, dq)
        alpha = softmax(e) over valid positions,   c = sum_i alpha_i v_i

    A generalised dot product: with `W = U^T V` it is `(U k_i)^T (V q)`, a dot
    product after projecting both sides, and it is asymmetric in `q` and `k`.
    `dq` and `dk` may differ. The keys are projected once per sequence
    (`k_i^T W`, as TensorFlow Addons' `LuongAttention` memory layer does), so a
    `LuongAttention` memory kernel ports directly to `bilinear_kernel`.

    Paper: Luong, Pham & Manning, "Effective Approaches to Attention-based
    Neural Machine Translation", arXiv:1508.04025.

    Weights: bilinear_kernel `(dk, dq)` = `W`.

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Tv, dv)`, key
    `(B, Tv, dk)` (default: value); output `(B, dv)` or `(B, Tq, dv)`. See
    `BaseAttention` for masks and the other call arguments.

    Args:
        kernel_initializer: for `W`.
        kernel_regularizer: for `W`.
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.

    Example:

    ```python
    layer = keras_attention.GeneralAttention()
    decoder_state = np.random.rand(2, 8).astype("float32")    # dq = 8
    encoder_states = np.random.rand(2, 5, 6).astype("float32")  # dk = dv = 6
    context = layer(decoder_state, encoder_states)             # (2, 6)
    ```
    """

    def __init__(
        self,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        dropout=0.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self._set_weight_settings(kernel_initializer, kernel_regularizer)

    def build_score(self, query_dim, key_dim):
        self.bilinear_kernel = self._add_kernel("bilinear_kernel", (key_dim, query_dim))

    def project_key(self, key):
        # In float32 under float16 (as the score): k^T W is a sum of dq products.
        return ops.matmul(*to_score_dtype(key, self.bilinear_kernel))  # (B, Tv, dq)

    def score(self, projected_query, projected_key):
        return dot_scores(projected_query, projected_key)

    def get_config(self):
        config = super().get_config()
        config.update(self._weight_settings_config())
        return config
