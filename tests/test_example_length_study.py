"""The sentence-length study example runs end to end at its smoke size."""

import csv
import json
import math

import pytest

from tests import examples


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    """One smoke run (one epoch) shared by the tests below: `(out, completed)`."""
    out = tmp_path_factory.mktemp("length_study")
    completed = examples.run("examples.length_study", "--smoke", "--out", out, timeout=600, check=False)
    return out, completed


def test_length_study_smoke_writes_every_output(smoke_run):
    tmp_path, completed = smoke_run
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())

    buckets = [(row["min_length"], row["max_length"]) for row in results["buckets"]]
    assert buckets[0][0] == 5 and buckets[-1][1] == results["max_length"]
    assert all(high + 1 == low for (_, high), (low, _) in zip(buckets, buckets[1:]))
    for row in results["buckets"]:
        assert row["sentences"] > 0
        for model in ("plain", "attention"):
            for metric in ("token_accuracy", "exact_match"):
                value = row[f"{model}_{metric}"]
                assert math.isfinite(value) and 0.0 <= value <= 1.0, (row["bucket"], model, metric, value)
    for value in results["overall"].values():
        assert math.isfinite(value) and 0.0 <= value <= 1.0
    for value in results["flatness"].values():
        assert math.isfinite(value) and value >= 0.0

    # The two models are compared at a similar size.
    assert 0.8 <= results["parameter_ratio_plain_to_attention"] <= 1.2
    for model in ("plain", "attention"):
        assert math.isfinite(results["models"][model]["final_loss"])

    with open(tmp_path / "length_study.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [row["bucket"] for row in rows] == [row["bucket"] for row in results["buckets"]]
    for name in ("length_study.png", "attention_long.png"):
        assert (tmp_path / name).read_bytes().startswith(b"\x89PNG"), name
    for name in ("plain_trainer.keras", "attention_trainer.keras"):
        assert (tmp_path / name).stat().st_size > 0, name
    assert "attention" in completed.stdout and "plain" in completed.stdout


def test_length_study_models_export_with_parity(smoke_run, tmp_path):
    import keras_attention as ka

    examples.load("length_study")  # registers the plain model's decoding layer

    run, completed = smoke_run
    assert completed.returncode == 0, completed.stderr[-3000:]
    for model in ("plain", "attention"):
        report = ka.export_model(str(run / f"{model}_trainer.keras"), tmp_path / model)
        assert report.ok, model
