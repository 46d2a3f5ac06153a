"""Diverse (group) beam search: beam groups kept apart by a Hamming diversity term.

A registered search strategy ("diverse_beam"): `BeamSearch` whose
`beam_width` beams form `num_groups` groups of `beam_width / num_groups`
(Vijayakumar et al. 2016, "Diverse Beam Search: Decoding Diverse Solutions
from Neural Sequence Models", arXiv:1610.02424). At each step the groups
choose in order, each by beam search over its own beams, and a candidate
`y` of group `g` extending a running hypothesis is ranked by

    score(y) - diversity_strength * #{beams of groups h < g that chose y at this step}

(the paper's Hamming diversity; `score` is `BeamSearch`'s GNMT score). Only
the selection sees the diversity term: the hypotheses keep the model's
log-probabilities and their GNMT score, which the search returns.
`diversity_strength` is a run-time field (one value or one per example).
"""

from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_top_k
from keras_attention.decoding import _loop
from keras_attention.decoding.beam_search import beam_search
from keras_attention.decoding.beam_steps import select_candidates
from keras_attention.decoding.beams import gather_beams
from keras_attention.decoding.runtime_fields import RuntimeField
from keras_attention.decoding.strategies import BeamSearch, register

__all__ = ["DiverseBeamSearch", "select_by_group"]


def check_diversity_strength(owner, value):
    return _checks.check_number(owner, "diversity_strength", value, minimum=0)


def select_by_group(scores, total, finished, lengths, end_token, pad_token, num_groups, diversity_strength):
    """`select_candidates` for each group of beams in turn, group `g`'s
    running candidates ranked by their score less `diversity_strength` times
    how often groups `h < g` chose their token at this step.

    The arguments are `select_candidates`'s (`(batch, width, vocabulary)`
    and `(batch, width)` tensors) with `num_groups` (a Python int dividing
    `width`) and `diversity_strength` (a number >= 0 or `(batch,)` values);
    the result is its dict of `(batch, width)` tensors, each group's beams
    best first in their own slots `[g * width / num_groups, (g + 1) * width
    / num_groups)`, `scores` without the diversity term.

    Example:

    ```python
    scores = np.log(np.array([[[0.6, 0.4], [0.6, 0.4]]], "float32"))  # two groups of one beam
    chosen = keras_attention.decoding.diverse_beam.select_by_group(
        scores, scores, np.array([[False, False]]), np.array([[0, 0]]),
        end_token=5, pad_token=5, num_groups=2, diversity_strength=1.0)
    # tokens [[0, 1]]: group 1 pays 1.0 for token 0, which group 0 chose
    ```
    """
    scores, finished = ops.convert_to_tensor(scores, "float32"), ops.convert_to_tensor(finished, "bool")
    width = scores.shape[1]
    size = width // num_groups
    strength = diversity_strength
    if _loop.is_rows(strength):
        strength = ops.reshape(ops.cast(strength, "float32"), (-1, 1, 1))
    vocabulary = ops.shape(scores)[-1]
    token_ids = ops.arange(vocabulary, dtype="int32")
    counts = None  # (batch, 1, vocabulary): the tokens earlier groups chose at this step
    groups = []
    for group in range(num_groups):
        beams = slice(group * size, (group + 1) * size)
        group_finished = finished[:, beams]
        ranking = None
        if counts is not None:
            # A finished hypothesis continues with its end token at no cost
            # and is not diverted: it keeps the score it ended with.
            ranking = ops.where(
                ops.expand_dims(group_finished, -1), scores[:, beams], scores[:, beams] - strength * counts
            )
        chosen = select_candidates(
            scores[:, beams], total[:, beams], group_finished, lengths[:, beams], end_token, pad_token, ranking=ranking
        )
        if group + 1 < num_groups:
            # Only running hypotheses choose a token; a finished one's end is no choice.
            running = ops.logical_not(gather_beams(group_finished, chosen["parents"]))
            chose = ops.logical_and(
                ops.equal(ops.expand_dims(chosen["tokens"], -1), token_ids), ops.expand_dims(running, -1)
            )
            chose = ops.sum(ops.cast(chose, "float32"), axis=1, keepdims=True)
            counts = chose if counts is None else counts + chose
        chosen["parents"] = chosen["parents"] + group * size
        groups.append(chosen)
    return {name: ops.concatenate([chosen[name] for chosen in groups], axis=1) for name in groups[0]}


def best_first(result):
    """The hypotheses of every group sorted by score, best first (equal scores: the lower slot first)."""
    width = result["scores"].shape[1]
    _, order = first_top_k(ops.cast(result["scores"], "float32"), width)
    return {name: gather_beams(value, order) for name, value in result.items()}


@register("diverse_beam")
class DiverseBeamSearch(BeamSearch):
    """Diverse beam search: `num_groups` beam groups, each penalised for the tokens earlier groups chose (arXiv:1610.02424).

    The `beam_width` beams form `num_groups` groups of `beam_width /
    num_groups`, each starting from the start token. At every step group
    `g = 0, 1, ...` extends its hypotheses as `BeamSearch` does, ranking a
    candidate token `y` of a running hypothesis by

        score(y) - diversity_strength * count_{h < g}(y)

    where `count_{h < g}(y)` is how many beams of the groups before `g`
    chose `y` at this step (Hamming diversity, Vijayakumar et al. 2016) and
    `score` the GNMT score `log P / lp(|y|) + cp` (`beam_search`). The
    diversity term is the step's only, as in the paper's Algorithm 1: it
    steers the selection and is not added into the hypotheses' scores.

    The returned `scores` are therefore the model's (undiverted)
    log-probabilities with `BeamSearch`'s length and coverage penalties,
    so that hypotheses of different groups, and of a `BeamSearch`, compare
    on one scale; the `beam_width` hypotheses of all groups come sorted by
    them, best first, and `num_hypotheses` keeps the best n. Outputs are
    `BeamSearch`'s: `ids (batch, hypotheses, max_length)`, `scores`,
    `log_probs`, `lengths (batch, hypotheses)`, ...

    With `num_groups=1` it is `BeamSearch(beam_width)`; with
    `diversity_strength=0` each group is a `BeamSearch(beam_width /
    num_groups)` of its own (the groups then find the same hypotheses).
    `diversity_strength` is a run-time field (one value, or one per
    example); `num_groups` shapes the loop.

    Example:

    ```python
    keras_attention.decoding.get("diverse_beam")
    # DiverseBeamSearch(beam_width=4, ..., num_groups=2, diversity_strength=0.5)
    ```
    """

    runtime_fields = BeamSearch.runtime_fields + (
        RuntimeField("diversity_strength", "float32", 0, meaning="diverse beam search: the Hamming diversity weight"),
    )

    def __init__(
        self,
        beam_width=4,
        length_penalty_weight=0.0,
        coverage_penalty_weight=0.0,
        early_stopping=False,
        length_convention="default",
        num_hypotheses=None,
        num_groups=2,
        diversity_strength=0.5,
    ):
        super().__init__(
            beam_width,
            length_penalty_weight,
            coverage_penalty_weight,
            early_stopping,
            length_convention,
            num_hypotheses,
        )
        owner = type(self).__name__
        self.num_groups = _checks.check_positive_int(owner, "num_groups", num_groups)
        if self.beam_width % self.num_groups:
            raise ValueError(
                f"{owner}: `num_groups` must divide `beam_width` {self.beam_width} (groups of equal size); "
                f"got {num_groups!r}."
            )
        self.diversity_strength = check_diversity_strength(owner, diversity_strength)

    def get_config(self):
        return {**super().get_config(), "num_groups": self.num_groups, "diversity_strength": self.diversity_strength}

    def search(self, step_fn, initial_state, runtime=None, **common):
        values = {**self.get_config(), **(runtime or {})}
        num_hypotheses = values.pop("num_hypotheses")
        num_groups = values.pop("num_groups")
        strength = _loop.option_rows(
            values.pop("diversity_strength"), "float32", lambda v: check_diversity_strength(self, v)
        )
        size = self.beam_width // num_groups

        def select(scores, total, finished, lengths, end_token, pad_token):
            return select_by_group(scores, total, finished, lengths, end_token, pad_token, num_groups, strength)

        # Each group starts from a beam of its own.
        live_beams = ops.equal(ops.mod(ops.arange(self.beam_width, dtype="int32"), size), 0)
        result = beam_search(step_fn, initial_state, **values, **common, select=select, live_beams=live_beams)
        if num_groups > 1:
            result = best_first(result)
        if num_hypotheses is not None:
            result = {name: value[:, :num_hypotheses] for name, value in result.items()}
        return result
