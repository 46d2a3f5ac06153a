"""Finite-difference checks of analytic gradients, for float64 layers, on
any Keras backend.

An array of at most `max_entries` entries is checked entry by entry. A larger
one is checked along `directions` random unit directions: the directional
derivative `(f(x + eps d) - f(x - eps d)) / 2 eps` against `sum(grad * d)`.
An error `e` in the analytic gradient shifts that by `e . d`, which is
nonzero with probability one, whichever entries `e` sits in; two loss
evaluations per entry made the Transformer stacks' rows take minutes.
"""

import functools

import keras
import numpy as np


def numeric_gradient(f, x, eps=1e-6):
    """Central differences of the scalar function `f` at the array `x`."""
    grad = np.zeros_like(x)
    for index in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[index] = eps
        grad[index] = (f(x + step) - f(x - step)) / (2 * eps)
    return grad


@functools.lru_cache(maxsize=16)
def _compiled(fn):
    """`fn` as one graph on TensorFlow (where the float64 checks run): an
    eager call of a Transformer stack costs a second, its graph
    milliseconds, and a check makes hundreds of calls. Variables are read
    at each call, so an assigned value is seen."""
    if keras.backend.backend() != "tensorflow":
        return fn
    import tensorflow as tf

    return tf.function(fn, reduce_retracing=True)


def _analytic_and_numeric(f, x, grad, eps, max_entries, directions, rng):
    """(analytic, numeric) derivatives of `f` at `x`: every entry, or along
    random directions for an array of more than `max_entries` entries."""
    if max_entries is None or x.size <= max_entries:
        return grad, numeric_gradient(f, x, eps)
    units = [unit / np.linalg.norm(unit) for unit in rng.normal(size=(directions, *x.shape))]
    numeric = np.array([(f(x + eps * d) - f(x - eps * d)) / (2 * eps) for d in units])
    return np.array([np.sum(grad * d) for d in units]), numeric


def assert_input_gradients_match(
    loss_fn, arrays, analytic_grads, indices=None, names=None, rtol=1e-5, atol=1e-7, max_entries=None, directions=3
):
    """Compare `analytic_grads[i]` with the numeric gradient of
    `loss_fn(*tensors)` in `arrays[i]`, for each `i` in `indices` (default: all)."""
    rng = np.random.default_rng(1)
    loss_fn = _compiled(loss_fn)
    for i in range(len(arrays)) if indices is None else indices:

        def f(x, i=i):
            args = [keras.ops.convert_to_tensor(a) for a in arrays]
            args[i] = keras.ops.convert_to_tensor(x)
            return float(loss_fn(*args))

        grad = keras.ops.convert_to_numpy(analytic_grads[i])
        analytic, numeric = _analytic_and_numeric(f, arrays[i], grad, 1e-6, max_entries, directions, rng)
        err_msg = "" if names is None else names[i]
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol, err_msg=err_msg)


def assert_weight_gradients_match(
    layer, loss_fn, analytic_grads, rtol=1e-5, atol=1e-7, min_effect=None, max_entries=None, directions=3, eps=1e-6
):
    """Compare `analytic_grads` (in `layer.trainable_weights` order) with the
    numeric gradients of the zero-argument `loss_fn()` in each weight.

    With `min_effect`, each weight must also move the loss by more than that:
    a weight the loss ignores would pass with two zero gradients.
    """
    rng = np.random.default_rng(0)
    loss_fn = _compiled(loss_fn)
    for variable, grad in zip(layer.trainable_weights, analytic_grads):
        original = variable.numpy()

        def f(x, variable=variable):
            variable.assign(x)
            return float(loss_fn())

        # An embedding's gradient may be sparse (IndexedSlices): compare it dense.
        grad = keras.ops.convert_to_numpy(grad)
        analytic, numeric = _analytic_and_numeric(f, original, grad, eps, max_entries, directions, rng)
        variable.assign(original)
        if min_effect is not None:
            assert np.abs(numeric).max() > min_effect, f"{variable.path} has no effect: the check is void"
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol, err_msg=variable.path)
