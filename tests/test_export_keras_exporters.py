"""export_model on JAX and PyTorch, through Keras's own exporters: what
export/support.py says is supported is written, checked against Keras by the
export itself, and checked here again on inputs of other shapes than the
export's own. TensorFlow's export is test_export.py's."""

import importlib.util
import json

import keras
import numpy as np
import pytest

import keras_attention as ka
from tests.export_models import additive, beam, greedy, multi_head, teacher_forced

pytestmark = pytest.mark.any_backend

BACKEND = keras.backend.backend()
ON_TORCH = pytest.mark.skipif(BACKEND != "torch", reason="PyTorch's ONNX exporter")
ON_JAX = pytest.mark.skipif(BACKEND != "jax", reason="JAX's exporters")
NEEDS_TENSORFLOW = pytest.mark.skipif(
    BACKEND == "jax" and importlib.util.find_spec("tensorflow") is None,
    reason="JAX's SavedModel export runs jax2tf, which needs TensorFlow beside JAX (too heavy for the jax extra): "
    "`.venv-jax/bin/pip install -c constraints.txt tensorflow==2.21.0`, then this module",
)
NEEDS_JAX2ONNX = pytest.mark.skipif(
    BACKEND == "jax" and importlib.util.find_spec("jax2onnx") is None,
    reason="Keras's JAX ONNX exporter is jax2onnx (too heavy for the jax extra): "
    "`.venv-jax/bin/pip install -c constraints.txt jax2onnx==0.17.1 onnx onnxruntime`, then this module",
)


def _inputs(model, batch, length, seed):
    """Random inputs of a shape the export never saw: floats, or ids right-padded with 0."""
    rng = np.random.default_rng(seed)
    arrays = []
    for tensor in model.inputs:
        if tensor.dtype == "int32":
            ids = rng.integers(1, 9, size=(batch, length)).astype("int32")
            ids[0, length // 2 :] = 0
            arrays.append(ids)
        else:
            arrays.append(rng.normal(size=(batch, length + len(arrays), tensor.shape[-1])).astype("float32"))
    return arrays


def _keras_outputs(model, arrays):
    outputs = model(arrays if len(arrays) > 1 else arrays[0], training=False)
    if isinstance(outputs, dict):
        return {name: keras.ops.convert_to_numpy(value) for name, value in outputs.items()}
    return {model.output_names[0]: keras.ops.convert_to_numpy(outputs)}


def _onnx_outputs(path, model, arrays):
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [t.name for t in model.inputs]
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(None, {t.name: a for t, a in zip(model.inputs, arrays)})))


def _assert_close(got, want, atol=1e-5):
    assert sorted(got) == sorted(want)
    for name, value in want.items():
        assert got[name].shape == value.shape, name
        np.testing.assert_allclose(got[name], value, atol=atol, rtol=0, err_msg=name)


@pytest.mark.parametrize("build", [additive, pytest.param(multi_head, marks=ON_TORCH)])
@NEEDS_JAX2ONNX
@pytest.mark.skipif(
    BACKEND == "tensorflow",
    reason="Keras's ONNX exporters of JAX and PyTorch; on TensorFlow, tf2onnx exports this model (test_export.py)",
)
def test_onnx_of_a_layer_model_equals_keras(build, tmp_path):
    model = build()
    report = ka.export_model(model, tmp_path / "export", formats=["onnx"])
    assert [row.format for row in report.parity] == ["onnx"] and all(row.ok for row in report.parity)
    assert report.parity[0].max_abs_diff <= 1e-4
    assert len(report.batches["serving_default"]) == len(ka.export.DEFAULT_SHAPES)
    onnx_path = tmp_path / "export" / "model.onnx"
    assert json.loads((tmp_path / "export" / "report.json").read_text())["paths"]["onnx"]["serving_default"] == str(
        onnx_path
    )
    for batch, length, seed in [(4, 6, 1), (1, 11, 2)]:
        arrays = _inputs(model, batch, length, seed)
        _assert_close(_onnx_outputs(onnx_path, model, arrays), _keras_outputs(model, arrays))


@ON_TORCH
def test_torch_onnx_records_its_backend_and_names_dynamic_axes(tmp_path):
    import onnx

    ka.export_model(multi_head(), tmp_path / "export", formats=["onnx"])
    proto = onnx.load(str(tmp_path / "export" / "model.onnx"))
    properties = {p.key: p.value for p in proto.metadata_props}
    assert properties["keras.backend"] == "torch" and properties["keras_attention.signature"] == "serving_default"
    assert [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim] == ["batch", "source_length"]
    assert [o.name for o in proto.graph.output] == ["logits"]


@ON_TORCH
def test_torch_int8_copy_is_written_and_measured(tmp_path):
    report = ka.export_model(additive(), tmp_path / "export", formats=["onnx"], quantize="int8")
    measured = report.quantized["serving_default"]
    assert (tmp_path / "export" / "model.int8.onnx").is_file()
    assert 0 < measured["outputs"]["scores"]["max_abs_diff"] < 0.1


@ON_TORCH
def test_a_mismatch_with_keras_is_an_error_and_writes_nothing(tmp_path):
    # atol=0: float32 ONNX differs from Keras by rounding, so the check must trip.
    with pytest.raises(ka.export.ExportError, match=r"export does not match Keras: onnx signature 'serving_default'"):
        ka.export_model(additive(), tmp_path / "export", formats=["onnx"], atol=0.0)
    assert list(tmp_path.iterdir()) == []


@ON_JAX
@NEEDS_TENSORFLOW
@pytest.mark.parametrize("build", [additive, multi_head, teacher_forced, greedy])
def test_jax_saved_model_equals_keras(build, tmp_path):
    import tensorflow as tf

    model = build()
    report = ka.export_model(model, tmp_path / "export", formats=["saved_model"], shapes=((2, 5), (3, 7)))
    assert report.parity and all(row.ok and row.format == "saved_model" for row in report.parity)
    serve = tf.saved_model.load(str(tmp_path / "export" / "saved_model")).signatures["serving_default"]
    for batch, length, seed in [(4, 6, 1), (1, 9, 2)]:
        arrays = _inputs(model, batch, length, seed)
        got = {k: v.numpy() for k, v in serve(**{t.name: tf.constant(a) for t, a in zip(model.inputs, arrays)}).items()}
        _assert_close(got, _keras_outputs(model, arrays))


@ON_JAX
@NEEDS_TENSORFLOW
def test_jax_saved_model_of_beam_search_is_refused_by_its_own_run(tmp_path):
    with pytest.raises(ka.export.ExportError, match=r"does not run in TensorFlow .*StableHLO newer than"):
        ka.export_model(beam(), tmp_path / "export", formats=["saved_model"], verify=False)
    assert list(tmp_path.iterdir()) == []


@ON_JAX
@NEEDS_JAX2ONNX
def test_jax_onnx_of_a_masked_model_names_what_jax2onnx_refused(tmp_path):
    with pytest.raises(
        ka.export.ExportError, match=r"Keras's ONNX exporter on 'jax' failed: .*'initial' is not supported"
    ):
        ka.export_model(multi_head(), tmp_path / "export", formats=["onnx"])
    assert list(tmp_path.iterdir()) == []
