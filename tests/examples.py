"""The one loader of the examples' tests: import an example's module, run an example's command.

examples/ is a package run from the checkout's root (`python -m
examples.translate_dates`, `python -m examples.g2p.train`), so its modules
import each other by their full names and nothing touches `sys.path`.
"""

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load(name):
    """Import `examples.<name>` (`translate_dates`, `g2p.data`); importing
    also registers the example's own layers for loading its `.keras` files."""
    return importlib.import_module(f"examples.{name}")


def run(module, *arguments, timeout=300, check=True, environment=None):
    """`python -m <module> <arguments>` with this interpreter from the
    repository root (`module` a dotted name, or a tuple of the interpreter's
    arguments such as `("-c", code)`), `environment`'s
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


def run_here(module, *arguments, check=True):
    """`run`'s result from the example's `main(arguments)` called in this
    process, from the repository root, its output captured: TensorFlow is
    imported here already (measured: 5 s of CPU a command's start-up on the
    2-core machine). For what runs as well in a test's process as in its
    own: a run that must start TensorFlow afresh (`--distribute data`), or
    whose warnings a test reads from stderr, stays a `run`."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.chdir(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            load(module.removeprefix("examples.")).main([str(argument) for argument in arguments])
            code = 0
        except SystemExit as exit:  # argparse's refusals, and an example's own
            code = 0 if exit.code is None else exit.code if isinstance(exit.code, int) else 1
            if not isinstance(exit.code, (int, type(None))):  # a message, as Python prints it
                print(exit.code, file=err)
    completed = subprocess.CompletedProcess([module, *map(str, arguments)], code, out.getvalue(), err.getvalue())
    if check:
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed
