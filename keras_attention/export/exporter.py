"""`export_model`, the public entry point, and the writer that produces and
verifies every artifact in a staging directory."""

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

import keras

from keras_attention.decoding.hashed_random import fixed_draws
from keras_attention.export import formats as registry
from keras_attention.export.context import ExportContext
from keras_attention.export.directories import _check_target, _put_in_place, _remove_created
from keras_attention.export.formats import FORMATS
from keras_attention.export.layout import DEFAULT_OPSET, DEFAULT_SHAPES, REPORT_FILE, VOCABULARY_FILE
from keras_attention.export.models import _as_models, _exportable_copy
from keras_attention.export.parity import check_parity, compare
from keras_attention.export.report import ExportReport
from keras_attention.export.samples import batches_function
from keras_attention.export.signatures import _make_signature, spec_dtype, spec_shape
from keras_attention.export.support import check_support
from keras_attention.export.vocabulary import _check_vocabulary, load_vocabulary, vocabulary_json


def _check_formats(formats):
    if isinstance(formats, str):
        formats = (formats,)
    formats = tuple(formats)
    known = registry.registered_formats()
    unknown = [f for f in formats if f not in known]
    if not formats or unknown or len(set(formats)) != len(formats):
        raise ValueError(f"`formats` must be a non-empty selection of {known} without repeats; got {formats!r}.")
    return formats


def _check_format_options(formats, given):
    """{format name: {option: checked value}} for the requested formats,
    from `given` ({option: (value, default)}): each format checks the
    options it declares; a value other than the default for an option no
    requested format reads is refused, naming the formats that read it."""
    chosen = [registry.get_format(name) for name in formats]
    for option, (value, default) in given.items():
        if value != default and not any(option in format.options for format in chosen):
            readers = [name for name in registry.registered_formats() if option in registry.get_format(name).options]
            raise ValueError(
                f"`{option}={value!r}` is an option of the format(s) {readers}, but `formats` is {list(formats)}."
            )
    return {
        format.name: {option: check(given[option][0]) for option, check in format.options.items()} for format in chosen
    }


def export_model(
    model,
    directory,
    formats=FORMATS,
    opset=DEFAULT_OPSET,
    input_signature=None,
    verify=True,
    overwrite=False,
    sample_inputs=None,
    vocabulary=None,
    atol=1e-4,
    shapes=DEFAULT_SHAPES,
    seed=0,
    quantize=None,
):
    """Export a model (or several, as named signatures) to SavedModel and ONNX, verified against Keras.

    Each model becomes one signature with named inputs (the `keras.Input`
    names, or dict keys) and named outputs (dict keys, else the output
    layers' names), dynamic batch and length: a SavedModel signature of that
    name and one ONNX file (`model.onnx` for `serving_default`, else
    `<name>.onnx`). Mixed-precision models, and on a GPU cuDNN RNNs, are
    exported from a rebuilt float32, cuDNN-free copy with the same weights.

    Masked LSTM layers (Bidirectional ones too) whose mask is the padding
    of an id input (`Embedding(mask_zero=True)`) become fused ONNX LSTM
    nodes over that input's lengths, instead of a loop of small operations
    per step, when the result matches Keras on the verification batches
    (the report's notes say which); the lengths count the ids != 0, so the
    padding must come after the tokens, as generated here and as
    `Vocabulary.encode` writes it.

    Every ONNX file passes `onnx.checker` and loads in onnxruntime. With
    `verify`, every output of every signature in every format is compared
    with Keras on `sample_inputs`, or on generated inputs of each `(batch,
    length)` in `shapes` (ids right-padded with 0, masks of the same
    lengths): float outputs within `atol`, integer outputs exactly.

    Everything is written to a temporary directory next to `directory` and
    renamed into place at the end: an op that does not convert, a parity
    failure or any other error raises and leaves nothing behind.

    Args:
        model: a `keras.Model`, a path to a `.keras` file (loaded in safe
            mode), or a mapping {signature name: model or path}, e.g.
            `{"serving_default": train_model, "translate": decode_model}`.
        directory: the export directory to create.
        formats: names of registered formats (`keras_attention.export.formats`):
            "saved_model" and/or "onnx" built in (`FORMATS`, the default),
            "litert" built in when asked for (`.tflite` files, the
            `litert` extra); `register_format` and installed plugins add
            others.
        opset: ONNX opset, 13 to 18 (an option of the "onnx" format: a
            value other than the default is refused without that format).
        input_signature: optional input specs (list of `keras.InputSpec` /
            `tf.TensorSpec`, or {input name: (shape, dtype)}); required for
            subclassed models. With several models, {signature: specs}.
        verify: compare the artifacts with Keras (the checker and the
            onnxruntime load always run).
        overwrite: replace an existing export directory.
        sample_inputs: optional list of {input name: array} batches used
            instead of generated ones; a batch is used for every signature
            whose inputs it covers ({signature: list} also accepted). With
            `vocabulary`, a value may be a list of strings (tokenised).
        vocabulary: optional {"source": Vocabulary, "target": Vocabulary}
            (or their configs, or the list form `load_vocabulary` reads), or
            the path of such a JSON file; written as `vocabulary.json` for
            `run_onnx` and the serve command.
        atol: allowed max absolute difference of float outputs.
        shapes: (batch, length) pairs of the generated inputs.
        seed: seed of the generated inputs.
        quantize: None, or "int8": also write each ONNX signature with
            int8 weights (onnxruntime's dynamic quantization of the matrix
            products), as `model.int8.onnx` / `<name>.int8.onnx` beside the
            float32 file (`run_onnx(..., precision="int8")` serves it), and
            with the "litert" format each `.tflite` file as
            `<name>.int8.tflite` (LiteRT's dynamic-range quantization). Its
            size and its outputs' distance from Keras are reported in
            `report.quantized`, not held to `atol`: quantization changes
            the numbers, and whether that matters is measured on your data.

    Returns:
        An `ExportReport` (also written to `directory/report.json`).

    Raises:
        FileExistsError: `directory` exists and `overwrite` is False.
        FileNotFoundError: a model path does not exist.
        ExportError (a ValueError): an op does not convert (named), or an
            output does not match Keras (named).
        ValueError: invalid arguments or an unreadable `.keras` file.
        NotImplementedError (a RuntimeError): the Keras backend cannot
            write this format for this model, or lacks a package for it
            (`keras_attention.export.support` has the table; TensorFlow
            writes every format of every model from the `.keras` file).

    Example:

    ```python
    import tempfile, keras, keras_attention
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    memory = keras.layers.Embedding(20, 8, mask_zero=True)(tokens)
    pooled = keras_attention.AttentionPooling(8)(memory)
    model = keras.Model(tokens, keras.layers.Dense(3, name="logits")(pooled))
    report = keras_attention.export_model(model, tempfile.mkdtemp() + "/export")
    print(report.table())          # signature, format, output, max |diff|, ...
    assert report.max_abs_diff("onnx", "logits") <= 1e-4
    ```
    """
    started = time.perf_counter()
    backend = keras.backend.backend()
    formats = _check_formats(formats)
    format_options = _check_format_options(formats, {"opset": (opset, DEFAULT_OPSET), "quantize": (quantize, None)})
    if not isinstance(atol, (int, float)) or isinstance(atol, bool) or atol < 0:
        raise ValueError(f"`atol` must be a number >= 0; got {atol!r}.")
    if not shapes or any(len(s) != 2 or min(s) < 1 for s in shapes):
        raise ValueError(f"`shapes` must be (batch, length) pairs of positive integers; got {shapes!r}.")
    if isinstance(directory, bool) or not isinstance(directory, (str, os.PathLike)):
        raise ValueError(f"`directory` must be a path; got {directory!r}.")
    directory = Path(directory).absolute()
    _check_target(directory, overwrite)
    vocabulary = (
        None
        if vocabulary is None
        else _check_vocabulary(
            load_vocabulary(vocabulary) if isinstance(vocabulary, (str, os.PathLike)) else vocabulary, "vocabulary"
        )
    )

    models = _as_models(model)
    check_support(backend, formats, models)
    if input_signature is not None and len(models) > 1:
        if not isinstance(input_signature, Mapping) or not set(input_signature) <= set(models):
            raise ValueError(
                f"`input_signature` with several models must be {{signature name: specs}} for names in {sorted(models)}; got {input_signature!r}."
            )
        signature_specs = dict(input_signature)
    else:
        signature_specs = {name: input_signature for name in models}
    report = ExportReport(directory=str(directory), formats=list(formats), opset=opset)
    report.versions = _versions()
    signatures = []
    for name, value in models.items():
        argument = "model" if len(models) == 1 else f"model[{name!r}]"
        exportable = _exportable_copy(value, argument, report.notes)
        signatures.append(_make_signature(name, exportable, signature_specs.get(name), argument))
    for signature in signatures:
        report.signatures[signature.name] = {
            "inputs": {
                n: {"shape": spec_shape(s), "dtype": spec_dtype(s)}
                for n, s in zip(signature.input_names, signature.input_specs)
            },
            "outputs": {n: {"dtype": d} for n, d in zip(signature.output_names, signature.output_dtypes)},
        }
        if signature.options:
            report.signatures[signature.name]["options"] = signature.options
        if signature.prefixes:  # what serving checks when the artefact cannot (LiteRT)
            report.signatures[signature.name]["prefixes"] = signature.prefixes

    created = [p for p in [directory.parent, *directory.parent.parents] if not p.exists()]
    try:
        directory.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.partial-", dir=directory.parent))
    except OSError as error:
        _remove_created(created)
        # An OSError of the same kind, saying which argument and what failed.
        raise type(error)(
            f"`directory` {str(directory)!r}: cannot create the export there ({error.strerror or error})."
        ) from error
    try:
        context = ExportContext(
            signatures=signatures,
            staging=staging,
            directory=directory,
            backend=backend,
            verify=verify,
            atol=atol,
            options=format_options,
            report=report,
            batches_function=batches_function(sample_inputs, vocabulary, shapes, seed),
        )
        with fixed_draws():  # a sampling decoder's constructor seed, not its generator's random op
            _write_and_verify(context, formats)
        if vocabulary is not None:
            (staging / VOCABULARY_FILE).write_text(vocabulary_json(vocabulary), encoding="utf-8")
            report.paths["vocabulary"] = str(directory / VOCABULARY_FILE)
        report.paths["report"] = str(directory / REPORT_FILE)
        report.timings_s["total"] = round(time.perf_counter() - started, 3)
        report.to_json(staging / REPORT_FILE)
        _put_in_place(staging, directory, overwrite)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        _remove_created(created)
        raise
    return report


def _versions():
    import importlib.metadata

    versions = {}
    for package in ("keras", "tensorflow", "tf2onnx", "onnx", "onnxruntime", "jax", "jax2onnx", "torch"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = None
    return versions


def _write_and_verify(context, formats):
    """Write every requested format into `context.staging` through the
    registry, in registration order (a later writer may reuse an earlier
    one's work, `context.traced`), then compare each with Keras."""
    chosen = [registry.get_format(name) for name in registry.registered_formats() if name in formats]
    for format in chosen:
        begin = time.perf_counter()
        context.report.paths[format.name] = format.writer(context)
        context.report.timings_s[format.name] = round(time.perf_counter() - begin, 3)
    if not context.verify:
        context.report.notes.append("verify=False: no parity measured.")
        return
    begin = time.perf_counter()
    expected = compare(context, {format.name: format.runner(context) for format in chosen})
    for format in chosen:
        if format.measure is not None:
            format.measure(context, expected)
    context.report.timings_s["verify"] = round(time.perf_counter() - begin, 3)
    check_parity(context.report)
