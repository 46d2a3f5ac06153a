"""Learned absolute position embeddings (Gehring et al. 2017), added from a start position."""

import keras
from keras import ops

from keras_attention import _checks

__all__ = ["LearnedPositionEmbedding"]


@keras.saving.register_keras_serializable(package="keras_attention")
class LearnedPositionEmbedding(keras.layers.Layer):
    """Adds a trained embedding of each position to a sequence.

        output[b, t] = inputs[b, t] + P[start + t]      P: (max_length, d), trained

    as in ConvS2S and BERT (the Transformer paper found it as good as the
    sinusoids). A cached decoder passes its step index as `start`. Positions
    must stay below `max_length`: an eager call past it raises; in a graph
    the position is clipped to the last row (the backends' gather).

    Paper: Gehring et al., "Convolutional Sequence to Sequence Learning",
    arXiv:1705.03122; Vaswani et al., arXiv:1706.03762 (section 3.5).

    Shapes: inputs `(B, T, d)`; start: an int or int32 scalar; output
    `(B, T, d)`; weights: embeddings `(max_length, d)`.

    Args:
        max_length: the number of positions embedded.
        embeddings_initializer: the initializer of `P`.
        embeddings_regularizer: the regularizer of `P`.

    Example:

    ```python
    layer = keras_attention.LearnedPositionEmbedding(max_length=10)
    x = np.zeros((2, 4, 8), "float32")
    y = layer(x)                          # (2, 4, 8): rows 0..3 of P
    step = layer(x[:, :1], start=3)       # row 3 of P
    ```
    """

    def __init__(self, max_length, embeddings_initializer="uniform", embeddings_regularizer=None, **kwargs):
        super().__init__(**kwargs)
        self.max_length = _checks.check_positive_int(self, "max_length", max_length)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)
        self.embeddings_regularizer = keras.regularizers.get(embeddings_regularizer)
        self.supports_masking = True

    def build(self, input_shape):
        size = _checks.check_known_last_dim(self, "inputs", input_shape)
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_length, size),
            initializer=self.embeddings_initializer,
            regularizer=self.embeddings_regularizer,
        )
        self.built = True

    def call(self, inputs, start=0):
        if _checks.is_int(start):
            _checks.check_int(self, "start", start, 0, "a position")
        steps = ops.shape(inputs)[1]
        if _checks.is_int(start) and _checks.is_int(steps) and start + steps > self.max_length:
            raise ValueError(
                f"{_checks.owner_name(self)}: positions {start}..{start + steps - 1} go past `max_length` "
                f"{self.max_length}; got inputs of {steps} steps from `start` {start}."
            )
        positions = ops.cast(start, "int32") + ops.arange(steps, dtype="int32")
        positions = ops.minimum(positions, self.max_length - 1)
        return inputs + ops.cast(ops.take(self.embeddings, positions, axis=0), inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "max_length": self.max_length,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
            "embeddings_regularizer": keras.regularizers.serialize(self.embeddings_regularizer),
        }
