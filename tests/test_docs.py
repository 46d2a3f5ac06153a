"""The documentation's code runs: README blocks and every public class's example."""

import inspect
import re
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_attention

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_CLASSES = [
    getattr(keras_attention, name)
    for name in keras_attention.__all__
    if inspect.isclass(getattr(keras_attention, name)) and name not in ("AttentionLayer", "BaseAttention")
]


def _python_blocks(text):
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.mark.parametrize("cls", PUBLIC_CLASSES, ids=lambda c: c.__name__)
def test_docstring_has_formula_paper_shapes_and_a_running_example(cls):
    doc = inspect.getdoc(cls)
    for section in ("Paper:", "Shapes:", "Example:"):
        assert section in doc, f"{cls.__name__} docstring lacks {section!r}"
    assert "arXiv:" in doc
    (example,) = _python_blocks(doc)
    exec(
        compile(example, f"<{cls.__name__} example>", "exec"),
        {"np": np, "keras": keras, "keras_attention": keras_attention},
    )


@pytest.mark.parametrize(
    "function",
    [
        keras_attention.masked_softmax,
        keras_attention.sequence_mask,
        keras_attention.ops.safe_cumprod,
        keras_attention.plot_attention,
        keras_attention.text.Vocabulary,
        keras_attention.batching.LengthBucketedBatches,
        keras_attention.generated.GeneratedBatches,
        keras_attention.evaluation.error_rates,
        keras_attention.evaluation.sequence_log_likelihoods,
        keras_attention.decoding.constrained_step,
        keras_attention.decoding.relative_max_lengths,
        keras_attention.decoding.top_p_filter,
        keras_attention.decoding.hashed_uniform,
        keras_attention.decoding.get,
        keras_attention.decoding.GreedySearch,
        keras_attention.decoding.SamplingSearch,
        keras_attention.decoding.BeamSearch,
        keras_attention.decoding.MinPSampling,
        keras_attention.decoding.min_p.min_p_filter,
    ],
    ids=lambda f: f.__name__,
)
def test_function_examples_run(function):
    (example,) = _python_blocks(inspect.getdoc(function))
    exec(
        compile(example, f"<{function.__name__} example>", "exec"),
        {"np": np, "keras": keras, "keras_attention": keras_attention},
    )


def test_readme_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in _python_blocks((ROOT / "README.md").read_text()) if "import keras_attention" in b]
    assert blocks
    for block in blocks:
        exec(compile(block, "<README>", "exec"), {})
    assert (tmp_path / "model.keras").exists() and (tmp_path / "model.onnx").exists()
