"""Argument checks shared by the layers.

Every error names the layer, the argument, what it received and what was
expected, so a user can fix the call without reading our source. Checks run on
static shapes only: they cost nothing inside a compiled graph, and dimensions
that are unknown until run time (None) are let through.
"""

__all__ = [
    "check_fraction",
    "check_positive_int",
    "check_choice",
    "check_input_shapes",
    "check_mask_shape",
    "check_masks",
]


def _name(layer):
    return type(layer).__name__


def _shape(shape):
    return tuple(None if d is None else int(d) for d in shape)


def _same(a, b):
    return a is None or b is None or a == b


def check_fraction(layer, argument, value):
    if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(
            f"{_name(layer)}: `{argument}` must be a number in [0, 1); got {value!r}."
        )


def check_positive_int(layer, argument, value, allow_none=False):
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        expected = "a positive integer or None" if allow_none else "a positive integer"
        raise ValueError(f"{_name(layer)}: `{argument}` must be {expected}; got {value!r}.")


def check_choice(layer, argument, value, choices):
    if value not in choices:
        raise ValueError(
            f"{_name(layer)}: unknown `{argument}` {value!r}; expected one of "
            f"{', '.join(repr(c) for c in choices)}."
        )


def check_input_shapes(layer, query_shape, value_shape, key_shape):
    query_shape, value_shape, key_shape = map(_shape, (query_shape, value_shape, key_shape))
    if len(query_shape) not in (2, 3):
        raise ValueError(
            f"{_name(layer)}: `query` must have rank 2 (batch, dq) or 3 "
            f"(batch, Tq, dq); got shape {query_shape}."
        )
    for argument, shape in (("value", value_shape), ("key", key_shape)):
        if len(shape) != 3:
            raise ValueError(
                f"{_name(layer)}: `{argument}` must have rank 3 (batch, Tv, d); "
                f"got shape {shape}."
            )
    if not _same(key_shape[1], value_shape[1]):
        raise ValueError(
            f"{_name(layer)}: `key` and `value` must have the same length Tv; "
            f"got key shape {key_shape} and value shape {value_shape}."
        )
    batches = {query_shape[0], value_shape[0], key_shape[0]} - {None}
    if len(batches) > 1:
        raise ValueError(
            f"{_name(layer)}: `query`, `value` and `key` must have the same batch "
            f"size; got shapes {query_shape}, {value_shape} and {key_shape}."
        )


def check_mask_shape(layer, argument, mask, expected, meaning):
    shape = _shape(mask.shape)
    if len(shape) != len(expected) or not all(map(_same, shape, expected)):
        raise ValueError(
            f"{_name(layer)}: `{argument}` must have shape {meaning} = {expected}; "
            f"got shape {shape}."
        )


def check_masks(layer, query, value, query_mask, value_mask, attention_mask, causal):
    query_shape, value_shape = _shape(query.shape), _shape(value.shape)
    batch, length_v = value_shape[0], value_shape[1]
    single_query = len(query_shape) == 2
    if single_query and causal:
        raise ValueError(
            f"{_name(layer)}: `causal=True` needs a rank-3 query (batch, Tq, dq); "
            f"got a query of shape {query_shape}."
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
