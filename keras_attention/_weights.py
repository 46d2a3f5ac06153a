"""Initializer and regularizer settings shared by the layers that own weights."""

import keras

__all__ = ["WeightSettings"]

# `None` is a valid bias initializer (Keras then picks its default), so a
# layer without biases is told apart by this marker instead.
_NO_BIAS = object()


class WeightSettings:
    """Mixin: `kernel_*` (and, for layers with biases, `bias_*`) initializer and
    regularizer handling, weight creation and config."""

    def _set_weight_settings(
        self,
        kernel_initializer,
        kernel_regularizer,
        bias_initializer=_NO_BIAS,
        bias_regularizer=None,
    ):
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self._weight_kinds = ("kernel",)
        if bias_initializer is not _NO_BIAS:
            self.bias_initializer = keras.initializers.get(bias_initializer)
            self.bias_regularizer = keras.regularizers.get(bias_regularizer)
            self._weight_kinds = ("kernel", "bias")

    def _add_weight_of(self, kind, name, shape):
        return self.add_weight(
            name=name,
            shape=shape,
            initializer=getattr(self, f"{kind}_initializer"),
            regularizer=getattr(self, f"{kind}_regularizer"),
        )

    def _add_kernel(self, name, shape):
        return self._add_weight_of("kernel", name, shape)

    def _add_bias(self, name, shape):
        return self._add_weight_of("bias", name, shape)

    def _weight_settings_config(self):
        config = {}
        for kind in self._weight_kinds:
            config[f"{kind}_initializer"] = keras.initializers.serialize(getattr(self, f"{kind}_initializer"))
            config[f"{kind}_regularizer"] = keras.regularizers.serialize(getattr(self, f"{kind}_regularizer"))
        return config
