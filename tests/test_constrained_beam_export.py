"""Lexically constrained beam search exported with the loop inside: a decoder
taking `constraints` and `constraint_groups` agrees in Keras, the SavedModel
and ONNX, and serving refuses constraints it cannot meet (the search itself:
test_constrained_beam.py)."""

import json
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attention.export import export_model, run_onnx
from keras_attention.export.serve_cli import main as serve
from tests.test_runtime_options import make_decoder
from tests.test_runtime_options_export import VOCABULARY, sources

END = 2


def contains(ids, phrase):
    return any(list(ids[i : i + len(phrase)]) == list(phrase) for i in range(len(ids) - len(phrase) + 1))


def test_constraints_are_inputs_served_with_parity_and_checked(tmp_path, capsys):
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    phrases = keras.Input((None, None), dtype="int32", name="constraints")
    groups = keras.Input((None,), dtype="int32", name="constraint_groups")
    decoder = make_decoder(("length_penalty_weight",), method="constrained_beam", beam_width=3, max_constraints=2)
    options = decoder.option_inputs()
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    outputs = decoder(memory, constraints=phrases, constraint_groups=groups, options=options)
    model = keras.Model({"source": source, "constraints": phrases, "constraint_groups": groups, **options}, outputs)
    request = {
        "source": sources(),
        "constraints": np.array([[[5, 6], [-1, -1]], [[7, -1], [4, -1]], [[3, 8], [4, -1]]], "int32"),
        "constraint_groups": np.array([[0, 1], [0, 1], [0, 0]], "int32"),
    }
    batches = [
        request,
        {**request, "length_penalty_weight": np.array([0.0, 1.0, 3.0], "float32")},
        {
            "source": sources()[:1],
            "constraints": np.full((1, 1, 1), -1, "int32"),
            "constraint_groups": np.zeros((1, 1), "int32"),
        },
    ]
    report = export_model(model, tmp_path / "export", sample_inputs=batches)
    for format in ("saved_model", "onnx"):
        for output in ("ids", "lengths", "constraints_met"):
            assert report.max_abs_diff(format, output) == 0, (format, output)
        assert report.max_abs_diff(format, "scores") <= 1e-4
    served = run_onnx(tmp_path / "export", request)["outputs"]
    for b, needed in enumerate(([[5, 6]], [[7], [4]], None)):
        ids = served["ids"][b, 0, : served["lengths"][b, 0]]
        if needed is None:  # one of [3, 8] and [4]
            assert contains(ids, [3, 8]) or contains(ids, [4]), ids
        else:
            assert all(contains(ids, phrase) for phrase in needed), ids
    # Checked where they are fed: ONNX serving, the SavedModel, the serve command.
    function = tf.saved_model.load(str(tmp_path / "export" / "saved_model")).signatures["serving_default"]
    for table, message in (
        ([[[9]], [[4]], [[4]]], "holds an id outside the vocabulary in sequence 0 of example 0"),
        ([[[4]] * 3] * 3, "holds 3 sequences per example, more than the 2"),
    ):
        bad = {**request, "constraints": np.asarray(table, "int32")}
        bad["constraint_groups"] = np.zeros(bad["constraints"].shape[:2], "int32")
        with pytest.raises(ValueError, match=rf"input `constraints` {re.escape(message)}"):
            run_onnx(tmp_path / "export", bad)
        feeds = {key: tf.constant(value) for key, value in bad.items()}
        feeds["length_penalty_weight"] = tf.constant(np.zeros(0, "float32"))
        with pytest.raises(tf.errors.InvalidArgumentError, match=r"input `constraints` holds"):
            function(**feeds)
        inputs = json.dumps({key: value.tolist() for key, value in bad.items()})
        assert serve([str(tmp_path / "export"), "--inputs", inputs, "--runs", "0"]) == 1
        assert capsys.readouterr().err.startswith(f"error: input `constraints` {message}")
    # Groups that do not pair with the phrases would pair them with others' groups, silently.
    for groups, served_message, saved_message in (
        (
            request["constraint_groups"][:, :1],
            "must be (batch, phrases) = (3, 2) group numbers >= 0",
            "one group number",
        ),
        (request["constraint_groups"] - 1, "must be (batch, phrases) = (3, 2) group numbers >= 0", "numbers >= 0"),
    ):
        bad = {**request, "constraint_groups": np.ascontiguousarray(groups)}
        with pytest.raises(ValueError, match=rf"input `constraint_groups` {re.escape(served_message)}"):
            run_onnx(tmp_path / "export", bad)
        feeds = {key: tf.constant(value) for key, value in bad.items()}
        feeds["length_penalty_weight"] = tf.constant(np.zeros(0, "float32"))
        with pytest.raises(tf.errors.InvalidArgumentError, match=saved_message):
            function(**feeds)
