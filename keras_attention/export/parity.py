"""Exported outputs compared with Keras: one `ParityRow` per output and
format, and the `ExportError` that names every mismatch."""

import keras
import numpy as np

from keras_attention.export.report import ExportError, ParityRow


def _difference(got, want):
    """Max absolute difference; inf when shapes or NaN/inf positions differ."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return float("inf")
    if got.size == 0:
        return 0.0
    if want.dtype.kind in "biu" or got.dtype.kind in "biu":
        return float(np.max(np.abs(got.astype(np.float64) - want.astype(np.float64))))
    got, want = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(want)
    same_special = (np.isnan(got) & np.isnan(want)) | (got == want)
    if not (finite | same_special).all() or not (np.isfinite(got) | same_special).all():
        return float("inf")
    return float(np.max(np.abs(np.where(finite, got - want, 0.0))))


def _record(report, signature, format, expected, actual, atol):
    for name, dtype in zip(signature.output_names, signature.output_dtypes):
        exact = dtype.startswith(("int", "uint", "bool"))
        diff = max(_difference(got[name], want[name]) for got, want in zip(actual, expected))
        exported = keras.backend.standardize_dtype(np.asarray(actual[0][name]).dtype)
        tolerance = 0.0 if exact else atol
        # A consumer reading int64 where Keras gave int32 is broken too, however equal the values.
        ok = diff <= tolerance and exported == dtype
        shown = dtype if exported == dtype else f"{dtype}->{exported}"
        report.parity.append(ParityRow(signature.name, format, name, shown, diff, exact, tolerance, ok))


def _check_parity(report):
    failures = [row for row in report.parity if not row.ok]
    if failures:
        listed = "; ".join(
            f"{row.format} signature {row.signature!r} output {row.output!r}: max |diff| {row.max_abs_diff:.3g} "
            f"(allowed {'0, exact' if row.exact else row.tolerance})"
            + (f", dtype {row.dtype}" if "->" in row.dtype else "")
            for row in failures
        )
        raise ExportError(f"export does not match Keras: {listed}. Nothing was written.\n{report.table()}", report)
