"""Loaded ONNX files are kept for the next run (keras_attention/export/loaded_onnx.py):
one session for repeated `run_onnx` calls on a file, a new one when the file
is written again (never a stale answer), and per thread count."""

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.export import export_model, loaded_onnx, run_onnx

pytest.importorskip("onnxruntime")


def _classifier(scale):
    keras.utils.set_random_seed(0)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    memory = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    model = keras.Model(tokens, keras.layers.Dense(3, name="logits")(ka.AttentionPooling(8)(memory)))
    model.set_weights([w * scale for w in model.get_weights()])
    return model


@pytest.fixture
def counted_loads(monkeypatch):
    """The paths onnxruntime sessions were created for, from an empty cache."""
    loads = []
    create = loaded_onnx._session

    def counting(path, threads=None):
        loads.append((path, threads))
        return create(path, threads)

    loaded_onnx._cached_session.cache_clear()
    monkeypatch.setattr(loaded_onnx, "_session", counting)
    yield loads
    loaded_onnx._cached_session.cache_clear()


def test_repeated_runs_load_the_file_once_and_a_rewritten_file_again(tmp_path, counted_loads):
    tokens = np.array([[3, 4, 5, 0], [7, 1, 0, 0]], "int32")
    first = _classifier(1.0)
    export_model(first, tmp_path / "export", verify=False)
    for _ in range(3):
        np.testing.assert_allclose(
            run_onnx(tmp_path / "export", {"tokens": tokens})["outputs"]["logits"], first(tokens), atol=1e-5
        )
    assert len(counted_loads) == 1
    run_onnx(tmp_path / "export", {"tokens": tokens}, threads=1)  # another thread count: its own session
    assert len(counted_loads) == 2

    # Exported again in place with other weights: the new file is loaded and its answer served.
    second = _classifier(3.0)
    assert not np.allclose(second(tokens), first(tokens), atol=1e-3)
    export_model(second, tmp_path / "export", verify=False, overwrite=True)
    np.testing.assert_allclose(
        run_onnx(tmp_path / "export", {"tokens": tokens})["outputs"]["logits"], second(tokens), atol=1e-5
    )
    assert len(counted_loads) == 3


def test_at_most_the_last_few_files_are_kept(tmp_path, counted_loads):
    tokens = np.array([[3, 4]], "int32")
    directories = [tmp_path / f"export_{n}" for n in range(loaded_onnx.KEPT_SESSIONS + 1)]
    for directory in directories:
        export_model(_classifier(1.0), directory, verify=False)
        run_onnx(directory, {"tokens": tokens})
    assert len(counted_loads) == len(directories)
    run_onnx(directories[-1], {"tokens": tokens})  # the newest is kept
    assert len(counted_loads) == len(directories)
    run_onnx(directories[0], {"tokens": tokens})  # the oldest was let go
    assert len(counted_loads) == len(directories) + 1
    assert loaded_onnx._cached_session.cache_info().currsize == loaded_onnx.KEPT_SESSIONS


def test_embedding_rows_are_read_once_and_handed_out_as_copies(tmp_path):
    export_model(_classifier(1.0), tmp_path / "export", verify=False)
    path = tmp_path / "export" / "model.onnx"
    rows = loaded_onnx.embedding_rows(path)
    assert rows == {"tokens": 20}
    rows["tokens"] = 1
    assert loaded_onnx.embedding_rows(path) == {"tokens": 20}
    with pytest.raises(ValueError, match=r"input 'tokens' holds the id 20, outside the model's vocabulary"):
        run_onnx(tmp_path / "export", {"tokens": [[20]]})
