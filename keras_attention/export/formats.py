"""The registry of export formats: each one a writer and a runner, by name.

`export_model(..., formats=[...])` looks every name up here, calls each
format's writer in turn and, with `verify`, compares what each format's
runner returns with Keras (`parity`). Adding a format is one module and one
`register_format` call, or, for an installed package, one entry point in
the group `keras_attention.export_formats` (see `ENTRY_POINT_GROUP`), read
the first time the registry is consulted, so the `keras-attention-export`
command offers it too. The export pipeline (`exporter`, `context`,
`parity`, the command) names no format; names appear in each format's own
module, in `support`'s backend table (keyed by the registry's names, which
a test checks) and in the serving modules, which serve the ONNX files.

A writer, `writer(context) -> paths`, writes every signature of
`context.signatures` into `context.staging` (an `ExportContext`), raises
(`ExportError`, naming the signature) when it cannot, and returns what the
report records under `report.paths[name]`: a path, or {signature name:
path}, as `context.final_path` gives them. A runner, `runner(context) ->
run`, loads what the writer wrote and returns `run(signature, arrays) ->
{output name: numpy array}` for a list of input arrays in signature order;
it must run the written artefact, not `signature.model`, which is Keras's
reference (`Signature` lists what a format may read of a signature). An
optional `measure(context, expected)` reports on artefacts that are not
held to the tolerance (the ONNX format's int8 copies), given Keras's
outputs {signature name: [outputs per batch]}.

A format that reads options of `export_model` (the ONNX format: `opset`,
`quantize`) declares them, {option name: check(value) -> value}: the
checks run before anything is written, and their results are
`context.options[format name]`. A value other than the default given for
an option no requested format reads is refused.

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
        # A fresh copy with the written weights: the exported model stays
        # Keras's reference, untouched.
        copy = keras.models.clone_model(signature.model)
        with np.load(context.staging / f"{signature.name}.weights.npz") as saved:
            copy.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])
        outputs = copy(keras.tree.pack_sequence_as(signature.structure, list(arrays)))
        flat = keras.tree.flatten(outputs)
        return {n: keras.ops.convert_to_numpy(x) for n, x in zip(signature.output_names, flat)}
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
import importlib.metadata
import warnings
from collections.abc import Callable, Mapping

from keras_attention.export import litert_format, onnx_format, openvino_format, saved_model_format

ENTRY_POINT_GROUP = "keras_attention.export_formats"
"""The entry-point group through which installed packages add formats:
`[project.entry-points."keras_attention.export_formats"]` with `name =
"package.module:FORMAT"`, FORMAT an `ExportFormat`, registered under the
entry point's name the first time the registry is consulted."""


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """A registered format: its name, writer, runner, optional measure and
    the `export_model` options it reads, {option name: check(value) -> value}
    (see the module)."""

    name: str
    writer: Callable
    runner: Callable
    measure: Callable = None
    options: Mapping = dataclasses.field(default_factory=dict)


_REGISTRY = {}
_PLUGINS_READ = False


def register_format(name, writer, runner, measure=None, options=None, replace=False):
    """Register the format `name` (see the module for the callables and `options`) and return it.

    A name already registered is refused unless `replace` is True.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"`name` must be an identifier such as 'onnx'; got {name!r}.")
    for argument, value in (("writer", writer), ("runner", runner)):
        if not callable(value):
            raise ValueError(f"`{argument}` of format {name!r} must be callable; got {value!r}.")
    if measure is not None and not callable(measure):
        raise ValueError(f"`measure` of format {name!r} must be callable or None; got {measure!r}.")
    options = {} if options is None else options
    if not isinstance(options, Mapping) or not all(isinstance(k, str) and callable(v) for k, v in options.items()):
        raise ValueError(
            f"`options` of format {name!r} must be {{export_model option name: check function}}; got {options!r}."
        )
    if name in _REGISTRY and not replace:
        raise ValueError(f"export format {name!r} is already registered; pass replace=True to replace it.")
    _REGISTRY[name] = ExportFormat(name, writer, runner, measure, dict(options))
    return _REGISTRY[name]


def unregister_format(name):
    """Remove the format `name` from the registry."""
    get_format(name)
    del _REGISTRY[name]


def registered_formats():
    """The registered names, in registration order: the built-in ones
    first, then the installed plugins' (`ENTRY_POINT_GROUP`), then those
    registered since."""
    _read_plugins()
    return tuple(_REGISTRY)


def get_format(name):
    """The `ExportFormat` registered as `name`; a ValueError lists the known names."""
    _read_plugins()
    if name not in _REGISTRY:
        raise ValueError(f"unknown export format {name!r}; registered formats: {registered_formats()}.")
    return _REGISTRY[name]


def _read_plugins():
    """Register the formats installed packages declare, once. A plugin that
    fails to load is skipped with a warning naming it: it must not stop the
    exports that do not use it."""
    global _PLUGINS_READ
    if _PLUGINS_READ:
        return
    _PLUGINS_READ = True
    for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        where = f"export format plugin {entry.name!r} ({entry.value})"
        if entry.name in _REGISTRY:
            warnings.warn(f"{where} not registered: the name is taken.", stacklevel=3)
            continue
        try:
            found = entry.load()
            if not isinstance(found, ExportFormat):
                raise TypeError(f"it names {found!r}, not a keras_attention.export.formats.ExportFormat")
            register_format(entry.name, found.writer, found.runner, found.measure, found.options)
        except Exception as error:
            warnings.warn(f"{where} not registered: {type(error).__name__}: {error}", stacklevel=3)


register_format(saved_model_format.NAME, saved_model_format.write, saved_model_format.runner)
register_format(
    onnx_format.NAME,
    onnx_format.write,
    onnx_format.runner,
    onnx_format.measure_quantized,
    options={"opset": onnx_format.check_opset, "quantize": onnx_format.check_quantize},
)
FORMATS = tuple(_REGISTRY)
"""The default formats, what `export_model` and the command write when no
format is named (the other built-in ones and an installed plugin's are
written when asked for)."""
# Built in, written only when named: each needs its extra (`openvino`,
# `litert`). OpenVINO's writer reuses the ONNX files when both are asked for.
register_format(
    openvino_format.NAME, openvino_format.write, openvino_format.runner, options={"opset": onnx_format.check_opset}
)
register_format(
    litert_format.NAME,
    litert_format.write,
    litert_format.runner,
    litert_format.measure_quantized,
    options={"quantize": litert_format.check_quantize},
)
