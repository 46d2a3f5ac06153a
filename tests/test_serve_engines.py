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
import time

import numpy as np
import pytest

from keras_attention.export import export_model
from keras_attention.export.serve_cli import main as serve
from keras_attention.text import Vocabulary
from tests.export_models import sharpened_option_model
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
    return sharpened_option_model(VOCABULARY, ("max_length", "min_length"), 3)


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


# ---------------------------------------------------------------- CTranslate2


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """test_ctranslate2.py's pre-norm Transformer as a CTranslate2 model
    directory, and the export's vocabulary.json beside it (not inside)."""
    pytest.importorskip(
        "keras_attention.export.ctranslate2",
        reason="CTranslate2 is not installed: pip install 'keras-attention-decoders[ctranslate2]'",
    )
    from keras_attention.export.vocabulary import vocabulary_json
    from tests.test_ctranslate2 import SOURCE_TOKENS, TARGET_TOKENS, Seq2Seq

    model = Seq2Seq()
    directory = model.export(tmp_path_factory.mktemp("ct2") / "model")
    vocabulary = {
        "source": Vocabulary(SOURCE_TOKENS, separator=" ", unknown_token="<unk>"),
        "target": Vocabulary(TARGET_TOKENS, separator=" ", start_token="<s>", end_token="</s>"),
    }
    path = directory.parent / "vocabulary.json"
    path.write_text(vocabulary_json(vocabulary), encoding="utf-8")
    return model, directory, path, vocabulary


ROWS = 16  # of test_ctranslate2.py's sources


def test_ctranslate2_prints_what_keras_decodes(converted, capsys, tmp_path):
    model, directory, path, vocabulary = converted
    from tests.test_ctranslate2 import MAX_LENGTH

    source = model.source[:ROWS]
    texts = [" ".join(vocabulary["source"].tokens[i] for i in row if i) for row in source]
    ct2 = [directory, "--engine", "ctranslate2", "--max-length", MAX_LENGTH]
    for flags, ours in (([], model.greedy), (["--min-length", "4"], model.decode(min_length=4))):
        ids = ours["ids"][:ROWS]
        assert (ours["lengths"][:ROWS] < MAX_LENGTH).any() and len({tuple(row) for row in ids}) >= 5
        document = _json(capsys, *ct2, *flags, "--inputs", json.dumps({"source": source.tolist()}))
        np.testing.assert_array_equal(document["outputs"]["ids"], ids)
        np.testing.assert_array_equal(document["outputs"]["lengths"], ours["lengths"][:ROWS])
        np.testing.assert_allclose(document["outputs"]["scores"], ours["scores"][:ROWS], atol=1e-4)
        # A row that used every step without the end token is unfinished.
        finished = (ids == 2).any(1)
        assert document["outputs"]["finished"] == finished.tolist() and not all(finished)
        # Strings, tokenised with --vocabulary: the translations are Keras's ids detokenised.
        expected = vocabulary["target"].detokenize(ids)
        document = _json(capsys, *ct2, *flags, "--vocabulary", path, "--inputs", json.dumps({"source": texts}))
        assert [row["text"] for row in document["translations"]] == expected
        assert [row["finished"] for row in document["translations"]] == finished.tolist()
        file = tmp_path / "texts.txt"
        file.write_text("\n".join(texts), encoding="utf-8")
        status, out, _ = _serve(capsys, *ct2, *flags, "--vocabulary", path, "--texts", file, "--batch-size", "5")
        assert status == 0 and out == "".join(f"{t}\t{e}\n" for t, e in zip(texts, expected))
    # The vocabulary.json inside the model directory is found without --vocabulary.
    shutil.copy(path, directory / "vocabulary.json")
    try:
        status, out, err = _serve(capsys, *ct2, "--inputs", json.dumps(texts[:2]), "--runs", "2", "--warmup", "0")
    finally:
        (directory / "vocabulary.json").unlink()
    assert status == 0 and out == "".join(f"{e}\n" for e in vocabulary["target"].detokenize(model.greedy["ids"][:2]))
    assert err.splitlines()[-1].startswith("latency over 2 runs (ms): p50 ")


def test_ctranslate2_beam_size_is_its_search(converted, capsys):
    from keras_attention.export.ctranslate2 import translate_ids
    from tests.test_ctranslate2 import MAX_LENGTH, SAME_AS_OURS

    model, directory, _, _ = converted
    source = model.source[:ROWS]
    document = _json(
        capsys, directory, "--engine", "ctranslate2", "--beam-size", "3", "--max-length", MAX_LENGTH,
        "--inputs", json.dumps({"source": source.tolist()}),
    )  # fmt: skip
    beam = translate_ids(directory, source, beam_size=3, **SAME_AS_OURS)
    np.testing.assert_array_equal(document["outputs"]["ids"], beam["ids"])
    np.testing.assert_allclose(document["outputs"]["scores"], beam["scores"], atol=1e-6)
    # Three beams find sequences at least as likely as greedy's, and some more likely.
    greedy = np.asarray(model.greedy["scores"][:ROWS])
    assert (beam["scores"] >= greedy - 1e-4).all() and (beam["scores"] > greedy + 1e-3).any()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--repetition-penalty", "1.5"], "cannot take the run-time option 'repetition_penalty': CTranslate2's"),
        (["--length-penalty-weight", "1"], "cannot take the run-time option 'length_penalty_weight': CTranslate2's length_penalty divides by m ** a"),
        (["--temperature", "0.5"], "cannot take the run-time option(s) ['temperature']: it runs greedy or beam search with ['max_length', 'min_length'] only"),
        (["--max-length", "[4, 5]"], None),  # replaced below: a per-input list in the JSON
        (["--signature", "translate"], "serves a model directory, which holds one model: leave --signature out"),
    ],
)  # fmt: skip
def test_ctranslate2_refuses_what_it_cannot_take(converted, argv, message, capsys):
    model, directory, _, _ = converted
    inputs = {"source": model.source[:2].tolist()}
    if message is None:
        argv, inputs["max_length"] = [], [4, 5]
        message = "takes one `max_length` for every input (a search option of the call); got [4, 5]"
    status, out, err = _serve(capsys, directory, "--engine", "ctranslate2", *argv, "--inputs", json.dumps(inputs))
    assert (status, out, err.count("\n")) == (2, "", 1) and err.startswith("error: --engine ctranslate2 "), err
    assert message in err, err


def test_ctranslate2_refuses_a_source_row_without_tokens(converted, capsys):
    """CTranslate2 answers an empty row with an empty translation where Keras
    decodes over an empty memory: refused naming the input, not a different answer."""
    _, directory, _, _ = converted
    for source in ([[]], [[0, 0], [3, 4]]):
        inputs = json.dumps({"source": source})
        status, out, err = _serve(capsys, directory, "--engine", "ctranslate2", "--inputs", inputs)
        assert status == 1 and out == "" and "input 'source' has rows without a token" in err, err


def test_ctranslate2_refuses_a_request_beyond_its_position_tables(converted, capsys, tmp_path):
    """A source longer than the model's source position table, or a --max-length beyond its target
    table, is refused before CTranslate2 runs: one line naming the input and the limit, exit status 1
    (a value beyond the model, as LiteRT and OpenVINO refuse a max_length beyond the export's)."""
    from keras_attention.export.ctranslate2.positions import RECORD_KEY
    from tests.test_ctranslate2 import MAX_LENGTH

    model, directory, _, _ = converted
    way_out = (
        "convert the model with a larger `max_positions=` (export_ctranslate2; a LearnedPositionEmbedding's table "
        "keeps its own `max_length`).\n"
    )
    # The fixture's tables hold the default 1024 positions: a huge --max-length is refused at once
    # (it was run, and its ids padded to 100000000 columns).
    inputs = json.dumps(model.source[:ROWS].tolist())
    begin = time.perf_counter()
    status, out, err = _serve(
        capsys, directory, "--engine", "ctranslate2", "--max-length", "100000000", "--inputs", inputs
    )
    assert time.perf_counter() - begin < 10
    assert (status, out) == (1, "") and err == (
        "error: --engine ctranslate2: input `max_length` is 100000000, beyond the model's 1024 target positions; "
        f"expected at most 1024: {way_out}"
    ), err
    # Tables of 8 positions: up to 8 steps Keras's greedy ids (decoded to MAX_LENGTH), cut where longer.
    small = model.export(tmp_path / "small", max_positions=8)
    old = tmp_path / "old"  # as written before the limits were recorded: they are read from model.bin
    shutil.copytree(small, old)
    config = json.loads((old / "config.json").read_text())
    del config[RECORD_KEY]
    (old / "config.json").write_text(json.dumps(config))
    lengths = model.greedy["lengths"][:ROWS]
    assert MAX_LENGTH > 8 and (lengths <= 8).any() and (lengths > 8).any()
    for served in (small, old):
        ct2 = [served, "--engine", "ctranslate2", "--inputs", inputs]
        for flags in (["--max-length", "8"], []):  # without --max-length: the table's 8 steps, not 256
            document = _json(capsys, *ct2, *flags)
            width = 8 if flags else int(np.minimum(lengths, 8).max())
            np.testing.assert_array_equal(document["outputs"]["ids"], model.greedy["ids"][:ROWS, :width])
            np.testing.assert_array_equal(document["outputs"]["lengths"], np.minimum(lengths, 8))
            assert document["outputs"]["finished"] == (lengths <= 8).tolist()
            ended = lengths <= 8
            np.testing.assert_allclose(
                np.asarray(document["outputs"]["scores"])[ended], model.greedy["scores"][:ROWS][ended], atol=1e-4
            )
        status, out, err = _serve(capsys, *ct2, "--min-length", "8")  # the default limit leaves no step
        assert (status, out) == (1, "") and err == (
            "error: input `min_length` must be below `max_length` (the end token needs a step); got min_length [8] "
            "and the default max_length 8 (256, or the model's target positions when fewer).\n"
        ), err
        status, out, err = _serve(capsys, *ct2, "--max-length", "9")
        assert (status, out) == (1, "") and err == (
            f"error: --engine ctranslate2: input `max_length` is 9, beyond the model's 8 target positions; expected "
            f"at most 8: {way_out}"
        ), err
        longer = json.dumps([[3, 4] + [0] * 8, [3] * 9 + [0]])  # padding is no token: row 1 has 9
        status, out, err = _serve(capsys, served, "--engine", "ctranslate2", "--inputs", longer)
        assert (status, out) == (1, "") and err == (
            "error: --engine ctranslate2: input 'source' row 1 has 9 tokens, beyond the model's 8 source positions; "
            f"expected at most 8 tokens a row (before the padding): {way_out}"
        ), err


def test_ctranslate2_refuses_another_vocabulary_and_bad_values(converted, exported, capsys):
    model, directory, _, _ = converted
    other = exported[0] / "vocabulary.json"
    status, _, err = _serve(capsys, directory, "--engine", "ctranslate2", "--vocabulary", other, "--inputs", "[[2]]")
    assert status == 2 and err == (
        f"error: --vocabulary {str(other)!r}: its source tokens are not the CTranslate2 model's (9 tokens, the model "
        "20); give the vocabulary the model was converted with.\n"
    )
    for inputs, flags, message in [
        ([[2, 25]], [], "error: input 'source' holds the id 25, outside the model's vocabulary: its embedding has 20 rows"),
        ([[2.5]], [], "error: input 'source' must hold integers (it is int32)"),
        ([[2, 3]], ["--min-length", "5", "--max-length", "5"], "error: input `min_length` must be below `max_length`"),
        ([[2, 3]], ["--max-length", "0"], "error: input `max_length` must be an integer >= 1; got 0"),
        (["s2 s3"], [], "error: input 'source' is text but no vocabulary tokenises it: give --vocabulary"),
    ]:  # fmt: skip
        status, out, err = _serve(capsys, directory, "--engine", "ctranslate2", *flags, "--inputs", json.dumps(inputs))
        assert (status, out, err.count("\n")) == (1, "", 1) and err.startswith(message), err


def test_ctranslate2_int8_is_its_compute_type(converted, capsys):
    """`--precision int8`: CTranslate2 quantizes the float32 weights as it loads them."""
    from tests.test_ctranslate2 import MAX_LENGTH

    model, directory, _, _ = converted
    source = model.source[:ROWS]
    inputs = json.dumps({"source": source.tolist()})
    flags = [directory, "--engine", "ctranslate2", "--max-length", MAX_LENGTH, "--inputs", inputs]
    document = _json(capsys, *flags, "--precision", "int8")
    ids = np.asarray(document["outputs"]["ids"])
    same = (ids == model.greedy["ids"][:ROWS]).all(1)
    # Measured: 15 of the 16 rows identical, their scores moved by the quantization (at most 0.26).
    assert same.mean() >= 0.75, same.mean()
    scores = np.asarray(document["outputs"]["scores"])[same]
    np.testing.assert_allclose(scores, model.greedy["scores"][:ROWS][same], atol=0.5)
    assert np.abs(scores - model.greedy["scores"][:ROWS][same]).max() > 1e-5
