"""The dtypes attention scores and probabilities are computed in, shared by the layers."""

import keras


def softmax_dtype(dtype):
    """float32, or float64 for float64 input.

    float16/bfloat16 logits are promoted so that `exp` cannot overflow and
    the masking constant is representable.
    """
    return "float64" if keras.backend.standardize_dtype(dtype) == "float64" else "float32"


def score_dtype(dtype):
    """float32 for float16, else `dtype` itself.

    A float16 dot product overflows (its largest value is 65504) once inputs
    reach a few hundred: `q . k` of two 4-vectors of 300s is 360000, and a
    softmax of inf is NaN. Scaling before the product only moves the limit.
    bfloat16 has float32's range, so it keeps its speed.
    """
    return "float32" if keras.backend.standardize_dtype(dtype) == "float16" else dtype


def to_score_dtype(*tensors):
    """`tensors` cast to the score dtype of the first one's dtype."""
    dtype = score_dtype(tensors[0].dtype)
    return tuple(keras.ops.cast(t, dtype) for t in tensors)
