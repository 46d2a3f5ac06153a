"""The parity report: `ExportError`, `ParityRow` and `ExportReport`."""

import dataclasses
import json
from pathlib import Path

import numpy as np

from keras_attention.export.layout import DEFAULT_SIGNATURE


class ExportError(ValueError):
    """An export that did not convert or did not match Keras.

    `report` holds the partial `ExportReport` (parity rows measured so far)
    when there is one; nothing was left on disk.
    """

    def __init__(self, message, report=None):
        super().__init__(message)
        self.report = report


@dataclasses.dataclass
class ParityRow:
    """One output of one signature in one format, compared with Keras."""

    signature: str
    format: str
    output: str
    dtype: str  # the Keras dtype, or "keras->exported" when the artifact's differs (a failure)
    max_abs_diff: float  # over every verification batch; inf for a shape or NaN mismatch
    exact: bool  # integer and boolean outputs must be equal, not close
    tolerance: float
    ok: bool


@dataclasses.dataclass
class ExportReport:
    """What `export_model` wrote and how closely each artifact matches Keras.

    `paths`: {"saved_model": dir, "onnx": {signature: file}, "report": file,
    "vocabulary": file (when given)}; `signatures`: {name: {"inputs": {name:
    {"shape", "dtype"}}, "outputs": {...}}}; `parity`: one `ParityRow` per
    signature, format and output; `batches`: the input shapes verified;
    `timings_s`: seconds per stage; `notes`: silent changes such as the float32
    copy of a mixed-precision model; `quantized` (with `quantize="int8"`):
    {signature: {"precision", "path", "bytes", "float32_bytes",
    "int8_products", "float32_products_in_loops" (what int8 covers: its
    quantized products, and the float32 ones left in a decode loop), "outputs":
    {output: {"max_abs_diff"} for floats, {"rows_identical"} (the share of
    examples whose output is identical to Keras's) for integers}}}; the LiteRT
    format's int8 files are under "litert/<signature>", with "format" and
    "int8_weights" (its int8 weight tensors) instead of the ONNX counts.
    """

    directory: str
    formats: list
    opset: int
    paths: dict = dataclasses.field(default_factory=dict)
    signatures: dict = dataclasses.field(default_factory=dict)
    parity: list = dataclasses.field(default_factory=list)
    batches: dict = dataclasses.field(default_factory=dict)
    timings_s: dict = dataclasses.field(default_factory=dict)
    notes: list = dataclasses.field(default_factory=list)
    quantized: dict = dataclasses.field(default_factory=dict)
    versions: dict = dataclasses.field(default_factory=dict)

    @property
    def ok(self):
        return all(row.ok for row in self.parity)

    def max_abs_diff(self, format, output, signature=DEFAULT_SIGNATURE):
        """The recorded difference of one output, e.g. `report.max_abs_diff("onnx", "ids")`."""
        for row in self.parity:
            if (row.signature, row.format, row.output) == (signature, format, output):
                return row.max_abs_diff
        known = sorted({(r.signature, r.format, r.output) for r in self.parity})
        raise KeyError(
            f"no parity row for signature={signature!r}, format={format!r}, output={output!r}; rows: {known}"
        )

    def to_dict(self):
        data = dataclasses.asdict(self)
        data["ok"] = self.ok
        for row in data["parity"]:
            # JSON has no infinity: a mismatch in shape or NaN placement reads as null.
            if not np.isfinite(row["max_abs_diff"]):
                row["max_abs_diff"] = None
        return data

    def to_json(self, path=None):
        """The report as a JSON string; also written to `path` when given."""
        text = json.dumps(self.to_dict(), indent=2)
        if path is not None:
            Path(path).write_text(text + "\n", encoding="utf-8")
        return text

    def table(self):
        """The parity rows as a plain-text table."""
        header = ("signature", "format", "output", "dtype", "max |diff|", "tolerance", "ok")
        rows = [
            (
                row.signature,
                row.format,
                row.output,
                row.dtype,
                f"{row.max_abs_diff:.3g}",
                "exact" if row.exact else f"{row.tolerance:g}",
                "yes" if row.ok else "NO",
            )
            for row in self.parity
        ]
        widths = [max(len(str(line[i])) for line in [header, *rows]) for i in range(len(header))]
        lines = [
            "  ".join(str(cell).ljust(width) for cell, width in zip(line, widths)).rstrip() for line in [header, *rows]
        ]
        lines.insert(1, "  ".join("-" * width for width in widths))
        for name, entry in self.quantized.items():
            measured = ", ".join(
                f"{output} {value['max_abs_diff']:.3g} max |diff|"
                if "max_abs_diff" in value
                else f"{output} {value['rows_identical']:.1%} rows identical"
                for output, value in entry.get("outputs", {}).items()
            )
            covered = (
                f"{entry['int8_weights']} int8 weights"
                if "int8_weights" in entry
                else f"{entry.get('int8_products', '?')} int8 products, "
                f"{entry.get('float32_products_in_loops', '?')} float32 in loops"
            )
            lines.append(
                f"{entry['precision']} {name}: {entry['bytes'] / 1e6:.2f} MB "
                f"(float32 {entry['float32_bytes'] / 1e6:.2f} MB); {covered}"
                + (f"; against Keras: {measured}" if measured else "")
            )
        return "\n".join(lines)

    def markdown(self):
        """A Markdown table, one row per signature and output, one column per format (max |diff|).

        The README's layer x format coverage table is this, for a model with
        one output per layer (`tools/export_coverage_table.py`).
        """
        formats = list(dict.fromkeys(row.format for row in self.parity))
        cells = {}
        for row in self.parity:
            value = "exact" if row.exact and row.ok else f"{row.max_abs_diff:.1e}"
            cells.setdefault((row.signature, row.output), {})[row.format] = f"{value} {'ok' if row.ok else 'FAIL'}"
        several = len({signature for signature, _ in cells}) > 1
        lines = [
            "| " + " | ".join(["output", *formats]) + " |",
            "|" + "---|" * (len(formats) + 1),
        ]
        for (signature, output), by_format in cells.items():
            label = f"{signature}/{output}" if several else output
            lines.append("| " + " | ".join([f"`{label}`", *(by_format.get(f, "-") for f in formats)]) + " |")
        return "\n".join(lines)

    def __str__(self):
        return self.table()
