"""Epsilon sampling: keep the tokens of probability at least `epsilon_cutoff`.

A registered search strategy ("epsilon"): `FilteredSampling` whose step's
distribution is first truncated at an absolute probability (Hewitt, Manning
and Liang 2022, "Truncation Sampling as Language Model Desmoothing",
arXiv:2210.15191):

    keep y  iff  p(y) >= epsilon_cutoff,  or y is the most likely token,

so a step never loses every token. `epsilon_cutoff` is in [0, 1] (0 keeps
every token, 1 only the most likely); it is a run-time option, one value or
one per example (Hugging Face's `epsilon_cutoff`; its `min_tokens_to_keep`
is 1 here). The cut is applied to the model's distribution, then
temperature, top-k and top-p act on what is kept. `probability_cutoff`, the
cut at a threshold of one's own, is eta sampling's too.
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.filtered_sampling import FilteredSampling
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import register

__all__ = ["EpsilonSampling", "epsilon_filter", "probability_cutoff"]


def check_cutoff(owner, name, value):
    value = _checks.check_number(owner, name, value, minimum=0)
    if value > 1:
        raise ValueError(f"{_checks.owner_name(owner)}: `{name}` must be in [0, 1]; got {value!r}.")
    return value


def probability_cutoff(logits, log_probs, log_threshold):
    """`logits` with the tokens whose log-probability is below
    `log_threshold` (`(batch, 1)`, or a number) at the floor `NEG_INF`,
    except each row's most likely tokens, which stay."""
    # (`initial`: an empty batch has no maximum; axis 1: onnxruntime leaves
    # an empty tensor unreduced over a negative axis.)
    best = ops.max(log_probs, axis=1, keepdims=True, initial=float("-inf"))
    cut = ops.logical_and(ops.less(log_probs, log_threshold), ops.less(log_probs, best))
    return ops.where(cut, _loop.NEG_INF, logits)


def epsilon_filter(logits, epsilon_cutoff):
    """Logits of the tokens less likely than `epsilon_cutoff`, but the most
    likely, get the floor `NEG_INF`; `epsilon_cutoff` one number in [0, 1]
    or `(batch,)` values.

    Example:

    ```python
    keras_attention.decoding.epsilon_sampling.epsilon_filter(
        np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32")), 0.1)
    # [[log 0.5, log 0.3, log 0.15, NEG_INF]]
    ```
    """
    epsilon_cutoff = _loop.option_rows(
        epsilon_cutoff, "float32", lambda v: check_cutoff("epsilon_filter", "epsilon_cutoff", v)
    )
    logits = ops.cast(logits, "float32")
    if _loop.is_rows(epsilon_cutoff):
        epsilon_cutoff = ops.expand_dims(epsilon_cutoff, 1)
    elif epsilon_cutoff == 0:
        return logits
    # log(0) = -inf keeps every token, as a cutoff of 0 should.
    return probability_cutoff(logits, _loop.log_probabilities(logits), ops.log(epsilon_cutoff))


@register("epsilon")
class EpsilonSampling(FilteredSampling):
    """Sampling from the tokens of probability at least `epsilon_cutoff` (arXiv:2210.15191).

    Example:

    ```python
    keras_attention.decoding.get("epsilon").epsilon_cutoff
    # 0.0003
    ```
    """

    cut_field = RuntimeField(
        "epsilon_cutoff", "float32", 0, maximum=1, meaning="epsilon sampling: keep tokens of probability >= it"
    )
    cut = staticmethod(epsilon_filter)

    def __init__(self, temperature=1.0, top_k=None, top_p=1.0, seed=None, epsilon_cutoff=3e-4):
        super().__init__(temperature, top_k, top_p, seed)
        self.epsilon_cutoff = check_cutoff(type(self).__name__, "epsilon_cutoff", epsilon_cutoff)

    def get_config(self):
        return {**super().get_config(), "epsilon_cutoff": self.epsilon_cutoff}
