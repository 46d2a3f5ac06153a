"""The ONNX format: one file per signature (`model.onnx` for
`serving_default`, else `<name>.onnx`), with its int8 copy when asked,
run with onnxruntime for parity.

On TensorFlow tf2onnx converts the signature's graph, with masked LSTM
layers as fused nodes when that matches Keras (`fused_rnn`), else as
converted. On JAX and PyTorch Keras's own exporter writes it (jax2onnx,
TorchScript tracing); `support` says which models each takes.
"""

import re
import time

import keras

from keras_attention.export import fused_rnn
from keras_attention.export.layout import MAX_OPSET, MIN_OPSET, QUANTIZATIONS, _onnx_file
from keras_attention.export.onnx import _export_onnx, _name_dynamic_axes, _session
from keras_attention.export.parity import _difference, _is_exact
from keras_attention.export.quantize import _quantize_signature, _quantized_outputs
from keras_attention.export.report import ExportError

NAME = "onnx"  # its name in the registry (`formats`), and the key of its options in `ExportContext.options`


def check_opset(opset):
    """`export_model(opset=)`: the ONNX opset the files are written in."""
    if isinstance(opset, bool) or not isinstance(opset, int) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(
            f"`opset` must be an integer from {MIN_OPSET} to {MAX_OPSET} (tf2onnx 1.17 supports no later); got {opset!r}."
        )
    return opset


def check_quantize(quantize):
    """`export_model(quantize=)`: None, or the precision of a copy written beside each float32 file."""
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(f"`quantize` must be None or one of {list(QUANTIZATIONS)}; got {quantize!r}.")
    return quantize


def write(context):
    """Write each signature's ONNX file into `context.staging` (checked by
    onnx.checker and loaded in onnxruntime), then its quantized copy when
    the `quantize` option asks for one."""
    options, paths = context.options[NAME], {}
    for signature in context.signatures:
        path = context.staging / _onnx_file(signature.name)
        if context.backend == "tensorflow":
            _write_with_tf2onnx(context, signature, path)
        else:
            _write_with_keras(signature, path, options["opset"])
        paths[signature.name] = context.final_path(path.name)
    if options["quantize"]:
        begin = time.perf_counter()
        for signature in context.signatures:
            context.sessions[signature.name, options["quantize"]] = _quantize_signature(
                signature.name, context.staging, context.directory, options["quantize"], context.report
            )
        context.report.timings_s["quantize"] = round(time.perf_counter() - begin, 3)
    return paths


def _outputs(session, signature, arrays):
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, dict(zip(signature.input_names, arrays)))))


def _loaded(context, signature, precision="float32"):
    """The session of the signature's file at `precision` in `context.staging`:
    the one its writer loaded to check it, else loaded now."""
    session = context.sessions.get((signature.name, precision))
    if session is None:
        session = _session(context.staging / _onnx_file(signature.name, precision))
    return session


def runner(context):
    """`run(signature, arrays)` on the float32 ONNX files written in `context.staging`."""
    sessions = {s.name: _loaded(context, s) for s in context.signatures}
    return lambda signature, arrays: _outputs(sessions[signature.name], signature, arrays)


def measure_quantized(context, expected):
    """Record in `report.quantized` how far the int8 files' outputs are from
    Keras's (`expected`: {signature name: [outputs per batch]}): measured,
    not held to `atol`, since quantization changes the numbers by design."""
    precision = context.options[NAME]["quantize"]
    if not precision:
        return
    for signature in context.signatures:
        session = _loaded(context, signature, precision)
        actual = [_outputs(session, signature, arrays) for arrays in context.batches(signature)]
        measured = _quantized_outputs(signature, expected[signature.name], actual)
        context.report.quantized[signature.name]["outputs"] = measured


# ---------------------------------------------------------------- TensorFlow: tf2onnx


def _write_with_tf2onnx(context, signature, path):
    """Write the signature's file with its masked LSTM layers as fused
    nodes when they can be and the result matches Keras on the verification
    batches and on a row of them padded after all, half and none of its
    tokens (`fused_rnn`), else as tf2onnx converts the traced signature (the
    SavedModel writer's trace when there is one)."""
    import tensorflow as tf

    layers, refused = fused_rnn.recurrent_layers(signature.model)
    if layers:
        try:
            traced, lengths_from, directions = fused_rnn.traced_without_masks(signature, layers, refused)
            opset = context.options[NAME]["opset"]
            session = _export_onnx(signature, traced, path, opset, lengths_from, directions)
            batches = context.batches(signature)
            padded = fused_rnn.padded_variant(batches, lengths_from, signature.input_names)
            checks = list(zip(batches, context.keras_outputs(signature)))
            if padded:
                checks.append((padded, signature.call_keras(padded)))
            _same_as_keras(signature, session, checks, context.atol)
            context.sessions[signature.name, "float32"] = session
            context.report.notes.append(
                f"ONNX {signature.name!r}: {directions} masked recurrent layer direction(s) run as fused "
                f"LSTM nodes over the lengths of {lengths_from!r} (ids != 0; the padding must come "
                "after the tokens, as generated and as Vocabulary.encode writes it)."
            )
            return
        except Exception as reason:  # any failure of the attempt: the plain conversion stands
            if str(reason):
                context.report.notes.append(f"ONNX {signature.name!r}: recurrent layers left as converted ({reason}).")
    function = context.traced.get(signature.name)
    if function is None:
        function = tf.function(signature.serve, input_signature=signature.input_specs, autograph=False)
    context.sessions[signature.name, "float32"] = _export_onnx(
        signature, function, path, context.options[NAME]["opset"]
    )


def _same_as_keras(signature, session, checks, atol):
    """Raise `fused_rnn.NotFused` unless `session` gives Keras's outputs on
    each batch of `checks`, (input arrays, Keras's outputs) pairs (integers
    exactly, floats within `atol`)."""
    for arrays, want in checks:
        got = _outputs(session, signature, arrays)
        for name, dtype in zip(signature.output_names, signature.output_dtypes):
            difference = _difference(got[name], want[name])
            if not difference <= (0.0 if _is_exact(dtype) else atol):
                raise fused_rnn.NotFused(f"output {name!r} differed from Keras by {difference:.3g}")


# ------------------------------------------------------ JAX and PyTorch: Keras's exporter


def _one_line(error):
    """The exporter's message on one line, without its terminal colours, cut at 600 characters."""
    return " ".join(re.sub(r"\x1b\[[0-9;]*m", "", str(error)).split())[:600]


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


def _rename_outputs(model_proto, names):
    """Name the graph's outputs `names`, by position, through Identity nodes
    (an output may also be an input or listed twice, so none is renamed in place)."""
    import onnx

    for value, name in zip(model_proto.graph.output, names):
        model_proto.graph.node.append(onnx.helper.make_node("Identity", [value.name], [name], name=f"output_{name}"))
        value.name = name


def _write_with_keras(signature, path, opset):
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
        _session(path)
    except Exception as error:
        raise ExportError(
            f"signature {signature.name!r}: the ONNX file from Keras's exporter fails onnx.checker or onnxruntime: "
            f"{error}. Nothing was written."
        ) from error
