"""The main example, examples/translate_dates.py, at smoke size (and under MirroredStrategy: `--distribute data`;
with two workers: tests/test_distribution_trainers.py)."""

import json

import pytest

from keras_attention.export import load_vocabulary
from tests import examples

translate_dates = examples.load("translate_dates")


@pytest.fixture(scope="module")
def smoke_runs(tmp_path_factory):
    """`run(distribute)`: the smoke run's (out, results, stdout), each
    distribution run once for the module (the export test reads the plain
    run's models: a second training would give the same files)."""
    done = {}

    def run(distribute):
        if distribute not in done:
            out = tmp_path_factory.mktemp(f"dates_{distribute}")
            completed = examples.run(
                "examples.translate_dates", "--smoke", "--out", out, "--distribute", distribute, timeout=900
            )
            done[distribute] = out, json.loads((out / "results.json").read_text()), completed.stdout
        return done[distribute]

    return run


# What each run says it trains on: no strategy on the CPU, or MirroredStrategy over its two logical halves.
DEVICES = {
    "none": "distribute: none (no strategy), 1 replica(s) in sync: /device:CPU:0; 0 GPU(s)",
    "data": "distribute: data (tf.distribute.MirroredStrategy), 2 replica(s) in sync: "
    "/job:localhost/replica:0/task:0/device:CPU:0, /job:localhost/replica:0/task:0/device:CPU:1; 0 GPU(s)",
}


@pytest.mark.parametrize("distribute", ["none", "data"])
def test_smoke_run_writes_its_outputs(distribute, smoke_runs):
    tmp_path, results, stdout = smoke_runs(distribute)
    assert DEVICES[distribute] in stdout
    for key in ("greedy_exact_match", "beam_exact_match", "greedy_character_accuracy"):
        assert 0.0 <= results[key] <= 1.0, key
    assert results["final_loss"] > 0 and results["replicas"] == (2 if distribute == "data" else 1)
    # Chance is 1/13 per character; one smoke epoch learns at least the fixed
    # dashes (measured: 0.20).
    assert results["greedy_character_accuracy"] > 0.12
    for name in (
        "dates_trainer.keras",
        "dates_greedy.keras",
        "dates_beam.keras",
        "checkpoint.keras",
        "vocabulary.json",
        "sample_inputs.json",
        "attention_0.png",
    ):
        assert (tmp_path / name).stat().st_size > 0, name
    # The vocabularies the model was trained with, as the export ships them.
    assert load_vocabulary(tmp_path) == {"source": translate_dates.SOURCE, "target": translate_dates.TARGET}
    assert "exact match on 200 held-out dates" in stdout


def test_every_format_maps_to_its_iso_date():
    import datetime

    import numpy as np

    date = datetime.date(2015, 3, 3)
    texts = [translate_dates.format_date(date, template) for template in translate_dates.FORMATS]
    assert "tuesday 3 march 2015" in texts and "3/3/15" in texts and "Mar 3, 2015" in texts and "03.03.2015" in texts
    pairs = translate_dates.make_dates(300, np.random.default_rng(0))
    for human, iso in pairs:
        parsed = datetime.date.fromisoformat(iso)
        assert datetime.date(1950, 1, 1) <= parsed <= datetime.date(2049, 12, 31)
        assert human in {translate_dates.format_date(parsed, t) for t in translate_dates.FORMATS}
    assert len({h.lower() for h, _ in pairs}) == 300, "inputs are unique"


def test_the_vocabularies_round_trip_with_the_ids_the_model_was_built_on():
    import numpy as np

    source, target = translate_dates.SOURCE, translate_dates.TARGET
    assert (len(source), len(target), translate_dates.START, translate_dates.END) == (43, 14, 1, 2)
    decoder_inputs, targets = target.encode_targets(["2015-03-03"])
    np.testing.assert_array_equal(targets, [[6, 4, 5, 9, 3, 4, 7, 3, 4, 7, 2]])
    np.testing.assert_array_equal(decoder_inputs, [[1, 6, 4, 5, 9, 3, 4, 7, 3, 4, 7]])
    assert target.detokenize(targets) == ["2015-03-03"]
    ids = source.encode(["Mar 3, 2015", "3/3/15"])
    assert ids.shape == (2, 11)
    np.testing.assert_array_equal(ids[1], [10, 6, 10, 6, 8, 12, 0, 0, 0, 0, 0])
    # Lower-cased first; a character outside the alphabet is <unk> (id 1).
    np.testing.assert_array_equal(source.encode(["M", "m!"]), [[29, 0], [29, 1]])


def test_smoke_model_exports_with_its_decoders(smoke_runs, tmp_path):
    """The example's three models export together; decoded ids match exactly."""
    import keras
    import numpy as np

    import keras_attention as ka

    out, _, _ = smoke_runs("none")
    samples = json.loads((out / "sample_inputs.json").read_text())
    report = ka.export_model(
        {
            "serving_default": str(out / "dates_trainer.keras"),
            "translate": str(out / "dates_greedy.keras"),
            "translate_beam": str(out / "dates_beam.keras"),
        },
        tmp_path / "export",
        sample_inputs=samples,
        vocabulary=str(out / "vocabulary.json"),
    )
    assert report.ok
    for signature in ("translate", "translate_beam"):
        for fmt in ("saved_model", "onnx"):
            assert report.max_abs_diff(fmt, "ids", signature) == 0
    assert report.max_abs_diff("onnx", "readout", "serving_default") <= 1e-4
    # Served from the export, strings in: the ids the Keras decoder gives.
    dates = ["3/3/15", "Mar 3, 2015"]
    served = ka.export.run_onnx(tmp_path / "export", {"source": dates}, signature="translate")
    greedy = keras.models.load_model(out / "dates_greedy.keras")
    want = np.asarray(greedy.predict(translate_dates.SOURCE.encode(dates), verbose=0)["ids"])
    np.testing.assert_array_equal(served["outputs"]["ids"], want)
    assert served["text"]["ids"] == translate_dates.TARGET.detokenize(want)
