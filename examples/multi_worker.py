"""Training under `tf.distribute.MultiWorkerMirroredStrategy` that survives the loss of a worker.

Keras 3.15's `fit` fails under this strategy (keras-team/keras#20585; with
TensorFlow 2.21 its first batch's symbolic build reduces the per-worker batch
with `strategy.reduce`, which raises `ValueError: Attempt to convert a value
(PerReplica:{...}) with an unsupported type ... to a Tensor`), and with `fit`
goes `keras.callbacks.BackupAndRestore`. `train` is the loop TensorFlow's
multi-worker guide writes instead: `strategy.run` steps, and a backup of the
model's variables, the optimizer's and the step counter (`tf.train.Checkpoint`
in a `tf.train.CheckpointManager`) every `save_every` steps. Every worker saves,
as TensorFlow's multi-worker guide requires (a save may all-reduce variables
synchronised on read), the chief into the backup directory, the others into
a temporary one they delete again; every worker restores the chief's latest
backup when it starts (the directory must be one they all read), so a
cluster restarted after losing a worker goes on from there.

What a step trains on is `batch_at(step, replica, replicas)`: global batch
`step`'s share for one replica. Deciding the data by the step number makes a
resumed run see exactly the batches the lost run would have seen, so it ends
with the weights an uninterrupted run ends with (tests/test_distribution.py
checks it to 1e-5). The shares must be equal in size: each replica's loss is
its share's mean divided by the number of replicas (what
`tf.nn.compute_average_loss` does), and the gradients are summed across them.

Run by examples/translate_dates.py (`--distribute multiworker`) and by the
tests (tests/distributed_runs.py). TensorFlow only: this is its strategy.
"""

import os
import shutil

import keras
import tensorflow as tf


def task(strategy):
    """(task index, is chief) of this process in `strategy`'s cluster."""
    resolver = strategy.cluster_resolver
    kind, index = resolver.task_type, resolver.task_id
    # The chief: a "chief" task if the cluster has one, else worker 0 (TF's convention).
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return index, kind in (None, "chief") or (kind == "worker" and index == 0 and not has_chief)


def train(strategy, model, optimizer, loss_fn, batch_at, steps, backup, save_every=1, on_step=None):
    """Train `model` (built, with `optimizer`, in `strategy.scope()`) up to global step `steps`,
    starting from the latest backup in `backup` if there is one.

    `loss_fn(y_true, y_pred)` returns the loss of each example (or step), not reduced: a
    function such as `keras.losses.sparse_categorical_crossentropy` (a `keras.losses.Loss`
    object reduces, and under a strategy already divides by the replicas); `batch_at(step, replica,
    replicas)` returns (inputs, targets) of one replica's share of global batch `step`;
    `on_step(step, loss)` is called after each step (and its backup) with the global batch's
    mean loss.
    Returns (the step this run started from, [the loss of each step it ran]).
    """
    index, chief = task(strategy)
    # Not a Keras variable: a plain counter the checkpoint saves beside the model.
    step = tf.Variable(0, dtype="int64", trainable=False, name="step")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, step=step)
    latest = tf.train.latest_checkpoint(backup)
    if latest:
        checkpoint.restore(latest).assert_existing_objects_matched()
    # Only the chief's backup is kept; the others write theirs where nobody restores from.
    directory = backup if chief else os.path.join(backup, f"worker_{index}_temporary")
    manager = tf.train.CheckpointManager(checkpoint, directory, max_to_keep=1)
    replicas = strategy.num_replicas_in_sync

    def replica_step(inputs, targets):
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(loss_fn(targets, model(inputs, training=True)))
            if model.losses:
                loss = loss + keras.ops.sum(model.losses)
            # Equal shares: the global batch's mean is the replicas' means averaged.
            loss = loss / replicas
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        return loss

    @tf.function
    def run_step(batch):
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    def save():
        manager.save(checkpoint_number=int(step.numpy()))
        if not chief:
            shutil.rmtree(directory, ignore_errors=True)

    first = int(step.numpy())
    losses = []
    for current in range(first, steps):
        batch = strategy.experimental_distribute_values_from_function(
            lambda context, current=current: batch_at(
                current, context.replica_id_in_sync_group, context.num_replicas_in_sync
            )
        )
        losses.append(float(run_step(batch)))
        step.assign(current + 1)
        if (current + 1) % save_every == 0 or current + 1 == steps:
            save()
        if on_step is not None:
            on_step(current, losses[-1])
    return first, losses
