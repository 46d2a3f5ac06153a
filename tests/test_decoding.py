"""In-graph decoding: greedy, sampling, beam search, gather_tree and tile_batch."""

import itertools

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.decoding import (
    beam_search,
    gather_tree,
    greedy_search,
    length_penalty,
    sampling_search,
    tile_batch,
)
from tests.export_check import assert_export_parity
from tests.layer_cases import top_k_with_ties_to_the_highest_index

END = 0


class TableModel:
    """A fixed step function: logits = table[example, time, previous token].

    Deterministic and cheap, so decoders can be compared with exhaustive
    search. It also returns an alignment over a source of `source_lengths[b]`
    positions (zero on padding), and counts its calls.
    """

    def __init__(self, rng, batch, vocabulary, max_time, source_lengths=None, scale=2.0):
        self.vocabulary = vocabulary
        self.table = rng.normal(size=(batch, max_time + 1, vocabulary, vocabulary)).astype("float32") * scale
        self.source_lengths = source_lengths
        self.calls = 0
        self.state = {"example": np.arange(batch, dtype="int32"), "time": np.zeros(batch, "int32")}

    def log_probs(self, example, time, previous):
        return tf.nn.log_softmax(self.table[example, time, previous]).numpy().astype(np.float64)

    def __call__(self, ids, state):
        self.calls += 1
        example, time = state["example"], state["time"]
        logits = tf.gather_nd(self.table, tf.stack([example, time, ids], -1))
        new_state = {"example": example, "time": tf.minimum(time + 1, self.table.shape[1] - 1)}
        if self.source_lengths is None:
            return logits, new_state
        width = max(self.source_lengths)
        valid = tf.sequence_mask(tf.gather(self.source_lengths, example), width)
        energies = tf.tile(logits[:, :1], [1, width]) * tf.range(1.0, width + 1.0)
        alignment = tf.nn.softmax(tf.where(valid, energies, -1e9)) * tf.cast(valid, tf.float32)
        return logits, new_state, alignment


def exhaustive(model, example, max_length, start, alpha=0.0):
    """Every hypothesis (ended by END or by max_length) with its GNMT score."""
    results = []
    for length in range(1, max_length + 1):
        for tokens in itertools.product(range(model.vocabulary), repeat=length):
            if END in tokens[:-1] or (length < max_length and tokens[-1] != END):
                continue
            previous, total = start, 0.0
            for time, token in enumerate(tokens):
                total += model.log_probs(example, time, previous)[token]
                previous = token
            score = total / ((5.0 + length) / 6.0) ** alpha
            results.append((score, tokens))
    return sorted(results, reverse=True)


@pytest.mark.parametrize("vocabulary, max_length, alpha", [(4, 3, 0.0), (3, 4, 0.0), (3, 4, 1.5)])
def test_beam_search_equals_exhaustive_search(vocabulary, max_length, alpha):
    rng = np.random.default_rng(vocabulary * 10 + max_length)
    model = TableModel(rng, batch=2, vocabulary=vocabulary, max_time=max_length)
    width = vocabulary**max_length  # wide enough that nothing is pruned
    result = beam_search(model, model.state, 1, END, max_length, width, length_penalty_weight=alpha)
    for example in range(2):
        want = exhaustive(model, example, max_length, start=1, alpha=alpha)
        scores = result["scores"].numpy()[example][: len(want)]
        np.testing.assert_allclose(scores, [score for score, _ in want], rtol=1e-5, atol=1e-5)
        best_tokens = want[0][1]
        ids = result["ids"].numpy()[example, 0]
        assert tuple(ids[: len(best_tokens)]) == best_tokens
        assert result["lengths"].numpy()[example, 0] == len(best_tokens)
        assert (ids[len(best_tokens) :] == END).all()


def test_narrow_beam_finds_the_exhaustive_best_on_a_peaked_model():
    rng = np.random.default_rng(3)
    model = TableModel(rng, batch=3, vocabulary=4, max_time=4, scale=4.0)
    result = beam_search(model, model.state, 1, END, 4, beam_width=4)
    for example in range(3):
        best_score, best_tokens = exhaustive(model, example, 4, start=1)[0]
        assert result["scores"].numpy()[example, 0] >= best_score - 1e-5


def test_width_one_equals_greedy():
    rng = np.random.default_rng(4)
    model = TableModel(rng, batch=4, vocabulary=5, max_time=6)
    greedy = greedy_search(model, model.state, 2, END, 6)
    beam = beam_search(model, model.state, 2, END, 6, beam_width=1)
    np.testing.assert_array_equal(beam["ids"].numpy()[:, 0], greedy["ids"].numpy())
    np.testing.assert_array_equal(beam["lengths"].numpy()[:, 0], greedy["lengths"].numpy())
    np.testing.assert_allclose(beam["log_probs"].numpy()[:, 0], greedy["scores"].numpy(), rtol=1e-6)


def test_greedy_matches_a_step_by_step_reference():
    rng = np.random.default_rng(5)
    model = TableModel(rng, batch=3, vocabulary=4, max_time=5)
    result = greedy_search(model, model.state, 1, END, 5)
    for example in range(3):
        previous, total, tokens = 1, 0.0, []
        for time in range(5):
            log_probs = model.log_probs(example, time, previous)
            previous = int(np.argmax(log_probs))
            total += log_probs[previous]
            tokens.append(previous)
            if previous == END:
                break
        ids = result["ids"].numpy()[example]
        assert list(ids[: len(tokens)]) == tokens and (ids[len(tokens) :] == END).all()
        assert result["lengths"].numpy()[example] == len(tokens)
        np.testing.assert_allclose(result["scores"].numpy()[example], total, rtol=1e-5)


def test_greedy_ties_go_to_the_lowest_id_whatever_the_backends_tie_order(monkeypatch):
    # A top_k that breaks ties the other way, as torch's may (issue 18),
    # changes nothing: the rule is written out, not left to the backend.
    monkeypatch.setattr(keras.ops, "top_k", top_k_with_ties_to_the_highest_index(keras.ops.top_k))
    table = np.array(
        [
            [-9.0, 1.0, 3.0, 0.0, 3.0],  # ids 2 and 4 tie: 2, every step
            [1.0, 1.0, 1.0, 1.0, 1.0],  # all equal: 0 (the end) at once
            [-9.0, 2.0, 2.0, 2.0, -9.0],  # ids 1, 2 and 3 tie: 1, every step
        ],
        "float32",
    )

    def step_fn(ids, state):
        return keras.ops.convert_to_tensor(table), state

    result = greedy_search(step_fn, keras.ops.zeros((3, 1)), 1, END, 3)
    np.testing.assert_array_equal(np.asarray(result["ids"]), [[2, 2, 2], [0, END, END], [1, 1, 1]])
    np.testing.assert_array_equal(np.asarray(result["lengths"]), [3, 1, 3])


def test_length_penalty_changes_the_ranking_as_its_formula_says():
    """A short hypothesis beats a long one without the penalty and loses with it."""
    # Vocabulary {0: END, 1, 2}; every row is a distribution. From the start:
    # END directly (log p = -1.0) or token 1 (log p = -0.5) then END
    # (log p = -0.7): raw -1.0 against -1.2; every other hypothesis is worse.
    table = np.full((1, 3, 3, 3), np.log(1 / 3), "float32")
    table[0, 0, 1] = np.log([0.3679, 0.6065, 0.0256])  # step 0 from start token 1
    table[0, 1, 1] = np.log([0.4966, 0.2517, 0.2517])  # step 1 after token 1
    model = TableModel(np.random.default_rng(0), batch=1, vocabulary=3, max_time=2)
    model.table = table
    short, long_ = -1.0, np.log(0.6065) + np.log(0.4966)
    for alpha in (0.0, 2.0):
        result = beam_search(model, model.state, 1, END, 2, beam_width=2, length_penalty_weight=alpha)
        want = sorted(
            [(short / length_penalty(1, alpha), (0,)), (long_ / length_penalty(2, alpha), (1, 0))], reverse=True
        )
        got_ids = result["ids"].numpy()[0, 0]
        assert tuple(got_ids[: len(want[0][1])]) == want[0][1]
        np.testing.assert_allclose(result["scores"].numpy()[0], [float(s) for s, _ in want], rtol=1e-4)
    assert short > long_ and short / float(length_penalty(1, 2.0)) < long_ / float(length_penalty(2, 2.0))


def test_finished_beams_stay_finished_and_decoding_stops_when_all_end():
    rng = np.random.default_rng(6)
    model = TableModel(rng, batch=2, vocabulary=4, max_time=3)
    model.table[:, 2, :, END] += 50.0  # everything ends by step 2
    result = beam_search(model, model.state, 1, END, 40, beam_width=3)
    assert model.calls == 3, "decoding must stop once every beam has ended"
    ids, lengths = result["ids"].numpy(), result["lengths"].numpy()
    assert ids.shape == (2, 3, 40)
    for example, beam in np.ndindex(2, 3):
        length = lengths[example, beam]
        assert ids[example, beam, length - 1] == END
        assert (ids[example, beam, length:] == END).all()
        assert END not in ids[example, beam, : length - 1]
    greedy_model = TableModel(rng, batch=2, vocabulary=4, max_time=3)
    greedy_model.table[:, 0, :, END] -= 50.0  # never ends at step 0
    greedy_model.table[:, 1, :, END] += 50.0  # always ends at step 1
    greedy_search(greedy_model, greedy_model.state, 1, END, 40)
    assert greedy_model.calls == 2


def test_batch_with_different_memory_lengths_keeps_alignments_off_padding():
    rng = np.random.default_rng(7)
    model = TableModel(rng, batch=3, vocabulary=4, max_time=4, source_lengths=[2, 5, 3])
    for result in (
        beam_search(model, model.state, 1, END, 4, beam_width=2, coverage_penalty_weight=0.3),
        greedy_search(model, model.state, 1, END, 4),
    ):
        alignments = result["alignments"].numpy()
        if alignments.ndim == 3:
            alignments = alignments[:, None]
            lengths = result["lengths"].numpy()[:, None]
        else:
            lengths = result["lengths"].numpy()
        for example, source_length in enumerate([2, 5, 3]):
            assert (alignments[example, ..., source_length:] == 0).all()
            for beam in range(alignments.shape[1]):
                steps = lengths[example, beam]
                np.testing.assert_allclose(alignments[example, beam, :steps].sum(-1), 1.0, atol=1e-5)
                assert (alignments[example, beam, steps:] == 0).all()


def test_coverage_penalty_follows_its_formula():
    rng = np.random.default_rng(8)
    model = TableModel(rng, batch=1, vocabulary=3, max_time=3, source_lengths=[4])
    plain = beam_search(model, model.state, 1, END, 3, beam_width=9)
    penalised = beam_search(model, model.state, 1, END, 3, beam_width=9, coverage_penalty_weight=0.5)
    # Recompute the best penalised beam's score from its own alignments.
    alignments, length = penalised["alignments"].numpy()[0, 0], penalised["lengths"].numpy()[0, 0]
    coverage = alignments[:length].sum(0)
    penalty = 0.5 * np.log(np.minimum(coverage[coverage > 0], 1.0)).sum()
    ends = penalised["ids"].numpy()[0, 0, length - 1] == END
    want = penalised["log_probs"].numpy()[0, 0] + (penalty if ends else 0.0)
    np.testing.assert_allclose(penalised["scores"].numpy()[0, 0], want, rtol=1e-5)
    assert penalised["scores"].numpy()[0, 0] <= plain["scores"].numpy()[0, 0] + 1e-6


def test_sampling_follows_the_model_distribution_and_respects_top_k():
    probabilities = np.array([0.1, 0.6, 0.3], "float32")
    table = np.tile(np.log(probabilities), (1, 2, 3, 1)).reshape(1, 2, 3, 3)
    model = TableModel(np.random.default_rng(0), batch=1, vocabulary=3, max_time=1)
    model.table = np.repeat(table, 4000, axis=0)
    state = {"example": np.arange(4000, dtype="int32"), "time": np.zeros(4000, "int32")}
    first = sampling_search(model, state, 1, END, 1, seed=3)["ids"].numpy()[:, 0]
    np.testing.assert_allclose(np.bincount(first, minlength=3) / 4000, probabilities, atol=0.03)
    top1 = sampling_search(model, state, 1, END, 1, top_k=1, seed=3)["ids"].numpy()[:, 0]
    assert (top1 == 1).all()
    sharp = sampling_search(model, state, 1, END, 1, temperature=0.05, seed=3)["ids"].numpy()[:, 0]
    assert (sharp == 1).mean() > 0.99
    again = sampling_search(model, state, 1, END, 1, seed=3)["ids"].numpy()[:, 0]
    np.testing.assert_array_equal(first, again)


@pytest.mark.parametrize("temperature", [1e-38, 1e-300])
def test_sampling_below_the_float32_normal_range_is_argmax(temperature):
    """1e-38 is a float32 subnormal, 1e-300 a float32 zero: dividing the
    log-probabilities by either sent every token to -inf, and token 0 won."""
    rng = np.random.default_rng(11)
    model = TableModel(rng, batch=6, vocabulary=5, max_time=6)
    greedy = greedy_search(model, model.state, 1, END, 6)
    assert (greedy["ids"].numpy() != 0).any()
    sampled = sampling_search(model, model.state, 1, END, 6, temperature=temperature, seed=2)
    np.testing.assert_array_equal(sampled["ids"], greedy["ids"])
    np.testing.assert_allclose(sampled["scores"], greedy["scores"], rtol=1e-6)


def test_top_k_of_at_least_the_vocabulary_keeps_every_token():
    rng = np.random.default_rng(12)
    model = TableModel(rng, batch=8, vocabulary=5, max_time=4)
    everything = sampling_search(model, model.state, 1, END, 4, seed=7)
    for top_k in (5, 50):
        got = sampling_search(model, model.state, 1, END, 4, top_k=top_k, seed=7)
        np.testing.assert_array_equal(got["ids"], everything["ids"])


def test_decoders_compile_with_xla():
    rng = np.random.default_rng(9)
    model = TableModel(rng, batch=2, vocabulary=4, max_time=5, source_lengths=[3, 5])
    eager = beam_search(model, model.state, 1, END, 5, beam_width=3, length_penalty_weight=0.6)
    compiled = tf.function(
        lambda: beam_search(model, model.state, 1, END, 5, beam_width=3, length_penalty_weight=0.6),
        jit_compile=True,
    )()
    np.testing.assert_array_equal(compiled["ids"], eager["ids"])
    np.testing.assert_allclose(compiled["scores"], eager["scores"], rtol=1e-5)
    greedy = tf.function(lambda: greedy_search(model, model.state, 1, END, 5), jit_compile=True)()
    np.testing.assert_array_equal(greedy["ids"], greedy_search(model, model.state, 1, END, 5)["ids"])


def test_decode_loops_export_to_onnx_with_identical_ids(tmp_path):
    import onnxruntime
    import tf2onnx

    rng = np.random.default_rng(10)
    model = TableModel(rng, batch=3, vocabulary=5, max_time=6, source_lengths=[2, 6, 4])

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int32, name="start")])
    def decode(start):
        state = {"example": tf.range(tf.shape(start)[0]), "time": tf.zeros_like(start)}
        beam = beam_search(model, state, start, END, 6, beam_width=3, length_penalty_weight=0.6)
        greedy = greedy_search(model, state, start, END, 6)
        return {"beam_ids": beam["ids"], "beam_scores": beam["scores"], "greedy_ids": greedy["ids"]}

    path = str(tmp_path / "decode.onnx")
    tf2onnx.convert.from_function(decode, input_signature=decode.input_signature, opset=17, output_path=path)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    start = np.array([1, 2, 3], "int32")
    expected = decode(tf.constant(start))
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {session.get_inputs()[0].name: start})))
    for key in ("beam_ids", "greedy_ids"):
        (name,) = [n for n in names if key in n]
        np.testing.assert_array_equal(got[name], expected[key].numpy())
    (name,) = [n for n in names if "beam_scores" in n]
    np.testing.assert_allclose(got[name], expected["beam_scores"].numpy(), atol=1e-4)


# ------------------------------------------------------------------ gather_tree


def gather_tree_reference(step_ids, parent_ids, lengths, end_token):
    """tfa's gather_tree, as its kernel does it, with explicit loops."""
    max_time, batch, beam = step_ids.shape
    out = np.full_like(step_ids, end_token)
    for b in range(batch):
        length = min(lengths[b], max_time)
        for k in range(beam):
            if length == 0:
                continue
            out[length - 1, b, k] = step_ids[length - 1, b, k]
            parent = parent_ids[length - 1, b, k]
            for time in range(length - 2, -1, -1):
                out[time, b, k] = step_ids[time, b, parent]
                parent = parent_ids[time, b, parent]
            finished = False
            for time in range(length):
                if finished:
                    out[time, b, k] = end_token
                elif out[time, b, k] == end_token:
                    finished = True
    return out


def test_gather_tree_hand_cases():
    step_ids = np.array([[[1, 2]], [[3, 4]], [[5, 6]]], "int32")
    parent_ids = np.array([[[0, 0]], [[1, 0]], [[0, 1]]], "int32")
    got = gather_tree(step_ids, parent_ids, [3], end_token=9).numpy()
    np.testing.assert_array_equal(got[:, 0, :].T, [[2, 3, 5], [1, 4, 6]])
    # An end token in the middle ends the sequence: what follows is the end token.
    got = gather_tree(step_ids, parent_ids, [3], end_token=3).numpy()
    np.testing.assert_array_equal(got[:, 0, :].T, [[2, 3, 3], [1, 4, 6]])
    # Steps at or past the length are padding (the end token).
    got = gather_tree(step_ids, parent_ids, [2], end_token=9).numpy()
    np.testing.assert_array_equal(got[:, 0, :].T, [[2, 3, 9], [1, 4, 9]])


def test_gather_tree_matches_the_reference_on_random_trees():
    rng = np.random.default_rng(11)
    for _ in range(5):
        max_time, batch, beam = 6, 3, 4
        step_ids = rng.integers(0, 5, size=(max_time, batch, beam)).astype("int32")
        parent_ids = rng.integers(0, beam, size=(max_time, batch, beam)).astype("int32")
        lengths = rng.integers(0, max_time + 1, size=batch)
        np.testing.assert_array_equal(
            gather_tree(step_ids, parent_ids, lengths, 4).numpy(),
            gather_tree_reference(step_ids, parent_ids, lengths, 4),
        )


def test_tile_batch_repeats_in_place():
    nested = {"a": np.array([[1, 1], [2, 2]]), "b": (np.array([5, 6]),)}
    tiled = tile_batch(nested, 3)
    np.testing.assert_array_equal(tiled["a"], [[1, 1]] * 3 + [[2, 2]] * 3)
    np.testing.assert_array_equal(tiled["b"][0], [5, 5, 5, 6, 6, 6])


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda m: beam_search(m, m.state, 1, END, 3, beam_width=0), r"`beam_width` must be a positive integer; got 0"),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, length_penalty_weight=-1),
            r"`length_penalty_weight` must be a finite number >= 0; got -1",
        ),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, length_penalty_weight=float("nan")),
            r"beam_search: `length_penalty_weight` must be a finite number >= 0; got nan",
        ),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, length_penalty_weight=float("inf")),
            r"beam_search: `length_penalty_weight` must be a finite number >= 0; got inf",
        ),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, coverage_penalty_weight=float("nan")),
            r"beam_search: `coverage_penalty_weight` must be a finite number >= 0; got nan",
        ),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, coverage_penalty_weight=np.float32("inf")),
            r"beam_search: `coverage_penalty_weight` must be a finite number >= 0; got np.float32\(inf\)",
        ),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, early_stopping="yes"),
            r"beam_search: `early_stopping` must be True or False; got 'yes'",
        ),
        (
            lambda m: beam_search(m, m.state, 1, END, 3, 2, early_stopping=1),
            r"beam_search: `early_stopping` must be True or False; got 1\.",
        ),
        (lambda m: greedy_search(m, m.state, 1, END, 0), r"`max_length` must be a positive integer; got 0"),
        (
            lambda m: sampling_search(m, m.state, 1, END, 3, temperature=0),
            r"`temperature` must be a finite number > 0; got 0",
        ),
        (
            lambda m: sampling_search(m, m.state, 1, END, 3, temperature=float("nan")),
            r"`temperature` must be a finite number > 0; got nan",
        ),
        (
            lambda m: sampling_search(m, m.state, 1, END, 3, top_k=0),
            r"`top_k` must be a positive integer or None; got 0",
        ),
        (lambda m: greedy_search(lambda ids, s: ids, m.state, 1, END, 3), r"must return `\(logits, state\)`"),
        (
            lambda m: greedy_search(m, m.state, np.ones((2, 2), "int32"), END, 3),
            r"`start_tokens` must be an int or a rank-1 tensor.*\(2, 2\)",
        ),
        (lambda m: tile_batch(np.ones(2), 0), r"`multiplier` must be a positive integer; got 0"),
        (
            lambda m: gather_tree(np.ones((2, 2)), np.ones((2, 2, 1)), [1], 0),
            r"`step_ids` must have shape \(max_time, batch, beam\); got shape \(2, 2\)",
        ),
    ],
)
def test_bad_arguments(call, message):
    model = TableModel(np.random.default_rng(0), batch=2, vocabulary=3, max_time=3)
    with pytest.raises(ValueError, match=message):
        call(model)


@pytest.mark.parametrize("vocabulary, max_length", [(7, 1), (3, 2)])
def test_beams_beyond_the_valid_hypotheses_are_empty(vocabulary, max_length):
    """Vocabulary 7 and max_length 1 have 7 hypotheses; a width of 10 used to
    fill three beams with ids, length 1 and a score of -1.7e38."""
    rng = np.random.default_rng(13)
    model = TableModel(rng, batch=2, vocabulary=vocabulary, max_time=max_length, source_lengths=[3, 2])
    result = {k: v.numpy() for k, v in beam_search(model, model.state, 1, END, max_length, beam_width=10).items()}
    for example in range(2):
        want = exhaustive(model, example, max_length, start=1)
        real = len(want)
        assert real < 10
        np.testing.assert_allclose(result["scores"][example, :real], [score for score, _ in want], rtol=1e-5)
        assert (result["lengths"][example, :real] >= 1).all()
        assert (result["scores"][example, real:] == -np.inf).all()
        assert (result["log_probs"][example, real:] == -np.inf).all()
        assert (result["lengths"][example, real:] == 0).all()
        assert (result["ids"][example, real:] == END).all()
        assert (result["alignments"][example, real:] == 0).all()


# --------------------------------------------------------------- early stopping


@pytest.mark.parametrize("alpha, beta", [(0.0, 0.0), (0.8, 0.0), (0.0, 0.5), (0.6, 0.4)])
def test_early_stopping_returns_the_full_searchs_best_hypothesis(alpha, beta):
    saved = 0
    for seed in range(5):
        models = []
        for _ in range(2):  # one model per search: each counts its own steps
            model = TableModel(
                np.random.default_rng(seed), batch=3, vocabulary=5, max_time=12, source_lengths=[3, 5, 4]
            )
            model.table[..., END] += 1.0  # hypotheses end at different times
            models.append(model)
        full, early = (
            {k: v.numpy() for k, v in beam_search(m, m.state, 1, END, 12, 3, alpha, beta, early_stopping=stop).items()}
            for m, stop in zip(models, (False, True))
        )
        for key in ("ids", "scores", "log_probs", "lengths", "alignments"):
            np.testing.assert_array_equal(early[key][:, 0], full[key][:, 0], err_msg=f"seed {seed} {key}")
        assert models[1].calls <= models[0].calls
        saved += models[0].calls - models[1].calls
    assert saved > 0, "early stopping never stopped a search early: the comparison above tested nothing"


def _two_way_model(first_step):
    """Vocabulary {0: END, 1, 2}: after token 1 the sequence ends (p = 0.98),
    after token 2 it never does (token 2 again, p = 1 - 2e-9).

    `first_step`: the probabilities of (END, 1, 2) after the start token 1.
    """
    model = TableModel(np.random.default_rng(0), batch=1, vocabulary=3, max_time=10)
    table = np.full((1, 11, 3, 3), np.log(1 / 3), "float32")
    table[0, 0, 1] = np.log(first_step)
    table[0, 1:, 1] = np.log([0.98, 0.01, 0.01])
    table[0, 1:, 2] = np.log([1e-9, 1e-9, 1 - 2e-9])
    model.table = table
    return model


def test_early_stopping_stops_once_no_running_hypothesis_can_catch_up():
    # Step 0 keeps (1) and (2); step 1 gives (1, END), log p = log 0.5 +
    # log 0.98 = -0.713, and (2, 2), log p = log 0.45 = -0.799, which never
    # ends. Without a length penalty -0.799 can only fall: decided after 2 steps.
    model = _two_way_model([0.05, 0.5, 0.45])
    result = {k: v.numpy() for k, v in beam_search(model, model.state, 1, END, 10, 2, early_stopping=True).items()}
    assert model.calls == 2
    np.testing.assert_array_equal(result["lengths"], [[2, 2]])
    np.testing.assert_array_equal(result["ids"][0, 0], [1, END] + [END] * 8)
    # The running hypothesis comes back as it stands: two tokens, no end token.
    np.testing.assert_array_equal(result["ids"][0, 1], [2, 2] + [END] * 8)
    np.testing.assert_allclose(result["scores"][0], [np.log(0.5) + np.log(0.98), np.log(0.45)], rtol=1e-5)
    full_model = _two_way_model([0.05, 0.5, 0.45])
    full = {k: v.numpy() for k, v in beam_search(full_model, full_model.state, 1, END, 10, 2).items()}
    assert full_model.calls == 10
    np.testing.assert_array_equal(full["lengths"], [[2, 10]])
    np.testing.assert_array_equal(full["ids"][0, 0], result["ids"][0, 0])
    np.testing.assert_array_equal(full["scores"][0, 0], result["scores"][0, 0])


def test_early_stopping_waits_while_the_length_penalty_leaves_room():
    # With alpha = 2 the finished (1, END) scores -0.713 / lp(2) = -0.524, and
    # (2, 2, ...) may still reach -0.799 / lp(10) = -0.128: no stop, rightly,
    # as the unfinished 10-token hypothesis wins at max_length (-0.128).
    lp = lambda n: ((5 + n) / 6) ** 2  # noqa: E731
    finished, running = np.log(0.5) + np.log(0.98), np.log(0.45)
    assert finished / lp(2) < running / lp(10)
    model = _two_way_model([0.05, 0.5, 0.45])
    result = {k: v.numpy() for k, v in beam_search(model, model.state, 1, END, 10, 2, 2.0, early_stopping=True).items()}
    assert model.calls == 10
    np.testing.assert_array_equal(result["lengths"], [[10, 2]])
    np.testing.assert_array_equal(result["ids"][0, 0], [2] * 10)
    np.testing.assert_allclose(result["scores"][0], [running / lp(10), finished / lp(2)], rtol=1e-5)


def _early_stopping_decoders():
    """Two beam decoders sharing their layers, with and without early stopping.

    A bias towards END makes the best hypotheses end after 1 to 5 tokens
    while others run on: early stopping ends the search after 9 of 12 steps.
    """
    rng = np.random.default_rng(2)
    source = keras.Input((None,), dtype="int32", name="source")
    memory = keras.layers.Embedding(9, 6, mask_zero=True)(source)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    embedding, output_layer = keras.layers.Embedding(9, 4), keras.layers.Dense(9)
    options = dict(method="beam", beam_width=3, length_penalty_weight=0.6, coverage_penalty_weight=0.2)
    early = keras.Model(
        source, ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 12, early_stopping=True, **options)(memory)
    )
    full = keras.Model(source, ka.InferenceDecoder(cell, embedding, output_layer, 1, 2, 12, **options)(memory))
    for weight in output_layer.weights + cell.weights + embedding.weights + early.layers[1].weights:
        weight.assign(rng.normal(size=weight.shape).astype("float32"))
    output_layer.bias.assign(output_layer.bias.numpy() + 2.0 * np.eye(9, dtype="float32")[2])
    sources = rng.integers(3, 9, size=(4, 5)).astype("int32")
    sources[1, 3:] = 0
    return early, full, sources


def test_inference_decoder_with_early_stopping_exports_with_parity(tmp_path):
    early, full, sources = _early_stopping_decoders()
    want = {k: np.asarray(v) for k, v in full(sources).items()}
    got = {k: np.asarray(v) for k, v in early(sources).items()}
    for key in want:
        np.testing.assert_array_equal(got[key][:, 0], want[key][:, 0], err_msg=key)
    # The search stopped before the full one: its longest beam is shorter.
    assert got["lengths"].max() < want["lengths"].max()
    assert_export_parity(early, [{"source": sources}, {"source": sources[:1, :3]}], tmp_path, atol=1e-5)


def test_inference_decoder_keeps_and_checks_early_stopping():
    decoder = ka.InferenceDecoder(
        ka.AttentionGRUCell(4, ka.DotAttention()),
        keras.layers.Embedding(5, 3),
        keras.layers.Dense(5),
        1,
        2,
        4,
        method="beam",
        early_stopping=np.True_,
    )
    assert decoder.early_stopping is True and decoder.get_config()["early_stopping"] is True
    assert ka.InferenceDecoder.from_config(decoder.get_config()).early_stopping is True
    config = decoder.get_config()
    config["early_stopping"] = "no"
    # Keras's from_config re-raises a constructor's error as a TypeError
    # that quotes it.
    message = r"InferenceDecoder: `early_stopping` must be True or False; got 'no'"
    with pytest.raises((ValueError, TypeError), match=message):
        ka.InferenceDecoder.from_config(config)
    with pytest.raises(ValueError, match=r"InferenceDecoder: `early_stopping` must be True or False; got None"):
        ka.InferenceDecoder(
            ka.AttentionGRUCell(4, ka.DotAttention()),
            keras.layers.Embedding(5, 3),
            keras.layers.Dense(5),
            1,
            2,
            4,
            early_stopping=None,
        )
