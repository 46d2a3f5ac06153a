"""Serving an export with onnxruntime: `run_onnx` (inputs checked against
the model, one run) and `translate_texts` (strings in, strings out)."""

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from keras_attention.decoders.runtime_options import (
    RUNTIME_OPTIONS,
    check_group_values,
    check_length_values,
    check_option_values,
    check_prefix_values,
    check_sequence_values,
)
from keras_attention.export.fused_rnn import ZERO_STEPS_REFUSED
from keras_attention.export.layout import DEFAULT_SIGNATURE, PRECISIONS, REPORT_FILE, VOCABULARY_FILE, _onnx_file
from keras_attention.export.loaded_onnx import embedding_rows, loaded_session
from keras_attention.export.onnx import OPTIONS_PROPERTY, PREFIXES_PROPERTY
from keras_attention.export.vocabulary import _is_text, decode_ids, encode_strings, load_vocabulary

_ONNX_TYPES = {
    "tensor(float)": np.float32,
    "tensor(double)": np.float64,
    "tensor(float16)": np.float16,
    "tensor(int32)": np.int32,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def _shape_text(spec):
    return "(" + ", ".join(str(d) if d is not None else "?" for d in spec.shape) + ")"


def _feed(name, value, spec, dtype):
    """`value` as the array input `name` takes, or a ValueError naming it.

    onnxruntime's own errors for a wrong rank or type name no input (and
    come with a traceback from the serving command).
    """
    try:
        array = np.asarray(value)
    except ValueError:  # ragged nested lists
        array = None
    if array is None or array.dtype.kind not in "biuf":
        raise ValueError(
            f"input {name!r} must be a nested list of numbers of shape {_shape_text(spec)}; got {value!r:.80}."
        )
    if array.ndim != len(spec.shape):
        raise ValueError(
            f"input {name!r} must have rank {len(spec.shape)}, shape {_shape_text(spec)}; "
            f"got shape {array.shape} ({value!r:.60})."
        )
    if dtype is not None and np.dtype(dtype).kind in "iu" and array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            raise ValueError(f"input {name!r} must hold integers (it is {np.dtype(dtype).name}); got {value!r:.80}.")
    return array.astype(dtype) if dtype is not None else array


def _check_ids(name, array, rows):
    """Ids of input `name` must index its embedding table of `rows` rows."""
    if rows is None or array.size == 0:
        return
    low, high = int(array.min()), int(array.max())
    if low < 0 or high >= rows:
        bad = low if low < 0 else high
        raise ValueError(
            f"input {name!r} holds the id {bad}, outside the model's vocabulary: its embedding has {rows} rows "
            f"(ids 0 to {rows - 1})."
        )


def _onnx_path(directory, signature, precision):
    """The ONNX file of `signature` at `precision`, or an error saying what the directory has."""
    if precision not in PRECISIONS:
        raise ValueError(f"`precision` must be one of {list(PRECISIONS)}; got {precision!r}.")
    path = Path(directory) / _onnx_file(signature, precision)
    if not path.is_file():
        available = sorted(p.name for p in Path(directory).glob("*.onnx")) if Path(directory).is_dir() else []
        hint = " (export with quantize='int8' to write it)" if precision != "float32" else ""
        raise FileNotFoundError(
            f"no ONNX file {str(path)!r} for signature {signature!r} at precision {precision!r}{hint}; "
            f"found {available or 'none'} in {str(directory)!r}."
        )
    return path


class _OnnxSignature:
    """One signature of an export, loaded in onnxruntime: `feeds` checks and
    tokenises inputs, `run` runs the model once, `texts` detokenises ids.

    `run_onnx` is one pass through it; the serve command keeps it to time
    repeated runs of the same feeds.
    """

    def __init__(self, directory, signature=DEFAULT_SIGNATURE, threads=None, precision="float32"):
        directory = Path(directory)
        self.path = _onnx_path(directory, signature, precision)
        self.directory, self.signature = directory, signature
        self.vocabulary = load_vocabulary(directory) if (directory / VOCABULARY_FILE).is_file() else None
        self.session = loaded_session(self.path, threads)
        self.rows = embedding_rows(self.path)
        self.specs = {i.name: i for i in self.session.get_inputs()}
        self.options = session_options(self.session)
        self.prefixes = session_options(self.session, PREFIXES_PROPERTY)
        self.output_names = [o.name for o in self.session.get_outputs()]

    def feeds(self, inputs):
        """{input name: array} for onnxruntime, or a ValueError naming the input.

        The run-time options are optional: one left out keeps its default."""
        specs = self.specs
        if not isinstance(inputs, Mapping):
            if len(specs) != 1:
                raise ValueError(
                    f"`inputs` must be {{input name: value}} for a model with inputs {list(specs)}; got {type(inputs).__name__}."
                )
            inputs = {next(iter(specs)): inputs}
        missing, unknown = set(specs) - set(inputs), set(inputs) - set(specs) - set(self.options)
        if unknown and unknown <= set(RUNTIME_OPTIONS):
            option_feeds(self.options, {name: inputs[name] for name in unknown}, None)  # names them
        if missing or unknown:
            optional = f" (and optionally the run-time options {list(self.options)})" if self.options else ""
            raise ValueError(f"`inputs` has keys {sorted(inputs)}; the model expects exactly {list(specs)}{optional}.")
        rows = self.rows
        feeds = {}
        options = {name: value for name, value in inputs.items() if name in self.options}
        for name, value in inputs.items():
            if name in self.options:
                continue
            dtype = _ONNX_TYPES.get(specs[name].type)
            if _is_text(value):
                if self.vocabulary is None:
                    raise ValueError(
                        f"input {name!r} is text but {str(self.directory)!r} has no {VOCABULARY_FILE} to tokenise it."
                    )
                feeds[name] = encode_strings(value, self.vocabulary, dtype or np.int32)
            else:
                feeds[name] = _feed(name, value, specs[name], dtype)
            _check_ids(name, feeds[name], rows.get(name))
        batch = next((a.shape[0] for a in feeds.values() if a.ndim >= 1), None)
        feeds.update(option_feeds(self.options, options, batch))
        check_prefixes(self.prefixes, feeds)
        return feeds

    def run(self, feeds):
        """{output name: array}: one run of the model on checked `feeds`."""
        try:
            values = self.session.run(None, feeds)
        except Exception as error:  # onnxruntime's own exception types
            # The fused LSTM nodes refuse zero steps by name; a recurrent loop
            # tf2onnx converted fails in onnxruntime's own terms (a Squeeze of
            # the empty time axis). Keras and the SavedModel refuse both.
            empty = [name for name, array in feeds.items() if array.ndim >= 2 and array.shape[1] == 0]
            if ZERO_STEPS_REFUSED in str(error) or empty:
                why = (
                    "as Keras's LSTM does"
                    if ZERO_STEPS_REFUSED in str(error)
                    else f"onnxruntime cannot run {', '.join(map(repr, empty))} without positions, as Keras's "
                    "recurrent layers cannot run zero steps"
                )
                raise ValueError(
                    f"run_onnx: signature {self.signature!r} refuses an input of zero steps "
                    f"(inputs { ({n: list(v.shape) for n, v in feeds.items()}) }), {why}: give every sequence "
                    "input at least one position."
                ) from error
            raise RuntimeError(
                f"run_onnx: onnxruntime failed on signature {self.signature!r} with inputs "
                f"{ {n: list(v.shape) for n, v in feeds.items()} }: {error}"
            ) from error
        return dict(zip(self.output_names, values))

    def texts(self, outputs):
        """{output name: strings} for the integer outputs named `ids` or `..._ids`
        (none without a vocabulary)."""
        if self.vocabulary is None:
            return {}
        return {
            name: decode_ids(value, self.vocabulary)
            for name, value in outputs.items()
            if (name == "ids" or name.endswith("_ids")) and value.dtype.kind in "iu"
        }


def session_options(session, key=OPTIONS_PROPERTY):
    """{run-time option: bounds and default} of an exported decoder, from its
    ONNX metadata (or, with `key=PREFIXES_PROPERTY`, its forced-prefix inputs')."""
    import json

    text = session.get_modelmeta().custom_metadata_map.get(key)
    return json.loads(text) if text else {}


def check_prefixes(prefixes, feeds):
    """Check the forced prefixes among `feeds` ({input name: {"vocabulary",
    "max_length"}} in `prefixes`) against their vocabulary and the run's
    `max_length` (fed, else the export's), and the per-request token
    sequences (facts with a "kind") as `check_sequence_values` does: what
    the SavedModel asserts and the ONNX, LiteRT and OpenVINO files cannot."""
    for name, facts in prefixes.items():
        if facts.get("kind") == "constraint_groups":
            constraints = feeds.get(facts["constraints"])
            check_group_values(f"input `{name}`", feeds[name], None if constraints is None else constraints.shape)
            continue
        if facts.get("kind", "target_prefix") != "target_prefix":  # per-request token sequences
            where = f"input `{name}`"
            check_sequence_values(where, feeds[name], facts["vocabulary"], facts["end_token"], most=facts.get("most"))
            continue
        limits = feeds.get("max_length")
        limits = facts["max_length"] if limits is None or limits.size == 0 else limits
        check_prefix_values(f"input `{name}`", feeds[name], facts["vocabulary"], limits)


def recorded_signature(directory, signature):
    """What the export's `report.json` in `directory` records of `signature`
    (its run-time options and forced prefixes); {} without a report."""
    path = Path(directory) / REPORT_FILE
    if not path.is_file():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))["signatures"].get(signature, {})


def option_feeds(specs, values, batch):
    """{option: array} for the run-time options given in `values` (a value
    for every example, or one per example), checked against `specs`: a
    ValueError names the input, the value and what was expected."""
    unknown = sorted(set(values) - set(specs))
    if unknown:
        raise ValueError(
            f"the model has no run-time option {', '.join(map(repr, unknown))}; its options: "
            f"{list(specs) or 'none (export a decoder built with runtime_options=...)'}."
        )
    feeds = {name: check_option_values("input", name, value, specs[name], batch) for name, value in values.items()}
    check_length_values("input", feeds, specs)
    return feeds


def run_onnx(directory, inputs, signature=DEFAULT_SIGNATURE, threads=None, precision="float32"):
    """Run an exported ONNX signature with onnxruntime.

    `inputs` is {input name: array or nested list}; with a `vocabulary.json`
    next to the model, strings (or lists of strings) are tokenised
    character-wise, and a bare string or list of strings feeds a model's only
    input. Integer outputs named `ids` (or `..._ids`) are also detokenised.
    `precision="int8"` runs the quantized copy an export with
    `quantize="int8"` wrote beside the float32 file.

    The file's onnxruntime session is loaded on the first call and kept for
    the next ones (the last few files run; a file exported again in place is
    loaded again), so calling it per request costs the run, not a load.

    Returns {"inputs": {name: shape fed}, "outputs": {name: array}, "text":
    {name: strings}}. Timing is not its business: the serve command
    (`--runs`, `--warmup`) and `benchmarks/bench_serving.py` time repeated
    runs.

    A decoder exported with run-time options (`runtime_options=`) takes
    them as optional inputs: `{"source": ..., "temperature": 0.7}` (one
    value for every example, or a list of one per example); those left out
    keep the defaults recorded in the export.

    Raises ValueError naming the input when a value does not fit it: not a
    nested list of numbers, another rank, non-integers for integer ids, ids
    outside the model's embedding table, an option outside its bounds (e.g.
    `top_p` outside (0, 1], `min_length` not below `max_length`), or a
    source of zero steps that the model's recurrent layers cannot run
    (Keras refuses it too); RuntimeError when onnxruntime fails on valid
    inputs.

    Example:

    ```python
    result = run_onnx("exports/dates", {"source": ["March 3, 2001"]}, signature="translate")
    print(result["text"]["ids"])  # ["2001-03-03"]
    ```
    """
    model = _OnnxSignature(directory, signature, threads, precision)
    feeds = model.feeds(inputs)
    outputs = model.run(feeds)
    return {"inputs": {n: list(v.shape) for n, v in feeds.items()}, "outputs": outputs, "text": model.texts(outputs)}


def translate_texts(
    directory, texts, signature=DEFAULT_SIGNATURE, batch_size=256, threads=None, precision="float32", options=None
):
    """Decode `texts` with an exported sequence model through onnxruntime.

    The model's only input is fed the texts tokenised with the export's
    `vocabulary.json`, in batches of similar length; its `ids` output
    (`(B, L)`, or `(B, K, L)` beams: the best is taken) is detokenised.
    Returns one string per text, in order. `precision` as in `run_onnx`;
    `options`: {run-time option: value} for every text (e.g.
    `{"max_length": 12, "temperature": 0.7}`), checked as `run_onnx` does.

    Example:

    ```python
    translate_texts("exports/g2p", ["phoneme", "keras"], signature="pronounce")
    # ["F OW N IY M", "K EH R AH S"]
    ```
    """
    directory = Path(directory)
    path = _onnx_path(directory, signature, precision)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"`batch_size` must be a positive integer; got {batch_size!r}.")
    if not (directory / VOCABULARY_FILE).is_file():
        raise ValueError(f"{str(directory)!r} has no {VOCABULARY_FILE} to tokenise texts with.")
    vocabulary = load_vocabulary(directory)
    texts = [texts] if isinstance(texts, str) else list(texts)
    session = loaded_session(path, threads)
    inputs = session.get_inputs()
    if len(inputs) != 1:
        raise ValueError(
            f"signature {signature!r} has inputs {[i.name for i in inputs]}; texts can feed a model with one input."
        )
    names = [o.name for o in session.get_outputs()]
    if "ids" not in names:
        raise ValueError(f"signature {signature!r} has no `ids` output to detokenise; outputs: {names}.")
    dtype = _ONNX_TYPES.get(inputs[0].type, np.int32)
    if options is not None and not isinstance(options, Mapping):
        raise ValueError(f"`options` must be {{run-time option: value}}; got {options!r:.80}.")
    # One value each, for every text: checked once, whatever the batches.
    extra = option_feeds(session_options(session), dict(options or {}), None)
    for name, value in extra.items():
        if value.size > 1:
            raise ValueError(f"`options`: `{name}` must be one value for every text; got {value.tolist()!r:.80}.")
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    results = [None] * len(texts)
    for start in range(0, len(order), batch_size):
        rows = order[start : start + batch_size]
        feed = vocabulary["source"].encode([texts[i] for i in rows], dtype=dtype)
        ids = dict(zip(names, session.run(None, {inputs[0].name: feed, **extra})))["ids"]
        if ids.ndim == 3:
            ids = ids[:, 0]
        for i, text in zip(rows, vocabulary["target"].detokenize(ids)):
            results[i] = text
    return results
