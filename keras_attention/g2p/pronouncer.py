"""The exported pronouncer: one ONNX file with the search inside, run through onnxruntime.

`export_pronouncer` writes a trained model's (or ensemble's) beam search as
the `pronounce` signature and its greedy search as `pronounce_greedy`
(`keras_attention.export.export_model`, parity with Keras checked), with the
letters' and phones' vocabularies in `vocabulary.json`. `OnnxPronouncer`
reads that directory back without Keras: words are tokenised, fed in
batches of similar length, and each word gets its n-best pronunciations
with their scores (the search's, a log-probability: higher is better).

A word with a letter the model never saw is not pronounced (its letter would
be read as the unknown token, which no training word had): `unknown_letters`
names such letters, and `pronounce` leaves those words out for the caller to
report.
"""

from pathlib import Path

import numpy as np

SIGNATURES = {"beam": "pronounce", "greedy": "pronounce_greedy"}


def export_pronouncer(directory, greedy, beam, letters, phones, sample_words):
    """Export `beam` and `greedy` (Keras models: letters -> search) to ONNX in
    `directory`; returns the export's report."""
    from keras_attention.export import export_model

    sample = [{"letters": sample_words[:16]}, {"letters": sample_words[16:19] or sample_words[:1]}]
    return export_model(
        {SIGNATURES["beam"]: beam, SIGNATURES["greedy"]: greedy},
        directory,
        overwrite=True,
        formats=["onnx"],
        vocabulary={"source": letters, "target": phones},
        sample_inputs={name: sample for name in SIGNATURES.values()},
    )


def _batches(words, batch_size):
    order = sorted(range(len(words)), key=lambda i: (len(words[i]), words[i]))
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


class OnnxPronouncer:
    """Pronounces words with an exported pronouncer directory (see the module's doc).

    `beam_width` is the exported search's (`pronounce` signature, recorded
    in the model directory's settings.json); n-best lists come from it, one
    best from the greedy signature."""

    def __init__(self, directory, beam_width):
        import onnxruntime

        from keras_attention.export.vocabulary import load_vocabulary

        self.directory = Path(directory)
        vocabulary = load_vocabulary(self.directory)
        self.letters, self.phones = vocabulary["source"], vocabulary["target"]
        self._sessions = {}
        for method, name in SIGNATURES.items():
            self._sessions[method] = onnxruntime.InferenceSession(
                str(self.directory / f"{name}.onnx"), providers=["CPUExecutionProvider"]
            )
        self.beam_width = beam_width

    def unknown_letters(self, word):
        """The letters of `word` the model has no token for, in order of first appearance."""
        unknown = []
        for letter in self.letters.tokenize(word):
            if letter not in self.letters.tokens and letter not in unknown:
                unknown.append(letter)
        return unknown

    def pronounce(self, words, nbest=1, batch_size=256, method="beam"):
        """{word: [(score, [phones]), ...]} for the words whose letters are all
        known: up to `nbest` pronunciations each, best first."""
        session = self._sessions[method]
        names = [output.name for output in session.get_outputs()]
        known = [word for word in dict.fromkeys(words) if not self.unknown_letters(word)]
        results = {}
        for rows in _batches(known, batch_size):
            batch = [known[i] for i in rows]
            output = dict(zip(names, session.run(None, {"letters": self.letters.encode(batch)})))
            ids, scores, lengths = (np.asarray(output[key]) for key in ("ids", "scores", "lengths"))
            if ids.ndim == 2:  # greedy: one hypothesis
                ids, scores, lengths = ids[:, None], scores[:, None], lengths[:, None]
            for row, word in enumerate(batch):
                order = np.argsort(-scores[row], kind="stable")
                found = []
                for k in order:
                    if lengths[row, k] == 0:
                        continue  # a filler beam
                    found.append((float(scores[row, k]), self.phones.decode(ids[row, k])))
                    if len(found) == nbest:
                        break
                results[word] = found
        return results
