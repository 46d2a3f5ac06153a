"""Beam search inside the graph, with GNMT length and coverage penalties."""

import keras
from keras import ops

from keras_attention.decoding import _loop
from keras_attention.decoding.beams import tile_batch
from keras_attention.layers import _checks

__all__ = ["beam_search", "length_penalty"]


def length_penalty(lengths, alpha):
    """GNMT length penalty `((5 + length) / 6) ** alpha` (Wu et al. 2016)."""
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, alpha)


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
    after `max_length` steps or when every beam has finished.

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
    length_penalty_weight = _checks.check_number("beam_search", "length_penalty_weight", length_penalty_weight, minimum=0)
    coverage_penalty_weight = _checks.check_number(
        "beam_search", "coverage_penalty_weight", coverage_penalty_weight, minimum=0
    )
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    width = beam_width
    batch = _loop.batch_size_of(start_tokens, initial_state)
    first_ids = ops.repeat(_loop.start_ids(start_tokens, batch), width, axis=0)
    state = tile_batch(initial_state, width)
    # Row b * width + k of the flat state is beam k of example b.
    row_offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * width, 1)

    def gather_beams(tensor, parents):
        """`tensor[b, parents[b, k], ...]` for a `(batch, width, ...)` tensor."""
        flat = ops.reshape(tensor, (batch * width, *ops.shape(tensor)[2:]))
        picked = ops.take(flat, ops.reshape(row_offsets + parents, (-1,)), axis=0)
        return ops.reshape(picked, ops.shape(tensor))

    def advance(time, logits, alignment, state, log_probs, finished, lengths, ids, alignments, coverage):
        vocabulary = ops.shape(logits)[-1]
        step_log_probs = ops.reshape(_loop.log_probabilities(logits), (batch, width, vocabulary))
        is_end = ops.equal(ops.arange(vocabulary, dtype="int32"), end_token)
        # A finished hypothesis may only continue with the end token, at no cost.
        finished_row = ops.where(is_end, 0.0, _loop.NEG_INF)
        step_log_probs = ops.where(ops.expand_dims(finished, -1), finished_row, step_log_probs)
        total = ops.maximum(ops.expand_dims(log_probs, -1) + step_log_probs, _loop.NEG_INF)
        running = ops.cast(ops.logical_not(finished), "int32")
        candidate_lengths = ops.expand_dims(lengths + running, -1)
        scores = total / length_penalty(candidate_lengths, length_penalty_weight)
        if alignment is not None and (alignments is not None or coverage is not None):
            # The source length spelled out, not -1: ONNX cannot infer a -1
            # from an empty tensor (an empty batch).
            alignment = ops.reshape(ops.cast(alignment, "float32"), (batch, width, ops.shape(alignment)[-1]))
            alignment = ops.where(ops.expand_dims(finished, -1), 0.0, alignment)
            if coverage is not None:
                coverage = coverage + alignment
                attended = ops.greater(coverage, 0.0)
                penalty = ops.sum(
                    ops.where(attended, ops.log(ops.minimum(ops.where(attended, coverage, 1.0), 1.0)), 0.0), -1
                )
                ends_here = ops.logical_or(ops.expand_dims(finished, -1), is_end)
                scores = scores + ops.where(ends_here, coverage_penalty_weight * ops.expand_dims(penalty, -1), 0.0)

        best_scores, best = ops.top_k(ops.reshape(scores, (batch, width * vocabulary)), width)
        best = ops.cast(best, "int32")
        parents = ops.floor_divide(best, vocabulary)
        tokens = ops.mod(best, vocabulary)
        log_probs = ops.take_along_axis(ops.reshape(total, (batch, width * vocabulary)), best, axis=1)
        parent_finished = ops.take_along_axis(finished, parents, axis=1)
        tokens = ops.where(parent_finished, pad_token, tokens)
        lengths = ops.take_along_axis(lengths, parents, axis=1) + ops.cast(ops.logical_not(parent_finished), "int32")
        finished = ops.logical_or(parent_finished, ops.equal(tokens, end_token))
        ids = _loop.write_at(gather_beams(ids, parents), time, tokens, time_axis=2)
        if coverage is not None:
            coverage = gather_beams(coverage, parents)
        if alignments is not None:
            alignments = _loop.write_at(gather_beams(alignments, parents), time, gather_beams(alignment, parents), time_axis=2)
        flat_parents = ops.reshape(row_offsets + parents, (-1,))
        state = keras.tree.map_structure(lambda s: ops.take(s, flat_parents, axis=0), state)
        next_ids = ops.reshape(tokens, (-1,))
        return next_ids, state, best_scores, log_probs, finished, lengths, ids, alignments, coverage

    # First step outside the loop: it tells the source length for the buffers.
    logits, state, alignment = _loop.call_step(step_fn, first_ids, state)
    alignments = coverage = None
    if alignment is not None:
        source_length = ops.shape(alignment)[-1]
        if return_alignments:
            alignments = ops.zeros((batch, width, max_length, source_length), "float32")
        if coverage_penalty_weight:  # the coverage is tracked only to be penalised
            coverage = ops.zeros((batch, width, source_length), "float32")
    # Only beam 0 is live at the start, so the first expansion is not counted
    # `width` times.
    initial_log_probs = ops.where(ops.equal(ops.arange(width), 0), 0.0, _loop.NEG_INF)
    carried = advance(
        0,
        logits,
        alignment,
        state,
        ops.broadcast_to(ops.expand_dims(initial_log_probs, 0), (batch, width)),
        ops.zeros((batch, width), "bool"),
        ops.zeros((batch, width), "int32"),
        ops.full((batch, width, max_length), pad_token, dtype="int32"),
        alignments,
        coverage,
    )
    has_alignments = alignments is not None
    # Which of the carried values exist (alignments, coverage) is fixed for
    # the whole loop; the loop carries only those.
    present = [value is not None for value in carried]

    def pack(time, values):
        return (time,) + tuple(value for value in values if value is not None)

    def unpack(loop_vars):
        time, *kept = loop_vars
        kept = iter(kept)
        return time, [next(kept) if exists else None for exists in present]

    def cond(time, ids, state, scores, log_probs, finished, *unused):
        return ops.logical_and(ops.less(time, max_length), ops.logical_not(ops.all(finished)))

    def body(*loop_vars):
        time, (ids_in, state, _, log_probs, finished, lengths, ids, alignments, coverage) = unpack(loop_vars)
        logits, state, alignment = _loop.call_step(step_fn, ids_in, state)
        values = advance(time, logits, alignment, state, log_probs, finished, lengths, ids, alignments, coverage)
        return pack(time + 1, values)

    final = ops.while_loop(cond, body, pack(ops.convert_to_tensor(1, "int32"), carried))
    _, (_, _, scores, log_probs, _, lengths, ids, alignments, _) = unpack(final)
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
    if has_alignments:
        result["alignments"] = ops.where(ops.expand_dims(ops.expand_dims(filler, -1), -1), 0.0, alignments)
    return result
