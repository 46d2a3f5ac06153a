"""`keras_attention.decoders`: the decoders' new home keeps their serialized names.

`.keras` files written before the decoders moved out of `keras_attention.cells`
name them by `registered_name` (`keras_attention>AttentionDecoder`), which is
what Keras resolves first; the module path written beside it changed
(`keras_attention.cells.decoder` -> `keras_attention.decoders.attention_decoder`).
"""

import json
import zipfile

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention import cells, decoders

pytestmark = pytest.mark.any_backend

OLD_MODULES = {
    "AttentionDecoder": "keras_attention.cells.decoder",
    "InferenceDecoder": "keras_attention.cells.inference",
}
NEW_MODULES = {
    "AttentionDecoder": "keras_attention.decoders.attention_decoder",
    "InferenceDecoder": "keras_attention.decoders.inference_decoder",
}


def decoder_model():
    keras.utils.set_random_seed(0)
    memory = keras.Input((None, 5))
    targets = keras.Input((None,), dtype="int32")
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    logits = keras.layers.Dense(12)(ka.AttentionDecoder(cell)(keras.layers.Embedding(12, 4)(targets), memory))
    # A cell of its own: a model that shares one cell between the two decoders
    # does not load back (Keras finds none of the shared cell's variables), before the move too.
    decoded = ka.InferenceDecoder(
        ka.AttentionGRUCell(8, ka.AdditiveAttention(6)),
        keras.layers.Embedding(12, 4),
        keras.layers.Dense(12),
        start_token=1,
        end_token=2,
        max_length=5,
        method="beam",
        beam_width=3,
    )(memory)
    model = keras.Model([memory, targets], [logits, decoded["ids"], decoded["scores"]])
    rng = np.random.default_rng(0)
    inputs = [rng.normal(size=(2, 7, 5)).astype("float32"), rng.integers(0, 12, size=(2, 4)).astype("int32")]
    return model, inputs


def decoder_entries(config):
    """Every serialized AttentionDecoder / InferenceDecoder entry of a model config."""
    if isinstance(config, dict):
        if config.get("class_name") in NEW_MODULES and "registered_name" in config:
            yield config
        for value in config.values():
            yield from decoder_entries(value)
    elif isinstance(config, list):
        for value in config:
            yield from decoder_entries(value)


def rewrite_config(source, target, edit):
    """Copy the `.keras` archive `source` to `target` with `edit` applied to its config.json."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                edit(config)
                data = json.dumps(config)
            dst.writestr(item, data)


def test_the_package_exports_the_decoders_and_the_stepwise_split():
    assert decoders.__all__ == [
        "AttentionDecoder",
        "EnsembleDecoder",
        "InferenceDecoder",
        "ScheduledSamplingDecoder",
        "TransformerInferenceDecoder",
        "stepwise_models",
        "transformer_stepwise_models",
    ]
    for name in decoders.__all__:
        assert getattr(decoders, name) is getattr(ka, name), name
    assert decoders.stepwise_models is ka.stepwise_models
    assert decoders.AttentionDecoder is ka.AttentionDecoder
    assert decoders.InferenceDecoder is ka.InferenceDecoder
    assert ka.AttentionDecoder.__module__ == NEW_MODULES["AttentionDecoder"]
    assert ka.InferenceDecoder.__module__ == NEW_MODULES["InferenceDecoder"]


def test_saved_names_resolve_to_the_decoders(tmp_path):
    model, _ = decoder_model()
    path = tmp_path / "model.keras"
    model.save(path)
    with zipfile.ZipFile(path) as archive:
        entries = list(decoder_entries(json.loads(archive.read("config.json"))))
    assert sorted(entry["class_name"] for entry in entries) == ["AttentionDecoder", "InferenceDecoder"]
    for entry in entries:
        name = entry["class_name"]
        # The registered name is the one written before the move: old files carry it too.
        assert entry["registered_name"] == f"keras_attention>{name}"
        assert entry["module"] == NEW_MODULES[name]
        assert keras.saving.get_registered_object(entry["registered_name"]) is getattr(decoders, name)


def test_a_file_written_with_the_old_module_paths_loads_with_the_same_outputs(tmp_path):
    model, inputs = decoder_model()
    expected = model.predict(inputs, verbose=0)
    model.save(tmp_path / "new.keras")

    def to_old_paths(config):
        for entry in decoder_entries(config):
            entry["module"] = OLD_MODULES[entry["class_name"]]

    rewrite_config(tmp_path / "new.keras", tmp_path / "old.keras", to_old_paths)
    with zipfile.ZipFile(tmp_path / "old.keras") as archive:
        modules = {e["module"] for e in decoder_entries(json.loads(archive.read("config.json")))}
    assert modules == set(OLD_MODULES.values())
    loaded = keras.saving.load_model(tmp_path / "old.keras")
    kinds = {type(layer) for layer in loaded.layers}
    assert {ka.AttentionDecoder, ka.InferenceDecoder} <= kinds
    for got, want in zip(loaded.predict(inputs, verbose=0), expected):
        np.testing.assert_array_equal(ops.convert_to_numpy(got), ops.convert_to_numpy(want))


@pytest.mark.parametrize("name", ["AttentionDecoder", "InferenceDecoder"])
def test_the_old_cells_attribute_is_gone(name):
    """The pre-release alias `keras_attention.cells.<decoder>` was removed (0.x
    owes no compatibility layer): the decoders are in `keras_attention.decoders`."""
    assert getattr(decoders, name) is getattr(ka, name)
    assert name not in cells.__all__
    with pytest.raises(AttributeError, match=rf"keras_attention.cells.* has no attribute '{name}'"):
        getattr(cells, name)
    with pytest.raises(ImportError, match=name):
        exec(f"from keras_attention.cells import {name}", {})
    with pytest.raises(AttributeError, match="NoSuchCell"):
        cells.NoSuchCell  # noqa: B018
