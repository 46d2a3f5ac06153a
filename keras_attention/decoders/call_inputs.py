"""What a decoder's call brings beside the memory, checked when its values
are known (an eager call): the forced prefix, the per-request token
sequences and the constraints. Traced, serving checks them instead
(`keras_attention.export.signatures`)."""

import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention.decoders.runtime_options import (
    check_group_values,
    check_prefix_values,
    check_sequence_values,
    concrete_values,
)

__all__ = ["check_prefix", "check_token_inputs"]


def check_prefix(decoder, target_prefix, max_length):
    """A forced prefix longer than its example's max_length, or holding
    an id outside the vocabulary (-1 pads), is refused when known now (an
    eager call): it would be cut, or decode to nothing, silently."""
    prefix = None if target_prefix is None else concrete_values(target_prefix)
    if prefix is None:
        return
    limits = decoder.max_length
    if max_length is not None:
        given = concrete_values(max_length)
        if given is None:
            return
        if np.asarray(given).size:
            limits = given
    check_prefix_values(f"{_checks.owner_name(decoder)}: `target_prefix`", prefix, decoder.vocabulary_size(), limits)


def check_token_inputs(decoder, sequences, phrases, memory):
    """Refuse, when their values are known now (an eager call), per-request
    sequences or constraints holding ids they cannot (`check_sequence_values`)."""
    batch = concrete_values(ops.shape(memory)[0])
    batch = None if batch is None else int(batch)
    tables = dict(sequences)
    if "constraints" in phrases:
        tables["constraints"] = phrases["constraints"]
    for name, value in tables.items():
        table = concrete_values(value)
        if table is None:  # traced: serving checks it
            continue
        where = f"{_checks.owner_name(decoder)}: `{name}`"
        most = getattr(decoder, "max_constraints", None) if name == "constraints" else None
        check_sequence_values(where, table, decoder.vocabulary_size(), decoder.end_token, batch, most)
    groups = concrete_values(phrases.get("constraint_groups"))
    if groups is not None:
        if "constraints" not in phrases:
            raise ValueError(f"{_checks.owner_name(decoder)}: `constraint_groups` needs `constraints`.")
        shape = tuple(phrases["constraints"].shape)
        check_group_values(
            f"{_checks.owner_name(decoder)}: `constraint_groups`", groups, None if None in shape else shape
        )
