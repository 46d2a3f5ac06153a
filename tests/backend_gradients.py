"""Gradients on whichever Keras backend the tests run under (TensorFlow,
JAX or PyTorch), for tests that must not depend on `tf.GradientTape`."""

import keras
import numpy as np


def _to_numpy(gradient):
    # None where the value does not depend on a variable (TensorFlow,
    # PyTorch); an embedding's sparse gradient (IndexedSlices) comes dense.
    return None if gradient is None else keras.ops.convert_to_numpy(gradient)


def value_and_gradients(fn, arrays, variables=()):
    """The scalar `fn(*tensors)` and its gradients in each of `arrays`, then
    in each of `variables` (Keras variables `fn` reads, such as a layer's
    `trainable_weights`), all as NumPy arrays, computed by the active
    backend's autodiff. A variable's gradient is None where the backend
    says the value does not depend on it (TensorFlow, PyTorch; JAX gives
    zeros)."""
    backend = keras.backend.backend()
    variables = list(variables)
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = fn(*tensors)
        grads = tape.gradient(value, tensors + [v.value for v in variables])
        return keras.ops.convert_to_numpy(value), [_to_numpy(g) for g in grads]
    if backend == "jax":
        import jax

        def stateless_fn(values, *tensors):
            # The variables read their values from `values` (what jax.grad
            # differentiates), and anything `fn` assigns (a dropout's seed,
            # a layer's losses) stays in the scope instead of leaking tracers.
            mapping = list(zip(variables, values))
            with keras.StatelessScope(state_mapping=mapping, collect_losses=True):
                return fn(*tensors)

        argnums = tuple(range(len(arrays) + 1))
        value, grads = jax.value_and_grad(stateless_fn, argnums=argnums)(
            [v.value for v in variables], *[jax.numpy.asarray(a) for a in arrays]
        )
        return np.asarray(value), [np.asarray(g) for g in grads[1:]] + [np.asarray(g) for g in grads[0]]
    if backend == "torch":
        import torch

        for variable in variables:
            variable.value.grad = None
        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        value = fn(*tensors)
        value.backward()
        grads = [t.grad for t in tensors] + [v.value.grad for v in variables]
        for variable in variables:
            variable.value.grad = None
        return keras.ops.convert_to_numpy(value), [_to_numpy(g) for g in grads]
    raise NotImplementedError(f"no gradient helper for the {backend!r} backend")


def gradients(fn, arrays, variables=()):
    """The gradients of the scalar `fn(*tensors)` in each of `arrays`, then
    in each of `variables`, as NumPy arrays (see `value_and_gradients`)."""
    return value_and_gradients(fn, arrays, variables)[1]
