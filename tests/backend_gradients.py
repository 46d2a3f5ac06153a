"""Gradients on whichever Keras backend the tests run under (TensorFlow,
JAX or PyTorch), for tests that must not depend on `tf.GradientTape`."""

import keras
import numpy as np


def gradients(fn, arrays):
    """The gradients of the scalar `fn(*tensors)` in each of `arrays`, as
    NumPy arrays, computed by the active backend's autodiff."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        tensors = [tf.constant(a) for a in arrays]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            value = fn(*tensors)
        return [keras.ops.convert_to_numpy(g) for g in tape.gradient(value, tensors)]
    if backend == "jax":
        import jax

        grads = jax.grad(fn, argnums=tuple(range(len(arrays))))(*[jax.numpy.asarray(a) for a in arrays])
        return [np.asarray(g) for g in grads]
    if backend == "torch":
        import torch

        tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
        fn(*tensors).backward()
        return [t.grad.detach().cpu().numpy() for t in tensors]
    raise NotImplementedError(f"no gradient helper for the {backend!r} backend")
