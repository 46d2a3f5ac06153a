"""Measure 11: our Transformer against keras-hub's, at equal size and with the same weights.

The model (issue 33's size): d 256, 4 heads, feed-forward 1024, 3 encoder +
3 decoder layers, pre-norm (keras-hub's `normalize_first=True`, a final
layer normalisation after each side's last layer), batch 64, source and
target length 32, vocabulary 1000, full-length sequences (no padding). The
keras-hub layers (`keras_hub.layers.TransformerEncoder` / `TransformerDecoder`)
are built first; ours are made from them by
`keras_attention.keras_hub_import.from_keras_hub`, so both sides hold the
same weights. The embedding, the sinusoidal positions and the read-out are
the same layer objects on both sides: only the Transformer layers differ.

(a) Training step: sparse cross-entropy from logits, Adam,
`model.train_on_batch` (Keras's compiled train step), each side without and
with XLA; ratios best against best. The arithmetic limit: the step's matmul
FLOPs (`train_flops`: 3x the forward's products) at this machine's float32
matmul rate measured in the same run (`bench_decoder.matmul_rate`), as
measure 1 does for the RNN.

(b) Cached greedy decoding, tokens per second: 32 tokens for each of the 64
rows from a given encoder memory (the encoder is not timed). Ours:
`TransformerInferenceDecoder(method="greedy")` in a compiled
`predict_on_batch`. keras-hub's: its `GreedySampler` driving its decoder
layers through a `next(prompt, cache, index)` function with their
self-attention caches (`self_attention_cache`,
`self_attention_cache_update_index`) and the cross-attention's keys and
values computed once (`cross_attention_cache_update_index=None`), the way
keras-hub's BART generates, in the same compiled `predict_on_batch`. The
end token's read-out bias is set to -1e4 so that neither side stops early:
both decode all 32 steps. The share of rows each side decodes as ours does
is reported.

(c) Beam search, beam 4: ours (`method="beam"`, no length penalty) against
keras-hub's `BeamSampler(num_beams=4)` over the same `next` function (it
reorders the caches with the beams); tokens per second count the best
beam's 32 tokens per row. keras-hub's beam search without XLA is left out
of the full run: it took about 34 s a call (against 10 s with XLA) in the
first run of this section (2026-11-27), and would have made the section 4
minutes longer. keras-hub's beam search ranks by the summed
log-probability, as ours without a length penalty.

The machine may be shared (the coordinator's test suite ran beside the
committed run): the sides alternate round by round, so the ratios hold
where the absolute timings do not.
"""

import numpy as np

from benchmarks import common
from benchmarks.bench_decoder import matmul_rate

FULL = dict(batch=64, length=32, d=256, heads=4, ffn=1024, layers=3, vocabulary=1000, beam=4)
QUICK = dict(batch=4, length=5, d=16, heads=2, ffn=32, layers=1, vocabulary=50, beam=2)
START, END = 1, 2
# --quick checks that the section runs: without the XLA sides, whose compilations take a minute.
JIT = {False: (False, True), True: (False,)}
TARGETS = {"train_vs_keras_hub": 1.0, "train_over_limit": 2.0, "greedy_vs_keras_hub": 1.5}


def train_flops(cfg):
    """Matmul FLOPs of one training step: 3x the forward's (the backward's two products per matmul)."""
    b, t, d, f, layers, v = (cfg[k] for k in ("batch", "length", "d", "ffn", "layers", "vocabulary"))
    tokens = b * t
    projections = 4 * 2 * tokens * d * d  # query, key, value, output
    scores = 2 * 2 * tokens * t * d  # Q K^T and the weights times V, every head
    feed_forward = 2 * 2 * tokens * d * f
    encoder = projections + scores + feed_forward
    decoder = 2 * projections + 2 * scores + feed_forward  # self- and cross-attention
    readout = 2 * tokens * d * v
    return 3 * (layers * (encoder + decoder) + readout)


def _build(cfg):
    import keras
    import keras_hub

    import keras_attention as ka
    from keras_attention.keras_hub_import import from_keras_hub

    keras.utils.set_random_seed(0)
    d = cfg["d"]
    options = dict(intermediate_dim=cfg["ffn"], num_heads=cfg["heads"], normalize_first=True)
    hub = {
        "encoders": [keras_hub.layers.TransformerEncoder(**options) for _ in range(cfg["layers"])],
        "decoders": [keras_hub.layers.TransformerDecoder(**options) for _ in range(cfg["layers"])],
        "encoder_norm": keras.layers.LayerNormalization(epsilon=1e-5),
        "decoder_norm": keras.layers.LayerNormalization(epsilon=1e-5),
    }
    for layer in hub["encoders"]:
        layer.build((None, None, d))
    for layer in hub["decoders"]:
        layer.build((None, None, d), (None, None, d))
    for norm in (hub["encoder_norm"], hub["decoder_norm"]):
        norm.build((None, None, d))
    ours = {
        "encoder": from_keras_hub(hub["encoders"], final_norm=hub["encoder_norm"]),
        "decoder": from_keras_hub(hub["decoders"], final_norm=hub["decoder_norm"]),
    }
    shared = {
        "embedding": keras.layers.Embedding(cfg["vocabulary"], d),
        "position": ka.SinusoidalPositionEncoding(),
        "readout": keras.layers.Dense(cfg["vocabulary"]),
    }
    shared["embedding"].build((None, None))
    shared["readout"].build((None, None, d))
    # The end token never wins: every side decodes every step.
    bias = keras.ops.convert_to_numpy(shared["readout"].bias).copy()
    bias[END] = -1e4
    shared["readout"].bias.assign(bias)
    return hub, ours, shared


def _trainers(cfg, hub, ours, shared):
    """Teacher-forced models, (source, target inputs) -> logits: ours and keras-hub's."""
    import keras

    embed = lambda ids: shared["position"](shared["embedding"](ids))  # noqa: E731

    source = keras.Input((cfg["length"],), dtype="int32")
    target = keras.Input((cfg["length"],), dtype="int32")
    memory = ours["encoder"](embed(source))
    ours_model = keras.Model([source, target], shared["readout"](ours["decoder"](embed(target), memory)))

    source = keras.Input((cfg["length"],), dtype="int32")
    target = keras.Input((cfg["length"],), dtype="int32")
    memory = embed(source)
    for layer in hub["encoders"]:
        memory = layer(memory)
    memory = hub["encoder_norm"](memory)
    hidden = embed(target)
    for layer in hub["decoders"]:
        hidden = layer(hidden, memory)
    hub_model = keras.Model([source, target], shared["readout"](hub["decoder_norm"](hidden)))
    return ours_model, hub_model


def _hub_generator(cfg, hub, shared, sampler):
    """keras-hub's cached generation: its sampler over `next(prompt, cache, index)`, BART's way."""
    import keras
    from keras import ops

    decoders, heads, d = hub["decoders"], cfg["heads"], cfg["d"]
    steps = cfg["length"]

    class KerasHubGeneration(keras.Model):
        def call(self, memory):
            batch = ops.shape(memory)[0]
            # The cross-attention's keys and values, once per sequence (BART's _build_cache).
            cross = ops.stack(
                [
                    ops.stack(
                        [
                            layer._cross_attention_layer._key_dense(memory),
                            layer._cross_attention_layer._value_dense(memory),
                        ],
                        axis=1,
                    )
                    for layer in decoders
                ],
                axis=1,
            )  # (B, layers, 2, Ts, H, k)
            own = ops.zeros((batch, len(decoders), 2, steps + 1, heads, d // heads), memory.dtype)
            prompt = ops.concatenate([ops.full((batch, 1), START, "int32"), ops.zeros((batch, steps), "int32")], axis=1)
            mask = ops.concatenate([ops.ones((batch, 1), "bool"), ops.zeros((batch, steps), "bool")], axis=1)

            def next(prompt, cache, index):
                own, cross = cache
                previous = ops.slice(prompt, [0, index - 1], [ops.shape(prompt)[0], 1])
                x = shared["position"](shared["embedding"](previous), start=index - 1)
                updated = []
                for i, layer in enumerate(decoders):
                    x, layer_cache, _ = layer(
                        x,
                        x,  # unused with a cross cache and no update index: the keys and values come cached
                        self_attention_cache=own[:, i],
                        self_attention_cache_update_index=index - 1,
                        cross_attention_cache=cross[:, i],
                        cross_attention_cache_update_index=None,
                    )
                    updated.append(layer_cache)
                logits = ops.squeeze(shared["readout"](hub["decoder_norm"](x)), 1)
                return logits, None, (ops.stack(updated, axis=1), cross)

            ids = sampler(next, prompt, cache=(own, cross), index=1, mask=mask)
            return ids[:, 1:]

    return KerasHubGeneration()


def _our_generator(ours, shared, cfg, **options):
    import keras

    import keras_attention as ka

    decoder = ka.TransformerInferenceDecoder(
        ours["decoder"],
        shared["embedding"],
        shared["readout"],
        START,
        END,
        cfg["length"],
        position=shared["position"],
        **options,
    )

    class OurGeneration(keras.Model):
        def call(self, memory):
            ids = decoder(memory)["ids"]
            return ids[:, 0] if len(ids.shape) == 3 else ids  # the best beam

    return OurGeneration()


def _compiled(model, jit):
    model.compile(jit_compile=jit)
    return model


def _decode_section(cfg, models, memory, repeats, log):
    """Tokens per second of each side, and the share of rows each decodes as ours does."""
    ids = {name: np.asarray(model.predict_on_batch(memory)) for name, model in models.items()}
    # Each side against ours (without XLA): the share of rows decoded alike.
    reference = ids["keras_attention"]
    agreement = {name: round(float(np.mean(np.all(i == reference, axis=1))), 4) for name, i in ids.items()}
    sides = {name: (lambda m=model: m.predict_on_batch(memory)) for name, model in models.items()}
    times = common.alternate(sides, repeats, warmup=1, number=1, log=log)
    step_ms = {name: common.summary(t) for name, t in times.items()}
    tokens = cfg["batch"] * cfg["length"]
    per_second = {name: round(tokens / (s["median_ms"] / 1000), 1) for name, s in step_ms.items()}
    best = {
        side: max(v for k, v in per_second.items() if k.startswith(side)) for side in ("keras_attention", "keras_hub")
    }
    return {
        "decode_ms": step_ms,
        "tokens_per_second": per_second,
        "best_tokens_per_second": best,
        "best_vs_keras_hub": common.ratio(best["keras_attention"], best["keras_hub"]),
        "rows_as_ours": agreement,
    }


def run(quick, log, repeats=None):
    import keras
    import keras_hub

    from keras_attention.keras_hub_import import copy_from_keras_hub
    from keras_attention.training import build_optimizer

    cfg = dict(QUICK if quick else FULL)
    repeats = repeats or (2 if quick else 5)
    result = {"config": cfg, "keras_hub_version": keras_hub.__version__, "method": __doc__.split("\n\n")[1]}
    hub, ours, shared = _build(cfg)
    rng = np.random.default_rng(0)
    source = rng.integers(3, cfg["vocabulary"], (cfg["batch"], cfg["length"])).astype("int32")
    target = rng.integers(3, cfg["vocabulary"], (cfg["batch"], cfg["length"])).astype("int32")
    labels = rng.integers(3, cfg["vocabulary"], (cfg["batch"], cfg["length"])).astype("int32")

    # (a) the training step.
    log("  training step")
    ours_model, hub_model = _trainers(cfg, hub, ours, shared)
    same_logits = float(
        np.max(np.abs(ours_model.predict_on_batch([source, target]) - hub_model.predict_on_batch([source, target])))
    )
    result["max_abs_logit_diff"] = same_logits
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    sides = {}
    for name, model in (("keras_attention", ours_model), ("keras_hub", hub_model)):
        for jit in JIT[quick]:
            # One graph, two compiled models over the same layers: with and without XLA.
            compiled = keras.Model(model.inputs, model.outputs) if jit else model
            compiled.compile(keras.optimizers.Adam(1e-4), loss, jit_compile=jit)
            build_optimizer(compiled)
            sides[name + ("_xla" if jit else "")] = lambda m=compiled: m.train_on_batch([source, target], labels)
    times = common.alternate(sides, repeats, warmup=1, number=1, log=log)
    result["train_step_ms"] = {name: common.summary(t) for name, t in times.items()}
    med = {name: s["median_ms"] for name, s in result["train_step_ms"].items()}
    best = {side: min(v for k, v in med.items() if k.startswith(side)) for side in ("keras_attention", "keras_hub")}
    result["train_best_ms"] = best
    result["train_vs_keras_hub"] = common.ratio(best["keras_hub"], best["keras_attention"])
    flops = train_flops(cfg)
    size = 256 if quick else 1024
    rate = matmul_rate(size)
    limit_ms = 1000.0 * flops / (rate * 1e9)
    result["arithmetic_limit"] = {
        "train_gflop": round(flops / 1e9, 3),
        "matmul_size": size,
        "matmul_gflops": round(rate, 1),
        "limit_ms": round(limit_ms, 6),
        "best_over_limit": common.ratio(best["keras_attention"], limit_ms),
        "keras_hub_best_over_limit": common.ratio(best["keras_hub"], limit_ms),
    }

    # (b) cached greedy decoding, (c) beam search: from one encoder memory. The training steps
    # moved each side's weights its own way: ours take keras-hub's again.
    copy_from_keras_hub(hub["decoders"], ours["decoder"], final_norm=hub["decoder_norm"])
    memory = keras.ops.convert_to_numpy(ours["encoder"](shared["position"](shared["embedding"](source))))
    for section, hub_sampler, options in (
        ("greedy", keras_hub.samplers.GreedySampler(), {"method": "greedy"}),
        (
            "beam",
            keras_hub.samplers.BeamSampler(num_beams=cfg["beam"]),
            {"method": "beam", "beam_width": cfg["beam"]},
        ),
    ):
        log(f"  {section} decoding")
        models = {}
        for jit in JIT[quick]:
            suffix = "_xla" if jit else ""
            models["keras_attention" + suffix] = _compiled(_our_generator(ours, shared, cfg, **options), jit)
            if not (section == "beam" and not jit and not quick):
                models["keras_hub" + suffix] = _compiled(_hub_generator(cfg, hub, shared, hub_sampler), jit)
        result[section] = _decode_section(cfg, models, memory, repeats, log)
    result["targets"] = TARGETS
    return result


def markdown(section, table, meta):
    """The report's section 11 (results.md)."""
    cfg, limit = section["config"], section["arithmetic_limit"]
    out = [
        f"## 11. The Transformer against keras-hub's {meta}",
        "",
        section["method"].replace("\n", " ") + f" keras-hub {section['keras_hub_version']}; the two trainers' "
        f"logits differ by at most {section['max_abs_logit_diff']:.1e} before training.",
        "",
    ]
    rows = [[name, s["median_ms"], s["min_ms"], s["max_ms"]] for name, s in section["train_step_ms"].items()]
    out += [
        table(["training step", "median ms", "min", "max"], rows),
        "",
        f"Best against best: keras-hub / ours = {section['train_vs_keras_hub']}x. The step's matmul work, "
        f"{limit['train_gflop']} GFLOP, at this machine's {limit['matmul_gflops']} GFLOP/s "
        f"({limit['matmul_size']}-square product, same run) takes {limit['limit_ms']:.1f} ms: ours takes "
        f"{limit['best_over_limit']}x that, keras-hub {limit['keras_hub_best_over_limit']}x.",
        "",
    ]
    for name, title in (("greedy", "cached greedy decoding"), ("beam", f"beam search (beam {cfg['beam']})")):
        s = section[name]
        rows = [[side, s["decode_ms"][side]["median_ms"], s["tokens_per_second"][side]] for side in s["decode_ms"]]
        out += [
            table([title, "median ms", "tokens / s"], rows),
            "",
            f"Best against best: ours / keras-hub = {s['best_vs_keras_hub']}x tokens per second; "
            "Rows decoded as ours (without XLA) decodes them: "
            + ", ".join(f"{side} {share:.1%}" for side, share in s["rows_as_ours"].items() if side != "keras_attention")
            + " (the same weights; logits that differ by about 1e-6 between the implementations can swap "
            "near-tied tokens of an untrained model, and the rest of the row follows).",
            "",
        ]
    return out


def summary_rows(section, fmt, met):
    """The report's targets rows."""
    limit, target = section["arithmetic_limit"], section["targets"]
    return [
        [
            "11. Transformer train step vs keras-hub",
            f">= {target['train_vs_keras_hub']:g}x",
            f"{fmt(section['train_vs_keras_hub'], 2)}x best against best",
            met(section["train_vs_keras_hub"], target["train_vs_keras_hub"]),
        ],
        [
            "11. Transformer train step / its arithmetic limit",
            f"<= {target['train_over_limit']:g}x",
            f"{fmt(limit['best_over_limit'], 2)}x ({section['train_best_ms']['keras_attention']:.1f} ms against "
            f"{limit['limit_ms']:.1f} ms)",
            met(limit["best_over_limit"], target["train_over_limit"], higher=False),
        ],
        [
            "11. cached greedy tokens/s vs keras-hub",
            f">= {target['greedy_vs_keras_hub']:g}x",
            f"{fmt(section['greedy']['best_vs_keras_hub'], 2)}x best against best",
            met(section["greedy"]["best_vs_keras_hub"], target["greedy_vs_keras_hub"]),
        ],
        [
            "11. beam search tokens/s vs keras-hub",
            "reported",
            f"{fmt(section['beam']['best_vs_keras_hub'], 2)}x best against best",
            "reported",
        ],
    ]
