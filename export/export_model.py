"""Export a .keras model to TensorFlow SavedModel and ONNX, with parity checked against Keras.

    python export/export_model.py MODEL.keras OUT_DIR [--formats saved_model onnx] [--opset 17] [--force]
        [--signature translate=DECODER.keras ...] [--vocabulary VOCAB.json] [--report REPORT.json]

Prints the parity report as a table and writes it as JSON to OUT_DIR/report.json
(and to --report). Exit status 1 with a message on stderr when the export
fails; nothing is left in OUT_DIR then. A thin wrapper over
`keras_attention.export.cli.main`, also installed as the
`keras-attention-export` command.
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Run from a checkout without installing: the package sits one level up.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from keras_attention.export.cli import main

if __name__ == "__main__":
    sys.exit(main())
