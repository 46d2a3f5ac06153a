"""Beam search inside the graph, with GNMT length and coverage penalties.

One search step is a pure function of the step's logits and the beams, made
of the functions in `beam_steps` (`extend_hypotheses`, `coverage_penalty`,
`candidate_scores`, `select_candidates`; `search_is_decided` is the
early-stopping test), then `write_step`, `gather_beams` and `reorder_beams`
from `beams` (histories and decoder state follow the chosen parents).
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.beam_steps import (
    LENGTH_CONVENTIONS,
    candidate_scores,
    coverage_penalty,
    extend_hypotheses,
    search_is_decided,
    select_candidates,
)
from keras_attention.decoding.beams import gather_beams, reorder_beams, tile_batch, write_step

__all__ = ["beam_search"]


def beam_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    beam_width,
    length_penalty_weight=0.0,
    coverage_penalty_weight=0.0,
    pad_token=None,
    return_alignments=True,
    early_stopping=False,
    length_convention="default",
    return_token_log_probs=False,
    length_limits=None,
    select=None,
    live_beams=None,
):
    """Beam search inside the graph, as `tfa.seq2seq.BeamSearchDecoder` did.

    Each example keeps `beam_width` hypotheses. At each step every hypothesis
    is extended by every token and the best `beam_width` candidates by

        score = log P(y) / lp(|y|) + cp(y),   lp(n) = ((5 + n) / 6) ** alpha
        cp(y) = beta * sum_i log(min(sum_t a_{t,i}, 1))     (finished y only)

    are kept (Wu et al. 2016, "Google's Neural Machine Translation System",
    arXiv:1609.08144; `alpha = length_penalty_weight`,
    `beta = coverage_penalty_weight`, `a` the step's alignments, `i` over the
    source positions that received attention, which leaves padding out). The
    first step expands beam 0 only; a finished hypothesis continues with the
    end token at no cost, so it keeps its score and length. The loop stops
    after `max_length` steps, when every beam has finished or, with
    `early_stopping`, as soon as no running hypothesis can still beat the
    best finished one.

    `step_fn(ids, state, time) -> (logits, state)` or `(logits, state,
    alignment)` (`time`: the loop's int32 scalar counter, the index of the
    token being produced; a step without it is accepted too) is called on `batch * beam_width` rows: `initial_state` (batch rows) is
    tiled with `tile_batch` first, and state rows follow their hypotheses.
    Everything is `keras.ops` (no Python loop over time): it compiles with
    XLA and exports to SavedModel and ONNX.

    Args:
        step_fn: the decoder step.
        initial_state: a nest of tensors with leading dimension `batch`.
        start_tokens: `(batch,)` ids, or one int.
        end_token: the id that ends a hypothesis.
        max_length: a Python int, the most tokens to produce.
        beam_width: a positive Python int.
        length_penalty_weight: `alpha` (0 disables the length penalty), or
            `(batch,)` values, one per example.
        coverage_penalty_weight: `beta` (0 disables it; needs alignments),
            or `(batch,)` values, one per example.
        length_limits: optional `(batch,)` ints in `[1, max_length]`:
            example `b`'s beams stop after `length_limits[b]` steps and are
            what a search with that `max_length` returns (ids after it
            `pad_token`); the loop bound and output width stay `max_length`.
        pad_token: id written after a hypothesis ended (default `end_token`).
        return_alignments: keep the alignment history the step returns
            (False: no `(batch, beam, max_length, source)` buffer is carried;
            the coverage penalty still reads each step's alignment).
        early_stopping: stop once, for every example, the best finished
            hypothesis scores at least `max_k L_k / lp(max_length)` over its
            running hypotheses `k` (`L_k` their log-probabilities; `L_k`
            itself when `alpha = 0`): a running hypothesis' log-probability
            only falls, `lp` grows with the length and `cp <= 0`, so none can
            score higher later (`search_is_decided`). The top hypothesis is
            exactly the one the full search returns (barring exact ties);
            lower beams may be cut short: the ones still running are returned
            as they stand, without an end token and with `lengths` counting
            their tokens so far, as at `max_length`. False (default): run
            until every beam has ended or `max_length`.
        select: a function with `select_candidates`'s arguments and result
            that picks each step's new beams (default `select_candidates`);
            a beam-like strategy ranks the candidates its own way through it
            (`DiverseBeamSearch`, by group).
        live_beams: optional bool `(beam_width,)`, the beams that expand at
            the first step (default: beam 0 only, so that the first
            expansion is not counted `beam_width` times; a group search
            starts each group from one beam of its own).
        return_token_log_probs: also return `token_log_probs (batch, beam,
            max_length)`, each token's log-probability (0 after the end);
            they sum to `log_probs`.
        length_convention: "default": `|y|` counts the end token from the
            step it is chosen, so a finished hypothesis keeps one score.
            "tfa": `tfa.seq2seq.BeamSearchDecoder`'s bookkeeping, for the
            same hypotheses and ranking as a tfa model with a length or
            coverage penalty: the end token is counted from the step after
            it is chosen, and the coverage penalty applies from that step
            (`candidate_scores`). Without either penalty both are the same.

    Returns:
        A dict, beams sorted best first: `ids (batch, beam, max_length)`,
        `scores (batch, beam)` (the score above), `log_probs (batch, beam)`,
        `lengths (batch, beam)` (the end token included), `finished (batch,
        beam)` bool (whether the hypothesis produced `end_token`: False for
        one cut at `max_length` or `length_limits`, or left running by early
        stopping, and for an empty beam) and, when the step
        returns alignments and `return_alignments` is on,
        `alignments (batch, beam, max_length, source)`. When an example has
        fewer valid hypotheses than `beam_width` (e.g. vocabulary 7, width
        10, max_length 1), the beams after its last one are empty: ids all
        `pad_token`, length 0, score and log-probability `-inf`, zero
        alignments.
    """
    step_fn = _loop.timed_step(step_fn)
    max_length = _loop.check_max_length(max_length)
    beam_width = _checks.check_positive_int("beam_search", "beam_width", beam_width)
    alpha = _loop.option_rows(
        length_penalty_weight,
        "float32",
        lambda v: _checks.check_number("beam_search", "length_penalty_weight", v, minimum=0),
    )
    beta = _loop.option_rows(
        coverage_penalty_weight,
        "float32",
        lambda v: _checks.check_number("beam_search", "coverage_penalty_weight", v, minimum=0),
    )
    # Per example, the weights broadcast over the beams (and the candidates).
    alpha_beams = ops.expand_dims(alpha, 1) if _loop.is_rows(alpha) else alpha
    alpha_candidates = ops.expand_dims(alpha_beams, 2) if _loop.is_rows(alpha) else alpha
    beta_beams = ops.expand_dims(beta, 1) if _loop.is_rows(beta) else beta
    if length_limits is not None:
        length_limits = ops.cast(length_limits, "int32")
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    early_stopping = _checks.check_bool("beam_search", "early_stopping", early_stopping)
    return_token_log_probs = _checks.check_bool("beam_search", "return_token_log_probs", return_token_log_probs)
    _checks.check_choice("beam_search", "length_convention", length_convention, LENGTH_CONVENTIONS)
    width = beam_width
    select = select_candidates if select is None else select
    batch = _loop.batch_size_of(start_tokens, initial_state)
    first_ids = ops.repeat(_loop.start_ids(start_tokens, batch), width, axis=0)
    state = tile_batch(initial_state, width)

    def advance(time, logits, alignment, state, beams):
        """One search step: the new beams, their next ids and reordered state."""
        finished, coverage = beams["finished"], beams["coverage"]
        vocabulary = ops.shape(logits)[-1]
        step_log_probs = ops.reshape(_loop.log_probabilities(logits), (batch, width, vocabulary))
        total = extend_hypotheses(beams["log_probs"], step_log_probs, finished, end_token)
        penalty = None
        if alignment is not None and (_loop.is_carried(beams["alignments"]) or _loop.is_carried(coverage)):
            # The source length spelled out, not -1: ONNX cannot infer a -1
            # from an empty tensor (an empty batch).
            alignment = ops.reshape(ops.cast(alignment, "float32"), (batch, width, ops.shape(alignment)[-1]))
            alignment = ops.where(ops.expand_dims(finished, -1), 0.0, alignment)
            if _loop.is_carried(coverage):
                coverage = coverage + alignment
                penalty = coverage_penalty(coverage, beta_beams)
        scores = candidate_scores(
            total, finished, beams["lengths"], end_token, alpha_candidates, penalty, length_convention
        )
        chosen = select(scores, total, finished, beams["lengths"], end_token, pad_token)
        parents = chosen.pop("parents")
        tokens = chosen.pop("tokens")
        chosen["ids"] = write_step(beams["ids"], parents, time, tokens)
        chosen["alignments"] = beams["alignments"]
        if _loop.is_carried(beams["alignments"]):
            chosen["alignments"] = write_step(beams["alignments"], parents, time, gather_beams(alignment, parents))
        chosen["coverage"] = gather_beams(coverage, parents) if _loop.is_carried(coverage) else _loop.ABSENT
        chosen["token_log_probs"] = beams["token_log_probs"]
        if _loop.is_carried(beams["token_log_probs"]):
            # A beam's new log-probability less its parent's: this token's.
            parent_log_probs = gather_beams(beams["log_probs"], parents)
            token_log_probs = ops.maximum(chosen["log_probs"] - parent_log_probs, _loop.NEG_INF)
            chosen["token_log_probs"] = write_step(beams["token_log_probs"], parents, time, token_log_probs)
        if length_limits is not None:
            # An example past its limit keeps its beams as they stand: what a
            # search of that max_length returned.
            active = ops.less(time, length_limits)  # (batch,)
            chosen = {
                name: keep_where(active, value, beams[name]) if _loop.is_carried(value) else value
                for name, value in chosen.items()
            }
            parents = ops.where(ops.expand_dims(active, 1), parents, ops.expand_dims(ops.arange(width), 0))
            tokens = ops.where(ops.expand_dims(active, 1), tokens, pad_token)
        return ops.reshape(tokens, (-1,)), reorder_beams(state, parents), chosen

    # First step outside the loop: it tells the source length for the buffers.
    time = _loop.first_time()
    logits, state, alignment = _loop.call_step(step_fn, first_ids, state, time)
    alignments = coverage = _loop.ABSENT
    if alignment is not None:
        source_length = ops.shape(alignment)[-1]
        if return_alignments:
            alignments = ops.zeros((batch, width, max_length, source_length), "float32")
        if _loop.is_rows(beta) or beta:  # the coverage is tracked only to be penalised
            coverage = ops.zeros((batch, width, source_length), "float32")
    # Only beam 0 is live at the start, so the first expansion is not counted
    # `width` times.
    live = ops.equal(ops.arange(width), 0) if live_beams is None else ops.convert_to_tensor(live_beams, "bool")
    initial_log_probs = ops.where(live, 0.0, _loop.NEG_INF)
    beams = {
        # The scores are the selection's output only: no step reads them.
        "scores": ops.zeros((batch, width), "float32"),
        "log_probs": ops.broadcast_to(ops.expand_dims(initial_log_probs, 0), (batch, width)),
        "finished": ops.zeros((batch, width), "bool"),
        "lengths": ops.zeros((batch, width), "int32"),
        "ids": ops.full((batch, width, max_length), pad_token, dtype="int32"),
        "alignments": alignments,
        "coverage": coverage,
        "token_log_probs": (
            ops.zeros((batch, width, max_length), "float32") if return_token_log_probs else _loop.ABSENT
        ),
    }
    next_ids, state, beams = advance(time, logits, alignment, state, beams)

    def cond(time, next_ids, state, beams):
        finished = beams["finished"]
        stopped = None
        if length_limits is not None:
            stopped = ops.greater_equal(time, length_limits)  # (batch,)
            finished = ops.logical_or(finished, ops.expand_dims(stopped, 1))
        going = ops.logical_and(ops.less(time, max_length), ops.logical_not(ops.all(finished)))
        if not early_stopping:
            return going
        longest = max_length if length_limits is None else ops.expand_dims(length_limits, 1)
        decided = search_is_decided(beams["scores"], beams["log_probs"], beams["finished"], longest, alpha_beams)
        if stopped is not None:
            decided = ops.logical_or(decided, stopped)
        return ops.logical_and(going, ops.logical_not(ops.all(decided)))

    def body(time, next_ids, state, beams):
        logits, state, alignment = _loop.call_step(step_fn, next_ids, state, time)
        return (time + 1, *advance(time, logits, alignment, state, beams))

    _, _, _, beams = ops.while_loop(cond, body, (ops.convert_to_tensor(1, "int32"), next_ids, state, beams))
    scores, log_probs, lengths, ids = (beams[key] for key in ("scores", "log_probs", "lengths", "ids"))
    # With fewer valid hypotheses than beams (a small vocabulary, a short
    # max_length, masked tokens), top_k fills the rest with candidates of a
    # dead start beam or a masked token: real-looking ids and lengths with a
    # score at the NEG_INF floor. Blank them so that they cannot be taken for
    # hypotheses.
    filler = ops.less_equal(log_probs, _loop.NEG_INF / 2)
    ids = ops.where(ops.expand_dims(filler, -1), pad_token, ids)
    lengths = ops.where(filler, 0, lengths)
    scores = ops.where(filler, float("-inf"), scores)
    log_probs = ops.where(filler, float("-inf"), log_probs)
    finished = _loop.ended(ids, lengths, end_token)
    result = {"ids": ids, "scores": scores, "log_probs": log_probs, "lengths": lengths, "finished": finished}
    if _loop.is_carried(beams["alignments"]):
        result["alignments"] = ops.where(ops.expand_dims(ops.expand_dims(filler, -1), -1), 0.0, beams["alignments"])
    if _loop.is_carried(beams["token_log_probs"]):
        result["token_log_probs"] = ops.where(ops.expand_dims(filler, -1), 0.0, beams["token_log_probs"])
    return result


def keep_where(active, new, old):
    """`new` for the examples where `active` `(batch,)`, else `old`."""
    active = ops.reshape(active, (-1,) + (1,) * (len(new.shape) - 1))
    if new.dtype == "bool":  # logical ops: onnxruntime has no boolean Where
        return ops.logical_or(ops.logical_and(active, new), ops.logical_and(ops.logical_not(active), old))
    return ops.where(active, new, old)
