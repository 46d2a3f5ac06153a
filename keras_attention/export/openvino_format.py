"""The OpenVINO format: each signature's ONNX graph converted to OpenVINO's
IR (`model.xml` + `model.bin` for `serving_default`, else `<name>.xml` /
`<name>.bin`), compiled and run by OpenVINO's CPU runtime for parity.

The IR is converted from the file the `onnx` format writes, decode loops
and all (ONNX `Loop` becomes OpenVINO's `Loop`): from the one in the export
when `formats` names "onnx" too, else from one written for the conversion
and removed after it. Weights stay float32 (`save_model` would halve them
to float16 by default) and the runtime computes in float32 (on CPUs with
bfloat16 units OpenVINO's default is bfloat16), so the outputs agree with
Keras within `atol`. The ONNX file's input defaults (each run-time
option's empty array) are not carried over: OpenVINO's reader would fold
them into constants, so the IR's option inputs must be fed, an empty array
meaning the export's default.

OpenVINO 2026.4's ONNX reader by default (its graph iterator) fails on the
loops tf2onnx writes: a body output that passes a body input through
unchanged (every loop-invariant value of a `while_loop`) counts as an extra
loop input and the `Loop` is refused. Its other reader converts them, and
`convert` uses that one (`READER`). A graph it cannot read is refused
before anything is left behind, naming the signature, the operations and
the way out: the ONNX file, served by onnxruntime. So is, at verification,
a graph the CPU runtime fails on (TensorFlow's einsum `bqvu,u->bqv`, whose
Reshape its shape inference gets wrong: additive attention scores with
`bqvu,uo->bqvo` instead), naming the node.

Serve the IR with OpenVINO directly::

    core = openvino.Core()
    compiled = core.compile_model("export/model.xml", "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    outputs = compiled({"source": ids})  # one array per output, by name: compiled.outputs
    # A decoder's run-time options are inputs too: np.zeros(0, "int32") for max_length's default.

OpenVINO is the `openvino` extra: `pip install 'keras-attention-decoders[openvino]'`.
"""

import dataclasses
import re
import shutil

from keras_attention.export import onnx_format
from keras_attention.export.layout import DEFAULT_SIGNATURE, _onnx_file
from keras_attention.export.onnx import environment_variable
from keras_attention.export.report import ExportError

NAME = "openvino"  # its name in the registry (`formats`)
INSTALL = "pip install 'keras-attention-decoders[openvino]'"
DEVICE = "CPU"
COMPILE_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}
"""What the runner compiles with: float32 arithmetic, as Keras computed."""
READER = ("ONNX_ITERATOR", "0")
"""The environment variable, and its value, that select OpenVINO's ONNX
reader which converts tf2onnx's loops (see the module); set only while
`convert` runs."""
_SCRATCH = ".openvino-onnx"  # under staging: the ONNX files written only to be converted


def ir_file(name):
    """`model.xml` / `<name>.xml` (its weights in the `.bin` beside it)."""
    return f"{'model' if name == DEFAULT_SIGNATURE else name}.xml"


def _openvino():
    try:
        import openvino
    except ImportError as error:
        raise ExportError(f"format {NAME!r} needs OpenVINO (not installed): {INSTALL}.") from error
    return openvino


_WAY_OUT = "(formats=['onnx'], `run_onnx`, `keras-attention-serve`)."


def _detail(error):
    """OpenVINO's message on one line, cut at 600 characters."""
    return " ".join(str(error).split())[:600]


def _failed_operations(message):
    """The operations OpenVINO's summary names ("Conversion is failed for: Loop-17"), else None."""
    found = re.findall(r"(?:conversion is failed for|not supported):\s*([^\n]+)", message, re.IGNORECASE)
    return ", ".join(dict.fromkeys(part.strip() for line in found for part in line.split(","))) or None


def convert(onnx_path, xml_path, signature_name):
    """Convert one ONNX file to IR at `xml_path` (float32 weights); raise
    `ExportError` naming the signature and the operations OpenVINO's ONNX
    reader could not convert."""
    openvino = _openvino()
    try:
        with environment_variable(*READER):
            model = openvino.convert_model(str(onnx_path))
    except Exception as error:
        operations = _failed_operations(str(error))
        raise ExportError(
            f"signature {signature_name!r}: OpenVINO {openvino.__version__}'s ONNX reader cannot convert "
            f"{'the operation(s) ' + operations if operations else 'the graph'} ({_detail(error)}). Serve the "
            f"ONNX file with onnxruntime instead {_WAY_OUT} Nothing was written."
        ) from error
    openvino.save_model(model, str(xml_path), compress_to_fp16=False)


def write(context):
    """Convert every signature's ONNX graph into IR in `context.staging`:
    the export's own ONNX files when the `onnx` format wrote them (it runs
    first), else files written for the conversion; either way read through
    a copy without input defaults (`_inputs_without_defaults`), removed with
    the scratch directory after the conversion."""
    _openvino()
    scratch = context.staging / _SCRATCH
    scratch.mkdir()
    try:
        if onnx_format.NAME in context.options:
            sources = context.staging
        else:
            sources = scratch
            options = {**context.options, onnx_format.NAME: {**context.options[NAME], "quantize": None}}
            onnx_format.write(dataclasses.replace(context, staging=scratch, options=options))
        paths = {}
        for signature in context.signatures:
            onnx_file = _onnx_file(signature.name)
            required = _inputs_without_defaults(sources / onnx_file, scratch / f"required.{onnx_file}")
            if required:
                context.report.notes.append(
                    f"OpenVINO {signature.name!r}: {required} are inputs without defaults in the IR; feed an "
                    "empty array for the export's default (the ONNX file's own default)."
                )
            xml = context.staging / ir_file(signature.name)
            convert(scratch / f"required.{onnx_file}", xml, signature.name)
            paths[signature.name] = context.final_path(xml.name)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return paths


def _inputs_without_defaults(source, target):
    """Copy the ONNX file `source` to `target` without the initializers that
    give graph inputs their defaults (the run-time options' empty arrays),
    and return those inputs' names. OpenVINO's reader turns an input with a
    default into a constant: the option would vanish from the IR, and a
    decode loop reading it fails its shape inference."""
    import onnx

    model = onnx.load(str(source))
    inputs = {value.name for value in model.graph.input}
    required = [tensor.name for tensor in model.graph.initializer if tensor.name in inputs]
    kept = [tensor for tensor in model.graph.initializer if tensor.name not in inputs]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept)
    onnx.save(model, str(target))
    return required


def compile_ir(path, device=DEVICE, threads=None):
    """The IR at `path` compiled by OpenVINO for `device`, in float32, on
    `threads` threads (None: OpenVINO's choice)."""
    openvino = _openvino()
    config = dict(COMPILE_CONFIG, **({"INFERENCE_NUM_THREADS": threads} if threads else {}))
    return openvino.Core().compile_model(str(path), device, config)


def run_compiled(compiled, feeds):
    """{output name: numpy array} of `compiled` on `feeds` ({input name: array})."""
    results = compiled(feeds)
    return {name: results[output] for output in compiled.outputs for name in output.get_names()}


def runner(context):
    """`run(signature, arrays)` on the IR written in `context.staging`."""
    compiled = {s.name: compile_ir(context.staging / ir_file(s.name)) for s in context.signatures}

    def run(signature, arrays):
        feeds = dict(zip(signature.input_names, arrays))
        try:
            return run_compiled(compiled[signature.name], feeds)
        except Exception as error:
            shapes = {name: list(array.shape) for name, array in feeds.items()}
            node = re.search(r"Node (\S+) of type (\S+)", str(error))
            raise ExportError(
                f"signature {signature.name!r}: OpenVINO's {DEVICE} runtime fails"
                + (f" in its {node[2]} node {node[1]!r}" if node else "")
                + f" on a verification batch of shapes {shapes} ({_detail(error)}). Serve the ONNX file with onnxruntime instead "
                f"{_WAY_OUT} Nothing was written."
            ) from error

    return run
