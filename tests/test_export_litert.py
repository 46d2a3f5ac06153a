"""The LiteRT format: `export_model(..., formats=["litert"])` writes one
`.tflite` file per signature, decode loops inside, and holds what the
LiteRT interpreter returns to Keras's: a masked layer model, a greedy and a
beam decoder with run-time options (ids exact, floats to 1e-5), on ordinary
and empty batches. Then the int8 copy's size and agreement, `run_litert`'s
checks (the `.tflite` files hold no assertions), and the refusals: an op
without a LiteRT builtin kernel, another backend, a missing package."""

import importlib.util
import json

import keras
import numpy as np
import pytest

pytest.importorskip(
    "ai_edge_litert", reason="ai-edge-litert is not installed: pip install 'keras-attention-decoders[litert]'"
)

import keras_attention as ka  # noqa: E402
from keras_attention.export import ExportError, export_model, run_litert, support  # noqa: E402
from keras_attention.export.litert_format import LiteRTSignature  # noqa: E402
from tests.export_models import multi_head  # noqa: E402
from tests.test_runtime_options import make_decoder  # noqa: E402
from tests.test_runtime_options_export import (  # noqa: E402
    BAD_PREFIXES,
    OPTIONS,
    VOCABULARY,
    keras_ids,
    option_model,
    sources,
)

ATOL = 1e-5
METHODS = ("greedy", "beam")
# The run-time options exported (each option's parity in every format:
# test_runtime_options_export.py; converting all six doubles this module's time).
RUN_TIME = ("max_length", "min_length")
# int8 agreement on the larger greedy decoder's 96 sources: measured 85.4%
# rows identical (untrained weights leave near ties); held to 80%, the file to
# 0.6 of the float32 size (measured 0.51: the weights under 1024 values and
# the graph's structure stay float32). docs/serving.md has the measurement.
INT8_ROWS_IDENTICAL, INT8_SIZE_RATIO = 0.8, 0.6


def _empty(batch):
    return {
        name: (np.zeros((0, *np.shape(value)[1:]), "int32") if name == "source" else value)
        for name, value in batch.items()
    }


FITS = np.array([[3, 8, -1], [-1, -1, -1], [5, -1, -1]], "int32")  # forced prefixes, -1 padding


def _prefixed():
    """A greedy decoder forced to start with `target_prefix`, with a run-time max_length."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    prefix = keras.Input((None,), dtype="int32", name="target_prefix")
    decoder = make_decoder(("max_length",), method="greedy")
    options = decoder.option_inputs()
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    return keras.Model(
        {"source": source, "target_prefix": prefix, **options}, decoder(memory, target_prefix=prefix, options=options)
    )


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A layer model and the greedy and beam decoders with run-time options,
    one export: every signature verified on batches setting each option, and
    on an empty batch."""
    models, decoders, samples = {}, {}, {}
    keras.utils.set_random_seed(0)
    models["serving_default"] = multi_head()
    rng = np.random.default_rng(0)
    samples["serving_default"] = [{"source": rng.integers(1, 12, size=s).astype("int32")} for s in ((2, 5), (3, 8))]
    samples["serving_default"][1]["source"][1, 3:] = 0
    samples["serving_default"].append(_empty(samples["serving_default"][0]))
    for method in METHODS:
        models[method], decoders[method] = option_model(method, names=RUN_TIME)
        source = sources()
        samples[method] = [{"source": source}] + [{"source": source, n: OPTIONS[method][n]} for n in RUN_TIME]
        samples[method].append({"source": np.zeros((0, 6), "int32")})
    models["prefixed"], samples["prefixed"] = _prefixed(), [{"source": sources(), "target_prefix": FITS}]
    directory = tmp_path_factory.mktemp("litert") / "export"
    report = export_model(models, directory, formats=["litert"], sample_inputs=samples, atol=ATOL)
    return report, directory, models, decoders, samples


def test_every_signature_is_one_tflite_file_that_matches_keras(exported):
    report, directory, models, _, samples = exported
    assert sorted(p.name for p in directory.iterdir()) == [
        "beam.tflite",
        "greedy.tflite",
        "prefixed.tflite",
        "report.json",
        "serving_default.tflite",
    ]
    assert report.paths["litert"] == {name: str(directory / f"{name}.tflite") for name in models}
    rows = {(row.signature, row.output): row for row in report.parity}
    assert {s for s, _ in rows} == set(models) and {row.format for row in report.parity} == {"litert"}
    # Every output of the decoders, ids exactly, on each option's batch and the empty one.
    assert {o for s, o in rows if s == "beam"} == {"alignments", "finished", "ids", "lengths", "log_probs", "scores"}
    for (signature, output), row in rows.items():
        assert row.ok and row.max_abs_diff <= (0 if row.exact else ATOL), (signature, output, row.max_abs_diff)
    for method in METHODS:
        assert report.max_abs_diff("litert", "ids", method) == 0
        assert len(report.batches[method]) == len(samples[method]) == len(RUN_TIME) + 2
    assert report.batches["serving_default"][-1] == {"source": [0, 5]}
    # The options were recorded for run_litert's checks; nothing in the file asserts them.
    assert set(report.signatures["greedy"]["options"]) == set(RUN_TIME)
    assert any("no run-time option or prefix checks" in note for note in report.notes)


@pytest.mark.parametrize("method", METHODS)
def test_options_passed_at_run_time_are_honoured(exported, method):
    _, directory, models, decoders, _ = exported
    model, decoder = models[method], decoders[method]
    source = sources(batch=4, seed=7)
    default = run_litert(directory, {"source": source}, signature=method)
    np.testing.assert_array_equal(default["ids"], keras_ids(model, decoder, {"source": source}))
    for request in ({"max_length": 3}, {"max_length": [2, 8, 5, 4], "min_length": [1, 0, 3, 0]}):
        batch = {"source": source, **request}
        got = run_litert(directory, batch, signature=method)
        want = keras_ids(model, decoder, batch)
        np.testing.assert_array_equal(got["ids"], want)
        assert not np.array_equal(got["ids"], default["ids"])  # the option changed the decode
    # A max length of 3 for every example: nothing but the end token past step 3, in every beam.
    short = run_litert(directory, {"source": source, "max_length": 3}, signature=method)
    assert short["lengths"].max() <= 3 and np.all(short["ids"][..., 3:] == decoder.end_token)


def test_an_empty_batch_returns_the_shapes_keras_returns(exported):
    _, directory, models, decoders, _ = exported
    for method in METHODS:
        empty = np.zeros((0, 6), "int32")
        got = run_litert(directory, {"source": empty, "max_length": 4}, signature=method)
        want = models[method](
            {
                "source": empty,
                **{n: None for n in decoders[method].runtime_options},
                "max_length": np.array([4], "int32"),
            }
        )
        assert {k: v.shape for k, v in got.items()} == {k: tuple(v.shape) for k, v in want.items()}
        assert got["ids"].shape[0] == 0 and got["ids"].dtype == np.int32


def test_a_source_of_zero_positions_is_refused_naming_the_input(exported):
    """LiteRT's kernels cannot prepare a zero-width sequence, which Keras and
    onnxruntime decode: a ValueError naming the input, not LiteRT's failure."""
    _, directory, *_ = exported
    with pytest.raises(
        ValueError, match=r"LiteRT cannot run signature 'greedy' on an input of zero positions \('source'"
    ):
        run_litert(directory, {"source": np.zeros((2, 0), "int32")}, signature="greedy")


def test_run_litert_refuses_bad_feeds_naming_the_input(exported):
    _, directory, *_ = exported
    source = sources()
    # The file itself runs a max_length above the constructor's 8 (the SavedModel's assertion was dropped):
    # refusing it is run_litert's work.
    raw = LiteRTSignature(directory / "greedy.tflite", "greedy")
    unchecked = raw.run({"source": source, "max_length": np.array([100], "int32"), "min_length": np.zeros(0, "int32")})
    assert unchecked["ids"].shape == (3, 8)
    with pytest.raises(ValueError, match=r"input `max_length` must be an integer from 1 to 8; got 100\."):
        run_litert(directory, {"source": source, "max_length": 100}, signature="greedy")
    with pytest.raises(ValueError, match=r"`min_length` must be below `max_length`"):
        run_litert(directory, {"source": source, "min_length": 5, "max_length": 4}, signature="beam")
    with pytest.raises(ValueError, match=r"`inputs` has keys \['tokens'\]; the model expects \['source'\]"):
        run_litert(directory, {"tokens": source})
    with pytest.raises(ValueError, match=r"the model has no run-time option 'top_p'"):
        run_litert(directory, {"source": source, "top_p": 0.5}, signature="greedy")
    with pytest.raises(ValueError, match=r"input 'source' must have rank 2; got shape \(6,\)"):
        run_litert(directory, {"source": source[0]})
    with pytest.raises(ValueError, match=r"input 'source' must hold integers \(it is int32\); got \[\[1.5, 2.0\]\]"):
        run_litert(directory, {"source": [[1.5, 2.0]]})
    with pytest.raises(ValueError, match=r"input 'source' must be a nested list of numbers of rank 2; got \[\['a'\]\]"):
        run_litert(directory, {"source": [["a"]]})
    with pytest.raises(FileNotFoundError, match=r"greedy.int8.tflite.*found \['beam.tflite', 'greedy.tflite'"):
        run_litert(directory, {"source": source}, signature="greedy", precision="int8")


def test_forced_prefixes_are_decoded_and_bad_ones_refused_as_in_onnx_serving(exported):
    _, directory, *_ = exported
    served = run_litert(directory, {"source": sources(), "target_prefix": FITS}, signature="prefixed")["ids"]
    np.testing.assert_array_equal(served[[0, 2], :1], [[3], [5]])
    np.testing.assert_array_equal(served[0, :2], [3, 8])
    for prefix, options, message in BAD_PREFIXES:
        request = {"source": sources(), "target_prefix": prefix, **options}
        if message is None:  # fits: each row within its own max_length
            np.testing.assert_array_equal(run_litert(directory, request, signature="prefixed")["ids"][0, :3], [3, 8, 4])
            continue
        with pytest.raises(ValueError, match=r"input `target_prefix` " + message):
            run_litert(directory, request, signature="prefixed")


def _larger_greedy():
    """A greedy decoder whose weights are large enough for dynamic-range
    quantization (LiteRT quantizes weights of 1024 values and more)."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.Dense(64, activation="tanh")(keras.layers.Embedding(40, 32, mask_zero=True)(source))
    decoded = ka.InferenceDecoder(
        ka.AttentionGRUCell(64, ka.GeneralAttention()),
        keras.layers.Embedding(40, 32),
        keras.layers.Dense(40),
        1,
        2,
        10,
    )(memory)
    return keras.Model(source, {"ids": decoded["ids"], "scores": decoded["scores"]})


def test_the_int8_copy_is_smaller_and_measured_against_keras(tmp_path):
    rng = np.random.default_rng(1)
    samples = [{"source": rng.integers(1, 40, size=(48, n)).astype("int32")} for n in (6, 9)]
    model = _larger_greedy()
    report = export_model(
        model, tmp_path / "export", formats=["litert"], quantize="int8", sample_inputs=samples, atol=ATOL
    )
    assert sorted(p.name for p in (tmp_path / "export").iterdir()) == [
        "report.json",
        "serving_default.int8.tflite",
        "serving_default.tflite",
    ]
    assert report.max_abs_diff("litert", "ids") == 0  # the float32 file is held to parity as ever
    entry = report.quantized["litert/serving_default"]
    assert entry["format"] == "litert" and entry["precision"] == "int8"
    assert entry["path"] == str(tmp_path / "export" / "serving_default.int8.tflite")
    assert entry["bytes"] == (tmp_path / "export" / "serving_default.int8.tflite").stat().st_size
    assert entry["bytes"] < INT8_SIZE_RATIO * entry["float32_bytes"]
    assert entry["int8_weights"] >= 6  # the loop's products too: cell, attention, read-out
    assert entry["outputs"]["ids"]["rows_identical"] >= INT8_ROWS_IDENTICAL
    assert 0 < entry["outputs"]["scores"]["max_abs_diff"] < float("inf")
    assert (
        "int8 litert/serving_default: " in report.table() and f"{entry['int8_weights']} int8 weights" in report.table()
    )
    # run_litert serves the int8 copy, and what it returns is what was measured.
    rows = [
        np.all(
            run_litert(tmp_path / "export", batch, precision="int8")["ids"]
            == np.asarray(model(batch["source"])["ids"]),
            axis=1,
        )
        for batch in samples
    ]
    assert np.mean(np.concatenate(rows)) == pytest.approx(entry["outputs"]["ids"]["rows_identical"])


class RunningProduct(keras.layers.Layer):
    """`keras.ops.cumprod`: TensorFlow's Cumprod, which LiteRT runs only as a TF Select (Flex) op."""

    def call(self, inputs):
        return keras.ops.cumprod(inputs, axis=1)


def test_a_model_needing_a_flex_op_is_refused_naming_it_and_nothing_is_left(tmp_path):
    values = keras.Input((None, 4), name="values")
    model = keras.Model(values, keras.layers.Dense(2, name="scores")(RunningProduct()(values)))
    with pytest.raises(ExportError) as caught:
        export_model(model, tmp_path / "out" / "export", formats=["litert"])
    message = str(caught.value)
    assert "signature 'serving_default': LiteRT has no builtin kernel for the TensorFlow op(s) Cumprod;" in message
    assert "TF Select (Flex)" in message and "Export this model to 'onnx' or 'saved_model'" in message
    assert message.endswith("Nothing was written.")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_backends_are_refused_before_anything_is_written(backend):
    with pytest.raises(
        NotImplementedError, match=rf"cannot write format 'litert' on the '{backend}' backend .*reads TensorFlow graphs"
    ):
        support.check_support(backend, ["litert"], {"serving_default": multi_head()})


def test_a_missing_interpreter_is_named_with_the_install_line(tmp_path, monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None if name == "ai_edge_litert" else real(name))
    with pytest.raises(
        NotImplementedError,
        match=r"format 'litert' on the 'tensorflow' backend needs .*`pip install 'keras-attention-decoders\[litert\]'`$",
    ):
        export_model(multi_head(), tmp_path / "export", formats=["litert"])
    assert list(tmp_path.iterdir()) == []


def test_litert_is_written_only_when_asked_for(exported):
    assert ka.export.FORMATS == ("saved_model", "onnx")
    assert ka.export.get_format("litert").options.keys() == {"quantize"}
    report, directory, *_ = exported
    assert json.loads((directory / "report.json").read_text())["formats"] == ["litert"]
