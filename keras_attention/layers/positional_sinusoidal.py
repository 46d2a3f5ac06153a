"""Sinusoidal position encoding (Vaswani et al. 2017), added to a sequence from a start position."""

import keras
from keras import ops

from keras_attention import _checks

__all__ = ["SinusoidalPositionEncoding", "position_indices"]


def position_indices(owner, inputs, start):
    """The positions `start, ..., start + T - 1` of the `T` steps of `inputs (B, T, ...)`, float32.

    `start` is a Python int or an int scalar tensor (a cached decoder's step
    index); a negative Python int is refused here."""
    if _checks.is_int(start):
        _checks.check_int(owner, "start", start, 0, "a position")
    steps = ops.shape(inputs)[1]
    return ops.cast(start, "float32") + ops.cast(ops.arange(steps), "float32")


def sinusoid_angles(positions, size, max_wavelength):
    """`(T, size)` angles `p / max_wavelength^(2 floor(j/2) / size)`."""
    pair = ops.cast(ops.arange(size) // 2, "float32")
    inverse_frequency = ops.power(ops.cast(max_wavelength, "float32"), -2.0 * pair / size)
    return ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequency, 0)


@keras.saving.register_keras_serializable(package="keras_attention")
class SinusoidalPositionEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal position encoding to a sequence (Vaswani et al. 2017).

    For position `p` (counted from `start`) and feature `j` of `d`:

        PE[p, 2i]     = sin(p / max_wavelength^(2i / d))
        PE[p, 2i + 1] = cos(p / max_wavelength^(2i / d))
        output[b, t] = inputs[b, t] + PE[start + t]

    No weights: any length and any `start` (a cached decoder passes its step
    index so one step gets the encoding of its position). The encoding is
    computed in float32 and cast to the inputs' dtype; a Keras mask passes
    through.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: inputs `(B, T, d)`; start: an int or int32 scalar; output `(B, T, d)`.

    Args:
        max_wavelength: the longest wavelength (10000 in the paper).

    Example:

    ```python
    layer = keras_attention.SinusoidalPositionEncoding()
    x = np.zeros((2, 5, 8), "float32")
    encoded = layer(x)                     # (2, 5, 8): the encoding itself
    step = layer(x[:, :1], start=3)        # position 3 only: equals encoded[:, 3:4]
    ```
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = _checks.check_number(self, "max_wavelength", max_wavelength, minimum=0, strict=True)
        self.supports_masking = True

    def call(self, inputs, start=0):
        size = _checks.check_known_last_dim(self, "inputs", inputs.shape, when="when called")
        angles = sinusoid_angles(position_indices(self, inputs, start), size, self.max_wavelength)
        even = ops.equal(ops.arange(size) % 2, 0)
        encoding = ops.where(even, ops.sin(angles), ops.cos(angles))
        return inputs + ops.cast(encoding, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength}
