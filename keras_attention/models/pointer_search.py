"""A pointer network's search requests: run-time options and the constraints on positions.

`PointerNetwork.decode` runs one of `keras_attention.decoding`'s search
strategies over its step; these turn its `options` into the strategy's
run-time values and wrap the step in the constraints that apply to a
vocabulary of source positions (`constrained_step`: a minimum length,
allowed positions, a forced prefix).
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import strategies
from keras_attention.decoding.constraints import constrained_step
from keras_attention.decoding.strategies import BeamSearch, GreedySearch

__all__ = ["END", "constrain", "pointer_strategy", "split_options"]

# Pointer id 0 is the end of the output; id n >= 1 points at input element n
# (1-based, as in the paper). Id 0 is also the start: the decoder's first
# input is the learned start vector stored at row 0 of the pointed-at table.
END = 0


def pointer_strategy(search, beam_width, length_penalty_weight):
    """The search strategy: `search` (a strategy, name or config) when given,
    else the keyword form: greedy, or beam search when `beam_width` is set."""
    if search is not None:
        return strategies.get(search)
    if beam_width is None:
        return GreedySearch()
    return BeamSearch(beam_width, length_penalty_weight)


def split_options(strategy, options, batch, min_length):
    """`(runtime, length_limits, min_length)` from `decode`'s `options`
    {name: one number or `(batch,)` values}: the strategy's run-time fields,
    `max_length` as per-example limits and `min_length` (else the given)."""
    options = dict(options or {})
    known = {field.name for field in strategy.runtime_fields} | {"max_length", "min_length"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"PointerNetwork: `options` sets {unknown}, which {strategy!r} does not read; "
            f"expected names from {sorted(known)}."
        )

    def rows(value, dtype):
        if _checks.is_int(value) or (isinstance(value, float)):
            return value  # one value: a constant, checked by the search
        return ops.broadcast_to(ops.reshape(ops.cast(value, dtype), (-1,)), (batch,))

    length_limits = None
    if "max_length" in options:
        length_limits = ops.broadcast_to(ops.reshape(ops.cast(options.pop("max_length"), "int32"), (-1,)), (batch,))
    if "min_length" in options:
        min_length = rows(options.pop("min_length"), "int32")
    dtypes = {field.name: field.dtype for field in strategy.runtime_fields}
    return {name: rows(value, dtypes[name]) for name, value in options.items()}, length_limits, min_length


def constrain(step_fn, state, max_length, min_length=0, allowed_positions=None, prefix=None):
    """`(step, state)` obeying the constraints given (the step itself when none is)."""
    if _checks.is_int(min_length) and not min_length and allowed_positions is None and prefix is None:
        return step_fn, state
    return constrained_step(
        step_fn,
        state,
        END,
        min_length=min_length,
        allowed_tokens=allowed_positions,
        prefix=prefix,
        max_length=max_length,
    )
