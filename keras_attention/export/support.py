"""Which backend exports which model to which format, and the error that
says so before anything is written.

`export_model` runs on every Keras backend. On TensorFlow it writes both
formats from TensorFlow graphs (tf2onnx converts the decode loops' while
loops). On JAX and PyTorch it goes through Keras's own exporters, which
cover less:

| backend    | format      | layer models | recurrent (teacher-forced) | decode loops (`InferenceDecoder`, ...) |
|------------|-------------|--------------|----------------------------|----------------------------------------|
| tensorflow | saved_model | yes          | yes                        | yes                                    |
| tensorflow | onnx        | yes          | yes                        | yes                                    |
| jax        | saved_model | yes (a)      | yes (a)                    | greedy and sampling (a); beam no (b)   |
| jax        | onnx        | unmasked (c) | no (c)                     | no (c)                                 |
| torch      | saved_model | no (d)       | no (d)                     | no (d)                                 |
| torch      | onnx        | yes (e)      | no (f)                     | no (f)                                 |
| tensorflow | litert      | yes (g)      | yes (g)                    | greedy and beam (g)                    |
| jax, torch | litert      | no (h)       | no (h)                     | no (h)                                 |

(a) `keras.export.ExportArchive` through jax2tf: needs TensorFlow installed
    next to JAX. Run-time decoding options are not checked in the graph
    (their checks are TensorFlow ops); ONNX serving checks its feeds anyway.
(b) jax2tf serializes JAX's `top_k` as a StableHLO composite newer than
    TensorFlow 2.21's XlaCallModule reads: the SavedModel is written and
    fails when called. The export's own check runs it and says so.
(c) Keras's JAX ONNX exporter is jax2onnx (needs `jax2onnx`), which in 0.17
    does not convert a padding of a symbolic length nor `max(initial=)`,
    both in the masked softmax every masked attention and cell runs, nor
    the decode loops' shape-polymorphic `while_loop`.
(d) Keras writes SavedModels from TensorFlow and JAX only.
(e) Keras's PyTorch ONNX exporter (TorchScript tracing with dynamic axes;
    needs `onnx`, and `onnxruntime` for the parity check).
(f) On PyTorch Keras's RNN and the decoders' loops are Python loops:
    tracing records them unrolled at the traced length (1), so the file
    only fits that length (and `take_along_dim` has no TorchScript ONNX
    conversion). ONNX of a decode loop needs tf2onnx's while-loop
    conversion: TensorFlow's.
(g) `tf.lite.TFLiteConverter` with LiteRT's builtin kernels only, run by
    `ai-edge-litert` (the `litert` extra). A model needing a TF Select
    (Flex) op is refused by the writer, naming the op (`litert_format`).
(h) The converter reads TensorFlow graphs; from JAX a SavedModel holds
    StableHLO (`XlaCallModule`), which has no LiteRT builtin kernel.

The `openvino` format converts the ONNX file, so it takes what `onnx` takes
on each backend (and needs the `openvino` package beside).

Weights are backend-neutral: a model trained anywhere saves to `.keras` and
exports every row under `KERAS_BACKEND=tensorflow`.
"""

import keras

from keras_attention.decoders.attention_decoder import AttentionDecoder
from keras_attention.decoders.scheduled_sampling import ScheduledSamplingDecoder
from keras_attention.decoders.search import SearchDecoder
from keras_attention.models.pointer import PointerNetwork

BACKENDS = ("tensorflow", "jax", "torch")
KINDS = ("layers", "recurrent", "decode_loop")
_DESCRIBED = {
    "layers": "a layer model",
    "recurrent": "a recurrent model (an RNN or teacher-forced decoder)",
    "decode_loop": "a decode loop",
}
_WAY_OUT = (
    "Save the model (`model.save('m.keras')`; weights are backend-neutral) and export the file under "
    "TensorFlow: `KERAS_BACKEND=tensorflow keras-attention-export m.keras OUT_DIR`."
)
# {(backend, format name in the `formats` registry): {kind: why not}}; a kind
# not listed is supported, and so is a registered format not listed at all.
_UNSUPPORTED = {
    ("jax", "onnx"): {
        "recurrent": "Keras exports JAX to ONNX with jax2onnx, which does not convert the masked softmax the "
        "cells run every step (a padding of a symbolic length, `max(initial=)`)",
        "decode_loop": "ONNX of a decode loop needs tf2onnx's conversion of TensorFlow's while loop; jax2onnx "
        "does not convert the decoders' shape-polymorphic `while_loop`",
    },
    ("torch", "saved_model"): dict.fromkeys(KINDS, "Keras writes SavedModels from TensorFlow and JAX graphs only"),
    **{
        (backend, "litert"): dict.fromkeys(
            KINDS,
            "the LiteRT converter reads TensorFlow graphs (from JAX a SavedModel holds StableHLO, which has no "
            "LiteRT builtin kernel; PyTorch writes no SavedModel)",
        )
        for backend in ("jax", "torch")
    },
    ("torch", "onnx"): {
        "recurrent": "on PyTorch the RNN is a Python loop: Keras's ONNX exporter traces it unrolled at one "
        "length, and the file fails on any other",
        "decode_loop": "ONNX of a decode loop needs tf2onnx's conversion of TensorFlow's while loop; on PyTorch "
        "the loop is Python, which tracing unrolls at one length",
    },
}
# OpenVINO converts the ONNX file: what the ONNX format cannot write, it cannot either.
_UNSUPPORTED.update({(backend, "openvino"): _UNSUPPORTED[backend, "onnx"] for backend in ("jax", "torch")})
# What each (backend, format) needs beyond the backend: {module: pip name}.
REQUIREMENTS = {
    ("jax", "saved_model"): {"tensorflow": "tensorflow"},
    ("jax", "onnx"): {"jax2onnx": "jax2onnx", "onnx": "onnx", "onnxruntime": "onnxruntime"},
    ("torch", "onnx"): {"onnx": "onnx", "onnxruntime": "onnxruntime"},
    ("tensorflow", "litert"): {"ai_edge_litert": "'keras-attention-decoders[litert]'"},
}
REQUIREMENTS.update(
    {(backend, "openvino"): {**REQUIREMENTS[backend, "onnx"], "openvino": "openvino"} for backend in ("jax", "torch")}
)


def _sublayers(layer):
    # Keras keeps no public list of nested layers; `_flatten_layers` walks
    # the tracked ones, sublayers of subclassed layers included.
    return layer._flatten_layers(include_self=True, recursive=True)


def model_kind(model):
    """ "decode_loop" (an in-graph search), "recurrent" (an RNN or a teacher-forced decoder) or "layers"."""
    layers = list(_sublayers(model))
    if any(isinstance(layer, SearchDecoder) for layer in layers):
        return "decode_loop"
    recurrent = (keras.layers.RNN, AttentionDecoder, ScheduledSamplingDecoder, PointerNetwork)
    if any(isinstance(layer, recurrent) for layer in layers):
        return "recurrent"
    return "layers"


def check_support(backend, formats, models):
    """Raise NotImplementedError naming the backend, format, model and the way out
    for the first combination of `formats` and `models` (signature name: model)
    that `backend` cannot export, or whose packages are missing."""
    import importlib.util

    for format in formats:
        for name, model in models.items():
            kind = model_kind(model)
            why = _UNSUPPORTED.get((backend, format), {}).get(kind)
            if why:
                raise NotImplementedError(
                    f"export_model cannot write format {format!r} on the {backend!r} backend for signature "
                    f"{name!r}, {_DESCRIBED[kind]}: {why}. {_WAY_OUT}"
                )
        missing = [
            package
            for module, package in REQUIREMENTS.get((backend, format), {}).items()
            if importlib.util.find_spec(module) is None
        ]
        if missing:
            # On TensorFlow the install is the only way out.
            other = "" if backend == "tensorflow" else f", or {_WAY_OUT[0].lower()}{_WAY_OUT[1:]}"
            raise NotImplementedError(
                f"export_model's format {format!r} on the {backend!r} backend needs {', '.join(missing)} "
                f"(not installed): `pip install {' '.join(missing)}`{other}"
            )
