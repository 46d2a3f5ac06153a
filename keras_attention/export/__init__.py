"""Export trained models, decode loops included, to SavedModel and ONNX with verified parity.

`export_model` writes one directory:

    OUT_DIR/
      saved_model/      one SavedModel, one named signature per exported model
      model.onnx        the `serving_default` signature
      <name>.onnx       every other signature (e.g. `translate.onnx`)
      *.int8.onnx       optional (`quantize="int8"`): the same with int8 weights
      model.xml, .bin   optional (formats=[..., "openvino"]): OpenVINO IR of each ONNX file
      vocabulary.json   optional: token lists for `run_onnx` (strings in, strings out)
      report.json       the parity report

and checks every artifact against Keras before it puts the directory in
place: the ONNX files pass `onnx.checker` and load in onnxruntime, and every
output of every signature, in both formats, is compared with the Keras model
on inputs of several batch sizes and lengths (padding included).

TensorFlow, tf2onnx, onnx and onnxruntime (the `onnx` extra) are imported
inside the functions that need them, so importing this package is cheap.

On TensorFlow every model exports to both formats. On JAX and PyTorch the
export goes through Keras's own exporters, verified the same way, for what
they can write; the rest is refused before anything is written, with the
way out (export the `.keras` file under TensorFlow):

| backend | SavedModel                                     | ONNX                                 |
|---------|------------------------------------------------|--------------------------------------|
| jax     | layer, recurrent, greedy/sampling decode loops | unmasked layer models (jax2onnx)     |
| torch   | no                                             | layer models (onnx, onnxruntime)     |

`support` has the whole table and the reasons (beam search's StableHLO,
jax2onnx's missing conversions, PyTorch's traced Python loops).

Formats are registered by name (`formats`: `register_format(name, writer,
runner)`, or an installed package's entry point in `ENTRY_POINT_GROUP`);
each has one module, `saved_model_format`, `onnx_format` (with its int8
copies), `openvino_format` (IR converted from the ONNX files, written when
named: the `openvino` extra) and `litert_format` (`.tflite` files run by the
LiteRT interpreter, written when named: the `litert` extra, `run_litert`),
and `export_model` writes and verifies whatever is asked for
through one `ExportContext` (`context`), whose `Signature`s are what a
format writes and runs. The other modules, one
per concern: `layout` (file names and defaults), `report`, `models`
(loading and the float32 copy), `signatures`, `samples` (the verification
inputs), `parity` (the comparison with Keras, given each format's runner),
`onnx` (tf2onnx conversion and its diagnostics), `fused_rnn` (masked LSTMs
as fused ONNX nodes), `quantize` (the int8 copies), `directories` (safe
placement), `exporter` (`export_model`), `support` (which backend exports
which format, by registered name), `vocabulary`, `serving` (`run_onnx`,
`translate_texts`), and the two commands: `cli` (`keras-attention-export`)
and `serve_cli` (`keras-attention-serve`).
"""

from keras_attention.export.cli import error_line, main
from keras_attention.export.context import ExportContext
from keras_attention.export.exporter import export_model
from keras_attention.export.formats import (
    ENTRY_POINT_GROUP,
    FORMATS,
    ExportFormat,
    get_format,
    register_format,
    registered_formats,
    unregister_format,
)
from keras_attention.export.layout import (
    DEFAULT_OPSET,
    DEFAULT_SHAPES,
    DEFAULT_SIGNATURE,
    MAX_OPSET,
    MIN_OPSET,
    PRECISIONS,
    QUANTIZATIONS,
    REPORT_FILE,
    SAVED_MODEL_DIR,
    VOCABULARY_FILE,
)
from keras_attention.export.litert_format import run_litert
from keras_attention.export.report import ExportError, ExportReport, ParityRow
from keras_attention.export.serving import run_onnx, translate_texts
from keras_attention.export.signatures import Signature
from keras_attention.export.vocabulary import decode_ids, encode_strings, load_vocabulary

__all__ = [
    "DEFAULT_OPSET",
    "DEFAULT_SHAPES",
    "DEFAULT_SIGNATURE",
    "ENTRY_POINT_GROUP",
    "FORMATS",
    "MAX_OPSET",
    "MIN_OPSET",
    "PRECISIONS",
    "QUANTIZATIONS",
    "REPORT_FILE",
    "SAVED_MODEL_DIR",
    "VOCABULARY_FILE",
    "ExportContext",
    "ExportError",
    "ExportFormat",
    "ExportReport",
    "ParityRow",
    "Signature",
    "decode_ids",
    "encode_strings",
    "error_line",
    "export_model",
    "get_format",
    "load_vocabulary",
    "main",
    "register_format",
    "registered_formats",
    "run_litert",
    "run_onnx",
    "translate_texts",
    "unregister_format",
]
