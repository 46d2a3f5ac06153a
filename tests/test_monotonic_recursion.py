"""Recursive monotonic attention differentiates on every backend (JAX
differentiates a loop in reverse only with static bounds: the recursion
runs as a `fori_loop` there). Backend-neutral: runs as it is under
KERAS_BACKEND=jax or torch."""

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.layers.monotonic import monotonic_alignment
from tests.backend_gradients import gradients

pytestmark = pytest.mark.any_backend


def recursion(p, previous):
    """The recursion in NumPy: q_j = (1 - p_{j-1}) q_{j-1} + a_prev_j, a_j = p_j q_j."""
    q = np.zeros(p.shape[:-1])
    alignment = np.zeros_like(p)
    for j in range(p.shape[-1]):
        q = (1.0 - p[..., j - 1]) * q + previous[..., j] if j else previous[..., 0]
        alignment[..., j] = p[..., j] * q
    return alignment


def test_recursive_alignment_and_its_gradient_match_numpy_and_finite_differences():
    rng = np.random.default_rng(0)
    p = rng.uniform(0.05, 0.95, size=(2, 6))
    previous = rng.dirichlet(np.ones(6), size=2)
    weights = rng.normal(size=(2, 6))
    got = keras.ops.convert_to_numpy(monotonic_alignment(p.astype("float32"), previous.astype("float32"), "recursive"))
    np.testing.assert_allclose(got, recursion(p, previous), rtol=1e-5, atol=1e-7)

    (analytic_p, analytic_previous) = gradients(
        lambda p, previous: keras.ops.sum(
            monotonic_alignment(p, previous, "recursive") * keras.ops.convert_to_tensor(weights, "float32")
        ),
        [p.astype("float32"), previous.astype("float32")],
    )
    for analytic, which in ((analytic_p, 0), (analytic_previous, 1)):
        numeric = np.zeros_like(p)
        for index in np.ndindex(p.shape):
            step = np.zeros_like(p)
            step[index] = 1e-6
            arguments = [[p, previous][k] + (step if k == which else 0.0) for k in (0, 1)]
            minus = [[p, previous][k] - (step if k == which else 0.0) for k in (0, 1)]
            numeric[index] = ((recursion(*arguments) - recursion(*minus)) * weights).sum() / 2e-6
        np.testing.assert_allclose(analytic, numeric, rtol=1e-4, atol=1e-5)


def test_a_decoder_with_recursive_monotonic_attention_takes_a_training_step():
    rng = np.random.default_rng(1)
    keras.utils.set_random_seed(1)
    cell = ka.AttentionGRUCell(8, ka.BahdanauMonotonicAttention(6, mode="recursive"))
    targets = keras.Input((None, 5))
    memory = keras.Input((None, 7))
    outputs = ka.AttentionDecoder(cell)(targets, memory)
    model = keras.Model([targets, memory], keras.layers.Dense(3)(outputs))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    ka.training.build_optimizer(model)
    x = [rng.normal(size=(4, 3, 5)).astype("float32"), rng.normal(size=(4, 6, 7)).astype("float32")]
    y = rng.normal(size=(4, 3, 3)).astype("float32")
    before = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    first = model.train_on_batch(x, y)
    second = model.train_on_batch(x, y)
    assert np.isfinite(first) and second < first  # a step down the gradient lowered the loss
    after = [keras.ops.convert_to_numpy(w) for w in model.trainable_weights]
    unchanged = [w.path for w, a, b in zip(model.trainable_weights, before, after) if np.array_equal(a, b)]
    assert not unchanged, unchanged  # the gradient reached every weight, the attention's included
