"""ONNX conversion with tf2onnx, the checks on its file, and errors that
name the TensorFlow ops that did not convert."""

import contextlib
import json
import logging
import os
import re

import keras
import numpy as np

from keras_attention.export.report import ExportError

# What to do instead, for the TensorFlow ops this stack is known not to convert.
_OP_HINTS = {
    "Bitcast": "`ops.argmax`/`ops.argmin` on floats emit it; use `ops.top_k(x, 1)`",
    "BitwiseAnd": "`ops.argmax`/`ops.argmin` on floats emit it; use `ops.top_k(x, 1)`",
    "XlaDynamicUpdateSlice": "`ops.slice_update` emits it; use `ops.scatter_update` or a masked `ops.where`",
    "CudnnRNNV3": "cuDNN LSTM/GRU: build the RNN layers with `use_cudnn=False`",
    "CudnnRNN": "cuDNN LSTM/GRU: build the RNN layers with `use_cudnn=False`",
    "CudnnRNNV2": "cuDNN LSTM/GRU: build the RNN layers with `use_cudnn=False`",
}


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
    """Readable names for the unknown axes: `batch` and `<input>_length`, instead of `unk__12`
    (`<option>_values` for a run-time option: 0, 1 or a batch of values)."""
    for value in model_proto.graph.input:
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if not dim.HasField("dim_value"):
                dim.dim_param = (
                    f"{value.name}_values"
                    if value.name in signature.options
                    else "batch"
                    if axis == 0
                    else (f"{value.name}_length" if axis == 1 else f"{value.name}_dim{axis}")
                )


OPTIONS_PROPERTY = "keras_attention.options"
PREFIXES_PROPERTY = "keras_attention.prefixes"  # {input name: {"vocabulary", "max_length"}}


def _optional_option_inputs(model_proto, signature):
    """Give each run-time option input an empty initializer: ONNX's optional
    input with a default (an initializer of an input's name), the empty
    tensor meaning the decoder's own default, which is in the graph. The
    options' bounds go into the metadata, for serving to check its feeds."""
    import onnx

    for name, bounds in signature.options.items():
        model_proto.graph.initializer.append(onnx.numpy_helper.from_array(np.zeros((0,), bounds["dtype"]), name))
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


def _selects_stay_selects(graph, nodes):
    """A tf2onnx rewriter: convert every select to an ONNX `Where`.

    tf2onnx turns a float `Select`/`SelectV2` into `x * cond + y * !cond`
    unless told the select handles NaN. That is a different function: a
    discarded NaN or infinity turns the result into NaN. The layers rely on
    selects to discard exactly such values (the fused attention op's rows
    over an empty memory, which onnxruntime leaves uninitialised), so every
    select is marked, in the graph and in its loop bodies.
    """
    for node in nodes:
        if node.type in ("Select", "SelectV2"):
            node.set_attr("handles_nan", True)
    return nodes


# tf2onnx's switch for its optimizer: set (to any value), the passes run on
# the graph itself instead of on a deep copy made before each pass.
_CATCH_ERRORS = "TF2ONNX_CATCH_ERRORS"


@contextlib.contextmanager
def environment_variable(variable, value):
    """`variable` set to `value` inside the block, as it was after: the
    converters (tf2onnx, OpenVINO's ONNX reader) take some switches only
    from the environment, and a user's own setting must survive the export."""
    saved = os.environ.get(variable)
    os.environ[variable] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(variable, None)
        else:
            os.environ[variable] = saved


def _convert(function, signature, opset, collector):
    """tf2onnx's model proto of `function`.

    By default tf2onnx deep-copies the whole graph before each of its dozen
    optimizer passes, every round, so that a pass that raises can be undone.
    On a decoder with its loop inside that copying is most of the export
    (measured: 246 of 676 s for the test suite's exported decoders). The
    passes run on the graph itself first; only if that raises is the
    conversion redone the careful way, which skips the failing pass, as
    before. A user who set TF2ONNX_CATCH_ERRORS keeps their choice. The
    pruning between passes walks each graph once, and the passes skip their
    bookkeeping (`tf2onnx_speedups`).
    """
    import tf2onnx

    from keras_attention.export.tf2onnx_speedups import faster_tf2onnx

    def convert():
        with faster_tf2onnx():
            model_proto, _ = tf2onnx.convert.from_function(
                function, input_signature=signature.input_specs, opset=opset, custom_rewriter=[_selects_stay_selects]
            )
        return model_proto

    if _CATCH_ERRORS in os.environ:
        return convert()
    try:
        with environment_variable(_CATCH_ERRORS, "FALSE"):
            return convert()
    except Exception:
        collector.messages.clear()
        return convert()


def _export_onnx(signature, function, path, opset, lengths_from=None, directions=None):
    """Convert `function` (the signature traced) with tf2onnx, check and save
    the file, and return its onnxruntime session. With `lengths_from`, the
    function was traced with its recurrent layers' masks withheld, and the
    fused nodes read that input's lengths (`fused_rnn.fuse`)."""
    import onnx

    from keras_attention.export import fused_rnn

    collector = _Collect()
    logger = logging.getLogger("tf2onnx")
    logger.addHandler(collector)
    # tf2onnx logs every unsupported op and carries on; collect instead of printing.
    propagate, logger.propagate = logger.propagate, False
    try:
        model_proto = _convert(function, signature, opset, collector)
    except Exception as error:
        raise _conversion_error(signature, opset, [], collector.messages, error) from error
    finally:
        logger.removeHandler(collector)
        logger.propagate = propagate
    unconverted = _unconvertible_nodes(model_proto.graph)
    if unconverted or any("is not supported" in m or "Unsupported ops" in m for m in collector.messages):
        raise _conversion_error(signature, opset, unconverted, collector.messages)
    fused_rnn.fuse(model_proto, lengths_from, directions)
    if opset >= 14:  # Reshape has `allowzero` from opset 14
        _reshapes_keep_zero_sizes(model_proto.graph)
    _name_dynamic_axes(model_proto, signature)
    model_proto.doc_string = f"keras-attention export of signature {signature.name!r}"
    properties = {"keras_attention.signature": signature.name, "keras.version": keras.__version__}
    if signature.options:
        _optional_option_inputs(model_proto, signature)
        properties[OPTIONS_PROPERTY] = json.dumps(signature.options)
    if signature.prefixes:
        properties[PREFIXES_PROPERTY] = json.dumps(signature.prefixes)
    onnx.helper.set_model_props(model_proto, properties)
    onnx.save(model_proto, str(path))
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as error:
        raise ExportError(
            f"signature {signature.name!r}: the ONNX file fails onnx.checker: {error}. Nothing was written."
        ) from error
    try:
        return _session(path)
    except Exception as error:
        raise ExportError(
            f"signature {signature.name!r}: onnxruntime cannot load the converted file: {error}. Nothing was written."
        ) from error


def _session(path, threads=None):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    # Errors only: onnxruntime warns on every load that an input with an
    # initializer (a run-time option's default) is not folded as a constant,
    # which is what such an input is for.
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    return onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
