"""The thin base class every attention layer of this library inherits.

`AttentionLayer` holds what all the mechanisms share whatever their inputs:
dropout on the attention weights and its seed, Keras mask support, output
specs, and the config entries of those arguments. Layers that are a score
function and nothing more inherit `BaseAttention` (base.py), its subclass;
layers with inputs of their own (self-attention, pooling, pointer, targeted
and multi-head attention) inherit this class directly.
"""

import keras
from keras import ops

from keras_attention import _checks

__all__ = ["AttentionLayer"]


class AttentionLayer(keras.layers.Layer):
    """The base of every attention layer: dropout and seed, masks, output specs, config.

    A subclass passes `dropout` and `seed` on to this constructor and runs its
    attention weights through `drop_weights`. The layer supports Keras masks.
    `output_spec` builds a call's symbolic result: the output, and beside it
    the weights when they are asked for, in the compute dtype.

    The default `compute_output_spec` and `compute_mask` are those of a
    `(query, value, key)` call: one output row per query with the values'
    features (`compute_output_shape`), weights of `weights_shape`, and a
    rank-3 query's Keras mask passed on to the output. A layer with other
    inputs overrides them.

    Args:
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout (and for any noise of the subclass).
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).
    """

    # The arguments of this base that a subclass takes, and so writes to its
    # config. A layer whose weights must not be dropped (a hard selection, a
    # monotonic alignment) or that draws nothing at random leaves them out:
    # its config has never held them, and its saved models must still load.
    base_arguments = ("dropout", "seed")

    def __init__(self, dropout=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        for argument, value, unset in (("dropout", dropout, 0.0), ("seed", seed, None)):
            if argument not in self.base_arguments and value != unset:
                raise ValueError(
                    f"{type(self).__name__}: takes no `{argument}` (leave it out); got {argument}={value!r}."
                )
        self.dropout = _checks.check_fraction(self, "dropout", dropout)
        self.seed = seed
        # Only created when used: its state is a variable of the layer.
        self.seed_generator = keras.random.SeedGenerator(seed) if self.dropout > 0 else None
        self.supports_masking = True

    def drop_weights(self, weights, training=None, noise=None):
        """Dropout on attention weights in training; the weights as they are otherwise.

        `noise`, uniform in [0, 1) and broadcastable to `weights`, decides
        which weights drop (those whose entry is below `dropout`) in place
        of a draw from the layer's seed generator: a decoder loop draws it
        before the loop (`step_noise`).
        """
        if training and self.dropout > 0:
            if noise is None:
                return keras.random.dropout(weights, self.dropout, seed=self.seed_generator)
            keep = ops.greater_equal(ops.cast(noise, "float32"), self.dropout)
            scaled = weights / ops.cast(1.0 - self.dropout, weights.dtype)
            weights = ops.where(keep, scaled, ops.zeros_like(weights))
        return weights

    def adopt_score_layer(self, score, created_for):
        """Make the unbuilt `score` layer this layer's own, in its dtype policy.

        This layer creates the score's weights (`created_for` says for what,
        in the error), so a built score is refused, and so is one that
        another layer owns already.
        """
        if score.built:
            raise ValueError(
                f"{type(self).__name__}: `score` must be an unbuilt layer (its weights "
                f"are created for {created_for}); got the built layer {score.name!r}."
            )
        _checks.claim_sublayer(self, "score", score)
        # One dtype policy for the whole computation: the score's variables
        # must match the dtype this layer computes in.
        score.dtype_policy = self.dtype_policy
        return score

    # ------------------------------------------------ shapes, masks and config

    def compute_output_shape(self, query_shape, value_shape, key_shape=None):
        return (*query_shape[:-1], value_shape[-1])

    def weights_shape(self, query_shape, value_shape):
        """Shape of the attention weights: `(B, Tq, Tv)`, or `(B, Tv)` for one query."""
        return (*query_shape[:-1], value_shape[1])

    def output_spec(self, output_shape, weights_shape=None, output_dtype=None):
        """The output's KerasTensor and, when `weights_shape` is given (a shape,
        or a dict of shapes), the weights' beside it. Both default to the
        compute dtype."""
        output = keras.KerasTensor(output_shape, dtype=output_dtype or self.compute_dtype)
        if weights_shape is None:
            return output
        if isinstance(weights_shape, dict):
            weights = {
                name: keras.KerasTensor(shape, dtype=self.compute_dtype) for name, shape in weights_shape.items()
            }
        else:
            weights = keras.KerasTensor(weights_shape, dtype=self.compute_dtype)
        return output, weights

    def compute_output_spec(
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
        key = value if key is None else key
        _checks.check_input_shapes(self, query.shape, value.shape, key.shape)
        weights_shape = None
        if return_attention_scores:
            weights_shape = self.weights_shape(query.shape, value.shape)
        return self.output_spec(self.compute_output_shape(query.shape, value.shape, key.shape), weights_shape)

    def compute_mask(self, query, previous_mask=None):
        # The output has one row per query, so it inherits the query's mask;
        # a single query per example has no time axis to mask.
        if previous_mask is None or len(query.shape) != 3:
            return None
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update({argument: getattr(self, argument) for argument in self.base_arguments})
        return config
