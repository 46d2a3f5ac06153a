"""int8 dynamic quantization of exported ONNX files, and how far the
quantized outputs move from Keras's.

onnxruntime's dynamic quantizer stores the weights of every matrix product
with a constant operand as 8-bit integers and quantizes the activations that
meet them at run time; products of two activations (attention scores, the
weighted sum of values) and everything else stay float32. The float32 file
is kept beside the int8 one: it is the reference, and the one export parity
is checked on.

What int8 covers, measured on the files: the products of the main graph
(an encoder, its fused LSTMs, the memory's keys projected once). The
quantizer leaves the products inside an ONNX Loop's body in float32 (an
in-graph decoder's step: its cell, its attention's query, its read-out),
and the weights of the main graph that the loop reads are stored as int8
and dequantized before it: the decode loop runs in float32 and gets no
faster, and a decoder's int8 file can be larger than its float32 one (a
small greedy decoder: 89 KB float32, 126 KB int8). The report counts both
(`int8_products`, `float32_products_in_loops`).

Weights are unsigned bytes, as the activations are (onnxruntime's "U8U8"):
on an x86-64 CPU without VNNI instructions (AVX2-only machines, for one)
onnxruntime multiplies unsigned activations by signed weights with an
instruction whose 16-bit sums saturate, and a product's error then goes
far past the rounding of its operands (measured on
tests/test_export_quantize.py's dense layer on an AVX2-only AMD EPYC: 8.3
times the rounding bound with signed weights, 0.16 times with unsigned
ones). Unsigned weights have no such path, on any CPU.

Quantization changes the numbers by design, so the int8
file's differences from Keras are measured and reported, not held to the
export tolerance: whether they matter is a question of accuracy on the
user's data (the G2P serving study measures it on CMUdict).
"""

import logging

import numpy as np

from keras_attention.export.report import ExportError

# The quantizable ops tf2onnx emits for these models; `Gather` (embedding
# lookups) is left in float32: it saves size but no time.
_QUANTIZED_OPS = ["MatMul", "Gemm", "LSTM"]
# What the quantizer turns them into, and the float32 products it may leave.
_INT8_PRODUCTS = (
    "MatMulInteger",
    "DynamicQuantizeMatMul",
    "DynamicQuantizeLSTM",
    "QLinearMatMul",
    "MatMulIntegerToFloat",
)
_FLOAT_PRODUCTS = ("MatMul", "Gemm", "LSTM")


class _QuietRoot(logging.Filter):
    """onnxruntime's quantizer warns on the root logger about every tensor
    whose type it cannot infer (loop-carried values) and suggests a
    pre-processing step that does not handle loops: neither is actionable."""

    def filter(self, record):
        return record.levelno > logging.WARNING


def _quantize_int8(float_path, int8_path, signature_name):
    """Write the int8 copy of `float_path` and return its onnxruntime session."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from keras_attention.export.onnx import _session

    quiet, root = _QuietRoot(), logging.getLogger()
    root.addFilter(quiet)  # consulted for records logged on the root logger only
    try:
        quantize_dynamic(
            str(float_path),
            str(int8_path),
            weight_type=QuantType.QUInt8,  # the module's docstring says why
            per_channel=True,
            op_types_to_quantize=_QUANTIZED_OPS,
        )
        return _session(int8_path)
    except Exception as error:
        raise ExportError(
            f"signature {signature_name!r}: int8 quantization failed ({type(error).__name__}: {error}). Nothing was written."
        ) from error
    finally:
        root.removeFilter(quiet)


def _quantize_signature(signature_name, staging, directory, precision, report):
    """Write the int8 copy of the signature's ONNX file in `staging`, record
    it in `report.quantized` (its final path under `directory`, its size and
    the float32 file's) and return its onnxruntime session."""
    from keras_attention.export.layout import _onnx_file

    source, target = staging / _onnx_file(signature_name), staging / _onnx_file(signature_name, precision)
    session = _quantize_int8(source, target, signature_name)
    report.quantized[signature_name] = {
        "precision": precision,
        "path": str(directory / target.name),
        "bytes": target.stat().st_size,
        "float32_bytes": source.stat().st_size,
        **_coverage(target),
    }
    return session


def _coverage(path):
    """{"int8_products": n, "float32_products_in_loops": m} of an int8 file:
    its quantized products, and the float32 ones left inside loop bodies
    (an in-graph decoder's step), which the quantizer does not reach."""
    import onnx

    counts = {"int8_products": 0, "float32_products_in_loops": 0}

    def walk(graph, in_loop):
        for node in graph.node:
            if node.op_type in _INT8_PRODUCTS:
                counts["int8_products"] += 1
            elif in_loop and node.op_type in _FLOAT_PRODUCTS:
                counts["float32_products_in_loops"] += 1
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.GRAPH:
                    walk(attribute.g, True)

    walk(onnx.load(str(path), load_external_data=False).graph, False)
    return counts


def _quantized_outputs(signature, expected, actual):
    """{output: measure} of the int8 outputs against Keras's: floats by
    their max |diff| (finite values only), integer outputs by the share of
    examples whose whole output row is identical."""
    measures = {}
    for name, dtype in zip(signature.output_names, signature.output_dtypes):
        pairs = [(np.asarray(got[name]), np.asarray(want[name])) for got, want in zip(actual, expected)]
        if dtype.startswith(("int", "uint", "bool")):
            same = sum(int(_rows_identical(g, w).sum()) for g, w in pairs)
            total = sum(len(w) for _, w in pairs)
            measures[name] = {"rows_identical": same / total if total else 1.0}
        else:
            both = [np.isfinite(g) & np.isfinite(w) for g, w in pairs]
            diff = max((float(np.max(np.abs(g - w)[ok], initial=0.0)) for (g, w), ok in zip(pairs, both)), default=0.0)
            measures[name] = {"max_abs_diff": diff}
    return measures


def _rows_identical(got, want):
    """Per example, whether two integer outputs agree everywhere; a decode
    that ran a different number of steps has another length: that row differs."""
    if got.shape != want.shape:
        shape = np.maximum(got.shape, want.shape)
        got, want = (np.pad(a, [(0, n - m) for n, m in zip(shape, a.shape)], constant_values=-1) for a in (got, want))
    # Over every axis but the batch's (a reshape to (B, -1) fails on an empty batch).
    return np.all(got == want, axis=tuple(range(1, got.ndim)))
