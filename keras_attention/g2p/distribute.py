"""The trainers' `--distribute`: what each value trains on, set up, and the line that says so.

Shared by the G2P trainer (`keras-attention-g2p train`) and the examples
(examples/common.py):

- `none`: one device, the first GPU if there is one;
- `data`: data parallelism, `tf.distribute.MirroredStrategy` over every local
  GPU, or over two logical CPUs where there is none (how the tests run it);
- `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy`, one process per
  machine, the cluster and this process's place in it named by `TF_CONFIG`;
  only for a trainer with its own loop (Keras 3.15's `fit` fails under this
  strategy, keras-team/keras#20585);
- `model`: model (tensor) parallelism, `keras.distribution.ModelParallel`
  with `keras_attention.distribution.layout_map` on a mesh of
  `(batch, model)` = `(devices / 2, 2)`. Keras runs it on the JAX backend
  only (on TensorFlow 3.15 places nothing by a layout), so only a trainer
  that runs on JAX takes it (examples/translate_dates.py); on CPUs, JAX
  shows several devices with
  `XLA_FLAGS=--xla_force_host_platform_device_count=4`.

docs/scaling-out.md has the matrix of what is tested where.
"""

import contextlib
import json
import os

import keras

CHOICES = ("none", "data", "model", "multiworker")
HELP = (
    "none: one device; data: tf.distribute.MirroredStrategy over every local GPU (two logical CPUs "
    "without one); multiworker: tf.distribute.MultiWorkerMirroredStrategy, the cluster named by TF_CONFIG; "
    "model: keras.distribution.ModelParallel on JAX, the library's layers split over 2 devices "
    "(docs/scaling-out.md)"
)
# By their public names: MultiWorkerMirroredStrategy's class is CollectiveAllReduceStrategy.
ENGINES = {
    "data": "tf.distribute.MirroredStrategy",
    "multiworker": "tf.distribute.MultiWorkerMirroredStrategy",
    "model": "keras.distribution.ModelParallel",
}
SEVERAL_WORKERS = "docs/scaling-out.md#several-workers"
MODEL_PARALLELISM = "docs/scaling-out.md#model-parallelism"
# The size of the mesh's `model` axis: each split weight in two halves.
MODEL_AXIS_SIZE = 2


def refusal(value, backend, multiworker_loop=False, model_parallel=False, environ=None, devices=None):
    """Why `--distribute value` cannot run here (one line naming the argument, the value and what
    is expected), or None. `multiworker_loop`: the trainer has a loop that runs under
    `MultiWorkerMirroredStrategy` (`fit` fails there). `model_parallel`: the trainer runs on
    JAX, where `keras.distribution.ModelParallel` places weights. `devices`: the devices
    Keras's distribution sees (asked of Keras when None and needed)."""
    environ = os.environ if environ is None else environ
    offered = [
        choice
        for choice in CHOICES
        if (model_parallel or choice != "model") and (multiworker_loop or choice != "multiworker")
    ]
    expected = f"expected one of {', '.join(offered)}"
    if value not in CHOICES:
        return f"--distribute: {expected}; got {value!r}"
    if value == "model":
        return _model_parallel_refusal(backend, model_parallel, expected, devices)
    if value != "none" and backend != "tensorflow":
        return (
            f"--distribute {value}: tf.distribute trains Keras models on the TensorFlow backend; "
            f"expected KERAS_BACKEND=tensorflow with it; got {backend}"
        )
    if value == "multiworker":
        if not multiworker_loop:
            return (
                "--distribute multiworker: this trainer trains with Keras's fit, which fails under "
                f"tf.distribute.MultiWorkerMirroredStrategy in Keras 3.15 (keras-team/keras#20585); {expected} "
                f"(a loop that trains with several workers and survives losing one: {SEVERAL_WORKERS})"
            )
        return _tf_config_refusal(environ.get("TF_CONFIG"))
    return None


def _model_parallel_refusal(backend, model_parallel, expected, devices):
    if not model_parallel:
        return (
            "--distribute model: model parallelism in Keras 3.15 is keras.distribution.ModelParallel, which "
            f"runs on the JAX backend, and this trainer runs on TensorFlow; {expected} "
            f"({MODEL_PARALLELISM} shards the library's layers on JAX)"
        )
    if backend != "jax":
        return (
            "--distribute model: keras.distribution.ModelParallel places weights on the JAX backend only "
            f"(Keras 3.15); expected KERAS_BACKEND=jax with it; got {backend}"
        )
    devices = keras.distribution.list_devices() if devices is None else devices
    if len(devices) < MODEL_AXIS_SIZE or len(devices) % MODEL_AXIS_SIZE:
        return (
            f"--distribute model: expected an even number of devices, at least {MODEL_AXIS_SIZE} (each split "
            f"weight is halved over a `model` axis of {MODEL_AXIS_SIZE}); got {len(devices)} "
            "(on CPUs: XLA_FLAGS=--xla_force_host_platform_device_count=4)"
        )
    return None


def _tf_config_refusal(text):
    example = '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'
    if not text:
        return (
            "--distribute multiworker: expected TF_CONFIG in the environment naming the cluster and this "
            f"worker, e.g. TF_CONFIG='{example}'; got none"
        )
    try:
        config = json.loads(text)
        config["cluster"], config["task"]["type"], config["task"]["index"]
    except (ValueError, KeyError, TypeError):
        return f"--distribute multiworker: expected TF_CONFIG to be JSON like '{example}'; got {text!r}"
    return None


def strategy(value):
    """What `value` trains under (checked by `refusal` first): a `tf.distribute.Strategy`, or
    for `model` a `ModelParallelRun` (the same `scope()` and `num_replicas_in_sync`). Call it
    before the backend touches a device: `data` without a GPU splits the CPU into two logical
    ones, and `model` lays out every variable created after it."""
    if value == "model":
        return ModelParallelRun()
    import tensorflow as tf

    if value == "multiworker":
        return tf.distribute.MultiWorkerMirroredStrategy()
    if value != "data":
        return tf.distribute.get_strategy()
    if not tf.config.list_physical_devices("GPU"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        return tf.distribute.MirroredStrategy([device.name for device in tf.config.list_logical_devices("CPU")])
    return tf.distribute.MirroredStrategy()


class ModelParallelRun:
    """`--distribute model`: `keras.distribution.ModelParallel` over every device, on a mesh
    `(batch, model)` of `(devices / 2, 2)` with the library's layout map, set as Keras's
    distribution. Keras lays out each variable created after that and splits each batch
    over the `batch` axis, so a trainer builds and fits as on one device: `scope()` changes
    nothing, and `num_replicas_in_sync` is the `batch` axis's size."""

    def __init__(self):
        from keras_attention.distribution import layout_map

        devices = keras.distribution.list_devices()
        self.mesh = keras.distribution.DeviceMesh(
            (len(devices) // MODEL_AXIS_SIZE, MODEL_AXIS_SIZE), ("batch", "model"), devices
        )
        self.distribution = keras.distribution.ModelParallel(layout_map=layout_map(self.mesh), batch_dim_name="batch")
        keras.distribution.set_distribution(self.distribution)
        self.num_replicas_in_sync = self.mesh.shape[0]

    def scope(self):
        return contextlib.nullcontext()

    def split_weights(self, model):
        """The paths of `model`'s weights the layout splits over the `model` axis."""
        return [v.path for v in model.weights if "model" in (self.distribution.get_variable_layout(v).axes or ())]


def describe(value, chosen):
    """What a run trains on, on one line: the value, the engine, the replicas and their devices
    (this worker's, and which worker it is, with several)."""
    if value == "model":
        batch, model = chosen.mesh.shape
        devices = [str(device) for device in chosen.mesh.devices.flatten()]
        return (
            f"distribute: model ({ENGINES['model']}), a mesh of batch {batch} x model {model}, "
            f"{chosen.num_replicas_in_sync} replica(s) of the data: {', '.join(devices)}"
        )
    if keras.backend.backend() != "tensorflow":
        try:
            device = keras.distribution.list_devices()[0]
        except NotImplementedError:  # PyTorch: Keras has no distribution there
            device = "cpu"
        return f"distribute: none (no strategy), 1 replica(s) in sync: {device}"
    import tensorflow as tf

    replicas = chosen.num_replicas_in_sync
    if value == "none":
        gpus = tf.config.list_logical_devices("GPU")
        devices = [(gpus or tf.config.list_logical_devices("CPU"))[0].name]
        engine = "no strategy"
    else:
        devices = list(chosen.extended.worker_devices)
        engine = ENGINES[value]
    line = f"distribute: {value} ({engine}), {replicas} replica(s) in sync"
    if value == "multiworker":
        resolver = chosen.cluster_resolver
        workers = sum(len(tasks) for tasks in resolver.cluster_spec().as_dict().values())
        line += f"; this is {resolver.task_type} {resolver.task_id} of {workers} processes, its devices"
    return f"{line}: {', '.join(devices)}"


def gpu_count():
    """The GPUs the backend sees."""
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return len(tf.config.list_physical_devices("GPU"))
    try:
        return len(keras.distribution.list_devices("gpu"))
    except (RuntimeError, ValueError):  # no GPU platform at all
        return 0
