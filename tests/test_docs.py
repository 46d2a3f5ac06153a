"""The documentation's code runs: README and docs/ blocks and every public class's example;
the README stays a front page whose headline numbers are the results files'."""

import inspect
import json
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
        keras_attention.training.build_optimizer,
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
        keras_attention.decoding.FilteredSampling,
        keras_attention.decoding.TypicalSampling,
        keras_attention.decoding.typical_sampling.typical_filter,
        keras_attention.decoding.EpsilonSampling,
        keras_attention.decoding.epsilon_sampling.epsilon_filter,
        keras_attention.decoding.EtaSampling,
        keras_attention.decoding.eta_sampling.eta_filter,
        keras_attention.decoding.DiverseBeamSearch,
        keras_attention.decoding.diverse_beam.select_by_group,
        keras_attention.decoding.RefillingBeamSearch,
        keras_attention.decoding.finished_pool.hypothesis_scores,
        keras_attention.decoding.processors.get,
        *keras_attention.decoding.processors.registered().values(),
    ],
    ids=lambda f: f.__name__,
)
def test_function_examples_run(function):
    (example,) = _python_blocks(inspect.getdoc(function))
    exec(
        compile(example, f"<{function.__name__} example>", "exec"),
        {"np": np, "keras": keras, "keras_attention": keras_attention},
    )


# The pages whose ```python blocks run here; the migration guide's run in
# tests/test_migration_guide.py, which checks what they compute. A block whose
# line before reads `<!-- not run: REASON -->` is shown, not run.
PAGES = sorted(path for path in (ROOT / "docs").rglob("*.md") if path.name != "migrating_from_tfa.md")
NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\n```python\n", re.S)
README_LINES_AT_MOST = 250


def _runnable_blocks(text):
    """The page's ```python blocks, less those marked not to run (each with its reason)."""
    skipped = [block for block in re.findall(r"<!-- not run: .+? -->\n```python\n(.*?)```", text, re.S)]
    assert len(skipped) == len(NOT_RUN.findall(text)), "a `not run` mark needs a reason"
    return [block for block in _python_blocks(text) if block not in skipped]


def test_readme_examples_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    blocks = [b for b in _python_blocks((ROOT / "README.md").read_text()) if "import keras_attention" in b]
    assert blocks
    for block in blocks:
        namespace = {}
        exec(compile(block, "<README>", "exec"), namespace)
    # The train-decode-export example: beams decoded, an export checked against Keras.
    assert namespace["translator"].predict(namespace["ids"][:2], verbose=0)["ids"].shape == (2, 3, 8)
    assert namespace["report"].ok and (tmp_path / "export" / "report.json").exists()


@pytest.mark.parametrize("page", [p for p in PAGES if _runnable_blocks(p.read_text())], ids=lambda p: p.name)
def test_page_examples_run(page, tmp_path, monkeypatch):
    """A page's blocks run in order in one namespace (a later block may use an
    earlier one's names); a block the README already runs is not run twice."""
    monkeypatch.chdir(tmp_path)
    readme_blocks = set(_python_blocks((ROOT / "README.md").read_text()))
    namespace = {}
    # A page may register a processor or strategy of its own: it is forgotten
    # afterwards, so that the tests that walk the registries see the library's.
    registries = (keras_attention.decoding.processors, keras_attention.decoding.strategies)
    before = [set(registry.registered()) for registry in registries]
    try:
        for block in _runnable_blocks(page.read_text()):
            if block not in readme_blocks:
                exec(compile(block, f"<{page.relative_to(ROOT)}>", "exec"), namespace)
    finally:
        for registry, names in zip(registries, before):
            for name in set(registry.registered()) - names:
                registry.unregister(name)


def test_readme_is_a_front_page():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_LINES_AT_MOST, f"README.md has {len(lines)} lines; the details belong in docs/"
    # Every layer and decoder class is on the front page's catalogue, linked to its page.
    classes = {name for name in keras_attention.__all__ if inspect.isclass(getattr(keras_attention, name))}
    catalogue = {line[len("- [`") :].split("`")[0] for line in lines if line.startswith("- [`")}
    assert classes - catalogue <= {"AttentionLayer", "BaseAttention", "SequenceLoss"}  # one line per class


def _headline_results():
    """The README's headline results, from the committed results files."""
    read = lambda name: json.loads((ROOT / "results" / name).read_text())  # noqa: E731
    cmudict, sigmorphon, pointer = (
        read("g2p_cmudict.json"),
        read("g2p_sigmorphon2021.json"),
        read("pointer_networks.json"),
    )
    ours, peer = cmudict["ours"], cmudict["phonetisaurus"]
    hulls = {n: pointer["tasks"][f"hull{n}"]["test"][f"n{n}"]["beam"]["sequence_accuracy"] for n in (5, 10)}
    medium = set(sigmorphon["languages"]) - {"eng_us"}  # eng_us is scored apart
    paper = {n: pointer["paper_hull_accuracy"][f"n{n}"]["Ptr-Net (trained n=5..50)"] for n in (5, 10)}
    return "\n".join(
        [
            f"- Grapheme-to-phoneme on CMUdict: test WER **{ours['wer']:.2f}%**, PER **{ours['per']:.2f}%**, "
            f"against Phonetisaurus's {peer['wer']:.2f}% / {peer['per']:.2f}% on the same split in the same run "
            f"({ours['train_seconds'] / 60:.0f} minutes of training).",
            f"- SIGMORPHON 2021 task 1, medium languages: macro test WER **{sigmorphon['macro_test_wer']:.2f}** "
            f"against the published baseline's {sigmorphon['baseline_macro_test_wer']:.2f}, better on "
            f"{sigmorphon['better_than_baseline']} of the {len(medium)} languages.",
            f"- Pointer networks, convex hulls: **{hulls[5]:.1%}** exact for n = 5 and **{hulls[10]:.1%}** for "
            f"n = 10 (beam {pointer['beam_width']}), against the paper's {paper[5]:.1%} and {paper[10]:.1%}.",
        ]
    )


def test_readme_headline_results_are_the_results_files():
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- headline-results:begin -->\n")[1].split("\n<!-- headline-results:end -->")[0]
    assert block == _headline_results()


def test_every_mechanism_has_its_section_and_every_decoder_its_row():
    layers_page = (ROOT / "docs" / "layers.md").read_text()
    headings = "\n".join(re.findall(r"^### .*$", layers_page, re.M))
    mechanisms = set(keras_attention.layers.__all__) - {"AttentionLayer", "BaseAttention"}
    # The Transformer's layers and positions have their own page, a row or an item each.
    transformer_page = (ROOT / "docs" / "transformer.md").read_text()
    listed = "\n".join(re.findall(r"^(?:\| |- )`.*$", transformer_page, re.M))
    headings += "\n" + "\n".join(f"`{name}(" for name in re.findall(r"`(\w+)[`(]", listed))
    assert {name for name in mechanisms if name not in headings and f"`{name}(" not in headings} <= {
        "BahdanauMonotonicAttention",
        "LuongMonotonicAttention",  # one section, "Monotonic attention", holds both
    }
    assert "`BahdanauMonotonicAttention(units, ...)` and `LuongMonotonicAttention(...)`" in layers_page
    decoders_page = (ROOT / "docs" / "decoders.md").read_text()
    rows = "\n".join(line for line in decoders_page.splitlines() if line.startswith("| `"))
    # The cells' base class and its memory holder are the API reference's alone.
    cells = set(keras_attention.cells.__all__) - {"AttentionCell", "AttentionMemory"}
    decoders = {n for n in keras_attention.decoders.__all__ if inspect.isclass(getattr(keras_attention.decoders, n))}
    assert {name for name in cells | decoders if f"`{name}(" not in rows} == set()


# Commands the pages and the results files show must run as shown: examples/,
# benchmarks/ and tools/ are packages run with `python -m` from the root, and
# the export/ scripts are the installed keras-attention-export and -serve.
REMOVED_COMMANDS = re.compile(
    r"python3? (?:examples|benchmarks|tools)/\S*\.py|export/(?:export_model\.py|serve_onnx\.py|README\.md)"
)
OUR_PACKAGES = ("examples", "benchmarks", "tools", "keras_attention")


def _module_exists(module):
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def _recorded_commands(value):
    """Every `command` string of a results document, however deep."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "command" and isinstance(item, str):
                yield item
            else:
                yield from _recorded_commands(item)
    elif isinstance(value, list):
        for item in value:
            yield from _recorded_commands(item)


def test_pages_show_commands_that_run():
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *PAGES]
    for page in pages:
        text = page.read_text()
        assert not REMOVED_COMMANDS.findall(text), f"{page.relative_to(ROOT)} names a removed path"
        for module in re.findall(r"python3? -m ([\w.<>]+)", text):
            placeholder = "<" in module or any(part.isupper() for part in module.split("."))  # examples.NAME
            if module.split(".")[0] in OUR_PACKAGES and not placeholder:
                assert _module_exists(module), f"{page.relative_to(ROOT)}: `python -m {module}` has no module"


def test_recorded_commands_run_as_recorded():
    documents = [*sorted((ROOT / "results").glob("*.json")), ROOT / "benchmarks" / "results.json"]
    commands = [(d.name, c) for d in documents for c in _recorded_commands(json.loads(d.read_text()))]
    assert len(commands) >= len(documents)  # every document records its command
    for name, command in commands:
        assert command.startswith(("python -m ", "make ")), f"{name}: {command!r}"
        if command.startswith("python -m "):
            assert _module_exists(command.split()[2]), f"{name}: {command!r} names no module"
