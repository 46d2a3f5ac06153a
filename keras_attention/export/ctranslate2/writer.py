"""`export_ctranslate2`: every check first, then the model directory written
beside itself, verified against Keras and renamed into place."""

import json
import os
import shutil
import tempfile
from pathlib import Path

from keras_attention.export.ctranslate2.converter import (
    DEFAULT_MAX_POSITIONS,
    OWNER,
    QUANTIZATIONS,
    KerasTransformerConverter,
    _refuse,
)
from keras_attention.export.ctranslate2.verification import DEFAULT_ATOL, verify_conversion

_MODEL_FILES = ("model.bin", "config.json")
# config.json's record of the verification (CTranslate2 keeps keys it does not know).
PARITY_KEY = "keras_attention_parity"


def _check_directory(directory, overwrite):
    where = f"{OWNER}: `output_dir` {str(directory)!r}"
    if directory.exists() and not directory.is_dir():
        raise FileExistsError(f"{where} is a file; expected a new or existing model directory.")
    if directory.is_dir() and any(directory.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{where} exists and is not empty; pass overwrite=True to replace it.")
        if not all((directory / name).is_file() for name in _MODEL_FILES):
            # Replacing deletes the old directory: only ever a previous CTranslate2 model.
            raise FileExistsError(
                f"{where} is not a CTranslate2 model directory (no model.bin and config.json); refusing to "
                "replace it even with overwrite=True: remove it yourself or choose another path."
            )


def export_ctranslate2(
    output_dir,
    decoder,
    encoder,
    source_embedding,
    source_vocabulary,
    target_vocabulary,
    source_position=None,
    quantization=None,
    max_positions=DEFAULT_MAX_POSITIONS,
    overwrite=False,
    verify=True,
    sample_source_ids=None,
    atol=DEFAULT_ATOL,
):
    """Write the Transformer as a CTranslate2 model directory (`ctranslate2.Translator` loads it).

    The model is the one `TransformerInferenceDecoder`'s docstring composes:
    `memory = encoder(source_position(source_embedding(source_ids)))`, then
    the decoder's stack, embedding, position layer and read-out. Everything
    is checked before anything is written; the directory is written beside
    `output_dir` and renamed into place, so no half-written model is ever
    there, and `overwrite=True` replaces only a previous CTranslate2 model.

    Args:
        output_dir: the model directory to write.
        decoder: the built `TransformerInferenceDecoder` (its start and end
            tokens become CTranslate2's `decoder_start_token` and
            `eos_token`; its search options do not travel: CTranslate2 takes
            them per call, see the module's docstring).
        encoder: the `TransformerEncoderStack`.
        source_embedding: the source `keras.layers.Embedding`.
        source_vocabulary: token strings in id order (a list, or a
            `keras_attention.text.Vocabulary`), one per embedding row. Its
            `unknown_token` (else "<unk>" when listed, else its first token,
            the padding) is what CTranslate2 reads unlisted source tokens as.
        target_vocabulary: the target's, likewise (the read-out's ids).
        source_position: the layer adding the source positions, or None.
        quantization: None (float32), "int8" or "int8_float32" (CTranslate2's
            weight quantization).
        max_positions: how many positions the sinusoidal tables hold (a
            learned table keeps its `max_length`; without a position layer,
            a table of zeros of this size): the longest source and the most
            decoding steps CTranslate2 will run. Both tables' rows are
            recorded in `config.json` (`position_limits` reads them) and
            `translate_ids` and the serve command refuse a longer source or
            a larger `max_decoding_length`: convert with a larger
            `max_positions` to serve longer ones.
        overwrite: replace an existing CTranslate2 model directory.
        verify: score target tokens with the written model and with the Keras
            layers (`verification.verify_conversion`: teacher-forced, every
            token's log-probability) and refuse the export, writing nothing,
            when one differs by more than `atol`. The float32 conversion is
            the one compared (a quantized one is written from the same
            spec after it passed: its rounding is by design); the result is
            recorded in `config.json` under `keras_attention_parity`.
        sample_source_ids: `(N, S)` source ids padded with 0 to verify on
            (default: 8 seeded rows of 1 to 8 random ids, within the
            source table).
        atol: the largest log-probability difference accepted.

    Returns:
        The model directory, a `pathlib.Path`.
    """
    if quantization not in QUANTIZATIONS:
        _refuse("quantization", f"is {quantization!r}", f"expected one of {QUANTIZATIONS}")
    directory = Path(output_dir)
    _check_directory(directory, overwrite)
    converter = KerasTransformerConverter(
        decoder,
        encoder,
        source_embedding,
        source_vocabulary,
        target_vocabulary,
        source_position=source_position,
        max_positions=max_positions,
    )
    directory.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{directory.name}.new-", dir=directory.parent))
    old = None
    try:
        converter.convert(str(staging), force=True)
        if verify:
            layers = {
                "decoder": decoder,
                "encoder": encoder,
                "source_embedding": source_embedding,
                "source_position": source_position,
            }
            tokens = converter.source_tokens, converter.target_tokens
            limits = {"source": len(converter.source_positions), "target": len(converter.target_positions)}
            parity = verify_conversion(staging, layers, *tokens, limits, source_ids=sample_source_ids, atol=atol)
        if quantization is not None:
            converter.convert(str(staging), quantization=quantization, force=True)
        if verify:
            _record(staging / "config.json", {**parity, "atol": atol, "compared": "float32"})
        _check_directory(directory, overwrite)  # again: something may have appeared meanwhile
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{directory.name}.old-", dir=directory.parent))
            os.rmdir(old)
            os.rename(directory, old)
        os.rename(staging, directory)
    except BaseException:
        if old is not None and not directory.exists():
            os.rename(old, directory)
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return directory


def _record(config_path, parity):
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config[PARITY_KEY] = parity
    config_path.write_text(json.dumps(config, indent=4), encoding="utf-8")
