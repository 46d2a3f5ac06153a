"""Decoding constraints (min/max length, suppressed and allowed ids) and
nucleus sampling, against brute force and NumPy, through every search and
through InferenceDecoder (its export: test_decoders_onnx.py)."""

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

pytestmark = pytest.mark.any_backend

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


def reference_logits(logits, t, example, history, c):
    """The constrained logits of one step in NumPy (-inf where forbidden):
    `history` the tokens produced so far, `c` the constraints."""
    logits = np.asarray(logits, np.float64).copy()
    produced = sorted(set(history))
    if c.get("repetition_penalty", 1.0) != 1.0 and produced:
        r = c["repetition_penalty"]
        logits[produced] = np.where(logits[produced] > 0, logits[produced] / r, logits[produced] * r)
    ok = np.ones(VOCABULARY, bool)
    if t < c.get("min_length", 0):
        ok[END] = False
    if c.get("max_lengths") is not None and t >= c["max_lengths"][example] - 1:
        ok[:] = False
        ok[END] = True
    for token in c.get("suppress") or []:
        ok[token] = False
    if c.get("allowed") is not None:
        ok &= c["allowed"][example] | (np.arange(VOCABULARY) == END)
    n = c.get("ngram", 0)
    if n and len(history) >= n - 1:
        tail = tuple(history[len(history) - (n - 1) :])
        for i in range(len(history) - n + 1):
            if tuple(history[i : i + n - 1]) == tail:
                ok[history[i + n - 1]] = False
    prefix = c.get("prefix")
    if prefix is not None and t < len(prefix[example]):
        ok[:] = False
        ok[prefix[example][t]] = True
    return np.where(ok, logits, -np.inf)


def brute_force_best(table, example, c):
    """The most likely sequence under the constrained distribution, by
    enumerating every sequence of up to STEPS tokens (ended or cut at STEPS)."""
    best, best_score = None, -np.inf
    for length in range(1, STEPS + 1):
        for tokens in itertools.product(range(VOCABULARY), repeat=length):
            if END in tokens[:-1] or (length < STEPS and tokens[-1] != END):
                continue
            score, previous = 0.0, START
            for t, token in enumerate(tokens):
                logits = reference_logits(table[example, t, previous], t, example, list(tokens[:t]), c)
                if logits[token] == -np.inf:
                    score = -np.inf
                    break
                score += log_softmax(logits)[token]
                previous = token
            if score > best_score:
                best, best_score = tokens, score
    return list(best), best_score


CONSTRAINTS = {
    "min_length": dict(min_length=2),
    "max_lengths": dict(max_lengths=np.array([1, 2, 3, 4, 2])),
    "suppress": dict(min_length=1, suppress=[2]),
    "allowed": dict(
        min_length=2,
        allowed=np.array([[1, 1, 0, 1], [1, 1, 1, 0], [0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 0]], bool),
    ),
    "repetition": dict(repetition_penalty=3.0, min_length=3),
    "ngram_1": dict(ngram=1),
    "ngram_2": dict(ngram=2, min_length=3),
    "prefix": dict(prefix=[[3], [2, 3], [], [0, 0, 3], [2]]),
}


def wrapped(table, c):
    step, state = table_step(table)
    prefix = c.get("prefix")
    options = {}
    if prefix is not None:
        width = max(map(len, prefix)) or 1
        padded = np.zeros((len(prefix), width), "int32")
        for row, ids in enumerate(prefix):
            padded[row, : len(ids)] = ids
        options = dict(prefix=padded, prefix_lengths=np.array([len(p) for p in prefix], "int32"))
    return constrained_step(
        step,
        state,
        END,
        min_length=c.get("min_length", 0),
        max_lengths=c.get("max_lengths"),
        suppress_tokens=c.get("suppress"),
        allowed_tokens=c.get("allowed"),
        repetition_penalty=c.get("repetition_penalty", 1.0),
        no_repeat_ngram_size=c.get("ngram", 0),
        max_length=STEPS,
        **options,
    )


@pytest.mark.parametrize("name", list(CONSTRAINTS))
def test_an_exhaustive_beam_finds_the_constrained_optimum(name):
    c = CONSTRAINTS[name]
    table = random_table(1)
    step, state = wrapped(table, c)
    # Width VOCABULARY ** STEPS keeps every hypothesis: the top beam is the optimum.
    result = {
        k: ops.convert_to_numpy(v) for k, v in beam_search(step, state, START, END, STEPS, VOCABULARY**STEPS).items()
    }
    for example in range(len(table)):
        want, score = brute_force_best(table, example, c)
        got = result["ids"][example, 0].tolist()[: int(result["lengths"][example, 0])]
        assert got == want, (example, got, want)
        np.testing.assert_allclose(float(result["scores"][example, 0]), score, rtol=1e-5)


@pytest.mark.parametrize("name", list(CONSTRAINTS))
@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
def test_every_search_keeps_the_constraints(name, method):
    c = CONSTRAINTS[name]
    table = random_table(2)
    step, state = wrapped(table, c)
    if method == "greedy":
        result = greedy_search(step, state, START, END, STEPS)
        ids, lengths = ops.convert_to_numpy(result["ids"])[:, None], ops.convert_to_numpy(result["lengths"])[:, None]
    elif method == "sample":
        result = sampling_search(step, state, START, END, STEPS, seed=3, temperature=3.0)
        ids, lengths = ops.convert_to_numpy(result["ids"])[:, None], ops.convert_to_numpy(result["lengths"])[:, None]
    else:
        result = beam_search(step, state, START, END, STEPS, 3)
        ids, lengths = ops.convert_to_numpy(result["ids"]), ops.convert_to_numpy(result["lengths"])
    for example in range(len(table)):
        for row, length in zip(ids[example], lengths[example]):
            for t, token in enumerate(row[:length]):
                logits = reference_logits(np.zeros(VOCABULARY), t, example, list(row[:t]), c)
                assert logits[token] > -np.inf, (example, t, token, row)


@pytest.mark.parametrize("name", list(CONSTRAINTS))
def test_greedy_under_constraints_is_the_constrained_argmax_path(name):
    c = CONSTRAINTS[name]
    table = random_table(4)
    step, state = wrapped(table, c)
    result = greedy_search(step, state, START, END, STEPS)
    for example in range(len(table)):
        previous, want = START, []
        for t in range(STEPS):
            token = int(np.argmax(reference_logits(table[example, t, previous], t, example, want, c)))
            want.append(token)
            previous = token
            if token == END:
                break
        assert ops.convert_to_numpy(result["ids"])[example, : len(want)].tolist() == want


@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
def test_an_examples_length_limit_wins_over_a_min_length_at_or_above_it(method):
    # Issue 34 item 8: with min_length 3 over a limit of 2 tokens, the last
    # step forbade every id and greedy emitted the suppressed id 0. The limit
    # wins: the end comes at the limit, no forbidden id is ever produced.
    def prefers_the_end(ids, state, time):
        return state + ops.convert_to_tensor([[4.0, 5.0, 1.0, 2.0]], "float32"), state  # one row per hypothesis

    limits = np.array([2, 4], "int32")
    step, state = constrained_step(
        prefers_the_end, ops.zeros((2, 1)), END, min_length=3, max_lengths=limits, suppress_tokens=[0]
    )
    if method == "beam":
        result = beam_search(step, state, START, END, 6, 2)
        ids, lengths = (ops.convert_to_numpy(result[k])[:, 0] for k in ("ids", "lengths"))
    else:
        search = greedy_search if method == "greedy" else sampling_search
        result = search(step, state, START, END, 6, **({"seed": 1, "temperature": 3.0} if method == "sample" else {}))
        ids, lengths = (ops.convert_to_numpy(result[k]) for k in ("ids", "lengths"))
    for row, length, limit in zip(ids, lengths, limits):
        assert length == limit and row[limit - 1] == END, (row, length)
        assert set(row[: limit - 1].tolist()) <= {2, 3}, row  # neither the suppressed id nor an early end
    if method == "greedy":
        np.testing.assert_array_equal(ids, [[3, END, END, END, END, END], [3, 3, 3, END, END, END]])


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
    filtered = ops.convert_to_numpy(top_p_filter(logits, p))
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
    ids = ops.convert_to_numpy(sampling_search(step, state, 0, 99, 1, top_p=0.7, seed=1)["ids"])[:, 0]
    counts = np.bincount(ids, minlength=4)
    assert counts[2] == counts[3] == 0
    # Renormalised over the nucleus: 0.45 / 0.75 = 0.6 of the draws.
    assert abs(counts[0] / 2000 - 0.6) < 0.04


def decoder_model(**options):
    keras.utils.set_random_seed(0)
    vocabulary = 9
    source = keras.Input((None,), dtype="int32", name="source")
    allowed = keras.Input((vocabulary,), dtype="bool", name="allowed")
    prefix = keras.Input((None,), dtype="int32", name="prefix")
    memory = keras.layers.Embedding(vocabulary, 8, mask_zero=True)(source)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    decoder = ka.InferenceDecoder(
        cell, keras.layers.Embedding(vocabulary, 5), keras.layers.Dense(vocabulary), 1, 2, 8, **options
    )
    model = keras.Model([source, allowed, prefix], decoder(memory, allowed_tokens=allowed, target_prefix=prefix))
    return model, decoder


PREFIX = np.array([[3, 4, -1], [-1, -1, -1], [5, 5, 5], [7, -1, -1]], "int32")  # -1 pads


def test_inference_decoder_applies_and_saves_the_options(tmp_path):
    model, decoder = decoder_model(
        method="beam", beam_width=3, min_length=2, max_length_ratio=1.0, max_length_offset=1, suppress_tokens=[3]
    )
    rng = np.random.default_rng(0)
    source = rng.integers(1, 9, size=(6, 5)).astype("int32")
    source[:3, 2:] = 0  # three sources of length 2: at most 3 tokens each
    allowed = rng.random((6, 9)) < 0.7
    no_prefix = np.full((6, 1), -1, "int32")
    result = model.predict([source, allowed, no_prefix], verbose=0)
    source_lengths = (source != 0).sum(1)
    for example, (rows, lengths) in enumerate(zip(result["ids"], result["lengths"])):
        for row, length in zip(rows, lengths):
            assert 3 <= length <= source_lengths[example] + 1  # two tokens and the end, at least
            tokens = row[:length]
            assert 3 not in tokens and 2 not in tokens[:-1]
            assert all(allowed[example, t] for t in tokens if t != 2)
    config = decoder.get_config()
    # The keywords became processors, which the config serializes.
    saved = {p["class_name"]: p["config"] for p in config["processors"]}
    assert saved == {
        "MinLength": {"min_length": 2},
        "RelativeMaxLength": {"max_length_ratio": 1.0, "max_length_offset": 1.0},
        "SuppressTokens": {"suppress_tokens": [3]},
    }
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict([source, allowed, no_prefix], verbose=0)["ids"], result["ids"])


def test_processors_as_objects_are_the_keyword_forms_and_round_trip(tmp_path):
    from keras_attention.decoding import processors as P

    keywords = dict(
        min_length=2, max_length_ratio=1.0, max_length_offset=1, suppress_tokens=[3], no_repeat_ngram_size=2
    )
    objects = [P.NoRepeatNgram(2), P.SuppressTokens([3]), P.RelativeMaxLength(1.0, 1)]
    sugar, model_sugar = decoder_model(method="beam", beam_width=3, **keywords)[::-1]
    built, model_built = decoder_model(
        method="beam", beam_width=3, processors=[*objects[:2], P.MinLength(2), objects[2]]
    )[::-1]
    assert built.processors == sugar.processors  # in the composing order, whichever order given
    assert [type(p).__name__ for p in sugar.processors] == [
        "MinLength",
        "RelativeMaxLength",
        "SuppressTokens",
        "NoRepeatNgram",
    ]
    rng = np.random.default_rng(1)
    source = rng.integers(1, 9, size=(4, 5)).astype("int32")
    feeds = [source, np.ones((4, 9), bool), np.full((4, 1), -1, "int32")]
    model_built.set_weights(model_sugar.get_weights())
    expected = model_sugar.predict(feeds, verbose=0)["ids"]
    np.testing.assert_array_equal(model_built.predict(feeds, verbose=0)["ids"], expected)
    model_built.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded.predict(feeds, verbose=0)["ids"], expected)
    # A processor named by its registered name takes its defaults; one given twice is refused.
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    parts = (cell, keras.layers.Embedding(9, 5), keras.layers.Dense(9), 1, 2, 8)
    assert ka.InferenceDecoder(*parts, processors=["min_length"]).processors == [P.MinLength(0)]
    with pytest.raises(ValueError, match=r"`min_length` is given both as a keyword \(2\) and by `processors`"):
        ka.InferenceDecoder(*parts, min_length=2, processors=[P.MinLength(3)])
    with pytest.raises(ValueError, match=r"`processors` lists ForcedPrefix\(\), which a call adds by giving"):
        ka.InferenceDecoder(*parts, processors=[P.ForcedPrefix()])
    with pytest.raises(ValueError, match=r"`min_length` must be below `max_length` 8 .*got 9"):
        ka.InferenceDecoder(*parts, processors=[P.MinLength(9)])


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
        (dict(repetition_penalty=0.5), r"`repetition_penalty` must be a finite number >= 1; got 0.5"),
        (dict(no_repeat_ngram_size=-2), r"`no_repeat_ngram_size` must be an integer >= 0; got -2"),
    ],
)
def test_bad_options_are_named(options, message):
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    with pytest.raises(ValueError, match=message):
        ka.InferenceDecoder(cell, keras.layers.Embedding(9, 5), keras.layers.Dense(9), 1, 2, 8, **options)


@pytest.mark.parametrize("method", ["greedy", "sample", "beam"])
def test_token_log_probs_are_each_tokens_and_sum_to_the_score(method):
    table = random_table(6)
    step, state = table_step(table)
    if method == "greedy":
        result = greedy_search(step, state, START, END, STEPS, return_token_log_probs=True)
    elif method == "sample":
        result = sampling_search(step, state, START, END, STEPS, seed=2, return_token_log_probs=True)
    else:
        result = beam_search(step, state, START, END, STEPS, 3, return_token_log_probs=True)
    result = {k: ops.convert_to_numpy(v) for k, v in result.items()}
    ids, lengths, token_log_probs = result["ids"], result["lengths"], result["token_log_probs"]
    total = result["log_probs"] if method == "beam" else result["scores"]
    if method != "beam":
        ids, lengths, token_log_probs, total = ids[:, None], lengths[:, None], token_log_probs[:, None], total[:, None]
    for example in range(len(table)):
        for row, length, per_token, want_total in zip(
            ids[example], lengths[example], token_log_probs[example], total[example]
        ):
            previous = START
            for t, token in enumerate(row[:length]):
                want = log_softmax(table[example, t, previous].astype(np.float64))[token]
                np.testing.assert_allclose(per_token[t], want, rtol=1e-5, atol=1e-6)
                previous = token
            np.testing.assert_array_equal(per_token[length:], 0.0)
            np.testing.assert_allclose(per_token.sum(), want_total, rtol=1e-5, atol=1e-5)


def test_inference_decoder_returns_the_best_n_hypotheses_with_token_log_probs():
    full, _ = decoder_model(method="beam", beam_width=4)
    best, decoder = decoder_model(method="beam", beam_width=4, num_hypotheses=2, return_token_log_probs=True)
    best.set_weights(full.get_weights())
    rng = np.random.default_rng(3)
    feeds = [rng.integers(1, 9, size=(3, 5)).astype("int32"), np.ones((3, 9), bool), np.full((3, 1), -1, "int32")]
    want, got = full.predict(feeds, verbose=0), best.predict(feeds, verbose=0)
    assert got["ids"].shape == (3, 2, 8) and got["token_log_probs"].shape == (3, 2, 8)
    for name in ("ids", "scores", "lengths", "log_probs"):
        np.testing.assert_array_equal(got[name], want[name][:, :2])
    np.testing.assert_allclose(got["token_log_probs"].sum(-1), got["log_probs"], rtol=1e-5, atol=1e-5)
    assert decoder.get_config()["num_hypotheses"] == 2
    with pytest.raises(ValueError, match=r"`num_hypotheses` must be at most `beam_width` 4; got 5"):
        decoder_model(method="beam", beam_width=4, num_hypotheses=5)
