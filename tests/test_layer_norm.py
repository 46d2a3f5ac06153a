"""ExportableLayerNormalization: Keras's layer norm, written to export over empty sequences."""

import keras
import numpy as np
import pytest

from keras_attention.layers.layer_norm import ExportableLayerNormalization

pytestmark = pytest.mark.any_backend


def numpy_layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def test_matches_the_formula_and_keras_with_the_same_weights():
    rng = np.random.default_rng(0)
    x = rng.normal(3.0, 2.0, (2, 5, 6)).astype("float32")
    ours = ExportableLayerNormalization(epsilon=1e-3)
    theirs = keras.layers.LayerNormalization(epsilon=1e-3)
    ours.build(x.shape)
    theirs.build(x.shape)
    gamma, beta = rng.normal(size=6).astype("float32"), rng.normal(size=6).astype("float32")
    ours.set_weights([gamma, beta])
    theirs.set_weights([gamma, beta])
    # The same variables, in the same order and with the same names: checkpoints load either way.
    assert [v.path.split("/")[-1] for v in ours.weights] == [v.path.split("/")[-1] for v in theirs.weights]
    got = keras.ops.convert_to_numpy(ours(x))
    np.testing.assert_allclose(got, numpy_layer_norm(x, gamma, beta, 1e-3), atol=1e-5)
    np.testing.assert_allclose(got, keras.ops.convert_to_numpy(theirs(x)), atol=1e-5)


def test_without_center_and_scale_and_in_half_precision():
    x = np.array([[[1.0, 2.0, 4.0, 9.0]]], "float32")
    plain = ExportableLayerNormalization(center=False, scale=False, epsilon=0.0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(plain(x)), numpy_layer_norm(x, 1.0, 0.0, 0.0), atol=1e-6)
    # Mixed precision: float16 out, computed in float32 inside (large inputs do not overflow the variance).
    half = ExportableLayerNormalization(dtype="mixed_float16")
    big = (x * 300.0).astype("float16")
    out = half(big)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out).astype("float32"), numpy_layer_norm(x, 1.0, 0.0, 1e-3), atol=2e-3
    )


def test_an_empty_sequence_gives_an_empty_output():
    out = ExportableLayerNormalization()(np.zeros((2, 0, 4), "float32"))
    assert tuple(out.shape) == (2, 0, 4)


def test_other_axes_and_rms_scaling_are_refused_by_name():
    with pytest.raises(ValueError, match=r"axis=1.*expected -1"):
        ExportableLayerNormalization(axis=1)
    with pytest.raises(ValueError, match="rms_scaling=True"):
        ExportableLayerNormalization(rms_scaling=True)


def test_config_round_trip():
    layer = ExportableLayerNormalization(epsilon=1e-6, center=False)
    clone = ExportableLayerNormalization.from_config(layer.get_config())
    assert (clone.epsilon, clone.center, clone.scale, clone.axis) == (1e-6, False, True, -1)
