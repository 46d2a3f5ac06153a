"""Measure 5: greedy decode time against source length and target length.

(a) The GRU: an `InferenceDecoder` (greedy) with an `AttentionGRUCell` +
`AdditiveAttention` over a memory of random features (the encoder is left
out: its cost is the encoder's, not the decoder's), batch 16, units 128, in a
`tf.function`. The end token can never win (its logit bias is -50), so every
decode runs exactly `max_length` steps.
- source length Ts = 16 ... 512 at target length 32;
- target length Tt = 16 ... 512 at source length 32.

(b) The Transformer, target length Tt = 16 ... 512 at source length 32:
`TransformerInferenceDecoder` (greedy, pre-norm `TransformerDecoderStack`,
d 128, 2 heads, 2 layers, feed-forward 256, sinusoidal positions,
vocabulary 64, batch 8) over a random memory, end token unable to win as in
(a), with its key/value cache, against the same layers without a cache: the
library's decoder has no uncached mode, so this benchmark builds that
baseline, a greedy `tf.while_loop` in a `tf.function` that reruns the
teacher-forced stack over the whole prefix at every step (its self-attention
and the cross-attention's key/value projections included) and takes the
argmax of the last position's logits. Both sides decode the same ids; the
shortest length asserts it. A cached step attends over the preallocated
cache of `max_length` positions (the positions after the step masked out),
so its arithmetic grows with the target length too (at 512 that attention is
about as many FLOPs as the rest of the step), but at these sizes a step's
time is mostly the fixed cost of its many small operations: the decode
scales about as Tt. An uncached step's work is proportional to the prefix's
length, so the decode scales as Tt^2, its attention as Tt^3 (about a third
of the FLOPs at 512). Neither side uses XLA, as in (a): the uncached prefix
grows, so its shapes are not fixed.

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
TRANSFORMER_FULL = dict(
    batch=8, d=128, heads=2, layers=2, ffn=256, vocabulary=64, source=32, lengths=[16, 32, 64, 128, 256, 512]
)
TRANSFORMER_QUICK = dict(batch=2, d=8, heads=2, layers=1, ffn=16, vocabulary=12, source=4, lengths=[4, 8, 16])
# Rounds per Transformer length: the uncached decode of 512 tokens takes about 30 s on the 2-core machine.
TRANSFORMER_REPEATS = 3
START, END = 1, 2


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
        start_token=START,
        end_token=END,
        max_length=max_length,
        method="greedy",
    )
    return decoder, readout


def _fits(xs, ys):
    half = len(xs) // 2
    return {
        "exponent": common.fit_exponent(xs, ys),
        "exponent_upper_half": common.fit_exponent(xs[half:], ys[half:]),
        "offset_power_fit": common.fit_offset_power(xs, ys),
    }


def _gru_axes(cfg, quick, repeats, log, rng):
    import tensorflow as tf

    results = {}
    for axis in ("source", "target"):
        rows = []
        for length in cfg["lengths"]:
            ts, tt = (length, cfg["fixed"]) if axis == "source" else (cfg["fixed"], length)
            decoder, readout = _decoder(cfg, tt)
            memory = tf.constant(rng.normal(size=(cfg["batch"], ts, cfg["units"])).astype("float32"))
            decoder(memory[:, :2])
            bias = readout.bias.numpy()
            bias[END] = -50.0
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
        results[axis] = {"rows": rows, **_fits(xs, [r["median_ms"] for r in rows])}
    return results


def _transformer_decoders(cfg, max_length):
    """(cached decoder, uncached tf.function) over the same layers, the end token's bias at -50."""
    import keras
    import tensorflow as tf

    import keras_attention as ka

    keras.utils.set_random_seed(0)
    embedding = keras.layers.Embedding(cfg["vocabulary"], cfg["d"])
    position = ka.SinusoidalPositionEncoding()
    stack = ka.TransformerDecoderStack(cfg["layers"], num_heads=cfg["heads"], intermediate_dim=cfg["ffn"])
    readout = keras.layers.Dense(cfg["vocabulary"])
    decoder = ka.TransformerInferenceDecoder(
        stack, embedding, readout, START, END, max_length, position=position, method="greedy"
    )
    decoder.build((None, None, cfg["d"]))
    bias = readout.bias.numpy()
    bias[END] = -50.0
    readout.bias.assign(bias)

    @tf.function
    def uncached(memory):
        def step(time, ids):
            hidden = stack(position(embedding(ids)), memory)  # the whole prefix, causal, every step
            chosen = tf.argmax(readout(hidden[:, -1]), axis=-1, output_type=tf.int32)
            return time + 1, tf.concat([ids, chosen[:, None]], axis=1)

        ids = tf.fill([tf.shape(memory)[0], 1], START)
        _, ids = tf.while_loop(
            lambda time, ids: time < max_length,
            step,
            [tf.constant(0), ids],
            shape_invariants=[tf.TensorShape([]), tf.TensorShape([None, None])],
        )
        return ids[:, 1:]

    cached = tf.function(lambda memory: decoder(memory)["ids"])
    return cached, uncached


def _transformer(cfg, quick, repeats, log, rng):
    import tensorflow as tf

    memory = tf.constant(rng.normal(size=(cfg["batch"], cfg["source"], cfg["d"])).astype("float32"))
    rows = []
    for length in cfg["lengths"]:
        cached, uncached = _transformer_decoders(cfg, length)
        # The first calls trace both functions and are their warm-up round.
        cached_ids, uncached_ids = cached(memory).numpy(), uncached(memory).numpy()
        assert cached_ids.shape == uncached_ids.shape == (cfg["batch"], length), (cached_ids.shape, uncached_ids.shape)
        same = float((cached_ids == uncached_ids).all(axis=1).mean())
        if length == cfg["lengths"][0]:
            assert same == 1.0, f"cached and uncached greedy ids differ at Tt={length}:\n{cached_ids}\n{uncached_ids}"
        sides = {side: lambda fn=fn: fn(memory).numpy() for side, fn in (("cached", cached), ("uncached", uncached))}
        # Short decodes are repeated within a round (as in (a)) so that a burst of load averages out.
        number = 1 if quick else max(1, cfg["lengths"][-1] // (2 * length))
        times = common.alternate(sides, repeats, warmup=0, number=number)
        stats = {side: {**common.summary(t), "calls_per_round": number} for side, t in times.items()}
        ratio = common.ratio(stats["uncached"]["median_ms"], stats["cached"]["median_ms"])
        rows.append({"Tt": length, "ms": stats, "uncached_over_cached": ratio, "rows_same_ids": same})
        log(
            f"  transformer Tt={length}: cached {stats['cached']['median_ms']:.1f} ms, "
            f"uncached {stats['uncached']['median_ms']:.1f} ms ({ratio}x), same ids in {same:.0%} of rows"
        )
    xs = [r["Tt"] for r in rows]
    return {
        "config": cfg,
        "rows": rows,
        **{side: _fits(xs, [r["ms"][side]["median_ms"] for r in rows]) for side in ("cached", "uncached")},
        # Load on a shared machine only adds time: each length's fastest round is its least disturbed.
        "fastest_round": {side: _fits(xs, [r["ms"][side]["min_ms"] for r in rows]) for side in ("cached", "uncached")},
        "expected_exponent": {"cached": 1.0, "uncached": 2.0},
        "ids_asserted_at": cfg["lengths"][0],
    }


def run(quick, log, repeats=None):
    cfg = QUICK if quick else FULL
    rng = np.random.default_rng(0)
    gru_repeats = repeats or (2 if quick else 7)
    transformer_repeats = repeats or (2 if quick else TRANSFORMER_REPEATS)
    results = _gru_axes(cfg, quick, gru_repeats, log, rng)
    transformer = _transformer(TRANSFORMER_QUICK if quick else TRANSFORMER_FULL, quick, transformer_repeats, log, rng)
    return {
        "config": cfg,
        "method": f"tf.function greedy decode, median of {gru_repeats} after warm-up",
        **results,
        "expected_exponent": 1.0,
        "transformer": {
            **transformer,
            "method": f"tf.function greedy decode, cached and uncached alternating, median of {transformer_repeats} "
            "rounds after a warm-up call (the one that compares their ids), "
            + ("one call a round" if quick else "a round of 512 / (2 Tt) calls at Tt < 256"),
        },
    }


def _fit_line(fits):
    fit = fits["offset_power_fit"]
    return (
        f"log-log slope {fits['exponent']} over the whole range, {fits['exponent_upper_half']} over the upper half; "
        f"fit time = a + b * length^k: k = {fit['k']}, a = {fit['fixed_ms']} ms "
        f"({100 * (fit['fixed_share_at_min'] or 0):.0f}% of the shortest)"
    )


def transformer_markdown(section, table, fmt):
    """The report's Transformer part of section 5 (results.md)."""
    cfg = section["config"]
    rows = [
        [
            r["Tt"],
            r["ms"]["cached"]["median_ms"],
            r["ms"]["uncached"]["median_ms"],
            fmt(r["uncached_over_cached"], 2) + "x",
            f"{r['rows_same_ids']:.0%}",
        ]
        for r in section["rows"]
    ]
    out = [
        f"The Transformer (`TransformerInferenceDecoder`, greedy; d {cfg['d']}, {cfg['heads']} heads, "
        f"{cfg['layers']} layers, feed-forward {cfg['ffn']}, vocabulary {cfg['vocabulary']}, batch {cfg['batch']}, "
        f"Ts={cfg['source']}) with its key/value cache, against the same layers rerun over the whole prefix at "
        f"every step (a baseline built in the benchmark); {section['method']}. Same ids asserted at "
        f"Tt={section['ids_asserted_at']}.",
        "",
        table(["Tt", "cached ms", "uncached ms", "uncached / cached", "rows with the same ids"], rows),
        "",
    ]
    for side in ("cached", "uncached"):
        line = f"{side}: {_fit_line(section[side])}."
        if "fastest_round" in section:
            line += f" On each length's fastest round: {_fit_line(section['fastest_round'][side])}."
        out += [line, ""]
    return out


def transformer_summary_rows(section):
    """The report's targets rows for the Transformer."""
    out = []
    for side, expected in section["expected_exponent"].items():
        fits = section[side]
        result = (
            f"slope {fits['exponent']} (upper half {fits['exponent_upper_half']}); "
            f"k = {fits['offset_power_fit']['k']} in a + b L^k"
        )
        if "fastest_round" in section:
            fastest = section["fastest_round"][side]
            result += f"; fastest rounds: slope {fastest['exponent']} ({fastest['exponent_upper_half']})"
        out.append([f"5. Transformer exponent vs target length, {side}", f"about {expected:g}", result, "reported"])
    return out
