"""The G2P tool against Phonetisaurus by lexicon size: WER against training words.

    python -m examples.g2p.curve --lexicons dut hun cmudict --sizes 500 1000 2000 8000 \\
        --out runs/curve --results results/g2p_curve.json

Each point is one run of the tool (`keras-attention-g2p train`), as a user
with a lexicon of that size would run it: `size` words drawn at random
(seeded, all their pronunciations) from a lexicon's training split, written
as a TSV file, trained with `--compare-phonetisaurus` (Phonetisaurus trained
on the same words in the same run) and scored on the lexicon's whole test
split, within the time budget the tool is held to at that size
(`budget_minutes`). The points go to `--results` as they finish (a killed
curve resumes: a finished point is read back, an unfinished one resumes
through the tool), with the command and the machine; `python -m
examples.g2p.report` makes the results page's table from it.

A lexicon is a SIGMORPHON 2021 medium language (`dut`, ..., `medium` for
all ten) or `cmudict`.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from examples.common import machine
from examples.g2p import data
from keras_attention.g2p import lexicon
from keras_attention.g2p.train_command import write_json

SIZES = (500, 1000, 2000, 8000)
# The tool's budgets (issue: at most 10 minutes for 1,000 words, 60 for
# 10,000): between and beyond those two, the same power law of the size.
BUDGET_AT_1000, BUDGET_AT_10000 = 10.0, 60.0


def budget_minutes(train_words):
    """The training budget of a lexicon of `train_words` words: 10 minutes at
    1,000 words, 60 at 10,000, a power law between (about 5.8 at 500, 17 at 2,000, 50 at
    8,000); for larger lexicons 60."""
    exponent = math.log10(BUDGET_AT_10000 / BUDGET_AT_1000)
    return round(min(BUDGET_AT_10000, BUDGET_AT_1000 * (train_words / 1000) ** exponent), 1)


def split_of(name):
    """{"train", "test"} lexicons ({word: [pronunciation, ...]}) of a lexicon's name."""
    if name == "cmudict":
        split = data.cmudict_split()
    elif name in data.MEDIUM_LANGUAGES:
        split = data.sigmorphon_split(name)
    else:
        raise ValueError(
            f"--lexicons: expected cmudict, medium or one of {', '.join(data.MEDIUM_LANGUAGES)}; got {name!r}"
        )
    return {"train": split["train"], "test": split["test"]}


def write_tsv(path, entries):
    """`word<TAB>phones` lines, one per pronunciation (the tool's input format), written whole."""
    text = "".join(f"{word}\t{' '.join(phones)}\n" for word, options in entries.items() for phones in options)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.tmp", "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(f"{path}.tmp", path)


def train_point(train_file, test_file, model_dir, minutes, smoke):
    """Run the tool on one point, its output shown as it comes (its settings, its
    progress); its results.json, or None if it failed (said)."""
    command = [sys.executable, "-m", "keras_attention.g2p", "train", "--lexicon", str(train_file)]
    command += ["--test", str(test_file), "--out", str(model_dir), "--compare-phonetisaurus"]
    command += ["--smoke"] if smoke else ["--minutes", str(minutes)]
    completed = subprocess.run(command)
    if completed.returncode:
        print(f"the tool failed (exit {completed.returncode}) on {train_file}; rerun the curve to retry", flush=True)
        return None
    return json.loads((Path(model_dir) / "results.json").read_text())


def point(name, size, results, minutes, seconds):
    """One row of the curve from the tool's results.json."""
    peer = results.get("phonetisaurus") or {}
    return {
        "lexicon": name,
        "train_words": size,
        "budget_minutes": minutes,
        "ours": {
            "wer": results["test_wer"],
            "per": results["test_per"],
            "models": len(results["chosen_members"]),
            "trained_models": results["ensemble"],
            "train_seconds": results["train_wall_seconds"],
            "time_budget_warning": results.get("time_budget_warning"),
        },
        "phonetisaurus": {"wer": peer.get("wer"), "per": peer.get("per"), "train_seconds": peer.get("train_seconds")},
        "test_words": results["test_words"],
        "wall_seconds": round(seconds, 1),
    }


def run(names, sizes, out, results_path, seed=0, smoke=False, train=train_point):
    """Every (lexicon, size) point not yet in `results_path`, in order; returns the document."""
    path = Path(results_path)
    document = json.loads(path.read_text()) if path.is_file() else {"points": []}
    document.update(command=" ".join(["python -m examples.g2p.curve", *sys.argv[1:]]), machine=machine(), seed=seed)
    done = {(p["lexicon"], p["train_words"]) for p in document["points"]}
    for name in names:
        split = split_of(name)
        for size in sizes:
            if (name, size) in done:
                continue
            if size > len(split["train"]):
                raise ValueError(f"--sizes: {name} has {len(split['train'])} training words; got {size}")
            directory = Path(out) / f"{name}_{size}"
            write_tsv(directory / "train.tsv", lexicon.sample(split["train"], size, seed=seed))
            write_tsv(directory / "test.tsv", split["test"])
            minutes = budget_minutes(size)
            print(f"== {name}, {size} training words, budget {minutes} minutes", flush=True)
            begin = time.perf_counter()
            results = train(directory / "train.tsv", directory / "test.tsv", directory / "model", minutes, smoke)
            if results is None:
                continue  # said; the next run of the curve retries it
            row = point(name, size, results, minutes, time.perf_counter() - begin)
            document["points"] = sorted([*document["points"], row], key=lambda p: (p["lexicon"], p["train_words"]))
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json(path, document)
            print(
                f"{name} {size}: ours {row['ours']['wer']:.2f}% WER, Phonetisaurus {row['phonetisaurus']['wer']:.2f}%",
                flush=True,
            )
    return document


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lexicons", nargs="+", default=["dut"], help="cmudict, medium, or SIGMORPHON languages")
    parser.add_argument("--sizes", nargs="+", type=int, default=list(SIZES), help="training words per point")
    parser.add_argument("--seed", type=int, default=0, help="seed of the words drawn")
    parser.add_argument("--out", default="runs/curve", help="where each point's files and model go")
    parser.add_argument("--results", default="results/g2p_curve.json", help="the curve's results file")
    parser.add_argument("--smoke", action="store_true", help="the tool's smoke settings (seconds; for tests)")
    args = parser.parse_args(argv)
    names = []
    for name in args.lexicons:
        names += list(data.MEDIUM_LANGUAGES) if name == "medium" else [name]
    if any(size < 1 for size in args.sizes):
        parser.error(f"--sizes: expected positive numbers of words; got {args.sizes}")
    try:
        run(names, args.sizes, args.out, args.results, args.seed, args.smoke)
    except ValueError as error:
        parser.error(str(error))
    return 0


if __name__ == "__main__":
    sys.exit(main())
