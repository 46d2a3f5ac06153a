"""Beam search inside the graph, with GNMT length and coverage penalties.

One search step is a pure function of the step's logits and the beams; it is
made of the functions below, each testable on its own:
`extend_hypotheses` (the log-probability of every one-token extension),
`coverage_penalty` and `candidate_scores` (the GNMT score of each extension),
`select_candidates` (the best `width` of them), then `write_step`,
`gather_beams` and `reorder_beams` from `beams` (histories and decoder state
follow the chosen parents). `search_is_decided` is the early-stopping test.
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.beams import gather_beams, reorder_beams, tile_batch, write_step

__all__ = [
    "LENGTH_CONVENTIONS",
    "beam_search",
    "candidate_scores",
    "coverage_penalty",
    "extend_hypotheses",
    "length_penalty",
    "search_is_decided",
    "select_candidates",
]


def length_penalty(lengths, alpha):
    """GNMT length penalty `lp(n) = ((5 + n) / 6) ** alpha` (Wu et al. 2016).

    Args:
        lengths: int or float tensor of any shape, `n`.
        alpha: float >= 0 (0 gives 1 everywhere).

    Returns:
        float32, the shape of `lengths`.

    Example:

    ```python
    keras_attention.decoding.length_penalty(np.array([1, 7]), 1.0)  # [1.0, 2.0]
    ```
    """
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, alpha)


def coverage_penalty(coverage, weight):
    """GNMT coverage penalty `cp = beta * sum_i log(min(c_i, 1))` over attended positions.

    `c_i` is the attention source position `i` has received so far, summed
    over the steps; positions with `c_i = 0` (padding, or never attended)
    are left out, so the penalty is finite and `<= 0` (Wu et al. 2016,
    arXiv:1609.08144).

    Args:
        coverage: float `(..., source)`.
        weight: `beta`, a float >= 0.

    Returns:
        float32 `(...)`.

    Example:

    ```python
    keras_attention.decoding.coverage_penalty(np.array([[0.5, 2.0, 0.0]], "float32"), 0.5)  # [0.5 * log(0.5)] = [-0.3466]
    ```
    """
    coverage = ops.cast(coverage, "float32")
    attended = ops.greater(coverage, 0.0)
    # log(1) = 0 stands in where nothing was attended: log(0) is never taken.
    logs = ops.log(ops.minimum(ops.where(attended, coverage, 1.0), 1.0))
    return weight * ops.sum(ops.where(attended, logs, 0.0), -1)


def extend_hypotheses(log_probs, step_log_probs, finished, end_token):
    """Log-probability of every one-token extension of every hypothesis.

        total[b, k, v] = max(log_probs[b, k] + step_log_probs[b, k, v], NEG_INF)

    except that a finished hypothesis continues only with `end_token`, at no
    cost (`step_log_probs` row `0` there, `NEG_INF` elsewhere), so it keeps
    its log-probability. `NEG_INF` is half of float32's lowest, finite so
    that sums of it neither overflow nor give NaN.

    Args:
        log_probs: float `(batch, width)`, each hypothesis' log-probability.
        step_log_probs: float `(batch, width, vocabulary)`, the step's
            log-softmax.
        finished: bool `(batch, width)`.
        end_token: int.

    Returns:
        float32 `(batch, width, vocabulary)`.

    Example:

    ```python
    keras_attention.decoding.extend_hypotheses(
        np.array([[-1.0, -2.0]], "float32"),
        np.log(np.full((1, 2, 3), 1 / 3, "float32")),
        np.array([[False, True]]), end_token=0)
    # [[[-2.0986, -2.0986, -2.0986], [-2.0, -1.7e38, -1.7e38]]]: the finished beam only ends
    ```
    """
    vocabulary = ops.shape(step_log_probs)[-1]
    is_end = ops.equal(ops.arange(vocabulary, dtype="int32"), end_token)
    finished_row = ops.where(is_end, 0.0, _loop.NEG_INF)
    step_log_probs = ops.where(ops.expand_dims(finished, -1), finished_row, step_log_probs)
    return ops.maximum(ops.expand_dims(log_probs, -1) + step_log_probs, _loop.NEG_INF)


def candidate_scores(
    total, finished, lengths, end_token, length_penalty_weight, penalty=None, length_convention="default"
):
    """GNMT score of every extension: `total / lp(length) + cp` (Wu et al. 2016).

        score[b, k, v] = total[b, k, v] / lp(lengths[b, k] + running[b, k])
                         + (penalty[b, k] if finished[b, k] or v == end_token else 0)

    with `lp` the `length_penalty` and `running = not finished`: a running
    hypothesis grows by one token, a finished one (continuing with the end
    token) keeps its length. The coverage penalty applies to hypotheses that
    end, at this step or before.

    `length_convention="tfa"` scores as `tfa.seq2seq.BeamSearchDecoder` did:
    the end token is not counted at the step it is chosen (`lp(lengths[b,
    k] + running[b, k] * (v != end_token))`; the stored length counts it
    from the next step on) and the coverage penalty applies to hypotheses
    that ended at an earlier step only.

    Args:
        total: float `(batch, width, vocabulary)`, from `extend_hypotheses`.
        finished: bool `(batch, width)`.
        lengths: int `(batch, width)`, tokens so far (end token included).
        end_token: int.
        length_penalty_weight: `alpha`, a float >= 0.
        penalty: float `(batch, width)` from `coverage_penalty` (with this
            step's alignment in the coverage), or None for no coverage
            penalty.
        length_convention: "default" or "tfa" (see above).

    Returns:
        float32 `(batch, width, vocabulary)`.

    Example:

    ```python
    keras_attention.decoding.candidate_scores(
        np.array([[[-2.0, -3.0]]], "float32"), np.array([[False]]), np.array([[1]]),
        end_token=0, length_penalty_weight=1.0, penalty=np.array([[-0.5]], "float32"))
    # lp(2) = 7 / 6: [[[-2 / (7 / 6) - 0.5, -3 / (7 / 6)]]] = [[[-2.2143, -2.5714]]]
    ```
    """
    _checks.check_choice("candidate_scores", "length_convention", length_convention, LENGTH_CONVENTIONS)
    is_end = ops.equal(ops.arange(ops.shape(total)[-1], dtype="int32"), end_token)
    running = ops.expand_dims(ops.logical_not(finished), -1)
    if length_convention == "tfa":
        running = ops.logical_and(running, ops.logical_not(is_end))
    candidate_lengths = ops.expand_dims(ops.cast(lengths, "int32"), -1) + ops.cast(running, "int32")
    scores = total / length_penalty(candidate_lengths, length_penalty_weight)
    if penalty is None:
        return scores
    ends_here = ops.expand_dims(finished, -1)
    if length_convention == "default":
        ends_here = ops.logical_or(ends_here, is_end)
    return scores + ops.where(ends_here, ops.expand_dims(penalty, -1), 0.0)


LENGTH_CONVENTIONS = ("default", "tfa")


def select_candidates(scores, total, finished, lengths, end_token, pad_token):
    """The best `width` of each example's `width * vocabulary` extensions, best first.

    Candidate `c = k * vocabulary + v` (beam `k` extended by token `v`) is
    ranked by `scores` with `top_k`; the chosen ones become the new beams:

        parents = c // vocabulary,  tokens = c % vocabulary (pad_token after an end)
        log_probs = total[b, c],     lengths = lengths[b, parent] + (parent running)
        finished = parent finished or token == end_token

    Args:
        scores: float `(batch, width, vocabulary)`, from `candidate_scores`.
        total: float `(batch, width, vocabulary)`, from `extend_hypotheses`.
        finished: bool `(batch, width)`.
        lengths: int `(batch, width)`.
        end_token, pad_token: ints.

    Returns:
        A dict of `(batch, width)` tensors: `scores`, `log_probs`, `parents`
        (int32), `tokens` (int32), `lengths`, `finished`.

    Example:

    ```python
    chosen = keras_attention.decoding.select_candidates(
        np.array([[[-1.0, -4.0], [-2.0, -3.0]]], "float32"),  # scores
        np.array([[[-1.0, -4.0], [-2.0, -3.0]]], "float32"),  # total
        np.array([[False, False]]), np.array([[1, 1]]), end_token=0, pad_token=0)
    # parents [[0, 1]], tokens [[0, 0]], scores [[-1.0, -2.0]], lengths [[2, 2]]
    ```
    """
    batch, width, vocabulary = ops.shape(scores)[0], ops.shape(scores)[1], ops.shape(scores)[2]
    best_scores, best = ops.top_k(ops.reshape(scores, (batch, width * vocabulary)), width)
    best = ops.cast(best, "int32")
    parents = ops.floor_divide(best, vocabulary)
    tokens = ops.mod(best, vocabulary)
    log_probs = ops.take_along_axis(ops.reshape(total, (batch, width * vocabulary)), best, axis=1)
    parent_finished = ops.take_along_axis(finished, parents, axis=1)
    tokens = ops.where(parent_finished, pad_token, tokens)
    lengths = ops.take_along_axis(ops.cast(lengths, "int32"), parents, axis=1)
    lengths = lengths + ops.cast(ops.logical_not(parent_finished), "int32")
    return {
        "scores": best_scores,
        "log_probs": log_probs,
        "parents": parents,
        "tokens": tokens,
        "lengths": lengths,
        "finished": ops.logical_or(parent_finished, ops.equal(tokens, end_token)),
    }


def search_is_decided(scores, log_probs, finished, max_length, length_penalty_weight):
    """Per example: whether no running hypothesis can still overtake the best finished one.

        decided[b] = any_k finished[b, k]  and
                     max_{k finished} scores[b, k] >= max_{k running} log_probs[b, k] / lp(max_length)

    The right side bounds every score a running hypothesis can still reach:
    its log-probability `L <= 0` only falls as tokens are added, it ends with
    at most `max_length` tokens and `lp(n)` grows with `n`, so
    `L' / lp(n) <= L / lp(max_length)`; the coverage penalty is `<= 0`. With
    `alpha = 0` the bound is `L` itself (Wu et al. 2016, arXiv:1609.08144).

    Args:
        scores: float `(batch, width)`, the beams' scores.
        log_probs: float `(batch, width)`, their log-probabilities.
        finished: bool `(batch, width)`.
        max_length: int, the most tokens a hypothesis can have.
        length_penalty_weight: `alpha`, a float >= 0.

    Returns:
        bool `(batch,)`.

    Example:

    ```python
    keras_attention.decoding.search_is_decided(
        np.array([[-1.0, -1.2], [-1.0, -1.2]], "float32"),  # scores
        np.array([[-1.0, -1.2], [-1.0, -0.9]], "float32"),  # log-probabilities
        np.array([[True, False], [True, False]]), max_length=10, length_penalty_weight=0.0)
    # [True, False]: -1.2 cannot catch up with -1.0, -0.9 still can
    ```
    """
    finished = ops.convert_to_tensor(finished)
    reachable = ops.cast(log_probs, "float32") / length_penalty(max_length, length_penalty_weight)
    best_finished = ops.max(ops.where(finished, ops.cast(scores, "float32"), _loop.NEG_INF), axis=1)
    best_reachable = ops.max(ops.where(finished, _loop.NEG_INF, reachable), axis=1)
    return ops.logical_and(ops.any(finished, axis=1), ops.greater_equal(best_finished, best_reachable))


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

    `step_fn(ids, state) -> (logits, state)` or `(logits, state, alignment)`
    is called on `batch * beam_width` rows: `initial_state` (batch rows) is
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
        length_penalty_weight: `alpha` (0 disables the length penalty).
        coverage_penalty_weight: `beta` (0 disables it; needs alignments).
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
        `lengths (batch, beam)` (the end token included) and, when the step
        returns alignments and `return_alignments` is on,
        `alignments (batch, beam, max_length, source)`. When an example has
        fewer valid hypotheses than `beam_width` (e.g. vocabulary 7, width
        10, max_length 1), the beams after its last one are empty: ids all
        `pad_token`, length 0, score and log-probability `-inf`, zero
        alignments.
    """
    max_length = _loop.check_max_length(max_length)
    beam_width = _checks.check_positive_int("beam_search", "beam_width", beam_width)
    length_penalty_weight = _checks.check_number(
        "beam_search", "length_penalty_weight", length_penalty_weight, minimum=0
    )
    coverage_penalty_weight = _checks.check_number(
        "beam_search", "coverage_penalty_weight", coverage_penalty_weight, minimum=0
    )
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    early_stopping = _checks.check_bool("beam_search", "early_stopping", early_stopping)
    return_token_log_probs = _checks.check_bool("beam_search", "return_token_log_probs", return_token_log_probs)
    _checks.check_choice("beam_search", "length_convention", length_convention, LENGTH_CONVENTIONS)
    width = beam_width
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
                penalty = coverage_penalty(coverage, coverage_penalty_weight)
        scores = candidate_scores(
            total, finished, beams["lengths"], end_token, length_penalty_weight, penalty, length_convention
        )
        chosen = select_candidates(scores, total, finished, beams["lengths"], end_token, pad_token)
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
            parent_log_probs = ops.take_along_axis(beams["log_probs"], parents, axis=1)
            token_log_probs = ops.maximum(chosen["log_probs"] - parent_log_probs, _loop.NEG_INF)
            chosen["token_log_probs"] = write_step(beams["token_log_probs"], parents, time, token_log_probs)
        return ops.reshape(tokens, (-1,)), reorder_beams(state, parents), chosen

    # First step outside the loop: it tells the source length for the buffers.
    logits, state, alignment = _loop.call_step(step_fn, first_ids, state)
    alignments = coverage = _loop.ABSENT
    if alignment is not None:
        source_length = ops.shape(alignment)[-1]
        if return_alignments:
            alignments = ops.zeros((batch, width, max_length, source_length), "float32")
        if coverage_penalty_weight:  # the coverage is tracked only to be penalised
            coverage = ops.zeros((batch, width, source_length), "float32")
    # Only beam 0 is live at the start, so the first expansion is not counted
    # `width` times.
    initial_log_probs = ops.where(ops.equal(ops.arange(width), 0), 0.0, _loop.NEG_INF)
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
    next_ids, state, beams = advance(0, logits, alignment, state, beams)

    def cond(time, next_ids, state, beams):
        going = ops.logical_and(ops.less(time, max_length), ops.logical_not(ops.all(beams["finished"])))
        if not early_stopping:
            return going
        decided = search_is_decided(
            beams["scores"], beams["log_probs"], beams["finished"], max_length, length_penalty_weight
        )
        return ops.logical_and(going, ops.logical_not(ops.all(decided)))

    def body(time, next_ids, state, beams):
        logits, state, alignment = _loop.call_step(step_fn, next_ids, state)
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
    result = {"ids": ids, "scores": scores, "log_probs": log_probs, "lengths": lengths}
    if _loop.is_carried(beams["alignments"]):
        result["alignments"] = ops.where(ops.expand_dims(ops.expand_dims(filler, -1), -1), 0.0, beams["alignments"])
    if _loop.is_carried(beams["token_log_probs"]):
        result["token_log_probs"] = ops.where(ops.expand_dims(filler, -1), 0.0, beams["token_log_probs"])
    return result
