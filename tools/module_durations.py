"""How long each test module takes, measured, so that the suite starts the
longest ones first: tests/module_seconds.json, read by tests/conftest.py.

    python -m tools.module_durations build/junit-tensorflow.xml   # after a run with --junitxml
    python -m tools.module_durations --backend jax build/junit-jax.xml

`make test` spreads the test files over the cores (pytest-xdist, `--dist
loadfile`), handing a worker the next file in the suite's order when it is
nearly done with its own. xdist's default order (most tests first) put the
example smoke runs, a few tests of minutes each, last: one worker ran them
alone at the end while the other sat idle. Ordered longest first, the short
modules fill in at the end instead (the longest-processing-time rule).

A module's measured seconds are the sum of its tests' times in the JUnit
report (setup, call and teardown: its module fixtures included). A module
the file does not know yet is estimated from its number of tests at the
backend's `seconds_per_test`: the whole suite's mean, written by a run of
the whole suite (the sum of its tests' times over their number), kept when
reports of some modules only are added (`--keep`).
"""

import argparse
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

ROOT = pathlib.Path(__file__).resolve().parent.parent
DURATIONS = ROOT / "tests" / "module_seconds.json"


def module_seconds(*junit_paths):
    """{module file name: {"seconds", "tests"}} summed over JUnit reports."""
    modules = {}
    for path in junit_paths:
        for case in ET.parse(path).iter("testcase"):
            module = case.get("classname", "").split(".")
            # tests.test_x or tests.test_x.TestClass: the module is the test_ part.
            name = next((part for part in module if part.startswith("test_")), None)
            if name is None:
                continue
            entry = modules.setdefault(f"{name}.py", {"seconds": 0.0, "tests": 0})
            entry["seconds"] += float(case.get("time") or 0)
            entry["tests"] += 1
    return {m: {"seconds": round(e["seconds"], 1), "tests": e["tests"]} for m, e in sorted(modules.items())}


def estimated_seconds(section, module, tests):
    """The measured seconds of `module`, or `tests` times the section's seconds per test."""
    if module in section.get("modules", {}):
        return section["modules"][module]["seconds"]
    return section.get("seconds_per_test", 1.0) * tests


def longest_first(modules, section):
    """`modules` ({name: number of tests}, in collection order) ordered by
    estimated seconds (`section`: a backend's part of the file), longest
    first; ties keep the collection order."""
    position = {name: i for i, name in enumerate(modules)}
    return sorted(modules, key=lambda name: (-estimated_seconds(section, name, modules[name]), position[name]))


def read(backend, path=DURATIONS):
    """`backend`'s part of the file ({} when it has none)."""
    try:
        return json.loads(pathlib.Path(path).read_text(encoding="utf-8")).get(backend, {})
    except FileNotFoundError:
        return {}


def updated(section, measured, keep):
    """`section` with the modules of `measured` (and, unless `keep`, only
    those, their mean per test becoming `seconds_per_test`)."""
    if keep:
        return {**section, "modules": dict(sorted({**section.get("modules", {}), **measured}.items()))}
    tests = sum(entry["tests"] for entry in measured.values())
    per_test = sum(entry["seconds"] for entry in measured.values()) / tests if tests else 1.0
    return {"seconds_per_test": round(per_test, 3), "modules": measured}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", nargs="+", help="JUnit XML reports of a run (pytest --junitxml)")
    parser.add_argument("--backend", default="tensorflow", help="the backend the run used (default tensorflow)")
    parser.add_argument("--file", default=str(DURATIONS), help="the durations file (default tests/module_seconds.json)")
    parser.add_argument(
        "--keep", action="store_true", help="reports of some modules: keep the others and seconds_per_test"
    )
    args = parser.parse_args(argv)
    path = pathlib.Path(args.file)
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    section = data[args.backend] = updated(data.get(args.backend, {}), module_seconds(*args.junit), args.keep)
    path.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    modules = section["modules"]
    total = sum(e["seconds"] for e in modules.values())
    print(f"{path}: {len(modules)} {args.backend} modules, {total:.0f} s in all; longest first:")
    for name in longest_first({m: e["tests"] for m, e in modules.items()}, section)[:10]:
        print(f"  {name}: {modules[name]['seconds']:.0f} s ({modules[name]['tests']} tests)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
