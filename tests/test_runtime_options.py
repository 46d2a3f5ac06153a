"""Decoding options set per request (`runtime_options`): each against brute
force or NumPy, against the constructor's value, and Keras, SavedModel and
ONNX in agreement with non-default values."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import beam_search, constrained_step, greedy_search, hashed_uniform, sampling_search
from tests.test_decoding_constraints import (
    END,
    START,
    STEPS,
    VOCABULARY,
    log_softmax,
    numpy_top_p,
    random_table,
    reference_logits,
)

pytestmark = pytest.mark.any_backend

SOURCE = 3  # source positions of the aligned table step


def aligned_table_step(table, alignments):
    """Logits `table[b, t, previous]` and alignment `alignments[b, t, previous]`."""
    batch, steps, vocabulary, _ = table.shape
    flat = ops.convert_to_tensor(table.reshape(-1, vocabulary).astype("float32"))
    flat_alignments = ops.convert_to_tensor(alignments.reshape(-1, SOURCE).astype("float32"))

    def step(ids, state):
        time, example = state
        row = (example * steps + ops.minimum(time, steps - 1)) * vocabulary + ops.cast(ids, "int32")
        return ops.take(flat, row, axis=0), (time + 1, example), ops.take(flat_alignments, row, axis=0)

    return step, (ops.zeros((batch,), "int32"), ops.arange(batch, dtype="int32"))


def random_alignments(seed, batch=5):
    rng = np.random.default_rng(seed)
    energies = rng.normal(0, 2, size=(batch, STEPS, VOCABULARY, SOURCE))
    return np.exp(energies) / np.exp(energies).sum(-1, keepdims=True)


def brute_force(table, alignments, example, c, max_length, alpha=0.0, beta=0.0):
    """The best hypothesis of up to `max_length` tokens (ended by END or cut
    there) under the constrained distribution and the GNMT score, by
    enumerating every sequence."""
    best, best_score = None, -np.inf
    for length in range(1, max_length + 1):
        for tokens in itertools.product(range(VOCABULARY), repeat=length):
            if END in tokens[:-1] or (length < max_length and tokens[-1] != END):
                continue
            total, previous, coverage = 0.0, START, np.zeros(SOURCE)
            for t, token in enumerate(tokens):
                logits = reference_logits(table[example, t, previous], t, example, list(tokens[:t]), c)
                if logits[token] == -np.inf:
                    total = -np.inf
                    break
                total += log_softmax(logits)[token]
                coverage += alignments[example, t, previous]
                previous = token
            score = total / ((5.0 + length) / 6.0) ** alpha
            if tokens[-1] == END and beta:
                score += beta * np.log(np.minimum(coverage[coverage > 0], 1.0)).sum()
            if score > best_score:
                best, best_score = list(tokens), score
    return best, best_score


PER_EXAMPLE = {
    "max_length": np.array([1, 2, 3, 4, 2]),
    "min_length": np.array([0, 1, 2, 3, 1]),
    "length_penalty_weight": np.array([0.0, 0.5, 1.0, 2.0, 3.0]),
    "coverage_penalty_weight": np.array([0.0, 0.2, 0.5, 1.0, 2.0]),
    "repetition_penalty": np.array([1.0, 1.5, 2.0, 3.0, 5.0]),
    "no_repeat_ngram_size": np.array([0, 1, 2, 3, 1]),
}
CONSTRAINT_KEYS = {
    "min_length": "min_length",
    "repetition_penalty": "repetition_penalty",
    "no_repeat_ngram_size": "ngram",
}


def per_example_search(name, values, method, table, alignments, **search):
    """A search with `name` set per example (`values`, one per example)."""
    step, state = aligned_table_step(table, alignments)
    tensor = ops.convert_to_tensor(values, "int32" if values.dtype.kind == "i" else "float32")
    if name in CONSTRAINT_KEYS:
        step, state = constrained_step(step, state, END, max_length=STEPS, **{name: tensor})
    options = {"length_limits": tensor} if name == "max_length" else {}
    if name in ("length_penalty_weight", "coverage_penalty_weight"):
        options[name] = tensor
    if method == "beam":
        return beam_search(step, state, START, END, STEPS, VOCABULARY**STEPS, **options, **search)
    return greedy_search(step, state, START, END, STEPS, **options)


def example_constraints(name, values, example):
    return {CONSTRAINT_KEYS[name]: values[example]} if name in CONSTRAINT_KEYS else {}


@pytest.mark.parametrize("name", list(PER_EXAMPLE))
def test_per_example_values_find_each_examples_brute_force_optimum(name):
    # An exhaustive beam (nothing pruned) with one value per example: each
    # example's best hypothesis is the optimum under its own value.
    table, alignments, values = random_table(11), random_alignments(12), PER_EXAMPLE[name]
    result = {
        k: ops.convert_to_numpy(v) for k, v in per_example_search(name, values, "beam", table, alignments).items()
    }
    bests = []
    for example in range(len(table)):
        c = example_constraints(name, values, example)
        longest = int(values[example]) if name == "max_length" else STEPS
        alpha = values[example] if name == "length_penalty_weight" else 0.0
        beta = values[example] if name == "coverage_penalty_weight" else 0.0
        want, score = brute_force(table, alignments, example, c, longest, alpha, beta)
        length = int(result["lengths"][example, 0])
        assert result["ids"][example, 0, :length].tolist() == want, (example, result["ids"][example, 0], want)
        assert (result["ids"][example, 0, length:] == END).all()
        np.testing.assert_allclose(result["scores"][example, 0], score, rtol=1e-5, atol=1e-5)
        bests.append(want)
    # The values matter: with the first example's value everywhere some other example's optimum differs.
    uniform = {
        k: ops.convert_to_numpy(v)
        for k, v in per_example_search(name, np.full_like(values, values[0]), "beam", table, alignments).items()
    }
    assert any(uniform["ids"][b, 0, : int(uniform["lengths"][b, 0])].tolist() != bests[b] for b in range(1, len(table)))


@pytest.mark.parametrize("name", ["max_length", "min_length", "repetition_penalty", "no_repeat_ngram_size"])
def test_greedy_with_per_example_values_is_each_examples_argmax_path(name):
    table, alignments, values = random_table(13), random_alignments(14), PER_EXAMPLE[name]
    ids = ops.convert_to_numpy(per_example_search(name, values, "greedy", table, alignments)["ids"])
    for example in range(len(table)):
        c = example_constraints(name, values, example)
        longest = int(values[example]) if name == "max_length" else STEPS
        previous, want = START, []
        for t in range(longest):
            token = int(np.argmax(reference_logits(table[example, t, previous], t, example, want, c)))
            want.append(token)
            previous = token
            if token == END:
                break
        assert ids[example, : len(want)].tolist() == want
        assert (ids[example, len(want) :] == END).all()


# ---------------------------------------------------------------- sampling

_MODULUS, _HALF, _STEP = 2**31, 2**16, 0x1E3779B9


def numpy_mix(x):
    """Squares-style scramble (Widynski, arXiv:2004.06278) in 31 bits, in NumPy int64."""
    x = np.asarray(x, np.int64) % _MODULUS
    y = x * 0x42B2AE35 % _MODULUS
    z = (y + 0x05EBCA6B) % _MODULUS
    for add in (y, z, y, z):
        x = (x * x + add) % _MODULUS
        x = (x % _HALF) * (_MODULUS // _HALF) + x // _HALF
    return x


def numpy_uniform(seeds, time, vocabulary):
    row = numpy_mix(numpy_mix(seeds) + (time + 1) * _STEP)
    cell = numpy_mix(row[:, None] + (np.arange(vocabulary) + 1)[None, :] * _STEP)
    return ((cell // 256).astype(np.float64) + 0.5) / 2**23


def test_hashed_uniform_is_its_integer_formula_and_uniform():
    seeds = np.arange(3000)
    got = ops.convert_to_numpy(hashed_uniform(seeds, 5, 40))
    np.testing.assert_array_equal(got, numpy_uniform(seeds, 5, 40).astype("float32"))
    assert 0 < got.min() and got.max() < 1
    # Kolmogorov-Smirnov at the 1% level, and no structure between neighbouring tokens.
    values = np.sort(got.ravel())
    ks = np.abs(values - (np.arange(values.size) + 0.5) / values.size).max()
    assert ks < 1.63 / np.sqrt(values.size)
    counts, _, _ = np.histogram2d(got[:, :-1].ravel(), got[:, 1:].ravel(), bins=8)
    expected = counts.sum() / 64
    assert ((counts - expected) ** 2 / expected).sum() < 100  # chi-squared, 63 dof, 1%: 92.0 (+ margin)
    # A seed's draws do not depend on the rest of the batch.
    np.testing.assert_array_equal(ops.convert_to_numpy(hashed_uniform(np.array([17]), 5, 40))[0], got[17])


def numpy_sample(table, example, seed, temperature, top_k, top_p, longest=STEPS):
    """The sampling search in NumPy: Gumbel-max over the filtered, tempered
    log-probabilities, with the hashed draws."""
    previous, tokens = START, []
    for t in range(longest):
        log_probs = log_softmax(table[example, t, previous].astype(np.float64))
        logits = (log_probs - log_probs.max()) / temperature
        if 0 < top_k < VOCABULARY:
            logits = np.where(logits < np.sort(logits)[::-1][top_k - 1], -np.inf, logits)
        if top_p < 1:
            logits = np.where(numpy_top_p(logits, top_p), logits, -np.inf)
        noise = -np.log(-np.log(numpy_uniform(np.array([seed]), t, VOCABULARY)[0]))
        token = int(np.argmax(logits + noise))
        tokens.append(token)
        previous = token
        if token == END:
            break
    return tokens


SAMPLING = {
    "temperature": dict(temperature=[0.3, 1.0, 2.0, 5.0, 0.7]),
    "top_k": dict(temperature=[3.0] * 5, top_k=[1, 2, 3, 0, 2]),
    "top_p": dict(temperature=[2.0] * 5, top_p=[0.2, 0.5, 0.8, 1.0, 0.35]),
    "seed": dict(temperature=[1.5] * 5, seed=[0, 1, 2**31 - 1, 1, 12345]),
}


@pytest.mark.parametrize("name", list(SAMPLING))
def test_per_example_sampling_is_the_numpy_gumbel_max_of_the_hashed_draws(name):
    table = random_table(15)
    given = SAMPLING[name]
    values = {
        "temperature": np.asarray(given["temperature"], "float32"),
        "top_k": np.asarray(given.get("top_k", [0] * 5), "int32"),
        "top_p": np.asarray(given.get("top_p", [1.0] * 5), "float32"),
        "seed": np.asarray(given.get("seed", [7, 8, 9, 10, 11]), "int32"),
    }
    step, state = aligned_table_step(table, random_alignments(16))
    ids = ops.convert_to_numpy(sampling_search(step, state, START, END, STEPS, **values)["ids"])
    for example in range(len(table)):
        row = {k: v[example].item() for k, v in values.items()}
        want = numpy_sample(table, example, **row)
        assert ids[example, : len(want)].tolist() == want, (example, row)


def test_hashed_sampling_draws_from_the_filtered_distribution():
    # One step, 20000 examples with their own seeds, per-example filters.
    logits = np.log(np.array([0.35, 0.25, 0.2, 0.12, 0.08]))
    batch = 20000

    def step(ids, state):
        return ops.convert_to_tensor(np.tile(logits, (batch, 1)).astype("float32")), state

    for temperature, top_k, top_p in [(1.0, 0, 1.0), (2.0, 3, 1.0), (0.5, 0, 0.7)]:
        rows = {
            "temperature": np.full(batch, temperature, "float32"),
            "top_k": np.full(batch, top_k, "int32"),
            "top_p": np.full(batch, top_p, "float32"),
            "seed": np.arange(batch, dtype="int32") * 7 + 3,
        }
        ids = ops.convert_to_numpy(sampling_search(step, ops.zeros((batch, 1)), 0, 99, 1, **rows)["ids"])[:, 0]
        scaled = logits / temperature
        if top_k:
            scaled = np.where(scaled < np.sort(scaled)[::-1][top_k - 1], -np.inf, scaled)
        scaled = np.where(numpy_top_p(scaled, top_p), scaled, -np.inf)
        want = np.exp(log_softmax(scaled))
        counts = np.bincount(ids, minlength=5)
        assert counts[want == 0].sum() == 0
        kept = want > 0
        chi2 = ((counts[kept] - batch * want[kept]) ** 2 / (batch * want[kept])).sum()
        assert chi2 < 20.0, (temperature, top_k, top_p, counts / batch, want)  # <= 4 dof, 1%: 13.3


# --------------------------------------------------------- InferenceDecoder

SOURCE_VOCABULARY = TARGET_VOCABULARY = 9
DEFAULTS = dict(method="beam", beam_width=3)


def make_decoder(runtime_options=(), max_length=8, **options):
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    return ka.InferenceDecoder(
        cell,
        keras.layers.Embedding(TARGET_VOCABULARY, 5),
        keras.layers.Dense(TARGET_VOCABULARY),
        1,
        2,
        max_length,
        runtime_options=runtime_options,
        **options,
    )


def memory_batch(seed=0, batch=3):
    rng = np.random.default_rng(seed)
    memory = rng.normal(0, 1, size=(batch, 5, 6)).astype("float32")
    mask = np.arange(5)[None] < np.array([5, 3, 4][:batch] + [5] * max(0, batch - 3))[:, None]
    return memory, mask


def built(decoder, memory, members=1):
    """`decoder` built by a symbolic call over memories shaped as `memory`: an
    eager call decoded a batch only to build it (on TensorFlow its loop step by
    step in Python)."""
    inputs = keras.Input((None, memory.shape[-1])), keras.Input((None,), dtype="bool")
    decoder(inputs[0] if members == 1 else [inputs[0]] * members, memory_mask=inputs[1])
    return decoder


def sharpened(decoder, memory, mask, scale=3.0, end_bias=1.0):
    """Build `decoder` and scale its read-out (an untrained decoder is
    nearly uniform), the end token (2) made tempting or not."""
    built(decoder, memory)
    # Weights from NumPy at each initialiser's own scale: the same decoder on
    # every backend (Keras's seeded initialisers draw differently on each),
    # so the scales below let each option matter everywhere.
    rng = np.random.default_rng(0)
    for variable in decoder.trainable_weights:
        spread = float(np.std(ops.convert_to_numpy(variable)))
        variable.assign(rng.normal(0.0, spread, variable.shape).astype("float32"))
    kernel, bias = decoder.output_layer.get_weights()
    decoder.output_layer.set_weights([kernel * scale, bias + end_bias * (np.arange(len(bias)) == 2)])
    return decoder


RUNTIME = {
    # option: (method, its per-example values, other constructor options,
    # the read-out's scale and end-token bias that let the option matter)
    "max_length": ("beam", [2, 5, 8], {}, (3.0, 1.0)),
    "min_length": ("greedy", [0, 4, 7], {}, (1.0, 3.0)),
    "length_penalty_weight": ("beam", [0.0, 4.0, 10.0], {}, (1.0, 1.5)),
    "coverage_penalty_weight": ("beam", [0.0, 1.0, 5.0], {}, (1.0, 3.0)),
    "repetition_penalty": ("greedy", [1.0, 3.0, 10.0], {}, (3.0, 1.0)),
    "no_repeat_ngram_size": ("beam", [0, 1, 2], {}, (3.0, 1.0)),
    "temperature": ("sample", [0.2, 1.0, 4.0], {"seed": 0}, (3.0, 1.0)),
    "top_k": ("sample", [1, 3, 0], {"seed": 0, "temperature": 3.0}, (3.0, 1.0)),
    "top_p": ("sample", [0.1, 0.6, 1.0], {"seed": 0, "temperature": 3.0}, (3.0, 1.0)),
}


@pytest.mark.parametrize("name", list(RUNTIME))
def test_a_value_per_example_equals_a_decoder_built_with_it(name):
    method, values, constructor, (scale, end_bias) = RUNTIME[name]
    memory, mask = memory_batch()
    sampling = method == "sample"
    keras.utils.set_random_seed(0)
    runtime = sharpened(
        make_decoder((name, "seed") if sampling else (name,), method=method, beam_width=3, **constructor),
        memory,
        mask,
        scale,
        end_bias,
    )
    seeds = {"seed": [5, 6, 7]} if sampling else {}
    got = {
        k: ops.convert_to_numpy(v)
        for k, v in runtime(memory, memory_mask=mask, options={name: values, **seeds}).items()
    }
    default = ops.convert_to_numpy(runtime(memory, memory_mask=mask, options=seeds)["ids"])
    for example, value in enumerate(values):
        # The constructor's spellings: top_k None for all, max_length the output width.
        fixed = make_decoder(
            ("seed",) if sampling else (),
            method=method,
            beam_width=3,
            **{**constructor, name: None if (name, value) == ("top_k", 0) else value},
        )
        built(fixed, memory).set_weights(runtime.get_weights())
        want = {k: ops.convert_to_numpy(v) for k, v in fixed(memory, memory_mask=mask, options=seeds).items()}
        width = want["ids"].shape[-1]
        np.testing.assert_array_equal(got["ids"][example][..., :width], want["ids"][example], err_msg=f"{name}={value}")
        assert (got["ids"][example][..., width:] == 2).all()
        np.testing.assert_array_equal(got["lengths"][example], want["lengths"][example])
        np.testing.assert_allclose(got["scores"][example], want["scores"][example], rtol=1e-5, atol=1e-5)
    # The option changed something: a decoder ignoring it would fail above too.
    assert not np.array_equal(got["ids"], default)


def test_max_length_per_request_is_a_decoder_of_that_max_length():
    memory, mask = memory_batch()
    runtime = sharpened(make_decoder(("max_length",), method="beam", beam_width=3), memory, mask, scale=0.3)
    got = ops.convert_to_numpy(runtime(memory, memory_mask=mask, options={"max_length": 4})["ids"])
    short = make_decoder(method="beam", beam_width=3, max_length=4)
    built(short, memory).set_weights(runtime.get_weights())
    want = ops.convert_to_numpy(short(memory, memory_mask=mask)["ids"])
    np.testing.assert_array_equal(got[..., :4], want)
    assert (got[..., 4:] == 2).all() and not (want == 2).all()


def test_runtime_options_follow_the_call_and_the_config(tmp_path):
    memory, mask = memory_batch()
    decoder = make_decoder(("temperature", "seed", "max_length"), method="sample", seed=3)
    assert decoder.get_config()["runtime_options"] == ["temperature", "seed", "max_length"]
    assert decoder.option_defaults() == {"temperature": 1.0, "seed": 3, "max_length": 8}
    inputs = decoder.option_inputs()
    assert {name: (tensor.shape, tensor.dtype) for name, tensor in inputs.items()} == {
        "temperature": ((None,), "float32"),
        "seed": ((None,), "int32"),
        "max_length": ((None,), "int32"),
    }
    memory_input = keras.Input((None, 6), name="memory")
    model = keras.Model({"memory": memory_input, **inputs}, decoder(memory_input, options=inputs))
    feeds = {"memory": memory, "temperature": np.array([0.5, 2.0, 9.0], "float32"), "seed": None, "max_length": None}
    want = model(feeds)["ids"]
    # Left out (None), empty or given as the default: the same.
    empty = {**feeds, "seed": np.zeros(0, "int32"), "max_length": np.array([8], "int32")}
    np.testing.assert_array_equal(model(empty)["ids"], want)
    # The constructor's seed 3 for the batch: row b draws with row_seeds(3, b).
    streams = ops.convert_to_numpy(ka.decoding.row_seeds(np.full(3, 3), np.arange(3))).astype("int32")
    np.testing.assert_array_equal(model({**feeds, "seed": streams})["ids"], want)
    assert not np.array_equal(model({**feeds, "seed": np.array([3, 4, 5], "int32")})["ids"], want)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    np.testing.assert_array_equal(loaded(feeds)["ids"], want)
    assert loaded.layers[-1].runtime_options == ("temperature", "seed", "max_length")


def test_a_requests_sample_depends_on_its_seed_not_its_batch():
    memory, mask = memory_batch(batch=3)
    decoder = sharpened(make_decoder(("seed",), method="sample", seed=0, temperature=2.0), memory, mask)
    together = ops.convert_to_numpy(decoder(memory, memory_mask=mask, options={"seed": [11, 12, 13]})["ids"])
    alone = ops.convert_to_numpy(decoder(memory[1:2], memory_mask=mask[1:2], options={"seed": [12]})["ids"])
    np.testing.assert_array_equal(alone[0], together[1])
    other = ops.convert_to_numpy(decoder(memory, memory_mask=mask, options={"seed": [21, 22, 23]})["ids"])
    assert not np.array_equal(other, together)
    # Left out, or one seed for the batch, example b draws with row_seeds(seed, b):
    # rows differ, and stay reproducible.
    repeated = np.repeat(memory[:1], 3, 0), np.repeat(mask[:1], 3, 0)
    by_default = ops.convert_to_numpy(decoder(repeated[0], memory_mask=repeated[1])["ids"])
    assert len({tuple(row) for row in by_default}) > 1
    streams = ops.convert_to_numpy(ka.decoding.row_seeds(np.zeros(3), np.arange(3)))
    for seed in ([0], 0, streams):
        np.testing.assert_array_equal(
            by_default,
            ops.convert_to_numpy(decoder(repeated[0], memory_mask=repeated[1], options={"seed": seed})["ids"]),
        )


def ensemble_of(runtime_options, **options):
    members = [make_decoder(), make_decoder()]
    return ka.EnsembleDecoder(members, runtime_options=runtime_options, **options)


def test_the_ensemble_takes_runtime_options_as_every_search_does():
    memory, mask = memory_batch()
    runtime = ensemble_of(("max_length", "length_penalty_weight"), method="beam", beam_width=3)
    built(runtime, memory, members=2)
    got = ops.convert_to_numpy(
        runtime([memory, memory], memory_mask=mask, options={"max_length": [3, 8, 6], "length_penalty_weight": 2.0})[
            "ids"
        ]
    )
    for example, longest in enumerate([3, 8, 6]):
        fixed = ensemble_of((), method="beam", beam_width=3, max_length=longest, length_penalty_weight=2.0)
        built(fixed, memory, members=2).set_weights(runtime.get_weights())
        want = ops.convert_to_numpy(fixed([memory, memory], memory_mask=mask)["ids"])[example]
        np.testing.assert_array_equal(got[example, :, :longest], want)
        assert (got[example, :, longest:] == 2).all()


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(method="beam", runtime_options=("beam_width",)), r"names 'beam_width', which cannot change at run time"),
        (dict(method="beam", runtime_options=("num_hypotheses",)), r"'num_hypotheses', which cannot change"),
        (dict(method="beam", runtime_options=("temperature",)), r"'temperature', which method='beam' does not read"),
        (dict(method="greedy", runtime_options=("length_penalty_weight",)), r"method='greedy' does not read"),
        (dict(method="sample", runtime_options=("seed",)), r"a run-time `seed` needs an integer `seed`.*seed=None"),
        (dict(runtime_options=("max_length", "max_length")), r"names 'max_length' twice"),
        (dict(runtime_options=("speed",)), r"unknown option 'speed'; expected names from \['max_length'"),
        (dict(runtime_options="max_length"), r"`runtime_options` must be a list of option names"),
    ],
)
def test_bad_runtime_options_are_named_at_construction(options, message):
    with pytest.raises(ValueError, match=message):
        make_decoder(**options)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"max_length": [9]}, r"option `max_length` must be an integer from 1 to 8; got \[9\]"),
        ({"max_length": 0}, r"option `max_length` must be an integer from 1 to 8; got 0"),
        ({"min_length": [8]}, r"option `min_length` must be an integer from 0 to 7; got \[8\]"),
        ({"min_length": 4, "max_length": [8, 4, 8]}, r"`min_length` must be below `max_length`.*\[4\].*\[8, 4, 8\]"),
        (
            {"temperature": [1.0, -1.0, 1.0]},
            r"option `temperature` must be a finite number > 0; got \[1.0, -1.0, 1.0\]",
        ),
        ({"top_p": 1.5}, r"option `top_p` must be a finite number > 0 and <= 1; got 1.5"),
        ({"top_k": 2.5}, r"option `top_k` must be an integer >= 0; got 2.5"),
        ({"seed": -1}, r"option `seed` must be an integer from 0 to 2147483647; got -1"),
        ({"temperature": [1.0, 2.0]}, r"must hold 0 values \(the default\), 1 \(every example\) or 3"),
        ({"length_penalty_weight": 1.0}, r"`options` sets \['length_penalty_weight'\], which are not among"),
    ],
)
def test_bad_values_at_call_time_are_named(options, message):
    memory, mask = memory_batch()
    decoder = make_decoder(
        ("max_length", "min_length", "temperature", "top_p", "top_k", "seed"), method="sample", seed=0
    )
    with pytest.raises(ValueError, match=message):
        decoder(memory, memory_mask=mask, options=options)


def test_a_forced_prefix_longer_than_its_max_length_is_refused():
    memory, mask = memory_batch()
    decoder = make_decoder(("max_length",), method="greedy")
    prefix = np.array([[3, 4, 5, 6, -1], [3, -1, -1, -1, -1], [-1, -1, -1, -1, -1]], "int32")
    decoder(memory, memory_mask=mask, target_prefix=prefix, options={"max_length": [4, 2, 1]})  # fits
    with pytest.raises(ValueError, match=r"`target_prefix` forces 4 tokens on example 0, more than its max_length 3"):
        decoder(memory, memory_mask=mask, target_prefix=prefix, options={"max_length": 3})
    short = make_decoder(max_length=3)
    with pytest.raises(ValueError, match=r"forces 4 tokens on example 0, more than its max_length 3; got the"):
        short(memory, memory_mask=mask, target_prefix=prefix)


@pytest.mark.parametrize("bad", [TARGET_VOCABULARY, 40, -2])
def test_a_forced_prefix_outside_the_vocabulary_is_refused(bad):
    # Issue 34 item 10: such a prefix decoded to nothing, or pads, silently.
    memory, mask = memory_batch()
    decoder = make_decoder(method="greedy")
    fits = np.array([[3, TARGET_VOCABULARY - 1, -1], [0, -1, -1], [-1, -1, -1]], "int32")
    np.testing.assert_array_equal(
        ops.convert_to_numpy(decoder(memory, memory_mask=mask, target_prefix=fits)["ids"])[0, :2], [3, 8]
    )
    prefix = fits.copy()
    prefix[1, 1] = bad
    message = rf"`target_prefix` holds the id {bad} on example 1, outside the vocabulary: expected ids from 0 to 8"
    with pytest.raises(ValueError, match=message):
        decoder(memory, memory_mask=mask, target_prefix=prefix)
    ensemble = ka.EnsembleDecoder([decoder], method="beam", beam_width=2)
    with pytest.raises(ValueError, match=message):
        ensemble([memory], memory_mask=mask, target_prefix=prefix)
