"""Issue 32's "no slowdown" check: the benchmark sections decoder, serving,
options and throughput before the decoding protocol (1e90b49) and after it,
compared by their ratios: results/protocol_benchmark.json and its table.

    python -m tools.protocol_benchmark                 # print the table
    python -m tools.protocol_benchmark --run after     # run the four sections on this
                                                       # checkout, add the run, print
    python -m tools.protocol_benchmark --record before /tmp/bench-before --commit 1e90b49
                                                       # add a finished run's results.json

Ratios, not times, are compared: each ratio's sides alternate round by round
in one process, so the load of the shared machine hits both alike, while the
absolute times of two runs minutes apart differ with that load. A ratio's
noise is the largest disagreement between runs of the same code (two or more
runs of a side); "within noise" means the change from before to after is no
larger. The op counts of the profiled graphs do not depend on load: a
protocol that added work per step would show there first.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "results", "protocol_benchmark.json")
SECTIONS = ("decoder", "serving", "options", "throughput")


def _pick(section, paths):
    """{name: value} for each dotted path present in the section."""
    picked = {}
    for name, path in paths:
        value = section
        for key in path.split("|"):
            value = value.get(key) if isinstance(value, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            picked[name] = value
    return picked


def extract(results):
    """The ratios, load-free op counts and absolute medians of one results.json."""
    sections = results["sections"]
    ratios, counts, times = {}, {}, {}
    decoder = sections.get("decoder", {})
    for group in ("speedup", "best_vs_best"):
        for key in decoder.get(group, {}):
            ratios[f"decoder {group}.{key}"] = decoder[group][key]
    for probe in decoder.get("source_length_probe", []):
        for key in ("vs_plain_keras", "best_vs_plain_keras"):
            ratios[f"decoder S={probe['source_length']} {key}"] = probe[key]
    for side, profile in decoder.get("profile", {}).items():
        counts[f"decoder {side} ops/step"] = profile["ops_per_step"]
    for side, stats in decoder.get("step_ms", {}).items():
        times[f"decoder {side} ms"] = stats["median_ms"]
    serving = sections.get("serving", {})
    paths = [(key, key) for key in serving if key.endswith("_p50") and not isinstance(serving[key], dict)]
    paths += [(f"beam5_over_greedy_p50.{k}", f"beam5_over_greedy_p50|{k}") for k in ("onnxruntime", "saved_model")]
    paths += [(f"int8 speedup_vs_float32_p50.{k}", f"int8|speedup_vs_float32_p50|{k}") for k in ("greedy", "beam5")]
    ratios.update({f"serving {name}": v for name, v in _pick(serving, paths).items()})
    counts.update(
        {
            f"serving {name}": v
            for name, v in _pick(
                serving,
                [
                    ("onnxruntime kernels/call", "profile|onnxruntime|kernels_per_call"),
                    ("saved_model ops/step", "profile|saved_model|ops_per_step"),
                    ("onnx bytes greedy", "int8|float32_bytes|translate"),
                    ("onnx bytes beam", "int8|float32_bytes|translate_beam"),
                ],
            ).items()
        }
    )
    if "export_s" in serving:
        times["serving export s"] = serving["export_s"]
    for side, stats in serving.get("latency_ms", {}).items():
        times[f"serving {side} p50 ms"] = stats["p50_ms"]
    for batch, cell in sections.get("options", {}).get("batches", {}).items():
        for side, value in cell.get("ratio_vs_beam", {}).items():
            if side != "beam":  # 1 by definition
                ratios[f"options b={batch} {side}/beam"] = value
        times[f"options b={batch} beam ms"] = cell["ms"]["beam"]["median_ms"]
    for name, cell in sections.get("throughput", {}).get("cells", {}).items():
        for side, value in cell.get("vs_keras_predict", {}).items():
            ratios[f"throughput {name} {side}/keras_predict"] = value
        for side in ("onnxruntime, library default", "saved_model", "keras_predict"):
            times[f"throughput {name} {side} /s"] = cell["per_second"][side]
    meta = {name: sections[name].get("meta", {}) for name in SECTIONS if name in sections}
    errors = {name: sections[name]["error"] for name in SECTIONS if "error" in sections.get(name, {})}
    return {
        "wall_s": {name: m.get("seconds") for name, m in meta.items()},
        "load_1min_before_after": {
            name: [(m.get(k) or [None])[0] for k in ("loadavg_before", "loadavg_after")] for name, m in meta.items()
        },
        "errors": errors,
        "ratios": ratios,
        "op_counts": counts,
        "absolute": times,
    }


def _load():
    if os.path.exists(RESULTS):
        with open(RESULTS) as f:
            return json.load(f)
    return {
        "about": " ".join(__doc__.split("\n\n")[0].split()),
        "rerun": "python -m tools.protocol_benchmark --run after",
        "runs": [],
    }


def record(label, results_path, commit, command, wall_s=None):
    with open(results_path) as f:
        results = json.load(f)
    run = {"label": label, "commit": commit, "command": command, "date": results["machine"]["date"]}
    run.update({"cpu_count": results["machine"].get("cpu_count"), "total_wall_s": wall_s})
    run.update(extract(results))
    data = _load()
    data["runs"].append(run)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")


def _geomean(values):
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _spread(values):
    """Largest relative disagreement between runs of one side (None with one run)."""
    return max(values) / min(values) - 1 if len(values) > 1 else None


def table(data, kind="ratios"):
    """Rows (name, before, after, change, noise, verdict): geometric means over each side's runs."""
    sides = {label: [r for r in data["runs"] if r["label"] == label] for label in ("before", "after")}
    names = dict.fromkeys(name for run in data["runs"] for name in run[kind])  # a run cut short lacks some
    rows = []
    for name in names:
        values = {side: [r[kind][name] for r in runs if name in r[kind]] for side, runs in sides.items()}
        if not values["before"] or not values["after"] or min(values["before"] + values["after"]) <= 0:
            continue
        before, after = _geomean(values["before"]), _geomean(values["after"])
        change = after / before - 1
        spreads = [s for s in (_spread(values["before"]), _spread(values["after"])) if s is not None]
        noise = max(spreads) if spreads else None
        verdict = (
            "n/a (one run a side)" if noise is None else "within noise" if abs(change) <= noise else "OUTSIDE noise"
        )
        rows.append((name, before, after, change, noise, verdict))
    return rows


def print_table(data, out=sys.stdout):
    labels = [f"{r['label']} {r['commit'][:7]} {r['date']}" for r in data["runs"]]
    print("runs: " + "; ".join(labels), file=out)
    notes = {
        "ratios": "compared",
        "op_counts": "load-free",
        "absolute": "ms, s or dates/s: they follow the machine's load, shown only",
    }
    for kind, note in notes.items():
        rows = table(data, kind)
        print(f"\n{kind} ({note}; before, after: geometric means over runs; noise: largest spread of a side)", file=out)
        print(f"{'':58} {'before':>9} {'after':>9} {'change':>8} {'noise':>7}  verdict", file=out)
        for name, before, after, change, noise, verdict in rows:
            noise_text = "-" if noise is None else f"{noise:7.1%}"
            print(f"{name:58} {before:9.4g} {after:9.4g} {change:+8.1%} {noise_text:>7}  {verdict}", file=out)
        for section in dict.fromkeys(row[0].split()[0] for row in rows):
            own = [row for row in rows if row[0].split()[0] == section]
            within = sum(row[5] == "within noise" for row in own)
            median = sorted(row[3] for row in own)[len(own) // 2]
            print(f"  {section}: {within} of {len(own)} within noise, median change {median:+.1%}", file=out)
    for run in data["runs"]:
        load = run["load_1min_before_after"]
        print(f"\n{run['label']} {run['commit'][:7]}: wall s {run['wall_s']}, 1-min load before/after {load}", file=out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", choices=("before", "after"), help="run the four sections on this checkout, add them")
    parser.add_argument("--record", nargs=2, metavar=("LABEL", "DIR"), help="add DIR/results.json as a run")
    parser.add_argument("--commit", help="commit of a --record run (default: this checkout's HEAD)")
    parser.add_argument("--command", default="", help="the command that made a --record run")
    parser.add_argument("--wall-s", type=float, default=None, help="a --record run's total wall seconds")
    parser.add_argument("--out", default="/tmp/protocol-benchmark", help="--run's output directory")
    args = parser.parse_args(argv)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    if args.run:
        command = [sys.executable, "-m", "benchmarks.run", "--only", ",".join(SECTIONS), "--out", args.out]
        begin = time.perf_counter()
        subprocess.run(command, cwd=ROOT, check=True)
        wall = round(time.perf_counter() - begin, 1)
        record(args.run, os.path.join(args.out, "results.json"), head, " ".join(["python"] + command[1:]), wall)
    elif args.record:
        label, directory = args.record
        if label not in ("before", "after"):
            parser.error(f"--record's LABEL must be 'before' or 'after', got {label!r}")
        if not args.command.startswith(("python -m ", "make ")):
            # Every results file records the command that remakes it (tests/test_docs.py).
            parser.error(
                f"--record needs --command, the 'python -m ...' or 'make ...' that made it; got {args.command!r}"
            )
        record(label, os.path.join(directory, "results.json"), args.commit or head, args.command, args.wall_s)
    print_table(_load())
    return 0


if __name__ == "__main__":
    sys.exit(main())
