"""The one loader of the examples' tests: import an example's module, run an example's command.

examples/ is a package run from the checkout's root (`python -m
examples.translate_dates`, `python -m examples.g2p.train`), so its modules
import each other by their full names and nothing touches `sys.path`.
"""

import importlib
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `keras-attention-serve` as a checkout runs it (the installed command calls the same `main`).
SERVE = ("-c", "import sys; from keras_attention.export.serve_cli import main; sys.exit(main())")


def load(name):
    """Import `examples.<name>` (`translate_dates`, `g2p.data`); importing
    also registers the example's own layers for loading its `.keras` files."""
    return importlib.import_module(f"examples.{name}")


def run(module, *arguments, timeout=300, check=True, environment=None):
    """`python -m <module> <arguments>` with this interpreter from the
    repository root (`module` a dotted name, or SERVE), `environment`'s
    variables added to this process's; with `check`, a failure shows the
    tail of its output."""
    command = list(module) if isinstance(module, tuple) else ["-m", module]
    completed = subprocess.run(
        [sys.executable, *command, *map(str, arguments)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=None if environment is None else {**os.environ, **environment},
    )
    if check:
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed
