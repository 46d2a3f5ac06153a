"""keras_attention.training.build_optimizer: the first step traced once, training unchanged."""

import keras
import numpy as np
import pytest

import keras_attention as ka

pytestmark = pytest.mark.any_backend


class TraceCounter(keras.layers.Layer):
    """The identity, counting the calls that run its Python: one per trace
    in a compiled step (and one per step where a backend runs eagerly)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.calls = 0

    def call(self, inputs):
        self.calls += 1
        return inputs


def _model():
    keras.backend.clear_session()  # the same layer and variable names in each model
    keras.utils.set_random_seed(5)
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(11, 6, mask_zero=True)(source)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    decoded = ka.AttentionDecoder(cell)(keras.layers.Embedding(11, 6)(target), memory)
    counter = TraceCounter()
    model = keras.Model([source, target], keras.layers.Dense(11)(counter(decoded)))
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, counter


def _data():
    rng = np.random.default_rng(0)
    source, target = rng.integers(1, 11, (8, 5)), rng.integers(1, 11, (8, 4))
    return [source, target], target


def _fit(build_first):
    model, counter = _model()
    if build_first:
        assert ka.training.build_optimizer(model) is model
    symbolic = counter.calls
    model.fit(*_data(), batch_size=4, epochs=2, shuffle=False, verbose=0)
    return model, counter.calls - symbolic


def test_the_first_step_is_traced_once_and_training_is_the_same():
    deferred, deferred_traces = _fit(build_first=False)
    built, built_traces = _fit(build_first=True)
    # The same variables as Keras creates itself (names, shapes), and the
    # same training: equal weights and moments after 4 steps.
    assert [(v.path, v.shape) for v in built.optimizer.variables] == [
        (v.path, v.shape) for v in deferred.optimizer.variables
    ]
    for ours, keras_own in zip(
        built.optimizer.variables + built.weights, deferred.optimizer.variables + deferred.weights
    ):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(ours), keras.ops.convert_to_numpy(keras_own), atol=1e-6)
    assert int(built.optimizer.iterations) == 4
    if keras.backend.backend() == "tensorflow":
        # Keras creates the variables in the first trace, and tf.function traces again.
        assert (deferred_traces, built_traces) == (2, 1)
    else:  # Keras builds the optimizer before the first step itself: nothing changes
        assert deferred_traces == built_traces


def test_a_second_call_leaves_the_variables_as_they_are():
    model, _ = _model()
    ka.training.build_optimizer(model)
    variables = list(model.optimizer.variables)
    ka.training.build_optimizer(model)
    assert list(model.optimizer.variables) == variables


def test_a_model_without_an_optimizer_or_unbuilt_is_refused():
    inputs = keras.Input((3,))
    plain = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="plain")
    with pytest.raises(ValueError, match=r"`model` \(Functional 'plain'\) has no optimizer.*model.compile"):
        ka.training.build_optimizer(plain)

    class Unbuilt(keras.Model):
        def __init__(self):
            super().__init__(name="unbuilt")
            self.dense = keras.layers.Dense(2)

        def call(self, inputs):
            return self.dense(inputs)

    unbuilt = Unbuilt()
    unbuilt.compile("adam", "mse")
    with pytest.raises(ValueError, match=r"`model` \(Unbuilt 'unbuilt'\) is not built.*model.build"):
        ka.training.build_optimizer(unbuilt)
    assert not unbuilt.optimizer.built
