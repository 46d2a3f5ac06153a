"""OpenVINO: the exported ONNX graphs, decode loops inside, converted to
OpenVINO's IR and run by its CPU runtime, in agreement with Keras through
`export_model`'s verification (a layer model, greedy and beam decode loops,
run-time options), on fresh inputs and an empty batch; a graph its ONNX
reader cannot convert, and a missing OpenVINO, refused leaving nothing."""

import os
import re
import sys

import keras
import numpy as np
import pytest

openvino = pytest.importorskip(
    "openvino", reason="OpenVINO is not installed: pip install 'keras-attention-decoders[openvino]'"
)

import keras_attention as ka  # noqa: E402
from keras_attention.export import ExportError, export_model, openvino_format  # noqa: E402
from tests.export_models import additive, greedy, multi_head, sharpened_option_model  # noqa: E402
from tests.fixtures.backends.models import TARGET_VOCABULARY, _memory  # noqa: E402
from tests.test_runtime_options_export import CONSTRUCTOR, OPTIONS, VOCABULARY, keras_ids, sources  # noqa: E402

OUTPUTS = {
    "serving_default": ["logits"],
    "greedy": ["ids", "scores"],
    "beam": ["alignments", "finished", "ids", "lengths", "log_probs", "scores"],
}


def beam_with_options():
    """tests/test_runtime_options_export.py's beam decoder with every run-time
    option, Luong's general score in its cell (the additive score's decoders:
    `test_additive_attention_runs_in_openvino_...`)."""
    # With the parity table's constructor values, under which each option alone changes the ids.
    return sharpened_option_model(VOCABULARY, OPTIONS["beam"], 0, method="beam", beam_width=3, **CONSTRUCTOR["beam"])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A layer model, a greedy decoder and a beam decoder with run-time
    options as the signatures of one export, ONNX and OpenVINO (converted
    from the export's own ONNX files), verified on a padded batch and on one
    batch per option set to values that change the beam's ids."""
    beam_model, beam_decoder = beam_with_options()
    models = {"serving_default": multi_head(), "greedy": greedy(), "beam": beam_model}
    source = sources()
    padded = np.random.default_rng(5).integers(1, VOCABULARY, size=(2, 9)).astype("int32")
    padded[0, 3:] = 0
    batches = [{"source": padded}, {"source": source}]
    batches += [{"source": source, name: value} for name, value in OPTIONS["beam"].items()]
    directory = tmp_path_factory.mktemp("openvino") / "export"
    report = export_model(models, directory, formats=["onnx", "openvino"], sample_inputs=batches)
    return models, beam_decoder, batches, directory, report


def test_layer_and_decode_loop_models_agree_with_keras(exported):
    models, decoder, batches, directory, report = exported
    stems = {"serving_default": "model", "greedy": "greedy", "beam": "beam"}
    written = sorted(f"{stem}.{suffix}" for stem in stems.values() for suffix in ("bin", "onnx", "xml"))
    assert sorted(p.name for p in directory.iterdir()) == [*written, "report.json"]
    assert report.paths["openvino"] == {name: str(directory / f"{stem}.xml") for name, stem in stems.items()}
    assert all(len(report.batches[name]) == len(batches) for name in stems)
    # Each option batch changes Keras's ids: the beam's parity is not only the defaults'.
    default = keras_ids(models["beam"], decoder, batches[1])
    for batch in batches[2:]:
        assert not np.array_equal(keras_ids(models["beam"], decoder, batch), default), sorted(batch)
    rows = {(row.signature, row.output): row for row in report.parity if row.format == "openvino"}
    assert set(rows) == {(name, output) for name, outputs in OUTPUTS.items() for output in outputs}
    for (_, output), row in rows.items():
        assert row.ok, row
        if row.exact:  # ids, lengths and flags equal, in Keras's dtype
            assert row.max_abs_diff == 0.0 and row.dtype == ("bool" if output == "finished" else "int32")
        else:
            assert row.max_abs_diff <= 1e-4 and row.dtype == "float32"
    for name, stem in stems.items():
        graph = (directory / f"{stem}.xml").read_text()
        # The decode loops inside the IR; weights float32.
        assert ('type="Loop"' in graph) == (name != "serving_default"), name
        assert 'element_type="f16"' not in graph and 'element_type="f32"' in graph


def test_run_time_options_are_inputs_of_the_ir(exported):
    """Not folded into constants: fed all at once they give Keras's ids, fed
    empty the defaults' ids."""
    models, decoder, batches, directory, report = exported
    assert any(note.startswith("OpenVINO 'beam': ['") for note in report.notes)
    compiled = openvino_format.compile_ir(directory / "beam.xml")
    assert {name for port in compiled.inputs for name in port.get_names()} == {"source", *OPTIONS["beam"]}
    source = batches[1]["source"]
    everything = {"source": source, **OPTIONS["beam"]}
    feeds = {name: np.asarray(everything[name], _dtype(compiled, name)).reshape(-1) for name in OPTIONS["beam"]}
    got = openvino_format.run_compiled(compiled, {"source": source, **feeds})["ids"]
    np.testing.assert_array_equal(got, keras_ids(models["beam"], decoder, everything))
    defaults = {name: np.zeros(0, _dtype(compiled, name)) for name in OPTIONS["beam"]}
    default = openvino_format.run_compiled(compiled, {"source": source, **defaults})["ids"]
    np.testing.assert_array_equal(default, keras_ids(models["beam"], decoder, {"source": source}))
    assert not np.array_equal(got, default)


@pytest.mark.parametrize("batch", [5, 0])
def test_the_ir_decodes_fresh_inputs_as_keras_does(exported, batch):
    models, decoder, _, directory, _ = exported
    ids = np.random.default_rng(batch).integers(1, VOCABULARY, size=(batch, 7)).astype("int32")
    if batch:
        ids[1, 4:] = 0
    for name, steps in (("greedy", 6), ("beam", 8)):
        compiled = openvino_format.compile_ir(directory / f"{name}.xml")
        options = [port.get_any_name() for port in compiled.inputs if port.get_any_name() != "source"]
        feeds = {"source": ids, **{option: np.zeros(0, _dtype(compiled, option)) for option in options}}
        got = openvino_format.run_compiled(compiled, feeds)
        keras_feeds = {"source": ids, **dict.fromkeys(options)} if options else ids
        want = {k: keras.ops.convert_to_numpy(v) for k, v in models[name](keras_feeds).items()}
        assert got.keys() == want.keys() == set(OUTPUTS[name])
        assert got["ids"].shape == want["ids"].shape == ((batch, 3, steps) if name == "beam" else (batch, steps))
        np.testing.assert_array_equal(got["ids"], want["ids"])
        np.testing.assert_allclose(got["scores"], want["scores"], atol=1e-4)


def test_without_the_onnx_format_its_file_is_written_for_the_conversion_only(tmp_path):
    inputs = keras.Input((3,), name="features")
    model = keras.Model(inputs, keras.layers.Dense(2, name="scores")(inputs))
    report = export_model(model, tmp_path / "export", formats=["openvino"], opset=15)
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == ["model.bin", "model.xml", "report.json"]
    assert report.ok and 0 <= report.max_abs_diff("openvino", "scores") <= 1e-6


def _dtype(compiled, name):
    (port,) = [port for port in compiled.inputs if name in port.get_names()]
    return port.get_element_type().to_dtype()


def test_a_graph_the_onnx_reader_cannot_convert_is_refused_leaving_nothing(tmp_path, monkeypatch):
    """OpenVINO 2026.4's default ONNX reader refuses tf2onnx's loops (the
    module says why); the writer's reader is swapped for it here."""
    before = os.environ.get(openvino_format.READER[0])
    monkeypatch.setattr(openvino_format, "READER", (openvino_format.READER[0], "1"))
    with pytest.raises(ExportError) as caught:
        export_model(additive(), tmp_path / "out" / "export", formats=["openvino"])
    message = str(caught.value)
    assert message.startswith("signature 'serving_default': OpenVINO ")
    assert "ONNX reader cannot convert the operation(s) Loop-17 (" in message
    assert "Serve the ONNX file with onnxruntime instead (formats=['onnx']" in message
    assert message.endswith("Nothing was written.")
    assert list(tmp_path.iterdir()) == []
    assert os.environ.get(openvino_format.READER[0]) == before


class _EinsumScore(keras.layers.Layer):
    """The additive score as the library once wrote it, `einsum("bqvu,u->bqv")`:
    TensorFlow writes it as reshapes around a matmul, and OpenVINO's CPU runtime
    mis-shapes one of them (the library now writes `bqvu,uo->bqvo`)."""

    def build(self, query_shape, value_shape=None):
        self.vector = self.add_weight(shape=(query_shape[-1],), initializer="random_normal")

    def call(self, query, value):
        hidden = keras.ops.tanh(keras.ops.expand_dims(query, 2) + keras.ops.expand_dims(value, 1))
        return keras.ops.einsum("bqvu,u->bqv", hidden, self.vector)


def test_a_graph_the_runtime_fails_on_is_refused_leaving_nothing(tmp_path):
    """The graph converts, but OpenVINO's CPU runtime fails on it (a Reshape is
    given (50, 1) values for a (1, 2, 5, 1) pattern); onnxruntime runs the same
    ONNX file."""
    query = keras.Input((None, 4), name="query")
    value = keras.Input((None, 4), name="value")
    model = keras.Model([query, value], _EinsumScore()(query, value))
    with pytest.raises(ExportError) as caught:
        export_model(model, tmp_path / "export", formats=["openvino"])
    message = str(caught.value)
    assert re.match(
        r"signature 'serving_default': OpenVINO's CPU runtime fails on a verification batch of shapes "
        r"\{'query': \[2, 5, 4\], 'value': \[2, 5, 4\]\} \(.*Reshape",
        message,
    ), message
    assert "Serve the ONNX file with onnxruntime instead (formats=['onnx']" in message
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("method", [None, "greedy", "beam"], ids=["layer", "greedy", "beam"])
def test_additive_attention_runs_in_openvino_in_a_layer_and_in_decode_loops(tmp_path, method):
    """Additive (Bahdanau) attention, alone and in a decoder's cell: OpenVINO
    agrees with Keras (export_model's verification: ids exact, floats to
    1e-4) on the sample batches and on fresh random ones, an empty batch
    among them."""
    if method is None:
        model = additive()
    else:
        source = keras.Input((None,), dtype="int32", name="source")
        decoded = ka.InferenceDecoder(
            ka.AttentionGRUCell(8, ka.AdditiveAttention(6)),
            keras.layers.Embedding(TARGET_VOCABULARY, 5),
            keras.layers.Dense(TARGET_VOCABULARY),
            1,
            2,
            6,
            method=method,
            beam_width=3,
        )(_memory(source))
        model = keras.Model(source, decoded)
    report = export_model(model, tmp_path / "export", formats=["openvino"])
    assert report.ok and (tmp_path / "export" / "model.xml").is_file()
    compared = {row.output: row.max_abs_diff for row in report.parity if row.format == "openvino"}
    assert set(compared) == ({"scores"} if method is None else set(model.output))
    for output, difference in compared.items():
        assert difference == 0 if output in ("ids", "lengths", "finished") else difference <= 1e-4, output


def test_without_openvino_the_install_line_is_named_leaving_nothing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` raises ImportError
    inputs = keras.Input((3,), name="features")
    model = keras.Model(inputs, keras.layers.Dense(2, name="scores")(inputs))
    with pytest.raises(ExportError, match=r"format 'openvino' needs OpenVINO \(not installed\): pip install "):
        export_model(model, tmp_path / "export", formats=["saved_model", "openvino"])
    assert list(tmp_path.iterdir()) == []
    assert openvino_format.INSTALL == "pip install 'keras-attention-decoders[openvino]'"
