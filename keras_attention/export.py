"""Export trained models, decode loops included, to SavedModel and ONNX with verified parity.

`export_model` writes one directory:

    OUT_DIR/
      saved_model/      one SavedModel, one named signature per exported model
      model.onnx        the `serving_default` signature
      <name>.onnx       every other signature (e.g. `translate.onnx`)
      vocabulary.json   optional: token lists for `run_onnx` (strings in, strings out)
      report.json       the parity report

and checks every artifact against Keras before it puts the directory in
place: the ONNX files pass `onnx.checker` and load in onnxruntime, and every
output of every signature, in both formats, is compared with the Keras model
on inputs of several batch sizes and lengths (padding included).

TensorFlow, tf2onnx, onnx and onnxruntime (the `onnx` extra) are imported
inside the functions that need them, so importing this module is cheap.
"""

import argparse
import dataclasses
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import keras
import numpy as np

from keras_attention.text import Vocabulary

__all__ = [
    "ExportError",
    "ExportReport",
    "ParityRow",
    "decode_ids",
    "encode_strings",
    "export_model",
    "load_vocabulary",
    "main",
    "run_onnx",
    "translate_texts",
]

FORMATS = ("saved_model", "onnx")
DEFAULT_SIGNATURE = "serving_default"
DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 18  # tf2onnx 1.17 refuses 19 and above
DEFAULT_SHAPES = ((2, 5), (3, 8), (1, 3))  # (batch, length) of the generated inputs
REPORT_FILE = "report.json"
VOCABULARY_FILE = "vocabulary.json"
SAVED_MODEL_DIR = "saved_model"

_LOW_PRECISION = {"mixed_float16", "mixed_bfloat16", "float16", "bfloat16"}
_CUDNN_LAYERS = {"LSTM", "GRU"}  # Keras layers that pick cuDNN kernels on a GPU
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# What to do instead, for the TensorFlow ops this stack is known not to convert.
_OP_HINTS = {
    "Bitcast": "`ops.argmax`/`ops.argmin` on floats emit it; use `ops.top_k(x, 1)`",
    "BitwiseAnd": "`ops.argmax`/`ops.argmin` on floats emit it; use `ops.top_k(x, 1)`",
    "XlaDynamicUpdateSlice": "`ops.slice_update` emits it; use `ops.scatter_update` or a masked `ops.where`",
    "CudnnRNNV3": "cuDNN LSTM/GRU: build the RNN layers with `use_cudnn=False`",
    "CudnnRNN": "cuDNN LSTM/GRU: build the RNN layers with `use_cudnn=False`",
    "CudnnRNNV2": "cuDNN LSTM/GRU: build the RNN layers with `use_cudnn=False`",
}


class ExportError(ValueError):
    """An export that did not convert or did not match Keras.

    `report` holds the partial `ExportReport` (parity rows measured so far)
    when there is one; nothing was left on disk.
    """

    def __init__(self, message, report=None):
        super().__init__(message)
        self.report = report


# --------------------------------------------------------------------- report


@dataclasses.dataclass
class ParityRow:
    """One output of one signature in one format, compared with Keras."""

    signature: str
    format: str
    output: str
    dtype: str  # the Keras dtype, or "keras->exported" when the artifact's differs (a failure)
    max_abs_diff: float  # over every verification batch; inf for a shape or NaN mismatch
    exact: bool  # integer and boolean outputs must be equal, not close
    tolerance: float
    ok: bool


@dataclasses.dataclass
class ExportReport:
    """What `export_model` wrote and how closely each artifact matches Keras.

    `paths`: {"saved_model": dir, "onnx": {signature: file}, "report": file,
    "vocabulary": file (when given)}; `signatures`: {name: {"inputs": {name:
    {"shape", "dtype"}}, "outputs": {...}}}; `parity`: one `ParityRow` per
    signature, format and output; `batches`: the input shapes verified;
    `timings_s`: seconds per stage; `notes`: silent changes such as the float32
    copy of a mixed-precision model.
    """

    directory: str
    formats: list
    opset: int
    paths: dict = dataclasses.field(default_factory=dict)
    signatures: dict = dataclasses.field(default_factory=dict)
    parity: list = dataclasses.field(default_factory=list)
    batches: dict = dataclasses.field(default_factory=dict)
    timings_s: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)
    versions: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self):
        return all(row.ok for row in self.parity)

    def max_abs_diff(self, format, output, signature=DEFAULT_SIGNATURE):
        """The recorded difference of one output, e.g. `report.max_abs_diff("onnx", "ids")`."""
        for row in self.parity:
            if (row.signature, row.format, row.output) == (signature, format, output):
                return row.max_abs_diff
        known = sorted({(r.signature, r.format, r.output) for r in self.parity})
        raise KeyError(f"no parity row for signature={signature!r}, format={format!r}, output={output!r}; rows: {known}")

    def to_dict(self):
        data = dataclasses.asdict(self)
        data["ok"] = self.ok
        for row in data["parity"]:
            # JSON has no infinity: a mismatch in shape or NaN placement reads as null.
            if not np.isfinite(row["max_abs_diff"]):
                row["max_abs_diff"] = None
        return data

    def to_json(self, path=None):
        """The report as a JSON string; also written to `path` when given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def table(self):
        """The parity rows as a plain-text table."""
        header = ("signature", "format", "output", "dtype", "max |diff|", "tolerance", "ok")
        rows = [
            (
                row.signature,
                row.format,
                row.output,
                row.dtype,
                f"{row.max_abs_diff:.3g}",
                "exact" if row.exact else f"{row.tolerance:g}",
                "yes" if row.ok else "NO",
            )
            for row in self.parity
        ]
        widths = [max(len(str(line[i])) for line in [header, *rows]) for i in range(len(header))]
        lines = ["  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]]
        lines.insert(1, "  ".join("-" * width for width in widths))
        return "\n".join(lines)

    def markdown(self):
        """A Markdown table, one row per signature and output, one column per format (max |diff|).

        The README's layer x format coverage table is this, for a model with
        one output per layer.
        """
        formats = list(dict.fromkeys(row.format for row in self.parity))
        cells = {}
        for row in self.parity:
            value = "exact" if row.exact and row.ok else f"{row.max_abs_diff:.1e}"
            cells.setdefault((row.signature, row.output), {})[row.format] = f"{value} {'ok' if row.ok else 'FAIL'}"
        several = len({signature for signature, _ in cells}) > 1
        lines = [
            "| " + " | ".join(["output", *formats]) + " |",
            "|" + "---|" * (len(formats) + 1),
        ]
        for (signature, output), by_format in cells.items():
            label = f"{signature}/{output}" if several else output
            lines.append("| " + " | ".join([f"`{label}`", *(by_format.get(f, "-") for f in formats)]) + " |")
        return "\n".join(lines)

    def __str__(self):
        return self.table()


# ------------------------------------------------------------ model handling


def _load_keras_file(path, argument):
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"`{argument}`: no such file: {str(path)!r} (expected a .keras model file).")
    if path.is_dir() or path.suffix != ".keras":
        raise ValueError(f"`{argument}` must be a .keras model file; got {str(path)!r}.")
    try:
        # safe_mode refuses Lambda layers' pickled code: loading a file must not run it.
        return keras.saving.load_model(path, safe_mode=True)
    except Exception as error:
        raise ValueError(
            f"`{argument}`: {str(path)!r} could not be loaded as a Keras model "
            f"(corrupt or not a .keras archive, or an unregistered custom layer): {type(error).__name__}: {error}"
        ) from error


def _as_models(model):
    """{signature name: keras.Model}, from a model, a .keras path, or a mapping of them."""
    if isinstance(model, Mapping):
        if not model:
            raise ValueError("`model` mapping is empty; expected {signature name: model}.")
        models = {}
        for name, value in model.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"`model`: signature names must be identifiers (letters, digits, _); got {name!r}.")
            models[name] = _as_model(value, f"model[{name!r}]")
        return models
    return {DEFAULT_SIGNATURE: _as_model(model, "model")}


def _as_model(value, argument):
    if isinstance(value, (str, os.PathLike)):
        value = _load_keras_file(value, argument)
    if not isinstance(value, keras.Model):
        raise ValueError(f"`{argument}` must be a keras.Model or a path to a .keras file; got {type(value).__name__}.")
    if not value.built:
        raise ValueError(f"`{argument}` has not been built; call it once or build it before exporting.")
    return value


def _rewrite_config(config, changes, disable_cudnn):
    """A copy of a serialized model with float32 policies (and no cuDNN when asked)."""
    if isinstance(config, list):
        return [_rewrite_config(item, changes, disable_cudnn) for item in config]
    if not isinstance(config, dict):
        return config
    if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and isinstance(config.get("config"), dict):
        name = config["config"].get("name")
        if name in _LOW_PRECISION:
            changes.add(f"dtype policy {name} -> float32")
            return {**config, "config": {**config["config"], "name": "float32"}}
    if (
        disable_cudnn
        and config.get("class_name") in _CUDNN_LAYERS
        and isinstance(config.get("config"), dict)
        and config["config"].get("use_cudnn") is not False
    ):
        # get_config leaves `use_cudnn` out; the constructor still takes it.
        changes.add("use_cudnn=False (a GPU is present and cuDNN RNN ops do not convert)")
        config = {**config, "config": {**config["config"], "use_cudnn": False}}
    result = {}
    for key, value in config.items():
        if key == "dtype" and isinstance(value, str) and value in _LOW_PRECISION:
            changes.add(f"dtype policy {value} -> float32")
            value = "float32"
        elif key == "use_cudnn" and disable_cudnn and value is not False:
            # Layers that expose the choice themselves (e.g. PointerNetwork) pass it on to their RNNs.
            changes.add("use_cudnn=False (a GPU is present and cuDNN RNN ops do not convert)")
            value = False
        else:
            value = _rewrite_config(value, changes, disable_cudnn)
        result[key] = value
    return result


def _gpu_present():
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def _exportable_copy(model, argument, notes):
    """The model itself, or a float32 (and cuDNN-free on GPU) rebuild with the same weights.

    Mixed float16 exports with ~1e-3 error and mixed bfloat16 gives an invalid
    ONNX graph, and on a GPU LSTM/GRU trace to CudnnRNNV3, which tf2onnx cannot
    convert: rebuilding from the config with those settings changed avoids all three.
    """
    disable_cudnn = _gpu_present()
    config = keras.saving.serialize_keras_object(model)
    changes = set()
    rewritten = _rewrite_config(config, changes, disable_cudnn)
    if not changes:
        return model
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        # The model is already in memory, built by the caller's own code.
        copy = keras.saving.deserialize_keras_object(rewritten, safe_mode=False)
    except Exception as error:
        raise ExportError(
            f"`{argument}` needs a float32/cuDNN-free copy for export ({'; '.join(sorted(changes))}) "
            f"but could not be rebuilt from its config: {type(error).__name__}: {error}. "
            "Give every custom layer a complete get_config, or export a float32 model."
        ) from error
    finally:
        keras.config.set_dtype_policy(previous)
    weights, targets = model.get_weights(), copy.weights
    if len(weights) != len(targets) or any(tuple(w.shape) != tuple(v.shape) for w, v in zip(weights, targets)):
        raise ExportError(
            f"`{argument}`: the rebuilt float32 copy has weights {[tuple(v.shape) for v in targets]} "
            f"but the model has {[tuple(w.shape) for w in weights]}; cannot copy the weights."
        )
    copy.set_weights([np.asarray(w).astype(v.dtype) for w, v in zip(weights, targets)])
    notes.append(f"{argument}: exported from a rebuilt copy: {'; '.join(sorted(changes))}; parity is against that copy.")
    return copy


@dataclasses.dataclass
class _Signature:
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
        return {name: np.asarray(keras.ops.convert_to_numpy(x)) for name, x in zip(self.output_names, keras.tree.flatten(outputs))}

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
    return tf.TensorSpec([None if d is None else int(d) for d in shape], tf.as_dtype(keras.backend.standardize_dtype(dtype)), name=name)


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
        items = list(input_signature.items()) if isinstance(input_signature, Mapping) else [
            (getattr(spec, "name", None) or f"input_{i}", spec) for i, spec in enumerate(input_signature)
        ]
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
                specs = [_spec_from(input_signature[s.name], s.name, "input_signature") if s.name in input_signature else s for s in specs]
            else:
                if len(input_signature) != len(specs):
                    raise ValueError(
                        f"`input_signature` has {len(input_signature)} entries but {argument} has {len(specs)} inputs "
                        f"({[n for n, _ in named]})."
                    )
                specs = [_spec_from(spec, s.name, "input_signature") for spec, s in zip(input_signature, specs)]
    input_names = [spec.name for spec in specs]
    if len(set(input_names)) != len(input_names):
        raise ValueError(f"`{argument}` has duplicate input names {input_names}; give its keras.Input layers distinct names.")
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
    return _Signature(name, model, structure, input_names, specs, output_names, output_dtypes)


# ------------------------------------------------------------ sample inputs


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
            shape = [batch if axis == 0 and d is None else (length if d is None else d) for axis, d in enumerate(spec.shape.as_list())]
            dynamic = len(shape) >= 2 and spec.shape.as_list()[1] is None
            rows = lengths if shape[0] == batch else np.full(shape[0], length)  # a fixed batch size
            padding = np.arange(shape[1])[None, :] >= rows[:, None] if dynamic else None
            dtype = spec.dtype.as_numpy_dtype
            if spec.dtype.is_bool:
                value = np.broadcast_to(
                    (~padding).reshape(padding.shape + (1,) * (len(shape) - 2)) if dynamic else np.ones(shape, bool), shape
                ).copy()
            elif spec.dtype.is_integer:
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
            raise ValueError(f"`sample_inputs` must be a list of {{input name: array}} dicts; got an entry {type(batch).__name__}.")
        if all(name in batch for name in signature.input_names):
            arrays = []
            for name, spec in zip(signature.input_names, signature.input_specs):
                value = batch[name]
                if _is_text(value):
                    if vocabulary is None:
                        raise ValueError(f"`sample_inputs`: input {name!r} is text; pass `vocabulary` to tokenise it.")
                    value = encode_strings(value, vocabulary)
                arrays.append(np.asarray(value, dtype=spec.dtype.as_numpy_dtype))
            batches.append(arrays)
    if not batches:
        raise ValueError(
            f"`sample_inputs` has no batch with every input of signature {signature.name!r} "
            f"(expected keys {signature.input_names})."
        )
    return batches


# ------------------------------------------------------------------- parity


def _difference(got, want):
    """Max absolute difference; inf when shapes or NaN/inf positions differ."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    if want.dtype.kind in "biu" or got.dtype.kind in "biu":
        return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want)
    same_special = (np.isnan(got) & np.isnan(want)) | (got == want)
    if not (finite | same_special).all() or not (np.isfinite(got) | same_special).all():
        return float("inf")
    return float(np.max(np.abs(np.where(finite, got - want, 0.0))))


def _record(report, signature, format, expected, actual, atol):
    for name, dtype in zip(signature.output_names, signature.output_dtypes):
        exact = dtype.startswith(("int", "uint", "bool"))
        diff = max(_difference(got[name], want[name]) for got, want in zip(actual, expected))
        exported = keras.backend.standardize_dtype(np.asarray(actual[0][name]).dtype)
        tolerance = 0.0 if exact else atol
        # A consumer reading int64 where Keras gave int32 is broken too, however equal the values.
        ok = diff <= tolerance and exported == dtype
        shown = dtype if exported == dtype else f"{dtype}->{exported}"
        report.parity.append(ParityRow(signature.name, format, name, shown, diff, exact, tolerance, ok))


def _check_parity(report):
    failures = [row for row in report.parity if not row.ok]
    if failures:
        listed = "; ".join(
            f"{row.format} signature {row.signature!r} output {row.output!r}: max |diff| {row.max_abs_diff:.3g} "
            f"(allowed {'0, exact' if row.exact else row.tolerance})" + (f", dtype {row.dtype}" if "->" in row.dtype else "")
            for row in failures
        )
        raise ExportError(f"export does not match Keras: {listed}. Nothing was written.\n{report.table()}", report)


# --------------------------------------------------------------------- ONNX


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _unconvertible_nodes(graph):
    """(op type, node name) of nodes no ONNX schema knows, in the graph and its loop/branch bodies."""
    import onnx

    found = []
    for node in graph.node:
        if node.domain in ("", "ai.onnx") and not onnx.defs.has(node.op_type, node.domain):
            found.append((node.op_type, node.name))
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                found += _unconvertible_nodes(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    found += _unconvertible_nodes(subgraph)
    return found


def _conversion_error(signature, opset, unconverted, messages, cause=None):
    ops = {}
    for op, node in unconverted:
        ops.setdefault(op, []).append(node)
    for message in messages:
        match = re.match(r"Tensorflow op \[(.*): (.*)\] is not supported", message)
        if match:
            ops.setdefault(match.group(2), []).append(match.group(1))
    if ops:
        described = "; ".join(
            f"{op} (node {sorted(set(nodes))[0]}{', ...' if len(set(nodes)) > 1 else ''})"
            + (f": {_OP_HINTS[op]}" if op in _OP_HINTS else "")
            for op, nodes in sorted(ops.items())
        )
        text = f"signature {signature.name!r}: TensorFlow op(s) with no ONNX conversion at opset {opset}: {described}."
    else:
        detail = "; ".join(messages[-3:]) or (f"{type(cause).__name__}: {cause}" if cause else "unknown error")
        text = f"signature {signature.name!r}: ONNX conversion at opset {opset} failed: {detail}"
    return ExportError(text + " Nothing was written.")


def _name_dynamic_axes(model_proto, signature):
    """Readable names for the unknown axes: `batch` and `<input>_length`, instead of `unk__12`."""
    for value in model_proto.graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                dim.dim_param = "batch" if axis == 0 else (f"{value.name}_length" if axis == 1 else f"{value.name}_dim{axis}")
    for value in model_proto.graph.output:
        dims = value.type.tensor_type.shape.dim
        if len(dims) and not dims[0].HasField("dim_value"):
            dims[0].dim_param = "batch"


def _reshapes_keep_zero_sizes(graph, constants=frozenset()):
    """Give every Reshape whose target shape is computed at run time
    `allowzero=1`, in `graph` and its subgraphs (loop bodies).

    TensorFlow reads a 0 in a reshape's target shape as a dimension of size
    0; ONNX (without `allowzero`) as "copy this dimension from the input".
    tf2onnx converts the shapes as they are, so an empty batch or memory
    (a shape computed as `[batch, 0, units]`) failed in onnxruntime.
    Constant target shapes are left alone: tf2onnx writes those itself and
    may mean "copy" by 0.
    """
    import onnx

    constants = set(constants) | {i.name for i in graph.initializer}
    constants |= {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _reshapes_keep_zero_sizes(attribute.g, constants)
            for subgraph in attribute.graphs:
                _reshapes_keep_zero_sizes(subgraph, constants)
        if node.op_type == "Reshape" and len(node.input) > 1 and node.input[1] not in constants:
            if not any(a.name == "allowzero" for a in node.attribute):
                node.attribute.append(onnx.helper.make_attribute("allowzero", 1))


def _export_onnx(signature, function, path, opset):
    import onnx
    import tf2onnx

    collector = _Collect()
    logger = logging.getLogger("tf2onnx")
    logger.addHandler(collector)
    # tf2onnx logs every unsupported op and carries on; collect instead of printing.
    propagate, logger.propagate = logger.propagate, False
    try:
        model_proto, _ = tf2onnx.convert.from_function(function, input_signature=signature.input_specs, opset=opset)
    except Exception as error:
        raise _conversion_error(signature, opset, [], collector.messages, error) from error
    finally:
        logger.removeHandler(collector)
        logger.propagate = propagate
    unconverted = _unconvertible_nodes(model_proto.graph)
    if unconverted or any("is not supported" in m or "Unsupported ops" in m for m in collector.messages):
        raise _conversion_error(signature, opset, unconverted, collector.messages)
    if opset >= 14:  # Reshape has `allowzero` from opset 14
        _reshapes_keep_zero_sizes(model_proto.graph)
    _name_dynamic_axes(model_proto, signature)
    model_proto.doc_string = f"keras-attention export of signature {signature.name!r}"
    onnx.helper.set_model_props(
        model_proto, {"keras_attention.signature": signature.name, "keras.version": keras.__version__}
    )
    onnx.save(model_proto, str(path))
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:
        raise ExportError(f"signature {signature.name!r}: the ONNX file fails onnx.checker: {error}. Nothing was written.") from error
    try:
        return _session(path)
    except Exception as error:
        raise ExportError(
            f"signature {signature.name!r}: onnxruntime cannot load the converted file: {error}. Nothing was written."
        ) from error


def _session(path, threads=None):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _onnx_file(name):
    return "model.onnx" if name == DEFAULT_SIGNATURE else f"{name}.onnx"


# --------------------------------------------------------------- directories


def _check_target(directory, overwrite):
    if directory.is_file():
        raise FileExistsError(f"`directory` {str(directory)!r} is a file; expected a new or existing export directory.")
    for ancestor in directory.parents:
        if ancestor.exists():
            if not ancestor.is_dir():
                raise NotADirectoryError(
                    f"`directory` {str(directory)!r} is under {str(ancestor)!r}, which is a file; expected a path under a directory."
                )
            break
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"`directory` {str(directory)!r} already exists and is not empty; pass overwrite=True (--force) to replace it."
            )
        if not (directory / REPORT_FILE).is_file():
            # Replacing deletes the old directory: only ever delete a previous export.
            raise FileExistsError(
                f"`directory` {str(directory)!r} is not an export directory (no {REPORT_FILE}); "
                "refusing to replace it even with overwrite=True. Remove it yourself or choose another path."
            )


def _put_in_place(staging, directory, overwrite):
    """Replace `directory` by `staging` with renames, so readers see the old or the new export."""
    _check_target(directory, overwrite)  # again: something may have appeared there meanwhile
    old = None
    if directory.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
        os.rmdir(old)
        os.rename(directory, old)
    try:
        os.rename(staging, directory)
    except OSError:
        if old is not None:
            os.rename(old, directory)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# ----------------------------------------------------------------- the API


def _check_formats(formats):
    if isinstance(formats, str):
        formats = (formats,)
    formats = tuple(formats)
    unknown = [f for f in formats if f not in FORMATS]
    if not formats or unknown or len(set(formats)) != len(formats):
        raise ValueError(f"`formats` must be a non-empty selection of {FORMATS} without repeats; got {formats!r}.")
    return formats


def _check_opset(opset):
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"`opset` must be an integer from {MIN_OPSET} to {MAX_OPSET} (tf2onnx 1.17 supports no later); got {opset!r}.")
    return opset


def export_model(
    model,
    directory,
    formats=FORMATS,
    opset=DEFAULT_OPSET,
    input_signature=None,
    verify=True,
    overwrite=False,
    sample_inputs=None,
    vocabulary=None,
    atol=1e-4,
    shapes=DEFAULT_SHAPES,
    seed=0,
):
    """Export a model (or several, as named signatures) to SavedModel and ONNX, verified against Keras.

    Each model becomes one signature with named inputs (the `keras.Input`
    names, or dict keys) and named outputs (dict keys, else the output
    layers' names), dynamic batch and length: a SavedModel signature of that
    name and one ONNX file (`model.onnx` for `serving_default`, else
    `<name>.onnx`). Mixed-precision models, and on a GPU cuDNN RNNs, are
    exported from a rebuilt float32, cuDNN-free copy with the same weights.

    Every ONNX file passes `onnx.checker` and loads in onnxruntime. With
    `verify`, every output of every signature in every format is compared
    with Keras on `sample_inputs`, or on generated inputs of each `(batch,
    length)` in `shapes` (ids right-padded with 0, masks of the same
    lengths): float outputs within `atol`, integer outputs exactly.

    Everything is written to a temporary directory next to `directory` and
    renamed into place at the end: an op that does not convert, a parity
    failure or any other error raises and leaves nothing behind.

    Args:
        model: a `keras.Model`, a path to a `.keras` file (loaded in safe
            mode), or a mapping {signature name: model or path}, e.g.
            `{"serving_default": train_model, "translate": decode_model}`.
        directory: the export directory to create.
        formats: "saved_model" and/or "onnx".
        opset: ONNX opset, 13 to 18.
        input_signature: optional input specs (list of `keras.InputSpec` /
            `tf.TensorSpec`, or {input name: (shape, dtype)}); required for
            subclassed models. With several models, {signature: specs}.
        verify: compare the artifacts with Keras (the checker and the
            onnxruntime load always run).
        overwrite: replace an existing export directory.
        sample_inputs: optional list of {input name: array} batches used
            instead of generated ones; a batch is used for every signature
            whose inputs it covers ({signature: list} also accepted). With
            `vocabulary`, a value may be a list of strings (tokenised).
        vocabulary: optional {"source": Vocabulary, "target": Vocabulary}
            (or their configs, or the list form `load_vocabulary` reads), or
            the path of such a JSON file; written as `vocabulary.json` for
            `run_onnx` and the serve command.
        atol: allowed max absolute difference of float outputs.
        shapes: (batch, length) pairs of the generated inputs.
        seed: seed of the generated inputs.

    Returns:
        An `ExportReport` (also written to `directory/report.json`).

    Raises:
        FileExistsError: `directory` exists and `overwrite` is False.
        FileNotFoundError: a model path does not exist.
        ExportError (a ValueError): an op does not convert (named), or an
            output does not match Keras (named).
        ValueError: invalid arguments or an unreadable `.keras` file.

    Example:

    ```python
    import tempfile, keras, keras_attention
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    memory = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    pooled = keras_attention.AttentionPooling(8)(memory)
    model = keras.Model(tokens, keras.layers.Dense(3, name="logits")(pooled))
    report = keras_attention.export_model(model, tempfile.mkdtemp() + "/export")
    print(report.table())          # signature, format, output, max |diff|, ...
    assert report.max_abs_diff("onnx", "logits") <= 1e-4
    ```
    """
    started = time.perf_counter()
    formats = _check_formats(formats)
    opset = _check_opset(opset)
    if not isinstance(atol, (int, float)) or isinstance(atol, bool) or atol < 0:
        raise ValueError(f"`atol` must be a number >= 0; got {atol!r}.")
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise ValueError(f"`shapes` must be (batch, length) pairs of positive integers; got {shapes!r}.")
    if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)):
        raise ValueError(f"`directory` must be a path; got {directory!r}.")
    directory = Path(directory).absolute()
    _check_target(directory, overwrite)
    vocabulary = None if vocabulary is None else _check_vocabulary(
        load_vocabulary(vocabulary) if isinstance(vocabulary, (str, os.PathLike)) else vocabulary, "vocabulary"
    )

    models = _as_models(model)
    if input_signature is not None and len(models) > 1:
        if not isinstance(input_signature, Mapping) or not set(input_signature) <= set(models):
            raise ValueError(
                f"`input_signature` with several models must be {{signature name: specs}} for names in {sorted(models)}; got {input_signature!r}."
            )
        signature_specs = dict(input_signature)
    else:
        signature_specs = {name: input_signature for name in models}
    report = ExportReport(directory=str(directory), formats=list(formats), opset=opset)
    report.versions = _versions()
    signatures = []
    for name, value in models.items():
        argument = "model" if len(models) == 1 else f"model[{name!r}]"
        exportable = _exportable_copy(value, argument, report.notes)
        signatures.append(_make_signature(name, exportable, signature_specs.get(name), argument))
    for signature in signatures:
        report.signatures[signature.name] = {
            "inputs": {n: {"shape": s.shape.as_list(), "dtype": s.dtype.name} for n, s in zip(signature.input_names, signature.input_specs)},
            "outputs": {n: {"dtype": d} for n, d in zip(signature.output_names, signature.output_dtypes)},
        }
        if DEFAULT_SIGNATURE not in models and signature is signatures[0] and "saved_model" in formats:
            report.notes.append(f"SavedModel: {signature.name!r} is also served as {DEFAULT_SIGNATURE!r}.")

    created = [p for p in [directory.parent, *directory.parent.parents] if not p.exists()]
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    except OSError as error:
        _remove_created(created)
        # An OSError of the same kind, saying which argument and what failed.
        raise type(error)(
            f"`directory` {str(directory)!r}: cannot create the export there ({error.strerror or error})."
        ) from error
    try:
        _write_and_verify(signatures, staging, directory, formats, opset, verify, sample_inputs, vocabulary, shapes, seed, atol, report)
        if vocabulary is not None:
            (staging / VOCABULARY_FILE).write_text(_vocabulary_json(vocabulary), encoding="utf-8")
            report.paths["vocabulary"] = str(directory / VOCABULARY_FILE)
        report.paths["report"] = str(directory / REPORT_FILE)
        report.timings_s["total"] = round(time.perf_counter() - started, 3)
        report.to_json(staging / REPORT_FILE)
        _put_in_place(staging, directory, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_created(created)
        raise
    return report


def _remove_created(created):
    """Remove the parent directories an export created, deepest first."""
    for parent in created:
        try:
            parent.rmdir()
        except OSError:
            break


def _versions():
    import importlib.metadata

    versions = {}
    for package in ("keras", "tensorflow", "tf2onnx", "onnx", "onnxruntime"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _write_and_verify(signatures, staging, directory, formats, opset, verify, sample_inputs, vocabulary, shapes, seed, atol, report):
    import tensorflow as tf

    functions = {}
    if "saved_model" in formats:
        begin = time.perf_counter()
        archive = keras.export.ExportArchive()
        for signature in signatures:
            archive.track(signature.model)
            functions[signature.name] = archive.add_endpoint(signature.name, signature.serve, signature.input_specs)
        archive.write_out(str(staging / SAVED_MODEL_DIR), verbose=False)
        report.paths["saved_model"] = str(directory / SAVED_MODEL_DIR)
        report.timings_s["saved_model"] = round(time.perf_counter() - begin, 3)

    sessions = {}
    if "onnx" in formats:
        begin = time.perf_counter()
        report.paths["onnx"] = {}
        for signature in signatures:
            function = functions.get(signature.name)
            if function is None:
                function = tf.function(signature.serve, input_signature=signature.input_specs, autograph=False)
            sessions[signature.name] = _export_onnx(signature, function, staging / _onnx_file(signature.name), opset)
            report.paths["onnx"][signature.name] = str(directory / _onnx_file(signature.name))
        report.timings_s["onnx"] = round(time.perf_counter() - begin, 3)

    if not verify:
        report.notes.append("verify=False: no parity measured.")
        return
    begin = time.perf_counter()
    rng = np.random.default_rng(seed)
    loaded = tf.saved_model.load(str(staging / SAVED_MODEL_DIR)) if "saved_model" in formats else None
    for signature in signatures:
        if sample_inputs is not None:
            batches = _sample_batches(signature, sample_inputs, vocabulary)
        else:
            batches = _generated_batches(signature, shapes, rng)
        try:
            expected = [signature.call_keras(arrays) for arrays in batches]
        except Exception as error:
            raise ExportError(
                f"signature {signature.name!r}: the Keras model fails on the verification inputs ({type(error).__name__}: {error}); "
                "pass `sample_inputs` with valid values."
            ) from error
        report.batches[signature.name] = [{n: list(a.shape) for n, a in zip(signature.input_names, arrays)} for arrays in batches]
        if loaded is not None:
            function = loaded.signatures[signature.name]
            actual = [
                {k: v.numpy() for k, v in function(**{n: tf.constant(a) for n, a in zip(signature.input_names, arrays)}).items()}
                for arrays in batches
            ]
            _record(report, signature, "saved_model", expected, actual, atol)
        if signature.name in sessions:
            session = sessions[signature.name]
            names = [o.name for o in session.get_outputs()]
            actual = [dict(zip(names, session.run(None, dict(zip(signature.input_names, arrays))))) for arrays in batches]
            _record(report, signature, "onnx", expected, actual, atol)
    report.timings_s["verify"] = round(time.perf_counter() - begin, 3)
    _check_parity(report)


# ------------------------------------------------------- vocabulary, serving


def _side(vocabulary, side, argument):
    """One side of a vocabulary mapping as a `Vocabulary`."""
    value = vocabulary[side]
    if isinstance(value, Vocabulary):
        return value
    if isinstance(value, Mapping):
        try:
            return Vocabulary.from_config(dict(value))
        except (TypeError, ValueError) as error:
            raise ValueError(f"`{argument}['{side}']`: {error}") from None
    # The list form: {"source": [tokens], "target": [tokens], "lowercase",
    # "unknown_token", "start_token"/"end_token" or "start"/"end" (ids)}.
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(t, str) for t in value):
        raise ValueError(f"`{argument}['{side}']` must be a list of at least 2 strings (index 0 is padding); got {value!r:.80}.")
    if len(set(value)) != len(value):
        raise ValueError(f"`{argument}['{side}']` has duplicate tokens.")
    specials = {}
    if side == "source":
        unknown = vocabulary.get("unknown_token")
        if unknown is None and "<unk>" in value:
            unknown = "<unk>"
        specials["unknown_token"] = unknown
    else:
        for name in ("start", "end"):
            token, token_id = vocabulary.get(f"{name}_token"), vocabulary.get(name)
            if token is None and token_id is not None:
                if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < len(value):
                    raise ValueError(f"`{argument}['{name}']` must be a target id from 0 to {len(value) - 1}; got {token_id!r}.")
                token = value[token_id]
            specials[f"{name}_token"] = token
    for name, token in specials.items():
        if token is not None and token not in value:
            raise ValueError(f"`{argument}['{name}']` = {token!r} is not in the {side} tokens.")
    lowercase = vocabulary.get("lowercase", False)
    if not isinstance(lowercase, bool):
        raise ValueError(f"`{argument}['lowercase']` must be true or false; got {lowercase!r}.")
    # Characters unless some token is longer (then the text is space-separated).
    long = any(len(t) > 1 for t in value if t not in specials.values() and t != value[0])
    return Vocabulary(value, separator=" " if long else None, pad_token=value[0], lowercase=lowercase, **specials)


def _check_vocabulary(vocabulary, argument):
    """{"source": Vocabulary, "target": Vocabulary} from any accepted form."""
    if not isinstance(vocabulary, Mapping) or "source" not in vocabulary:
        raise ValueError(f"`{argument}` must be a dict with a 'source' vocabulary (and optionally 'target'); got {type(vocabulary).__name__}.")
    source = _side(vocabulary, "source", argument)
    target = _side(vocabulary, "target", argument) if vocabulary.get("target") is not None else source
    return {"source": source, "target": target}


def _vocabulary_json(vocabulary):
    return json.dumps({side: vocabulary[side].get_config() for side in ("source", "target")}, indent=1, ensure_ascii=False) + "\n"


def load_vocabulary(path):
    """Read a vocabulary JSON file (or `vocabulary.json` in a directory).

    Format: {"source": VOCABULARY, "target": VOCABULARY}, each a
    `keras_attention.text.Vocabulary` config (tokens in id order, separator,
    special tokens, lower-casing); "target" defaults to "source". The older
    list form is read too: {"source": [tokens], "target": [tokens]} with id 0
    padding and optional "unknown_token", "start_token"/"end_token" (or
    "start"/"end" ids) and "lowercase". Returns {"source": Vocabulary,
    "target": Vocabulary}.
    """
    path = Path(path)
    if path.is_dir():
        path = path / VOCABULARY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary: no such file {str(path)!r}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"vocabulary: {str(path)!r} is not valid JSON: {error}") from error
    return _check_vocabulary(data, str(path))


def encode_strings(texts, vocabulary, dtype="int32"):
    """Source ids `(B, T)` of `texts`, right-padded with 0, as the exported
    model is fed: `vocabulary["source"].encode(texts)`.

    Example: with source tokens `["<pad>", "a", "b"]`, `encode_strings(["ab", "b"], vocabulary)`
    is `[[1, 2], [2, 0]]`.
    """
    return _check_vocabulary(vocabulary, "vocabulary")["source"].encode(texts, dtype=dtype)


def decode_ids(ids, vocabulary):
    """Target ids `(..., L)` to strings `(...)`: stop at the end token, skip
    padding and the start token, join tokens with the target's separator."""
    return _check_vocabulary(vocabulary, "vocabulary")["target"].detokenize(ids)


_ONNX_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def _is_text(value):
    return isinstance(value, str) or (isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value))


def _shape_text(spec):
    return "(" + ", ".join(str(d) if d is not None else "?" for d in spec.shape) + ")"


def _feed(name, value, spec, dtype):
    """`value` as the array input `name` takes, or a ValueError naming it.

    onnxruntime's own errors for a wrong rank or type name no input (and
    come with a traceback from the serving command).
    """
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nested lists
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise ValueError(
            f"input {name!r} must be a nested list of numbers of shape {_shape_text(spec)}; got {value!r:.80}."
        )
    if array.ndim != len(spec.shape):
        raise ValueError(
            f"input {name!r} must have rank {len(spec.shape)}, shape {_shape_text(spec)}; "
            f"got shape {array.shape} ({value!r:.60})."
        )
    if dtype is not None and np.dtype(dtype).kind in "iu" and array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise ValueError(f"input {name!r} must hold integers (it is {np.dtype(dtype).name}); got {value!r:.80}.")
    return array.astype(dtype) if dtype is not None else array


def _check_ids(name, array, rows):
    """Ids of input `name` must index its embedding table of `rows` rows."""
    if rows is None or array.size == 0:
        return
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        raise ValueError(
            f"input {name!r} holds the id {bad}, outside the model's vocabulary: its embedding has {rows} rows "
            f"(ids 0 to {rows - 1})."
        )


# Ops an id passes through on its way to an embedding lookup (Keras's
# Embedding maps negative ids with a compare-and-select first).
_ID_OPS = {"Cast", "Add", "Sub", "Mul", "Where", "Identity", "Unsqueeze", "Squeeze", "Reshape", "Less", "Greater", "Not", "Expand", "Clip"}


def _embedding_rows(path):
    """{input name: rows of the embedding table its ids are looked up in}.

    Found by following each input through `_ID_OPS` to a `Gather` whose data
    is a rank-2 weight; inputs that reach none are left out.
    """
    import onnx

    graph = onnx.load(str(path)).graph
    tables = {i.name: int(i.dims[0]) for i in graph.initializer if len(i.dims) == 2}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    rows = {}
    for value in graph.input:
        seen, frontier, found = {value.name}, [value.name], []
        while frontier:
            name = frontier.pop()
            for node in consumers.get(name, ()):
                if node.op_type == "Gather" and len(node.input) > 1 and node.input[1] == name and node.input[0] in tables:
                    found.append(tables[node.input[0]])
                elif node.op_type in _ID_OPS:
                    for output in node.output:
                        if output not in seen:
                            seen.add(output)
                            frontier.append(output)
        if found:
            rows[value.name] = min(found)
    return rows


def run_onnx(directory, inputs, signature=DEFAULT_SIGNATURE, runs=100, warmup=5, threads=None):
    """Run an exported ONNX signature with onnxruntime and time it.

    `inputs` is {input name: array or nested list}; with a `vocabulary.json`
    next to the model, strings (or lists of strings) are tokenised
    character-wise, and a bare string or list of strings feeds a model's only
    input. Integer outputs named `ids` (or `..._ids`) are also detokenised.

    Returns {"outputs": {name: array}, "text": {name: strings}, "latency_ms":
    {"p50", "p90", "p99", "mean", "runs"}}.

    Raises ValueError naming the input when a value does not fit it: not a
    nested list of numbers, another rank, non-integers for integer ids, ids
    outside the model's embedding table; RuntimeError when onnxruntime fails
    on valid inputs.

    Example:

    ```python
    result = run_onnx("exports/dates", {"source": ["March 3, 2001"]}, signature="translate")
    print(result["text"]["ids"], result["latency_ms"]["p50"])
    ```
    """
    directory = Path(directory)
    path = directory / _onnx_file(signature)
    if not path.is_file():
        available = sorted(p.name for p in directory.glob("*.onnx")) if directory.is_dir() else []
        raise FileNotFoundError(f"no ONNX file {str(path)!r} for signature {signature!r}; found {available or 'none'} in {str(directory)!r}.")
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ValueError(f"`runs` must be a positive integer; got {runs!r}.")
    vocabulary = load_vocabulary(directory) if (directory / VOCABULARY_FILE).is_file() else None
    session = _session(path, threads)
    specs = {i.name: i for i in session.get_inputs()}
    if not isinstance(inputs, Mapping):
        if len(specs) != 1:
            raise ValueError(f"`inputs` must be {{input name: value}} for a model with inputs {list(specs)}; got {type(inputs).__name__}.")
        inputs = {next(iter(specs)): inputs}
    missing, unknown = set(specs) - set(inputs), set(inputs) - set(specs)
    if missing or unknown:
        raise ValueError(f"`inputs` has keys {sorted(inputs)}; the model expects exactly {list(specs)}.")
    rows = _embedding_rows(path)
    feeds = {}
    for name, value in inputs.items():
        dtype = _ONNX_TYPES.get(specs[name].type)
        if _is_text(value):
            if vocabulary is None:
                raise ValueError(f"input {name!r} is text but {str(directory)!r} has no {VOCABULARY_FILE} to tokenise it.")
            feeds[name] = encode_strings(value, vocabulary, dtype or np.int32)
        else:
            feeds[name] = _feed(name, value, specs[name], dtype)
        _check_ids(name, feeds[name], rows.get(name))
    try:
        for _ in range(warmup):
            session.run(None, feeds)
        times = []
        for _ in range(runs):
            begin = time.perf_counter()
            values = session.run(None, feeds)
            times.append((time.perf_counter() - begin) * 1000.0)
    except Exception as error:  # onnxruntime's own exception types
        raise RuntimeError(
            f"run_onnx: onnxruntime failed on signature {signature!r} with inputs "
            f"{ {n: list(v.shape) for n, v in feeds.items()} }: {error}"
        ) from error
    outputs = dict(zip([o.name for o in session.get_outputs()], values))
    text = {}
    if vocabulary is not None:
        for name, value in outputs.items():
            if (name == "ids" or name.endswith("_ids")) and value.dtype.kind in "iu":
                text[name] = decode_ids(value, vocabulary)
    latency = {f"p{q}": float(np.percentile(times, q)) for q in (50, 90, 99)}
    latency.update(mean=float(np.mean(times)), runs=runs)
    return {"inputs": {n: list(v.shape) for n, v in feeds.items()}, "outputs": outputs, "text": text, "latency_ms": latency}


def translate_texts(directory, texts, signature=DEFAULT_SIGNATURE, batch_size=256, threads=None):
    """Decode `texts` with an exported sequence model through onnxruntime.

    The model's only input is fed the texts tokenised with the export's
    `vocabulary.json`, in batches of similar length; its `ids` output
    (`(B, L)`, or `(B, K, L)` beams: the best is taken) is detokenised.
    Returns one string per text, in order.

    Example:

    ```python
    translate_texts("exports/g2p", ["phoneme", "keras"], signature="pronounce")
    # ["F OW N IY M", "K EH R AH S"]
    ```
    """
    directory = Path(directory)
    path = directory / _onnx_file(signature)
    if not path.is_file():
        raise FileNotFoundError(f"no ONNX file {str(path)!r} for signature {signature!r}.")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer; got {batch_size!r}.")
    if not (directory / VOCABULARY_FILE).is_file():
        raise ValueError(f"{str(directory)!r} has no {VOCABULARY_FILE} to tokenise texts with.")
    vocabulary = load_vocabulary(directory)
    texts = [texts] if isinstance(texts, str) else list(texts)
    session = _session(path, threads)
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise ValueError(f"signature {signature!r} has inputs {[i.name for i in inputs]}; texts can feed a model with one input.")
    names = [o.name for o in session.get_outputs()]
    if "ids" not in names:
        raise ValueError(f"signature {signature!r} has no `ids` output to detokenise; outputs: {names}.")
    dtype = _ONNX_TYPES.get(inputs[0].type, np.int32)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    results = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        feed = vocabulary["source"].encode([texts[i] for i in rows], dtype=dtype)
        ids = dict(zip(names, session.run(None, {inputs[0].name: feed})))["ids"]
        if ids.ndim == 3:
            ids = ids[:, 0]
        for i, text in zip(rows, vocabulary["target"].detokenize(ids)):
            results[i] = text
    return results


# ---------------------------------------------------------------------- CLI


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one `error: ...` line like every other failure."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def error_line(error):
    """A command-line failure as the one line the commands print: `error: ...`.

    Messages of our own errors (ValueError, OSError) are written for users;
    anything else is named by its type, still on one line, never a traceback.
    """
    text = " ".join(str(error).split()) or type(error).__name__
    if not isinstance(error, (ValueError, OSError)):
        text = f"{type(error).__name__}: {text}"
    return f"error: {text}"


def _parse_signature(text):
    name, separator, path = text.partition("=")
    if not separator or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=MODEL.keras, got {text!r}")
    return name, path


def main(argv=None):
    """`keras-attention-export MODEL.keras OUT_DIR [--formats ...] [--opset N] [--force]`."""
    parser = _Parser(
        prog="keras-attention-export",
        description="Export a .keras model to SavedModel and ONNX, check parity with Keras, print and save the report.",
    )
    parser.add_argument("model", help="the .keras file: the serving_default signature")
    parser.add_argument("out_dir", help="the export directory to create")
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset, {MIN_OPSET}-{MAX_OPSET}")
    parser.add_argument("--force", action="store_true", help="replace an existing export directory")
    parser.add_argument(
        "--signature", action="append", type=_parse_signature, default=[], metavar="NAME=MODEL.keras",
        help="another model exported as signature NAME (e.g. translate=decoder.keras); repeatable",
    )
    parser.add_argument("--vocabulary", help="a vocabulary JSON file to ship as vocabulary.json")
    parser.add_argument("--sample-inputs", help="JSON file: a list of {input name: nested list} batches to verify on")
    parser.add_argument("--no-verify", action="store_true", help="skip the parity check (checker and load still run)")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument("--report", help=f"also write the JSON report here (always written to OUT_DIR/{REPORT_FILE})")
    args = parser.parse_args(argv)

    model = args.model
    if args.signature:
        model = {DEFAULT_SIGNATURE: args.model, **dict(args.signature)}
    try:
        sample_inputs = None
        if args.sample_inputs:
            sample_path = Path(args.sample_inputs)
            if not sample_path.is_file():
                raise FileNotFoundError(f"--sample-inputs: no such file {str(sample_path)!r}.")
            sample_inputs = json.loads(sample_path.read_text(encoding="utf-8"))
        report = export_model(
            model, args.out_dir, formats=args.formats, opset=args.opset, overwrite=args.force,
            verify=not args.no_verify, sample_inputs=sample_inputs, vocabulary=args.vocabulary, atol=args.atol,
        )
        if args.report:
            report.to_json(args.report)
    # Every failure, ours or not (an OS error, a TensorFlow runtime error),
    # is one line on stderr and exit status 1: a command prints no traceback.
    except Exception as error:
        partial = getattr(error, "report", None)
        if partial is not None and args.report:
            try:
                partial.to_json(args.report)
            except OSError:
                pass  # the error being reported matters more than its report
        print(error_line(error), file=sys.stderr)
        return 1
    print(report.table())
    print(f"\nwrote {report.directory} (report: {report.paths['report']}) in {report.timings_s['total']:.1f} s")
    for note in report.notes:
        print(f"note: {note}")
    return 0
