"""Monotonic attention (Raffel et al. 2017): the layers, the modes and their use in decoder cells."""

import keras
import numpy as np
import onnxruntime
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.layers.monotonic import monotonic_alignment
from tests import reference
from tests.export_check import assert_export_parity, keras_onnx_export
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import lengths_mask, randomize, randomize_model, token_batch, unknown_shape_dataset, weights_of
from tests.test_cells import own_weights, sigmoid

B, TQ, TS, DQ, DK, DV = 3, 4, 6, 4, 3, 5
MODES = ["parallel", "recursive", "hard"]
VARIANTS = {
    "bahdanau": lambda **kw: ka.BahdanauMonotonicAttention(5, normalize=True, **kw),
    "luong": lambda **kw: ka.LuongMonotonicAttention(use_scale=True, **kw),
}


# ------------------------------------------------------------ NumPy references


def energies(w, query, key):
    """`e + r` for queries `(B, Tq, dq)`: Bahdanau's (weights with a score
    vector) or Luong's `g * k^T W q` score, plus the score bias."""
    if "score_vector" in w:
        scores = reference.additive_scores(w, query, key)
    else:
        scores = reference.general_scores(w, query, key) * w.get("scale", 1.0)
    return scores + w["score_bias"]


def reference_alignment(energy, previous, mask, mode):
    """The alignment of one step, row by row, following Raffel et al.'s definitions."""
    energy, previous = np.asarray(energy, np.float64), np.asarray(previous, np.float64)
    mask = np.broadcast_to(mask, energy.shape)
    previous = np.broadcast_to(previous, energy.shape)
    out = np.zeros(energy.shape)
    length = energy.shape[-1]
    for index in np.ndindex(energy.shape[:-1]):
        e, a_prev, valid, a = energy[index], previous[index], mask[index], out[index]
        if mode == "hard":
            reached = np.flatnonzero(a_prev > 0)
            start = reached[0] if reached.size else length
            for j in range(start, length):
                if valid[j] and e[j] > 0:
                    a[j] = 1.0
                    break
            continue
        p = np.where(valid, sigmoid(e), 0.0)
        if mode == "recursive":
            q = 0.0
            for j in range(length):
                q = (1.0 - p[j - 1] if j > 0 else 0.0) * q + a_prev[j]
                a[j] = p[j] * q
        else:  # tfa's closed form
            cumprod = np.cumprod(np.concatenate([[1.0], 1.0 - p[:-1]]))
            a[:] = p * cumprod * np.cumsum(a_prev / np.clip(cumprod, 1e-10, 1.0))
    return out


def monotonic_step(w, query, memory, mask, previous, mode):
    """Context `(B, dv)` and alignment `(B, Ts)` for one query per example."""
    alignment = reference_alignment(energies(w, query[:, None, :], memory)[:, 0], previous, mask, mode)
    return np.einsum("bj,bjd->bd", alignment, memory), alignment


def soft_previous(rng, shape, mask):
    """A non-trivial previous alignment: positive, zero on padding, rows summing to < 1."""
    previous = rng.uniform(0.05, 1.0, shape) * mask
    return previous / (previous.sum(-1, keepdims=True) + 0.2)


def one_hot_previous(rng, shape, lengths):
    """One-hot previous alignments at random valid positions (one row all zeros)."""
    previous = np.zeros(shape)
    for index in np.ndindex(shape[:-1]):
        previous[index][rng.integers(0, lengths[index[0]])] = 1.0
    previous[(0,) * (len(shape) - 1)] = 0.0  # a row that chose nothing at the last step
    return previous


def built(variant, rng, dtype="float32", **kwargs):
    layer = VARIANTS[variant](dtype=dtype, **kwargs)
    layer(
        rng.normal(size=(B, DQ)).astype(dtype),
        rng.normal(size=(B, TS, DV)).astype(dtype),
        key=rng.normal(size=(B, TS, DK)).astype(dtype),
    )
    randomize(layer, rng)
    return layer


def centre_energies(layer, query, key):
    """Shift the score bias so that about half the energies are positive
    (else a hard step may choose nothing and a test would check nothing)."""
    energy = energies(weights_of(layer), np.asarray(query, float), np.asarray(key, float))
    layer.score_bias.assign(layer.score_bias.numpy() - np.median(energy))


def step_inputs(rng, dtype="float32"):
    query = rng.normal(size=(B, TQ, DQ)).astype(dtype)
    value = rng.normal(size=(B, TS, DV)).astype(dtype)
    key = rng.normal(size=(B, TS, DK)).astype(dtype)
    return query, value, key


def run_attend(layer, query, value, key, mask, previous, training=None):
    context, alignment = layer.attend(
        layer.project_query(query),
        layer.project_key(key),
        value,
        None if mask is None else mask[:, None, :],
        training=training,
        previous_alignment=previous,
    )
    return np.asarray(context), np.asarray(alignment)


# ---------------------------------------------------------------- the formula


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_step_matches_numpy_reference_with_masks_and_a_previous_alignment(variant, mode):
    rng = np.random.default_rng(0)
    layer = built(variant, rng, mode=mode)
    query, value, key = step_inputs(rng)
    centre_energies(layer, query, key)
    lengths = [6, 4, 2]
    mask = lengths_mask(lengths, TS)
    if mode == "hard":
        previous = one_hot_previous(rng, (B, TQ, TS), lengths)
    else:
        previous = soft_previous(rng, (B, TQ, TS), mask[:, None, :])
    context, alignment = run_attend(layer, query, value, key, mask, previous.astype("float32"))

    w = weights_of(layer)
    want = reference_alignment(energies(w, query.astype(float), key.astype(float)), previous, mask[:, None, :], mode)
    np.testing.assert_allclose(alignment, want, atol=1e-5)
    np.testing.assert_allclose(context, want @ value.astype(float), atol=1e-5)
    assert (alignment[1, :, 4:] == 0).all() and (alignment[2, :, 2:] == 0).all(), "padding gets exactly 0"
    assert (alignment.sum(-1) <= 1 + 1e-6).all()
    if mode == "hard":
        assert set(np.unique(alignment)) <= {0.0, 1.0}
        assert (alignment.sum(-1) <= 1).all() and alignment.sum() >= 2, "choices happen (and at most one per row)"
        chosen, started = alignment.argmax(-1), previous.argmax(-1)
        has_choice = alignment.sum(-1) == 1
        assert (chosen[has_choice] >= started[has_choice]).all(), "never before the previous choice"
        assert (chosen[has_choice] > started[has_choice]).any(), "some rows move on"
        assert (alignment[0, 0] == 0).all(), "nothing chosen before: nothing chosen now"
    else:
        assert (alignment > 1e-3).sum() > 10, "a soft spread over several positions"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_standalone_call_is_one_step_from_the_initial_alignment(variant, mode):
    rng = np.random.default_rng(1)
    layer = built(variant, rng, mode=mode)
    query, value, key = step_inputs(rng)
    centre_energies(layer, query[:, :1], key)
    mask = lengths_mask([6, 3, 1], TS)
    context, alignment = layer(query[:, 0], value, key=key, value_mask=mask, return_attention_scores=True)
    assert tuple(context.shape) == (B, DV) and tuple(alignment.shape) == (B, TS)
    initial = np.eye(TS)[0]
    want = reference_alignment(
        energies(weights_of(layer), query[:, :1].astype(float), key.astype(float)), initial, mask[:, None, :], mode
    )[:, 0]
    np.testing.assert_allclose(alignment, want, atol=1e-5)
    np.testing.assert_allclose(context, np.einsum("bj,bjd->bd", want, value), atol=1e-5)
    assert (np.asarray(alignment)[2, 1:] == 0).all()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_decoder_step_protocol_carries_the_previous_alignment(variant, mode):
    rng = np.random.default_rng(11)
    layer = built(variant, rng, mode=mode)
    query, value, key = step_inputs(rng)
    centre_energies(layer, query[:, :1], key)
    mask = lengths_mask([6, 4, 2], TS)
    assert layer.attention_state_size == [None]
    (state,) = layer.initial_attention_state(value)
    np.testing.assert_array_equal(state, np.eye(TS)[[0, 0, 0]])
    w, projected_key = weights_of(layer), layer.project_key(key)
    for t in range(3):
        context, alignment, (new_state,) = layer.attend_step(query[:, t], projected_key, value, mask, [state])
        want = reference_alignment(
            energies(w, query[:, t : t + 1].astype(float), key.astype(float)),
            np.asarray(state)[:, None],
            mask[:, None, :],
            mode,
        )[:, 0]
        np.testing.assert_allclose(alignment, want, atol=1e-5)
        np.testing.assert_allclose(context, np.einsum("bj,bjd->bd", want, value), atol=1e-5)
        np.testing.assert_array_equal(new_state, alignment)
        state = new_state


def test_initial_alignment_is_one_hot_at_position_zero_in_the_memory_dtype():
    layer = ka.LuongMonotonicAttention()
    for dtype in ("float32", "float16", "float64"):
        initial = layer.initial_alignment(np.ones((2, 5, 3), dtype))
        assert initial.dtype == dtype
        np.testing.assert_array_equal(initial, [[1, 0, 0, 0, 0]] * 2)


def test_parallel_equals_recursive_in_float64_when_p_is_not_extreme():
    rng = np.random.default_rng(2)
    p = rng.uniform(0.02, 0.98, size=(4, 3, 12))
    previous = soft_previous(rng, p.shape, np.ones(p.shape))
    parallel = np.asarray(monotonic_alignment(p, previous, "parallel"))
    recursive = np.asarray(monotonic_alignment(p, previous, "recursive"))
    np.testing.assert_allclose(parallel, recursive, rtol=0, atol=1e-12)
    # Through the layers: same weights, the two modes, float64.
    for variant in sorted(VARIANTS):
        layer = built(variant, rng, dtype="float64", mode="parallel")
        twin = built(variant, rng, dtype="float64", mode="recursive")
        twin.set_weights(layer.get_weights())
        query, value, key = step_inputs(rng, "float64")
        mask = lengths_mask([6, 5, 3], TS)
        previous = soft_previous(rng, (B, TQ, TS), mask[:, None, :])
        got, want = (run_attend(each, query, value, key, mask, previous) for each in (layer, twin))
        assert got[1].dtype == np.float64
        np.testing.assert_allclose(got[1], want[1], atol=1e-12)
        np.testing.assert_allclose(got[0], want[0], atol=1e-12)


# ------------------------------------------------------------------ the noise


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_sigmoid_noise_only_in_training_and_seeded(variant):
    rng = np.random.default_rng(3)
    query, value, key = step_inputs(rng)
    noisy = built(variant, rng, sigmoid_noise=1.0, seed=7)
    clean = built(variant, rng)
    clean.set_weights(noisy.get_weights())
    mask = lengths_mask([6, 4, 2], TS)

    def alignment(layer, training):
        return np.asarray(
            layer(query, value, key=key, value_mask=mask, return_attention_scores=True, training=training)[1]
        )

    np.testing.assert_array_equal(alignment(noisy, False), alignment(clean, False))
    np.testing.assert_array_equal(alignment(noisy, None), alignment(clean, False))
    trained = alignment(noisy, True)
    assert np.abs(trained - alignment(clean, True)).max() > 1e-2, "noise changes training outputs"
    assert (trained[1, :, 4:] == 0).all(), "noise does not reach padding"
    same_seed = built(variant, rng, sigmoid_noise=1.0, seed=7)
    same_seed.set_weights(noisy.get_weights())
    other_seed = built(variant, rng, sigmoid_noise=1.0, seed=8)
    other_seed.set_weights(noisy.get_weights())
    np.testing.assert_array_equal(alignment(same_seed, True), trained)
    assert np.abs(alignment(other_seed, True) - trained).max() > 1e-2


# ------------------------------------------------------------------ gradients


@pytest.mark.parametrize("mode", ["parallel", "recursive"])
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_gradients_match_finite_differences_in_float64(variant, mode):
    rng = np.random.default_rng(4)
    b, tq, ts, dq, dk, dv = 2, 2, 4, 3, 3, 2
    layer = VARIANTS[variant](dtype="float64", mode=mode)
    query, value, key = rng.normal(size=(b, tq, dq)), rng.normal(size=(b, ts, dv)), rng.normal(size=(b, ts, dk))
    layer(query, value, key=key)
    randomize(layer, rng)
    mask = lengths_mask([4, 3], ts)[:, None, :]
    previous = soft_previous(rng, (b, tq, ts), mask)
    readout = rng.normal(size=(b, tq, dv))

    def loss(q, v, k, a):
        context, _ = layer.attend(layer.project_query(q), layer.project_key(k), v, mask, previous_alignment=a)
        return tf.reduce_sum(context * readout)

    arrays = [query, value, key, previous]
    tensors = [tf.constant(x) for x in arrays]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value_of_loss = loss(*tensors)
    analytic = tape.gradient(value_of_loss, tensors + layer.trainable_weights)
    assert value_of_loss.dtype == tf.float64
    assert_input_gradients_match(loss, arrays, analytic[:4], names=["query", "value", "key", "previous"])
    assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[4:], min_effect=1e-6)


# ---------------------------------------------------------------- in the cells


def gru_monotonic_reference(cell, inputs, memory, mask, target_mask, state, mode):
    """AttentionGRUCell (its source equations) with Bahdanau monotonic attention."""
    w, a = own_weights(cell), weights_of(cell.attention)
    u = cell.units
    previous = np.eye(memory.shape[1])[[0] * memory.shape[0]]
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        context, alignment = monotonic_step(a, state, memory, mask, previous, mode)
        x_part = inputs[:, t] @ w["input_kernel"] + context @ w["context_kernel"] + w["bias"]
        U = w["recurrent_kernel"]
        r = sigmoid(x_part[:, :u] + state @ U[:, :u])
        z = sigmoid(x_part[:, u : 2 * u] + state @ U[:, u : 2 * u])
        candidate = np.tanh(x_part[:, 2 * u :] + (r * state) @ U[:, 2 * u :])
        keep = target_mask[:, t : t + 1]
        output = np.concatenate([z * state + (1 - z) * candidate, context], -1)
        # A padded target step keeps the states (the alignment too) and repeats the output.
        if outputs:
            output = np.where(keep, output, outputs[-1])
            alignment = np.where(keep, alignment, alignments[-1])
        state = np.where(keep, z * state + (1 - z) * candidate, state)
        previous = np.where(keep, alignment, previous)
        outputs.append(output)
        alignments.append(alignment)
    return np.stack(outputs, 1), state, np.stack(alignments, 1)


def wrapper_monotonic_reference(wrapper, inputs, memory, mask, state, mode):
    """AttentionWrapper around a Keras GRUCell (gates z, r, h; reset after) with Luong monotonic attention."""
    inner, a = weights_of(wrapper.cell), weights_of(wrapper.attention)
    kernel_c = weights_of(wrapper)["attention_kernel"]
    u = wrapper.cell.units
    hidden, attention = state
    previous = np.eye(memory.shape[1])[[0] * memory.shape[0]]
    outputs, alignments = [], []
    for t in range(inputs.shape[1]):
        x = np.concatenate([inputs[:, t], attention], -1)
        gx = x @ inner["kernel"] + inner["bias"][0]
        gh = hidden @ inner["recurrent_kernel"] + inner["bias"][1]
        z = sigmoid(gx[:, :u] + gh[:, :u])
        r = sigmoid(gx[:, u : 2 * u] + gh[:, u : 2 * u])
        hidden = z * hidden + (1 - z) * np.tanh(gx[:, 2 * u :] + r * gh[:, 2 * u :])
        context, previous = monotonic_step(a, hidden, memory, mask, previous, mode)
        attention = np.tanh(np.concatenate([context, hidden], -1) @ kernel_c)
        outputs.append(attention)
        alignments.append(previous)
    return np.stack(outputs, 1), hidden, np.stack(alignments, 1)


def cell_data(rng):
    inputs = rng.normal(size=(B, 5, 3)).astype("float32")
    memory = rng.normal(size=(B, TS, DV)).astype("float32")
    return inputs, memory, lengths_mask([6, 4, 3], TS)


def assert_hard_alignments_move_forward(alignments):
    alignments = np.asarray(alignments)
    assert set(np.unique(alignments)) <= {0.0, 1.0}
    assert (alignments.sum(-1) <= 1).all()
    chosen = alignments.sum(-1) == 1
    assert chosen[:, 0].all(), "the test needs a choice at the first step"
    positions = np.where(chosen, alignments.argmax(-1), TS)  # nothing chosen: past the end
    assert (np.diff(positions, axis=1) >= 0).all(), "monotonic positions over steps"
    assert (np.diff(positions, axis=1) > 0).any(), "the test needs a move"


@pytest.mark.parametrize("mode", MODES)
def test_gru_cell_with_bahdanau_monotonic_matches_step_reference(mode):
    rng = np.random.default_rng(5)
    inputs, memory, mask = cell_data(rng)
    cell = ka.AttentionGRUCell(6, ka.BahdanauMonotonicAttention(4, mode=mode))
    decoder = ka.AttentionDecoder(cell, return_state=True, return_alignments=True)
    decoder(inputs, memory)
    randomize(cell, rng)
    cell.attention.score_bias.assign(0.0)
    state = rng.normal(size=(B, 6)).astype("float32")
    target_mask = lengths_mask([5, 4, 2], 5)
    outputs, final, alignments = decoder(
        inputs, memory, memory_mask=mask, inputs_mask=target_mask, initial_state=[state]
    )
    want_outputs, want_state, want_alignments = gru_monotonic_reference(
        cell, inputs, memory, mask, target_mask, state, mode
    )
    np.testing.assert_allclose(alignments, want_alignments, atol=1e-5)
    np.testing.assert_allclose(outputs, want_outputs, atol=1e-5)
    np.testing.assert_allclose(final, want_state, atol=1e-5)
    assert (np.asarray(alignments)[2, :, 3:] == 0).all()
    if mode == "hard":
        assert_hard_alignments_move_forward(alignments)


@pytest.mark.parametrize("mode", MODES)
def test_wrapper_with_luong_monotonic_matches_step_reference(mode):
    rng = np.random.default_rng(6)
    inputs, memory, mask = cell_data(rng)
    wrapper = ka.AttentionWrapper(
        keras.layers.GRUCell(6), ka.LuongMonotonicAttention(use_scale=True, mode=mode), attention_layer_size=4
    )
    decoder = ka.AttentionDecoder(wrapper, return_state=True, return_alignments=True)
    decoder(inputs, memory)
    randomize(wrapper, rng)
    wrapper.attention.score_bias.assign(0.3)
    state = [rng.normal(size=(B, 6)).astype("float32"), rng.normal(size=(B, 4)).astype("float32")]
    outputs, hidden, _, alignments = decoder(inputs, memory, memory_mask=mask, initial_state=state)
    want_outputs, want_hidden, want_alignments = wrapper_monotonic_reference(wrapper, inputs, memory, mask, state, mode)
    np.testing.assert_allclose(alignments, want_alignments, atol=1e-5)
    np.testing.assert_allclose(outputs, want_outputs, atol=1e-5)
    np.testing.assert_allclose(hidden, want_hidden, atol=1e-5)
    if mode == "hard":
        assert_hard_alignments_move_forward(alignments)


def test_sigmoid_noise_reaches_a_decoder_in_training_only():
    rng = np.random.default_rng(12)
    inputs, memory, mask = cell_data(rng)
    noisy = ka.AttentionDecoder(ka.AttentionGRUCell(6, ka.BahdanauMonotonicAttention(4, sigmoid_noise=1.0, seed=1)))
    clean = ka.AttentionDecoder(ka.AttentionGRUCell(6, ka.BahdanauMonotonicAttention(4)))
    noisy(inputs, memory)
    clean(inputs, memory)
    clean.set_weights(noisy.get_weights())

    def run(decoder, training):
        return np.asarray(decoder(inputs, memory, memory_mask=mask, training=training))

    np.testing.assert_array_equal(run(noisy, False), run(clean, False))
    np.testing.assert_array_equal(run(clean, True), run(clean, False))
    assert np.abs(run(noisy, True) - run(clean, True)).max() > 1e-3


# ----------------------------------------------------------- Keras integration


def seq2seq(kind, vocabulary=12, units=8, with_alignments=True, **attention_kwargs):
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    memory = keras.layers.Bidirectional(keras.layers.GRU(units // 2, return_sequences=True))(
        keras.layers.Embedding(vocabulary, 5, mask_zero=True)(source)
    )
    if kind == "gru":
        cell = ka.AttentionGRUCell(units, ka.BahdanauMonotonicAttention(6, **attention_kwargs))
    else:
        cell = ka.AttentionWrapper(
            keras.layers.GRUCell(units),
            ka.LuongMonotonicAttention(use_scale=True, **attention_kwargs),
            attention_layer_size=units,
        )
    decoded = ka.AttentionDecoder(cell, return_alignments=with_alignments, name="decoder")(
        keras.layers.Embedding(vocabulary, 5, mask_zero=True)(target), memory
    )
    if not with_alignments:
        return keras.Model([source, target], keras.layers.Dense(vocabulary)(decoded))
    outputs, alignments = decoded
    return keras.Model([source, target], [keras.layers.Dense(vocabulary)(outputs), alignments])


@pytest.mark.parametrize(
    "kind, attention_kwargs",
    [("gru", {"mode": "parallel", "sigmoid_noise": 0.5, "score_bias_init": -1.0}), ("wrapper", {"mode": "recursive"})],
    ids=["gru_bahdanau_parallel", "wrapper_luong_recursive"],
)
def test_keras_file_round_trip_and_export(kind, attention_kwargs, tmp_path):
    rng = np.random.default_rng(7)
    model = seq2seq(kind, **attention_kwargs)
    randomize_model(model, rng)
    inputs = [token_batch(rng, 3, 6, 12, 2), token_batch(rng, 3, 4, 12)]
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    attention = loaded.get_layer("decoder").cell.attention
    assert attention.get_config() == model.get_layer("decoder").cell.attention.get_config()
    assert attention.mode == attention_kwargs["mode"]
    for got, want in zip(loaded(inputs), model(inputs)):
        np.testing.assert_array_equal(got, want)
    batches = [
        {"source": inputs[0], "target": inputs[1]},
        {"source": token_batch(rng, 1, 9, 12, 2), "target": token_batch(rng, 1, 2, 12)},
    ]
    assert_export_parity(model, batches, tmp_path, atol=1e-5)


@pytest.mark.parametrize("mode", ["parallel", "recursive"])
def test_mixed_float16_is_finite_with_float32_variables(mode):
    keras.config.set_dtype_policy("mixed_float16")
    model = seq2seq("gru", mode=mode, score_bias_init=-4.0)
    rng = np.random.default_rng(8)
    randomize_model(model.get_layer("decoder"), rng, scale=2.0)  # large energies
    source = token_batch(rng, 2, 30, 12, 30)
    source[1, 5:] = 0
    logits, alignments = model([source, token_batch(rng, 2, 4, 12)])
    assert logits.dtype == "float16"
    assert all(w.dtype == "float32" for w in model.get_layer("decoder").weights)
    alignments = np.asarray(alignments, np.float32)
    assert np.isfinite(np.asarray(logits, np.float32)).all() and np.isfinite(alignments).all()
    assert (alignments >= 0).all() and (alignments.sum(-1) <= 1 + 1e-2).all()
    assert (alignments[1, :, 5:] == 0).all()


@pytest.mark.parametrize(
    "kind, attention_kwargs",
    [("gru", {"mode": "parallel", "sigmoid_noise": 1.0, "seed": 3}), ("wrapper", {"mode": "recursive"})],
    ids=["gru_bahdanau_parallel_noisy", "wrapper_luong_recursive"],
)
def test_trains_with_xla_and_unknown_lengths(kind, attention_kwargs):
    rng = np.random.default_rng(9)
    model = seq2seq(kind, with_alignments=False, **attention_kwargs)
    model.compile(keras.optimizers.Adam(0.02), ka.SequenceLoss(), jit_compile=True)
    ka.training.build_optimizer(model)
    batches = []
    # Two shapes (batch size, source and target lengths all differ, the target
    # once longer than the source), the first again with other data: each new
    # shape is one more XLA compile of the train step, and the second already
    # runs the step traced once for unknown lengths on a shape it was not
    # first compiled for.
    for batch, source_length, target_length in ((8, 7, 5), (6, 4, 6), (8, 7, 5)):
        source, target = token_batch(rng, batch, source_length, 12, 2), token_batch(rng, batch, target_length, 12, 2)
        batches.append(((source, target), target))
    attention = model.get_layer("decoder").cell.attention
    before = [w.numpy().copy() for w in attention.trainable_weights]
    history = model.fit(unknown_shape_dataset(batches), epochs=3, shuffle=False, verbose=0).history["loss"]
    assert np.isfinite(history).all() and history[-1] < history[0]
    for old, new in zip(before, attention.trainable_weights):
        assert not np.allclose(old, new.numpy()), new.path
    # Other lengths reuse the model (eagerly here: one more XLA compile would only cost time).
    logits = np.asarray(model([token_batch(rng, 2, 9, 12), token_batch(rng, 2, 3, 12)]))
    assert logits.shape == (2, 3, 12) and np.isfinite(logits).all()


def test_greedy_inference_with_hard_attention_exports_with_identical_ids(tmp_path):
    rng = np.random.default_rng(10)
    cell = ka.AttentionGRUCell(7, ka.BahdanauMonotonicAttention(4, mode="hard"))
    embedding, output_layer = keras.layers.Embedding(9, 3), keras.layers.Dense(9)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.Embedding(9, 6, mask_zero=True)(source)
    decoded = ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, max_length=6)(memory)
    model = keras.Model(source, decoded)
    for layer in (cell, embedding, output_layer):
        randomize(layer, rng)
    cell.attention.score_bias.assign(0.0)
    sources = token_batch(rng, 4, 7, 9, 3)
    expected = model(sources)
    alignments = np.asarray(expected["alignments"])
    assert set(np.unique(alignments)) <= {0.0, 1.0} and (alignments.sum(-1) <= 1).all()
    assert alignments[:, 0].sum() > 0
    model.save(tmp_path / "decode.keras")
    np.testing.assert_array_equal(keras.saving.load_model(tmp_path / "decode.keras")(sources)["ids"], expected["ids"])
    keras_onnx_export(model, tmp_path / "decode.onnx")
    session = onnxruntime.InferenceSession(str(tmp_path / "decode.onnx"), providers=["CPUExecutionProvider"])
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"source": sources})))
    np.testing.assert_array_equal(got["ids"], expected["ids"])
    np.testing.assert_array_equal(got["alignments"], alignments)
    np.testing.assert_allclose(got["scores"], expected["scores"], atol=1e-4)


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: ka.BahdanauMonotonicAttention(4, mode="soft"),
            r"BahdanauMonotonicAttention: unknown `mode` 'soft'; expected one of 'parallel', 'recursive', 'hard'",
        ),
        (lambda: ka.LuongMonotonicAttention(mode="Hard"), r"LuongMonotonicAttention: unknown `mode` 'Hard'"),
        (
            lambda: ka.BahdanauMonotonicAttention(4, sigmoid_noise=-1.0),
            r"BahdanauMonotonicAttention: `sigmoid_noise` must be a finite number >= 0; got -1.0",
        ),
        (
            lambda: ka.LuongMonotonicAttention(sigmoid_noise="1"),
            r"`sigmoid_noise` must be a finite number >= 0; got '1'",
        ),
        (
            lambda: ka.BahdanauMonotonicAttention(0),
            r"BahdanauMonotonicAttention: `units` must be a positive integer; got 0",
        ),
        (
            lambda: ka.LuongMonotonicAttention(score_bias_init=float("nan")),
            r"`score_bias_init` must be a finite number; got nan",
        ),
        (
            lambda: monotonic_alignment(np.ones((1, 2)), np.ones((1, 2)), "soft"),
            r"monotonic_alignment: unknown `mode` 'soft'",
        ),
    ],
)
def test_bad_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_get_config_round_trip(variant):
    rng = np.random.default_rng(11)
    layer = built(variant, rng, mode="recursive", sigmoid_noise=0.25, score_bias_init=-2.0, seed=5)
    config = layer.get_config()
    assert {k: config[k] for k in ("mode", "sigmoid_noise", "score_bias_init", "seed")} == {
        "mode": "recursive",
        "sigmoid_noise": 0.25,
        "score_bias_init": -2.0,
        "seed": 5,
    }
    assert "dropout" not in config
    clone = type(layer).from_config(config)
    assert clone.get_config() == config
    fresh = VARIANTS[variant](score_bias_init=-2.0)
    fresh(np.zeros((1, DQ), "float32"), np.zeros((1, TS, DV), "float32"))
    assert float(fresh.score_bias.numpy()) == -2.0
    assert "score_bias" in [w.path.split("/")[-1] for w in fresh.trainable_weights]
