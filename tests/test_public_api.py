"""The package's public names, and the boundaries between its subpackages."""

import ast
import importlib
from pathlib import Path

import pytest

import keras_attention

# keras_attention.__all__ on main before `keras_attention.decoders` (computed
# once from that tree). The public set grows only by a deliberate edit here
# (a new layer in layers.__all__ reaches the top level and fails this test
# until it is added).
PUBLIC_NAMES = {
    "AdditiveAttention",
    "AttentionDecoder",
    "AttentionGRUCell",
    "AttentionLSTMCell",
    "AttentionLayer",
    "AttentionPooling",
    "AttentionWrapper",
    "BahdanauMonotonicAttention",
    "BaseAttention",
    "ConcatAttention",
    "DotAttention",
    "GeneralAttention",
    "HardAttention",
    "InferenceDecoder",
    "LuongMonotonicAttention",
    "MultiHeadAttention",
    "PointerAttention",
    "PointerNetwork",
    "ScaledDotAttention",
    "SelfAttention",
    "SequenceLoss",
    "TargetedAttention",
    "batching",
    "decoding",
    "evaluation",
    "export_model",
    "losses",
    "masked_softmax",
    "models",
    "ops",
    "plot_attention",
    "sequence_loss",
    "sequence_mask",
    "text",
}
SUBPACKAGES = [
    "keras_attention.cells",
    "keras_attention.decoders",
    "keras_attention.decoding",
    "keras_attention.export",
    "keras_attention.layers",
    "keras_attention.models",
    "keras_attention.ops",
    "keras_attention.losses",
    "keras_attention.plot",
    "keras_attention.text",
    "keras_attention.batching",
    "keras_attention.training",
    "keras_attention.evaluation",
    "keras_attention.generated",
    "keras_attention.g2p",
]

PACKAGE_DIR = Path(keras_attention.__file__).parent
ROOT = PACKAGE_DIR.parent


# Added since, each deliberately.
ADDED_NAMES = {"decoders", "stepwise_models", "EnsembleDecoder", "ScheduledSamplingDecoder", "generated", "training"}


def test_the_public_set_is_the_one_before_plus_the_added_names():
    assert len(keras_attention.__all__) == len(set(keras_attention.__all__)), "no name twice"
    public = set(keras_attention.__all__)
    assert PUBLIC_NAMES | ADDED_NAMES <= public, "a public name was removed"
    # Anything else comes from a subpackage's __all__ (a new mechanism is
    # registered there, in one place), never from a stray import.
    registered = set(keras_attention.layers.__all__) | set(keras_attention.decoders.__all__)
    assert public - PUBLIC_NAMES - ADDED_NAMES <= registered


def test_every_public_name_exists_and_is_the_subpackages_object():
    for name in keras_attention.__all__:
        assert hasattr(keras_attention, name), name
    from keras_attention import cells, decoders, layers

    for module in (layers, decoders):
        for name in module.__all__:
            assert getattr(keras_attention, name) is getattr(module, name), name
    for name in ("AttentionGRUCell", "AttentionLSTMCell", "AttentionWrapper"):
        assert getattr(keras_attention, name) is getattr(cells, name)


def test_layers_and_decoders_reach_the_top_level_through_their_all():
    # A mechanism is registered once, in layers/__init__.py: the top level
    # takes every name of layers.__all__ (and decoders.__all__).
    from keras_attention import decoders, layers

    assert set(layers.__all__) | set(decoders.__all__) <= set(keras_attention.__all__)


@pytest.mark.parametrize("name", SUBPACKAGES)
def test_each_subpackage_all_names_exist(name):
    module = importlib.import_module(name)
    assert module.__all__, name
    assert len(module.__all__) == len(set(module.__all__)), name
    missing = [entry for entry in module.__all__ if not hasattr(module, entry)]
    assert missing == []


def test_every_subpackage_is_listed():
    packages = {".".join(path.relative_to(ROOT).parts[:-1]) for path in PACKAGE_DIR.glob("*/__init__.py")}
    assert packages <= set(SUBPACKAGES)


def _is_private(part):
    return part.startswith("_") and not part.startswith("__")


def _package_of(module):
    """The package a module belongs to (a package belongs to itself)."""
    path = ROOT.joinpath(*module.split("."))
    return module if path.is_dir() else module.rpartition(".")[0]


def _is_module(dotted):
    path = ROOT.joinpath(*dotted.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def _crossing(importer, dotted):
    """Why `importer` may not use `dotted` (a keras_attention name), or None if it may.

    A private module (`keras_attention._checks`, `keras_attention.decoding._loop`)
    serves the package that holds it and that package's subpackages; a private
    name inside a module (`keras_attention.ops._helper`) serves its own
    package only.
    """
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not _is_private(part):
            continue
        holder = ".".join(parts[:i])
        if not _is_module(holder):
            return None  # an attribute of an object (a method), not a module's name
        here = _package_of(importer)
        if _is_module(f"{holder}.{part}"):
            owner = _package_of(holder)
            allowed = here == owner or here.startswith(owner + ".")
        else:
            allowed = here == _package_of(holder)
        if not allowed:
            return f"{importer} uses {'.'.join(parts[: i + 1])}"
    return None


def _uses(module, tree):
    """Every keras_attention name `module` imports or reaches through an imported module."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("keras_attention"):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                yield f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("keras_attention"):
                    names[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname else "keras_attention"
                    yield alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = []
            while isinstance(node, ast.Attribute):
                chain.append(node.attr)
                node = node.value
            if isinstance(node, ast.Name) and node.id in names:
                yield ".".join([names[node.id], *reversed(chain)])


def test_no_private_name_crosses_a_package_boundary():
    crossings = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for dotted in _uses(module, ast.parse(path.read_text())):
            reason = _crossing(module, dotted)
            if reason:
                crossings.append(reason)
    assert crossings == []


def test_the_boundary_check_sees_a_crossing():
    # The check above must be able to fail.
    assert _crossing("keras_attention.cells.base", "keras_attention.decoding._loop.NEG_INF")
    assert _crossing("keras_attention.cells.wrapper", "keras_attention.ops._helper")
    assert _crossing("keras_attention.layers.hard", "keras_attention.ops._helper")
    assert _crossing("keras_attention.decoding.beams", "keras_attention.decoding._loop.NEG_INF") is None
    assert _crossing("keras_attention.cells.base", "keras_attention._checks.static_shape") is None
    assert _crossing("keras_attention.cells.base", "keras_attention._checks._is_real")
    assert _crossing("keras_attention.export.exporter", "keras_attention.export.directories._check_target") is None
    assert importlib.import_module("keras_attention.decoding").NEG_INF < -1e37
