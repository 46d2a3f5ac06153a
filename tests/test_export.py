"""The export library, the export command and ONNX serving: parity, signatures, safety, failures."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import onnx
import onnxruntime
import pytest
import tensorflow as tf
from keras import ops

import keras_attention as ka
from keras_attention.export import (
    ExportError,
    decode_ids,
    encode_strings,
    export_model,
    load_vocabulary,
    run_onnx,
    serve_cli,
)
from keras_attention.export import cli as export_cli
from keras_attention.export import models as export_models
from keras_attention.export import signatures as export_signatures
from tests.layer_cases import SCORE_CASES, keras_model, randomize_model, token_batch

ROOT = Path(__file__).resolve().parents[1]
VOCABULARY = 9  # ids; 0 pads, 1 starts, 2 ends
TOY_VOCABULARY = {
    "source": ["<pad>", "a", "b", "c", "d", "e", "f", "g", "h"],
    "target": ["<pad>", "<s>", "</s>", "x", "y", "z", "u", "v", "w"],
    "unknown_token": "h",
    "start_token": "<s>",
    "end_token": "</s>",
}


def onnx_session(path):
    return onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])


# The two commands as a checkout runs them (the installed `keras-attention-export`
# and `keras-attention-serve` call the same `main`s).
EXPORT = ("-m", "keras_attention.export")
SERVE = ("-c", "import sys; from keras_attention.export.serve_cli import main; sys.exit(main())")


def run_script(*args, stdin=None):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run(
        [sys.executable, *map(str, args)], capture_output=True, text=True, cwd=ROOT, env=env, input=stdin, timeout=300
    )


def small_model(vocabulary=20):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    memory = keras.layers.Embedding(vocabulary, 8, mask_zero=True)(tokens)
    pooled = ka.AttentionPooling(6)(memory)
    return keras.Model(tokens, keras.layers.Dense(3, name="logits")(pooled))


# ------------------------------------------------------------ report, parity


def test_every_score_layer_exports_with_parity_and_a_report(tmp_path):
    """One model, one output per score layer of SCORE_CASES: the report is a layer x format table."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    value = keras.layers.Embedding(20, 5, mask_zero=True)(source)
    query = keras.layers.Embedding(20, 4, mask_zero=True)(target)
    outputs = []
    for case in SCORE_CASES:
        key = keras.layers.Dense(4 if case.same_dims else 3)(value)
        context = case.make(name=case.id)(query, value, key=key)
        outputs.append(keras.layers.Dense(2, name=f"{case.id}_logits")(keras.layers.GlobalAveragePooling1D()(context)))
    model = keras.Model([source, target], outputs)
    randomize_model(model, np.random.default_rng(0))

    report = export_model(model, tmp_path / "export")

    assert report.ok
    names = [f"{case.id}_logits" for case in SCORE_CASES]
    for output in names:
        for format in ("saved_model", "onnx"):
            assert report.max_abs_diff(format, output) <= 1e-4
    assert len(report.parity) == 2 * len(SCORE_CASES)
    # Three batch sizes and three lengths were verified.
    shapes = {tuple(b["source"]) for b in report.batches["serving_default"]}
    assert len({s[0] for s in shapes}) >= 2 and len({s[1] for s in shapes}) >= 2
    assert report.signatures["serving_default"]["inputs"]["source"] == {"shape": [None, None], "dtype": "int32"}

    directory = tmp_path / "export"
    assert sorted(p.name for p in directory.iterdir()) == ["model.onnx", "report.json", "saved_model"]
    assert report.paths["onnx"]["serving_default"] == str(directory / "model.onnx")
    written = json.loads((directory / "report.json").read_text())
    assert written == json.loads(report.to_json()) and written["ok"] is True
    table = report.table()
    assert "max |diff|" in table and all(name in table for name in names)
    markdown = report.markdown().splitlines()
    assert markdown[0] == "| output | saved_model | onnx |" and len(markdown) == 2 + len(SCORE_CASES)
    assert all(line.endswith(" ok |") for line in markdown[2:])

    # Named, dynamic inputs and outputs in both artifacts; new shapes run.
    proto = onnx.load(directory / "model.onnx")
    assert [i.name for i in proto.graph.input] == ["source", "target"]
    assert [d.dim_param for d in proto.graph.input[0].type.tensor_type.shape.dim] == ["batch", "source_length"]
    assert sorted(o.name for o in proto.graph.output) == sorted(names)
    rng = np.random.default_rng(1)
    inputs = {"source": token_batch(rng, 5, 13), "target": token_batch(rng, 5, 2)}
    want = dict(zip(names, [np.asarray(x) for x in model([inputs["source"], inputs["target"]])]))
    session = onnx_session(directory / "model.onnx")
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, inputs)))
    restored = tf.saved_model.load(str(directory / "saved_model"))
    served = restored.signatures["serving_default"](**inputs)
    for name in names:
        np.testing.assert_allclose(got[name], want[name], atol=1e-4, err_msg=name)
        np.testing.assert_allclose(served[name], want[name], atol=1e-4, err_msg=name)


# ------------------------------------------------- seq2seq: several signatures


@pytest.fixture(scope="module")
def seq2seq(tmp_path_factory):
    """A teacher-forced model and greedy and beam decoders sharing its layers, exported once."""
    keras.utils.set_random_seed(5)
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    # A Dense encoder keeps the conversion quick: the decode loops are what is under test.
    memory = keras.layers.Dense(8, activation="tanh")(keras.layers.Embedding(VOCABULARY, 5, mask_zero=True)(source))
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    embedding, output_layer = keras.layers.Embedding(VOCABULARY, 5), keras.layers.Dense(VOCABULARY, name="logits")
    decoded = ka.AttentionDecoder(cell, name="decoder")(embedding(target), memory)
    train = keras.Model([source, target], output_layer(decoded))
    greedy = keras.Model(
        source, ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, max_length=7, name="greedy")(memory)
    )
    beam = keras.Model(
        source,
        ka.InferenceDecoder(
            cell,
            embedding,
            output_layer,
            1,
            2,
            max_length=7,
            method="beam",
            beam_width=3,
            length_penalty_weight=0.6,
            name="beam",
        )(memory),
    )
    randomize_model(train, np.random.default_rng(1), scale=1.5)
    directory = tmp_path_factory.mktemp("seq2seq") / "export"
    report = export_model(
        {"serving_default": train, "translate": greedy, "translate_beam": beam}, directory, vocabulary=TOY_VOCABULARY
    )
    return dict(train=train, greedy=greedy, beam=beam, directory=directory, report=report)


def test_teacher_forced_and_decoding_signatures_match_keras(seq2seq):
    report, directory = seq2seq["report"], seq2seq["directory"]
    assert report.ok
    assert set(report.signatures) == {"serving_default", "translate", "translate_beam"}
    assert report.signatures["translate"]["inputs"] == {"source": {"shape": [None, None], "dtype": "int32"}}
    assert set(report.signatures["translate"]["outputs"]) == {"ids", "scores", "lengths", "finished", "alignments"}
    assert set(report.signatures["translate_beam"]["outputs"]) == {
        "ids",
        "scores",
        "lengths",
        "finished",
        "alignments",
        "log_probs",
    }
    for signature in ("translate", "translate_beam"):
        assert report.signatures[signature]["outputs"]["finished"] == {"dtype": "bool"}
        for format in ("saved_model", "onnx"):
            assert report.max_abs_diff(format, "ids", signature) == 0
            assert report.max_abs_diff(format, "lengths", signature) == 0
            assert report.max_abs_diff(format, "finished", signature) == 0
            assert report.max_abs_diff(format, "scores", signature) <= 1e-4
    assert report.max_abs_diff("onnx", "logits") <= 1e-4
    assert {p.name for p in directory.iterdir()} == {
        "saved_model",
        "model.onnx",
        "translate.onnx",
        "translate_beam.onnx",
        "vocabulary.json",
        "report.json",
    }

    # A batch size and source length never traced nor verified: ids still exactly equal.
    sources = token_batch(np.random.default_rng(3), 6, 12, VOCABULARY, 2)
    restored = tf.saved_model.load(str(directory / "saved_model"))  # once: both signatures are in it
    for signature, model in (("translate", seq2seq["greedy"]), ("translate_beam", seq2seq["beam"])):
        want = {k: np.asarray(v) for k, v in model(sources).items()}
        assert len(np.unique(want["ids"])) > 2, "random weights should decode varied ids"
        session = onnx_session(directory / f"{signature}.onnx")
        got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"source": sources})))
        np.testing.assert_array_equal(got["ids"], want["ids"])
        np.testing.assert_allclose(got["alignments"], want["alignments"], atol=1e-4)
        served = restored.signatures[signature](source=tf.constant(sources))
        np.testing.assert_array_equal(served["ids"], want["ids"])


def test_saved_model_cli_lists_the_named_signatures(seq2seq):
    # TensorFlow's own command, run as a module: its console script is not
    # on every installation's PATH, the module always comes with TensorFlow.
    shown = subprocess.run(
        [
            sys.executable,
            "-m",
            "tensorflow.python.tools.saved_model_cli",
            "show",
            "--dir",
            str(seq2seq["directory"] / "saved_model"),
            "--tag_set",
            "serve",
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert shown.returncode == 0, shown.stderr
    for signature in ("serving_default", "translate", "translate_beam"):
        assert f'"{signature}"' in shown.stdout


def test_run_onnx_tokenises_strings_and_detokenises_ids(seq2seq):
    directory = seq2seq["directory"]
    result = run_onnx(directory, {"source": ["abc", "bad", "hello"]}, signature="translate")
    sources = encode_strings(["abc", "bad", "hello"], TOY_VOCABULARY)
    np.testing.assert_array_equal(sources[2], [8, 5, 8, 8, 8])  # "l" and "o" are unknown: "h"
    want = np.asarray(seq2seq["greedy"](sources)["ids"])
    np.testing.assert_array_equal(result["outputs"]["ids"], want)
    assert result["text"]["ids"] == decode_ids(want, TOY_VOCABULARY)
    # One run, no timing: what was fed and what came out.
    assert set(result) == {"inputs", "outputs", "text"} and result["inputs"] == {"source": [3, 5]}
    # One bare list of strings feeds the only input; beam ids detokenise per beam.
    beams = run_onnx(directory, ["ab"], signature="translate_beam")
    assert len(beams["text"]["ids"]) == 1 and len(beams["text"]["ids"][0]) == 3
    with pytest.raises(ValueError, match=r"`inputs` has keys \['src'\]; the model expects exactly \['source'\]"):
        run_onnx(directory, {"src": ["ab"]}, signature="translate")
    with pytest.raises(FileNotFoundError, match=r"no ONNX file .*nope.onnx.* found \['model.onnx', 'translate.onnx'"):
        run_onnx(directory, ["ab"], signature="nope")


def test_serve_onnx_script_prints_the_translations_and_tensors_on_request(seq2seq, capsys):
    done = run_script(
        *SERVE,
        seq2seq["directory"],
        "--signature",
        "translate",
        "--inputs",
        json.dumps({"source": ["abc", "ba"]}),
        "--runs",
        "20",
        "--threads",
        "1",
    )
    assert done.returncode == 0, done.stderr
    sources = encode_strings(["abc", "ba"], TOY_VOCABULARY)
    decoded = {k: np.asarray(v) for k, v in seq2seq["greedy"](sources).items()}
    want = decode_ids(decoded["ids"], TOY_VOCABULARY)
    # What was asked for, one translation a line; no tensor, no alignment.
    assert done.stdout.splitlines() == want
    assert "latency over 20 runs (ms): p50" in done.stderr and "p90" in done.stderr and "p99" in done.stderr

    serve = serve_cli
    directory = str(seq2seq["directory"])
    inputs = seq2seq["directory"].parent / "inputs.json"
    inputs.write_text(json.dumps(["abc", "ba"]))
    assert (
        serve.main([directory, "--signature", "translate", "--inputs-file", str(inputs), "--runs", "3", "--json"]) == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert [row["text"] for row in document["translations"]] == want
    np.testing.assert_allclose([row["score"] for row in document["translations"]], decoded["scores"], atol=1e-4)
    assert "outputs" not in document and document["latency_ms"]["runs"] == 3
    assert set(document["latency_ms"]) == {"p50", "p90", "p99", "mean", "runs"}
    assert 0 < document["latency_ms"]["p50"] <= document["latency_ms"]["p99"]
    # --runs 0: the translations, no timing.
    assert (
        serve.main([directory, "--signature", "translate", "--inputs-file", str(inputs), "--runs", "0", "--json"]) == 0
    )
    assert json.loads(capsys.readouterr().out) == {"translations": document["translations"]}
    assert serve.main([directory, "--signature", "translate", "--inputs-file", str(inputs), "--runs", "0"]) == 0
    captured = capsys.readouterr()
    assert captured.out.splitlines() == want and "latency" not in captured.err

    # A beam search: the best beam, with its score.
    beams = {k: np.asarray(v) for k, v in seq2seq["beam"](sources).items()}
    assert (
        serve.main(
            [directory, "--signature", "translate_beam", "--inputs", json.dumps(["abc", "ba"]), "--runs", "1", "--json"]
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    assert [row["text"] for row in document["translations"]] == decode_ids(beams["ids"][:, 0], TOY_VOCABULARY)
    np.testing.assert_allclose([row["score"] for row in document["translations"]], beams["scores"][:, 0], atol=1e-4)

    # Tensors on request.
    assert (
        serve.main(
            [directory, "--signature", "translate", "--inputs", json.dumps(["abc"]), "--runs", "1", "--all-outputs"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.splitlines()[0] == want[0] and "alignments float32 (1, 7, 3)" in out and "ids int32 (1, 7)" in out
    assert (
        serve.main(
            [
                directory,
                "--signature",
                "translate",
                "--inputs",
                json.dumps(["abc"]),
                "--runs",
                "1",
                "--json",
                "--all-outputs",
            ]
        )
        == 0
    )
    document = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(
        document["outputs"]["alignments"], np.asarray(seq2seq["greedy"](sources[:1])["alignments"]), atol=1e-4
    )

    # A model without ids prints its outputs.
    assert (
        serve.main(
            [directory, "--inputs", json.dumps({"source": sources.tolist(), "target": sources.tolist()}), "--runs", "1"]
        )
        == 0
    )
    assert "logits float32 (2, 3, 9)" in capsys.readouterr().out


@pytest.mark.parametrize(
    "inputs, message",
    [
        ("[]", r"error: input 'source' must have rank 2, shape \(batch, source_length\); got shape \(0,\) \(\[\]\)\."),
        ("5", r"error: input 'source' must have rank 2, shape \(batch, source_length\); got shape \(\) \(5\)\."),
        (
            "null",
            r"error: input 'source' must be a nested list of numbers of shape \(batch, source_length\); got None\.",
        ),
        ("[[1, 2], [3]]", r"error: input 'source' must be a nested list of numbers of shape \(batch, source_length\)"),
        (
            "[[1, 99]]",
            r"error: input 'source' holds the id 99, outside the model's vocabulary: its embedding has 9 rows \(ids 0 to 8\)\.",
        ),
        ("[[1, -1]]", r"error: input 'source' holds the id -1, outside the model's vocabulary"),
        ("[[1.5, 2]]", r"error: input 'source' must hold integers \(it is int32\)"),
        (
            '{"source": [[1]], "extra": [[1]]}',
            r"error: `inputs` has keys \['extra', 'source'\]; the model expects exactly \['source'\]\.",
        ),
        ("{not json", r"error: --inputs is not valid JSON"),
    ],
)
def test_serve_onnx_failures_are_one_line_naming_the_input(seq2seq, capsys, inputs, message):
    serve = serve_cli
    assert serve.main([str(seq2seq["directory"]), "--signature", "translate", "--inputs", inputs, "--runs", "1"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and re.match(message, lines[0]), captured.err


def test_run_onnx_raises_value_errors_naming_the_input(seq2seq):
    directory = seq2seq["directory"]
    with pytest.raises(
        ValueError, match=r"input 'source' holds the id 12, outside the model's vocabulary: its embedding has 9 rows"
    ):
        run_onnx(directory, {"source": [[1, 12]]}, signature="translate")
    with pytest.raises(ValueError, match=r"input 'target' must have rank 2"):
        run_onnx(directory, {"source": [[1]], "target": [1]})
    # An empty length is a valid input: the layers return their zero context.
    empty = run_onnx(directory, {"source": [[]]}, signature="translate")
    assert empty["outputs"]["ids"].shape == (1, 7)


# TensorFlow's C++ start-up logging (absl, cudart), written to stderr when
# the package imports it, whatever TF_CPP_MIN_LOG_LEVEL says.
_TF_LOG = re.compile(r"^(WARNING: All log messages before absl|[IWEF]\d{4} \d\d:\d\d:\d\d)")


def _script_errors(done):
    return [line for line in done.stderr.strip().splitlines() if not _TF_LOG.match(line)]


def test_serve_onnx_script_in_its_own_process_prints_no_traceback(seq2seq):
    done = run_script(*SERVE, seq2seq["directory"], "--signature", "translate", "--inputs", "[[1, 99]]", "--runs", "1")
    assert done.returncode == 1 and done.stdout == ""
    assert _script_errors(done) == [
        "error: input 'source' holds the id 99, outside the model's vocabulary: its embedding has 9 rows (ids 0 to 8)."
    ]


def _serve_in_process(capsys, *argv):
    """`keras-attention-serve argv` in this process (the subprocess above shows
    that a process prints only what `main` prints): (exit status, stderr lines)."""
    from keras_attention.export.serve_cli import main

    try:
        status = main([str(a) for a in argv])
    except SystemExit as stop:  # argparse's refusals
        status = stop.code
    captured = capsys.readouterr()
    assert captured.out == ""
    return status, captured.err.strip().splitlines()


def test_serve_onnx_script_refuses_a_missing_directory_and_bad_flags_in_one_line(seq2seq, tmp_path, capsys):
    status, errors = _serve_in_process(capsys, tmp_path / "nothing", "--inputs", "[[1]]")
    assert status == 1 and len(errors) == 1 and errors[0].startswith("error: no ONNX file")
    assert _serve_in_process(capsys, seq2seq["directory"], "--runs", "many") == (
        2,
        ["error: argument --runs: invalid int value: 'many' (see keras-attention-serve --help)"],
    )
    assert _serve_in_process(capsys, seq2seq["directory"], "--inputs", "[[1]]", "--warmup", "-1") == (
        2,
        ["error: argument --warmup: expected an integer >= 0, got -1 (see keras-attention-serve --help)"],
    )


def test_vocabulary_helpers(tmp_path):
    ids = encode_strings(["ab", "b", ""], TOY_VOCABULARY)
    np.testing.assert_array_equal(ids, [[1, 2], [2, 0], [0, 0]])
    assert decode_ids([[1, 3, 4, 2, 5], [0, 0, 0, 0, 0]], TOY_VOCABULARY) == ["xy", ""]
    # The older list form (what the dates example once wrote): ids for start/end, lower-casing, "<unk>" for the rest.
    (tmp_path / "vocabulary.json").write_text(
        json.dumps(
            {
                "source": ["<pad>", "<unk>", "a", "b"],
                "target": ["<pad>", "<start>", "<end>", "1", "2"],
                "lowercase": True,
                "start": 1,
                "end": 2,
            }
        )
    )
    dates = load_vocabulary(tmp_path)
    np.testing.assert_array_equal(encode_strings(["AbZ"], dates), [[2, 3, 1]])
    assert decode_ids([[1, 3, 4, 2, 3]], dates) == ["12"]
    (tmp_path / "vocabulary.json").write_text("{")
    with pytest.raises(ValueError, match=r"vocabulary: '.*vocabulary.json' is not valid JSON"):
        load_vocabulary(tmp_path)
    with pytest.raises(ValueError, match=r"token 'z' is not in the vocabulary and it has no `unknown_token`"):
        encode_strings("az", {"source": ["<pad>", "a"]})
    with pytest.raises(ValueError, match=r"`vocabulary\['end_token'\]` = 'END' is not in the target tokens"):
        export_model(small_model(), "unused", vocabulary={**TOY_VOCABULARY, "end_token": "END"})


class Classifier(keras.Model):
    """A subclassed model: no symbolic inputs, so export needs an input_signature."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.embedding = keras.layers.Embedding(VOCABULARY, 4, mask_zero=True)
        self.pooling = ka.AttentionPooling(4)
        self.head = keras.layers.Dense(2)

    def call(self, ids):
        return self.head(self.pooling(self.embedding(ids)))


def test_subclassed_model_with_an_input_signature_and_text_samples(tmp_path):
    model = Classifier()
    model(np.ones((1, 3), "int32"))
    with pytest.raises(
        ValueError, match=r"`model` is not a functional model, so its inputs are unknown: pass `input_signature`"
    ):
        export_model(model, tmp_path / "export")
    report = export_model(
        model,
        tmp_path / "export",
        formats=["onnx"],
        input_signature={"source": ((None, None), "int32")},
        vocabulary=TOY_VOCABULARY,
        sample_inputs=[{"source": ["abc", "a"]}, {"source": ["hhhhhhh"]}],
    )
    assert report.ok and report.batches["serving_default"] == [{"source": [2, 3]}, {"source": [1, 7]}]
    assert [i.name for i in onnx_session(tmp_path / "export" / "model.onnx").get_inputs()] == ["source"]


# ------------------------------------------------------------- precision


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_model_is_exported_from_a_float32_copy(policy, tmp_path):
    keras.config.set_dtype_policy(policy)
    model = keras_model(SCORE_CASES[0], 4, 3, 5)
    keras.config.set_dtype_policy("float32")
    randomize_model(model, np.random.default_rng(4))

    report = export_model(model, tmp_path / "export")

    assert report.ok and any(f"dtype policy {policy} -> float32" in note for note in report.notes)
    assert report.max_abs_diff("onnx", report.parity[0].output) <= 1e-4
    rng = np.random.default_rng(5)
    inputs = {"source": token_batch(rng, 3, 6), "target": token_batch(rng, 3, 4)}
    session = onnx_session(tmp_path / "export" / "model.onnx")
    (got,) = session.run(None, inputs)
    assert got.dtype == np.float32
    # Same weights: close to the low-precision model within its own rounding.
    np.testing.assert_allclose(got, np.asarray(model([inputs["source"], inputs["target"]]), np.float32), atol=0.05)


def test_on_a_gpu_rnn_layers_are_rebuilt_without_cudnn(tmp_path, monkeypatch):
    """cuDNN LSTM/GRU ops do not convert: with a GPU present the export uses use_cudnn=False copies."""
    monkeypatch.setattr(export_models, "gpu_present", lambda: True)
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    states = keras.layers.LSTM(4, return_sequences=True)(keras.layers.Embedding(10, 3, mask_zero=True)(tokens))
    model = keras.Model(tokens, keras.layers.Dense(2, name="logits")(ka.AttentionPooling(4)(states)))
    randomize_model(model, np.random.default_rng(7))
    report = export_model(model, tmp_path / "export", formats=["onnx"])
    assert report.ok and any("use_cudnn=False" in note for note in report.notes)
    assert model.layers[2].use_cudnn == "auto"  # the caller's model is untouched


def test_docstring_example_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (example,) = re.findall(r"```python\n(.*?)```", export_model.__doc__.replace("\n    ", "\n"), re.S)
    exec(compile(example, "<export_model example>", "exec"), {})


# ----------------------------------------------------------------- safety


def test_existing_directory_is_refused_unless_overwrite(tmp_path):
    model = small_model()
    directory = tmp_path / "export"
    export_model(model, directory, formats=["onnx"])
    before = (directory / "model.onnx").read_bytes()
    with pytest.raises(FileExistsError, match=r"already exists and is not empty; pass overwrite=True"):
        export_model(model, directory)
    assert (directory / "model.onnx").read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]

    report = export_model(model, directory, formats=["saved_model"], overwrite=True)
    assert report.ok and sorted(p.name for p in directory.iterdir()) == ["report.json", "saved_model"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]

    # overwrite never deletes a directory that is not an export.
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match=r"is not an export directory \(no report.json\)"):
        export_model(model, tmp_path / "mine", overwrite=True)
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep"


@keras.saving.register_keras_serializable(package="tests_export")
class FloatArgmax(keras.layers.Layer):
    """ops.argmax on floats traces to Bitcast/BitwiseAnd, which tf2onnx cannot convert at opset 17."""

    def call(self, x):
        return ops.argmax(x, axis=-1)


def test_an_op_that_does_not_convert_is_named_and_nothing_is_left(tmp_path):
    tokens = keras.Input((None,), dtype="int32", name="tokens")
    logits = keras.layers.Dense(4)(keras.layers.Embedding(10, 3)(tokens))
    model = keras.Model(tokens, FloatArgmax(name="best")(logits))
    directory = tmp_path / "new" / "deeper" / "export"
    with pytest.raises(
        ExportError,
        match=r"signature 'serving_default': TensorFlow op\(s\) with no ONNX conversion at opset 17: Bitcast .*ops.top_k",
    ):
        export_model(model, directory)
    assert list(tmp_path.iterdir()) == []


@keras.saving.register_keras_serializable(package="tests_export")
class DiscardNonFinite(keras.layers.Layer):
    """`where` discarding what it must: log of a negative (NaN), 1/0 (inf)."""

    def call(self, x):
        safe_log = ops.where(x > 0, ops.log(x), ops.zeros_like(x))
        safe_inverse = ops.where(ops.not_equal(x, 0), 1.0 / x, ops.zeros_like(x))
        return safe_log + safe_inverse


def test_a_select_discards_nan_and_inf_in_onnx_as_in_keras(tmp_path):
    # tf2onnx writes a float select as x * cond + y * !cond by default, and
    # NaN * 0 is NaN: the export must keep selects exact.
    x = keras.Input((4,), name="x")
    model = keras.Model(x, DiscardNonFinite(name="safe")(x))
    batch = {"x": np.array([[-1.0, 0.0, 1.0, np.e], [2.0, -3.0, 0.0, 0.5]], np.float32)}
    export_model(model, tmp_path / "export", sample_inputs=[batch], formats=["onnx"])
    session = onnxruntime.InferenceSession(str(tmp_path / "export" / "model.onnx"), providers=["CPUExecutionProvider"])
    (got,) = session.run(None, batch)
    want = [[-1.0, 0.0, 1.0, 1.0 + 1.0 / np.e], [np.log(2.0) + 0.5, -1.0 / 3.0, 0.0, np.log(0.5) + 2.0]]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    graph = onnx.load(str(tmp_path / "export" / "model.onnx")).graph
    assert [n.op_type for n in graph.node].count("Where") == 2


class _FailingPass:
    """A tf2onnx optimizer pass that raises, counting the graphs it saw."""

    calls = []

    def optimize(self, graph, iteration):
        self.calls.append(os.environ.get("TF2ONNX_CATCH_ERRORS"))
        raise RuntimeError("a pass that fails")


def test_tf2onnx_passes_run_without_graph_copies_and_a_failing_pass_is_skipped(tmp_path, monkeypatch):
    import tf2onnx.optimizer

    # No pass fails: one conversion, the passes on the graph itself (the
    # switch set while converting), the user's environment left as it was.
    seen = []
    optimize_graph = tf2onnx.optimizer.optimize_graph
    monkeypatch.setattr(
        tf2onnx.optimizer,
        "optimize_graph",
        lambda graph, catch_errors=True, optimizers=None: (
            seen.append(catch_errors) or optimize_graph(graph, catch_errors, optimizers)
        ),
    )
    monkeypatch.delenv("TF2ONNX_CATCH_ERRORS", raising=False)
    export_model(small_model(), tmp_path / "plain", formats=["onnx"])
    assert seen == [False] and "TF2ONNX_CATCH_ERRORS" not in os.environ

    # A pass that raises: converted again with tf2onnx's own safety net,
    # which skips that pass; the file is still verified against Keras.
    seen.clear()
    _FailingPass.calls.clear()
    get_optimizers = tf2onnx.optimizer._get_optimizers
    passes = dict(get_optimizers(), failing=_FailingPass)
    monkeypatch.setattr(tf2onnx.optimizer, "_get_optimizers", lambda: passes)
    report = export_model(small_model(), tmp_path / "fallback", formats=["onnx"])
    assert report.ok and seen == [False, True]
    assert _FailingPass.calls[0] == "FALSE" and None in _FailingPass.calls[1:]
    assert "TF2ONNX_CATCH_ERRORS" not in os.environ

    # A user who set the switch keeps their choice: one conversion.
    seen.clear()
    monkeypatch.setenv("TF2ONNX_CATCH_ERRORS", "TRUE")
    monkeypatch.setattr(tf2onnx.optimizer, "_get_optimizers", get_optimizers)
    export_model(small_model(), tmp_path / "user", formats=["onnx"])
    assert len(seen) == 1 and os.environ["TF2ONNX_CATCH_ERRORS"] == "TRUE"


def test_a_parity_failure_names_the_output_and_nothing_is_left(tmp_path, monkeypatch):
    # A Keras reference that drifts by 0.5 stands in for a real numerical mismatch.
    call_keras = export_signatures.Signature.call_keras
    monkeypatch.setattr(
        export_signatures.Signature,
        "call_keras",
        lambda self, arrays: {k: v + 0.5 for k, v in call_keras(self, arrays).items()},
    )
    with pytest.raises(
        ExportError, match=r"onnx signature 'serving_default' output 'logits': max \|diff\| 0.5 \(allowed 0.0001\)"
    ) as caught:
        export_model(small_model(), tmp_path / "export", formats=["onnx"])
    assert caught.value.report is not None and not caught.value.report.ok
    assert list(tmp_path.iterdir()) == []


def test_missing_corrupt_and_wrong_model_files_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"`model`: no such file: '.*missing.keras'"):
        export_model(tmp_path / "missing.keras", tmp_path / "out")
    corrupt = tmp_path / "corrupt.keras"
    corrupt.write_bytes(b"this is not a zip archive")
    with pytest.raises(ValueError, match=r"`model`: '.*corrupt.keras' could not be loaded as a Keras model \(corrupt"):
        export_model(corrupt, tmp_path / "out")
    with pytest.raises(ValueError, match=r"`model\['translate'\]` must be a .keras model file; got '.*weights.h5'"):
        (tmp_path / "weights.h5").write_bytes(b"")
        export_model({"serving_default": small_model(), "translate": tmp_path / "weights.h5"}, tmp_path / "out")
    with pytest.raises(ValueError, match=r"`opset` must be an integer from 13 to 18 .*; got 19"):
        export_model(small_model(), tmp_path / "out", opset=19)
    with pytest.raises(
        ValueError,
        match=r"`formats` must be a non-empty selection of \('saved_model', 'onnx', 'openvino', 'litert'\) without",
    ):
        export_model(small_model(), tmp_path / "out", formats=["tflite"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corrupt.keras", "weights.h5"]


# -------------------------------------------------------------------- CLI


def test_export_command_prints_the_table_and_writes_the_json_report(tmp_path, capsys):
    model = small_model()
    randomize_model(model, np.random.default_rng(6))
    model.save(tmp_path / "model.keras")
    done = run_script(
        *EXPORT,
        tmp_path / "model.keras",
        tmp_path / "out",
        "--opset",
        "15",
        "--report",
        tmp_path / "r.json",
    )
    assert done.returncode == 0, done.stderr
    assert "signature" in done.stdout and "max |diff|" in done.stdout and "onnx" in done.stdout
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["ok"] is True and report["opset"] == 15
    assert {(row["format"], row["output"]) for row in report["parity"]} == {
        ("saved_model", "logits"),
        ("onnx", "logits"),
    }
    assert json.loads((tmp_path / "r.json").read_text()) == report

    # The failure paths, through the same entry point in-process.
    main = export_cli.main
    assert main([str(tmp_path / "model.keras"), str(tmp_path / "out")]) == 1
    assert "already exists and is not empty; pass overwrite=True (--force)" in capsys.readouterr().err
    (tmp_path / "bad.keras").write_text("garbage")
    assert main([str(tmp_path / "bad.keras"), str(tmp_path / "other"), "--force"]) == 1
    assert "could not be loaded as a Keras model" in capsys.readouterr().err
    assert main([str(tmp_path / "model.keras"), str(tmp_path / "out"), "--force", "--formats", "onnx"]) == 0
    assert "serving_default  onnx" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["model.onnx", "report.json"]
    assert not (tmp_path / "other").exists()


def _one_error_line(capsys):
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def test_export_command_failures_are_one_line_and_leave_nothing(tmp_path, capsys, monkeypatch):
    model = small_model()
    model(np.ones((1, 3), "int32"))
    model.save(tmp_path / "model.keras")
    main = export_cli.main
    keras_file = str(tmp_path / "model.keras")

    # The output path under a regular file.
    (tmp_path / "file.txt").write_text("not a directory")
    assert main([keras_file, str(tmp_path / "file.txt" / "out")]) == 1
    assert "which is a file; expected a path under a directory" in _one_error_line(capsys)
    assert main([keras_file, str(tmp_path / "file.txt" / "deeper" / "out")]) == 1
    line = _one_error_line(capsys)
    assert f"is under {str(tmp_path / 'file.txt')!r}, which is a file" in line

    # A directory nobody may write in (as root: a read-only file system).
    if os.geteuid() == 0:
        target = Path("/sys/keras_attention_export_test/out")
    else:
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        target = locked / "sub" / "out"
    assert main([keras_file, str(target)]) == 1
    line = _one_error_line(capsys)
    assert "cannot create the export there" in line
    assert not target.parent.exists()

    # Any other failure (here TensorFlow's) is one line too, named by its type.
    def broken(*args, **kwargs):
        raise tf.errors.InternalError(None, None, "the graph\nfell over")

    monkeypatch.setattr(export_cli, "export_model", broken)
    assert main([keras_file, str(tmp_path / "out")]) == 1
    assert _one_error_line(capsys) == "error: InternalError: the graph fell over"
    assert not (tmp_path / "out").exists()

    # Usage errors as well, with status 2.
    with pytest.raises(SystemExit) as exit:
        main([keras_file, str(tmp_path / "out"), "--opset", "high"])
    assert exit.value.code == 2
    assert (
        _one_error_line(capsys)
        == "error: argument --opset: invalid int value: 'high' (see keras-attention-export --help)"
    )


def test_token_vocabularies_round_trip_through_the_vocabulary_file(tmp_path):
    from keras_attention.export.vocabulary import vocabulary_json
    from keras_attention.text import Vocabulary

    phones = Vocabulary(["<pad>", "<s>", "</s>", "AH", "B"], separator=" ", start_token="<s>", end_token="</s>")
    letters = Vocabulary(["<pad>", "<unk>", "a", "b"], unknown_token="<unk>", lowercase=True)
    vocabulary = {"source": letters, "target": phones}
    (tmp_path / "vocabulary.json").write_text(vocabulary_json(vocabulary))
    loaded = load_vocabulary(tmp_path)
    assert loaded == vocabulary
    np.testing.assert_array_equal(encode_strings(["Ab", "bz"], loaded), [[2, 3], [3, 1]])
    # Phones come back as separated tokens, not glued characters.
    assert decode_ids([[3, 4, 2, 4], [4, 4, 4, 0]], loaded) == ["AH B", "B B B"]
