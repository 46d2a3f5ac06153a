"""Masked LSTM encoders export as fused ONNX nodes over the input's
lengths (export/fused_rnn.py): the same outputs as Keras, no per-step Loop,
an empty batch served, and the plain conversion kept wherever that would
not be exact."""

import collections
import subprocess
import sys

import keras
import numpy as np
import onnx
import onnxruntime
import pytest

import keras_attention as ka
from keras_attention.export import export_model, run_onnx
from keras_attention.export.fused_rnn import ZERO_STEPS_REFUSED

# Right-padded ids: a full row, a short one, a row of padding only.
IDS = np.array([[3, 4, 5, 6, 7], [8, 9, 0, 0, 0], [0, 0, 0, 0, 0], [1, 2, 3, 4, 0]], np.int32)


def _encoder(layer=keras.layers.LSTM, depth=2, bidirectional=True, mask=True, sequence=True, **options):
    """ids -> a stack of recurrent layers -> {sequence (unless not `sequence`), final states}."""
    keras.utils.set_random_seed(5)
    ids = keras.Input((None,), dtype="int32", name="ids")
    x = keras.layers.Embedding(12, 6, mask_zero=mask)(ids)
    for number in range(depth):
        recurrent = layer(7, return_sequences=True, return_state=number == depth - 1, **options)
        x = (keras.layers.Bidirectional(recurrent) if bidirectional else recurrent)(x)
        if number == depth - 1:
            x, *states = x
        else:
            x = keras.layers.Dropout(0.1)(x)
    outputs = {f"state_{i}": s for i, s in enumerate(states)}
    return keras.Model(ids, {"sequence": x, **outputs} if sequence else outputs)


def _export(model, path, samples=None):
    report = export_model(model, path, formats=["onnx"], sample_inputs=samples or [{"ids": IDS}, {"ids": IDS[:2, :3]}])
    graph = onnx.load(str(path / "model.onnx")).graph
    session = onnxruntime.InferenceSession(str(path / "model.onnx"), providers=["CPUExecutionProvider"])
    return report, collections.Counter(node.op_type for node in graph.node), session


def _valid(output, ids):
    """The sequence at the tokens only (Keras leaves what it likes at the padding)."""
    return output * (ids != 0)[..., None] if output.ndim == 3 else output


@pytest.fixture(scope="module")
def stacked_export(tmp_path_factory):
    """The default encoder (two masked bidirectional LSTMs) exported once, as
    `_export` does it: two tests read the same file."""
    model = _encoder()
    return (model, *_export(model, tmp_path_factory.mktemp("stacked") / "export"))


@pytest.mark.parametrize("bidirectional", [True, False], ids=["bidirectional", "forward"])
def test_masked_encoders_become_fused_nodes_with_keras_outputs(bidirectional, tmp_path, request):
    # A lone LSTM's sequence repeats its last output over the padding, where
    # the fused node writes zeros: its states alone are served here (the
    # sequence is the next test's).
    if bidirectional:
        model, report, ops, session = request.getfixturevalue("stacked_export")
    else:
        model = _encoder(bidirectional=False, sequence=False)
        report, ops, session = _export(model, tmp_path / "export")
    assert ops["LSTM"] == 2 and ops["Loop"] == 0, ops
    assert any("masked recurrent layer direction(s) run as fused" in note for note in report.notes), report.notes
    assert all(row.ok for row in report.parity)
    want = {name: np.asarray(value) for name, value in model(IDS).items()}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"ids": IDS})))
    for name in want:  # the row of padding only included: its states stay the initial zeros
        np.testing.assert_allclose(_valid(got[name], IDS), _valid(want[name], IDS), atol=1e-5, err_msg=name)


def test_outputs_at_the_padding_that_differ_keep_the_plain_conversion(tmp_path):
    report, ops, _ = _export(_encoder(bidirectional=False), tmp_path / "export")
    assert ops["Loop"] == 2 and ops["LSTM"] == 0, ops
    assert any("left as converted (output 'sequence' differed from Keras" in note for note in report.notes)
    assert all(row.ok for row in report.parity)


def test_gru_layers_stay_loops_with_their_masks(tmp_path):
    # tf2onnx 1.17 fuses no Keras 3 GRU: nothing is withheld from them.
    report, ops, _ = _export(_encoder(keras.layers.GRU), tmp_path / "export")
    assert ops["Loop"] == 4 and ops["GRU"] == 0, ops
    assert not any("fused" in note for note in report.notes)
    assert all(row.ok for row in report.parity)


def test_an_empty_batch_and_empty_rows_are_served(stacked_export):
    # onnxruntime's LSTM aborts the whole process on a batch of 0: the fused
    # nodes get one row of zeros then, sliced off again.
    _, _, _, session = stacked_export
    names = [o.name for o in session.get_outputs()]
    for shape in [(0, 5), (3, 1)]:
        outputs = dict(zip(names, session.run(None, {"ids": np.zeros(shape, "int32")})))
        assert outputs["sequence"].shape == (shape[0], shape[1], 14)
        assert outputs["state_0"].shape == (shape[0], 7)
        if shape[0]:  # no token at all: the initial (zero) states
            np.testing.assert_array_equal(outputs["state_0"], 0.0)
    # No step at all (a source of width 0) is refused, as Keras's LSTM refuses it (issue 34, item 7).
    for shape in [(0, 0), (3, 0)]:
        with pytest.raises(Exception, match=ZERO_STEPS_REFUSED):
            session.run(None, {"ids": np.ones(shape, "int32")})


_RUN_ZERO_WIDTH = """
import sys, numpy as np, onnxruntime
path, level, batch, width = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
options = onnxruntime.SessionOptions()
options.graph_optimization_level = getattr(onnxruntime.GraphOptimizationLevel, level)
session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
try:
    outputs = session.run(None, {"source": np.ones((batch, width), np.int32)})
    print("shapes", [list(o.shape) for o in outputs])
except Exception as error:
    print("refused", error)
"""


# The serve command, as the installed `keras-attention-serve` runs it.
_SERVE = "import sys; from keras_attention.export.serve_cli import main; sys.exit(main(sys.argv[1:]))"


def _greedy_over_lstm():
    keras.utils.set_random_seed(7)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.LSTM(8, return_sequences=True)(keras.layers.Embedding(12, 6, mask_zero=True)(source))
    cell = ka.AttentionGRUCell(8, ka.GeneralAttention())
    decoded = ka.InferenceDecoder(cell, keras.layers.Embedding(9, 5), keras.layers.Dense(9), 1, 2, 6)(memory)
    return keras.Model(source, {"ids": decoded["ids"], "scores": decoded["scores"]})


def test_a_zero_width_source_is_refused_not_a_crash(tmp_path):
    """Issue 34, item 7: a decoder over a fused LSTM given a source of width
    0 killed the process (SIGFPE, exit -8) at onnxruntime's EXTENDED level
    and above, float32 and int8; the serve command died without its line."""
    model = _greedy_over_lstm()
    with pytest.raises(Exception, match="LSTM"):  # Keras refuses zero steps
        model(np.ones((2, 0), "int32"))
    report = export_model(model, tmp_path / "export", formats=["onnx"], quantize="int8")
    assert any("fused LSTM nodes" in note for note in report.notes), report.notes
    for file in ("model.onnx", "model.int8.onnx"):
        for level in ("ORT_ENABLE_EXTENDED", "ORT_ENABLE_ALL"):
            for batch, width, expected in [(2, 0, "refused"), (0, 0, "refused"), (0, 3, "shapes"), (1, 3, "shapes")]:
                path = str(tmp_path / "export" / file)
                done = subprocess.run(
                    [sys.executable, "-c", _RUN_ZERO_WIDTH, path, level, str(batch), str(width)],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
                case = (file, level, batch, width, done.returncode, done.stderr[-300:])
                assert done.returncode == 0, case
                assert done.stdout.startswith(expected), (case, done.stdout)
                if expected == "refused":
                    assert ZERO_STEPS_REFUSED in done.stdout, done.stdout
                else:
                    assert f"[{batch}, 6]" in done.stdout, done.stdout
    want = model(np.array([[3, 4, 5]], "int32"))["ids"]
    got = run_onnx(tmp_path / "export", {"source": [[3, 4, 5]]})["outputs"]["ids"]
    np.testing.assert_array_equal(got, np.asarray(want))
    # In this process now: the refusal is an error, never a crash.
    with pytest.raises(
        ValueError, match=r"signature 'serving_default' refuses an input of zero steps \(inputs \{'source': \[2, 0\]"
    ):
        run_onnx(tmp_path / "export", {"source": np.ones((2, 0), "int32")}, precision="int8")
    for precision in ("float32", "int8"):
        _assert_served_zero_steps_refused(tmp_path / "export", precision)


def test_a_zero_width_source_over_a_recurrent_loop_gets_the_same_refusal(tmp_path):
    """A masked GRU stays a converted loop, which onnxruntime stops on a
    zero-width source in its own terms (a Squeeze of the empty time axis);
    served, that is the fused LSTM's ValueError, not a RuntimeError full of
    onnxruntime's internals. Keras refuses it too; a batch of 0 or 1 rows
    with positions is served."""
    keras.utils.set_random_seed(7)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.GRU(8, return_sequences=True)(keras.layers.Embedding(12, 6, mask_zero=True)(source))
    cell = ka.AttentionGRUCell(8, ka.GeneralAttention())
    decoded = ka.InferenceDecoder(cell, keras.layers.Embedding(9, 5), keras.layers.Dense(9), 1, 2, 6)(memory)
    model = keras.Model(source, {"ids": decoded["ids"], "scores": decoded["scores"]})
    for shape in [(2, 0), (0, 0)]:
        with pytest.raises(Exception, match="GRU"):
            model(np.ones(shape, "int32"))
    report = export_model(model, tmp_path / "export", formats=["onnx"], quantize="int8")
    assert not any("fused LSTM nodes" in note for note in report.notes), report.notes
    for precision in ("float32", "int8"):
        for shape in [(2, 0), (0, 0)]:
            with pytest.raises(
                ValueError, match=r"signature 'serving_default' refuses an input of zero steps"
            ) as error:
                run_onnx(tmp_path / "export", {"source": np.ones(shape, "int32")}, precision=precision)
            assert f"{{'source': {list(shape)}}}" in str(error.value) and "ONNXRuntime" not in str(error.value)
            assert "cannot run 'source' without positions" in str(error.value)
        for ids in ([[3, 4, 5]], np.zeros((0, 3), "int32")):
            got = run_onnx(tmp_path / "export", {"source": ids}, precision=precision)["outputs"]["ids"]
            want = np.asarray(model(np.asarray(ids, "int32"))["ids"])
            assert got.shape == want.shape == (len(want), 6)
            if precision == "float32":
                np.testing.assert_array_equal(got, want)
    _assert_served_zero_steps_refused(tmp_path / "export", "float32")


def test_unmasked_layers_keep_every_step_and_serve_an_empty_batch(tmp_path):
    # tf2onnx fuses an unmasked layer itself; it must keep running over the
    # padding too (no lengths), and the empty-batch guard applies to it as well.
    model = _encoder(mask=False)
    report, ops, session = _export(model, tmp_path / "export")
    assert ops["LSTM"] == 2 and not any("fused" in note or "recurrent" in note for note in report.notes)
    want = np.asarray(model(IDS)["state_0"])
    np.testing.assert_allclose(session.run(["state_0"], {"ids": IDS})[0], want, atol=1e-5)
    assert session.run(["state_0"], {"ids": np.ones((0, 4), "int32")})[0].shape == (0, 7)


def test_a_mask_that_is_not_the_padding_keeps_the_loop(tmp_path):
    # keras.layers.Masking masks by value, not by an id of 0: no lengths can stand in for it.
    keras.utils.set_random_seed(2)
    values = keras.Input((None, 3), name="values")
    states = keras.layers.LSTM(5, return_sequences=True)(keras.layers.Masking(0.0)(values))
    model = keras.Model(values, states)
    rows = np.random.default_rng(0).random((3, 4, 3)).astype("float32")
    rows[1, 2:] = 0.0
    report = export_model(model, tmp_path / "export", formats=["onnx"], sample_inputs=[{"values": rows}])
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "export" / "model.onnx")).graph.node)
    assert ops["Loop"] == 1 and ops["LSTM"] == 0, ops
    assert any("left as converted (a recurrent layer's mask is not the padding" in note for note in report.notes)
    assert all(row.ok for row in report.parity)


def test_left_padded_samples_keep_the_plain_conversion(tmp_path):
    # Lengths assume the padding after the tokens; verification batches
    # padded in front tell the difference and the Loop stays.
    left = np.array([[0, 0, 3, 4, 5], [6, 7, 8, 9, 1]], np.int32)
    report, ops, session = _export(_encoder(depth=1), tmp_path / "export", samples=[{"ids": left}])
    assert ops["Loop"] == 2 and ops["LSTM"] == 0, ops
    assert any("left as converted (output" in note and "differed from Keras" in note for note in report.notes)
    assert all(row.ok for row in report.parity)


def test_a_layer_tf2onnx_does_not_fuse_keeps_its_mask(tmp_path):
    # softsign is no activation of ONNX's LSTM: tf2onnx leaves that layer a
    # Loop, which without its mask would run over the padding.
    model = _encoder(depth=1, bidirectional=False, activation="softsign")
    report, ops, _ = _export(model, tmp_path / "export")
    assert ops["Loop"] == 1 and ops["LSTM"] == 0, ops
    assert any("tf2onnx fused 0 of the 1 recurrent layer directions" in note for note in report.notes), report.notes
    assert all(row.ok for row in report.parity)


def _refusal(model, tmp_path, samples=None):
    report, ops, _ = _export(model, tmp_path / "export", samples)
    assert ops["LSTM"] == 0 and ops["Loop"] >= 1, ops
    assert all(row.ok for row in report.parity)
    (note,) = [note for note in report.notes if "recurrent layers left as converted" in note]
    return note


def test_an_lstm_returning_its_last_output_only_keeps_its_loop(tmp_path):
    # Its output would be read at the padded length, past a short row's end.
    keras.utils.set_random_seed(3)
    ids = keras.Input((None,), dtype="int32", name="ids")
    last = keras.layers.LSTM(5)(keras.layers.Embedding(12, 4, mask_zero=True)(ids))
    assert "returns its last output only" in _refusal(keras.Model(ids, last), tmp_path)


def test_a_lone_backward_lstm_keeps_its_loop(tmp_path):
    # Outside Bidirectional tf2onnx fuses it as a forward node over reversed
    # steps, which would read the padding first.
    model = _encoder(depth=1, bidirectional=False, sequence=False, go_backwards=True)
    assert "runs backwards outside a Bidirectional wrapper" in _refusal(model, tmp_path)


def test_an_lstm_given_an_initial_state_keeps_its_loop(tmp_path):
    # A row of padding only keeps the initial state in Keras; the fused node would end with zeros.
    keras.utils.set_random_seed(4)
    ids = keras.Input((None,), dtype="int32", name="ids")
    start = keras.Input((5,), name="start")
    embedded = keras.layers.Embedding(12, 4, mask_zero=True)(ids)
    # The mask given explicitly: with an initial state Keras does not pass the embedding's on.
    padding = keras.ops.not_equal(ids, 0)
    sequence = keras.layers.LSTM(5, return_sequences=True)(embedded, initial_state=[start, start], mask=padding)
    model = keras.Model([ids, start], sequence)
    samples = [{"ids": IDS, "start": np.ones((4, 5), "float32")}]
    assert "given an initial state" in _refusal(model, tmp_path, samples)


def test_samples_without_padding_still_check_padded_rows(tmp_path):
    # The caller's batches are full length; the check pads copies of them,
    # which shows the lone LSTM's sequence differing at the padding.
    full = [{"ids": np.array([[3, 4, 5], [6, 7, 8]], np.int32)}]
    assert "output 'sequence' differed from Keras" in _refusal(_encoder(bidirectional=False), tmp_path, full)


def test_layers_reached_twice_are_patched_once_and_restored(tmp_path):
    # The encoder is inside a nested model and also a layer of the outer
    # one: its LSTMs are reached twice, patched once and left unpatched.
    encoder = _encoder(sequence=False)
    ids = keras.Input((None,), dtype="int32", name="ids")
    nested = keras.Model(ids, encoder(ids)["state_0"], name="nested")
    model = keras.Model(ids, {"first": nested(ids), "second": encoder(ids)["state_1"]})
    report, _, session = _export(model, tmp_path / "export")
    assert all(row.ok for row in report.parity)
    lstms = [
        part
        for b in encoder.layers
        if isinstance(b, keras.layers.Bidirectional)
        for part in (b.forward_layer, b.backward_layer)
    ]
    assert len(lstms) == 4 and all("call" not in vars(layer) for layer in lstms)
    np.testing.assert_allclose(session.run(["second"], {"ids": IDS})[0], np.asarray(model(IDS)["second"]), atol=1e-5)


def test_generated_verification_batches_fuse_too(tmp_path):
    report = export_model(_encoder(), tmp_path / "export", formats=["onnx"])
    ops = collections.Counter(n.op_type for n in onnx.load(str(tmp_path / "export" / "model.onnx")).graph.node)
    assert ops["LSTM"] == 2 and ops["Loop"] == 0, ops
    assert all(row.ok for row in report.parity)


def _assert_served_zero_steps_refused(directory, precision):
    """The serve command, in its own process, exits 1 with its one `error:`
    line for a source of zero steps (no signal, no traceback)."""
    served = subprocess.run(
        [sys.executable, "-c", _SERVE, str(directory), "--inputs", '{"source": [[], []]}']
        + ["--runs", "0", "--precision", precision],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert served.returncode == 1, (served.returncode, served.stderr[-500:])
    assert (
        served.stderr.strip()
        .splitlines()[-1]
        .startswith("error: run_onnx: signature 'serving_default' refuses an input of zero steps")
    ), served.stderr[-500:]
