"""`translate_ids`: a converted model run by `ctranslate2.Translator` on id arrays, answered as our decoders answer."""

import collections
import functools
import json
import os
import types
from pathlib import Path

import ctranslate2
import numpy as np

from keras_attention.export.ctranslate2.positions import (
    check_positions,
    default_decoding_length,
    position_limits,
    source_lengths,
)


def model_vocabulary(model_dir, side):
    """The tokens (a list) of the `side` ("source" or "target") of a model
    directory `export_ctranslate2` wrote: its side's file, or the shared one."""
    for name in (f"{side}_vocabulary.json", "shared_vocabulary.json"):
        path = Path(model_dir) / name
        if path.is_file():
            return json.loads(path.read_text(encoding="utf-8"))
    raise FileNotFoundError(f"translate_ids: {model_dir!s} has no {side} vocabulary; expected a model directory.")


# What translate_ids needs of a model directory, read once while its files are unchanged.
ModelFiles = collections.namedtuple("ModelFiles", "source_tokens target_tokens target_ids end_id limits")
_READ_FILES = ("config.json", "model.bin", "source_vocabulary.json", "target_vocabulary.json", "shared_vocabulary.json")


def read_model(model_dir):
    """The vocabularies, end id and position limits of a model directory
    (`ModelFiles`), read again only when one of its files changed: a server
    answering one request at a time reads them once, not per request."""
    model_dir = os.path.abspath(model_dir)
    identity = []
    for name in _READ_FILES:
        try:
            status = os.stat(os.path.join(model_dir, name))
            identity.append((name, status.st_ino, status.st_size, status.st_mtime_ns))
        except FileNotFoundError:
            continue
    return _read_model(model_dir, tuple(identity))


@functools.lru_cache(maxsize=8)
def _read_model(model_dir, identity):
    source_tokens, target_tokens = model_vocabulary(model_dir, "source"), model_vocabulary(model_dir, "target")
    target_ids = {token: index for index, token in enumerate(target_tokens)}
    end_id = target_ids[model_config(model_dir)["eos_token"]]
    # Read-only views: the record is shared by every caller.
    limits = types.MappingProxyType(position_limits(model_dir))
    return ModelFiles(tuple(source_tokens), tuple(target_tokens), types.MappingProxyType(target_ids), end_id, limits)


def translate_ids(model_dir, source_ids, pad_id=0, translator=None, **options):
    """Run a model `export_ctranslate2` wrote on source ids: ids, lengths and scores as our decoders give them.

    Each source row is cut at its first `pad_id` (our padding); the target
    ids are padded with the end id. `options` are
    `ctranslate2.Translator.translate_batch`'s (`beam_size`,
    `length_penalty`, `num_hypotheses`, `max_decoding_length`,
    `min_decoding_length`, ...). Give `translator` to reuse a loaded one.

    The position tables bound the request (`position_limits`): a source row
    longer than the source table, or a `max_decoding_length` beyond the
    target table, is refused with a `ValueError` before CTranslate2 runs
    (CTranslate2 itself fails mid-call, and only on the rows that reach the
    end of the table). `max_decoding_length` defaults to CTranslate2's 256,
    or the target table's rows when fewer; `max_input_length` to 0, so
    that CTranslate2 never cuts a source (its default cuts at 1024 tokens
    without a word).

    Returns:
        `{"ids": (B, [n,] L) int32, "lengths": (B, [n]) with the end token
        counted when it was produced, "scores": (B, [n]) CTranslate2's
        scores}`: the beam axis `n` when `num_hypotheses` is given.
    """
    source_tokens, _, target_ids, end_id, limits = read_model(model_dir)
    source_ids = np.asarray(source_ids)
    if source_ids.ndim != 2:
        raise ValueError(
            f"translate_ids: `source_ids` has shape {list(source_ids.shape)}; expected (batch, positions) ids."
        )
    outside = source_ids[(source_ids < 0) | (source_ids >= len(source_tokens))]
    if outside.size:
        raise ValueError(
            f"translate_ids: `source_ids` holds {outside.flat[0]}, outside the source vocabulary's "
            f"{len(source_tokens)} ids; expected ids of the vocabulary the model was converted with."
        )
    options = {"max_decoding_length": default_decoding_length(limits), "max_input_length": 0, **options}
    lengths = source_lengths(source_ids, pad_id)
    if options["max_input_length"] > 0:  # the caller asked CTranslate2 to cut the rows there
        lengths = np.minimum(lengths, options["max_input_length"])
    names = ("`source_ids`", "`max_decoding_length`")
    check_positions(limits, lengths, options["max_decoding_length"], "translate_ids", names)
    rows = []
    for row in source_ids.tolist():
        rows.append([source_tokens[i] for i in (row[: row.index(pad_id)] if pad_id in row else row)])
    translator = translator or ctranslate2.Translator(str(model_dir), device="cpu")
    results = translator.translate_batch(rows, return_scores=True, **options)
    hypotheses = [[[target_ids[token] for token in tokens] for tokens in result.hypotheses] for result in results]
    max_length = options["max_decoding_length"]
    width = max([max_length] + [len(tokens) for row in hypotheses for tokens in row])
    beams = max(len(row) for row in hypotheses)
    ids = np.full((len(rows), beams, width), end_id, "int32")
    lengths = np.zeros((len(rows), beams), "int32")
    scores = np.full((len(rows), beams), -np.inf, "float32")
    for b, (row, result) in enumerate(zip(hypotheses, results)):
        scores[b, : len(row)] = result.scores
        for k, tokens in enumerate(row):
            ids[b, k, : len(tokens)] = tokens
            # CTranslate2 drops the end token; one cut at the limit never produced it, and ours count it when produced.
            lengths[b, k] = len(tokens) + (len(tokens) < max_length)
    if options.get("num_hypotheses") is None:
        ids, lengths, scores = ids[:, 0], lengths[:, 0], scores[:, 0]
    return {"ids": ids, "lengths": lengths, "scores": scores}


def model_config(model_dir):
    """The model directory's `config.json` as a dict."""
    return json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
