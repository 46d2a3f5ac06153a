"""import_tfa_seq2seq: models tfa 0.23 trained (tests/fixtures/tfa_seq2seq,
with the script that made them) give tfa's logits, greedy ids and beam ids."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_attention.tfa_import import import_tfa_seq2seq, main, read_tfa_checkpoint

FIXTURES = Path(__file__).parent / "fixtures" / "tfa_seq2seq"
VARIANTS = ["luong_lstm", "bahdanau_gru"]
MASKED = dict(mask_zero=True, memory_sequence_length="source")  # how the first two fixtures masked


def load(variant, **overrides):
    fixture = json.loads((FIXTURES / variant / "outputs.json").read_text())
    sizes, kind = fixture["sizes"], fixture["variant"]
    options = dict(
        cell=kind["cell"],
        attention=kind["attention"],
        start_token=sizes["start_token"],
        end_token=sizes["end_token"],
        max_length=sizes["max_length"],
        beam_width=sizes["beam_width"],
        length_penalty_weight=sizes["length_penalty_weight"],
        # The first two fixtures predate these keys: their encoder masked, their lengths the source's.
        mask_zero=kind.get("mask_zero", True),
        memory_sequence_length="full" if kind.get("memory_lengths", "source") != "source" else "source",
    )
    options.update(overrides)
    return fixture, import_tfa_seq2seq(FIXTURES / variant / "ckpt", **options)


@pytest.fixture(scope="module", params=VARIANTS)
def imported(request):
    return (request.param, *load(request.param))


def test_teacher_forced_logits_are_tfas(imported):
    _, fixture, models = imported
    source, target_in = (np.asarray(fixture[k], "int32") for k in ("source", "target_in"))
    logits = models["trainer"].predict([source, target_in], verbose=0)
    want = np.asarray(fixture["logits"])
    assert np.abs(want).max() > 1.0  # trained weights, not a near-zero output
    np.testing.assert_allclose(logits, want, atol=1e-5)


def test_greedy_ids_are_tfas(imported):
    _, fixture, models = imported
    result = models["greedy"].predict(np.asarray(fixture["source"], "int32"), verbose=0)
    np.testing.assert_array_equal(result["lengths"], fixture["greedy_lengths"])
    for row, want, length in zip(result["ids"], fixture["greedy_ids"], fixture["greedy_lengths"]):
        np.testing.assert_array_equal(row[:length], want[:length])


def test_beam_ids_scores_and_order_are_tfas(imported):
    _, fixture, models = imported
    result = models["beam"].predict(np.asarray(fixture["source"], "int32"), verbose=0)
    np.testing.assert_array_equal(result["lengths"], fixture["beam_lengths"])
    np.testing.assert_allclose(result["scores"], fixture["beam_scores"], atol=1e-5)
    for rows, wants, lengths in zip(result["ids"], fixture["beam_ids"], fixture["beam_lengths"]):
        for row, want, length in zip(rows, wants, lengths):
            np.testing.assert_array_equal(row[:length], want[:length])


def test_the_imported_decoder_saves_and_decodes_the_same_ids(imported, tmp_path):
    _, fixture, models = imported
    models["beam"].save(tmp_path / "beam.keras")
    loaded = keras.saving.load_model(tmp_path / "beam.keras")
    source = np.asarray(fixture["source"], "int32")
    np.testing.assert_array_equal(
        loaded.predict(source, verbose=0)["ids"], models["beam"].predict(source, verbose=0)["ids"]
    )


def test_the_checkpoint_reader_leaves_the_object_graph_out():
    variables = read_tfa_checkpoint(FIXTURES / "luong_lstm" / "ckpt")
    assert "decoder/attention_mechanism/memory_layer/kernel" in variables
    assert not any("ATTRIBUTES" in k or "OBJECT_GRAPH" in k for k in variables)
    assert variables["decoder/rnn_cell/_attention_layers/0/kernel"].shape == (16 + 16, 16)


def test_roles_can_be_named_and_wrong_options_are_named(tmp_path):
    # Naming the roles by hand gives the same model as finding them.
    fixture, models = load(
        "luong_lstm",
        names={"output_layer": "decoder/fc", "encoder": "encoder/rnn/cell", "decoder_cell": "decoder/decoder_cell"},
    )
    source, target_in = (np.asarray(fixture[k], "int32") for k in ("source", "target_in"))
    np.testing.assert_allclose(models["trainer"].predict([source, target_in], verbose=0), fixture["logits"], atol=1e-5)
    with pytest.raises(ValueError, match=r"`cell` must be one of \['gru', 'lstm'\]; got 'rnn'"):
        load("luong_lstm", cell="rnn")
    with pytest.raises(ValueError, match=r"`attention` must be one of \['luong', 'bahdanau'\]; got 'dot'"):
        load("luong_lstm", attention="dot")
    with pytest.raises(ValueError, match=r"`names` has unknown roles \['decoder'\]"):
        load("luong_lstm", names={"decoder": "decoder"})
    # A GRU's weights do not fit the LSTM it is told to build: named, with both shapes.
    with pytest.raises(
        ValueError, match=r"'encoder/rnn/cell/kernel' has shape \(8, 48\), but the model needs \(8, 64\)"
    ):
        load("bahdanau_gru", encoder="lstm")
    # The mechanism the checkpoint holds is not the one asked for: named, with the right value.
    with pytest.raises(
        ValueError,
        match=r"`attention`='bahdanau', but the mechanism at 'decoder/attention_mechanism' holds "
        r"memory_layer/kernel: a tfa LuongAttention. Pass attention='luong' \(the command: --attention luong\)",
    ):
        load("luong_lstm", attention="bahdanau")
    with pytest.raises(ValueError, match=r"cannot tell which weights play 1 role\(s\): output_layer: found none"):
        load("luong_lstm", names={"target_embedding": "encoder/embedding"})
    with pytest.raises(FileNotFoundError, match=r"no such checkpoint"):
        import_tfa_seq2seq(tmp_path / "missing", "lstm", "luong", 1, 2, 5, **MASKED)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"no checkpoint or SavedModel in this directory"):
        import_tfa_seq2seq(empty, "lstm", "luong", 1, 2, 5, **MASKED)
    # A directory holding the checkpoint works as well as its prefix.
    copy = tmp_path / "run"
    shutil.copytree(FIXTURES / "luong_lstm", copy)
    (copy / "checkpoint").write_text('model_checkpoint_path: "ckpt"\n')
    assert set(read_tfa_checkpoint(copy)) == set(read_tfa_checkpoint(FIXTURES / "luong_lstm" / "ckpt"))


def _cli_args(variant, out_dir):
    fixture = json.loads((FIXTURES / variant / "outputs.json").read_text())
    sizes, kind = fixture["sizes"], fixture["variant"]
    args = [str(FIXTURES / variant / "ckpt"), str(out_dir), "--cell", kind["cell"], "--attention", kind["attention"]]
    args += ["--start-token", str(sizes["start_token"]), "--end-token", str(sizes["end_token"])]
    args += ["--max-length", str(sizes["max_length"]), "--beam-width", str(sizes["beam_width"])]
    args += ["--length-penalty-weight", str(sizes["length_penalty_weight"])]
    args += ["--mask-zero", "true", "--memory-sequence-length", "source"]
    return fixture, args


def _error_lines(capsys):
    captured = capsys.readouterr()
    return [line for line in captured.err.splitlines() if line.startswith("error")], captured


def test_the_command_writes_keras_files_that_decode_tfas_ids(tmp_path, capsys):
    fixture, args = _cli_args("bahdanau_gru", tmp_path / "out")
    assert main(args) == 0
    assert capsys.readouterr().out.split() == [
        "trainer:",
        str(tmp_path / "out" / "trainer.keras"),
        "greedy:",
        str(tmp_path / "out" / "greedy.keras"),
        "beam:",
        str(tmp_path / "out" / "beam.keras"),
    ]
    source = np.asarray(fixture["source"], "int32")
    beam = keras.saving.load_model(tmp_path / "out" / "beam.keras").predict(source, verbose=0)
    np.testing.assert_array_equal(beam["lengths"], fixture["beam_lengths"])
    for rows, wants, lengths in zip(beam["ids"], fixture["beam_ids"], fixture["beam_lengths"]):
        for row, want, length in zip(rows, wants, lengths):
            np.testing.assert_array_equal(row[:length], want[:length])
    greedy = keras.saving.load_model(tmp_path / "out" / "greedy.keras").predict(source, verbose=0)
    np.testing.assert_array_equal(greedy["lengths"], fixture["greedy_lengths"])
    trainer = keras.saving.load_model(tmp_path / "out" / "trainer.keras")
    logits = trainer.predict([source, np.asarray(fixture["target_in"], "int32")], verbose=0)
    np.testing.assert_allclose(logits, fixture["logits"], atol=1e-5)

    # Files already there are kept unless --force.
    assert main(args) == 1
    errors, _ = _error_lines(capsys)
    assert len(errors) == 1 and errors[0].endswith("already exist; pass --force to replace them.")
    assert main([*args, "--force"]) == 0


def test_the_command_fails_in_one_line(tmp_path, capsys):
    _, args = _cli_args("luong_lstm", tmp_path / "out")
    missing = str(tmp_path / "missing" / "ckpt")
    assert main([missing, *args[1:]]) == 1
    errors, _ = _error_lines(capsys)
    assert errors == [
        f"error: `checkpoint` {missing!r}: no such checkpoint (expected PREFIX.index beside PREFIX.data-*)."
    ]
    assert not (tmp_path / "out").exists()
    # A GRU checkpoint read as an LSTM: the importer's message, on one line.
    _, gru_args = _cli_args("bahdanau_gru", tmp_path / "out")
    assert main([*gru_args, "--encoder", "lstm"]) == 1
    errors, _ = _error_lines(capsys)
    assert len(errors) == 1 and "has shape (8, 48), but the model needs (8, 64)" in errors[0]
    with pytest.raises(SystemExit) as exit:
        main([*args, "--name", "decoder"])
    assert exit.value.code == 2
    errors, _ = _error_lines(capsys)
    assert errors == [
        "error: argument --name: expected ROLE=PATH, got 'decoder' (see keras-attention-import-tfa --help)"
    ]


def test_the_module_runs_as_a_command(tmp_path):
    """`python -m keras_attention.tfa_import`: a bad path is status 1 and one `error:` line, no traceback."""
    _, args = _cli_args("luong_lstm", tmp_path / "out")
    completed = subprocess.run(
        [sys.executable, "-m", "keras_attention.tfa_import", str(tmp_path / "nothing"), *args[1:]],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
        cwd=Path(__file__).resolve().parents[1],
    )
    assert completed.returncode == 1, completed.stderr
    assert "Traceback" not in completed.stderr
    assert [line for line in completed.stderr.splitlines() if line.startswith("error")] == [
        f"error: `checkpoint` {str(tmp_path / 'nothing')!r}: no such checkpoint (expected PREFIX.index beside PREFIX.data-*)."
    ]
    assert not (tmp_path / "out").exists()


def test_a_savedmodel_directory_reads_its_variables(tmp_path):
    """A SavedModel keeps its weights as variables/variables.*, a checkpoint
    (the fixture's files laid out so: the branch that finds them; the key
    names of a real tfa SavedModel are not in a fixture)."""
    saved = tmp_path / "saved_model" / "variables"
    saved.mkdir(parents=True)
    for source in (FIXTURES / "luong_lstm").glob("ckpt.*"):
        shutil.copy(source, saved / source.name.replace("ckpt", "variables"))
    want = read_tfa_checkpoint(FIXTURES / "luong_lstm" / "ckpt")
    got = read_tfa_checkpoint(tmp_path / "saved_model")
    assert set(got) == set(want)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])
