"""Uniform draws that are a pure function of (seed, step, token): the same in every runtime.

`sampling_search` draws its Gumbel noise from `hashed_uniform`: integer
arithmetic only (floor division and remainder, no bitwise op, which ONNX
lacks before opset 18), so Keras, the SavedModel and onnxruntime compute the
same bits, and a request's sample depends on its seed alone, not on its
batch or its place in it. A stateful `keras.random.SeedGenerator` gives
neither: its state advances per call (inside a decoding loop that leaks
tracers on JAX and does not compile with XLA) and ONNX has no equivalent of
its random ops.

Everything is int32 with no intermediate at or above 2**31: JAX has no int64
unless x64 is enabled, and a wrapped signed overflow is not defined
everywhere. Products of 31-bit values go through 11-bit limbs (`_mulmod`);
the result is the same function as 31-bit modular arithmetic in int64.

One seed for several rows gives each row its own stream: row `b` draws with
`row_seeds(seed, b) = (seed + b * 0x2545F491) mod 2**31` (row 0 with the
seed itself), so one seed for a batch does not repeat one sample per row.
Exports trace under `fixed_draws()`: a decoder's constructor seed is then
used as that seed for the batch, not a stateful generator's draw (a random op
ONNX cannot express, whose state a served graph could not advance anyway).
"""

import contextlib
import threading

from keras import ops

from keras_attention import _checks

__all__ = ["decoder_seed", "fixed_draws", "hashed_uniform", "row_seeds", "spread_seed"]

# Values live in [0, 2**31).
_MODULUS = 2**31
_HALF = 2**16
_LIMB = 2**11
_KEY = (0x42B2AE35, 0x05EBCA6B)  # odd constants of the 32-bit hash finalisers, cut to 31 bits
_STEP = 0x1E3779B9  # spreads consecutive steps and tokens apart before mixing
_ROW = 0x2545F491  # spreads the rows that share one seed apart (odd: no two rows of 2**31 meet)
_FIXED = threading.local()


def _limbs(x):
    return ops.mod(x, _LIMB), ops.mod(ops.floor_divide(x, _LIMB), _LIMB), ops.floor_divide(x, _LIMB * _LIMB)


def _mulmod(x, y):
    """`x * y mod 2**31` for int32 `0 <= x, y < 2**31`, every intermediate
    below 2**31: x = x2 2**22 + x1 2**11 + x0 (x2 < 2**9), and the limb
    products whose weight reaches 2**31 vanish."""
    x0, x1, x2 = _limbs(x)
    y0, y1, y2 = _limbs(y)
    low = x0 * y0  # < 2**22
    middle = ops.mod(x0 * y1 + x1 * y0, 2**20)  # weight 2**11
    high = ops.mod(x0 * y2 + x1 * y1 + x2 * y0, 2**9)  # weight 2**22
    middle = ops.mod(ops.floor_divide(low, _LIMB) + middle + high * _LIMB, 2**20)
    return middle * _LIMB + ops.mod(low, _LIMB)


def _addmod(a, b):
    """`(a + b) mod 2**31` for int32 `0 <= a, b < 2**31`, without overflow."""
    wrapped = a - (_MODULUS - 1 - b) - 1  # a + b - 2**31, in [-2**31, 2**31)
    below = ops.cast(ops.less(wrapped, 0), wrapped.dtype)
    return wrapped + below * (_MODULUS - 1) + below


def _rotate(x):
    """The 31 bits of `x` rotated by 16: the high bits come down."""
    return ops.mod(x, _HALF) * (_MODULUS // _HALF) + ops.floor_divide(x, _HALF)


def _mix(x):
    """Scramble values in [0, 2**31): four rounds of square, add a key,
    rotate, as Widynski's counter-based "Squares" generator
    (arXiv:2004.06278), in 31 bits. Measured on 4000 seeds x 50 tokens:
    uniform (Kolmogorov-Smirnov), no structure between neighbouring tokens,
    seeds or steps (10 x 10 chi-squared), and Gumbel-max draws with the
    target frequencies."""
    y = _mulmod(x, _KEY[0])
    z = _addmod(y, _KEY[1])
    for add in (y, z, y, z):
        x = _rotate(_addmod(_mulmod(x, x), add))
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
    seeds = ops.cast(seeds, "int32")
    time = ops.cast(time, "int32")
    row = _mix(_addmod(_mix(seeds), _mulmod(time + 1, _STEP)))
    tokens = ops.arange(vocabulary, dtype="int32")
    cell = _mix(_addmod(ops.expand_dims(row, 1), ops.expand_dims(_mulmod(tokens + 1, _STEP), 0)))
    bits = ops.floor_divide(cell, 256)  # 23 bits
    return (ops.cast(bits, "float32") + 0.5) / float(2**23)


def row_seeds(seeds, rows):
    """The seed row `rows` draws with when `seeds` was given for a batch:
    `(seeds + rows * 0x2545F491) mod 2**31`, int32 (row 0: the seed itself).

    Example:

    ```python
    keras_attention.decoding.row_seeds(np.array([3, 3, 3]), np.arange(3))
    # [3, 625341588, 1250683173]
    ```
    """
    return _addmod(ops.cast(seeds, "int32"), _mulmod(ops.cast(rows, "int32"), _ROW))


def spread_seed(value, seeds, batch):
    """`(batch,)` seeds for a request's `seed` option: `seeds` are its value
    broadcast to the batch (`broadcast_option`), `value` what the request
    gave (None, `()`, `(0,)`, `(1,)` or `(batch,)`). Given per row, each row
    keeps its own seed (its sample depends on it alone); one seed for the
    batch, or none (the default), gives row `b` `row_seeds(seed, b)`."""
    count = 0 if value is None else ops.size(ops.reshape(value, (-1,)))
    rows = ops.arange(batch, dtype="int32")
    return row_seeds(seeds, ops.where(ops.less_equal(count, 1), rows, 0))


@contextlib.contextmanager
def fixed_draws():
    """Within it (an export's tracing and its parity check), `decoder_seed`
    gives a sampling decoder's constructor seed instead of its generator.

    Example:

    ```python
    with keras_attention.decoding.hashed_random.fixed_draws():
        pass  # decoders traced here draw from their integer seed
    ```
    """
    previous = getattr(_FIXED, "on", False)
    _FIXED.on = True
    try:
        yield
    finally:
        _FIXED.on = previous


def decoder_seed(owner, seed, generator):
    """What a decoder built with `seed` passes its sampling search when the
    request sets no seed: its `generator` (new draws per call), or, under
    `fixed_draws()`, the integer `seed` itself (each row `row_seeds(seed, b)`)."""
    if not getattr(_FIXED, "on", False):
        return generator
    if not _checks.is_int(seed):
        raise ValueError(
            f"{_checks.owner_name(owner)}: an exported sampling decoder draws from its `seed`, which must be "
            f"an integer (or make `seed` a run-time option); got seed={seed!r}."
        )
    return seed
