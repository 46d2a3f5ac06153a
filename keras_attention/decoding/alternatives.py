"""Alternatives at a prefix: the most likely next tokens after a forced prefix, each continued greedily.

A registered search strategy ("alternatives"), CTranslate2's
`return_alternatives` inside the graph: for interactive completion (a
translator has typed the first words of the target, the interface offers
choices for the next one). Each example decodes its `target_prefix` (the
decoder forces it), and at the first free position after it, alternative
`j` of the example takes the `(j + 1)`-th most likely token; each
alternative is then continued by greedy search. Without a prefix the
alternatives are the `num_alternatives` best first tokens.

Like CTranslate2's, an alternative never starts with the end token (an
empty completion is no choice): at the branching position the end token is
forbidden and the log-probabilities renormalised over the rest, unless the
end token is the only token allowed there (a stop sequence just completed),
when alternative 0 is that end token. An alternative whose first token has
a probability below `min_expansion_probability` (CTranslate2's
`min_alternative_expansion_prob`, a run-time field), or is forbidden (fewer
allowed tokens than alternatives), is left empty: its ids are the prefix
then padding, `lengths` the prefix's length, `finished` False and `scores`
`NEG_INF`. The alternatives keep the order of their first tokens, most
likely first, as CTranslate2's do, not the order of their final scores.

`scores` (and `log_probs`, the same: no length penalty) sum the
log-probabilities of the tokens after the prefix: the forced tokens have
probability 1 under the constrained distribution, and CTranslate2 does not
score its prefix either.
"""

from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_max_index
from keras_attention.decoding import _loop
from keras_attention.decoding.beams import tile_batch
from keras_attention.decoding.greedy import single_path_search
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import SearchStrategy, register

__all__ = ["AlternativesSearch", "alternatives_search"]


def check_min_expansion_probability(owner, value):
    value = _checks.check_number(owner, "min_expansion_probability", value, minimum=0)
    if value > 1:
        raise ValueError(f"{_checks.owner_name(owner)}: `min_expansion_probability` must be in [0, 1]; got {value!r}.")
    return value


def alternatives_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    num_alternatives,
    branch_at=None,
    min_expansion_probability=0.0,
    pad_token=None,
    return_alignments=True,
    return_token_log_probs=False,
    length_limits=None,
):
    """The `num_alternatives` best continuations at position `branch_at`, each greedy after it.

    The arguments are `greedy_search`'s, with `num_alternatives` (a Python
    int), `branch_at` `(batch,)` ints, the position where each example's
    alternatives part (its forced prefix's length; None: 0) and
    `min_expansion_probability` (a number in [0, 1] or `(batch,)` values).
    Before `branch_at` every alternative takes the most likely token (the
    forced one, under a forced prefix). `step_fn` sees `batch *
    num_alternatives` rows, each example's alternatives side by side.

    Returns:
        `greedy_search`'s dict with an alternatives axis: `ids (batch,
        num_alternatives, max_length)`, `scores`, `log_probs`, `lengths`,
        `finished (batch, num_alternatives)` (and `alignments`,
        `token_log_probs` when asked for).
    """
    owner = "alternatives_search"
    count = _checks.check_positive_int(owner, "num_alternatives", num_alternatives)
    threshold = _loop.option_rows(
        min_expansion_probability, "float32", lambda v: check_min_expansion_probability(owner, v)
    )
    step_fn = _loop.timed_step(step_fn)
    max_length = _loop.check_max_length(max_length)
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    batch = _loop.batch_size_of(start_tokens, initial_state)
    if branch_at is None:
        branch_at = ops.zeros((batch,), "int32")
    branch = ops.repeat(ops.cast(branch_at, "int32"), count, axis=0)  # (rows,)
    rank = ops.tile(ops.arange(count, dtype="int32"), [batch])  # each row's alternative
    if not _checks.is_int(start_tokens):
        start_tokens = ops.repeat(_loop.start_ids(start_tokens, batch), count, axis=0)
    if length_limits is not None:
        length_limits = ops.repeat(ops.cast(length_limits, "int32"), count, axis=0)

    def step(ids, state, time):
        logits, state, alignment = _loop.call_step(step_fn, ids, state, time)
        if logits.shape[-1] is not None and logits.shape[-1] < count:
            raise ValueError(
                f"{owner}: `num_alternatives` {count} is more than the decoder's {logits.shape[-1]} ids; "
                f"expected at most {logits.shape[-1]}."
            )
        logits = ops.cast(logits, "float32")
        is_end = ops.expand_dims(ops.equal(ops.arange(ops.shape(logits)[-1], dtype="int32"), end_token), 0)
        allowed = ops.greater(logits, _loop.NEG_INF / 2)
        others = ops.any(ops.logical_and(allowed, ops.logical_not(is_end)), axis=1, keepdims=True)
        at_branch = ops.expand_dims(ops.equal(time, branch), 1)
        no_end = ops.logical_and(ops.logical_and(at_branch, others), is_end)
        return ops.where(no_end, _loop.NEG_INF, logits), state, alignment

    def choose(log_probs, time):
        ranked = ops.top_k(log_probs, count)[1]  # (rows, count), most likely first
        alternative = ops.take_along_axis(ranked, ops.expand_dims(rank, 1), axis=1)[:, 0]
        return ops.where(ops.equal(time, branch), ops.cast(alternative, "int32"), first_max_index(log_probs))

    result = single_path_search(
        step,
        tile_batch(initial_state, count),
        start_tokens,
        end_token,
        max_length,
        choose,
        pad_token,
        return_alignments,
        True,  # the first token's log-probability decides which alternatives stay
        length_limits,
    )
    result = _drop_unlikely(result, branch, threshold, count, pad_token, return_token_log_probs)
    return {name: ops.reshape(value, (-1, count, *ops.shape(value)[1:])) for name, value in result.items()}


def _drop_unlikely(result, branch, threshold, count, pad_token, return_token_log_probs):
    """Empty the alternatives whose first token is forbidden or less likely
    than `threshold`: the prefix only, `NEG_INF` scores, not finished."""
    result = dict(result)
    token_log_probs = result.pop("token_log_probs")
    steps = ops.shape(token_log_probs)[1]
    first = ops.take_along_axis(token_log_probs, ops.expand_dims(ops.clip(branch, 0, steps - 1), 1), axis=1)[:, 0]
    if _loop.is_rows(threshold):
        threshold = ops.repeat(threshold, count, axis=0)
    unlikely = ops.logical_or(ops.less(first, _loop.NEG_INF / 2), ops.less(ops.exp(first), threshold))
    dropped = ops.logical_and(ops.less(branch, result["lengths"]), unlikely)  # it branched, to an unlikely token
    columns = ops.expand_dims(ops.arange(steps, dtype="int32"), 0)
    after = ops.logical_and(ops.expand_dims(dropped, 1), ops.greater_equal(columns, ops.expand_dims(branch, 1)))
    result["ids"] = ops.where(after, pad_token, result["ids"])
    result["lengths"] = ops.where(dropped, branch, result["lengths"])
    # Logical ops, not a select: onnxruntime has no boolean Where.
    result["finished"] = ops.logical_and(result["finished"], ops.logical_not(dropped))
    result["scores"] = result["log_probs"] = ops.where(dropped, _loop.NEG_INF, result["scores"])
    if "alignments" in result:
        result["alignments"] = ops.where(ops.expand_dims(after, 2), 0.0, result["alignments"])
    if return_token_log_probs:
        result["token_log_probs"] = ops.where(after, 0.0, token_log_probs)
    return result


@register("alternatives")
class AlternativesSearch(SearchStrategy):
    """The `num_alternatives` most likely next tokens after the forced prefix, each continued greedily.

    See `alternatives_search`. Mapping to CTranslate2's `translate_batch`:
    `return_alternatives=True`, `num_hypotheses` is `num_alternatives`,
    `min_alternative_expansion_prob` is `min_expansion_probability`,
    `beam_size=1` (the continuations are greedy), `target_prefix` ours;
    where CTranslate2 returns fewer hypotheses, ours are empty (`NEG_INF`
    scores). Shapes: `ids (batch, num_alternatives, max_length)`, `scores`,
    `log_probs`, `lengths`, `finished (batch, num_alternatives)`.

    Example:

    ```python
    strategy = keras_attention.decoding.AlternativesSearch(2)
    logits = np.log(np.array([[0.1, 0.6, 0.3]], "float32"))  # token 0 ends; every step alike
    step = lambda ids, state, time: (np.repeat(logits, ids.shape[0], 0), state)
    result = strategy.search(step, np.zeros((1, 1), "float32"), start_tokens=1, end_token=0, max_length=2)
    # ids [[[1, 1], [2, 1]]]: the first token is 1 or 2 (the end token is not an alternative), then greedy;
    # scores [[log(0.6 / 0.9) + log(0.6), log(0.3 / 0.9) + log(0.6)]]
    ```
    """

    runtime_fields = (
        RuntimeField(
            "min_expansion_probability",
            "float32",
            0,
            maximum=1,
            meaning="alternatives: the least probability of an alternative's first token",
        ),
    )
    reads_prefix_lengths = True

    def __init__(self, num_alternatives=4, min_expansion_probability=0.0):
        owner = type(self).__name__
        self.num_alternatives = _checks.check_positive_int(owner, "num_alternatives", num_alternatives)
        self.min_expansion_probability = check_min_expansion_probability(owner, min_expansion_probability)

    @property
    def beams(self):
        return self.num_alternatives

    @property
    def hypotheses(self):
        return self.num_alternatives

    def get_config(self):
        return {"num_alternatives": self.num_alternatives, "min_expansion_probability": self.min_expansion_probability}

    def search(self, step_fn, initial_state, runtime=None, prefix_lengths=None, **common):
        values = {**self.get_config(), **(runtime or {})}
        return alternatives_search(step_fn, initial_state, branch_at=prefix_lengths, **values, **common)
