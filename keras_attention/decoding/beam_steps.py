"""The pieces of one beam-search step, each a pure function testable on its own.

`extend_hypotheses` (the log-probability of every one-token extension),
`coverage_penalty` and `candidate_scores` (the GNMT score of each extension,
Wu et al. 2016, arXiv:1609.08144), `select_candidates` (the best `width` of
them) and `search_is_decided` (the early-stopping test). `beam_search`
composes them with `write_step`, `gather_beams` and `reorder_beams` from
`beams`.
"""

from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_top_k
from keras_attention.decoding import _loop
from keras_attention.decoding.beams import gather_beams

__all__ = [
    "LENGTH_CONVENTIONS",
    "candidate_scores",
    "coverage_penalty",
    "extend_hypotheses",
    "length_penalty",
    "search_is_decided",
    "select_candidates",
]


def length_penalty(lengths, alpha):
    """GNMT length penalty `lp(n) = ((5 + n) / 6) ** alpha` (Wu et al. 2016).

    Args:
        lengths: int or float tensor of any shape, `n`.
        alpha: float >= 0 (0 gives 1 everywhere).

    Returns:
        float32, the shape of `lengths`.

    Example:

    ```python
    keras_attention.decoding.length_penalty(np.array([1, 7]), 1.0)  # [1.0, 2.0]
    ```
    """
    return ops.power((5.0 + ops.cast(lengths, "float32")) / 6.0, alpha)


def coverage_penalty(coverage, weight):
    """GNMT coverage penalty `cp = beta * sum_i log(min(c_i, 1))` over attended positions.

    `c_i` is the attention source position `i` has received so far, summed
    over the steps; positions with `c_i = 0` (padding, or never attended)
    are left out, so the penalty is finite and `<= 0` (Wu et al. 2016,
    arXiv:1609.08144).

    Args:
        coverage: float `(..., source)`.
        weight: `beta`, a float >= 0.

    Returns:
        float32 `(...)`.

    Example:

    ```python
    keras_attention.decoding.coverage_penalty(np.array([[0.5, 2.0, 0.0]], "float32"), 0.5)  # [0.5 * log(0.5)] = [-0.3466]
    ```
    """
    coverage = ops.cast(coverage, "float32")
    attended = ops.greater(coverage, 0.0)
    # log(1) = 0 stands in where nothing was attended: log(0) is never taken.
    logs = ops.log(ops.minimum(ops.where(attended, coverage, 1.0), 1.0))
    # The axis counted from the front: onnxruntime leaves an empty tensor
    # unreduced over a negative axis (a batch of 0).
    return weight * ops.sum(ops.where(attended, logs, 0.0), axis=len(coverage.shape) - 1)


def extend_hypotheses(log_probs, step_log_probs, finished, end_token):
    """Log-probability of every one-token extension of every hypothesis.

        total[b, k, v] = max(log_probs[b, k] + step_log_probs[b, k, v], NEG_INF)

    except that a finished hypothesis continues only with `end_token`, at no
    cost (`step_log_probs` row `0` there, `NEG_INF` elsewhere), so it keeps
    its log-probability. `NEG_INF` is half of float32's lowest, finite so
    that sums of it neither overflow nor give NaN.

    Args:
        log_probs: float `(batch, width)`, each hypothesis' log-probability.
        step_log_probs: float `(batch, width, vocabulary)`, the step's
            log-softmax.
        finished: bool `(batch, width)`.
        end_token: int.

    Returns:
        float32 `(batch, width, vocabulary)`.

    Example:

    ```python
    keras_attention.decoding.extend_hypotheses(
        np.array([[-1.0, -2.0]], "float32"),
        np.log(np.full((1, 2, 3), 1 / 3, "float32")),
        np.array([[False, True]]), end_token=0)
    # [[[-2.0986, -2.0986, -2.0986], [-2.0, -1.7e38, -1.7e38]]]: the finished beam only ends
    ```
    """
    vocabulary = ops.shape(step_log_probs)[-1]
    is_end = ops.equal(ops.arange(vocabulary, dtype="int32"), end_token)
    finished_row = ops.where(is_end, 0.0, _loop.NEG_INF)
    step_log_probs = ops.where(ops.expand_dims(finished, -1), finished_row, step_log_probs)
    return ops.maximum(ops.expand_dims(log_probs, -1) + step_log_probs, _loop.NEG_INF)


def candidate_scores(
    total, finished, lengths, end_token, length_penalty_weight, penalty=None, length_convention="default"
):
    """GNMT score of every extension: `total / lp(length) + cp` (Wu et al. 2016).

        score[b, k, v] = total[b, k, v] / lp(lengths[b, k] + running[b, k])
                         + (penalty[b, k] if finished[b, k] or v == end_token else 0)

    with `lp` the `length_penalty` and `running = not finished`: a running
    hypothesis grows by one token, a finished one (continuing with the end
    token) keeps its length. The coverage penalty applies to hypotheses that
    end, at this step or before.

    `length_convention="tfa"` scores as `tfa.seq2seq.BeamSearchDecoder` did:
    the end token is not counted at the step it is chosen (`lp(lengths[b,
    k] + running[b, k] * (v != end_token))`; the stored length counts it
    from the next step on) and the coverage penalty applies to hypotheses
    that ended at an earlier step only.

    Args:
        total: float `(batch, width, vocabulary)`, from `extend_hypotheses`.
        finished: bool `(batch, width)`.
        lengths: int `(batch, width)`, tokens so far (end token included).
        end_token: int.
        length_penalty_weight: `alpha`, a float >= 0.
        penalty: float `(batch, width)` from `coverage_penalty` (with this
            step's alignment in the coverage), or None for no coverage
            penalty.
        length_convention: "default" or "tfa" (see above).

    Returns:
        float32 `(batch, width, vocabulary)`.

    Example:

    ```python
    keras_attention.decoding.candidate_scores(
        np.array([[[-2.0, -3.0]]], "float32"), np.array([[False]]), np.array([[1]]),
        end_token=0, length_penalty_weight=1.0, penalty=np.array([[-0.5]], "float32"))
    # lp(2) = 7 / 6: [[[-2 / (7 / 6) - 0.5, -3 / (7 / 6)]]] = [[[-2.2143, -2.5714]]]
    ```
    """
    _checks.check_choice("candidate_scores", "length_convention", length_convention, LENGTH_CONVENTIONS)
    is_end = ops.equal(ops.arange(ops.shape(total)[-1], dtype="int32"), end_token)
    running = ops.expand_dims(ops.logical_not(finished), -1)
    if length_convention == "tfa":
        running = ops.logical_and(running, ops.logical_not(is_end))
    candidate_lengths = ops.expand_dims(ops.cast(lengths, "int32"), -1) + ops.cast(running, "int32")
    scores = total / length_penalty(candidate_lengths, length_penalty_weight)
    if penalty is None:
        return scores
    ends_here = ops.expand_dims(finished, -1)
    if length_convention == "default":
        ends_here = ops.logical_or(ends_here, is_end)
    return scores + ops.where(ends_here, ops.expand_dims(penalty, -1), 0.0)


LENGTH_CONVENTIONS = ("default", "tfa")


def select_candidates(scores, total, finished, lengths, end_token, pad_token, ranking=None):
    """The best `width` of each example's `width * vocabulary` extensions, best first.

    Candidate `c = k * vocabulary + v` (beam `k` extended by token `v`) is
    ranked by `scores`, or by `ranking` when given (equal values: the lower
    `c` first, on every backend); the chosen ones become the new beams:

        parents = c // vocabulary,  tokens = c % vocabulary (pad_token after an end)
        log_probs = total[b, c],     lengths = lengths[b, parent] + (parent running)
        finished = parent finished or token == end_token

    Args:
        scores: float `(batch, width, vocabulary)`, from `candidate_scores`.
        total: float `(batch, width, vocabulary)`, from `extend_hypotheses`.
        finished: bool `(batch, width)`.
        lengths: int `(batch, width)`.
        end_token: an int.
        pad_token: an int.
        ranking: optional float `(batch, width, vocabulary)` the candidates
            are chosen by instead of `scores` (a diverse beam search ranks
            by the scores less a diversity term); the chosen ones' `scores`
            are still taken from `scores`.

    Returns:
        A dict of `(batch, width)` tensors: `scores`, `log_probs`, `parents`
        (int32), `tokens` (int32), `lengths`, `finished`.

    Example:

    ```python
    chosen = keras_attention.decoding.select_candidates(
        np.array([[[-1.0, -4.0], [-2.0, -3.0]]], "float32"),  # scores
        np.array([[[-1.0, -4.0], [-2.0, -3.0]]], "float32"),  # total
        np.array([[False, False]]), np.array([[1, 1]]), end_token=0, pad_token=0)
    # parents [[0, 1]], tokens [[0, 0]], scores [[-1.0, -2.0]], lengths [[2, 2]]
    ```
    """
    batch, width, vocabulary = ops.shape(scores)[0], ops.shape(scores)[1], ops.shape(scores)[2]
    # Not `top_k` alone: the order of equal scores would be the backend's
    # (torch's `topk` promises none), and with it which beams survive.
    best_scores, best = first_top_k(
        ops.reshape(scores if ranking is None else ranking, (batch, width * vocabulary)), width
    )
    parents = ops.floor_divide(best, vocabulary)
    tokens = ops.mod(best, vocabulary)
    # One gather from the flat candidates (a `take_along_axis` costs some
    # thirty shape operations per step in an exported graph); the parents'
    # flags and lengths by `gather_beams`'s mask, as the width is small.
    offsets = ops.expand_dims(ops.arange(batch, dtype="int32") * (width * vocabulary), 1)
    flat_best = ops.reshape(best + offsets, (-1,))
    log_probs = ops.reshape(ops.take(ops.reshape(total, (-1,)), flat_best), (batch, width))
    if ranking is not None:
        best_scores = ops.reshape(ops.take(ops.reshape(scores, (-1,)), flat_best), (batch, width))
    parent_finished = gather_beams(finished, parents)
    tokens = ops.where(parent_finished, pad_token, tokens)
    lengths = gather_beams(ops.cast(lengths, "int32"), parents)
    lengths = lengths + ops.cast(ops.logical_not(parent_finished), "int32")
    return {
        "scores": best_scores,
        "log_probs": log_probs,
        "parents": parents,
        "tokens": tokens,
        "lengths": lengths,
        "finished": ops.logical_or(parent_finished, ops.equal(tokens, end_token)),
    }


def search_is_decided(scores, log_probs, finished, max_length, length_penalty_weight):
    """Per example: whether no running hypothesis can still overtake the best finished one.

        decided[b] = any_k finished[b, k]  and
                     max_{k finished} scores[b, k] >= max_{k running} log_probs[b, k] / lp(max_length)

    The right side bounds every score a running hypothesis can still reach:
    its log-probability `L <= 0` only falls as tokens are added, it ends with
    at most `max_length` tokens and `lp(n)` grows with `n`, so
    `L' / lp(n) <= L / lp(max_length)`; the coverage penalty is `<= 0`. With
    `alpha = 0` the bound is `L` itself (Wu et al. 2016, arXiv:1609.08144).

    Args:
        scores: float `(batch, width)`, the beams' scores.
        log_probs: float `(batch, width)`, their log-probabilities.
        finished: bool `(batch, width)`.
        max_length: int, the most tokens a hypothesis can have.
        length_penalty_weight: `alpha`, a float >= 0.

    Returns:
        bool `(batch,)`.

    Example:

    ```python
    keras_attention.decoding.search_is_decided(
        np.array([[-1.0, -1.2], [-1.0, -1.2]], "float32"),  # scores
        np.array([[-1.0, -1.2], [-1.0, -0.9]], "float32"),  # log-probabilities
        np.array([[True, False], [True, False]]), max_length=10, length_penalty_weight=0.0)
    # [True, False]: -1.2 cannot catch up with -1.0, -0.9 still can
    ```
    """
    finished = ops.convert_to_tensor(finished)
    reachable = ops.cast(log_probs, "float32") / length_penalty(max_length, length_penalty_weight)
    best_finished = ops.max(ops.where(finished, ops.cast(scores, "float32"), _loop.NEG_INF), axis=1)
    best_reachable = ops.max(ops.where(finished, _loop.NEG_INF, reachable), axis=1)
    return ops.logical_and(ops.any(finished, axis=1), ops.greater_equal(best_finished, best_reachable))
