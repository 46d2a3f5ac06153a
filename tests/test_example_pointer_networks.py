"""examples/pointer_networks.py: its geometry against brute force, and a smoke run end to end."""

import json
import math
from pathlib import Path

import keras
import numpy as np
import pytest

from tests import examples

SCRIPT = "examples.pointer_networks"


example = examples.load("pointer_networks")


def test_convex_hull_is_counter_clockwise_from_the_lowest_index_and_matches_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(300):
        points = rng.random((rng.integers(3, 11), 2))
        hull = example.convex_hull(points)
        assert hull[0] == min(hull)
        # Brute force: every other point lies strictly left of each directed
        # edge exactly when the polygon is the counter-clockwise hull.
        for k in range(len(hull)):
            a, b = points[hull[k]], points[hull[(k + 1) % len(hull)]]
            others = [j for j in range(len(points)) if j not in (hull[k], hull[(k + 1) % len(hull)])]
            assert all(example._cross(a, b, points[j]) > 0 for j in others)
        assert example.polygon_area(points[hull]) > 0


def test_hull_targets_are_one_based_then_end_and_padding():
    points, targets, lengths = example.make_hulls(50, np.random.default_rng(1), (5, 10))
    assert points.shape == (50, 10, 2) and targets.shape == (50, 11)
    assert example.make_hulls(3, np.random.default_rng(1), 5)[0].shape == (3, 5, 2)
    for row in range(50):
        hull = example.convex_hull(points[row, : lengths[row]])
        np.testing.assert_array_equal(targets[row, : len(hull)], np.array(hull) + 1)
        assert (targets[row, len(hull) :] == example.END).all()
        assert (points[row, lengths[row] :] == 0).all() and (points[row, : lengths[row]] > 0).all()


def test_coverage_of_partial_crossing_and_degenerate_polygons():
    square = np.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5]], "float64")
    truth = np.array([1, 2, 3, 4, 0, 0])
    assert example.hull_coverage(square, truth, truth) == (1.0, False)
    assert example.hull_coverage(square, np.array([1, 2, 5, 4, 0]), truth) == pytest.approx((0.5, False))
    assert example.hull_coverage(square, np.array([1, 3, 2, 4, 0]), truth) == (0.0, True)  # edges cross
    assert example.hull_coverage(square, np.array([1, 2, 0]), truth) == (0.0, True)  # two vertices
    assert example.hull_coverage(square, np.array([1, 5, 3, 0]), truth) == (0.0, True)  # collinear
    clockwise = np.array([4, 3, 2, 1, 0])
    assert example.hull_coverage(square, clockwise, truth) == (1.0, False)
    assert example.sequence_accuracy([clockwise, truth], [truth, truth]) == 0.5


def test_sorting_targets_are_the_ascending_order():
    numbers, targets, lengths = example.make_sorting(20, np.random.default_rng(2), (5, 10))
    for row in range(20):
        values = numbers[row, [i - 1 for i in targets[row, : lengths[row]]], 0]
        assert (np.diff(values) > 0).all() and targets[row, lengths[row]] == example.END


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("pointer")
    completed = examples.run_here(SCRIPT, "--smoke", "--out", out)
    return out, json.loads((out / "results.json").read_text()), completed.stdout


def test_smoke_run_reports_every_metric_in_range(smoke):
    _, results, stdout = smoke
    assert sorted(results["tasks"]) == ["hull10", "hull5", "sorting"]
    for method in ("greedy", "beam"):
        for key, value in results["tasks"]["sorting"]["test"]["n5..10"][method].items():
            assert 0.0 <= value <= 1.0 or key == "examples", (method, key)
        for task, n in (("hull5", "n5"), ("hull10", "n10"), ("hull10", "n50")):
            hull = results["tasks"][task]["test"][n][method]
            assert 0.0 <= hull["sequence_accuracy"] <= 1.0
            assert 0.0 <= hull["area_coverage"] <= 1.0 + 1e-9
            assert 0 <= hull["fail"] <= hull["examples"]
    assert results["tasks"]["hull10"]["test"]["n50"]["greedy"]["examples"] == results["test_examples"] // 4
    assert 0.0 <= results["tasks"]["hull5"]["test"]["n5"]["greedy_unconstrained"]["sequence_accuracy"] <= 1.0
    for task in results["tasks"].values():
        assert math.isfinite(task["final_loss"]) and task["train_seconds"] > 0
        assert task["examples_per_epoch"] == 256 and task["epochs"] == 1  # the smoke sizes
    assert results["paper_hull_accuracy"]["n5"]["Ptr-Net (trained n=5..50)"] == 0.92
    assert results["command"] == f"python -m examples.pointer_networks --smoke --out {smoke[0]}"
    assert results["machine"]["cores"] >= 1 and results["wall_seconds"] > 0
    assert "hull10 on n=50" in stdout and "paper" in stdout


def test_smoke_run_writes_plots_and_loadable_models(smoke):
    out, results, _ = smoke
    for name in ("hulls.png", "sorting_pointers.png", "hull_pointers.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG"), name
    assert sorted(Path(p).name for p in results["plots"]) == ["hull_pointers.png", "hulls.png", "sorting_pointers.png"]
    for task in ("sorting", "hull5", "hull10"):
        assert (out / f"{task}_trainer.keras").stat().st_size > 0
    greedy = keras.saving.load_model(out / "hull10_greedy.keras")  # safe mode, no custom objects
    points, _, lengths = example.make_hulls(4, np.random.default_rng(3), (5, 10))
    ids = np.asarray(greedy.predict(points, verbose=0))
    assert ids.shape == (4, 11) and ids.dtype == np.int32
    for row, length in zip(ids, lengths):
        chosen = example.pointed(row)
        assert len(set(chosen)) == len(chosen) and all(0 <= i < length for i in chosen)


def test_decoding_models_share_the_trained_weights_at_any_length(smoke):
    out = smoke[0]
    trainer = keras.saving.load_model(out / "hull10_trainer.keras")
    greedy = keras.saving.load_model(out / "hull10_greedy.keras")
    points, _, _ = example.make_hulls(8, np.random.default_rng(4), 10)
    longer = example.beam_model(trainer, 3, 51, "hull10", greedy=True)
    np.testing.assert_array_equal(
        np.asarray(longer.predict(points, verbose=0))[:, :11], np.asarray(greedy.predict(points, verbose=0))
    )
    free = example.beam_model(trainer, 3, 11, "hull10", greedy=True, mask_chosen=False)
    assert free.get_layer("pointer_network_beam").mask_chosen is False


def test_only_the_tasks_asked_for_run(tmp_path):
    completed = examples.run_here(
        SCRIPT, "--smoke", "--tasks", "hull5", "--out", tmp_path, "--results", tmp_path / "r.json"
    )
    results = json.loads((tmp_path / "r.json").read_text())
    assert list(results["tasks"]) == ["hull5"] and "sort n=" not in completed.stdout
    assert sorted(Path(p).name for p in results["plots"]) == ["hull_pointers.png", "hulls.png"]


def test_the_results_page_row_is_generated_from_the_committed_results():
    results = json.loads((examples.ROOT / "results" / "pointer_networks.json").read_text())
    assert example.readme_row(results) in (examples.ROOT / "docs" / "results.md").read_text()


def test_smoke_models_export_with_exact_pointers(smoke, tmp_path):
    import keras_attention as ka

    out = smoke[0]
    report = ka.export_model(
        {"serving_default": str(out / "hull10_trainer.keras"), "point": str(out / "hull10_greedy.keras")},
        tmp_path / "export",
    )
    assert report.ok
    assert all(row.ok for row in report.parity)


ablation = examples.load("pointer_ablation")


def test_ablation_smoke_runs_every_variant_and_makes_its_table(tmp_path):
    examples.run_here(
        "examples.pointer_ablation",
        "--smoke",
        "--minutes",
        "0.02",
        "--out",
        tmp_path,
        "--results",
        tmp_path / "ablation.json",
    )
    results = json.loads((tmp_path / "ablation.json").read_text())
    assert [row["variant"] for row in results["variants"]] == [label for label, *_ in ablation.VARIANTS]
    assert [row["fresh_data"] for row in results["variants"]] == [False, True, True, True]
    for row in results["variants"]:
        assert row["epochs"] >= 1 and 0.0 <= row["greedy"]["sequence_accuracy"] <= 1.0
        assert row["train_seconds"] >= 0.02 * 60
    table = ablation.table(results)
    assert table.count("\n") == 5 and "| + point embedding (the recipe) |" in table


def test_ablation_refuses_a_budget_of_nothing():
    completed = examples.run_here("examples.pointer_ablation", "--minutes", "0", check=False)
    assert completed.returncode == 2 and "--minutes must be > 0; got 0.0" in completed.stderr


def test_the_results_page_ablation_table_is_generated_from_the_committed_results():
    results = json.loads((examples.ROOT / "results" / "pointer_ablation.json").read_text())
    assert ablation.table(results) in (examples.ROOT / "docs" / "results.md").read_text()
