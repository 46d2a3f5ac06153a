"""The repository's runnable code is packages run with `python -m` from the
root: examples/, examples/g2p/, benchmarks/ (and its peers/) and tools/.

Nothing edits `sys.path` (two scripts' bare `common` modules once shadowed
each other in one test worker), no module imports a sibling by its bare
name, and every command the Makefile runs names a module that exists.
"""

import ast
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("examples", "examples/g2p", "benchmarks", "benchmarks/peers", "tools")
# Built environments and run outputs: not the repository's code.
SKIPPED = {".git", ".venv", ".venv-jax", ".venv-torch", ".venv-tfa", "runs", "demo_output", "build", "dist"}
PATH_EDIT = re.compile(r"sys\.path\.(insert|append|extend)\b|syspath_prepend|\bPYTHONPATH\b")


def python_files():
    """The repository's .py files, not walking into the skipped folders (a
    checkout's .venv holds tens of thousands of files)."""
    for folder, subfolders, files in os.walk(ROOT):
        subfolders[:] = sorted(d for d in subfolders if d not in SKIPPED and not d.endswith(".egg-info"))
        for name in sorted(files):
            path = Path(folder) / name
            if name.endswith(".py") and path != Path(__file__).resolve():  # this file names what it looks for
                yield path


def test_no_file_edits_sys_path():
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in python_files()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if PATH_EDIT.search(line)
    ]
    assert found == [], "run modules with `python -m` from the repository root instead:\n" + "\n".join(found)


def test_the_runnable_folders_are_packages():
    assert [folder for folder in PACKAGES if not (ROOT / folder / "__init__.py").is_file()] == []
    assert not (ROOT / "export").exists(), "the export scripts are the keras-attention-export/-serve commands"


def bare_sibling_imports(path):
    """Imports in `path` of a module of its own folder by the bare name (`import common`)."""
    siblings = {p.stem for p in path.parent.glob("*.py")} | {p.name for p in path.parent.iterdir() if p.is_dir()}
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name.split(".")[0] for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module.split(".")[0]]
        else:
            continue
        found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names if name in siblings]
    return found


def test_no_module_imports_a_sibling_by_its_bare_name():
    found = [
        hit
        for folder in PACKAGES
        for path in sorted((ROOT / folder).glob("*.py"))
        for hit in bare_sibling_imports(path)
    ]
    assert found == [], "import by the full name (`from examples.g2p import data`):\n" + "\n".join(found)


def test_the_checks_see_what_they_look_for(tmp_path, monkeypatch):
    (tmp_path / "common.py").write_text("")
    (tmp_path / "script.py").write_text("import json\nimport common\nfrom common import x\nfrom . import common\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    assert bare_sibling_imports(tmp_path / "script.py") == ["script.py:2: common", "script.py:3: common"]
    assert PATH_EDIT.search("sys.path" + ".insert(0, here)") and not PATH_EDIT.search("sys.path[0]")


def test_every_make_command_runs_a_module_that_exists():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert not re.search(r"\$\(BIN\)/python\s+\S+\.py", makefile), "run scripts as modules: python -m package.module"
    modules = re.findall(r"\$\(BIN\)/python -m ([\w.]+)", makefile)
    assert {"examples.translate_dates", "examples.g2p.train", "benchmarks.run", "examples.layer_tour"} <= set(modules)
    for module in set(modules) - {"pip"}:
        path = ROOT.joinpath(*module.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__main__.py").is_file(), module
