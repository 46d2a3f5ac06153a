"""Banned and stop sequences exported with the loop inside: a beam decoder
holding both agrees in Keras, the SavedModel and ONNX, and its served
hypotheses keep the rules; given per request, they are inputs whose ids
serving checks (the rules themselves: test_token_sequences.py)."""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attention.export import export_model, run_onnx
from keras_attention.export.serve_cli import main as serve
from tests.test_runtime_options import make_decoder
from tests.test_runtime_options_export import VOCABULARY, keras_ids, option_model, sources

END = 2


def contains(row, sequence):
    return any(list(row[i : i + len(sequence)]) == sequence for i in range(len(row) - len(sequence) + 1))


def test_a_beam_decoder_with_banned_and_stop_sequences_exports_with_parity(tmp_path):
    source = sources()
    plain, decoder = option_model("beam", names=())
    free = keras_ids(plain, decoder, {"source": source})  # (B, K, T)
    pairs = sorted(
        {(int(a), int(b)) for row in free.reshape(-1, free.shape[-1]) for a, b in zip(row[:-1], row[1:])} - {(END, END)}
    )
    banned = [list(pair) for pair in pairs if END not in pair][:2]
    stop = [[int(next(token for token in free[:, :, 0].reshape(-1) if token != END))]]
    assert banned
    model, decoder = option_model("beam", names=(), banned_sequences=banned, stop_sequences=stop)
    report = export_model(model, tmp_path / "export", sample_inputs=[{"source": source}, {"source": source[:1]}])
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "ids") == 0 and report.max_abs_diff(format, "lengths") == 0
        assert report.max_abs_diff(format, "scores") <= 1e-4
    served = run_onnx(tmp_path / "export", {"source": source})["outputs"]["ids"]
    assert not np.array_equal(served, free)
    stopped = 0
    for row in served.reshape(-1, served.shape[-1]):
        row = list(row)
        assert not any(contains(row, sequence) for sequence in banned), (row, banned)
        if stop[0][0] in row:  # the output ends right after the stop token
            at = row.index(stop[0][0])
            assert at + 1 == len(row) or row[at + 1] == END, row
            stopped += 1
    assert stopped


def test_sequences_given_per_request_are_inputs_served_with_parity_and_checked(tmp_path, capsys):
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    banned = keras.Input((None, None), dtype="int32", name="banned_sequences")
    stop = keras.Input((None, None), dtype="int32", name="stop_sequences")
    decoder = make_decoder((), method="beam", beam_width=3)
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    outputs = decoder(memory, banned_sequences=banned, stop_sequences=stop)
    model = keras.Model({"source": source, "banned_sequences": banned, "stop_sequences": stop}, outputs)
    free = np.asarray(model({"source": sources(), **_none(3)})["ids"])
    first = [int(next(t for t in row.reshape(-1) if t != END)) for row in free]
    request = {
        "source": sources(),
        "banned_sequences": np.array([[[first[0], -1], [5, 6]], [[-1, -1], [-1, -1]], [[7, 7], [first[2], -1]]]),
        "stop_sequences": np.array([[[first[1]]], [[first[1]]], [[-1]]]),
    }
    request = {name: np.asarray(value, "int32") for name, value in request.items()}
    batches = [request, {"source": sources()[:1], **_none(1)}]
    report = export_model(model, tmp_path / "export", sample_inputs=batches)
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "ids") == 0 and report.max_abs_diff(format, "lengths") == 0
        assert report.max_abs_diff(format, "scores") <= 1e-4
    served = run_onnx(tmp_path / "export", request)["outputs"]["ids"]
    assert not np.array_equal(served, free)
    assert first[0] not in served[0] and first[2] not in served[2]
    # The ids are checked where they are fed: ONNX serving, the SavedModel, the serve command.
    function = tf.saved_model.load(str(tmp_path / "export" / "saved_model")).signatures["serving_default"]
    for name, table, message in (
        ("banned_sequences", [[[9]], [[-1]], [[-1]]], "holds an id outside the vocabulary in sequence 0 of example 0"),
        ("stop_sequences", [[[-1, -1]], [[4, END]], [[-1, -1]]], "holds the end token 2"),
        ("stop_sequences", [[[4, -1, 5]], [[-1, -1, -1]], [[-1, -1, -1]]], "holds an id after its -1 padding"),
    ):
        bad = {**request, name: np.asarray(table, "int32")}
        with pytest.raises(ValueError, match=rf"input `{name}` {re.escape(message)}"):
            run_onnx(tmp_path / "export", bad)
        with pytest.raises(tf.errors.InvalidArgumentError, match=rf"input `{name}` {re.escape(message[:20])}"):
            function(**{key: tf.constant(value) for key, value in bad.items()})
        inputs = json.dumps({key: value.tolist() for key, value in bad.items()})
        assert serve([str(tmp_path / "export"), "--inputs", inputs, "--runs", "0"]) == 1
        assert capsys.readouterr().err.startswith(f"error: input `{name}` {message}")


def _none(batch):
    """No sequence for any example: one row of -1 each."""
    return {name: np.full((batch, 1, 1), -1, "int32") for name in ("banned_sequences", "stop_sequences")}
