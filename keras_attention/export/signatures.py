"""One `Signature` per exported model: its named input specs, its named
outputs, and the functions that call it in Keras and when serving."""

import dataclasses
import re
from collections.abc import Mapping

import keras
import numpy as np

from keras_attention.decoders.runtime_options import broadcast_option, expectation
from keras_attention.export.report import ExportError
from keras_attention.export.token_inputs import checked_prefixes, model_prefixes


@dataclasses.dataclass
class Signature:
    """One exported model as a signature: its named, flat inputs and outputs.

    `export_model` makes one per model (`ExportContext.signatures`); a
    format's writer and runner (`formats`) may rely on these attributes:

    Attributes:
        name: the signature's name (`"serving_default"`, `"translate"`...).
        model: the Keras model exported (a float32 copy of a mixed-precision
            one). It is the reference the runners are compared with: write
            it, never change it.
        structure: the input structure `model` is called with; a list of
            arrays in signature order becomes that call's argument with
            `keras.tree.pack_sequence_as(structure, arrays)`.
        input_names, input_specs: the flat inputs in signature order, and
            their specs with dynamic batch and length (`tf.TensorSpec` on
            TensorFlow, `keras.InputSpec` on JAX and PyTorch).
        output_names, output_dtypes: the flat outputs in
            `keras.tree.flatten(model outputs)` order, and their dtype names;
            a runner returns {output name: array} under these names.
        options: {input name: bounds and default} of the decoders' run-time
            options among the inputs (empty for other models).
        prefixes: {input name: {"vocabulary", "max_length"}} of the inputs fed
            as a decoder's `target_prefix`: serving refuses ids outside the
            vocabulary and prefixes longer than an example's max_length; and
            {input name: {"kind", "vocabulary", "end_token"}} of those fed as
            its per-request `banned_sequences`, `stop_sequences` or
            `constraints` ("kind"; "most" the constraint slots), whose ids
            serving checks as `check_sequence_values` does.

    `call_keras(arrays)` gives Keras's outputs, {output name: numpy array};
    `serve(*tensors)` is the function the TensorFlow formats trace.

    Example:

    ```python
    import keras
    import numpy as np
    from keras_attention.export.signatures import _make_signature

    inputs = keras.Input((3,), name="features")
    model = keras.Model(inputs, keras.layers.Dense(2, name="scores")(inputs))
    signature = _make_signature("serving_default", model, None, "model")
    assert signature.input_names == ["features"] and signature.output_names == ["scores"]
    arrays = [np.ones((4, 3), "float32")]
    called = model(keras.tree.pack_sequence_as(signature.structure, arrays))
    np.testing.assert_allclose(signature.call_keras(arrays)["scores"], keras.ops.convert_to_numpy(called))
    ```
    """

    name: str
    model: object
    structure: object  # the input structure the model is called with
    input_names: list
    input_specs: list  # tf.TensorSpec, named
    output_names: list
    output_dtypes: list
    # {input name: bounds and default} of the decoders' run-time options
    options: dict = dataclasses.field(default_factory=dict)
    # {input name: {"vocabulary", "max_length"}} of the decoders' forced prefixes
    prefixes: dict = dataclasses.field(default_factory=dict)

    def call_keras(self, arrays):
        """{output name: numpy array} for a list of input arrays in signature order."""
        outputs = self.model(keras.tree.pack_sequence_as(self.structure, list(arrays)), training=False)
        return {
            name: np.asarray(keras.ops.convert_to_numpy(x))
            for name, x in zip(self.output_names, keras.tree.flatten(outputs))
        }

    def serve(self, *tensors):
        """The exported function: flat named inputs in, {output name: tensor} out.

        Run-time options are checked first: a bad value stops the SavedModel
        with an error naming the input (tf2onnx drops the assertions; ONNX
        serving checks its feeds in Python)."""
        if self.options:
            tensors = _checked_options(self, tensors)
        if self.prefixes:
            tensors = checked_prefixes(self, tensors)
        outputs = self.model(keras.tree.pack_sequence_as(self.structure, list(tensors)), training=False)
        return dict(zip(self.output_names, keras.tree.flatten(outputs)))


def _checked_options(signature, tensors):
    """`tensors`, the run-time option inputs behind assertions of their values."""
    import tensorflow as tf

    named = dict(zip(signature.input_names, tensors))
    others = [t for n, t in named.items() if n not in signature.options and len(t.shape) >= 1]
    batch = tf.shape(others[0])[0] if others else None
    assertions, counts = [], []
    for name, bounds in signature.options.items():
        value = named[name]
        count = tf.size(value)
        if batch is not None:
            fits = tf.reduce_any(tf.stack([tf.equal(count, 0), tf.equal(count, 1), tf.equal(count, batch)]))
            message = f"input `{name}` must hold 0 values (the default), 1 (every example) or one per example; got"
            counts.append(tf.debugging.Assert(fits, [message, count, "values for a batch of", batch]))
        valid = tf.math.is_finite(tf.cast(value, tf.float32))
        low = tf.cast(bounds["minimum"], value.dtype)
        valid &= tf.greater(value, low) if bounds.get("strict") else tf.greater_equal(value, low)
        if bounds.get("maximum") is not None:
            valid &= tf.less_equal(value, tf.cast(bounds["maximum"], value.dtype))
        message = f"input `{name}` must be {expectation(bounds)}; got"
        assertions.append(tf.debugging.Assert(tf.reduce_all(valid), [message, value], summarize=16))
    if batch is not None and "min_length" in signature.options and "max_length" in signature.options:
        with tf.control_dependencies(counts):  # the counts first: they make the rows
            low, high = (
                broadcast_option(named[n], signature.options[n]["default"], batch, "int32")
                for n in ("min_length", "max_length")
            )
            message = "input `min_length` must be below `max_length` (the end token needs a step); got"
            assertions.append(tf.debugging.Assert(tf.reduce_all(tf.less(low, high)), [message, low, "and", high]))
    with tf.control_dependencies(counts + assertions):
        return [tf.identity(t) if n in signature.options else t for n, t in named.items()]


def takes_options(layer):
    """Whether `layer` takes run-time options: it offers `option_specs()`
    ({option: bounds}), as the decoders (`SearchDecoder`) and
    `PointerNetwork` do; an input of a model named after one feeds it."""
    return callable(getattr(layer, "option_specs", None))


def model_options(model):
    """{option name: bounds} of the run-time options of the layers in
    `model` that take them (`takes_options`: the in-graph decoders, pointer
    networks); an input of that name feeds it."""
    found, owners = {}, {}

    def visit(layer):
        if takes_options(layer):  # an ensemble's members' own options are not used
            for name, bounds in layer.option_specs().items():
                if name in found and found[name] != bounds:
                    raise ExportError(
                        f"decoders {owners[name]!r} and {layer.name!r} both take a run-time `{name}`, with "
                        f"different defaults or bounds ({found[name]} and {bounds}); export them as separate "
                        "signatures."
                    )
                found[name], owners[name] = bounds, layer.name
            return
        for sublayer in getattr(layer, "layers", None) or []:
            visit(sublayer)

    visit(model)
    return found


def _spec_from(value, name, argument):
    """A named input spec: a `tf.TensorSpec` on TensorFlow (tf.function and
    tf2onnx take those), a `keras.InputSpec` on the other backends, whose
    exporters take Keras's own specs and where TensorFlow may be absent."""
    if type(value).__name__ == "TensorSpec":  # tf.TensorSpec, without importing TensorFlow for the check
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
    shape, dtype = [None if d is None else int(d) for d in shape], keras.backend.standardize_dtype(dtype)
    if keras.backend.backend() != "tensorflow":
        return keras.InputSpec(shape=shape, dtype=dtype, name=name)
    import tensorflow as tf

    return tf.TensorSpec(shape, tf.as_dtype(dtype), name=name)


def spec_shape(spec):
    """The shape of a `tf.TensorSpec` or `keras.InputSpec`, as a list (None where dynamic)."""
    return spec.shape.as_list() if hasattr(spec.shape, "as_list") else list(spec.shape)


def spec_dtype(spec):
    """The dtype name of a `tf.TensorSpec` or `keras.InputSpec`."""
    return keras.backend.standardize_dtype(getattr(spec.dtype, "name", spec.dtype))


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
            symbolic = [keras.KerasTensor(spec_shape(spec), dtype=spec_dtype(spec)) for spec in specs]
            output_struct = model.compute_output_spec(keras.tree.pack_sequence_as(structure, symbolic))
    output_names = _output_names(model, output_struct)
    output_dtypes = [keras.backend.standardize_dtype(t.dtype) for t in keras.tree.flatten(output_struct)]
    options = {n: bounds for n, bounds in model_options(model).items() if n in input_names}
    prefixes = model_prefixes(model, inputs[1]) if inputs is not None else {}
    return Signature(name, model, structure, input_names, specs, output_names, output_dtypes, options, prefixes)
