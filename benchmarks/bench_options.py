"""Measure 8: what each decoding option costs against plain beam search.

The dates decoder of examples/translate_dates.py (`build_models()`, as in
measure 4: its seeded initial weights, the end token's logit lowered so
that every decode runs the full 11 steps), decoded by beam search (width 5) with one option
set at a time, each side its own `InferenceDecoder` over the same layers,
called through a `tf.function` (the graph a SavedModel runs) on the same
batch of dates. Sides alternate round by round (`common.alternate`); the
result is each side's median time over plain beam search's. Greedy and
sampling are timed as well, for scale, and so are decoders whose options
are run-time inputs (`runtime_options`, left at their defaults): the price
of one export serving every setting.

An option's cost depends on the model only through the vocabulary (14
here) and the length (11): the constraints add per-step work on `(batch *
beam, vocabulary)` logits, the n-gram blocking and the repetition penalty
an `O(max_length)` history per hypothesis. Early stopping can only save
steps; on this untrained model it saves none.
"""

import numpy as np

from benchmarks import common

FULL = dict(batches=(1, 32), repeats=7, number=5)
QUICK = dict(batches=(4,), repeats=2, number=1)
# --quick checks that the section runs and reports: a side of each kind is
# enough for that (each side is a decoder of its own, traced: 18 of them were
# most of the quick run's 30 s).
QUICK_SIDES = ("beam", "no_repeat_ngram_size", "coverage_penalty", "runtime_options", "greedy")
WIDTH = 5
DATES = ["tuesday 3 march 2015", "3/3/15", "Mar 3, 2015", "03.03.2015", "the 1st of may 1999", "2001-07-04"]

BEAM_RUNTIME = (
    "max_length",
    "min_length",
    "length_penalty_weight",
    "coverage_penalty_weight",
    "repetition_penalty",
    "no_repeat_ngram_size",
)
# side: (constructor options, extra inputs it takes)
SIDES = {
    "beam": ({}, ()),
    "min_length": ({"min_length": 5}, ()),
    "max_length_ratio": ({"max_length_ratio": 1.0, "max_length_offset": 2.0}, ()),
    "suppress_tokens": ({"suppress_tokens": [3]}, ()),
    "allowed_tokens": ({}, ("allowed_tokens",)),
    "target_prefix": ({}, ("target_prefix",)),
    "repetition_penalty": ({"repetition_penalty": 1.2}, ()),
    "no_repeat_ngram_size": ({"no_repeat_ngram_size": 3}, ()),
    "length_penalty": ({"length_penalty_weight": 0.6}, ()),
    "coverage_penalty": ({"coverage_penalty_weight": 0.2}, ()),
    "early_stopping": ({"early_stopping": True}, ()),
    "num_hypotheses_1": ({"num_hypotheses": 1}, ()),
    "token_log_probs": ({"return_token_log_probs": True}, ()),
    "no_alignments": ({"return_alignments": False}, ()),
    "runtime_options": ({"runtime_options": BEAM_RUNTIME}, ("options",)),
    "greedy": ({"method": "greedy"}, ()),
    "sample_top_k_top_p": ({"method": "sample", "top_k": 5, "top_p": 0.9, "seed": 0}, ()),
    "sample_runtime_options": (
        {"method": "sample", "seed": 0, "runtime_options": ("temperature", "top_k", "top_p", "seed")},
        ("options",),
    ),
}


def _decoder_model(dates, trainer, options, inputs):
    """A decoding model over the trainer's layers, with one option set."""
    import keras

    import keras_attention as ka

    source = keras.Input((None,), dtype="int32", name="source")
    memory, _, backward = trainer.get_layer("encoder")(trainer.get_layer("source_embedding")(source))
    initial_state = trainer.get_layer("initial_state")(backward)
    decoder = ka.InferenceDecoder(
        trainer.get_layer("decoder").cell,
        trainer.get_layer("target_embedding"),
        trainer.get_layer("readout"),
        dates.START,
        dates.END,
        dates.TARGET_LENGTH,
        **{"method": "beam", "beam_width": WIDTH, **options},
    )
    feeds, arguments = {"source": source}, {}
    if "allowed_tokens" in inputs:
        feeds["allowed"] = arguments["allowed_tokens"] = keras.Input((len(dates.TARGET),), dtype="bool", name="allowed")
    if "target_prefix" in inputs:
        feeds["prefix"] = arguments["target_prefix"] = keras.Input((None,), dtype="int32", name="prefix")
    if "options" in inputs:
        arguments["options"] = decoder.option_inputs()
        feeds.update(arguments["options"])
    return keras.Model(feeds, decoder(memory, initial_state=[initial_state], **arguments))


def _feeds(dates, batch, inputs, model):
    texts = (DATES * (batch // len(DATES) + 1))[:batch]
    feeds = {"source": dates.SOURCE.encode(texts)}
    if "allowed_tokens" in inputs:
        feeds["allowed"] = np.ones((batch, len(dates.TARGET)), bool)
    if "target_prefix" in inputs:
        feeds["prefix"] = np.tile(np.array([[dates.TARGET.token_to_id("2"), -1]], "int32"), (batch, 1))
    for name in model.input if isinstance(model.input, dict) else ():
        feeds.setdefault(name, None)  # run-time options left at their defaults
    return feeds


def run(quick, log, repeats=None):
    import keras
    import tensorflow as tf

    from benchmarks.bench_serving import _dates_module

    cfg = dict(QUICK if quick else FULL)
    if repeats is not None:
        cfg["repeats"] = repeats
    dates = _dates_module()
    keras.utils.set_random_seed(0)
    trainer, _, _ = dates.build_models()
    readout = trainer.get_layer("readout")
    bias = readout.bias.numpy()
    bias[dates.END] = -50.0  # every decode runs the full length
    readout.bias.assign(bias)
    sides_run = {name: SIDES[name] for name in QUICK_SIDES} if quick else SIDES
    models = {name: _decoder_model(dates, trainer, options, inputs) for name, (options, inputs) in sides_run.items()}
    rows = {}
    for batch in cfg["batches"]:
        sides = {}
        for name, model in models.items():
            feeds = _feeds(dates, batch, SIDES[name][1], model)
            function = tf.function(lambda feeds, model=model: model(feeds, training=False)["ids"])
            sides[name] = lambda function=function, feeds=feeds: function(feeds).numpy()
            sides[name]()  # traced before the rounds
        log(f"  batch {batch}: {len(sides)} sides, {cfg['repeats']} rounds of {cfg['number']} calls")
        times = common.alternate(sides, cfg["repeats"], warmup=1, number=cfg["number"])
        medians = {name: common.summary(t) for name, t in times.items()}
        base = medians["beam"]["median_ms"]
        rows[str(batch)] = {
            "ms": medians,
            "ratio_vs_beam": {name: common.ratio(m["median_ms"], base) for name, m in medians.items()},
        }
    return {
        "config": {"beam_width": WIDTH, "steps": dates.TARGET_LENGTH, "vocabulary": len(dates.TARGET), **cfg},
        "method": (
            f"one InferenceDecoder per side over the same layers, in a tf.function; {cfg['repeats']} rounds of "
            f"{cfg['number']} calls per side, the sides alternating; median time over plain beam search's"
        ),
        "sides": {
            name: {"options": _jsonable(options), "inputs": list(inputs)}
            for name, (options, inputs) in sides_run.items()
        },
        "batches": rows,
    }


def _jsonable(options):
    return {k: list(v) if isinstance(v, tuple) else v for k, v in options.items()}


def markdown(section, table, meta):
    """The report's section 8 (results.md)."""
    cfg = section["config"]
    batches = list(section["batches"])
    out = [
        f"## 8. Decoding options against plain beam search {meta}",
        "",
        f"Beam width {cfg['beam_width']}, {cfg['steps']} steps, vocabulary {cfg['vocabulary']}; "
        f"{section['method']}. Run-time options are left at their defaults (their inputs empty).",
        "",
    ]
    header = ["side", "options"] + [f"batch {b}: ms" for b in batches] + [f"batch {b}: / beam" for b in batches]
    rows = []
    for name, side in section["sides"].items():
        shown = ", ".join(f"{k}={v}" for k, v in side["options"].items()) or "-"
        if side["inputs"]:
            shown += "; inputs: " + ", ".join(side["inputs"])
        times = [section["batches"][b]["ms"][name]["median_ms"] for b in batches]
        ratios = [f"{section['batches'][b]['ratio_vs_beam'][name]:.2f}x" for b in batches]
        rows.append([name, shown, *times, *ratios])
    return out + [table(header, rows), ""]


def summary_row(section, fmt):
    """The report's targets row: the costliest beam option, per batch."""
    costs = {
        batch: max(v for k, v in row["ratio_vs_beam"].items() if k != "greedy" and not k.startswith("sample"))
        for batch, row in section["batches"].items()
    }
    result = ", ".join(f"batch {b}: {fmt(v, 2)}x" for b, v in costs.items())
    return ["8. costliest beam option / plain beam", "reported", result, "reported"]
