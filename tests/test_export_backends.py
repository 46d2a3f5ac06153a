"""Export goes through TensorFlow: on another backend `export_model` says so,
names the backend and the way out, and writes nothing. Backend-neutral: on
TensorFlow the backend is patched to stand for another."""

import keras
import numpy as np
import pytest

import keras_attention as ka

pytestmark = pytest.mark.any_backend


def test_export_on_another_backend_names_it_and_the_way_out(tmp_path, monkeypatch):
    if keras.backend.backend() == "tensorflow":
        monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    backend = keras.backend.backend()
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    pooled = ka.AttentionPooling(4)(keras.layers.Embedding(10, 4, mask_zero=True)(tokens))
    model = keras.Model(tokens, keras.layers.Dense(2, name="logits")(pooled))
    model.predict(np.array([[1, 2, 0]]), verbose=0)  # the model itself works on this backend
    with pytest.raises(
        RuntimeError,
        match=rf"export_model needs the TensorFlow backend .*; the Keras backend is '{backend}'\. "
        r".*KERAS_BACKEND=tensorflow keras-attention-export m\.keras OUT_DIR",
    ):
        ka.export_model(model, tmp_path / "export")
    assert not (tmp_path / "export").exists()
