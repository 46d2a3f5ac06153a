"""Benchmarks of keras-attention against what users would run instead.

    python -m benchmarks.run [--quick] [--only NAME[,NAME...]] [--out DIR] [--no-tfa]

Measures (see each module's docstring for the exact setup):
    decoder   attention-decoder training step vs a plain Keras loop and tfa.seq2seq
    mha       MultiHeadAttention fwd+bwd vs keras.layers.MultiHeadAttention;
              scaled-dot attention FLOP rate vs a bare matmul
    memory    additive attention peak memory: naive broadcast vs query chunking
    serving   one date through the exported dates model: onnxruntime vs
              SavedModel vs Keras; beam 5 vs greedy
    scaling   greedy decode time vs source and target length (fitted exponent)
    gpu       mixed precision + XLA training step and MHA, on a GPU only
    g2p       the G2P example's choices on CMUdict batches: decoder with and
              without input feeding, fit vs train_on_batch, beam alignments
    options   each decoding option (constraints, penalties, run-time inputs)
              against plain beam search on the dates decoder
    backends  the same layers on TensorFlow, JAX and PyTorch against Keras's own
              (each backend in its venv: .venv-jax, .venv-torch), and
              AdditiveAttention's query chunking on each backend
    throughput
              dates per second served at batch 1, 32, 256 (greedy, beam 5):
              onnxruntime (library default and other session settings),
              SavedModel, Keras predict
    keras_hub our Transformer against keras-hub's at equal size, same weights:
              training step (and its arithmetic limit), cached greedy and
              beam decoding tokens per second (needs the keras-hub extra)

Writes DIR/results.json and DIR/results.md (and, for benchmarks/, the
benchmark block of docs/benchmarks.md; DIR: benchmarks/, or
runs/bench-quick with --quick, which uses tiny sizes and 2 repetitions so
that the suite can be checked in seconds; its numbers mean nothing). With
--only, the other sections of an existing results.json are kept. The tfa
peer runs in benchmarks/peers/.venv-tfa, built on first use by
benchmarks/peers/build_tfa_env.sh (not in --quick mode, which uses it only
if it already exists).

Timings are medians of at least 5 rounds after a warm-up round, the sides
of each comparison alternating round by round in the same process (tfa in a
worker process), so that load on a shared machine hits every side alike.
"""

import argparse
import json
import os
import sys
import time
import traceback

from benchmarks import common, report

HERE = os.path.dirname(os.path.abspath(__file__))
# Before any section imports Keras (they import it when they run).
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# --quick's figures mean nothing: its XLA compilations (the XLA training
# steps, and every jax.jit in the JAX worker of section 10, which inherits the
# environment) compile at LLVM's lowest optimisation, for about a third less
# CPU time (the quick XLA decoder step's first call 6.9 -> 3.9 s, the JAX
# worker 15.1 -> 10.9 s).
QUICK_XLA_FLAGS = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"

NAMES = [
    "decoder",
    "mha",
    "memory",
    "serving",
    "scaling",
    "gpu",
    "g2p",
    "options",
    "throughput",
    "backends",
    "keras_hub",
]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, 2 repetitions: checks the suite runs")
    parser.add_argument("--only", default=None, help=f"comma-separated subset of {NAMES}")
    parser.add_argument(
        "--out", default=None, help="output directory (default benchmarks/, or runs/bench-quick with --quick)"
    )
    parser.add_argument("--no-tfa", action="store_true", help="skip the tfa.seq2seq peer")
    parser.add_argument("--repeats", type=int, default=None, help="rounds per timing (default 7, 2 with --quick)")
    args = parser.parse_args(argv)
    args.names = NAMES if args.only is None else [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(args.names) - set(NAMES))
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {NAMES}")
    if args.repeats is not None and args.repeats < 1:
        parser.error("--repeats must be >= 1")
    if args.out is None:
        args.out = os.path.join(common.ROOT, "runs", "bench-quick") if args.quick else HERE
    return args


def log(message):
    print(message, flush=True)


def run_one(name, args):
    if name == "decoder":
        from benchmarks import bench_decoder

        want_tfa = not args.no_tfa
        if args.quick and want_tfa and not bench_decoder.tfa_status()[0]:
            log(
                "  tfa peer skipped in --quick mode: its environment is not built "
                "(run benchmarks/peers/build_tfa_env.sh, or make bench, to build it)"
            )
        return bench_decoder.run(args.quick, log, want_tfa=want_tfa, build_tfa=not args.quick, repeats=args.repeats)
    if name == "mha":
        from benchmarks import bench_mha

        return bench_mha.run(args.quick, log, repeats=args.repeats)
    if name == "memory":
        from benchmarks import bench_memory

        return bench_memory.run(args.quick, log)
    if name == "serving":
        from benchmarks import bench_serving

        return bench_serving.run(args.quick, log)
    if name == "scaling":
        from benchmarks import bench_scaling

        return bench_scaling.run(args.quick, log, repeats=args.repeats)
    if name == "gpu":
        from benchmarks import bench_gpu

        return bench_gpu.run(args.quick, log, repeats=args.repeats)
    if name == "g2p":
        from benchmarks import bench_g2p

        return bench_g2p.run(args.quick, log, repeats=args.repeats)
    if name == "options":
        from benchmarks import bench_options

        return bench_options.run(args.quick, log, repeats=args.repeats)
    if name == "throughput":
        from benchmarks import bench_throughput

        return bench_throughput.run(args.quick, log, repeats=args.repeats)
    if name == "backends":
        from benchmarks import bench_backends

        return bench_backends.run(args.quick, log, repeats=args.repeats)
    if name == "keras_hub":
        import importlib.util

        if importlib.util.find_spec("keras_hub") is None:
            log("  skipped: keras-hub is not installed (the keras-hub extra, in dev)")
            return {"skipped": "keras-hub is not installed (the keras-hub extra, in dev)"}
        from benchmarks import bench_keras_hub

        return bench_keras_hub.run(args.quick, log, repeats=args.repeats)
    raise AssertionError(name)


def main(argv=None):
    args = parse_args(argv)
    if args.quick:  # before any section compiles
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {QUICK_XLA_FLAGS}".strip()
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "results.json")
    results = {}
    if args.only is not None and os.path.exists(path):
        with open(path) as f:
            results = json.load(f)
    command = "python -m benchmarks.run " + " ".join(argv if argv is not None else sys.argv[1:])
    results.setdefault("sections", {})
    results.update(
        {"machine": common.machine(), "versions": common.versions(), "command": command.strip(), "quick": args.quick}
    )
    failed = []
    for name in args.names:
        log(f"== {name}")
        begin = time.perf_counter()
        load_before = common.loadavg()
        try:
            section = run_one(name, args)
        except Exception as error:  # keep the other sections going; report it
            traceback.print_exc()
            section = {"error": f"{type(error).__name__}: {error}"}
            failed.append(name)
        section["meta"] = {
            "seconds": round(time.perf_counter() - begin, 1),
            "loadavg_before": load_before,
            "loadavg_after": common.loadavg(),
            "date": common.machine()["date"],
            "command": command.strip(),
        }
        results["sections"][name] = section
        with open(path, "w") as f:
            json.dump(results, f, indent=1, default=float)
        log(f"   done in {section['meta']['seconds']} s")
    results["machine"]["loadavg_at_end"] = common.loadavg()
    with open(path, "w") as f:
        json.dump(results, f, indent=1, default=float)
    markdown = report.markdown(results)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(markdown)
    log(markdown)
    log(f"wrote {path} and results.md")
    if os.path.abspath(args.out) == HERE:  # the committed results: the benchmarks page shows them too
        with open(report.PAGE, encoding="utf-8") as f:
            page = report.updated_page(f.read(), results)
        with open(report.PAGE, "w", encoding="utf-8") as f:
            f.write(page)
        log(f"updated {report.PAGE}'s benchmark block")
    if failed:
        log(f"FAILED: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
