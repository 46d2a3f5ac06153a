"""The decoders exported: InferenceDecoder (with its constraints),
EnsembleDecoder and the hierarchical attention network to ONNX and
SavedModel, with the ids and scores of Keras.

TensorFlow only (not `any_backend`): `model.export(format="onnx")` and
`keras_attention.export` go through TensorFlow (tf2onnx, SavedModel). The
decoders themselves are tested on every backend in test_cells.py,
test_decoding_constraints.py, test_ensemble_decoder.py and
test_hierarchical.py, where these tests were.
"""

import keras
import numpy as np
import onnxruntime
import pytest

import keras_attention as ka
from keras_attention.export import export_model, run_onnx
from tests.export_check import assert_export_parity, keras_onnx_export
from tests.layer_cases import token_batch
from tests.test_cells import DM, trained_parts
from tests.test_decoding_constraints import PREFIX, decoder_model
from tests.test_ensemble_decoder import ensemble_model, source_batch
from tests.test_hierarchical import documents, small_model

# ---------------------------------------------------------------- InferenceDecoder


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_inference_model_exports_with_identical_ids(method, tmp_path):
    rng = np.random.default_rng(11)
    cell, embedding, output_layer, _ = trained_parts(rng)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.Embedding(9, DM, mask_zero=True)(source)
    decoded = ka.InferenceDecoder(
        cell, embedding, output_layer, 1, 2, 6, method=method, beam_width=3, length_penalty_weight=0.6
    )(memory)
    model = keras.Model(source, decoded)
    sources = token_batch(rng, 3, 5, 9, 2)
    expected = model(sources)
    model.save(tmp_path / "decode.keras")
    np.testing.assert_array_equal(keras.saving.load_model(tmp_path / "decode.keras")(sources)["ids"], expected["ids"])
    keras_onnx_export(model, tmp_path / "decode.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "decode.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"source": sources})))
    np.testing.assert_array_equal(got["ids"], expected["ids"])
    np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-4)
    np.testing.assert_allclose(got["alignments"], expected["alignments"], atol=1e-5)


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_constrained_decoders_export_with_parity(method, tmp_path):
    model, _ = decoder_model(
        method=method, beam_width=3, min_length=1, suppress_tokens=[4], repetition_penalty=1.5, no_repeat_ngram_size=2
    )
    rng = np.random.default_rng(1)
    source = rng.integers(1, 9, size=(4, 6)).astype("int32")
    allowed = rng.random((4, 9)) < 0.6
    feeds = {"source": source, "allowed": allowed, "prefix": PREFIX}
    report = export_model(model, tmp_path / "export", sample_inputs=[feeds])
    assert report.max_abs_diff("onnx", "ids") == 0 and report.max_abs_diff("saved_model", "ids") == 0
    served = run_onnx(tmp_path / "export", feeds)["outputs"]["ids"]
    want = model.predict([source, allowed, PREFIX], verbose=0)["ids"]
    np.testing.assert_array_equal(served, want)
    best = want if method == "greedy" else want[:, 0]
    for row, prefix in zip(best, PREFIX):
        forced = prefix[prefix >= 0]
        np.testing.assert_array_equal(row[: len(forced)], forced)  # the prefix, reproduced exactly


# ---------------------------------------------------------------- EnsembleDecoder


def test_exports_to_onnx_and_saved_model_with_the_same_ids(tmp_path):
    model = ensemble_model()
    source = source_batch()
    report = export_model(model, tmp_path / "export", sample_inputs=[{"source": source}])
    assert report.max_abs_diff("onnx", "ids") == 0 and report.max_abs_diff("saved_model", "ids") == 0
    assert report.max_abs_diff("onnx", "scores") < 1e-4
    served = run_onnx(tmp_path / "export", {"source": source})["outputs"]["ids"]
    np.testing.assert_array_equal(served, model.predict(source, verbose=0)["ids"])


# ------------------------------------------------- hierarchical attention network


def test_exports_to_saved_model_and_onnx_with_parity(tmp_path):
    """A single-input model with three outputs: probabilities and both weight levels."""
    model = small_model()
    assert len(model.outputs) == 3
    rng = np.random.default_rng(5)
    batches = [{"ids": documents(rng, 3, 3, 6)}, {"ids": documents(rng, 1, 5, 9)}]
    assert_export_parity(model, batches, tmp_path, atol=1e-5)
