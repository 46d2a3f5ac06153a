"""The models to export: loading `.keras` files, checking them, and the
float32, cuDNN-free copy that mixed-precision models and GPU RNNs need."""

import os
import re
from collections.abc import Mapping
from pathlib import Path

import keras
import numpy as np

from keras_attention.export.layout import DEFAULT_SIGNATURE
from keras_attention.export.report import ExportError

_LOW_PRECISION = {"mixed_float16", "mixed_bfloat16", "float16", "bfloat16"}
_CUDNN_LAYERS = {"LSTM", "GRU"}  # Keras layers that pick cuDNN kernels on a GPU
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _load_keras_file(path, argument):
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"`{argument}`: no such file: {str(path)!r} (expected a .keras model file).")
    if path.is_dir() or path.suffix != ".keras":
        raise ValueError(f"`{argument}` must be a .keras model file; got {str(path)!r}.")
    try:
        # safe_mode refuses Lambda layers' pickled code: loading a file must not run it.
        return keras.saving.load_model(path, safe_mode=True)
    except Exception as error:
        raise ValueError(
            f"`{argument}`: {str(path)!r} could not be loaded as a Keras model "
            f"(corrupt or not a .keras archive, or an unregistered custom layer): {type(error).__name__}: {error}"
        ) from error


def _as_models(model):
    """{signature name: keras.Model}, from a model, a .keras path, or a mapping of them."""
    if isinstance(model, Mapping):
        if not model:
            raise ValueError("`model` mapping is empty; expected {signature name: model}.")
        models = {}
        for name, value in model.items():
            if not isinstance(name, str) or not _NAME.match(name):
                raise ValueError(f"`model`: signature names must be identifiers (letters, digits, _); got {name!r}.")
            models[name] = _as_model(value, f"model[{name!r}]")
        return models
    return {DEFAULT_SIGNATURE: _as_model(model, "model")}


def _as_model(value, argument):
    if isinstance(value, (str, os.PathLike)):
        value = _load_keras_file(value, argument)
    if not isinstance(value, keras.Model):
        raise ValueError(f"`{argument}` must be a keras.Model or a path to a .keras file; got {type(value).__name__}.")
    if not value.built:
        raise ValueError(f"`{argument}` has not been built; call it once or build it before exporting.")
    return value


def _rewrite_config(config, changes, disable_cudnn):
    """A copy of a serialized model with float32 policies (and no cuDNN when asked)."""
    if isinstance(config, list):
        return [_rewrite_config(item, changes, disable_cudnn) for item in config]
    if not isinstance(config, dict):
        return config
    if config.get("class_name") in ("DTypePolicy", "FloatDTypePolicy") and isinstance(config.get("config"), dict):
        name = config["config"].get("name")
        if name in _LOW_PRECISION:
            changes.add(f"dtype policy {name} -> float32")
            return {**config, "config": {**config["config"], "name": "float32"}}
    if (
        disable_cudnn
        and config.get("class_name") in _CUDNN_LAYERS
        and isinstance(config.get("config"), dict)
        and config["config"].get("use_cudnn") is not False
    ):
        # get_config leaves `use_cudnn` out; the constructor still takes it.
        changes.add("use_cudnn=False (a GPU is present and cuDNN RNN ops do not convert)")
        config = {**config, "config": {**config["config"], "use_cudnn": False}}
    result = {}
    for key, value in config.items():
        if key == "dtype" and isinstance(value, str) and value in _LOW_PRECISION:
            changes.add(f"dtype policy {value} -> float32")
            value = "float32"
        elif key == "use_cudnn" and disable_cudnn and value is not False:
            # Layers that expose the choice themselves (e.g. PointerNetwork) pass it on to their RNNs.
            changes.add("use_cudnn=False (a GPU is present and cuDNN RNN ops do not convert)")
            value = False
        else:
            value = _rewrite_config(value, changes, disable_cudnn)
        result[key] = value
    return result


def gpu_present():
    """Whether TensorFlow sees a GPU, where LSTM/GRU would trace to cuDNN ops."""
    import tensorflow as tf

    return bool(tf.config.list_logical_devices("GPU"))


def _exportable_copy(model, argument, notes):
    """The model itself, or a float32 (and cuDNN-free on GPU) rebuild with the same weights.

    Mixed float16 exports with ~1e-3 error and mixed bfloat16 gives an invalid
    ONNX graph, and on a GPU LSTM/GRU trace to CudnnRNNV3, which tf2onnx cannot
    convert: rebuilding from the config with those settings changed avoids all three.
    """
    # cuDNN kernels are TensorFlow's concern (tf2onnx); off it TensorFlow may not even be installed.
    disable_cudnn = keras.backend.backend() == "tensorflow" and gpu_present()
    config = keras.saving.serialize_keras_object(model)
    changes = set()
    rewritten = _rewrite_config(config, changes, disable_cudnn)
    if not changes:
        return model
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        # The model is already in memory, built by the caller's own code.
        copy = keras.saving.deserialize_keras_object(rewritten, safe_mode=False)
    except Exception as error:
        raise ExportError(
            f"`{argument}` needs a float32/cuDNN-free copy for export ({'; '.join(sorted(changes))}) "
            f"but could not be rebuilt from its config: {type(error).__name__}: {error}. "
            "Give every custom layer a complete get_config, or export a float32 model."
        ) from error
    finally:
        keras.config.set_dtype_policy(previous)
    weights, targets = model.get_weights(), copy.weights
    if len(weights) != len(targets) or any(tuple(w.shape) != tuple(v.shape) for w, v in zip(weights, targets)):
        raise ExportError(
            f"`{argument}`: the rebuilt float32 copy has weights {[tuple(v.shape) for v in targets]} "
            f"but the model has {[tuple(w.shape) for w in weights]}; cannot copy the weights."
        )
    copy.set_weights([np.asarray(w).astype(v.dtype) for w, v in zip(weights, targets)])
    notes.append(
        f"{argument}: exported from a rebuilt copy: {'; '.join(sorted(changes))}; parity is against that copy."
    )
    return copy
