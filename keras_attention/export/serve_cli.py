"""The `keras-attention-serve` command: run an exported model with
onnxruntime (or LiteRT, OpenVINO, CTranslate2: --engine) on JSON inputs;
print what it computed and its latency.

    keras-attention-serve OUT_DIR [--signature translate] --inputs '{"source": ["March 3, 2001"]}'
        [--inputs-file INPUTS.json] [--runs 100] [--warmup 5] [--threads N] [--json] [--all-outputs]
        [--precision int8]
    keras-attention-serve OUT_DIR --signature pronounce --texts words.txt [--batch-size 256]
        [--max-length N] [--min-length N] [--temperature T] [--top-k K] [--top-p P] [--seed S]
        [--length-penalty-weight A] [--coverage-penalty-weight B] [--repetition-penalty R]
        [--no-repeat-ngram-size N]
    keras-attention-serve OUT_DIR --engine litert|openvino ...       (the same inputs, options and output)
    keras-attention-serve CT2_DIR --engine ctranslate2 [--vocabulary vocabulary.json] [--beam-size K] ...

The decoding flags set the run-time options of a decoder exported with
`runtime_options=` (one value for every input; in --inputs JSON an option
may also be a list, one per input). A flag the model does not take, or a
value outside its bounds, is an error naming it.

By default a model that outputs `ids` (with a `vocabulary.json` in OUT_DIR)
prints its translations, one per input line (the best beam of a beam
search); with --json, one JSON document {"translations": [{"text", "score",
"finished"}], "latency_ms"} ("finished" false: the text was cut at
max_length, not ended; in text mode a `note:` line on stderr names those
rows). A model without ids prints its outputs. --all-outputs prints
every output tensor as well (alignments and scores included). The outputs
come from one run; then the same inputs run --warmup times untimed and
--runs times timed, and the latency percentiles go to stderr in text mode
(--runs 0: no timing).

With --texts FILE (one text a line, "-" for stdin) each line is decoded and
printed as `text<TAB>decoded text` (the best hypothesis), in batches of
similar length: a word list in, pronunciations out.

OUT_DIR is a directory written by `keras-attention-export` (`model.onnx` is
the `serving_default` signature, `<name>.onnx` the others). Inputs are a JSON
object {input name: nested list}, or, when the model has one input, just its
value. With a `vocabulary.json` in OUT_DIR, strings are tokenised character
by character. Without --inputs or --inputs-file the JSON is read from stdin.

--engine picks what runs it (`engines.py` has the table): onnxruntime on
the ONNX files (the default), litert on the `.tflite` files of an export
with `--formats litert`, openvino on its IR (`--formats openvino`),
ctranslate2 on a model directory `export_ctranslate2` wrote, given as
OUT_DIR: its strings are tokenised with --vocabulary (an export's
`vocabulary.json`, by default the one in CT2_DIR if any), its search is
greedy or --beam-size K, and of the run-time options it takes max_length
and min_length.

Every failure (bad JSON, inputs that do not fit the model, an unreadable
directory, an engine's error) is one line `error: ...` on stderr and exit
status 1; what the chosen engine cannot do (its package missing, no
artefact for it in OUT_DIR, an option it lacks) is one such line and exit
status 2, as a bad flag is.
"""

import json
import sys
import time
from pathlib import Path

import numpy as np

from keras_attention.decoders.runtime_options import RUNTIME_OPTIONS
from keras_attention.export.cli import _Parser, error_line
from keras_attention.export.engines import DEFAULT_ENGINE, ENGINES, EngineRefusal, load_engine
from keras_attention.export.layout import DEFAULT_SIGNATURE, PRECISIONS
from keras_attention.export.serving import translate_texts


def _parse_args(argv=None):
    parser = _Parser(
        prog="keras-attention-serve",
        description="Run an exported model with onnxruntime, LiteRT, OpenVINO or CTranslate2 on JSON inputs; "
        "print what it computed and its latency.",
    )
    parser.add_argument(
        "out_dir", help="an export directory (with --engine ctranslate2: a CTranslate2 model directory)"
    )
    parser.add_argument(
        "--engine",
        choices=list(ENGINES),
        default=DEFAULT_ENGINE,
        help="what runs the export: its ONNX files, .tflite files, OpenVINO IR, or a CTranslate2 model directory",
    )
    parser.add_argument(
        "--vocabulary",
        help="with --engine ctranslate2: the vocabulary.json tokenising strings (default: CT2_DIR/vocabulary.json)",
    )
    parser.add_argument(
        "--beam-size", type=int, default=None, help="with --engine ctranslate2: beams of its search (default 1: greedy)"
    )
    parser.add_argument(
        "--signature",
        default=DEFAULT_SIGNATURE,
        help="which ONNX file: serving_default -> model.onnx, NAME -> NAME.onnx",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--inputs", help="JSON: {input name: value} (strings are tokenised with vocabulary.json)")
    source.add_argument("--inputs-file", help="a JSON file with the inputs")
    source.add_argument("--texts", help="a text file, one input text a line ('-': stdin); prints text<TAB>decoded")
    parser.add_argument("--batch-size", type=int, default=256, help="with --texts: texts per batch")
    parser.add_argument("--runs", type=int, default=100, help="timed runs after the one that prints (0: no timing)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs before the timed ones")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="the engine's threads (onnxruntime's intra-op threads; default: every core, the fastest on batches of 256; "
        "1 is faster for one text at a time: benchmarks/results.md, section 9)",
    )
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default="float32",
        help="int8: the quantized copy (NAME.int8.onnx, NAME.int8.tflite) an export with --quantize int8 wrote; "
        "with --engine ctranslate2, its int8 compute type",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    parser.add_argument(
        "--all-outputs", action="store_true", help="also print every output tensor (alignments, scores, ...)"
    )
    decoding = parser.add_argument_group("decoding options (a decoder exported with runtime_options=...)")
    for name, option in RUNTIME_OPTIONS.items():
        decoding.add_argument(
            "--" + name.replace("_", "-"),
            dest=name,
            type=int if option.dtype.startswith("int") else float,
            default=None,
            help=option.meaning,
        )
    args = parser.parse_args(argv)
    args.options = {name: getattr(args, name) for name in RUNTIME_OPTIONS if getattr(args, name) is not None}
    for flag in ("runs", "warmup"):
        if getattr(args, flag) < 0:
            parser.error(f"argument --{flag}: expected an integer >= 0, got {getattr(args, flag)}")
    if args.engine != "ctranslate2":
        for flag in ("vocabulary", "beam_size"):
            if getattr(args, flag) is not None:
                parser.error(
                    f"argument --{flag.replace('_', '-')}: only --engine ctranslate2 takes it (an export holds its "
                    f"vocabulary and search); got --engine {args.engine}"
                )
    if args.beam_size is not None and args.beam_size < 1:
        parser.error(f"argument --beam-size: expected an integer >= 1, got {args.beam_size}")
    return args


def _read_inputs(args):
    if args.inputs is not None:
        text, where = args.inputs, "--inputs"
    elif args.inputs_file is not None:
        path = Path(args.inputs_file)
        if not path.is_file():
            raise FileNotFoundError(f"--inputs-file: no such file {str(path)!r}.")
        text, where = path.read_text(encoding="utf-8"), str(path)
    else:
        text, where = sys.stdin.read(), "stdin"
    try:
        return json.loads(text)
    except ValueError as error:
        raise ValueError(f"{where} is not valid JSON: {error}") from error


def _with_options(inputs, options, model):
    """The JSON inputs with the decoding flags' options added."""
    if not options:
        return inputs
    if not isinstance(inputs, dict):  # a model's only input, given bare
        inputs = {next(iter(model.specs)): inputs} if len(model.specs) == 1 else inputs
    if not isinstance(inputs, dict):
        raise ValueError("the decoding flags need the inputs as a JSON object {input name: value}.")
    twice = sorted(set(inputs) & set(options))
    if twice:
        raise ValueError(f"{twice} given both in the inputs and as flags; give each once.")
    return {**inputs, **options}


def _read_texts(path):
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--texts: no such file {path!r}.")
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def _decode_texts(model, texts, batch_size, options):
    """The best decoded text of each of `texts`, run by `model` (any engine)
    in batches of similar length, as `translate_texts` runs onnxruntime."""
    if isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"--batch-size must be a positive integer; got {batch_size!r}.")
    if len(model.specs) != 1:
        raise ValueError(f"the model has inputs {list(model.specs)}; texts can feed a model with one input.")
    name = next(iter(model.specs))
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    results = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        decoded = model.texts(model.run(model.feeds({name: [texts[i] for i in rows], **options})))
        if "ids" not in decoded:
            raise ValueError("the model has no `ids` output to detokenise (or no vocabulary to do it with).")
        for i, text in zip(rows, decoded["ids"]):
            results[i] = text if isinstance(text, str) else text[0]
    return results


def _translations(result):
    """[{"text", "score", "finished"}] per input row, from the detokenised
    `ids` (the best beam of a beam search) and the `scores` and `finished`
    outputs (each left out when the model lacks it); None without text."""
    texts = result["text"].get("ids")
    if texts is None:
        return None
    rows = []
    for index, text in enumerate(texts):
        beam = not isinstance(text, str)
        row = {"text": text[0] if beam else text}
        for name, kind in (("score", float), ("finished", bool)):
            values = result["outputs"].get("scores" if name == "score" else name)
            if values is not None:
                row[name] = kind(values[index][0] if beam else values[index])
        rows.append(row)
    return rows


def _latency(run, runs, warmup):
    """{"p50", "p90", "p99", "mean" (ms), "runs"} of `runs` timed calls of
    `run` after `warmup` untimed ones (onnxruntime's first runs allocate and
    plan; they are not what serving costs)."""
    for _ in range(warmup):
        run()
    times = []
    for _ in range(runs):
        begin = time.perf_counter()
        run()
        times.append((time.perf_counter() - begin) * 1000.0)
    latency = {f"p{q}": float(np.percentile(times, q)) for q in (50, 90, 99)}
    latency.update(mean=float(np.mean(times)), runs=runs)
    return latency


def _print_tensors(outputs):
    for name, value in outputs.items():
        print(f"{name} {value.dtype} {tuple(value.shape)}:")
        print(np.array2string(value, precision=4, threshold=200, separator=", "))


def _load(args):
    return load_engine(
        args.engine, args.out_dir, args.signature, args.threads, args.precision, args.vocabulary, args.beam_size
    )


def main(argv=None):
    """`keras-attention-serve OUT_DIR [--signature NAME] (--inputs JSON | --inputs-file F | --texts F)`."""
    args = _parse_args(argv)
    # Every failure, ours or onnxruntime's, is one line on stderr and exit
    # status 1: a command prints no traceback.
    # What the engine cannot do is a refusal like a bad flag's: exit status 2.
    try:
        if args.texts is not None and args.engine == DEFAULT_ENGINE:
            texts = _read_texts(args.texts)
            decoded = translate_texts(
                args.out_dir,
                texts,
                signature=args.signature,
                batch_size=args.batch_size,
                threads=args.threads,
                precision=args.precision,
                options=args.options,
            )
        elif args.texts is not None:
            texts = _read_texts(args.texts)
            model = _load(args)
            decoded = _decode_texts(model, texts, args.batch_size, args.options)
        else:
            model = _load(args)
            feeds = model.feeds(_with_options(_read_inputs(args), args.options, model))
            outputs = model.run(feeds)
            result = {"outputs": outputs, "text": model.texts(outputs)}
            latency = _latency(lambda: model.run(feeds), args.runs, args.warmup) if args.runs else None
    except EngineRefusal as error:
        print(error_line(error), file=sys.stderr)
        return 2
    except Exception as error:
        print(error_line(error), file=sys.stderr)
        return 1
    if args.texts is not None:
        for text, output in zip(texts, decoded):
            print(f"{text}\t{output}")
        return 0
    rows = _translations(result)
    # Without text, the outputs are what was asked for.
    show_tensors = args.all_outputs or rows is None
    if args.json:
        document = {}
        if rows is not None:
            document["translations"] = rows
        if show_tensors:
            document["outputs"] = {name: value.tolist() for name, value in result["outputs"].items()}
        if latency is not None:
            document["latency_ms"] = latency
        print(json.dumps(document, ensure_ascii=False))
        return 0
    if rows is not None:
        for row in rows:
            print(row["text"])
        cut = [index for index, row in enumerate(rows) if row.get("finished") is False]
        if cut:  # padded with end ids, a cut text reads as finished: say which
            print(f"note: rows {cut} were cut at max_length (no end token; output `finished` false).", file=sys.stderr)
    if show_tensors:
        _print_tensors(result["outputs"])
    if latency is not None:
        print(
            f"latency over {latency['runs']} runs (ms): p50 {latency['p50']:.3f}  p90 {latency['p90']:.3f}  "
            f"p99 {latency['p99']:.3f}  mean {latency['mean']:.3f}",
            file=sys.stderr,
        )
    return 0
