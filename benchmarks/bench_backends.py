"""Measure 10: the same layers on TensorFlow, JAX and PyTorch, each against
Keras's own layer on that backend, and AdditiveAttention's query chunking on
each backend.

(a) Peers: forward + backward of one layer on `(B, T, d)` inputs, the loss the
sum of the output times a fixed random tensor, gradients with respect to the
inputs and every weight, compiled as each backend's users run it (what
`model.fit` does with `jit_compile="auto"` on a CPU): a `tf.function`
without XLA on TensorFlow, `jax.jit` of `jax.grad` over `stateless_call` on
JAX, eager autograd (`torch.autograd.grad`) on PyTorch.
- `AdditiveAttention(units=d, chunk_size=None)` with identity projections and
  `keras.layers.AdditiveAttention(use_scale=True)`'s scale as its score
  vector (the same numbers; ours also runs its two `d x d` projections);
- `MultiHeadAttention` against `keras.layers.MultiHeadAttention` with the
  same weights (self-attention).

(b) Chunking: `AdditiveAttention` forward + backward as in (a), unchunked
(`chunk_size=None`) against chunked into blocks of at most
`AUTO_CHUNK_BYTES` (64 MiB; the chunk size given explicitly, so the
measurement does not depend on the default it informs), at shapes whose
`(B, Tq, Tv, units)` block is 4 and 8 times that, with the peak resident
memory of one step (VmHWM reset before it) on each side.

Each backend runs in a worker process of its own environment: TensorFlow in
this one, JAX in `.venv-jax`, PyTorch in `.venv-torch` (`make test-jax` /
`make test-torch` build them; `make bench` builds a missing one through
make, `--quick` skips it with a message). Within a worker the sides of each
comparison alternate round by round; the speed figures are ratios within a
worker, never across backends (the workers run one after another on a
shared machine).

    python -m benchmarks.bench_backends --worker [--quick] [--repeats N]

runs one worker on the backend KERAS_BACKEND names and prints its JSON.
"""

import argparse
import json
import os
import subprocess
import sys
import time

from benchmarks import common

HERE = os.path.dirname(os.path.abspath(__file__))

BACKENDS = {"tensorflow": ".venv", "jax": ".venv-jax", "torch": ".venv-torch"}

FULL = dict(
    additive=dict(batch=32, length=64, dim=64),
    mha=dict(batch=32, length=128, d_model=256, num_heads=4, key_dim=64),
    # The (B, Tq, Tv, units) block: 256 MiB (4 chunks of 64) and 512 MiB
    # (8 chunks); the second a long-sequence case with a small batch.
    chunking=[dict(batch=32, length=128, units=128), dict(batch=2, length=1024, units=64)],
    chunk_bytes=64 * 2**20,
)
QUICK = dict(
    additive=dict(batch=2, length=8, dim=8),
    mha=dict(batch=2, length=8, d_model=16, num_heads=2, key_dim=8),
    chunking=[dict(batch=2, length=12, units=8)],
    chunk_bytes=4 * 12 * 8 * 2 * 5,  # chunks of 5 queries: 3 chunks, the last partial
)


# -- the worker: runs on one backend ------------------------------------------


def _grad_step(layer, args):
    """A no-argument function: one forward + backward of `layer(*args)` on
    the active backend, compiled as that backend's users run it; returns
    once the gradients exist. The loss reads the output through a fixed
    random tensor of the query's shape (every layer here returns that
    shape). Nothing runs at the inputs' size before the first call
    (TensorFlow traces from specs, JAX compiles ahead of time), so that the
    first call's peak memory is the step's own."""
    import keras
    import numpy as np

    backend = keras.backend.backend()
    arrays = _flatten(args)
    readout = np.random.default_rng(7).normal(size=arrays[0].shape).astype("float32")
    if backend == "tensorflow":
        import tensorflow as tf

        tf.get_logger().setLevel("ERROR")  # one tf.function per side: its retracing warning is expected
        tensors = [tf.constant(a) for a in arrays]
        readout = tf.constant(readout)

        @tf.function
        def step(*tensors):
            with tf.GradientTape() as tape:
                tape.watch(tensors)
                loss = tf.reduce_sum(layer(*_unflatten(args, tensors)) * readout)
            return tape.gradient(loss, list(tensors) + layer.trainable_variables)

        step.get_concrete_function(*[tf.TensorSpec(a.shape, a.dtype) for a in arrays])
        return lambda: step(*tensors)[0].numpy()
    if backend == "jax":
        import jax

        tensors = [jax.numpy.asarray(a) for a in arrays]
        trainable = [v.value for v in layer.trainable_variables]
        non_trainable = [v.value for v in layer.non_trainable_variables]

        def loss(trainable, tensors):
            out, _ = layer.stateless_call(trainable, non_trainable, *_unflatten(args, tensors))
            return jax.numpy.sum(out * readout)

        step = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(trainable, tensors).compile()
        return lambda: jax.block_until_ready(step(trainable, tensors))
    if backend == "torch":
        import torch

        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        readout = torch.tensor(readout)
        weights = [v.value for v in layer.trainable_variables]

        def step():
            loss = torch.sum(layer(*_unflatten(args, tensors)) * readout)
            return torch.autograd.grad(loss, tensors + weights)

        return step
    raise NotImplementedError(f"no forward + backward step for the {backend!r} backend")


def _flatten(args):
    """The arrays of a call's positional arguments (one may be a list)."""
    out = []
    for a in args:
        out.extend(a if isinstance(a, list) else [a])
    return out


def _unflatten(args, tensors):
    tensors, out = list(tensors), []
    for a in args:
        if isinstance(a, list):
            out.append([tensors.pop(0) for _ in a])
        else:
            out.append(tensors.pop(0))
    return out


def _additive_pair(cfg):
    import keras
    import numpy as np

    import keras_attention as ka

    b, t, d = cfg["batch"], cfg["length"], cfg["dim"]
    rng = np.random.default_rng(0)
    query = rng.normal(size=(b, t, d)).astype("float32")
    value = rng.normal(size=(b, t, d)).astype("float32")
    scale = (rng.normal(size=(d,)) / np.sqrt(d)).astype("float32")
    theirs = keras.layers.AdditiveAttention(use_scale=True)
    theirs([query, value])
    theirs.scale.assign(scale)
    ours = ka.AdditiveAttention(d, chunk_size=None)
    ours(query, value)
    ours.query_kernel.assign(np.eye(d, dtype="float32"))
    ours.key_kernel.assign(np.eye(d, dtype="float32"))
    ours.score_vector.assign(scale)
    return {"keras_attention": (ours, (query, value)), "keras": (theirs, ([query, value],))}


def _mha_pair(cfg):
    import keras
    import numpy as np

    import keras_attention as ka

    rng = np.random.default_rng(1)
    x = rng.normal(size=(cfg["batch"], cfg["length"], cfg["d_model"])).astype("float32")
    keras.utils.set_random_seed(0)
    theirs = keras.layers.MultiHeadAttention(cfg["num_heads"], cfg["key_dim"])
    ours = ka.MultiHeadAttention(cfg["num_heads"], cfg["key_dim"])
    theirs(x, x)
    ours(x, x)
    ours.set_weights(theirs.get_weights())
    return {"keras_attention": (ours, (x, x)), "keras": (theirs, (x, x))}


def _max_diff(pair):
    import keras
    import numpy as np

    outs = [keras.ops.convert_to_numpy(layer(*args)) for layer, args in pair.values()]
    return float(np.max(np.abs(outs[0] - outs[1])))


def _peak_mib(step):
    """Peak resident memory of one `step()` above the memory before it."""
    before, _ = common.rss_bytes()
    common.reset_peak_rss()
    step()
    _, peak = common.rss_bytes()
    return round((peak - before) / 2**20, 1)


def worker(quick, repeats, log):
    import keras
    import numpy as np

    cfg = QUICK if quick else FULL
    backend = keras.backend.backend()
    out = {"backend": backend, "versions": _backend_versions(backend), "peers": {}, "chunking": []}
    for name, make in (("additive", _additive_pair), ("mha", _mha_pair)):
        pair = make(cfg[name])
        steps = {side: _grad_step(layer, args) for side, (layer, args) in pair.items()}
        log(f"  [{backend}] {name} fwd+bwd, ours vs keras.layers")
        times = common.alternate(steps, repeats, warmup=1, log=log)
        stats = {side: common.summary(t) for side, t in times.items()}
        out["peers"][name] = {
            "config": cfg[name],
            "fwd_bwd_ms": stats,
            "keras_over_ours": common.ratio(stats["keras"]["median_ms"], stats["keras_attention"]["median_ms"]),
            "max_abs_diff": _max_diff(pair),
        }
    for index, shape in enumerate(cfg["chunking"]):
        layers, args, rows = _chunking_case(cfg, index)
        steps = {side: _grad_step(layer, args) for side, layer in layers.items()}
        b, t, u = shape["batch"], shape["length"], shape["units"]
        log(f"  [{backend}] additive chunking B={b} T={t} units={u}, chunks of {rows}")
        times = common.alternate(steps, repeats, warmup=1, log=log)
        stats = {side: common.summary(t) for side, t in times.items()}
        outputs = [keras.ops.convert_to_numpy(layer(*args)) for layer in layers.values()]
        out["chunking"].append(
            {
                **shape,
                "chunk": rows,
                "chunks": -(-t // rows),
                "block_mib": round(4 * b * t * t * u / 2**20, 1),
                "fwd_bwd_ms": stats,
                "chunked_over_unchunked": common.ratio(stats["chunked"]["median_ms"], stats["unchunked"]["median_ms"]),
                "max_abs_diff": float(np.max(np.abs(outputs[0] - outputs[1]))),
            }
        )
        if quick:  # the code path only: its figure means nothing after the timing rounds
            out["chunking"][-1]["peak_mib"] = {side: _peak_mib(step) for side, step in steps.items()}
    return out


def _chunking_case(cfg, index):
    """The unchunked and chunked layers (same weights, built on a slice of
    the inputs), the call's arguments and the chunk size."""
    import numpy as np

    import keras_attention as ka

    shape = cfg["chunking"][index]
    b, t, u = shape["batch"], shape["length"], shape["units"]
    rows = max(1, cfg["chunk_bytes"] // (4 * b * t * u))
    rng = np.random.default_rng(2)
    query = rng.normal(size=(b, t, u)).astype("float32")
    value = rng.normal(size=(b, t, u)).astype("float32")
    layers = {
        "unchunked": ka.AdditiveAttention(u, chunk_size=None),
        "chunked": ka.AdditiveAttention(u, chunk_size=rows),
    }
    for layer in layers.values():
        layer(query[:1, :2], value[:1, :2])
    layers["chunked"].set_weights(layers["unchunked"].get_weights())
    return layers, (query, value), rows


def memory_worker(quick, index, side):
    """In a fresh process: the peak memory of the first forward + backward
    step of one side of chunking case `index` (MiB above the memory before
    it; compilation done beforehand)."""
    layers, args, _ = _chunking_case(QUICK if quick else FULL, index)
    return {"peak_mib": _peak_mib(_grad_step(layers[side], args))}


def _backend_versions(backend):
    import importlib.metadata

    package = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}[backend]
    return {p: importlib.metadata.version(p) for p in ("keras", package)}


# -- the runner: one worker per backend ---------------------------------------


def _ensure_env(backend, quick, log):
    """The backend's python, or None (with the reason logged) when its venv
    is missing and cannot or should not be built."""
    venv = BACKENDS[backend]
    if backend == "tensorflow":
        return sys.executable
    python = os.path.join(common.ROOT, venv, "bin", "python")
    stamp = os.path.join(common.ROOT, venv, ".installed")
    if os.path.exists(stamp) and os.path.exists(python):
        return python
    if quick:
        log(f"  {backend} skipped: {venv} is not built (make test-{backend} or make bench builds it)")
        return None
    log(f"  building {venv} (make {venv}/.installed)")
    make = subprocess.run(
        ["make", f"{venv}/.installed", f"PYTHON={os.environ.get('PYTHON', 'python3')}"], cwd=common.ROOT
    )
    if make.returncode != 0 or not os.path.exists(python):
        log(f"  {backend} skipped: building {venv} failed (make {venv}/.installed exited {make.returncode})")
        return None
    return python


def _worker(python, backend, arguments):
    """Run this file's worker on `backend`; its JSON result."""
    argv = [python, "-m", "benchmarks.bench_backends", "--worker", *arguments]
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    # The worker's log goes straight to ours (stderr); its result is its last stdout line.
    proc = subprocess.run(argv, stdout=subprocess.PIPE, text=True, env=env, cwd=common.ROOT, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{backend} worker {arguments} exited {proc.returncode}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(quick, log, repeats=None):
    repeats = repeats or (2 if quick else 7)
    section = {
        "method": (
            f"forward + backward, compiled as each backend's users run it (TensorFlow: tf.function, no XLA; "
            f"JAX: jax.jit; PyTorch: eager autograd); one worker process per backend, {repeats} alternating "
            "rounds after 1 warm-up within it; median"
        ),
        "config": QUICK if quick else FULL,
        "backends": {},
        "skipped": {},
    }
    for backend in BACKENDS:
        python = _ensure_env(backend, quick, log)
        if python is None:
            section["skipped"][backend] = f"{BACKENDS[backend]} is not built"
            continue
        begin = time.perf_counter()
        result = _worker(python, backend, ["--repeats", str(repeats)] + (["--quick"] if quick else []))
        if not quick:  # peak memory: one fresh process per case and side
            for index, case in enumerate(result["chunking"]):
                case["peak_mib"] = {}
                for side in ("unchunked", "chunked"):
                    memory = _worker(python, backend, ["--memory", str(index), side])
                    case["peak_mib"][side] = memory["peak_mib"]
                    log(f"  [{backend}] case {index} {side}: peak {memory['peak_mib']} MiB")
        result["seconds"] = round(time.perf_counter() - begin, 1)
        section["backends"][backend] = result
        log(f"  {backend} done in {result['seconds']} s")
    return section


# -- the report -----------------------------------------------------------------

LABELS = {"tensorflow": "TensorFlow", "jax": "JAX", "torch": "PyTorch"}
PEERS = {
    "additive": ("AdditiveAttention", "keras.layers.AdditiveAttention"),
    "mha": ("MultiHeadAttention", "keras.layers.MultiHeadAttention"),
}


def _shape(cfg):
    if "d_model" in cfg:
        return f"B={cfg['batch']}, T={cfg['length']}, d_model {cfg['d_model']}, {cfg['num_heads']} heads"
    return f"B={cfg['batch']}, Tq=Tv={cfg['length']}, d={cfg['dim']}"


def peers_table(section, table):
    rows = []
    for name, (ours, theirs) in PEERS.items():
        for backend, result in section["backends"].items():
            peer = result["peers"][name]
            rows.append(
                [
                    f"{ours} vs `{theirs}`",
                    _shape(peer["config"]),
                    LABELS[backend],
                    peer["fwd_bwd_ms"]["keras_attention"]["median_ms"],
                    peer["fwd_bwd_ms"]["keras"]["median_ms"],
                    f"{peer['keras_over_ours']:.2f}x",
                ]
            )
    return table(["layer", "shapes", "backend", "ours ms", "Keras ms", "Keras / ours"], rows)


def chunking_table(section, table):
    rows = []
    for backend, result in section["backends"].items():
        for case in result["chunking"]:
            peak = case.get("peak_mib", {})
            rows.append(
                [
                    LABELS[backend],
                    f"B={case['batch']}, T={case['length']}, units {case['units']}",
                    f"{case['block_mib']:.0f}",
                    f"{case['chunks']} of {case['chunk']}",
                    case["fwd_bwd_ms"]["unchunked"]["median_ms"],
                    case["fwd_bwd_ms"]["chunked"]["median_ms"],
                    f"{case['chunked_over_unchunked']:.2f}x",
                    peak.get("unchunked"),
                    peak.get("chunked"),
                ]
            )
    header = ["backend", "shape", "block MiB", "chunks", "unchunked ms", "chunked ms", "chunked / unchunked"]
    return table(header + ["peak MiB unchunked", "peak MiB chunked"], rows)


def _skipped(section):
    return [f"{LABELS[b]} not measured: {why}." for b, why in section.get("skipped", {}).items()]


def markdown(section, table, meta):
    diffs = [p["max_abs_diff"] for r in section["backends"].values() for p in r["peers"].values()]
    diffs += [c["max_abs_diff"] for r in section["backends"].values() for c in r["chunking"]]
    return [
        f"## 10. The same layers on TensorFlow, JAX and PyTorch {meta}",
        "",
        f"Gradients with respect to the inputs and every weight; {section['method']}. "
        "Ours against Keras's own layer on the same backend, with the same weights (our AdditiveAttention "
        "with identity projections, so it also runs two d x d matmuls that Keras's does not): "
        "Keras / ours above 1 means ours is faster. Compare times across backends only roughly: the "
        "workers ran one after another on a shared machine.",
        "",
        peers_table(section, table),
        "",
        "AdditiveAttention's query chunking on each backend: the same layer unchunked (`chunk_size=None`) "
        "and chunked into blocks of at most 64 MiB (the chunk size given explicitly); peak memory of one "
        "step in a fresh process (VmHWM above the memory before it, compiled beforehand). This decides "
        'the per-backend default of `chunk_size="auto"`: 64 MiB blocks on TensorFlow and JAX, 1 GiB '
        "on PyTorch.",
        "",
        chunking_table(section, table),
        "",
        f"Largest difference between the sides' outputs: {max(diffs):.1e}." if diffs else "",
        *_skipped(section),
        "",
    ]


def summary_row(section, fmt):
    parts = []
    for backend, result in section["backends"].items():
        ratios = " / ".join(fmt(result["peers"][name]["keras_over_ours"], 2) for name in PEERS)
        parts.append(f"{LABELS[backend]} {ratios}x")
    return ["10. fwd+bwd, Keras / ours (additive / MHA)", "reported", "; ".join(parts) or "not measured", "reported"]


def readme_lines(section, table):
    meta = section["meta"]
    return [
        "Across backends (section 10): ours against Keras's own layer on the same backend with the same "
        f"weights (Keras / ours above 1: ours faster); {section['method']}. `{meta['command']}` on {meta['date']}, load average "
        f"{meta['loadavg_before'][0]} before.",
        "",
        peers_table(section, table),
        "",
        "AdditiveAttention chunked into 64 MiB blocks against one block, on each backend (the measure "
        'behind `chunk_size="auto"`: 64 MiB blocks on TensorFlow and JAX, 1 GiB on PyTorch):',
        "",
        chunking_table(section, table),
        *(["", *_skipped(section)] if section.get("skipped") else []),
    ]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", action="store_true", help="measure on the backend KERAS_BACKEND names")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--memory", nargs=2, metavar=("CASE", "SIDE"), help="with --worker: one peak-memory case")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 7)
    log = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    if args.worker and args.memory:
        print(json.dumps(memory_worker(args.quick, int(args.memory[0]), args.memory[1])), flush=True)
    elif args.worker:
        print(json.dumps(worker(args.quick, repeats, log)), flush=True)
    else:
        print(json.dumps(run(args.quick, log, repeats), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
