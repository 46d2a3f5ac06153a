"""Empty inputs: a batch of 0, a memory of length 0, no queries, every
position masked. Every layer returns its documented zero context (zero
weights, zero output rows) eagerly, in a compiled predict, and exported."""

import keras
import numpy as np
import onnxruntime
import pytest
import tensorflow as tf

from keras_attention.export import export_model
from tests import layer_cases
from tests.layer_cases import DRIVERS, check_results, driver_params

# (batch, Tq, Tv) and whether every position is masked.
EMPTY = {
    "batch_0": (0, 3, 4, False),
    "memory_0": (2, 3, 0, False),
    "queries_0": (2, 0, 4, False),
    "all_masked": (2, 3, 4, True),
}
# What Keras itself cannot run, whatever our layers do: its RNN layer reads
# the first time step before its loop (no target steps: `queries_0` for the
# teacher-forced decoders), and its LSTMCell fails on an empty batch
# (BiasAdd) and its LSTM on an empty sequence (PointerNetwork's encoder).
_NO_STEP = "keras.layers.RNN reads the first target step before its loop: a teacher-forced decoder needs one"
_EMPTY_LSTM = "keras.layers.LSTM (PointerNetwork's encoder) fails on an empty batch or an empty sequence"
KERAS_LIMITS = {
    ("decoder_gru_additive", "queries_0"): _NO_STEP,
    ("decoder_wrapper_monotonic", "queries_0"): _NO_STEP,
    ("decoder_lstm_scaled_dot", "queries_0"): _NO_STEP,
    ("decoder_scheduled_sampling", "queries_0"): _NO_STEP,
    ("pointer_network", "batch_0"): _EMPTY_LSTM,
    ("pointer_network", "memory_0"): _EMPTY_LSTM,
}
# An empty target span is refused, by name, when the target mask is concrete
# (documented): with no valid position there is no target to attend from.
REFUSED = {
    ("targeted_vanilla", "memory_0"),
    ("targeted_vanilla", "all_masked"),
    ("targeted_gated", "memory_0"),
    ("targeted_gated", "all_masked"),
}


def _inputs(case, seed=0):
    batch, query_length, value_length, masked = EMPTY[case]
    # Every position valid, or every position masked.
    lengths = dict(
        query_lengths=[0 if masked else query_length] * batch,
        value_lengths=[0 if masked else value_length] * batch,
    )
    return layer_cases.data(np.random.default_rng(seed), batch, query_length, value_length, **lengths)


def _check(driver, results, query_valid, value_valid):
    check_results(driver, results, query_valid, value_valid)
    if driver.zero_context and "output" in results:
        allowed = driver.allowed(query_valid, value_valid)
        if driver.id.startswith("multi_head"):  # (B, 1, Tq, Tv): over the heads
            allowed = allowed[:, 0]
            allowed = allowed.any(1)
        empty_rows = ~allowed.any(-1)  # (B, Tq) or (B,) rows with nothing to attend to
        output = np.asarray(results["output"], np.float64)
        if output.ndim == empty_rows.ndim + 1:
            assert (output[empty_rows] == 0).all(), f"{driver.id}: a row with no valid position is not zero"
    if "ids" in results:
        ids = np.asarray(results["ids"])
        assert ((ids >= 0) & (ids < layer_cases.VOCABULARY + value_valid.shape[1] + 1)).all()


@driver_params()
@pytest.mark.parametrize("case", list(EMPTY))
def test_eagerly(driver, case):
    if (driver.id, case) in KERAS_LIMITS:
        pytest.skip(KERAS_LIMITS[driver.id, case])
    inputs = _inputs(case)
    layer = driver.make(dtype="float32")
    if (driver.id, case) in REFUSED:
        with pytest.raises(ValueError, match=r"TargetedAttention: `target_mask` must mark at least one valid position"):
            driver.run(layer, *inputs)
        return
    _check(driver, driver.run(layer, *inputs), *inputs[2:])


# Sampling draws from a seed generator, a variable updated in the graph,
# which does not convert to ONNX (with a run-time seed it draws from a hash
# of the seeds instead, and is exported here); TargetedAttention refuses, eagerly, the
# empty target spans of an empty memory (see REFUSED), and the export checks
# the model eagerly: the exported model leaves those out.
MODEL_DRIVERS = [
    d for d in DRIVERS.values() if d.id != "pointer_network" and not d.random and not d.id.startswith("targeted")
]


NAMES = ["query", "value", "query_valid", "value_valid"]


@pytest.fixture(scope="module")
def model_and_export(tmp_path_factory):
    keras.utils.set_random_seed(3)
    model, _ = layer_cases.functional_model(MODEL_DRIVERS)
    rng = np.random.default_rng(1)
    ordinary = [dict(zip(NAMES, layer_cases.data(rng, *shape))) for shape in ((2, 3, 4), (1, 2, 9))]
    model(ordinary[0])
    directory = tmp_path_factory.mktemp("empty") / "export"
    # export_model verifies both artifacts against Keras on these batches:
    # the export parity of every row, on ordinary batches and empty ones.
    samples = ordinary + [dict(zip(NAMES, _inputs(case))) for case in ("batch_0", "memory_0", "all_masked")]
    report = export_model(model, directory, sample_inputs=samples, atol=1e-5)
    assert report.ok
    return model, directory


def _split(outputs):
    results = {}
    for key, value in outputs.items():
        driver_id, name = key.split("__")
        results.setdefault(driver_id, {})[name] = value
    return results


@pytest.mark.parametrize("case", ["batch_0", "memory_0", "all_masked"])
def test_in_predict_and_exported(model_and_export, case):
    model, directory = model_and_export
    inputs = _inputs(case)
    feed = dict(zip(NAMES, inputs))
    predicted = _split(model.predict_on_batch(feed))
    session = onnxruntime.InferenceSession(str(directory / "model.onnx"), providers=["CPUExecutionProvider"])
    from_onnx = _split(dict(zip([o.name for o in session.get_outputs()], session.run(None, feed))))
    restored = tf.saved_model.load(str(directory / "saved_model"))
    served = restored.signatures["serving_default"](**{k: tf.constant(v) for k, v in feed.items()})
    from_saved_model = _split({k: np.asarray(v) for k, v in served.items()})
    for driver in MODEL_DRIVERS:
        for results in (predicted, from_onnx, from_saved_model):
            _check(driver, results[driver.id], *inputs[2:])
        for name, want in predicted[driver.id].items():
            np.testing.assert_allclose(from_onnx[driver.id][name], want, atol=1e-5, err_msg=f"{driver.id} {name} onnx")
            np.testing.assert_allclose(
                from_saved_model[driver.id][name], want, atol=1e-5, err_msg=f"{driver.id} {name} saved_model"
            )
