"""Which backend exports which model to which format
(`keras_attention.export.support`): the models are classified, and every
unsupported combination is refused before anything is written, with an error
that names the backend, the format, the model, why, and the way out. The
table is checked on every backend; the refusals of this backend through
`export_model` itself. What is supported is exported and compared with Keras
in test_export_keras_exporters.py (JAX, PyTorch) and test_export.py (TensorFlow)."""

import importlib.util

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.export import support
from tests.export_models import additive, beam, greedy, multi_head, teacher_forced

pytestmark = pytest.mark.any_backend

WAY_OUT = r"KERAS_BACKEND=tensorflow keras-attention-export m\.keras OUT_DIR"
# (backend, format, kind) -> the reason's words; the rest is supported.
REFUSED = {
    ("jax", "onnx", "recurrent"): "jax2onnx, which does not convert the masked softmax",
    ("jax", "onnx", "decode_loop"): "needs tf2onnx's conversion of TensorFlow's while loop",
    ("torch", "saved_model", "layers"): "Keras writes SavedModels from TensorFlow and JAX graphs only",
    ("torch", "saved_model", "recurrent"): "Keras writes SavedModels from TensorFlow and JAX graphs only",
    ("torch", "saved_model", "decode_loop"): "Keras writes SavedModels from TensorFlow and JAX graphs only",
    ("torch", "onnx", "recurrent"): "traces it unrolled at one length",
    ("torch", "onnx", "decode_loop"): "needs tf2onnx's conversion of TensorFlow's while loop",
}
KINDS = {"layers": multi_head, "recurrent": teacher_forced, "decode_loop": greedy}


@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (additive, "layers"),
        (multi_head, "layers"),
        (teacher_forced, "recurrent"),
        (greedy, "decode_loop"),
        (beam, "decode_loop"),
    ],
)
def test_models_are_classified_by_what_they_run(build, kind):
    assert support.model_kind(build()) == kind


def test_a_bare_keras_rnn_is_recurrent_and_a_dense_model_is_layers():
    tokens = keras.Input((None, 3))
    assert support.model_kind(keras.Model(tokens, keras.layers.GRU(4)(tokens))) == "recurrent"
    assert support.model_kind(keras.Model(tokens, keras.layers.Dense(4)(tokens))) == "layers"


@pytest.mark.parametrize("backend", support.BACKENDS)
@pytest.mark.parametrize("format", ka.export.FORMATS)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_table_refuses_exactly_the_unsupported_combinations(backend, format, kind, monkeypatch):
    # Every package present: only the kind decides here.
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: object())
    models = {"translate": KINDS[kind]()}
    reason = REFUSED.get((backend, format, kind))
    if reason is None:
        support.check_support(backend, [format], models)
        return
    described = {"layers": "a layer model", "recurrent": "a recurrent model", "decode_loop": "a decode loop"}[kind]
    with pytest.raises(NotImplementedError) as caught:
        support.check_support(backend, [format], models)
    message = str(caught.value)
    assert message.startswith(
        f"export_model cannot write format {format!r} on the {backend!r} backend for signature 'translate', {described}"
    )
    assert reason in message
    assert "weights are backend-neutral" in message
    assert "KERAS_BACKEND=tensorflow keras-attention-export m.keras OUT_DIR" in message


@pytest.mark.parametrize(
    ("backend", "format", "missing"),
    [("jax", "saved_model", "tensorflow"), ("jax", "onnx", "jax2onnx"), ("torch", "onnx", "onnxruntime")],
)
def test_a_missing_package_is_named_with_its_install_line(backend, format, missing, monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == missing else object())
    with pytest.raises(NotImplementedError, match=rf"needs {missing} \(not installed\): `pip install {missing}`"):
        support.check_support(backend, [format], {"serving_default": additive()})


def test_tensorflow_needs_nothing_more_and_refuses_nothing(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    support.check_support("tensorflow", ka.export.FORMATS, {k: build() for k, build in KINDS.items()})


@pytest.mark.skipif(keras.backend.backend() == "tensorflow", reason="TensorFlow exports every combination")
@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("format", ka.export.FORMATS)
def test_export_model_refuses_before_writing_anything(kind, format, tmp_path):
    backend = keras.backend.backend()
    reason = REFUSED.get((backend, format, kind))
    if reason is None:
        pytest.skip(f"{backend} writes {format} of {kind}: test_export_keras_exporters.py exports it")
    model = KINDS[kind]()
    with pytest.raises(NotImplementedError, match=rf"on the '{backend}' backend .*{WAY_OUT}"):
        ka.export_model(model, tmp_path / "export", formats=[format])
    assert not (tmp_path / "export").exists()
    assert list(tmp_path.iterdir()) == []
    # The model itself runs on this backend: it is the export that is refused.
    assert np.isfinite(keras.ops.convert_to_numpy(keras.tree.flatten(model.predict(_feed(model), verbose=0))[0])).all()


def _feed(model):
    rng = np.random.default_rng(0)
    return [rng.integers(1, 9, size=(2, 5)).astype("int32") for _ in model.inputs]
