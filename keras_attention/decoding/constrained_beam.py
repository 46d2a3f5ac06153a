"""Lexically constrained beam search: phrases that must appear in the output, with dynamic beam allocation.

A registered search strategy ("constrained_beam") after Post and Vilar
2018, "Fast Lexically Constrained Decoding with Dynamic Beam Allocation"
(arXiv:1804.06609), itself after grid beam search (Hokamp and Liu 2017,
arXiv:1704.07138). Each example brings its constraints: `constraints`
`(B, C, L)` ids, each phrase right-padded with -1 (a row of -1 is no
phrase), and optionally `groups` `(B, C)` ints that make disjunctive sets:
a group is met once any of its phrases appears in the output (default:
every phrase its own group). A hypothesis cannot end before it has met
every group, unless `max_length` cuts it.

At each step the candidates of an example are
- the `2 * beam_width` likeliest extensions of its hypotheses,
- for each hypothesis, the token that continues each phrase it has not
  met (after the longest start of the phrase its output ends with: a
  hypothesis that leaves a phrase half-written starts it again),
- and each hypothesis' likeliest token.
A candidate goes to the bank of how many groups its hypothesis meets with
it, then of how many tokens of a phrase in progress it has written (Post
and Vilar count constraint tokens: a hypothesis half-way through a phrase
is not crowded out before finishing it). The beam takes the best candidate of each bank in turn, from the bank
that met the most down, then the second best of each, and so on (the
allocation of Hu et al. 2019's vectorized version: a bank with fewer
candidates than its share leaves its slots to the others), so that
hypotheses that met more constraints are not crowded out by likelier ones
that met fewer. A finished hypothesis keeps its slot, extended by the end
token at no cost, as `BeamSearch`'s do.

The result is `BeamSearch`'s, its hypotheses ordered by how many groups
they met, then by score (`log P / n ** alpha`, `n` the tokens with the
end token), with `constraints_met` `(B, K, C)`: which phrases each
hypothesis holds. `max_constraints` (C) and `beam_width` are the loop's
shapes; a request may give fewer phrases.
"""

from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_top_k
from keras_attention.decoding import _loop
from keras_attention.decoding.beam_search import keep_where
from keras_attention.decoding.beams import gather_beams, reorder_beams, tile_batch, write_step
from keras_attention.decoding.processors.token_sequences import ends_with_rows
from keras_attention.decoding.strategies import BeamSearch, SearchStrategy, _BeamFields, check_num_hypotheses, register

__all__ = ["ConstrainedBeamSearch", "constrained_beam_search", "groups_met"]


def groups_met(met, groups):
    """`(B, X)` int32: how many distinct groups the phrases `met` `(B, X,
    C)` bool cover, `groups` `(B, C)` int32 giving each phrase's group
    (a phrase counts once per group: only the first met phrase of a group)."""
    same = ops.equal(ops.expand_dims(groups, 2), ops.expand_dims(groups, 1))  # (B, C, C)
    count = ops.shape(groups)[1]
    earlier = ops.less(ops.expand_dims(ops.arange(count), 0), ops.expand_dims(ops.arange(count), 1))  # c' < c
    before = ops.expand_dims(ops.logical_and(same, ops.expand_dims(earlier, 0)), 1)  # (B, 1, C, C)
    covered = ops.any(ops.logical_and(before, ops.expand_dims(met, 2)), axis=3)
    return ops.sum(ops.cast(ops.logical_and(met, ops.logical_not(covered)), "int32"), axis=2)


def _room(slots, given):
    """`max(slots - given, 0)`: a Python int when `given` is known when traced (JAX pads by ints)."""
    return max(slots - given, 0) if isinstance(given, int) else ops.maximum(slots - given, 0)


def _phrase_tables(table, lengths):
    """What the steps read of the phrases `table` `(N, C, L)` (`lengths`
    `(N, C)`), built once before the loop: each phrase's last token, and
    every start of every phrase as a sequence of its own (`(N, C * L, L)`
    of lengths 0 .. L - 1) with whether that start is shorter than it."""
    rows, count, width = ops.shape(table)[0], ops.shape(table)[1], ops.shape(table)[2]
    sizes = ops.broadcast_to(ops.reshape(ops.arange(width, dtype="int32"), (1, 1, -1)), (rows, count, width))
    return {
        "table": table,
        "lengths": lengths,
        "last": ops.take_along_axis(table, ops.expand_dims(ops.maximum(lengths - 1, 0), 2), axis=2)[..., 0],
        "starts": ops.reshape(ops.repeat(ops.expand_dims(table, 2), width, axis=2), (rows, count * width, width)),
        "sizes": sizes,
        "start_sizes": ops.reshape(sizes, (rows, -1)),
        "proper": ops.less(sizes, ops.expand_dims(lengths, 2)),
        "present": ops.greater(lengths, 0),
    }


def _phrase_facts(history, time, phrases):
    """For each row's phrases (`_phrase_tables`): `ready` `(N, C)`, whether
    one more token completes it, `longest` the longest start of it that the
    output ends with, and `next_token` the token continuing that start."""
    table, lengths, sizes = phrases["table"], phrases["lengths"], phrases["sizes"]
    ready = ops.logical_and(ends_with_rows(history, time, table, lengths - 1), phrases["present"])
    matched = ops.reshape(ends_with_rows(history, time, phrases["starts"], phrases["start_sizes"]), ops.shape(sizes))
    longest = ops.max(ops.where(ops.logical_and(matched, phrases["proper"]), sizes, 0), axis=2)
    next_token = ops.take_along_axis(table, ops.expand_dims(longest, 2), axis=2)[..., 0]
    return ready, longest, next_token


def constrained_beam_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    beam_width,
    constraints,
    groups=None,
    max_constraints=None,
    length_penalty_weight=0.0,
    num_hypotheses=None,
    pad_token=None,
    return_alignments=True,
    return_token_log_probs=False,
    length_limits=None,
):
    """Beam search whose hypotheses must hold the `constraints` phrases (see the module).

    The arguments are `beam_search`'s, with `constraints` `(batch, C, L)`
    ids (each phrase right-padded with -1), `groups` `(batch, C)` ints (a
    group is met by any of its phrases; None: each phrase alone),
    `max_constraints` (a Python int >= C, the phrases the loop's shapes
    hold; None: C, which must then be known when traced) and
    `length_penalty_weight` (alpha of the final ranking, `log P / n **
    alpha`). Returns `beam_search`'s dict with `constraints_met` `(batch,
    num_hypotheses, max_constraints)` bool, the hypotheses ordered by the
    groups they met, then by score.
    """
    owner = "constrained_beam_search"
    step_fn = _loop.timed_step(step_fn)
    max_length = _loop.check_max_length(max_length)
    width = _checks.check_positive_int(owner, "beam_width", beam_width)
    hypotheses = check_num_hypotheses(owner, num_hypotheses, width) or width
    alpha = _loop.option_rows(
        length_penalty_weight, "float32", lambda v: _checks.check_number(owner, "length_penalty_weight", v, minimum=0)
    )
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    table = ops.cast(constraints, "int32")
    given = table.shape[1]
    slots = _checks.check_positive_int(owner, "max_constraints", max_constraints, allow_none=True) or given
    if slots is None:
        raise ValueError(f"{owner}: give `max_constraints` when the number of phrases is not known when traced.")
    if given is not None and given > slots:
        raise ValueError(f"{owner}: `constraints` holds {given} phrases, more than `max_constraints` {slots}.")
    # The loop's shapes: `slots` phrases, and one pad column (a width of 0 still reads a column).
    # (Never a negative pad: more phrases than slots is refused where they are fed, not by a Pad op.)
    table = ops.pad(table, [[0, 0], [0, _room(slots, ops.shape(table)[1])], [0, 1]], constant_values=-1)
    lengths = ops.sum(ops.cast(ops.greater_equal(table, 0), "int32"), axis=2)  # (B, C)
    phrase_width = ops.shape(table)[2]  # more than any phrase's tokens: the pad column
    groups = ops.arange(slots, dtype="int32") if groups is None else ops.cast(groups, "int32")
    groups = ops.broadcast_to(groups, ops.shape(lengths)) if len(groups.shape) == 1 else groups
    groups = ops.pad(groups, [[0, 0], [0, _room(slots, ops.shape(groups)[1])]], constant_values=-1)
    # A phrase of no token belongs to no group.
    present = ops.expand_dims(ops.greater(lengths, 0), 1)  # (B, 1, C): the phrases given
    groups = ops.where(present[:, 0], groups, -1 - ops.arange(slots, dtype="int32"))
    required = groups_met(present, groups)[:, 0]  # (B,)
    if length_limits is not None:
        length_limits = ops.cast(length_limits, "int32")
    batch = _loop.batch_size_of(start_tokens, initial_state)
    first_ids = ops.repeat(_loop.start_ids(start_tokens, batch), width, axis=0)
    state = tile_batch(initial_state, width)
    phrases = _phrase_tables(tile_batch(table, width), tile_batch(lengths, width))  # constant: out of the loop
    last = ops.reshape(phrases["last"], (batch, width, slots))
    first_tokens = ops.expand_dims(table[:, :, 0], 1)  # (B, 1, C)

    def advance(time, logits, alignment, state, beams):
        vocabulary = ops.shape(logits)[-1]
        known = logits.shape[-1]
        candidates = width * (3 + slots) if known is None else min(width * (3 + slots), width * known)
        finished, met = beams["finished"], beams["met"]
        history = ops.reshape(beams["ids"], (batch * width, max_length))
        facts = _phrase_facts(history, time, phrases)
        ready, longest, next_token = (ops.reshape(fact, (batch, width, slots)) for fact in facts)
        token = ops.reshape(ops.arange(vocabulary, dtype="int32"), (1, 1, -1))
        is_end = ops.equal(token, end_token)
        # The end only once every group is met (forbidden before the softmax: the rest renormalises).
        done = ops.greater_equal(groups_met(met, groups), ops.expand_dims(required, 1))
        logits = ops.reshape(ops.cast(logits, "float32"), (batch, width, vocabulary))
        logits = ops.where(ops.logical_and(is_end, ops.expand_dims(ops.logical_not(done), 2)), _loop.NEG_INF, logits)
        step_log_probs = _loop.log_probabilities(logits)
        # A finished hypothesis goes on with the end token, at no cost.
        step_log_probs = ops.where(ops.expand_dims(finished, 2), ops.where(is_end, 0.0, _loop.NEG_INF), step_log_probs)
        total = ops.maximum(ops.expand_dims(beams["log_probs"], 2) + step_log_probs, _loop.NEG_INF)
        flat = ops.reshape(total, (batch, width * vocabulary))
        kth = ops.top_k(flat, min(2 * width, width * known) if known is not None else 2 * width)[0][:, -1:]
        unmet = ops.logical_and(ops.logical_not(met), present)
        unmet = ops.logical_and(unmet, ops.expand_dims(ops.logical_not(finished), 2))
        advancing = ops.logical_and(
            ops.expand_dims(unmet, 3),
            ops.equal(ops.expand_dims(next_token, 3), ops.expand_dims(token, 2)),
        )
        best = ops.max(total, axis=2, keepdims=True)
        considered = ops.logical_or(
            ops.logical_or(ops.reshape(ops.greater_equal(flat, kth), ops.shape(total)), ops.any(advancing, axis=2)),
            ops.equal(total, best),
        )
        considered = ops.logical_and(considered, ops.greater(total, _loop.NEG_INF / 2))
        totals, chosen = first_top_k(ops.where(ops.reshape(considered, (batch, -1)), flat, float("-inf")), candidates)
        valid = ops.greater(totals, _loop.NEG_INF / 2)
        parents, tokens = ops.floor_divide(chosen, vocabulary), ops.mod(chosen, vocabulary)
        completes = ops.logical_and(
            gather_beams(ready, parents), ops.equal(ops.expand_dims(tokens, 2), gather_beams(last, parents))
        )
        met_after = ops.logical_or(gather_beams(met, parents), completes)
        # The bank: the groups met, then the tokens written of a phrase in progress (as Post and
        # Vilar count constraint tokens, so that a hypothesis half-way through a phrase is kept).
        continues = ops.equal(ops.expand_dims(tokens, 2), gather_beams(next_token, parents))
        starts = ops.equal(ops.expand_dims(tokens, 2), first_tokens)
        progress = ops.where(continues, gather_beams(longest, parents) + 1, ops.cast(starts, "int32"))
        open_phrases = ops.logical_and(ops.logical_not(met_after), present)
        progress = ops.max(ops.where(open_phrases, progress, 0), axis=2)
        bank = groups_met(met_after, groups) * phrase_width + progress  # (B, M)
        # Dynamic beam allocation: the n-th best of every bank before the (n + 1)-th of any, most met first.
        earlier = ops.less(ops.expand_dims(ops.arange(candidates), 0), ops.expand_dims(ops.arange(candidates), 1))
        same = ops.logical_and(ops.equal(ops.expand_dims(bank, 2), ops.expand_dims(bank, 1)), ops.expand_dims(valid, 1))
        rank = ops.sum(ops.cast(ops.logical_and(same, ops.expand_dims(earlier, 0)), "int32"), axis=2)
        banks = (slots + 1) * phrase_width
        key = ops.cast(rank * (banks + 1) + (banks - bank), "float32")
        _, picked = first_top_k(ops.where(valid, -key, float("-inf")), width)
        parents, tokens = gather_beams(parents, picked), gather_beams(tokens, picked)
        kept_valid = gather_beams(valid, picked)
        was_finished = gather_beams(finished, parents)
        new = {
            "log_probs": ops.where(kept_valid, gather_beams(totals, picked), _loop.NEG_INF),
            "met": gather_beams(met_after, picked),
            # A slot no candidate filled is dead: finished, so that the loop need not wait for it.
            "finished": ops.logical_or(
                ops.logical_or(was_finished, ops.equal(tokens, end_token)), ops.logical_not(kept_valid)
            ),
            "lengths": gather_beams(beams["lengths"], parents) + ops.cast(ops.logical_not(was_finished), "int32"),
            "ids": write_step(beams["ids"], parents, time, ops.where(was_finished, pad_token, tokens)),
        }
        if "alignments" in beams:
            alignment = ops.reshape(ops.cast(alignment, "float32"), (batch, width, ops.shape(alignment)[-1]))
            alignment = ops.where(ops.expand_dims(was_finished, 2), 0.0, gather_beams(alignment, parents))
            new["alignments"] = write_step(beams["alignments"], parents, time, alignment)
        if "token_log_probs" in beams:
            own = ops.maximum(new["log_probs"] - gather_beams(beams["log_probs"], parents), _loop.NEG_INF)
            new["token_log_probs"] = write_step(beams["token_log_probs"], parents, time, own)
        if length_limits is not None:
            # An example past its limit keeps its beams as they stand.
            active = ops.less(time, length_limits)
            new = {name: keep_where(active, value, beams[name]) for name, value in new.items()}
            parents = ops.where(ops.expand_dims(active, 1), parents, ops.expand_dims(ops.arange(width), 0))
            tokens = ops.where(ops.expand_dims(active, 1), tokens, pad_token)
        return ops.reshape(tokens, (-1,)), reorder_beams(state, parents), new

    time = _loop.first_time()
    logits, state, alignment = _loop.call_step(step_fn, first_ids, state, time)
    live = ops.where(ops.equal(ops.arange(width), 0), 0.0, _loop.NEG_INF)  # beam 0 alone at the start
    beams = {
        "log_probs": ops.broadcast_to(ops.expand_dims(live, 0), (batch, width)),
        "met": ops.zeros((batch, width, slots), "bool"),
        "finished": ops.zeros((batch, width), "bool"),
        "lengths": ops.zeros((batch, width), "int32"),
        "ids": ops.full((batch, width, max_length), pad_token, dtype="int32"),
    }
    if alignment is not None and return_alignments:
        beams["alignments"] = ops.zeros((batch, width, max_length, ops.shape(alignment)[-1]), "float32")
    if return_token_log_probs:
        beams["token_log_probs"] = ops.zeros((batch, width, max_length), "float32")
    next_ids, state, beams = advance(time, logits, alignment, state, beams)

    def cond(time, next_ids, state, beams):
        finished = beams["finished"]
        if length_limits is not None:
            finished = ops.logical_or(finished, ops.expand_dims(ops.greater_equal(time, length_limits), 1))
        return ops.logical_and(ops.less(time, max_length), ops.logical_not(ops.all(finished)))

    def body(time, next_ids, state, beams):
        logits, state, alignment = _loop.call_step(step_fn, next_ids, state, time)
        return (time + 1, *advance(time, logits, alignment, state, beams))

    _, _, _, beams = ops.while_loop(cond, body, (ops.convert_to_tensor(1, "int32"), next_ids, state, beams))
    return _ranked(beams, groups, alpha, hypotheses, pad_token, end_token)


def _ranked(beams, groups, alpha, hypotheses, pad_token, end_token):
    """The final beams best first (most groups met, then score), the first
    `hypotheses`; slots that no hypothesis filled are blanked."""
    filler = ops.less_equal(beams["log_probs"], _loop.NEG_INF / 2)
    lengths = ops.where(filler, 0, beams["lengths"])
    alpha = ops.expand_dims(alpha, 1) if _loop.is_rows(alpha) else alpha
    scores = beams["log_probs"] / ops.power(ops.maximum(ops.cast(lengths, "float32"), 1.0), alpha)
    scores = ops.where(filler, float("-inf"), scores)
    met = ops.logical_and(beams["met"], ops.logical_not(ops.expand_dims(filler, 2)))
    count = ops.where(filler, -1, groups_met(met, groups))
    width = scores.shape[1]
    # Rank by (count, score) descending, ties to the lower slot: a pairwise count of who goes first.
    ahead = ops.logical_or(
        ops.greater(ops.expand_dims(count, 1), ops.expand_dims(count, 2)),
        ops.logical_and(
            ops.equal(ops.expand_dims(count, 1), ops.expand_dims(count, 2)),
            ops.logical_or(
                ops.greater(ops.expand_dims(scores, 1), ops.expand_dims(scores, 2)),
                ops.logical_and(
                    ops.equal(ops.expand_dims(scores, 1), ops.expand_dims(scores, 2)),
                    ops.expand_dims(ops.less(ops.arange(width)[None], ops.arange(width)[:, None]), 0),
                ),
            ),
        ),
    )
    position = ops.sum(ops.cast(ahead, "int32"), axis=2)  # (B, K): where each slot goes
    order = ops.argmax(
        ops.cast(ops.equal(ops.expand_dims(position, 1), ops.reshape(ops.arange(width), (1, -1, 1))), "int32"), axis=2
    )
    order = ops.cast(order[:, :hypotheses], "int32")
    ids = ops.where(ops.expand_dims(filler, 2), pad_token, beams["ids"])
    result = {
        "ids": gather_beams(ids, order),
        "scores": gather_beams(scores, order),
        "log_probs": gather_beams(ops.where(filler, float("-inf"), beams["log_probs"]), order),
        "lengths": gather_beams(lengths, order),
        "constraints_met": gather_beams(met, order),
    }
    result["finished"] = _loop.ended(result["ids"], result["lengths"], end_token)
    for name in ("alignments", "token_log_probs"):
        if name in beams:
            blank = filler
            for _ in range(len(beams[name].shape) - 2):
                blank = ops.expand_dims(blank, -1)
            result[name] = gather_beams(ops.where(blank, 0.0, beams[name]), order)
    return result


@register("constrained_beam")
class ConstrainedBeamSearch(_BeamFields, SearchStrategy):
    """Lexically constrained beam search with dynamic beam allocation (see `constrained_beam_search`).

    The constraints come with each call (a decoder's `constraints` and
    `constraint_groups` arguments); `max_constraints` phrases fit the
    loop's shapes. Outputs: `BeamSearch`'s and `constraints_met (batch,
    num_hypotheses, max_constraints)` bool.

    Example:

    ```python
    strategy = keras_attention.decoding.ConstrainedBeamSearch(2, max_constraints=1)
    logits = np.log(np.array([[0.1, 0.6, 0.3]], "float32"))  # token 0 ends; every step alike
    step = lambda ids, state, time: (np.repeat(logits, ids.shape[0], 0), state)
    result = strategy.search(step, np.zeros((1, 1), "float32"), start_tokens=1, end_token=0, max_length=3,
                             constraints=np.array([[[2]]]))
    # ids [[[1, 1, 2], [1, 1, 1]]], constraints_met [[[True], [False]]]: the hypothesis holding token 2
    # ranks first, though less likely (log P -1.91 against -1.22); neither ended within 3 tokens
    ```
    """

    runtime_fields = BeamSearch.runtime_fields[:1]  # length_penalty_weight
    reads_constraints = True

    def __init__(self, beam_width=4, max_constraints=4, length_penalty_weight=0.0, num_hypotheses=None):
        owner = type(self).__name__
        self.beam_width = _checks.check_positive_int(owner, "beam_width", beam_width)
        self.max_constraints = _checks.check_positive_int(owner, "max_constraints", max_constraints)
        self.length_penalty_weight = _checks.check_number(
            owner, "length_penalty_weight", length_penalty_weight, minimum=0
        )
        self.num_hypotheses = check_num_hypotheses(owner, num_hypotheses, self.beam_width)

    def extra_output_specs(self, lead):
        """{name: (shape, dtype)} of the outputs beyond `BeamSearch`'s."""
        return {"constraints_met": ((*lead, self.max_constraints), "bool")}

    def get_config(self):
        return {
            "beam_width": self.beam_width,
            "max_constraints": self.max_constraints,
            "length_penalty_weight": self.length_penalty_weight,
            "num_hypotheses": self.num_hypotheses,
        }

    def search(self, step_fn, initial_state, runtime=None, constraints=None, groups=None, **common):
        values = {**self.get_config(), **(runtime or {})}
        if constraints is None:  # no phrase: beam search
            batch = _loop.batch_size_of(common.get("start_tokens"), initial_state)
            constraints = ops.full((batch, 1, 1), -1, "int32")
        return constrained_beam_search(
            step_fn, initial_state, constraints=constraints, groups=groups, **values, **common
        )
