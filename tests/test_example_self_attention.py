"""The self-attention example runs end to end at smoke size."""

import json
import math

import keras_attention as ka
from tests import examples

VARIANTS = ("multi_head", "causal", "local", "mean_pooling")


def test_smoke_run_writes_models_plots_and_metrics(tmp_path):
    completed = examples.run("examples.self_attention_classifier", "--smoke", "--out", tmp_path)
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results["variants"]) == set(VARIANTS)
    for variant, metrics in results["variants"].items():
        assert 0.0 <= metrics["accuracy"] <= 1.0, variant
        for name in ("near_link_rise", "far_link_rise"):
            assert math.isfinite(metrics[name]) and abs(metrics[name]) <= results["classes"] - 1, (variant, name)
        assert 0.0 <= metrics["count_mae"] <= results["classes"] - 1, variant
        assert math.isfinite(metrics["final_loss"]), variant
        assert len(results["link_rise_by_distance"][variant]) == results["length"] - 1
        assert (tmp_path / f"{variant}.keras").stat().st_size > 0, variant
        if variant != "mean_pooling":
            assert 0.0 <= metrics["weight_to_capital"] <= 1.0, variant
            assert 0.0 <= metrics["weight_from_capital"] <= 1.0 + 1e-6, variant
            assert (tmp_path / f"attention_{variant}.png").read_bytes().startswith(b"\x89PNG"), variant
    assert len(results["variants"]["multi_head"]["weight_to_capital_per_head"]) == 4
    assert (tmp_path / "link_detection.png").read_bytes().startswith(b"\x89PNG")
    assert "count MAE" in completed.stdout
    # The example's models export to SavedModel and ONNX with parity. Its
    # PositionEmbedding layer is registered by importing the example.
    examples.load("self_attention_classifier")

    for variant in ("multi_head", "local"):
        report = ka.export_model(str(tmp_path / f"{variant}.keras"), tmp_path / f"export_{variant}")
        assert report.ok, variant


def test_generated_counts_match_the_sequences():
    import numpy as np

    sa = examples.load("self_attention_classifier")
    sequences, counts = sa.make_sequences(500, np.random.default_rng(0))
    assert sequences.shape == (500, sa.LENGTH)
    capitals = sequences[:, 0]
    assert np.all((capitals > len(sa.LETTERS)) & (capitals <= 2 * len(sa.LETTERS)))
    assert np.all((sequences[:, 1:] >= 1) & (sequences[:, 1:] <= len(sa.LETTERS)))
    np.testing.assert_array_equal(sa.counted(sequences).sum(axis=1), counts)
    assert set(counts.tolist()) == set(range(sa.MAX_COUNT + 1))
