"""Constraints on what a decoder may produce at each step, for every search.

`constrained_step` wraps a step function so that its logits obey the
constraints: the end token forbidden before `min_length` tokens, forced
once an example reaches its own maximum length, ids that are never produced,
and a per-example set of allowed ids. The searches (greedy, sampling, beam)
run the wrapped step unchanged: the constraints ride in the state, which
every search already tiles and reorders with its hypotheses. A forbidden id
gets the log-probability floor `NEG_INF`, so the log-softmax of the rest
renormalises over what is allowed and the `scores` the searches return are
those of the constrained distribution.
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.runtime_fields import RuntimeField

__all__ = ["CONSTRAINT_FIELDS", "constrained_step", "relative_max_lengths", "top_p_filter"]

# The constraints a request may set, whatever the search.
CONSTRAINT_FIELDS = (
    RuntimeField(
        "min_length",
        "int32",
        0,
        maximum="below max_length",
        meaning="the end token is forbidden before this many tokens",
    ),
    RuntimeField("repetition_penalty", "float32", 1, meaning="CTRL repetition penalty"),
    RuntimeField("no_repeat_ngram_size", "int32", 0, meaning="no n-gram twice (0: none)"),
)


def relative_max_lengths(source_lengths, ratio, offset, max_length):
    """Per example `min(max_length, floor(ratio * source_length + offset))`,
    at least 1: the most tokens (the end token included) an example may have.

    Example:

    ```python
    keras_attention.decoding.relative_max_lengths(np.array([3, 10]), 1.5, 2, max_length=12)
    # [6, 12]
    ```
    """
    ratio = _checks.check_number("decoding", "max_length_ratio", ratio, minimum=0)
    offset = _checks.check_number("decoding", "max_length_offset", offset)
    lengths = ops.floor(ops.cast(source_lengths, "float32") * ratio + offset)
    return ops.cast(ops.clip(lengths, 1, max_length), "int32")


def check_suppress_tokens(owner, ids, end_token):
    """`ids` as a sorted list of distinct ids (None stays None), refusing the end token."""
    if ids is None:
        return None
    if not isinstance(ids, (list, tuple)) or not all(_checks.is_int(i) and i >= 0 for i in ids):
        raise ValueError(f"{_checks.owner_name(owner)}: `suppress_tokens` must be a list of integer ids; got {ids!r}.")
    if end_token in ids:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `suppress_tokens` {list(ids)} includes the end token {end_token}: "
            "nothing could end."
        )
    return sorted({int(i) for i in ids})


def constrained_step(
    step_fn,
    initial_state,
    end_token,
    min_length=0,
    max_lengths=None,
    suppress_tokens=None,
    allowed_tokens=None,
    repetition_penalty=1.0,
    no_repeat_ngram_size=0,
    prefix=None,
    prefix_lengths=None,
    max_length=None,
):
    """Wrap `step_fn` so that its logits obey per-step constraints.

    Returns `(step, state)` to give a search in place of `(step_fn,
    initial_state)`; `step(ids, state, time)` reads the search's own loop
    counter `time` (no counter of its own rides in the state). At the step
    producing token `t = time` (0-based):

    - `repetition_penalty` `r`: the logit `l` of a token already produced
      becomes `l / r` if positive, `l * r` if not (Keskar et al. 2019,
      CTRL, arXiv:1909.05858);
    - `t < min_length`: the end token is forbidden (at least `min_length`
      tokens before the end, the end token not counted);
    - `t >= max_lengths[b] - 1`: every token but the end is forbidden, so
      example `b` has at most `max_lengths[b]` tokens, the end included;
    - `suppress_tokens`: ids never produced;
    - `allowed_tokens` `(batch, vocabulary)` bool: example `b` produces only
      ids where it is True (the end token is always allowed, so that every
      example can end);
    - `no_repeat_ngram_size` `n`: a token that would repeat an n-gram
      already produced is forbidden;
    - `prefix` `(batch, P)` ids: while `t < prefix_lengths[b]` (default:
      the row's non-negative ids, so -1 pads) the token is forced to
      `prefix[b, t]`, whatever the other constraints say; decoding goes on
      freely after it.

    `min_length`, `repetition_penalty` and `no_repeat_ngram_size` are each
    one number for every example or a `(batch,)` tensor of one per example
    (a run-time input of an exported decoder; its values are checked where
    they are fed, not here).

    Args:
        step_fn: `step(ids, state, time) -> (logits, state[, alignment])`
            (or `step(ids, state)`, as the searches accept).
        initial_state: the step's initial state (batch rows).
        end_token: int.
        min_length: int >= 0, or `(batch,)` ints.
        max_lengths: optional `(batch,)` ints >= 1 (see `relative_max_lengths`).
        suppress_tokens: optional list of ids.
        allowed_tokens: optional `(batch, vocabulary)` bool tensor.
        repetition_penalty: a float >= 1 (1: none), or `(batch,)` floats.
        no_repeat_ngram_size: an int >= 0 (0: none), or `(batch,)` ints.
        prefix, prefix_lengths: optional `(batch, P)` ids and `(batch,)`
            lengths.
        max_length: the search's `max_length`; needed with a repetition
            penalty or n-gram blocking (the history they read is that long).

    Example:

    ```python
    def step(ids, state, time):  # always prefers the end token (id 2)
        return keras.ops.convert_to_tensor(np.tile([[0.0, 1.0, 5.0, 2.0]], (2, 1)), "float32"), state

    wrapped, state = keras_attention.decoding.constrained_step(
        step, keras.ops.zeros((2, 1)), end_token=2, min_length=2, suppress_tokens=[1])
    keras_attention.decoding.greedy_search(wrapped, state, 0, 2, max_length=5)["ids"]
    # [[3, 3, 2, 2, 2], [3, 3, 2, 2, 2]]: two tokens (never 1) before the end
    ```
    """
    end_token = _checks.check_int("decoding", "end_token", end_token, 0, "an integer id")
    suppress_tokens = check_suppress_tokens("decoding", suppress_tokens, end_token)
    batch = _loop.batch_size_of(0, initial_state)
    constraints = {}
    # A per-example value rides in the state, which the searches tile and
    # reorder with the hypotheses; a number stays a constant of the graph.
    min_length = _loop.option_rows(
        min_length, "int32", lambda v: _checks.check_int("decoding", "min_length", v, 0, "an integer")
    )
    repetition_penalty = _loop.option_rows(
        repetition_penalty, "float32", lambda v: check_repetition_penalty("decoding", v)
    )
    no_repeat_ngram_size = _loop.option_rows(
        no_repeat_ngram_size,
        "int32",
        lambda v: _checks.check_int("decoding", "no_repeat_ngram_size", v, 0, "an integer"),
    )
    for name, value in (
        ("min_length", min_length),
        ("repetition_penalty", repetition_penalty),
        ("ngram_size", no_repeat_ngram_size),
    ):
        if _loop.is_rows(value):
            constraints[name] = value
    if max_lengths is not None:
        constraints["max_lengths"] = ops.cast(max_lengths, "int32")
    if allowed_tokens is not None:
        constraints["allowed"] = ops.cast(allowed_tokens, "bool")
    penalizes = _loop.is_rows(repetition_penalty) or repetition_penalty != 1
    blocks_ngrams = _loop.is_rows(no_repeat_ngram_size) or no_repeat_ngram_size
    if penalizes or blocks_ngrams:
        if max_length is None:
            raise ValueError("decoding: a repetition penalty or n-gram blocking needs the search's `max_length`.")
        constraints["history"] = ops.full((batch, _loop.check_max_length(max_length)), -1, "int32")
    if blocks_ngrams:
        constraints["suffix_matches"] = ops.zeros((batch, max_length), "int32")
    if prefix is not None:
        # One more column of padding (-1): a prefix of width 0 still has a
        # column for the step to read (an empty gather fails in TensorFlow).
        constraints["prefix"] = ops.pad(ops.cast(prefix, "int32"), [[0, 0], [0, 1]], constant_values=-1)
        constraints["prefix_lengths"] = (
            ops.sum(ops.cast(ops.greater_equal(constraints["prefix"], 0), "int32"), axis=1)
            if prefix_lengths is None
            else ops.cast(prefix_lengths, "int32")
        )

    step_fn = _loop.timed_step(step_fn)

    def step(ids, state, time):
        inner, extra = state
        logits, inner, alignment = _loop.call_step(step_fn, ids, inner, time)
        logits = ops.cast(logits, "float32")
        extra = dict(extra)
        if "history" in extra:
            # `ids` are the tokens chosen at the previous step (the start token at the first).
            history = extra["history"]
            columns = ops.expand_dims(ops.arange(ops.shape(history)[1], dtype="int32"), 0)
            written = ops.equal(columns, time - 1)
            extra["history"] = ops.where(written, ops.expand_dims(ops.cast(ids, "int32"), 1), history)
            if "suffix_matches" in extra:
                extra["suffix_matches"] = _suffix_matches(extra["suffix_matches"], extra["history"], ids, time)
            if penalizes:
                penalty = extra.get("repetition_penalty", repetition_penalty)
                logits = _penalize_repetitions(logits, extra["history"], penalty)
        forbidden = _forbidden(
            logits,
            extra,
            time,
            end_token,
            extra.get("min_length", min_length),
            suppress_tokens,
            extra.get("ngram_size", no_repeat_ngram_size),
        )
        logits = ops.where(forbidden, _loop.NEG_INF, logits)
        if alignment is None:
            return logits, (inner, extra)
        return logits, (inner, extra), alignment

    return step, (initial_state, constraints)


def check_repetition_penalty(owner, value):
    return _checks.check_number(owner, "repetition_penalty", value, minimum=1)


def _one_hot_ids(ids, vocabulary):
    """`(..., V)` bool: True at each id of `ids` (negative ids mark nothing)."""
    ids = ops.where(ops.greater_equal(ids, 0), ids, vocabulary)
    return ops.cast(ops.one_hot(ids, vocabulary + 1)[..., :vocabulary], "bool")


def _penalize_repetitions(logits, history, penalty):
    produced = ops.any(_one_hot_ids(history, ops.shape(logits)[-1]), axis=1)
    if _loop.is_rows(penalty):
        penalty = ops.expand_dims(penalty, 1)
    penalized = ops.where(ops.greater(logits, 0), logits / penalty, logits * penalty)
    return ops.where(produced, penalized, logits)


def _suffix_matches(previous, history, ids, time):
    """`(N, L)` int: entry `j` is the length of the longest common suffix of
    the tokens `0..j` and `0..time-1` (the latest, `ids`, just written at
    `time - 1`; `time` the search's scalar counter), for `j < time - 1`; 0
    elsewhere.

    One step of the recurrence `S[j] = (h[j] == h[t-1]) * (1 + S_prev[j-1])`,
    so n-gram blocking costs `O(L)` a step whatever `n`, and `n` may differ
    per example.
    """
    shifted = ops.pad(previous[:, :-1], [[0, 0], [1, 0]])
    columns = ops.expand_dims(ops.arange(ops.shape(history)[1], dtype="int32"), 0)
    extends = ops.logical_and(
        ops.equal(history, ops.expand_dims(ops.cast(ids, "int32"), 1)),
        ops.less(columns, time - 1),
    )
    return ops.where(extends, shifted + 1, 0)


def _repeated_ngram_ends(history, suffix_matches, n, vocabulary):
    """`(N, V)` bool: the tokens that would complete an n-gram already in
    `history` (`n` an int or `(N,)` ints; 0: none).

    With `n >= 2`, token `h[j+1]` is forbidden when the `n - 1` tokens
    ending at `j` are the last `n - 1` produced (`suffix_matches[j] >= n -
    1`); with `n = 1` every token produced is.
    """
    if not _loop.is_rows(n):
        n = ops.full((ops.shape(history)[0],), n, "int32")
    n = ops.expand_dims(n, 1)
    repeats = ops.logical_and(ops.greater_equal(n, 2), ops.greater_equal(suffix_matches[:, :-1], n - 1))
    completing = ops.where(repeats, history[:, 1:], -1)
    forbidden = ops.any(_one_hot_ids(completing, vocabulary), axis=1)
    produced = ops.any(_one_hot_ids(history, vocabulary), axis=1)
    return ops.logical_or(forbidden, ops.logical_and(ops.equal(n, 1), produced))


def _forbidden(logits, extra, time, end_token, min_length, suppress_tokens, no_repeat_ngram_size):
    """`(N, V)` bool (or `(1, V)`, the same for every row): the tokens this
    step, producing token `time` (the search's scalar counter), may not produce."""
    vocabulary = ops.shape(logits)[-1]
    token = ops.expand_dims(ops.arange(vocabulary, dtype="int32"), 0)  # (1, V)
    is_end = ops.equal(token, end_token)
    if _loop.is_rows(min_length):
        min_length = ops.expand_dims(min_length, 1)
    forbidden = ops.logical_and(is_end, ops.less(time, min_length))
    if "max_lengths" in extra:
        at_last = ops.greater_equal(time, ops.expand_dims(extra["max_lengths"], 1) - 1)
        forbidden = ops.logical_or(forbidden, ops.logical_and(at_last, ops.logical_not(is_end)))
    if suppress_tokens:
        suppressed = ops.any(
            ops.equal(ops.expand_dims(token, -1), ops.convert_to_tensor(suppress_tokens, "int32")), axis=-1
        )
        forbidden = ops.logical_or(forbidden, suppressed)
    if "allowed" in extra:
        forbidden = ops.logical_or(forbidden, ops.logical_not(ops.logical_or(extra["allowed"], is_end)))
    if "suffix_matches" in extra:
        repeated = _repeated_ngram_ends(extra["history"], extra["suffix_matches"], no_repeat_ngram_size, vocabulary)
        forbidden = ops.logical_or(forbidden, repeated)
    if "prefix" in extra:
        prefix = extra["prefix"]
        in_prefix = ops.less(time, ops.expand_dims(extra["prefix_lengths"], 1))  # (N, 1)
        column = ops.minimum(time, ops.shape(prefix)[1] - 1)
        forced = ops.expand_dims(ops.take(prefix, ops.maximum(column, 0), axis=1), 1)  # (N, 1)
        # Logical ops, not a select: onnxruntime has no boolean Where.
        forbidden = ops.logical_or(
            ops.logical_and(in_prefix, ops.not_equal(token, forced)),
            ops.logical_and(ops.logical_not(in_prefix), forbidden),
        )
    return forbidden


def check_top_p(owner, top_p):
    top_p = _checks.check_number(owner, "top_p", top_p, minimum=0, strict=True)
    if top_p > 1:
        raise ValueError(f"{_checks.owner_name(owner)}: `top_p` must be in (0, 1]; got {top_p!r}.")
    return top_p


def top_p_filter(logits, top_p):
    """Keep the smallest set of most likely tokens whose probability reaches
    `top_p` (nucleus sampling, Holtzman et al. 2019, arXiv:1904.09751); the
    others get the floor `NEG_INF`. Ties at the boundary are all kept.
    `top_p`: one number in (0, 1], or `(batch,)` values, one per row.

    Example:

    ```python
    keras_attention.decoding.top_p_filter(np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32")), 0.75)
    # keeps 0.5 and 0.3 (0.8 >= 0.75): [[log 0.5, log 0.3, NEG_INF, NEG_INF]]
    ```
    """
    top_p = _loop.option_rows(top_p, "float32", lambda v: check_top_p("top_p_filter", v))
    logits = ops.cast(logits, "float32")
    per_row = _loop.is_rows(top_p)
    if not per_row and top_p == 1:
        return logits
    if per_row:
        top_p = ops.expand_dims(top_p, 1)
    vocabulary = ops.shape(logits)[-1]
    ordered = ops.top_k(logits, vocabulary)[0]  # descending
    probabilities = ops.softmax(ordered, axis=-1)
    mass_before = ops.cumsum(probabilities, axis=-1) - probabilities
    # The smallest kept logit: the last token whose preceding mass is below p.
    kept = ops.less(mass_before, top_p)
    if per_row:
        # p = 1 keeps every token, as the constant does (a rounded cumulative
        # sum may pass 1 before the last token).
        kept = ops.logical_or(kept, ops.greater_equal(top_p, 1.0))
    # (`initial`: an empty batch has no minimum to take; the axis counted
    # from the front: onnxruntime leaves an empty tensor unreduced over a
    # negative one.)
    last = len(ordered.shape) - 1
    threshold = ops.min(ops.where(kept, ordered, float("inf")), axis=last, keepdims=True, initial=float("inf"))
    return ops.where(ops.less(logits, threshold), _loop.NEG_INF, logits)
