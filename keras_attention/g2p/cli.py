"""The `keras-attention-g2p` command (also `python -m keras_attention.g2p`): train, apply, evaluate.

    keras-attention-g2p train --lexicon FILE [--dev FILE] [--test FILE] --out DIR [--minutes M]
                              [--compare-phonetisaurus] [--architecture lstm|transformer]
                              [--layers N] [--heads N] [--model-dim D] [--ff-dim F] [--dropout P]
                              [--warmup-steps N] [--distribute none|data]
    keras-attention-g2p apply --model DIR (WORDS... | --words FILE) [--nbest N] [--beam K]
    keras-attention-g2p evaluate --model DIR --test FILE

Lexicons are TSV (`word<TAB>phones`) or CMUdict files (lexicon.py). Every
failure is one `error: ...` line on stderr and exit status 2 (a malformed
lexicon line as `error: FILE:LINE: ...`), never a traceback. `apply` prints
`word<TAB>score<TAB>phones`, `--nbest N` lines a word, best first (the score
is the search's log-probability); a word with a letter the model never saw
is not pronounced but named on stderr. `--architecture transformer` trains
Transformer models (transformer_model.py) sized by the rule for the lexicon
(settings.py); the size knobs override the rule's choice. With `--minutes` the
budget is fitted at this machine's speed, measured first (calibration.py). `--distribute data`
trains under `tf.distribute.MirroredStrategy` (distribute.py; `model` and
`multiworker` are refused in one line).
"""

import argparse
import json
import os
import sys
from pathlib import Path

from keras_attention.g2p import distribute
from keras_attention.g2p import lexicon as lexicons
from keras_attention.g2p import settings as rule

PROG = "keras-attention-g2p"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _positive(kind):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"expected a positive {kind.__name__}, got {text!r}")
        return value

    return parse


def _fraction(text):
    try:
        value = float(text)
    except ValueError:
        value = None
    if value is None or not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return value


# The size knobs: flag -> (ModelConfig or TrainConfig field, section of the settings, type, help).
KNOBS = {
    "--layers": ("layers", "model", _positive(int), "Transformer: encoder layers, and as many decoder layers"),
    "--heads": ("heads", "model", _positive(int), "Transformer: attention heads (must divide --model-dim)"),
    "--model-dim": ("model_dim", "model", _positive(int), "Transformer: model size d (embeddings, every layer)"),
    "--ff-dim": ("ff_dim", "model", _positive(int), "Transformer: the feed-forward layers' hidden size"),
    "--dropout": ("dropout", "model", _fraction, "dropout rate, in [0, 1) (both architectures)"),
    "--warmup-steps": ("warmup_steps", "training", _positive(int), "updates of learning-rate warm-up"),
    "--epochs": ("epochs", "training", _positive(int), "most epochs of training (early stopping may end it sooner)"),
}
TRANSFORMER_ONLY = ("--layers", "--heads", "--model-dim", "--ff-dim")


def parser():
    main = _Parser(prog=PROG, description="Grapheme-to-phoneme models from a pronunciation lexicon.")
    commands = main.add_subparsers(dest="command", required=True, parser_class=_Parser)
    train = commands.add_parser("train", help="train, export to ONNX and score a pronouncer")
    train.add_argument("--lexicon", required=True, help="training lexicon (TSV or CMUdict format)")
    train.add_argument("--dev", help="dev lexicon (default: words held out of --lexicon, seeded)")
    train.add_argument("--test", help="test lexicon, scored at the end")
    train.add_argument("--out", required=True, help="the model directory (rerun the command to resume it)")
    train.add_argument("--minutes", type=_positive(float), help="time budget for training (default: none)")
    train.add_argument("--beam", type=_positive(int), default=5, help="beam width of the exported search")
    train.add_argument("--seed", type=int, default=0, help="seed of the dev split and the models")
    train.add_argument(
        "--compare-phonetisaurus", action="store_true", help="also train and score Phonetisaurus (needs --test)"
    )
    train.add_argument("--smoke", action="store_true", help="tiny settings, seconds of training (for tests)")
    train.add_argument("--distribute", default="none", help=f"{distribute.HELP}; here multiworker is refused too")
    train.add_argument(
        "--architecture",
        choices=rule.ARCHITECTURES,
        default="lstm",
        help="the models: 'lstm' (BiLSTM encoder, attention LSTM decoder; the default) or 'transformer' "
        "(pre-norm Transformer encoder-decoder)",
    )
    knobs = train.add_argument_group("size knobs", "override the settings chosen for the lexicon's size")
    for flag, (field, _, kind, text) in KNOBS.items():
        knobs.add_argument(flag, dest=field, type=kind, help=f"{text} (default: chosen for the lexicon)")
    apply = commands.add_parser("apply", help="pronounce words: word<TAB>score<TAB>phones lines")
    apply.add_argument("--model", required=True, help="a model directory written by train")
    apply.add_argument("words", nargs="*", help="words to pronounce")
    apply.add_argument("--words", dest="words_file", help="a file of words, one a line")
    apply.add_argument("--nbest", type=_positive(int), default=1, help="pronunciations a word, best first")
    apply.add_argument("--beam", type=_positive(int), help="1 (greedy) or the trained beam width (the default)")
    evaluate = commands.add_parser("evaluate", help="WER and PER against a lexicon (right if any reference matches)")
    evaluate.add_argument("--model", required=True, help="a model directory written by train")
    evaluate.add_argument("--test", required=True, help="the lexicon to score against")
    return main


def _read(path):
    """A lexicon file's entries; skipped entries reported on stderr."""
    found = lexicons.read_lexicon(path)
    if found.skipped:
        print(f"{path}: {found.skipped_summary()}", file=sys.stderr)
    return found.entries


def _model_settings(directory):
    path = Path(directory) / "settings.json"
    if not path.is_file() or not (Path(directory) / "export" / "pronounce.onnx").is_file():
        raise ValueError(f"--model: {str(directory)!r} is not a finished model directory (no settings.json or export/)")
    return json.loads(path.read_text())


def run_train(args):
    import keras

    from keras_attention.g2p import train_command

    refused = distribute.refusal(args.distribute, keras.backend.backend())
    if refused:
        raise ValueError(refused)
    if args.compare_phonetisaurus and not args.test:
        raise ValueError("--compare-phonetisaurus: expected --test FILE to compare on; got none")
    train = _read(args.lexicon)
    if args.dev:
        dev = _read(args.dev)
    else:
        train, dev = lexicons.carve_dev(train, seed=args.seed)
        print(f"dev: {len(dev)} words held out of {args.lexicon} (seed {args.seed})", file=sys.stderr)
    split = {"train": train, "dev": dev, "test": _read(args.test) if args.test else {}}
    if args.smoke:
        chosen = rule.smoke(args.architecture)
    else:
        chosen = rule.choose(len(train), lexicons.alphabet(train), args.minutes, architecture=args.architecture)
    _override(chosen, args, len(train))
    chosen["training"]["seed"] = args.seed
    if args.minutes and not args.smoke and args.distribute == "none":
        chosen = _calibrated(chosen, args, train)
    record = train_command.settings_record(chosen, split, args.beam)
    train_command.check_resumable(args.out, record)
    os.makedirs(args.out, exist_ok=True)
    train_command.write_json(Path(args.out) / "settings.json", record)
    print(f"{len(train)} training words, {len(lexicons.alphabet(train))} letters", flush=True)
    print(train_command.describe(record), flush=True)
    # Set up before TensorFlow touches a device (`data` may split the CPU in two).
    strategy = distribute.strategy(args.distribute)
    print(distribute.describe(args.distribute, strategy), flush=True)
    train_command.train(split, record, args.out, args.compare_phonetisaurus, strategy)


def _calibrated(chosen, args, train):
    """`chosen` refitted to the budget at this machine's measured speed
    (calibration.py). The calibration's time comes out of the budget; a
    resumed run reuses the speed its settings.json recorded, so that it
    chooses what it chose before."""
    from keras_attention.g2p import calibration

    path = Path(args.out) / "settings.json"
    measured = json.loads(path.read_text()).get("measured") if path.is_file() else None
    cores = os.cpu_count() or 1
    if measured is None:
        jobs = min(chosen["ensemble"], cores)
        print(
            f"measuring this machine's training speed: {jobs} model(s) side by side, "
            f"{calibration.WARMUP_UPDATES + calibration.TIMED_UPDATES} updates each ...",
            flush=True,
        )
        measured = calibration.measure(train, {**chosen, "beam_width": args.beam}, jobs, cores)
    minutes = max(args.minutes - measured["wall_seconds"] / 60, args.minutes / 2)
    refitted = rule.choose(
        len(train), lexicons.alphabet(train), minutes, cores, architecture=args.architecture, measured=measured
    )
    _override(refitted, args, len(train), cores)
    refitted["training"]["seed"] = args.seed
    print(
        f"this machine: {measured['seconds_per_update']:.3f} s an update, {measured['model_seconds']:.0f} s a "
        f"model before its first (measured in {measured['wall_seconds']:.0f} s of the budget)",
        flush=True,
    )
    return refitted


def _override(chosen, args, train_words, cores=2):
    """Apply the size knobs given on the command line to `chosen` (ValueError for a knob that does not
    fit); the estimate is made again for `cores` cores."""
    given = {flag: getattr(args, field) for flag, (field, *_) in KNOBS.items() if getattr(args, field) is not None}
    for flag in TRANSFORMER_ONLY:
        if flag in given and args.architecture != "transformer":
            raise ValueError(
                f"{flag}: a Transformer size knob; expected --architecture transformer with it; "
                f"got --architecture {args.architecture}"
            )
    for flag, value in given.items():
        field, section = KNOBS[flag][:2]
        chosen[section][field] = value
    model = chosen["model"]
    if args.architecture == "transformer" and model["model_dim"] % model["heads"]:
        raise ValueError(
            f"--heads: expected a number of heads that divides the model size {model['model_dim']} "
            f"(--model-dim) into equal heads; got {model['heads']}"
        )
    if given and "estimated_minutes" in chosen:
        chosen["estimated_minutes"] = round(rule.estimate_seconds(train_words, chosen, cores) / 60, 1)


def _words(args):
    words = list(args.words)
    if args.words_file:
        try:
            text = Path(args.words_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise ValueError(f"--words: cannot read {args.words_file!r} as UTF-8 text ({error})") from None
        words += [line.split("\t")[0].strip() for line in text.splitlines() if line.strip()]
    if not words:
        raise ValueError("apply: expected words to pronounce (WORDS... or --words FILE); got none")
    return words


def _pronouncer(directory):
    from keras_attention.g2p.pronouncer import OnnxPronouncer

    settings = _model_settings(directory)
    return OnnxPronouncer(Path(directory) / "export", settings["beam_width"])


def _report_unknown(pronouncer, words):
    unknown = {word: pronouncer.unknown_letters(word) for word in dict.fromkeys(words)}
    unknown = {word: letters for word, letters in unknown.items() if letters}
    if unknown:
        shown = "; ".join(f"{word!r} ({' '.join(letters)})" for word, letters in list(unknown.items())[:5])
        more = f"; and {len(unknown) - 5} more" if len(unknown) > 5 else ""
        print(f"skipped {len(unknown)} word(s) with letters the model never saw: {shown}{more}", file=sys.stderr)
    return unknown


def run_apply(args):
    words = _words(args)
    pronouncer = _pronouncer(args.model)
    width = pronouncer.beam_width
    beam = width if args.beam is None else args.beam
    if beam not in (1, width):
        raise ValueError(f"--beam: this model's pronouncer searches with 1 (greedy) or {width} beams; got {beam}")
    if args.nbest > beam:
        raise ValueError(f"--nbest: expected at most the beam width, {beam}; got {args.nbest}")
    _report_unknown(pronouncer, words)
    found = pronouncer.pronounce(words, nbest=args.nbest, method="greedy" if beam == 1 else "beam")
    lines = []
    for word in words:
        for score, phones in found.get(word, []):
            lines.append(f"{word}\t{score:.4f}\t{' '.join(phones)}")
    if lines:
        print("\n".join(lines))


def run_evaluate(args):
    from keras_attention.g2p.train_command import best_pronunciations, rates

    test = _read(args.test)
    pronouncer = _pronouncer(args.model)
    unknown = _report_unknown(pronouncer, list(test))
    measured = rates(best_pronunciations(pronouncer, list(test)), test)
    print(
        f"WER {measured['wer']:.2f}% PER {measured['per']:.2f}% on {measured['words']} words"
        + (f" ({len(unknown)} not pronounced: unknown letters, counted wrong)" if unknown else "")
    )


def main(argv=None):
    args = parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        {"train": run_train, "apply": run_apply, "evaluate": run_evaluate}[args.command](args)
    except (ValueError, OSError) as error:
        print(f"error: {' '.join(str(error).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted (rerun the same command to resume)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
