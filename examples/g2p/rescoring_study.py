"""How a trained SIGMORPHON ensemble should pick among its proposals: a study on dev.

    python -m examples.g2p.rescoring_study runs/g2p_sigmorphon [--languages arm_e bul ...]
        [--results results/g2p_sigmorphon_rescoring.json]

Reads the models a `train.py sigmorphon` run left in its directory (two or
more per language, both directions; nothing is trained), collects each
word's proposals (the n-best lists of both directions' ensembles, and of
every model alone), scores every proposal under every model (teacher-forced
log-probability, bidirectional.py), and then compares rules for picking the
winner on dev and on test: the default (mean log-probability over the
models), length normalisation, weights between the directions, a mixture
instead of a product of the models, and wider proposal sets. A rule is
chosen on the dev macro-average only; its test figures are reported beside
it, never used to choose.

Measured on the four-model ensembles of arm_e, bul and dut
(results/g2p_sigmorphon_rescoring.json): a right answer is among the
proposals for 98% of the words (oracle WER 1.8 dev, 1.8 test), yet the
ensemble misses 8.1% (dev) and 12.3% (test). No rule closes that: the best
on dev (1-best votes, then the mean) gains 0.2 of a point there and loses
0.1 on test; length normalisation and direction weights move dev by 0.1.
The models' scores, not the rule that reads them, are where the errors are.
"""

import argparse
import datetime
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

from examples.common import machine
from examples.g2p import data, train
from keras_attention.evaluation import error_rates
from keras_attention.g2p import model as g2p_model
from keras_attention.g2p.bidirectional import log_likelihoods, reads_right_to_left
from keras_attention.g2p.members import load_members
from keras_attention.g2p.pronounce import length_sorted_batches
from keras_attention.g2p.vocabularies import vocabularies
from keras_attention.text import n_best


def load_language(directory, split, size):
    """The language's models, rebuilt with their trained weights, and its vocabularies."""
    args = train.parse_args(["sigmorphon"])
    model_config, _ = train.configs(args, **train.settings_for(split["train"]))
    letters, phones = vocabularies(split["train"], "NFD", model_config.phone_symbols)
    return load_members(directory, size, letters, phones, model_config), letters, phones, model_config


def collect(members, backwards, letters, phones, model_config, words, batch_size=256):
    """Per word: its proposals, each with its sources and per-model log-likelihoods."""
    sources = {
        "ensemble_l2r": [m for m, b in zip(members, backwards) if not b],
        "ensemble_r2l": [m for m, b in zip(members, backwards) if b],
    }
    for number, member in enumerate(members):
        sources[f"member_{number}"] = [member]
    beams = {
        name: group[0].beam if len(group) == 1 else g2p_model.build_ensemble(group, phones, model_config, "beam")
        for name, group in sources.items()
    }
    backward_source = {name: backwards[members.index(group[0])] for name, group in sources.items()}
    found = [{} for _ in words]  # word index -> {tuple(tokens): set(sources)}
    for rows in length_sorted_batches(words, batch_size):
        batch = [words[i] for i in rows]
        encoded = letters.encode(batch)
        for name, beam in beams.items():
            output = {key: np.asarray(value) for key, value in beam.predict_on_batch(encoded).items()}
            for i, hypotheses in zip(rows, n_best(output, phones)):
                for rank, hypothesis in enumerate(hypotheses):
                    tokens = list(hypothesis["tokens"])
                    if backward_source[name]:
                        tokens.reverse()
                    found[i].setdefault(tuple(tokens), {})[name] = rank
    entries = []
    for rows in length_sorted_batches(words, batch_size):
        pairs = [(words[i], list(tokens)) for i in rows for tokens in found[i]]
        scores = np.zeros((len(pairs), len(members)))
        for number, (member, backward) in enumerate(zip(members, backwards)):
            read = [list(reversed(tokens)) if backward else tokens for _, tokens in pairs]
            scores[:, number] = log_likelihoods(member.trainer, [w for w, _ in pairs], read, letters, phones)
        start = 0
        for i in rows:
            options = []
            for tokens, ranks in found[i].items():
                options.append({"tokens": list(tokens), "ranks": ranks, "scores": scores[start].tolist()})
                start += 1
            entries.append((i, options))
    ordered = [None] * len(words)
    for i, options in entries:
        ordered[i] = options
    return ordered


def rules(backwards):
    """name -> (which proposals compete, score of each: f(scores (P, M), lengths (P,), ranks [dict]))."""
    forward = np.array([not b for b in backwards])
    ensembles = ("ensemble_l2r", "ensemble_r2l")
    singles = [f"member_{n}" for n in range(len(backwards))]
    table = {}

    def ensembles_only(ranks):
        return any(source in ranks for source in ensembles)

    def votes(ranks):
        return np.array([sum(r.get(source) == 0 for source in singles + list(ensembles)) for r in ranks], float)

    def total(s, n, r):
        return s.sum(1)

    table["default: mean log-prob"] = (ensembles_only, total)
    for alpha in (0.25, 0.5, 1.0):
        table[f"length-normalised, alpha {alpha}"] = (ensembles_only, lambda s, n, r, a=alpha: s.sum(1) / (n + 1) ** a)
    for weight in (0.3, 0.4, 0.6, 0.7):
        table[f"left-to-right weight {weight}"] = (
            ensembles_only,
            lambda s, n, r, w=weight: w * s[:, forward].sum(1) + (1 - w) * s[:, ~forward].sum(1),
        )
    table["mixture (log mean prob)"] = (ensembles_only, lambda s, n, r: np.logaddexp.reduce(s, axis=1))
    table["min over models"] = (ensembles_only, lambda s, n, r: s.min(1))
    table["every model's n-best too"] = (lambda r: True, total)
    for width in (1, 2, 3):
        table[f"top-{width} of each ensemble"] = (lambda r, k=width: any(r.get(s, 99) < k for s in ensembles), total)
    table["1-best votes, then mean log-prob"] = (lambda r: True, lambda s, n, r: 1e6 * votes(r) + s.sum(1))
    for beta in (0.5, 1.0, 2.0):
        table[f"mean log-prob + {beta} x 1-best votes"] = (
            lambda r: True,
            lambda s, n, r, b=beta: s.sum(1) + b * votes(r),
        )
    return table


def evaluate(collected, references, backwards):
    """WER of every rule, and the oracle (a right answer among the proposals)."""
    table = rules(backwards)
    results = {}
    for name, (keep, scorer) in table.items():
        predictions = []
        for options in collected:
            kept = [o for o in options if keep(o["ranks"])]
            if not kept:
                predictions.append([])
                continue
            scores = np.array([o["scores"] for o in kept])
            lengths = np.array([len(o["tokens"]) for o in kept], dtype=float)
            choice = scorer(scores, lengths, [o["ranks"] for o in kept])
            predictions.append(kept[int(np.argmax(choice))]["tokens"])
        results[name] = error_rates(predictions, references)["sequence_error_rate"]
    default_set = table["default: mean log-prob"][0]
    oracle = [
        any(o["tokens"] in refs for o in options if default_set(o["ranks"]))
        for options, refs in zip(collected, references)
    ]
    results["oracle (right answer proposed)"] = 100.0 * (1 - np.mean(oracle))
    return results


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", help="a train.py sigmorphon output directory (runs/g2p_sigmorphon)")
    parser.add_argument("--languages", nargs="+", default=list(data.MEDIUM_LANGUAGES))
    parser.add_argument("--results", help="write the study's JSON here")
    args = parser.parse_args(argv)
    study = {"languages": {}}
    for language in args.languages:
        directory = os.path.join(args.run, language)
        size = len([d for d in os.listdir(directory) if d.startswith("member_")])
        backwards = [reads_right_to_left(n, "both") for n in range(size)]
        split = data.sigmorphon_split(language)
        members = letters = phones = model_config = None
        entry = {}
        for side in ("dev", "test"):
            words = list(split[side])
            cache = os.path.join(directory, f"proposals_{side}.json")
            if os.path.exists(cache):
                with open(cache) as file:
                    collected = json.load(file)
            else:
                if members is None:
                    members, letters, phones, model_config = load_language(directory, split, size)
                collected = collect(members, backwards, letters, phones, model_config, words)
                with open(cache + ".tmp", "w") as file:
                    json.dump(collected, file)
                os.replace(cache + ".tmp", cache)
            entry[side] = evaluate(collected, [split[side][w] for w in words], backwards)
        study["languages"][language] = entry
        figures = {name: [round(entry["dev"][name], 1), round(entry["test"][name], 1)] for name in entry["dev"]}
        print(language, "(dev, test):", json.dumps(figures), flush=True)
        keras.backend.clear_session()
    names = list(next(iter(study["languages"].values()))["dev"])
    study["macro"] = {
        name: {side: float(np.mean([e[side][name] for e in study["languages"].values()])) for side in ("dev", "test")}
        for name in names
    }
    for name, figures in study["macro"].items():
        print(f"{name:40s} dev {figures['dev']:6.2f}  test {figures['test']:6.2f}")
    study.update(
        command=" ".join(["python -m examples.g2p.rescoring_study", *(sys.argv[1:] if argv is None else argv)]),
        date=datetime.date.today().isoformat(),
        machine=machine(),
    )
    if args.results:
        with open(args.results + ".tmp", "w") as file:
            json.dump(study, file, indent=1, sort_keys=True)
        os.replace(args.results + ".tmp", args.results)
    return study


if __name__ == "__main__":
    main()
