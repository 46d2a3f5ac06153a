"""`use_scale` (as `keras.layers.Attention` names it) and its deprecated alias `scale`."""

import warnings

import keras
import numpy as np
import pytest

import keras_attention as ka

LAYERS = {
    "DotAttention": ka.DotAttention,
    "LuongMonotonicAttention": ka.LuongMonotonicAttention,
}

rng = np.random.default_rng(0)
QUERY = rng.normal(size=(2, 3, 4)).astype("float32")
MEMORY = rng.normal(size=(2, 5, 4)).astype("float32")


def outputs_with_scale(layer, g):
    """The layer's output once its scalar is `g` (other weights as built)."""
    layer(QUERY, MEMORY)
    layer.scale.assign(g)
    return keras.ops.convert_to_numpy(layer(QUERY, MEMORY))


@pytest.mark.parametrize("name", LAYERS)
def test_use_scale_learns_the_scalar(name):
    layer = LAYERS[name](use_scale=True)
    assert layer.use_scale is True
    layer(QUERY, MEMORY)
    assert [w.path.rsplit("/", 1)[-1] for w in layer.weights].count("scale") == 1
    unscaled = LAYERS[name]()
    unscaled(QUERY, MEMORY)
    assert unscaled.use_scale is False and unscaled.scale is None
    # The scalar multiplies the scores: a different g, a different output.
    assert not np.allclose(outputs_with_scale(layer, 1.0), outputs_with_scale(layer, 3.0))


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("value", [True, False])
def test_scale_still_works_and_warns_naming_use_scale(name, value):
    with pytest.warns(DeprecationWarning, match=rf"`scale` is deprecated; use `use_scale={value}`"):
        old = LAYERS[name](scale=value)
    assert old.use_scale is value
    new = LAYERS[name](use_scale=value)
    old(QUERY, MEMORY)
    new(QUERY, MEMORY)
    assert [w.path.rsplit("/", 1)[-1] for w in old.weights] == [w.path.rsplit("/", 1)[-1] for w in new.weights]
    new.set_weights(old.get_weights())
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(old(QUERY, MEMORY)), keras.ops.convert_to_numpy(new(QUERY, MEMORY))
    )


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("use_scale, scale", [(True, True), (False, True), (True, False)])
def test_both_names_at_once_are_refused(name, use_scale, scale):
    with pytest.raises(ValueError, match=r"`scale`.*`use_scale`") as error:
        LAYERS[name](use_scale=use_scale, scale=scale)
    message = str(error.value)
    assert message.startswith(f"{name}: ")
    assert f"use_scale={use_scale!r}" in message and f"scale={scale!r}" in message


@pytest.mark.parametrize("name", LAYERS)
def test_a_value_that_is_not_a_bool_is_refused(name):
    with pytest.raises(ValueError, match=rf"{name}: `use_scale` must be True or False; got 'yes'"):
        LAYERS[name](use_scale="yes")


@pytest.mark.parametrize("name", LAYERS)
def test_get_config_writes_use_scale(name):
    config = LAYERS[name](use_scale=True).get_config()
    assert config["use_scale"] is True
    assert "scale" not in config
    assert LAYERS[name].from_config(config).use_scale is True


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("value", [True, False])
def test_configs_saved_with_scale_load_without_a_warning(name, value):
    layer = LAYERS[name](use_scale=value)
    serialized = keras.saving.serialize_keras_object(layer)
    # What get_config wrote before `use_scale`.
    serialized["config"]["scale"] = serialized["config"].pop("use_scale")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_config = LAYERS[name].from_config(dict(serialized["config"]))
        deserialized = keras.saving.deserialize_keras_object(serialized)
    for loaded in (from_config, deserialized):
        assert type(loaded) is LAYERS[name]
        assert loaded.use_scale is value
        assert "scale" not in loaded.get_config()
    if value:
        layer(QUERY, MEMORY)
        layer.scale.assign(2.5)
        deserialized(QUERY, MEMORY)
        deserialized.set_weights(layer.get_weights())
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(deserialized(QUERY, MEMORY)),
            keras.ops.convert_to_numpy(layer(QUERY, MEMORY)),
            rtol=1e-6,
        )
