"""Empty inputs: a batch of 0, a memory of length 0, no queries, every
position masked. Every layer returns its documented zero context (zero
weights, zero output rows) eagerly; test_empty_inputs_exported.py runs the
same cases in a compiled predict and in the exported models."""

import numpy as np
import pytest

from tests import layer_cases
from tests.layer_cases import check_results, driver_params

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
