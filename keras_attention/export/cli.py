"""The `keras-attention-export` command: `main`, and `error_line`, the
one-line form every command prints its failures in."""

import argparse
import json
import sys
from pathlib import Path

from keras_attention.export.exporter import export_model
from keras_attention.export.formats import FORMATS, registered_formats
from keras_attention.export.layout import (
    DEFAULT_OPSET,
    DEFAULT_SIGNATURE,
    MAX_OPSET,
    MIN_OPSET,
    QUANTIZATIONS,
    REPORT_FILE,
)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one `error: ...` line like every other failure."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def error_line(error):
    """A command-line failure as the one line the commands print: `error: ...`.

    Messages of our own errors (ValueError, OSError) are written for users;
    anything else is named by its type, still on one line, never a traceback.
    """
    text = " ".join(str(error).split()) or type(error).__name__
    if not isinstance(error, (ValueError, OSError)):
        text = f"{type(error).__name__}: {text}"
    return f"error: {text}"


def _parse_signature(text):
    name, separator, path = text.partition("=")
    if not separator or not name or not path:
        raise argparse.ArgumentTypeError(f"expected NAME=MODEL.keras, got {text!r}")
    return name, path


def main(argv=None):
    """`keras-attention-export MODEL.keras OUT_DIR [--formats ...] [--opset N] [--force]`."""
    parser = _Parser(
        prog="keras-attention-export",
        description="Export a .keras model to SavedModel and ONNX, check parity with Keras, print and save the report.",
    )
    parser.add_argument("model", help="the .keras file: the serving_default signature")
    parser.add_argument("out_dir", help="the export directory to create")
    # Any registered format, installed plugins' included (their entry points are read here); the built-in
    # ones by default.
    parser.add_argument("--formats", nargs="+", choices=registered_formats(), default=list(FORMATS))
    parser.add_argument("--opset", type=int, default=DEFAULT_OPSET, help=f"ONNX opset, {MIN_OPSET}-{MAX_OPSET}")
    parser.add_argument("--force", action="store_true", help="replace an existing export directory")
    parser.add_argument(
        "--signature",
        action="append",
        type=_parse_signature,
        default=[],
        metavar="NAME=MODEL.keras",
        help="another model exported as signature NAME (e.g. translate=decoder.keras); repeatable",
    )
    parser.add_argument("--vocabulary", help="a vocabulary JSON file to ship as vocabulary.json")
    parser.add_argument("--sample-inputs", help="JSON file: a list of {input name: nested list} batches to verify on")
    parser.add_argument("--no-verify", action="store_true", help="skip the parity check (checker and load still run)")
    parser.add_argument("--atol", type=float, default=1e-4)
    parser.add_argument(
        "--quantize",
        choices=QUANTIZATIONS,
        help="also write each ONNX and LiteRT file with int8 weights (NAME.int8.onnx, NAME.int8.tflite); "
        "their sizes and distances from Keras are reported",
    )
    parser.add_argument("--report", help=f"also write the JSON report here (always written to OUT_DIR/{REPORT_FILE})")
    args = parser.parse_args(argv)

    model = args.model
    if args.signature:
        model = {DEFAULT_SIGNATURE: args.model, **dict(args.signature)}
    try:
        sample_inputs = None
        if args.sample_inputs:
            sample_path = Path(args.sample_inputs)
            if not sample_path.is_file():
                raise FileNotFoundError(f"--sample-inputs: no such file {str(sample_path)!r}.")
            sample_inputs = json.loads(sample_path.read_text(encoding="utf-8"))
        report = export_model(
            model,
            args.out_dir,
            formats=args.formats,
            opset=args.opset,
            overwrite=args.force,
            verify=not args.no_verify,
            sample_inputs=sample_inputs,
            vocabulary=args.vocabulary,
            atol=args.atol,
            quantize=args.quantize,
        )
        if args.report:
            report.to_json(args.report)
    # Every failure, ours or not (an OS error, a TensorFlow runtime error),
    # is one line on stderr and exit status 1: a command prints no traceback.
    except Exception as error:
        partial = getattr(error, "report", None)
        if partial is not None and args.report:
            try:
                partial.to_json(args.report)
            except OSError:
                pass  # the error being reported matters more than its report
        print(error_line(error), file=sys.stderr)
        return 1
    print(report.table())
    print(f"\nwrote {report.directory} (report: {report.paths['report']}) in {report.timings_s['total']:.1f} s")
    for note in report.notes:
        print(f"note: {note}")
    return 0
