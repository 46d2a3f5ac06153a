"""Finite-difference checks of analytic gradients, for float64 layers, on
any Keras backend."""

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


def assert_input_gradients_match(loss_fn, arrays, analytic_grads, indices=None, names=None, rtol=1e-5, atol=1e-7):
    """Compare `analytic_grads[i]` with the numeric gradient of
    `loss_fn(*tensors)` in `arrays[i]`, for each `i` in `indices` (default: all)."""
    for i in range(len(arrays)) if indices is None else indices:

        def f(x, i=i):
            args = [keras.ops.convert_to_tensor(a) for a in arrays]
            args[i] = keras.ops.convert_to_tensor(x)
            return float(loss_fn(*args))

        err_msg = "" if names is None else names[i]
        np.testing.assert_allclose(
            analytic_grads[i], numeric_gradient(f, arrays[i]), rtol=rtol, atol=atol, err_msg=err_msg
        )


def assert_weight_gradients_match(
    layer, loss_fn, analytic_grads, rtol=1e-5, atol=1e-7, min_effect=None, max_entries=None, eps=1e-6
):
    """Compare `analytic_grads` (in `layer.trainable_weights` order) with the
    numeric gradients of the zero-argument `loss_fn()` in each weight.

    With `min_effect`, each weight must also move the loss by more than that:
    a weight the loss ignores would pass with two zero gradients.

    With `max_entries`, a weight of more entries is checked on that many
    entries drawn at random and along four random directions (the
    directional derivative, which a wrong gradient in any entry shifts with
    probability one), instead of entry by entry: two loss evaluations per
    entry made the Transformer stacks' rows take minutes.
    """
    rng = np.random.default_rng(0)
    for variable, grad in zip(layer.trainable_weights, analytic_grads):
        original = variable.numpy()

        def f(x, variable=variable):
            variable.assign(x)
            return float(loss_fn())

        # An embedding's gradient may be sparse (IndexedSlices): compare it dense.
        grad = keras.ops.convert_to_numpy(grad)
        if max_entries is None or original.size <= max_entries:
            numeric = numeric_gradient(f, original, eps)
            analytic = grad
        else:
            entries = rng.choice(original.size, max_entries, replace=False)
            directions = [np.eye(1, original.size, k).reshape(original.shape) for k in entries]
            directions += [unit / np.linalg.norm(unit) for unit in rng.normal(size=(4, *original.shape))]
            numeric = np.array([(f(original + eps * d) - f(original - eps * d)) / (2 * eps) for d in directions])
            analytic = np.array([np.sum(grad * d) for d in directions])
        variable.assign(original)
        if min_effect is not None:
            assert np.abs(numeric).max() > min_effect, f"{variable.path} has no effect: the check is void"
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol, err_msg=variable.path)
