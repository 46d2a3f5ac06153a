"""Token vocabularies: text to padded id arrays and decoded ids back to tokens.

A sequence-to-sequence model reads and writes ids; its users hold strings.
`Vocabulary` maps between them for one side of a model: characters
(`separator=None`, "cat" -> c, a, t) or separated symbols (`separator=" "`,
"K AE T" -> K, AE, T), with the special tokens a decoder needs (padding at id
0, unknown, start, end). `n_best` turns a beam search result into ranked
token lists.

It is plain Python and NumPy, not a Keras layer: string tensors do not
convert to ONNX, so exported models take and return ids, and this class
tokenises on either side of them (the export writes it as `vocabulary.json`).
"""

import collections
import json
import unicodedata
from pathlib import Path

import numpy as np

from keras_attention import _checks

__all__ = ["Vocabulary", "n_best"]

_SPECIALS = ("pad_token", "unknown_token", "start_token", "end_token")
_NORMAL_FORMS = ("NFC", "NFD", "NFKC", "NFKD")


class Vocabulary:
    """Tokens and their ids for one side of a sequence model.

    Id 0 is padding; the other special tokens are optional. Tokens are
    characters when `separator` is None, else the pieces of the text split by
    `separator` (`" "` splits on any run of whitespace).

    Args:
        tokens: every token, in id order, special tokens included; the first
            must be `pad_token`.
        separator: None (characters) or the string between tokens.
        pad_token: the padding token (in `tokens`), or None for none.
        unknown_token: the token of unlisted tokens (in `tokens`), or None
            for none: then encoding an unlisted token raises.
        start_token: the token that starts a sequence (in `tokens`), or None.
        end_token: the token that ends a sequence (in `tokens`), or None.
        lowercase: lower-case texts before tokenising.
        normalization: None or a Unicode normal form applied before
            tokenising: "NFD" splits accented letters and Hangul syllables
            into base letters and marks or jamo, which lets a character model
            share what it learns across them (Korean's ~1,100 syllables in a
            small lexicon become 67 jamo); "NFC", "NFKC", "NFKD" likewise.

    Example:

    ```python
    phones = keras_attention.text.Vocabulary.build(
        ["K AE T", "D AO G"], separator=" ", start_token="<s>", end_token="</s>")
    decoder_inputs, targets = phones.encode_targets(["K AE T"])
    # decoder_inputs: [[<s>, K, AE, T]] ids; targets: [[K, AE, T, </s>]] ids
    phones.detokenize(targets)   # ["K AE T"]
    ```
    """

    def __init__(
        self,
        tokens,
        separator=None,
        pad_token="<pad>",
        unknown_token=None,
        start_token=None,
        end_token=None,
        lowercase=False,
        normalization=None,
    ):
        tokens = list(tokens)
        if len(tokens) < 2 or not all(isinstance(t, str) and t for t in tokens):
            raise ValueError(
                f"Vocabulary: `tokens` must be a list of at least 2 non-empty strings; got {tokens!r:.120}."
            )
        duplicates = [t for t, n in collections.Counter(tokens).items() if n > 1]
        if duplicates:
            raise ValueError(f"Vocabulary: `tokens` has duplicates: {duplicates[:5]!r}.")
        if separator is not None and (not isinstance(separator, str) or not separator):
            raise ValueError(
                f"Vocabulary: `separator` must be None (characters) or a non-empty string; got {separator!r}."
            )
        lowercase = _checks.check_bool("Vocabulary", "lowercase", lowercase)
        if normalization is not None and normalization not in _NORMAL_FORMS:
            raise ValueError(
                f"Vocabulary: `normalization` must be None or one of {', '.join(_NORMAL_FORMS)}; got {normalization!r}."
            )
        if pad_token is None or tokens[0] != pad_token:
            raise ValueError(
                f"Vocabulary: id 0 must be the padding token {pad_token!r}; got tokens[0] = {tokens[0]!r}."
            )
        specials = dict(zip(_SPECIALS, (pad_token, unknown_token, start_token, end_token)))
        for argument, token in specials.items():
            if token is not None and token not in tokens:
                raise ValueError(f"Vocabulary: `{argument}` {token!r} is not in `tokens`.")
        if separator is not None:
            spaced = [t for t in tokens if separator in t or (separator.isspace() and any(c.isspace() for c in t))]
            if spaced:
                raise ValueError(f"Vocabulary: tokens may not contain the separator {separator!r}; got {spaced[:5]!r}.")
        elif any(len(t) != 1 for t in tokens if t not in specials.values()):
            long = [t for t in tokens if len(t) != 1 and t not in specials.values()]
            raise ValueError(
                "Vocabulary: with `separator=None` (characters) every token but the special ones must be one "
                f"character; got {long[:5]!r}. Pass `separator=' '` for multi-character tokens."
            )
        self.tokens = tokens
        self.separator = separator
        self.lowercase = lowercase
        self.normalization = normalization
        self.pad_token, self.unknown_token, self.start_token, self.end_token = specials.values()
        self._ids = {token: i for i, token in enumerate(tokens)}

    # ------------------------------------------------------------- building

    @classmethod
    def build(
        cls,
        texts,
        separator=None,
        min_count=1,
        pad_token="<pad>",
        unknown_token=None,
        start_token=None,
        end_token=None,
        lowercase=False,
        normalization=None,
    ):
        """The vocabulary of `texts`: special tokens first, then every token
        seen at least `min_count` times, sorted (so the ids do not depend on
        the order of the texts)."""
        min_count = _checks.check_positive_int("Vocabulary.build", "min_count", min_count)
        counts = collections.Counter()
        probe = cls(
            [pad_token, "x"], separator=separator, pad_token=pad_token, lowercase=lowercase, normalization=normalization
        )
        for text in _as_texts(texts, "texts"):
            counts.update(probe.tokenize(text))
        specials = [t for t in (pad_token, unknown_token, start_token, end_token) if t is not None]
        specials = list(dict.fromkeys(specials))
        seen = sorted(t for t, n in counts.items() if n >= min_count and t not in specials)
        return cls(
            specials + seen, separator, pad_token, unknown_token, start_token, end_token, lowercase, normalization
        )

    # ---------------------------------------------------------------- lookup

    def __len__(self):
        return len(self.tokens)

    def __eq__(self, other):
        return isinstance(other, Vocabulary) and self.get_config() == other.get_config()

    def __repr__(self):
        kind = "characters" if self.separator is None else f"separator={self.separator!r}"
        return f"Vocabulary({len(self)} tokens, {kind})"

    def token_to_id(self, token):
        if token in self._ids:
            return self._ids[token]
        if self.unknown_token is not None:
            return self._ids[self.unknown_token]
        raise ValueError(f"Vocabulary: token {token!r} is not in the vocabulary and it has no `unknown_token`.")

    def id_to_token(self, token_id):
        if not 0 <= int(token_id) < len(self.tokens):
            raise ValueError(f"Vocabulary: id {token_id} is outside [0, {len(self.tokens)}).")
        return self.tokens[int(token_id)]

    def _special_id(self, token):
        return None if token is None else self._ids[token]

    @property
    def pad_id(self):
        return 0

    @property
    def unknown_id(self):
        return self._special_id(self.unknown_token)

    @property
    def start_id(self):
        return self._special_id(self.start_token)

    @property
    def end_id(self):
        return self._special_id(self.end_token)

    # -------------------------------------------------------------- encoding

    def tokenize(self, text):
        """The tokens of one text (before id lookup)."""
        if not isinstance(text, str):
            raise ValueError(f"Vocabulary: expected a string to tokenise; got {type(text).__name__} {text!r:.60}.")
        if self.normalization is not None:
            text = unicodedata.normalize(self.normalization, text)
        if self.lowercase:
            text = text.lower()
        if self.separator is None:
            return list(text)
        if self.separator.isspace():
            return text.split()
        return [piece for piece in text.split(self.separator) if piece]

    def _require(self, name):
        if getattr(self, name) is None:
            raise ValueError(f"Vocabulary: this needs a `{name}`; the vocabulary has none.")
        return getattr(self, name.replace("token", "id"))

    def encode(self, texts, add_start=False, add_end=False, length=None, dtype="int32"):
        """Ids `(B, T)` of `texts` (one string or a list), right-padded with 0.

        `add_start`/`add_end` put the start/end token around each sequence;
        `length` pads (or refuses to cut) to a fixed `T`.
        """
        rows = [self.encode_one(text, add_start, add_end) for text in _as_texts(texts, "texts")]
        return pad_sequences(rows, length=length, dtype=dtype)

    def encode_one(self, text, add_start=False, add_end=False):
        """The ids of one text, as a list."""
        ids = [self.token_to_id(token) for token in self.tokenize(text)]
        if add_start:
            ids.insert(0, self._require("start_token"))
        if add_end:
            ids.append(self._require("end_token"))
        return ids

    def encode_targets(self, texts, length=None, dtype="int32"):
        """Teacher-forcing pairs: decoder inputs `<start> y_1 .. y_n` and
        targets `y_1 .. y_n <end>`, both `(B, T)` padded with 0."""
        start, end = self._require("start_token"), self._require("end_token")
        rows = [self.encode_one(text) for text in _as_texts(texts, "texts")]
        inputs = pad_sequences([[start] + row for row in rows], length=length, dtype=dtype)
        targets = pad_sequences([row + [end] for row in rows], length=length, dtype=dtype)
        return inputs, targets

    # -------------------------------------------------------------- decoding

    def decode(self, ids):
        """Tokens of decoded ids: each row stops at the end token; padding and
        the start token are dropped. A rank-1 array gives one list of
        tokens, higher ranks nested lists (e.g. `(B, beam, L)` beams)."""
        ids = np.asarray(ids)
        if ids.ndim == 0:
            raise ValueError(f"Vocabulary.decode: `ids` must have rank >= 1; got a scalar {ids!r}.")
        if ids.ndim > 1:
            return [self.decode(row) for row in ids]
        skip = {0, self.start_id}
        tokens = []
        for token_id in ids.tolist():
            if token_id == self.end_id:
                break
            if token_id not in skip:
                tokens.append(self.id_to_token(token_id))
        return tokens

    def detokenize(self, ids):
        """Like `decode`, with each row's tokens joined into a string."""
        joiner = "" if self.separator is None else self.separator
        return _map_rows(self.decode(ids), np.asarray(ids).ndim, joiner.join)

    # ---------------------------------------------------------------- config

    def get_config(self):
        return {
            "tokens": list(self.tokens),
            "separator": self.separator,
            "pad_token": self.pad_token,
            "unknown_token": self.unknown_token,
            "start_token": self.start_token,
            "end_token": self.end_token,
            "lowercase": self.lowercase,
            "normalization": self.normalization,
        }

    @classmethod
    def from_config(cls, config):
        if not isinstance(config, dict) or "tokens" not in config:
            raise ValueError(f"Vocabulary.from_config: expected a dict with 'tokens'; got {config!r:.80}.")
        unknown = set(config) - {"tokens", "separator", "lowercase", "normalization", *_SPECIALS}
        if unknown:
            raise ValueError(f"Vocabulary.from_config: unknown keys {sorted(unknown)}.")
        return cls(**config)

    def save(self, path):
        Path(path).write_text(json.dumps(self.get_config(), indent=1, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path):
        return cls.from_config(json.loads(Path(path).read_text(encoding="utf-8")))


def _as_texts(texts, argument):
    if isinstance(texts, str):
        return [texts]
    texts = list(texts)
    bad = [t for t in texts if not isinstance(t, str)]
    if bad:
        raise ValueError(
            f"`{argument}` must be a string or a list of strings; got {type(bad[0]).__name__} {bad[0]!r:.60}."
        )
    return texts


def _map_rows(nested, depth, function):
    """Apply `function` to the innermost lists of a `depth`-deep nest."""
    if depth <= 1:
        return function(nested)
    return [_map_rows(child, depth - 1, function) for child in nested]


def pad_sequences(rows, length=None, dtype="int32"):
    """`(B, T)` array of id lists, right-padded with 0 to the longest (or `length`)."""
    longest = max((len(row) for row in rows), default=0)
    if length is None:
        length = max(longest, 1)
    elif longest > length:
        raise ValueError(f"pad_sequences: a sequence has {longest} ids, more than `length` = {length}.")
    array = np.zeros((len(rows), length), dtype=dtype)
    for i, row in enumerate(rows):
        array[i, : len(row)] = row
    return array


def n_best(result, vocabulary, n=None):
    """Ranked hypotheses per example from a beam search result.

    `result` is the dict `beam_search` / `InferenceDecoder(method="beam")`
    returns (`ids (B, K, L)`, `scores (B, K)`, `lengths (B, K)`, optional
    `log_probs`); gives, per example, up to `n` (default K) dicts
    `{"tokens", "text", "score", "log_prob", "length"}`, best first. Filler
    beams (length 0) are left out.
    """
    ids = np.asarray(result["ids"])
    if ids.ndim != 3:
        raise ValueError(f"n_best: `result['ids']` must be beam output (batch, beam, length); got shape {ids.shape}.")
    beams = ids.shape[1]
    if n is None:
        n = beams
    n = _checks.check_int("n_best", "n", n, 1, meaning="a number of beams", maximum=beams)
    scores = np.asarray(result["scores"])
    lengths = np.asarray(result["lengths"])
    log_probs = np.asarray(result.get("log_probs", scores))
    joiner = "" if vocabulary.separator is None else vocabulary.separator
    examples = []
    for b in range(ids.shape[0]):
        order = np.argsort(-scores[b], kind="stable")
        hypotheses = []
        for k in order[:n]:
            if lengths[b, k] == 0:
                continue
            tokens = vocabulary.decode(ids[b, k])
            hypotheses.append(
                {
                    "tokens": tokens,
                    "text": joiner.join(tokens),
                    "score": float(scores[b, k]),
                    "log_prob": float(log_probs[b, k]),
                    "length": int(lengths[b, k]),
                }
            )
        examples.append(hypotheses)
    return examples
