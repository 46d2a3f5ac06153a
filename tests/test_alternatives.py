"""Alternatives at a prefix (CTranslate2's `return_alternatives`): the search
against a NumPy simulation of a table of logits (forced prefixes of every
length, empty alternatives, the end token, per-example thresholds), each
alternative against greedy search with its first token forced, a decoder's
keywords, config and refusals (the export parity: test_alternatives_export.py,
CTranslate2's own: test_ctranslate2.py)."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention.decoding import NEG_INF, AlternativesSearch, alternatives_search, strategies
from keras_attention.decoding.processors import AllowedTokens, ForcedPrefix, processed_step
from tests.table_steps import table_step

pytestmark = pytest.mark.any_backend

END, VOCABULARY, STEPS = 2, 6, 6


def transitions(seed, examples=3):
    """Logits by (example, time, previous id), the end (id 2) now and then the favourite."""
    logits = np.random.default_rng(seed).normal(size=(examples, STEPS, VOCABULARY, VOCABULARY)).astype("float32")
    logits[..., END] -= 0.5
    return logits


def log_softmax(row):
    row = row.astype("float64")
    return row - np.log(np.exp(row - row.max()).sum()) - row.max()


def numpy_alternatives(logits, count, prefixes, min_probability=0.0, limits=None):
    """The strategy's definition, one example and one alternative at a time:
    the prefix forced (log-probability 0), the `j`-th most likely token at
    the prefix's end (the end token excluded while another is allowed), then
    greedy; an alternative whose first token is less likely than the
    threshold (or forbidden) keeps the prefix only, scored `NEG_INF`."""
    examples = len(logits)
    ids = np.full((examples, count, STEPS), END)
    scores = np.zeros((examples, count))
    lengths = np.zeros((examples, count), "int64")
    finished = np.zeros((examples, count), bool)
    thresholds = np.broadcast_to(min_probability, (examples,))
    for b in range(examples):
        prefix, limit = list(prefixes[b]), STEPS if limits is None else limits[b]
        for j in range(count):
            tokens, score, previous, dropped = [], 0.0, 0, False
            for time in range(limit):
                row = logits[b, time, previous].copy()
                if time < len(prefix):
                    token = prefix[time]
                elif time == len(prefix):
                    if (row[np.arange(VOCABULARY) != END] > NEG_INF / 2).any():
                        row[END] = NEG_INF
                    log_probs = log_softmax(row)
                    token = int(np.argsort(-log_probs, kind="stable")[j])
                    dropped = log_probs[token] < NEG_INF / 2 or np.exp(log_probs[token]) < thresholds[b]
                    score += log_probs[token]
                else:
                    log_probs = log_softmax(row)
                    token = int(np.argmax(log_probs))
                    score += log_probs[token]
                tokens.append(token)
                if token == END:
                    break
                previous = token
            if dropped:
                tokens, score = prefix, NEG_INF
            ids[b, j, : len(tokens)] = tokens
            scores[b, j], lengths[b, j] = score, len(tokens)
            finished[b, j] = bool(tokens) and tokens[-1] == END and not dropped
    return {"ids": ids, "scores": scores, "lengths": lengths, "finished": finished}


def search(logits, count, prefixes, extra=(), **options):
    """The strategy over the table, the prefixes forced by `ForcedPrefix` as a decoder does."""
    width = max(1, max(len(p) for p in prefixes))
    table = np.array([list(p) + [-1] * (width - len(p)) for p in prefixes], "int32")
    step, state = processed_step(
        table_step(logits),
        ops.arange(len(logits), dtype="int32"),
        [*extra, ForcedPrefix()],
        END,
        {"target_prefix": ops.convert_to_tensor(table), "max_length": STEPS},
    )
    lengths = np.array([len(p) for p in prefixes], "int32")
    result = alternatives_search(step, state, 0, END, STEPS, count, branch_at=lengths, **options)
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


def assert_equal_results(got, want):
    for name in ("ids", "lengths", "finished"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-4)
    np.testing.assert_array_equal(got["log_probs"], got["scores"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_is_the_numpy_simulation_for_prefixes_of_every_length(seed):
    logits = transitions(seed)
    for count, prefixes in ((3, [[], [4], [3, 5]]), (2, [[5, 4, 3], [], [1]]), (1, [[3], [4, 1, 5, 3], []])):
        got = search(logits, count, prefixes)
        want = numpy_alternatives(logits, count, prefixes)
        assert_equal_results(got, want)
        # The alternatives part at the prefix's end, each on its own first token, best first.
        for b, prefix in enumerate(prefixes):
            assert (got["ids"][b, :, : len(prefix)] == prefix).all()
            firsts = got["ids"][b, :, len(prefix)]
            assert len(set(firsts.tolist())) == count and END not in firsts


def test_a_prefix_that_fills_the_length_limit_leaves_every_alternative_the_prefix():
    logits = transitions(3)
    prefixes = [[3, 4, 5], [], [1, 1]]
    limits = np.array([3, 4, 2], "int32")
    got = search(logits, 2, prefixes, length_limits=limits)
    want = numpy_alternatives(logits, 2, prefixes, limits=limits)
    assert_equal_results(got, want)
    np.testing.assert_array_equal(got["ids"][0, :, :3], [[3, 4, 5], [3, 4, 5]])
    np.testing.assert_array_equal(got["scores"][[0, 2]], 0.0)  # nothing was chosen: forced tokens only


def test_unlikely_alternatives_are_empty_with_a_threshold_per_example():
    logits = transitions(4)
    prefixes = [[3], [], [4, 5]]
    for threshold in (0.2, np.array([0.0, 0.3, 0.12], "float32"), 1.0):
        got = search(logits, 4, prefixes, min_expansion_probability=threshold)
        want = numpy_alternatives(logits, 4, prefixes, min_probability=threshold)
        assert_equal_results(got, want)
        emptied = got["scores"] == NEG_INF
        assert (got["lengths"][emptied] == np.array([len(p) for p in prefixes])[np.nonzero(emptied)[0]]).all()
        assert not got["finished"][emptied].any()
        if np.ndim(threshold) or threshold < 1:
            assert emptied.any() and not emptied.all()
        else:
            assert emptied.all()  # no first token is certain here
    # The emptied alternatives are the last ones: the order is the first tokens'.
    got = search(logits, 4, prefixes, min_expansion_probability=0.2)
    emptied = got["scores"] == NEG_INF
    assert (np.diff(emptied.astype(int), axis=1) >= 0).all()


def test_forbidden_first_tokens_are_no_alternatives_and_a_lone_end_token_is_the_first():
    logits = transitions(5)
    allowed = np.zeros((3, VOCABULARY), bool)
    allowed[0, [END, 4, 5]] = True  # two tokens besides the end
    allowed[1, [END, 1]] = True  # one
    allowed[2, :] = True
    extra = [AllowedTokens()]
    step, state = processed_step(
        table_step(logits),
        ops.arange(3, dtype="int32"),
        [*extra, ForcedPrefix()],
        END,
        {
            "allowed_tokens": ops.convert_to_tensor(allowed),
            "target_prefix": ops.convert_to_tensor(np.array([[3], [-1], [4]], "int32")),
            "max_length": STEPS,
        },
    )
    result = alternatives_search(step, state, 0, END, STEPS, 3, branch_at=np.array([1, 0, 1], "int32"))
    scores = ops.convert_to_numpy(result["scores"])
    ids = ops.convert_to_numpy(result["ids"])
    assert sorted(ids[0, :2, 1].tolist()) == [4, 5] and scores[0, 2] == NEG_INF
    assert ids[1, 0, 0] == 1 and (scores[1, 1:] == NEG_INF).all()
    assert (scores[2] > NEG_INF).all()
    # Only the end token allowed where the alternatives part: alternative 0 ends there, the others are empty.
    only_end = logits.copy()
    only_end[:, 1, :, :] = NEG_INF
    only_end[:, 1, :, END] = 0.0
    got = search(only_end, 3, [[3], [4], [5]])
    np.testing.assert_array_equal(got["ids"][:, 0, :2], [[3, END], [4, END], [5, END]])
    np.testing.assert_array_equal(got["lengths"], [[2, 1, 1]] * 3)
    np.testing.assert_array_equal(got["finished"][:, 0], True)
    np.testing.assert_allclose(got["scores"][:, 0], 0.0, atol=1e-6)
    assert (got["scores"][:, 1:] == NEG_INF).all()


def small_parts():
    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    embedding, readout = keras.layers.Embedding(9, 4), keras.layers.Dense(9)
    memory = np.random.default_rng(1).normal(size=(3, 4, 6)).astype("float32") * 3
    return (cell, embedding, readout), memory


def test_each_alternative_is_greedy_search_with_its_first_token_forced():
    parts, memory = small_parts()
    prefix = np.array([[4, 5], [-1, -1], [7, -1]], "int32")
    lengths = np.array([2, 0, 1])
    decoder = ka.InferenceDecoder(
        *parts, 1, END, 7, method="alternatives", num_alternatives=3, return_token_log_probs=True
    )
    result = {k: ops.convert_to_numpy(v) for k, v in decoder(memory, target_prefix=prefix).items()}
    assert result["ids"].shape == (3, 3, 7) and result["scores"].shape == (3, 3)
    # Alternative 0 is greedy search with the end token forbidden right after the prefix.
    first = ka.InferenceDecoder(*parts, 1, END, 7, runtime_options=["min_length"])
    greedy = first(memory, target_prefix=prefix, options={"min_length": lengths + 1})
    np.testing.assert_array_equal(result["ids"][:, 0], ops.convert_to_numpy(greedy["ids"]))
    np.testing.assert_allclose(result["scores"][:, 0], ops.convert_to_numpy(greedy["scores"]), atol=1e-5)
    # Alternative j: its first token forced, then greedy; its score adds that token's log-probability.
    plain = ka.InferenceDecoder(*parts, 1, END, 7)
    firsts = np.take_along_axis(result["token_log_probs"], lengths[:, None, None], axis=2)[..., 0]
    assert (np.diff(firsts, axis=1) <= 0).all() and (np.exp(firsts).sum(1) <= 1 + 1e-6).all()
    for j in range(3):
        longer = np.full((3, 3), -1, "int32")
        for b in range(3):
            longer[b, : lengths[b] + 1] = result["ids"][b, j, : lengths[b] + 1]
        forced = {k: ops.convert_to_numpy(v) for k, v in plain(memory, target_prefix=longer).items()}
        np.testing.assert_array_equal(result["ids"][:, j], forced["ids"])
        np.testing.assert_array_equal(result["lengths"][:, j], forced["lengths"])
        np.testing.assert_array_equal(result["finished"][:, j], forced["finished"])
        np.testing.assert_allclose(result["scores"][:, j], firsts[:, j] + forced["scores"], atol=1e-5)
    for b in range(3):  # three different completions of each example
        assert len({tuple(row) for row in result["ids"][b].tolist()}) == 3


def test_a_decoder_takes_the_method_serializes_it_and_refuses_bad_values():
    parts, memory = small_parts()
    decoder = ka.InferenceDecoder(
        *parts, 1, END, 6, method="alternatives", num_alternatives=2, min_expansion_probability=0.1
    )
    assert decoder.num_alternatives == 2 and decoder.min_expansion_probability == 0.1
    restored = ka.InferenceDecoder.from_config(decoder.get_config())
    assert (restored.method, restored.num_alternatives, restored.min_expansion_probability) == (
        "alternatives",
        2,
        0.1,
    )
    want = ops.convert_to_numpy(decoder(memory)["ids"])
    restored(memory)  # builds it
    restored.set_weights(decoder.get_weights())
    np.testing.assert_array_equal(ops.convert_to_numpy(restored(memory)["ids"]), want)
    strategy = AlternativesSearch(3, min_expansion_probability=0.25)
    again = strategies.get(keras.saving.serialize_keras_object(strategy))
    assert type(again) is AlternativesSearch and again.get_config() == strategy.get_config()
    by_object = ka.InferenceDecoder(*parts, 1, END, 6, search=strategy)
    assert by_object.output_spec_for(3, 4)["ids"].shape == (3, 3, 6)
    with pytest.raises(ValueError, match=r"AlternativesSearch: `num_alternatives` must be a positive integer"):
        AlternativesSearch(0)
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match=r"`min_expansion_probability` must be"):
            ka.InferenceDecoder(*parts, 1, END, 6, method="alternatives", min_expansion_probability=bad)
    too_many = ka.InferenceDecoder(*parts, 1, END, 6, method="alternatives", num_alternatives=10)
    with pytest.raises(ValueError, match=r"`num_alternatives` 10 is more than the decoder's 9 ids"):
        too_many(memory)
    runtime = ka.InferenceDecoder(
        *parts, 1, END, 6, method="alternatives", runtime_options=["min_expansion_probability"]
    )
    with pytest.raises(ValueError, match=r"min_expansion_probability"):
        runtime(memory, options={"min_expansion_probability": np.array([0.5, 2.0, 0.1], "float32")})
