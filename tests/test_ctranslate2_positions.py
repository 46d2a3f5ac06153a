"""CTranslate2's position tables bound a request: the limits `export_ctranslate2`
records, and `translate_ids` refusing what lies beyond them before CTranslate2 runs.

Measured with CTranslate2 4.8.5 (asserted below where it is what we guard
against): a source longer than the source table, or a decode reaching the
end of the target table, raises `RuntimeError` ("No position encodings are
defined for positions >= P") mid-call, the latter only on the rows that run
that long; `translate_batch` cuts a source at `max_input_length` (1024 by
default) and answers for the first 1024 tokens without a word.
"""

import json
import shutil

import numpy as np
import pytest
from keras import ops

# Imported through the package, which imports CTranslate2 first with its
# int8-safe CPU backend (keras_attention/export/ctranslate2/library.py).
pytest.importorskip(
    "keras_attention.export.ctranslate2",
    reason="CTranslate2 is not installed: pip install 'keras-attention-decoders[ctranslate2]'",
)
import ctranslate2  # noqa: E402

import keras_attention as ka  # noqa: E402
from keras_attention.export.ctranslate2 import (  # noqa: E402
    DEFAULT_MAX_POSITIONS,
    export_ctranslate2,
    position_limits,
    runner,
    translate_ids,
)
from keras_attention.export.ctranslate2.positions import RECORD_KEY, _table_rows  # noqa: E402
from keras_attention.export.ctranslate2.runner import read_model  # noqa: E402
from tests.test_ctranslate2 import END, SOURCE_TOKENS, START, TARGET_TOKENS, Seq2Seq, V  # noqa: E402

GREEDY = {"beam_size": 1, "length_penalty": 0, "min_decoding_length": 0}  # our greedy search's settings
WAY_OUT = "convert the model with a larger `max_positions=` (export_ctranslate2; a LearnedPositionEmbedding's"


@pytest.fixture(scope="module")
def model():
    return Seq2Seq()  # pre-norm, sinusoidal positions


def _keras_greedy(model, source, max_length):
    decoder = ka.TransformerInferenceDecoder(
        model.stack, model.target_embedding, model.readout, START, END, max_length, position=model.target_position
    )
    result = decoder(model.encode(source), memory_mask=source != 0)
    return {key: ops.convert_to_numpy(result[key]) for key in ("ids", "lengths", "scores")}


def _assert_same(theirs, ours):
    np.testing.assert_array_equal(theirs["ids"], ours["ids"])
    np.testing.assert_array_equal(theirs["lengths"], ours["lengths"])
    np.testing.assert_allclose(theirs["scores"], ours["scores"], atol=1e-4)


class _Unused:
    """A translator that fails the test if CTranslate2 is asked anything."""

    def translate_batch(self, *args, **kwargs):
        raise AssertionError("CTranslate2 ran a request that should have been refused")


def test_the_recorded_limits_are_the_tables_sizes(model, tmp_path):
    sinusoidal = model.export(tmp_path / "sinusoidal", max_positions=8)
    config = json.loads((sinusoidal / "config.json").read_text())
    assert config[RECORD_KEY] == {"source": 8, "target": 8}
    # The tables CTranslate2 holds (equal tables stored once, the other side an alias).
    assert _table_rows(sinusoidal / "model.bin") == {"source": 8, "target": 8}
    assert position_limits(sinusoidal) == {"source": 8, "target": 8}
    # A learned table keeps its own size, whatever `max_positions` says.
    learned = Seq2Seq(position="learned", calibrate=False)
    assert learned.source_position.max_length == learned.target_position.max_length == 16
    directory = learned.export(tmp_path / "learned", max_positions=8)
    assert position_limits(directory) == _table_rows(directory / "model.bin") == {"source": 16, "target": 16}
    # No source position layer: a table of zeros of `max_positions` rows, beside the learned target's 16.
    mixed = export_ctranslate2(
        tmp_path / "mixed",
        learned.decoder(),
        learned.encoder,
        learned.source_embedding,
        SOURCE_TOKENS,
        TARGET_TOKENS,
        max_positions=12,
    )
    assert position_limits(mixed) == _table_rows(mixed / "model.bin") == {"source": 12, "target": 16}


def test_a_request_at_the_limit_is_served_and_one_beyond_refused(model, tmp_path):
    directory = model.export(tmp_path / "model", max_positions=8)
    translator = ctranslate2.Translator(str(directory), device="cpu")
    source = model.source[:60]
    assert (source != 0).sum(1).max() == 8  # rows as long as the source table
    ours = _keras_greedy(model, source, 8)
    assert not (ours["ids"] == END).any(1).all()  # rows that use every target position
    _assert_same(translate_ids(directory, source, translator=translator, max_decoding_length=8, **GREEDY), ours)
    # Without max_decoding_length: the table's 8 rows, not CTranslate2's 256 ...
    _assert_same(translate_ids(directory, source, translator=translator, **GREEDY), ours)
    # ... with which CTranslate2 fails mid-call on the rows that run past the table.
    rows = [[SOURCE_TOKENS[i] for i in row if i] for row in source]
    with pytest.raises(RuntimeError, match="No position encodings are defined for positions >= 8"):
        translator.translate_batch(rows, **GREEDY)
    # Padding beyond the limit is no token.
    padded = np.pad(source, ((0, 0), (0, 4)))
    _assert_same(translate_ids(directory, padded, translator=translator, max_decoding_length=8, **GREEDY), ours)
    # Beyond the limit: refused before CTranslate2 is asked.
    longer = np.concatenate([source, np.full((len(source), 1), 3)], 1)
    first = int(np.flatnonzero((source != 0).all(1))[0])  # the first row of 8 tokens, now 9
    with pytest.raises(ValueError) as error:
        translate_ids(directory, longer, translator=_Unused(), **GREEDY)
    assert str(error.value).startswith(
        f"translate_ids: `source_ids` row {first} has 9 tokens, beyond the model's 8 source positions; expected at "
        f"most 8 tokens a row (before the padding): {WAY_OUT}"
    )
    with pytest.raises(ValueError) as error:
        translate_ids(directory, source, translator=_Unused(), max_decoding_length=9, **GREEDY)
    assert str(error.value).startswith(
        f"translate_ids: `max_decoding_length` is 9, beyond the model's 8 target positions; expected at most 8: "
        f"{WAY_OUT}"
    )
    with pytest.raises(ValueError, match=r"`source_ids` has shape \[8\]; expected \(batch, positions\) ids"):
        translate_ids(directory, source[0], translator=_Unused())


def test_a_source_longer_than_1024_tokens_is_not_cut(model, tmp_path):
    """CTranslate2 cuts sources at `max_input_length` (1024) by default: translate_ids asks it not to."""
    rng = np.random.default_rng(5)
    source = rng.integers(2, V, (1, 1100))
    source[0, 1024:] = 7  # a tail that changes the translation
    directory = model.export(tmp_path / "long", max_positions=2048)
    assert position_limits(directory)["source"] == 2048
    ours = _keras_greedy(model, source, 10)
    _assert_same(translate_ids(directory, source, max_decoding_length=10, **GREEDY), ours)
    translator = ctranslate2.Translator(str(directory), device="cpu")
    tokens = [SOURCE_TOKENS[i] for i in source[0]]
    cut, first = (
        translator.translate_batch([row], max_decoding_length=10, return_scores=True, **GREEDY)[0]
        for row in (tokens, tokens[:1024])
    )
    assert (cut.hypotheses, cut.scores) == (first.hypotheses, first.scores)  # CTranslate2's default: cut
    assert abs(cut.scores[0] - ours["scores"][0]) > 1e-3  # not the Keras model's answer
    # Asked for, the cut is the caller's: translate_ids passes it on.
    asked = translate_ids(directory, source, max_input_length=1024, max_decoding_length=10, **GREEDY)
    np.testing.assert_allclose(asked["scores"], first.scores, atol=1e-6)
    # The default table (1024 rows) refuses the 1100 tokens.
    default = model.export(tmp_path / "default")
    assert position_limits(default) == {"source": DEFAULT_MAX_POSITIONS, "target": DEFAULT_MAX_POSITIONS}
    with pytest.raises(ValueError, match="`source_ids` row 0 has 1100 tokens, beyond the model's 1024 source"):
        translate_ids(default, source, translator=_Unused(), **GREEDY)


def test_a_directory_written_without_the_record(model, tmp_path):
    """A directory written before the record: the limits read from `model.bin`, else the default."""
    directory = model.export(tmp_path / "model", max_positions=8)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    del config[RECORD_KEY]
    config_path.write_text(json.dumps(config))
    assert position_limits(directory) == {"source": 8, "target": 8}
    source = model.source[:20]
    _assert_same(translate_ids(directory, source, max_decoding_length=8, **GREEDY), _keras_greedy(model, source, 8))
    with pytest.raises(ValueError, match="`max_decoding_length` is 9, beyond the model's 8 target positions"):
        translate_ids(directory, source, translator=_Unused(), max_decoding_length=9)
    # A model.bin not laid out as CTranslate2 4.x writes it: the default is assumed.
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(config_path, other / "config.json")
    for header in ((7).to_bytes(4, "little") + b"\x00" * 64, (directory / "model.bin").read_bytes()[:300]):
        (other / "model.bin").write_bytes(header)
        assert position_limits(other) == {"source": DEFAULT_MAX_POSITIONS, "target": DEFAULT_MAX_POSITIONS}
    # A record that is not ours as written: named, not guessed around.
    config[RECORD_KEY] = {"source": 0, "target": 8}
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"`keras_attention_positions` is \{'source': 0, 'target': 8\}; expected"):
        position_limits(directory)


def test_a_directory_is_read_once_while_unchanged(model, tmp_path, monkeypatch):
    """`read_model` answers from memory until one of the directory's files changes."""
    directory = model.export(tmp_path / "model", max_positions=8)
    first = read_model(directory)
    assert first.limits == {"source": 8, "target": 8} and first.end_id == END
    reads = []
    monkeypatch.setattr(runner, "model_config", lambda path: reads.append(path) or {})
    assert read_model(directory) is first
    translate_ids(directory, model.source[:4], max_decoding_length=8, **GREEDY)
    assert reads == []  # neither call read a file
    monkeypatch.undo()
    # Written again (a smaller record): read again, and the request is held to it.
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text())
    config[RECORD_KEY] = {"source": 6, "target": 6}
    config_path.write_text(json.dumps(config))
    assert read_model(directory).limits == {"source": 6, "target": 6}
    with pytest.raises(ValueError, match="`source_ids` row 2 has 7 tokens, beyond the model's 6 source positions"):
        translate_ids(directory, model.source[:4], translator=_Unused(), max_decoding_length=6)
    with pytest.raises(ValueError, match="`max_decoding_length` is 8, beyond the model's 6 target positions"):
        translate_ids(directory, model.source[:4, :6], translator=_Unused(), max_decoding_length=8)
    with pytest.raises(TypeError):  # the record is shared by every caller: read-only
        read_model(directory).limits["source"] = 9
