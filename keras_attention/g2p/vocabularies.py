"""The letters' and the phones' vocabularies of a lexicon."""

from keras_attention.g2p.phones import PhoneCharacters
from keras_attention.text import Vocabulary


def vocabularies(lexicon, normalization=None, phone_symbols="phones"):
    """(letters, phones) of {word: [phones, ...]}: the letters one character
    a token (after `normalization`, e.g. "NFD"), with an unknown token; the
    phones one phone a token (or, with `phone_symbols="characters"`, the
    characters of the phones: phones.py), with start and end tokens."""
    letters = Vocabulary.build(lexicon, unknown_token="<unk>", normalization=normalization)
    symbols = PhoneCharacters if phone_symbols == "characters" else Vocabulary
    phones = symbols.build(
        [" ".join(p) for options in lexicon.values() for p in options],
        separator=" ",
        start_token="<s>",
        end_token="</s>",
    )
    return letters, phones
