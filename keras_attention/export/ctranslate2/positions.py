"""The position limits of a CTranslate2 model directory: the longest source and the most decoding steps it takes.

CTranslate2 looks each position up in the model's tables: a source longer
than the source table, or a decode that reaches the end of the target table,
raises a `RuntimeError` mid-call (measured with 4.8.5: "No position
encodings are defined for positions >= P"), the latter only on the rows that
run that long. And `translate_batch` cuts every source at
`max_input_length` (1024 by default) without saying so. So the runners
check the request against the tables first and never let CTranslate2 cut.

`export_ctranslate2` records the tables' sizes in `config.json`, under
`RECORD_KEY` (CTranslate2 keeps extra keys there and loads the model as
before). A directory written without the record has them read from
`model.bin`'s header; where that cannot be read (another binary version),
the default `max_positions` is assumed.
"""

import json
import struct
from pathlib import Path

import numpy as np

from keras_attention.export.ctranslate2.converter import DEFAULT_MAX_POSITIONS, RECORD_KEY

CTRANSLATE2_MAX_DECODING_LENGTH = 256  # translate_batch's default
_TABLES = {"source": "encoder/position_encodings/encodings", "target": "decoder/position_encodings/encodings"}
_BINARY_VERSION = 6  # of model.bin, as CTranslate2 4.x writes it
WAY_OUT = (
    "convert the model with a larger `max_positions=` (export_ctranslate2; a LearnedPositionEmbedding's "
    "table keeps its own `max_length`)"
)


def position_limits(model_dir):
    """`{"source": rows, "target": rows}`: the longest source (in tokens) and
    the most decoding steps the model directory's position tables hold."""
    config = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    if RECORD_KEY not in config:
        return _table_rows(Path(model_dir) / "model.bin") or dict.fromkeys(_TABLES, DEFAULT_MAX_POSITIONS)
    record = config[RECORD_KEY]
    if not (
        isinstance(record, dict)
        and set(record) == set(_TABLES)
        and all(isinstance(rows, int) and not isinstance(rows, bool) and rows > 0 for rows in record.values())
    ):
        raise ValueError(
            f"{str(Path(model_dir) / 'config.json')!r}: `{RECORD_KEY}` is {record!r:.80}; expected "
            '{"source": rows, "target": rows} (positive integers) as export_ctranslate2 writes it.'
        )
    return dict(record)


def _table_rows(path):
    """The rows of the two position tables, read from `model.bin`'s variable
    headers (their data skipped); None when the file is not laid out as expected."""
    try:
        with open(path, "rb") as model:

            def number(code):
                return struct.unpack(code, model.read(struct.calcsize(code)))[0]

            def string():
                return model.read(number("H"))[:-1].decode("utf-8")

            if number("I") != _BINARY_VERSION:
                return None
            string(), number("I")  # the spec's name and revision
            shapes = {}
            for _ in range(number("I")):
                name = string()
                shapes[name] = [number("I") for _ in range(number("B"))]
                number("B")  # the dtype
                model.seek(number("I"), 1)
            # Equal tables are stored once: the other side is an alias of it.
            aliases = {string(): string() for _ in range(number("I"))}
    except (OSError, struct.error, UnicodeDecodeError):
        return None
    rows = {side: shapes.get(aliases.get(name, name)) for side, name in _TABLES.items()}
    if not all(shape and len(shape) == 2 for shape in rows.values()):
        return None
    return {side: int(shape[0]) for side, shape in rows.items()}


def source_lengths(source_ids, pad_id=0):
    """Each row's tokens before its first `pad_id` (what the runners send)."""
    padding = np.asarray(source_ids) == pad_id
    return np.where(padding.any(1), padding.argmax(1), padding.shape[1])


def default_decoding_length(limits):
    """CTranslate2's default `max_decoding_length`, or the target table's rows when fewer."""
    return min(CTRANSLATE2_MAX_DECODING_LENGTH, limits["target"])


def check_positions(limits, lengths, max_decoding_length, owner, names, error=ValueError):
    """Refuse, raising `error`, source rows of more `lengths` than the source
    table holds and a `max_decoding_length` beyond the target table.

    `owner` starts the message; `names` are how the caller's source and
    decoding length are named (`("`source_ids`", "`max_decoding_length`")`).
    """
    source_name, length_name = names
    beyond = np.flatnonzero(np.asarray(lengths) > limits["source"])
    if beyond.size:
        row, limit = int(beyond[0]), limits["source"]
        raise error(
            f"{owner}: {source_name} row {row} has {int(lengths[row])} tokens, beyond the model's {limit} source "
            f"positions; expected at most {limit} tokens a row (before the padding): {WAY_OUT}."
        )
    if max_decoding_length > limits["target"]:
        limit = limits["target"]
        raise error(
            f"{owner}: {length_name} is {max_decoding_length}, beyond the model's {limit} target positions; "
            f"expected at most {limit}: {WAY_OUT}."
        )
