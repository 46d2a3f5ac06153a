"""The SavedModel writer (`export/saved_model_format.py`): what it tracks.

A functional model is tracked layer by layer, so that ExportArchive's walk
for lookup tables does not trace the model's default serving function (a
whole extra trace of a decoder and its loop); the tables of nested models
are still found and saved."""

import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attention.decoders.search import SearchDecoder
from keras_attention.export import export_model
from tests import layer_cases


def _lookup_model():
    """Codes looked up in a table (a TensorFlow resource) inside a nested model."""
    codes = keras.Input((None,), dtype="int64", name="codes")
    inner = keras.Model(codes, keras.layers.IntegerLookup(vocabulary=[7, 11, 13])(codes), name="ids")
    outer = keras.Input((None,), dtype="int64", name="codes")
    embedded = keras.layers.Embedding(5, 4)(inner(outer))
    return keras.Model(outer, keras.layers.Dense(2, name="logits")(keras.ops.mean(embedded, axis=1)))


def test_a_nested_models_lookup_table_is_saved(tmp_path):
    model = _lookup_model()
    codes = np.array([[7, 13, 99], [11, 11, 7]])  # 99: out of the vocabulary
    report = export_model(model, tmp_path / "export", formats=["saved_model"], sample_inputs=[{"codes": codes}])
    assert report.ok
    loaded = tf.saved_model.load(str(tmp_path / "export" / "saved_model"))
    served = loaded.signatures["serving_default"](codes=tf.constant(codes))["logits"].numpy()
    np.testing.assert_allclose(served, keras.ops.convert_to_numpy(model(codes)), atol=1e-6)
    # Each code's row: an unknown code is row 0, the vocabulary rows 1 to 3.
    ids = keras.ops.convert_to_numpy(model.get_layer("ids")(codes))
    np.testing.assert_array_equal(ids, [[1, 3, 0], [2, 2, 1]])


def test_a_decoder_is_traced_once_for_the_saved_model_and_onnx(tmp_path, monkeypatch):
    """The SavedModel saves the concrete function it traced (tf.saved_model.save
    would trace a tf.function again under its own context, and Keras's
    archive traces each endpoint once more to list its variables), and
    tf2onnx converts that same trace: nothing else may trace the decoder."""
    driver = layer_cases.DRIVERS["greedy_additive"]
    model, _ = layer_cases.functional_model([driver])
    names = ["query", "value", "query_valid", "value_valid"]
    sample = dict(zip(names, layer_cases.data(np.random.default_rng(1), 2, 3, 4)))
    model(sample)
    calls = []
    call = SearchDecoder.call

    @functools.wraps(call)
    def counted(self, *args, **kwargs):
        calls.append(tf.inside_function())
        return call(self, *args, **kwargs)

    monkeypatch.setattr(SearchDecoder, "call", counted)
    report = export_model(model, tmp_path / "export", formats=["saved_model", "onnx"], sample_inputs=[sample])
    assert report.ok
    traced = sum(calls)
    assert traced == 1, calls  # eager calls are the parity check's
    assert len(calls) > traced


@pytest.mark.parametrize("nested", [False, True], ids=["functional", "nested"])
def test_every_variable_is_saved(tmp_path, nested):
    model = _lookup_model()
    if nested:
        codes = keras.Input((None,), dtype="int64", name="codes")
        model = keras.Model(codes, model(codes))
    export_model(model, tmp_path / "export", formats=["saved_model"], sample_inputs=[{"codes": np.array([[7]])}])
    loaded = tf.saved_model.load(str(tmp_path / "export" / "saved_model"))
    saved = sorted(tuple(v.shape) for v in loaded.variables)
    assert saved == sorted(tuple(v.shape) for v in model.weights)


def _string_model():
    words = keras.Input((None,), dtype="string", name="words")
    ids = keras.layers.StringLookup(vocabulary=["a", "b", "c"])(words)
    embedded = keras.layers.Embedding(5, 4)(ids)
    return keras.Model(words, keras.layers.Dense(2, name="logits")(keras.ops.mean(embedded, axis=1)))


def test_a_model_reading_strings_exports_with_its_sample_strings(tmp_path):
    model = _string_model()
    words = np.array([["a", "c", "zz"], ["b", "b", "a"]])
    report = export_model(model, tmp_path / "export", formats=["saved_model"], sample_inputs=[{"words": words}])
    assert report.ok
    loaded = tf.saved_model.load(str(tmp_path / "export" / "saved_model"))
    served = loaded.signatures["serving_default"](words=tf.constant(words))["logits"].numpy()
    np.testing.assert_allclose(served, keras.ops.convert_to_numpy(model(words)), atol=1e-6)
    # Without sample strings there is nothing to verify with: said, and nothing written.
    with pytest.raises(ValueError, match="input 'words' of signature 'serving_default' takes strings"):
        export_model(model, tmp_path / "unverified", formats=["saved_model"])
    assert not (tmp_path / "unverified").exists()
