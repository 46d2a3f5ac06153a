"""The top-level setup.py shim: a build through it reads pyproject.toml's metadata.

The checkout's tracked files are copied to a temporary folder first (the
build writes no `build/` or `.egg-info` into the checkout), data sets
aside: the copy holds the other packages (tests/, and examples/,
benchmarks/, tools/ where they are packages), so that the wheel leaving
them out is a finding, not a given.
"""

import configparser
import email
import importlib.metadata
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import keras_attention

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def _setuptools_or_skip():
    """The build runs without isolation (no download): this environment's
    setuptools must meet the build's own requirement (pyproject's
    [build-system]; pinned in constraints.txt, installed by the test extra)."""
    (wanted,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    installed = importlib.metadata.version("setuptools")
    if installed not in wanted.specifier:
        pytest.skip(
            f"setuptools {installed} does not meet the build's {wanted}: pip install -c constraints.txt -e '.[test]'"
        )


# Tracked folders of data sets (megabytes the build never reads).
DATA = ("data",)


def _tracked_files():
    """The checkout's tracked files, relative paths, those under `DATA` aside;
    without git (an unpacked source archive), every file but caches."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
        names = [name for name in listed.stdout.decode().split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        skipped = {".git", ".venv", "__pycache__", "build"}
        names = [
            p.relative_to(ROOT).as_posix()
            for p in ROOT.rglob("*")
            if p.is_file() and not skipped & set(p.relative_to(ROOT).parts)
        ]
    return [name for name in names if name.split("/")[0] not in DATA and (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    _setuptools_or_skip()
    copy = tmp_path_factory.mktemp("source")
    for name in _tracked_files():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, copy / name)
    return copy


def test_the_shim_is_the_conventional_one_line():
    code = [line for line in (ROOT / "setup.py").read_text(encoding="utf-8").splitlines() if line and line[0] != " "]
    assert code[-2:] == ["from setuptools import setup", "setup()"], "the metadata stays in pyproject.toml"


def test_setup_py_reads_the_metadata_from_pyproject(source):
    done = subprocess.run(
        [sys.executable, "setup.py", "--name", "--version"], cwd=source, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-2:] == [PYPROJECT["project"]["name"], keras_attention.__version__]


def test_a_wheel_built_through_the_shim_installs_the_package_and_its_commands(source, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path, "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (dist_info,) = {name.split("/")[0] for name in names if name.split("/")[0].endswith(".dist-info")}
        metadata = email.message_from_bytes(archive.read(f"{dist_info}/METADATA"))
        entry_points = configparser.ConfigParser()
        entry_points.read_string(archive.read(f"{dist_info}/entry_points.txt").decode())
    assert metadata["Name"] == PYPROJECT["project"]["name"]
    assert metadata["Version"] == keras_attention.__version__
    assert dict(entry_points["console_scripts"]) == PYPROJECT["project"]["scripts"]
    # The copy holds other packages (tests/ at least): the wheel ships the library alone.
    packages = {p.parent.name for p in source.glob("*/__init__.py")}
    assert {"keras_attention", "tests"} <= packages, packages
    assert {name.split("/")[0] for name in names} == {"keras_attention", dist_info}, "only the library is shipped"
    modules = {p.relative_to(source).as_posix() for p in (source / "keras_attention").rglob("*.py")}
    assert modules <= set(names), sorted(modules - set(names))
