"""The grapheme-to-phoneme example's SIGMORPHON 2021 smoke trainings, a module
of their own so that the suite's workers run them beside the CMUdict smoke
(tests/test_example_g2p.py) rather than after it."""

import json

from tests import examples

data = examples.load("g2p.data")


def run(*arguments, timeout=1200):
    return examples.run("examples.g2p.train", *arguments, timeout=timeout).stdout


def test_sigmorphon_smoke_runs_two_languages_with_the_decoder_without_input_feeding(tmp_path):
    # The decoder without input feeding (one LSTM pass, one attention call)
    # learns too, writing the phones' characters (scored as phones). In this
    # process, TensorFlow imported already (the ensemble below trains its
    # models in processes of their own, and runs in one too).
    examples.run_here(
        "examples.g2p.train",
        "sigmorphon",
        *("--smoke", "--languages", "hun", "kor", "--decoder", "luong", "--phone-symbols", "characters"),
        *("--out", tmp_path),
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["languages"]) == {"hun", "kor"}
    for language, entry in results["languages"].items():
        assert entry["baseline_test_wer"] == data.SIGMORPHON_BASELINE[language]
        assert entry["test_wer"] <= 10.0, (language, entry["test_wer"])
        assert entry["details"]["model"]["decoder"] == "luong"
        assert entry["details"]["model"]["phone_symbols"] == "characters"


def test_sigmorphon_smoke_trains_a_bidirectional_ensemble(tmp_path):
    run("sigmorphon", "--smoke", "--languages", "vie_hanoi", "--ensemble", "2", "--out", tmp_path)
    entry = json.loads((tmp_path / "results.json").read_text())["languages"]["vie_hanoi"]
    details = entry["details"]
    assert details["directions"] == "both"
    assert [member["direction"] for member in details["members"]] == ["left-to-right", "right-to-left"]
    # Each model learnt its own direction (the right-to-left one scored on reversed pronunciations).
    assert all(member["test_wer"] <= 10.0 for member in details["members"])
    assert entry["test_wer"] <= 10.0 and details["left_to_right_wer"] <= 10.0
    assert details["dev_wer"] <= 10.0 and "dev_wer_greedy" in details
