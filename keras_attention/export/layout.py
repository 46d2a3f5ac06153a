"""The export directory's layout and the defaults every module shares.

This module imports nothing from the package, so any module may import it.
"""

DEFAULT_SIGNATURE = "serving_default"
DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 18  # tf2onnx 1.17 refuses 19 and above
DEFAULT_SHAPES = ((2, 5), (3, 8), (1, 3))  # (batch, length) of the generated inputs
REPORT_FILE = "report.json"
VOCABULARY_FILE = "vocabulary.json"
SAVED_MODEL_DIR = "saved_model"
QUANTIZATIONS = ("int8",)  # what `export_model(quantize=)` can write beside the float32 ONNX file
PRECISIONS = ("float32", *QUANTIZATIONS)  # the ONNX files a serving call may choose


def _onnx_file(name, precision=None):
    """`model.onnx` / `<name>.onnx`; the quantized copy `model.int8.onnx` / `<name>.int8.onnx`."""
    stem = "model" if name == DEFAULT_SIGNATURE else name
    return f"{stem}.onnx" if precision in (None, "float32") else f"{stem}.{precision}.onnx"
