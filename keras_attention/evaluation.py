"""Error rates of decoded sequences against references, as sequence tasks report them.

Plain Python on token lists (the output of `Vocabulary.decode`): a decoded
batch is scored after decoding, outside the graph. Each example may have
several correct references (a word with two pronunciations, a sentence with
several translations): a prediction is right when it equals any of them, and
its token errors are counted against the closest one.

`sequence_log_likelihoods` scores given sequences under a teacher-forced
model's logits: how rescoring an n-best list with other models (another
direction, another ensemble) reads their opinion of each hypothesis.
"""

import numpy as np

__all__ = ["edit_distance", "error_rates", "sequence_log_likelihoods"]


def edit_distance(hypothesis, reference):
    """Levenshtein distance between two token sequences (insertions,
    deletions and substitutions each cost 1)."""
    hypothesis, reference = list(hypothesis), list(reference)
    previous = list(range(len(reference) + 1))
    for i, token in enumerate(hypothesis, 1):
        current = [i]
        for j, expected in enumerate(reference, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (token != expected)))
        previous = current
    return previous[-1]


def error_rates(predictions, references):
    """Sequence and token error rates, in percent.

    Args:
        predictions: one token sequence per example.
        references: per example, one token sequence or a list of them (any
            of which is correct).

    Returns:
        {"sequence_error_rate": % of examples whose prediction equals none of
        their references (a G2P task's WER), "token_error_rate": summed edit
        distance to the closest reference / summed length of that reference
        (its PER), "examples": the count}. The closest reference is the one
        with the smallest distance, the shorter one on a tie.

    Example:

    ```python
    keras_attention.evaluation.error_rates(
        [["K", "AE", "T"], ["D", "AA"]], [["K", "AE", "T"], [["D", "AO", "G"], ["D", "AA", "G"]]])
    # {"sequence_error_rate": 50.0, "token_error_rate": 16.67, "examples": 2}
    ```
    """
    predictions, references = list(predictions), list(references)
    if len(predictions) != len(references):
        raise ValueError(
            f"error_rates: `predictions` and `references` must have one entry per example; "
            f"got {len(predictions)} and {len(references)}."
        )
    if not predictions:
        raise ValueError("error_rates: no examples to score.")
    wrong = errors = length = 0
    for index, (prediction, options) in enumerate(zip(predictions, references)):
        if isinstance(prediction, str) or (options and isinstance(options, str)):
            raise ValueError(
                f"error_rates: example {index}: expected token sequences (lists), got a string; "
                "split it into tokens first (e.g. Vocabulary.tokenize)."
            )
        if not options or not isinstance(options[0], (list, tuple)):
            options = [options]
        distance, reference = min((edit_distance(prediction, option), len(option)) for option in options)
        wrong += distance > 0
        errors += distance
        length += reference
    return {
        "sequence_error_rate": 100.0 * wrong / len(predictions),
        "token_error_rate": 100.0 * errors / max(length, 1),
        "examples": len(predictions),
    }


def sequence_log_likelihoods(logits, targets, pad_id=0):
    """Each sequence's log-probability under a teacher-forced model: the sum
    over its steps of `log softmax(logits)[t, targets[t]]`, padding left out.

    With `logits = trainer([source, [start] + y])` and `targets = y + [end]`
    padded with `pad_id`, this is `log P(y | source)`, end token included:
    the score a model gives a hypothesis it did not produce itself, which is
    how an n-best list is rescored by other models (Sennrich et al. 2016,
    "Edinburgh Neural Machine Translation Systems for WMT 16", rescoring with
    right-to-left models). Computed in float64 from the logits, outside the
    graph.

    Args:
        logits: `(batch, steps, vocabulary)` scores before the softmax.
        targets: `(batch, steps)` ids, `pad_id` after each sequence's end.
        pad_id: the id of padding (not scored).

    Returns:
        `(batch,)` float64 log-likelihoods (0 for an all-padding row).

    Example:

    ```python
    logits = np.log(np.array([[[0.5, 0.25, 0.25], [0.1, 0.8, 0.1]]]))
    keras_attention.evaluation.sequence_log_likelihoods(logits, np.array([[2, 1]]))
    # array([log(0.25) + log(0.8)]) = [-2.6094]
    ```
    """
    logits = np.asarray(logits, dtype="float64")
    targets = np.asarray(targets)
    if logits.ndim != 3 or targets.shape != logits.shape[:2]:
        raise ValueError(
            "sequence_log_likelihoods: expected `logits` (batch, steps, vocabulary) and `targets` (batch, steps); "
            f"got shapes {logits.shape} and {targets.shape}."
        )
    if targets.size and (targets.min() < 0 or targets.max() >= logits.shape[-1]):
        raise ValueError(
            f"sequence_log_likelihoods: `targets` must be ids in [0, {logits.shape[-1]}); "
            f"got values from {targets.min()} to {targets.max()}."
        )
    top = logits.max(axis=-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    chosen = np.take_along_axis(log_probs, targets[..., None].astype("int64"), axis=-1)[..., 0]
    return np.where(targets == pad_id, 0.0, chosen).sum(axis=1)
