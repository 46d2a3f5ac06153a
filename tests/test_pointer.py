"""Pointer networks: PointerAttention's logits and the PointerNetwork decoder.

The layer is checked against a NumPy reference of `v^T tanh(W e_n + U h_m)`
fed its own weights; the network is trained on a small sorting task and its
decoders are checked for the acceptance criterion (never padding, never a
position twice when told not to), on the trained model and on a model built
so that, unmasked, the argmax would repeat and would pick padding.
"""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.decoding import DiverseBeamSearch, beam_search, greedy_search
from keras_attention.layers.pointer import PointerAttention
from keras_attention.models.pointer import END, PointerNetwork
from tests import reference
from tests.export_check import assert_export_parity
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import lengths_mask, randomize, weights_of

F32_MIN = float(np.finfo("float32").min)
B, TQ, TS, DQ, DE = 3, 4, 6, 5, 3


def _inputs(rng, rank, dtype="float32"):
    query_shape = (B, DQ) if rank == 2 else (B, TQ, DQ)
    return rng.normal(size=query_shape).astype(dtype), rng.normal(size=(B, TS, DE)).astype(dtype)


def _built_attention(rng, query, memory, **kwargs):
    layer = PointerAttention(4, **kwargs)
    layer(query, memory)
    randomize(layer, rng)
    return layer


def _random_chosen(rng, shape):
    chosen = rng.random(shape) < 0.4
    chosen[..., 0] = False  # keep at least one valid position per row
    return chosen


# ------------------------------------------------------------ PointerAttention


@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("use_bias", [False, True], ids=["paper", "bias"])
def test_logits_match_numpy_reference_with_padding_and_chosen_masks(rank, use_bias):
    rng = np.random.default_rng(0)
    query, memory = _inputs(rng, rank)
    layer = _built_attention(rng, query, memory, use_bias=use_bias)
    padding = lengths_mask([6, 3, 1], TS)
    chosen = _random_chosen(rng, (B, TS) if rank == 2 else (B, TQ, TS))
    logits = np.asarray(layer(query, memory, memory_mask=padding, chosen_mask=chosen))

    q3 = query[:, None] if rank == 2 else query
    want = reference.additive_scores(weights_of(layer), q3.astype(float), memory.astype(float))
    if rank == 2:
        want = want[:, 0]
    valid = (padding[:, None] if rank == 3 else padding) & ~chosen
    assert logits.dtype == np.float32 and logits.shape == want.shape
    np.testing.assert_allclose(logits[valid], want[valid], atol=1e-5)
    assert (logits[~valid] == F32_MIN).all()
    assert valid.any() and (~valid).any()
    # No masks: the raw scores everywhere.
    np.testing.assert_allclose(layer(query, memory), want, atol=1e-5)


def test_hand_computed_score():
    """One position, units 1: s = v tanh(W e + U h) with scalars."""
    layer = PointerAttention(1)
    layer(np.zeros((1, 1), "float32"), np.zeros((1, 2, 1), "float32"))
    layer.set_weights([np.array([[0.5]]), np.array([[2.0]]), np.array([3.0])])  # U, W, v
    logits = layer(np.array([[1.0]], "float32"), np.array([[[0.25], [-1.0]]], "float32"))
    np.testing.assert_allclose(logits, [[3 * np.tanh(1.0), 3 * np.tanh(-1.5)]], rtol=1e-6)


def test_masked_positions_get_zero_probability_and_log_softmax_stays_finite():
    rng = np.random.default_rng(1)
    query, memory = _inputs(rng, 3)
    layer = _built_attention(rng, query, memory * 20)  # sharp, large logits too
    padding = lengths_mask([6, 2, 0], TS)  # example 2: no valid position at all
    chosen = np.zeros((B, TQ, TS), bool)
    chosen[0, 1:, 0] = chosen[0, 2:, 3] = True
    logits = layer(query, memory * 20, memory_mask=padding, chosen_mask=chosen)
    probabilities = np.asarray(tf.nn.softmax(logits))
    log_probabilities = np.asarray(tf.nn.log_softmax(logits))
    assert (probabilities[0, 1:, 0] == 0).all() and (probabilities[0, 2:, 3] == 0).all()
    assert (probabilities[1, :, 2:] == 0).all()
    np.testing.assert_allclose(probabilities[:2].sum(-1), 1.0, atol=1e-6)
    assert np.isfinite(log_probabilities).all()
    # The fully masked row: all logits the finite minimum, log-softmax -log(Ts).
    assert (np.asarray(logits)[2] == F32_MIN).all()
    np.testing.assert_allclose(log_probabilities[2], -np.log(TS), rtol=1e-6)
    np.testing.assert_array_equal(ka.masked_softmax(logits[2:], padding[2:, None]), 0.0)
    # The cross-entropy of a valid target is finite even beside masked logits.
    loss = keras.losses.sparse_categorical_crossentropy(np.zeros((B, TQ)), logits, from_logits=True)
    assert np.isfinite(np.asarray(loss)[:2]).all()


def test_keras_mask_of_the_memory_is_used_and_the_query_mask_passes_on():
    rng = np.random.default_rng(2)
    query, memory = _inputs(rng, 3)
    layer = _built_attention(rng, query, memory)
    memory[1, 4:] = 0.0
    memory_with_mask = keras.layers.Masking(0.0)(memory)
    query = np.where(np.arange(TQ)[None, :, None] < 2, query, 0.0).astype("float32")
    logits = layer(keras.layers.Masking(0.0)(query), memory_with_mask)
    np.testing.assert_array_equal(logits, layer(query, memory, memory_mask=np.abs(memory).sum(-1) > 0))
    assert (np.asarray(logits)[1, :, 4:] == F32_MIN).all()
    np.testing.assert_array_equal(logits._keras_mask, np.broadcast_to(np.arange(TQ) < 2, (B, TQ)))


def test_gradients_match_finite_differences_in_float64():
    rng = np.random.default_rng(3)
    query = rng.normal(size=(2, 2, DQ))
    memory = rng.normal(size=(2, 4, DE))
    padding = lengths_mask([4, 3], 4)
    chosen = np.zeros((2, 2, 4), bool)
    chosen[:, 1, 1] = True
    layer = PointerAttention(3, use_bias=True, dtype="float64")
    layer(query, memory)
    randomize(layer, rng)
    readout = rng.normal(size=(2, 2, 4))

    def loss(q, m):
        # Probabilities, not log-probabilities: a masked log-probability is
        # about -1.8e308 and would swamp any finite difference.
        logits = layer(q, m, memory_mask=padding, chosen_mask=chosen)
        assert logits.dtype == tf.float64
        return tf.reduce_sum(tf.nn.softmax(logits) * readout)

    tensors = [tf.constant(query), tf.constant(memory)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value = loss(*tensors)
    analytic = tape.gradient(value, tensors + layer.trainable_weights)
    assert_input_gradients_match(loss, [query, memory], analytic[:2], names=["query", "memory"])
    # Masked positions get no gradient: memory row 3 of example 1 is padding.
    np.testing.assert_array_equal(analytic[1][1, 3], 0.0)
    assert np.abs(np.asarray(analytic[1][0, 3])).max() > 1e-4
    assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[2:], min_effect=1e-6)


def test_get_config_and_keras_file_round_trip(tmp_path):
    rng = np.random.default_rng(4)
    layer = PointerAttention(4, use_bias=True, kernel_initializer="he_normal", kernel_regularizer="l2", name="pointer")
    config = layer.get_config()
    clone = PointerAttention.from_config(config)
    assert clone.get_config() == config
    assert config["kernel_initializer"]["class_name"] == "HeNormal" and config["use_bias"]
    clone(*_inputs(rng, 2))
    assert len(clone.losses) == 3  # the l2 penalty of W, U and v

    query = keras.Input((None, DQ), name="query")
    memory = keras.Input((None, DE), name="memory")
    logits = layer(query, keras.layers.Masking(0.0)(memory))
    model = keras.Model([query, memory], logits)
    randomize(layer, rng)
    q, m = _inputs(rng, 3)
    m[0, 4:] = 0.0
    path = tmp_path / "pointer.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)  # safe mode, no custom_objects
    assert type(loaded.get_layer("pointer")) is PointerAttention
    np.testing.assert_array_equal(loaded([q, m]), model([q, m]))
    assert (np.asarray(model([q, m]))[0, :, 4:] == F32_MIN).all()


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_gives_float32_logits_and_float32_variables(policy):
    rng = np.random.default_rng(5)
    query, memory = _inputs(rng, 3)
    layer = PointerAttention(4, dtype=policy)
    padding = lengths_mask([6, 1, 3], TS)
    chosen = np.zeros((B, TQ, TS), bool)
    chosen[2, :, 0] = True
    logits = layer(query * 30, memory * 30, memory_mask=padding, chosen_mask=chosen)
    assert logits.dtype == "float32"
    assert all(variable.dtype == "float32" for variable in layer.weights) and len(layer.weights) == 3
    logits = np.asarray(logits)
    assert (logits[1, :, 1:] == F32_MIN).all() and (logits[2, :, 0] == F32_MIN).all()
    assert np.isfinite(logits).all()
    probabilities = np.asarray(tf.nn.softmax(logits))
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    # The only valid position takes all the mass (TensorFlow's CPU softmax
    # rounds it to 1 - 6e-8 here); padding gets exactly none.
    np.testing.assert_allclose(probabilities[1, :, 0], 1.0, rtol=0, atol=1e-6)
    assert (probabilities[1, :, 1:] == 0).all()


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: PointerAttention(0), r"PointerAttention: `units` must be a positive integer; got 0"),
        (
            lambda: PointerAttention(2)(np.zeros((2, 3, 4, 5)), np.zeros((2, 6, 3))),
            r"`query` must have rank 2 \(batch, dq\) or 3 \(batch, Tq, dq\); got shape \(2, 3, 4, 5\)",
        ),
        (
            lambda: PointerAttention(2)(np.zeros((2, 4)), np.zeros((2, 6))),
            r"`memory` must have rank 3 \(batch, Ts, de\); got shape \(2, 6\)",
        ),
        (
            lambda: PointerAttention(2)(np.zeros((3, 4)), np.zeros((2, 6, 3))),
            r"`query` and `memory` must have the same batch size; got shapes \(3, 4\) and \(2, 6, 3\)",
        ),
        (
            lambda: PointerAttention(2)(np.zeros((2, 4)), np.zeros((2, 6, 3)), memory_mask=np.ones((2, 5), bool)),
            r"`memory_mask` must have shape \(batch, Ts\) = \(2, 6\); got shape \(2, 5\)",
        ),
        (
            lambda: PointerAttention(2)(np.zeros((2, 4)), np.zeros((2, 6, 3)), chosen_mask=np.ones((2, 3, 6), bool)),
            r"`chosen_mask` must have shape \(batch, Ts\) = \(2, 6\); got shape \(2, 3, 6\)",
        ),
        (
            lambda: PointerAttention(2)(np.zeros((2, 3, 4)), np.zeros((2, 6, 3)), chosen_mask=np.ones((2, 6), bool)),
            r"`chosen_mask` must have shape \(batch, Tq, Ts\) = \(2, 3, 6\); got shape \(2, 6\)",
        ),
    ],
    ids=["units", "query_rank", "memory_rank", "batch", "memory_mask", "chosen_mask_rank2", "chosen_mask_rank3"],
)
def test_attention_errors_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ------------------------------------------------------------- sorting task


N = 5  # the most numbers to sort


def sorting_batch(rng, batch, n=N, min_length=3):
    """Numbers in (0.05, 1) right-padded with 0; targets: 1-based ascending order, then 0."""
    lengths = rng.integers(min_length, n + 1, size=batch)
    valid = lengths_mask(lengths, n)
    numbers = np.where(valid, rng.uniform(0.05, 1.0, size=(batch, n)), 0.0).astype("float32")
    order = np.argsort(np.where(valid, numbers, np.inf), axis=1) + 1
    targets = np.zeros((batch, n + 1), "int32")
    targets[:, :n] = np.where(valid, order, 0)
    return numbers[..., None], targets, lengths


def pointer_models(network):
    """Training model `[numbers, targets] -> logits`, inference model `numbers -> ids`."""
    numbers = keras.Input((None, 1), name="numbers")
    targets = keras.Input((None,), dtype="int32", name="targets")
    masked = keras.layers.Masking(0.0, name="padding")(numbers)
    train = keras.Model([numbers, targets], network([masked, targets]))
    infer = keras.Model(numbers, network(masked))
    return train, infer


@pytest.fixture(scope="module")
def trained():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    network = PointerNetwork(32, max_length=N + 1, name="pointer_network")
    train, infer = pointer_models(network)
    train.compile(keras.optimizers.Adam(0.01), loss=ka.SequenceLoss(), jit_compile=True)
    ka.training.build_optimizer(train)
    numbers, targets, _ = sorting_batch(rng, 4096)
    before = float(train.evaluate([numbers[:512], targets[:512]], targets[:512], verbose=0))
    history = train.fit([numbers, targets], targets, batch_size=128, epochs=4, verbose=0)
    test = sorting_batch(np.random.default_rng(1), 64)
    return types.SimpleNamespace(
        network=network, train=train, infer=infer, before=before, history=history.history["loss"], test=test
    )


def assert_valid_pointers(ids, lengths, complete):
    """Each row: distinct ids in 1..length, then only 0 (the end and after it).

    With `complete`, the ids before the end are a permutation of 1..length.
    """
    ids = np.asarray(ids)
    for row, length in zip(ids, lengths):
        ends = np.flatnonzero(row == END)
        stop = ends[0] if ends.size else len(row)
        pointed = row[:stop]
        assert (pointed >= 1).all() and (pointed <= length).all(), f"pointed at padding: {row}, length {length}"
        assert len(set(pointed)) == len(pointed), f"pointed twice at one position: {row}"
        assert (row[stop:] == END).all(), f"ids after the end: {row}"
        if complete:
            assert sorted(pointed) == list(range(1, length + 1)), f"not a permutation: {row}, length {length}"


def test_teacher_forced_training_on_sorting_reduces_the_loss(trained):
    assert trained.history[-1] < 0.25 * trained.before, (trained.before, trained.history)
    assert all(np.isfinite(trained.history))


def test_greedy_and_beam_decoding_sort_and_give_permutations_without_padding(trained):
    numbers, targets, lengths = trained.test
    greedy = np.asarray(trained.infer.predict(numbers, verbose=0))
    assert greedy.shape == (64, N + 1) and greedy.dtype == np.int32
    assert_valid_pointers(greedy, lengths, complete=True)
    assert np.mean((greedy == targets).all(-1)) > 0.6  # chance: about 1 / 5!
    beams = trained.network.decode(numbers, mask=lengths_mask(lengths, N), beam_width=3)
    assert tuple(beams["ids"].shape) == (64, 3, N + 1)
    for beam in range(3):
        assert_valid_pointers(beams["ids"][:, beam], lengths, complete=False)
    assert_valid_pointers(beams["ids"][:, 0], lengths, complete=True)
    assert np.mean((np.asarray(beams["ids"][:, 0]) == targets).all(-1)) > 0.6
    scores = np.asarray(beams["scores"])
    assert (np.diff(scores, axis=1) <= 1e-6).all(), "beams must come best first"


def test_padding_does_not_change_the_decoding(trained):
    numbers, _, lengths = trained.test
    padded = np.asarray(trained.infer(numbers[:8]))
    for row in range(8):
        alone = np.asarray(trained.infer(numbers[row : row + 1, : lengths[row]]))[0]
        np.testing.assert_array_equal(padded[row], alone)


def test_greedy_equals_beam_search_of_width_one(trained):
    numbers, _, lengths = trained.test
    step, state = trained.network.decoding_step(numbers, lengths_mask(lengths, N))
    greedy = greedy_search(step, state, END, END, N + 1)
    beam = beam_search(step, state, END, END, N + 1, beam_width=1)
    np.testing.assert_array_equal(beam["ids"][:, 0], greedy["ids"])
    np.testing.assert_array_equal(beam["lengths"][:, 0], greedy["lengths"])
    np.testing.assert_allclose(beam["log_probs"][:, 0], greedy["scores"], rtol=1e-5)
    np.testing.assert_array_equal(greedy["ids"], trained.infer(numbers))


def test_teacher_forced_logits_agree_with_the_decoding_steps(trained):
    """Feeding the greedy output back as targets reproduces the decoder's log-probabilities.

    The two paths (all steps at once with a cumulative chosen mask, and the
    in-graph loop with the mask in its state) must be the same model.
    """
    numbers, _, lengths = trained.test
    mask = lengths_mask(lengths, N)
    greedy = trained.network.decode(numbers, mask=mask)
    ids = np.asarray(greedy["ids"])
    logits = trained.network([numbers, ids], mask=mask)
    log_probs = np.asarray(tf.nn.log_softmax(logits))
    picked = np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    real = np.asarray(logits._keras_mask)
    np.testing.assert_array_equal(real.sum(1), greedy["lengths"])
    np.testing.assert_allclose((picked * real).sum(1), greedy["scores"], rtol=1e-4, atol=1e-4)


def test_teacher_forced_chosen_mask_is_the_union_of_earlier_targets():
    rng = np.random.default_rng(6)
    network = PointerNetwork(8)
    numbers = rng.uniform(0.1, 1.0, size=(2, 4, 2)).astype("float32")
    targets = np.array([[3, 1, 4, 2, 0, 0], [2, 1, 0, 0, 0, 0]], "int32")
    mask = lengths_mask([4, 2], 4)
    logits = np.asarray(network([numbers, targets], mask=mask))
    assert logits.shape == (2, 6, 5)
    for b in range(2):
        for step in range(6):
            chosen = set(targets[b, :step]) - {END}
            for position in range(5):
                masked = position in chosen or (position >= 1 and not mask[b, position - 1])
                assert (logits[b, step, position] == F32_MIN) == masked, (b, step, position)
    # The Keras mask: real steps up to and including the first end.
    np.testing.assert_array_equal(network([numbers, targets])._keras_mask, [[1, 1, 1, 1, 1, 0], [1, 1, 1, 0, 0, 0]])
    repeated = np.asarray(PointerNetwork(8, mask_chosen=False)([numbers, targets], mask=mask))
    assert (repeated[:, :, 0] > F32_MIN).all() and (repeated[0, :, 1:] > F32_MIN).all()


def test_sequence_loss_uses_the_real_steps_only(trained):
    numbers, targets, _ = trained.test
    logits = np.asarray(trained.train([numbers, targets]), np.float64)
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    nll = -np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    is_end = targets == END
    real = (np.cumsum(is_end, 1) - is_end) == 0
    want = (nll * real).sum() / real.sum()
    got = trained.train.evaluate([numbers, targets], targets, batch_size=len(targets), verbose=0)
    np.testing.assert_allclose(got, want, rtol=1e-4)
    assert abs(want - nll.mean()) > 1e-3, "padding steps must not count"


def test_decoding_compiles_with_xla(trained):
    numbers, _, lengths = trained.test
    mask = lengths_mask(lengths, N)
    for beam_width in (None, 3):
        eager = trained.network.decode(numbers, mask=mask, beam_width=beam_width)
        compiled = tf.function(
            lambda x, m, width=beam_width: trained.network.decode(x, mask=m, beam_width=width), jit_compile=True
        )(numbers, mask)
        np.testing.assert_array_equal(compiled["ids"], eager["ids"])
        np.testing.assert_allclose(compiled["scores"], eager["scores"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("search", ["greedy", "beam", "diverse"])
def test_decoding_exports_to_saved_model_and_onnx_with_identical_ids(trained, tmp_path, search):
    """Greedy, beam and diverse beam decoding, each loop exported alone (tf2onnx's optimizer
    grows faster than the graph), ids exact."""
    numbers = keras.Input((None, 1), name="numbers")
    masked = keras.layers.Masking(0.0)(numbers)
    options = {
        "greedy": {"beam_width": None},
        "beam": {"beam_width": 3},
        "diverse": {"search": DiverseBeamSearch(4, num_groups=2, diversity_strength=1.0)},
    }[search]
    # cuDNN LSTMs (a GPU's default) do not convert to ONNX.
    config = {**trained.network.get_config(), **options, "use_cudnn": False}
    network = PointerNetwork.from_config({**config, "name": f"pointer_{search}"})
    infer = keras.Model(numbers, network(masked))
    network.set_weights(trained.network.get_weights())
    test_numbers = trained.test[0]
    batches = [
        {"numbers": test_numbers[:7]},
        {"numbers": test_numbers[7:8, :4]},  # another batch size and length
    ]
    assert_export_parity(infer, batches, tmp_path, atol=0)
    decoded = infer(test_numbers[:7])
    if search == "greedy":
        np.testing.assert_array_equal(decoded, trained.infer(test_numbers[:7]))
    elif search == "beam":
        assert_valid_pointers(decoded, trained.test[2][:7], complete=True)
    else:  # a diverse beam's best may end before it has pointed at every position
        assert_valid_pointers(decoded, trained.test[2][:7], complete=False)


def test_keras_file_round_trip_of_both_models(trained, tmp_path):
    config = trained.network.get_config()
    assert PointerNetwork.from_config(config).get_config() == config
    numbers, targets, _ = trained.test
    for name, model, inputs in (
        ("train", trained.train, [numbers, targets]),
        ("infer", trained.infer, numbers),
    ):
        path = tmp_path / f"{name}.keras"
        model.save(path)
        loaded = keras.saving.load_model(path)  # safe mode, no custom_objects
        assert type(loaded.get_layer("pointer_network")) is PointerNetwork
        np.testing.assert_array_equal(loaded(inputs), model(inputs))


# ------------------------------------------- a model whose argmax would repeat


def rigged_network(mask_chosen, max_length, beam_width=None, dim=2, units=8):
    """Scores that ignore the decoder state: the same position wins every step.

    With `U = 0` the score `s_k = v^T tanh(W e_k)` is constant over steps;
    `W = 3 I`, `v = 1` and `e_end = -10` give the end the lowest possible
    score (-units), so, unmasked, the argmax would repeat one position
    forever and would point at padding before ever ending.
    """
    network = PointerNetwork(units, mask_chosen=mask_chosen, max_length=max_length, beam_width=beam_width)
    network(np.zeros((1, 2, dim), "float32"))
    attention = network.pointer.additive
    attention.query_kernel.assign(np.zeros((units, units)))
    attention.key_kernel.assign(3 * np.eye(units))
    attention.score_vector.assign(np.ones(units))
    network.end_memory.assign(np.full(units, -10.0))
    return network


def rigged_inputs(rng, lengths, ts=5, dim=2):
    numbers = rng.normal(size=(len(lengths), ts, dim)).astype("float32")
    return numbers, lengths_mask(lengths, ts)


def test_untrained_model_never_points_twice_when_told_not_to():
    rng = np.random.default_rng(7)
    lengths = [5, 3, 1, 4]
    numbers, mask = rigged_inputs(rng, lengths)
    repeating = rigged_network(mask_chosen=False, max_length=6)
    repeated = np.asarray(repeating.decode(numbers, mask=mask)["ids"])
    # Unmasked, the argmax repeats: the check below is not void.
    assert (repeated == repeated[:, :1]).all() and (repeated[:, 0] >= 1).all()

    network = rigged_network(mask_chosen=True, max_length=6)
    network.set_weights(repeating.get_weights())
    # The step's (constant) scores, read from the teacher-forced first step.
    scores = np.asarray(network([numbers, np.zeros((4, 1), "int32")], mask=mask))[:, 0]
    greedy = np.asarray(network.decode(numbers, mask=mask)["ids"])
    assert_valid_pointers(greedy, lengths, complete=True)
    for b, length in enumerate(lengths):
        descending = list(np.argsort(-scores[b, 1 : length + 1], kind="stable") + 1)
        assert list(greedy[b, :length]) == descending

    beams = network.decode(numbers, mask=mask, beam_width=4)
    ids = np.asarray(beams["ids"])
    for beam in range(4):
        assert_valid_pointers(ids[:, beam], lengths, complete=False)
    # The most likely order of a Plackett-Luce model is the descending one.
    np.testing.assert_array_equal(ids[:, 0], greedy)
    # One input has only two hypotheses ([1, end] and [end]): the other two
    # beams are blanked, not filled with masked picks.
    np.testing.assert_array_equal(ids[2, 2:], END)
    np.testing.assert_array_equal(beams["lengths"][2, 2:], 0)
    assert (np.asarray(beams["lengths"])[[0, 1, 3]] > 0).all()


def test_untrained_model_never_points_at_padding():
    rng = np.random.default_rng(8)
    lengths = [2, 5, 1]
    numbers, mask = rigged_inputs(rng, lengths)
    network = rigged_network(mask_chosen=True, max_length=6)
    # Without the mask the padded positions are real to the model, and the
    # end (lowest score) comes only after all five: the check is not void.
    unmasked = np.asarray(network.decode(numbers)["ids"])
    assert (unmasked[:, :5] > 0).all() and (unmasked[:, 5] == END).all()
    for beam_width in (None, 3):
        ids = np.asarray(network.decode(numbers, mask=mask, beam_width=beam_width)["ids"])
        ids = ids[:, None] if ids.ndim == 2 else ids
        for beam in range(ids.shape[1]):
            assert_valid_pointers(ids[:, beam], lengths, complete=beam == 0)
    # Keras masks (from Masking on zero padding) are honoured the same way.
    padded = np.where(mask[..., None], numbers, 0.0).astype("float32")
    from_keras_mask = network(keras.layers.Masking(0.0)(padded))
    np.testing.assert_array_equal(from_keras_mask, network.decode(numbers, mask=mask)["ids"])


def test_mixed_precision_network():
    rng = np.random.default_rng(9)
    network = PointerNetwork(8, max_length=6, beam_width=2, dtype="mixed_float16")
    numbers, mask = rigged_inputs(rng, [5, 2])
    targets = np.array([[2, 1, 3, 5, 4, 0], [2, 1, 0, 0, 0, 0]], "int32")
    logits = network([numbers, targets], mask=mask)
    assert logits.dtype == "float32" and np.isfinite(np.asarray(logits)).all()
    assert all(variable.dtype == "float32" for variable in network.weights)
    assert (np.asarray(logits)[1, :, 3:] == F32_MIN).all()
    ids = network(numbers, mask=mask)
    assert ids.dtype == "int32"
    assert_valid_pointers(ids, [5, 2], complete=False)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: PointerNetwork(0), r"PointerNetwork: `units` must be a positive integer; got 0"),
        (lambda: PointerNetwork(4, beam_width=0), r"`beam_width` must be a positive integer or None; got 0"),
        (lambda: PointerNetwork(4, max_length=2.5), r"`max_length` must be a positive integer or None; got 2.5"),
        (
            lambda: PointerNetwork(4, length_penalty_weight=-1),
            r"`length_penalty_weight` must be a finite number >= 0; got -1",
        ),
        (lambda: PointerNetwork(4)(np.zeros((2, 5, 1), "float32")), r"decoding needs `max_length`.*got None"),
        (
            lambda: PointerNetwork(4, max_length=3)(np.zeros((2, 5), "float32")),
            r"`inputs` must have rank 3 \(batch, Ts, d\); got shape \(2, 5\)",
        ),
        (
            lambda: PointerNetwork(4)([np.zeros((2, 5, 1), "float32"), np.zeros((2, 3, 1), "int32")]),
            r"`targets` must have rank 2 \(batch, M\) of pointer ids; got shape \(2, 3, 1\)",
        ),
        (
            lambda: PointerNetwork(4)([np.zeros((2, 5, 1), "float32"), np.zeros((3, 3), "int32")]),
            r"`inputs` and `targets` must have the same batch size; got shapes \(2, 5, 1\) and \(3, 3\)",
        ),
        (
            lambda: PointerNetwork(4)([np.zeros((2, 5, 1), "float32")] * 3),
            r"`inputs` must be the inputs `\(B, Ts, d\)` or the pair \[inputs, targets\]; got a sequence of 3 items",
        ),
        (
            lambda: PointerNetwork(4, max_length=3).decode(np.zeros((2, 5, 1), "float32"), beam_width=0),
            r"`beam_width` must be a positive integer or None; got 0",
        ),
    ],
    ids=[
        "units",
        "beam_width",
        "max_length",
        "length_penalty",
        "no_max_length",
        "inputs_rank",
        "targets_rank",
        "batch",
        "pair",
        "decode_beam_width",
    ],
)
def test_network_errors_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_unknown_lengths_in_a_functional_model_build_symbolically():
    network = PointerNetwork(4, max_length=7)
    train, infer = pointer_models(network)
    assert tuple(train.output.shape) == (None, None, None) and train.output.dtype == "float32"
    assert tuple(infer.output.shape) == (None, 7) and infer.output.dtype == "int32"
    fixed = keras.Input((5, 1))
    logits = network([fixed, keras.Input((6,), dtype="int32")])
    assert tuple(logits.shape) == (None, 6, 6)
