"""The base class shared by every score-based attention layer.

A subclass supplies only the score function `e = score(q, k)`; this class
(on top of `AttentionLayer`, the thin base of every attention layer) owns
shapes, masks, the masked softmax, the weighted sum of the values and the
decoder-step protocol (`attend_step`), through which a stateful mechanism
carries its own state from step to step.

The score is split into three hooks so that a decoder can project the memory
keys once per sequence and only the query once per step:

    projected_key   = layer.project_key(key)        # once per sequence
    projected_query = layer.project_query(query)    # once per step
    scores          = layer.score(projected_query, projected_key)
"""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.layers.attention_layer import AttentionLayer
from keras_attention.ops import masked_softmax

__all__ = ["BaseAttention", "combine_masks", "noise_kwargs", "prepare_call"]


def noise_kwargs(noise):
    """`noise` as a keyword only when there is some: a subclass written
    before the argument existed still works where nothing is pre-drawn."""
    return {} if noise is None else {"noise": noise}


def prepare_call(layer, query, value, key, query_mask, value_mask, attention_mask, causal, causal_in_mask=True):
    """The common start of an attention layer's `call`.

    Checks the shapes and masks, casts the inputs to the layer's compute
    dtype, gives a single `(B, dq)` query (and its masks) a time axis of one,
    and combines the masks (the causal part too, unless `causal_in_mask` is
    false: a fused kernel may apply it itself). Returns
    `(query, value, key, mask, single_query)`.
    """
    key = value if key is None else key
    _checks.check_input_shapes(layer, query.shape, value.shape, key.shape)
    _checks.check_masks(layer, query, value, query_mask, value_mask, attention_mask, causal)
    single_query = len(query.shape) == 2
    query, value, key = (ops.cast(x, layer.compute_dtype) for x in (query, value, key))
    if single_query:
        query = ops.expand_dims(query, 1)
        if query_mask is not None:
            query_mask = ops.expand_dims(query_mask, 1)
        if attention_mask is not None:
            attention_mask = ops.expand_dims(attention_mask, 1)
    mask = combine_masks(query, key, query_mask, value_mask, attention_mask, causal and causal_in_mask)
    return query, value, key, mask, single_query


def combine_masks(query, key, query_mask, value_mask, attention_mask, causal):
    """AND of every mask given, broadcastable to `(B, Tq, Tv)`, or None.

    `query` `(B, Tq, ...)` and `key` `(B, Tv, ...)` give the lengths for the
    causal part; masks may be None.
    """
    parts = []
    if value_mask is not None:
        parts.append(ops.expand_dims(ops.cast(value_mask, "bool"), 1))
    if query_mask is not None:
        parts.append(ops.expand_dims(ops.cast(query_mask, "bool"), -1))
    if attention_mask is not None:
        parts.append(ops.cast(attention_mask, "bool"))
    if causal:
        rows = ops.expand_dims(ops.arange(ops.shape(query)[1]), 1)
        cols = ops.expand_dims(ops.arange(ops.shape(key)[1]), 0)
        parts.append(ops.expand_dims(ops.greater_equal(rows, cols), 0))
    if not parts:
        return None
    mask = parts[0]
    for part in parts[1:]:
        mask = ops.logical_and(mask, part)
    return mask


class BaseAttention(AttentionLayer):
    """Base class for attention layers: `c = sum_i softmax(e)_i v_i`.

    Subclasses implement `score` (and, when they have weights, `build_score`,
    `project_query` and `project_key`). Everything else is shared:

    Call arguments:
        query: `(B, dq)` (one query per example, such as a decoder state) or
            `(B, Tq, dq)`.
        value: `(B, Tv, dv)`.
        key: `(B, Tv, dk)`; defaults to `value`.
        query_mask: boolean `(B, Tq)` (or `(B,)` for a rank-2 query); masked
            queries get zero weights and zero output. Filled from the query's
            Keras mask when omitted.
        value_mask: boolean `(B, Tv)`; masked positions get exactly zero
            weight. Filled from the value's Keras mask when omitted.
        attention_mask: boolean `(B, Tq, Tv)` (or `(B, Tv)` for a rank-2
            query); false entries get zero weight.
        causal: if true, query position `i` sees only positions `j <= i`.
            Needs a rank-3 query.
        return_attention_scores: if true, also return the weights
            `(B, Tv)` or `(B, Tq, Tv)`.
        training: enables dropout on the weights.

    Returns:
        The context `(B, dv)` or `(B, Tq, dv)`, in the layer's compute dtype,
        and the weights when `return_attention_scores` is true.

    The softmax runs in float32 with masked logits set to the finite minimum,
    so padding gets exactly zero weight and a row with no valid position gets
    all-zero weights and a zero context with finite gradients.

    Args:
        dropout: fraction of attention weights to drop in training.
        seed: seed for the dropout.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).
    """

    # ----------------------------------------------------------------- hooks

    def build_score(self, query_dim, key_dim):
        """Create the score's weights for query size `dq` and key size `dk`."""

    def project_query(self, query):
        """Map queries `(B, Tq, dq)` to the form `score` takes."""
        return query

    def project_key(self, key):
        """Map keys `(B, Tv, dk)` to the form `score` takes.

        Called once per sequence: a decoder reuses the result at every step.
        """
        return key

    def score(self, projected_query, projected_key):
        """Return raw scores `(B, Tq, Tv)` from projected queries and keys."""
        raise NotImplementedError(f"{type(self).__name__} must implement score(projected_query, projected_key).")

    def attention_weights(self, scores, mask, training=None, noise=None):
        """Turn scores `(B, Tq, Tv)` into weights; masked entries get zero.
        `noise`: this step's slice of `step_noise` (None: drawn here)."""
        return self.drop_weights(masked_softmax(scores, mask), training, noise=noise)

    # ------------------------------------------------------------------ core

    def build(self, query_shape, value_shape, key_shape=None):
        key_shape = value_shape if key_shape is None else key_shape
        _checks.check_input_shapes(self, query_shape, value_shape, key_shape)
        query_dim = _checks.check_known_last_dim(self, "query", query_shape)
        key_dim = _checks.check_known_last_dim(self, "key", key_shape)
        self.build_score(query_dim, key_dim)
        # What the weights were created for: a decoder cell given this layer
        # afterwards reuses them only for the same sizes.
        self.score_sizes = (query_dim, key_dim)
        self.built = True

    def attend(self, projected_query, projected_key, value, mask=None, training=None, noise=None):
        """Weights and context from already projected rank-3 queries and keys.

        This is the step a decoder runs per time step with `projected_key`
        computed once. Returns `(context (B, Tq, dv), weights (B, Tq, Tv))`.
        `noise` (broadcastable to the weights): the random numbers of this
        step, drawn before a decoder's loop (`step_noise`); None draws them here.
        """
        scores = self.score(projected_query, projected_key)
        weights = self.attention_weights(scores, mask, training=training, **noise_kwargs(noise))
        weights = ops.cast(weights, value.dtype)
        return ops.matmul(weights, value), weights

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
        query, value, key, mask, single_query = prepare_call(
            self, query, value, key, query_mask, value_mask, attention_mask, causal
        )
        context, weights = self.attend(self.project_query(query), self.project_key(key), value, mask, training)
        if single_query:
            context = ops.squeeze(context, 1)
            weights = ops.squeeze(weights, 1)
        if return_attention_scores:
            return context, weights
        return context

    # -------------------------------------------------------- decoder steps
    # A decoder cell runs the attention one step at a time. A mechanism whose
    # step depends on the steps before (monotonic attention's previous
    # alignment, say) owns that state: it declares its sizes, gives its value
    # at the first step, and takes and returns it at each step. The cell
    # carries it after its own states without knowing what it holds. A
    # stateless mechanism has none.

    @property
    def attention_state_size(self):
        """Sizes of the attention's own recurrent states, each a `(B, size)`
        tensor; None stands for the memory length. Empty when stateless."""
        return []

    def initial_attention_state(self, values):
        """The attention's states at the first step, for the memory `values (B, Ts, dv)`."""
        return []

    def step_noise(self, batch_size, steps, memory_length, training=None):
        """The random numbers of `steps` decoder steps, drawn at once before
        the decoder's loop: `(B, steps, Ts)` float32, or None when the
        attention draws none (here: uniform in [0, 1) for the dropout in
        training). The loop passes step `t`'s slice to `attend_step(noise=...)`.

        Drawn outside the loop because a `keras.random.SeedGenerator` is a
        variable: advanced inside a loop's body it leaks tracers on JAX and
        does not compile with XLA. One draw per sequence still gives every
        step its own mask.
        """
        if not (training and self.dropout > 0):
            return None
        return keras.random.uniform((batch_size, steps, memory_length), seed=self.seed_generator)

    def attend_step(self, query, projected_key, value, mask=None, attention_state=(), training=None, noise=None):
        """One decoder step: `(context (B, dv), weights (B, Ts), new attention state)`.

        `query (B, dq)` is the step's query, `projected_key` the memory's
        keys through `project_key` (once per sequence), `value (B, Ts, dv)`,
        `mask (B, Ts)` boolean or None, and `attention_state` the list of
        `attention_state_size` states the previous step returned. `noise
        (B, Ts)`: this step's slice of `step_noise` (None: drawn here).
        """
        context, weights = self._attend_one_query(query, projected_key, value, mask, training, noise=noise)
        return context, weights, []

    def _attend_one_query(self, query, projected_key, value, mask, training, noise=None, **kwargs):
        """`attend` for one query `(B, dq)` per example: `(context (B, dv), weights (B, Ts))`."""
        # Projecting the rank-2 query keeps the step's matmuls 2-D (a rank-3
        # one lowers to a tensordot that XLA cannot compile in the loop's
        # gradient).
        projected_query = ops.expand_dims(self.project_query(query), 1)
        mask = None if mask is None else ops.expand_dims(mask, 1)
        if noise is not None:
            kwargs["noise"] = ops.expand_dims(noise, 1)
        context, weights = self.attend(projected_query, projected_key, value, mask, training=training, **kwargs)
        return ops.squeeze(context, 1), ops.squeeze(weights, 1)
