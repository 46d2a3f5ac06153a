"""Min-p sampling: keep the tokens at least `min_p` times as likely as the most likely one.

A registered search strategy ("min_p"): `FilteredSampling` whose step's
distribution is first cut to the tokens whose probability reaches `min_p`
times the largest one (Nguyen et al. 2024, "Turning Up the Heat: Min-p
Sampling for Creative and Coherent LLM Outputs", arXiv:2407.01082),

    keep y  iff  p(y) >= min_p * max_y' p(y'),   i.e.  log p(y) >= log p_max + log min_p,

a cut that follows the model's confidence: wide when it is unsure, narrow
when one token dominates. The cut is applied to the model's distribution,
then temperature, top-k and top-p act on what is kept. `min_p` is in
[0, 1] (0 keeps every token); it is a run-time option, one value or one per
example. The returned scores are those of the cut distribution (as the
constraints' are).
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.filtered_sampling import FilteredSampling
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import register

__all__ = ["MinPSampling", "min_p_filter"]


def check_min_p(owner, value):
    value = _checks.check_number(owner, "min_p", value, minimum=0)
    if value > 1:
        raise ValueError(f"{_checks.owner_name(owner)}: `min_p` must be in [0, 1]; got {value!r}.")
    return value


def min_p_filter(logits, min_p):
    """Logits of the tokens less likely than `min_p` times the most likely
    get the floor `NEG_INF`; `min_p` one number in [0, 1] or `(batch,)` values.

    Example:

    ```python
    keras_attention.decoding.min_p.min_p_filter(np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32")), 0.5)
    # keeps 0.5 and 0.3 (>= 0.25): [[log 0.5, log 0.3, NEG_INF, NEG_INF]]
    ```
    """
    min_p = _loop.option_rows(min_p, "float32", lambda v: check_min_p("min_p_filter", v))
    log_probs = _loop.log_probabilities(logits)
    if _loop.is_rows(min_p):
        min_p = ops.expand_dims(min_p, 1)
    elif min_p == 0:
        return ops.cast(logits, "float32")
    # (`initial`: an empty batch has no maximum; axis 1: onnxruntime leaves an
    # empty tensor unreduced over a negative axis.)
    best = ops.max(log_probs, axis=1, keepdims=True, initial=float("-inf"))
    # log(0) = -inf keeps every token, as min_p = 0 should.
    cut = ops.less(log_probs, best + ops.log(min_p))
    return ops.where(cut, _loop.NEG_INF, ops.cast(logits, "float32"))


@register("min_p")
class MinPSampling(FilteredSampling):
    """Sampling from the tokens at least `min_p` times as likely as the best (arXiv:2407.01082).

    Example:

    ```python
    keras_attention.decoding.get("min_p").min_p
    # 0.1
    ```
    """

    cut_field = RuntimeField(
        "min_p", "float32", 0, maximum=1, meaning="min-p: keep tokens >= min_p x the best's probability"
    )
    cut = staticmethod(min_p_filter)

    def __init__(self, temperature=1.0, top_k=None, top_p=1.0, seed=None, min_p=0.1):
        super().__init__(temperature, top_k, top_p, seed)
        self.min_p = check_min_p(type(self).__name__, min_p)

    def get_config(self):
        return {**super().get_config(), "min_p": self.min_p}
