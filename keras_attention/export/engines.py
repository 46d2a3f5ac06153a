"""The engines `keras-attention-serve --engine` runs an export with.

Each engine loads one artefact and answers as `serving._OnnxSignature`
does: `specs` (the data inputs), `feeds(inputs)` (checked arrays, strings
tokenised with the vocabulary), `run(feeds)` ({output name: array}) and
`texts(outputs)` (the `ids` outputs detokenised).

| engine        | artefact                                            | package (extra)          |
|---------------|-----------------------------------------------------|--------------------------|
| `onnxruntime` | `model.onnx` / `<signature>.onnx` (`.int8.onnx`)    | onnxruntime (`onnx`)     |
| `litert`      | `<signature>.tflite` (`.int8.tflite`)               | ai-edge-litert (`litert`)|
| `openvino`    | `model.xml` / `<signature>.xml` and its `.bin`      | openvino (`openvino`)    |
| `ctranslate2` | a model directory written by `export_ctranslate2`   | ctranslate2 (`ctranslate2`) |

LiteRT's and OpenVINO's files hold no assertions: their feeds are checked
in Python against the bounds the export recorded in `report.json` (as
`run_litert` does), ids against the embedding tables of the signature's
ONNX file when the directory has it. OpenVINO's option inputs must all be
fed: one left out is fed an empty array, the export's default.

CTranslate2 takes the search per call, not from the export: greedy (or
`beam_size`), `length_penalty=0` (our unpenalised score: the tokens'
log-probabilities summed, the end token's included) and
`min_decoding_length=0` (our `min_length` default). Of the run-time
options it takes `max_length` (`max_decoding_length`) and `min_length`
(`min_decoding_length`), one value for every input; the others are
refused (`CT2_REFUSED` says why). Its source is the one input `source`;
strings are tokenised with a `vocabulary.json` (given, or in the model
directory) whose tokens must be the model's. A source row longer than the
model's source position table, or a `max_length` beyond its target table
(`position_limits`), is refused before CTranslate2 runs; without
`max_length` it decodes CTranslate2's 256 steps, or the target table's rows
when fewer.

What an engine cannot do here (its package missing, no artefact in the
directory, an option it lacks) raises `EngineRefusal`: the serve command's
exit status 2.
"""

import importlib
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from keras_attention.decoders.runtime_options import RUNTIME_OPTIONS, check_option_values
from keras_attention.export import litert_format, openvino_format
from keras_attention.export.layout import DEFAULT_SIGNATURE, VOCABULARY_FILE, _onnx_file
from keras_attention.export.loaded_onnx import embedding_rows
from keras_attention.export.serving import (
    _check_ids,
    _OnnxSignature,
    check_prefixes,
    option_feeds,
    recorded_signature,
)
from keras_attention.export.vocabulary import _is_text, load_vocabulary

# engine: (the module it imports, the extra that installs it)
ENGINES = {
    "onnxruntime": ("onnxruntime", "onnx"),
    "litert": ("ai_edge_litert", "litert"),
    "openvino": ("openvino", "openvino"),
    "ctranslate2": ("ctranslate2", "ctranslate2"),
}
DEFAULT_ENGINE = "onnxruntime"
CT2_OPTIONS = {"max_length": "max_decoding_length", "min_length": "min_decoding_length"}
CT2_REFUSED = {
    "length_penalty_weight": "CTranslate2's length_penalty divides by m ** a (m tokens, the end token left out), "
    "ours by ((5 + n) / 6) ** a: the two agree at 0 only, which the engine always uses",
    "coverage_penalty_weight": "CTranslate2's coverage_penalty is not verified to equal ours",
    "repetition_penalty": "CTranslate2's repetition_penalty is not verified to equal ours",
    "no_repeat_ngram_size": "CTranslate2's no_repeat_ngram_size is not verified to equal ours",
}
_CT2_MODEL_FILES = ("model.bin", "config.json")


class EngineRefusal(ValueError):
    """What an engine cannot do with this directory or these flags."""


def require(engine):
    """Import the engine's package, or refuse naming the extra that installs it."""
    module, extra = ENGINES[engine]
    try:
        if engine == "ctranslate2":  # first, with its int8-safe CPU backend (ctranslate2/library.py)
            from keras_attention.export.ctranslate2.library import import_ctranslate2

            import_ctranslate2()
        else:
            importlib.import_module(module)
    except ImportError:
        raise EngineRefusal(
            f"--engine {engine} needs the {module!r} package (not installed): "
            f"pip install 'keras-attention-decoders[{extra}]'."
        ) from None


def load_engine(
    engine, directory, signature=DEFAULT_SIGNATURE, threads=None, precision="float32", vocabulary=None, beam_size=None
):
    """The engine's artefact in `directory`, loaded: an object with `specs`, `feeds`, `run` and `texts`.

    `vocabulary` (a `vocabulary.json` or a directory holding one) and
    `beam_size` are CTranslate2's: the other engines' exports hold both."""
    if engine not in ENGINES:
        raise EngineRefusal(f"--engine must be one of {list(ENGINES)}; got {engine!r}.")
    require(engine)
    directory = Path(directory)
    if engine == "onnxruntime":
        return _OnnxSignature(directory, signature, threads, precision)
    if not directory.is_dir():
        raise FileNotFoundError(f"no such directory {str(directory)!r}.")
    if engine == "litert":
        return _LiteRT(directory, signature, threads, precision)
    if engine == "openvino":
        return _OpenVINO(directory, signature, threads, precision)
    return _CTranslate2(directory, signature, threads, precision, vocabulary, beam_size or 1)


def _texts(vocabulary, outputs):
    """{output name: strings} of the integer `ids` / `..._ids` outputs (none without a vocabulary)."""
    if vocabulary is None:
        return {}
    return {
        name: vocabulary["target"].detokenize(value)
        for name, value in outputs.items()
        if (name == "ids" or name.endswith("_ids")) and value.dtype.kind in "iu"
    }


def _missing(engine, directory, path, signature, found, command):
    return EngineRefusal(
        f"--engine {engine}: {str(directory)!r} has no {path.name} for signature {signature!r} "
        f"(found {found or 'none'}); write it with `{command}`."
    )


class _Recorded:
    """A `.tflite` or IR signature: inputs checked by dtype and rank, options
    and prefixes against `report.json`, strings tokenised with the vocabulary."""

    def __init__(self, directory, signature):
        self.directory, self.signature = directory, signature
        recorded = recorded_signature(directory, signature)
        self.options, self.prefixes = recorded.get("options", {}), recorded.get("prefixes", {})
        self.vocabulary = load_vocabulary(directory) if (directory / VOCABULARY_FILE).is_file() else None
        onnx = directory / _onnx_file(signature)
        self.rows = embedding_rows(onnx) if onnx.is_file() else {}

    @property
    def specs(self):
        return {name: None for name in self.input_dtypes if name not in self.options}

    def feeds(self, inputs):
        expected = list(self.specs)
        if not isinstance(inputs, Mapping):
            if len(expected) != 1:
                raise ValueError(f"`inputs` must be {{input name: value}} for a model with inputs {expected}.")
            inputs = {expected[0]: inputs}
        unknown = set(inputs) - set(self.input_dtypes)
        if unknown and unknown <= set(RUNTIME_OPTIONS):
            option_feeds(self.options, {name: inputs[name] for name in unknown}, None)  # names them
        if set(inputs) - set(self.options) != set(expected):
            optional = f" (and optionally the run-time options {list(self.options)})" if self.options else ""
            raise ValueError(f"`inputs` has keys {sorted(inputs)}; the model expects exactly {expected}{optional}.")
        feeds = {}
        for name in expected:
            dtype, value = self.input_dtypes[name], inputs[name]
            if _is_text(value):
                if self.vocabulary is None:
                    raise ValueError(f"input {name!r} is text but {str(self.directory)!r} has no {VOCABULARY_FILE}.")
                feeds[name] = self.vocabulary["source"].encode(value, dtype=dtype)
            else:
                feeds[name] = litert_format._array(name, value, dtype, self.input_ranks[name])
            _check_ids(name, feeds[name], self.rows.get(name))
        batch = next((array.shape[0] for array in feeds.values() if array.ndim >= 1), None)
        given = option_feeds(self.options, {n: v for n, v in inputs.items() if n in self.options}, batch)
        feeds.update({n: given.get(n, np.zeros((0,), self.input_dtypes[n])) for n in self.options})
        check_prefixes(self.prefixes, feeds)
        return feeds

    def texts(self, outputs):
        return _texts(self.vocabulary, outputs)


class _LiteRT(_Recorded):
    def __init__(self, directory, signature, threads, precision):
        super().__init__(directory, signature)
        path = directory / litert_format.litert_file(signature, precision)
        if not path.is_file():
            found = sorted(p.name for p in directory.glob("*.tflite"))
            quantize = " --quantize int8" if precision != "float32" else ""
            command = f"keras-attention-export MODEL.keras {directory} --formats litert{quantize}"
            raise _missing("litert", directory, path, signature, found, command)
        self.model = litert_format.LiteRTSignature(path, signature, threads, self.options)
        self.input_dtypes, self.input_ranks = self.model.input_dtypes, self.model.input_ranks

    def run(self, feeds):
        return self.model.run(feeds)


class _OpenVINO(_Recorded):
    def __init__(self, directory, signature, threads, precision):
        if precision != "float32":
            raise EngineRefusal(
                f"--engine openvino has no --precision {precision}: the IR's weights are float32 "
                "(int8 copies are served by --engine onnxruntime and --engine litert)."
            )
        super().__init__(directory, signature)
        path = directory / openvino_format.ir_file(signature)
        if not path.is_file():
            found = sorted(p.name for p in directory.glob("*.xml"))
            command = f"keras-attention-export MODEL.keras {directory} --formats onnx openvino"
            raise _missing("openvino", directory, path, signature, found, command)
        self.compiled = openvino_format.compile_ir(path, threads=threads)
        ports = {port.get_any_name(): port for port in self.compiled.inputs}
        self.input_dtypes = {name: np.dtype(port.get_element_type().to_dtype()) for name, port in ports.items()}
        self.input_ranks = {name: port.get_partial_shape().rank.get_length() for name, port in ports.items()}

    def run(self, feeds):
        try:
            return openvino_format.run_compiled(self.compiled, feeds)
        except Exception as error:
            raise RuntimeError(
                f"OpenVINO failed on signature {self.signature!r} with inputs "
                f"{ {n: list(a.shape) for n, a in feeds.items()} }: {' '.join(str(error).split())[:400]}"
            ) from error


class _CTranslate2:
    """A CTranslate2 model directory: one input, `source`; greedy or `beam_size` beams."""

    def __init__(self, directory, signature, threads, precision, vocabulary=None, beam_size=1):
        if signature != DEFAULT_SIGNATURE:
            raise EngineRefusal(
                f"--engine ctranslate2 serves a model directory, which holds one model: leave --signature out "
                f"(got {signature!r})."
            )
        if not all((directory / name).is_file() for name in _CT2_MODEL_FILES):
            raise EngineRefusal(
                f"--engine ctranslate2: {str(directory)!r} is not a CTranslate2 model directory (no model.bin and "
                "config.json); write one with keras_attention.export.ctranslate2.export_ctranslate2."
            )
        from keras_attention.export.ctranslate2 import runner
        from keras_attention.export.ctranslate2.library import import_ctranslate2

        ctranslate2 = import_ctranslate2()

        self.directory, self.beam_size = directory, beam_size
        files = runner.read_model(directory)
        self.limits, self.source_tokens, self.end_id = files.limits, list(files.source_tokens), files.end_id
        target_tokens = list(files.target_tokens)
        compute_type = "int8" if precision == "int8" else "default"
        self.translator = ctranslate2.Translator(
            str(directory), device="cpu", compute_type=compute_type, intra_threads=threads or 0
        )
        self.vocabulary = self._vocabulary(vocabulary, target_tokens)
        self.specs = {"source": None}
        self.options = {name: RUNTIME_OPTIONS[name] for name in CT2_OPTIONS}

    def _vocabulary(self, path, target_tokens):
        """The vocabulary tokenising strings: `path`, else the model directory's `vocabulary.json`, else None."""
        if path is None:
            if not (self.directory / VOCABULARY_FILE).is_file():
                return None
            path = self.directory
        vocabulary = load_vocabulary(path)
        for side, tokens in (("source", self.source_tokens), ("target", target_tokens)):
            if list(vocabulary[side].tokens) != list(tokens):
                raise EngineRefusal(
                    f"--vocabulary {str(path)!r}: its {side} tokens are not the CTranslate2 model's "
                    f"({len(vocabulary[side].tokens)} tokens, the model {len(tokens)}); give the vocabulary the "
                    "model was converted with."
                )
        return vocabulary

    def feeds(self, inputs):
        if not isinstance(inputs, Mapping):
            inputs = {"source": inputs}
        refused = sorted(set(inputs) & set(CT2_REFUSED))
        if refused:
            raise EngineRefusal(
                f"--engine ctranslate2 cannot take the run-time option {refused[0]!r}: {CT2_REFUSED[refused[0]]}."
            )
        other = sorted(set(inputs) & set(RUNTIME_OPTIONS) - set(CT2_OPTIONS))
        if other:
            raise EngineRefusal(
                f"--engine ctranslate2 cannot take the run-time option(s) {other}: it runs greedy or beam search "
                f"with {sorted(CT2_OPTIONS)} only."
            )
        if set(inputs) - set(CT2_OPTIONS) != {"source"}:
            raise ValueError(
                f"`inputs` has keys {sorted(inputs)}; a CTranslate2 model takes exactly ['source'] "
                f"(and optionally {sorted(CT2_OPTIONS)})."
            )
        value = inputs["source"]
        if _is_text(value):
            if self.vocabulary is None:
                raise ValueError(
                    f"input 'source' is text but no vocabulary tokenises it: give --vocabulary, or put the "
                    f"export's {VOCABULARY_FILE} in {str(self.directory)!r}."
                )
            source = self.vocabulary["source"].encode(value, dtype="int32")
        else:
            source = litert_format._array("source", value, np.dtype("int32"), 2)
        _check_ids("source", source, len(self.source_tokens))
        # translate_ids cuts each row at its first padding id: CTranslate2
        # answers an empty row with an empty translation, not a decode over
        # an empty memory as Keras does.
        empty = [row for row in range(source.shape[0]) if source.shape[1] == 0 or source[row, 0] == 0]
        if empty:
            raise ValueError(
                f"input 'source' has rows without a token (rows {empty[:8]}, padding id 0 first): CTranslate2 "
                "answers them with an empty translation, where the Keras model decodes; give every row at least "
                "one token, or serve the model's ONNX export with --engine onnxruntime."
            )
        feeds = {"source": source}
        for name in CT2_OPTIONS:
            if name in inputs:
                option = RUNTIME_OPTIONS[name]
                bounds = {"dtype": option.dtype, "minimum": option.minimum, "strict": option.strict}
                feeds[name] = check_option_values("input", name, inputs[name], bounds)
                if feeds[name].size != 1:
                    raise EngineRefusal(
                        f"--engine ctranslate2 takes one `{name}` for every input (a search option of the call); "
                        f"got {feeds[name].tolist()!r:.80}."
                    )
        self._check_lengths(feeds)
        return feeds

    def _check_lengths(self, feeds):
        """Refuse what the position tables cannot take, before anything is
        allocated (a huge --max-length would pad the ids to its width), and a
        `min_length` that leaves the end token no step."""
        from keras_attention.export.ctranslate2 import positions

        if "max_length" in feeds:
            max_length, which = int(feeds["max_length"][0]), f"max_length {feeds['max_length'].tolist()}"
        else:
            max_length = positions.default_decoding_length(self.limits)
            which = f"the default max_length {max_length} (256, or the model's target positions when fewer)"
        if "min_length" in feeds and feeds["min_length"][0] >= max_length:
            raise ValueError(
                f"input `min_length` must be below `max_length` (the end token needs a step); got min_length "
                f"{feeds['min_length'].tolist()} and {which}."
            )
        names = ("input 'source'", "input `max_length`")
        lengths = positions.source_lengths(feeds["source"])
        # A value beyond the model, as LiteRT and OpenVINO refuse a max_length beyond the export's: exit status 1.
        positions.check_positions(self.limits, lengths, max_length, "--engine ctranslate2", names)

    def run(self, feeds):
        from keras_attention.export.ctranslate2 import positions, translate_ids

        options = {"beam_size": self.beam_size, "length_penalty": 0, "min_decoding_length": 0}
        options.update({CT2_OPTIONS[name]: int(value[0]) for name, value in feeds.items() if name in CT2_OPTIONS})
        given = "max_decoding_length" in options
        options.setdefault("max_decoding_length", positions.default_decoding_length(self.limits))
        try:
            result = translate_ids(self.directory, feeds["source"], translator=self.translator, **options)
        except ValueError:  # ours, naming the input
            raise
        except Exception as error:  # CTranslate2's own exception types
            raise RuntimeError(
                f"CTranslate2 failed on the source of shape {list(feeds['source'].shape)}: {error}"
            ) from error
        # The ids are padded with the end id to the limit; CTranslate2 never
        # outputs the end token, so a row ends at the limit only when cut there.
        finished = result["ids"][:, options["max_decoding_length"] - 1] == self.end_id
        if not given:  # the ids as wide as the longest row, not the default limit
            result["ids"] = result["ids"][:, : max(int(result["lengths"].max(initial=0)), 1)]
        return {**result, "finished": finished}

    def texts(self, outputs):
        return _texts(self.vocabulary, outputs)
