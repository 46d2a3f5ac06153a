"""Run an exported ONNX model with onnxruntime on JSON inputs; print the outputs and latency percentiles.

    python export/serve_onnx.py OUT_DIR [--signature translate] --inputs '{"source": ["March 3, 2001"]}'
        [--inputs-file INPUTS.json] [--runs 100] [--warmup 5] [--threads N] [--json]
    python export/serve_onnx.py OUT_DIR --signature pronounce --texts words.txt [--batch-size 256]

With --texts FILE (one text a line, "-" for stdin) each line is decoded and
printed as `text<TAB>decoded text` (the best hypothesis), in batches of
similar length: a word list in, pronunciations out.

OUT_DIR is a directory written by `export/export_model.py` (`model.onnx` is
the `serving_default` signature, `<name>.onnx` the others). Inputs are a JSON
object {input name: nested list}, or, when the model has one input, just its
value. With a `vocabulary.json` in OUT_DIR, strings are tokenised character
by character and `ids` outputs are printed as text too. Without --inputs or
--inputs-file the JSON is read from stdin.
"""

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
# Run from a checkout without installing: the package sits one level up.
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from keras_attention.export import DEFAULT_SIGNATURE, run_onnx, translate_texts  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="an export directory")
    parser.add_argument("--signature", default=DEFAULT_SIGNATURE, help="which ONNX file: serving_default -> model.onnx, NAME -> NAME.onnx")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--inputs", help="JSON: {input name: value} (strings are tokenised with vocabulary.json)")
    source.add_argument("--inputs-file", help="a JSON file with the inputs")
    source.add_argument("--texts", help="a text file, one input text a line ('-': stdin); prints text<TAB>decoded")
    parser.add_argument("--batch-size", type=int, default=256, help="with --texts: texts per batch")
    parser.add_argument("--runs", type=int, default=100, help="timed runs")
    parser.add_argument("--warmup", type=int, default=5, help="untimed runs first")
    parser.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    parser.add_argument("--json", action="store_true", help="print one JSON document instead of text")
    return parser.parse_args(argv)


def read_inputs(args):
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


def read_texts(path):
    if path == "-":
        lines = sys.stdin.read().splitlines()
    else:
        if not Path(path).is_file():
            raise FileNotFoundError(f"--texts: no such file {path!r}.")
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def main(argv=None):
    args = parse_args(argv)
    if args.texts is not None:
        try:
            texts = read_texts(args.texts)
            decoded = translate_texts(args.out_dir, texts, signature=args.signature, batch_size=args.batch_size, threads=args.threads)
        except (ValueError, FileNotFoundError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        for text, output in zip(texts, decoded):
            print(f"{text}\t{output}")
        return 0
    try:
        result = run_onnx(args.out_dir, read_inputs(args), signature=args.signature, runs=args.runs, warmup=args.warmup, threads=args.threads)
    except (ValueError, FileNotFoundError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    latency = result["latency_ms"]
    if args.json:
        document = {
            "inputs": result["inputs"],
            "outputs": {name: value.tolist() for name, value in result["outputs"].items()},
            "text": result["text"],
            "latency_ms": latency,
        }
        print(json.dumps(document))
        return 0
    print(f"inputs: {', '.join(f'{n} {tuple(s)}' for n, s in result['inputs'].items())}")
    for name, value in result["outputs"].items():
        print(f"{name} {value.dtype} {tuple(value.shape)}:")
        print(np.array2string(value, precision=4, threshold=200, separator=", "))
        if name in result["text"]:
            print(f"{name} as text: {json.dumps(result['text'][name], ensure_ascii=False)}")
    print(
        f"latency over {latency['runs']} runs (ms): p50 {latency['p50']:.3f}  p90 {latency['p90']:.3f}  "
        f"p99 {latency['p99']:.3f}  mean {latency['mean']:.3f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
