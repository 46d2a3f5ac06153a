"""Run-time decoding options exported: SavedModel and ONNX signature inputs
with defaults, in agreement with Keras for each option set to non-default
values, their bad values refused where they are fed (ONNX serving, the
SavedModel's assertions, the serve command)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.export import export_model, run_onnx, translate_texts
from keras_attention.export.serve_cli import main as serve
from keras_attention.text import Vocabulary
from tests.test_runtime_options import make_decoder

VOCABULARY = 9

# Per method: each option with non-default values for a batch of 3 (one
# per example, or one for all).
OPTIONS = {
    "greedy": {
        "max_length": [2, 5, 8],
        "min_length": [0, 3, 6],
        "repetition_penalty": 4.0,
        "no_repeat_ngram_size": [1, 2, 0],
        "length_decay_start": [0, 1, 7],
        "length_decay_factor": [1.0, 6.0, 30.0],
    },
    "sample": {
        "max_length": [3, 8, 5],
        "min_length": [2, 5, 0],
        "temperature": [0.3, 2.0, 5.0],
        "top_k": [1, 2, 0],
        "top_p": [0.2, 0.5, 1.0],
        "seed": [101, 102, 103],
        "repetition_penalty": [3.0, 1.0, 8.0],
        "no_repeat_ngram_size": 1,
        "length_decay_start": [0, 1, 7],
        "length_decay_factor": [30.0, 6.0, 1.0],
    },
    "beam": {
        "max_length": [2, 8, 4],
        "min_length": [1, 6, 3],
        "length_penalty_weight": [0.0, 4.0, 10.0],
        "coverage_penalty_weight": [5.0, 0.0, 2.0],
        "repetition_penalty": 4.0,
        "no_repeat_ngram_size": [1, 2, 0],
        "length_decay_start": [0, 1, 7],
        "length_decay_factor": [1.0, 6.0, 30.0],
    },
    # The options it shares with "sample" are exercised there.
    "min_p": {"min_p": [0.0, 0.02, 0.9], "seed": [101, 102, 103]},
    "typical": {"typical_p": [0.05, 0.5, 1.0], "seed": [101, 102, 103]},
    "epsilon": {"epsilon_cutoff": [0.3, 0.0, 0.12], "seed": [101, 102, 103]},
    "eta": {"eta_cutoff": [0.6, 0.05, 0.0], "seed": [101, 102, 103]},
    # The options it shares with "beam" are exercised there.
    "diverse_beam": {"diversity_strength": [0.0, 2.0, 8.0]},
    # Its constraints input is exported in test_constrained_beam_export.py.
    "constrained_beam": {"length_penalty_weight": [0.0, 2.0, 6.0]},
    # Its prefix input is exported in test_alternatives_export.py.
    "alternatives": {"min_expansion_probability": [0.3, 0.0, 0.15]},
    "refilling_beam": {
        "length_penalty_weight": [0.0, 1.0, 3.0],
        "coverage_penalty_weight": [2.0, 0.0, 5.0],
        "patience": [4.0, 1.0, 3.0],
    },
}

# Fields a method needs beyond `option_model`'s (three groups of one beam;
# a mild length decay, which each of its two options alone changes: from the
# token where the rows are still running).
CONSTRUCTOR = {
    "diverse_beam": {"num_groups": 3},
    "alternatives": {"num_alternatives": 3},
    "constrained_beam": {"max_constraints": 1},
    "greedy": {"length_decay_start": 4, "length_decay_factor": 1.3},
    "sample": {"length_decay_start": 2, "length_decay_factor": 1.3},
    "beam": {"length_decay_start": 4, "length_decay_factor": 1.3},
    # Patience acts only with a penalty (without, the search stops once the best has ended).
    "refilling_beam": {"length_penalty_weight": 1.0},
}


# An untrained decoder is nearly uniform whatever its input: larger
# embeddings, a sharper read-out and random biases (seeded per method: the
# first seed under which every option of `OPTIONS` changes the ids) give it
# sources that matter, ends at various steps and repetitions to block.
BIAS_SEEDS = {"greedy": 3, "sample": 0, "beam": 3, "min_p": 0, "diverse_beam": 3, "refilling_beam": 4}
BIAS_SEEDS.update(typical=0, epsilon=0, eta=0, alternatives=0, constrained_beam=3)


def option_model(method, names=None, **constructor):
    """source ids -> InferenceDecoder with `names` as run-time options."""
    keras.utils.set_random_seed(0)
    names = tuple(OPTIONS[method]) if names is None else names
    source = keras.Input((None,), dtype="int32", name="source")
    embedding = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)
    decoder = make_decoder(
        names, method=method, beam_width=3, **{"seed": 0, **CONSTRUCTOR.get(method, {}), **constructor}
    )
    options = decoder.option_inputs()
    model = keras.Model({"source": source, **options}, decoder(embedding(source), options=options))
    for layer in (embedding, decoder.embedding):
        layer.set_weights([w * 10.0 for w in layer.get_weights()])
    kernel, _ = decoder.output_layer.get_weights()
    bias = np.random.default_rng(BIAS_SEEDS[method]).normal(0, 0.5, VOCABULARY) - 0.5 * (np.arange(VOCABULARY) == 2)
    decoder.output_layer.set_weights([kernel * 6.0, bias])
    return model, decoder


def sources(batch=3, seed=1):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCABULARY, size=(batch, 6)).astype("int32")
    ids[1, 4:] = 0
    return ids


def keras_ids(model, decoder, batch):
    """The Keras model's ids for a batch that may leave options out."""
    feeds = {name: None for name in decoder.runtime_options}
    feeds.update({k: np.asarray(v).reshape(-1) if k != "source" else v for k, v in batch.items()})
    return np.asarray(model(feeds)["ids"])


@pytest.mark.parametrize("method", list(OPTIONS))
def test_each_option_agrees_in_keras_saved_model_and_onnx(method, tmp_path, capsys):
    model, decoder = option_model(method)
    source = sources()
    batches = [{"source": source}] + [{"source": source, name: value} for name, value in OPTIONS[method].items()]
    default = keras_ids(model, decoder, batches[0])
    report = export_model(model, tmp_path / "export", sample_inputs=batches)
    assert len(report.batches["serving_default"]) == len(batches)
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "ids") == 0 and report.max_abs_diff(format, "lengths") == 0
        assert report.max_abs_diff(format, "scores") <= 1e-4
    for batch in batches[1:]:
        # A non-default value changes the result: the parity above is not that of the defaults.
        # Checked on the served ids, Keras's exactly on these batches (the ids parity
        # above): Keras's again would be one more eager decoder run per batch, seconds each.
        assert not np.array_equal(run_onnx(tmp_path / "export", batch)["outputs"]["ids"], default), sorted(batch)
    options = report.signatures["serving_default"]["options"]
    assert set(options) == set(OPTIONS[method])
    if "max_length" in options:
        assert options["max_length"] == {"dtype": "int32", "default": 8, "minimum": 1, "strict": False, "maximum": 8}
    # Served with every option at once, and with none (the defaults of the export).
    everything = {"source": source, **OPTIONS[method]}
    np.testing.assert_array_equal(
        run_onnx(tmp_path / "export", everything)["outputs"]["ids"], keras_ids(model, decoder, everything)
    )
    np.testing.assert_array_equal(run_onnx(tmp_path / "export", {"source": source})["outputs"]["ids"], default)
    # The serve command takes each option as a flag (one value for every input).
    one = {name: np.asarray(value).reshape(-1)[-1].item() for name, value in OPTIONS[method].items()}
    flags = [text for name, value in one.items() for text in ("--" + name.replace("_", "-"), str(value))]
    inputs = json.dumps({"source": source.tolist()})
    assert serve([str(tmp_path / "export"), "--inputs", inputs, "--runs", "0", "--json", "--all-outputs", *flags]) == 0
    served = json.loads(capsys.readouterr().out)["outputs"]["ids"]
    np.testing.assert_array_equal(served, keras_ids(model, decoder, {"source": source, **one}))
    # And each option reaches the serve command as its flag (one value for every example).
    for name, value in OPTIONS[method].items():
        scalar = np.asarray(value).reshape(-1)[-1].item()
        flags = [f"--{name.replace('_', '-')}", str(scalar)]
        argv = [str(tmp_path / "export"), "--inputs", json.dumps({"source": source.tolist()}), "--runs", "0"]
        assert serve([*argv, "--json", "--all-outputs", *flags]) == 0
        printed = json.loads(capsys.readouterr().out)["outputs"]["ids"]
        want = run_onnx(tmp_path / "export", {"source": source, name: scalar})["outputs"]["ids"]
        np.testing.assert_array_equal(printed, want)
        np.testing.assert_array_equal(want, keras_ids(model, decoder, {"source": source, name: scalar}))


def test_the_ensemble_exports_its_runtime_options(tmp_path):
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    ensemble = ka.EnsembleDecoder(
        [make_decoder(), make_decoder()],
        method="beam",
        beam_width=3,
        runtime_options=("max_length", "length_penalty_weight"),
    )
    options = ensemble.option_inputs()
    model = keras.Model({"source": source, **options}, ensemble([memory, memory], options=options))
    batch = {"source": sources(), "max_length": [3, 8, 6], "length_penalty_weight": 2.0}
    report = export_model(model, tmp_path / "export", sample_inputs=[batch])
    assert report.max_abs_diff("onnx", "ids") == 0 and report.max_abs_diff("saved_model", "ids") == 0
    ids = run_onnx(tmp_path / "export", batch)["outputs"]["ids"]
    assert (ids[0, :, 3:] == 2).all() and (ids[2, :, 6:] == 2).all()


@pytest.fixture(scope="module")
def sample_export(tmp_path_factory):
    """A sampling decoder with every sampling option at run time, exported with a vocabulary."""
    model, decoder = option_model("sample", ("max_length", "min_length", "temperature", "top_k", "top_p", "seed"))
    characters = Vocabulary(["<pad>", *"abcdefgh"])
    target = Vocabulary(["<pad>", "<start>", "<end>", *"abcdef"], start_token="<start>", end_token="<end>")
    vocabulary = {"source": characters, "target": target}
    directory = tmp_path_factory.mktemp("runtime") / "export"
    export_model(model, directory, vocabulary=vocabulary, quantize="int8")
    return directory, model, decoder


@pytest.fixture(scope="module")
def sample_serving(sample_export):
    """The exported SavedModel's serving signature, loaded once for the tests
    that call it (each load, and its first call, took seconds)."""
    directory, _, _ = sample_export
    return tf.saved_model.load(str(directory / "saved_model")).signatures["serving_default"]


@pytest.mark.parametrize(
    "options, message",
    [
        ({"temperature": 0.0}, r"input `temperature` must be a finite number > 0; got 0.0"),
        ({"top_p": [0.5, 1.5, 0.5]}, r"input `top_p` must be a finite number > 0 and <= 1; got \[0.5, 1.5, 0.5\]"),
        ({"top_k": -1}, r"input `top_k` must be an integer >= 0; got -1"),
        ({"max_length": 9}, r"input `max_length` must be an integer from 1 to 8; got 9"),
        ({"max_length": 1.5}, r"input `max_length` must be an integer from 1 to 8; got 1.5"),
        ({"min_length": 4, "max_length": [8, 4, 8]}, r"input `min_length` must be below `max_length`"),
        ({"seed": [1, 2]}, r"input `seed` must hold 0 values \(the default\), 1 \(every example\) or 3"),
        ({"seed": "abc"}, r"input `seed` must be a number or a list of numbers"),
        ({"length_penalty_weight": 1.0}, r"the model has no run-time option 'length_penalty_weight'; its options"),
    ],
)
def test_onnx_serving_names_a_bad_option_value(sample_export, options, message):
    directory, _, _ = sample_export
    with pytest.raises(ValueError, match=message):
        run_onnx(directory, {"source": sources(), **options})


def test_the_saved_model_asserts_its_option_inputs(sample_export, sample_serving):
    _, model, decoder = sample_export
    feeds = {name: tf.zeros((0,), spec["dtype"]) for name, spec in decoder.option_specs().items()}
    feeds["source"] = tf.constant(sources())
    # Empty options are the defaults, as in Keras with the options left out.
    np.testing.assert_array_equal(
        sample_serving(**feeds)["ids"].numpy(), keras_ids(model, decoder, {"source": sources()})
    )
    for name, value, message in [
        ("top_p", [2.0], r"input `top_p` must be a finite number > 0 and <= 1; got\] \[2\]"),
        ("max_length", [0], r"input `max_length` must be an integer from 1 to 8; got\] \[0\]"),
        ("seed", [1, 2], r"input `seed` must hold 0 values \(the default\), 1 \(every example\) or one per example"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            sample_serving(**{**feeds, name: tf.constant(value, feeds[name].dtype)})
    bad_lengths = {**feeds, "min_length": tf.constant([5]), "max_length": tf.constant([5])}
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input `min_length` must be below `max_length`"):
        sample_serving(**bad_lengths)


def test_serve_flags_set_the_options(sample_export, capsys):
    directory, model, decoder = sample_export
    inputs = json.dumps({"source": ["abc", "hgfed"]})
    flags = ["--temperature", "3.0", "--top-k", "3", "--seed", "7", "--max-length", "5"]
    assert serve([str(directory), "--inputs", inputs, "--runs", "0", "--json", "--all-outputs", *flags]) == 0
    printed = json.loads(capsys.readouterr().out)
    want = run_onnx(directory, {"source": ["abc", "hgfed"], "temperature": 3.0, "top_k": 3, "seed": 7, "max_length": 5})
    np.testing.assert_array_equal(printed["outputs"]["ids"], want["outputs"]["ids"])
    assert [row["text"] for row in printed["translations"]] == want["text"]["ids"]
    assert all(length <= 5 for length in printed["outputs"]["lengths"])
    for argv, message in [
        (["--top-p", "0"], "error: input `top_p` must be a finite number > 0 and <= 1; got 0.0."),
        (["--repetition-penalty", "2"], "error: the model has no run-time option 'repetition_penalty'"),
    ]:
        assert serve([str(directory), "--inputs", inputs, "--runs", "0", *argv]) == 1
        assert capsys.readouterr().err.startswith(message)
    # The int8 copy keeps its options, defaults and checks.
    argv = [str(directory), "--inputs", inputs, "--runs", "0", "--json", "--all-outputs", "--precision", "int8"]
    assert serve([*argv, "--max-length", "3"]) == 0
    assert max(json.loads(capsys.readouterr().out)["outputs"]["lengths"]) <= 3
    assert serve([*argv, "--max-length", "0"]) == 1
    assert "input `max_length` must be an integer from 1 to 8; got 0" in capsys.readouterr().err
    twice = json.dumps({"source": ["abc"], "seed": 3})
    assert serve([str(directory), "--inputs", twice, "--runs", "0", "--seed", "4"]) == 1
    assert "['seed'] given both in the inputs and as flags" in capsys.readouterr().err


def test_texts_are_decoded_with_the_options(sample_export, tmp_path, capsys):
    directory, _, _ = sample_export
    words = ["abc", "hgfed", "a", "bbbbbb"]
    short = translate_texts(directory, words, options={"max_length": 2, "seed": 5})
    full = translate_texts(directory, words, options={"seed": 5})
    assert all(len(text) <= 2 for text in short) and any(len(text) > 2 for text in full)
    (tmp_path / "words.txt").write_text("\n".join(words))
    assert serve([str(directory), "--texts", str(tmp_path / "words.txt"), "--max-length", "2", "--seed", "5"]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{w}\t{t}" for w, t in zip(words, short)]
    with pytest.raises(ValueError, match=r"`options`: `seed` must be one value for every text"):
        translate_texts(directory, words, options={"seed": [1, 2, 3, 4]})


@pytest.fixture(scope="module")
def prefix_export(tmp_path_factory):
    """A greedy decoder with a `target_prefix` input and a run-time max_length, exported."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    prefix = keras.Input((None,), dtype="int32", name="target_prefix")
    decoder = make_decoder(("max_length",), method="greedy")
    options = decoder.option_inputs()
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    outputs = decoder(memory, target_prefix=prefix, options=options)
    model = keras.Model({"source": source, "target_prefix": prefix, **options}, outputs)
    fits = np.array([[3, 8, -1], [-1, -1, -1], [5, -1, -1]], "int32")
    directory = tmp_path_factory.mktemp("prefix") / "export"
    export_model(model, directory, sample_inputs=[{"source": sources(), "target_prefix": fits}])
    return directory, model, fits


# Issue 34 item 10: a prefix outside the vocabulary decoded to nothing, one
# longer than max_length was cut, silently, in the SavedModel and ONNX.
BAD_PREFIXES = [
    (np.array([[3, 9, -1], [-1, -1, -1], [5, -1, -1]]), {}, "holds the id 9 on example 0, outside the vocabulary"),
    (np.array([[3, 8, -1], [-2, -1, -1], [5, -1, -1]]), {}, "holds the id -2 on example 1, outside the vocabulary"),
    (np.array([[3, 8, 4], [-1, -1, -1], [5, -1, -1]]), {"max_length": [8, 8, 2]}, None),
    (np.array([[3, 8, 4], [-1, -1, -1], [5, -1, -1]]), {"max_length": 2}, "forces 3 tokens on example 0, more than"),
]


def test_a_bad_prefix_is_refused_by_onnx_serving_the_saved_model_and_the_serve_command(prefix_export, capsys):
    directory, model, fits = prefix_export
    served = run_onnx(directory, {"source": sources(), "target_prefix": fits})["outputs"]["ids"]
    np.testing.assert_array_equal(served[[0, 2], :1], [[3], [5]])
    np.testing.assert_array_equal(served[0, :2], [3, 8])
    function = tf.saved_model.load(str(directory / "saved_model")).signatures["serving_default"]
    for prefix, options, message in BAD_PREFIXES:
        request = {"source": sources(), "target_prefix": prefix.astype("int32"), **options}
        if message is None:  # fits: each row within its own max_length
            np.testing.assert_array_equal(run_onnx(directory, request)["outputs"]["ids"][0, :3], [3, 8, 4])
            continue
        with pytest.raises(ValueError, match=r"input `target_prefix` " + message):
            run_onnx(directory, request)
        with pytest.raises(ValueError, match=r"`target_prefix` " + message):
            model({**request, "max_length": np.asarray(options.get("max_length", []), "int32").reshape(-1)})
        feeds = {"source": tf.constant(sources()), "target_prefix": tf.constant(request["target_prefix"])}
        feeds["max_length"] = tf.constant(np.asarray(options.get("max_length", []), "int32").reshape(-1))
        saved_message = "outside the vocabulary" if "vocabulary" in message else "forces more tokens than"
        with pytest.raises(tf.errors.InvalidArgumentError, match=saved_message):
            function(**feeds)
        inputs = json.dumps({"source": sources().tolist(), "target_prefix": prefix.tolist(), **options})
        assert serve([str(directory), "--inputs", inputs, "--runs", "0"]) == 1
        assert capsys.readouterr().err.startswith("error: input `target_prefix` " + message)


def test_one_seed_gives_each_row_its_own_stream_in_every_runtime(sample_export, sample_serving):
    # Issue 34 item 11: one seed for the batch gave every row the same draws.
    directory, model, decoder = sample_export
    source = np.repeat(sources()[:1], 6, 0)
    request = {"source": source, "seed": [3], "temperature": [5.0]}
    want = keras_ids(model, decoder, request)
    assert len({tuple(row) for row in want}) > 1
    np.testing.assert_array_equal(keras_ids(model, decoder, request), want)  # reproducible
    streams = np.asarray(ka.decoding.row_seeds(np.full(6, 3), np.arange(6)))
    np.testing.assert_array_equal(keras_ids(model, decoder, {**request, "seed": streams}), want)
    np.testing.assert_array_equal(run_onnx(directory, request)["outputs"]["ids"], want)
    feeds = {name: tf.zeros((0,), spec["dtype"]) for name, spec in decoder.option_specs().items()}
    feeds.update(source=tf.constant(source), seed=tf.constant([3]), temperature=tf.constant([5.0]))
    np.testing.assert_array_equal(sample_serving(**feeds)["ids"].numpy(), want)


def test_a_sampling_decoder_seeded_in_its_constructor_only_exports(tmp_path):
    # Issue 34 item 9: it failed ONNX export with StatelessRandomUniformIntV2.
    # Exported, the constructor's seed is that seed for the batch (row b:
    # row_seeds(seed, b)), as a run-time seed left out is.
    model, _ = option_model("sample", names=(), seed=3)
    source = np.repeat(sources()[:1], 4, 0)
    report = export_model(model, tmp_path / "export", sample_inputs=[{"source": source}])
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "ids") == 0 and report.max_abs_diff(format, "lengths") == 0
    served = run_onnx(tmp_path / "export", {"source": source})["outputs"]["ids"]
    assert len({tuple(row) for row in served}) > 1
    with_option, decoder = option_model("sample", names=("seed",), seed=3)
    np.testing.assert_array_equal(served, keras_ids(with_option, decoder, {"source": source}))
    # In Keras the decoder keeps its generator: new samples per call.
    assert not np.array_equal(np.asarray(model(source)["ids"]), np.asarray(model(source)["ids"]))


def test_an_exported_sampling_decoder_needs_an_integer_seed(tmp_path):
    model, _ = option_model("sample", names=(), seed=None)
    with pytest.raises(ValueError, match=r"an exported sampling decoder draws from its `seed`, which must be an "):
        export_model(model, tmp_path / "export", formats=["saved_model"], sample_inputs=[{"source": sources()}])
    assert not (tmp_path / "export").exists()


def test_a_row_cut_by_a_run_time_max_length_is_served_as_unfinished(sample_export, sample_serving, capsys):
    # Issue 34 item 13: padded with end ids, a cut row read as finished.
    directory, model, decoder = sample_export
    request = {"source": sources(), "max_length": [2], "seed": [3]}
    feeds = {name: None for name in decoder.runtime_options}
    feeds.update({k: np.asarray(v) for k, v in request.items()})
    want = {name: np.asarray(value) for name, value in model(feeds).items()}
    last = np.take_along_axis(want["ids"], np.maximum(want["lengths"] - 1, 0)[:, None], axis=1)[:, 0]
    np.testing.assert_array_equal(want["finished"], (want["lengths"] > 0) & (last == 2))
    assert not want["finished"].all() and (want["ids"][:, 2:] == 2).all()  # cut rows padded with end ids
    served = run_onnx(directory, request)["outputs"]
    np.testing.assert_array_equal(served["finished"], want["finished"])
    assert served["finished"].dtype == bool
    saved = {name: tf.zeros((0,), spec["dtype"]) for name, spec in decoder.option_specs().items()}
    saved.update({k: tf.constant(v) for k, v in request.items()})
    np.testing.assert_array_equal(sample_serving(**saved)["finished"].numpy(), want["finished"])
    # The serve command says it per translation, and in text mode on stderr.
    inputs = json.dumps({"source": ["abc", "hgfed", "a"]})
    argv = [str(directory), "--inputs", inputs, "--runs", "0", "--max-length", "2", "--seed", "3"]
    flags = run_onnx(directory, {"source": ["abc", "hgfed", "a"], "max_length": 2, "seed": 3})["outputs"]["finished"]
    assert serve([*argv, "--json"]) == 0
    assert [row["finished"] for row in json.loads(capsys.readouterr().out)["translations"]] == flags.tolist()
    assert serve(argv) == 0
    note = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    cut = [i for i, flag in enumerate(flags) if not flag]
    assert note == (
        [f"note: rows {cut} were cut at max_length (no end token; output `finished` false)."] if cut else []
    )


class _Filters(keras.layers.Layer):
    """The three cuts of the sampled distribution, each with its value per example."""

    def call(self, logits, typical_p, epsilon_cutoff, eta_cutoff):
        return {
            "typical": ka.decoding.typical_sampling.typical_filter(logits, typical_p),
            "epsilon": ka.decoding.epsilon_sampling.epsilon_filter(logits, epsilon_cutoff),
            "eta": ka.decoding.eta_sampling.eta_filter(logits, eta_cutoff),
        }


def test_the_typical_epsilon_and_eta_cuts_agree_in_keras_saved_model_and_onnx(tmp_path):
    """Each filter's graph alone, exported, on ties, forbidden tokens and an
    empty batch (the decoders with each cut in their loop: OPTIONS above)."""
    names = ("typical_p", "epsilon_cutoff", "eta_cutoff")
    logits = keras.Input((None,), name="logits")
    values = {name: keras.Input((), name=name) for name in names}
    model = keras.Model({"logits": logits, **values}, _Filters()(logits, *values.values()))
    rng = np.random.default_rng(0)
    batch = {"logits": rng.normal(0, 2, (5, 11)).astype("float32")}
    batch["logits"][3, :4] = 1.5  # ties at the boundary
    batch["logits"][4, 6:] = ka.decoding.NEG_INF  # tokens forbidden before the cut
    cuts = {"typical_p": [0.05, 0.5, 1.0, 0.3, 0.9], "epsilon_cutoff": [0.0, 0.05, 0.2, 1.0, 0.1]}
    cuts["eta_cutoff"] = [0.6, 0.0, 0.05, 0.3, 0.2]
    batches = [{**batch, **{k: np.asarray(v, "float32") for k, v in cuts.items()}}]
    batches.append({"logits": np.zeros((0, 11), "float32"), **{k: np.zeros((0,), "float32") for k in names}})
    report = export_model(model, tmp_path / "export", sample_inputs=batches)
    assert report.ok
    for name in ("typical", "epsilon", "eta"):
        for format in ("saved_model", "onnx"):
            assert report.max_abs_diff(format, name) == 0, (name, format)
    served = run_onnx(tmp_path / "export", batches[0])["outputs"]
    for name in ("typical", "epsilon", "eta"):
        kept = served[name] > ka.decoding.NEG_INF / 2
        assert kept.any(1).all() and not kept.all(), name  # a real cut, never an empty one
