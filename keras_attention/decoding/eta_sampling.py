"""Eta sampling: an absolute cutoff that shrinks as the step's entropy grows.

A registered search strategy ("eta"): `FilteredSampling` whose step's
distribution is first truncated at a threshold set by its entropy `H`
(Hewitt, Manning and Liang 2022, "Truncation Sampling as Language Model
Desmoothing", arXiv:2210.15191):

    eta = min(eta_cutoff, sqrt(eta_cutoff) * exp(-H)),
    keep y  iff  p(y) >= eta,  or y is the most likely token,

so a flat distribution (many plausible tokens) is cut less than a peaked
one. `eta_cutoff` is in [0, 1] (0 keeps every token); it is a run-time
option, one value or one per example (Hugging Face's `eta_cutoff`; its
`min_tokens_to_keep` is 1 here). The cut is applied to the model's
distribution, then temperature, top-k and top-p act on what is kept.
"""

from keras import ops

from keras_attention.decoding import _loop
from keras_attention.decoding.epsilon_sampling import check_cutoff, probability_cutoff
from keras_attention.decoding.filtered_sampling import FilteredSampling
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import register
from keras_attention.decoding.typical_sampling import entropy

__all__ = ["EtaSampling", "eta_filter"]


def eta_filter(logits, eta_cutoff):
    """Logits of the tokens less likely than `min(eta_cutoff,
    sqrt(eta_cutoff) exp(-H))`, but the most likely, get the floor
    `NEG_INF`; `eta_cutoff` one number in [0, 1] or `(batch,)` values.

    Example:

    ```python
    keras_attention.decoding.eta_sampling.eta_filter(np.log(np.array([[0.5, 0.3, 0.15, 0.05]], "float32")), 0.2)
    # H = 1.14 nats: eta = min(0.2, 0.447 * 0.319) = 0.143: [[log 0.5, log 0.3, log 0.15, NEG_INF]]
    ```
    """
    eta_cutoff = _loop.option_rows(eta_cutoff, "float32", lambda v: check_cutoff("eta_filter", "eta_cutoff", v))
    logits = ops.cast(logits, "float32")
    if _loop.is_rows(eta_cutoff):
        eta_cutoff = ops.expand_dims(eta_cutoff, 1)
    elif eta_cutoff == 0:
        return logits
    log_probs = _loop.log_probabilities(logits)
    # In logs: min(log eta, log eta / 2 - H); log(0) = -inf keeps every token.
    log_eta = ops.log(eta_cutoff)
    return probability_cutoff(logits, log_probs, ops.minimum(log_eta, 0.5 * log_eta - entropy(log_probs)))


@register("eta")
class EtaSampling(FilteredSampling):
    """Sampling above the entropy-dependent cutoff of eta sampling (arXiv:2210.15191).

    Example:

    ```python
    keras_attention.decoding.get("eta").eta_cutoff
    # 0.0003
    ```
    """

    cut_field = RuntimeField(
        "eta_cutoff", "float32", 0, maximum=1, meaning="eta sampling: cutoff min(eta, sqrt(eta) exp(-entropy))"
    )
    cut = staticmethod(eta_filter)

    def __init__(self, temperature=1.0, top_k=None, top_p=1.0, seed=None, eta_cutoff=3e-4):
        super().__init__(temperature, top_k, top_p, seed)
        self.eta_cutoff = check_cutoff(type(self).__name__, "eta_cutoff", eta_cutoff)

    def get_config(self):
        return {**super().get_config(), "eta_cutoff": self.eta_cutoff}
