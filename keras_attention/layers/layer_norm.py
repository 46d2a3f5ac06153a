"""Keras's LayerNormalization, computed so that it also exports over empty sequences.

`ExportableLayerNormalization` keeps `keras.layers.LayerNormalization`'s
weights (`gamma`, `beta`), options and numerics (at least float32 inside), so
checkpoints and keras-hub weights load unchanged. Only the moments differ in
how they are written: as sums divided by the feature size instead of
`moments`' means. tf2onnx rewrites a mean over the last axis of a rank-3
tensor into `GlobalAveragePool` (and a post-norm graph into `Reshape`s around
it), and onnxruntime refuses either on a batch of sequences of 0 steps; a sum
stays a `ReduceSum`, which reduces an empty axis as NumPy does.
"""

import keras
from keras import ops

__all__ = ["ExportableLayerNormalization"]


@keras.saving.register_keras_serializable(package="keras_attention")
class ExportableLayerNormalization(keras.layers.LayerNormalization):
    """Layer normalisation over the last axis, exportable over empty sequences.

    y = gamma * (x - mean) / sqrt(var + epsilon) + beta, the mean and variance
    over the last axis (Ba et al. 2016, arXiv:1607.06450): what
    `keras.layers.LayerNormalization(axis=-1)` computes, with the same weights.

    Shapes: any `(..., d)` in, the same shape out.

    Example:

    >>> import numpy as np
    >>> norm = ExportableLayerNormalization(epsilon=1e-5)
    >>> y = keras.ops.convert_to_numpy(norm(np.array([[1.0, 2.0, 3.0]], "float32")))
    >>> np.round(y, 3).tolist()
    [[-1.225, 0.0, 1.225]]
    """

    def __init__(self, **kwargs):
        axis = kwargs.pop("axis", -1)
        if axis not in (-1, [-1], (-1,)):
            raise ValueError(
                f"ExportableLayerNormalization normalises the last axis only; received axis={axis!r}, "
                "expected -1 (use keras.layers.LayerNormalization for other axes)"
            )
        if kwargs.get("rms_scaling"):
            raise ValueError(
                "ExportableLayerNormalization does not take rms_scaling=True; received rms_scaling=True, "
                "expected False (use keras.layers.LayerNormalization for RMS scaling)"
            )
        super().__init__(axis=-1, **kwargs)

    def call(self, inputs):
        if keras.backend.backend() == "torch":
            # PyTorch's fused kernel: faster, and nothing exports from torch through tf2onnx.
            return super().call(inputs)
        # At least float32 inside, as Keras's layer norm, for half-precision training.
        dtype = keras.backend.result_type(inputs.dtype, "float32")
        x = ops.cast(inputs, dtype)
        size = ops.cast(ops.shape(x)[-1], dtype)
        mean = ops.sum(x, axis=-1, keepdims=True) / size
        centered = x - mean
        variance = ops.sum(ops.square(centered), axis=-1, keepdims=True) / size
        outputs = centered * ops.rsqrt(variance + self.epsilon)
        if self.gamma is not None:
            outputs = outputs * ops.cast(self.gamma, dtype)
        if self.beta is not None:
            outputs = outputs + ops.cast(self.beta, dtype)
        return ops.cast(outputs, self.compute_dtype)
