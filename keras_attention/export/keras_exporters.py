"""Export on JAX and PyTorch through Keras's own exporters, verified like
the TensorFlow path: SavedModel through `keras.export.ExportArchive` (jax2tf
on JAX), ONNX through `Model.export(format="onnx")` (jax2onnx on JAX,
TorchScript tracing on PyTorch). `support` says which models each takes."""

import re
import time

import keras

from keras_attention.export.layout import SAVED_MODEL_DIR, _onnx_file
from keras_attention.export.onnx import _name_dynamic_axes, _session
from keras_attention.export.parity import _verify
from keras_attention.export.quantize import _quantize_signature
from keras_attention.export.report import ExportError

# JAX's StableHLO newer than TensorFlow's XlaCallModule reads (support.py, note b).
_STABLEHLO_SKEW = "failed to deserialize portable artifact"


def _one_line(error):
    """The exporter's message on one line, without its terminal colours, cut at 600 characters."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(error)).split())[:600]


def _serve(signature):
    """Flat named inputs in, {output name: tensor} out. Unlike
    `Signature.serve`, no run-time option checks: those are TensorFlow ops."""

    def serve(*tensors):
        outputs = signature.model(keras.tree.pack_sequence_as(signature.structure, list(tensors)), training=False)
        return dict(zip(signature.output_names, keras.tree.flatten(outputs)))

    return serve


class _FlatOutputs(keras.Model):
    """The signature's model with its outputs as a flat tuple in signature
    order, so the ONNX outputs can be named by position: exporters flatten
    dicts in their own orders."""

    def __init__(self, signature):
        super().__init__(name=f"{signature.name}_flat")
        self.wrapped = signature.model
        self.structure = signature.structure
        self.count = len(signature.input_names)

    def call(self, inputs, training=False):
        tensors = list(inputs) if self.count > 1 else [inputs]
        outputs = self.wrapped(keras.tree.pack_sequence_as(self.structure, tensors), training=False)
        return tuple(keras.tree.flatten(outputs))


def _write_saved_model(signatures, path):
    archive = keras.export.ExportArchive()
    for signature in signatures:
        archive.track(signature.model)
        # TensorFlow would also save the gradient of each endpoint; JAX has
        # none for a while_loop of dynamic length (the decode loops).
        archive.add_endpoint(
            signature.name, _serve(signature), signature.input_specs, jax2tf_kwargs={"with_gradient": False}
        )
    archive.write_out(str(path), verbose=False)


def _rename_outputs(model_proto, names):
    """Name the graph's outputs `names`, by position, through Identity nodes
    (an output may also be an input or listed twice, so none is renamed in place)."""
    import onnx

    for value, name in zip(model_proto.graph.output, names):
        model_proto.graph.node.append(onnx.helper.make_node("Identity", [value.name], [name], name=f"output_{name}"))
        value.name = name


def _write_onnx(signature, path, opset):
    import onnx

    specs = signature.input_specs
    try:
        _FlatOutputs(signature).export(
            str(path),
            format="onnx",
            verbose=False,
            input_signature=[list(specs)] if len(specs) > 1 else specs,
            opset_version=opset,
        )
    except Exception as error:
        raise ExportError(
            f"signature {signature.name!r}: Keras's ONNX exporter on {keras.backend.backend()!r} failed: "
            f"{type(error).__name__}: {_one_line(error)}. Export the .keras file under "
            "KERAS_BACKEND=tensorflow (tf2onnx), or simplify the model. Nothing was written."
        ) from error
    model_proto = onnx.load(str(path))
    _rename_outputs(model_proto, signature.output_names)
    _name_dynamic_axes(model_proto, signature)
    model_proto.doc_string = f"keras-attention export of signature {signature.name!r}"
    onnx.helper.set_model_props(
        model_proto,
        {
            "keras_attention.signature": signature.name,
            "keras.version": keras.__version__,
            "keras.backend": keras.backend.backend(),
        },
    )
    onnx.save(model_proto, str(path))
    try:
        onnx.checker.check_model(str(path), full_check=True)
        return _session(path)
    except Exception as error:
        raise ExportError(
            f"signature {signature.name!r}: the ONNX file from Keras's exporter fails onnx.checker or onnxruntime: "
            f"{error}. Nothing was written."
        ) from error


def _run_saved_model(loaded, signature, arrays):
    import tensorflow as tf

    function = loaded.signatures[signature.name]
    try:
        result = function(**{n: tf.constant(a) for n, a in zip(signature.input_names, arrays)})
    except Exception as error:
        if _STABLEHLO_SKEW not in str(error):
            raise
        raise ExportError(
            f"signature {signature.name!r}: the SavedModel written on JAX does not run in TensorFlow "
            f"{tf.__version__}: jax2tf serialized an op (e.g. JAX's top_k, in beam search) as StableHLO newer "
            "than TensorFlow's XlaCallModule reads. Export the .keras file under KERAS_BACKEND=tensorflow. "
            "Nothing was written."
        ) from error
    return {k: v.numpy() for k, v in result.items()}


def write_and_verify(signatures, staging, directory, formats, opset, verify, batches_for, atol, quantize, report):
    """Write each format into `staging` with Keras's exporter of this backend
    and compare it with Keras on the batches `batches_for(signature)` gives."""
    loaded = None
    if "saved_model" in formats:
        begin = time.perf_counter()
        _write_saved_model(signatures, staging / SAVED_MODEL_DIR)
        import tensorflow as tf

        loaded = tf.saved_model.load(str(staging / SAVED_MODEL_DIR))
        report.paths["saved_model"] = str(directory / SAVED_MODEL_DIR)
        report.timings_s["saved_model"] = round(time.perf_counter() - begin, 3)
    sessions, quantized = {}, {}
    if "onnx" in formats:
        begin = time.perf_counter()
        report.paths["onnx"] = {}
        for signature in signatures:
            sessions[signature.name] = _write_onnx(signature, staging / _onnx_file(signature.name), opset)
            report.paths["onnx"][signature.name] = str(directory / _onnx_file(signature.name))
            if quantize:
                quantized[signature.name] = _quantize_signature(signature.name, staging, directory, quantize, report)
        report.timings_s["onnx"] = round(time.perf_counter() - begin, 3)
    if not verify:
        # The SavedModel is still run once: a JAX artifact TensorFlow cannot
        # read fails only when called.
        if loaded is not None:
            for signature in signatures:
                _run_saved_model(loaded, signature, batches_for(signature)[0])
        report.notes.append("verify=False: no parity measured.")
        return
    run_saved_model = (
        None if loaded is None else (lambda signature, arrays: _run_saved_model(loaded, signature, arrays))
    )
    _verify(signatures, batches_for, run_saved_model, sessions, quantized, atol, report)
