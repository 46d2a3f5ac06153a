"""A pointer network's run-time options exported: SavedModel and ONNX inputs with the
constructor's values as defaults, the same pointers as Keras for each option set, and
bad values refused by the SavedModel's assertions, ONNX serving and the serve command."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attention.decoding import BeamSearch
from keras_attention.export import export_model, run_onnx
from keras_attention.export.serve_cli import main as serve
from keras_attention.models.pointer import PointerNetwork

MAX_LENGTH = 4

# Requests for a batch of 3 (one value per example, or one for all), each
# changing the pointers of at least one of the two networks.
REQUESTS = [
    {"max_length": [2, 4, 3]},
    {"min_length": [3, 1, 2]},
    {"length_penalty_weight": [0.0, 8.0, 3.0]},
    {"max_length": 3, "min_length": [2, 1, 0], "length_penalty_weight": 5.0},
]


def numbers():
    values = np.random.default_rng(4).normal(size=(3, 3, 2)).astype("float32")
    values[1, 2:] = 0.0  # the second example has two inputs (Masking finds the padding)
    return values


def pointer(seed, **config):
    keras.utils.set_random_seed(seed)
    layer = PointerNetwork(8, max_length=MAX_LENGTH, **config)
    layer.build((None, None, 2))
    attention = layer.pointer.additive
    attention.score_vector.assign(np.asarray(attention.score_vector) * 4)  # sharper than untrained
    return layer


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One model, a greedy and a beam pointer network over one input, sharing the max_length input.

    Untrained, the greedy one ends at once unless a min_length holds it; the
    beam one's length penalty keeps its hypotheses long, so a max_length cuts them."""
    greedy = pointer(3, runtime_options=("max_length", "min_length"))
    beam = pointer(
        5, search=BeamSearch(3, length_penalty_weight=30.0), runtime_options=("length_penalty_weight", "max_length")
    )
    options = {**greedy.option_inputs(), **beam.option_inputs()}
    inputs = keras.Input((None, 2), name="numbers")
    masked = keras.layers.Masking(0.0)(inputs)

    def own(layer):
        return {name: options[name] for name in layer.runtime_options}

    outputs = {"greedy": greedy(masked, options=own(greedy)), "beam": beam(masked, options=own(beam))}
    model = keras.Model({"numbers": inputs, **options}, outputs)
    batches = [{"numbers": numbers()}] + [{"numbers": numbers(), **request} for request in REQUESTS]
    directory = tmp_path_factory.mktemp("pointer") / "export"
    report = export_model(model, directory, sample_inputs=batches)
    return directory, model, report


def keras_ids(model, request):
    feeds = {name: None for name in ("max_length", "min_length", "length_penalty_weight")}
    feeds.update({k: v if k == "numbers" else np.asarray(v).reshape(-1) for k, v in request.items()})
    return {name: np.asarray(value) for name, value in model(feeds).items()}


def test_each_option_is_exported_with_the_pointers_of_keras(exported):
    directory, model, report = exported
    default = keras_ids(model, {"numbers": numbers()})
    for request in REQUESTS:  # a non-default value changes the pointers: the parity is not the defaults'
        got = keras_ids(model, {"numbers": numbers(), **request})
        assert any(not np.array_equal(got[name], default[name]) for name in got), request
    assert len(report.batches["serving_default"]) == len(REQUESTS) + 1
    for format in ("saved_model", "onnx"):
        assert report.max_abs_diff(format, "greedy") == 0 and report.max_abs_diff(format, "beam") == 0
    assert report.signatures["serving_default"]["options"] == {
        "max_length": {"dtype": "int32", "default": 4, "minimum": 1, "strict": False, "maximum": 4},
        "min_length": {"dtype": "int32", "default": 0, "minimum": 0, "strict": False, "maximum": 3},
        "length_penalty_weight": {"dtype": "float32", "default": 30.0, "minimum": 0, "strict": False, "maximum": None},
    }
    # Served with an option left out: the export's default, the constructor's.
    served = run_onnx(directory, {"numbers": numbers()})["outputs"]
    for name in ("greedy", "beam"):
        np.testing.assert_array_equal(served[name], default[name])
    request = {"numbers": numbers(), "max_length": [2, 4, 3], "min_length": 1}
    served, want = run_onnx(directory, request)["outputs"], keras_ids(model, request)
    for name in ("greedy", "beam"):
        np.testing.assert_array_equal(served[name], want[name])
    assert (want["greedy"][0, 2:] == 0).all() and (want["greedy"][:, 0] != 0).all()
    # The SavedModel with every option empty (the defaults), and with one set.
    function = tf.saved_model.load(str(directory / "saved_model")).signatures["serving_default"]
    feeds = {"numbers": tf.constant(numbers()), "max_length": tf.zeros((0,), "int32")}
    feeds.update(min_length=tf.zeros((0,), "int32"), length_penalty_weight=tf.zeros((0,), "float32"))
    np.testing.assert_array_equal(function(**feeds)["beam"].numpy(), default["beam"])
    lengths = {**feeds, "min_length": tf.constant([3, 1, 2])}
    np.testing.assert_array_equal(
        function(**lengths)["greedy"].numpy(), keras_ids(model, REQUESTS[1] | {"numbers": numbers()})["greedy"]
    )


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_length": 9}, r"input `max_length` must be an integer from 1 to 4; got 9"),
        ({"min_length": [1, 4, 1]}, r"input `min_length` must be an integer from 0 to 3; got \[1, 4, 1\]"),
        ({"min_length": 2, "max_length": [4, 2, 4]}, r"input `min_length` must be below `max_length`"),
        ({"length_penalty_weight": -1.0}, r"input `length_penalty_weight` must be a finite number >= 0; got -1.0"),
        ({"temperature": 1.0}, r"the model has no run-time option 'temperature'; its options"),
    ],
)
def test_a_bad_value_is_refused_by_onnx_serving(exported, options, message):
    directory, _, _ = exported
    with pytest.raises(ValueError, match=message):
        run_onnx(directory, {"numbers": numbers(), **options})


def test_a_bad_value_is_refused_by_the_saved_model_and_the_serve_command(exported, capsys):
    directory, model, _ = exported
    function = tf.saved_model.load(str(directory / "saved_model")).signatures["serving_default"]
    feeds = {"numbers": tf.constant(numbers()), "max_length": tf.zeros((0,), "int32")}
    feeds.update(min_length=tf.zeros((0,), "int32"), length_penalty_weight=tf.zeros((0,), "float32"))
    for name, value, message in [
        ("max_length", tf.constant([0]), r"input `max_length` must be an integer from 1 to 4; got\] \[0\]"),
        ("length_penalty_weight", tf.constant([-2.0]), r"input `length_penalty_weight` must be a finite number >= 0"),
        ("min_length", tf.constant([1, 2]), r"input `min_length` must hold 0 values \(the default\), 1 \(every"),
    ]:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            function(**{**feeds, name: value})
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"input `min_length` must be below `max_length`"):
        function(**{**feeds, "min_length": tf.constant([3]), "max_length": tf.constant([3])})
    # The serve command takes each option as a flag, and refuses a bad one by name.
    argv = [str(directory), "--inputs", json.dumps({"numbers": numbers().tolist()}), "--runs", "0"]
    assert serve([*argv, "--json", "--all-outputs", "--min-length", "2", "--length-penalty-weight", "8"]) == 0
    printed = json.loads(capsys.readouterr().out)["outputs"]
    want = keras_ids(model, {"numbers": numbers(), "min_length": 2, "length_penalty_weight": 8.0})
    for name in ("greedy", "beam"):
        np.testing.assert_array_equal(printed[name], want[name])
    assert serve([*argv, "--max-length", "5"]) == 1
    assert capsys.readouterr().err.startswith("error: input `max_length` must be an integer from 1 to 4; got 5")
