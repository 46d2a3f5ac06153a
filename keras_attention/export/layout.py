"""The export directory's layout and the defaults every module shares.

This module imports nothing from the package, so any module may import it.
"""

FORMATS = ("saved_model", "onnx")
DEFAULT_SIGNATURE = "serving_default"
DEFAULT_OPSET = 17
MIN_OPSET, MAX_OPSET = 13, 18  # tf2onnx 1.17 refuses 19 and above
DEFAULT_SHAPES = ((2, 5), (3, 8), (1, 3))  # (batch, length) of the generated inputs
REPORT_FILE = "report.json"
VOCABULARY_FILE = "vocabulary.json"
SAVED_MODEL_DIR = "saved_model"


def _onnx_file(name):
    return "model.onnx" if name == DEFAULT_SIGNATURE else f"{name}.onnx"
