"""Count the assertions written in the test suite, to show that a rewrite kept them.

    python -m tools.count_assertions                 # tests/ of the working tree
    python -m tools.count_assertions --rev 1e90b49   # tests/ as committed at a revision
    python -m tools.count_assertions --rev 1e90b49 --against HEAD   # per file, what changed

An assertion is a place in the source that can fail a test, counted once
however many parameters run it (the suite's size in tests is pytest's
business; this counts what the tests check):

- `assert` statements;
- calls of a function whose name starts with `assert` (`np.testing.assert_allclose`,
  `self.assertEqual`, the suite's own helpers such as `assert_parity`);
- `pytest.raises`, `pytest.warns` and `pytest.deprecated_call`, as a context
  manager or a call;
- `pytest.fail`.

A helper's own asserts count once where it is written, and each call of it
counts again where it is called: removing either removes a check.
Every `*.py` file under the tests directory is read (fixtures and helpers too).
"""

import argparse
import ast
import collections
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
KINDS = ("assert", "assert_call", "raises", "fail")
RAISES = {"raises", "warns", "deprecated_call"}


def _call_name(func):
    """The name a call is made by (`np.testing.assert_equal` -> ("np.testing", "assert_equal"))."""
    if isinstance(func, ast.Name):
        return "", func.id
    if isinstance(func, ast.Attribute):
        return ast.unparse(func.value), func.attr
    return "", ""


def count_source(source, filename="<source>"):
    """Counter of assertion kinds (KINDS) in one file's source."""
    counts = collections.Counter({kind: 0 for kind in KINDS})
    for node in ast.walk(ast.parse(source, filename=filename)):
        if isinstance(node, ast.Assert):
            counts["assert"] += 1
        elif isinstance(node, ast.Call):
            owner, name = _call_name(node.func)
            if name.startswith("assert"):
                counts["assert_call"] += 1
            elif owner == "pytest" and name in RAISES:
                counts["raises"] += 1
            elif owner == "pytest" and name == "fail":
                counts["fail"] += 1
    return counts


def _files_at(rev, directory):
    """{path: source} of the `*.py` files under `directory` at git revision `rev`."""
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", rev, "--", directory],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return {
        path: subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True, text=True
        ).stdout
        for path in listing
        if path.endswith(".py")
    }


def _files_on_disk(directory):
    base = ROOT / directory
    return {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in sorted(base.rglob("*.py"))}


def count_files(files):
    """{path: Counter} for {path: source}."""
    return {path: count_source(source, path) for path, source in sorted(files.items())}


def total(per_file):
    counts = collections.Counter({kind: 0 for kind in KINDS})
    for file_counts in per_file.values():
        counts.update(file_counts)
    return counts


def changes(before, after):
    """[(path, before total, after total)] of the files whose total differs."""
    rows = []
    for path in sorted(set(before) | set(after)):
        old = sum(before.get(path, {}).values())
        new = sum(after.get(path, {}).values())
        if old != new:
            rows.append((path, old, new))
    return rows


def _line(label, counts):
    parts = ", ".join(f"{counts[k]} {k}" for k in KINDS)
    return f"{label}: {sum(counts[k] for k in KINDS)} assertions ({parts})"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", default="tests", help="the directory counted, relative to the repository")
    parser.add_argument("--rev", default=None, help="count at this git revision (default: the working tree)")
    parser.add_argument("--against", default=None, help="also count at this revision ('.': the working tree)")
    args = parser.parse_args(argv)

    def counted(rev):
        return count_files(_files_on_disk(args.tests) if rev in (None, ".") else _files_at(rev, args.tests))

    before = counted(args.rev)
    print(_line(args.rev or "working tree", total(before)))
    if args.against is None:
        return 0
    after = counted(args.against)
    print(_line(args.against if args.against != "." else "working tree", total(after)))
    for path, old, new in changes(before, after):
        print(f"  {path}: {old} -> {new} ({new - old:+d})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
