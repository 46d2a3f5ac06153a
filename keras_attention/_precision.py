"""The dtype attention probabilities are computed in, shared by the layers."""

import keras


def softmax_dtype(dtype):
    """float32, or float64 for float64 input.

    float16/bfloat16 logits are promoted so that `exp` cannot overflow and
    the masking constant is representable.
    """
    return "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"
