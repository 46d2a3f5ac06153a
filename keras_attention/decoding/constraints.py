"""Constraints on what a decoder may produce at each step, for every search.

`constrained_step` wraps a step function so that its logits obey the
constraints given as keywords: it builds the logits processors they stand
for (`keras_attention.decoding.processors`: `MinLength`,
`RelativeMaxLength`, `SuppressTokens`, `AllowedTokens`, `RepetitionPenalty`,
`NoRepeatNgram`, `ForcedPrefix`) and composes them (`processed_step`). The
searches (greedy, sampling, beam) run the wrapped step unchanged: the
constraints ride in the state, which every search already tiles and
reorders with its hypotheses. A forbidden id gets the log-probability floor
`NEG_INF`, so the log-softmax of the rest renormalises over what is allowed
and the `scores` the searches return are those of the constrained
distribution. Nucleus filtering (`top_p_filter`) lives here too.
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.processors import (
    AllowedTokens,
    ForcedPrefix,
    MinLength,
    NoRepeatNgram,
    RelativeMaxLength,
    RepetitionPenalty,
    SuppressTokens,
    processed_step,
    relative_max_lengths,
)
from keras_attention.decoding.processors.repetition_penalty import check_repetition_penalty
from keras_attention.decoding.processors.suppress_tokens import check_suppress_tokens

__all__ = [
    "check_repetition_penalty",
    "check_suppress_tokens",
    "check_top_p",
    "constrained_step",
    "relative_max_lengths",
    "top_p_filter",
]


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
    - `t >= max_lengths[b] - 1`: every token but the end is forbidden, and
      the end is allowed even below `min_length` (the limit wins), so
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
        prefix: optional `(batch, P)` ids forced first.
        prefix_lengths: the prefix's `(batch,)` lengths.
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
    check_suppress_tokens("decoding", suppress_tokens, end_token)
    # A per-example value rides in the state (the processor's), which the
    # searches tile and reorder with the hypotheses; a number stays a
    # constant of the graph.
    values, numbers = {}, {}
    for name, value, dtype, check in (
        ("min_length", min_length, "int32", lambda v: _checks.check_int("decoding", "min_length", v, 0, "an integer")),
        ("repetition_penalty", repetition_penalty, "float32", lambda v: check_repetition_penalty("decoding", v)),
        (
            "no_repeat_ngram_size",
            no_repeat_ngram_size,
            "int32",
            lambda v: _checks.check_int("decoding", "no_repeat_ngram_size", v, 0, "an integer"),
        ),
    ):
        value = _loop.option_rows(value, dtype, check)
        if _loop.is_rows(value):
            values[name] = value
        else:
            numbers[name] = value
    processors = [
        processor
        for processor in (
            MinLength(numbers.get("min_length", 0)),
            RepetitionPenalty(numbers.get("repetition_penalty", 1.0)),
            NoRepeatNgram(numbers.get("no_repeat_ngram_size", 0)),
            SuppressTokens(suppress_tokens),
        )
        if processor.acts() or any(field.name in values for field in processor.runtime_fields)
    ]
    if max_lengths is not None:
        processors.append(RelativeMaxLength())
    if allowed_tokens is not None:
        processors.append(AllowedTokens())
    if prefix is not None:
        processors.append(ForcedPrefix())
    inputs = {
        "max_lengths": max_lengths,
        "allowed_tokens": allowed_tokens,
        "target_prefix": prefix,
        "prefix_lengths": prefix_lengths,
        "max_length": max_length,
        "values": values,
    }
    return processed_step(step_fn, initial_state, processors, end_token, inputs)


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
