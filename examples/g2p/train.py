"""Grapheme-to-phoneme conversion on real data: CMUdict and SIGMORPHON 2021 task 1.

    python -m examples.g2p.train cmudict [--epochs N] [--out DIR] [--no-peer] [--smoke]
                                 [--architecture transformer [--layers N --heads N --model-dim D --ff-dim F]]
    python -m examples.g2p.train sigmorphon [--languages arm_e bul ...|medium|eng_us] [--train-words N] [--out DIR] [--smoke]

A character-level BiLSTM encoder and an attention LSTM decoder (see
`model.py`; or with `--architecture transformer` a pre-norm Transformer
encoder-decoder, `transformer_model.py`, sized for the lexicon by the same
rule, settings.py), trained with teacher forcing on length-bucketed batches, selected
on dev by greedy WER (then PER), and evaluated on test with greedy and beam search.
A SIGMORPHON run scores on dev every way its models can pronounce (the
ensemble's rescoring, beam and greedy search, each model alone) and keeps
the best (choice.py): printed, and recorded as `system` in the results. For
CMUdict the trained model is exported to SavedModel and ONNX with a
`pronounce` signature (letters in, phones out, beam search inside), served
through onnxruntime on the whole test list, and compared, in the same run,
with Phonetisaurus trained on the same split (`--no-peer` skips it).

Outputs in --out: the models (`.keras`), `results.json`, `history.json`
(dev WER per epoch), alignment heat-maps, `export/` (CMUdict), and
`backup/` from which a killed run resumes. `--results FILE` also writes the
results where the README table is generated from (`results/*.json`).
"""

import argparse
import dataclasses
import datetime
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np

import keras_attention as ka
from examples.common import machine
from examples.g2p import choice, data
from keras_attention.g2p import lexicon, settings, training
from keras_attention.g2p import model as g2p_model
from keras_attention.g2p.bidirectional import DIRECTIONS, BidirectionalPronouncer, reads_right_to_left, reversed_split
from keras_attention.g2p.members import member_directory, train_member, train_members
from keras_attention.g2p.model import together
from keras_attention.g2p.pronounce import score
from keras_attention.g2p.vocabularies import vocabularies

SMOKE_WORDS = 50
# The settings of a lexicon are keras_attention.g2p.settings's rule at its
# size (`settings_for`): CMUdict's 109,156 training words get two models
# without input feeding, a 2x192 BiLSTM encoder and a 384-unit decoder each,
# trained side by side within 30 minutes on 2 cores, pronouncing together;
# a SIGMORPHON medium language's 8,000 words four models (two reading the
# pronunciations right to left, --directions both: the task's baseline is an
# ensemble too), 2x128 and 256, dropout 0.3, batches of 64, 22 epochs, NFD
# letters; eng_us's 33,344 words two models, batches of 128, 12 epochs.
# tests/test_g2p_tool.py pins the rule's values at these sizes.
CMUDICT_ENSEMBLE = 2
SIGMORPHON_ENSEMBLE = {"medium": 4, "high": 2}


# The fields settings.choose sets (the command line overrides them).
RULE_CHOOSES = ("dropout", "warmup_steps", *g2p_model.TRANSFORMER_FIELDS)


def settings_for(train_lexicon, architecture="lstm"):
    """The rule's settings for a training lexicon, as one flat dict of
    ModelConfig and TrainConfig fields, `ensemble` and `normalization`."""
    chosen = settings.choose(len(train_lexicon), lexicon.alphabet(train_lexicon), architecture=architecture)
    return {
        **chosen["model"],
        **chosen["training"],
        "ensemble": chosen["ensemble"],
        "normalization": chosen["normalization"],
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset", choices=("cmudict", "sigmorphon"))
    parser.add_argument(
        "--languages", nargs="+", default=["medium"], help="SIGMORPHON languages, 'medium' (the ten) or 'eng_us'"
    )
    parser.add_argument("--out", help="output directory (default runs/g2p_<dataset>)")
    parser.add_argument("--results", help="also write the results JSON here (e.g. results/g2p_cmudict.json)")
    parser.add_argument(
        "--smoke", action="store_true", help=f"a seconds-long run on {SMOKE_WORDS} words (used by the tests)"
    )
    parser.add_argument(
        "--train-words",
        type=int,
        help="SIGMORPHON: train on this many words drawn at random from the training split (a small lexicon; "
        "dev and test unchanged)",
    )
    parser.add_argument("--no-peer", action="store_true", help="CMUdict: skip the Phonetisaurus comparison")
    parser.add_argument("--no-export", action="store_true", help="CMUdict: skip the SavedModel/ONNX export")
    parser.add_argument(
        "--ensemble",
        type=int,
        default=None,
        help="train this many models (seeds seed, seed + 1, ...) and pronounce with all of them "
        "(EnsembleDecoder: their phone probabilities averaged at every step); default "
        f"{CMUDICT_ENSEMBLE} for CMUdict, {SIGMORPHON_ENSEMBLE['medium']} for a SIGMORPHON medium language, "
        f"{SIGMORPHON_ENSEMBLE['high']} for eng_us, 1 with --smoke",
    )
    parser.add_argument(
        "--directions",
        choices=DIRECTIONS,
        help="SIGMORPHON: 'both' trains every other model of the ensemble on reversed pronunciations and "
        "pronounces by n-best rescoring with all of them (bidirectional.py); default both for SIGMORPHON "
        "ensembles, left-to-right otherwise (CMUdict's pronouncer is one exported graph)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=os.cpu_count() or 1,
        help="models of an ensemble trained side by side, each in its own process with cores / jobs threads "
        "(default: the number of cores)",
    )
    parser.add_argument(
        "--normalization",
        choices=("NFC", "NFD", "NFKC", "NFKD", "none"),
        help="Unicode normal form of the letters (default: none for CMUdict, NFD for SIGMORPHON)",
    )
    for field in dataclasses.fields(training.TrainConfig) + dataclasses.fields(g2p_model.ModelConfig):
        kind = field.type if isinstance(field.type, type) else type(field.default)
        flag = "--" + field.name.replace("_", "-")
        meaning = g2p_model.HELP.get(field.name, "") + (" " if field.name in g2p_model.HELP else "")
        if field.name == "architecture":
            parser.add_argument(flag, choices=g2p_model.ARCHITECTURES, default="lstm", help=f"{meaning}(default lstm)")
        elif kind is bool:
            parser.add_argument(flag, action="store_true", help=f"{meaning}(default {field.default})")
        elif field.name in g2p_model.CHOICES:
            parser.add_argument(flag, choices=g2p_model.CHOICES[field.name], help=f"{meaning}(default {field.default})")
        elif field.name in RULE_CHOOSES:
            parser.add_argument(flag, type=kind, help=f"{meaning}(default: chosen for the lexicon's size)")
        else:
            parser.add_argument(flag, type=kind, help=f"{meaning}(default {field.default})")
    args = parser.parse_args(argv)
    transformer_knobs = [name for name in g2p_model.TRANSFORMER_FIELDS if getattr(args, name) is not None]
    if transformer_knobs and args.architecture != "transformer":
        parser.error(
            f"argument --{transformer_knobs[0].replace('_', '-')}: a Transformer size knob; expected "
            f"--architecture transformer with it; got --architecture {args.architecture}"
        )
    if args.ensemble is not None and args.ensemble < 1:
        parser.error(f"argument --ensemble: expected an integer >= 1, got {args.ensemble}")
    if args.train_words is not None and args.train_words < 1:
        parser.error(f"argument --train-words: expected an integer >= 1, got {args.train_words}")
    if args.jobs < 1:
        parser.error(f"argument --jobs: expected an integer >= 1, got {args.jobs}")
    if args.ensemble is None and (args.smoke or args.dataset == "cmudict"):
        args.ensemble = 1 if args.smoke else CMUDICT_ENSEMBLE
    # Otherwise (SIGMORPHON) None: each language's subtask sets its size.
    if args.directions is None:
        several = args.ensemble is None or args.ensemble > 1
        args.directions = "both" if args.dataset == "sigmorphon" and several else "left-to-right"
    if args.directions == "both" and args.dataset != "sigmorphon":
        parser.error(
            "argument --directions: 'both' is for SIGMORPHON (CMUdict's pronouncer is exported as one graph); "
            "got both with cmudict"
        )
    if args.directions == "both" and args.ensemble is not None and args.ensemble < 2:
        parser.error(f"argument --directions: 'both' needs --ensemble 2 or more; got --ensemble {args.ensemble}")
    if args.out is None:
        args.out = f"runs/g2p_{args.dataset}" + ("_smoke" if args.smoke else "")
    return args


def configs(args, **defaults):
    """The model and training settings: dataclass defaults < `defaults` < the command line."""
    built = []
    for cls in (g2p_model.ModelConfig, training.TrainConfig):
        values = {f.name: defaults[f.name] for f in dataclasses.fields(cls) if f.name in defaults}
        values.update(
            {
                f.name: getattr(args, f.name)
                for f in dataclasses.fields(cls)
                if getattr(args, f.name) not in (None, False)
            }
        )
        built.append(cls(**values))
    return built


def smoke_settings(architecture="lstm"):
    chosen = settings.smoke(architecture)
    return {**chosen["model"], **chosen["training"]}


def plot_alignments(greedy, words, letters, phones, out, count=4):
    """Heat-maps of the letters each phone attended to."""
    paths = []
    output = greedy.predict_on_batch(letters.encode(words[:count]))
    for i, word in enumerate(words[:count]):
        length = int(np.asarray(output["lengths"])[i])
        produced = phones.decode(np.asarray(output["ids"])[i])
        symbols = letters.tokenize(word)
        weights = np.asarray(output["alignments"])[i, : length - 1, : len(symbols)]
        path = os.path.join(out, f"alignment_{word}.png")
        ka.plot_attention(weights, symbols, produced, path=path, title=f"{word} -> {' '.join(produced)}")
        paths.append(path)
    return paths


def train_language(name, split, args, out, choose_on_dev=False, **defaults):
    """Train `--ensemble` models of one lexicon (seeds seed, seed + 1, ...)
    and evaluate them together (one model: alone), or with `choose_on_dev`
    every way they can pronounce, keeping the best on dev (choice.py);
    returns (results dict, (trainer, greedy, beam, letters, phones)), the
    trainer the first model's and greedy, beam the left-to-right models'."""
    model_config, train_config = configs(args, **defaults)
    normalization = args.normalization or defaults.get("normalization")
    letters, phones = vocabularies(
        split["train"], None if normalization == "none" else normalization, model_config.phone_symbols
    )
    size = args.ensemble if args.ensemble is not None else defaults["ensemble"]
    jobs = min(size, args.jobs)
    directions = args.directions
    if jobs > 1:
        members, member_results, wall = train_members(
            size, split, letters, phones, model_config, train_config, out, jobs, name, directions
        )
    else:
        members, member_results = [], []
        for number in range(size):
            member_out = out if size == 1 else member_directory(out, number)
            models, member = train_member(
                number,
                split,
                letters,
                phones,
                model_config,
                train_config,
                member_out,
                right_to_left=reads_right_to_left(number, directions),
            )
            members.append(models)
            member_results.append(member)
    backwards = [reads_right_to_left(number, directions) for number in range(size)]
    forward = [models for models, back in zip(members, backwards) if not back]
    backward = [models for models, back in zip(members, backwards) if back]
    greedy, beam = together(forward, phones, model_config)
    pronouncer = None
    if backward:
        pronouncer = BidirectionalPronouncer(
            {"left-to-right": beam, "right-to-left": together(backward, phones, model_config)[1]},
            [models.trainer for models in members],
            backwards,
            letters,
            phones,
        )
    first = member_results[0]
    results = {
        "train_words": len(split["train"]),
        "dev_words": len(split["dev"]),
        "test_words": len(split["test"]),
        "parameters": sum(models.trainer.count_params() for models in members),
        "ensemble": size,
        "directions": directions,
        # One model's: the first (the curve is read from its history).
        "epochs": first["epochs"],
        "best_epoch": first["best_epoch"],
        "history": first["history"],
        # All of the training, every model of the ensemble included: their
        # sum, or with models training side by side the wall time from the
        # first start to the last end (their processes' start-up and
        # evaluations included).
        "train_seconds": round(wall if jobs > 1 else sum(member["train_seconds"] for member in member_results), 1),
        "jobs": jobs,
        "model": dataclasses.asdict(model_config),
        "training": dataclasses.asdict(train_config),
        "normalization": letters.normalization,
    }
    if size > 1:
        results["members"] = member_results
    if choose_on_dev:
        what = evaluate_systems(results, members, backwards, greedy, beam, pronouncer, split, letters, phones)
    else:
        what = evaluate_ensemble(results, members, backwards, greedy, beam, split, letters, phones, model_config)
    print(
        f"{name}: test WER {results['wer']:.2f}% PER {results['per']:.2f}% ({what}); "
        f"greedy {results['wer_greedy']:.2f}% / {results['per_greedy']:.2f}%; dev WER {results['dev_wer']:.2f}%; "
        f"{size} x {results['epochs']} epochs, {results['train_seconds']:.0f} s",
        flush=True,
    )
    for model, kind in ((greedy, "greedy"), (beam, "beam")):
        model.save(os.path.join(out, f"g2p_{kind}.keras"))
    return results, (members[0].trainer, greedy, beam, letters, phones)


def evaluate_ensemble(results, members, backwards, greedy, beam, split, letters, phones, model_config):
    """Test the ensemble's beam (and greedy) search, and each model alone,
    into `results`; returns what was scored, for the summary line."""
    size = len(members)
    if size > 1:
        for number, (models, member) in enumerate(zip(members, results["members"])):
            # A right-to-left model is scored on the reversed pronunciations it learnt.
            own = reversed_split(split) if backwards[number] else split
            member_dev, _ = score(models.greedy, own["dev"], letters, phones)
            member_test, _ = score(models.beam, own["test"], letters, phones)
            member.update(dev_wer=member_dev["wer"], test_wer=member_test["wer"], test_per=member_test["per"])
            print(f"member {number}: dev WER {member_dev['wer']:.2f}%, test WER {member_test['wer']:.2f}%")
    dev_rates, _ = score(greedy, split["dev"], letters, phones)
    results["dev_wer"], results["dev_per"] = dev_rates["wer"], dev_rates["per"]
    begin = time.perf_counter()
    greedy_rates, _ = score(greedy, split["test"], letters, phones)
    results["greedy_words_per_second"] = round(len(split["test"]) / (time.perf_counter() - begin), 1)
    begin = time.perf_counter()
    beam_rates, _ = score(beam, split["test"], letters, phones)
    results["keras_beam_words_per_second"] = round(len(split["test"]) / (time.perf_counter() - begin), 1)
    results.update(
        wer=beam_rates["wer"], per=beam_rates["per"], wer_greedy=greedy_rates["wer"], per_greedy=greedy_rates["per"]
    )
    return f"beam {model_config.beam_width}" + (f", ensemble of {size}" if size > 1 else "")


def evaluate_systems(results, members, backwards, greedy, beam, pronouncer, split, letters, phones):
    """Score every way the models can pronounce on dev and test, and keep
    the best on dev as the system's (choice.py): its dev and test figures
    become the results', every system's are in `results["systems"]` and the
    name of the one chosen in `results["system"]`. Returns the summary."""
    ensembles = {"greedy": greedy, "beam": beam} if len(backwards) - sum(backwards) > 1 else None
    candidates = choice.systems(members, backwards, ensembles, pronouncer, letters, phones)
    chosen, table = choice.choose(candidates, split["dev"], split["test"])
    for name, entry in table.items():
        print(
            f"  {name}: dev WER {entry['dev_wer']:.2f}% PER {entry['dev_per']:.2f}%; "
            f"test WER {entry['test_wer']:.2f}% PER {entry['test_per']:.2f}%"
            + ("  <- chosen on dev" if name == chosen else ""),
            flush=True,
        )
    for number, member in enumerate(results.get("members", [])):
        # Each model's own figures, in the order it reads (a right-to-left
        # model's turned back, so every row is scored the same way).
        alone = table[f"model {number} alone, beam"]
        member.update(
            dev_wer=table[f"model {number} alone, greedy"]["dev_wer"],
            test_wer=alone["test_wer"],
            test_per=alone["test_per"],
        )
    left_to_right = "left-to-right ensemble, " if ensembles is not None else "model 0 alone, "
    results.update(
        system=chosen,
        systems=table,
        dev_wer=table[chosen]["dev_wer"],
        dev_per=table[chosen]["dev_per"],
        wer=table[chosen]["test_wer"],
        per=table[chosen]["test_per"],
        dev_wer_greedy=table[left_to_right + "greedy"]["dev_wer"],
        wer_greedy=table[left_to_right + "greedy"]["test_wer"],
        per_greedy=table[left_to_right + "greedy"]["test_per"],
        left_to_right_wer=table[left_to_right + "beam"]["test_wer"],
        greedy_words_per_second=table[left_to_right + "greedy"]["test_words_per_second"],
        keras_beam_words_per_second=table[chosen]["test_words_per_second"],
    )
    return f"chosen on dev: {chosen}, of {len(table)} ways to pronounce"


def serve_onnx(directory, beam, words, letters, batch_size=256):
    """Words per second of the exported `pronounce` ONNX model on `words`
    (batched by length), and the share of words where it decodes exactly
    what the Keras beam model decodes."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(Path(directory) / "pronounce.onnx"), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    batches = [[words[i] for i in rows] for rows in sorted_batches(words, batch_size)]
    feeds = [letters.encode(batch) for batch in batches]
    session.run(None, {"letters": feeds[0]})  # warm-up
    begin = time.perf_counter()
    onnx_ids = [dict(zip(names, session.run(None, {"letters": feed})))["ids"][:, 0] for feed in feeds]
    seconds = time.perf_counter() - begin
    same = 0
    for feed, ids in zip(feeds, onnx_ids):
        keras_ids = np.asarray(beam.predict_on_batch(feed)["ids"])[:, 0]
        same += int(np.sum(np.all(keras_ids == ids, axis=1)))
    return {
        "words_per_second": round(len(words) / seconds, 1),
        "seconds": round(seconds, 2),
        "batch_size": batch_size,
        "same_as_keras": same / len(words),
    }


def sorted_batches(words, batch_size):
    from keras_attention.g2p.pronounce import length_sorted_batches

    return length_sorted_batches(words, batch_size)


def export(out, greedy, beam, letters, phones, words):
    directory = os.path.join(out, "export")
    sample = [{"letters": words[:16]}, {"letters": words[16:19]}]
    report = ka.export_model(
        {"pronounce": beam, "pronounce_greedy": greedy},
        directory,
        overwrite=True,
        vocabulary={"source": letters, "target": phones},
        sample_inputs={"pronounce": sample, "pronounce_greedy": sample},
    )
    print(report.table())
    return directory, report


def run_cmudict(args):
    split = data.cmudict_split()
    if args.smoke:
        words = lexicon.subset(split["train"], SMOKE_WORDS)
        split = {"train": words, "dev": words, "test": words}
    results, (trainer, greedy, beam, letters, phones) = train_language(
        "cmudict",
        split,
        args,
        args.out,
        **(smoke_settings(args.architecture) if args.smoke else settings_for(split["train"], args.architecture)),
    )
    test_words = sorted(split["test"])
    results["plots"] = plot_alignments(
        greedy,
        ["phoneme", "attention", "keras", "pronounce"] if not args.smoke else test_words,
        letters,
        phones,
        args.out,
    )
    document = {"test_words": len(test_words), "ours": results}
    if not args.no_export:
        directory, report = export(args.out, greedy, beam, letters, phones, test_words)
        serving = serve_onnx(directory, beam, test_words, letters)
        results["words_per_second"] = serving["words_per_second"]
        results["onnx_serving"] = serving
        results["export_parity"] = {f"{r.signature}/{r.format}/{r.output}": r.max_abs_diff for r in report.parity}
        print(
            f"ONNX beam serving: {serving['words_per_second']:.0f} words/s; same as Keras on {serving['same_as_keras']:.2%} of test words"
        )
    if not args.no_peer:
        from keras_attention.g2p import peer

        # The peer needs no dev set: it trains on every non-test word.
        peer_train = {**split["train"], **split["dev"]}
        document["phonetisaurus"] = peer.phonetisaurus(
            peer_train, split["test"], os.path.join(args.out, "phonetisaurus")
        )
        print("phonetisaurus:", json.dumps(document["phonetisaurus"]))
    return document


def run_sigmorphon(args):
    languages = []
    for name in args.languages:
        languages += list(data.MEDIUM_LANGUAGES) if name == "medium" else [name]
    document = {"languages": {}}
    total = 0.0
    for language in languages:
        split = data.sigmorphon_split(language)
        if args.train_words is not None:
            split = {**split, "train": lexicon.sample(split["train"], args.train_words)}
        defaults = settings_for(split["train"], args.architecture)
        if args.smoke:
            words = lexicon.subset(split["train"], SMOKE_WORDS)
            split = {"train": words, "dev": words, "test": words}
            defaults = {**defaults, **smoke_settings(args.architecture)}
        results, _ = train_language(
            language, split, args, os.path.join(args.out, language), choose_on_dev=True, **defaults
        )
        total += results["train_seconds"]
        document["languages"][language] = {
            "dev_wer": results["dev_wer"],
            "test_wer": results["wer"],
            "test_wer_greedy": results["wer_greedy"],
            "baseline_test_wer": data.SIGMORPHON_BASELINE[language],
            "train_seconds": results["train_seconds"],
            "epochs": results["epochs"],
            "details": results,
        }
    medium = [document["languages"][name] for name in data.MEDIUM_LANGUAGES if name in document["languages"]]
    if len(medium) == len(data.MEDIUM_LANGUAGES):
        document["macro_test_wer"] = float(np.mean([entry["test_wer"] for entry in medium]))
        document["baseline_macro_test_wer"] = data.SIGMORPHON_BASELINE_MACRO
        document["better_than_baseline"] = sum(entry["test_wer"] < entry["baseline_test_wer"] for entry in medium)
        document["medium_train_seconds"] = round(sum(entry["train_seconds"] for entry in medium), 1)
    if "eng_us" in document["languages"]:
        document["eng_us"] = document["languages"]["eng_us"]
    document["train_seconds"] = round(total, 1)
    return document


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    begin = time.perf_counter()
    document = run_cmudict(args) if args.dataset == "cmudict" else run_sigmorphon(args)
    document.update(
        command=" ".join(["python -m examples.g2p.train", *(sys.argv[1:] if argv is None else argv)]),
        wall_seconds=round(time.perf_counter() - begin, 1),
        date=datetime.date.today().isoformat(),
        machine=machine(),
        smoke=args.smoke,
    )
    paths = [os.path.join(args.out, "results.json")] + ([args.results] if args.results else [])
    for path in paths:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path + ".tmp", "w") as file:
            json.dump(document, file, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)
        print(f"wrote {path}")
    return document


if __name__ == "__main__":
    main()
