"""Dot-product attention: Luong's dot score and Vaswani's scaled dot score."""

import math
import warnings

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._precision import to_score_dtype
from keras_attention.layers.base import BaseAttention

__all__ = ["DotAttention", "ScaledDotAttention", "dot_scores", "scale_config", "use_scale_argument"]


def dot_scores(projected_query, projected_key):
    """`e[b, i, j] = q[b, i] . k[b, j]` for `(B, Tq, d)` and `(B, Tv, d)`.

    In float32 for float16 inputs (see `score_dtype`): the product overflows
    float16 for inputs of a few hundred.
    """
    projected_query, projected_key = to_score_dtype(projected_query, projected_key)
    return ops.matmul(projected_query, ops.transpose(projected_key, (0, 2, 1)))


def use_scale_argument(owner, use_scale, scale):
    """`use_scale` as a bool, taken from the deprecated `scale` when only that is given.

    `use_scale` is what `keras.layers.Attention` calls the learned scalar;
    `scale` (this library's name before) still works, with a warning. None
    for `use_scale` means not given (False).
    """
    name = _checks.owner_name(owner)
    if scale is not None:
        if use_scale is not None:
            raise ValueError(
                f"{name}: `scale` is the deprecated name of `use_scale`; give `use_scale` only; "
                f"got use_scale={use_scale!r} and scale={scale!r}."
            )
        warnings.warn(
            f"{name}: `scale` is deprecated; use `use_scale={scale!r}` (as keras.layers.Attention names it).",
            DeprecationWarning,
            stacklevel=3,
        )
        return _checks.check_bool(owner, "scale", scale)
    return _checks.check_bool(owner, "use_scale", False if use_scale is None else use_scale)


def scale_config(config):
    """`config` with a `scale` entry (configs saved before `use_scale`) renamed, silently."""
    if "scale" in config and "use_scale" not in config:
        config = dict(config)
        config["use_scale"] = config.pop("scale")
    return config


def _check_equal_dims(layer, query_dim, key_dim):
    if query_dim != key_dim:
        raise ValueError(
            f"{type(layer).__name__}: the dot-product score needs the query and "
            f"key sizes to match; got query last dimension dq={query_dim} and key "
            f"last dimension dk={key_dim}. Use GeneralAttention or "
            "AdditiveAttention when they differ."
        )


@keras.saving.register_keras_serializable(package="keras_attention")
class DotAttention(BaseAttention):
    """Dot-product attention (Luong et al. 2015, "dot").

    Score, for a query `q` and each key `k_i` (`dq` must equal `dk`):

        e_i = q^T k_i            (use_scale=False)
        e_i = g * q^T k_i        (use_scale=True, learned scalar g initialised to 1)
        alpha = softmax(e) over valid positions,   c = sum_i alpha_i v_i

    `use_scale=True` matches `keras.layers.Attention(use_scale=True)` and
    TensorFlow Addons' `LuongAttention(scale=True)`.

    Paper: Luong, Pham & Manning, "Effective Approaches to Attention-based
    Neural Machine Translation", arXiv:1508.04025.

    Weights: scale `()` (only with `use_scale=True`).

    Shapes: query `(B, d)` or `(B, Tq, d)`, value `(B, Tv, dv)`, key
    `(B, Tv, d)` (default: value); output `(B, dv)` or `(B, Tq, dv)`. See
    `BaseAttention` for masks and the other call arguments.

    Args:
        use_scale: learn the scalar `g` (default False).
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.
        scale: deprecated name of `use_scale` (a `DeprecationWarning`);
            configs saved with it load unchanged.

    Example:

    ```python
    layer = keras_attention.DotAttention()
    query = np.random.rand(2, 3, 8).astype("float32")    # (B, Tq, d)
    memory = np.random.rand(2, 5, 8).astype("float32")   # (B, Tv, d)
    context = layer(query, memory)                       # (2, 3, 8)
    ```
    """

    def __init__(self, use_scale=None, dropout=0.0, seed=None, scale=None, **kwargs):
        use_scale = use_scale_argument(self, use_scale, scale)
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.use_scale = use_scale

    def build_score(self, query_dim, key_dim):
        _check_equal_dims(self, query_dim, key_dim)
        self.scale = None
        if self.use_scale:
            self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def score(self, projected_query, projected_key):
        scores = dot_scores(projected_query, projected_key)
        if self.scale is not None:
            scores = scores * self.scale
        return scores

    def get_config(self):
        config = super().get_config()
        config["use_scale"] = self.use_scale
        return config

    @classmethod
    def from_config(cls, config):
        return super().from_config(scale_config(config))


@keras.saving.register_keras_serializable(package="keras_attention")
class ScaledDotAttention(BaseAttention):
    """Scaled dot-product attention (Vaswani et al. 2017).

    Score, for a query `q` and each key `k_i` of size `d` (`dq == dk == d`):

        e_i = q^T k_i / sqrt(d)
        alpha = softmax(e) over valid positions,   c = sum_i alpha_i v_i

    Dividing by `sqrt(d)` keeps the scores at unit variance for unit-variance
    inputs, so the softmax does not saturate and its gradient stays useful.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Weights: none.

    Shapes: query `(B, d)` or `(B, Tq, d)`, value `(B, Tv, dv)`, key
    `(B, Tv, d)` (default: value); output `(B, dv)` or `(B, Tq, dv)`. See
    `BaseAttention` for masks and the other call arguments.

    Args:
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.

    Example:

    ```python
    layer = keras_attention.ScaledDotAttention()
    x = np.random.rand(2, 6, 16).astype("float32")
    context = layer(x, x, causal=True)   # causal self-attention, (2, 6, 16)
    ```
    """

    def build_score(self, query_dim, key_dim):
        _check_equal_dims(self, query_dim, key_dim)
        self.inverse_sqrt_dim = 1.0 / math.sqrt(key_dim)

    def project_query(self, query):
        # Scaling the (B, Tq, d) query is cheaper than the (B, Tq, Tv) scores.
        return query * ops.cast(self.inverse_sqrt_dim, query.dtype)

    def score(self, projected_query, projected_key):
        return dot_scores(projected_query, projected_key)
