"""Measure 1: attention-decoder training step (teacher forcing).

The same model on every side: source ids -> Embedding(V, E) -> Dense(units,
tanh) = memory; target ids -> Embedding(V, E) -> GRU cell with Bahdanau
attention (attention units = units), input feeding, the context as the
attention output (tfa's `attention_layer_size=None`) -> Dense(V) -> sparse
cross-entropy from logits, Adam. One training step on a fixed batch.

Sides:
- keras_attention: `AttentionDecoder(AttentionWrapper(GRUCell, AdditiveAttention))`,
  `model.train_on_batch` (Keras's compiled train step), without and with XLA.
- plain_keras: a `keras.layers.RNN` over a hand-written cell that projects
  the memory keys inside the step (what a straightforward Keras 3 port does),
  `model.train_on_batch`.
- tfa: `tfa.seq2seq.AttentionWrapper(GRUCell, BahdanauAttention)` with
  `BasicDecoder` + `TrainingSampler` in a `tf.function` train step, in the
  tensorflow-cpu 2.15.1 + tensorflow-addons 0.23.0 environment, in a worker
  process (peers/tfa_decoder.py) timed alternately with the others.
- gru_no_attention: a lower bound, not a competitor: the same model with a
  bare `keras.layers.GRU` (input width embedding + units, as with input
  feeding) and no attention at all. Any attention decoder built on a Keras
  GRU cell costs at least this much.

Ratios are reported per configuration and best against best (each side at
its faster setting, with or without XLA), which is what a user tuning either
side would run. A probe at longer sources (Ts = 64, 128; full runs only)
shows how the ratio to the plain loop changes with Ts: the per-step key
projection the library saves grows with Ts, but so does the attention's
`(B, Ts, units)` tanh block that every side computes at every step.

The arithmetic limit (issue 19's third target): the step's matmul FLOPs
(`train_flops`) at this machine's float32 matmul rate, measured in the same
run on a square product (`matmul_rate`); ours at its faster setting should
take at most 2.5x that.

Where ours spends its XLA step (2026-11-26, one session, B=64 as above,
each pair alternating in one process): additive attention 29.2 ms, the same
decoder with dot-product attention 25.4 ms, the bare GRU 20.9 ms, so the
additive score's tanh block costs about 3.7 ms and the rest of the
attention (softmax, context, the fed-back attention state) about 4.5 ms.
Tried and not kept: a hand-fused GRU step (the target embeddings' gate
projections for all steps in one product before the loop, and the
recurrent gates and the attention query in one product per step) ran
31.8 ms against 29.0 ms; the context as a broadcast product and sum instead
of a batched matmul, 31.5 ms against 27.9; the score's sum over `units` as
a broadcast product (33.4 against 28.1) or a matmul (30.9 against 28.6)
instead of the einsum. Rematerialising the tanh block in the backward pass
(`keras.remat` around the score) was the one gain, 26.8 against 28.1 ms
(-4.6%), too little to reach the targets alone.
"""

import json
import os

import numpy as np

from benchmarks import common

FULL = dict(batch=64, source_length=32, target_length=32, embedding=64, units=128, vocabulary=1000)
QUICK = dict(batch=4, source_length=6, target_length=5, embedding=8, units=16, vocabulary=50)
TFA_ENV = os.path.join(common.HERE, "peers", ".venv-tfa")
TFA_PYTHON = os.path.join(TFA_ENV, "bin", "python")
TFA_BUILD = os.path.join(common.HERE, "peers", "build_tfa_env.sh")


def data(cfg, seed=0):
    rng = np.random.default_rng(seed)
    b, v = cfg["batch"], cfg["vocabulary"]
    source = rng.integers(1, v, size=(b, cfg["source_length"])).astype("int32")
    target_in = rng.integers(1, v, size=(b, cfg["target_length"])).astype("int32")
    target_out = rng.integers(1, v, size=(b, cfg["target_length"])).astype("int32")
    return source, target_in, target_out


def _compile(model, jit):
    import keras

    import keras_attention as ka

    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit,
    )
    return ka.training.build_optimizer(model)


def _seq2seq(cfg, jit, decoder):
    """The model every side shares: source ids -> Embedding -> Dense(tanh) =
    memory; target ids -> Embedding -> `decoder(embedded, memory)` ->
    Dense(vocabulary) logits; compiled."""
    import keras

    keras.utils.set_random_seed(0)
    v, e, u = cfg["vocabulary"], cfg["embedding"], cfg["units"]
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    memory = keras.layers.Dense(u, activation="tanh")(keras.layers.Embedding(v, e)(source))
    outputs = decoder(keras.layers.Embedding(v, e)(target_in), memory)
    logits = keras.layers.Dense(v)(outputs)
    return _compile(keras.Model([source, target_in], logits), jit)


def build_ours(cfg, jit=False):
    import keras

    import keras_attention as ka

    u = cfg["units"]
    cell = ka.AttentionWrapper(keras.layers.GRUCell(u), ka.AdditiveAttention(u))
    return _seq2seq(cfg, jit, ka.AttentionDecoder(cell))


def build_plain(cfg, jit=False):
    """A Keras 3 decoder written the straightforward way: the memory keys
    are projected inside the step, so at every target position."""
    import keras
    from keras import ops

    class NaiveBahdanauCell(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.units = units
            self.gru = keras.layers.GRUCell(units)
            self.query_layer = keras.layers.Dense(units, use_bias=False)
            self.key_layer = keras.layers.Dense(units, use_bias=False)
            self.score_layer = keras.layers.Dense(1, use_bias=False)
            self.memory = None
            self.state_size = [units, units]
            self.output_size = units

        def build(self, input_shape):
            self.gru.build((None, input_shape[-1] + self.units))
            self.query_layer.build((None, self.units))
            self.key_layer.build((None, None, self.units))
            self.score_layer.build((None, None, self.units))
            self.built = True

        def call(self, inputs, states):
            state, previous_context = states
            output, new_states = self.gru(ops.concatenate([inputs, previous_context], -1), [state])
            keys = self.key_layer(self.memory)  # (B, Ts, units): every step
            hidden = ops.tanh(ops.expand_dims(self.query_layer(output), 1) + keys)
            weights = ops.softmax(ops.squeeze(self.score_layer(hidden), -1), axis=-1)
            context = ops.squeeze(ops.matmul(ops.expand_dims(weights, 1), self.memory), 1)
            return context, [new_states[0], context]

    class NaiveDecoder(keras.layers.Layer):
        def __init__(self, units, **kwargs):
            super().__init__(**kwargs)
            self.cell = NaiveBahdanauCell(units)
            self.rnn = keras.layers.RNN(self.cell, return_sequences=True)

        def build(self, inputs_shape, memory_shape):
            self.rnn.build(inputs_shape)
            self.built = True

        def call(self, inputs, memory):
            self.cell.memory = memory
            return self.rnn(inputs)

        def compute_output_shape(self, inputs_shape, memory_shape):
            return (*inputs_shape[:2], self.cell.units)

    return _seq2seq(cfg, jit, NaiveDecoder(cfg["units"]))


def build_gru_floor(cfg, jit=False):
    """The lower bound: a bare Keras GRU over [y ; mean memory] (the decoder
    GRU's input width with input feeding), no attention."""
    import keras
    from keras import ops

    u = cfg["units"]

    def decoder(embedded, memory):
        summary = keras.layers.Lambda(
            lambda t: ops.concatenate(
                [t[0], ops.broadcast_to(ops.mean(t[1], axis=1, keepdims=True), (*ops.shape(t[0])[:2], u))], axis=-1
            )
        )([embedded, memory])
        return keras.layers.GRU(u, return_sequences=True)(summary)

    return _seq2seq(cfg, jit, decoder)


def tfa_status():
    """(available, reason)."""
    if os.path.exists(TFA_PYTHON) and os.path.exists(os.path.join(TFA_ENV, ".complete")):
        return True, "tfa environment found"
    return False, f"no tfa environment at {TFA_ENV} (build it with {TFA_BUILD})"


def _tfa_command(cfg, *extra):
    """argv and environment of a tfa worker (peers/tfa_decoder.py)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONWARNINGS="ignore")
    env.pop("KERAS_BACKEND", None)
    return [TFA_PYTHON, "-m", "benchmarks.peers.tfa_decoder", json.dumps(cfg), *extra], env


def build_tfa_env(log):
    import subprocess

    log(f"  building the tfa peer environment ({TFA_BUILD}) ...")
    subprocess.run(["bash", TFA_BUILD], check=True)


def run(quick, log, want_tfa=True, build_tfa=False, repeats=None, profile=None):
    profile = (not quick) if profile is None else profile
    cfg = QUICK if quick else FULL
    repeats = repeats or (2 if quick else 7)
    number = 1 if quick else 3
    source, target_in, target_out = data(cfg)
    x = [source, target_in]

    sides = {}
    result = {
        "config": cfg,
        "steps_per_rep": number,
        "method": (
            "train_on_batch (Keras) / tf.function train step (tfa) on one fixed batch; "
            f"{repeats} alternating rounds after 1 warm-up round, {number} steps per round; median per step"
        ),
    }
    peers = {}
    if want_tfa:
        available, reason = tfa_status()
        if not available and build_tfa:
            build_tfa_env(log)
            available, reason = tfa_status()
        if available:
            log("  starting the tfa workers ...")  # they start up while ours build
            # (--quick keeps one tfa worker: the suite check, not the figures.)
            peers = {
                name: _tfa_worker(cfg, jit) for name, jit in (("tfa", False), ("tfa_xla", True)) if not (quick and jit)
            }
        else:
            result["tfa_skipped"] = reason
            log(f"  tfa peer skipped: {reason}")
    else:
        result["tfa_skipped"] = "not requested"
    models = {}
    for name, builder, jit in (
        ("keras_attention", build_ours, False),
        ("keras_attention_xla", build_ours, True),
        ("plain_keras", build_plain, False),
        ("plain_keras_xla", build_plain, True),
        ("gru_no_attention", build_gru_floor, False),
        ("gru_no_attention_xla", build_gru_floor, True),
    ):
        if quick and name in ("plain_keras_xla", "gru_no_attention_xla"):
            continue
        models[name] = builder(cfg, jit)
        sides[name] = lambda m=models[name]: m.train_on_batch(x, target_out)
    parameters = {name: int(sum(np.prod(w.shape) for w in m.trainable_weights)) for name, m in models.items()}

    for name, peer in peers.items():
        sides[name] = peer
        parameters[name] = peer.info.get("parameters")
        result["tfa_versions"] = peer.info.get("versions")
    result["parameters"] = parameters
    try:
        times = common.alternate(sides, repeats, warmup=1, number=number, log=log)
    finally:
        for side in sides.values():
            if isinstance(side, common.RemoteSide):
                side.close()
    result["step_ms"] = {name: common.summary(t) for name, t in times.items()}
    med = {name: s["median_ms"] for name, s in result["step_ms"].items()}
    result["speedup"] = {
        "vs_plain_keras": common.ratio(med["plain_keras"], med["keras_attention"]),
        "xla_vs_plain_keras": common.ratio(med["plain_keras"], med["keras_attention_xla"]),
    }
    if "plain_keras_xla" in med:
        result["speedup"]["xla_vs_plain_keras_xla"] = common.ratio(med["plain_keras_xla"], med["keras_attention_xla"])
    if "tfa" in med:
        result["speedup"]["vs_tfa"] = common.ratio(med["tfa"], med["keras_attention"])
        result["speedup"]["xla_vs_tfa"] = common.ratio(med["tfa"], med["keras_attention_xla"])
    if "tfa_xla" in med:
        result["speedup"]["xla_vs_tfa_xla"] = common.ratio(med["tfa_xla"], med["keras_attention_xla"])
    best = {
        side: min(v for k, v in med.items() if k in (side, side + "_xla"))
        for side in ("keras_attention", "plain_keras", "tfa", "gru_no_attention")
        if side in med
    }
    result["best_ms"] = best
    result["best_vs_best"] = {
        f"vs_{side}": common.ratio(best[side], best["keras_attention"]) for side in best if side != "keras_attention"
    }
    flops = train_flops(cfg)
    result["train_flops"] = flops
    result["train_gflop"] = {k: round(v / 1e9, 3) for k, v in flops.items()}
    result["achieved_gflops"] = {
        name: round(flops["plain" if name.startswith("plain") else "ours"] / (ms / 1000) / 1e9, 1)
        for name, ms in med.items()
        if not name.startswith("gru")
    }
    size = 256 if quick else 1024
    rate = matmul_rate(size)
    limit_ms = 1000.0 * flops["ours"] / (rate * 1e9)
    result["arithmetic_limit"] = {
        "matmul_size": size,
        "matmul_gflops": round(rate, 1),
        "limit_ms": round(limit_ms, 6),
        "best_over_limit": common.ratio(best["keras_attention"], limit_ms),
    }
    result["targets"] = {"vs_tfa": 2.0, "vs_plain_keras": 2.0, "best_over_limit": 2.5}
    if profile:
        result["profile"] = profile_sides(cfg, models, x, target_out, log)
    if not quick:
        # After the profile: the probe's extra models inflate its op counts.
        result["source_length_probe"] = source_length_probe(cfg, log, repeats=max(3, repeats - 2))
    return result


def source_length_probe(cfg, log, lengths=(64, 128), repeats=5):
    """Ours (with and without XLA) against the plain loop at longer sources."""
    rows = []
    for length in lengths:
        probe = dict(cfg, source_length=length)
        source, target_in, target_out = data(probe)
        x = [source, target_in]
        models = {
            "keras_attention": build_ours(probe),
            "keras_attention_xla": build_ours(probe, True),
            "plain_keras": build_plain(probe),
        }
        sides = {name: (lambda m=m, x=x, y=target_out: m.train_on_batch(x, y)) for name, m in models.items()}
        log(f"  source length {length}:")
        times = common.alternate(sides, repeats, warmup=1, number=2, log=log)
        med = {name: common.summary(t)["median_ms"] for name, t in times.items()}
        rows.append(
            {
                "source_length": length,
                "step_ms": med,
                "vs_plain_keras": common.ratio(med["plain_keras"], med["keras_attention"]),
                "best_vs_plain_keras": common.ratio(
                    med["plain_keras"], min(med["keras_attention"], med["keras_attention_xla"])
                ),
            }
        )
    return rows


def _tfa_worker(cfg, jit):
    argv, env = _tfa_command(dict(cfg, jit=jit))
    return common.RemoteSide(argv, env=env, cwd=common.ROOT)


def train_flops(cfg):
    """Floating-point operations of one training step (3x the forward's
    matmul FLOPs: forward, and two products per matmul in the backward).
    Elementwise work (tanh, softmax, gates) is left out."""
    b, ts, tt, e, u, v = (
        cfg[k] for k in ("batch", "source_length", "target_length", "embedding", "units", "vocabulary")
    )
    encoder = 2 * b * ts * e * u
    keys = 2 * b * ts * u * u
    step = 2 * b * ((e + u) * 3 * u + u * 3 * u)  # GRU on [y ; a_{t-1}]
    step += 2 * b * u * u + 2 * b * ts * u  # query projection, context
    readout = 2 * b * tt * u * v
    ours = 3 * (encoder + keys + tt * step + readout)
    plain = 3 * (encoder + tt * (keys + step) + readout)
    return {"ours": ours, "plain": plain}


def matmul_rate(n, repeats=7):
    """This machine's float32 matmul rate (GFLOP/s) as the step's products
    could at best run: a square (n x n) product in TensorFlow (oneDNN, every
    core), the median of `repeats` timed calls after a warm-up. The step's
    arithmetic limit is its matmul FLOPs (`train_flops`) at this rate."""
    import tensorflow as tf

    rng = np.random.default_rng(0)
    a, b = (tf.constant(rng.standard_normal((n, n)), tf.float32) for _ in range(2))
    # The sum makes each call wait for its product (a scalar comes back).
    product = tf.function(lambda: tf.reduce_sum(tf.matmul(a, b)))
    product()
    seconds = sorted(common.time_calls(lambda: product().numpy(), 3) for _ in range(repeats))
    return 2.0 * n**3 / seconds[len(seconds) // 2] / 1e9


def profile_sides(cfg, models, x, target_out, log):
    """Op-level profile (TensorFlow profiler) of one training step per side."""
    out = {}
    for name in ("keras_attention", "plain_keras", "keras_attention_xla"):
        model = models[name]
        out[name] = common.profile_ops(lambda m=model: m.train_on_batch(x, target_out))
        log(f"  profile {name}: {out[name]['wall_ms_per_step']} ms, {out[name]['ops_per_step']} ops/step")
    if tfa_status()[0]:
        import subprocess

        argv, env = _tfa_command(cfg, "--profile")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=common.ROOT, stdin=subprocess.DEVNULL)
        if proc.returncode == 0:
            out["tfa"] = json.loads(proc.stdout.strip().splitlines()[-1])
            log(f"  profile tfa: {out['tfa']['wall_ms_per_step']} ms, {out['tfa']['ops_per_step']} ops/step")
        else:
            out["tfa"] = {"error": proc.stderr[-2000:]}
    return out
