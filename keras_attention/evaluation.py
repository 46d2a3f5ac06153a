"""Error rates of decoded sequences against references, as sequence tasks report them.

Plain Python on token lists (the output of `Vocabulary.decode`): a decoded
batch is scored after decoding, outside the graph. Each example may have
several correct references (a word with two pronunciations, a sentence with
several translations): a prediction is right when it equals any of them, and
its token errors are counted against the closest one.
"""

__all__ = ["edit_distance", "error_rates"]


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
