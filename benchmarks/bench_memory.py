"""Measure 3: peak memory of additive attention, naive broadcast against chunked.

Both sides get the same query `(B, Tq, u)`, key `(B, Tv, u)` and value
`(B, Tv, 64)`:
- keras_naive: `keras.layers.AdditiveAttention(use_scale=True)`, which forms
  `tanh(q[:, :, None] + k[:, None])` of shape `(B, Tq, Tv, u)`;
- keras_attention: `AdditiveAttention(units=u)` with identity projections
  and the same score vector, so the results must agree, with its default
  `chunk_size="auto"` (and `chunk_size=None`, the unchunked form, for
  reference).

How the peak is measured: every variant runs in a fresh process (with
--quick, one process runs them all in turn); the function is traced and
run once on tiny inputs with unknown-shape signatures (so no retracing
happens later), the inputs are created, then the
kernel's peak-RSS counter is reset (`/proc/self/clear_refs` = 5) and the
call runs; peak = VmHWM after the call - VmRSS before it. That is the real
resident memory of everything the call allocated (TensorFlow's CPU allocator
does not track peaks: `tf.config.experimental.get_memory_info("CPU:0")`
returns zeros). tracemalloc would not see TensorFlow's buffers.

At B = 32, Tq = Tv = 1024, u = 256 the naive block alone is 32 GiB (float32),
more than many machines have: the naive side is measured at small batches and
its peak extrapolated linearly in B (the block is linear in B), while ours is
measured at B = 32 directly; at the small batches both are measured.
"""

import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from benchmarks import common

FULL = dict(batch=32, length=1024, units=256, value_dim=64, naive_batches=[1, 2], train=True, chunk="auto")
# Quick: the "auto" chunk would not chunk such small inputs; force chunks of 8.
QUICK = dict(batch=1, length=48, units=16, value_dim=8, naive_batches=[1], train=False, chunk="8")


def _inputs(batch, length, units, value_dim, seed=0):
    rng = np.random.default_rng(seed)
    query = rng.normal(size=(batch, length, units)).astype("float32")
    key = rng.normal(size=(batch, length, units)).astype("float32")
    value = rng.normal(size=(batch, length, value_dim)).astype("float32")
    return query, value, key


def worker(variant, batch, length, units, value_dim, chunk, out_path):
    """Runs in a worker process: measure one variant, write JSON (+ output)."""
    import keras
    import tensorflow as tf

    import keras_attention as ka

    rng = np.random.default_rng(123)
    scale = rng.normal(size=(units,)).astype("float32") / np.sqrt(units)
    mode, _, kind = variant.partition(":")
    train = kind == "train"
    if mode == "keras_naive":
        layer = keras.layers.AdditiveAttention(use_scale=True)
        layer.build([(None, None, units), (None, None, value_dim), (None, None, units)])
        layer.scale.assign(scale)
        call = lambda q, v, k: layer([q, v, k])  # noqa: E731
    else:
        chunk = None if mode == "keras_attention_unchunked" else ("auto" if chunk == "auto" else int(chunk))
        layer = ka.AdditiveAttention(units, chunk_size=chunk)
        layer.build((None, None, units), (None, None, value_dim), (None, None, units))
        layer.query_kernel.assign(np.eye(units, dtype="float32"))
        layer.key_kernel.assign(np.eye(units, dtype="float32"))
        layer.score_vector.assign(scale)
        call = lambda q, v, k: layer(q, v, key=k)  # noqa: E731
    spec = [tf.TensorSpec([None, None, d]) for d in (units, value_dim, units)]

    if train:

        @tf.function(input_signature=spec)
        def fn(q, v, k):
            with tf.GradientTape() as tape:
                tape.watch([q, v, k])
                loss = tf.reduce_sum(tf.sin(call(q, v, k)))
            return tape.gradient(loss, [q, v, k] + layer.trainable_variables)[0]
    else:
        fn = tf.function(call, input_signature=spec)

    fn(*_inputs(1, 3, units, value_dim, seed=1))  # trace and load kernels
    inputs = [tf.constant(x) for x in _inputs(batch, length, units, value_dim)]
    before, _ = common.rss_bytes()
    common.reset_peak_rss()
    start = time.perf_counter()
    output = fn(*inputs).numpy()
    seconds = time.perf_counter() - start
    _, peak = common.rss_bytes()
    np.save(out_path + ".npy", output)
    with open(out_path, "w") as f:
        json.dump({"peak_mib": round((peak - before) / 2**20, 1), "seconds": round(seconds, 3)}, f)


def _measure(jobs, cfg, directory, log):
    """Measure `jobs` [(variant, batch), ...] one after another in one worker
    process: {(variant, batch): result}."""
    outs = [os.path.join(directory, f"{variant.replace(':', '_')}_{batch}.json") for variant, batch in jobs]
    argv = [sys.executable, "-m", "benchmarks.bench_memory", "--worker"]
    argv += [str(cfg["length"]), str(cfg["units"]), str(cfg["value_dim"]), cfg["chunk"]]
    for (variant, batch), out in zip(jobs, outs):
        argv += [variant, str(batch), out]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=common.ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"memory worker {jobs} failed: {proc.stderr[-3000:]}")
    results = {}
    for (variant, batch), out in zip(jobs, outs):
        with open(out) as f:
            result = json.load(f)
        result["output"] = np.load(out + ".npy")
        log(f"  {variant:32s} B={batch:3d}: peak {result['peak_mib']:10.1f} MiB, {result['seconds']:.2f} s")
        results[variant, batch] = result
    return results


def run(quick, log):
    cfg = QUICK if quick else FULL
    b, t, u = cfg["batch"], cfg["length"], cfg["units"]
    block_mib = lambda batch: batch * t * t * u * 4 / 2**20  # noqa: E731
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        measured = {}
        variants = [("keras_naive", nb) for nb in cfg["naive_batches"]]
        variants += [("keras_attention_unchunked", nb) for nb in cfg["naive_batches"]]
        variants += [("keras_attention", nb) for nb in sorted(set(cfg["naive_batches"] + [b]))]
        if cfg["train"]:
            variants += [("keras_naive:train", cfg["naive_batches"][0]), ("keras_attention:train", b)]
        if quick:
            # The figures mean nothing in --quick: one process for every variant
            # (a worker's CPU time is mostly importing TensorFlow).
            measured.update(_measure(variants, cfg, directory, log))
        for variant, batch in variants:
            if (variant, batch) not in measured:
                measured.update(_measure([(variant, batch)], cfg, directory, log))
            rows.append(
                {
                    "variant": variant,
                    "B": batch,
                    "peak_mib": measured[variant, batch]["peak_mib"],
                    "seconds": measured[variant, batch]["seconds"],
                    "naive_block_mib": block_mib(batch),
                }
            )
        # Same result: at every batch both were run.
        max_diff = 0.0
        for nb in cfg["naive_batches"]:
            want = measured["keras_naive", nb]["output"]
            for variant in ("keras_attention", "keras_attention_unchunked"):
                max_diff = max(max_diff, float(np.abs(measured[variant, nb]["output"] - want).max()))
    naive_b = np.array(cfg["naive_batches"], float)
    naive_peak = np.array([measured["keras_naive", nb]["peak_mib"] for nb in cfg["naive_batches"]])
    slope, intercept = np.polyfit(naive_b, naive_peak, 1) if len(naive_b) > 1 else (naive_peak[0] / naive_b[0], 0.0)
    naive_at_b = (
        float(slope * b + intercept) if b not in cfg["naive_batches"] else float(measured["keras_naive", b]["peak_mib"])
    )
    ours_at_b = measured["keras_attention", b]["peak_mib"]
    small = cfg["naive_batches"][-1]
    result = {
        "config": {k: cfg[k] for k in ("batch", "length", "units", "value_dim", "chunk")},
        "method": (
            ("one process for every variant" if quick else "fresh process per variant")
            + "; peak RSS (VmHWM after the call, reset with "
            "/proc/self/clear_refs) minus RSS before it; naive extrapolated linearly in B "
            "from the measured batches when B is too large for this machine"
        ),
        "rows": rows,
        "naive_block_mib_at_B": block_mib(b),
        "naive_peak_mib_at_B": round(naive_at_b, 1),
        "naive_peak_extrapolated": b not in cfg["naive_batches"],
        "ours_peak_mib_at_B": ours_at_b,
        "reduction_at_B": common.ratio(naive_at_b, ours_at_b),
        f"reduction_measured_at_B{small}": common.ratio(
            measured["keras_naive", small]["peak_mib"], measured["keras_attention", small]["peak_mib"]
        ),
        "max_abs_diff_vs_naive": max_diff,
        "targets": {"reduction": 8.0, "max_abs_diff": 1e-5},
    }
    if cfg["train"]:
        nb = cfg["naive_batches"][0]
        naive_train = measured["keras_naive:train", nb]["peak_mib"] * b / nb
        result["train"] = {
            "naive_peak_mib_at_B_extrapolated": round(naive_train, 1),
            "ours_peak_mib_at_B": measured["keras_attention:train", b]["peak_mib"],
            "reduction_at_B": common.ratio(naive_train, measured["keras_attention:train", b]["peak_mib"]),
        }
    return result


if __name__ == "__main__" and len(sys.argv) > 1 and sys.argv[1] == "--worker":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    length, units, value_dim, chunk, *jobs = sys.argv[2:]
    for variant, batch, out_path in zip(jobs[0::3], jobs[1::3], jobs[2::3]):
        worker(variant, int(batch), int(length), int(units), int(value_dim), chunk, out_path)
