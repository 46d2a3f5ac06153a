"""Parity of a converted model: CTranslate2's log-probabilities of given target tokens against the Keras layers'.

A search compares the model only where the searches agree; teacher-forced
scoring compares it everywhere. `verify_conversion` draws seeded source rows
(or takes the caller's) and target rows of random lengths, computes
`log p(y_t | y_<t, x)` for every target token and the end token with the
Keras layers `export_ctranslate2` was given (the same composition it
converts: source embedding, source positions, encoder stack; the decoder's
embedding, positions, stack and read-out), has `ctranslate2.Translator.
score_batch` score the same tokens from the written directory, and raises
`ExportError` when a log-probability differs by more than `atol`. A layer the
converter read wrongly (an embedding scaled in its `call`, a norm, a fused
projection) shows there, before the directory is put in place.
"""

import ctranslate2
import keras
import numpy as np

from keras_attention.export.report import ExportError

DEFAULT_ATOL = 1e-4
SAMPLE_ROWS = 8
_LONGEST_SAMPLE = 12  # tokens of a drawn source or target row, within the position tables


def sample_sources(source_size, rows=SAMPLE_ROWS, longest=_LONGEST_SAMPLE, seed=0):
    """`(rows, longest)` int32 source ids, padded with 0: row `i` holds
    `1 + i % longest` ids drawn from `1..source_size - 1` (every id but the padding)."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((rows, longest), "int32")
    for row in range(rows):
        length = 1 + row % longest
        ids[row, :length] = rng.integers(1, source_size, length)
    return ids


def _targets(rows, target_size, special, longest, seed):
    """Target rows (lists of ids) of 1..longest ids, none of them `special` (padding, start and end)."""
    rng = np.random.default_rng(seed + 1)
    allowed = np.array([i for i in range(target_size) if i not in special])
    return [list(rng.choice(allowed, int(rng.integers(1, longest + 1)))) for _ in range(rows)]


def keras_log_probs(layers, source_ids, targets):
    """`log p` of each target token then the end token, teacher-forced
    through the Keras layers: a list of float64 arrays, one per row."""
    decoder = layers["decoder"]
    source_ids = np.asarray(source_ids, "int32")
    mask = source_ids != 0
    embedded = layers["source_embedding"](source_ids)
    if layers["source_position"] is not None:
        embedded = layers["source_position"](embedded)
    memory = layers["encoder"](embedded, mask=mask, training=False)
    width = max(len(row) for row in targets) + 1
    tokens = np.full((len(targets), width), decoder.end_token, "int32")
    for row, ids in enumerate(targets):
        tokens[row, : len(ids)] = ids
    previous = np.concatenate([np.full((len(targets), 1), decoder.start_token, "int32"), tokens[:, :-1]], axis=1)
    hidden = decoder.embedding(previous)
    if decoder.position is not None:
        hidden = decoder.position(hidden)
    hidden = decoder.stack(hidden, memory, memory_mask=mask, training=False)
    logits = keras.ops.convert_to_numpy(decoder.output_layer(hidden)).astype("float64")
    top = logits.max(-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    chosen = np.take_along_axis(log_probs, tokens[..., None].astype("int64"), -1)[..., 0]
    return [chosen[row, : len(ids) + 1] for row, ids in enumerate(targets)]


def ctranslate2_log_probs(model_dir, source_tokens, target_tokens, source_ids, targets):
    """The same log-probabilities from the model directory, by `score_batch`
    (which starts each row with the decoder's start token and ends it with
    the end token, and scores that too)."""
    translator = ctranslate2.Translator(str(model_dir), device="cpu", compute_type="float32")
    sources = [[source_tokens[i] for i in row if i != 0] for row in np.asarray(source_ids).tolist()]
    results = translator.score_batch(sources, [[target_tokens[i] for i in row] for row in targets])
    return [np.asarray(result.log_probs, "float64") for result in results]


def verify_conversion(model_dir, layers, source_tokens, target_tokens, limits, source_ids=None, atol=DEFAULT_ATOL):
    """Raise `ExportError` unless CTranslate2 scores every sampled target
    token within `atol` of Keras; return `{"rows", "tokens",
    "max_abs_log_prob_diff"}`. `layers` are the converter's: {"decoder",
    "encoder", "source_embedding", "source_position"}; `limits` the position
    tables' rows, {"source", "target"}, which bound the drawn rows;
    `source_ids` an `(N, S)` int array padded with 0 (default:
    `sample_sources`)."""
    decoder = layers["decoder"]
    if source_ids is None:
        source_ids = sample_sources(len(source_tokens), longest=min(_LONGEST_SAMPLE, limits["source"]))
    source_ids = np.asarray(source_ids)
    special = {0, decoder.start_token, decoder.end_token}
    # A target of n tokens is n + 1 decoding steps (the end token's too).
    longest = max(1, min(_LONGEST_SAMPLE, limits["target"] - 1))
    targets = _targets(len(source_ids), len(target_tokens), special, longest, seed=0)
    want = keras_log_probs(layers, source_ids, targets)
    got = ctranslate2_log_probs(model_dir, source_tokens, target_tokens, source_ids, targets)
    worst, where = 0.0, None
    for row, (ours, theirs) in enumerate(zip(want, got)):
        if ours.shape != theirs.shape:
            raise ExportError(
                f"export_ctranslate2: CTranslate2 scored {theirs.size} tokens of sample row {row} where Keras "
                f"scored {ours.size} (its target and the end token); nothing was written."
            )
        difference = float(np.abs(ours - theirs).max())
        if not difference <= worst:  # NaN is the worst
            worst, where = difference, row
    if not worst <= atol:
        raise ExportError(
            f"export_ctranslate2: the converted model's log-probabilities differ from the Keras layers' by "
            f"{worst:.3g} (sample row {where}), over `atol` {atol}: a layer was not read as Keras computes it. "
            "Nothing was written; report the model's layers, or pass verify=False to write it anyway."
        )
    return {"rows": len(source_ids), "tokens": int(sum(len(row) for row in want)), "max_abs_log_prob_diff": worst}
