"""Padded target steps: the state stays, the previous output repeats, on
every backend (Keras's JAX loop reads the previous output from `states[0]`,
TensorFlow's from its last output; `OutputLeadsStates` makes them agree).

Backend-neutral: runs as it is under KERAS_BACKEND=jax or torch."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoders.masked_steps import OutputLeadsStates

pytestmark = pytest.mark.any_backend


CELLS = {
    "gru": lambda: ka.AttentionGRUCell(4, ka.AdditiveAttention(3)),
    "lstm": lambda: ka.AttentionLSTMCell(4, ka.AdditiveAttention(3)),
    # Its output (5) is neither of its first states' sizes (4, 4).
    "wrapper": lambda: ka.AttentionWrapper(keras.layers.GRUCell(4), ka.AdditiveAttention(3), attention_layer_size=5),
}
LENGTHS = np.array([3, 5, 1])


def _data():
    rng = np.random.default_rng(0)
    inputs = rng.normal(size=(3, 5, 3)).astype("float32")
    memory = rng.normal(size=(3, 4, 6)).astype("float32")
    mask = np.arange(5)[None, :] < LENGTHS[:, None]
    return inputs, memory, mask


@pytest.mark.parametrize("kind", sorted(CELLS))
@pytest.mark.parametrize("with_alignments", [False, True])
def test_padded_steps_repeat_the_last_output_and_keep_the_state(kind, with_alignments):
    inputs, memory, mask = _data()
    keras.utils.set_random_seed(0)
    decoder = ka.AttentionDecoder(CELLS[kind](), return_state=True, return_alignments=with_alignments)
    masked = [ops.convert_to_numpy(t) for t in decoder(inputs, memory, inputs_mask=mask)]
    for row, length in enumerate(LENGTHS):
        # The row alone, cut to its length, with no mask: the reference.
        alone = [ops.convert_to_numpy(t) for t in decoder(inputs[row : row + 1, :length], memory[row : row + 1])]
        np.testing.assert_allclose(masked[0][row, :length], alone[0][0], rtol=1e-5, atol=1e-6)
        for step in range(length, 5):
            np.testing.assert_array_equal(masked[0][row, step], masked[0][row, length - 1])
        states = slice(1, len(masked) - int(with_alignments))
        for got, want in zip(masked[states], alone[states]):
            np.testing.assert_allclose(got[row], want[0], rtol=1e-5, atol=1e-6)
        if with_alignments:
            np.testing.assert_allclose(masked[-1][row, :length], alone[-1][0], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(masked[-1][row].sum(-1), 1.0, rtol=1e-5)  # repeated rows too


def test_a_padded_first_step_outputs_zeros_and_keeps_the_initial_state():
    inputs, memory, _ = _data()
    mask = np.array([[False, True, True, True, True]] * 3)
    decoder = ka.AttentionDecoder(CELLS["wrapper"](), return_state=True)
    state = np.full((3, 4), 0.5, "float32")
    output, *states = decoder(inputs, memory, inputs_mask=mask, initial_state=[state])
    np.testing.assert_array_equal(ops.convert_to_numpy(output)[:, 0], 0.0)
    # From step 1 on, the same as starting there.
    later, *later_states = decoder(inputs[:, 1:], memory, initial_state=[state])
    np.testing.assert_allclose(ops.convert_to_numpy(output)[:, 1:], ops.convert_to_numpy(later), rtol=1e-5, atol=1e-6)
    for got, want in zip(states, later_states):
        np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(want), rtol=1e-5, atol=1e-6)


def test_output_leads_states_carries_each_step_s_output_as_its_first_state():
    cell = keras.layers.LSTMCell(3)  # output 3 = states[0]'s size, but its own tensor
    cell.build((None, 2))
    adapter = OutputLeadsStates(cell, 3)
    assert adapter.state_size == [3, 3, 3] and adapter.output_size == 3
    x = np.random.default_rng(1).normal(size=(2, 2)).astype("float32")
    states = OutputLeadsStates.initial_state(2, 3, [np.zeros((2, 3), "float32")] * 2, "float32")
    output, new_states = adapter(x, states)
    want_output, want_states = cell(x, [np.zeros((2, 3), "float32")] * 2)
    np.testing.assert_allclose(ops.convert_to_numpy(new_states[0]), ops.convert_to_numpy(output))
    np.testing.assert_allclose(ops.convert_to_numpy(output), ops.convert_to_numpy(want_output), rtol=1e-6)
    for got, want in zip(new_states[1:], want_states):
        np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(want), rtol=1e-6)
    np.testing.assert_array_equal(ops.convert_to_numpy(states[0]), 0.0)
