"""Property test over an exported decoder (issue 34): for random requests --
run-time option values within and outside their bounds, sources of width 0
and more, batches of 0, 1 and more rows, forced target prefixes, seeds --
onnxruntime, the SavedModel and Keras give the same outputs or all refuse,
and no request kills the serving process.

The decoder (a sampling `InferenceDecoder` over a masked GRU, every option
it can take at run time, a `target_prefix` input) is exported once; the
ONNX file is served by one worker process, fed one request per line, so
a request that crashed onnxruntime would show as a dead worker, not a dead
test run.
"""

import collections
import json
import select
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.decoders.runtime_options import RUNTIME_OPTIONS
from keras_attention.export import export_model

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

VOCABULARY, MAX_LENGTH, START, END = 9, 6, 1, 2
# Valid values of each run-time option, and values outside its bounds.
WITHIN = {
    "max_length": st.integers(1, MAX_LENGTH),
    "min_length": st.integers(0, 2),
    "temperature": st.floats(0.3, 5.0),
    "top_k": st.integers(0, VOCABULARY),
    "top_p": st.floats(0.2, 1.0),
    "seed": st.integers(0, 2**31 - 1),
    "repetition_penalty": st.floats(1.0, 6.0),
    "no_repeat_ngram_size": st.integers(0, 3),
}
OUTSIDE = {
    "max_length": st.sampled_from([0, -1, MAX_LENGTH + 1]),
    "min_length": st.sampled_from([-1, MAX_LENGTH, MAX_LENGTH + 4]),
    "temperature": st.sampled_from([0.0, -1.0, float("nan"), float("inf")]),
    "top_k": st.sampled_from([-1, -5]),
    "top_p": st.sampled_from([0.0, -0.5, 1.5, float("nan")]),
    "seed": st.sampled_from([-1, -(2**20)]),
    "repetition_penalty": st.sampled_from([0.5, 0.0, -2.0, float("nan")]),
    "no_repeat_ngram_size": st.sampled_from([-1, -3]),
}
DTYPES = {name: RUNTIME_OPTIONS[name].dtype for name in WITHIN}

# The worker: one request per line ({input name: {"shape", "dtype", "data"}}),
# one answer per line ({"outputs": ...} or {"refused": "Type: message"}).
_WORKER = """
import json, sys
import numpy as np
from keras_attention.export.serving import _OnnxSignature

model = _OnnxSignature(sys.argv[1])
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    inputs = {n: np.array(v["data"], v["dtype"]).reshape(v["shape"]) for n, v in json.loads(line).items()}
    try:
        outputs = model.run(model.feeds(inputs))
        answer = {"outputs": {n: {"shape": list(a.shape), "data": a.ravel().tolist()} for n, a in outputs.items()}}
    except Exception as error:
        answer = {"refused": f"{type(error).__name__}: {error}"[:400]}
    print(json.dumps(answer), flush=True)
"""


def _decoder_model():
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    prefix = keras.Input((None,), dtype="int32", name="target_prefix")
    memory = keras.layers.GRU(8, return_sequences=True)(keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source))
    decoder = ka.InferenceDecoder(
        ka.AttentionGRUCell(8, ka.AdditiveAttention(6)),
        keras.layers.Embedding(VOCABULARY, 5),
        keras.layers.Dense(VOCABULARY),
        START,
        END,
        MAX_LENGTH,
        method="sample",
        seed=0,
        runtime_options=tuple(WITHIN),
    )
    options = decoder.option_inputs()
    outputs = decoder(memory, target_prefix=prefix, options=options)
    model = keras.Model({"source": source, "target_prefix": prefix, **options}, outputs)
    # An untrained read-out is near uniform: sharpen it so that the options matter.
    kernel, _ = decoder.output_layer.get_weights()
    bias = np.random.default_rng(3).normal(0, 0.5, VOCABULARY)
    decoder.output_layer.set_weights([kernel * 6.0, bias])
    return model


class _Worker:
    """The serving process; `ask` sends one request and returns the answer,
    or {"died": exit status} when the process is gone."""

    def __init__(self, directory, log):
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(directory)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        assert self._read(300) == {"ready": True}

    def _read(self, timeout):
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        line = self.process.stdout.readline() if ready else ""
        if not line:
            self.process.kill()
            return {"died": self.process.wait()}
        return json.loads(line)

    def ask(self, request):
        try:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return {"died": self.process.wait()}
        return self._read(120)

    def close(self):
        self.process.stdin.close()
        return self.process.wait(timeout=60)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    model = _decoder_model()
    directory = tmp_path_factory.mktemp("properties") / "export"
    source = np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32")
    prefix = np.array([[4, -1], [-1, -1]], "int32")
    export_model(
        model,
        directory,
        formats=["saved_model", "onnx"],
        sample_inputs=[{"source": source, "target_prefix": prefix, **{n: np.zeros(0, DTYPES[n]) for n in WITHIN}}],
    )
    loaded = tf.saved_model.load(str(directory / "saved_model"))
    seen = collections.Counter()
    with open(directory.parent / "worker.log", "w") as log:
        worker = _Worker(directory, log)
        yield {"model": model, "serving": loaded.signatures["serving_default"], "worker": worker, "seen": seen}
        assert worker.close() == 0
    # The examples drawn covered what the property is about (derandomized: the same every run).
    wanted = ["served", "refused", "width 0", "batch 0", "batch 1", "prefix forced", "option outside"]
    assert [what for what in wanted if not seen[what]] == [], seen


@st.composite
def requests(draw):
    batch = draw(st.sampled_from([0, 1, 2, 3]))
    width = draw(st.sampled_from([0, 1, 4]))
    lengths = [draw(st.integers(1 if width else 0, width)) for _ in range(batch)]
    source = np.zeros((batch, width), "int32")
    for row, length in enumerate(lengths):
        source[row, :length] = draw(st.lists(st.integers(1, VOCABULARY - 1), min_size=length, max_size=length))
    # At most one option gets a value outside its bounds, so that a refusal has one cause.
    outside = draw(st.one_of(st.none(), st.sampled_from(sorted(WITHIN))))
    options, placed = {}, False
    for name in WITHIN:
        form = draw(st.sampled_from(["default", "one", "per_row"]))
        strategy = OUTSIDE[name] if name == outside else WITHIN[name]
        if form == "one" or (name == outside and form == "default"):
            options[name] = np.array([draw(strategy)], DTYPES[name])
            placed |= name == outside
        elif form == "per_row":
            values = [draw(WITHIN[name]) for _ in range(batch)]
            if name == outside and batch:
                values[draw(st.integers(0, batch - 1))] = draw(strategy)
                placed = True
            options[name] = np.array(values, DTYPES[name])
    # A forced prefix, right-padded with -1, no longer than the row's max_length
    # (a longer one, issue 34's item 10, is refused everywhere: test_runtime_options_export).
    limits = np.broadcast_to(options.get("max_length", np.array([MAX_LENGTH])), (batch,)) if batch else []
    prefix_width = draw(st.sampled_from([0, 1, 2]))
    prefix = np.full((batch, prefix_width), -1, "int32")
    for row in range(batch):
        forced = draw(st.integers(0, max(0, min(prefix_width, int(limits[row])))))
        prefix[row, :forced] = draw(st.lists(st.integers(3, VOCABULARY - 1), min_size=forced, max_size=forced))
    return {"source": source, "target_prefix": prefix, **options}, placed


def _keras(model, request):
    feeds = {name: request.get(name) for name in model.input}
    return {n: keras.ops.convert_to_numpy(v) for n, v in model(feeds).items()}


def _saved_model(serving, request):
    names = serving.structured_input_signature[1]
    feeds = {name: tf.constant(request[name] if name in request else np.zeros(0, DTYPES[name])) for name in names}
    return {n: v.numpy() for n, v in serving(**feeds).items()}


def _outcome(run):
    try:
        return "ok", run()
    except Exception as error:
        return "refused", f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"


def _wire(request):
    return {n: {"shape": list(a.shape), "dtype": a.dtype.name, "data": a.ravel().tolist()} for n, a in request.items()}


@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn=requests())
def test_onnxruntime_the_saved_model_and_keras_agree_or_all_refuse(exported, drawn):
    request, outside = drawn
    shapes = {n: list(a.shape) for n, a in request.items()}
    answer = exported["worker"].ask(_wire(request))
    assert "died" not in answer, f"the request {shapes} killed the serving process: exit {answer['died']}"
    keras_kind, keras_value = _outcome(lambda: _keras(exported["model"], request))
    saved_kind, saved_value = _outcome(lambda: _saved_model(exported["serving"], request))
    onnx_kind = "refused" if "refused" in answer else "ok"
    case = {
        "request": {n: a.tolist() for n, a in request.items()},
        "keras": keras_value if keras_kind == "refused" else "ok",
        "saved_model": saved_value if saved_kind == "refused" else "ok",
        "onnx": answer.get("refused", "ok"),
    }
    assert keras_kind == saved_kind == onnx_kind, case
    seen = exported["seen"]
    seen.update(["served" if onnx_kind == "ok" else "refused", f"width {shapes['source'][1]}"])
    seen.update([f"batch {shapes['source'][0]}"] + ["prefix forced"] * bool((request["target_prefix"] >= 0).any()))
    seen.update(["option outside"] * outside)
    if onnx_kind == "refused":
        # Served, a refusal is a clear error naming what is wrong, not onnxruntime's failure.
        assert answer["refused"].startswith("ValueError: "), case
        return
    onnx_value = {n: np.array(v["data"]).reshape(v["shape"]) for n, v in answer["outputs"].items()}
    assert set(onnx_value) == set(saved_value) == set(keras_value), case
    for name, want in keras_value.items():
        for runtime, got in (("saved_model", saved_value[name]), ("onnx", onnx_value[name])):
            assert got.shape == want.shape, (runtime, name, case)
            if want.dtype.kind in "iub":
                np.testing.assert_array_equal(got, want, err_msg=f"{runtime} {name} {case}")
            else:
                np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"{runtime} {name} {case}")


def test_an_empty_batch_with_a_prefix_of_width_0_is_served_everywhere(exported):
    # Keras and the SavedModel failed with TensorFlow's raw GatherV2 error:
    # ForcedPrefix read column 0 of a prefix of width 0 (it pads one now).
    request = {"source": np.ones((0, 1), "int32"), "target_prefix": np.zeros((0, 0), "int32")}
    answer = exported["worker"].ask(_wire(request))
    assert answer["outputs"]["ids"]["shape"] == [0, MAX_LENGTH]
    assert _saved_model(exported["serving"], request)["ids"].shape == (0, MAX_LENGTH)
    assert _keras(exported["model"], request)["ids"].shape == (0, MAX_LENGTH)


def test_a_prefix_of_width_0_forces_nothing(exported):
    # It used to fail in Keras and the SavedModel with TensorFlow's raw
    # GatherV2 error at every batch size: the step read the prefix's column 0.
    source = np.array([[3, 4, 5, 0], [6, 7, 0, 0]], "int32")
    free = {"source": source, "target_prefix": np.full((2, 1), -1, "int32"), "seed": np.array([5], "int32")}
    empty = {**free, "target_prefix": np.zeros((2, 0), "int32")}
    want = _keras(exported["model"], free)
    answer = exported["worker"].ask(_wire(empty))["outputs"]
    for got in (_keras(exported["model"], empty), _saved_model(exported["serving"], empty)):
        np.testing.assert_array_equal(got["ids"], want["ids"])
        np.testing.assert_array_equal(got["lengths"], want["lengths"])
    np.testing.assert_array_equal(np.array(answer["ids"]["data"]).reshape(answer["ids"]["shape"]), want["ids"])
