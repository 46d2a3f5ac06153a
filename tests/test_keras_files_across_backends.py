"""A `.keras` file saved on one Keras backend loads and predicts the same on
every other. The files were saved on TensorFlow, JAX and PyTorch by
tests/fixtures/backends/make_fixtures.py (weights from a NumPy generator,
outputs recorded on the saving backend); this module runs on each backend
(`make test`, `make test-jax`, `make test-torch`)."""

from pathlib import Path

import keras
import numpy as np
import pytest

from tests.fixtures.backends.models import MODELS, outputs

pytestmark = pytest.mark.any_backend

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "backends"
SAVED_ON = ("tensorflow", "jax", "torch")


@pytest.mark.parametrize("model", sorted(MODELS))
@pytest.mark.parametrize("saved_on", SAVED_ON)
def test_a_file_saved_on_any_backend_predicts_what_it_predicted_there(saved_on, model):
    loaded = keras.saving.load_model(FIXTURES / f"{saved_on}_{model}.keras")
    data = dict(np.load(FIXTURES / "inputs.npz"))
    want = dict(np.load(FIXTURES / f"{saved_on}_{model}.npz"))
    got = outputs(loaded, data)
    assert set(got) == set(want)
    for name, value in want.items():
        if np.issubdtype(value.dtype, np.integer):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5, err_msg=name)


def test_the_backends_recorded_the_same_outputs():
    # The same weights give the same numbers on every backend: the fixtures
    # agree with each other, not only each with itself.
    for model in MODELS:
        recorded = [dict(np.load(FIXTURES / f"{backend}_{model}.npz")) for backend in SAVED_ON]
        for other in recorded[1:]:
            for name, value in recorded[0].items():
                np.testing.assert_allclose(other[name], value, rtol=1e-4, atol=1e-5, err_msg=f"{model}/{name}")
