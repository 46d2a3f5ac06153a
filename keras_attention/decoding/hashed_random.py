"""Uniform draws that are a pure function of (seed, step, token): the same in every runtime.

`sampling_search` with per-example seeds draws its Gumbel noise from
`hashed_uniform`: integer arithmetic only (products of numbers below 2**31
in int64, floor division and remainder; no bitwise op, which ONNX lacks
before opset 18), so Keras, the SavedModel and onnxruntime compute the same
bits, and a request's sample depends on its seed alone, not on its batch or
its place in it. A stateful `keras.random.SeedGenerator` gives neither: its
state advances per call and ONNX has no equivalent of its random ops.
"""

from keras import ops

__all__ = ["hashed_uniform"]

# Values live in [0, 2**31): a square or a product of two of them stays
# below 2**62, exact in int64 in every runtime.
_MODULUS = 2**31
_HALF = 2**16
_KEY = (0x42B2AE35, 0x05EBCA6B)  # odd constants of the 32-bit hash finalisers, cut to 31 bits
_STEP = 0x1E3779B9  # spreads consecutive steps and tokens apart before mixing


def _rotate(x):
    """The 31 bits of `x` rotated by 16: the high bits come down."""
    return ops.mod(x, _HALF) * (_MODULUS // _HALF) + ops.floor_divide(x, _HALF)


def _mix(x):
    """Scramble int64 values: four rounds of square, add a key, rotate, as
    Widynski's counter-based "Squares" generator (arXiv:2004.06278), in 31
    bits. Measured on 4000 seeds x 50 tokens: uniform (Kolmogorov-Smirnov),
    no structure between neighbouring tokens, seeds or steps (10 x 10
    chi-squared), and Gumbel-max draws with the target frequencies."""
    x = ops.mod(x, _MODULUS)
    y = ops.mod(x * _KEY[0], _MODULUS)
    z = ops.mod(y + _KEY[1], _MODULUS)
    for add in (y, z, y, z):
        x = _rotate(ops.mod(x * x + add, _MODULUS))
    return x


def hashed_uniform(seeds, time, vocabulary):
    """`(batch, vocabulary)` float32 draws in (0, 1): row `b`, column `v` a
    hash of `(seeds[b], time, v)`.

    Each value is `(k + 0.5) / 2**23` for an integer `0 <= k < 2**23` (exact
    in float32, never 0 or 1). Rows with the same seed at the same step get
    the same draws, whatever else is in the batch.

    Args:
        seeds: `(batch,)` integers >= 0.
        time: scalar int, the decoding step.
        vocabulary: int, the number of columns.

    Example:

    ```python
    u = keras_attention.decoding.hashed_uniform(np.array([7, 7, 8]), 0, 5)
    # rows 0 and 1 are equal; row 2 differs; every value in (0, 1)
    ```
    """
    seeds = ops.cast(seeds, "int64")
    time = ops.cast(time, "int64")
    row = _mix(_mix(seeds) + (time + 1) * _STEP)
    tokens = ops.arange(vocabulary, dtype="int64")
    cell = _mix(ops.expand_dims(row, 1) + ops.expand_dims(tokens + 1, 0) * _STEP)
    bits = ops.floor_divide(cell, 256)  # 23 bits
    return (ops.cast(bits, "float32") + 0.5) / float(2**23)
