"""Measure 5: greedy decode time against source length and target length.

An `InferenceDecoder` (greedy) with an `AttentionGRUCell` + `AdditiveAttention`
over a memory of random features (the encoder is left out: its cost is the
encoder's, not the decoder's), batch 16, units 128, in a `tf.function`. The
end token can never win (its logit bias is -50), so every decode runs exactly
`max_length` steps.
- source length Ts = 16 ... 512 at target length 32;
- target length Tt = 16 ... 512 at source length 32.
The exponent is the slope of log(time) against log(length) (1 = linear).
Costs that do not depend on the length (the GRU, the read-out and the
loop's per-step overhead when the source length varies) flatten that slope,
so the slope over the upper half of the range, and the exponent k of a fit
time = a + b * length^k (the length-dependent part alone), are reported too.
"""

import numpy as np

from benchmarks import common

FULL = dict(batch=16, units=128, embedding=32, vocabulary=64, lengths=[16, 32, 64, 128, 256, 512], fixed=32)
QUICK = dict(batch=2, units=8, embedding=4, vocabulary=12, lengths=[4, 8, 16], fixed=4)


def _decoder(cfg, max_length):
    import keras

    import keras_attention as ka

    keras.utils.set_random_seed(0)
    cell = ka.AttentionGRUCell(cfg["units"], ka.AdditiveAttention(cfg["units"]))
    readout = keras.layers.Dense(cfg["vocabulary"])
    decoder = ka.InferenceDecoder(
        cell,
        keras.layers.Embedding(cfg["vocabulary"], cfg["embedding"]),
        readout,
        start_token=1,
        end_token=2,
        max_length=max_length,
        method="greedy",
    )
    return decoder, readout


def run(quick, log, repeats=None):
    import tensorflow as tf

    cfg = QUICK if quick else FULL
    repeats = repeats or (2 if quick else 7)
    rng = np.random.default_rng(0)
    results = {}
    for axis in ("source", "target"):
        rows = []
        for length in cfg["lengths"]:
            ts, tt = (length, cfg["fixed"]) if axis == "source" else (cfg["fixed"], length)
            decoder, readout = _decoder(cfg, tt)
            memory = tf.constant(rng.normal(size=(cfg["batch"], ts, cfg["units"])).astype("float32"))
            decoder(memory[:, :2])
            bias = readout.bias.numpy()
            bias[2] = -50.0
            readout.bias.assign(bias)
            fn = tf.function(lambda m, d=decoder: d(m)["ids"])
            ids = fn(memory).numpy()
            assert ids.shape[-1] == tt
            number = 1 if quick else max(1, 8 * 32 // max(ts, tt))
            times = common.alternate(
                {"decode": lambda fn=fn, memory=memory: fn(memory).numpy()}, repeats, warmup=1, number=number
            )["decode"]
            stats = common.summary(times)
            rows.append({"Ts": ts, "Tt": tt, **stats})
            log(f"  {axis} Ts={ts} Tt={tt}: {stats['median_ms']:.1f} ms")
        xs = [r["Ts"] if axis == "source" else r["Tt"] for r in rows]
        ys = [r["median_ms"] for r in rows]
        half = len(xs) // 2
        results[axis] = {
            "rows": rows,
            "exponent": common.fit_exponent(xs, ys),
            "exponent_upper_half": common.fit_exponent(xs[half:], ys[half:]),
            "offset_power_fit": common.fit_offset_power(xs, ys),
        }
    return {
        "config": cfg,
        "method": f"tf.function greedy decode, median of {repeats} after warm-up",
        **results,
        "expected_exponent": 1.0,
    }
