"""The export format registry: a format added from outside the library (this
file alone registers it) is written, verified and placed by `export_model`
like the built-in ones; unknown names are refused with the known ones."""

import importlib.metadata
import inspect
import json
import re
import warnings

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.export import ExportError, export_model, formats, support
from keras_attention.export import cli as export_cli
from tests.layer_cases import randomize_model

pytestmark = pytest.mark.any_backend

KERAS_FILE = "keras_file"
# The built-in formats: the two written by default (FORMATS), then those written when asked for.
BUILT_IN_FORMATS = ("saved_model", "onnx", "openvino", "litert")
# Beside the toy format, a built-in one this backend writes for a masked layer model (support.py).
BUILT_IN = ["onnx"] if keras.backend.backend() == "tensorflow" else []


def _model():
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    memory = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    pooled = ka.AttentionPooling(6)(memory)
    model = keras.Model(
        tokens, [keras.layers.Dense(3, name="logits")(pooled), keras.layers.Dense(2, name="aux")(pooled)]
    )
    randomize_model(model, np.random.default_rng(3))
    return model


def write_keras_files(context):
    """A toy format: each signature's model as `<signature>.keras`."""
    paths = {}
    for signature in context.signatures:
        name = f"{signature.name}.keras"
        signature.model.save(context.staging / name)
        paths[signature.name] = context.final_path(name)
    return paths


def keras_file_runner(context, shift=0.0):
    loaded = {s.name: keras.saving.load_model(context.staging / f"{s.name}.keras") for s in context.signatures}

    def run(signature, arrays):
        outputs = loaded[signature.name](keras.tree.pack_sequence_as(signature.structure, list(arrays)))
        return {
            name: keras.ops.convert_to_numpy(value) + shift
            for name, value in zip(signature.output_names, keras.tree.flatten(outputs))
        }

    return run


# What an installed package's entry point names (test_an_installed_plugin_...).
KERAS_FILE_FORMAT = formats.ExportFormat(KERAS_FILE, write_keras_files, keras_file_runner)


@pytest.fixture
def keras_file_format():
    registered = formats.register_format(KERAS_FILE, write_keras_files, keras_file_runner)
    yield registered
    formats.unregister_format(KERAS_FILE)
    assert formats.registered_formats() == BUILT_IN_FORMATS


def test_a_format_registered_outside_the_library_is_written_and_verified(tmp_path, keras_file_format):
    model = _model()
    report = export_model(model, tmp_path / "export", formats=[KERAS_FILE, *BUILT_IN])
    directory = tmp_path / "export"
    written = ["model.onnx"] * bool(BUILT_IN) + ["report.json", "serving_default.keras"]
    assert sorted(p.name for p in directory.iterdir()) == written
    assert report.paths[KERAS_FILE] == {"serving_default": str(directory / "serving_default.keras")}
    # One row per output in each format, the toy format's exactly Keras's.
    rows = {(row.format, row.output): row for row in report.parity}
    assert set(rows) == {(f, o) for f in (KERAS_FILE, *BUILT_IN) for o in ("aux", "logits")}
    assert report.max_abs_diff(KERAS_FILE, "logits") == 0.0 and report.max_abs_diff(KERAS_FILE, "aux") == 0.0
    for format in BUILT_IN:
        assert 0.0 <= report.max_abs_diff(format, "logits") <= 1e-4
    # The written file is the model: same outputs on a fresh batch.
    tokens = np.array([[3, 4, 5, 0], [7, 0, 0, 0]], "int32")
    reloaded = keras.saving.load_model(directory / "serving_default.keras")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(reloaded(tokens)[0]), keras.ops.convert_to_numpy(model(tokens)[0]), atol=1e-6
    )
    saved = json.loads((directory / "report.json").read_text())
    assert saved["formats"] == [KERAS_FILE, *BUILT_IN] and KERAS_FILE in saved["timings_s"]


def test_a_registered_format_that_does_not_match_keras_leaves_nothing(tmp_path, keras_file_format):
    formats.register_format(KERAS_FILE, write_keras_files, lambda c: keras_file_runner(c, shift=0.25), replace=True)
    with pytest.raises(ExportError, match=r"keras_file signature 'serving_default' output 'logits': max \|diff\| 0.25"):
        export_model(_model(), tmp_path / "export", formats=[KERAS_FILE])
    assert list(tmp_path.iterdir()) == []


def test_a_writer_that_fails_halfway_leaves_nothing(tmp_path, keras_file_format):
    def half_written(context):
        (context.staging / "half.bin").write_bytes(b"\0" * 10)
        raise ExportError("the toy writer gave up")

    formats.register_format(KERAS_FILE, half_written, keras_file_runner, replace=True)
    with pytest.raises(ExportError, match="the toy writer gave up"):
        export_model(_model(), tmp_path / "out" / "export", formats=[*BUILT_IN, KERAS_FILE])
    assert list(tmp_path.iterdir()) == []


def test_unknown_and_repeated_names_are_refused_with_the_known_ones(tmp_path, keras_file_format):
    known = re.escape(str((*BUILT_IN_FORMATS, KERAS_FILE)))
    with pytest.raises(ValueError, match=rf"unknown export format 'tflite'; registered formats: {known}"):
        formats.get_format("tflite")
    with pytest.raises(ValueError, match=rf"non-empty selection of {known} .*; got \('tflite',\)"):
        export_model(_model(), tmp_path / "export", formats=["tflite"])
    with pytest.raises(ValueError, match=r"export format 'onnx' is already registered; pass replace=True"):
        formats.register_format("onnx", write_keras_files, keras_file_runner)
    with pytest.raises(ValueError, match=r"`runner` of format 'toy' must be callable; got 3"):
        formats.register_format("toy", write_keras_files, 3)
    with pytest.raises(ValueError, match=r"`name` must be an identifier such as 'onnx'; got 'a b'"):
        formats.register_format("a b", write_keras_files, keras_file_runner)
    with pytest.raises(ValueError, match=r"unknown export format 'toy'"):
        formats.unregister_format("toy")
    assert formats.registered_formats() == (*BUILT_IN_FORMATS, KERAS_FILE)
    assert list(tmp_path.iterdir()) == []


def test_the_backend_support_table_is_keyed_by_registered_names():
    named = {format for _, format in [*support._UNSUPPORTED, *support.REQUIREMENTS]}
    assert named and named <= set(formats.registered_formats())
    assert ka.export.FORMATS == formats.registered_formats()[:2] == ("saved_model", "onnx")


def test_the_registry_example_runs():
    (example,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(formats), re.S)
    exec(compile(example, "<formats example>", "exec"), {})
    assert formats.registered_formats() == BUILT_IN_FORMATS
    assert ka.export.register_format is formats.register_format


def test_the_example_runner_runs_the_written_file_not_the_exported_model(tmp_path):
    """A runner that loaded the weights into `signature.model` would agree with
    Keras whatever was written; the example's fresh copy notices a wrong file."""
    (example,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(formats), re.S)
    namespace = {}
    exec(compile(example, "<formats example>", "exec"), namespace)

    def write_wrong_weights(context):
        paths = namespace["write_weights"](context)
        for signature in context.signatures:
            weights = [w + 0.5 for w in signature.model.get_weights()]
            np.savez(context.staging / f"{signature.name}.weights.npz", *weights)
        return paths

    formats.register_format("npz_weights", write_wrong_weights, namespace["run_weights"])
    model = _model()
    before = [w.copy() for w in model.get_weights()]
    try:
        with pytest.raises(ExportError, match=r"npz_weights signature 'serving_default' output '(logits|aux)'"):
            export_model(model, tmp_path / "export", formats=["npz_weights"])
    finally:
        formats.unregister_format("npz_weights")
    for saved, now in zip(before, model.get_weights()):
        np.testing.assert_array_equal(saved, now)  # the exported model is not touched


def test_a_format_declares_the_options_it_reads(tmp_path):
    seen = []

    def write(context):
        seen.append(context.options)
        return write_keras_files(context)

    def check_opset(value):
        if value > 17:
            raise ValueError(f"`opset` of the toy format must be at most 17; got {value!r}.")
        return {"opset": value}

    formats.register_format(KERAS_FILE, write, keras_file_runner, options={"opset": check_opset})
    try:
        export_model(_model(), tmp_path / "a", formats=[KERAS_FILE], opset=15)
        assert seen == [{KERAS_FILE: {"opset": {"opset": 15}}}]
        with pytest.raises(ValueError, match=r"`opset` of the toy format must be at most 17; got 18"):
            export_model(_model(), tmp_path / "b", formats=[KERAS_FILE], opset=18)
        formats.register_format(KERAS_FILE, write_keras_files, keras_file_runner, replace=True)
        # An option no requested format reads is refused unless left at its default.
        with pytest.raises(
            ValueError,
            match=r"`opset=15` is an option of the format\(s\) \['onnx', 'openvino'\], but `formats` is \['keras_file'\]",
        ):
            export_model(_model(), tmp_path / "c", formats=[KERAS_FILE], opset=15)
        with pytest.raises(ValueError, match=r"`options` of format 'toy' must be \{export_model option name"):
            formats.register_format("toy", write_keras_files, keras_file_runner, options={"opset": 3})
        export_model(_model(), tmp_path / "d", formats=[KERAS_FILE])
    finally:
        formats.unregister_format(KERAS_FILE)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "d"]


@pytest.fixture
def installed(monkeypatch):
    """`installed(*entry_points)`: the registry as a new process sees it with
    packages declaring those entry points installed."""
    original = importlib.metadata.entry_points

    def install(*entries):
        def entry_points(**selection):
            if selection.get("group") == formats.ENTRY_POINT_GROUP:
                return list(entries)
            return original(**selection)

        monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)
        monkeypatch.setattr(formats, "_PLUGINS_READ", False)

    yield install
    for name in set(formats.registered_formats()) - set(BUILT_IN_FORMATS):
        formats.unregister_format(name)


def test_an_installed_plugin_is_registered_and_the_command_offers_it(tmp_path, installed):
    def entry(name, value):
        return importlib.metadata.EntryPoint(name=name, value=value, group=formats.ENTRY_POINT_GROUP)

    installed(
        entry(KERAS_FILE, "tests.test_export_formats:KERAS_FILE_FORMAT"),
        entry("missing", "tests.test_export_formats:NO_SUCH_FORMAT"),
        entry("not_a_format", "tests.test_export_formats:KERAS_FILE"),
        entry("onnx", "tests.test_export_formats:KERAS_FILE_FORMAT"),
    )
    model_path = tmp_path / "model.keras"
    _model().save(model_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # The installed command's parser is the first to consult the registry.
        assert export_cli.main([str(model_path), str(tmp_path / "export"), "--formats", KERAS_FILE]) == 0
    messages = sorted(str(w.message) for w in caught if "export format plugin" in str(w.message))
    assert len(messages) == 3, messages
    assert messages[0].startswith(
        "export format plugin 'missing' (tests.test_export_formats:NO_SUCH_FORMAT) not registered: AttributeError"
    )
    assert messages[1].startswith(
        "export format plugin 'not_a_format' (tests.test_export_formats:KERAS_FILE) not registered: TypeError: it names 'keras_file', not a"
    )
    assert (
        messages[2]
        == "export format plugin 'onnx' (tests.test_export_formats:KERAS_FILE_FORMAT) not registered: the name is taken."
    )
    assert formats.registered_formats() == (*BUILT_IN_FORMATS, KERAS_FILE)
    assert formats.get_format(KERAS_FILE).writer is write_keras_files
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["report.json", "serving_default.keras"]
    saved = json.loads((tmp_path / "export" / "report.json").read_text())
    assert saved["formats"] == [KERAS_FILE] and saved["ok"] is True


def test_the_plugin_api_is_public_and_its_examples_run():
    assert {"ExportContext", "ExportFormat", "Signature", "get_format", "ENTRY_POINT_GROUP"} <= set(ka.export.__all__)
    assert ka.export.get_format("onnx").options.keys() == {"opset", "quantize"}
    assert ka.export.get_format("saved_model").options == {}
    for documented in (ka.export.ExportContext, ka.export.Signature):
        (example,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(documented), re.S)
        exec(compile(example, f"<{documented.__name__} example>", "exec"), {})
    assert formats.registered_formats() == BUILT_IN_FORMATS
