"""The repository's tools keep working: tools/export_coverage_table.py."""

import importlib
import inspect
from pathlib import Path

import keras

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
