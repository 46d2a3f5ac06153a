"""Measure 4: serving one date through the exported dates model.

The dates translator of examples/translate_dates.py (`build_models()`: a
bidirectional GRU encoder, `AttentionGRUCell` + `AdditiveAttention`, in-graph
greedy and beam decoders), exported with `keras_attention.export_model` to a
SavedModel (signatures `translate`, `translate_beam`) and ONNX. Its weights
are the seeded initial ones, except that the end token's logit bias is
lowered so that every decode runs the full 11 steps: the amount of work a
trained model does on a date (10 characters and the end token), without the
minutes of training.

One date ("tuesday 3 march 2015", batch 1) per call; 200 calls per side
after warm-up, in 5 rounds of 40 calls per side, the sides taking turns in a
rotating order; p50 and p99 latency.
- onnxruntime: `InferenceSession.run` (CPU provider, default threads);
- saved_model: `tf.saved_model.load(...).signatures["translate"]`;
- keras_predict: `greedy_model.predict(x)`; keras_call: `greedy_model(x)`
  inside a `tf.function` (what Keras users without an export run).
Beam search (width 5) against greedy through onnxruntime and the SavedModel.
"""

import atexit
import os
import shutil
import tempfile
import time

import numpy as np

from benchmarks import common

FULL = dict(calls=200, rounds=5, warmup=10, predict_calls=200)
QUICK = dict(calls=10, rounds=1, warmup=2, predict_calls=5)
DATE = "tuesday 3 march 2015"


def _dates_module():
    from examples import translate_dates

    return translate_dates


def build(log):
    import keras

    dates = _dates_module()
    keras.utils.set_random_seed(0)
    trainer, greedy, beam = dates.build_models()
    readout = trainer.get_layer("readout")
    bias = readout.bias.numpy()
    bias[dates.END] = -50.0
    readout.bias.assign(bias)
    return dates, greedy, beam


_EXPORTED = []


def exported(log):
    """`build`'s models exported with `keras_attention.export_model`
    (SavedModel; ONNX in float32 and int8): (dates, greedy, beam, export
    directory, export report, export seconds). Built and exported once a
    process: this measure and measure 9 (throughput) serve the same export,
    and the tf2onnx conversion of the two decoders is most of either's CPU
    time in a --quick run."""
    if not _EXPORTED:
        import keras_attention as ka

        dates, greedy, beam = build(log)
        directory = tempfile.mkdtemp(prefix="bench-dates-")
        atexit.register(shutil.rmtree, directory, ignore_errors=True)
        export_dir = os.path.join(directory, "export")
        begin = time.perf_counter()
        report = ka.export_model(
            {"translate": greedy, "translate_beam": beam}, export_dir, verify=False, quantize="int8"
        )
        export_s = time.perf_counter() - begin
        log(f"  exported in {export_s:.1f} s")
        _EXPORTED.append((dates, greedy, beam, export_dir, report, export_s))
    return _EXPORTED[0]


def run(quick, log):
    import onnxruntime  # noqa: F401
    import tensorflow as tf

    cfg = QUICK if quick else FULL
    dates, greedy, beam, export_dir, report, export_s = exported(log)
    x = dates.SOURCE.encode([DATE])
    sessions = {
        name: onnxruntime.InferenceSession(os.path.join(export_dir, f"{name}.onnx"), providers=["CPUExecutionProvider"])
        for name in ("translate", "translate_beam", "translate.int8", "translate_beam.int8")
    }
    single = onnxruntime.SessionOptions()
    single.intra_op_num_threads = 1
    single.inter_op_num_threads = 1
    sessions["translate_1thread"] = onnxruntime.InferenceSession(
        os.path.join(export_dir, "translate.onnx"), single, providers=["CPUExecutionProvider"]
    )
    loaded = tf.saved_model.load(os.path.join(export_dir, "saved_model"))
    signatures = {name: loaded.signatures[name] for name in ("translate", "translate_beam")}
    feed = {"source": x}
    tensor = tf.constant(x)
    keras_call = tf.function(lambda s: greedy(s))

    def onnx(name):
        return lambda: sessions[name].run(None, feed)

    def saved(name):
        return lambda: {k: v.numpy() for k, v in signatures[name](source=tensor).items()}

    # Same ids from every path.
    ids = {
        "onnxruntime": sessions["translate"].run(["ids"], feed)[0],
        "saved_model": signatures["translate"](source=tensor)["ids"].numpy(),
        "keras": np.asarray(greedy.predict(x, verbose=0)["ids"]),
    }
    same_ids = all(np.array_equal(ids["keras"], v) for v in ids.values())
    int8_same_ids = {
        name: bool(np.array_equal(sessions[name].run(["ids"], feed)[0], sessions[f"{name}.int8"].run(["ids"], feed)[0]))
        for name in ("translate", "translate_beam")
    }

    sides = {
        "onnxruntime": onnx("translate"),
        "onnxruntime_1thread": onnx("translate_1thread"),
        "saved_model": saved("translate"),
        "keras_call": lambda: {k: v.numpy() for k, v in keras_call(tensor).items()},
        "onnxruntime_beam5": onnx("translate_beam"),
        "saved_model_beam5": saved("translate_beam"),
        "onnxruntime_int8": onnx("translate.int8"),
        "onnxruntime_beam5_int8": onnx("translate_beam.int8"),
    }
    for fn in sides.values():
        for _ in range(cfg["warmup"]):
            fn()
    # Blocks of calls per side, the order rotating each round. (Not call
    # by call: onnxruntime's thread pool spins for a while after a run and
    # would slow whichever side runs next.)
    times = {name: [] for name in sides}
    names = list(sides)
    rounds = cfg["rounds"]
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            fn = sides[name]
            for _ in range(2):  # let the previous side's threads settle
                fn()
            for _ in range(cfg["calls"] // rounds):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    # predict is ~100x slower per call: fewer calls, after its warm-up.
    for _ in range(2):
        greedy.predict(x, verbose=0)
    times["keras_predict"] = []
    for _ in range(cfg["predict_calls"]):
        start = time.perf_counter()
        greedy.predict(x, verbose=0)
        times["keras_predict"].append(time.perf_counter() - start)
    profile = None
    if not quick:
        profile = {
            "onnxruntime": ort_profile(os.path.join(export_dir, "translate.onnx"), feed),
            "saved_model": common.profile_ops(saved("translate"), number=20, top=8),
        }

    latency = {name: common.percentiles(t) for name, t in times.items()}
    p50 = {name: s["p50_ms"] for name, s in latency.items()}
    return {
        "config": {"date": DATE, "steps": dates.TARGET_LENGTH, "beam_width": 5, **cfg},
        "method": (
            f"batch 1, {cfg['rounds']} rounds of {cfg['calls'] // cfg['rounds']} calls per side in rotating order, "
            "after warm-up; p50/p99 of per-call wall time"
        ),
        "export_s": round(export_s, 1),
        "same_ids_all_paths": bool(same_ids),
        "latency_ms": latency,
        "onnx_speedup_vs_saved_model_p50": common.ratio(p50["saved_model"], p50["onnxruntime"]),
        "onnx_1thread_speedup_vs_saved_model_p50": common.ratio(p50["saved_model"], p50["onnxruntime_1thread"]),
        "profile": profile,
        "onnx_speedup_vs_keras_predict_p50": common.ratio(p50["keras_predict"], p50["onnxruntime"]),
        "int8": {
            "speedup_vs_float32_p50": {
                "greedy": common.ratio(p50["onnxruntime"], p50["onnxruntime_int8"]),
                "beam5": common.ratio(p50["onnxruntime_beam5"], p50["onnxruntime_beam5_int8"]),
            },
            "bytes": {name: entry["bytes"] for name, entry in report.quantized.items()},
            "float32_bytes": {name: entry["float32_bytes"] for name, entry in report.quantized.items()},
            "same_ids_as_float32": int8_same_ids,
            "note": "the model's weights are untrained: accuracy is measured on CMUdict (examples/g2p/serving.py --int8)",
        },
        "beam5_over_greedy_p50": {
            "onnxruntime": common.ratio(p50["onnxruntime_beam5"], p50["onnxruntime"]),
            "saved_model": common.ratio(p50["saved_model_beam5"], p50["saved_model"]),
        },
        "targets": {"onnx_speedup_vs_saved_model": 2.0, "beam5_over_greedy_max": 3.0},
    }


def ort_profile(path, feed, calls=50, top=8):
    """onnxruntime's own profiler: time per call by node type (ms per call)."""
    import json

    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(os.path.dirname(path), "ort_profile")
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(calls):
        session.run(None, feed)
    with open(session.end_profiling()) as f:
        events = json.load(f)
    by_type, runs = {}, []
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event.get("args", {}).get("op_name", "?")
            entry = by_type.setdefault(op, [0, 0.0])
            entry[0] += 1
            entry[1] += event["dur"]
        elif event.get("cat") == "Session" and event["name"] == "model_run":
            runs.append(event["dur"])
    # A Loop/If node's time includes its body's kernels: count those once.
    control = {op: by_type.pop(op) for op in ("Loop", "If", "Scan") if op in by_type}
    total_us = sum(v[1] for v in by_type.values())
    rows = sorted(by_type.items(), key=lambda kv: -kv[1][1])
    return {
        "model_run_ms": round(float(np.median(runs)) / 1000, 3) if runs else None,
        "kernel_ms_per_call": round(total_us / calls / 1000, 3),
        "kernels_per_call": round(sum(v[0] for v in by_type.values()) / calls),
        "control_flow_ms_per_call": {op: round(v[1] / calls / 1000, 3) for op, v in control.items()},
        "note": "profiling adds a per-kernel cost: compare shares, not absolute times",
        "top_op_types": [
            {"type": k, "count_per_call": round(v[0] / calls), "ms_per_call": round(v[1] / calls / 1000, 3)}
            for k, v in rows[:top]
        ],
    }
