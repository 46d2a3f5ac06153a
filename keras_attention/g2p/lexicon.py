"""Pronunciation lexicons: read from TSV or CMUdict files, checked line by line, split and sampled.

A lexicon is `{word: [pronunciation, ...]}`, a pronunciation a list of phone
strings, so a word with several pronunciations keeps them together (on one
side of a split, and every one counted right when scoring).

Two file formats, told apart by the first entry (a tab or not):

- TSV: `word<TAB>phones`, phones separated by spaces (SIGMORPHON's, and
  Phonetisaurus's training format);
- CMUdict: `WORD  P1 P2 ...` (words and phones separated by spaces),
  `WORD(2)  ...` for a word's second pronunciation, `;;;` comment lines and
  `# ...` comments at a line's end. Case and stress digits are kept as written.

Blank lines are ignored. A line that cannot be read (no tab in a TSV file,
no phones after a CMUdict word, no word, bytes that are not UTF-8) raises
`LexiconError` naming the file and the line. Entries the model cannot learn
from are skipped and returned with the reason (`Lexicon.skipped`), never
dropped silently: a word with an empty pronunciation, a word with a
character Phonetisaurus reserves for its alignments (`_`, `|`, a no-break space), a phone spelled as
one of the vocabulary's own tokens (`<s>`, `</s>`, `<pad>`, `<unk>`).
"""

import dataclasses
import random
import re

RESERVED_LETTERS = ("_", "|", "\xa0")
RESERVED_PHONES = ("<s>", "</s>", "<pad>", "<unk>")
_VARIANT = re.compile(r"\(\d+\)$")


class LexiconError(ValueError):
    """A lexicon file that cannot be read: `str()` is `FILE:LINE: what`."""

    def __init__(self, path, line, message):
        self.path, self.line = str(path), line
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


@dataclasses.dataclass
class Lexicon:
    """What `read_lexicon` found: the entries, the file's format, and the
    entries skipped as `(line number, word, reason)`."""

    entries: dict
    format: str
    skipped: list

    def skipped_summary(self, examples=3):
        """One line: how many entries were skipped, with a few examples; "" for none."""
        if not self.skipped:
            return ""
        shown = "; ".join(f"line {line} {word!r}: {reason}" for line, word, reason in self.skipped[:examples])
        more = f"; and {len(self.skipped) - examples} more" if len(self.skipped) > examples else ""
        return f"skipped {len(self.skipped)} entr{'y' if len(self.skipped) == 1 else 'ies'} ({shown}{more})"


def _skip_reason(word, phones):
    if not phones:
        return "no phones"
    reserved = [symbol for symbol in RESERVED_LETTERS if symbol in word]
    if reserved:
        return f"reserved character {reserved[0]!r}"
    special = [phone for phone in phones if phone in RESERVED_PHONES]
    if special:
        return f"reserved phone {special[0]!r}"
    return None


def _parse(line, tsv, path, number):
    """(word, phones) of one line of the file's format."""
    if tsv:
        word, tab, phones = line.partition("\t")
        if not tab:
            raise LexiconError(path, number, f"expected 'word<TAB>phones' (a TSV file); got {line!r:.60}")
        if not word.strip():
            raise LexiconError(path, number, f"expected a word before the tab; got {line!r:.60}")
        return word.strip(), phones.split()
    text = line.split("#", 1)[0] if " #" in line else line
    parts = text.split()
    if len(parts) < 2:
        raise LexiconError(path, number, f"expected 'WORD  PHONES' (a CMUdict file); got {line!r:.60}")
    return _VARIANT.sub("", parts[0]), parts[1:]


def read_lexicon(path):
    """A `Lexicon` from a TSV or CMUdict file (see the module's doc)."""
    entries, skipped, tsv = {}, [], None
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as error:
        raise LexiconError(path, None, f"cannot read the file ({error.strerror or error})") from None
    for number, data in enumerate(raw.split(b"\n"), 1):
        try:
            line = data.decode("utf-8").rstrip("\r")
        except UnicodeDecodeError:
            raise LexiconError(path, number, "not UTF-8 text") from None
        if number == 1:
            line = line.lstrip("\ufeff")
        if not line.strip() or (tsv is not True and line.startswith(";;;")):
            continue
        if tsv is None:
            tsv = "\t" in line
        word, phones = _parse(line, tsv, path, number)
        reason = _skip_reason(word, phones)
        if reason:
            skipped.append((number, word, reason))
            continue
        options = entries.setdefault(word, [])
        if phones not in options:
            options.append(phones)
    if not entries:
        reason = f" ({Lexicon({}, '', skipped).skipped_summary()})" if skipped else ""
        raise LexiconError(path, None, f"no pronunciations found{reason}; expected 'word<TAB>phones' lines")
    return Lexicon(entries, "tsv" if tsv else "cmudict", skipped)


def alphabet(lexicon):
    """The characters the words are written with."""
    return {char for word in lexicon for char in word}


def pairs(lexicon):
    """(word, phones) training pairs: one per pronunciation."""
    return [(word, phones) for word, options in lexicon.items() for phones in options]


def subset(lexicon, count):
    """The first `count` words (in sorted order), for smoke runs."""
    return {word: lexicon[word] for word in sorted(lexicon)[:count]}


def sample(lexicon, count, seed=0):
    """`count` words drawn at random (the same ones for the same seed), with
    all their pronunciations: a small lexicon of the language, not the first
    letters of its alphabet as `subset` gives."""
    if not 0 < count <= len(lexicon):
        raise ValueError(f"sample: `count` must be between 1 and the lexicon's {len(lexicon)} words; got {count}.")
    import numpy as np

    words = sorted(lexicon)
    chosen = np.random.default_rng(seed).choice(len(words), size=count, replace=False)
    return {words[i]: lexicon[words[i]] for i in sorted(chosen)}


def dev_size(words):
    """How many of `words` training words to hold out for dev when no dev
    file is given: a tenth, at least 100 (a quarter of a smaller lexicon), at
    most 2,000 (enough to rank epochs; scoring more costs every epoch)."""
    return max(1, min(max(round(words * 0.1), min(100, words // 4)), 2000))


def carve_dev(lexicon, seed=0):
    """(train, dev): `dev_size` words drawn at random (seeded) with all their
    pronunciations, the rest for training."""
    words = sorted(lexicon)
    if len(words) < 2:
        raise ValueError(f"carve_dev: a dev set needs a lexicon of 2 words or more; got {len(words)}.")
    held = set(random.Random(seed).sample(words, dev_size(len(words))))
    train = {word: lexicon[word] for word in words if word not in held}
    dev = {word: lexicon[word] for word in words if word in held}
    return train, dev
