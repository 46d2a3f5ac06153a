"""Attention decoder cells, AttentionDecoder and InferenceDecoder."""

import threading

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests import reference
from tests.layer_cases import (
    lengths_mask,
    randomize,
    randomize_model,
    token_batch,
    unknown_shape_dataset,
    weights_of,
)

pytestmark = pytest.mark.any_backend

B, TT, TS, DY, DM, UNITS = 3, 4, 5, 3, 6, 7
BACKEND = keras.backend.backend()


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def additive_step(w, query, memory, mask):
    """Context and alignment of additive attention for one query per example."""
    scores = reference.additive_scores(w, query[:, None, :], memory)  # (B, 1, Ts)
    context, weights = reference.attend(scores, memory, mask[:, None, :])
    return context[:, 0], weights[:, 0]


def own_weights(cell):
    """The cell's own weights (weights_of would mix in the attention's `bias`)."""
    names = ("input_kernel", "recurrent_kernel", "context_kernel", "bias")
    return {name: ops.convert_to_numpy(getattr(cell, name)).astype(np.float64) for name in names}


def gru_reference(cell, inputs, memory, mask, target_mask, state):
    w, a = own_weights(cell), weights_of(cell.attention)
    u = cell.units
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        y = inputs[:, t]
        context, alignment = additive_step(a, state, memory, mask)
        x_part = y @ w["input_kernel"] + context @ w["context_kernel"] + w["bias"]
        U = w["recurrent_kernel"]
        r = sigmoid(x_part[:, :u] + state @ U[:, :u])
        z = sigmoid(x_part[:, u : 2 * u] + state @ U[:, u : 2 * u])
        candidate = np.tanh(x_part[:, 2 * u :] + (r * state) @ U[:, 2 * u :])
        new_state = z * state + (1 - z) * candidate
        keep = target_mask[:, t : t + 1]
        # A padded target step keeps the state and repeats the previous output.
        output = np.concatenate([new_state, context], -1)
        if outputs:
            output = np.where(keep, output, outputs[-1])
        state = np.where(keep, new_state, state)
        outputs.append(output)
        alignments.append(np.where(keep, alignment, alignments[-1] if alignments else alignment))
    return np.stack(outputs, 1), state, np.stack(alignments, 1)


def lstm_reference(cell, inputs, memory, mask, state):
    w, a = own_weights(cell), weights_of(cell.attention)
    u = cell.units
    hidden, cell_state = state
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        context, alignment = additive_step(a, hidden, memory, mask)
        gates = (
            inputs[:, t] @ w["input_kernel"]
            + hidden @ w["recurrent_kernel"]
            + context @ w["context_kernel"]
            + w["bias"]
        )
        i, f = sigmoid(gates[:, :u]), sigmoid(gates[:, u : 2 * u])
        g, o = np.tanh(gates[:, 2 * u : 3 * u]), sigmoid(gates[:, 3 * u :])
        cell_state = f * cell_state + i * g
        hidden = o * np.tanh(cell_state)
        outputs.append(np.concatenate([hidden, context], -1))
        alignments.append(alignment)
    return np.stack(outputs, 1), (hidden, cell_state), np.stack(alignments, 1)


def wrapper_reference(wrapper, inputs, memory, mask, state):
    """AttentionWrapper around a Keras LSTMCell (gates i, f, c, o), general score."""
    inner = weights_of(wrapper.cell)
    general = weights_of(wrapper.attention)["bilinear_kernel"]
    u = wrapper.cell.units
    hidden, cell_state, attention = state
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        x = np.concatenate([inputs[:, t], attention], -1) if wrapper.input_feeding else inputs[:, t]
        gates = x @ inner["kernel"] + hidden @ inner["recurrent_kernel"] + inner["bias"]
        i, f = sigmoid(gates[:, :u]), sigmoid(gates[:, u : 2 * u])
        g, o = np.tanh(gates[:, 2 * u : 3 * u]), sigmoid(gates[:, 3 * u :])
        cell_state = f * cell_state + i * g
        hidden = o * np.tanh(cell_state)
        scores = reference.general_scores({"bilinear_kernel": general}, hidden[:, None, :], memory)
        context, weights = reference.attend(scores, memory, mask[:, None, :])
        context = context[:, 0]
        if wrapper.attention_layer_size:
            projected = np.concatenate([context, hidden], -1) @ weights_of(wrapper)["attention_kernel"]
            linear = keras.activations.serialize(wrapper.attention_activation) == "linear"
            attention = projected if linear else np.tanh(projected)
        else:
            attention = context
        outputs.append(attention if wrapper.output_attention else hidden)
        alignments.append(weights[:, 0])
    return np.stack(outputs, 1), (hidden, cell_state, attention), np.stack(alignments, 1)


def data(rng, dtype="float32"):
    inputs = rng.normal(size=(B, TT, DY)).astype(dtype)
    memory = rng.normal(size=(B, TS, DM)).astype(dtype)
    mask = lengths_mask([5, 2, 4], TS)
    return inputs, memory, mask


def symbolic(array):
    """A `keras.Input` of `array`'s feature size, its batch and lengths unknown: a
    layer built by a call on it is built as by an eager call, without a run (on
    TensorFlow, an eager decoding runs its loop step by step in Python)."""
    return keras.Input((None,) * (array.ndim - 2) + array.shape[-1:], dtype=array.dtype)


def build_decoder(cell, rng, inputs, memory, **kwargs):
    decoder = ka.AttentionDecoder(cell, return_state=True, return_alignments=True, **kwargs)
    decoder(symbolic(inputs), symbolic(memory))
    randomize(cell, rng)
    return decoder


# ----------------------------------------------------------- step references


def test_gru_cell_matches_the_equations_step_by_step():
    rng = np.random.default_rng(0)
    inputs, memory, mask = data(rng)
    cell = ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(4, use_bias=True))
    decoder = build_decoder(cell, rng, inputs, memory)
    state = rng.normal(size=(B, UNITS)).astype("float32")
    target_mask = lengths_mask([4, 3, 1], TT)
    outputs, final, alignments = map(
        ops.convert_to_numpy,
        decoder(inputs, memory, memory_mask=mask, inputs_mask=target_mask, initial_state=[state]),
    )
    want_outputs, want_state, want_alignments = gru_reference(cell, inputs, memory, mask, target_mask, state)
    np.testing.assert_allclose(outputs, want_outputs, atol=1e-5)
    np.testing.assert_allclose(final, want_state, atol=1e-5)
    np.testing.assert_allclose(alignments, want_alignments, atol=1e-5)
    assert (alignments[1, :, 2:] == 0).all(), "padded memory gets zero weight"


def test_lstm_cell_matches_the_equations_step_by_step():
    rng = np.random.default_rng(1)
    inputs, memory, mask = data(rng)
    cell = ka.AttentionLSTMCell(UNITS, ka.AdditiveAttention(4))
    decoder = build_decoder(cell, rng, inputs, memory)
    state = [rng.normal(size=(B, UNITS)).astype("float32") for _ in range(2)]
    outputs, hidden, cell_state, alignments = map(
        ops.convert_to_numpy, decoder(inputs, memory, memory_mask=mask, initial_state=state)
    )
    want_outputs, (want_hidden, want_cell), want_alignments = lstm_reference(cell, inputs, memory, mask, state)
    np.testing.assert_allclose(outputs, want_outputs, atol=1e-5)
    np.testing.assert_allclose(hidden, want_hidden, atol=1e-5)
    np.testing.assert_allclose(cell_state, want_cell, atol=1e-5)
    np.testing.assert_allclose(alignments, want_alignments, atol=1e-5)


def test_lstm_forget_bias_starts_at_one():
    cell = ka.AttentionLSTMCell(3, ka.DotAttention())
    ka.AttentionDecoder(cell)(np.zeros((1, 2, 3), "float32"), np.zeros((1, 2, 3), "float32"))
    np.testing.assert_array_equal(ops.convert_to_numpy(cell.bias), [0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0])


@pytest.mark.parametrize(
    "size, output_attention, input_feeding, activation",
    [
        (5, True, True, "tanh"),
        (None, True, True, "tanh"),
        (5, False, True, "tanh"),
        (5, True, False, "tanh"),
        (5, True, True, None),
        (5, True, False, None),
    ],
    ids=["luong", "context_only", "bahdanau_style", "no_input_feeding", "tfa_linear", "tfa_linear_no_feeding"],
)
def test_wrapper_matches_the_equations_step_by_step(size, output_attention, input_feeding, activation):
    rng = np.random.default_rng(2)
    inputs, memory, mask = data(rng)
    wrapper = ka.AttentionWrapper(
        keras.layers.LSTMCell(UNITS),
        ka.GeneralAttention(),
        attention_layer_size=size,
        attention_activation=activation,
        output_attention=output_attention,
        input_feeding=input_feeding,
    )
    decoder = build_decoder(wrapper, rng, inputs, memory)
    attention_size = size or DM
    state = [rng.normal(size=(B, UNITS)).astype("float32") for _ in range(2)]
    state.append(rng.normal(size=(B, attention_size)).astype("float32"))
    outputs, hidden, cell_state, attention, alignments = map(
        ops.convert_to_numpy, decoder(inputs, memory, memory_mask=mask, initial_state=state)
    )
    want_outputs, (want_hidden, want_cell, want_attention), want_alignments = wrapper_reference(
        wrapper, inputs, memory, mask, state
    )
    np.testing.assert_allclose(outputs, want_outputs, atol=1e-5)
    np.testing.assert_allclose(hidden, want_hidden, atol=1e-5)
    np.testing.assert_allclose(attention, want_attention, atol=1e-5)
    np.testing.assert_allclose(alignments, want_alignments, atol=1e-5)


@pytest.mark.parametrize(
    "make_cell",
    [
        lambda: keras.layers.SimpleRNNCell(6),
        lambda: keras.layers.GRUCell(6),
        lambda: keras.layers.StackedRNNCells([keras.layers.LSTMCell(6), keras.layers.GRUCell(4)]),
    ],
    ids=["simple_rnn", "gru", "stacked"],
)
def test_wrapper_accepts_any_keras_cell(make_cell):
    rng = np.random.default_rng(3)
    inputs, memory, mask = data(rng)
    decoder = ka.AttentionDecoder(
        ka.AttentionWrapper(make_cell(), ka.AdditiveAttention(4), attention_layer_size=5),
        return_alignments=True,
    )
    outputs, alignments = decoder(inputs, memory, memory_mask=mask)
    assert outputs.shape == (B, TT, 5)
    alignments = ops.convert_to_numpy(alignments)
    np.testing.assert_allclose(alignments.sum(-1), 1.0, atol=1e-5)
    assert (alignments[1, :, 2:] == 0).all()


# ------------------------------------------------------------ memory handling


@pytest.mark.parametrize("kind", ["gru", "lstm", "wrapper"])
def test_memory_keys_are_projected_once_per_sequence(kind, monkeypatch):
    rng = np.random.default_rng(4)
    inputs, memory, mask = data(rng)
    attention = ka.AdditiveAttention(4)
    cell = {
        "gru": lambda: ka.AttentionGRUCell(UNITS, attention),
        "lstm": lambda: ka.AttentionLSTMCell(UNITS, attention),
        "wrapper": lambda: ka.AttentionWrapper(keras.layers.GRUCell(UNITS), attention),
    }[kind]()
    decoder = ka.AttentionDecoder(cell)
    decoder(inputs, memory)
    calls = {"keys": 0, "queries": 0}
    for hook in ("project_key", "project_query"):
        original = getattr(attention, hook)

        def counting(x, original=original, name="keys" if hook == "project_key" else "queries"):
            calls[name] += 1
            return original(x)

        monkeypatch.setattr(attention, hook, counting)
    decoder(inputs, memory, memory_mask=mask)  # eager: the RNN runs its steps in Python
    # Keras's RNN runs step 0 once more to learn the output's structure, so
    # queries are projected Tt + 1 times; the keys exactly once. On JAX the
    # steps run in a lax.scan, whose body is traced (called) once.
    assert calls == {"keys": 1, "queries": 1 if BACKEND == "jax" else TT + 1}
    calls.update(keys=0, queries=0)
    embedding, output_layer = keras.layers.Embedding(9, DY), keras.layers.Dense(9)
    ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, max_length=6, method="beam", beam_width=2)(memory)
    assert calls["keys"] == 1 and calls["queries"] >= 2


def test_a_cell_without_memory_says_how_to_give_it_one():
    cell = ka.AttentionGRUCell(4, ka.DotAttention())
    ka.AttentionDecoder(cell)(np.zeros((1, 2, 3), "float32"), np.zeros((1, 2, 4), "float32"))
    with pytest.raises(ValueError, match=r"has no memory to attend to.*AttentionDecoder.*cell.bind"):
        keras.layers.RNN(cell)(np.zeros((1, 2, 3), "float32"))


def test_user_rnn_with_a_bound_memory_equals_the_decoder():
    rng = np.random.default_rng(5)
    inputs, memory, mask = data(rng)
    cell = ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(4))
    decoder = ka.AttentionDecoder(cell)
    expected = decoder(inputs, memory, memory_mask=mask)
    with cell.bind(cell.prepare_memory(memory, mask)):
        got = keras.layers.RNN(cell, return_sequences=True)(inputs)
    np.testing.assert_allclose(ops.convert_to_numpy(got), ops.convert_to_numpy(expected), atol=1e-6)


def _decoder_and_model(rng, memory):
    cell = ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(4))
    decoder = ka.AttentionDecoder(cell, return_alignments=True)
    targets_in = keras.Input((None, DY))
    memory_in = keras.Input((None, DM))
    model = keras.Model([targets_in, memory_in], decoder(targets_in, memory_in))
    randomize(cell, rng)
    return cell, {"decoder": lambda x, m: decoder(x, m), "model": lambda x, m: model([x, m])}


# Calls per thread. On JAX every eager call traces the decoder's scan anew
# (seconds each), so a few calls already overlap for long stretches.
CONCURRENT_CALLS = 5 if BACKEND == "jax" else 20


@pytest.mark.parametrize("caller", ["decoder", "model"])
def test_concurrent_calls_from_two_threads_each_read_their_own_memory(caller):
    rng = np.random.default_rng(16)
    inputs = rng.normal(size=(B, TT, DY)).astype("float32")
    memories = [rng.normal(size=(B, TS, DM)).astype("float32") for _ in range(2)]
    cell, callers = _decoder_and_model(rng, memories[0])
    call = callers[caller]
    want = [[ops.convert_to_numpy(x) for x in call(inputs, memory)] for memory in memories]
    assert not np.allclose(want[0][0], want[1][0])
    got = [[], []]
    start = threading.Barrier(2)

    def work(index):
        start.wait()
        for _ in range(CONCURRENT_CALLS):
            got[index].append([ops.convert_to_numpy(x) for x in call(inputs, memories[index])])

    threads = [threading.Thread(target=work, args=(index,)) for index in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in range(2):
        assert len(got[index]) == CONCURRENT_CALLS
        for outputs in got[index]:
            for value, expected in zip(outputs, want[index]):
                np.testing.assert_allclose(value, expected, atol=1e-6)
    # Nothing stays bound once the calls are over.
    with pytest.raises(ValueError, match=r"has no memory to attend to"):
        keras.layers.RNN(cell)(inputs)


# ----------------------------------------------------------- Keras integration


def seq2seq(vocabulary=12, units=8):
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    memory = keras.layers.Bidirectional(keras.layers.GRU(units // 2, return_sequences=True))(
        keras.layers.Embedding(vocabulary, 5, mask_zero=True)(source)
    )
    cell = ka.AttentionGRUCell(units, ka.AdditiveAttention(6))
    outputs = ka.AttentionDecoder(cell, name="decoder")(
        keras.layers.Embedding(vocabulary, 5, mask_zero=True)(target), memory
    )
    return keras.Model([source, target], keras.layers.Dense(vocabulary)(outputs))


@pytest.mark.skipif(
    BACKEND != "tensorflow",
    reason="what this adds is XLA over a tf.data pipeline whose every dimension is unknown, which is "
    "TensorFlow's; on JAX and PyTorch test_layer_discipline's fit test trains every cell (its AttentionDecoder "
    "rows) on batches of varying sizes and lengths",
)
def test_trains_with_xla_and_unknown_lengths():
    # One cell here: the layer harness's fit test already trains each cell
    # (its decoder_gru_additive, decoder_lstm_scaled_dot and
    # decoder_wrapper_monotonic rows) under XLA over a tf.data pipeline of
    # unknown shapes; this adds the whole seq2seq model (a bidirectional
    # encoder, masked embeddings, SequenceLoss). The three cells took 431 s.
    rng = np.random.default_rng(6)
    model = seq2seq()
    model.compile(keras.optimizers.Adam(0.02), ka.SequenceLoss(), jit_compile=True)
    ka.training.build_optimizer(model)
    batches = []
    for batch, source_length, target_length in ((8, 7, 5), (6, 4, 6), (8, 9, 3)):
        source, target = token_batch(rng, batch, source_length, 12, 2), token_batch(rng, batch, target_length, 12, 2)
        batches.append(((source, target), target))
    decoder_weights = [ops.convert_to_numpy(w).copy() for w in model.get_layer("decoder").trainable_weights]
    history = model.fit(unknown_shape_dataset(batches), epochs=4, shuffle=False, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0]
    for old, new in zip(decoder_weights, model.get_layer("decoder").trainable_weights):
        assert not np.allclose(old, ops.convert_to_numpy(new)), new.path
    assert model.predict([token_batch(rng, 2, 9, 12), token_batch(rng, 2, 3, 12)], verbose=0).shape == (2, 3, 12)


# ------------------------------------------------------------ inference decoding


def trained_parts(rng):
    cell = ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(4))
    embedding, output_layer = keras.layers.Embedding(9, DY), keras.layers.Dense(9)
    decoder = ka.InferenceDecoder(cell, embedding, output_layer, start_token=1, end_token=2, max_length=6)
    memory = rng.normal(size=(B, TS, DM)).astype("float32")
    decoder(symbolic(memory))
    for layer in (cell, embedding, output_layer):
        randomize(layer, rng)
    return cell, embedding, output_layer, memory


def test_greedy_inference_equals_a_python_step_loop():
    rng = np.random.default_rng(9)
    cell, embedding, output_layer, memory = trained_parts(rng)
    mask = lengths_mask([5, 2, 4], TS)
    result = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, max_length=6)(memory, memory_mask=mask)
    prepared = cell.prepare_memory(memory, mask)
    for b in range(B):
        one = cell.prepare_memory(memory[b : b + 1], mask[b : b + 1])
        state, token, tokens, alignments = [np.zeros((1, UNITS), "float32")], 1, [], []
        for _ in range(6):
            output, state, alignment = cell.step(embedding(np.array([token])), state, one)
            token = int(np.argmax(ops.convert_to_numpy(output_layer(output))[0]))
            tokens.append(token)
            alignments.append(ops.convert_to_numpy(alignment)[0])
            if token == 2:
                break
        ids = ops.convert_to_numpy(result["ids"])[b]
        assert list(ids[: len(tokens)]) == tokens
        np.testing.assert_allclose(ops.convert_to_numpy(result["alignments"])[b, : len(tokens)], alignments, atol=1e-5)
    assert prepared.keys.shape == (B, TS, 4)


def test_beam_width_one_equals_greedy_and_wider_beams_score_no_worse():
    rng = np.random.default_rng(10)
    cell, embedding, output_layer, memory = trained_parts(rng)
    greedy = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 6)(memory)
    narrow = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 6, method="beam", beam_width=1)(memory)
    wide = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 6, method="beam", beam_width=4)(memory)
    np.testing.assert_array_equal(ops.convert_to_numpy(narrow["ids"])[:, 0], greedy["ids"])
    assert (ops.convert_to_numpy(wide["log_probs"])[:, 0] >= ops.convert_to_numpy(greedy["scores"]) - 1e-5).all()


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: ka.AttentionGRUCell(0, ka.DotAttention()),
            r"AttentionGRUCell: `units` must be a positive integer; got 0",
        ),
        (lambda: ka.AttentionGRUCell(4, "dot"), r"`attention` must be a score layer of this library"),
        (lambda: ka.AttentionDecoder(keras.layers.GRUCell(4)), r"AttentionDecoder: `cell` must be an attention cell"),
        (lambda: ka.AttentionWrapper("gru", ka.DotAttention()), r"AttentionWrapper: `cell` must be a Keras RNN cell"),
        (
            lambda: ka.AttentionWrapper(keras.layers.GRUCell(4), ka.DotAttention(), attention_layer_size=0),
            r"`attention_layer_size` must be a positive integer or None; got 0",
        ),
        (
            lambda: ka.InferenceDecoder(
                ka.AttentionGRUCell(4, ka.DotAttention()),
                keras.layers.Embedding(3, 2),
                keras.layers.Dense(3),
                1,
                2,
                5,
                method="top",
            ),
            r"unknown `method` 'top'",
        ),
        (
            lambda: ka.InferenceDecoder(
                ka.AttentionGRUCell(4, ka.DotAttention()), keras.layers.Embedding(3, 2), keras.layers.Dense(3), -1, 2, 5
            ),
            r"`start_token` must be an integer id >= 0; got -1",
        ),
    ],
)
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_initial_state_of_the_wrong_size():
    decoder = ka.AttentionDecoder(ka.AttentionLSTMCell(4, ka.DotAttention()))
    with pytest.raises(
        ValueError, match=r"AttentionLSTMCell: `initial_state` must hold 2 tensor\(s\) \(sizes \[4, 4\]\); got 1"
    ):
        decoder(
            np.zeros((1, 2, 3), "float32"), np.zeros((1, 2, 4), "float32"), initial_state=[np.zeros((1, 4), "float32")]
        )


def test_inference_decoder_reads_the_memory_keras_mask():
    rng = np.random.default_rng(12)
    cell, embedding, output_layer, _ = trained_parts(rng)
    source = keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(9, DM, mask_zero=True)(source)
    model = keras.Model(source, ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 6)(memory))
    alignments = ops.convert_to_numpy(model(np.array([[3, 4, 0, 0, 0]], "int32"))["alignments"])
    assert (alignments[0, :, 2:] == 0).all()
    assert alignments[0, 0, :2].sum() == pytest.approx(1.0, abs=1e-5)


# ------------------------------------------------- what a seq2seq user builds


def test_inference_decoder_runs_a_sequential_read_out_trained_on_sequences():
    # The read-out a training model builds on (batch, time, features), with
    # dropout in it, decodes as it trains.
    rng = np.random.default_rng(13)
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(9, DM, mask_zero=True)(source)
    cell = ka.AttentionLSTMCell(UNITS, ka.AdditiveAttention(4))
    embedding = keras.layers.Embedding(9, DY, mask_zero=True)
    readout = keras.Sequential(
        [keras.layers.Dense(8, activation="tanh"), keras.layers.Dropout(0.3), keras.layers.Dense(9)]
    )
    trainer = keras.Model([source, target_in], readout(ka.AttentionDecoder(cell)(embedding(target_in), memory)))
    randomize_model(trainer, rng)
    decoded = keras.Model(source, ka.InferenceDecoder(cell, embedding, readout, 1, 2, 6)(memory))
    sources = token_batch(rng, 3, 5, 9, 2)
    ids = ops.convert_to_numpy(decoded(sources)["ids"])
    # Teacher-forcing the decoded prefix reproduces each greedy choice.
    inputs = np.concatenate([np.ones((3, 1), "int32"), ids[:, :-1]], 1)
    logits = ops.convert_to_numpy(trainer([sources, inputs]))
    lengths = ops.convert_to_numpy(decoded(sources)["lengths"])
    for b in range(3):
        np.testing.assert_array_equal(logits[b, : lengths[b]].argmax(-1), ids[b, : lengths[b]])


def test_wrapper_starts_from_the_wrapped_cells_states_alone():
    rng = np.random.default_rng(14)
    memory = rng.normal(size=(B, TS, DM)).astype("float32")
    inputs = rng.normal(size=(B, TT, DY)).astype("float32")
    h, c = (rng.normal(size=(B, UNITS)).astype("float32") for _ in range(2))
    cell = ka.AttentionWrapper(keras.layers.LSTMCell(UNITS), ka.AdditiveAttention(4), attention_layer_size=5)
    decoder = ka.AttentionDecoder(cell)
    given_all = ops.convert_to_numpy(decoder(inputs, memory, initial_state=[h, c, np.zeros((B, 5), "float32")]))
    np.testing.assert_allclose(
        ops.convert_to_numpy(decoder(inputs, memory, initial_state=[h, c])), given_all, atol=1e-6
    )
    with pytest.raises(ValueError, match=r"`initial_state` must hold 2 or 3 tensor\(s\) \(sizes \[7, 7, 5\]\); got 1"):
        decoder(inputs, memory, initial_state=[h])


@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
def test_decoding_without_alignments_gives_the_same_ids(method):
    rng = np.random.default_rng(15)
    cell, embedding, output_layer, memory = trained_parts(rng)
    options = dict(method=method, beam_width=3, seed=4)
    full = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 6, **options)(memory)
    lean_decoder = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 6, return_alignments=False, **options)
    lean = lean_decoder(memory)
    assert "alignments" not in lean and "alignments" in full
    assert set(lean_decoder.compute_output_spec(keras.KerasTensor((None, TS, DM)))) == set(lean)
    for key in lean:
        np.testing.assert_allclose(
            ops.convert_to_numpy(lean[key]), ops.convert_to_numpy(full[key]), atol=1e-6, err_msg=key
        )
    restored = ka.InferenceDecoder.from_config(lean_decoder.get_config())
    assert restored.return_alignments is False


def _inference_decoder(**options):
    cell = ka.AttentionGRUCell(4, ka.GeneralAttention())
    return ka.InferenceDecoder(cell, keras.layers.Embedding(7, 3), keras.layers.Dense(7), 1, 2, 5, **options)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"temperature": 0}, r"InferenceDecoder: `temperature` must be a finite number > 0; got 0"),
        ({"temperature": -1.0}, r"`temperature` must be a finite number > 0; got -1.0"),
        ({"temperature": float("nan")}, r"`temperature` must be a finite number > 0; got nan"),
        ({"top_k": 0}, r"InferenceDecoder: `top_k` must be a positive integer or None; got 0"),
        ({"top_k": 2.5}, r"`top_k` must be a positive integer or None; got 2.5"),
        ({"length_penalty_weight": -0.5}, r"`length_penalty_weight` must be a finite number >= 0; got -0.5"),
        ({"length_penalty_weight": float("nan")}, r"`length_penalty_weight` must be a finite number >= 0; got nan"),
        ({"coverage_penalty_weight": float("inf")}, r"`coverage_penalty_weight` must be a finite number >= 0; got inf"),
        ({"beam_width": 0}, r"`beam_width` must be a positive integer; got 0"),
    ],
)
def test_inference_decoder_checks_every_option_when_constructed(options, message):
    # Whatever the method: the options are refused where they are given, not
    # at the first predict, from inside the decoding loop.
    with pytest.raises(ValueError, match=message):
        _inference_decoder(method="greedy", **options)
    config = _inference_decoder(method="sample").get_config()
    config.update(options)
    # Keras's from_config re-raises a constructor's error as a TypeError
    # that quotes it.
    with pytest.raises((ValueError, TypeError), match=message):
        ka.InferenceDecoder.from_config(config)


def test_top_k_above_the_vocabulary_samples_from_every_token():
    memory = np.random.default_rng(17).normal(size=(4, 5, 6)).astype("float32")
    results = []
    for top_k in (None, 7, 50):  # the vocabulary has 7 tokens
        keras.utils.set_random_seed(3)
        results.append(_inference_decoder(method="sample", top_k=top_k, seed=9)(memory))
    for result in results[1:]:
        np.testing.assert_array_equal(result["ids"], results[0]["ids"])


def test_one_attention_layer_given_to_two_cells_is_refused_at_the_second():
    rng = np.random.default_rng(18)
    inputs, memory, mask = data(rng)
    attention = ka.AdditiveAttention(4)
    first = ka.AttentionGRUCell(UNITS, attention, name="first")
    with pytest.raises(
        ValueError,
        match=r"AttentionLSTMCell: `attention` 'additive_attention\w*' already belongs to AttentionGRUCell 'first'; one layer cannot serve two owners",
    ):
        ka.AttentionLSTMCell(UNITS, attention)
    with pytest.raises(
        ValueError, match=r"AttentionWrapper: `attention` .* already belongs to AttentionGRUCell 'first'"
    ):
        ka.AttentionWrapper(keras.layers.GRUCell(4), attention)
    # The first cell keeps the one set of attention weights it was built with.
    decoder = build_decoder(first, rng, inputs, memory)
    assert [w.path for w in attention.weights] == [w.path for w in first.attention.weights]
    assert len(first.weights) == 4 + 3
    state = np.zeros((B, UNITS), "float32")
    outputs, _, _ = decoder(inputs, memory, memory_mask=mask)
    want, _, _ = gru_reference(first, inputs, memory, mask, np.ones((B, TT), bool), state)
    np.testing.assert_allclose(ops.convert_to_numpy(outputs), want, atol=1e-5)


def test_score_layers_are_not_shared_between_composite_layers_either():
    score = ka.GeneralAttention()
    ka.HardAttention(score)
    with pytest.raises(
        ValueError, match=r"SelfAttention: `score` 'general_attention\w*' already belongs to HardAttention"
    ):
        ka.SelfAttention(4, score=score)


def test_an_attention_built_for_another_size_is_refused_and_one_built_for_these_sizes_is_kept():
    rng = np.random.default_rng(19)
    inputs, memory, mask = data(rng)
    attention = ka.AdditiveAttention(4)
    attention(np.zeros((B, UNITS), "float32"), np.zeros((B, TS, 3), "float32"))  # keys of size 3
    with pytest.raises(
        ValueError,
        match=r"AttentionGRUCell: `attention` '\w+' is already built for queries of size 7 and keys of size 3; this cell queries it with size 7 over a memory of size 6",
    ):
        ka.AttentionDecoder(ka.AttentionGRUCell(UNITS, attention))(inputs, memory)

    fitting = ka.AdditiveAttention(4)
    fitting(np.zeros((B, UNITS), "float32"), memory)
    randomize(fitting, rng)
    values = [ops.convert_to_numpy(w) for w in fitting.weights]
    cell = ka.AttentionGRUCell(UNITS, fitting)
    ka.AttentionDecoder(cell)(inputs, memory)
    assert len(cell.weights) == 4 + len(values)
    for variable, value in zip(fitting.weights, values):
        np.testing.assert_array_equal(ops.convert_to_numpy(variable), value)


def test_inference_decoder_beams_beyond_the_vocabulary_are_empty():
    memory = np.random.default_rng(20).normal(size=(2, 5, 6)).astype("float32")
    result = _inference_decoder(method="beam", beam_width=10)
    result = ka.InferenceDecoder.from_config({**result.get_config(), "max_length": 1})(memory)
    result = {k: ops.convert_to_numpy(v) for k, v in result.items()}
    # 7 one-token hypotheses for a width of 10.
    assert np.isfinite(result["scores"][:, :7]).all() and (result["lengths"][:, :7] == 1).all()
    np.testing.assert_array_equal(np.sort(result["ids"][:, :7, 0], axis=1), np.tile(np.arange(7), (2, 1)))
    assert (result["scores"][:, 7:] == -np.inf).all() and (result["log_probs"][:, 7:] == -np.inf).all()
    assert (result["lengths"][:, 7:] == 0).all() and (result["ids"][:, 7:] == 2).all()
    assert (result["alignments"][:, 7:] == 0).all()


@pytest.mark.parametrize(
    "make_cell",
    [
        lambda: keras.layers.LSTMCell(UNITS, dropout=0.3, recurrent_dropout=0.3),
        lambda: keras.layers.GRUCell(UNITS, dropout=0.3, recurrent_dropout=0.3),
        lambda: keras.layers.StackedRNNCells(
            [keras.layers.LSTMCell(UNITS, dropout=0.3), keras.layers.GRUCell(5, recurrent_dropout=0.3)]
        ),
    ],
    ids=["lstm", "gru", "stacked"],
)
def test_wrapper_around_a_cell_with_dropout_trains(make_cell):
    """Keras draws a cell's dropout masks before its loop only for the cell
    it runs; the wrapped cell drew them inside the loop and kept them, so
    training failed with an InaccessibleTensorError."""
    rng = np.random.default_rng(21)
    source = keras.Input((None,), dtype="int32")
    target = keras.Input((None,), dtype="int32")
    memory = keras.layers.Embedding(12, DM, mask_zero=True)(source)
    cell = ka.AttentionWrapper(make_cell(), ka.AdditiveAttention(4), attention_layer_size=6)
    outputs = ka.AttentionDecoder(cell, name="decoder")(keras.layers.Embedding(12, DY, mask_zero=True)(target), memory)
    model = keras.Model([source, target], keras.layers.Dense(12)(outputs))
    model.compile(keras.optimizers.Adam(0.02), ka.SequenceLoss())
    ka.training.build_optimizer(model)
    x = [token_batch(rng, 16, 6, 12, 2), token_batch(rng, 16, 5, 12, 2)]
    before = [ops.convert_to_numpy(w).copy() for w in cell.cell.trainable_weights]
    history = model.fit(x, x[1], batch_size=8, epochs=3, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0]
    for old, new in zip(before, cell.cell.trainable_weights):
        assert not np.allclose(old, ops.convert_to_numpy(new)), new.path
    # Dropout acts in training only, with new masks for every call.
    first, second = (ops.convert_to_numpy(model(x, training=True)) for _ in range(2))
    assert not np.allclose(first, second)
    np.testing.assert_array_equal(ops.convert_to_numpy(model(x)), ops.convert_to_numpy(model(x)))


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"inputs": np.zeros((2, TT, DY), "float32")},
            r"AttentionDecoder: `inputs` and `memory` must have the same batch size; got shapes \(2, 4, 3\) and \(3, 5, 6\)",
        ),
        (
            {"memory_mask": np.ones((B, TS - 1), bool)},
            r"AttentionDecoder: `memory_mask` must have shape \(batch, Ts\) = \(3, 5\); got shape \(3, 4\)",
        ),
        (
            {"memory_mask": np.ones((2, TS), bool)},
            r"AttentionDecoder: `memory_mask` must have shape \(batch, Ts\) = \(3, 5\); got shape \(2, 5\)",
        ),
        (
            {"memory_mask": np.ones((B, TS, 1), bool)},
            r"`memory_mask` must have shape \(batch, Ts\) = \(3, 5\); got shape \(3, 5, 1\)",
        ),
        (
            {"inputs_mask": np.ones((B, TT + 1), bool)},
            r"AttentionDecoder: `inputs_mask` must have shape \(batch, Tt\) = \(3, 4\); got shape \(3, 5\)",
        ),
        (
            {"memory": np.zeros((B, DM), "float32")},
            r"AttentionDecoder: `memory` must have rank 3 \(batch, Ts, d\); got shape \(3, 6\)",
        ),
        (
            {"initial_state": [np.zeros((2, UNITS), "float32")]},
            r"AttentionGRUCell: `initial_state\[0\]` must have shape \(batch, 7\) = \(3, 7\); got shape \(2, 7\)",
        ),
        (
            {"initial_state": [np.zeros((B, UNITS + 1), "float32")]},
            r"`initial_state\[0\]` must have shape \(batch, 7\) = \(3, 7\); got shape \(3, 8\)",
        ),
    ],
)
def test_decoder_checks_the_memory_mask_and_batches_against_the_memory(change, message):
    rng = np.random.default_rng(22)
    inputs, memory, mask = data(rng)
    decoder = ka.AttentionDecoder(ka.AttentionGRUCell(UNITS, ka.AdditiveAttention(4)))
    decoder(inputs, memory)
    arguments = {"inputs": inputs, "memory": memory, "memory_mask": mask, **change}
    with pytest.raises(ValueError, match=message):
        decoder(arguments.pop("inputs"), arguments.pop("memory"), **arguments)


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"memory_mask": np.ones((B, TS - 1), bool)},
            r"InferenceDecoder: `memory_mask` must have shape \(batch, Ts\) = \(3, 5\); got shape \(3, 4\)",
        ),
        (
            {"memory_mask": np.ones((2, TS), bool)},
            r"InferenceDecoder: `memory_mask` must have shape \(batch, Ts\) = \(3, 5\); got shape \(2, 5\)",
        ),
        (
            {"initial_state": np.zeros((2, UNITS), "float32")},
            r"AttentionGRUCell: `initial_state\[0\]` must have shape \(batch, 7\) = \(3, 7\); got shape \(2, 7\)",
        ),
    ],
)
@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_inference_decoder_checks_the_memory_mask_and_state_against_the_memory(change, message, method):
    rng = np.random.default_rng(23)
    cell, embedding, output_layer, memory = trained_parts(rng)
    decoder = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 4, method=method, beam_width=2)
    with pytest.raises(ValueError, match=message):
        decoder(memory, **change)


# ------------------------------------------------ the stateful-attention protocol


class _CoverageAttention(ka.DotAttention):
    """Dot attention that carries a step count and the summed alignments:
    a stateful mechanism the cells know nothing about."""

    @property
    def attention_state_size(self):
        return [1, None]

    def initial_attention_state(self, values):
        zeros = keras.ops.zeros_like(values[..., 0])
        return [keras.ops.zeros_like(zeros[:, :1]), zeros]

    def attend_step(self, query, projected_key, value, mask=None, attention_state=(), training=None):
        count, coverage = attention_state
        context, weights, _ = super().attend_step(query, projected_key, value, mask, training=training)
        return context, weights, [count + 1.0, coverage + weights]


@pytest.mark.parametrize(
    "make_cell",
    [
        lambda attention: ka.AttentionGRUCell(DM, attention),
        lambda attention: ka.AttentionWrapper(keras.layers.GRUCell(DM), attention, input_feeding=False),
    ],
    ids=["gru", "wrapper_without_input_feeding"],
)
def test_a_stateful_attention_plugs_into_the_cells_through_the_protocol(make_cell):
    rng = np.random.default_rng(40)
    memory = rng.normal(size=(B, TS, DM)).astype("float32")
    targets = rng.normal(size=(B, TT, DY)).astype("float32")
    mask = lengths_mask([5, 3, 1], TS)
    cell = make_cell(_CoverageAttention())
    decoder = ka.AttentionDecoder(cell, return_alignments=True)
    outputs, alignments = map(ops.convert_to_numpy, decoder(targets, memory, memory_mask=mask))
    recurrent = len(cell.recurrent_state_size)
    assert cell.state_size == cell.recurrent_state_size + [1, None]
    # A step's input needs the previous step's attention state: no shortcut.
    assert not getattr(cell, "attends_after_the_recurrence", False)

    prepared = cell.prepare_memory(memory, mask)
    states = cell.get_initial_state(B, memory=prepared)
    np.testing.assert_array_equal(states[recurrent], np.zeros((B, 1)))
    np.testing.assert_array_equal(states[recurrent + 1], np.zeros((B, TS)))
    stepped = []
    for t in range(TT):
        output, states, alignment = cell.step(targets[:, t], states, prepared)
        np.testing.assert_allclose(ops.convert_to_numpy(output), outputs[:, t], atol=1e-6)
        stepped.append(ops.convert_to_numpy(alignment))
    np.testing.assert_allclose(np.stack(stepped, 1), alignments, atol=1e-6)
    np.testing.assert_array_equal(ops.convert_to_numpy(states[recurrent]), np.full((B, 1), TT))
    np.testing.assert_allclose(ops.convert_to_numpy(states[recurrent + 1]), np.sum(stepped, axis=0), atol=1e-6)
    assert (ops.convert_to_numpy(states[recurrent + 1])[~mask] == 0).all()

    with pytest.raises(
        ValueError,
        match=r"with a stateful attention \(_CoverageAttention\) the initial state includes the attention's own state",
    ):
        cell.get_initial_state(B)


def test_a_stateless_attention_adds_no_state_and_needs_no_memory_for_its_initial_state():
    cell = ka.AttentionLSTMCell(UNITS, ka.GeneralAttention())
    assert ka.GeneralAttention().attention_state_size == []
    assert cell.state_size == [UNITS, UNITS]
    states = cell.get_initial_state(2)
    assert [tuple(s.shape) for s in states] == [(2, UNITS), (2, UNITS)]
    monotonic = ka.AttentionLSTMCell(UNITS, ka.LuongMonotonicAttention())
    assert monotonic.state_size == [UNITS, UNITS, None]


def test_wrapper_attention_activation_round_trips_and_is_checked():
    wrapper = ka.AttentionWrapper(
        keras.layers.GRUCell(4), ka.DotAttention(), attention_layer_size=4, attention_activation=None
    )
    config = wrapper.get_config()
    assert config["attention_activation"] == "linear"
    assert keras.activations.serialize(ka.AttentionWrapper.from_config(config).attention_activation) == "linear"
    assert (
        ka.AttentionWrapper(keras.layers.GRUCell(4), ka.DotAttention()).get_config()["attention_activation"] == "tanh"
    )
    with pytest.raises(
        ValueError, match=r"AttentionWrapper: `attention_activation` must be a Keras activation .*got 'tanhh'"
    ):
        ka.AttentionWrapper(keras.layers.GRUCell(4), ka.DotAttention(), attention_activation="tanhh")
