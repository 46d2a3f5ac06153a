"""The repository's tools keep working: tools/export_coverage_table.py."""

import importlib
import inspect
from pathlib import Path

import keras
import pytest

import keras_attention as ka

ROOT = Path(__file__).resolve().parents[1]
# The bases new mechanisms subclass: nothing to export on their own.
BASES = ("AttentionLayer", "BaseAttention")


def load_tool(name):
    return importlib.import_module(f"tools.{name}")


def test_the_export_coverage_table_uses_every_public_layer():
    """docs/export.md says the table covers every public layer and decoder: the
    models it exports hold one of each (the export itself is `export_model`'s,
    tested in test_export.py)."""
    tool = load_tool("export_coverage_table")
    signatures = tool.build_signatures()
    assert set(signatures) == {
        "serving_default",
        "decoders",
        "greedy_search",
        "beam_search",
        "ensemble_search",
        "pointer_network",
        "hierarchical",
        "transformer",
        "transformer_search",
    }
    used = set()
    for model in signatures.values():
        used.update(type(layer).__name__ for layer in model._flatten_layers(include_self=False, recursive=True))
    public = {
        name
        for name in ka.__all__
        if inspect.isclass(getattr(ka, name))
        and issubclass(getattr(ka, name), keras.layers.Layer)
        and name not in BASES
    }
    assert {"AdditiveAttention", "AttentionDecoder", "InferenceDecoder", "PointerNetwork"} <= public
    assert public - used == set()


def test_protocol_benchmark_compares_geometric_means_against_the_spread_of_each_side():
    from tools import protocol_benchmark

    def run(label, ratio):
        return {"label": label, "ratios": {"options x": ratio, "decoder y": 2.0}}

    data = {"runs": [run("before", 1.0), run("before", 1.21), run("after", 1.1), run("after", 1.1)]}
    rows = {row[0]: row for row in protocol_benchmark.table(data)}
    name, before, after, change, noise, verdict = rows["options x"]
    assert before == pytest.approx(1.1) and after == pytest.approx(1.1)  # sqrt(1.0 * 1.21)
    assert change == pytest.approx(0.0, abs=1e-12) and noise == pytest.approx(0.21) and verdict == "within noise"
    data["runs"][2]["ratios"]["options x"] = 2.0  # after: 2.0 and 1.1, a spread of 82%, a change of 36%
    assert protocol_benchmark.table(data)[0][5] == "within noise"
    data["runs"][3]["ratios"]["options x"] = 2.0  # both after runs agree on 2.0: outside the 21% of before
    assert protocol_benchmark.table(data)[0][5] == "OUTSIDE noise"
    assert rows["decoder y"][4] == 0.0 and rows["decoder y"][5] == "within noise"
