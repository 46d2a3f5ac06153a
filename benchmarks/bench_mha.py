"""Measure 2: MultiHeadAttention forward + backward, and scaled-dot FLOP rate.

(a) `keras_attention.MultiHeadAttention` against `keras.layers.MultiHeadAttention`
with the same configuration and the same weights (ours loads Keras's with
`set_weights`): self-attention on `(B, T, d_model)`, the loss the sum of the
output times a fixed random tensor, gradients with respect to the input and
every weight, in one `tf.function` (no XLA: Keras's default on CPU), at
T = 128, 512, 2048 with B * T = 4096 tokens.

(b) `keras_attention.ScaledDotAttention` forward (QK^T / sqrt(d), softmax, AV)
on `(N, T, d_head)` inputs against a bare `matmul(Q, K^T)` of the same shapes
in the same run: FLOP rate = 2 * (2 N T^2 d) / time for the attention (its two
matmuls; the softmax counts as overhead) and 2 N T^2 d / time for the matmul.
"""

import numpy as np

from benchmarks import common

FULL = dict(lengths=[128, 512, 2048], tokens=4096, d_model=256, num_heads=4, key_dim=64)
QUICK = dict(lengths=[16, 32], tokens=64, d_model=16, num_heads=2, key_dim=8)


def _layers(cfg):
    import keras

    import keras_attention as ka

    keras.utils.set_random_seed(0)
    theirs = keras.layers.MultiHeadAttention(cfg["num_heads"], cfg["key_dim"])
    ours = ka.MultiHeadAttention(cfg["num_heads"], cfg["key_dim"])
    return ours, theirs


def _step_function(layer):
    import tensorflow as tf

    @tf.function
    def step(x, readout):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(layer(x, x) * readout)
        grads = tape.gradient(loss, [x] + layer.trainable_variables)
        return loss, grads

    return step


def run_mha(cfg, repeats, log):
    import tensorflow as tf

    rows = []
    for length in cfg["lengths"]:
        batch = max(1, cfg["tokens"] // length)
        rng = np.random.default_rng(length)
        x = tf.constant(rng.normal(size=(batch, length, cfg["d_model"])).astype("float32"))
        readout = tf.constant(rng.normal(size=(batch, length, cfg["d_model"])).astype("float32"))
        ours, theirs = _layers(cfg)
        theirs(x, x)
        ours(x, x)
        ours.set_weights(theirs.get_weights())
        np.testing.assert_allclose(np.asarray(ours(x, x)), np.asarray(theirs(x, x)), atol=1e-4)
        steps = {"keras_attention": _step_function(ours), "keras": _step_function(theirs)}
        sides = {name: (lambda f=f, x=x, r=readout: [g.numpy() for g in f(x, r)[1][:1]]) for name, f in steps.items()}
        log(f"  MHA T={length} B={batch}")
        times = common.alternate(sides, repeats, warmup=1, number=1, log=log)
        stats = {name: common.summary(t) for name, t in times.items()}
        rows.append(
            {
                "T": length,
                "B": batch,
                "fwd_bwd_ms": stats,
                "speedup_vs_keras": common.ratio(stats["keras"]["median_ms"], stats["keras_attention"]["median_ms"]),
            }
        )
    return rows


def run_flops(cfg, repeats, log):
    import tensorflow as tf

    import keras_attention as ka

    length = cfg["lengths"][-1]
    n = max(1, cfg["tokens"] // length) * cfg["num_heads"]
    d = cfg["key_dim"]
    rng = np.random.default_rng(1)
    q, k, v = (tf.constant(rng.normal(size=(n, length, d)).astype("float32")) for _ in range(3))
    layer = ka.ScaledDotAttention()
    layer(q[:, :2], v[:, :2], key=k[:, :2])
    attention = tf.function(lambda: layer(q, v, key=k))
    matmul = tf.function(lambda: tf.matmul(q, k, transpose_b=True))
    two_matmuls = tf.function(lambda: tf.matmul(tf.matmul(q, k, transpose_b=True), v))
    # A tf.function call returns when its work is done (CPU); no .numpy()
    # (a copy of the matmul's 128 MiB output would be charged to it alone).
    sides = {"scaled_dot_attention": attention, "matmul": matmul, "two_matmuls": two_matmuls}
    log(f"  scaled-dot FLOP rate N={n} T={length} d={d}")
    times = common.alternate(sides, repeats, warmup=1, number=1, log=log)
    stats = {name: common.summary(t) for name, t in times.items()}
    matmul_flops = 2.0 * n * length * length * d
    flops = {"scaled_dot_attention": 2 * matmul_flops, "matmul": matmul_flops, "two_matmuls": 2 * matmul_flops}
    rate = {name: flops[name] / (stats[name]["median_ms"] / 1000) / 1e9 for name in sides}
    return {
        "N": n,
        "T": length,
        "d_head": d,
        "time_ms": stats,
        "gflops": {k: round(val, 2) for k, val in rate.items()},
        "fraction_of_matmul_rate": round(rate["scaled_dot_attention"] / rate["matmul"], 3),
        "fraction_of_two_matmuls_rate": round(rate["scaled_dot_attention"] / rate["two_matmuls"], 3),
    }


def run(quick, log, repeats=None):
    cfg = QUICK if quick else FULL
    repeats = repeats or (2 if quick else 7)
    return {
        "config": cfg,
        "method": f"tf.function, no XLA; {repeats} alternating rounds after 1 warm-up; median",
        "mha": run_mha(cfg, repeats, log),
        "scaled_dot_flops": run_flops(cfg, repeats, log),
        "targets": {"mha_speedup_vs_keras": 1.0, "fraction_of_matmul_rate": 0.5},
    }
