"""Serving a trained CMUdict model: accuracy and ONNX throughput by beam width.

    python -m examples.g2p.serving runs/g2p_cmudict_big [--beam-widths 1 2 3 5] [--batch-size 256]
        [--results results/g2p_cmudict_serving.json] [--limit N] [--phonetisaurus-model MODEL.fst] [--int8]
        [--members N]

For each beam width the run's trained weights (each model's, for an
ensemble) are rebuilt into a beam model
(with early stopping, which returns the full search's best beam), scored on
the CMUdict test words with Keras, exported to ONNX with its `pronounce`
signature, and served through onnxruntime in a fresh process: a process that
has just trained or run TensorFlow serves markedly slower (its thread pools
compete with onnxruntime's), and a server does not train. The served
pronunciations are compared with Keras's word for word. Phonetisaurus, from
the model a CMUdict training run trains beside ours, is scored and timed on
the same words in the same run (without it, its figures are read from
`--peer`).

An ensemble run is served whole, or its first N models with --members N
(1: one model alone, the cheaper point of the trade-off).

With --int8 each width is also exported with int8 weights (onnxruntime's
dynamic quantization) and served the same way: its accuracy is scored from
the served pronunciations, beside its size, speed and agreement with Keras.
"""

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PASSES = 3  # timed passes over the word list; the median is reported


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a CMUdict training run's --out directory (results.json, g2p_trainer.keras)")
    parser.add_argument("--beam-widths", type=int, nargs="+", default=[1, 2, 3, 5])
    parser.add_argument("--batch-size", type=int, default=256, help="words per onnxruntime call")
    parser.add_argument(
        "--phonetisaurus-model",
        default="runs/g2p_cmudict/phonetisaurus/train/model.fst",
        help="a Phonetisaurus model trained on the same split (train.py writes one): timed on the same words here",
    )
    parser.add_argument(
        "--peer",
        default="results/g2p_cmudict.json",
        help="without that model: results file with Phonetisaurus's figures",
    )
    parser.add_argument("--results", help="also write the results JSON here")
    parser.add_argument("--int8", action="store_true", help="also serve an int8-quantized copy of each width")
    parser.add_argument("--limit", type=int, help="only the first N test words (alphabetically): a quick check")
    parser.add_argument(
        "--members",
        type=int,
        help="an ensemble run: serve its first N models only (1: the first model alone); default all",
    )
    args = parser.parse_args(argv)
    if any(width < 1 for width in args.beam_widths):
        parser.error(f"argument --beam-widths: expected integers >= 1, got {args.beam_widths}")
    if args.limit is not None and args.limit < 1:
        parser.error(f"argument --limit: expected an integer >= 1, got {args.limit}")
    if args.batch_size < 1:
        parser.error(f"argument --batch-size: expected an integer >= 1, got {args.batch_size}")
    if not (Path(args.run) / "results.json").is_file():
        parser.error(f"argument run: {args.run!r} has no results.json (is it a finished CMUdict training run?)")
    if args.members is not None and args.members < 1:
        parser.error(f"argument --members: expected an integer >= 1, got {args.members}")
    trained = json.loads((Path(args.run) / "results.json").read_text())
    paths = trainer_paths(args.run, trained)
    if args.members is not None and args.members > len(paths):
        parser.error(f"argument --members: the run has {len(paths)} model(s); got {args.members}")
    for path in paths:
        if not path.is_file():
            parser.error(
                f"argument run: {args.run!r} has no {path.relative_to(args.run)} (a finished training run has)"
            )
    return args


def trainer_paths(run, trained):
    """The trained model's `.keras` file, or each of its ensemble's."""
    size = trained.get("ours", {}).get("ensemble", 1)
    if size == 1:
        return [Path(run) / "g2p_trainer.keras"]
    return [Path(run) / f"member_{number}" / "g2p_trainer.keras" for number in range(size)]


def throughput(directory, words_file, batch_size, precision="float32"):
    """Words/s of `directory`'s `pronounce.onnx` over the words in
    `words_file`: the median of PASSES timed passes of onnxruntime calls on
    length-sorted batches (tokenised beforehand), and one end-to-end pass of
    `translate_texts` (tokenising, decoding and detokenising, session
    creation included). Runs in the process that calls it: call it in a
    fresh one."""
    import onnxruntime

    from keras_attention.export import load_vocabulary, translate_texts
    from keras_attention.g2p.pronounce import length_sorted_batches

    words = Path(words_file).read_text(encoding="utf-8").split()
    letters = load_vocabulary(directory)["source"]
    name = "pronounce.onnx" if precision == "float32" else f"pronounce.{precision}.onnx"
    session = onnxruntime.InferenceSession(str(Path(directory) / name), providers=["CPUExecutionProvider"])
    feeds = [letters.encode([words[i] for i in rows]) for rows in length_sorted_batches(words, batch_size)]
    session.run(["ids"], {"letters": feeds[0]})  # onnxruntime plans and allocates on its first run
    rates, ids = [], None
    for _ in range(PASSES):
        begin = time.perf_counter()
        ids = [session.run(["ids"], {"letters": feed})[0] for feed in feeds]
        rates.append(len(words) / (time.perf_counter() - begin))
    begin = time.perf_counter()
    translate_texts(directory, words, signature="pronounce", batch_size=batch_size, precision=precision)
    end_to_end = len(words) / (time.perf_counter() - begin)
    order = [i for rows in length_sorted_batches(words, batch_size) for i in rows]
    best = [row[0].tolist() for batch in ids for row in batch]
    return {
        "words_per_second": round(statistics.median(rates), 1),
        "passes": [round(rate, 1) for rate in rates],
        "end_to_end_words_per_second": round(end_to_end, 1),
        "matmul_share": matmul_share(Path(directory) / name, feeds),
        "ids": {words[i]: row for i, row in zip(order, best)},
    }


# onnxruntime's matrix-product kernels, float and int8.
MATMUL_OPS = {
    "MatMul",
    "Gemm",
    "FusedMatMul",
    "MatMulInteger",
    "MatMulIntegerToFloat",
    "DynamicQuantizeMatMul",
    "QGemm",
}


def matmul_share(path, feeds):
    """The fraction of one profiled pass over `feeds` that onnxruntime spends
    in matrix products (its profiler's kernel times over the runs' wall
    times): how much of a word's time is arithmetic rather than the decode
    loop's other work."""
    import onnxruntime

    with tempfile.TemporaryDirectory() as scratch:
        options = onnxruntime.SessionOptions()
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(scratch) / "profile")
        session = onnxruntime.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for feed in feeds:
            session.run(["ids"], {"letters": feed})
        events = json.loads(Path(session.end_profiling()).read_text())
    runs = sum(event["dur"] for event in events if event.get("name") == "model_run")
    products = sum(
        event["dur"]
        for event in events
        if event.get("cat") == "Node"
        and event["name"].endswith("_kernel_time")
        and event.get("args", {}).get("op_name") in MATMUL_OPS
    )
    return round(products / runs, 3) if runs else None


def _fresh_process_throughput(directory, words, batch_size, precision="float32"):
    with tempfile.TemporaryDirectory() as scratch:
        words_file = Path(scratch) / "words.txt"
        words_file.write_text("\n".join(words) + "\n", encoding="utf-8")
        result_file = Path(scratch) / "result.json"
        code = (
            "import json, sys; from examples.g2p import serving; "
            "json.dump(serving.throughput(sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[5]), open(sys.argv[4], 'w'))"
        )
        subprocess.run(
            [sys.executable, "-c", code, str(Path(directory).resolve()), str(words_file), str(batch_size)]
            + [str(result_file), precision],
            cwd=ROOT,  # the checkout, where `examples` is a package
            check=True,
        )
        return json.loads(result_file.read_text())


def study(args):
    import keras
    import numpy as np

    import keras_attention as ka
    from examples.g2p import data
    from keras_attention.evaluation import error_rates
    from keras_attention.export import load_vocabulary
    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p.pronounce import length_sorted_batches, score

    run = Path(args.run)
    trained = json.loads((run / "results.json").read_text())
    base_config = g2p_model.ModelConfig(**trained["ours"]["model"])
    vocabulary = load_vocabulary(run / "export") if (run / "export" / "vocabulary.json").is_file() else None
    split = data.cmudict_split()
    if vocabulary is None:
        from keras_attention.g2p.vocabularies import vocabularies

        letters, phones = vocabularies(split["train"])
    else:
        letters, phones = vocabulary["source"], vocabulary["target"]
    paths = trainer_paths(run, trained)[: args.members]
    trained_weights = [keras.saving.load_model(path).get_weights() for path in paths]
    words = sorted(split["test"])[: args.limit]
    test = {word: split["test"][word] for word in words}
    rows = []
    for width in args.beam_widths:
        config = dataclasses.replace(base_config, beam_width=width, early_stopping=True)
        members = [g2p_model.build_models(letters, phones, config) for _ in trained_weights]
        for models, weights in zip(members, trained_weights):
            models.trainer.set_weights(weights)
        beam = members[0].beam if len(members) == 1 else g2p_model.build_ensemble(members, phones, config, "beam")
        begin = time.perf_counter()
        rates, _ = score(beam, test, letters, phones)
        keras_rate = len(words) / (time.perf_counter() - begin)
        directory = run / (f"serve_beam{width}" + (f"_members{len(paths)}" if args.members else ""))
        sample = [{"letters": words[:16]}, {"letters": words[16:19]}]
        ka.export_model(
            {"pronounce": beam},
            directory,
            overwrite=True,
            formats=["onnx"],
            vocabulary={"source": letters, "target": phones},
            sample_inputs={"pronounce": sample},
            quantize="int8" if args.int8 else None,
        )
        served = _fresh_process_throughput(directory, words, args.batch_size)
        keras_ids = {}
        for batch in length_sorted_batches(words, args.batch_size):
            ids = np.asarray(beam.predict_on_batch(letters.encode([words[i] for i in batch]))["ids"])[:, 0]
            keras_ids.update({words[i]: ids[j].tolist() for j, i in enumerate(batch)})
        same = sum(keras_ids[word] == served["ids"][word] for word in words)
        row = {
            "beam_width": width,
            "wer": rates["wer"],
            "per": rates["per"],
            "keras_words_per_second": round(keras_rate, 1),
            "onnx_words_per_second": served["words_per_second"],
            "onnx_passes": served["passes"],
            "onnx_end_to_end_words_per_second": served["end_to_end_words_per_second"],
            "matmul_share": served["matmul_share"],
            "same_as_keras": same / len(words),
        }
        if args.int8:
            quantized = _fresh_process_throughput(directory, words, args.batch_size, "int8")
            predictions = [phones.decode(np.array([quantized["ids"][word]]))[0] for word in words]
            int8_rates = error_rates(predictions, [test[word] for word in words])
            report = json.loads((directory / "report.json").read_text())["quantized"]["pronounce"]
            row["int8"] = {
                "wer": int8_rates["sequence_error_rate"],
                "per": int8_rates["token_error_rate"],
                "onnx_words_per_second": quantized["words_per_second"],
                "onnx_passes": quantized["passes"],
                "onnx_end_to_end_words_per_second": quantized["end_to_end_words_per_second"],
                "matmul_share": quantized["matmul_share"],
                "same_as_keras": sum(keras_ids[word] == quantized["ids"][word] for word in words) / len(words),
                "bytes": report["bytes"],
                "float32_bytes": report["float32_bytes"],
            }
        print(json.dumps(row), flush=True)
        rows.append(row)
    if Path(args.phonetisaurus_model).is_file():
        from keras_attention.g2p import peer as g2p_peer

        # Timed PASSES times as ours is: this machine's speed drifts by 20% from minute to minute.
        runs = [g2p_peer.evaluate(args.phonetisaurus_model, test) for _ in range(PASSES)]
        rates = [run["words_per_second"] for run in runs]
        peer = {**runs[0], "words_per_second": statistics.median(rates), "passes": rates}
        peer["model"] = args.phonetisaurus_model
    else:
        peer = json.loads(Path(args.peer).read_text()).get("phonetisaurus") if Path(args.peer).is_file() else None
    return {
        "run": str(run),
        "members": len(paths),
        "test_words": len(words),
        "batch_size": args.batch_size,
        "widths": rows,
        "phonetisaurus": peer,
    }


def main(argv=None):
    args = parse_args(argv)
    from examples.g2p.train import machine

    begin = time.perf_counter()
    document = study(args)
    document.update(
        command=" ".join(["python -m examples.g2p.serving", *(sys.argv[1:] if argv is None else argv)]),
        wall_seconds=round(time.perf_counter() - begin, 1),
        date=datetime.date.today().isoformat(),
        machine=machine(),
    )
    for path in [Path(args.run) / "serving.json"] + ([Path(args.results)] if args.results else []):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.with_suffix(".tmp").write_text(json.dumps(document, indent=1, sort_keys=True))
        os.replace(path.with_suffix(".tmp"), path)
        print(f"wrote {path}")
    return document


if __name__ == "__main__":
    main()
