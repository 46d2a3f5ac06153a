import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts from float32 and a fresh Keras session."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    keras.backend.clear_session()
