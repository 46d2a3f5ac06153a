"""Pointer attention: logits over input positions, the output of a pointer network."""

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._precision import softmax_dtype
from keras_attention._weights import WeightSettings
from keras_attention.layers.additive import AdditiveAttention
from keras_attention.layers.attention_layer import AttentionLayer

__all__ = ["PointerAttention", "logits_dtype", "masked_logit"]


def logits_dtype(compute_dtype):
    """The dtype pointer logits are returned in: float32, or float64 for float64 layers.

    float16/bfloat16 logits are promoted so that the masking constant is
    representable and a softmax or cross-entropy taken on them cannot overflow
    (the same rule as the library's attention probabilities).
    """
    return softmax_dtype(compute_dtype)


def masked_logit(dtype):
    """The logit a masked position gets: the dtype's finite minimum (a NumPy scalar)."""
    return np.finfo(dtype).min


@keras.saving.register_keras_serializable(package="keras_attention")
class PointerAttention(WeightSettings, AttentionLayer):
    """Pointer attention: a distribution over input positions (Vinyals et al. 2015).

    Only the first half of attention: the scores are the output, there is no
    weighted sum of the values. For a decoder state `h_m` and the encoder
    states `e_1 .. e_n`:

        s_{m,n} = v^T tanh(W e_n + U h_m)
        p(c_m = n | c_1 .. c_{m-1}, P) = softmax_n(s_{m,n})

    The score is exactly `AdditiveAttention`'s (the layer holds one and uses
    its `project_query` / `project_key` / `score` hooks), so `W e_n` is
    computed once per sequence (`project_memory`) and only `U h_m` per step.

    Masking. A position is valid when the memory mask says it is real and,
    if a `chosen_mask` is given, it has not been chosen already. Invalid
    positions get the logit `float32` finite minimum (`-3.4028235e38`; the
    float64 minimum for float64 layers), never `-inf`: a softmax then gives
    them exactly zero probability, and `log_softmax` stays finite. A row with
    no valid position has all its logits equal to that minimum: its
    `log_softmax` is the finite `-log(Ts)` (no NaN) and
    `keras_attention.masked_softmax(logits, mask)` with the same mask gives
    all zeros. Logits are returned in float32 (float64 for a float64 layer)
    under every dtype policy.

    Paper: Vinyals, Fortunato & Jaitly, "Pointer Networks", NeurIPS 2015,
    arXiv:1506.03134.

    Weights (those of the inner `AdditiveAttention`; `W = key_kernel^T`,
    `U = query_kernel^T`): query_kernel `(dq, units)`, key_kernel
    `(de, units)`, score_vector `(units,)`, bias `(units,)` (with `use_bias`).

    Shapes: query `(B, dq)` (one decoder state) or `(B, Tq, dq)`, memory
    `(B, Ts, de)`, memory_mask `(B, Ts)`, chosen_mask `(B, Ts)` or
    `(B, Tq, Ts)` (as the query's rank); logits `(B, Ts)` or `(B, Tq, Ts)`.

    Args:
        units: size of the hidden layer inside the score.
        use_bias: add a bias inside the tanh (the paper has none).
        kernel_initializer: as in `keras.layers.Dense`.
        kernel_regularizer: as in `keras.layers.Dense`.
        bias_initializer: as in `keras.layers.Dense`.
        bias_regularizer: as in `keras.layers.Dense`.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        query: the decoder state(s).
        memory: the encoder states `e_n`.
        memory_mask: optional boolean `(B, Ts)`, false marks padding; taken
            from the memory's Keras mask when omitted.
        chosen_mask: optional boolean, true marks a position already chosen,
            which then gets a masked logit. Omit it to allow repeats.

    Example:

    ```python
    layer = keras_attention.PointerAttention(units=16)
    decoder_state = np.random.rand(2, 8).astype("float32")       # (B, dq)
    encoder_states = np.random.rand(2, 5, 12).astype("float32")  # (B, Ts, de)
    padding = np.array([[True] * 5, [True, True, True, False, False]])
    chosen = np.array([[False, True, False, False, False], [False] * 5])
    logits = layer(decoder_state, encoder_states, memory_mask=padding,
                   chosen_mask=chosen)
    probabilities = keras_attention.masked_softmax(logits, padding & ~chosen)
    # logits: (2, 5); probabilities[0, 1] == 0 and probabilities[1, 3:] == 0
    ```
    """

    # The logits are scores, not weights to drop, and nothing is drawn at
    # random: the layer takes neither `dropout` nor `seed`.
    base_arguments = ()

    def __init__(
        self,
        units,
        use_bias=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _checks.check_positive_int(self, "units", units)
        self.use_bias = bool(use_bias)
        self._set_weight_settings(kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer)
        self.additive = AdditiveAttention(
            units,
            use_bias=use_bias,
            kernel_initializer=self.kernel_initializer,
            bias_initializer=self.bias_initializer,
            kernel_regularizer=self.kernel_regularizer,
            bias_regularizer=self.bias_regularizer,
            dtype=self.dtype_policy,
            name="additive",
        )

    # ---------------------------------------------------------------- checks

    def _check_shapes(self, query_shape, memory_shape):
        query_shape, memory_shape = _checks.static_shape(query_shape), _checks.static_shape(memory_shape)
        if len(query_shape) not in (2, 3):
            raise ValueError(
                f"PointerAttention: `query` must have rank 2 (batch, dq) or 3 (batch, Tq, dq); got shape {query_shape}."
            )
        if len(memory_shape) != 3:
            raise ValueError(f"PointerAttention: `memory` must have rank 3 (batch, Ts, de); got shape {memory_shape}.")
        if not _checks.same_dim(query_shape[0], memory_shape[0]):
            raise ValueError(
                "PointerAttention: `query` and `memory` must have the same batch "
                f"size; got shapes {query_shape} and {memory_shape}."
            )
        return query_shape, memory_shape

    def _check_masks(self, query_shape, memory_shape, memory_mask, chosen_mask):
        batch, length = memory_shape[0], memory_shape[1]
        if memory_mask is not None:
            _checks.check_mask_shape(self, "memory_mask", memory_mask, (batch, length), "(batch, Ts)")
        if chosen_mask is not None:
            if len(query_shape) == 2:
                expected, meaning = (batch, length), "(batch, Ts)"
            else:
                expected, meaning = (batch, query_shape[1], length), "(batch, Tq, Ts)"
            _checks.check_mask_shape(self, "chosen_mask", chosen_mask, expected, meaning)

    # ----------------------------------------------------------------- build

    def build(self, query_shape, memory_shape):
        query_shape, memory_shape = self._check_shapes(query_shape, memory_shape)
        self.additive.build_score(
            _checks.check_known_last_dim(self, "query", query_shape),
            _checks.check_known_last_dim(self, "memory", memory_shape),
        )
        self.additive.built = True
        self.built = True

    # ------------------------------------------------------------- decoder API

    def project_memory(self, memory):
        """`W e_n` for every position: once per sequence, reused at every step."""
        return self.additive.project_key(ops.cast(memory, self.compute_dtype))

    def pointer_logits(self, query, projected_memory, valid=None):
        """Logits from a query `(B, [Tq,] dq)` and `project_memory`'s output.

        `valid` is a boolean `(B, [Tq,] Ts)` (or broadcastable): false entries
        get the masked logit. This is the step a decoder runs each time step.
        """
        single_query = len(query.shape) == 2
        query = ops.cast(query, self.compute_dtype)
        if single_query:
            query = ops.expand_dims(query, 1)
        scores = self.additive.score(self.additive.project_query(query), projected_memory)
        if single_query:
            scores = ops.squeeze(scores, 1)
        dtype = logits_dtype(self.compute_dtype)
        logits = ops.cast(scores, dtype)
        if valid is None:
            return logits
        return ops.where(ops.cast(valid, "bool"), logits, ops.convert_to_tensor(masked_logit(dtype), dtype))

    # ------------------------------------------------------------------ call

    def call(self, query, memory, memory_mask=None, chosen_mask=None):
        query_shape, memory_shape = self._check_shapes(query.shape, memory.shape)
        self._check_masks(query_shape, memory_shape, memory_mask, chosen_mask)
        single_query = len(query_shape) == 2
        valid = None
        if memory_mask is not None:
            valid = ops.cast(memory_mask, "bool")
            if not single_query:
                valid = ops.expand_dims(valid, 1)
        if chosen_mask is not None:
            not_chosen = ops.logical_not(ops.cast(chosen_mask, "bool"))
            valid = not_chosen if valid is None else ops.logical_and(valid, not_chosen)
        return self.pointer_logits(query, self.project_memory(memory), valid)

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_spec(self, query, memory, memory_mask=None, chosen_mask=None):
        query_shape, memory_shape = self._check_shapes(query.shape, memory.shape)
        self._check_masks(query_shape, memory_shape, memory_mask, chosen_mask)
        return self.output_spec((*query_shape[:-1], memory_shape[1]), output_dtype=logits_dtype(self.compute_dtype))

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
