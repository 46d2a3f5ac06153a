"""What every attention decoder cell shares: the memory, its binding and the attention step.

Keras 3's `keras.layers.RNN` has no `constants=` argument, so a cell cannot
receive the encoder memory through the RNN. The memory is instead prepared
once per sequence (`prepare_memory`: the keys are projected here, never per
step) and either

- passed explicitly: `cell.step(inputs, states, memory)`, the stateless form
  used by custom loops and by the in-graph decoders, or
- bound around a `keras.layers.RNN` call: `with cell.bind(memory): rnn(...)`,
  which is what `AttentionDecoder` does for teacher-forced training. The
  tensors are captured by the RNN's loop, not carried as states.

A binding belongs to the thread that made it and ends with its `with`
block: one cell (or one decoder, or one model) called from several threads
at once reads each thread's own memory, and nothing is left bound after.
"""

import collections
import contextlib
import threading

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.layers.base import BaseAttention, noise_kwargs

__all__ = ["AttentionCell", "AttentionMemory"]

AttentionMemory = collections.namedtuple("AttentionMemory", ["values", "keys", "mask"])
AttentionMemory.__doc__ = """The encoder memory prepared for a decoder cell.

Fields: `values (B, Ts, dv)`, `keys` (the attention's projected keys,
computed once per sequence) and `mask (B, Ts)` boolean (or None).
"""


# {id(cell): (memory, with_alignments)} for the bindings open in this thread.
# Kept outside the cells: a binding on the instance would be shared by every
# thread calling the cell, each reading whichever memory was bound last.
_thread_state = threading.local()


def _bindings():
    table = getattr(_thread_state, "bindings", None)
    if table is None:
        table = _thread_state.bindings = {}
    return table


def check_memory(owner, memory, mask):
    """`memory (B, Ts, d)` and `mask (B, Ts)`; returns the memory's static shape."""
    shape = _checks.static_shape(memory.shape)
    if len(shape) != 3:
        raise ValueError(f"{_checks.owner_name(owner)}: `memory` must have rank 3 (batch, Ts, d); got shape {shape}.")
    if mask is not None:
        _checks.check_mask_shape(owner, "memory_mask", mask, shape[:2], "(batch, Ts)")
    return shape


def attention_cell(layer, cell):
    """`cell` (or its config) as an attention cell of this library, for `layer`."""
    return _checks.resolve_layer(
        layer,
        "cell",
        cell,
        lambda cell: isinstance(cell, AttentionCell),
        "an attention cell of this library (AttentionGRUCell, AttentionLSTMCell or AttentionWrapper)",
    )


class AttentionCell(keras.layers.Layer):
    """Base class of the attention decoder cells.

    Subclasses implement `build_cell(input_dim, memory_dim)`,
    `recurrent_state_size` (list of ints), `output_size` and
    `cell_step(inputs, states, attend, training)` returning
    `(output, new_states, alignment)`, where `attend(query)` gives the
    context and alignment for a `(B, dq)` query.

    A stateful attention (one with an `attention_state_size`, such as
    monotonic attention's previous alignment) keeps state of its own: the cell
    carries it after the recurrent states (a size None in `state_size` is the
    memory length), starting from `attention.initial_attention_state`, and
    passes it through `attention.attend_step` at each step. `cell_step` calls
    `attend` once per step.
    """

    def __init__(self, attention, **kwargs):
        super().__init__(**kwargs)
        attention = _checks.resolve_layer(
            self,
            "attention",
            attention,
            lambda attention: isinstance(attention, BaseAttention),
            "a score layer of this library (e.g. AdditiveAttention(units=64) or GeneralAttention())",
        )
        _checks.claim_sublayer(self, "attention", attention)
        self.attention = attention
        if not self.attention.built:
            # One dtype policy for the cell and its attention.
            self.attention.dtype_policy = self.dtype_policy

    # ------------------------------------------------------------------ build

    def build(self, input_shape, memory_shape=None):
        if memory_shape is None:
            raise ValueError(
                f"{type(self).__name__} needs the memory's shape to build: use it "
                "through AttentionDecoder, or call `cell.build(input_shape, memory_shape)` "
                "before running it."
            )
        when = "when the cell is built"
        input_dim = _checks.check_known_last_dim(self, "inputs", input_shape, when)
        self.memory_dim = _checks.check_known_last_dim(self, "memory", memory_shape, when)
        self.build_cell(input_dim, self.memory_dim)
        self.built = True

    def build_attention(self, query_dim):
        """Build the attention for this cell's queries and memory, or check
        that an attention built before (called on its own) fits them."""
        attention, sizes = self.attention, (int(query_dim), self.memory_dim)
        if attention.built:
            built_for = getattr(attention, "score_sizes", None)
            if built_for != sizes:
                built = (
                    "for other sizes"
                    if built_for is None
                    else (f"for queries of size {built_for[0]} and keys of size {built_for[1]}")
                )
                raise ValueError(
                    f"{type(self).__name__}: `attention` {attention.name!r} is already built {built}; "
                    f"this cell queries it with size {sizes[0]} over a memory of size {sizes[1]}. "
                    "Give the cell a new, unbuilt attention layer."
                )
            return
        attention.build_score(*sizes)
        attention.score_sizes = sizes
        attention.built = True

    # ----------------------------------------------------------------- memory

    def prepare_memory(self, values, mask=None, owner=None):
        """Project the memory's keys once; returns an `AttentionMemory`.

        The shapes are checked first; errors name `owner` (the decoder the
        memory was given to), or this cell.
        """
        check_memory(owner or self, values, mask)
        values = ops.cast(values, self.compute_dtype)
        if mask is not None:
            mask = ops.cast(mask, "bool")
        return AttentionMemory(values, self.attention.project_key(values), mask)

    @contextlib.contextmanager
    def bind(self, memory, with_alignments=False, noise_from=None):
        """Make `call` read `memory` in this thread until the block ends; with
        `with_alignments`, `call` outputs `[output ; alignment]` so an RNN
        collects the alignment history. `noise_from`: the step inputs'
        features from this index on are the attention's `step_noise` for the
        step (`split_step_noise`). Other threads do not see it."""
        table, key = _bindings(), id(self)
        previous = table.get(key)
        table[key] = (memory, with_alignments, noise_from)
        try:
            yield self
        finally:
            if previous is None:
                del table[key]
            else:
                table[key] = previous

    def attend(self, query, memory, attention_state=(), training=None, noise=None):
        """Context `(B, dv)`, alignment `(B, Ts)` and the attention's new state
        for queries `(B, dq)`, from the attention's state at this step.
        `noise (B, Ts)`: the step's slice of the attention's `step_noise`."""
        return self.attention.attend_step(
            query, memory.keys, memory.values, memory.mask, attention_state, training=training, **noise_kwargs(noise)
        )

    def step(self, inputs, states, memory, training=None, noise=None):
        """One decoder step: `(output, new_states, alignment)`.

        `states` are the cell's states (`state_size`); `memory` comes from
        `prepare_memory`. This is the stateless form for custom loops. In a
        loop that trains with a random attention (dropout, monotonic
        attention's `sigmoid_noise`), draw `attention.step_noise(B, steps,
        Ts, training)` before the loop and pass step `t`'s slice `(B, Ts)`
        as `noise`: the attention's seed generator cannot advance inside a
        loop on JAX or under XLA.
        """
        states = list(states)
        recurrent_count = len(self.recurrent_state_size)
        attention_state, new_attention_state = states[recurrent_count:], []

        def attend(query):
            context, alignment, state = self.attend(query, memory, attention_state, training=training, noise=noise)
            new_attention_state.extend(state)
            return context, alignment

        output, new_states, alignment = self.cell_step(inputs, states[:recurrent_count], attend, training)
        new_states = list(new_states) + [ops.cast(state, self.compute_dtype) for state in new_attention_state]
        return output, new_states, alignment

    # ------------------------------------------------------------------- call

    @property
    def state_size(self):
        return self.recurrent_state_size + list(self.attention.attention_state_size)

    def get_initial_state(self, batch_size=None, memory=None):
        """Zero recurrent states, then a stateful attention's initial state
        for `memory` (monotonic attention: the alignment one-hot at position 0)."""
        states = [ops.zeros((batch_size, size), dtype=self.compute_dtype) for size in self.recurrent_state_size]
        return states + self._initial_attention_state(memory)

    def _initial_attention_state(self, memory):
        if memory is None and self.attention.attention_state_size:
            raise ValueError(
                f"{type(self).__name__}: with a stateful attention ({type(self.attention).__name__}) "
                "the initial state includes the attention's own state, which depends on the "
                "memory; pass `memory=cell.prepare_memory(...)`."
            )
        values = None if memory is None else memory.values
        return [ops.cast(state, self.compute_dtype) for state in self.attention.initial_attention_state(values)]

    @property
    def optional_state_count(self):
        """How many trailing recurrent states a user may leave out of
        `initial_state`; they start at zero (the wrapper's previous attention
        vector, say)."""
        return 0

    def complete_initial_state(self, recurrent_states, memory):
        """The cell's full initial state from the user's recurrent states."""
        recurrent_states = list(recurrent_states)
        sizes = self.recurrent_state_size
        required = len(sizes) - self.optional_state_count
        if not required <= len(recurrent_states) <= len(sizes):
            counts = f"{required} or {len(sizes)}" if required != len(sizes) else f"{len(sizes)}"
            raise ValueError(
                f"{type(self).__name__}: `initial_state` must hold {counts} tensor(s) "
                f"(sizes {sizes}); got {len(recurrent_states)}."
            )
        batch = _checks.static_shape(memory.values.shape)[0]
        for index, (state, size) in enumerate(zip(recurrent_states, sizes)):
            # A state of another batch or size fails deep inside the first
            # step otherwise.
            _checks.check_mask_shape(self, f"initial_state[{index}]", state, (batch, size), f"(batch, {size})")
        if recurrent_states:
            batch = ops.shape(recurrent_states[0])[0]
            for size in sizes[len(recurrent_states) :]:
                recurrent_states.append(ops.zeros((batch, size), dtype=self.compute_dtype))
        return recurrent_states + self._initial_attention_state(memory)

    def initial_state_for(self, memory, batch_size, initial_state=None):
        """The states a decoding starts from: zeros when `initial_state` is
        None, else the user's recurrent state(s) (a tensor or a list),
        completed as the cell needs."""
        if initial_state is None:
            return self.get_initial_state(batch_size, memory=memory)
        if not isinstance(initial_state, (list, tuple)):
            initial_state = [initial_state]
        return self.complete_initial_state(initial_state, memory)

    def prepare_dropout_masks(self, inputs, states):
        """Draw the dropout masks of the cells this one runs inside, before a
        loop over time (`inputs (B, dx)`: the shape of one step's input;
        `states`: the initial states). Nothing to draw by default."""

    def reset_dropout_masks(self):
        """Forget the masks drawn by `prepare_dropout_masks`."""

    def draw_step_noise(self, inputs, memory, training=None):
        """Before a Keras RNN over `inputs (B, Tt, dx)`: the inputs with the
        attention's `step_noise` for every step appended as features, and the
        index where the noise starts (None, inputs unchanged, when the
        attention draws nothing). Bind with `noise_from` that index."""
        # keras.ops.shape gives ints where the sizes are known, tensors elsewhere.
        batch, steps = ops.shape(inputs)[:2]
        noise = self.attention.step_noise(batch, steps, ops.shape(memory.values)[1], training=training)
        if noise is None:
            return inputs, None
        return ops.concatenate([inputs, ops.cast(noise, inputs.dtype)], axis=-1), inputs.shape[-1]

    def split_step_noise(self, inputs):
        """A step's `(inputs, noise or None)`, the noise cut off the inputs'
        features as the current binding says (`draw_step_noise`)."""
        bound = _bindings().get(id(self))
        noise_from = None if bound is None else bound[2]
        if noise_from is None:
            return inputs, None
        return inputs[:, :noise_from], inputs[:, noise_from:]

    def call(self, inputs, states, training=None):
        bound = _bindings().get(id(self))
        if bound is None:
            raise ValueError(
                f"{type(self).__name__} has no memory to attend to. Run it through "
                "`AttentionDecoder`, call `cell.step(inputs, states, memory)` with "
                "`memory = cell.prepare_memory(values, mask)`, or wrap your RNN call in "
                "`with cell.bind(memory):`."
            )
        memory, with_alignments, _ = bound
        inputs, noise = self.split_step_noise(inputs)
        output, new_states, alignment = self.step(inputs, list(states), memory, training=training, noise=noise)
        if with_alignments:
            output = ops.concatenate([output, ops.cast(alignment, output.dtype)], axis=-1)
        return output, new_states

    def get_config(self):
        config = super().get_config()
        config["attention"] = keras.saving.serialize_keras_object(self.attention)
        return config
