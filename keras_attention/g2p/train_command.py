"""`keras-attention-g2p train`: a lexicon in, a model directory out.

The directory (`--out DIR`) holds, as they are made:

- `settings.json`: the settings chosen for the lexicon (settings.py), the
  split's sizes and the beam width; a rerun with the same data and options
  finds them equal and resumes;
- `member_<k>/`: each model of the ensemble (its `.keras` file, its best
  weights, its dev history, `results.json` once finished; a model killed
  mid-training resumes from its `backup/`, a finished one is not retrained);
- `export/`: the pronouncer (`pronounce.onnx`: beam search inside, n-best
  outputs; `pronounce_greedy.onnx`; `vocabulary.json`), pronouncer.py;
- `results.json`: dev (and test) WER and PER of the exported pronouncer,
  which members it pronounces with (`choose_members`, `member_choice`), the
  export's parity with Keras (`export_parity`), and
  Phonetisaurus's on the same split with `--compare-phonetisaurus`.
"""

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from keras_attention.evaluation import error_rates


def write_json(path, document):
    """Write `document` to `path` through a temporary file (never half a file)."""
    path = Path(path)
    path.with_suffix(".tmp").write_text(json.dumps(document, indent=1, sort_keys=True, ensure_ascii=False))
    os.replace(path.with_suffix(".tmp"), path)


def configs(settings, beam_width):
    """(ModelConfig, TrainConfig) of a settings dict."""
    from keras_attention.g2p.model import ModelConfig
    from keras_attention.g2p.training import TrainConfig

    return ModelConfig(**settings["model"], beam_width=beam_width), TrainConfig(**settings["training"])


def rates(pronounced, lexicon):
    """WER and PER (percent) of {word: phones} against {word: [references]}
    (right if any reference matches; a word not pronounced is wrong)."""
    words = list(lexicon)
    measured = error_rates([pronounced.get(word, []) for word in words], [lexicon[word] for word in words])
    return {"wer": measured["sequence_error_rate"], "per": measured["token_error_rate"], "words": len(words)}


def best_pronunciations(pronouncer, words):
    """{word: best phones} from an `OnnxPronouncer`; words with unknown letters left out."""
    return {word: found[0][1] if found else [] for word, found in pronouncer.pronounce(words).items()}


def budget_cut(member_results, train_config):
    """A warning when the time budget stopped models early, or None: before
    they could converge (fewer epochs than `min_epochs`, which patience never
    stops before), or later while they were still improving (their best dev
    score in their last epoch, before all their epochs: on 500 Dutch words,
    two of four models the budget cut at 14 of 22 epochs had their best
    epoch last, and the run lost to Phonetisaurus, 48.5% test WER against
    47.7)."""
    least = min(train_config.min_epochs, train_config.epochs)
    early = [member for member in member_results if member["epochs"] < least]
    improving = [
        member
        for member in member_results
        if least <= member["epochs"] < train_config.epochs
        and (member.get("best_epoch") or {}).get("epoch") == member["epochs"]
    ]
    warnings = []
    if early:
        warnings.append(
            f"the time budget stopped {len(early)} of {len(member_results)} models after {_epochs(early)} of "
            f"{train_config.epochs} epochs, before they could converge (dev WER {_dev_wers(early)})"
        )
    if improving:
        warnings.append(
            f"the time budget stopped {len(improving)} of {len(member_results)} models after "
            f"{_epochs(improving)} of {train_config.epochs} epochs while they were still improving (dev WER "
            f"{_dev_wers(improving)}, each its best in its last epoch)"
        )
    return "; ".join(warnings) + "; give --minutes more time" if warnings else None


def _epochs(members):
    return ", ".join(str(member["epochs"]) for member in members)


def _dev_wers(members):
    return ", ".join(f"{member['best_epoch']['dev_wer']:.0f}%" for member in members if member.get("best_epoch"))


def choose_members(count, dev_score):
    """The members that pronounce best together on dev, and what was tried.

    `dev_score(numbers)` is the (WER, PER) on dev of those members pronouncing
    together. The members are ranked alone; the best k of them together, for
    k = 1..count, are scored; the lowest WER, then PER, then the fewest members
    wins. A member that never converged (measured: one of four on 400 Dutch
    words stayed at 63% dev WER against 42-44% for the others) drags an
    ensemble down; there the best two scored 36% on dev, all four 42%, and on
    test 47.8% against 50.2%.
    """
    if count == 1:
        return [0], []
    alone = {number: dev_score([number]) for number in range(count)}
    ranked = sorted(alone, key=lambda number: (*alone[number], number))
    tried = []
    for size in range(1, count + 1):
        numbers = ranked[:size]
        wer, per = alone[numbers[0]] if size == 1 else dev_score(numbers)
        tried.append({"members": numbers, "dev_wer": wer, "dev_per": per})
    best = min(tried, key=lambda entry: (entry["dev_wer"], entry["dev_per"], len(entry["members"])))
    return best["members"], tried


def _train_models(split, letters, phones, model_config, train_config, ensemble, out, strategy=None):
    from keras_attention.g2p.members import finished_results, load_members, member_directory, train_member
    from keras_attention.g2p.members import train_members as train_side_by_side

    # Several replicas train one model at a time, here: they have the devices already.
    distributed = strategy is not None and strategy.num_replicas_in_sync > 1
    jobs = 1 if distributed else min(ensemble, os.cpu_count() or 1)
    if jobs > 1:
        _, results, _ = train_side_by_side(
            ensemble, split, letters, phones, model_config, train_config, out, jobs, "model", resume=True
        )
    else:
        results = []
        for number in range(ensemble):
            done = finished_results(out, number)
            if done is None:
                _, done = train_member(
                    number,
                    split,
                    letters,
                    phones,
                    model_config,
                    train_config,
                    member_directory(out, number),
                    strategy=strategy,
                )
            results.append(done)
    return load_members(out, ensemble, letters, phones, model_config), results


def train(split, settings, out, compare_phonetisaurus=False, strategy=None):
    """Train, export and score (see the module's doc); returns the results document. Under a
    `tf.distribute` `strategy` of several replicas (`--distribute data`), the members train
    one after another on all of them."""
    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p.pronounce import score
    from keras_attention.g2p.pronouncer import OnnxPronouncer, export_pronouncer
    from keras_attention.g2p.vocabularies import vocabularies

    begin = time.perf_counter()
    model_config, train_config = configs(settings, settings["beam_width"])
    letters, phones = vocabularies(split["train"], settings["normalization"])
    members, member_results = _train_models(
        split, letters, phones, model_config, train_config, settings["ensemble"], out, strategy
    )
    train_seconds = time.perf_counter() - begin
    cut = budget_cut(member_results, train_config)
    if cut:
        print(f"warning: {cut}", file=sys.stderr, flush=True)

    def dev_score(numbers):
        _, together_beam = g2p_model.together([members[k] for k in numbers], phones, model_config)
        measured, _ = score(together_beam, split["dev"], letters, phones)
        return measured["wer"], measured["per"]

    chosen, tried = choose_members(len(members), dev_score) if split["dev"] else (list(range(len(members))), [])
    if tried:
        everyone = tried[-1]
        print(
            f"pronouncing with member(s) {', '.join(map(str, chosen))} of {len(members)}: dev WER "
            f"{min(entry['dev_wer'] for entry in tried):.2f}% (all together {everyone['dev_wer']:.2f}%)",
            flush=True,
        )
    greedy, beam = g2p_model.together([members[k] for k in chosen], phones, model_config)
    words = sorted(split["dev"]) + sorted(split["train"])
    print("exporting the pronouncer to ONNX ...", flush=True)
    report = export_pronouncer(Path(out) / "export", greedy, beam, letters, phones, words[:19])
    pronouncer = OnnxPronouncer(Path(out) / "export", settings["beam_width"])
    results = {
        "train_words": len(split["train"]),
        "ensemble": settings["ensemble"],
        "members": [
            {key: member[key] for key in ("seed", "epochs", "train_seconds", "best_epoch")} for member in member_results
        ],
        "train_wall_seconds": round(train_seconds, 1),
        "replicas": 1 if strategy is None else strategy.num_replicas_in_sync,
        "chosen_members": chosen,
        "member_choice": tried,
        # The exported searches against Keras on the sample words: ids must be equal (0).
        "export_parity": {f"{row.signature}/{row.output}": row.max_abs_diff for row in report.parity},
    }
    if cut:
        results["time_budget_warning"] = cut
    for side in ("dev", "test"):
        if split.get(side):
            measured = rates(best_pronunciations(pronouncer, list(split[side])), split[side])
            results[f"{side}_wer"], results[f"{side}_per"] = measured["wer"], measured["per"]
            results[f"{side}_words"] = measured["words"]
            print(f"{side}: WER {measured['wer']:.2f}% PER {measured['per']:.2f}% ({measured['words']} words)")
    if compare_phonetisaurus:
        from keras_attention.g2p.peer import phonetisaurus

        # The peer needs no dev set: it trains on every word we trained and selected on.
        peer = phonetisaurus({**split["train"], **split["dev"]}, split["test"], Path(out) / "phonetisaurus")
        results["phonetisaurus"] = peer
        print(f"Phonetisaurus: test WER {peer['wer']:.2f}% PER {peer['per']:.2f}% ({peer['train_seconds']:.0f} s)")
    results["wall_seconds"] = round(time.perf_counter() - begin, 1)
    write_json(Path(out) / "results.json", results)
    print(f"wrote {Path(out) / 'results.json'}", file=sys.stderr)
    return results


def settings_record(settings, split, beam_width):
    """What settings.json holds: the chosen settings, the split's sizes and the beam width."""
    return {
        **settings,
        "beam_width": beam_width,
        "words": {side: len(lexicon) for side, lexicon in split.items()},
    }


def check_resumable(out, record):
    """Refuse a directory holding another run's settings (ValueError), so a
    rerun resumes only what it would train again."""
    path = Path(out) / "settings.json"
    if not path.is_file():
        return
    before = json.loads(path.read_text())
    if before != json.loads(json.dumps(record)):
        changed = sorted(key for key in set(before) | set(record) if before.get(key) != record.get(key))
        raise ValueError(
            f"--out: {str(out)!r} holds a run with other settings or data (differing: {', '.join(changed)}); "
            "expected the same command to resume it, or a new directory"
        )


def describe(settings):
    """The settings on one line, for the start of training."""
    training = settings["training"]
    fields = dataclasses.asdict(configs(settings, settings["beam_width"])[0])
    if fields["architecture"] == "transformer":
        model = (
            f"Transformer {fields['layers']}+{fields['layers']} layers, d {fields['model_dim']}, "
            f"{fields['heads']} heads, FFN {fields['ff_dim']}"
        )
        warmup = f", warm-up {training['warmup_steps']} updates" if training.get("warmup_steps") else ""
    else:
        model = f"encoder 2x{fields['encoder_units']}, decoder {fields['decoder_units']} ({fields['decoder']})"
        warmup = ""
    return (
        f"settings: ensemble of {settings['ensemble']}, {model}, dropout {fields['dropout']}, "
        f"batch {training.get('batch_size')}{warmup}, up to {training.get('epochs')} epochs "
        f"(patience {training.get('patience')}, not before {training.get('min_epochs', 0)}), "
        f"normalization {settings['normalization']}, beam {settings['beam_width']}"
        + (f"; about {settings['estimated_minutes']} min of training" if "estimated_minutes" in settings else "")
    )
