"""The registry of export formats: each one a writer and a runner, by name.

`export_model(..., formats=[...])` looks every name up here, calls each
format's writer in turn and, with `verify`, compares what each format's
runner returns with Keras (`parity`). Adding a format is one module and one
`register_format` call; nothing else in the package names a format.

A writer, `writer(context) -> paths`, writes every signature of
`context.signatures` into `context.staging` (an `ExportContext`), raises
(`ExportError`, naming the signature) when it cannot, and returns what the
report records under `report.paths[name]`: a path, or {signature name:
path}, as `context.final_path` gives them. A runner, `runner(context) ->
run`, loads what the writer wrote and returns `run(signature, arrays) ->
{output name: numpy array}` for a list of input arrays in signature order.
An optional `measure(context, expected)` reports on artefacts that are not
held to the tolerance (the ONNX format's int8 copies), given Keras's
outputs {signature name: [outputs per batch]}.

Example:

```python
import tempfile, keras, numpy as np
from keras_attention.export import export_model, formats

def write_weights(context):
    paths = {}
    for signature in context.signatures:
        name = f"{signature.name}.weights.npz"
        np.savez(context.staging / name, *signature.model.get_weights())
        paths[signature.name] = context.final_path(name)
    return paths

def run_weights(context):
    def run(signature, arrays):
        with np.load(context.staging / f"{signature.name}.weights.npz") as saved:
            signature.model.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])
        return signature.call_keras(arrays)
    return run

formats.register_format("npz_weights", write_weights, run_weights)
inputs = keras.Input((3,), name="features")
model = keras.Model(inputs, keras.layers.Dense(2, name="scores")(inputs))
report = export_model(model, tempfile.mkdtemp() + "/export", formats=["npz_weights"])
assert report.max_abs_diff("npz_weights", "scores") == 0.0
formats.unregister_format("npz_weights")
```
"""

import dataclasses
from collections.abc import Callable

from keras_attention.export import onnx_format, saved_model_format


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """A registered format: its name, writer, runner and optional measure (see the module)."""

    name: str
    writer: Callable
    runner: Callable
    measure: Callable = None


_REGISTRY = {}


def register_format(name, writer, runner, measure=None, replace=False):
    """Register the format `name` (see the module for the three callables) and return it.

    A name already registered is refused unless `replace` is True.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"`name` must be an identifier such as 'onnx'; got {name!r}.")
    for argument, value in (("writer", writer), ("runner", runner)):
        if not callable(value):
            raise ValueError(f"`{argument}` of format {name!r} must be callable; got {value!r}.")
    if measure is not None and not callable(measure):
        raise ValueError(f"`measure` of format {name!r} must be callable or None; got {measure!r}.")
    if name in _REGISTRY and not replace:
        raise ValueError(f"export format {name!r} is already registered; pass replace=True to replace it.")
    _REGISTRY[name] = ExportFormat(name, writer, runner, measure)
    return _REGISTRY[name]


def unregister_format(name):
    """Remove the format `name` from the registry."""
    get_format(name)
    del _REGISTRY[name]


def registered_formats():
    """The registered names, in registration order (the built-in ones first)."""
    return tuple(_REGISTRY)


def get_format(name):
    """The `ExportFormat` registered as `name`; a ValueError lists the known names."""
    if name not in _REGISTRY:
        raise ValueError(f"unknown export format {name!r}; registered formats: {registered_formats()}.")
    return _REGISTRY[name]


register_format("saved_model", saved_model_format.write, saved_model_format.runner)
register_format("onnx", onnx_format.write, onnx_format.runner, onnx_format.measure_quantized)
