"""`make gpu-check`: what a lent GPU must show, in a few minutes.

The lent machines carry JAX and PyTorch with CUDA but no TensorFlow, so the
check runs on each Keras backend installed there, one process each:

- the attention LSTM decoder's training step (memory LSTM, `AttentionWrapper`
  over an `LSTMCell` with `AdditiveAttention`, `AttentionDecoder`) on a copy
  task (compiled on JAX, eager on PyTorch), in float32, mixed_bfloat16 and mixed_float16: milliseconds
  a step, and the loss finite and falling in each;
- a pre-norm Transformer encoder-decoder's training step (3+3 layers, d 256,
  4 heads, batch 64: issue 33's comparison size), compiled on JAX, in the
  same three policies: milliseconds a step, the loss finite and falling;
- `MultiHeadAttention` forward + backward on its fused path
  (`ops.dot_product_attention`) against its explicit path (einsum and
  masked softmax), bfloat16: milliseconds and the largest difference of
  their outputs;
- `ops.dot_product_attention(flash_attention=True)` where the backend offers
  it, against the plain op;
- on PyTorch, `export_model` to ONNX of a layer model, verified against
  Keras (JAX's export needs TensorFlow or jax2onnx, absent there).

Prints one JSON object and exits 1 when a check fails. Run it with
`python -m tools.gpu_check` (`--quick` for a CPU trial, `--out FILE`).
"""

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import numpy as np

BACKENDS = ("jax", "torch")
FULL = {
    "batch": 256,
    "length": 32,
    "vocabulary": 64,
    "units": 256,
    "steps": 40,
    "mha": (32, 1024, 512, 8),
    # issue 33's comparison size: d 256, 4 heads, FFN 1024, 3+3 layers, batch 64, length 32
    "transformer": {"batch": 64, "width": 256, "heads": 4, "ffn": 1024, "layers": 3},
}
QUICK = {
    "batch": 16,
    "length": 8,
    "vocabulary": 16,
    "units": 16,
    "steps": 6,
    "mha": (2, 32, 32, 4),
    "transformer": {"batch": 8, "width": 16, "heads": 2, "ffn": 32, "layers": 1},
}


def _median_ms(function, repeats):
    function()  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _device_name(backend):
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return f"{device.platform}: {getattr(device, 'device_kind', device)}"
    import torch

    return f"cuda: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "cpu"


def _compiled():
    """jit_compile as each backend's users train: XLA on JAX; eager on
    PyTorch, where it would mean torch.compile, which the recurrent decoder's
    loop does not go through."""
    import keras

    return keras.backend.backend() != "torch"


def _copy_task(cfg):
    rng = np.random.default_rng(0)
    source = rng.integers(1, cfg["vocabulary"], size=(cfg["batch"], cfg["length"])).astype("int32")
    start = np.zeros((cfg["batch"], 1), "int32")
    return source, np.concatenate([start, source[:, :-1]], axis=1), source


def _describe(error):
    """The error and where it was raised: the last frames of its traceback."""
    frames = traceback.extract_tb(error.__traceback__)[-3:]
    where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames))
    return f"{type(error).__name__}: {str(error)[:300]} (at {where})"


def _decoder_step(cfg, policy, use_cudnn, source, target_in, target_out):
    import keras

    import keras_attention as ka

    v, u = cfg["vocabulary"], cfg["units"]
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        source_ids = keras.Input((None,), dtype="int32")
        target_ids = keras.Input((None,), dtype="int32")
        embedded = keras.layers.Embedding(v, u)(source_ids)
        memory = keras.layers.LSTM(u, return_sequences=True, use_cudnn=use_cudnn)(embedded)
        cell = ka.AttentionWrapper(keras.layers.LSTMCell(u), ka.AdditiveAttention(u))
        outputs = ka.AttentionDecoder(cell)(keras.layers.Embedding(v, u)(target_ids), memory)
        logits = keras.layers.Dense(v, dtype="float32")(outputs)
        model = keras.Model([source_ids, target_ids], logits)
        model.compile(
            optimizer=keras.optimizers.Adam(3e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=_compiled(),
        )
        losses = [float(model.train_on_batch([source, target_in], target_out))]
        start = time.perf_counter()
        for _ in range(cfg["steps"]):
            losses.append(float(model.train_on_batch([source, target_in], target_out)))
        step_ms = 1000 * (time.perf_counter() - start) / cfg["steps"]
    finally:
        keras.config.set_dtype_policy("float32")
    return {
        "step_ms": round(step_ms, 2),
        "first_loss": round(losses[0], 4),
        "last_loss": round(losses[-1], 4),
        "ok": bool(np.all(np.isfinite(losses)) and losses[-1] < losses[0]),
    }


def decoder_steps(cfg):
    """{policy: {"step_ms", "first_loss", "last_loss"}} for the attention LSTM decoder."""
    source, target_in, target_out = _copy_task(cfg)
    results = {}
    for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
        try:
            results[policy] = _decoder_step(cfg, policy, "auto", source, target_in, target_out)
        except Exception as error:
            # Keras's own LSTM on JAX refuses half precision on its cuDNN
            # path (jax's gpu_rnn lowering: "Unknown output type bfloat16",
            # seen on an H100 with Keras 3.15.1 and JAX 0.11.2). Ours is not
            # the part that fails when the same model trains off cuDNN; the
            # refusal is kept in the result, for the docs' GPU notes.
            try:
                results[policy] = _decoder_step(cfg, policy, False, source, target_in, target_out)
                results[policy]["keras_lstm_cudnn_refused"] = _describe(error)
            except Exception as second:
                results[policy] = {"ok": False, "error": _describe(error), "without_cudnn": _describe(second)}
    return results


def _transformer_step(cfg, policy, source, target_in, target_out):
    import keras

    import keras_attention as ka

    size, v = cfg["transformer"], cfg["vocabulary"]
    keras.config.set_dtype_policy(policy)
    try:
        keras.utils.set_random_seed(0)
        source_ids = keras.Input((None,), dtype="int32")
        target_ids = keras.Input((None,), dtype="int32")
        stack = {"num_heads": size["heads"], "intermediate_dim": size["ffn"], "norm_first": True}
        position = ka.SinusoidalPositionEncoding()
        memory = keras.layers.Embedding(v, size["width"], mask_zero=True)(source_ids)
        memory = ka.TransformerEncoderStack(size["layers"], **stack)(position(memory))
        target = position(keras.layers.Embedding(v, size["width"])(target_ids))
        hidden = ka.TransformerDecoderStack(size["layers"], **stack)(target, memory)
        model = keras.Model([source_ids, target_ids], keras.layers.Dense(v, dtype="float32")(hidden))
        model.compile(
            optimizer=keras.optimizers.Adam(1e-3),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            jit_compile=_compiled(),
        )
        batch = slice(0, size["batch"])
        inputs, labels = [source[batch], target_in[batch]], target_out[batch]
        losses = [float(model.train_on_batch(inputs, labels))]
        start = time.perf_counter()
        for _ in range(cfg["steps"]):
            losses.append(float(model.train_on_batch(inputs, labels)))
        step_ms = 1000 * (time.perf_counter() - start) / cfg["steps"]
    finally:
        keras.config.set_dtype_policy("float32")
    return {
        "step_ms": round(step_ms, 2),
        "parameters": model.count_params(),
        "first_loss": round(losses[0], 4),
        "last_loss": round(losses[-1], 4),
        "ok": bool(np.all(np.isfinite(losses)) and losses[-1] < losses[0]),
    }


def transformer_steps(cfg):
    """{policy: {"step_ms", "first_loss", "last_loss"}} for a pre-norm Transformer encoder-decoder."""
    source, target_in, target_out = _copy_task(cfg)
    results = {}
    for policy in ("float32", "mixed_bfloat16", "mixed_float16"):
        try:
            results[policy] = _transformer_step(cfg, policy, source, target_in, target_out)
        except Exception as error:
            results[policy] = {"ok": False, "error": _describe(error)}
    return results


def attention_paths(cfg, repeats):
    """MultiHeadAttention's fused path against its explicit path, bfloat16, forward + backward."""
    import keras

    import keras_attention as ka

    batch, length, width, heads = cfg["mha"]
    keras.config.set_dtype_policy("mixed_bfloat16")
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(1).normal(size=(batch, length, width)).astype("float32")
    inputs = keras.Input((None, width))
    layer = ka.MultiHeadAttention(heads, width // heads)
    fused = keras.Model(inputs, layer(inputs, inputs))
    explicit = keras.Model(inputs, layer(inputs, inputs, return_attention_scores=True)[0])
    keras.config.set_dtype_policy("float32")
    difference = float(np.max(np.abs(fused.predict(x, verbose=0) - explicit.predict(x, verbose=0))))
    timings = {}
    for name, model in (("fused", fused), ("explicit", explicit)):
        model.compile(optimizer=keras.optimizers.SGD(1e-4), loss="mse", jit_compile=_compiled())
        timings[f"{name}_ms"] = round(_median_ms(lambda m=model: m.train_on_batch(x, x), repeats), 2)
    return {
        "shape": {"batch": batch, "length": length, "width": width, "heads": heads},
        **timings,
        "explicit_over_fused": round(timings["explicit_ms"] / timings["fused_ms"], 3),
        "max_abs_difference": difference,
        "ok": difference < 0.05,  # bfloat16 keeps 8 bits of mantissa
    }


def flash_attention(cfg):
    """`ops.dot_product_attention(flash_attention=True)` against the plain op, or why it is absent."""
    import keras
    from keras import ops

    batch, length, width, heads = cfg["mha"]
    shape = (batch, length, heads, width // heads)
    rng = np.random.default_rng(2)
    q, k, v = (ops.convert_to_tensor(rng.normal(size=shape), "bfloat16") for _ in range(3))
    plain = ops.convert_to_numpy(ops.cast(ops.dot_product_attention(q, k, v, is_causal=True), "float32"))
    try:
        flash = ops.dot_product_attention(q, k, v, is_causal=True, flash_attention=True)
    except Exception as error:  # the backend or the device says why
        return {"available": False, "why": f"{type(error).__name__}: {str(error)[:200]}", "ok": True}
    difference = float(np.max(np.abs(ops.convert_to_numpy(ops.cast(flash, "float32")) - plain)))
    return {
        "available": True,
        "backend": keras.backend.backend(),
        "max_abs_difference": difference,
        "ok": difference < 0.05,
    }


def onnx_export():
    """A layer model exported to ONNX by `export_model` (PyTorch), verified against Keras."""
    import keras

    import keras_attention as ka

    query = keras.Input((None, 8), name="query")
    value = keras.Input((None, 8), name="value")
    model = keras.Model([query, value], ka.AdditiveAttention(16)(query, value))
    with tempfile.TemporaryDirectory() as directory:
        report = ka.export_model(model, os.path.join(directory, "export"), formats=("onnx",))
    return {"report": json.loads(json.dumps(report, default=str)), "ok": True}


def worker(backend, quick):
    import keras

    cfg = QUICK if quick else FULL
    result = {"backend": backend, "keras": keras.__version__, "device": _device_name(backend)}
    checks = {
        "decoder_training_step": lambda: decoder_steps(cfg),
        "transformer_training_step": lambda: transformer_steps(cfg),
        "multi_head_attention_paths": lambda: attention_paths(cfg, 3 if quick else 10),
        "flash_attention": lambda: flash_attention(cfg),
    }
    if backend == "torch":
        checks["onnx_export"] = onnx_export
    for name, check in checks.items():
        start = time.perf_counter()
        try:
            result[name] = check()
        except Exception as error:
            result[name] = {"ok": False, "error": _describe(error)}
        result[name]["seconds"] = round(time.perf_counter() - start, 1)
    return result


def _passed(result):
    for value in result.values():
        if isinstance(value, dict):
            if value.get("ok") is False or not _passed(value):
                return False
    return True


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a trial on a CPU")
    parser.add_argument("--out", help="also write the JSON here")
    parser.add_argument("--worker", choices=BACKENDS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.quick)))
        return 0
    results = {}
    for backend in BACKENDS:
        if importlib.util.find_spec(backend) is None:
            results[backend] = {"skipped": f"{backend} is not installed"}
            continue
        command = [sys.executable, "-m", "tools.gpu_check", "--worker", backend] + (["--quick"] if args.quick else [])
        run = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "KERAS_BACKEND": backend})
        lines = run.stdout.strip().splitlines()
        try:
            results[backend] = json.loads(lines[-1])
        except (IndexError, json.JSONDecodeError):
            results[backend] = {"ok": False, "error": f"exit {run.returncode}: {run.stderr.strip()[-800:]}"}
    results["passed"] = _passed(results)
    text = json.dumps(results, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    return 0 if results["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
