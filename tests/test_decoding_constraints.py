"""Decoding constraints (min/max length, suppressed and allowed ids) and
nucleus sampling, against brute force and NumPy, through every search and
through InferenceDecoder and its ONNX export."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import (
    NEG_INF,
    beam_search,
    constrained_step,
    greedy_search,
    relative_max_lengths,
    sampling_search,
    top_p_filter,
)
from keras_attention.export import export_model, run_onnx

START, END, VOCABULARY, STEPS = 0, 1, 4, 4


def table_step(table):
    """A step whose logits are `table[example, time, previous id]`."""
    batch, steps, vocabulary, _ = table.shape
    flat = ops.convert_to_tensor(table.reshape(-1, vocabulary).astype("float32"))

    def step(ids, state):
        time, example = state
        row = (example * steps + ops.minimum(time, steps - 1)) * vocabulary + ops.cast(ids, "int32")
        return ops.take(flat, row, axis=0), (time + 1, example)

    return step, (ops.zeros((batch,), "int32"), ops.arange(batch, dtype="int32"))


def random_table(seed, batch=5):
    rng = np.random.default_rng(seed)
    table = rng.normal(0, 1.5, size=(batch, STEPS, VOCABULARY, VOCABULARY))
    table[..., END] += 1.5  # the end token is tempting: the constraints have work to do
    return table


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def allowed_at(t, example, min_length, max_lengths, suppress, allowed):
    ok = np.ones(VOCABULARY, bool)
    if t < min_length:
        ok[END] = False
    if max_lengths is not None and t >= max_lengths[example] - 1:
        ok[:] = False
        ok[END] = True
    for token in suppress or []:
        ok[token] = False
    if allowed is not None:
        ok &= allowed[example] | (np.arange(VOCABULARY) == END)
    return ok


def brute_force_best(table, example, **constraints):
    """The most likely sequence under the constrained distribution, by
    enumerating every sequence of up to STEPS tokens (ended or cut at STEPS)."""
    best, best_score = None, -np.inf
    for length in range(1, STEPS + 1):
        for tokens in itertools.product(range(VOCABULARY), repeat=length):
            if END in tokens[:-1] or (length < STEPS and tokens[-1] != END):
                continue
            score, previous = 0.0, START
            for t, token in enumerate(tokens):
                ok = allowed_at(t, example, **constraints)
                if not ok[token]:
                    score = -np.inf
                    break
                logits = np.where(ok, table[example, t, previous], -np.inf)
                score += log_softmax(logits)[token]
                previous = token
            if score > best_score:
                best, best_score = tokens, score
    return list(best), best_score


CONSTRAINTS = [
    dict(min_length=2, max_lengths=None, suppress=None, allowed=None),
    dict(min_length=0, max_lengths=np.array([1, 2, 3, 4, 2]), suppress=None, allowed=None),
    dict(min_length=1, max_lengths=None, suppress=[2], allowed=None),
    dict(
        min_length=0,
        max_lengths=None,
        suppress=None,
        allowed=np.array([[1, 1, 0, 1], [1, 1, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 0]], bool),
    ),
]


def wrapped(table, min_length, max_lengths, suppress, allowed):
    step, state = table_step(table)
    return constrained_step(
        step,
        state,
        END,
        min_length=min_length,
        max_lengths=max_lengths,
        suppress_tokens=suppress,
        allowed_tokens=allowed,
    )


@pytest.mark.parametrize("constraints", CONSTRAINTS, ids=["min_length", "max_lengths", "suppress", "allowed"])
def test_an_exhaustive_beam_finds_the_constrained_optimum(constraints):
    table = random_table(1)
    step, state = wrapped(table, **constraints)
    # Width VOCABULARY ** STEPS keeps every hypothesis: the top beam is the optimum.
    result = {k: np.asarray(v) for k, v in beam_search(step, state, START, END, STEPS, VOCABULARY**STEPS).items()}
    for example in range(len(table)):
        want, score = brute_force_best(table, example, **constraints)
        got = result["ids"][example, 0].tolist()[: int(result["lengths"][example, 0])]
        assert got == want, (example, got, want)
        np.testing.assert_allclose(float(result["scores"][example, 0]), score, rtol=1e-5)


@pytest.mark.parametrize("constraints", CONSTRAINTS, ids=["min_length", "max_lengths", "suppress", "allowed"])
@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
def test_every_search_keeps_the_constraints(constraints, method):
    table = random_table(2)
    step, state = wrapped(table, **constraints)
    if method == "greedy":
        result = greedy_search(step, state, START, END, STEPS)
        ids, lengths = np.asarray(result["ids"])[:, None], np.asarray(result["lengths"])[:, None]
    elif method == "sample":
        result = sampling_search(step, state, START, END, STEPS, seed=3, temperature=3.0)
        ids, lengths = np.asarray(result["ids"])[:, None], np.asarray(result["lengths"])[:, None]
    else:
        result = beam_search(step, state, START, END, STEPS, 3)
        ids, lengths = np.asarray(result["ids"]), np.asarray(result["lengths"])
    for example in range(len(table)):
        for row, length in zip(ids[example], lengths[example]):
            for t, token in enumerate(row[:length]):
                assert allowed_at(t, example, **constraints)[token], (example, t, token, row)


def test_greedy_under_constraints_is_the_constrained_argmax_path():
    table = random_table(4)
    constraints = CONSTRAINTS[2]
    step, state = wrapped(table, **constraints)
    result = greedy_search(step, state, START, END, STEPS)
    for example in range(len(table)):
        previous, want = START, []
        for t in range(STEPS):
            ok = allowed_at(t, example, **constraints)
            token = int(np.argmax(np.where(ok, table[example, t, previous], -np.inf)))
            want.append(token)
            previous = token
            if token == END:
                break
        assert np.asarray(result["ids"])[example, : len(want)].tolist() == want


def test_relative_max_lengths():
    got = relative_max_lengths(np.array([0, 3, 10]), 1.5, 2, max_length=12)
    np.testing.assert_array_equal(got, [2, 6, 12])
    np.testing.assert_array_equal(relative_max_lengths(np.array([1]), 0.0, -5, max_length=4), [1])


def numpy_top_p(logits, p):
    order = np.argsort(-logits, kind="stable")
    probabilities = np.exp(log_softmax(logits))[order]
    keep = np.cumsum(probabilities) - probabilities < p
    kept = np.zeros_like(logits, bool)
    kept[order[keep]] = True
    return kept


@pytest.mark.parametrize("p", [0.05, 0.5, 0.9, 0.999])
def test_top_p_keeps_the_smallest_set_reaching_p(p):
    rng = np.random.default_rng(0)
    logits = rng.normal(0, 2, size=(20, 9)).astype("float32")
    filtered = np.asarray(top_p_filter(logits, p))
    for row, out in zip(logits, filtered):
        kept = out > NEG_INF / 2
        np.testing.assert_array_equal(kept, numpy_top_p(row.astype(np.float64), p))
        probabilities = np.exp(log_softmax(row.astype(np.float64)))
        assert probabilities[kept].sum() >= p - 1e-6
        # Without its least likely token the kept set falls short of p.
        assert probabilities[kept].sum() - probabilities[kept].min() < p
        np.testing.assert_array_equal(out[kept], row[kept])
    np.testing.assert_array_equal(top_p_filter(logits, 1.0), logits)


def test_sampling_with_top_p_draws_only_from_the_nucleus():
    logits = np.log(np.array([[0.45, 0.3, 0.15, 0.1]], "float32"))  # nucleus at 0.7: tokens 0 and 1

    def step(ids, state):
        return ops.convert_to_tensor(np.repeat(logits, ops.shape(ids)[0], 0)), state

    state = ops.zeros((2000, 1))
    ids = np.asarray(sampling_search(step, state, 0, 99, 1, top_p=0.7, seed=1)["ids"])[:, 0]
    counts = np.bincount(ids, minlength=4)
    assert counts[2] == counts[3] == 0
    # Renormalised over the nucleus: 0.45 / 0.75 = 0.6 of the draws.
    assert abs(counts[0] / 2000 - 0.6) < 0.04


def decoder_model(**options):
    keras.utils.set_random_seed(0)
    vocabulary = 9
    source = keras.Input((None,), dtype="int32", name="source")
    allowed = keras.Input((vocabulary,), dtype="bool", name="allowed")
    memory = keras.layers.Embedding(vocabulary, 8, mask_zero=True)(source)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    decoder = ka.InferenceDecoder(
        cell, keras.layers.Embedding(vocabulary, 5), keras.layers.Dense(vocabulary), 1, 2, 8, **options
    )
    model = keras.Model([source, allowed], decoder(memory, allowed_tokens=allowed))
    return model, decoder


def test_inference_decoder_applies_and_saves_the_options(tmp_path):
    model, decoder = decoder_model(
        method="beam", beam_width=3, min_length=2, max_length_ratio=1.0, max_length_offset=1, suppress_tokens=[3]
    )
    rng = np.random.default_rng(0)
    source = rng.integers(1, 9, size=(6, 5)).astype("int32")
    source[:3, 2:] = 0  # three sources of length 2: at most 3 tokens each
    allowed = rng.random((6, 9)) < 0.7
    result = model.predict([source, allowed], verbose=0)
    source_lengths = (source != 0).sum(1)
    for example, (rows, lengths) in enumerate(zip(result["ids"], result["lengths"])):
        for row, length in zip(rows, lengths):
            assert 3 <= length <= source_lengths[example] + 1  # two tokens and the end, at least
            tokens = row[:length]
            assert 3 not in tokens and 2 not in tokens[:-1]
            assert all(allowed[example, t] for t in tokens if t != 2)
    config = decoder.get_config()
    assert {k: config[k] for k in ("min_length", "max_length_ratio", "max_length_offset", "suppress_tokens")} == {
        "min_length": 2,
        "max_length_ratio": 1.0,
        "max_length_offset": 1.0,
        "suppress_tokens": [3],
    }
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict([source, allowed], verbose=0)["ids"], result["ids"])


@pytest.mark.parametrize("method", ["greedy", "beam"])
def test_constrained_decoders_export_with_parity(method, tmp_path):
    model, _ = decoder_model(method=method, beam_width=3, min_length=1, suppress_tokens=[4])
    rng = np.random.default_rng(1)
    source = rng.integers(1, 9, size=(4, 6)).astype("int32")
    allowed = rng.random((4, 9)) < 0.6
    report = export_model(model, tmp_path / "export", sample_inputs=[{"source": source, "allowed": allowed}])
    assert report.max_abs_diff("onnx", "ids") == 0 and report.max_abs_diff("saved_model", "ids") == 0
    served = run_onnx(tmp_path / "export", {"source": source, "allowed": allowed})["outputs"]["ids"]
    np.testing.assert_array_equal(served, model.predict([source, allowed], verbose=0)["ids"])


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(min_length=8), r"`min_length` must be below `max_length` 8 .*got 8"),
        (dict(min_length=-1), r"`min_length` must be an integer >= 0; got -1"),
        (dict(top_p=0.0), r"`top_p` must be a finite number > 0; got 0.0"),
        (dict(top_p=1.5), r"`top_p` must be in \(0, 1\]; got 1.5"),
        (dict(suppress_tokens=[2]), r"`suppress_tokens` \[2\] includes the end token 2"),
        (dict(suppress_tokens=["a"]), r"`suppress_tokens` must be a list of integer ids; got \['a'\]"),
        (dict(max_length_ratio=-1.0), r"`max_length_ratio` must be a finite number > 0 or None; got -1.0"),
    ],
)
def test_bad_options_are_named(options, message):
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    with pytest.raises(ValueError, match=message):
        ka.InferenceDecoder(cell, keras.layers.Embedding(9, 5), keras.layers.Dense(9), 1, 2, 8, **options)
