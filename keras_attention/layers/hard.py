"""Hard attention: one value per query, trainable by straight-through Gumbel-softmax."""

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._reductions import any_along, first_max_index
from keras_attention.layers.base import BaseAttention
from keras_attention.layers.concat import ConcatAttention
from keras_attention.layers.dot import DotAttention, ScaledDotAttention
from keras_attention.layers.general import GeneralAttention
from keras_attention.ops import masked_softmax

# float32's smallest normal number: the floor of the Gumbel draws' uniforms.
_TINY = float(np.finfo("float32").tiny)

__all__ = ["HardAttention"]

# Score layers that can be named by a string (they need no constructor arguments).
_SCORES_BY_NAME = {
    "dot": DotAttention,
    "scaled_dot": ScaledDotAttention,
    "general": GeneralAttention,
    "concat": ConcatAttention,
}
_MODES = ("argmax", "sample")


def _score_layer(layer, score):
    if isinstance(score, str):
        if score == "additive":
            raise ValueError(
                f"{type(layer).__name__}: `score='additive'` needs a size; pass "
                "`score=AdditiveAttention(units=...)` instead."
            )
        _checks.check_choice(layer, "score", score, tuple(_SCORES_BY_NAME))
        return _SCORES_BY_NAME[score](dtype=layer.dtype_policy)
    score = _checks.resolve_layer(
        layer,
        "score",
        score,
        lambda score: isinstance(score, BaseAttention) and not isinstance(score, HardAttention),
        f"a score layer of this library (e.g. DotAttention()) or one of {sorted(_SCORES_BY_NAME)}",
    )
    return layer.adopt_score_layer(score, f"the shapes {type(layer).__name__} is called with")


@keras.saving.register_keras_serializable(package="keras_attention")
class HardAttention(BaseAttention):
    """Hard attention: each query takes exactly one value.

    With `alpha = softmax(e)` from any score layer `e_i = score(q, k_i)`:

        mode="argmax":  c = v_n,  n = argmax_i alpha_i
        mode="sample":  c = v_n,  n ~ Categorical(alpha)
                        (drawn by Gumbel-max: n = argmax_i (e_i + g_i),
                         g_i = -log(-log u_i), u_i ~ U(0, 1))

    The weights returned are one-hot. Selection is not differentiable, so Xu
    et al. train it with a REINFORCE-style estimator. With
    `straight_through=True` (the default), training uses the straight-through
    Gumbel-softmax estimator (Jang, Gu & Poole 2017): the forward pass is the
    one-hot selection, the backward pass is the gradient of the relaxed
    weights `softmax((e + g) / temperature)` (`g = 0` in argmax mode), so the
    score's parameters learn by back-propagation. With
    `straight_through=False` no gradient reaches the score (values still get
    theirs). At inference (`training` false) the output is always exactly one
    value per query; a query with no valid position gets zeros.

    Ties go to the lowest position, on every backend: the selection takes
    the max and then the first position equal to it, not `argmax` or
    `top_k` (which leave the order of equal scores to the backend; torch's
    promise none, and `argmax` does not export to ONNX).

    Paper: Xu et al. 2015, "Show, Attend and Tell" (hard attention),
    arXiv:1502.03044; Jang, Gu & Poole 2017, "Categorical Reparameterization
    with Gumbel-Softmax", arXiv:1611.01144.

    Weights: those of the score layer.

    Shapes: as the score layer: query `(B, dq)` or `(B, Tq, dq)`, value
    `(B, Tv, dv)`, key `(B, Tv, dk)`; output `(B, dv)` or `(B, Tq, dv)`.

    Args:
        score: an unbuilt score layer (`AdditiveAttention(units=16)`,
            `DotAttention()`, ...) or one of the names "dot", "scaled_dot",
            "general", "concat". It takes this layer's dtype policy.
        mode: "argmax" or "sample".
        straight_through: train with the straight-through estimator.
        temperature: the relaxation temperature (> 0) of the backward pass.
        seed: seed for the Gumbel noise.

    Example:

    ```python
    layer = keras_attention.HardAttention(score="dot", mode="argmax")
    query = np.random.rand(2, 8).astype("float32")
    memory = np.random.rand(2, 5, 8).astype("float32")
    context, weights = layer(query, memory, return_attention_scores=True)
    # each row of weights is one-hot, context[b] == memory[b, argmax weights[b]]
    ```
    """

    # The selection is the output: dropping weights would drop it. `seed`
    # seeds the Gumbel noise of "sample" mode.
    base_arguments = ("seed",)

    def __init__(
        self,
        score="dot",
        mode="argmax",
        straight_through=True,
        temperature=1.0,
        seed=None,
        **kwargs,
    ):
        super().__init__(seed=seed, **kwargs)
        _checks.check_choice(self, "mode", mode, _MODES)
        temperature = _checks.check_number(self, "temperature", temperature, minimum=0, strict=True)
        self.score_layer = _score_layer(self, score)
        self.mode = mode
        self.straight_through = bool(straight_through)
        self.temperature = float(temperature)
        self.noise_seed_generator = keras.random.SeedGenerator(seed) if mode == "sample" else None

    def build_score(self, query_dim, key_dim):
        self.score_layer.build_score(query_dim, key_dim)
        self.score_layer.built = True

    def project_query(self, query):
        return self.score_layer.project_query(query)

    def project_key(self, key):
        return self.score_layer.project_key(key)

    def score(self, projected_query, projected_key):
        return self.score_layer.score(projected_query, projected_key)

    def step_noise(self, batch_size, steps, memory_length, training=None):
        """The Gumbel draws of "sample" mode for `steps` decoder steps, drawn
        before the loop (see `BaseAttention.step_noise`): `(B, steps, Ts)`
        uniform in (0, 1), or None in "argmax" mode."""
        if self.mode != "sample":
            return None
        return keras.random.uniform(
            (batch_size, steps, memory_length), minval=_TINY, maxval=1.0, seed=self.noise_seed_generator
        )

    def attention_weights(self, scores, mask, training=None, noise=None):
        logits = ops.cast(scores, "float32")
        if self.mode == "sample":
            if noise is None:
                noise = keras.random.uniform(
                    ops.shape(logits), minval=_TINY, maxval=1.0, seed=self.noise_seed_generator
                )
            # Clipped: pre-drawn noise may have come through a float16 loop
            # input, where draws round to 0 or 1 (infinite Gumbel noise).
            noise = ops.clip(ops.cast(noise, "float32"), _TINY, 1.0 - 2.0**-24)
            logits = logits - ops.log(-ops.log(noise))
        if mask is None:
            mask = ops.ones_like(logits, dtype="bool")
        else:
            mask = ops.broadcast_to(ops.cast(mask, "bool"), ops.shape(logits))
        # The lowest valid position among equal best scores, on every
        # backend (0 for a row with none, which any_valid zeroes below).
        best = ops.expand_dims(first_max_index(logits, mask), -1)  # (B, Tq, 1)
        positions = ops.arange(ops.shape(logits)[-1], dtype="int32")
        one_hot = ops.equal(positions, best)
        any_valid = any_along(mask, axis=-1, keepdims=True)
        hard = ops.cast(ops.logical_and(one_hot, any_valid), "float32")
        if training and self.straight_through:
            soft = masked_softmax(logits / self.temperature, mask)
            # (soft - soft) is exactly zero, so the forward pass stays exactly
            # one-hot while the backward pass sees the relaxed weights.
            return hard + (soft - ops.stop_gradient(soft))
        return hard

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "score": keras.saving.serialize_keras_object(self.score_layer),
                "mode": self.mode,
                "straight_through": self.straight_through,
                "temperature": self.temperature,
            }
        )
        return config
