"""Pronounce word lists with a decoding model, and score the pronunciations."""

import numpy as np

from keras_attention.evaluation import error_rates
from keras_attention.text import n_best


def length_sorted_batches(words, batch_size):
    """Index batches of words of similar length (less padding, faster decoding)."""
    order = sorted(range(len(words)), key=lambda i: (len(words[i]), words[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def pronounce(model, words, letters, phones, batch_size=512, hypotheses=1):
    """Phone lists for `words` (in their order) from a greedy or beam model.

    With a beam model and `hypotheses > 1`, each entry is the n-best list of
    `{"tokens", "text", "score", ...}` dicts instead.
    """
    results = [None] * len(words)
    for rows in length_sorted_batches(words, batch_size):
        output = model.predict_on_batch(letters.encode([words[i] for i in rows]))
        output = {name: np.asarray(value) for name, value in output.items()}
        if output["ids"].ndim == 3:
            if hypotheses > 1:
                decoded = n_best(output, phones, n=hypotheses)
            else:
                decoded = phones.decode(output["ids"][:, 0])
        else:
            decoded = phones.decode(output["ids"])
        for i, value in zip(rows, decoded):
            results[i] = value
    return results


def score(model, lexicon, letters, phones, batch_size=512):
    """WER and PER (percent) of `model` on {word: [pronunciations]}."""
    words = list(lexicon)
    predictions = pronounce(model, words, letters, phones, batch_size)
    rates = error_rates(predictions, [lexicon[word] for word in words])
    return {"wer": rates["sequence_error_rate"], "per": rates["token_error_rate"], "words": len(words)}, predictions
