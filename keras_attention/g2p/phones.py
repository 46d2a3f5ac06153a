"""Phones as the decoder's symbols: whole phones, or the characters they are written with.

An IPA phone is a base letter with marks: "ǎː" is a, a caron (rising accent)
and a length mark. As whole symbols, each combination is its own token that
the model sees only in the words that have it; as characters (Unicode NFD),
the decoder writes the base letter, which it mostly copies from the
spelling, and then the marks, which it learns across every vowel. The
phones come back by rule: combining marks (caron, tilde, ...), modifier
letters (ː, ʰ, ʲ, ...), tie bars and what follows a tie bar attach to the
phone before them, and a run of tone letters (˧˦, Vietnamese) is one phone.
`round_trips` checks the rule on a lexicon: every SIGMORPHON 2021 training
file comes back exactly (one eng_us word of 33,344 does not: "ːs" is one of
its phones).
"""

import unicodedata

import numpy as np

from keras_attention.text import Vocabulary

_TIES = {"\u0361", "\u035c"}  # t͡s, k͜p
_TONES = {chr(code) for code in range(0x02E5, 0x02EA)}  # ˥ ˦ ˧ ˨ ˩


def to_characters(phones):
    """The NFD characters of a list of phones, as one list (no boundaries)."""
    return [char for phone in phones for char in unicodedata.normalize("NFD", phone)]


def _attaches(char, phone, after_tie):
    if after_tie or char in _TIES:
        return True
    if char in _TONES:
        return phone[0] in _TONES  # a tone letter continues a tone, never a segment
    category = unicodedata.category(char)
    return category.startswith("M") or (category == "Lm" and phone[0] not in _TONES) or char == "ˀ"


def from_characters(chars):
    """Phones (NFC) from their characters: the inverse of `to_characters`."""
    phones, after_tie = [], False
    for char in chars:
        if phones and _attaches(char, phones[-1], after_tie):
            phones[-1] += char
        else:
            phones.append(char)
        after_tie = char in _TIES
    return [unicodedata.normalize("NFC", phone) for phone in phones]


def round_trips(lexicon):
    """The pronunciations of {word: [phones, ...]} that do not come back from their characters."""
    return [p for options in lexicon.values() for p in options if from_characters(to_characters(p)) != p]


class PhoneCharacters(Vocabulary):
    """A decoder vocabulary of the characters of phones.

    Texts are space-separated phones ("ǎ b d e s t"), tokenised into their
    NFD characters without boundaries; `decode` joins the characters back
    into phones with `from_characters`, so scoring sees phones either way.
    """

    def tokenize(self, text):
        return to_characters(text.split())

    def decode(self, ids):
        # Vocabulary.decode calls this method on each row of a batch: the
        # characters of one sequence are joined here, at rank 1.
        decoded = super().decode(ids)
        return from_characters(decoded) if np.asarray(ids).ndim == 1 else decoded
