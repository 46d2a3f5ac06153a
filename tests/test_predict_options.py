"""`Model.predict` with one run-time option value for a batch (issue 34 item
14): predict slices every input by rows, so `decoder.predict_inputs` writes
the options out per example, as a direct call broadcasts them.

Backend-neutral: runs as it is under KERAS_BACKEND=jax or torch."""

import keras
import numpy as np
import pytest

import keras_attention as ka

pytestmark = pytest.mark.any_backend

VOCABULARY = 9


def _model():
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    decoder = ka.InferenceDecoder(
        ka.AttentionGRUCell(8, ka.AdditiveAttention(6)),
        keras.layers.Embedding(VOCABULARY, 5),
        keras.layers.Dense(VOCABULARY),
        1,
        2,
        6,
        method="sample",
        seed=0,
        runtime_options=("temperature", "seed", "max_length"),
    )
    options = decoder.option_inputs()
    memory = keras.layers.Embedding(VOCABULARY, 6, mask_zero=True)(source)
    model = keras.Model({"source": source, **options}, decoder(memory, options=options))
    kernel, bias = decoder.output_layer.get_weights()
    decoder.output_layer.set_weights([kernel * 6.0, bias])
    return model, decoder


def _direct(model, decoder, request):
    feeds = {name: None for name in decoder.runtime_options}
    feeds.update(
        {name: np.asarray(value) if name == "source" else np.reshape(value, -1) for name, value in request.items()}
    )
    return {name: keras.ops.convert_to_numpy(value) for name, value in model(feeds).items()}


@pytest.mark.parametrize(
    "options",
    [{"temperature": [2.0], "seed": [3]}, {}, {"temperature": 0.5, "max_length": [4], "seed": 7}],
    ids=["one_value", "left_out", "scalars"],
)
def test_predict_gives_what_the_direct_call_gives(options):
    model, decoder = _model()
    source = np.random.default_rng(1).integers(1, VOCABULARY, size=(40, 5)).astype("int32")
    request = {"source": source, **options}
    want = _direct(model, decoder, request)
    assert len({row.tobytes() for row in want["ids"]}) > 1
    inputs = decoder.predict_inputs(request)
    assert all(inputs[name].shape == (40,) for name in decoder.runtime_options)
    # Slices of 16 rows: each row keeps the stream of its place in the request.
    got = model.predict(inputs, batch_size=16, verbose=0)
    for name in ("ids", "lengths", "finished"):
        np.testing.assert_array_equal(np.asarray(got[name]), want[name], err_msg=name)
    np.testing.assert_allclose(np.asarray(got["scores"]), want["scores"], atol=1e-5)


def test_per_example_values_go_through_and_bad_ones_are_named():
    _, decoder = _model()
    source = np.ones((3, 4), "int32")
    inputs = decoder.predict_inputs({"source": source, "temperature": [1.0, 2.0, 3.0], "seed": [5, 6, 7]})
    np.testing.assert_array_equal(inputs["temperature"], [1.0, 2.0, 3.0])
    np.testing.assert_array_equal(inputs["seed"], [5, 6, 7])
    np.testing.assert_array_equal(inputs["max_length"], [6, 6, 6])
    assert inputs["max_length"].dtype == np.int32
    with pytest.raises(ValueError, match=r"input `temperature` must be a finite number > 0; got \[0.0\]"):
        decoder.predict_inputs({"source": source, "temperature": [0.0]})
    with pytest.raises(ValueError, match=r"input `seed` must hold 0 values \(the default\), 1 \(every example\) or 3"):
        decoder.predict_inputs({"source": source, "seed": [1, 2]})
    with pytest.raises(ValueError, match=r"`inputs` must hold the model's other inputs with one batch size"):
        decoder.predict_inputs({"temperature": [1.0]})
