"""Typical sampling: keep the tokens whose surprisal is closest to the distribution's entropy.

A registered search strategy ("typical"): `FilteredSampling` whose step's
distribution is first cut to its locally typical set (Meister, Pimentel,
Wiher and Cotterell 2023, "Locally Typical Sampling", TACL,
arXiv:2202.00666). With `H = -sum_y p(y) log p(y)` the entropy of the
step's distribution and `d(y) = |-log p(y) - H|` how far token y's
surprisal is from it, the tokens are ranked by `d`, smallest first, and
the smallest such prefix whose probability reaches `typical_p` is kept:

    keep y  iff  sum_{y': d(y') < d(y)} p(y') < typical_p,

which keeps every token tied with the last one kept. Unlike top-p, it may
drop the most likely token, when that token is far more likely than the
distribution's typical token (a very confident step keeps it: its
surprisal is then near the entropy). `typical_p` is in (0, 1] (1 keeps
every token); it is a run-time option, one value or one per example.
Hugging Face's `typical_p` cuts the same set (its `min_tokens_to_keep`
aside: here the most typical token is always kept). The cut is applied to
the model's distribution, then temperature, top-k and top-p act on what is
kept.
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.filtered_sampling import FilteredSampling
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import register

__all__ = ["TypicalSampling", "entropy", "typical_filter"]


def check_typical_p(owner, value):
    value = _checks.check_number(owner, "typical_p", value, minimum=0, strict=True)
    if value > 1:
        raise ValueError(f"{_checks.owner_name(owner)}: `typical_p` must be in (0, 1]; got {value!r}.")
    return value


def entropy(log_probs):
    """`-sum p log p` over the last axis of log-probabilities, `(batch, 1)`;
    a token of probability 0 (a logit at `-inf` or the floor) adds nothing."""
    probabilities = ops.exp(log_probs)
    terms = ops.where(ops.greater(probabilities, 0), probabilities * log_probs, 0.0)
    return -ops.sum(terms, axis=len(log_probs.shape) - 1, keepdims=True)


def typical_filter(logits, typical_p):
    """Logits outside the locally typical set of mass `typical_p` get the
    floor `NEG_INF`; `typical_p` one number in (0, 1] or `(batch,)` values.

    Example:

    ```python
    keras_attention.decoding.typical_sampling.typical_filter(
        np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32")), 0.4)
    # entropy 1.14 nats: the surprisals' distances 0.45, 0.06, 0.75, 1.85;
    # 0.3 (the most typical) then 0.5 reach 0.4: [[log 0.5, log 0.3, NEG_INF, NEG_INF]]
    ```
    """
    typical_p = _loop.option_rows(typical_p, "float32", lambda v: check_typical_p("typical_filter", v))
    logits = ops.cast(logits, "float32")
    per_row = _loop.is_rows(typical_p)
    if not per_row and typical_p == 1:
        return logits
    if per_row:
        typical_p = ops.expand_dims(typical_p, 1)
    log_probs = _loop.log_probabilities(logits)
    distance = ops.abs(log_probs + entropy(log_probs))
    # The tokens ranked by distance, nearest first (top_k of the negated
    # distances: a sort that converts to ONNX), with their probabilities.
    negated, order = ops.top_k(-distance, ops.shape(logits)[-1])
    probabilities = ops.take_along_axis(ops.exp(log_probs), order, axis=-1)
    mass_before = ops.cumsum(probabilities, axis=-1) - probabilities
    kept = ops.less(mass_before, typical_p)
    if per_row:
        # typical_p = 1 keeps every token, as the constant does (a rounded
        # cumulative sum may pass 1 before the last token).
        kept = ops.logical_or(kept, ops.greater_equal(typical_p, 1.0))
    # The largest kept distance; every token at most that far is kept.
    # (`initial`: an empty batch has none; the axis counted from the front:
    # onnxruntime leaves an empty tensor unreduced over a negative one.)
    last = len(negated.shape) - 1
    farthest = ops.max(ops.where(kept, -negated, float("-inf")), axis=last, keepdims=True, initial=float("-inf"))
    return ops.where(ops.greater(distance, farthest), _loop.NEG_INF, logits)


@register("typical")
class TypicalSampling(FilteredSampling):
    """Sampling from the locally typical set of mass `typical_p` (arXiv:2202.00666).

    Example:

    ```python
    keras_attention.decoding.get("typical").typical_p
    # 0.95
    ```
    """

    cut_field = RuntimeField(
        "typical_p", "float32", 0, strict=True, maximum=1, meaning="typical sampling: mass of the locally typical set"
    )
    cut = staticmethod(typical_filter)

    def __init__(self, temperature=1.0, top_k=None, top_p=1.0, seed=None, typical_p=0.95):
        super().__init__(temperature, top_k, top_p, seed)
        self.typical_p = check_typical_p(type(self).__name__, typical_p)

    def get_config(self):
        return {**super().get_config(), "typical_p": self.typical_p}
