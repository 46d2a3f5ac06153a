"""Argument checks shared by the whole library (layers, cells, decoders, decoding, ...).

Every error names the layer (or function), the argument, what it received and
what was expected, so a user can fix the call without reading our source.
Numbers may be Python or NumPy scalars (`np.int64(8)`, `np.float32(0.1)`), as
Keras accepts them; the checks return them as Python `int` / `float`, which is
what a layer keeps and writes to its config (JSON has no NumPy types). Shape
checks run on static shapes only: they cost nothing inside a compiled graph,
and dimensions that are unknown until run time (None, or symbolic) are let
through.
"""

import math
import numbers
import weakref

import keras
import numpy as np

__all__ = [
    "check_bool",
    "check_fraction",
    "check_int",
    "check_number",
    "check_positive_int",
    "check_choice",
    "check_input_shapes",
    "check_known_last_dim",
    "check_mask_shape",
    "check_masks",
    "claim_sublayer",
    "concrete_values",
    "is_int",
    "owner_name",
    "resolve_layer",
    "same_dim",
    "static_shape",
]


def owner_name(owner):
    """A layer's class name, or the name of the function given as a string."""
    return owner if isinstance(owner, str) else type(owner).__name__


def static_shape(shape):
    """`shape` as a tuple of Python ints, None where unknown.

    A dimension that is not a plain (Python or NumPy) integer counts as
    unknown: a symbolic one (JAX's shape polymorphism under `jax.export` /
    jax2tf, a torch `SymInt`) refuses `int()`, and a static check cannot
    decide anything about it anyway.
    """
    return tuple(int(d) if is_int(d) else None for d in shape)


def concrete_values(value):
    """`value` as a NumPy array when its values are known now, else None.

    Known now: NumPy values and Python numbers or sequences, and any
    backend's eager tensor (a TensorFlow eager tensor, a JAX array, a torch
    tensor). Not known: a `keras.KerasTensor`, or a tensor being traced (a
    TensorFlow graph tensor, a JAX tracer under `jit` or `grad`), whose
    conversion to NumPy raises; checks on values skip those. No backend's
    attribute (such as TensorFlow's `.numpy`) decides it: JAX arrays have
    none, and a check keyed on one never ran there.
    """
    if value is None:
        return None
    if isinstance(value, (np.ndarray, numbers.Number, list, tuple)):
        return np.asarray(value)
    if isinstance(value, keras.KerasTensor):
        return None
    try:
        return np.asarray(keras.ops.convert_to_numpy(value))
    except (TypeError, ValueError, RuntimeError, AttributeError):
        # TensorFlow graph tensors raise NotImplementedError (a
        # RuntimeError), JAX tracers TracerArrayConversionError (a
        # TypeError).
        return None


def same_dim(a, b):
    """Whether two static dimensions can be equal (None matches anything)."""
    return a is None or b is None or a == b


def is_int(value):
    """A Python or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value):
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def check_bool(owner, argument, value):
    """`value` as a Python bool (NumPy bools included)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise ValueError(f"{owner_name(owner)}: `{argument}` must be True or False; got {value!r}.")


def check_fraction(owner, argument, value):
    """`value` as a float in [0, 1)."""
    if not _is_real(value) or not 0.0 <= value < 1.0:
        raise ValueError(f"{owner_name(owner)}: `{argument}` must be a number in [0, 1); got {value!r}.")
    return float(value)


def check_int(owner, argument, value, minimum, meaning="an integer", allow_none=False, maximum=None):
    """`value` as an int >= `minimum` (and <= `maximum` when given; or None when allowed)."""
    if value is None and allow_none:
        return None
    if is_int(value) and value >= minimum and (maximum is None or value <= maximum):
        return int(value)
    bounds = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
    expected = f"{meaning} {bounds}" + (" or None" if allow_none else "")
    raise ValueError(f"{owner_name(owner)}: `{argument}` must be {expected}; got {value!r}.")


def check_positive_int(owner, argument, value, allow_none=False):
    """`value` as an int > 0 (or None when allowed)."""
    if value is None and allow_none:
        return None
    if is_int(value) and value > 0:
        return int(value)
    expected = "a positive integer or None" if allow_none else "a positive integer"
    raise ValueError(f"{owner_name(owner)}: `{argument}` must be {expected}; got {value!r}.")


def check_number(owner, argument, value, minimum=None, strict=False, allow_none=False):
    """`value` as a finite float, `> minimum` with `strict`, else `>= minimum`.

    NaN and infinities are refused: compared with a bound they pass or fail
    silently, and in the maths downstream they turn every result into NaN.
    """
    if value is None and allow_none:
        return None
    valid = _is_real(value) and math.isfinite(value)
    if valid and minimum is not None:
        valid = value > minimum if strict else value >= minimum
    if valid:
        return float(value)
    expected = "a finite number"
    if minimum is not None:
        expected += f" {'>' if strict else '>='} {minimum:g}"
    if allow_none:
        expected += " or None"
    raise ValueError(f"{owner_name(owner)}: `{argument}` must be {expected}; got {value!r}.")


def resolve_layer(owner, argument, layer, accepts, expected):
    """`layer`, or the layer its config dict describes, when `accepts(layer)`.

    A layer given to another one arrives as a config dict when a saved model
    is loaded (`from_config`), and as the object otherwise; both are checked
    the same way. `expected` says what `accepts` wants, for the error.
    """
    if isinstance(layer, dict):
        layer = keras.saving.deserialize_keras_object(layer)
    if not accepts(layer):
        raise ValueError(f"{owner_name(owner)}: `{argument}` must be {expected}; got {layer!r}.")
    return layer


def claim_sublayer(owner, argument, layer):
    """Record that `owner` builds and runs `layer` (a score or attention layer).

    A second owner would build the layer again for its own shapes: new
    weights replace the ones the first owner trained (or no longer fit its
    shapes). Sharing is refused here, where the layer is given twice. The
    record is a weak reference: an owner that no longer exists holds nothing.
    """
    record = getattr(layer, "_keras_attention_owner", None)
    current = None if record is None else record()
    if current is not None and current is not owner:
        raise ValueError(
            f"{owner_name(owner)}: `{argument}` {layer.name!r} already belongs to "
            f"{type(current).__name__} {current.name!r}; one layer cannot serve two "
            f"owners (each would build its own weights into it). Give this one a new "
            f"{type(layer).__name__} (copy values over with `set_weights` if they are "
            "to start equal)."
        )
    layer._keras_attention_owner = weakref.ref(owner)


def check_choice(layer, argument, value, choices):
    if value not in choices:
        raise ValueError(
            f"{owner_name(layer)}: unknown `{argument}` {value!r}; expected one of {', '.join(repr(c) for c in choices)}."
        )


def check_input_shapes(layer, query_shape, value_shape, key_shape):
    query_shape, value_shape, key_shape = map(static_shape, (query_shape, value_shape, key_shape))
    if len(query_shape) not in (2, 3):
        raise ValueError(
            f"{owner_name(layer)}: `query` must have rank 2 (batch, dq) or 3 (batch, Tq, dq); got shape {query_shape}."
        )
    for argument, shape in (("value", value_shape), ("key", key_shape)):
        if len(shape) != 3:
            raise ValueError(f"{owner_name(layer)}: `{argument}` must have rank 3 (batch, Tv, d); got shape {shape}.")
    if not same_dim(key_shape[1], value_shape[1]):
        raise ValueError(
            f"{owner_name(layer)}: `key` and `value` must have the same length Tv; "
            f"got key shape {key_shape} and value shape {value_shape}."
        )
    batches = {query_shape[0], value_shape[0], key_shape[0]} - {None}
    if len(batches) > 1:
        raise ValueError(
            f"{owner_name(layer)}: `query`, `value` and `key` must have the same batch "
            f"size; got shapes {query_shape}, {value_shape} and {key_shape}."
        )


def check_known_last_dim(owner, argument, shape, when="when the layer is built"):
    """The last dimension of `shape` as an int; weights cannot be sized by a None."""
    shape = static_shape(shape)
    if not shape or shape[-1] is None:
        raise ValueError(
            f"{owner_name(owner)}: the last dimension of `{argument}` must be known"
            f"{' ' + when if when else ''}; got shape {shape}."
        )
    return shape[-1]


def check_mask_shape(layer, argument, mask, expected, meaning):
    shape = static_shape(mask.shape)
    if len(shape) != len(expected) or not all(map(same_dim, shape, expected)):
        raise ValueError(
            f"{owner_name(layer)}: `{argument}` must have shape {meaning} = {expected}; got shape {shape}."
        )


def check_masks(layer, query, value, query_mask, value_mask, attention_mask, causal):
    query_shape, value_shape = static_shape(query.shape), static_shape(value.shape)
    batch, length_v = value_shape[0], value_shape[1]
    single_query = len(query_shape) == 2
    if single_query and causal:
        raise ValueError(
            f"{owner_name(layer)}: `causal=True` needs a rank-3 query (batch, Tq, dq); got a query of shape {query_shape}."
        )
    if value_mask is not None:
        check_mask_shape(layer, "value_mask", value_mask, (batch, length_v), "(batch, Tv)")
    if query_mask is not None:
        meaning = "(batch,)" if single_query else "(batch, Tq)"
        check_mask_shape(layer, "query_mask", query_mask, query_shape[:-1], meaning)
    if attention_mask is not None:
        if single_query:
            expected, meaning = (batch, length_v), "(batch, Tv)"
        else:
            expected, meaning = (batch, query_shape[1], length_v), "(batch, Tq, Tv)"
        check_mask_shape(layer, "attention_mask", attention_mask, expected, meaning)
