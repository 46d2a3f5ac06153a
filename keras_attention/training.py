"""Training helpers: what a `model.fit` on the library's models should do first.

On TensorFlow, Keras defers creating the optimizer's variables (Adam's
moments, the iteration count, an EMA copy) to the first trace of the train
step. A `tf.function` whose first trace creates variables is traced a second
time, without them, so every first `fit`, `train_on_batch` or epoch paid for
two traces of the whole forward and backward pass: for a decoder's step that
is most of the first epoch's time on a CPU. `build_optimizer` creates them
beforehand, as Keras itself does on JAX and PyTorch.
"""

__all__ = ["build_optimizer"]


def build_optimizer(model):
    """Create a compiled model's optimizer variables now; returns `model`.

    Call it after `model.compile(...)` (inside the same distribution scope,
    if any) and before training. The variables are the ones the first step
    would have created (same names, shapes and initial values), so training
    is unchanged; only the second trace of the first step goes. A model
    whose optimizer is built already (a second call, a restored model) is
    left as it is.

    Measured on the 2-core CPU machine (TensorFlow): an attention LSTM
    decoder's first one-epoch `fit` of two batches took 3.4-3.9 s of CPU,
    1.9-2.1 s with the optimizer built first; the 33 XLA fits of the test
    suite's layer harness 147 s, 105 s.

    Args:
        model: a `keras.Model` after `compile`, built (a functional model is
            built when it is made; a subclassed one after its first call or
            `build`).

    Returns:
        The same model.

    Raises:
        ValueError: the model is not compiled with an optimizer, or is not
            built (its variables are not known yet).

    Example:

    ```python
    inputs = keras.Input((3,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    model.compile(keras.optimizers.Adam(1e-3), "mse")
    keras_attention.training.build_optimizer(model)
    assert model.optimizer.built
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), epochs=1, verbose=0)
    ```
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError(
            f"build_optimizer(model): `model` ({type(model).__name__} {model.name!r}) has no optimizer; "
            "expected a model after `model.compile(optimizer=...)`"
        )
    if optimizer.built:
        return model
    if not model.built:
        raise ValueError(
            f"build_optimizer(model): `model` ({type(model).__name__} {model.name!r}) is not built, so its "
            "variables are not known yet; expected a functional model, or a model after its first call or "
            "`model.build(input_shape)`"
        )
    optimizer.build(model.trainable_variables)
    return model
