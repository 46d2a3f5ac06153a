"""examples/targeted_sentiment.py: its corpus and metric, and a smoke run end to end."""

import json
import math

import numpy as np
import pytest

from tests import examples

SCRIPT = "examples.targeted_sentiment"


example = examples.load("targeted_sentiment")


def test_every_sentence_has_entities_of_different_polarity_and_one_example_per_entity():
    examples = example.make_corpus(600, np.random.default_rng(0))
    sentences = {}
    for words, (first, last), label in examples:
        sentences.setdefault(" ".join(words), []).append((words[first : last + 1], label))
    for sentence, targets in sentences.items():
        assert 2 <= len(targets) <= 3, sentence
        assert len({label for _, label in targets}) >= 2, sentence
        for entity, _ in targets:
            assert " ".join(entity) in example.ENTITIES
            assert all(sentence.split().count(word) == 1 for word in entity), sentence
    # The target decides: no target-blind answer can get most examples right.
    assert example.target_blind_ceiling(examples) < 0.6
    assert {label for _, _, label in examples} == {0, 1, 2}


def test_encoding_marks_the_target_span_inside_the_words():
    examples = example.make_corpus(20, np.random.default_rng(1))
    vocabulary = {w: i + 2 for i, w in enumerate(sorted({w for ws, _, _ in examples for w in ws}))}
    ids, target, labels = example.encode(examples, vocabulary, 40)
    for row, (words, (first, last), label) in enumerate(examples):
        assert (ids[row, : len(words)] >= 2).all() and (ids[row, len(words) :] == 0).all()
        np.testing.assert_array_equal(np.flatnonzero(target[row]), np.arange(first, last + 1))
        assert labels[row] == label


def test_macro_f1_against_hand_computed_values():
    labels = np.array([0, 0, 1, 1, 2, 2])
    predictions = np.array([0, 1, 1, 1, 2, 0])
    # class 0: tp 1 fp 1 fn 1 -> 0.5; class 1: tp 2 fp 1 fn 0 -> 0.8; class 2: tp 1 fp 0 fn 1 -> 2/3
    assert example.macro_f1(labels, predictions) == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert example.macro_f1(labels, labels) == 1.0
    assert example.macro_f1(np.array([0, 0]), np.array([0, 0])) == pytest.approx(1 / 3)  # absent classes: 0


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("targeted")
    completed = examples.run(SCRIPT, "--smoke", "--out", out)
    return out, json.loads((out / "results.json").read_text()), completed.stdout


def test_smoke_run_reports_accuracy_and_macro_f1_per_mode(smoke):
    _, results, stdout = smoke
    assert set(results["modes"]) == {"vanilla", "contextualized", "gated"}
    for mode, metrics in results["modes"].items():
        assert 0.0 <= metrics["accuracy"] <= 1.0, mode
        assert 0.0 <= metrics["macro_f1"] <= 1.0, mode
        assert math.isfinite(metrics["final_loss"]), mode
        assert mode in stdout
    assert 0.0 < results["target_blind_accuracy_ceiling"] < 1.0
    assert sum(results["label_counts_test"].values()) == results["test_examples"]


def test_smoke_run_writes_models_plots_and_vocabulary(smoke):
    out, results, _ = smoke
    for mode in ("vanilla", "contextualized", "gated"):
        assert (out / f"attention_{mode}.png").read_bytes().startswith(b"\x89PNG"), mode
        assert (out / f"targeted_{mode}.keras").stat().st_size > 0, mode
    assert len(results["plots"]) == 3
    vocabulary = json.loads((out / "vocabulary.json").read_text())
    assert vocabulary["words"][:2] == ["<pad>", "<unk>"] and vocabulary["labels"] == example.LABELS


def test_smoke_models_export_with_parity(smoke, tmp_path):
    import keras_attention as ka

    out = smoke[0]
    for mode in ("vanilla", "gated"):
        report = ka.export_model(str(out / f"targeted_{mode}.keras"), tmp_path / mode)
        assert report.ok, mode
