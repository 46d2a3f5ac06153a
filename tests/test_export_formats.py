"""The export format registry: a format added from outside the library (this
file alone registers it) is written, verified and placed by `export_model`
like the built-in ones; unknown names are refused with the known ones."""

import inspect
import json
import re

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.export import ExportError, export_model, formats, support
from tests.layer_cases import randomize_model

pytestmark = pytest.mark.any_backend

KERAS_FILE = "keras_file"
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


@pytest.fixture
def keras_file_format():
    registered = formats.register_format(KERAS_FILE, write_keras_files, keras_file_runner)
    yield registered
    formats.unregister_format(KERAS_FILE)
    assert formats.registered_formats() == ("saved_model", "onnx")


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
    with pytest.raises(
        ValueError, match=r"unknown export format 'tflite'; registered formats: \('saved_model', 'onnx', 'keras_file'\)"
    ):
        formats.get_format("tflite")
    with pytest.raises(
        ValueError, match=r"non-empty selection of \('saved_model', 'onnx', 'keras_file'\) .*; got \('tflite',\)"
    ):
        export_model(_model(), tmp_path / "export", formats=["tflite"])
    with pytest.raises(ValueError, match=r"export format 'onnx' is already registered; pass replace=True"):
        formats.register_format("onnx", write_keras_files, keras_file_runner)
    with pytest.raises(ValueError, match=r"`runner` of format 'toy' must be callable; got 3"):
        formats.register_format("toy", write_keras_files, 3)
    with pytest.raises(ValueError, match=r"`name` must be an identifier such as 'onnx'; got 'a b'"):
        formats.register_format("a b", write_keras_files, keras_file_runner)
    with pytest.raises(ValueError, match=r"unknown export format 'toy'"):
        formats.unregister_format("toy")
    assert formats.registered_formats() == ("saved_model", "onnx", KERAS_FILE)
    assert list(tmp_path.iterdir()) == []


def test_the_backend_support_table_is_keyed_by_registered_names():
    named = {format for _, format in [*support._UNSUPPORTED, *support.REQUIREMENTS]}
    assert named and named <= set(formats.registered_formats())
    assert ka.export.FORMATS == formats.registered_formats()[:2]


def test_the_registry_example_runs():
    (example,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(formats), re.S)
    exec(compile(example, "<formats example>", "exec"), {})
    assert formats.registered_formats() == ("saved_model", "onnx")
    assert ka.export.register_format is formats.register_format
