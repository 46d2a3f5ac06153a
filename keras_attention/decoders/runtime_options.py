"""Decoding options set per request: the table, their checks and their broadcast.

A `SearchDecoder` built with `runtime_options=("temperature", ...)` takes
those options at call time (`options={"temperature": t}`), one value for
every example or one per example, its constructor's values standing in for
the ones not given. The same table drives the checks in Keras (on concrete
values), in the exported SavedModel (assertions in the signature) and in
ONNX serving (`run_onnx`, `keras-attention-serve`), so a bad value gets the
same message everywhere, naming the option, the value and what was expected.

A value fed at run time is `(n,)`: `n = 0` means the default (an exported
signature cannot leave an input out, an empty tensor can stand for it),
`n = 1` one value for every example, `n = batch` one per example.
"""

import dataclasses
import numbers

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._checks import concrete_values
from keras_attention.decoding import processors, strategies
from keras_attention.decoding.hashed_random import spread_seed

__all__ = [
    "RuntimeOptionInputs",
    "FIXED_OPTIONS",
    "RUNTIME_OPTIONS",
    "RuntimeOption",
    "broadcast_option",
    "check_option_values",
    "check_group_values",
    "check_length_values",
    "check_prefix_values",
    "check_sequence_values",
    "check_runtime_options",
    "concrete_values",
    "expectation",
    "option_bounds",
    "request_values",
]


@dataclasses.dataclass(frozen=True)
class RuntimeOption:
    """One option a request may set: its dtype, the methods that read it and its bounds."""

    dtype: str
    methods: tuple
    minimum: float
    strict: bool = False
    maximum: object = None  # a number, "max_length" (the constructor's) or None
    meaning: str = ""


def _declared_options():
    """The table, built from the fields that the loop, each registered
    logits processor (every method reads them) and each registered strategy
    declare: a new control declares its fields in its own module."""
    methods = tuple(strategies.registered())
    processor_fields = [field for cls in processors.registered().values() for field in cls.runtime_fields]
    declared = [(field, methods) for field in (*strategies.LOOP_FIELDS, *processor_fields)]
    for name, strategy in strategies.registered().items():
        declared.extend((field, (name,)) for field in strategy.runtime_fields)
    fields, readers = {}, {}
    for field, methods in declared:
        # A field two strategies share (a subclass's) must be declared alike.
        if fields.setdefault(field.name, field) != field:
            raise ValueError(f"runtime options: {field.name!r} is declared twice, differently.")
        readers[field.name] = readers.get(field.name, ()) + methods
    return {
        name: RuntimeOption(field.dtype, readers[name], field.minimum, field.strict, field.maximum, field.meaning)
        for name, field in fields.items()
    }


RUNTIME_OPTIONS = _declared_options()

# Why the others cannot change per request.
FIXED_OPTIONS = {
    "start_token": "the first step's ids are a constant of the loop",
    "end_token": "the end test and the padding are constants of the loop",
    "beam_width": "the beams are the loop's tensor shapes",
    "num_hypotheses": "it sets the outputs' shapes",
    "num_groups": "the groups split the beams, the loop's tensor shapes",
    "max_constraints": "the constraint slots are the loop's tensor shapes and the outputs'",
    "num_alternatives": "the alternatives are the loop's tensor shapes and the outputs'",
    "method": "each method is another loop",
    "max_length_ratio": "set `max_length` per request instead",
    "max_length_offset": "set `max_length` per request instead",
    "suppress_tokens": "the `allowed_tokens` input already restricts ids per example",
    "banned_sequences": "the sequences are constants of the loop; per request, the call's `banned_sequences` input",
    "stop_sequences": "the sequences are constants of the loop; per request, the call's `stop_sequences` input",
    "early_stopping": "it changes the loop's condition",
    "length_convention": "it changes the score's bookkeeping",
    "length_penalty_form": "it changes the score's formula",
    "return_alignments": "it sets the outputs",
    "return_token_log_probs": "it sets the outputs",
}


def check_runtime_options(owner, names, method, seed):
    """`names` as a tuple of option names the decoder's `method` reads."""
    if names is None:
        return ()
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `runtime_options` must be a list of option names "
            f"(from {list(RUNTIME_OPTIONS)}); got {names!r}."
        )
    checked = []
    for name in names:
        if name in FIXED_OPTIONS:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `runtime_options` names {name!r}, which cannot change at run "
                f"time ({FIXED_OPTIONS[name]}); export one model per value."
            )
        if name not in RUNTIME_OPTIONS:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `runtime_options` names an unknown option {name!r}; "
                f"expected names from {list(RUNTIME_OPTIONS)}."
            )
        if method not in RUNTIME_OPTIONS[name].methods:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `runtime_options` names {name!r}, which method={method!r} does "
                f"not read (it is an option of {' and '.join(repr(m) for m in RUNTIME_OPTIONS[name].methods)})."
            )
        if name == "seed" and not _checks.is_int(seed):
            raise ValueError(
                f"{_checks.owner_name(owner)}: a run-time `seed` needs an integer `seed` (its default); "
                f"got seed={seed!r}."
            )
        if name in checked:
            raise ValueError(f"{_checks.owner_name(owner)}: `runtime_options` names {name!r} twice.")
        checked.append(name)
    return tuple(checked)


def expectation(bounds):
    """What a value of an option with these bounds must be, in words."""
    low = bounds["minimum"]
    high = bounds.get("maximum")
    if bounds["dtype"].startswith("int"):
        return f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    text = f"a finite number {'>' if bounds.get('strict') else '>='} {low:g}"
    return text + (f" and <= {high:g}" if high is not None else "")


def check_option_values(where, name, values, bounds, batch=None):
    """`values` as a 1-D NumPy array of the option's dtype, or a ValueError
    naming `where` (e.g. "input"), the option, the values and the bounds.

    Scalars become one value; `batch` (when known) checks the count: 0 (the
    default), 1 (every example) or one per example.
    """
    try:
        array = np.asarray(values)
    except ValueError:  # ragged nested lists
        array = None
    shown = np.asarray(values, dtype=object).tolist() if array is None else array.tolist()
    if array is None or array.dtype.kind not in "iuf" or array.ndim > 1:
        raise ValueError(
            f"{where} `{name}` must be a number or a list of numbers (one for every example, or one per "
            f"example); got {shown!r:.80}."
        )
    array = array.reshape(-1)
    if batch is not None and array.size not in (0, 1, batch):
        raise ValueError(
            f"{where} `{name}` must hold 0 values (the default), 1 (every example) or {batch} (one per "
            f"example, the batch); got {array.size}: {shown!r:.80}."
        )
    integer = bounds["dtype"].startswith("int")
    valid = np.isfinite(array.astype(np.float64)) if array.size else np.ones(0, bool)
    if integer:
        valid &= array == np.round(array)
    low, high = bounds["minimum"], bounds.get("maximum")
    valid &= array > low if bounds.get("strict") else array >= low
    if high is not None:
        valid &= array <= high
    if not valid.all():
        raise ValueError(f"{where} `{name}` must be {expectation(bounds)}; got {shown!r:.80}.")
    return array.astype(bounds["dtype"])


def check_length_values(where, values, specs):
    """With both lengths set per request: `min_length` below `max_length` for
    every example (`values`: the checked arrays given, the rest defaults)."""
    if "min_length" not in specs or "max_length" not in specs:
        return  # the bounds of the one run-time length already say it

    def rows(name):
        value = values.get(name)
        return np.asarray([specs[name]["default"]]) if value is None or value.size == 0 else value

    low, high = rows("min_length"), rows("max_length")
    if low.size == high.size or 1 in (low.size, high.size):
        if np.any(low >= high):
            raise ValueError(
                f"{where} `min_length` must be below `max_length` (the end token needs a step); got "
                f"min_length {low.tolist()} and max_length {high.tolist()}."
            )


def check_prefix_values(where, prefix, vocabulary, limits):
    """A forced prefix `(B, P)` (right-padded with -1) is refused, naming
    `where` (e.g. "input `target_prefix`"), when it holds an id outside the
    vocabulary of `vocabulary` ids (None: unknown) or forces more tokens on
    an example than its max_length (`limits`: one, or `(B,)`): it would
    decode to nothing, or be cut, silently. Keras (eagerly) and ONNX serving
    check with this; the SavedModel asserts the same."""
    prefix = np.asarray(prefix)
    if prefix.ndim != 2:
        return
    outside = (prefix < -1) | (prefix >= (np.inf if vocabulary is None else vocabulary))
    if outside.any():
        b, t = (int(i) for i in np.argwhere(outside)[0])
        top = "its size - 1" if vocabulary is None else vocabulary - 1
        raise ValueError(
            f"{where} holds the id {int(prefix[b, t])} on example {b}, outside the vocabulary: expected ids from 0 "
            f"to {top} (-1 pads); got the prefix row {prefix[b].tolist()}."
        )
    limits = np.asarray(limits).reshape(-1)
    if limits.size not in (1, len(prefix)):
        return  # a count the option checks refuse
    lengths = (prefix >= 0).sum(1)
    too_long = np.nonzero(lengths > np.broadcast_to(limits, lengths.shape))[0]
    if too_long.size:
        b = int(too_long[0])
        raise ValueError(
            f"{where} forces {int(lengths[b])} tokens on example {b}, more than its max_length "
            f"{int(np.broadcast_to(limits, lengths.shape)[b])}; got the prefix row {prefix[b].tolist()}."
        )


def check_sequence_values(where, table, vocabulary, end_token, batch=None, most=None):
    """Token sequences given per request, `(B, S, L)` ids with each sequence
    right-padded with -1, are refused, naming `where` (e.g. "input
    `banned_sequences`"), when one holds an id outside the vocabulary of
    `vocabulary` ids (None: unknown), the end token, or an id after its
    padding (it would match nothing, or not what was meant, silently), or
    when its rows are not the `batch` examples (when known) or it holds
    more than `most` sequences (a search's constraint slots). Keras
    (eagerly) and ONNX serving check with this; the SavedModel asserts the
    same."""
    table = np.asarray(table)
    if table.ndim != 3 or (batch is not None and len(table) != batch):
        rows = "batch" if batch is None else f"batch = {batch}"
        raise ValueError(
            f"{where} must be ({rows}, sequences, tokens) ids, each sequence right-padded with -1; got shape "
            f"{list(table.shape)}."
        )
    if most is not None and table.shape[1] > most:
        raise ValueError(
            f"{where} holds {table.shape[1]} sequences per example, more than the {most} the search was built "
            f"for (`max_constraints`); got shape {list(table.shape)}."
        )
    problems = (
        ((table < -1) | (table >= (np.inf if vocabulary is None else vocabulary)), "an id outside the vocabulary"),
        (table == end_token, f"the end token {end_token} (nothing follows it)"),
        ((table >= 0) & (np.cumsum(table < 0, axis=2) > 0), "an id after its -1 padding"),
    )
    for wrong, what in problems:
        if wrong.any():
            b, s, _ = (int(i) for i in np.argwhere(wrong)[0])
            top = "its size - 1" if vocabulary is None else vocabulary - 1
            raise ValueError(
                f"{where} holds {what} in sequence {s} of example {b}: expected ids from 0 to {top} but the end "
                f"token, right-padded with -1; got {table[b, s].tolist()}."
            )


def check_group_values(where, groups, constraints_shape):
    """`constraint_groups` are refused, naming `where`, unless they are one
    group number >= 0 per phrase of constraints of `constraints_shape`
    (`(B, C, L)`; None: unknown): misaligned, they would pair phrases with
    other phrases' groups, silently."""
    groups = np.asarray(groups)
    shape = None if constraints_shape is None else tuple(int(d) for d in constraints_shape[:2])
    if (shape is not None and groups.shape != shape) or groups.ndim != 2 or (groups < 0).any():
        expected = "(batch, phrases)" if shape is None else f"(batch, phrases) = {shape}"
        raise ValueError(
            f"{where} must be {expected} group numbers >= 0, one per phrase of the constraints; got shape "
            f"{list(groups.shape)}: {groups.tolist()!r:.120}."
        )


def option_bounds(name, default, max_length):
    """The JSON-able bounds of option `name` for a decoder of `max_length`,
    with its default: what exports record and serving checks."""
    option = RUNTIME_OPTIONS[name]
    maximum = {"max_length": max_length, "below max_length": max_length - 1}.get(option.maximum, option.maximum)
    return {
        "dtype": option.dtype,
        "default": default,
        "minimum": option.minimum,
        "strict": option.strict,
        "maximum": maximum,
    }


def broadcast_option(value, default, batch, dtype):
    """`(batch,)` values of an option: the defaults when `value` is None or
    empty, its one value for every example, or its `batch` values.

    `default`: one number, or `(batch,)` tensor of one per example."""
    defaults = ops.full((batch,), default, dtype) if isinstance(default, numbers.Number) else default
    if value is None:
        return ops.cast(defaults, dtype)
    value = ops.reshape(ops.cast(value, dtype), (-1,))
    # [value ; defaults]: no value reads the defaults from 0 on, one value
    # sits at 0 for every example, a batch of values fills 0..batch-1.
    padded = ops.concatenate([value, ops.cast(defaults, dtype)], axis=0)
    index = ops.where(ops.equal(ops.shape(value)[0], 1), 0, ops.arange(batch, dtype="int32"))
    return ops.take(padded, index, axis=0)


def request_values(owner, options, batch, names, specs, defaults):
    """{run-time option: `(batch,)` tensor} for a call's `options` (a value,
    `(1,)`, `(batch,)`, empty or None each) of a layer taking the run-time
    options `names` (`specs`: their bounds, `defaults`: their values when not
    given). Unknown names and values known now (an eager call) out of their
    bounds are refused, naming `owner`; exports check their inputs."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `options` must be a dict {{option: value}}; got {options!r:.80}."
        )
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `options` sets {unknown}, which are not among its "
            f"`runtime_options` {list(names)} (given at construction)."
        )
    checked = {}
    known_batch = batch if isinstance(batch, int) else None
    where = f"{_checks.owner_name(owner)}: option"
    for name, value in options.items():
        array = None if value is None else concrete_values(value)
        if array is not None:
            checked[name] = check_option_values(where, name, array, specs[name], known_batch)
    check_length_values(where, checked, specs)
    values = {
        name: broadcast_option(options.get(name), default, batch, RUNTIME_OPTIONS[name].dtype)
        for name, default in defaults.items()
    }
    if "seed" in values:  # one seed (or the default) for the batch: a stream per row
        values["seed"] = spread_seed(options.get("seed"), values["seed"], batch)
    return values


class RuntimeOptionInputs:
    """What a layer taking run-time options offers an export (a `SearchDecoder`,
    a `PointerNetwork`): it defines `runtime_options` (the names),
    `option_defaults()` and `max_length`."""

    def option_specs(self):
        """{run-time option: {"dtype", "default", "minimum", "strict", "maximum"}}:
        what an export records for each option input and serving checks."""
        return {name: option_bounds(name, default, self.max_length) for name, default in self.option_defaults().items()}

    def option_inputs(self):
        """{option: keras.Input} for each run-time option: optional `(batch,)`
        inputs named after the options, for a functional model that an
        export serves (`layer(inputs, options=layer.option_inputs())`)."""
        return {
            name: keras.Input((), dtype=RUNTIME_OPTIONS[name].dtype, name=name, optional=True)
            for name in self.runtime_options
        }

    def _option_values(self, options, batch):
        """{run-time option: `(batch,)` tensor}, from the call's `options`
        (a value, `(1,)`, `(batch,)`, empty or None each) and the defaults."""
        return request_values(self, options, batch, self.runtime_options, self.option_specs(), self.option_defaults())
