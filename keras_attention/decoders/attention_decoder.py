"""`AttentionDecoder`: run an attention cell over target inputs given the encoder memory."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.cells.base import attention_cell, check_memory
from keras_attention.decoders.masked_steps import OutputLeadsStates

__all__ = ["AttentionDecoder"]


def run_cell(
    cell, inputs, prepared, initial_state, inputs_mask, training, with_alignments, return_sequences, dtype_policy
):
    """An attention cell over time on teacher-forced `inputs (B, Tt, dy)`:
    `(outputs, final states, alignments or None)`. What `AttentionDecoder`
    (and `ScheduledSamplingDecoder` when it feeds the gold tokens) run."""
    if return_sequences and getattr(cell, "attends_after_the_recurrence", False):
        # No step's input depends on an attention: one RNN pass, then
        # one attention call over all steps (no per-step attention).
        output, states, alignments = cell.run_sequence(
            inputs, prepared, initial_state, mask=inputs_mask, training=training
        )
        return output, states, ops.cast(alignments, output.dtype)
    return run_rnn(
        cell,
        cell,
        inputs,
        prepared,
        initial_state,
        inputs_mask,
        training,
        with_alignments,
        return_sequences,
        dtype_policy,
    )


def run_rnn(
    cell,
    step_cell,
    inputs,
    prepared,
    initial_state,
    inputs_mask,
    training,
    with_alignments,
    return_sequences,
    dtype_policy,
    step_input_dim=None,
    step_extra_dim=0,
):
    """`step_cell` (`cell` itself, or a cell stepping it) over time in a Keras
    RNN, `cell` bound to the memory: `(outputs, final states, alignments or
    None)`, the alignments the trailing features of each step's output.
    `step_input_dim`: the size of the inputs `cell` steps on (default: the
    last axis of `inputs`); `step_extra_dim`: how many features `step_cell`'s
    output has between `cell`'s output and the alignments."""
    # Keras's RNN draws the dropout masks of the cell it runs before its
    # loop; those of a cell inside ours (AttentionWrapper's) are drawn
    # here, or the cell would draw them inside the loop and keep them.
    step_input_dim = inputs.shape[-1] if step_input_dim is None else step_input_dim
    cell.prepare_dropout_masks(ops.zeros((ops.shape(inputs)[0], step_input_dim), cell.compute_dtype), initial_state)
    if inputs_mask is not None:
        # Padded steps repeat the previous output: carried as the first
        # state, where every backend's loop finds it (OutputLeadsStates).
        step_output_dim = cell.output_size + step_extra_dim
        if with_alignments:
            step_output_dim += ops.shape(prepared.values)[1]  # an int when known
        step_cell = OutputLeadsStates(step_cell, step_output_dim, dtype=dtype_policy)
        initial_state = OutputLeadsStates.initial_state(
            ops.shape(inputs)[0], step_output_dim, initial_state, cell.compute_dtype
        )
    # The attention's random numbers (dropout, monotonic noise) for every
    # step ride along as input features: drawn here, each step reads its own.
    inputs, noise_from = cell.draw_step_noise(inputs, prepared, training=training)
    # A fresh RNN wrapper per call: it owns no weights (they are the
    # cell's), and keeping none as an attribute keeps the cell saved once.
    rnn = keras.layers.RNN(step_cell, return_sequences=return_sequences, return_state=True, dtype=dtype_policy)
    try:
        with cell.bind(prepared, with_alignments=with_alignments, noise_from=noise_from):
            output, *states = rnn(inputs, initial_state=initial_state, mask=inputs_mask, training=training)
    finally:
        cell.reset_dropout_masks()
    if inputs_mask is not None:
        states = states[1:]
    alignments = None
    if with_alignments:
        alignments = output[..., cell.output_size :]
        output = output[..., : cell.output_size]
    return output, states, alignments


@keras.saving.register_keras_serializable(package="keras_attention")
class AttentionDecoder(keras.layers.Layer):
    """Teacher-forced decoding with an attention cell, for functional models.

    For target inputs `y_1..y_Tt` (embedded previous tokens), the encoder
    memory `h_1..h_Ts`, its mask and an initial state, it runs the cell over
    time: each step attends over the memory and updates the state (see the
    cell's formula). The memory's keys are projected once per call, not per
    step. It works on `keras.Input` tensors with unknown `Ts` and `Tt`, trains
    with `model.fit(jit_compile=True)` and exports (its loop is a Keras `RNN`).

    How it plugs into a model (Keras 3's RNN has no `constants=`): the layer
    prepares the memory with `cell.prepare_memory(memory, mask)` and runs a
    `keras.layers.RNN` over the cell inside `with cell.bind(memory)`. For a
    loop of your own, call `cell.step(inputs, states, memory)` directly.

    Speed: the loop runs one step per target position. For small models XLA
    (`jit_compile=True`, off on CPU by default) removes per-step overhead
    (`benchmarks/results.md` has the measured step times); for
    compute-bound models, or with `Dropout` on CPU (XLA's random generator
    is slow there), it can be slower: time an epoch both ways. A wrapper
    without input feeding does not need the loop: a Keras RNN layer followed
    by one attention call over all steps computes the same thing, and that
    is what this layer runs for an `AttentionWrapper(input_feeding=False)`
    (stateless attention, `return_sequences=True`): one pass of the
    wrapped cell, then one attention call, with no attention left in the
    step loop (benchmarks/results.md, section 7, times both on a G2P model).

    Paper: the encoder-decoder with attention of Bahdanau et al. 2014,
    arXiv:1409.0473, trained with teacher forcing.

    Shapes: inputs `(B, Tt, dy)`, memory `(B, Ts, dm)`, memory_mask
    `(B, Ts)`, initial_state: the cell's states (default zeros). Returns
    outputs `(B, Tt, cell.output_size)` (or `(B, cell.output_size)` for the
    last step without `return_sequences`), then the final states (with
    `return_state`), then the alignment history `(B, Tt, Ts)` (with
    `return_alignments`). The inputs' mask (padded targets) passes on to the
    outputs; padded steps keep the state unchanged.

    Args:
        cell: an `AttentionGRUCell`, `AttentionLSTMCell` or `AttentionWrapper`.
        return_sequences: return every step's output, not only the last.
        return_state: also return the final states.
        return_alignments: also return the alignment history.

    Example:

    ```python
    cell = keras_attention.AttentionGRUCell(32, keras_attention.AdditiveAttention(16))
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    memory = keras.layers.Bidirectional(keras.layers.GRU(16, return_sequences=True))(
        keras.layers.Embedding(50, 8, mask_zero=True)(source))
    outputs, alignments = keras_attention.AttentionDecoder(cell, return_alignments=True)(
        keras.layers.Embedding(40, 8, mask_zero=True)(target_in), memory)
    logits = keras.layers.Dense(40)(outputs)
    model = keras.Model([source, target_in], [logits, alignments])
    ```
    """

    def __init__(self, cell, return_sequences=True, return_state=False, return_alignments=False, **kwargs):
        super().__init__(**kwargs)
        self.cell = attention_cell(self, cell)
        self.return_sequences = bool(return_sequences)
        self.return_state = bool(return_state)
        self.return_alignments = bool(return_alignments)
        self.supports_masking = True

    def build(self, inputs_shape, memory_shape):
        for argument, shape, rank in (("inputs", inputs_shape, 3), ("memory", memory_shape, 3)):
            if len(shape) != rank:
                raise ValueError(
                    f"AttentionDecoder: `{argument}` must have rank 3 (batch, time, features); "
                    f"got shape {tuple(shape)}."
                )
        if not self.cell.built:
            self.cell.build(inputs_shape, memory_shape)
        self.built = True

    def _check_inputs(self, inputs, memory, memory_mask, inputs_mask):
        memory_shape = check_memory(self, memory, memory_mask)
        inputs_shape = _checks.static_shape(inputs.shape)
        if len(inputs_shape) != 3:
            raise ValueError(f"AttentionDecoder: `inputs` must have rank 3 (batch, Tt, dy); got shape {inputs_shape}.")
        if not _checks.same_dim(inputs_shape[0], memory_shape[0]):
            raise ValueError(
                "AttentionDecoder: `inputs` and `memory` must have the same batch size; "
                f"got shapes {inputs_shape} and {memory_shape}."
            )
        if inputs_mask is not None:
            _checks.check_mask_shape(self, "inputs_mask", inputs_mask, inputs_shape[:2], "(batch, Tt)")

    def call(self, inputs, memory, memory_mask=None, inputs_mask=None, initial_state=None, training=None):
        # Checked here: a mismatch fails deep inside the RNN's first step otherwise.
        self._check_inputs(inputs, memory, memory_mask, inputs_mask)
        prepared = self.cell.prepare_memory(memory, memory_mask, owner=self)
        initial_state = self.cell.initial_state_for(prepared, ops.shape(inputs)[0], initial_state)
        output, states, alignments = run_cell(
            self.cell,
            inputs,
            prepared,
            initial_state,
            inputs_mask,
            training,
            self.return_alignments,
            self.return_sequences,
            self.dtype_policy,
        )
        results = [output]
        if self.return_state:
            results.extend(states[: len(self.cell.recurrent_state_size)])
        if self.return_alignments:
            results.append(alignments)
        return results[0] if len(results) == 1 else tuple(results)

    def compute_output_spec(
        self, inputs, memory, memory_mask=None, inputs_mask=None, initial_state=None, training=None
    ):
        if not self.built:
            self.build(inputs.shape, memory.shape)
        batch, target_length = inputs.shape[0], inputs.shape[1]
        shape = (
            (batch, target_length, self.cell.output_size) if self.return_sequences else (batch, self.cell.output_size)
        )
        results = [keras.KerasTensor(shape, dtype=self.compute_dtype)]
        if self.return_state:
            results += [
                keras.KerasTensor((batch, size), dtype=self.compute_dtype) for size in self.cell.recurrent_state_size
            ]
        if self.return_alignments:
            alignment_shape = (
                (batch, target_length, memory.shape[1]) if self.return_sequences else (batch, memory.shape[1])
            )
            results.append(keras.KerasTensor(alignment_shape, dtype=self.compute_dtype))
        return results[0] if len(results) == 1 else tuple(results)

    def compute_mask(self, inputs, previous_mask=None):
        if not self.return_sequences:
            return None
        if self.return_state or self.return_alignments:
            count = 1 + (len(self.cell.recurrent_state_size) if self.return_state else 0) + int(self.return_alignments)
            return [previous_mask] + [None] * (count - 1)
        return previous_mask

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": keras.saving.serialize_keras_object(self.cell),
                "return_sequences": self.return_sequences,
                "return_state": self.return_state,
                "return_alignments": self.return_alignments,
            }
        )
        return config
