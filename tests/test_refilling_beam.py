"""The refilling beam search (CTranslate2's): against a NumPy transcription of CTranslate2's
`BeamSearch::search` (src/decoding.cc), its limit without an early end (plain beam search), its
fields and a decoder's option. tests/test_ctranslate2.py holds it to CTranslate2 itself."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from keras_attention import decoding
from keras_attention.decoding import BeamSearch, RefillingBeamSearch, constrained_step
from tests.test_runtime_options import make_decoder, memory_batch, sharpened

pytestmark = pytest.mark.any_backend

VOCABULARY, END, STEPS, SOURCE = 7, 6, 5, 3


def tables(seed, batch=8, end_bias=0.8):
    """Random logits and alignments indexed by (example, time, previous token); the end token
    raised so that hypotheses end at every step on some rows and run to the limit on others."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, STEPS, VOCABULARY, VOCABULARY)).astype("float32") * 2
    logits[..., END] += end_bias
    alignments = rng.dirichlet(np.ones(SOURCE) * 0.5, size=(batch, STEPS, VOCABULARY)).astype("float32")
    return logits, alignments


def table_step(logits, alignments=None):
    def step(ids, state, time):  # state: each row's example, which the search tiles
        at = ops.minimum(time, STEPS - 1)
        previous = ops.reshape(ops.cast(ids, "int32"), (-1, 1, 1))
        rows = ops.take(ops.take(ops.convert_to_tensor(logits), state, axis=0), at, axis=1)
        result = ops.take_along_axis(rows, previous, axis=1)[:, 0]
        if alignments is None:
            return result, state
        rows = ops.take(ops.take(ops.convert_to_tensor(alignments), state, axis=0), at, axis=1)
        return result, state, ops.take_along_axis(rows, previous, axis=1)[:, 0]

    return step, ops.arange(len(logits), dtype="int32")


def log_softmax(x):
    x = x.astype("float64")
    x = x - x.max()
    return x - np.log(np.exp(x).sum())


def reference(logits, alignments, width, hypotheses, alpha, beta, form, min_length, max_lengths, patience, start=0):
    """CTranslate2's `BeamSearch::search`, one example at a time, as its C++ reads: the best
    2 * width candidates; of the first `width`, an ended one (every one at the last step) is
    registered and its slot takes the next candidate that does not end; stop at the last
    step, or once the top candidate has ended and `hypotheses` are registered (no penalty),
    or once `round(width * patience)` are (and `hypotheses`). Scores `log P / lp(n) + beta *
    sum log min(coverage, 1)`, sorted."""
    results = []
    for b, (example, attention) in enumerate(zip(logits, alignments)):
        a, limit = alpha[b], max_lengths[b]
        wanted = max(int(np.floor(width * patience[b] + 0.5)), hypotheses)
        beam = [([], 0.0, np.zeros(SOURCE))]  # (tokens, log P, coverage); the first step expands one
        pool, top_ended = [], False
        for time in range(limit):
            candidates = []
            for k, (tokens, log_prob, coverage) in enumerate(beam):
                previous = tokens[-1] if tokens else start
                row = example[time, previous].astype("float64").copy()
                if time < min_length:
                    row[END] = -np.inf
                step = log_softmax(row)
                for v in range(VOCABULARY):
                    extended = (tokens + [v], log_prob + step[v], coverage + attention[time, previous])
                    candidates.append((log_prob + step[v], k * VOCABULARY + v, extended))
            candidates = sorted(candidates, key=lambda c: (-c[0], c[1]))[: 2 * width]
            last = time + 1 == limit
            slots, offset = [c[2] for c in candidates[:width]], width
            for k in range(width):
                tokens = candidates[k][2][0]
                if tokens[-1] == END or last:
                    top_ended |= k == 0
                    pool.append(candidates[k][2])
                    for j in range(offset, len(candidates)):
                        if candidates[j][2][0][-1] != END:
                            slots[k], offset = candidates[j][2], j + 1
                            break
            early = a == 0 and beta == 0
            if last or (top_ended and len(pool) >= hypotheses if early else len(pool) >= wanted):
                break
            beam = slots
        scored = []
        for tokens, log_prob, coverage in pool:
            n = len(tokens)
            penalty = n**a if form == "average" else ((5 + n) / 6) ** a
            covered = coverage[coverage > 0]
            scored.append((log_prob / penalty + beta * np.log(np.minimum(covered, 1)).sum(), tokens, log_prob))
        scored = sorted(scored, key=lambda h: -h[0])[:hypotheses]
        results.append(scored)
    ids = np.full((len(results), hypotheses, STEPS), END)
    for b, scored in enumerate(results):
        for k, (_, tokens, _) in enumerate(scored):
            ids[b, k, : len(tokens)] = tokens

    # A pool that holds fewer than `hypotheses` (more than the beam, with patience) leaves empty slots.
    def padded(values, fill):
        return np.array([[v for v in row] + [fill] * (hypotheses - len(row)) for row in values])

    return {
        "ids": ids,
        "scores": padded([[h[0] for h in scored] for scored in results], -np.inf),
        "log_probs": padded([[h[2] for h in scored] for scored in results], -np.inf),
        "lengths": padded([[len(h[1]) for h in scored] for scored in results], 0),
        "finished": padded([[h[1][-1] == END for h in scored] for scored in results], False),
    }


def numpy_of(result):
    return {name: ops.convert_to_numpy(value) for name, value in result.items()}


CASES = {
    "no penalty, stops when the top candidate ended": dict(width=2, hypotheses=None, alpha=0.0, beta=0.0),
    "no penalty, waits for two of three": dict(width=3, hypotheses=2, alpha=0.0, beta=0.0, min_length=2),
    "average length penalty per example, run-time max_length": dict(
        width=3, hypotheses=None, alpha=[0.0, 0.5, 1.0, 2.0] * 2, beta=0.0, max_lengths=[5, 3, 4, 5, 2, 5, 5, 1]
    ),
    "gnmt length penalty and coverage penalty, two of three": dict(
        width=3, hypotheses=2, alpha=0.7, beta=0.4, form="gnmt"
    ),
    "patience 2: waits for four ended, returns four of a beam of two": dict(
        width=2, hypotheses=4, alpha=1.0, beta=0.0, patience=2.0
    ),
    "patience per example, some below num_hypotheses": dict(
        width=3, hypotheses=2, alpha=0.5, beta=0.0, patience=[0.4, 1.0, 1.5, 2.5] * 2
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_search_is_ctranslate2s(case):
    case = {"form": "average", "min_length": 0, "max_lengths": None, "patience": 1.0, **CASES[case]}
    logits, alignments = tables(seed=len(case["form"]) + case["width"])
    batch = len(logits)
    step, state = table_step(logits, alignments if case["beta"] else None)
    if case["min_length"]:
        step, state = constrained_step(step, state, END, min_length=case["min_length"])
    alpha = case["alpha"] if isinstance(case["alpha"], list) else [case["alpha"]] * batch
    runtime = {"length_penalty_weight": ops.convert_to_tensor(alpha)} if isinstance(case["alpha"], list) else {}
    patience = case["patience"] if isinstance(case["patience"], list) else [case["patience"]] * batch
    if isinstance(case["patience"], list):
        runtime["patience"] = ops.convert_to_tensor(patience, "float32")
    strategy = RefillingBeamSearch(
        case["width"],
        alpha[0],
        case["beta"],
        length_penalty_form=case["form"],
        num_hypotheses=case["hypotheses"],
        patience=patience[0] if not isinstance(case["patience"], list) else 1.0,
    )
    limits = case["max_lengths"]
    got = numpy_of(
        strategy.search(
            step,
            state,
            runtime,
            start_tokens=0,
            end_token=END,
            max_length=STEPS,
            length_limits=None if limits is None else ops.convert_to_tensor(limits, "int32"),
        )
    )
    hypotheses = case["hypotheses"] or case["width"]
    want = reference(
        logits,
        alignments,
        case["width"],
        hypotheses,
        alpha,
        case["beta"],
        case["form"],
        case["min_length"],
        limits or [STEPS] * batch,
        patience,
    )
    np.testing.assert_array_equal(got["ids"], want["ids"])
    np.testing.assert_array_equal(got["lengths"], want["lengths"])
    np.testing.assert_array_equal(got["finished"], want["finished"])
    np.testing.assert_allclose(got["scores"], want["scores"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["log_probs"], want["log_probs"], rtol=1e-5, atol=1e-5)
    # The cases reach what they are about: hypotheses that end early, and ones cut at the limit.
    limit = np.array(limits or [STEPS] * batch)[:, None]
    assert (got["finished"] & (got["lengths"] < limit)).any()
    assert (~got["finished"] & (got["lengths"] == limit)).any()
    assert (got["lengths"][got["finished"]] > case["min_length"]).all()
    if case["hypotheses"] and case["hypotheses"] > case["width"]:  # more hypotheses than beams, all filled somewhere
        assert ((got["lengths"] > 0).sum(1) == case["hypotheses"]).any()


def test_without_an_early_end_it_is_beam_search():
    logits, _ = tables(seed=3, end_bias=-40.0)
    step, state = table_step(logits)
    common = dict(start_tokens=0, end_token=END, max_length=STEPS)
    got = numpy_of(RefillingBeamSearch(3, 0.6).search(step, state, **common))
    want = numpy_of(BeamSearch(3).search(step, state, **common))
    assert not got["finished"].any()
    for name in ("ids", "lengths", "log_probs"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_allclose(got["scores"], want["log_probs"] / STEPS**0.6, rtol=1e-6)


def test_the_search_fields_config_and_refusals():
    strategy = RefillingBeamSearch(5, 0.6, 0.2, length_penalty_form="gnmt", num_hypotheses=2)
    again = decoding.get(keras.saving.serialize_keras_object(strategy))
    assert type(again) is RefillingBeamSearch and again.get_config() == strategy.get_config()
    assert decoding.get("refilling_beam").length_penalty_form == "average"
    assert strategy.beams == 5 and strategy.hypotheses == 2
    with pytest.raises(ValueError, match=r"got the number 1.0: a weight \(CTranslate2's `length_penalty`\) is `len"):
        RefillingBeamSearch(length_penalty_form=1.0)
    with pytest.raises(ValueError, match=r"RefillingBeamSearch: unknown `length_penalty_form` 'wu'; expected one of"):
        RefillingBeamSearch(length_penalty_form="wu")
    with pytest.raises(ValueError, match=r"RefillingBeamSearch: `num_hypotheses` must be at most `beam_width` 2"):
        RefillingBeamSearch(2, num_hypotheses=3)
    step, state = table_step(tables(seed=0, batch=1)[0])  # no alignments
    with pytest.raises(ValueError, match=r"coverage penalty needs the step's alignments"):
        RefillingBeamSearch(2, coverage_penalty_weight=0.5).search(
            step, state, start_tokens=0, end_token=END, max_length=2
        )


def test_a_huge_patience_searches_to_the_last_step():
    """Patience 1e30 (one value or per row) waits as a patience too large to be met
    does: no count overflows to stop the search at once."""
    logits, _ = tables(seed=5)
    step, state = table_step(logits)
    strategy = RefillingBeamSearch(2, length_penalty_weight=1.0)

    def scores(patience):
        runtime = {"patience": patience}
        return numpy_of(strategy.search(step, state, runtime, start_tokens=0, end_token=END, max_length=STEPS))

    never_met = scores(float(STEPS * VOCABULARY))  # more than can ever end in STEPS steps
    assert not np.array_equal(never_met["scores"], scores(1.0)["scores"])
    for huge in (1e30, ops.convert_to_tensor([1e30] * len(logits), "float32")):
        np.testing.assert_array_equal(scores(huge)["ids"], never_met["ids"])
        np.testing.assert_array_equal(scores(huge)["scores"], never_met["scores"])


def test_decoders_take_the_strategy_and_its_config_keeps_it():
    keras.utils.set_random_seed(0)
    memory, mask = memory_batch()
    memory, mask = np.concatenate([memory, memory[2:]]), np.concatenate([mask, mask[2:]])  # row 3 is row 2
    options = dict(method="refilling_beam", beam_width=3, num_hypotheses=2, length_penalty_form="gnmt", min_length=2)
    decoder = sharpened(make_decoder(["length_penalty_weight"], **options), memory, mask, scale=2.0, end_bias=2.0)
    assert decoder.get_config()["length_penalty_form"] == "gnmt"
    weights = {"length_penalty_weight": [0.0, 0.0, 0.0, 10.0]}
    result = numpy_of(decoder(memory, memory_mask=mask, options=weights))
    assert result["ids"].shape == (4, 2, 8) and result["alignments"].shape == (4, 2, 8, 5)
    assert (result["lengths"] >= 3).all() and (result["ids"][:, :, :2] != 2).all()  # min_length
    # Each example's own weight (the strategy's reference test checks the values per example).
    assert not np.array_equal(result["ids"][3], result["ids"][2])
    # An ensemble of two copies of the decoder searches the decoder's own distribution.
    search = RefillingBeamSearch(3, 0.0, 0.0, "gnmt", 2)
    ensemble = ka.EnsembleDecoder([decoder, decoder], search=search, min_length=2, runtime_options=list(weights))
    np.testing.assert_array_equal(
        numpy_of(ensemble([memory, memory], memory_mask=mask, options=weights))["ids"], result["ids"]
    )
    # The decoder's config carries the strategy's own field (a keyword it does not declare).
    again = ka.InferenceDecoder.from_config(decoder.get_config())
    assert again.method == "refilling_beam" and again.length_penalty_form == "gnmt"
    assert again.get_config() == decoder.get_config()


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="XLA through tf.function")
def test_the_search_compiles_with_xla():
    import tensorflow as tf

    logits, alignments = tables(seed=2)
    step, state = table_step(logits, alignments)
    strategy = RefillingBeamSearch(3, 0.5, 0.2, num_hypotheses=2)
    common = dict(start_tokens=0, end_token=END, max_length=STEPS, return_token_log_probs=True)
    eager = numpy_of(strategy.search(step, state, **common))
    compiled = numpy_of(tf.function(lambda: strategy.search(step, state, **common), jit_compile=True)())
    for name in eager:
        np.testing.assert_allclose(compiled[name], eager[name], rtol=1e-6, err_msg=name)
    # Each token's log-probability, summed over a hypothesis, is its log-probability.
    np.testing.assert_allclose(eager["token_log_probs"].sum(-1), eager["log_probs"], rtol=1e-5)
