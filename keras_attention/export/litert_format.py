"""The LiteRT format: one `.tflite` file per signature, decode loops inside,
run by the LiteRT interpreter (`ai-edge-litert`) for parity.

Each signature is the SavedModel format's endpoint (`Signature.serve`),
staged as a SavedModel of its own and converted by
`tf.lite.TFLiteConverter.from_saved_model` (which freezes the variables
into the file) with LiteRT's builtin kernels only:
the decoders' `while` loops become LiteRT `WHILE` subgraphs, their
TensorArrays builtin tensor-list kernels, and the batch and lengths stay
dynamic (the interpreter resizes its inputs to each call). TF Select ("Flex")
kernels are never used: the `ai-edge-litert` interpreter has none, so a model
that needs one (e.g. `keras.ops.cumprod`, TensorFlow's Cumprod) is refused,
naming the op, and nothing is written.

Written under the export directory:

    <signature>.tflite        float32
    <signature>.int8.tflite   with quantize="int8": LiteRT's dynamic-range
                              quantization (`tf.lite.Optimize.DEFAULT`)

Dynamic-range int8 stores the weights of matrix products and embedding
tables of at least 1024 values as int8 with one scale per output channel;
the products quantize their activations at run time, inside the decode
loop too (unlike onnxruntime's quantizer, which leaves a loop body
float32). Smaller weights stay float32. Its outputs' distance from Keras is
measured (`report.quantized["litert/<signature>"]`), not held to `atol`.

What the files do not hold: TensorFlow's assertions, which the converter
drops. The SavedModel refuses a run-time option out of its bounds (a
`max_length` above the constructor's, a `top_p` of 0) in the graph; here
`run_litert` checks the feeds in Python with the bounds the export recorded
in `report.json`, as `run_onnx` does. LiteRT's kernels refuse tensors of 0
rows (the greedy loop: "Invalid tensor size"): a batch of 0 is run as one
row of padding and returns each output's first 0 rows, the shapes Keras
returns for an empty batch.
"""

import re
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from keras_attention.decoders.runtime_options import RUNTIME_OPTIONS
from keras_attention.export.layout import DEFAULT_SIGNATURE, QUANTIZATIONS
from keras_attention.export.quantize import _quantized_outputs
from keras_attention.export.report import ExportError
from keras_attention.export.saved_model_format import track_model

NAME = "litert"  # its name in the registry (`formats`), and the key of its options in `ExportContext.options`
INSTALL = "pip install 'keras-attention-decoders[litert]'"
# The converter's words for an op without a builtin kernel (TF Select or custom).
_MISSING_OP = re.compile(r"'tf\.(\w+)' op is neither a custom op nor a flex op")
_STAGED_SAVED_MODEL = ".litert_saved_model"  # inside the staging directory, removed once converted


def litert_file(signature, precision=None):
    """`<signature>.tflite`; its quantized copy `<signature>.int8.tflite`."""
    return f"{signature}.tflite" if precision in (None, "float32") else f"{signature}.{precision}.tflite"


def check_quantize(quantize):
    """`export_model(quantize=)`: None, or the precision of a copy written beside each float32 file."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"`quantize` must be None or one of {list(QUANTIZATIONS)}; got {quantize!r}.")
    return quantize


# ------------------------------------------------------------------ writing


def _saved_model(signature, path):
    """Write `signature` alone as a SavedModel endpoint at `path`: converting
    one signature of a SavedModel holding several loads them all (measured:
    a layer model, a greedy and a beam decoder converted in 44 s from one
    SavedModel, 29 s each from its own, writing included)."""
    import keras

    archive = keras.export.ExportArchive()
    track_model(archive, signature.model)
    archive.add_endpoint(signature.name, signature.serve, signature.input_specs)
    archive.write_out(str(path), verbose=False)


def _convert(saved_model, signature_name, quantize):
    """The `.tflite` bytes of one signature, builtin kernels only, or an ExportError naming the missing ops."""
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(str(saved_model), signature_keys=[signature_name])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantize:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    try:
        return converter.convert()
    except Exception as error:
        missing = sorted(set(_MISSING_OP.findall(str(error))))
        if missing:
            raise ExportError(
                f"signature {signature_name!r}: LiteRT has no builtin kernel for the TensorFlow op(s) "
                f"{', '.join(missing)}; they would need TF Select (Flex) kernels, which the ai-edge-litert "
                "interpreter does not have. Export this model to 'onnx' or 'saved_model', or build it from ops "
                "LiteRT runs. Nothing was written."
            ) from error
        first = " ".join(str(error).split())[:600]
        raise ExportError(
            f"signature {signature_name!r}: the LiteRT converter failed: {type(error).__name__}: {first}. "
            "Nothing was written."
        ) from error


def write(context):
    """Write each signature's `.tflite` file into `context.staging`, and its
    int8 copy when the `quantize` option asks for one."""
    precision = context.options[NAME]["quantize"]
    staged, paths = context.staging / _STAGED_SAVED_MODEL, {}
    for signature in context.signatures:
        try:
            _saved_model(signature, staged)
            for copy in (None, precision) if precision else (None,):
                content = _convert(staged, signature.name, quantize=copy is not None)
                (context.staging / litert_file(signature.name, copy)).write_bytes(content)
        finally:
            shutil.rmtree(staged, ignore_errors=True)
        paths[signature.name] = context.final_path(litert_file(signature.name))
    if any(signature.options or signature.prefixes for signature in context.signatures):
        context.report.notes.append(
            "LiteRT: the .tflite files hold no run-time option or prefix checks (the converter drops "
            "TensorFlow's assertions); run_litert checks its feeds against the bounds in report.json."
        )
    return paths


# ------------------------------------------------------------------ running


def _interpreter(path, threads=None):
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as error:
        raise ImportError(f"running a LiteRT file needs ai-edge-litert: {INSTALL}") from error
    return Interpreter(model_path=str(path), num_threads=threads)


class LiteRTSignature:
    """One `.tflite` signature in the LiteRT interpreter: `run(feeds)` runs it
    once on {input name: array} and returns {output name: array}.

    The interpreter's inputs are resized to each call's shapes (the batch and
    lengths are dynamic); an empty batch runs as one row of padding and
    returns 0 rows (see the module).
    """

    def __init__(self, path, signature=DEFAULT_SIGNATURE, threads=None, options=()):
        self.path, self.signature = Path(path), signature
        self.interpreter = _interpreter(self.path, threads)
        available = list(self.interpreter.get_signature_list())
        if signature not in available:
            raise ValueError(f"{str(self.path)!r} has no signature {signature!r}; it has {available}.")
        self.runner = self.interpreter.get_signature_runner(signature)
        details = self.runner.get_input_details()
        self.input_dtypes = {name: np.dtype(detail["dtype"]) for name, detail in details.items()}
        self.input_ranks = {name: len(detail["shape_signature"]) for name, detail in details.items()}
        self.options = set(options)

    def run(self, feeds):
        feeds = {name: np.asarray(value, self.input_dtypes[name]) for name, value in feeds.items()}
        batched = [n for n, a in feeds.items() if n not in self.options and a.ndim >= 1]
        if batched and feeds[batched[0]].shape[0] == 0:
            padding = {n: np.zeros((1, *a.shape[1:]), a.dtype) if n in batched else a for n, a in feeds.items()}
            return {name: value[:0] for name, value in self._invoke(padding).items()}
        return self._invoke(feeds)

    def _invoke(self, feeds):
        try:
            outputs = self.runner(**feeds)
        except Exception as error:
            # LiteRT's kernels cannot resize to a sequence of zero positions
            # (its XNNPack delegate fails to prepare), which Keras, the
            # SavedModel and onnxruntime decode: refused naming the input.
            empty = [n for n, a in feeds.items() if n not in self.options and a.ndim >= 2 and a.shape[1] == 0]
            if empty:
                raise ValueError(
                    f"LiteRT cannot run signature {self.signature!r} on an input of zero positions "
                    f"({', '.join(map(repr, empty))}, inputs { {n: list(a.shape) for n, a in feeds.items()} }): "
                    "give every sequence at least one position, or serve this input with onnxruntime."
                ) from error
            raise RuntimeError(
                f"LiteRT failed on signature {self.signature!r} of {str(self.path)!r} with inputs "
                f"{ {n: list(a.shape) for n, a in feeds.items()} }: {error}"
            ) from error
        return {name: np.asarray(value) for name, value in outputs.items()}


def _run(loaded, signature, arrays):
    return loaded[signature.name].run(dict(zip(signature.input_names, arrays)))


def _load(context, precision=None):
    return {
        s.name: LiteRTSignature(context.staging / litert_file(s.name, precision), s.name, options=s.options)
        for s in context.signatures
    }


def runner(context):
    """`run(signature, arrays)` on the float32 `.tflite` files written in `context.staging`."""
    loaded = _load(context)
    return lambda signature, arrays: _run(loaded, signature, arrays)


def measure_quantized(context, expected):
    """Record in `report.quantized["litert/<signature>"]` the int8 files'
    size, their int8 weights and how far their outputs are from Keras's
    (`expected`: {signature name: [outputs per batch]})."""
    precision = context.options[NAME]["quantize"]
    if not precision:
        return
    loaded = _load(context, precision)
    for signature in context.signatures:
        path = context.staging / litert_file(signature.name, precision)
        actual = [_run(loaded, signature, arrays) for arrays in context.batches(signature)]
        details = loaded[signature.name].interpreter.get_tensor_details()
        context.report.quantized[f"{NAME}/{signature.name}"] = {
            "format": NAME,
            "precision": precision,
            "path": context.final_path(path.name),
            "bytes": path.stat().st_size,
            "float32_bytes": (context.staging / litert_file(signature.name)).stat().st_size,
            "int8_weights": sum(1 for detail in details if np.dtype(detail["dtype"]) == np.int8),
            "outputs": _quantized_outputs(signature, expected[signature.name], actual),
        }


def _array(name, value, dtype, rank):
    """`value` as input `name`'s array, or a ValueError naming the input (LiteRT's own errors name none)."""
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nested lists
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise ValueError(f"input {name!r} must be a nested list of numbers of rank {rank}; got {value!r:.80}.")
    if array.ndim != rank:
        raise ValueError(f"input {name!r} must have rank {rank}; got shape {array.shape}.")
    if dtype.kind in "iu" and array.dtype.kind == "f" and not np.all(array == np.round(array)):
        raise ValueError(f"input {name!r} must hold integers (it is {dtype.name}); got {value!r:.80}.")
    return array.astype(dtype)


def run_litert(directory, inputs, signature=DEFAULT_SIGNATURE, precision="float32", threads=None):
    """Run an exported `.tflite` signature once with the LiteRT interpreter.

    `inputs` is {input name: array or nested list}; a decoder's run-time
    options are optional inputs (one value for every example, or one per
    example; those left out keep the export's defaults), checked against the
    bounds recorded in the export's `report.json`, as are forced prefixes
    (the `.tflite` file holds no assertions). `precision="int8"` runs the
    copy an export with `quantize="int8"` wrote.

    Returns {output name: array}. Raises ValueError naming the input for a
    missing or unknown input or an option out of its bounds, RuntimeError
    when LiteRT fails on valid inputs.

    Example:

    ```python
    outputs = run_litert("exports/g2p", {"source": ids, "max_length": 12}, signature="pronounce")
    outputs["ids"]  # (batch, 12) int32
    ```
    """
    from keras_attention.export.serving import check_prefixes, option_feeds, recorded_signature

    directory = Path(directory)
    if precision not in ("float32", *QUANTIZATIONS):
        raise ValueError(f"`precision` must be one of {['float32', *QUANTIZATIONS]}; got {precision!r}.")
    path = directory / litert_file(signature, precision)
    if not path.is_file():
        found = sorted(p.name for p in directory.glob("*.tflite")) if directory.is_dir() else []
        raise FileNotFoundError(
            f"no LiteRT file {str(path)!r} for signature {signature!r} at precision {precision!r}; "
            f"found {found or 'none'} in {str(directory)!r} (export with formats=['litert'])."
        )
    recorded = recorded_signature(directory, signature)
    options, prefixes = recorded.get("options", {}), recorded.get("prefixes", {})
    model = LiteRTSignature(path, signature, threads, options)
    if not isinstance(inputs, Mapping):
        raise ValueError(f"`inputs` must be {{input name: value}}; got {type(inputs).__name__}.")
    expected = [name for name in model.input_dtypes if name not in options]
    unknown = set(inputs) - set(model.input_dtypes)
    if unknown and unknown <= set(RUNTIME_OPTIONS):
        option_feeds(options, {name: inputs[name] for name in unknown}, None)  # names them
    if set(inputs) - set(options) != set(expected):
        optional = f" (and optionally the run-time options {list(options)})" if options else ""
        raise ValueError(f"`inputs` has keys {sorted(inputs)}; the model expects {expected}{optional}.")
    feeds = {name: _array(name, inputs[name], model.input_dtypes[name], model.input_ranks[name]) for name in expected}
    batch = next((a.shape[0] for a in feeds.values() if a.ndim >= 1), None)
    given = option_feeds(options, {n: v for n, v in inputs.items() if n in options}, batch)
    feeds.update({name: given.get(name, np.zeros((0,), model.input_dtypes[name])) for name in options})
    check_prefixes(prefixes, feeds)
    return model.run(feeds)
