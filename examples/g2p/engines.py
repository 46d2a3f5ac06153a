"""One trained CMUdict G2P model served by every engine, side by side, in one run.

    python -m examples.g2p.engines RUN [--results results/g2p_engines.json] [--work DIR]
        [--sample 512] [--batch-one-sample 64] [--wer-words N] [--beam-widths 1 2 5]
        [--batch-sizes 1 32 256] [--threads 1 2] [--engines keras onnxruntime ...]
        [--phonetisaurus-model MODEL.fst]
    python -m examples.g2p.engines --report          # rewrite the table in docs/serving.md
    python -m examples.g2p.engines --report --check  # exit 1 if docs/serving.md is out of date

The run's trained weights (a `train.py` run's `g2p_trainer.keras`) are
rebuilt into a greedy model (beam 1) and a beam model per width (early
stopping, as `serving.py`), exported once with `export_model` to ONNX,
LiteRT and OpenVINO (float32, and int8 copies: onnxruntime's dynamic
quantization and LiteRT's dynamic range; OpenVINO's IR is float32 only) and
once with `export_ctranslate2` (int8 is CTranslate2's `compute_type="int8"`
on the same directory). Each engine, precision and thread count is then
measured in a fresh process (a process that has run TensorFlow serves the
other engines slower: its thread pools compete), at every batch size and
beam width:

- words/s: the median of PASSES timed passes over a fixed sample of the
  test words (`--sample`, the first N in a seeded shuffle; batch 1 on its
  first `--batch-one-sample`), in length-sorted batches tokenised
  beforehand, after one untimed call;
- the WER and PER of the engine's output on the test words (all of them,
  or `--wer-words`), at batch 256 with the most threads, and the fraction
  of words whose best pronunciation is Keras's (same ids).

Threads: onnxruntime `intra_op_num_threads`, CTranslate2 `intra_threads`
(one translator, `inter_threads=1`), LiteRT `num_threads`, OpenVINO
`INFERENCE_NUM_THREADS`, Keras TensorFlow's intra- and inter-op pools.
Phonetisaurus (`phonetisaurus-apply`, one process over the word list,
process start included) is single-threaded, takes no batches and has no
beam of ours: it is timed once per pass over all the test words.
CTranslate2's beam search refills a finished hypothesis's slot where ours
keeps it: its beam output can differ from Keras's (`same_as_keras`).

The goals (issue 36): CTranslate2's words/s at least 3x Phonetisaurus's at
beam 2 with Keras's WER, and onnxruntime within 1.5x of CTranslate2 on the
same weights; both ratios are computed from the cells into `goals`, and
where onnxruntime is slower than that its profile (share of time by
operator type) is recorded.
"""

import argparse
import dataclasses
import datetime
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "serving.md"
RESULTS = ROOT / "results" / "g2p_engines.json"
BEGIN, END = "<!-- g2p-engines:begin -->", "<!-- g2p-engines:end -->"

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PASSES = 3
ENGINES = ("keras", "onnxruntime", "ctranslate2", "litert", "openvino")
# The precisions each engine serves here (Keras has no int8 copy of this
# model; OpenVINO's IR is float32: its int8 needs NNCF, not used).
PRECISIONS = {
    "keras": ("float32",),
    "onnxruntime": ("float32", "int8"),
    "ctranslate2": ("float32", "int8"),
    "litert": ("float32", "int8"),
    "openvino": ("float32",),
}
WER_BATCH = 256


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", nargs="?", help="a CMUdict Transformer training run's --out directory")
    parser.add_argument("--results", help="write the results JSON here")
    parser.add_argument("--work", help="where the exports are written (default: a temporary directory)")
    parser.add_argument("--sample", type=int, default=512, help="test words timed at batch > 1")
    parser.add_argument("--batch-one-sample", type=int, default=64, help="test words timed at batch 1")
    parser.add_argument("--wer-words", type=int, help="score the first N test words only (default: all)")
    parser.add_argument("--beam-widths", type=int, nargs="+", default=[1, 2, 5])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32, 256])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--engines", nargs="+", default=list(ENGINES), choices=ENGINES)
    parser.add_argument("--passes", type=int, default=PASSES)
    parser.add_argument(
        "--reuse-exports", action="store_true", help="keep the exports already in --work (written by an earlier run)"
    )
    parser.add_argument("--phonetisaurus-model", help="default: RUN/phonetisaurus/train/model.fst")
    parser.add_argument("--smoke", action="store_true", help="the run is a --smoke run: its 50 words are the test")
    parser.add_argument("--report", action="store_true", help="rewrite the table in docs/serving.md")
    parser.add_argument("--check", action="store_true", help="with --report: only check docs/serving.md")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if not args.report and not args.child:
        if args.run is None or not (Path(args.run) / "results.json").is_file():
            parser.error(f"argument run: {args.run!r} has no results.json (is it a finished CMUdict training run?)")
        for name in ("sample", "batch_one_sample", "passes"):
            if getattr(args, name) < 1:
                parser.error(f"argument --{name.replace('_', '-')}: expected an integer >= 1")
    return args


# --- in a fresh process: one engine, one precision, one thread count --------


def _batches(words, batch_size):
    from keras_attention.g2p.pronounce import length_sorted_batches

    return [[words[i] for i in rows] for rows in length_sorted_batches(words, batch_size)]


def _best(ids):
    import numpy as np

    ids = np.asarray(ids)
    return ids[:, 0] if ids.ndim == 3 else ids


class _KerasEngine:
    def __init__(self, spec, threads, width):
        import keras

        from keras_attention.export import load_vocabulary
        from keras_attention.g2p import model as g2p_model
        from keras_attention.g2p import transformer_model  # noqa: F401 (registers ScaledEmbedding for load_model)

        self.letters = load_vocabulary(spec["vocabulary"])["source"]
        config = g2p_model.ModelConfig(**spec["config"])
        config = dataclasses.replace(config, beam_width=max(width, 1), early_stopping=True)
        models = g2p_model.build_models(self.letters, load_vocabulary(spec["vocabulary"])["target"], config)
        models.trainer.set_weights(keras.saving.load_model(spec["trainer"]).get_weights())
        self.model = models.greedy if width == 1 else models.beam

    def feeds(self, words):
        return self.letters.encode(words)

    def run(self, feed):
        return _best(self.model.predict_on_batch(feed)["ids"])


class _ServedEngine:
    def __init__(self, spec, engine, precision, threads, width):
        from keras_attention.export.engines import load_engine

        if engine == "ctranslate2":
            self.engine = load_engine(
                "ctranslate2",
                spec["ct2"],
                threads=threads,
                precision=precision,
                vocabulary=spec["vocabulary"],
                beam_size=width,
            )
            self.input = "source"
        else:
            directory = Path(spec["exports"]) / f"beam{width}"
            self.engine = load_engine(engine, directory, "pronounce", threads=threads, precision=precision)
            self.input = "letters"

    def feeds(self, words):
        return self.engine.feeds({self.input: words})

    def run(self, feed):
        return _best(self.engine.run(feed)["ids"])


def measure(spec):
    """The child's work (`--child SPEC.json`): every cell of one engine,
    precision and thread count, and its output on the WER words when asked."""
    engine, precision, threads = spec["engine"], spec["precision"], spec["threads"]
    if engine == "keras":
        import tensorflow as tf

        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    sample, batch_one = spec["sample"], spec["sample"][: spec["batch_one_sample"]]
    cells, outputs = [], {}
    for width in spec["beam_widths"]:
        if engine == "keras":
            served = _KerasEngine(spec, threads, width)
        else:
            served = _ServedEngine(spec, engine, precision, threads, width)
        for batch_size in spec["batch_sizes"]:
            words = batch_one if batch_size == 1 else sample
            feeds = [served.feeds(batch) for batch in _batches(words, batch_size)]
            # One untimed call plans and allocates; Keras traces one graph per
            # input shape, so it gets one untimed pass over every batch.
            for feed in feeds if engine == "keras" else feeds[:1]:
                served.run(feed)
            rates = []
            for _ in range(spec["passes"]):
                begin = time.perf_counter()
                for feed in feeds:
                    served.run(feed)
                rates.append(len(words) / (time.perf_counter() - begin))
            cells.append(
                {
                    "engine": engine,
                    "precision": precision,
                    "threads": threads,
                    "beam_width": width,
                    "batch_size": batch_size,
                    "words": len(words),
                    "words_per_second": round(statistics.median(rates), 1),
                    "passes": [round(rate, 1) for rate in rates],
                }
            )
            print(json.dumps(cells[-1]), flush=True)
        if spec["score"]:
            words = spec["wer_words"]
            ids = {}
            for batch in _batches(words, WER_BATCH):
                for word, row in zip(batch, served.run(served.feeds(batch))):
                    ids[word] = [int(i) for i in row]
            outputs[str(width)] = ids
    return {"cells": cells, "outputs": outputs}


def _child_main(path):
    spec = json.loads(Path(path).read_text())
    Path(spec["result"]).write_text(json.dumps(measure(spec)))


def _fresh_process(spec):
    with tempfile.TemporaryDirectory() as scratch:
        spec_file, result = Path(scratch) / "spec.json", Path(scratch) / "result.json"
        spec_file.write_text(json.dumps({**spec, "result": str(result)}))
        subprocess.run([sys.executable, "-m", "examples.g2p.engines", "--child", str(spec_file)], cwd=ROOT, check=True)
        return json.loads(result.read_text())


# --- onnxruntime's profile ---------------------------------------------------


CONTROL_FLOW = ("Loop", "If", "Scan")
MATMUL_OPS = {"MatMul", "Gemm", "FusedMatMul", "MatMulInteger", "MatMulIntegerToFloat", "DynamicQuantizeMatMul"}


def onnx_profile(path, feeds, threads):
    """Where one pass of onnxruntime's time goes: each operator type's share of
    the runs' wall time (its profiler's kernel times), the largest first."""
    import onnxruntime

    with tempfile.TemporaryDirectory() as scratch:
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.intra_op_num_threads = threads
        options.profile_file_prefix = str(Path(scratch) / "profile")
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for feed in feeds:
            session.run(["ids"], {"letters": feed})
        events = json.loads(Path(session.end_profiling()).read_text())
    runs = sum(event["dur"] for event in events if event.get("name") == "model_run")
    by_op, calls = {}, 0
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            op = event.get("args", {}).get("op_name", "?")
            by_op[op] = by_op.get(op, 0) + event["dur"]
            calls += 1
    # A Loop's (If's, Scan's) time holds its body's kernels: counted apart.
    containers = {op: by_op.pop(op) for op in CONTROL_FLOW if op in by_op}
    kernels = sum(by_op.values())
    top = sorted(by_op.items(), key=lambda item: -item[1])[:8]
    return {
        "runs_microseconds": runs,
        "kernels_share": round(kernels / runs, 3) if runs else None,
        "matmul_share": round(sum(t for op, t in by_op.items() if op in MATMUL_OPS) / runs, 3) if runs else None,
        "control_flow_share": {op: round(t / runs, 3) for op, t in containers.items()} if runs else {},
        "by_operator": {op: round(time_ / runs, 3) for op, time_ in top} if runs else {},
        "kernel_calls": calls,
        "kernel_calls_per_run": round(calls / max(len(feeds), 1)),
    }


def _profile_child(path, words_file, threads, batch_size):
    from keras_attention.export import load_vocabulary

    words = Path(words_file).read_text(encoding="utf-8").split()
    letters = load_vocabulary(Path(path).parent)["source"]
    feeds = [letters.encode(batch) for batch in _batches(words, batch_size)]
    return onnx_profile(path, feeds, threads)


def _fresh_profile(path, words, threads, batch_size):
    with tempfile.TemporaryDirectory() as scratch:
        words_file, result = Path(scratch) / "words.txt", Path(scratch) / "result.json"
        words_file.write_text("\n".join(words) + "\n", encoding="utf-8")
        code = (
            "import json, sys; from examples.g2p import engines; "
            "json.dump(engines._profile_child(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])), "
            "open(sys.argv[5], 'w'))"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(path), str(words_file), str(threads), str(batch_size), str(result)],
            cwd=ROOT,
            check=True,
        )
        return json.loads(result.read_text())


# --- the study ---------------------------------------------------------------


def export_all(run, work, config_dict, widths, sample_words, reuse=False):
    """The greedy and beam exports (ONNX, LiteRT, OpenVINO, with int8 copies)
    and the CTranslate2 directory, under `work`."""
    import keras

    import keras_attention as ka
    from keras_attention.export import load_vocabulary
    from keras_attention.export.ctranslate2 import export_ctranslate2
    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p import transformer_model  # noqa: F401 (registers ScaledEmbedding for load_model)

    vocabulary = load_vocabulary(run / "export")
    letters, phones = vocabulary["source"], vocabulary["target"]
    weights = keras.saving.load_model(run / "g2p_trainer.keras").get_weights()
    base = g2p_model.ModelConfig(**config_dict)
    sample = [{"letters": sample_words[:16]}, {"letters": sample_words[16:19]}]
    seconds = {}
    for width in widths:
        begin = time.perf_counter()
        config = dataclasses.replace(base, beam_width=width, early_stopping=True)
        models = g2p_model.build_models(letters, phones, config)
        models.trainer.set_weights(weights)
        if reuse and (work / f"beam{width}" / "report.json").is_file():
            seconds[f"beam{width}"] = "reused"
            continue
        ka.export_model(
            {"pronounce": models.greedy if width == 1 else models.beam},
            work / f"beam{width}",
            overwrite=True,
            formats=["saved_model", "onnx", "litert", "openvino"],
            vocabulary={"source": letters, "target": phones},
            sample_inputs={"pronounce": sample},
            quantize="int8",
        )
        seconds[f"beam{width}"] = round(time.perf_counter() - begin, 1)
        print(f"exported beam {width} in {seconds[f'beam{width}']} s", flush=True)
    begin = time.perf_counter()
    trainer = models.trainer
    if reuse and (work / "ct2" / "model.bin").is_file():
        return {**seconds, "ctranslate2": "reused"}
    export_ctranslate2(
        work / "ct2",
        models.decoder,
        trainer.get_layer("encoder"),
        trainer.get_layer("letter_embedding"),
        letters,
        phones,
        source_position=trainer.get_layer("position"),
        overwrite=True,
    )
    seconds["ctranslate2"] = round(time.perf_counter() - begin, 1)
    return seconds


def _decoded(outputs, phones):
    """{word: its phones} of an engine's ids (each engine pads its own way)."""
    import numpy as np

    return {word: list(phones.decode(np.array([ids]))[0]) for word, ids in outputs.items()}


def _scores(decoded, test):
    from keras_attention.evaluation import error_rates

    words = sorted(decoded)
    rates = error_rates([decoded[word] for word in words], [test[word] for word in words])
    return {"wer": rates["sequence_error_rate"], "per": rates["token_error_rate"], "words": len(words)}


def _cell(cells, **key):
    found = [c for c in cells if all(c[k] == v for k, v in key.items())]
    return found[0] if found else None


def goals(cells, accuracy, peer, batch_sizes, threads):
    """The issue's two ratios, from the cells."""
    document = {}
    keras = {a["beam_width"]: a for a in accuracy if a["engine"] == "keras"}
    ct2 = {(a["beam_width"], a["precision"]): a for a in accuracy if a["engine"] == "ctranslate2"}
    if peer and peer.get("words_per_second"):
        rows = []
        for batch_size in batch_sizes:
            for count in threads:
                cell = _cell(
                    cells, engine="ctranslate2", precision="float32", threads=count, beam_width=2, batch_size=batch_size
                )
                if cell:
                    rows.append(
                        {
                            "batch_size": batch_size,
                            "threads": count,
                            "ctranslate2_words_per_second": cell["words_per_second"],
                            "ratio": round(cell["words_per_second"] / peer["words_per_second"], 2),
                        }
                    )
        one_thread = [row for row in rows if row["threads"] == 1]
        best = max(one_thread or rows, key=lambda row: row["ratio"]) if rows else None
        document["ctranslate2_over_phonetisaurus_beam2"] = {
            "phonetisaurus_words_per_second": peer["words_per_second"],
            "by_batch_and_threads": rows,
            "headline": best,
            "met": bool(best and best["ratio"] >= 3.0),
            "ctranslate2_wer": ct2.get((2, "float32"), {}).get("wer"),
            "ctranslate2_same_as_keras": ct2.get((2, "float32"), {}).get("same_as_keras"),
            "keras_wer": keras.get(2, {}).get("wer"),
            "phonetisaurus_wer": peer.get("wer"),
        }
    ratios = []
    for cell in cells:
        if cell["engine"] != "ctranslate2":
            continue
        key = {k: cell[k] for k in ("precision", "threads", "beam_width", "batch_size")}
        ours = _cell(cells, engine="onnxruntime", **key)
        if ours:
            ratios.append(
                {
                    **key,
                    "onnxruntime_words_per_second": ours["words_per_second"],
                    "ctranslate2_words_per_second": cell["words_per_second"],
                    "ctranslate2_over_onnxruntime": round(cell["words_per_second"] / ours["words_per_second"], 2),
                }
            )
    headline = [
        r
        for r in ratios
        if (r["precision"], r["threads"], r["beam_width"], r["batch_size"]) == ("float32", 1, 2, max(batch_sizes))
    ]
    document["onnxruntime_vs_ctranslate2"] = {
        "cells": ratios,
        "headline": headline[0] if headline else None,
        "within_1_5x": sum(r["ctranslate2_over_onnxruntime"] <= 1.5 for r in ratios),
        "of": len(ratios),
        "worst": max(ratios, key=lambda r: r["ctranslate2_over_onnxruntime"]) if ratios else None,
    }
    return document


def study(args):
    from examples.g2p import data
    from keras_attention.export import load_vocabulary

    run = Path(args.run).resolve()
    trained = json.loads((run / "results.json").read_text())
    config = trained["ours"]["model"]
    if args.smoke:
        from examples.g2p.train import SMOKE_WORDS
        from keras_attention.g2p import lexicon

        test = lexicon.subset(data.cmudict_split()["train"], SMOKE_WORDS)
    else:
        test = data.cmudict_split()["test"]
    all_words = sorted(test)
    shuffled = list(all_words)
    random.Random(0).shuffle(shuffled)
    sample = shuffled[: args.sample]
    wer_words = sorted(shuffled[: args.wer_words])
    scratch = None
    if args.work:
        work = Path(args.work).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        scratch = tempfile.TemporaryDirectory()
        work = Path(scratch.name)
    export_seconds = export_all(run, work, config, args.beam_widths, sample, args.reuse_exports)
    vocabulary = load_vocabulary(run / "export")
    base = {
        "config": config,
        "trainer": str(run / "g2p_trainer.keras"),
        "vocabulary": str(run / "export"),
        "exports": str(work),
        "ct2": str(work / "ct2"),
        "sample": sample,
        "batch_one_sample": args.batch_one_sample,
        "wer_words": wer_words,
        "beam_widths": args.beam_widths,
        "batch_sizes": args.batch_sizes,
        "passes": args.passes,
    }
    cells, outputs = [], {}
    for engine in args.engines:
        for precision in PRECISIONS[engine]:
            for count in args.threads:
                begin = time.perf_counter()
                spec = {**base, "engine": engine, "precision": precision, "threads": count}
                result = _fresh_process({**spec, "score": count == max(args.threads)})
                cells += result["cells"]
                for width, ids in result["outputs"].items():
                    outputs[(engine, precision, int(width))] = ids
                print(f"{engine} {precision} {count} thread(s): {time.perf_counter() - begin:.0f} s", flush=True)
    accuracy = []
    decoded = {key: _decoded(ids, vocabulary["target"]) for key, ids in outputs.items()}
    for (engine, precision, width), phones in decoded.items():
        row = {"engine": engine, "precision": precision, "beam_width": width, **_scores(phones, test)}
        reference = decoded.get(("keras", "float32", width))
        if reference:
            row["same_as_keras"] = round(sum(phones[w] == reference[w] for w in phones) / len(phones), 4)
        accuracy.append(row)
    model = Path(args.phonetisaurus_model or run / "phonetisaurus" / "train" / "model.fst")
    peer = None
    if model.is_file():
        from keras_attention.g2p import peer as g2p_peer

        runs = [g2p_peer.evaluate(model, {w: test[w] for w in wer_words}) for _ in range(args.passes)]
        rates = [entry["words_per_second"] for entry in runs]
        peer = {**runs[0], "words_per_second": statistics.median(rates), "passes": rates, "threads": 1}
    document = {
        "run": str(Path(args.run)),
        "model": config,
        "trained_wer": trained["ours"].get("wer"),
        "test_words": len(all_words),
        "sample_words": len(sample),
        "batch_one_words": min(args.batch_one_sample, len(sample)),
        "wer_words": len(wer_words),
        "wer_batch_size": WER_BATCH,
        "wer_threads": max(args.threads),
        "passes": args.passes,
        "export_seconds": export_seconds,
        "cells": cells,
        "accuracy": sorted(accuracy, key=lambda a: (ENGINES.index(a["engine"]), a["precision"], a["beam_width"])),
        "phonetisaurus": peer,
        "versions": _versions(),
    }
    document["goals"] = goals(cells, document["accuracy"], peer, args.batch_sizes, args.threads)
    comparison = document["goals"]["onnxruntime_vs_ctranslate2"]
    if comparison["worst"] and comparison["worst"]["ctranslate2_over_onnxruntime"] > 1.5:
        worst = comparison["worst"]
        directory = work / f"beam{worst['beam_width']}"
        name = "pronounce.onnx" if worst["precision"] == "float32" else "pronounce.int8.onnx"
        words = sample[: args.batch_one_sample] if worst["batch_size"] == 1 else sample
        document["onnxruntime_profile"] = {
            "cell": {k: worst[k] for k in ("precision", "threads", "beam_width", "batch_size")},
            **_fresh_profile(directory / name, words, worst["threads"], worst["batch_size"]),
        }
    if scratch:
        scratch.cleanup()
    return document


def _versions():
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in ("keras", "tensorflow", "onnxruntime", "ctranslate2", "ai-edge-litert", "openvino", "phonetisaurus"):
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = None
    return found


# --- the docs' table ---------------------------------------------------------

VERSIONED = ("tensorflow", "onnxruntime", "ctranslate2", "ai-edge-litert", "openvino", "phonetisaurus")
LABELS = {
    "keras": "Keras (TensorFlow)",
    "onnxruntime": "onnxruntime",
    "ctranslate2": "CTranslate2",
    "litert": "LiteRT",
    "openvino": "OpenVINO",
}


def table(document):
    """The docs' block: words/s by engine, precision, threads and batch, one column per beam; then WER."""
    cells = document["cells"]
    widths = sorted({c["beam_width"] for c in cells})
    batches = sorted({c["batch_size"] for c in cells})
    model = document["model"]
    machine, versions = document["machine"], document["versions"]
    engines = ", ".join(f"{name} {versions[name]}" for name in VERSIONED if versions.get(name))
    lines = [
        f"Measured by `{document['command']}` on {document['date']} ({machine['cores']} {machine.get('cpu') or machine['processor']} cores "
        f"shared with other work: load average {document['load_average_start'][0]:.1f} at the start, "
        f"{document['load_average_end'][0]:.1f} at the end; {document['wall_seconds'] / 60:.0f} min in all; "
        f"{engines}). The model: the CMUdict Transformer "
        f"({model['layers']}+{model['layers']} layers, d {model['model_dim']}, {model['heads']} heads, "
        f"FFN {model['ff_dim']}; test WER {document['trained_wer']:.1f}% at beam {model['beam_width']} in its "
        f"training run). Words/s is the median of {document['passes']} passes over {document['sample_words']} "
        f"test words ({document['batch_one_words']} at batch 1), each engine, precision and thread count in a "
        "fresh process. Not in this run: the LSTM model (its trained weights are not at hand), Keras int8 and "
        "OpenVINO int8 (not offered: OpenVINO's IR is float32 here)."
        + (
            " The cores were shared (load average at least the core count), so 2 threads measure contention "
            "more than scaling."
            if min(document["load_average_start"][0], document["load_average_end"][0]) >= machine["cores"]
            else ""
        ),
        "",
        "| engine | precision | threads | batch | " + " | ".join(f"beam {w} words/s" for w in widths) + " |",
        "|---|---|---:|---:|" + "---:|" * len(widths),
    ]
    for engine in ENGINES:
        for precision in ("float32", "int8"):
            for count in sorted({c["threads"] for c in cells}):
                for batch_size in batches:
                    row = [
                        _cell(
                            cells,
                            engine=engine,
                            precision=precision,
                            threads=count,
                            beam_width=w,
                            batch_size=batch_size,
                        )
                        for w in widths
                    ]
                    if any(row):
                        values = [f"{c['words_per_second']:,.0f}" if c else "-" for c in row]
                        lines.append(
                            f"| {LABELS[engine]} | {precision} | {count} | {batch_size} | " + " | ".join(values) + " |"
                        )
    peer = document.get("phonetisaurus")
    if peer:
        lines.append(
            f"| Phonetisaurus | - | 1 | {peer['test_words']:,} in one call | {peer['words_per_second']:,.0f} "
            "(its own search) |" + " |" * (len(widths) - 1)
        )
    lines += [
        "",
        f"WER on {document['wer_words']:,} CMUdict test words (batch {document['wer_batch_size']}, "
        f"{document['wer_threads']} threads); same as Keras: the share of words whose best pronunciation is Keras's.",
        "",
        "| engine | precision | " + " | ".join(f"beam {w} WER (same as Keras)" for w in widths) + " |",
        "|---|---|" + "---:|" * len(widths),
    ]
    accuracy = document["accuracy"]
    for engine in ENGINES:
        for precision in ("float32", "int8"):
            row = [_cell(accuracy, engine=engine, precision=precision, beam_width=w) for w in widths]
            if any(row):
                values = [
                    (f"{a['wer']:.1f}%" + (f" ({a['same_as_keras']:.1%})" if "same_as_keras" in a else ""))
                    if a
                    else "-"
                    for a in row
                ]
                lines.append(f"| {LABELS[engine]} | {precision} | " + " | ".join(values) + " |")
    if peer:
        lines.append(f"| Phonetisaurus | - | {peer['wer']:.1f}% |" + " |" * (len(widths) - 1))
    lines += ["", _goal_lines(document)]
    return "\n".join(lines)


def _goal_lines(document):
    parts = []
    goal = document["goals"].get("ctranslate2_over_phonetisaurus_beam2")
    if goal and goal["headline"]:
        head = goal["headline"]
        wer = goal["ctranslate2_wer"]
        parts.append(
            f"CTranslate2 over Phonetisaurus at beam 2 (goal: 3x): {head['ratio']:.1f}x "
            f"({head['ctranslate2_words_per_second']:,.0f} against {goal['phonetisaurus_words_per_second']:,.0f} "
            f"words/s; CTranslate2 float32 at batch {head['batch_size']}, {head['threads']} thread(s)); "
            + (f"its WER {wer:.1f}%, Keras's {goal['keras_wer']:.1f}%" if wer is not None else "")
            + (
                f", the same pronunciation as Keras on {goal['ctranslate2_same_as_keras']:.1%} of the words"
                if goal.get("ctranslate2_same_as_keras") is not None
                else ""
            )
            + (". Met." if goal["met"] else ". Not met.")
        )
    versus = document["goals"]["onnxruntime_vs_ctranslate2"]
    if versus["worst"]:
        worst = versus["worst"]
        parts.append(
            f"onnxruntime within 1.5x of CTranslate2 (same weights, same cell): {versus['within_1_5x']} of "
            f"{versus['of']} cells"
            + (
                f"; at beam 2, batch {versus['headline']['batch_size']}, float32, 1 thread CTranslate2 is "
                f"{versus['headline']['ctranslate2_over_onnxruntime']:.1f}x onnxruntime "
                f"({versus['headline']['ctranslate2_words_per_second']:,.0f} against "
                f"{versus['headline']['onnxruntime_words_per_second']:,.0f} words/s)"
                if versus.get("headline")
                else ""
            )
            + f"; the worst, {worst['ctranslate2_over_onnxruntime']:.1f}x, at beam "
            f"{worst['beam_width']}, batch {worst['batch_size']}, {worst['precision']}, {worst['threads']} thread(s)."
        )
    profile = document.get("onnxruntime_profile")
    if profile:
        ranked = sorted(profile["by_operator"].items(), key=lambda item: -item[1])[:5]
        shares = ", ".join(f"{op} {share:.0%}" for op, share in ranked)
        parts.append(
            f"Where onnxruntime's time goes in that cell (its profiler, one pass): the operators' kernels are "
            f"{profile['kernels_share']:.0%} of the run time, matrix products {profile['matmul_share']:.0%}, over "
            f"{profile['kernel_calls_per_run']:,} kernel calls per call of the model (the decode loop's steps); "
            f"the rest is onnxruntime's own work between kernels. By operator: {shares}; the loop holds "
            f"{profile['control_flow_share'].get('Loop', 0):.0%} of the time."
        )
    return "\n\n".join(parts)


def updated_page(text, document):
    from tools.readme_block import replace_block

    return replace_block(text, BEGIN, END, table(document), PAGE.name)


def report(check=False, results=RESULTS):
    text = PAGE.read_text(encoding="utf-8")
    if not Path(results).is_file():
        return 0
    new = updated_page(text, json.loads(Path(results).read_text(encoding="utf-8")))
    if check:
        if new != text:
            print("error: docs/serving.md's engines block is out of date; run python -m examples.g2p.engines --report")
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    print(f"updated {PAGE}")
    return 0


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        return _child_main(args.child)
    if args.report:
        return report(args.check)
    from examples.common import machine

    load_start = os.getloadavg()
    begin = time.perf_counter()
    document = study(args)
    document.update(
        command=" ".join(["python -m examples.g2p.engines", *(sys.argv[1:] if argv is None else argv)]),
        wall_seconds=round(time.perf_counter() - begin, 1),
        date=datetime.date.today().isoformat(),
        machine=machine(),
        load_average_start=[round(x, 2) for x in load_start],
        load_average_end=[round(x, 2) for x in os.getloadavg()],
    )
    if args.results:
        path = Path(args.results)
        path.parent.mkdir(parents=True, exist_ok=True)
        from keras_attention.g2p.train_command import write_json  # at the end: the measuring processes are done

        write_json(path, document)
        print(f"wrote {path}")
    return document


if __name__ == "__main__":
    result = main()
    sys.exit(result if isinstance(result, int) else 0)
