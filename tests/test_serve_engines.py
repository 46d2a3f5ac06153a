"""`keras-attention-serve --engine`: LiteRT, OpenVINO and CTranslate2 print
what onnxruntime (or Keras, for CTranslate2's Transformer) prints for the
same inputs and options, in text and JSON, timed alike; and each refusal is
one line with exit status 2: a missing package, a directory without the
engine's artefact, an option the engine cannot take. Bad values are one
line with exit status 1, as onnxruntime's are.

One export of a greedy decoder with run-time `max_length` and `min_length`
(ONNX, OpenVINO IR, LiteRT) and one CTranslate2 model, made once each."""

import json
import re
import shutil
import sys

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.export import export_model
from keras_attention.export.serve_cli import main as serve
from keras_attention.text import Vocabulary
from tests.test_runtime_options_export import VOCABULARY, keras_ids

pytest.importorskip(
    "ai_edge_litert", reason="ai-edge-litert is not installed: pip install 'keras-attention-decoders[litert]'"
)
pytest.importorskip("openvino", reason="OpenVINO is not installed: pip install 'keras-attention-decoders[openvino]'")

SOURCE = Vocabulary(["<pad>", *"abcdefgh"])
TARGET = Vocabulary(["<pad>", "<start>", "<end>", *"abcdef"], start_token="<start>", end_token="<end>")
TEXTS = ["abc", "hgfed", "a", "gabbe"]
# Options that change the ids (test_runtime_options_export.py checks each one does).
FLAGS = ["--max-length", "6", "--min-length", "2"]
ENGINES = ("litert", "openvino")


def greedy_with_lengths():
    """A greedy decoder with run-time `max_length` and `min_length`, Luong's
    general score in its cell (OpenVINO's runtime fails on the additive
    score's graph: test_export_openvino.py), sharpened so that the source
    and the options change the ids."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    embedding = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)
    decoder = ka.InferenceDecoder(
        ka.AttentionGRUCell(8, ka.GeneralAttention()),
        keras.layers.Embedding(VOCABULARY, 5),
        keras.layers.Dense(VOCABULARY),
        1,
        2,
        8,
        runtime_options=("max_length", "min_length"),
    )
    options = decoder.option_inputs()
    model = keras.Model({"source": source, **options}, decoder(embedding(source), options=options))
    for layer in (embedding, decoder.embedding):
        layer.set_weights([w * 10.0 for w in layer.get_weights()])
    kernel, _ = decoder.output_layer.get_weights()
    bias = np.random.default_rng(3).normal(0, 0.5, VOCABULARY) - 0.5 * (np.arange(VOCABULARY) == 2)
    decoder.output_layer.set_weights([kernel * 6.0, bias])
    return model, decoder


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model, decoder = greedy_with_lengths()
    directory = tmp_path_factory.mktemp("engines") / "export"
    export_model(
        model, directory, formats=["onnx", "openvino", "litert"], vocabulary={"source": SOURCE, "target": TARGET}
    )
    return directory, model, decoder


def _serve(capsys, *argv):
    """(exit status, stdout, stderr) of the serve command."""
    status = serve([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _json(capsys, *argv):
    status, out, err = _serve(capsys, *argv, "--json", "--all-outputs", "--runs", "0")
    assert status == 0, err
    return json.loads(out)


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_prints_what_onnxruntime_prints(exported, engine, capsys):
    directory, model, decoder = exported
    inputs = json.dumps({"source": TEXTS})
    reference = _json(capsys, directory, "--inputs", inputs, *FLAGS)
    # onnxruntime's ids are Keras's: what every engine is held to.
    batch = {"source": SOURCE.encode(TEXTS), "max_length": 6, "min_length": 2}
    np.testing.assert_array_equal(reference["outputs"]["ids"], keras_ids(model, decoder, batch))
    assert len({row["text"] for row in reference["translations"]}) > 1
    document = _json(capsys, directory, "--engine", engine, "--inputs", inputs, *FLAGS)
    assert document["outputs"]["ids"] == reference["outputs"]["ids"]
    for row, expected in zip(document["translations"], reference["translations"]):
        assert (row["text"], row["finished"]) == (expected["text"], expected["finished"])
        assert row["score"] == pytest.approx(expected["score"], abs=1e-4)
    # Text mode: one translation a line, and the --texts file form.
    assert _serve(capsys, directory, "--engine", engine, "--inputs", inputs, *FLAGS, "--runs", "0")[1] == "".join(
        row["text"] + "\n" for row in reference["translations"]
    )
    texts = directory.parent / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    expected = _serve(capsys, directory, "--texts", texts, *FLAGS)
    assert expected[0] == 0 and expected[1].count("\t") == len(TEXTS)
    assert _serve(capsys, directory, "--engine", engine, "--texts", texts, "--batch-size", "2", *FLAGS) == expected
    # Without the flags, the export's defaults (empty option inputs).
    default = _json(capsys, directory, "--inputs", inputs)
    assert (
        _json(capsys, directory, "--engine", engine, "--inputs", inputs)["outputs"]["ids"] == default["outputs"]["ids"]
    )


@pytest.mark.parametrize("engine", ENGINES)
def test_each_engine_is_timed(exported, engine, capsys):
    directory, _, _ = exported
    status, out, err = _serve(
        capsys, directory, "--engine", engine, "--inputs", '{"source": ["abc"]}', "--runs", "3", "--warmup", "1"
    )
    assert status == 0 and out.count("\n") == 1
    assert err.startswith("latency over 3 runs (ms): p50 ")
    status, out, _ = _serve(capsys, directory, "--engine", engine, "--inputs", '["abc"]', "--runs", "2", "--json")
    assert status == 0 and json.loads(out)["latency_ms"]["runs"] == 2


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    "inputs, flags, message",
    [
        ({"source": [[1.5, 2.0]]}, [], r"input 'source' must hold integers \(it is int32\)"),
        ({"source": [1, 2]}, [], r"input 'source' must have rank 2"),
        (
            {"source": [[1, 9]]},
            [],
            r"input 'source' holds the id 9, outside the model's vocabulary: its embedding has 9 rows",
        ),
        ({"source": ["abc"]}, ["--max-length", "9"], r"input `max_length` must be an integer from 1 to 8; got 9"),
        ({"source": ["abc"]}, ["--min-length", "6", "--max-length", "6"], r"`min_length` must be below `max_length`"),
        ({"source": ["abc"], "target": [[1]]}, [], r"`inputs` has keys \['source', 'target'\]; the model expects"),
    ],
)
def test_bad_values_are_one_line_and_status_1(exported, engine, inputs, flags, message, capsys):
    directory, _, _ = exported
    status, out, err = _serve(capsys, directory, "--engine", engine, "--inputs", json.dumps(inputs), *flags)
    assert (status, out, err.count("\n")) == (1, "", 1), err
    assert err.startswith("error: ") and re.search(message, err), err


@pytest.mark.parametrize(
    "engine, module, extra",
    [
        ("onnxruntime", "onnxruntime", "onnx"),
        ("litert", "ai_edge_litert", "litert"),
        ("openvino", "openvino", "openvino"),
        ("ctranslate2", "ctranslate2", "ctranslate2"),
    ],
)
def test_a_missing_package_names_its_extra(exported, engine, module, extra, monkeypatch, capsys):
    directory, _, _ = exported
    monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    status, out, err = _serve(capsys, directory, "--engine", engine, "--inputs", '["abc"]')
    assert (status, out) == (2, "")
    assert err == (
        f"error: --engine {engine} needs the {module!r} package (not installed): "
        f"pip install 'keras-attention-decoders[{extra}]'.\n"
    )


def test_a_directory_without_the_artefact_names_the_export_command(exported, capsys, tmp_path):
    directory, _, _ = exported
    onnx_only = tmp_path / "onnx_only"
    shutil.copytree(directory, onnx_only, ignore=shutil.ignore_patterns("*.tflite", "*.xml", "*.bin"))
    for engine, written, command in [
        ("litert", "serving_default.tflite", f"keras-attention-export MODEL.keras {onnx_only} --formats litert"),
        ("openvino", "model.xml", f"keras-attention-export MODEL.keras {onnx_only} --formats onnx openvino"),
    ]:
        status, out, err = _serve(capsys, onnx_only, "--engine", engine, "--inputs", '["abc"]')
        assert (status, out) == (2, "")
        assert err == (
            f"error: --engine {engine}: {str(onnx_only)!r} has no {written} for signature 'serving_default' "
            f"(found none); write it with `{command}`.\n"
        )
    status, _, err = _serve(capsys, directory, "--engine", "litert", "--precision", "int8", "--inputs", '["abc"]')
    assert status == 2 and "has no serving_default.int8.tflite" in err and "--formats litert --quantize int8`" in err
    status, _, err = _serve(capsys, directory, "--engine", "litert", "--signature", "other", "--inputs", '["abc"]')
    assert status == 2 and "has no other.tflite for signature 'other' (found ['serving_default.tflite'])" in err
    status, _, err = _serve(capsys, directory, "--engine", "openvino", "--precision", "int8", "--inputs", '["abc"]')
    assert status == 2 and err.startswith("error: --engine openvino has no --precision int8: the IR's weights")
    status, _, err = _serve(capsys, directory, "--engine", "ctranslate2", "--inputs", '["abc"]')
    assert status == 2 and "is not a CTranslate2 model directory (no model.bin and config.json)" in err
    # CTranslate2's own flags, with another engine: refused like any bad flag.
    for flag, value in (("--vocabulary", directory / "vocabulary.json"), ("--beam-size", 2)):
        with pytest.raises(SystemExit) as exited:
            serve([str(directory), flag, str(value), "--inputs", '["abc"]'])
        assert exited.value.code == 2
        assert capsys.readouterr().err.startswith(f"error: argument {flag}: only --engine ctranslate2 takes it")
