"""AttentionDecoder's whole-sequence path for AttentionWrapper(input_feeding=False):
one RNN pass then one attention call must give what the per-step loop gives."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from tests.layer_cases import lengths_mask, randomize

B, TT, TS, DY, DM = 3, 5, 6, 4, 6


def step_by_step(cell, inputs, memory, memory_mask, target_mask, initial_state):
    """The loop the whole-sequence path replaces, with the public `cell.step`:
    a padded target step keeps the states and repeats the previous output."""
    prepared = cell.prepare_memory(memory, memory_mask)
    states = cell.initial_state_for(prepared, inputs.shape[0], initial_state)
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        output, new_states, alignment = cell.step(inputs[:, t], states, prepared)
        keep = target_mask[:, t : t + 1]
        if outputs:
            output = tf.where(keep, output, outputs[-1])
            alignment = tf.where(keep, alignment, alignments[-1])
        states = [tf.where(keep, new, old) for new, old in zip(new_states, states)]
        outputs.append(output)
        alignments.append(alignment)
    return tf.stack(outputs, 1), states, tf.stack(alignments, 1)


CELLS = {
    "lstm_luong": lambda: ka.AttentionWrapper(
        keras.layers.LSTMCell(7), ka.GeneralAttention(), attention_layer_size=5, input_feeding=False
    ),
    "lstm_cell_output": lambda: ka.AttentionWrapper(
        keras.layers.LSTMCell(7),
        ka.AdditiveAttention(4),
        attention_layer_size=5,
        output_attention=False,
        input_feeding=False,
    ),
    "gru_context": lambda: ka.AttentionWrapper(keras.layers.GRUCell(6), ka.DotAttention(), input_feeding=False),
    "stacked": lambda: ka.AttentionWrapper(
        keras.layers.StackedRNNCells([keras.layers.LSTMCell(6), keras.layers.GRUCell(5)]),
        ka.ConcatAttention(4),
        attention_layer_size=5,
        input_feeding=False,
    ),
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_the_whole_sequence_path_matches_the_step_loop_values_states_and_gradients(name):
    rng = np.random.default_rng(0)
    cell = CELLS[name]()
    assert cell.attends_after_the_recurrence
    inputs = tf.constant(rng.normal(size=(B, TT, DY)).astype("float32"))
    memory = tf.constant(rng.normal(size=(B, TS, DM)).astype("float32"))
    memory_mask = lengths_mask([6, 2, 4], TS)
    # Right padding, a row shorter than the rest, and a row with one step.
    target_mask = lengths_mask([5, 3, 1], TT)
    decoder = ka.AttentionDecoder(cell, return_state=True, return_alignments=True)
    decoder(inputs, memory)
    randomize(cell, rng)
    states = [tf.constant(rng.normal(size=(B, size)).astype("float32")) for size in cell.recurrent_state_size]
    weights_out = tf.constant(rng.normal(size=(B, TT, cell.output_size)).astype("float32"))

    with tf.GradientTape(persistent=True) as tape:
        tape.watch(inputs)
        outputs, *final, alignments = decoder(
            inputs, memory, memory_mask=memory_mask, inputs_mask=target_mask, initial_state=states
        )
        want_outputs, want_final, want_alignments = step_by_step(cell, inputs, memory, memory_mask, target_mask, states)
        valid = tf.constant(target_mask[..., None], "float32")
        loss = tf.reduce_sum(outputs * weights_out * valid)
        want_loss = tf.reduce_sum(want_outputs * weights_out * valid)
    np.testing.assert_allclose(outputs, want_outputs, atol=1e-5)
    np.testing.assert_allclose(alignments, want_alignments, atol=1e-5)
    assert len(final) == len(want_final) == len(cell.recurrent_state_size)
    for got, want in zip(final, want_final):
        np.testing.assert_allclose(got, want, atol=1e-5)
    for variable in cell.trainable_variables:
        got, want = tape.gradient(loss, variable), tape.gradient(want_loss, variable)
        # Outputting the cell output, the attention's weights get no gradient on either path.
        assert (got is None) == (want is None), variable.path
        if want is None:
            continue
        np.testing.assert_allclose(got, want, atol=1e-5, err_msg=variable.path)
    np.testing.assert_allclose(tape.gradient(loss, inputs), tape.gradient(want_loss, inputs), atol=1e-5)


def test_a_row_with_no_target_step_ends_in_its_initial_states():
    rng = np.random.default_rng(1)
    cell = CELLS["lstm_luong"]()
    memory = rng.normal(size=(B, TS, DM)).astype("float32")
    decoder = ka.AttentionDecoder(cell, return_state=True)
    inputs = rng.normal(size=(B, TT, DY)).astype("float32")
    decoder(inputs, memory)
    randomize(cell, rng)
    states = [rng.normal(size=(B, size)).astype("float32") for size in cell.recurrent_state_size]
    _, *final = decoder(inputs, memory, inputs_mask=lengths_mask([5, 0, 2], TT), initial_state=states)
    for got, want in zip(final, states):
        np.testing.assert_allclose(np.asarray(got)[1], want[1], atol=1e-6)


def test_a_model_with_the_whole_sequence_path_compiles_with_xla_and_decodes_as_it_trains():
    """Trained on the whole-sequence path, the same weights decode step by
    step in InferenceDecoder: its forced first step equals the trainer's."""
    keras.utils.set_random_seed(2)
    source, target = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(9, DM, mask_zero=True)(source)
    cell = ka.AttentionWrapper(
        keras.layers.LSTMCell(8), ka.GeneralAttention(), attention_layer_size=8, input_feeding=False
    )
    target_embedding = keras.layers.Embedding(7, DY, mask_zero=True)
    readout = keras.layers.Dense(7)
    logits = readout(ka.AttentionDecoder(cell)(target_embedding(target), memory))
    model = keras.Model([source, target], logits)
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True)
    ka.training.build_optimizer(model)
    rng = np.random.default_rng(2)
    x = [rng.integers(1, 9, size=(8, 6)), rng.integers(1, 7, size=(8, 4))]
    history = model.fit(x, rng.integers(1, 7, size=(8, 4)), epochs=3, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    eager = model(x)
    np.testing.assert_allclose(model.predict(x, verbose=0), eager, atol=1e-5)

    greedy = ka.InferenceDecoder(cell, target_embedding, readout, start_token=1, end_token=2, max_length=4)
    decoded = keras.Model(source, greedy(memory))
    ids = np.asarray(decoded.predict(x[0], verbose=0)["ids"])
    first_logits = np.asarray(model([x[0], np.ones((8, 1), "int64")]))[:, 0]
    np.testing.assert_array_equal(ids[:, 0], first_logits.argmax(-1))
