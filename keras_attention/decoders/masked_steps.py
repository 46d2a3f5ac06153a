"""Padded target steps in a Keras RNN loop, alike on every backend."""

import inspect

import keras
from keras import ops

__all__ = ["OutputLeadsStates"]


class OutputLeadsStates(keras.layers.Layer):
    """A step cell whose output is also its first state, for masked loops.

    On a padded step (mask False) a Keras RNN keeps the states and repeats
    the previous output, but the backends find that output in different
    places: TensorFlow's loop remembers the last output, JAX's takes
    `states[0]`, which for an attention cell is a recurrent state of
    another size, not its output. Carrying the output as the first state
    makes both readings the same. Made per call, around `step_cell` (the
    cell an RNN would run); it owns no weights.
    """

    def __init__(self, step_cell, output_dim, **kwargs):
        super().__init__(**kwargs)
        self._step_cell = step_cell  # not tracked: the decoder owns its weights
        self._takes_training = "training" in inspect.signature(step_cell.call).parameters
        # None when the output holds the alignments over an unknown Ts.
        self.output_size = output_dim if isinstance(output_dim, int) else None
        self.state_size = [self.output_size] + list(step_cell.state_size)
        self.built = True

    def call(self, inputs, states, training=None):
        kwargs = {"training": training} if self._takes_training else {}
        output, new_states = self._step_cell(inputs, list(states[1:]), **kwargs)
        return output, [output] + list(new_states)

    @staticmethod
    def initial_state(batch, output_dim, states, dtype):
        """`states` led by a zero output: what a padded first step outputs."""
        return [ops.zeros((batch, output_dim), dtype)] + list(states)
