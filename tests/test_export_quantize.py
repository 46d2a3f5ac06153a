"""int8 export: the quantized ONNX copy, its measured distance from Keras, serving it, and bad options."""

import json

import keras
import numpy as np
import onnx
import onnxruntime
import pytest

import keras_attention as ka
from keras_attention.export import cli as export_cli
from keras_attention.export import export_model, run_onnx, serve_cli
from tests.layer_cases import randomize_model

UNITS_IN, UNITS_OUT = 64, 48


def op_types(path):
    found = set()

    def walk(graph):
        for node in graph.node:
            found.add(node.op_type)
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g)

    walk(onnx.load(str(path)).graph)
    return found


def dense_model():
    keras.utils.set_random_seed(3)
    features = keras.Input((UNITS_IN,), name="features")
    return keras.Model(features, keras.layers.Dense(UNITS_OUT, name="projected")(features))


def quantization_bound(x, weights):
    """The largest |error| of x @ W when every activation is rounded to a
    step of the whole tensor's uint8 range and every weight to its column's
    int8 step: sum_k |x_k| dw_j / 2 + |W_kj| dx / 2 + dx dw_j / 4."""
    dx = (max(x.max(), 0.0) - min(x.min(), 0.0)) / 255.0
    dw = np.abs(weights).max(axis=0) / 127.0 * 1.01  # 1% for the quantizer's own range convention
    return (
        np.abs(x) @ (np.ones_like(weights) * dw / 2) + np.abs(weights).sum(0) * dx / 2 + weights.shape[0] * dx * dw / 4
    )


@pytest.fixture(scope="module")
def dense_export(tmp_path_factory):
    model = dense_model()
    x = np.random.default_rng(0).normal(size=(6, UNITS_IN)).astype("float32")
    directory = tmp_path_factory.mktemp("dense") / "export"
    report = export_model(model, directory, formats=["onnx"], sample_inputs=[{"features": x}], quantize="int8")
    return dict(model=model, x=x, directory=directory, report=report)


def test_int8_file_is_written_beside_the_float_one_with_quantized_products(dense_export):
    directory, report = dense_export["directory"], dense_export["report"]
    assert sorted(p.name for p in directory.glob("*.onnx")) == ["model.int8.onnx", "model.onnx"]
    entry = report.quantized["serving_default"]
    assert entry["path"] == str(directory / "model.int8.onnx")
    assert entry["bytes"] == (directory / "model.int8.onnx").stat().st_size
    assert entry["float32_bytes"] == (directory / "model.onnx").stat().st_size
    # 64 x 48 float32 weights become int8: the file shrinks to well under half.
    assert entry["bytes"] < 0.45 * entry["float32_bytes"]
    assert "MatMulInteger" in op_types(directory / "model.int8.onnx") or "DynamicQuantizeMatMul" in op_types(
        directory / "model.int8.onnx"
    )
    assert not {"MatMulInteger", "DynamicQuantizeLinear"} & op_types(directory / "model.onnx")
    # No loop here: every product is covered.
    assert entry["int8_products"] >= 1 and entry["float32_products_in_loops"] == 0
    # The float32 file is held to the parity tolerance as ever; the int8 one is not in the parity rows.
    assert report.ok and {row.format for row in report.parity} == {"onnx"}
    written = json.loads((directory / "report.json").read_text())
    assert written["quantized"]["serving_default"]["bytes"] == entry["bytes"]
    assert "int8 serving_default:" in report.table()


def test_int8_error_is_measured_and_within_the_rounding_bound(dense_export):
    model, x, directory, report = (dense_export[k] for k in ("model", "x", "directory", "report"))
    weights, bias = (np.asarray(w, np.float64) for w in model.get_layer("projected").get_weights())
    exact = x.astype(np.float64) @ weights + bias
    session = onnxruntime.InferenceSession(str(directory / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    int8 = session.run(None, {"features": x})[0]
    error = np.abs(int8 - exact)
    assert error.max() > 1e-5  # it really is quantized, not a float copy
    # On an x86-64 CPU without VNNI, signed weights broke this bound 8-fold
    # (saturating products; quantize.py): the bound holds on every CPU.
    assert np.all(error <= quantization_bound(x.astype(np.float64), weights) + 1e-5)
    recorded = report.quantized["serving_default"]["outputs"]["projected"]["max_abs_diff"]
    keras_output = np.asarray(model(x))
    np.testing.assert_allclose(recorded, np.abs(int8 - keras_output).max(), rtol=1e-6)
    served = run_onnx(directory, {"features": x}, precision="int8")["outputs"]["projected"]
    np.testing.assert_array_equal(served, int8)
    float_served = run_onnx(directory, {"features": x})["outputs"]["projected"]
    np.testing.assert_allclose(float_served, keras_output, atol=1e-5)


def test_decoder_ids_agreement_is_the_share_of_identical_rows(tmp_path):
    keras.utils.set_random_seed(7)
    vocabulary = 9
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.Dense(16, activation="tanh")(keras.layers.Embedding(vocabulary, 8, mask_zero=True)(source))
    cell = ka.AttentionGRUCell(16, ka.AdditiveAttention(8))
    embedding, output_layer = keras.layers.Embedding(vocabulary, 8), keras.layers.Dense(vocabulary, name="logits")
    greedy = keras.Model(
        source, ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, max_length=6, name="greedy")(memory)
    )
    randomize_model(greedy, np.random.default_rng(2), scale=1.0)
    rng = np.random.default_rng(4)
    batches = [{"source": rng.integers(1, vocabulary, size=(8, 5)).astype("int32")} for _ in range(2)]
    report = export_model(greedy, tmp_path / "export", formats=["onnx"], sample_inputs=batches, quantize="int8")
    identical = total = 0
    for batch in batches:
        want = np.asarray(greedy.predict(batch["source"], verbose=0)["ids"])
        got = run_onnx(tmp_path / "export", batch, precision="int8")["outputs"]["ids"]
        width = max(want.shape[1], got.shape[1])
        want, got = (np.pad(a, ((0, 0), (0, width - a.shape[1])), constant_values=-1) for a in (want, got))
        identical += int(np.all(want == got, axis=1).sum())
        total += len(want)
    measured = report.quantized["serving_default"]["outputs"]
    assert measured["ids"]["rows_identical"] == pytest.approx(identical / total)
    assert set(measured) == {"ids", "alignments", "lengths", "scores", "finished"}
    # What int8 covers (issue 34 item 12): the decode loop's products stay
    # float32 -- as many as in the float32 file's loop -- and are counted.
    entry = report.quantized["serving_default"]
    loop_products = {}
    for name in ("model.onnx", "model.int8.onnx"):
        loop = next(node for node in onnx.load(str(tmp_path / "export" / name)).graph.node if node.op_type == "Loop")
        body = next(a.g for a in loop.attribute if a.name == "body")
        loop_products[name] = sum(node.op_type in ("MatMul", "Gemm") for node in body.node)
    assert entry["float32_products_in_loops"] == loop_products["model.int8.onnx"] == loop_products["model.onnx"] > 0
    assert entry["int8_products"] > 0
    assert f"{entry['float32_products_in_loops']} float32 in loops" in report.table()
    assert 0 <= measured["finished"]["rows_identical"] <= 1


def test_bad_quantize_and_precision_values_are_named(dense_export, tmp_path):
    model = dense_export["model"]
    with pytest.raises(ValueError, match=r"`quantize` must be None or one of \['int8'\]; got 'int4'"):
        export_model(model, tmp_path / "a", quantize="int4")
    with pytest.raises(
        ValueError,
        match=r"`quantize='int8'` is an option of the format\(s\) \['onnx', 'litert'\], but `formats` is \['saved_model'\]",
    ):
        export_model(model, tmp_path / "b", formats=["saved_model"], quantize="int8")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    with pytest.raises(ValueError, match=r"`precision` must be one of \['float32', 'int8'\]; got 'fp16'"):
        run_onnx(dense_export["directory"], {"features": dense_export["x"]}, precision="fp16")
    plain = tmp_path / "plain"
    export_model(model, plain, formats=["onnx"])
    with pytest.raises(FileNotFoundError, match=r"model.int8.onnx.*precision 'int8' \(export with quantize='int8'"):
        run_onnx(plain, {"features": dense_export["x"]}, precision="int8")


def test_export_and_serve_commands_take_the_int8_flags(dense_export, tmp_path, capsys):
    keras_file = tmp_path / "model.keras"
    dense_export["model"].save(keras_file)
    out = tmp_path / "out"
    assert export_cli.main([str(keras_file), str(out), "--formats", "onnx", "--quantize", "int8"]) == 0
    assert "int8 serving_default:" in capsys.readouterr().out
    inputs = json.dumps({"features": dense_export["x"][:2].tolist()})
    assert serve_cli.main([str(out), "--inputs", inputs, "--precision", "int8", "--runs", "0", "--json"]) == 0
    served = np.asarray(json.loads(capsys.readouterr().out)["outputs"]["projected"])
    session = onnxruntime.InferenceSession(str(out / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(served, session.run(None, {"features": dense_export["x"][:2]})[0], rtol=1e-6)
    plain = tmp_path / "plain"
    assert export_cli.main([str(keras_file), str(plain), "--formats", "onnx"]) == 0
    capsys.readouterr()
    assert serve_cli.main([str(plain), "--inputs", inputs, "--precision", "int8", "--runs", "0"]) == 1
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith("error: no ONNX file") and "quantize='int8'" in error[0]
    with pytest.raises(SystemExit):
        export_cli.main([str(keras_file), str(tmp_path / "c"), "--quantize", "int4"])
    assert "argument --quantize: invalid choice: 'int4'" in capsys.readouterr().err


def test_identical_rows_are_counted_on_empty_batches_too():
    from keras_attention.export.quantize import _rows_identical

    assert _rows_identical(np.zeros((0, 6), "int32"), np.zeros((0, 6), "int32")).shape == (0,)
    got, want = np.array([[[1, 2], [3, 4]], [[1, 2], [3, 5]]]), np.array([[[1, 2], [3, 4]], [[1, 2], [3, 4]]])
    assert _rows_identical(got, want).tolist() == [True, False]
    assert _rows_identical(np.array([4, 5]), np.array([4, 6])).tolist() == [True, False]
    # Outputs of another length (a decode that ran more steps) differ on every row.
    assert _rows_identical(np.array([[1, 2, 3], [1, 2, 3]]), np.array([[1, 2], [1, 9]])).tolist() == [False, False]
