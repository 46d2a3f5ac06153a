"""`python -m examples.layer_tour` runs end to end at a small size."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_layer_tour_runs_and_reports_every_layer(tmp_path):
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "examples.layer_tour",
            "--epochs",
            "1",
            "--samples",
            "256",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) == {
        "AdditiveAttention",
        "DotAttention",
        "ScaledDotAttention",
        "GeneralAttention",
        "ConcatAttention",
        "HardAttention",
    }
    for name, result in results.items():
        assert 0.0 <= result["accuracy"] <= 1.0, name
        assert result["padding_weight"] == 0.0, name
        assert abs(result["weights_sum"] - 1.0) < 1e-5, name
    assert "query digit" in completed.stdout
    for name in results:
        assert (tmp_path / f"{name}.png").read_bytes().startswith(b"\x89PNG")
