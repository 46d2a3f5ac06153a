"""The pool of finished hypotheses of the refilling beam search: the score a
hypothesis enters it with (`hypothesis_scores`, in one of
`LENGTH_PENALTY_FORMS`), how many ended hypotheses a search waits for
(`patience_count`), and the pool kept as the best `num_hypotheses` slots
(`merge_pool`), a fixed-shape tensor, so the loop compiles and exports."""

import math

from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_top_k
from keras_attention.decoding import _loop
from keras_attention.decoding.beam_steps import length_penalty
from keras_attention.decoding.beams import gather_beams

__all__ = ["LENGTH_PENALTY_FORMS", "check_length_penalty_form", "hypothesis_scores", "merge_pool", "patience_count"]

LENGTH_PENALTY_FORMS = ("average", "gnmt")
# The rank of an empty pool slot: below any hypothesis' (whose rank is floored at NEG_INF), finite for TopK.
_EMPTY = 2 * _loop.NEG_INF


def hypothesis_scores(log_probs, lengths, length_penalty_weight, length_penalty_form="average", penalty=None):
    """The score a hypothesis enters the pool of finished ones with.

        "average": log P / n ** alpha
        "gnmt":    log P / ((5 + n) / 6) ** alpha

    `n` its tokens, the end token counted, plus `penalty` (a coverage
    penalty) when given. "average" is CTranslate2's `length_penalty` (its
    translator counts the end token, which it drops from the returned
    tokens afterwards) and OpenNMT-py's `avg`; "gnmt" is `BeamSearch`'s (Wu
    et al. 2016, arXiv:1609.08144). With `alpha = 0` both are `log P`.

    Args:
        log_probs: float `(batch, k)`.
        lengths: int `(batch, k)`, at least 1.
        length_penalty_weight: `alpha`, a float >= 0 or `(batch, 1)` values.
        length_penalty_form: "average" or "gnmt".
        penalty: optional float `(batch, k)`.

    Returns:
        float32 `(batch, k)`.

    Example:

    ```python
    keras_attention.decoding.finished_pool.hypothesis_scores(
        np.array([[-3.0, -3.0]], "float32"), np.array([[2, 4]]), 1.0)
    # [[-1.5, -0.75]]
    ```
    """
    log_probs = ops.cast(log_probs, "float32")
    _checks.check_choice("hypothesis_scores", "length_penalty_form", length_penalty_form, LENGTH_PENALTY_FORMS)
    if length_penalty_form == "gnmt":
        scores = log_probs / length_penalty(lengths, length_penalty_weight)
    else:
        scores = log_probs / ops.power(ops.cast(lengths, "float32"), length_penalty_weight)
    return scores if penalty is None else scores + penalty


def patience_count(beam_width, patience):
    """CTranslate2's `round(beam_size * patience)` (halves away from zero):
    how many ended hypotheses a search with a penalty waits for."""
    return int(math.floor(beam_width * patience + 0.5))


def merge_pool(pool, entries, size):
    """The best `size` of the pool and the entries together, best first; on
    equal scores the earlier (the pool's, then the entries' in rank order)."""
    rank = ops.concatenate(
        [ops.where(part["filled"], ops.maximum(part["scores"], _loop.NEG_INF), _EMPTY) for part in (pool, entries)], 1
    )
    _, picked = first_top_k(rank, size)
    return {name: gather_beams(ops.concatenate([pool[name], entries[name]], 1), picked) for name in pool}


def check_length_penalty_form(owner, value):
    """`value` as one of `LENGTH_PENALTY_FORMS`; a number is refused as the weight it must be."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `length_penalty_form` is the penalty's formula, one of "
            f"{LENGTH_PENALTY_FORMS}; got the number {value!r}: a weight (CTranslate2's `length_penalty`) is "
            "`length_penalty_weight`."
        )
    _checks.check_choice(owner, "length_penalty_form", value, LENGTH_PENALTY_FORMS)
    return value
