"""examples/pointer_networks.py: its geometry against brute force, and a smoke run end to end."""

import json
import math
from pathlib import Path

import keras
import numpy as np
import pytest

from tests import examples

SCRIPT = examples.EXAMPLES / "pointer_networks.py"


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
    points, targets, lengths = example.make_hulls(50, np.random.default_rng(1))
    assert points.shape == (50, example.MAX_N, 2) and targets.shape == (50, example.MAX_LENGTH)
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
    numbers, targets, lengths = example.make_sorting(20, np.random.default_rng(2))
    for row in range(20):
        values = numbers[row, [i - 1 for i in targets[row, : lengths[row]]], 0]
        assert (np.diff(values) > 0).all() and targets[row, lengths[row]] == example.END


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("pointer")
    completed = examples.run(SCRIPT, "--smoke", "--out", out)
    return out, json.loads((out / "results.json").read_text()), completed.stdout


def test_smoke_run_reports_every_metric_in_range(smoke):
    _, results, stdout = smoke
    for method in ("greedy", "beam"):
        for key, value in results["sorting"][method].items():
            assert 0.0 <= value <= 1.0, (method, key)
        for n in ("n5", "n10"):
            hull = results["hull"][n][method]
            assert 0.0 <= hull["sequence_accuracy"] <= 1.0
            assert 0.0 <= hull["area_coverage"] <= 1.0 + 1e-9
            assert 0 <= hull["fail"] <= hull["examples"] == results["test_examples"]
    for task in ("sorting", "hull"):
        assert math.isfinite(results[task]["final_loss"]) and results[task]["train_seconds"] > 0
    assert results["paper_hull_accuracy"]["n5"]["Ptr-Net (trained n=5..50)"] == 0.92
    assert "hull n=10" in stdout and "paper" in stdout


def test_smoke_run_writes_plots_and_loadable_models(smoke):
    out, results, _ = smoke
    for name in ("hulls.png", "sorting_pointers.png", "hull_pointers.png"):
        assert (out / name).read_bytes().startswith(b"\x89PNG"), name
    assert sorted(Path(p).name for p in results["plots"]) == ["hull_pointers.png", "hulls.png", "sorting_pointers.png"]
    for task in ("sorting", "hull"):
        assert (out / f"{task}_trainer.keras").stat().st_size > 0
    greedy = keras.saving.load_model(out / "hull_greedy.keras")  # safe mode, no custom objects
    points, _, lengths = example.make_hulls(4, np.random.default_rng(3))
    ids = np.asarray(greedy.predict(points, verbose=0))
    assert ids.shape == (4, example.MAX_LENGTH) and ids.dtype == np.int32
    for row, length in zip(ids, lengths):
        chosen = example.pointed(row)
        assert len(set(chosen)) == len(chosen) and all(0 <= i < length for i in chosen)


def test_smoke_models_export_with_exact_pointers(smoke, tmp_path):
    import keras_attention as ka

    out = smoke[0]
    report = ka.export_model(
        {"serving_default": str(out / "hull_trainer.keras"), "point": str(out / "hull_greedy.keras")},
        tmp_path / "export",
    )
    assert report.ok
    assert all(row.ok for row in report.parity)
