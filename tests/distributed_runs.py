"""Train and decode the library's seq2seq models on one device and distributed, in this process.

Run by tests/test_distribution*.py in a subprocess, because the devices must
be set up before the backend starts (JAX: `XLA_FLAGS=--xla_force_host_platform_
device_count=4` in the environment; TensorFlow: two logical CPUs, configured
here before anything runs):

    KERAS_BACKEND=tensorflow python -m tests.distributed_runs data_parallel lstm
    XLA_FLAGS=--xla_force_host_platform_device_count=4 KERAS_BACKEND=jax \\
        python -m tests.distributed_runs model_parallel_greedy,model_parallel_beam transformer \\
        model_parallel_training lstm

It prints one JSON line per check: for each model, what both runs produced (batch
losses, weights, outputs, gradients, decoded ids), as differences and raw
values the tests compare. The models are tiny: the suite's cores are shared.
"""

import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_attention as ka  # noqa: E402
from keras_attention.distribution import layout_map  # noqa: E402

# Every split axis a multiple of the 2-device model axis: vocabulary 12,
# width 16, 2 heads, feed-forward 32, additive units 8.
V, D, START, END, MAX_LENGTH = 12, 16, 1, 2, 5
BATCH, SOURCE_LENGTH, TARGET_LENGTH, BATCHES = 8, 7, 6, 3
MODELS = ("lstm", "transformer")


def data(seed=0, count=BATCHES):
    """`count` batches of (source with padding, target in, target out)."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        source = rng.integers(3, V, (BATCH, SOURCE_LENGTH)).astype("int32")
        lengths = rng.integers(3, SOURCE_LENGTH + 1, BATCH)
        source[np.arange(SOURCE_LENGTH)[None, :] >= lengths[:, None]] = 0
        target = rng.integers(3, V, (BATCH, TARGET_LENGTH + 1)).astype("int32")
        target[:, 0] = START
        batches.append((source, target[:, :-1], target[:, 1:]))
    return batches


def build(kind, seed=0):
    """(teacher-forced trainer, greedy model, beam model), all sharing their layers."""
    keras.utils.set_random_seed(seed)
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    target_embedding = keras.layers.Embedding(V, D, name="target_embedding")
    readout = keras.layers.Dense(V, name="readout")
    embedded = keras.layers.Embedding(V, D, mask_zero=True, name="source_embedding")(source)
    if kind == "lstm":
        memory = keras.layers.LSTM(D, return_sequences=True, name="encoder")(embedded)
        cell = ka.AttentionLSTMCell(D, ka.AdditiveAttention(8))
        logits = readout(ka.AttentionDecoder(cell)(target_embedding(target), memory))

        def searcher(method):
            return ka.InferenceDecoder(
                cell, target_embedding, readout, START, END, MAX_LENGTH, method=method, beam_width=3
            )
    else:
        position = ka.SinusoidalPositionEncoding()
        memory = ka.TransformerEncoderStack(1, num_heads=2, intermediate_dim=32)(position(embedded))
        stack = ka.TransformerDecoderStack(1, num_heads=2, intermediate_dim=32)
        logits = readout(stack(position(target_embedding(target)), memory))

        def searcher(method):
            return ka.TransformerInferenceDecoder(
                stack, target_embedding, readout, START, END, MAX_LENGTH, position=position, method=method, beam_width=3
            )

    trainer = keras.Model([source, target], logits)
    searches = {method: keras.Model(source, searcher(method)(memory)) for method in ("greedy", "beam")}
    return trainer, searches


def random_weights(trainer, kind, seed=0):
    """Weights that make the rows decode differently (Keras's initial ones
    decode nearly every row alike, which would test little): the LSTM model's
    all N(0, 0.5); the Transformer's kernels and embeddings N(0, 1), its
    biases and norms as initialised (random ones swamp the source)."""
    rng = np.random.default_rng(seed)
    return [
        rng.normal(0, 0.5, w.shape).astype(w.dtype)
        if kind == "lstm"
        else rng.normal(0, 1, w.shape).astype(w.dtype)
        if w.path.endswith(("kernel", "embeddings"))
        else np.asarray(w.value)
        for w in trainer.weights
    ]


def compile_trainer(trainer):
    # Plain SGD: its step is linear in the gradient, so equal gradients give
    # equal weights (Adam's first steps, g / |g|, would magnify rounding).
    trainer.compile(
        optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )


def fit(trainer, batches):
    """One epoch of `fit` over `batches` in order: the loss after each batch (the running mean
    over the epoch, as Keras logs it: equal runs give equal means batch for batch). Under a
    strategy or distribution, `fit` splits each (global) batch across the replicas."""
    inputs = [np.concatenate(part) for part in zip(*batches, strict=True)]
    losses = []
    record = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
    trainer.fit(inputs[:2], inputs[2], batch_size=BATCH, shuffle=False, epochs=1, verbose=0, callbacks=[record])
    return losses


def _weights_compared(reference, distributed, start):
    """How far the distributed model's weights are from one device's, how
    large those are, and how far training moved them (a check of nothing
    if zero)."""
    return {
        "weight_difference": max_difference(reference.get_weights(), distributed.get_weights()),
        "weight_size": max(float(np.max(np.abs(w))) for w in reference.get_weights()),
        "trained_distance": max_difference(start, distributed.get_weights()),
    }


def max_difference(a, b):
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y)))) for x, y in zip(a, b, strict=True))


def data_parallel_run(kind, scope, replicas):
    """The same start and batches on one device and under `scope`."""
    batches = data()
    reference, _ = build(kind)
    start = random_weights(reference, kind)
    reference.set_weights(start)
    compile_trainer(reference)
    one = fit(reference, batches)
    with scope():
        distributed, _ = build(kind)
        distributed.set_weights(start)
        compile_trainer(distributed)
    many = fit(distributed, batches)
    return {
        "replicas": replicas,
        "losses_one_device": one,
        "losses_distributed": many,
        **_weights_compared(reference, distributed, start),
        "most_different_weight": max(
            zip(reference.weights, distributed.weights),
            key=lambda pair: max_difference([pair[0].value], [pair[1].value]),
        )[0].path,
    }


def tensorflow_data_parallel(kind):
    """`tf.distribute.MirroredStrategy` over two logical CPUs."""
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    strategy = tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")])
    return data_parallel_run(kind, strategy.scope, strategy.num_replicas_in_sync)


def tensorflow_multi_worker(kind, steps=BATCHES, backup=None, save_every=None, stop_after=None, signal=None):
    """`tf.distribute.MultiWorkerMirroredStrategy`, this process one worker of `TF_CONFIG`'s
    cluster, training with examples/multi_worker.py's loop on its share of global batch `step`
    for each step (Keras 3.15's `fit` fails under this strategy, keras-team/keras#20585),
    beside one device in this process training on the whole batches.

    `backup`: the directory the workers back up to and resume from (default: a new one, so
    nothing to resume, deleted at the end), every `save_every` steps (default: at the end). With `stop_after`,
    worker 1 writes the file `signal` once it has run that step, then waits to be killed: the
    test kills it there (its peer then waits in the next step's all-reduce), and the one-device
    run is left out. Each step prints a JSON line (step, loss) as it ends."""
    import tempfile

    import tensorflow as tf

    from examples import multi_worker

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.num_replicas_in_sync
    task, _ = multi_worker.task(strategy)
    batches = data(count=steps)
    if backup is None:
        with tempfile.TemporaryDirectory(prefix="multi_worker_backup_") as backup:
            return tensorflow_multi_worker(kind, steps, backup, save_every, stop_after, signal)
    resuming = tf.train.latest_checkpoint(backup) is not None
    with strategy.scope():
        distributed, _ = build(kind, seed=1)
        start = random_weights(distributed, kind)
        if not resuming:
            # A restarted program builds its model afresh (Keras's initial weights, seed 1) and
            # takes the trained ones from the backup: only a restored model ends as the reference.
            distributed.set_weights(start)
        optimizer = keras.optimizers.SGD(0.1)
        optimizer.build(distributed.trainable_variables)
    report = {"replicas": workers, "task": task, "resumed": resuming}
    if stop_after is None:
        reference, _ = build(kind)
        reference.set_weights(start)
        compile_trainer(reference)
        report["losses_one_device"] = [float(reference.train_on_batch(list(b[:2]), b[2])) for b in batches]

    def share(step, replica, replicas):
        source, target_in, target_out = batches[step]
        rows = slice(replica * BATCH // replicas, (replica + 1) * BATCH // replicas)
        return [source[rows], target_in[rows]], target_out[rows]

    def on_step(step, loss):
        print(json.dumps({"step": step, "loss": loss}), flush=True)
        if step == stop_after and task == 1:
            with open(signal, "w") as file:
                file.write(str(step))
            time.sleep(600)  # until killed

    def loss(target, logits):
        return keras.losses.sparse_categorical_crossentropy(target, logits, from_logits=True)

    first, losses = multi_worker.train(
        strategy, distributed, optimizer, loss, share, steps, backup, save_every or steps, on_step
    )
    report.update({"first_step": first, "losses_distributed": losses})
    if stop_after is None:
        report.update(_weights_compared(reference, distributed, start))
    return report


def jax_data_parallel(kind):
    """`keras.distribution.DataParallel` over every CPU device JAX was given."""
    distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices("cpu"))
    return data_parallel_run(kind, distribution.scope, int(np.prod(distribution.device_mesh.shape)))


def _outputs_loss_and_gradients(trainer, source, target_in, target_out):
    import jax

    def loss(trainable, non_trainable):
        logits, _ = trainer.stateless_call(trainable, non_trainable, [source, target_in])
        losses = keras.losses.sparse_categorical_crossentropy(target_out, logits, from_logits=True)
        return keras.ops.mean(losses), logits

    trainable = [v.value for v in trainer.trainable_variables]
    non_trainable = [v.value for v in trainer.non_trainable_variables]
    (value, logits), gradients = jax.jit(jax.value_and_grad(loss, has_aux=True))(trainable, non_trainable)
    return np.asarray(logits), float(value), [np.asarray(g) for g in gradients]


def _model_parallel():
    """A 2 x 2 mesh (batch, model) with the library's layout map."""
    mesh = keras.distribution.DeviceMesh((2, 2), ["batch", "model"], devices=keras.distribution.list_devices("cpu"))
    return keras.distribution.ModelParallel(layout_map=layout_map(mesh), batch_dim_name="batch")


def jax_model_parallel_training(kind):
    """Where each weight went, and the sharded model's outputs and gradients beside the unsharded one's."""
    source, target_in, target_out = data()[0]
    reference, _ = build(kind)
    reference.set_weights(random_weights(reference, kind))
    with _model_parallel().scope():
        sharded, _ = build(kind)
        sharded.set_weights(reference.get_weights())
        outputs, loss, gradients = _outputs_loss_and_gradients(sharded, source, target_in, target_out)
    reference_outputs, reference_loss, reference_gradients = _outputs_loss_and_gradients(
        reference, source, target_in, target_out
    )
    return {
        # Each variable's placement as JAX holds it: the mesh axis of each dimension.
        "placements": {
            v.path: [None if axis is None else str(axis) for axis in v.value.sharding.spec]
            + [None] * (len(v.shape) - len(v.value.sharding.spec))
            for v in sharded.weights
        },
        "output_difference": max_difference([outputs], [reference_outputs]),
        "output_size": float(np.max(np.abs(reference_outputs))),
        "losses": [loss, reference_loss],
        "gradient_difference": max_difference(gradients, reference_gradients),
        "gradient_size": max(float(np.max(np.abs(g))) for g in reference_gradients),
    }


def _search_run(method):
    def run(kind):
        """`method` search on the sharded model beside the unsharded one."""
        source = data()[0][0]
        reference, reference_searches = build(kind)
        reference.set_weights(random_weights(reference, kind))
        with _model_parallel().scope():
            sharded, searches = build(kind)
            sharded.set_weights(reference.get_weights())
            mine = searches[method].predict(source, batch_size=len(source), verbose=0)
        theirs = reference_searches[method].predict(source, batch_size=len(source), verbose=0)
        report = {name: np.asarray(mine[name]).tolist() for name in ("ids", "lengths", "scores")}
        report.update({f"reference_{name}": np.asarray(theirs[name]).tolist() for name in ("ids", "lengths", "scores")})
        return report

    return run


RUNS = {
    ("data_parallel", "tensorflow"): tensorflow_data_parallel,
    ("data_parallel", "jax"): jax_data_parallel,
    ("multi_worker", "tensorflow"): tensorflow_multi_worker,
    ("model_parallel_training", "jax"): jax_model_parallel_training,
    ("model_parallel_greedy", "jax"): _search_run("greedy"),
    ("model_parallel_beam", "jax"): _search_run("beam"),
}


def main(argv):
    """`CHECK[,CHECK...] MODEL [CHECK[,CHECK...] MODEL ...] [--option VALUE ...]`: one JSON line
    per check, in order (several checks, of one model or of several, share one process's start-up
    and its compilations; each builds its own models, in its own distribution scope). The options
    go to each check as keyword arguments (`--save-every 2`: save_every=2; a value that reads as
    an integer is one)."""
    positional = next((i for i, argument in enumerate(argv) if argument.startswith("--")), len(argv))
    runs, rest = argv[:positional], argv[positional:]
    if not runs or len(runs) % 2:
        raise SystemExit(f"distributed_runs: expected CHECK[,CHECK...] MODEL pairs; got {runs}")
    if len(rest) % 2 or not all(name.startswith("--") for name in rest[::2]):
        raise SystemExit(f"distributed_runs: expected --option VALUE pairs after the models; got {rest}")
    options = {
        name[2:].replace("-", "_"): int(value) if value.lstrip("-").isdigit() else value
        for name, value in zip(rest[::2], rest[1::2], strict=True)
    }
    backend = keras.backend.backend()
    pairs = [(check, kind) for checks, kind in zip(runs[::2], runs[1::2], strict=True) for check in checks.split(",")]
    for check, kind in pairs:
        if (check, backend) not in RUNS or kind not in MODELS:
            raise SystemExit(
                f"distributed_runs: no {check!r} run of {kind!r} on the {backend} backend; "
                f"runs: {sorted(RUNS)}, models: {MODELS}"
            )
    for check, kind in pairs:
        report = RUNS[check, backend](kind, **options)
        print(json.dumps({"backend": backend, "check": check, "model": kind, "report": report}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
