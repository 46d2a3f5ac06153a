"""Choosing on dev how an ensemble pronounces: its rescoring, its beam, its greedy search or one model alone.

An ensemble is only as good as its models agree to be. On a small lexicon
(800 SIGMORPHON training words) some models learn little, and pronouncing
with all of them is then worse than with the best one alone: averaged
probabilities halve a trained model's confidence, so the beam prefers a
short pronunciation whose few steps cost less, and in the n-best rescoring
an untrained model's flat scores favour whatever is shortest. So a run
scores every way it can pronounce on the dev words:

- both directions' proposals rescored by every model (`bidirectional.py`),
- the left-to-right models' ensemble, beam and greedy,
- each model alone, beam and greedy (a right-to-left model's pronunciation
  turned back),

and keeps the one with the lowest dev WER (on equal WER the lower PER; on
equal both, the earlier in that order), so it never does worse on dev than
its best model. The choice is printed and recorded in the results with
every system's dev and test figures; test never takes part in it.

Measured on 800 Dutch training words (`train.py sigmorphon --languages dut
--train-words 800`, the medium settings, four models): before, three of
the four models stopped after 7 epochs with their first epoch's weights
(dev WER 100% throughout; `training.dev_score` now also reads PER) and the
rescored ensemble scored 92.4% test WER against 83.7% for its one trained
model, which this choice picks on those models. With every model trained,
the rescored ensemble scores 68.3% (the best models alone: 75.6% and 77.0%)
and is the one chosen.
"""

import time

from keras_attention.evaluation import error_rates
from keras_attention.g2p.pronounce import pronounce


def rates(predictions, references):
    """WER and PER (percent) of phone lists against {word's references}."""
    measured = error_rates(predictions, references)
    return {"wer": measured["sequence_error_rate"], "per": measured["token_error_rate"]}


def best_on_dev(dev_rates):
    """The name of the system with the lowest dev (WER, PER) in `dev_rates`
    ({name: {"wer", "per"}}, in order of preference: the earlier wins a tie)."""
    if not dev_rates:
        raise ValueError("best_on_dev: `dev_rates` must name at least one system; got none.")
    return min(dev_rates, key=lambda name: (dev_rates[name]["wer"], dev_rates[name]["per"]))


def model_pronouncer(model, letters, phones, right_to_left=False):
    """words -> phone lists, from a greedy or beam model (the best beam),
    turned back where the model reads the pronunciations right to left."""

    def pronounce_words(words):
        predictions = pronounce(model, words, letters, phones)
        return [list(reversed(tokens)) for tokens in predictions] if right_to_left else predictions

    return pronounce_words


def systems(members, right_to_left, ensembles, bidirectional, letters, phones):
    """{name: words -> phone lists}, in order of preference. `members` are
    the models' `Models`; `ensembles` {"greedy", "beam"} the left-to-right
    models' ensemble (None for one such model); `bidirectional` a
    `BidirectionalPronouncer` or None."""
    found = {}
    if bidirectional is not None:
        found["both directions, rescored"] = bidirectional.pronounce
    if ensembles is not None:
        for method in ("beam", "greedy"):
            found[f"left-to-right ensemble, {method}"] = model_pronouncer(ensembles[method], letters, phones)
    for number, (models, backwards) in enumerate(zip(members, right_to_left)):
        for method in ("beam", "greedy"):
            model = models.beam if method == "beam" else models.greedy
            found[f"model {number} alone, {method}"] = model_pronouncer(model, letters, phones, backwards)
    return found


def choose(candidates, dev, test):
    """Score every candidate system on `dev` and `test` ({word: [references]});
    returns (the name chosen on dev, {name: {"dev_wer", "dev_per",
    "test_wer", "test_per", "test_words_per_second"}})."""
    table = {}
    for name, pronounce_words in candidates.items():
        entry = {}
        for side, lexicon in (("dev", dev), ("test", test)):
            words = list(lexicon)
            begin = time.perf_counter()
            predictions = pronounce_words(words)
            seconds = time.perf_counter() - begin
            measured = rates(predictions, [lexicon[word] for word in words])
            entry[f"{side}_wer"], entry[f"{side}_per"] = measured["wer"], measured["per"]
        entry["test_words_per_second"] = round(len(test) / max(seconds, 1e-9), 1)
        table[name] = entry
    chosen = best_on_dev({name: {"wer": e["dev_wer"], "per": e["dev_per"]} for name, e in table.items()})
    return chosen, table
