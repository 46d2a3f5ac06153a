"""`AttentionWrapper`: add attention to any Keras RNN cell (tfa.seq2seq's design)."""

import inspect

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._reductions import max_along
from keras_attention._weights import WeightSettings
from keras_attention.cells.base import AttentionCell

__all__ = ["AttentionWrapper"]


def _state_structure(cell):
    """The nest of ints that `cell.call` expects its states in."""
    size = cell.state_size
    return [size] if isinstance(size, int) else list(size)


def _output_size(cell):
    # Keras cells without an `output_size` output their first state.
    return int(getattr(cell, "output_size", None) or keras.tree.flatten(_state_structure(cell))[0])


def _draw_dropout_masks(cell, step_input, state):
    """What `keras.layers.RNN` does before its loop for the cell it runs:
    a Keras dropout cell (`get_dropout_mask`) draws and caches its masks,
    and `StackedRNNCells` has each of its cells draw theirs."""
    if hasattr(cell, "get_dropout_mask"):
        cell.get_dropout_mask(step_input)
        cell.get_recurrent_dropout_mask(state[0] if isinstance(state, (list, tuple)) else state)
    if isinstance(cell, keras.layers.StackedRNNCells):
        batch = ops.shape(step_input)[0]
        for inner, inner_state in zip(cell.cells, state):
            _draw_dropout_masks(inner, step_input, inner_state)
            step_input = ops.zeros((batch, _output_size(inner)), step_input.dtype)


def _reset_dropout_masks(cell):
    if hasattr(cell, "reset_dropout_mask"):
        cell.reset_dropout_mask()
        cell.reset_recurrent_dropout_mask()
    for inner in getattr(cell, "cells", ()) if isinstance(cell, keras.layers.StackedRNNCells) else ():
        _reset_dropout_masks(inner)


def _last_valid_step(sequence, initial, mask):
    """`sequence (B, T, d)` at each row's last step where `mask (B, T)` is
    True, or `initial (B, d)` for a row with none (the state a loop that
    skips masked steps ends in)."""
    batch, steps = ops.shape(sequence)[0], ops.shape(sequence)[1]
    padded = ops.concatenate([ops.expand_dims(ops.cast(initial, sequence.dtype), 1), sequence], axis=1)
    if mask is None:
        index = ops.full((batch,), steps, dtype="int32")
    else:
        # Positions count from 1, so 0 (no True, or T = 0) picks `initial`.
        positions = ops.arange(1, steps + 1, dtype="int32")
        index = max_along(ops.where(ops.cast(mask, "bool"), positions, 0), axis=1, floor=0)
    index = ops.broadcast_to(ops.reshape(ops.cast(index, "int32"), (-1, 1, 1)), (batch, 1, ops.shape(sequence)[2]))
    return ops.squeeze(ops.take_along_axis(padded, index, axis=1), 1)


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionWrapper(WeightSettings, AttentionCell):
    """Attention around any Keras RNN cell, Luong or Bahdanau style.

    At each step, with input `x`, the wrapped cell's state and the previous
    attention vector `a_{t-1}`:

        h_t, state = cell([x ; a_{t-1}], state)     (input feeding; x alone without)
        c_t = sum_s alpha_s v_s,   alpha = softmax_s(score(h_t, k_s))
        a_t = act(W_c [c_t ; h_t])                   (with attention_layer_size; act = tanh)
        a_t = c_t                                     (without)
        output = a_t (output_attention=True, Luong)  or  h_t (False)

    As in `tfa.seq2seq.AttentionWrapper`, the query is the wrapped cell's
    current output, the attention vector is fed back into the next step's
    input ("input feeding"), and `output_attention=False` outputs the cell
    output instead (the Bahdanau-style variant of that API). The memory's
    keys are projected once per sequence.

    Paper: Luong, Pham & Manning 2015, "Effective Approaches to
    Attention-based Neural Machine Translation", arXiv:1508.04025.

    Weights: attention_kernel `(dv + dh, attention_layer_size)` = `W_c^T`
    (with `attention_layer_size`); those of the wrapped cell and the
    attention.

    Shapes: inputs `(B, dx)` per step; states: the wrapped cell's states
    (flattened) then `a_{t-1}` `(B, attention_layer_size or dv)`; an
    `initial_state` may give the wrapped cell's states alone (`a_0` is then
    zero, as when nothing is given); memory
    `(B, Ts, dv)`; output `(B, attention_layer_size or dv)` or the cell's
    output size.

    Args:
        cell: a Keras RNN cell (`SimpleRNNCell`, `GRUCell`, `LSTMCell`,
            `StackedRNNCells`, ...), unbuilt.
        attention: a score layer of this library (e.g. `GeneralAttention()`
            for Luong's "general", `AdditiveAttention(units)` for Bahdanau's).
        attention_layer_size: size of `a_t`, or None to use the context.
        attention_activation: `act` above: "tanh" (Luong et al.'s, the
            default) or any Keras activation; None for the linear layer that
            `tfa.seq2seq.AttentionWrapper` used by default (to reproduce a
            tfa model's numbers).
        output_attention: output `a_t` (Luong) rather than the cell output.
        input_feeding: concatenate `a_{t-1}` to the cell's input. Without
            it (and with a stateless attention) `AttentionDecoder`
            trains without a per-step attention: one pass of the wrapped
            cell, then one attention call over every step (`run_sequence`).
        kernel_initializer: for `W_c`.
        kernel_regularizer: for `W_c`.

    Example:

    ```python
    cell = keras_attention.AttentionWrapper(
        keras.layers.LSTMCell(16), keras_attention.GeneralAttention(), attention_layer_size=16)
    decoder = keras_attention.AttentionDecoder(cell)
    outputs = decoder(np.random.rand(2, 4, 5).astype("float32"),
                      np.random.rand(2, 7, 6).astype("float32"))
    # outputs: (2, 4, 16), the attention vectors a_t
    ```
    """

    def __init__(
        self,
        cell,
        attention,
        attention_layer_size=None,
        attention_activation="tanh",
        output_attention=True,
        input_feeding=True,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        **kwargs,
    ):
        # Checked before the attention is claimed for this cell.
        cell = _checks.resolve_layer(
            self,
            "cell",
            cell,
            lambda cell: isinstance(cell, keras.layers.Layer) and hasattr(cell, "state_size"),
            "a Keras RNN cell (a Layer with a `state_size`, such as keras.layers.GRUCell(32))",
        )
        attention_layer_size = _checks.check_positive_int(
            self, "attention_layer_size", attention_layer_size, allow_none=True
        )
        super().__init__(attention, **kwargs)
        self.cell = cell
        self.attention_layer_size = attention_layer_size
        try:
            self.attention_activation = keras.activations.get(attention_activation)
        except (ValueError, TypeError) as error:
            raise ValueError(
                f"AttentionWrapper: `attention_activation` must be a Keras activation (a name such as "
                f"'tanh', a callable) or None; got {attention_activation!r}."
            ) from error
        self.output_attention = bool(output_attention)
        self.input_feeding = bool(input_feeding)
        self._set_weight_settings(kernel_initializer, kernel_regularizer)

    @property
    def attention_size(self):
        return self.attention_layer_size or self.memory_dim

    @property
    def recurrent_state_size(self):
        return keras.tree.flatten(_state_structure(self.cell)) + [self.attention_size]

    @property
    def optional_state_count(self):
        # The previous attention vector: a decoder started from the encoder's
        # final states gives the wrapped cell's states alone.
        return 1

    @property
    def output_size(self):
        return self.attention_size if self.output_attention else self._cell_output_size

    def build_cell(self, input_dim, memory_dim):
        cell_input_dim = input_dim + (self.attention_size if self.input_feeding else 0)
        if not self.cell.built:
            self.cell.build((None, cell_input_dim))
        # Decided once here, not at every step.
        self._cell_takes_training = "training" in inspect.signature(self.cell.call).parameters
        self._cell_state_structure = _state_structure(self.cell)
        self._cell_output_size = _output_size(self.cell)
        self.attention_kernel = None
        if self.attention_layer_size:
            self.attention_kernel = self._add_kernel(
                "attention_kernel", (memory_dim + self._cell_output_size, self.attention_layer_size)
            )
        self.build_attention(self._cell_output_size)

    def _cell_inputs(self, inputs, previous_attention):
        inputs = ops.cast(inputs, self.compute_dtype)
        if self.input_feeding:
            inputs = ops.concatenate([inputs, ops.cast(previous_attention, inputs.dtype)], axis=-1)
        return inputs

    def prepare_dropout_masks(self, inputs, states):
        # The recurrent states only: an attention's own state comes after them.
        *cell_states, previous_attention = list(states)[: len(self.recurrent_state_size)]
        structured = keras.tree.pack_sequence_as(self._cell_state_structure, list(cell_states))
        _draw_dropout_masks(self.cell, self._cell_inputs(inputs, previous_attention), structured)

    def reset_dropout_masks(self):
        _reset_dropout_masks(self.cell)

    def cell_step(self, inputs, states, attend, training=None):
        *cell_states, previous_attention = states
        inputs = self._cell_inputs(inputs, previous_attention)
        structured = keras.tree.pack_sequence_as(self._cell_state_structure, cell_states)
        kwargs = {"training": training} if self._cell_takes_training else {}
        cell_output, new_cell_states = self.cell(inputs, structured, **kwargs)
        context, alignment = attend(cell_output)
        attention = self._attention_vector(context, cell_output)
        output = attention if self.output_attention else cell_output
        return output, keras.tree.flatten(new_cell_states) + [attention], alignment

    def _attention_vector(self, context, cell_output):
        """`a = act(W_c [c ; h])`, or the context without `attention_layer_size`
        (one step `(B, .)` or every step `(B, Tt, .)`)."""
        if self.attention_kernel is None:
            return context
        return self.attention_activation(
            ops.matmul(ops.concatenate([context, cell_output], axis=-1), self.attention_kernel)
        )

    # ------------------------------------------------- a whole sequence at once

    @property
    def attends_after_the_recurrence(self):
        """True when no step's input depends on an attention (no input
        feeding, and no attention state such as a monotonic alignment carried
        from step to step): the wrapped cell can then run over the whole target
        first, and the attention of every step be computed in one call
        (`run_sequence`)."""
        return not self.input_feeding and not self.attention.attention_state_size

    def run_sequence(self, inputs, memory, initial_state, mask=None, training=None):
        """Teacher-forced outputs of every step without a per-step attention.

        Computes what a loop over `step` computes (Luong et al. 2015's
        decoder without input feeding): a Keras `RNN` over the wrapped cell
        gives `h_1..h_Tt`, then one attention call scores all of them
        against the memory. Only for `attends_after_the_recurrence`.

        Returns `(outputs (B, Tt, output_size), final_states, alignments
        (B, Tt, Ts))`; like the loop, padded steps (`mask` False) leave the
        states unchanged and repeat the previous output.
        """
        *cell_states, initial_attention = initial_state
        structured = keras.tree.pack_sequence_as(self._cell_state_structure, list(cell_states))
        # A fresh RNN per call, as in AttentionDecoder: it owns no weights.
        rnn = keras.layers.RNN(self.cell, return_sequences=True, return_state=True, dtype=self.dtype_policy)
        cell_outputs, *final_cell_states = rnn(
            ops.cast(inputs, self.compute_dtype), initial_state=structured, mask=mask, training=training
        )
        attention_mask = None if memory.mask is None else ops.expand_dims(memory.mask, 1)
        context, alignments = self.attention.attend(
            self.attention.project_query(cell_outputs), memory.keys, memory.values, attention_mask, training=training
        )
        attention = self._attention_vector(context, cell_outputs)
        outputs = attention if self.output_attention else cell_outputs
        final_attention = _last_valid_step(attention, initial_attention, mask)
        return outputs, keras.tree.flatten(final_cell_states) + [final_attention], alignments

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": keras.saving.serialize_keras_object(self.cell),
                "attention_layer_size": self.attention_layer_size,
                "attention_activation": keras.activations.serialize(self.attention_activation),
                "output_attention": self.output_attention,
                "input_feeding": self.input_feeding,
                **self._weight_settings_config(),
            }
        )
        return config
