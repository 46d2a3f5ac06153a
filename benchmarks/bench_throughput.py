"""Measure 9: batched serving throughput of an exported decoder.

The dates model of measure 4 (untrained weights, the end token's logit
lowered so that every decode runs its full 11 steps: the same work on every
path), exported once with `keras_attention.export_model` (measure 4's
export, when both run in one process). For greedy and beam 5 decoding at
batch 1, 32 and 256 (distinct dates from the example's generator), dates
per second on each serving path:

- onnxruntime with the session the library's serve command opens
  (`keras-attention-serve`, `keras_attention.export.run_onnx`);
- onnxruntime with each of a few session settings (threads, graph
  optimisation level, thread-pool spinning, parallel execution): the best
  one overall is reported, and measured against the library's default;
- the SavedModel's signature (`tf.saved_model.load(...).signatures`);
- Keras `model.predict(x, batch_size=batch)` on the decoding model.

Per (decoder, batch) the sides alternate in rotating rounds
(`common.alternate`); throughput = batch / median seconds per call.
"""

import os
import time

import numpy as np

from benchmarks import bench_serving, common

FULL = dict(batches=(1, 32, 256), repeats=5, seconds_per_round=0.25)
QUICK = dict(batches=(3,), repeats=2, seconds_per_round=0.01)

# onnxruntime session settings tried: name -> (intra-op threads or None for
# onnxruntime's default, graph optimisation level, spinning, parallel).
SETTINGS = {
    "default": (None, "all", True, False),
    "1 thread": (1, "all", True, False),
    "2 threads, no spinning": (2, "all", False, False),
    "basic graph optimisation": (None, "basic", True, False),
    "extended graph optimisation": (None, "extended", True, False),
    "parallel execution": (None, "all", True, True),
}


# A setting replaces the library's default session only if it is this much
# faster overall: differences below it are within this benchmark's noise.
ADOPT_MARGIN = 1.05


def session_options(threads, level, spinning, parallel):
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
    options.graph_optimization_level = {
        "basic": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if parallel:
        options.execution_mode = onnxruntime.ExecutionMode.ORT_PARALLEL
    return options


def _geomean_vs_library(cells, name):
    """Geometric mean over `cells` of setting `name`'s throughput relative to the library's session."""
    return float(
        np.exp(
            np.mean(
                [
                    np.log(c["per_second"][f"onnxruntime, {name}"] / c["per_second"]["onnxruntime, library default"])
                    for c in cells
                ]
            )
        )
    )


def settle(fn):
    """Let the previous side's thread pools stop spinning (onnxruntime's
    workers spin-wait after a run and would slow whichever side follows),
    then one untimed call."""
    time.sleep(0.05)
    fn()


def _calls_per_round(fn, seconds):
    """How many back-to-back calls fill about `seconds` (at least one)."""
    return max(1, int(seconds / max(common.time_calls(fn, 2), 1e-6)))


def run(quick, log, repeats=None):
    import onnxruntime
    import tensorflow as tf

    from keras_attention.export.onnx import _session

    cfg = dict(QUICK if quick else FULL)
    if repeats:
        cfg["repeats"] = repeats
    # --quick checks that the section runs: two settings are enough for that.
    settings = {name: SETTINGS[name] for name in ("default", "1 thread")} if quick else SETTINGS
    # Measure 4's export (its int8 files unused here), made once a process.
    dates, greedy, beam, export_dir, _, _ = bench_serving.exported(log)
    texts = [human for human, _ in dates.make_dates(max(cfg["batches"]), np.random.default_rng(0))]
    models = {"greedy": greedy, "beam 5": beam}
    signature_of = {"greedy": "translate", "beam 5": "translate_beam"}
    results = {"config": {"steps": dates.TARGET_LENGTH, **cfg}, "cells": {}, "settings": {}}
    loaded = tf.saved_model.load(os.path.join(export_dir, "saved_model"))
    paths = {d: os.path.join(export_dir, f"{signature_of[d]}.onnx") for d in models}
    library = {d: _session(path) for d, path in paths.items()}
    tuned = {
        (d, name): onnxruntime.InferenceSession(path, session_options(*setting), providers=["CPUExecutionProvider"])
        for d, path in paths.items()
        for name, setting in settings.items()
    }
    for decoder, model in models.items():
        signature = loaded.signatures[signature_of[decoder]]
        for batch in cfg["batches"]:
            x = dates.SOURCE.encode(texts[:batch])
            feed, tensor = {"source": x}, tf.constant(x)
            ids = {
                "onnxruntime": library[decoder].run(["ids"], feed)[0],
                "saved_model": signature(source=tensor)["ids"].numpy(),
                "keras_predict": np.asarray(model.predict(x, batch_size=batch, verbose=0)["ids"]),
            }
            same = all(np.array_equal(ids["keras_predict"], v) for v in ids.values())

            def onnx(session, feed=feed):
                return lambda: session.run(None, feed)

            sides = {f"onnxruntime, {name}": onnx(tuned[decoder, name]) for name in settings}
            sides["onnxruntime, library default"] = onnx(library[decoder])
            sides["saved_model"] = lambda s=signature, t=tensor: {k: v.numpy() for k, v in s(source=t).items()}
            sides["keras_predict"] = lambda m=model, x=x, b=batch: m.predict(x, batch_size=b, verbose=0)
            for fn in sides.values():
                fn()  # warm-up (traces predict's function once per shape)
            # Rotating rounds, each side with the call count that fills a round.
            numbers = {name: _calls_per_round(fn, cfg["seconds_per_round"]) for name, fn in sides.items()}
            per_call = {name: [] for name in sides}
            for round_ in range(cfg["repeats"]):
                names = list(sides)
                for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
                    settle(sides[name])
                    per_call[name].append(common.time_calls(sides[name], numbers[name]))
            rate = {name: round(batch / float(np.median(t)), 1) for name, t in per_call.items()}
            results["cells"][f"{decoder} / {batch}"] = {
                "decoder": decoder,
                "batch": batch,
                "same_ids": bool(same),
                "per_second": rate,
                "median_ms": {name: round(1000 * float(np.median(t)), 3) for name, t in per_call.items()},
            }
            log(f"  {decoder}, batch {batch}: " + ", ".join(f"{name} {value:.0f}/s" for name, value in rate.items()))
    cells = list(results["cells"].values())
    relative = {name: _geomean_vs_library(cells, name) for name in settings}
    best = max(relative, key=relative.get)
    # The serve command batches its texts (`--batch-size`, 256 by default):
    # its default session is chosen for the largest batch measured.
    serve_batch = max(cfg["batches"])
    at_serve_batch = {
        name: _geomean_vs_library([c for c in cells if c["batch"] == serve_batch], name) for name in settings
    }
    best_at_serve_batch = max(at_serve_batch, key=at_serve_batch.get)
    results["settings"] = {
        "adopt_margin": ADOPT_MARGIN,
        "serve_batch": serve_batch,
        # "default" has onnxruntime's default options, as the library's session.
        "adopted": best_at_serve_batch != "default" and at_serve_batch[best_at_serve_batch] >= ADOPT_MARGIN,
        "tried": {
            name: dict(zip(("threads", "graph_optimization", "spinning", "parallel"), setting))
            for name, setting in settings.items()
        },
        "geomean_vs_library_default": {name: round(v, 3) for name, v in relative.items()},
        "at_serve_batch_vs_library_default": {name: round(v, 3) for name, v in at_serve_batch.items()},
        "best": best,
        "best_at_serve_batch": best_at_serve_batch,
    }
    for c in cells:
        rate = c["per_second"]
        c["best_setting"] = rate[f"onnxruntime, {best}"]
        c["vs_keras_predict"] = {
            "onnxruntime": round(rate["onnxruntime, library default"] / rate["keras_predict"], 2),
            "onnxruntime_best": round(rate[f"onnxruntime, {best}"] / rate["keras_predict"], 2),
            "saved_model": round(rate["saved_model"] / rate["keras_predict"], 2),
        }
    results["same_ids_all_cells"] = all(c["same_ids"] for c in cells)
    results["method"] = (
        f"dates per second = batch / median seconds per call; {cfg['repeats']} rotating rounds of about "
        f"{cfg['seconds_per_round']} s of back-to-back calls per side, after a warm-up call"
    )
    return results


def markdown(section, table, meta):
    """The report's section 9 (results.md, and the README's serving table)."""
    cfg = section["config"]
    out = [
        f"## 9. Serving throughput (dates model) {meta}",
        "",
        f"Distinct dates, {cfg['steps']} decoder steps each; {section['method']}. "
        f"Same ids on every path: {section['same_ids_all_cells']}.",
        "",
        throughput_table(section, table),
        "",
    ]
    settings = section["settings"]
    tried = ", ".join(f"{name} {value:.2f}x" for name, value in settings["geomean_vs_library_default"].items())
    batch = settings["serve_batch"]
    at_batch = ", ".join(
        f"{name} {value:.2f}x" for name, value in settings["at_serve_batch_vs_library_default"].items()
    )
    choice = settings["best_at_serve_batch"]
    out += [
        "onnxruntime session settings, throughput against the library's session (geometric mean over the "
        "table's cells; `default` has the same options in a session of its own, so its distance from 1.00x is "
        f"the noise): {tried}; at batch {batch}, the serve command's: {at_batch}. "
        + (
            f"At batch {batch}, {choice} is {settings['adopt_margin']:.2f}x or more faster: the serve command "
            "should adopt it."
            if settings["adopted"]
            else f"At batch {batch} none is {settings['adopt_margin']:.2f}x faster than the library's session "
            f"(best: {choice}), so `keras-attention-serve` keeps onnxruntime's defaults (every core, full graph "
            "optimisation)."
        ),
        "",
    ]
    rows = []
    for name in settings["tried"]:
        rows.append([name] + [f"{c['per_second'][f'onnxruntime, {name}']:.0f}" for c in section["cells"].values()])
    out += [table(["onnxruntime setting"] + [f"{key}: dates/s" for key in section["cells"]], rows), ""]
    return out


def throughput_table(section, table):
    """Dates per second by decoder and batch on each path, with ratios to `predict`."""
    best = section["settings"]["best"]
    header = [
        "decoder",
        "batch",
        "onnxruntime",
        f"onnxruntime, {best}",
        "SavedModel",
        "Keras predict",
        "onnxruntime / predict",
        "SavedModel / predict",
    ]
    rows = []
    for c in section["cells"].values():
        rate, ratio = c["per_second"], c["vs_keras_predict"]
        rows.append(
            [
                c["decoder"],
                c["batch"],
                f"{rate['onnxruntime, library default']:,.0f}",
                f"{rate[f'onnxruntime, {best}']:,.0f}",
                f"{rate['saved_model']:,.0f}",
                f"{rate['keras_predict']:,.0f}",
                f"{ratio['onnxruntime']:.1f}x",
                f"{ratio['saved_model']:.1f}x",
            ]
        )
    return table(header, rows)


def summary_row(section, fmt):
    """The report's targets row: onnxruntime against predict, worst and best cell."""
    ratios = [c["vs_keras_predict"]["onnxruntime"] for c in section["cells"].values()]
    return [
        "9. served dates/s, onnxruntime / Keras predict",
        "reported",
        f"{fmt(min(ratios), 1)}x to {fmt(max(ratios), 1)}x (batch 1 to 256, greedy and beam 5)",
        "reported",
    ]
