"""Run an exported ONNX model with onnxruntime on JSON inputs; print what it computed and its latency.

    python export/serve_onnx.py OUT_DIR [--signature translate] --inputs '{"source": ["March 3, 2001"]}'
        [--inputs-file INPUTS.json] [--runs 100] [--warmup 5] [--threads N] [--json] [--all-outputs]
    python export/serve_onnx.py OUT_DIR --signature pronounce --texts words.txt [--batch-size 256]

A thin wrapper over `keras_attention.export.serve_cli.main`, also installed
as the `keras-attention-serve` command (its docstring and `--help` say more;
export/README.md is the serving guide).
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Run from a checkout without installing: the package sits one level up.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from keras_attention.export.serve_cli import main

if __name__ == "__main__":
    sys.exit(main())
