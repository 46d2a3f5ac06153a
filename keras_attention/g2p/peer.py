"""The peer: Phonetisaurus (a WFST joint-sequence G2P model) on the same split.

Trained with the `phonetisaurus` package's own defaults (its `train`
command: EM alignment of letters and phones, then an n-gram model over the
aligned pairs compiled to a WFST) and applied to the test words in one batch
(`phonetisaurus-apply`, one best pronunciation per word). Scored with the
same `error_rates` as our model. (`python -m examples.g2p.cmudict_peer`
runs it alone on the CMUdict split.)
"""

import subprocess
import time
from pathlib import Path

from keras_attention.evaluation import error_rates


def _train(lexicon, directory):
    """`phonetisaurus.train` (the same command and options), with its chatter
    sent to `train.log` instead of the terminal."""
    import phonetisaurus as ps

    lexicon_path = directory / "lexicon.tsv"
    with open(lexicon_path, "w", encoding="utf-8") as file:
        for word, options in lexicon.items():
            for phones in options:
                line = f"{word}\t{' '.join(phones)}"
                if not any(symbol in line for symbol in "_|\xa0"):  # reserved by Phonetisaurus, as its train() skips
                    file.write(line + "\n")
    with open(directory / "train.log", "w") as log:
        subprocess.run(
            ["phonetisaurus-train", "--lexicon", str(lexicon_path), "--seq2_del", "--verbose"],
            cwd=directory,
            env=ps.guess_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
            check=True,
        )
    return directory / "train" / "model.fst"


def phonetisaurus(train, test, directory):
    """WER/PER on `test` of Phonetisaurus trained on `train` ({word: [phones, ...]})."""
    directory = Path(directory).absolute()
    directory.mkdir(parents=True, exist_ok=True)
    begin = time.perf_counter()
    model = _train(train, directory)
    train_seconds = time.perf_counter() - begin
    return {**evaluate(model, test), "train_seconds": round(train_seconds, 1)}


def evaluate(model, test):
    """WER/PER and words/s on `test` of a trained Phonetisaurus `model`
    (`phonetisaurus-apply` on the sorted word list, process start included)."""
    import phonetisaurus as ps

    words = sorted(test)
    begin = time.perf_counter()
    predicted = dict(ps.predict(words, Path(model).absolute()))
    apply_seconds = time.perf_counter() - begin
    rates = error_rates([predicted.get(word, []) for word in words], [test[word] for word in words])
    return {
        "wer": rates["sequence_error_rate"],
        "per": rates["token_error_rate"],
        "test_words": len(words),
        "words_per_second": round(len(words) / apply_seconds, 1),
        "unpronounced": sum(word not in predicted for word in words),
        "version": _version(),
    }


def _version():
    from importlib.metadata import version

    return version("phonetisaurus")
