"""Vocabularies: the forms `export_model` accepts, the `vocabulary.json`
it writes, and strings to ids and back as the exported models are fed."""

import json
from collections.abc import Mapping
from pathlib import Path

from keras_attention.export.layout import VOCABULARY_FILE
from keras_attention.text import Vocabulary


def _side(vocabulary, side, argument):
    """One side of a vocabulary mapping as a `Vocabulary`."""
    value = vocabulary[side]
    if isinstance(value, Vocabulary):
        return value
    if isinstance(value, Mapping):
        try:
            return Vocabulary.from_config(dict(value))
        except (TypeError, ValueError) as error:
            raise ValueError(f"`{argument}['{side}']`: {error}") from None
    # The list form: {"source": [tokens], "target": [tokens], "lowercase",
    # "unknown_token", "start_token"/"end_token" or "start"/"end" (ids)}.
    if not isinstance(value, list) or len(value) < 2 or not all(isinstance(t, str) for t in value):
        raise ValueError(
            f"`{argument}['{side}']` must be a list of at least 2 strings (index 0 is padding); got {value!r:.80}."
        )
    if len(set(value)) != len(value):
        raise ValueError(f"`{argument}['{side}']` has duplicate tokens.")
    specials = {}
    if side == "source":
        unknown = vocabulary.get("unknown_token")
        if unknown is None and "<unk>" in value:
            unknown = "<unk>"
        specials["unknown_token"] = unknown
    else:
        for name in ("start", "end"):
            token, token_id = vocabulary.get(f"{name}_token"), vocabulary.get(name)
            if token is None and token_id is not None:
                if isinstance(token_id, bool) or not isinstance(token_id, int) or not 0 <= token_id < len(value):
                    raise ValueError(
                        f"`{argument}['{name}']` must be a target id from 0 to {len(value) - 1}; got {token_id!r}."
                    )
                token = value[token_id]
            specials[f"{name}_token"] = token
    for name, token in specials.items():
        if token is not None and token not in value:
            raise ValueError(f"`{argument}['{name}']` = {token!r} is not in the {side} tokens.")
    lowercase = vocabulary.get("lowercase", False)
    if not isinstance(lowercase, bool):
        raise ValueError(f"`{argument}['lowercase']` must be true or false; got {lowercase!r}.")
    # Characters unless some token is longer (then the text is space-separated).
    long = any(len(t) > 1 for t in value if t not in specials.values() and t != value[0])
    return Vocabulary(value, separator=" " if long else None, pad_token=value[0], lowercase=lowercase, **specials)


def _check_vocabulary(vocabulary, argument):
    """{"source": Vocabulary, "target": Vocabulary} from any accepted form."""
    if not isinstance(vocabulary, Mapping) or "source" not in vocabulary:
        raise ValueError(
            f"`{argument}` must be a dict with a 'source' vocabulary (and optionally 'target'); got {type(vocabulary).__name__}."
        )
    source = _side(vocabulary, "source", argument)
    target = _side(vocabulary, "target", argument) if vocabulary.get("target") is not None else source
    return {"source": source, "target": target}


def vocabulary_json(vocabulary):
    """The text of `vocabulary.json` for a checked vocabulary: each side's `Vocabulary` config."""
    return (
        json.dumps({side: vocabulary[side].get_config() for side in ("source", "target")}, indent=1, ensure_ascii=False)
        + "\n"
    )


def load_vocabulary(path):
    """Read a vocabulary JSON file (or `vocabulary.json` in a directory).

    Format: {"source": VOCABULARY, "target": VOCABULARY}, each a
    `keras_attention.text.Vocabulary` config (tokens in id order, separator,
    special tokens, lower-casing); "target" defaults to "source". The older
    list form is read too: {"source": [tokens], "target": [tokens]} with id 0
    padding and optional "unknown_token", "start_token"/"end_token" (or
    "start"/"end" ids) and "lowercase". Returns {"source": Vocabulary,
    "target": Vocabulary}.
    """
    path = Path(path)
    if path.is_dir():
        path = path / VOCABULARY_FILE
    if not path.is_file():
        raise FileNotFoundError(f"vocabulary: no such file {str(path)!r}.")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as error:
        raise ValueError(f"vocabulary: {str(path)!r} is not valid JSON: {error}") from error
    return _check_vocabulary(data, str(path))


def encode_strings(texts, vocabulary, dtype="int32"):
    """Source ids `(B, T)` of `texts`, right-padded with 0, as the exported
    model is fed: `vocabulary["source"].encode(texts)`.

    Example: with source tokens `["<pad>", "a", "b"]`, `encode_strings(["ab", "b"], vocabulary)`
    is `[[1, 2], [2, 0]]`.
    """
    return _check_vocabulary(vocabulary, "vocabulary")["source"].encode(texts, dtype=dtype)


def decode_ids(ids, vocabulary):
    """Target ids `(..., L)` to strings `(...)`: stop at the end token, skip
    padding and the start token, join tokens with the target's separator."""
    return _check_vocabulary(vocabulary, "vocabulary")["target"].detokenize(ids)


def _is_text(value):
    return isinstance(value, str) or (
        isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value)
    )
