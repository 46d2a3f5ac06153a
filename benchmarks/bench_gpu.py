"""Measure 6 (GPU only): training step with mixed precision and XLA, and MHA.

On a machine with a GPU: the decoder training step of measure 1 (keras_attention
only) in float32, float32 + XLA, mixed_float16 and mixed_float16 + XLA; and
measure 2's MultiHeadAttention forward + backward (ours and Keras's) at each
length. Without a GPU the section records why it was skipped.
"""

from benchmarks import common


def gpu_name():
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    details = tf.config.experimental.get_device_details(gpus[0])
    return details.get("device_name", gpus[0].name)


def run(quick, log, repeats=None):
    import keras

    from benchmarks import bench_decoder, bench_mha

    name = gpu_name()
    if name is None:
        return {"skipped": "no GPU visible to TensorFlow on this machine"}
    repeats = repeats or (2 if quick else 7)
    cfg = bench_decoder.QUICK if quick else bench_decoder.FULL
    number = 1 if quick else 5
    source, target_in, target_out = bench_decoder.data(cfg)
    sides = {}
    for policy in ("float32", "mixed_float16"):
        for jit in (False, True):
            keras.config.set_dtype_policy(policy)
            model = bench_decoder.build_ours(cfg, jit)
            sides[f"{policy}{'_xla' if jit else ''}"] = lambda m=model: m.train_on_batch(
                [source, target_in], target_out
            )
    keras.config.set_dtype_policy("float32")
    times = common.alternate(sides, repeats, warmup=1, number=number, log=log)
    mha_cfg = bench_mha.QUICK if quick else bench_mha.FULL
    return {
        "device": name,
        "decoder_step_ms": {k: common.summary(t) for k, t in times.items()},
        "decoder_config": cfg,
        "mha": bench_mha.run_mha(mha_cfg, repeats, log),
    }
