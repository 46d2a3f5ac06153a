"""The one loader of the examples' tests: import an example's module, run an example's script."""

import importlib
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"


def load(name, folder=EXAMPLES):
    """Import `folder/name.py`. Its folder stays on `sys.path`: examples import
    their siblings (`common`, g2p's `data`), at load or when called; importing
    also registers the example's own layers for loading its `.keras` files."""
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))
    return importlib.import_module(name)


def run(script, *arguments, timeout=300, check=True):
    """Run `script` with this interpreter; with `check`, a failure shows the
    tail of its output."""
    completed = subprocess.run(
        [sys.executable, str(script), *map(str, arguments)], capture_output=True, text=True, timeout=timeout
    )
    if check:
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed
