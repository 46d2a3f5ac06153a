"""The attention GRU decoder cell of Bahdanau et al. 2014."""

import keras
from keras import ops

from keras_attention.cells.gated import GatedAttentionCell

__all__ = ["AttentionGRUCell"]


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionGRUCell(GatedAttentionCell):
    """GRU decoder cell whose gates also read an attention context.

    At step `t'`, with input `y = y_{t'-1}` and state `s = s_{t'-1}`:

        c  = sum_t alpha_t h_t,  alpha = softmax_t(a(s, h_t))   (context from s_{t'-1})
        r  = sigmoid(W_yr y + W_sr s + W_cr c + b_r)
        z  = sigmoid(W_yz y + W_sz s + W_cz c + b_z)
        s~ = tanh   (W_ys y + W_ss (r * s) + W_cs c + b_s)
        s_{t'} = z * s + (1 - z) * s~

    The reset gate multiplies the state *before* its matrix product, as in
    the source equations. `a` is any score layer of this library (additive
    for Bahdanau's model). The cell's output is `[s_{t'} ; c]`, the two terms
    Bahdanau et al.'s read-out combines with `y_{t'-1}`.

    Paper: Bahdanau, Cho & Bengio 2014, "Neural Machine Translation by Jointly
    Learning to Align and Translate", arXiv:1409.0473 (appendix A.2).

    Weights (Keras layout, gates ordered `[r, z, s~]`): input_kernel
    `(dy, 3u)`, recurrent_kernel `(u, 3u)`, context_kernel `(dv, 3u)`,
    bias `(3u,)`; then those of the attention.

    Shapes: inputs `(B, dy)` per step, states `[(B, u)]`, memory
    `(B, Ts, dv)`; output `(B, u + dv)`. Use it through `AttentionDecoder`
    (teacher forcing and in-graph decoding), or call
    `step(inputs, states, cell.prepare_memory(memory, mask))` in a loop.

    Args:
        units: the state size `u`.
        attention: a score layer (e.g. `AdditiveAttention(units=64)`); it is
            queried with `s_{t'-1}`.
        kernel_initializer: for the kernels.
        kernel_regularizer: for the kernels.

    Example:

    ```python
    cell = keras_attention.AttentionGRUCell(16, keras_attention.AdditiveAttention(8))
    decoder = keras_attention.AttentionDecoder(cell, return_alignments=True)
    targets = np.random.rand(2, 4, 5).astype("float32")     # (B, Tt, dy)
    memory = np.random.rand(2, 7, 6).astype("float32")      # (B, Ts, dv)
    outputs, alignments = decoder(targets, memory)
    # outputs: (2, 4, 16 + 6), alignments: (2, 4, 7)
    ```
    """

    gate_count = 3

    @property
    def recurrent_state_size(self):
        return [self.units]

    def cell_step(self, inputs, states, attend, training=None):
        previous = ops.cast(states[0], self.compute_dtype)
        context, alignment = attend(previous)
        units = self.units
        from_inputs = (
            ops.matmul(ops.cast(inputs, self.compute_dtype), self.input_kernel)
            + ops.matmul(context, self.context_kernel)
            + self.bias
        )
        recurrent = ops.convert_to_tensor(self.recurrent_kernel)
        gates = from_inputs[:, : 2 * units] + ops.matmul(previous, recurrent[:, : 2 * units])
        reset = ops.sigmoid(gates[:, :units])
        update = ops.sigmoid(gates[:, units:])
        candidate = ops.tanh(from_inputs[:, 2 * units :] + ops.matmul(reset * previous, recurrent[:, 2 * units :]))
        state = update * previous + (1.0 - update) * candidate
        return ops.concatenate([state, context], axis=-1), [state], alignment
