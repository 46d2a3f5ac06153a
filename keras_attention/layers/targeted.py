"""Target-dependent attention for targeted sentiment (Liu & Zhang 2017)."""

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._weights import WeightSettings
from keras_attention.layers.additive import additive_score
from keras_attention.layers.attention_layer import AttentionLayer
from keras_attention.ops import masked_softmax

__all__ = ["TargetedAttention"]

_MODES = ("vanilla", "contextualized", "gated")
# The parts a mode attends over, in the order of the weights' leading axis.
_PARTS = ("whole", "left", "right")


@keras.saving.register_keras_serializable(package="keras_attention")
class TargetedAttention(WeightSettings, AttentionLayer):
    """Target-dependent attention over a sentence (Liu & Zhang 2017).

    Inputs are hidden states `h_0..h_n` (typically a BiLSTM's) and a target
    mask marking the target span `t_0..t_m` in each example. The target
    representation is the mean of its hidden states, `h_t = mean_{i in span} h_i`.
    The left context is every valid position before the span's first index,
    the right context every valid position after its last index; both are
    derived per example inside the batch, so examples with different spans
    share one batch.

    The attention over a set of positions `P` (the paper's `attention(., h_t)`):

        beta_i = U^T tanh(W_1 [h_i ; h_t] + b_1)          for i in P
        alpha  = softmax(beta) over P,    attention(P) = sum_{i in P} alpha_i h_i

    mode="vanilla": one attention over the whole sentence,

        s = attention(sentence)                                    -> s  (B, d)

    mode="contextualized": three attentions, each with its own `W_1, b_1, U`,

        s = attention(sentence), s_l = attention(left), s_r = attention(right)
                                                         -> [s ; s_l ; s_r]  (B, 3d)

      The paper classifies with `p = softmax(W s + W_l s_l + W_r s_r + b)`;
      a `Dense` on the concatenation computes exactly
      `W s + W_l s_l + W_r s_r + b`, so the layer returns the concatenation.

    mode="gated": the same three attentions, mixed by element-wise gates,

        z   ~ exp(W_1 s   + U_1 h_t + b_1)
        z_l ~ exp(W_2 s_l + U_2 h_t + b_2)
        z_r ~ exp(W_3 s_r + U_3 h_t + b_3),     z + z_l + z_r = 1 element-wise
        s~  = z * s + z_l * s_l + z_r * s_r                        -> s~ (B, d)

      (the normalisation is a softmax over the three, per feature; the gate
      matrices `W_k, U_k, b_k` are separate from the attentions' `W_1, b_1`).

    Edge cases. An empty left (right) context, when the target starts (ends)
    the sentence, gives `s_l = 0` (`s_r = 0`) with all-zero weights and
    finite gradients. Target positions outside the padding mask are ignored.
    An empty target span is an error when the target mask is concrete (an
    eager call); inside a traced function it cannot be detected, and the
    result is finite: `h_t = 0` (the mean over no position, with its
    denominator clamped to 1) and empty left and right contexts.

    The attention weights use a float32 softmax whatever the compute dtype
    (see `keras_attention.ops.masked_softmax`); so do the gates.

    Paper: Liu & Zhang, "Attention Modeling for Targeted Sentiment", EACL
    2017. The attention score is Bahdanau's additive score: Bahdanau, Cho &
    Bengio, "Neural Machine Translation by Jointly Learning to Align and
    Translate", arXiv:1409.0473.

    Weights (Keras `(input, output)` layout; the leading axis indexes the
    parts: 0 whole sentence, 1 left, 2 right; `P` = 1 for vanilla, else 3):
        kernel `(P, d, units)` and target_kernel `(P, d, units)`: `W_1` split
        into its blocks acting on `h_i` and on `h_t`
        (`W_1 = [kernel ; target_kernel]^T`); bias `(P, units)`: `b_1`;
        score_vector `(P, units)`: `U`. Gated mode adds gate_kernels
        `(3, d, d)`: `W_1, W_2, W_3`; gate_target_kernels `(3, d, d)`:
        `U_1, U_2, U_3`; gate_bias `(3, d)`: `b_1, b_2, b_3`.

    Shapes: hidden `(B, T, d)`, target_mask `(B, T)`; output `(B, d)`
    (vanilla, gated) or `(B, 3d)` (contextualized).

    Call arguments:
        hidden: hidden states `(B, T, d)`.
        target_mask: `(B, T)`, true (or nonzero) on the target span.
        hidden_mask: boolean `(B, T)` sequence padding mask; filled from the Keras
            mask of `hidden` when omitted.
        return_attention_scores: also return the weights. Vanilla: `(B, T)`.
            Contextualized: a dict `{"whole", "left", "right"}` of `(B, T)`
            weights. Gated: the same dict plus `"gates"`, `(B, 3, d)`
            holding `z, z_l, z_r` (they sum to 1 over axis 1).
        training: enables dropout on the attention weights.

    Args:
        units: size of the hidden layer inside the score (`W_1`'s output).
        mode: "vanilla", "contextualized" or "gated".
        kernel_initializer: as in `keras.layers.Dense`, for every kernel.
        bias_initializer: as in `keras.layers.Dense`, for every bias.
        kernel_regularizer: as in `keras.layers.Dense`, for every kernel.
        bias_regularizer: as in `keras.layers.Dense`, for every bias.
        dropout: fraction of attention weights to drop in training.
        seed: seed for the dropout.

    Example:

    ```python
    layer = keras_attention.TargetedAttention(units=16, mode="gated")
    hidden = np.random.rand(2, 6, 8).astype("float32")   # e.g. BiLSTM states
    target = np.array([[0, 1, 1, 0, 0, 0],               # span in the middle
                       [1, 0, 0, 0, 0, 0]], dtype=bool)   # span at the start
    padding = np.array([[True] * 6, [True] * 4 + [False] * 2])
    sentence, scores = layer(hidden, target, hidden_mask=padding,
                             return_attention_scores=True)
    # sentence: (2, 8); scores["left"][1] is all zeros (no left context)
    ```
    """

    def __init__(
        self,
        units,
        mode="vanilla",
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
        _checks.check_choice(self, "mode", mode, _MODES)
        self.mode = mode
        self._set_weight_settings(kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer)

    @property
    def parts(self):
        """The parts attended over: ("whole",) or ("whole", "left", "right")."""
        return _PARTS[:1] if self.mode == "vanilla" else _PARTS

    # ------------------------------------------------------------------ checks

    def _check_shapes(self, hidden_shape, target_mask_shape, mask_shape=None):
        hidden_shape = _checks.static_shape(hidden_shape)
        if len(hidden_shape) != 3:
            raise ValueError(f"TargetedAttention: `hidden` must have rank 3 (batch, T, d); got shape {hidden_shape}.")
        expected = hidden_shape[:2]
        for argument, shape in (("target_mask", target_mask_shape), ("hidden_mask", mask_shape)):
            if shape is None:
                continue
            shape = _checks.static_shape(shape)
            if len(shape) != 2 or not all(_checks.same_dim(a, b) for a, b in zip(shape, expected)):
                raise ValueError(
                    f"TargetedAttention: `{argument}` must have shape (batch, T) = "
                    f"{expected}, matching `hidden` {hidden_shape}; got shape {shape}."
                )

    def _check_spans(self, target_mask, mask):
        target = _checks.concrete_values(target_mask)
        valid = _checks.concrete_values(mask)
        if target is None or (mask is not None and valid is None):
            return
        target = target.astype(bool)
        if valid is not None:
            target &= valid.astype(bool)
        empty = np.flatnonzero(~target.any(axis=1))
        if empty.size:
            raise ValueError(
                "TargetedAttention: `target_mask` must mark at least one valid "
                f"position in every example; examples {empty.tolist()} have an "
                "empty target span (after the padding mask)."
            )

    # ------------------------------------------------------------------- build

    def build(self, hidden_shape, target_mask_shape):
        self._check_shapes(hidden_shape, target_mask_shape)
        dim = _checks.check_known_last_dim(self, "hidden", hidden_shape)
        parts = len(self.parts)
        self.kernel = self._add_kernel("kernel", (parts, dim, self.units))
        self.target_kernel = self._add_kernel("target_kernel", (parts, dim, self.units))
        self.bias = self._add_bias("bias", (parts, self.units))
        self.score_vector = self._add_kernel("score_vector", (parts, self.units))
        if self.mode == "gated":
            self.gate_kernels = self._add_kernel("gate_kernels", (3, dim, dim))
            self.gate_target_kernels = self._add_kernel("gate_target_kernels", (3, dim, dim))
            self.gate_bias = self._add_bias("gate_bias", (3, dim))
        self.built = True

    # -------------------------------------------------------------------- call

    def context_masks(self, target_mask, mask=None):
        """Boolean `(B, T)` masks of the target span and the left and right contexts.

        Positions are counted with a cumulative sum of the span (no argmax, no
        per-example loop): `seen_i` = span positions at or before `i`. Left:
        `seen_i = 0`; right: `seen_i = total` and `i` not in the span. Both
        are empty when the span is.
        """
        target = ops.cast(target_mask, "bool")
        valid = ops.ones_like(target) if mask is None else ops.cast(mask, "bool")
        target = ops.logical_and(target, valid)
        count = ops.cast(target, "int32")
        seen = ops.cumsum(count, axis=1)
        total = ops.sum(count, axis=1, keepdims=True)
        context = ops.logical_and(valid, ops.greater(total, 0))
        left = ops.logical_and(context, ops.equal(seen, 0))
        right = ops.logical_and(context, ops.logical_and(ops.equal(seen, total), ops.logical_not(target)))
        return target, left, right

    def call(
        self,
        hidden,
        target_mask,
        hidden_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        self._check_shapes(hidden.shape, target_mask.shape, None if hidden_mask is None else hidden_mask.shape)
        self._check_spans(target_mask, hidden_mask)
        hidden = ops.cast(hidden, self.compute_dtype)
        valid = None if hidden_mask is None else ops.cast(hidden_mask, "bool")
        target, left, right = self.context_masks(target_mask, valid)
        whole = ops.ones_like(target) if valid is None else valid

        target_weights = ops.cast(target, hidden.dtype)
        span_length = ops.sum(target_weights, axis=1, keepdims=True)
        # Clamping the count only matters for an empty span (sum 0): h_t = 0.
        target_state = ops.sum(hidden * ops.expand_dims(target_weights, -1), axis=1) / ops.maximum(
            span_length, ops.cast(1, hidden.dtype)
        )  # (B, d)

        part_masks = {"whole": whole, "left": left, "right": right}
        states, weights = [], {}
        for index, part in enumerate(self.parts):
            state, weights[part] = self._attend(index, hidden, target_state, part_masks[part], training)
            states.append(state)

        if self.mode == "vanilla":
            output, scores = states[0], weights["whole"]
        elif self.mode == "contextualized":
            output, scores = ops.concatenate(states, axis=-1), weights
        else:
            gates = self._gates(states, target_state)  # (B, 3, d)
            output = ops.sum(gates * ops.stack(states, axis=1), axis=1)
            scores = {**weights, "gates": gates}
        if return_attention_scores:
            return output, scores
        return output

    def _attend(self, index, hidden, target_state, mask, training):
        """`sum_i alpha_i h_i` over the positions in `mask`, with part `index`'s weights."""
        dtype = hidden.dtype
        kernel = ops.cast(self.kernel[index], dtype)
        target_kernel = ops.cast(self.target_kernel[index], dtype)
        bias = ops.cast(self.bias[index], dtype)
        vector = ops.cast(self.score_vector[index], dtype)
        # W_1 [h_i ; h_t] = W_h h_i + W_t h_t: the h_t half is computed once
        # per example and broadcast over positions by the additive score.
        projected_target = ops.expand_dims(ops.matmul(target_state, target_kernel), 1)
        projected_hidden = ops.matmul(hidden, kernel) + bias
        scores = additive_score(projected_target, projected_hidden, vector)  # (B, 1, T)
        weights = self.drop_weights(masked_softmax(scores, ops.expand_dims(mask, 1)), training)
        weights = ops.cast(weights, dtype)
        return ops.squeeze(ops.matmul(weights, hidden), 1), ops.squeeze(weights, 1)

    def _gates(self, states, target_state):
        """`(z, z_l, z_r)` stacked on axis 1: `(B, 3, d)`, summing to 1 over it."""
        dtype = target_state.dtype
        gate_kernels = ops.cast(self.gate_kernels, dtype)
        gate_target_kernels = ops.cast(self.gate_target_kernels, dtype)
        gate_bias = ops.cast(self.gate_bias, dtype)
        logits = ops.stack(
            [
                ops.matmul(state, gate_kernels[k]) + ops.matmul(target_state, gate_target_kernels[k]) + gate_bias[k]
                for k, state in enumerate(states)
            ],
            axis=1,
        )
        # masked_softmax without a mask is a plain softmax run in float32.
        return masked_softmax(logits, axis=1)

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_shape(self, hidden_shape, target_mask_shape=None):
        dim = hidden_shape[-1]
        if self.mode == "contextualized" and dim is not None:
            dim = 3 * dim
        return (hidden_shape[0], dim)

    def compute_output_spec(
        self,
        hidden,
        target_mask,
        hidden_mask=None,
        return_attention_scores=False,
        training=None,
    ):
        self._check_shapes(hidden.shape, target_mask.shape, None if hidden_mask is None else hidden_mask.shape)
        output_shape = self.compute_output_shape(hidden.shape)
        if not return_attention_scores:
            return self.output_spec(output_shape)
        batch, length, dim = hidden.shape
        if self.mode == "vanilla":
            return self.output_spec(output_shape, (batch, length))
        scores = {part: (batch, length) for part in _PARTS}
        if self.mode == "gated":
            scores["gates"] = (batch, 3, dim)
        return self.output_spec(output_shape, scores)

    def compute_mask(self, hidden, previous_mask=None):
        # The output has no time axis: no mask goes on. (Masks are supported,
        # so Keras does not warn that an incoming one is dropped.)
        return None

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "mode": self.mode,
                **self._weight_settings_config(),
            }
        )
        return config
