#!/usr/bin/env bash
# Build the peer environment for the tfa.seq2seq benchmark:
# benchmarks/peers/.venv-tfa with tensorflow-cpu 2.15.1 + tensorflow-addons 0.23.0
# (the last release of tensorflow-addons; it supports TF 2.13-2.15 only, hence
# its own environment). Idempotent: does nothing when the environment is
# already complete. Usage: benchmarks/peers/build_tfa_env.sh [python3]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$here/.venv-tfa"
python="${1:-${PYTHON:-python3}}"
stamp="$venv/.complete"
if [[ -f "$stamp" ]]; then
    exit 0
fi
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --disable-pip-version-check -q \
    "tensorflow-cpu==2.15.1" "tensorflow-addons==0.23.0" "numpy<2"
# Check it imports (tfa prints an end-of-life warning; that is expected).
"$venv/bin/python" -c "import tensorflow as tf, tensorflow_addons as tfa; print('tfa env:', tf.__version__, tfa.__version__)"
touch "$stamp"
