"""What works on each backend, measured by the test suite: results/backends.json
and the backend table of docs/backends.md.

    python -m tools.backend_table            # run the suite's backend-neutral modules on
                                             # TensorFlow, JAX and PyTorch; write the
                                             # results file and the page's block
    python -m tools.backend_table --backends jax      # rerun one backend, keep the others
    python -m tools.backend_table --modules test_a.py test_b.py   # rerun these modules on
                                             # each backend; the other modules' rows stay
    python -m tools.backend_table --report   # rewrite the page's block from the results file
    python -m tools.backend_table --check    # exit 1 if the page's block is out of date

The backend-neutral modules are read from tests/: those with the line
`pytestmark = pytest.mark.any_backend` (tests/conftest.py's ANY_BACKEND),
whatever they are when this runs. Each backend runs them in its own
environment (TensorFlow: .venv; JAX: .venv-jax; PyTorch: .venv-torch;
`make test-jax` / `make test-torch` build those), one pytest process per
module with a JUnit XML report (a process that dies leaves its `-v` lines:
what they report counts, and the test it died in counts as an error);
`--parallel` runs the three backends at once. Every test is then counted, by
its outcome, in one area (the
first of AREAS whose pattern its id matches; ids name the module, the test
and its case, e.g. `test_layer_discipline.py::test_matches_numpy_reference[
key=value-masked-2-additive]`), with the reasons of its skips.
"""

import argparse
import collections
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

from tools.backend_merge import OUTCOMES, areas_of, merge_problem, merge_section, module_areas
from tools.readme_block import replace_block

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "backends.md"
RESULTS = ROOT / "results" / "backends.json"
TESTS = ROOT / "tests"

BEGIN, END = "<!-- backend-table:begin -->", "<!-- backend-table:end -->"
ANY_BACKEND = "pytestmark = pytest.mark.any_backend"
BACKENDS = {"tensorflow": ".venv", "jax": ".venv-jax", "torch": ".venv-torch"}
LABELS = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}

# (area, pattern): a test belongs to the first area whose pattern its id
# matches (searched, case-insensitively). Whole modules first (export, the
# cross-backend files), then the layer a case names: a case id such as
# `decoder_gru_additive` or `beam_general` is a decoder's even though it
# names a score layer too, so decoders come before the score layers.
AREAS = [
    ("export", r"^test_export"),
    (".keras files across backends", r"^test_keras_files_across_backends"),
    (
        "decoders and decoding",
        r"[\[\-](decoder|beam|greedy|sample|ensemble|teacher_forced)"
        r"|::test_\w*(decod|beam|greedy|search|sampl)"
        r"|^test_(beam_steps|decoding|decoders|masked_steps|randomness_in_loops|inference|ensemble|scheduled)",
    ),
    ("multi-head and self-attention", r"multi_head|self_attention"),
    ("pooling and hierarchical", r"pool|hierarch"),
    ("pointer and targeted", r"pointer|targeted"),
    ("decoder cells", r"cell|wrapper"),
    ("score layers", r"additive|dot|concat|general|hard|monoton|luong|bahdanau|attention_layer|score|chunk"),
]
OTHER = "other"

# What only TensorFlow does, and why (the table's last column; the skip
# reasons the runs record are added to it).
TENSORFLOW_ONLY = {
    "export": (
        "ONNX export of the decode loops (the loop inside the graph) needs TensorFlow: tf2onnx converts "
        "its while loop; the other backends export less, and `export_model` refuses what they cannot "
        "with an error that names the way out (docs/export.md has the matrix)"
    ),
}


def any_backend_modules():
    """The test modules marked backend-neutral, by file name."""
    return sorted(p.name for p in TESTS.glob("test_*.py") if ANY_BACKEND in p.read_text(encoding="utf-8"))


def tensorflow_only_modules():
    return sorted(p.name for p in TESTS.glob("test_*.py") if ANY_BACKEND not in p.read_text(encoding="utf-8"))


def area_of(test_id):
    for area, pattern in AREAS:
        if re.search(pattern, test_id, re.IGNORECASE):
            return area
    return OTHER


def _reason(message):
    """A skip message without pytest's prefix and location."""
    message = re.sub(r"^Skipped:\s*", "", (message or "").strip())
    message = re.sub(r"^\('?[^']*', \d+, '?", "", message).rstrip("')")
    return message.splitlines()[0] if message else "skipped"


def parse_junit(path):
    """{test id: (outcome, skip reason or None)} from a JUnit XML report."""
    tests = {}
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1] + ".py"
        test_id = f"{module}::{case.get('name')}"
        outcome, reason = "passed", None
        for child in case:
            if child.tag == "skipped":
                outcome, reason = "skipped", _reason(child.get("message"))
            elif child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
        tests[test_id] = (outcome, reason)
    return tests


def tally(tests):
    """Counts per area and per module, and the skip reasons per area."""
    by_module = module_areas(tests, area_of)
    modules = {m: {o: sum(a[o] for a in areas.values()) for o in OUTCOMES} for m, areas in by_module.items()}
    return areas_of(by_module), modules


_VERBOSE = re.compile(r"^(tests/)?(test_\w+\.py::\S+)(?: (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)(?: \((.*)\))?)?")


def parse_verbose(output, exit_status, module):
    """{test id: (outcome, skip reason)} from `pytest -v` output, for a run
    that died before writing its report: the test it was running when it
    died counts as an error."""
    tests, running = {}, None
    for line in output.splitlines():
        match = _VERBOSE.match(line.strip())
        if not match:
            continue
        test_id, outcome, reason = match.group(2), match.group(3), match.group(4)
        if outcome is None:
            running = test_id
            continue
        outcome = {"XFAIL": "skipped", "XPASS": "passed"}.get(outcome, outcome.lower())
        tests[test_id] = (outcome, _reason(reason) if outcome == "skipped" else None)
        running = None
    # The test running when the process died, or the module itself when
    # none had started (the tests after it never ran: they are not counted).
    tests[running or f"{module}::(crashed with exit status {exit_status})"] = ("error", None)
    return tests


def run_module(python, backend, module, pytest_args=()):
    """Run one test module under pytest on `backend` (its own process: a
    crash loses that module's report only); {test id: (outcome, reason)}."""
    with tempfile.TemporaryDirectory() as directory:
        junit = os.path.join(directory, "junit.xml")
        argv = [str(python), "-m", "pytest", "-v", "-p", "no:cacheprovider", f"--junitxml={junit}", *pytest_args]
        env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
        proc = subprocess.run(
            [*argv, str(TESTS / module)], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        if os.path.exists(junit):
            return parse_junit(junit), proc.returncode
        return parse_verbose(proc.stdout, proc.returncode, module), proc.returncode


def run_backend(backend, modules, log, pytest_args=()):
    """Run `modules` under pytest on `backend`; its section of the results."""
    python = ROOT / BACKENDS[backend] / "bin" / "python"
    if not python.exists():
        return {"skipped": f"{BACKENDS[backend]} is not built (make test-{backend} builds it)"}
    log(f"== {backend}: {len(modules)} modules")
    begin = time.perf_counter()
    tests, statuses, module_seconds = {}, {}, {}
    for module in modules:
        start = time.perf_counter()
        found, statuses[module] = run_module(python, backend, module, pytest_args)
        tests.update(found)
        module_seconds[module] = round(time.perf_counter() - start, 1)
        counts = collections.Counter(outcome for outcome, _ in found.values())
        log(f"   {backend} {module}: {dict(counts)} ({module_seconds[module]:.0f} s)")
    versions = subprocess.run(
        [
            str(python),
            "-c",
            f"import importlib.metadata as m; print(m.version('keras'), m.version({_package(backend)!r}))",
        ],
        capture_output=True,
        text=True,
    ).stdout.split()
    versions = {"keras": versions[0] if versions else None, _package(backend): versions[1] if versions else None}
    return section_of(tests, statuses, module_seconds, versions, seconds=round(time.perf_counter() - begin, 1))


def section_of(tests, statuses, module_seconds, versions, seconds=None):
    """A backend's section of the results from its runs' {test id: (outcome,
    reason)}, {module: exit status} and {module: seconds}."""
    areas, by_module = tally(tests)
    return {
        "versions": versions,
        "seconds": round(sum(module_seconds.values()), 1) if seconds is None else seconds,
        "exit_status": max(statuses.values(), key=abs, default=0),
        "exit_statuses": {m: code for m, code in statuses.items() if code not in (0, 5)},
        "totals": {k: sum(a[k] for a in areas.values()) for k in OUTCOMES},
        "areas": areas,
        "modules": by_module,
        # What a later `--modules` rerun takes out and puts back (tools/backend_merge.py).
        "module_areas": module_areas(tests, area_of),
        "module_seconds": module_seconds,
    }


def _package(backend):
    return {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]


# -- the page's block ----------------------------------------------------------


def _cell(area, bold=False):
    if area is None:
        return "-"
    parts = [f"{area['passed']} passed"]
    if area["skipped"]:
        parts.append(f"{area['skipped']} skipped")
    bad = area["failed"] + area["error"]
    if bad:
        parts.append(f"{bad} failed" if bold else f"**{bad} failed**")
    text = ", ".join(parts)
    return f"**{text}**" if bold else text


def _notes(name, sections):
    """The last column: what is TensorFlow's alone in this area, and why."""
    notes = [TENSORFLOW_ONLY[name]] if name in TENSORFLOW_ONLY else []
    reasons = collections.Counter()
    for backend, section in sections.items():
        area = section.get("areas", {}).get(name)
        for reason, count in (area or {}).get("skip_reasons", {}).items():
            reasons[(reason, LABELS[backend])] += count
    grouped = collections.defaultdict(list)
    for (reason, backend), count in reasons.items():
        grouped[_short(reason)].append(f"{backend} {count}")
    skips = [f"{reason} ({', '.join(where)})" for reason, where in grouped.items()]
    if len(skips) > SHOWN_REASONS:  # the results file keeps them all
        skips = skips[:SHOWN_REASONS] + [f"{len(skips) - SHOWN_REASONS} more reasons in results/backends.json"]
    if skips:
        notes.append("skipped: " + "; ".join(skips))
    return "; ".join(notes).replace("|", "\\|") or "-"


SHOWN_REASONS = 3


def _short(reason):
    """A skip reason's first clause (the results file has it whole)."""
    reason = re.split(r" \(|; |, which |: `", reason, maxsplit=1)[0]
    return reason if len(reason) <= 90 else reason[:87] + "..."


def page_block(results):
    sections = {b: s for b, s in results["backends"].items() if "skipped" not in s}
    names = [a for a, _ in AREAS] + [OTHER]
    present = [n for n in names if any(n in s["areas"] for s in sections.values())]
    header = ["area"] + [LABELS[b] for b in sections] + ["TensorFlow only; skips: reason (backend count)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for name in present:
        label = name
        if name == OTHER:
            modules = sorted({m for s in sections.values() for m in s["areas"].get(name, {}).get("modules", [])})
            label = f"other ({', '.join(modules)})"
        cells = [_cell(s["areas"].get(name)) for s in sections.values()]
        lines.append("| " + " | ".join([label, *cells, _notes(name, sections)]) + " |")
    totals = [s["totals"] for s in sections.values()]
    lines.append("| **all** | " + " | ".join(_cell(t, bold=True) for t in totals) + " |  |")
    versions = ", ".join(
        f"{LABELS[b]} {s['versions'].get(_package(b))} ({s['seconds']:.0f} s)" for b, s in sections.items()
    )
    lines += [
        "",
        f"`python -m tools.backend_table` on {results['date']}: the {len(results['modules'])} backend-neutral test "
        f"modules ({', '.join(m.removeprefix('test_').removesuffix('.py') for m in results['modules'])}) on "
        f"{versions}, Keras {next(iter(sections.values()))['versions']['keras']}. "
        f"The other {len(results['tensorflow_only_modules'])} test modules import TensorFlow and run on it alone "
        "(the whole suite: `make test`).",
    ]
    for rerun in results.get("reruns", []):
        where = ", ".join(LABELS[b] for b in rerun["backends"])
        lines += ["", f"Rerun since and merged in: {', '.join(rerun['modules'])} on {where} ({rerun['date']})."]
    for backend, section in results["backends"].items():
        if "skipped" in section:
            lines += ["", f"{LABELS[backend]} not measured: {section['skipped']}."]
    return "\n".join(lines)


def updated_page(text, results):
    return replace_block(text, BEGIN, END, page_block(results), PAGE.name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/backends.md's block is out of date")
    parser.add_argument("--report", action="store_true", help="only rewrite the page's block from the results file")
    parser.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated subset to (re)run")
    parser.add_argument("--results", default=str(RESULTS), help="the results file (default results/backends.json)")
    parser.add_argument("--parallel", action="store_true", help="run the backends at the same time")
    parser.add_argument(
        "--modules",
        nargs="+",
        default=None,
        help="rerun only these backend-neutral modules and merge them into the results (the others' rows stay)",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest (e.g. -n 2)")
    args = parser.parse_args(argv)
    path = pathlib.Path(args.results)
    if args.check or args.report:
        results = json.loads(path.read_text(encoding="utf-8"))
        text = PAGE.read_text(encoding="utf-8")
        new = updated_page(text, results)
        if args.check:
            if new != text:
                print(
                    f"error: docs/backends.md's backend table is out of date with {path}; run "
                    "python -m tools.backend_table --report",
                    file=sys.stderr,
                )
                return 1
            return 0
        PAGE.write_text(new, encoding="utf-8")
        print("updated docs/backends.md's table" if new != text else "docs/backends.md's table is up to date")
        return 0
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown:
        parser.error(f"--backends: unknown {unknown}; expected some of {sorted(BACKENDS)}")
    results = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {"backends": {}}
    modules = any_backend_modules()
    chosen = None
    if args.modules:
        chosen = sorted({os.path.basename(m.strip()) for arg in args.modules for m in arg.split(",") if m.strip()})
        unknown = sorted(set(chosen) - set(modules))
        if unknown:
            parser.error(f"--modules: {unknown} are not backend-neutral modules; expected some of {modules}")
        for backend in backends:
            problem = merge_problem(results["backends"].get(backend), chosen)
            if problem:
                parser.error(f"--modules: cannot merge into {path}'s {backend}: {problem}")
        modules = chosen
    elif set(backends) != set(BACKENDS) and results.get("modules") not in (None, modules):
        print(
            "warning: the backend-neutral modules changed since the results file was written; "
            "rerun every backend for a consistent table",
            file=sys.stderr,
        )
    log = lambda message: print(message, flush=True)  # noqa: E731
    if args.parallel:  # one thread per backend, each running its pytest processes in turn
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(len(backends)) as pool:
            futures = {b: pool.submit(run_backend, b, modules, log, args.pytest_args) for b in backends}
            ran = {b: f.result() for b, f in futures.items()}
    else:
        ran = {backend: run_backend(backend, modules, log, args.pytest_args) for backend in backends}
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m tools.backend_table " + " ".join(argv if argv is not None else sys.argv[1:])
    if chosen is None:
        results["backends"].update(ran)
        results.update({"date": date, "command": command, "modules": modules})
        if set(backends) == set(BACKENDS):
            results.pop("reruns", None)
    else:
        for backend, section in ran.items():
            results["backends"][backend] = merge_section(results["backends"][backend], section, chosen)
        results["modules"] = sorted(set(results.get("modules", [])) | set(chosen))
        reruns = results.setdefault("reruns", [])
        reruns.append({"date": date, "command": command, "modules": chosen, "backends": backends})
    results["backends"] = {b: results["backends"][b] for b in BACKENDS if b in results["backends"]}
    results.update(
        {
            "tensorflow_only_modules": tensorflow_only_modules(),
            "areas": [{"area": a, "pattern": p} for a, p in AREAS],
        }
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")
    if path == RESULTS:
        PAGE.write_text(updated_page(PAGE.read_text(encoding="utf-8"), results), encoding="utf-8")
    print(page_block(results))
    print(f"wrote {path}" + (" and docs/backends.md's backend table" if path == RESULTS else ""))
    failed = any(s.get("exit_statuses") for s in results["backends"].values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
