"""The document-classification example (HAN) runs end to end at smoke size."""

import json
import math

import keras_attention as ka
from tests import examples


def test_smoke_run_writes_model_plots_and_metrics(tmp_path):
    completed = examples.run("examples.document_classification", "--smoke", "--out", tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    for name in (
        "accuracy",
        "bag_of_words_accuracy",
        "key_sentence_hit_rate",
        "key_sentence_weight",
        "top_word_is_cue_or_topic_rate",
    ):
        assert math.isfinite(results[name]) and 0.0 <= results[name] <= 1.0, (name, results[name])
    assert math.isfinite(results["final_loss"]) and results["final_loss"] > 0
    assert results["test_documents"] == 200 and results["epochs"] == 1
    assert (tmp_path / "han.keras").stat().st_size > 0
    # The example's model exports to SavedModel and ONNX with parity.
    report = ka.export_model(str(tmp_path / "han.keras"), tmp_path / "export")
    assert report.ok and report.max_abs_diff("onnx", "probabilities", "serving_default") <= 1e-4
    for name in ("word_attention.png", "sentence_attention.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG"), name
    assert "key sentence hit rate" in completed.stdout


def test_generated_documents_hide_the_label_from_a_word_count():
    import numpy as np

    dc = examples.load("document_classification")
    documents, labels, keys = dc.make_documents(300, np.random.default_rng(0))
    ids = dc.encode(documents)
    assert ids.shape == (300, dc.MAX_SENTENCES, dc.MAX_WORDS)
    for document, label, key in zip(documents, labels, keys):
        assert 5 <= len(document) <= dc.MAX_SENTENCES and 1 <= len(key) <= 2
        assert all(5 <= len(sentence) <= dc.MAX_WORDS for sentence in document)
        for s, sentence in enumerate(document):
            cue = any(word in dc.CUES for word in sentence)
            assert cue == (s in key)
            if s in key:
                assert sum(word in dc.TOPICS[dc.CLASSES[label]] for word in sentence) >= 2
    # Decoys outnumber the key words: counting topic words is worse than chance.
    assert np.mean(dc.bag_of_words_guess(ids) == labels) < 1 / len(dc.CLASSES)
