"""Beam search that moves finished hypotheses out of the beam and refills it, as CTranslate2 searches.

A registered search strategy ("refilling_beam"), after CTranslate2's
`BeamSearch::search` (src/decoding.cc; OpenNMT-py and Hugging Face's
`generate` keep a beam the same way). At each step the `2 * beam_width`
most likely one-token extensions of the running hypotheses are ranked by
log-probability. Of the first `beam_width`, each that ends with the end
token (every one, at the last step) enters a pool of finished hypotheses
with its score; the beam takes the first `beam_width` candidates that do not
end, so `beam_width` hypotheses keep running. `BeamSearch` (tfa's
bookkeeping) keeps a finished hypothesis in its slot instead, and fewer run.

The pool is a tensor of `num_hypotheses` slots kept sorted by score (the
ones a search would return): the loop keeps its fixed shapes, so it compiles
with XLA and exports, loop included, to SavedModel and ONNX.
"""

from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_top_k
from keras_attention.decoding import _loop
from keras_attention.decoding.beam_steps import coverage_penalty
from keras_attention.decoding.beams import gather_beams, reorder_beams, tile_batch, write_step
from keras_attention.decoding.finished_pool import (
    LENGTH_PENALTY_FORMS,
    check_length_penalty_form,
    hypothesis_scores,
    merge_pool,
    patience_count,
)
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import BeamSearch, SearchStrategy, _BeamFields, check_num_hypotheses, register

__all__ = ["LENGTH_PENALTY_FORMS", "RefillingBeamSearch", "hypothesis_scores", "refilling_beam_search"]


def refilling_beam_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    beam_width,
    length_penalty_weight=0.0,
    coverage_penalty_weight=0.0,
    length_penalty_form="average",
    num_hypotheses=None,
    pad_token=None,
    return_alignments=True,
    return_token_log_probs=False,
    length_limits=None,
    patience=1.0,
):
    """Beam search with a pool of finished hypotheses, step for step CTranslate2's (see `RefillingBeamSearch`).

    The arguments are `beam_search`'s (no `early_stopping`: the stopping
    rule is CTranslate2's; no `length_convention`), with
    `length_penalty_form` ("average" or "gnmt", `hypothesis_scores`),
    `num_hypotheses` (default `beam_width`): the pool's size, which the
    search returns, and how many ended hypotheses an early stop waits for,
    and `patience` (a number > 0 or `(batch,)` values): with a penalty the
    search waits for `max(round(beam_width * patience), num_hypotheses)`
    ended hypotheses. Returns `beam_search`'s dict, `(batch,
    num_hypotheses, ...)`, the hypotheses best first by `scores`; slots no
    hypothesis filled are empty (ids `pad_token`, length 0, score `-inf`).
    """
    owner = "refilling_beam_search"
    step_fn = _loop.timed_step(step_fn)
    max_length = _loop.check_max_length(max_length)
    width = _checks.check_positive_int(owner, "beam_width", beam_width)
    patience = _loop.option_rows(
        patience, "float32", lambda v: _checks.check_number(owner, "patience", v, minimum=0, strict=True)
    )
    most = None if _loop.is_rows(patience) else patience_count(width, patience)
    size = check_num_hypotheses(owner, num_hypotheses, width, most) or width
    # How many ended hypotheses the search waits for (with a penalty), one
    # formula for a number and for rows: never fewer than the pool holds
    # (where CTranslate2 refuses the request), and counted in float32, so a
    # huge patience waits to the last step instead of overflowing an int.
    wanted = ops.maximum(ops.floor(ops.multiply(float(width), patience) + 0.5), float(size))
    _checks.check_choice(owner, "length_penalty_form", length_penalty_form, LENGTH_PENALTY_FORMS)
    alpha, beta = (
        _loop.option_rows(value, "float32", lambda v, name=name: _checks.check_number(owner, name, v, minimum=0))
        for name, value in (
            ("length_penalty_weight", length_penalty_weight),
            ("coverage_penalty_weight", coverage_penalty_weight),
        )
    )
    alpha_rows = ops.expand_dims(alpha, 1) if _loop.is_rows(alpha) else alpha
    beta_rows = ops.expand_dims(beta, 1) if _loop.is_rows(beta) else beta
    # CTranslate2 stops once the best candidate has ended when no penalty can
    # reorder the hypotheses; otherwise once `beam_width` have ended.
    if _loop.is_rows(alpha) or _loop.is_rows(beta):
        exit_early = ops.logical_and(ops.equal(alpha, 0.0), ops.equal(beta, 0.0))
    else:
        exit_early = alpha == 0 and beta == 0
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    limits = max_length if length_limits is None else ops.cast(length_limits, "int32")
    batch = _loop.batch_size_of(start_tokens, initial_state)
    first_ids = ops.repeat(_loop.start_ids(start_tokens, batch), width, axis=0)
    state = tile_batch(initial_state, width)

    def advance(time, logits, alignment, state, beams, pool, progress):
        vocabulary = ops.shape(logits)[-1]
        known = logits.shape[-1]
        candidates = 2 * width if known is None else min(2 * width, width * known)
        step_log_probs = ops.reshape(_loop.log_probabilities(logits), (batch, width, vocabulary))
        total = ops.maximum(ops.expand_dims(beams["log_probs"], -1) + step_log_probs, _loop.NEG_INF)
        totals, best = first_top_k(ops.reshape(total, (batch, width * vocabulary)), candidates)
        parents, tokens = ops.floor_divide(best, vocabulary), ops.mod(best, vocabulary)
        ends = ops.equal(tokens, end_token)
        valid = ops.greater(totals, _loop.NEG_INF / 2)  # not a masked token's or a dead beam's
        last = ops.greater_equal(time + 1, limits)
        done = progress["done"]
        if alignment is not None and ("coverage" in beams or "alignments" in beams):
            alignment = ops.reshape(ops.cast(alignment, "float32"), (batch, width, ops.shape(alignment)[-1]))

        # The best `width` that end (all of them at the last step) enter the pool.
        top_parents, top_tokens, top_ends = parents[:, :width], tokens[:, :width], ends[:, :width]
        last_rows = last if length_limits is None else ops.expand_dims(last, 1)
        entering = ops.logical_and(ops.logical_or(top_ends, last_rows), valid[:, :width])
        entering = ops.logical_and(entering, ops.expand_dims(ops.logical_not(done), 1))
        penalty = None
        if "coverage" in beams:
            covered = gather_beams(beams["coverage"] + alignment, top_parents)
            penalty = coverage_penalty(covered, beta_rows)
        lengths = ops.full((batch, width), time + 1, "int32")
        entries = {
            "scores": hypothesis_scores(totals[:, :width], lengths, alpha_rows, length_penalty_form, penalty),
            "log_probs": totals[:, :width],
            "lengths": lengths,
            "filled": entering,
            "ids": write_step(beams["ids"], top_parents, time, top_tokens),
        }
        if "alignments" in beams:
            entries["alignments"] = write_step(
                beams["alignments"], top_parents, time, gather_beams(alignment, top_parents)
            )
        if "token_log_probs" in beams:
            own = totals[:, :width] - gather_beams(beams["log_probs"], top_parents)
            entries["token_log_probs"] = write_step(beams["token_log_probs"], top_parents, time, own)
        pool = merge_pool(pool, entries, size)

        count = progress["count"] + ops.sum(ops.cast(entering, "int32"), axis=1)
        top_ended = ops.logical_or(
            progress["top_ended"], ops.logical_and(ops.logical_and(ends[:, 0], valid[:, 0]), ops.logical_not(done))
        )
        enough = ops.greater_equal(ops.cast(count, "float32"), wanted)
        decided = ops.logical_and(top_ended, ops.greater_equal(count, size))
        if exit_early is True or exit_early is False:
            stop = decided if exit_early else enough
        else:
            stop = ops.logical_or(
                ops.logical_and(exit_early, decided), ops.logical_and(ops.logical_not(exit_early), enough)
            )
        progress = {"count": count, "top_ended": top_ended, "done": ops.logical_or(ops.logical_or(done, last), stop)}

        # The beam: the first `width` candidates that do not end, best first.
        order = ops.arange(candidates, dtype="float32")
        _, kept = first_top_k(ops.where(ends, -1.0 - order, candidates - order), width)
        kept_parents, kept_tokens = gather_beams(parents, kept), gather_beams(tokens, kept)
        kept_totals = gather_beams(totals, kept)
        new = {"log_probs": kept_totals, "ids": write_step(beams["ids"], kept_parents, time, kept_tokens)}
        if "alignments" in beams:
            new["alignments"] = write_step(
                beams["alignments"], kept_parents, time, gather_beams(alignment, kept_parents)
            )
        if "coverage" in beams:
            new["coverage"] = gather_beams(beams["coverage"] + alignment, kept_parents)
        if "token_log_probs" in beams:
            own = ops.maximum(kept_totals - gather_beams(beams["log_probs"], kept_parents), _loop.NEG_INF)
            new["token_log_probs"] = write_step(beams["token_log_probs"], kept_parents, time, own)
        return ops.reshape(kept_tokens, (-1,)), reorder_beams(state, kept_parents), new, pool, progress

    # The first step outside the loop: it tells the source length for the buffers.
    time = _loop.first_time()
    logits, state, alignment = _loop.call_step(step_fn, first_ids, state, time)
    # Only beam 0 is live at the start, so the first expansion is not counted `width` times.
    live = ops.where(ops.equal(ops.arange(width), 0), 0.0, _loop.NEG_INF)
    beams = {
        "log_probs": ops.broadcast_to(ops.expand_dims(live, 0), (batch, width)),
        "ids": ops.full((batch, width, max_length), pad_token, dtype="int32"),
    }
    pool = {
        "scores": ops.full((batch, size), float("-inf"), "float32"),
        "log_probs": ops.full((batch, size), float("-inf"), "float32"),
        "lengths": ops.zeros((batch, size), "int32"),
        "filled": ops.zeros((batch, size), "bool"),
        "ids": ops.full((batch, size, max_length), pad_token, dtype="int32"),
    }
    if alignment is not None:
        source_length = ops.shape(alignment)[-1]
        if return_alignments:
            beams["alignments"] = ops.zeros((batch, width, max_length, source_length), "float32")
            pool["alignments"] = ops.zeros((batch, size, max_length, source_length), "float32")
        if _loop.is_rows(beta) or beta:  # tracked only to be penalised
            beams["coverage"] = ops.zeros((batch, width, source_length), "float32")
    elif _loop.is_rows(beta) or beta:
        raise ValueError(f"{owner}: the coverage penalty needs the step's alignments; the step returns none.")
    if return_token_log_probs:
        beams["token_log_probs"] = ops.zeros((batch, width, max_length), "float32")
        pool["token_log_probs"] = ops.zeros((batch, size, max_length), "float32")
    progress = {
        "count": ops.zeros((batch,), "int32"),
        "top_ended": ops.zeros((batch,), "bool"),
        "done": ops.zeros((batch,), "bool"),
    }
    loop = (time + 1, *advance(time, logits, alignment, state, beams, pool, progress))

    def cond(time, next_ids, state, beams, pool, progress):
        return ops.logical_and(ops.less(time, max_length), ops.logical_not(ops.all(progress["done"])))

    def body(time, next_ids, state, beams, pool, progress):
        logits, state, alignment = _loop.call_step(step_fn, next_ids, state, time)
        return (time + 1, *advance(time, logits, alignment, state, beams, pool, progress))

    *_, pool, _ = ops.while_loop(cond, body, loop)
    filled = pool["filled"]
    ids = ops.where(ops.expand_dims(filled, -1), pool["ids"], pad_token)
    lengths = ops.where(filled, pool["lengths"], 0)
    result = {
        "ids": ids,
        "scores": ops.where(filled, pool["scores"], float("-inf")),
        "log_probs": ops.where(filled, pool["log_probs"], float("-inf")),
        "lengths": lengths,
        "finished": _loop.ended(ids, lengths, end_token),
    }
    if "alignments" in pool:
        result["alignments"] = ops.where(ops.reshape(filled, (batch, size, 1, 1)), pool["alignments"], 0.0)
    if "token_log_probs" in pool:
        result["token_log_probs"] = ops.where(ops.expand_dims(filled, -1), pool["token_log_probs"], 0.0)
    return result


@register("refilling_beam")
class RefillingBeamSearch(_BeamFields, SearchStrategy):
    """Beam search that moves finished hypotheses to a pool and refills the beam: CTranslate2's search.

    CTranslate2's `BeamSearch::search` (src/decoding.cc), step for step;
    OpenNMT-py and Hugging Face's `generate` keep their beams the same way.
    At each step:

    1. every running hypothesis is extended by every token, and the best
       `2 * beam_width` extensions are ranked by log-probability `log P`
       (the end token's included), no penalty applied;
    2. of the first `beam_width`, each whose token is the end token enters
       the pool of finished hypotheses, scored by `hypothesis_scores` (at
       the last step, `max_length` or a request's, all `beam_width` enter,
       the ones that did not end as unfinished);
    3. the beam becomes the first `beam_width` candidates that do not end.

    The search of an example stops at its last step or, with no length or
    coverage penalty, once the best candidate of some step has ended and
    the pool holds `num_hypotheses`; with a penalty, once
    `round(beam_width * patience)` hypotheses have ended, and at least
    `num_hypotheses` (CTranslate2's `patience`, Kasai et al. 2022,
    arXiv:2204.05424: a patience above 1 searches on after `beam_width`
    have ended and may return up to that many; where CTranslate2 refuses a
    patience that waits for fewer than `num_hypotheses`, the search waits
    for `num_hypotheses`). A hypothesis' score is
    `log P / n ** alpha` (`length_penalty_form="average"`, CTranslate2's
    `length_penalty`) or `log P / ((5 + n) / 6) ** alpha` ("gnmt",
    `BeamSearch`'s, Wu et al. 2016, arXiv:1609.08144), `n` its tokens with
    the end token, plus `beta * sum_i log(min(c_i, 1))` over the source
    positions attended, `c` the attention summed over its steps
    (CTranslate2's `coverage_penalty`, `BeamSearch`'s). A candidate at the
    `NEG_INF` floor (a forbidden token) never enters the pool.

    What `BeamSearch` does instead: a finished hypothesis keeps its beam
    slot (tfa's `BeamSearchDecoder`), so fewer keep running; the penalties
    rank the candidates at every step. Without an end token inside
    `max_length` both searches are the same.

    Mapping to `ctranslate2.Translator.translate_batch`: `beam_size` is
    `beam_width`, `num_hypotheses` the same (ours defaults to `beam_width`:
    CTranslate2's early stop waits for that many), `length_penalty` is
    `length_penalty_weight` with the "average" form, `coverage_penalty`
    `coverage_penalty_weight`, `max_decoding_length` `max_length`,
    `min_decoding_length` `min_length` (CTranslate2's default is 1, ours 0),
    `patience` the same, `return_end_token=False` (its default). Its scores
    are ours; its hypotheses are our ids up to `lengths` less the end token.

    Shapes: the outputs are `BeamSearch`'s, `ids (batch, num_hypotheses,
    max_length)`, `scores`, `log_probs`, `lengths` (the end token counted)
    and `finished (batch, num_hypotheses)`, `alignments (batch,
    num_hypotheses, max_length, source)`; `length_penalty_weight`,
    `coverage_penalty_weight` and `patience` are run-time fields (one value
    or one per example), `length_penalty_form` and `num_hypotheses` shape
    the loop.

    Example:

    ```python
    strategy = keras_attention.decoding.RefillingBeamSearch(2, length_penalty_weight=1.0)
    logits = np.log(np.array([[0.3, 0.5, 0.2]], "float32"))  # token 0 ends; every step alike
    step = lambda ids, state, time: (np.repeat(logits, ids.shape[0], 0), state)
    result = strategy.search(step, np.zeros((1, 1), "float32"), start_tokens=1, end_token=0, max_length=3)
    # ids [[[1, 0, 0], [0, 0, 0]]], lengths [[2, 1]]: the two that ended (at steps 1 and 0; the
    # beam was refilled after each), scores log P / n: [[log(0.5 * 0.3) / 2, log(0.3)]] = [[-0.9486, -1.204]]
    ```
    """

    runtime_fields = BeamSearch.runtime_fields + (
        RuntimeField(
            "patience",
            "float32",
            0,
            strict=True,
            meaning="with a penalty, wait for round(beam_width * patience) ended hypotheses",
        ),
    )

    def __init__(
        self,
        beam_width=4,
        length_penalty_weight=0.0,
        coverage_penalty_weight=0.0,
        length_penalty_form="average",
        num_hypotheses=None,
        patience=1.0,
    ):
        owner = type(self).__name__
        self.patience = _checks.check_number(owner, "patience", patience, minimum=0, strict=True)
        most = patience_count(_checks.check_positive_int(owner, "beam_width", beam_width), self.patience)
        self._check_beam_fields(beam_width, length_penalty_weight, coverage_penalty_weight, num_hypotheses, most)
        self.length_penalty_form = check_length_penalty_form(owner, length_penalty_form)

    @classmethod
    def most_hypotheses(cls, beam_width, fields):
        patience = _checks.check_number(cls.__name__, "patience", fields.get("patience", 1.0), minimum=0, strict=True)
        return max(beam_width, patience_count(beam_width, patience))

    def get_config(self):
        return {
            "beam_width": self.beam_width,
            "length_penalty_weight": self.length_penalty_weight,
            "coverage_penalty_weight": self.coverage_penalty_weight,
            "length_penalty_form": self.length_penalty_form,
            "num_hypotheses": self.num_hypotheses,
            "patience": self.patience,
        }

    def search(self, step_fn, initial_state, runtime=None, **common):
        return refilling_beam_search(step_fn, initial_state, **{**self.get_config(), **(runtime or {})}, **common)
