"""Rotary position embedding (RoPE, Su et al. 2021): queries and keys rotated by their position."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.layers.positional_sinusoidal import position_indices

__all__ = ["RotaryPositionEmbedding"]


@keras.saving.register_keras_serializable(package="keras_attention")
class RotaryPositionEmbedding(keras.layers.Layer):
    """Rotates each pair of features by an angle proportional to the position (RoPE).

    With the features split in halves `x = [x1 ; x2]` of size `d/2` and
    `theta_i = max_wavelength^(-2i/d)`, position `p = start + t`:

        output = [x1 cos(p theta) - x2 sin(p theta) ; x2 cos(p theta) + x1 sin(p theta)]

    Applied to projected queries and keys, the score `q_m . k_n` depends on
    the positions only through `m - n`: relative positions, with no weights.
    The Transformer layers of this library apply it inside attention
    (`use_rotary=True`) after `MultiHeadAttention.project_query` /
    `project_key`, so the attention's weights keep Keras's layout; a cached
    decoder stores the rotated keys and rotates each new query and key with
    its step index as `start`. Half precision is rotated in float32 and cast back.

    Paper: Su et al., "RoFormer: Enhanced Transformer with Rotary Position
    Embedding", arXiv:2104.09864 (the split-halves pairing of GPT-NeoX).

    Shapes: inputs `(B, T, ..., d)` with `d` even (e.g. projected heads
    `(B, T, H, d)`); start: an int or int32 scalar; output: the inputs' shape.

    Args:
        max_wavelength: the base of the angles (10000 in the paper).

    Example:

    ```python
    rotary = keras_attention.RotaryPositionEmbedding()
    heads = np.random.rand(2, 5, 4, 8).astype("float32")   # (B, T, H, d)
    rotated = rotary(heads)                                # (2, 5, 4, 8), norms kept
    one = rotary(heads[:, 2:3], start=2)                   # equals rotated[:, 2:3]
    ```
    """

    def __init__(self, max_wavelength=10000.0, **kwargs):
        super().__init__(**kwargs)
        self.max_wavelength = _checks.check_number(self, "max_wavelength", max_wavelength, minimum=0, strict=True)
        self.supports_masking = True

    def call(self, inputs, start=0):
        size = _checks.check_known_last_dim(self, "inputs", inputs.shape, when="when called")
        if size % 2:
            raise ValueError(
                f"{_checks.owner_name(self)}: the last dimension of `inputs` must be even (features rotate "
                f"in pairs); got shape {tuple(inputs.shape)}."
            )
        half = size // 2
        positions = position_indices(self, inputs, start)
        inverse_frequency = ops.power(
            ops.cast(self.max_wavelength, "float32"), -2.0 * ops.cast(ops.arange(half), "float32") / size
        )
        angles = ops.expand_dims(positions, 1) * ops.expand_dims(inverse_frequency, 0)  # (T, d/2)
        # (T, d/2) -> (1, T, 1, ..., d/2): one angle per step and pair, shared by the middle axes.
        shape = (1, ops.shape(inputs)[1]) + (1,) * (len(inputs.shape) - 3) + (half,)
        # Half precision rotates in float32; float32 and float64 in their own.
        dtype = keras.backend.standardize_dtype(inputs.dtype)
        dtype = "float32" if dtype in ("float16", "bfloat16") else dtype
        cos = ops.cast(ops.reshape(ops.cos(angles), shape), dtype)
        sin = ops.cast(ops.reshape(ops.sin(angles), shape), dtype)
        x = ops.cast(inputs, dtype)
        x1, x2 = x[..., :half], x[..., half:]
        rotated = ops.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
        return ops.cast(rotated, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_wavelength": self.max_wavelength}
