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


def _is_exact(dtype):
    """Whether an output of `dtype` must equal Keras's exactly (integers and
    booleans: token ids, lengths); floats are held to `atol`."""
    return dtype.startswith(("int", "uint", "bool"))


def _record(report, signature, format, expected, actual, atol):
    for name, dtype in zip(signature.output_names, signature.output_dtypes):
        exact = _is_exact(dtype)
        tolerance = 0.0 if exact else atol
        diff = max(_difference(got[name], want[name]) for got, want in zip(actual, expected))
        exported = keras.backend.standardize_dtype(np.asarray(actual[0][name]).dtype)
        # A consumer reading int64 where Keras gave int32 is broken too, however equal the values.
        ok = diff <= tolerance and exported == dtype
        shown = dtype if exported == dtype else f"{dtype}->{exported}"
        report.parity.append(ParityRow(signature.name, format, name, shown, diff, exact, tolerance, ok))


def check_parity(report):
    """Raise `ExportError` naming every parity row that failed, with the table."""
    failures = [row for row in report.parity if not row.ok]
    if failures:
        listed = "; ".join(
            f"{row.format} signature {row.signature!r} output {row.output!r}: max |diff| {row.max_abs_diff:.3g} "
            f"(allowed {'0, exact' if row.exact else row.tolerance})"
            + (f", dtype {row.dtype}" if "->" in row.dtype else "")
            for row in failures
        )
        raise ExportError(f"export does not match Keras: {listed}. Nothing was written.\n{report.table()}", report)


def compare(context, runners):
    """Compare every format's outputs with Keras on each signature's
    verification batches: `runners` is {format name: run(signature, arrays)},
    one `ParityRow` per signature, format and output goes into
    `context.report`. Returns Keras's outputs, {signature name: [outputs
    per batch]}, for measures that are not held to the tolerance. Raises
    nothing on a mismatch: `check_parity` does, once everything is measured."""
    report, expected_by_signature = context.report, {}
    for signature in context.signatures:
        batches = context.batches(signature)
        try:
            expected = context.keras_outputs(signature)
        except Exception as error:
            raise ExportError(
                f"signature {signature.name!r}: the Keras model fails on the verification inputs "
                f"({type(error).__name__}: {error}); pass `sample_inputs` with valid values."
            ) from error
        report.batches[signature.name] = [
            {n: list(a.shape) for n, a in zip(signature.input_names, arrays)} for arrays in batches
        ]
        for format, run in runners.items():
            actual = [run(signature, arrays) for arrays in batches]
            _record(report, signature, format, expected, actual, context.atol)
        expected_by_signature[signature.name] = expected
    return expected_by_signature
