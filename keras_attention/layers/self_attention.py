"""Self-attention: queries, keys and values all projected from one sequence."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._precision import softmax_dtype
from keras_attention._reductions import any_along
from keras_attention._weights import WeightSettings
from keras_attention.layers.additive import AdditiveAttention
from keras_attention.layers.attention_layer import AttentionLayer
from keras_attention.layers.base import BaseAttention, combine_masks
from keras_attention.layers.dot import DotAttention, ScaledDotAttention
from keras_attention.layers.general import GeneralAttention
from keras_attention.layers.hard import HardAttention
from keras_attention.ops import masked_softmax

__all__ = ["SelfAttention"]

_SCORE_NAMES = ("scaled_dot", "dot", "additive", "general")


@keras.saving.register_keras_serializable(package="keras_attention")
class SelfAttention(WeightSettings, AttentionLayer):
    """Self-attention (Vaswani et al. 2017): one sequence attends to itself.

    For inputs `X` `(T, d)` (per example), with `u = units`:

        Q = X W_q [+ b_q],   K = X W_k [+ b_k],   V = X W_v [+ b_v]    W_*: (d, u)
        A = softmax(score(Q, K)) over the allowed positions of each row
        output = A V                                                   (T, u)

    The default score is the scaled dot product `Q K^T / sqrt(u)`; any score
    layer of this library can be used instead (it is kept as the inner
    sub-layer `score_layer`, built for query and key size `u`).

    Which positions `j` row `i` may attend to (all conditions are ANDed with
    the padding mask and `attention_mask`):

        causal=True:             j <= i
        window=w:                -floor(w / 2) <= j - i <= floor((w - 1) / 2)
                                 odd w: |i - j| <= (w - 1) / 2;
                                 even w: w/2 to the left, w/2 - 1 to the right
        causal=True, window=w:   i - w < j <= i   (the last w positions up to i)

    Each row therefore sees at most `w` positions (exactly `w` away from the
    sequence ends).

    Regulariser (Lin et al. 2017): with `regularization_weight = lambda > 0`,
    the layer adds the loss

        lambda * (1 / B) * sum_b ||A_b A_b^T - I_b||_F^2

    a mean over the `B` examples of the batch. `A_b` are the weights before
    dropout. `I_b` is the identity restricted to rows that have at least one
    allowed position: padded (or fully masked) rows of `A_b` are zero and get
    a zero diagonal, so padded rows and columns contribute nothing, and a fully
    padded example contributes 0 (it still counts in `B`).

    Padding: the mask `(B, T)` (the inputs' Keras mask by default) masks both
    the keys (zero weight) and the queries (zero weights and zero output), and
    is passed on to the output. The softmax runs in float32.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762;
    the regulariser: Lin et al., "A Structured Self-attentive Sentence
    Embedding", arXiv:1703.03130.

    Weights (Keras `(input, output)` layout, so `X W_q = X @ query_kernel`):
        query_kernel, key_kernel, value_kernel `(d, u)`; query_bias,
        key_bias, value_bias `(u,)` (with `use_bias`); then those of
        `score_layer`.

    Shapes: inputs `(B, T, d)`; mask `(B, T)`; attention_mask `(B, T, T)`;
    output `(B, T, units)`; weights `(B, T, T)`.

    Args:
        units: size `u` of the queries, keys and values (and of the output).
        score: an unbuilt score layer of this library with no dropout of its
            own (`AdditiveAttention(units=8)`, `DotAttention(use_scale=True)`,
            ...), or one of the names "scaled_dot", "dot", "general" and
            "additive" (an `AdditiveAttention` with `units` hidden units). It
            takes this layer's dtype policy; named scores take its
            `kernel_initializer` and `kernel_regularizer`.
        causal: each position attends only to itself and the past.
        window: None (no limit) or a positive width `w`, as defined above.
        regularization_weight: `lambda >= 0`; 0 adds no loss.
        use_bias: add `b_q`, `b_k`, `b_v` to the projections.
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.
        kernel_initializer: as in `keras.layers.Dense`.
        bias_initializer: as in `keras.layers.Dense`.
        kernel_regularizer: as in `keras.layers.Dense`.
        bias_regularizer: as in `keras.layers.Dense`.

    Call arguments:
        inputs: `(B, T, d)`.
        mask: boolean `(B, T)`, true for real tokens; filled from the inputs'
            Keras mask when omitted.
        attention_mask: boolean `(B, T, T)`; false entries get zero weight.
        return_attention_scores: also return the weights `(B, T, T)` (after
            dropout, i.e. the weights actually applied).
        training: enables dropout.

    Example:

    ```python
    layer = keras_attention.SelfAttention(units=8, causal=True, window=3)
    x = np.random.rand(2, 6, 5).astype("float32")
    output, weights = layer(x, return_attention_scores=True)
    # output: (2, 6, 8); weights[b, i, j] > 0 only for i - 3 < j <= i
    ```
    """

    def __init__(
        self,
        units,
        score="scaled_dot",
        causal=False,
        window=None,
        regularization_weight=0.0,
        use_bias=False,
        dropout=0.0,
        seed=None,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.units = _checks.check_positive_int(self, "units", units)
        self.window = _checks.check_positive_int(self, "window", window, allow_none=True)
        self.regularization_weight = _checks.check_number(
            self, "regularization_weight", regularization_weight, minimum=0
        )
        self.causal = bool(causal)
        self.use_bias = bool(use_bias)
        self._set_weight_settings(kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer)
        self.score_layer = self._score_layer(score)

    def _score_layer(self, score):
        if isinstance(score, str):
            _checks.check_choice(self, "score", score, _SCORE_NAMES)
            kernel_settings = {
                "kernel_initializer": self.kernel_initializer,
                "kernel_regularizer": self.kernel_regularizer,
            }
            if score == "scaled_dot":
                return ScaledDotAttention(dtype=self.dtype_policy)
            if score == "dot":
                return DotAttention(dtype=self.dtype_policy)
            if score == "general":
                return GeneralAttention(dtype=self.dtype_policy, **kernel_settings)
            return AdditiveAttention(self.units, dtype=self.dtype_policy, **kernel_settings)
        score = _checks.resolve_layer(
            self,
            "score",
            score,
            # HardAttention's one-hot selection bypasses the softmax this layer owns.
            lambda layer: isinstance(layer, BaseAttention) and not isinstance(layer, HardAttention),
            f"a soft score layer of this library (e.g. AdditiveAttention(units=8)) or one of {list(_SCORE_NAMES)}",
        )
        if score.dropout > 0:
            # One owner for dropout, so the regulariser sees weights before it.
            raise ValueError(
                "SelfAttention: `score` must have dropout=0 (set `dropout` on "
                f"SelfAttention instead); got {score.name!r} with dropout={score.dropout}."
            )
        return self.adopt_score_layer(score, f"size units={self.units}")

    # ----------------------------------------------------------------- build

    def _check_inputs_shape(self, shape):
        shape = _checks.static_shape(shape)
        if len(shape) != 3:
            raise ValueError(f"SelfAttention: `inputs` must have rank 3 (batch, T, d); got shape {shape}.")
        return shape

    def build(self, input_shape):
        dim = _checks.check_known_last_dim(self, "inputs", self._check_inputs_shape(input_shape))
        for part in ("query", "key", "value"):
            setattr(self, f"{part}_kernel", self._add_kernel(f"{part}_kernel", (dim, self.units)))
            bias = None
            if self.use_bias:
                bias = self._add_bias(f"{part}_bias", (self.units,))
            setattr(self, f"{part}_bias", bias)
        self.score_layer.build_score(self.units, self.units)
        self.score_layer.built = True
        self.built = True

    # ------------------------------------------------------------------ call

    def _project(self, inputs, part):
        projected = ops.matmul(inputs, getattr(self, f"{part}_kernel"))
        bias = getattr(self, f"{part}_bias")
        if bias is not None:
            projected = projected + bias
        return projected

    def _window_mask(self, length):
        """`(1, T, T)` band of allowed offsets `j - i`, or None without a window."""
        if self.window is None:
            return None
        rows = ops.expand_dims(ops.arange(length), 1)
        cols = ops.expand_dims(ops.arange(length), 0)
        offset = cols - rows
        if self.causal:
            # The causal mask already removes j > i.
            band = ops.greater(offset, -self.window)
        else:
            band = ops.logical_and(
                ops.greater_equal(offset, -(self.window // 2)),
                ops.less_equal(offset, (self.window - 1) // 2),
            )
        return ops.expand_dims(band, 0)

    def _check_masks(self, inputs, mask, attention_mask):
        batch, length = _checks.static_shape(inputs.shape)[:2]
        if mask is not None:
            _checks.check_mask_shape(self, "mask", mask, (batch, length), "(batch, T)")
        if attention_mask is not None:
            _checks.check_mask_shape(self, "attention_mask", attention_mask, (batch, length, length), "(batch, T, T)")

    def _regularization(self, weights, mask):
        """`mean_b ||A_b A_b^T - I_b||_F^2`, with `I_b` zero on rows with no allowed position."""
        gram = ops.matmul(weights, ops.transpose(weights, (0, 2, 1)))
        positions = ops.arange(ops.shape(weights)[1])
        # Built like the causal mask, from aranges of a possibly dynamic length.
        identity = ops.cast(
            ops.equal(ops.expand_dims(positions, 1), ops.expand_dims(positions, 0)),
            weights.dtype,
        )
        identity = ops.expand_dims(identity, 0)
        if mask is not None:
            active = any_along(ops.broadcast_to(mask, ops.shape(weights)), axis=-1)
            identity = identity * ops.expand_dims(ops.cast(active, weights.dtype), -1)
        penalty = ops.sum(ops.square(gram - identity), axis=(1, 2))
        return self.regularization_weight * ops.mean(penalty)

    def call(
        self,
        inputs,
        mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        self._check_inputs_shape(inputs.shape)
        self._check_masks(inputs, mask, attention_mask)
        inputs = ops.cast(inputs, self.compute_dtype)
        query = self._project(inputs, "query")
        key = self._project(inputs, "key")
        value = self._project(inputs, "value")

        window = self._window_mask(ops.shape(inputs)[1])
        if window is not None and attention_mask is not None:
            window = ops.logical_and(ops.cast(attention_mask, "bool"), window)
        elif attention_mask is not None:
            window = attention_mask
        full_mask = combine_masks(query, key, mask, mask, window, self.causal)

        scores = self.score_layer.score(self.score_layer.project_query(query), self.score_layer.project_key(key))
        work_dtype = softmax_dtype(self.compute_dtype)
        weights = masked_softmax(ops.cast(scores, work_dtype), full_mask)
        if self.regularization_weight > 0:
            self.add_loss(self._regularization(weights, full_mask))
        weights = ops.cast(self.drop_weights(weights, training), self.compute_dtype)
        output = ops.matmul(weights, value)
        if return_attention_scores:
            return output, weights
        return output

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def compute_output_spec(
        self,
        inputs,
        mask=None,
        attention_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        shape = self._check_inputs_shape(inputs.shape)
        weights_shape = (shape[0], shape[1], shape[1]) if return_attention_scores else None
        return self.output_spec(self.compute_output_shape(shape), weights_shape)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "score": keras.saving.serialize_keras_object(self.score_layer),
                "causal": self.causal,
                "window": self.window,
                "regularization_weight": self.regularization_weight,
                "use_bias": self.use_bias,
                **self._weight_settings_config(),
            }
        )
        return config
