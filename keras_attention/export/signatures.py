"""One `Signature` per exported model: its named input specs, its named
outputs, and the functions that call it in Keras and when serving."""

import dataclasses
import re
from collections.abc import Mapping

import keras
import numpy as np


@dataclasses.dataclass
class Signature:
    """One exported model as a signature: its named, flat inputs and outputs."""

    name: str
    model: object
    structure: object  # the input structure the model is called with
    input_names: list
    input_specs: list  # tf.TensorSpec, named
    output_names: list
    output_dtypes: list

    def call_keras(self, arrays):
        """{output name: numpy array} for a list of input arrays in signature order."""
        outputs = self.model(keras.tree.pack_sequence_as(self.structure, list(arrays)), training=False)
        return {
            name: np.asarray(keras.ops.convert_to_numpy(x))
            for name, x in zip(self.output_names, keras.tree.flatten(outputs))
        }

    def serve(self, *tensors):
        """The exported function: flat named inputs in, {output name: tensor} out."""
        outputs = self.model(keras.tree.pack_sequence_as(self.structure, list(tensors)), training=False)
        return dict(zip(self.output_names, keras.tree.flatten(outputs)))


def _spec_from(value, name, argument):
    import tensorflow as tf

    if isinstance(value, tf.TensorSpec):
        shape, dtype = value.shape.as_list(), value.dtype.name
    elif isinstance(value, (keras.InputSpec, keras.KerasTensor)):
        shape, dtype = value.shape, value.dtype
    elif isinstance(value, (tuple, list)) and len(value) == 2:
        shape, dtype = value
    else:
        raise ValueError(
            f"`{argument}`: each entry must be a tf.TensorSpec, keras.InputSpec, KerasTensor or (shape, dtype); got {value!r}."
        )
    if shape is None or dtype is None:
        raise ValueError(f"`{argument}`: input {name!r} needs a shape and a dtype; got shape={shape}, dtype={dtype}.")
    return tf.TensorSpec(
        [None if d is None else int(d) for d in shape], tf.as_dtype(keras.backend.standardize_dtype(dtype)), name=name
    )


def _model_inputs(model):
    """(structure, [(name, KerasTensor)]) for functional models; None for subclassed ones."""
    try:
        structure = model.input
    except (AttributeError, ValueError):
        # A Sequential model built from a keras.Input has `inputs` but no `input`.
        inputs = getattr(model, "inputs", None)
        if not inputs or not all(isinstance(t, keras.KerasTensor) for t in inputs):
            return None
        structure = inputs[0] if len(inputs) == 1 else list(inputs)
    named = []
    for path, tensor in keras.tree.flatten_with_path(structure):
        # Dict inputs are fed by key, whatever the Input layer was named.
        name = path[-1] if path and isinstance(path[-1], str) else tensor.name
        named.append((name, tensor))
    return structure, named


def _output_names(model, output_struct):
    """One unique name per flat output: dict keys, else the output layers' names."""
    flat = keras.tree.flatten_with_path(output_struct)
    layer_names = list(getattr(model, "output_names", None) or [])
    if not layer_names and isinstance(model, keras.Sequential) and model.layers:
        layer_names = [model.layers[-1].name]
    names = []
    for index, (path, _) in enumerate(flat):
        parts = []
        for element in path:
            if isinstance(element, str):
                parts.append(element)
            elif not parts and index < len(layer_names):
                # A list position says nothing; the layer that produced it does.
                parts.append(layer_names[index])
            else:
                parts.append(str(element))
        if not parts:
            parts = [layer_names[index] if index < len(layer_names) else f"output_{index}"]
        names.append(re.sub(r"[^A-Za-z0-9_.]", "_", "_".join(parts)))
    unique, seen = [], {}
    for name in names:
        count = seen.get(name, 0)
        seen[name] = count + 1
        unique.append(name if count == 0 else f"{name}_{count}")
    return unique


def _make_signature(name, model, input_signature, argument):
    inputs = _model_inputs(model)
    if inputs is None:
        if input_signature is None:
            raise ValueError(
                f"`{argument}` is not a functional model, so its inputs are unknown: pass `input_signature` "
                "(a list of keras.InputSpec/tf.TensorSpec, or {input name: (shape, dtype)})."
            )
        items = (
            list(input_signature.items())
            if isinstance(input_signature, Mapping)
            else [(getattr(spec, "name", None) or f"input_{i}", spec) for i, spec in enumerate(input_signature)]
        )
        specs = [_spec_from(spec, input_name, "input_signature") for input_name, spec in items]
        # Placeholders only: the call gets one tensor, or a list of them.
        structure = list(range(len(specs))) if len(specs) > 1 else 0
    else:
        structure, named = inputs
        specs = [_spec_from(tensor, input_name, argument) for input_name, tensor in named]
        if input_signature is not None:
            if isinstance(input_signature, Mapping):
                unknown = set(input_signature) - {n for n, _ in named}
                if unknown:
                    raise ValueError(
                        f"`input_signature` names {sorted(unknown)} are not inputs of {argument}; its inputs: {[n for n, _ in named]}."
                    )
                specs = [
                    _spec_from(input_signature[s.name], s.name, "input_signature") if s.name in input_signature else s
                    for s in specs
                ]
            else:
                if len(input_signature) != len(specs):
                    raise ValueError(
                        f"`input_signature` has {len(input_signature)} entries but {argument} has {len(specs)} inputs "
                        f"({[n for n, _ in named]})."
                    )
                specs = [_spec_from(spec, s.name, "input_signature") for spec, s in zip(input_signature, specs)]
    input_names = [spec.name for spec in specs]
    if len(set(input_names)) != len(input_names):
        raise ValueError(
            f"`{argument}` has duplicate input names {input_names}; give its keras.Input layers distinct names."
        )
    try:
        output_struct = model.output
    except (AttributeError, ValueError):
        outputs = getattr(model, "outputs", None)
        if isinstance(model, keras.Sequential) and outputs:
            output_struct = outputs[0] if len(outputs) == 1 else list(outputs)
        else:
            symbolic = [keras.KerasTensor(spec.shape.as_list(), dtype=spec.dtype.name) for spec in specs]
            output_struct = model.compute_output_spec(keras.tree.pack_sequence_as(structure, symbolic))
    output_names = _output_names(model, output_struct)
    output_dtypes = [keras.backend.standardize_dtype(t.dtype) for t in keras.tree.flatten(output_struct)]
    return Signature(name, model, structure, input_names, specs, output_names, output_dtypes)
