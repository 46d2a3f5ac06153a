"""Ensembles whose models read the phones in both directions, agreeing on one pronunciation.

A decoder that writes a pronunciation from its first phone must place a
stress or a tone before it has written the suffix that decides it; one that
writes from the last phone has the opposite blind spot. In an ensemble of
`--directions both`, the odd-numbered models learn the pronunciations
reversed (right to left). Pronouncing a word:

1. each direction's models (an ensemble, or one model) run their beam
   search: two n-best lists, the right-to-left one turned back;
2. every model scores every proposal by its teacher-forced log-probability
   (`keras_attention.evaluation.sequence_log_likelihoods`; a right-to-left
   model reads the proposal reversed), end token included;
3. the proposal with the highest mean log-probability over the models wins.

This is n-best rescoring with right-to-left models (Sennrich et al. 2016,
"Edinburgh Neural Machine Translation Systems for WMT 16"; Liu et al. 2016,
"Agreement on Target-bidirectional Neural Machine Translation"). Measured on
SIGMORPHON 2021 medium with one model per direction, against two
left-to-right models of the same training cost: macro test WER 10.93
against 11.49; on Serbo-Croatian, where 98% of a left-to-right model's
errors are a vowel's accent or length, 36.2 against 38.9.
"""

import numpy as np

from keras_attention.evaluation import sequence_log_likelihoods
from keras_attention.g2p.pronounce import length_sorted_batches
from keras_attention.text import n_best

DIRECTIONS = ("left-to-right", "both")


def reads_right_to_left(number, directions):
    """Whether ensemble member `number` learns the pronunciations reversed."""
    return directions == "both" and number % 2 == 1


def reversed_lexicon(lexicon):
    """{word: [pronunciation reversed, ...]}: what a right-to-left model learns."""
    return {word: [list(reversed(phones)) for phones in options] for word, options in lexicon.items()}


def reversed_split(split):
    return {side: reversed_lexicon(lexicon) for side, lexicon in split.items()}


def log_likelihoods(trainer, words, pronunciations, letters, phones):
    """log P(pronunciation | word) under a teacher-forced `trainer`, one per pair."""
    ids = [phones.encode_one(" ".join(pronunciation)) for pronunciation in pronunciations]
    width = max(len(row) for row in ids) + 1
    previous = np.full((len(ids), width), phones.pad_id, "int32")
    targets = np.full((len(ids), width), phones.pad_id, "int32")
    for row, sequence in enumerate(ids):
        previous[row, : len(sequence) + 1] = [phones.start_id] + sequence
        targets[row, : len(sequence) + 1] = sequence + [phones.end_id]
    logits = trainer.predict_on_batch([letters.encode(words), previous])
    return sequence_log_likelihoods(logits, targets, pad_id=phones.pad_id)


class BidirectionalPronouncer:
    """Pronounces words with models of both directions (see the module's doc).

    `beams` are `{"left-to-right": model, "right-to-left": model}` beam
    models (one model's or an ensemble's); `trainers` the teacher-forced
    models of every member, with `right_to_left` flags.
    """

    def __init__(self, beams, trainers, right_to_left, letters, phones):
        self.beams, self.trainers, self.right_to_left = beams, trainers, right_to_left
        self.letters, self.phones = letters, phones

    def proposals(self, words):
        """Per word, the distinct non-empty pronunciations both directions' beams propose."""
        found = [[] for _ in words]
        for direction, beam in self.beams.items():
            output = {
                name: np.asarray(value) for name, value in beam.predict_on_batch(self.letters.encode(words)).items()
            }
            for index, hypotheses in enumerate(n_best(output, self.phones)):
                for hypothesis in hypotheses:
                    tokens = list(hypothesis["tokens"])
                    if direction == "right-to-left":
                        tokens.reverse()
                    # No word is pronounced with no phone; an untrained
                    # model proposes that (its end token is the likeliest
                    # first symbol), and its flat scores would elect it.
                    if tokens and tokens not in found[index]:
                        found[index].append(tokens)
        return found

    def pronounce(self, words, batch_size=256):
        """The winning pronunciation of each word (phone lists, in `words`' order)."""
        results = [None] * len(words)
        for rows in length_sorted_batches(words, batch_size):
            batch = [words[i] for i in rows]
            proposals = self.proposals(batch)
            pairs = [(word, tokens) for word, options in zip(batch, proposals) for tokens in options]
            total = np.zeros(len(pairs))
            for trainer, backwards in zip(self.trainers, self.right_to_left):
                read = [list(reversed(tokens)) if backwards else tokens for _, tokens in pairs]
                total += log_likelihoods(trainer, [word for word, _ in pairs], read, self.letters, self.phones)
            start = 0
            for i, options in zip(rows, proposals):
                scores = total[start : start + len(options)]
                results[i] = options[int(np.argmax(scores))] if options else []
                start += len(options)
        return results
