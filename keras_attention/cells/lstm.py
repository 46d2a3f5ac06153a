"""The attention LSTM decoder cell: the LSTM analogue of the attention GRU cell."""

import keras
from keras import ops

from keras_attention.cells.gated import GatedAttentionCell

__all__ = ["AttentionLSTMCell"]


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionLSTMCell(GatedAttentionCell):
    """LSTM decoder cell whose gates all read an attention context.

    At each step, with input `x`, hidden state `h = h_{t-1}` and cell state
    `m = m_{t-1}`:

        c = sum_s alpha_s v_s,   alpha = softmax_s(a(h, k_s))   (context from h_{t-1})
        i = sigmoid(W_xi x + W_hi h + W_ci c + b_i)
        f = sigmoid(W_xf x + W_hf h + W_cf c + b_f)
        g = tanh   (W_xg x + W_hg h + W_cg c + b_g)
        o = sigmoid(W_xo x + W_ho h + W_co c + b_o)
        m_t = f * m + i * g,    h_t = o * tanh(m_t)

    The forget-gate bias starts at 1 (Jozefowicz et al. 2015), as Keras's
    `LSTMCell(unit_forget_bias=True)`. The output is `[h_t ; c]`.

    Paper: the attention is Bahdanau et al. 2014 (arXiv:1409.0473) applied to
    an LSTM decoder (Hochreiter & Schmidhuber 1997), as in Luong et al. 2015
    (arXiv:1508.04025) with the context fed to all gates.

    Weights (gates ordered `[i, f, g, o]`): input_kernel `(dx, 4u)`,
    recurrent_kernel `(u, 4u)`, context_kernel `(dv, 4u)`, bias `(4u,)`;
    then those of the attention.

    Shapes: inputs `(B, dx)` per step, states `[(B, u), (B, u)]` (`h`, `m`),
    memory `(B, Ts, dv)`; output `(B, u + dv)`.

    Args:
        units: the state size `u`.
        attention: a score layer, queried with `h_{t-1}`.
        kernel_initializer: for the kernels.
        kernel_regularizer: for the kernels.

    Example:

    ```python
    cell = keras_attention.AttentionLSTMCell(16, keras_attention.GeneralAttention())
    decoder = keras_attention.AttentionDecoder(cell)
    outputs = decoder(np.random.rand(2, 4, 5).astype("float32"),
                      np.random.rand(2, 7, 6).astype("float32"))
    # outputs: (2, 4, 16 + 6)
    ```
    """

    gate_count = 4

    @property
    def recurrent_state_size(self):
        return [self.units, self.units]

    def bias_initializer(self):
        units = self.units

        def forget_bias_one(shape, dtype=None):
            # In the variable's dtype: float64 layers have float64 weights.
            return ops.concatenate(
                [ops.zeros((units,), dtype), ops.ones((units,), dtype), ops.zeros((2 * units,), dtype)]
            )

        return forget_bias_one

    def cell_step(self, inputs, states, attend, training=None):
        hidden, cell_state = (ops.cast(s, self.compute_dtype) for s in states)
        context, alignment = attend(hidden)
        gates = (
            ops.matmul(ops.cast(inputs, self.compute_dtype), self.input_kernel)
            + ops.matmul(hidden, self.recurrent_kernel)
            + ops.matmul(context, self.context_kernel)
            + self.bias
        )
        units = self.units
        input_gate = ops.sigmoid(gates[:, :units])
        forget_gate = ops.sigmoid(gates[:, units : 2 * units])
        candidate = ops.tanh(gates[:, 2 * units : 3 * units])
        output_gate = ops.sigmoid(gates[:, 3 * units :])
        cell_state = forget_gate * cell_state + input_gate * candidate
        hidden = output_gate * ops.tanh(cell_state)
        return ops.concatenate([hidden, context], axis=-1), [hidden, cell_state], alignment
