"""What the attention GRU and LSTM cells share: units, gate kernels, output and config."""

from keras_attention import _checks
from keras_attention._weights import WeightSettings
from keras_attention.cells.base import AttentionCell

__all__ = ["GatedAttentionCell"]


class GatedAttentionCell(WeightSettings, AttentionCell):
    """An attention cell whose `gate_count` gates read the input, the state and the context.

    Weights: input_kernel `(dx, G u)`, recurrent_kernel `(u, G u)`,
    context_kernel `(dv, G u)`, bias `(G u,)`; the output is `[h_t ; c_t]`.
    Subclasses set `gate_count`, `recurrent_state_size` and `cell_step`, and may
    override `bias_initializer`.
    """

    gate_count = None

    def __init__(self, units, attention, kernel_initializer="glorot_uniform", kernel_regularizer=None, **kwargs):
        # Checked before the attention is claimed for this cell.
        units = _checks.check_positive_int(self, "units", units)
        super().__init__(attention, **kwargs)
        self.units = units
        self._set_weight_settings(kernel_initializer, kernel_regularizer)

    @property
    def output_size(self):
        return self.units + self.memory_dim

    def bias_initializer(self):
        return "zeros"

    def build_cell(self, input_dim, memory_dim):
        gates = self.gate_count * self.units
        self.input_kernel = self._add_kernel("input_kernel", (input_dim, gates))
        self.recurrent_kernel = self._add_kernel("recurrent_kernel", (self.units, gates))
        self.context_kernel = self._add_kernel("context_kernel", (memory_dim, gates))
        self.bias = self.add_weight(name="bias", shape=(gates,), initializer=self.bias_initializer())
        self.build_attention(self.units)

    def get_config(self):
        config = super().get_config()
        config.update({"units": self.units, **self._weight_settings_config()})
        return config
