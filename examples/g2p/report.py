"""Write the "Results on real data" tables of docs/results.md from the committed results files.

    python -m examples.g2p.report          # rewrite the block in docs/results.md
    python -m examples.g2p.report --check  # exit 1 if docs/results.md is out of date

Reads results/g2p_cmudict.json, the optional other CMUdict runs in VARIANTS
(one model trained longer) and results/g2p_sigmorphon2021.json (written by
`train.py --results ...`), the default run's serving studies in SERVING
(`serving.py`: the ensemble, and its first model alone), the tool's curve
by lexicon size (results/g2p_curve.json, `curve.py`), and replaces what stands between the two marker comments in docs/results.md, so the table can only show measured figures.
"""

import argparse
import json
import sys
from pathlib import Path

from examples.g2p import data
from tools.readme_block import replace_block

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "results"
PAGE = ROOT / "docs" / "results.md"
BEGIN, END = "<!-- g2p-results:begin -->", "<!-- g2p-results:end -->"
# Other runs of ours on the CMUdict split, each shown as one more row.
VARIANTS = ("g2p_cmudict_large.json", "g2p_cmudict_transformer.json")
# Serving studies (`serving.py`) of the default run, by beam width, float32
# and int8: the whole ensemble, then its first model alone.
SERVED_RUN = "g2p_cmudict.json"
# The G2P tool against Phonetisaurus by lexicon size (`curve.py`).
CURVE = "g2p_curve.json"
SERVING = (
    ("g2p_cmudict_serving.json", "the default model above"),
    ("g2p_cmudict_serving_one.json", "the first model of the default ensemble, alone"),
)


def _minutes(seconds):
    return f"{seconds / 60:.0f} min"


def _curve(history):
    return ", ".join(f"{h['dev_wer']:.1f}% at {h['train_seconds'] / 60:.0f} min" for h in history)


def _label(model, ensemble=1):
    if model.get("architecture") == "transformer":
        label = (
            f"Transformer {model['layers']}+{model['layers']} layers, d {model['model_dim']}, "
            f"{model['heads']} heads, FFN {model['ff_dim']}"
        )
    else:
        size = f"{model['encoder_layers']}x{model['encoder_units']} encoder, {model['decoder_units']} decoder"
        label = f"decoder `{model.get('decoder', 'input_feeding')}`, {size}"
    return label + (f", ensemble of {ensemble}" if ensemble > 1 else "")


def cmudict_table(document, variants=()):
    """`variants`: other runs of ours on the same split (e.g. the decoder
    without input feeding), each shown as one more row with its own command."""
    ours, peer = document["ours"], document.get("phonetisaurus")

    def mark(value, other):  # bold where ours is the better of the two
        text = f"{value:.2f}%"
        return f"**{text}**" if peer is None or value < other else text

    lines = [
        f"CMUdict ({document['test_words']:,} test words; WER = words with any phone wrong, PER = phone edit "
        "distance to the closest reference / its length):",
        "",
        "| system | WER | PER | training | words/s served |",
        "|---|---|---|---|---|",
        f"| keras-attention, {_label(ours['model'], ours.get('ensemble', 1))}, beam {ours['model']['beam_width']} "
        f"(ONNX) | {mark(ours['wer'], peer and peer['wer'])} | "
        f"{mark(ours['per'], peer and peer['per'])} | "
        f"{_minutes(ours['train_seconds'])}, {ours['epochs']} epochs | {ours['words_per_second']:,.0f} |",
        f"| keras-attention, greedy | {ours['wer_greedy']:.2f}% | {ours['per_greedy']:.2f}% | same model | "
        f"{ours['greedy_words_per_second']:,.0f} (Keras) |",
    ]
    for variant in variants:
        other = variant["ours"]
        lines.append(
            f"| keras-attention, {_label(other['model'], other.get('ensemble', 1))}"
            + (", one model" if other.get("ensemble", 1) == 1 else "")
            + f", beam {other['model']['beam_width']} (Keras) | "
            f"{mark(other['wer'], peer and peer['wer'])} | {mark(other['per'], peer and peer['per'])} | "
            f"{_minutes(other['train_seconds'])}, {other['epochs']} epochs | "
            f"{other['keras_beam_words_per_second']:,.0f} (Keras) |"
        )
    if peer:
        lines.append(
            f"| Phonetisaurus {peer['version']} (same split, same run) | {peer['wer']:.2f}% | {peer['per']:.2f}% | "
            f"{_minutes(peer['train_seconds'])} | {peer['words_per_second']:,.0f} |"
        )
    lines += [
        "| published: attention BiLSTM, standard split (Toshniwal & Livescu 2016) | 23.5% | | | |",
        "| published: ensemble, standard split | 20.2% | | | |",
        "",
        f"Command: `{document['command']}` ({_minutes(document['wall_seconds'])} wall time, training included, on "
        f"{document['machine']['cores']} CPU cores; {document['date']}). The ONNX model decodes the same best "
        f"pronunciation as Keras for {ours['onnx_serving']['same_as_keras']:.2%} of the test words.",
        "",
        ("The first model's dev WER" if ours.get("ensemble", 1) > 1 else "Dev WER")
        + " (greedy) against training minutes: "
        + _curve(ours["history"])
        + ".",
    ]
    for variant in variants:
        lines += [
            "",
            f"{_label(variant['ours']['model'])[0].upper()}{_label(variant['ours']['model'])[1:]}: `{variant['command']}` "
            f"({_minutes(variant['wall_seconds'])} wall time; {variant['date']}); dev WER against training minutes: "
            + _curve(variant["ours"]["history"])
            + "."
            + (f" {variant['conditions']}" if variant.get("conditions") else ""),
        ]
    return "\n".join(lines)


def serving_table(document, trained, which="the default model above"):
    """Accuracy and ONNX throughput of one trained run by beam width
    (`serving.py`), beside Phonetisaurus."""
    peer = document.get("phonetisaurus")
    lines = [
        f"Serving {_label(trained['ours']['model'], document.get('members', 1))} ({which}) through onnxruntime on "
        f"{document['machine']['cores']} CPU cores, by beam width "
        f"(batches of {document['batch_size']} words, early stopping, a fresh process):",
        "",
        "| beam | WER | PER | words/s (ONNX) | end to end | same as Keras | in matrix products |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in document["widths"]:
        for label, entry in [(row["beam_width"], row)] + (
            [(f"{row['beam_width']}, int8", row["int8"])] if "int8" in row else []
        ):
            lines.append(
                f"| {label} | {entry['wer']:.2f}% | {entry['per']:.2f}% | {entry['onnx_words_per_second']:,.0f} | "
                f"{entry['onnx_end_to_end_words_per_second']:,.0f} | {entry['same_as_keras']:.2%} | "
                f"{_share(entry.get('matmul_share'))} |"
            )
    if peer:
        lines.append(
            f"| Phonetisaurus | {peer['wer']:.2f}% | {peer['per']:.2f}% | | {peer['words_per_second']:,.0f} | | |"
        )
    lines += [
        "",
        f"Command: `{document['command']}` ({_minutes(document['wall_seconds'])} wall time; {document['date']}). "
        "words/s times the onnxruntime calls on tokenised batches (the median of three passes); end to end "
        "includes loading the model, tokenising and detokenising, as Phonetisaurus's figure (`phonetisaurus-apply` "
        "on the word list) does. In matrix products: the share of onnxruntime's time (its profiler, one more pass) "
        "spent in matrix products, the arithmetic a faster decode loop cannot remove.",
    ]
    quantized = [row["int8"] for row in document["widths"] if "int8" in row]
    if quantized:
        lines[-1] += (
            f' int8: the same model with int8 weights (`export_model(..., quantize="int8")`, onnxruntime\'s dynamic '
            f"quantization), {quantized[0]['bytes'] / 1e6:.1f} MB against {quantized[0]['float32_bytes'] / 1e6:.1f} MB; "
            "its WER and PER are scored from the served pronunciations."
        )
    return "\n".join(lines)


def _share(fraction):
    return "" if fraction is None else f"{fraction:.0%}"


def sigmorphon_table(document):
    languages = document["languages"]
    sizes = {entry["details"].get("ensemble", 1) for entry in languages.values()}
    ensemble = max(sizes)
    ours_header = f"ours (ensemble of {ensemble})" if ensemble > 1 else "ours"
    if {entry["details"].get("directions") for entry in languages.values()} == {"both"}:
        ours_header = f"ours ({ensemble} models, both directions)"
    # With an ensemble: its models alone too (the mean of their test WERs).
    alone = ensemble > 1
    lines = [
        "SIGMORPHON 2021 task 1 (test WER, %; selected on dev; the baseline is the task's published ensembled "
        "neural transducer):",
        "",
        f"| language | {ours_header} |" + (" one model |" if alone else "") + " baseline | dev | training |",
        "|---|---|" + ("---|" if alone else "") + "---|---|---|",
    ]

    def one_model(entry):
        members = entry["details"].get("members")
        return f" {sum(m['test_wer'] for m in members) / len(members):.2f} |" if members else " |"

    for name in data.MEDIUM_LANGUAGES + data.HIGH_LANGUAGES:
        if name not in languages:
            continue
        entry = languages[name]
        ours = f"{entry['test_wer']:.2f}"
        if entry["test_wer"] < entry["baseline_test_wer"]:
            ours = f"**{ours}**"
        lines.append(
            f"| {name} | {ours} |"
            + (one_model(entry) if alone else "")
            + f" {entry['baseline_test_wer']:.2f} | {entry['dev_wer']:.2f} | {_minutes(entry['train_seconds'])} |"
        )
    if "macro_test_wer" in document:
        macro = f"{document['macro_test_wer']:.2f}"
        if document["macro_test_wer"] < document["baseline_macro_test_wer"]:
            macro = f"**{macro}**"
        single = ""
        if alone:
            means = [float(one_model(languages[name]).strip(" |")) for name in data.MEDIUM_LANGUAGES]
            single = f" {sum(means) / len(means):.2f} |"
        lines.append(
            f"| medium macro-average | {macro} |{single} {document['baseline_macro_test_wer']:.2f} | | "
            f"{_minutes(document['medium_train_seconds'])} (all ten) |"
        )
        lines += ["", f"Better than the baseline on {document['better_than_baseline']} of the 10 medium languages."]
    lines += [
        "",
        f"Command: `{document['command']}` ({_minutes(document['wall_seconds'])} wall time; {document['date']}).",
    ]
    return "\n".join(lines)


def curve_table(document):
    """The G2P tool against Phonetisaurus by training words (`curve.py`'s results)."""
    lines = [
        "The G2P tool (`keras-attention-g2p train`, the settings its rule chooses for the size, within its "
        "time budget) against Phonetisaurus trained on the same words in the same run, by the number of "
        "training words drawn from each lexicon's training split; scored on the whole test split "
        f"(`{document['command']}`, seed {document['seed']}).",
        "",
        "| lexicon | training words | budget | ours: WER | PER | models | Phonetisaurus: WER | PER |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    wins = 0
    for row in document["points"]:
        ours, peer = row["ours"], row["phonetisaurus"]
        better = ours["wer"] < peer["wer"]
        wins += better
        wer = f"**{ours['wer']:.2f}**" if better else f"{ours['wer']:.2f}"
        peer_wer = f"{peer['wer']:.2f}" if better else f"**{peer['wer']:.2f}**"
        models = f"{ours['models']} of {ours['trained_models']}"
        warning = " (cut by the budget)" if ours.get("time_budget_warning") else ""
        lines.append(
            f"| {row['lexicon']} | {row['train_words']:,} | {row['budget_minutes']:g} min{warning} | {wer} | "
            f"{ours['per']:.2f} | {models} | {peer_wer} | {peer['per']:.2f} |"
        )
    lines += ["", f"Ours has the lower WER at {wins} of {len(document['points'])} points."]
    return "\n".join(lines)


def _load(name):
    path = RESULTS / name
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def render():
    parts = []
    cmudict, sigmorphon = _load("g2p_cmudict.json"), _load("g2p_sigmorphon2021.json")
    variants = [document for document in map(_load, VARIANTS) if document]
    if cmudict:
        parts.append(cmudict_table(cmudict, variants))
    served_run = _load(SERVED_RUN)
    for name, which in SERVING:
        serving = _load(name)
        if serving and served_run:
            parts.append(serving_table(serving, served_run, which))
    if sigmorphon:
        parts.append(sigmorphon_table(sigmorphon))
    curve = _load(CURVE)
    if curve and curve["points"]:
        parts.append(curve_table(curve))
    return "\n\n".join(parts) if parts else "No results committed yet."


def updated_page(text):
    return replace_block(text, BEGIN, END, render(), PAGE.name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that docs/results.md is up to date")
    args = parser.parse_args(argv)
    text = PAGE.read_text(encoding="utf-8")
    new = updated_page(text)
    if args.check:
        if new != text:
            print("error: docs/results.md's block is out of date; run python -m examples.g2p.report", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(new, encoding="utf-8")
    print(f"updated {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
