"""A request's run-time options spelled out per example, for `Model.predict`.

A direct call takes one option value for a whole batch (`options=
{"temperature": [2.0]}`), or none; `Model.predict` does not: it slices every
input into batches of rows, so every input must have one row per example
(given one value for three rows, Keras fails inside its data adapter with an
AttributeError). `expand_options` writes each option out for every row, as
the decoder would have broadcast it, the seed included: one seed (or none)
for the batch becomes each row's own stream (`row_seeds(seed, row)`, the row
counted in the whole request, not in predict's slice), so predict returns
what the direct call does.
"""

import numpy as np

from keras_attention import _checks
from keras_attention.decoders.runtime_options import check_option_values
from keras_attention.decoding.hashed_random import row_seeds

__all__ = ["expand_options"]


def expand_options(decoder, inputs):
    """`inputs` with every run-time option of `decoder` as `(batch,)` values.

    Args:
        decoder: the `InferenceDecoder` (or `EnsembleDecoder`) whose
            `option_inputs()` the model takes.
        inputs: {input name: array}: the model's other inputs (each with the
            batch as its first axis) and any options, each one value, `(1,)`,
            empty or None (the default), or `(batch,)`.

    Returns:
        A new dict: the other inputs as given, every option `(batch,)` in its
        dtype (checked as a direct call checks them).
    """
    owner = _checks.owner_name(decoder)
    if not isinstance(inputs, dict):
        raise ValueError(f"{owner}: `inputs` must be a dict {{input name: array}}; got {type(inputs).__name__}.")
    options = set(decoder.runtime_options)
    rows = {name: np.shape(value)[0] for name, value in inputs.items() if name not in options and np.ndim(value)}
    if not rows or len(set(rows.values())) != 1:
        raise ValueError(
            f"{owner}: `inputs` must hold the model's other inputs with one batch size (their first axis); "
            f"got the sizes {rows}."
        )
    batch = next(iter(rows.values()))
    specs, defaults = decoder.option_specs(), decoder.option_defaults()
    expanded = {name: value for name, value in inputs.items() if name not in options}
    for name in decoder.runtime_options:
        given = inputs.get(name)
        values = np.zeros(0) if given is None else given
        values = check_option_values(f"{owner}: input", name, values, specs[name], batch)
        one = values.size <= 1
        values = np.full(batch, values[0] if values.size else defaults[name], specs[name]["dtype"]) if one else values
        if name == "seed" and one:  # what the decoder spreads over the rows
            values = np.asarray(row_seeds(values, np.arange(batch)), "int32")
        expanded[name] = values
    return expanded
