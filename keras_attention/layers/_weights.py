"""Initializer and regularizer settings shared by the layers that own kernels."""

import keras

__all__ = ["KernelSettings"]


class KernelSettings:
    """Mixin: `kernel_initializer` / `kernel_regularizer` handling and config."""

    def _set_kernel_settings(self, kernel_initializer, kernel_regularizer):
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)

    def _add_kernel(self, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )

    def _kernel_settings_config(self):
        return {
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
        }
