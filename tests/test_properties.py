"""Property-based: every public layer, driven with random shapes (0 and 1
included), random masks (fully masked rows included), random values and
random dtype policies, either refuses the call with a ValueError naming an
argument or returns finite outputs whose attention weights are zero on
masked positions and sum to one (or zero) over each row."""

import re

import hypothesis.extra.numpy as hnp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.layer_cases import DRIVERS, D, check_results, driver_params

POLICIES = ["float32", "mixed_float16", "mixed_bfloat16", "float64"]
# Keras's own layers cannot run these inputs (see test_empty_inputs):
# its RNN layer needs one target step, its LSTM cell a non-empty batch.
TEACHER_FORCED = tuple(d for d in DRIVERS if d.startswith("decoder"))


def _keras_cannot(driver_id, batch, query_length, value_length):
    if driver_id in TEACHER_FORCED and query_length == 0:
        return True
    return driver_id == "pointer_network" and (batch == 0 or value_length == 0)


@st.composite
def calls(draw):
    batch = draw(st.sampled_from([0, 1, 2, 3]))
    query_length = draw(st.sampled_from([0, 1, 2, 4]))
    value_length = draw(st.sampled_from([0, 1, 2, 5]))
    policy = draw(st.sampled_from(POLICIES))
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0, 300.0]))
    values = st.floats(-1.0, 1.0, width=32)
    query = draw(hnp.arrays("float32", (batch, query_length, D), elements=values)) * scale
    value = draw(hnp.arrays("float32", (batch, value_length, D), elements=values)) * scale
    query_valid = draw(hnp.arrays(bool, (batch, query_length)))
    value_valid = draw(hnp.arrays(bool, (batch, value_length)))
    if batch and draw(st.booleans()):  # one example with every position masked
        row = draw(st.integers(0, batch - 1))
        value_valid[row] = False
    return policy, (query.astype("float32"), value.astype("float32"), query_valid, value_valid)


# A ValueError must name the argument at fault, in backquotes.
NAMES_AN_ARGUMENT = re.compile(r"`\w+(\[\d+\])?`")


# Ten examples per layer keep the whole test near a minute on two cores.
@driver_params()
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(call=calls())
def test_every_layer_on_random_inputs(driver, call):
    policy, inputs = call
    driver_id = driver.id
    query, value, query_valid, value_valid = inputs
    if _keras_cannot(driver_id, query.shape[0], query.shape[1], value.shape[1]):
        return
    layer = driver.make(dtype=policy)
    try:
        results = driver.run(layer, *inputs)
    except ValueError as error:
        assert NAMES_AN_ARGUMENT.search(str(error)), f"{driver_id}: a ValueError that names no argument: {error}"
        return
    low = policy in ("mixed_float16", "mixed_bfloat16")
    check_results(driver, results, query_valid, value_valid, atol=2e-2 if low else 1e-5, label=f" under {policy}")
