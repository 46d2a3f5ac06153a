"""The inputs parity is measured on: the caller's sample batches, or
generated ones (right-padded ids, masks and floats of several shapes)."""

from collections.abc import Mapping

import keras
import numpy as np

from keras_attention.export.signatures import _model_inputs, spec_dtype, spec_shape
from keras_attention.export.vocabulary import _is_text, encode_strings


def _embedding_sizes(model):
    """{id(input tensor): input_dim} for Embedding layers fed directly by a model input."""
    sizes, smallest = {}, None
    for layer in getattr(model, "layers", []):
        if not isinstance(layer, keras.layers.Embedding):
            continue
        smallest = layer.input_dim if smallest is None else min(smallest, layer.input_dim)
        # Inbound nodes are Keras internals; they only sharpen the guess of a valid id range.
        for node in getattr(layer, "_inbound_nodes", []):
            for tensor in getattr(node, "input_tensors", []):
                key = id(tensor)
                sizes[key] = min(sizes.get(key, layer.input_dim), layer.input_dim)
    return sizes, smallest


def _generated_batches(signature, shapes, rng):
    """Random inputs for each (batch, length): ids with right padding, normal floats, length masks."""
    inputs = _model_inputs(signature.model)
    tensors = [tensor for _, tensor in inputs[1]] if inputs else [None] * len(signature.input_specs)
    sizes, smallest = _embedding_sizes(signature.model)
    batches = []
    for batch, length in shapes:
        # One length per row shared by every input, so ids, masks and features agree.
        lengths = rng.integers(1, length + 1, size=batch)
        lengths[rng.integers(batch)] = length  # the padded length is really used
        arrays = []
        for spec, tensor in zip(signature.input_specs, tensors):
            if spec.name in signature.options:
                # The default: empty in the first batch, its one value after.
                bounds = signature.options[spec.name]
                arrays.append(np.array([bounds["default"]] if batches else [], bounds["dtype"]))
                continue
            shape = [
                batch if axis == 0 and d is None else (length if d is None else d)
                for axis, d in enumerate(spec_shape(spec))
            ]
            dynamic = len(shape) >= 2 and spec_shape(spec)[1] is None
            rows = lengths if shape[0] == batch else np.full(shape[0], length)  # a fixed batch size
            padding = np.arange(shape[1])[None, :] >= rows[:, None] if dynamic else None
            if spec_dtype(spec) == "string":
                raise ValueError(
                    f"input {spec.name!r} of signature {signature.name!r} takes strings, which the export cannot "
                    "make up to verify it with: pass `sample_inputs` ({input name: array}) holding its strings."
                )
            dtype = np.dtype(spec_dtype(spec))
            if dtype.kind == "b":
                value = np.broadcast_to(
                    (~padding).reshape(padding.shape + (1,) * (len(shape) - 2)) if dynamic else np.ones(shape, bool),
                    shape,
                ).copy()
            elif dtype.kind in "iu":
                high = sizes.get(id(tensor), smallest or 10)
                value = rng.integers(1, max(high, 2), size=shape).astype(dtype)
                if dynamic:
                    value[padding] = 0
            else:
                value = rng.normal(size=shape).astype(dtype)
                if dynamic:
                    value[padding] = 0
            arrays.append(value)
        batches.append(arrays)
    return batches


def _sample_batches(signature, sample_inputs, vocabulary):
    """The caller's batches (list of {input name: array}) that feed every input of `signature`.

    With a vocabulary, text values (strings) are tokenised as `run_onnx` will do.
    """
    if isinstance(sample_inputs, Mapping):
        if signature.name not in sample_inputs:
            raise ValueError(
                f"`sample_inputs` is keyed by signature but has no entry for {signature.name!r}; keys: {sorted(sample_inputs)}."
            )
        candidates = sample_inputs[signature.name]
    else:
        candidates = sample_inputs
    if isinstance(candidates, Mapping):
        candidates = [candidates]
    batches = []
    for batch in candidates:
        if not isinstance(batch, Mapping):
            raise ValueError(
                f"`sample_inputs` must be a list of {{input name: array}} dicts; got an entry {type(batch).__name__}."
            )
        if all(name in batch or name in signature.options for name in signature.input_names):
            arrays = []
            for name, spec in zip(signature.input_names, signature.input_specs):
                # A run-time option left out takes its default (no values).
                value = batch.get(name, [])
                if spec_dtype(spec) == "string":  # the model reads the strings itself (e.g. a StringLookup)
                    arrays.append(np.asarray(value, dtype=object))
                    continue
                if _is_text(value):
                    if vocabulary is None:
                        raise ValueError(f"`sample_inputs`: input {name!r} is text; pass `vocabulary` to tokenise it.")
                    value = encode_strings(value, vocabulary)
                array = np.asarray(value, dtype=spec_dtype(spec))
                arrays.append(array.reshape(-1) if name in signature.options else array)  # a scalar: one value
            batches.append(arrays)
    if not batches:
        raise ValueError(
            f"`sample_inputs` has no batch with every input of signature {signature.name!r} "
            f"(expected keys {signature.input_names})."
        )
    return batches


def batches_function(sample_inputs, vocabulary, shapes, seed):
    """signature -> its verification batches: `sample_inputs`' when given,
    else generated ones (one generator for all signatures, in their order)."""
    rng = np.random.default_rng(seed)

    def batches_for(signature):
        if sample_inputs is not None:
            return _sample_batches(signature, sample_inputs, vocabulary)
        return _generated_batches(signature, shapes, rng)

    return batches_for
