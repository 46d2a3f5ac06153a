"""The trainers' `--distribute`: what each value trains on, set up, and the line that says so.

Shared by the G2P trainer (`keras-attention-g2p train`) and the examples
(examples/common.py). Both are TensorFlow programs (the examples build on
`tf.distribute`; the G2P trainer exports its pronouncer with tf2onnx), so the
values name TensorFlow's engines:

- `none`: one device, the first GPU if there is one;
- `data`: data parallelism, `tf.distribute.MirroredStrategy` over every local
  GPU, or over two logical CPUs where there is none (how the tests run it);
- `multiworker`: `tf.distribute.MultiWorkerMirroredStrategy`, one process per
  machine, the cluster and this process's place in it named by `TF_CONFIG`;
  only for a trainer with its own loop (Keras 3.15's `fit` fails under this
  strategy, keras-team/keras#20585);
- `model`: refused. Keras's model parallelism, `keras.distribution.ModelParallel`
  (with `keras_attention.distribution.layout_map`), runs on the JAX backend;
  on TensorFlow, Keras 3.15 places nothing by a layout.

docs/scaling-out.md has the matrix of what is tested where.
"""

import json
import os

CHOICES = ("none", "data", "model", "multiworker")
HELP = (
    "none: one device; data: tf.distribute.MirroredStrategy over every local GPU (two logical CPUs "
    "without one); multiworker: tf.distribute.MultiWorkerMirroredStrategy, the cluster named by TF_CONFIG; "
    "model: refused (Keras's model parallelism runs on JAX; see docs/scaling-out.md)"
)
# By their public names: MultiWorkerMirroredStrategy's class is CollectiveAllReduceStrategy.
ENGINES = {"data": "tf.distribute.MirroredStrategy", "multiworker": "tf.distribute.MultiWorkerMirroredStrategy"}
SEVERAL_WORKERS = "docs/scaling-out.md#several-workers"


def refusal(value, backend, multiworker_loop=False, environ=None):
    """Why `--distribute value` cannot run here (one line naming the argument, the value and what
    is expected), or None. `multiworker_loop`: the trainer has a loop that runs under
    `MultiWorkerMirroredStrategy` (`fit` fails there)."""
    environ = os.environ if environ is None else environ
    offered = [choice for choice in CHOICES if choice != "model" and (multiworker_loop or choice != "multiworker")]
    expected = f"expected one of {', '.join(offered)}"
    if value not in CHOICES:
        return f"--distribute: {expected}; got {value!r}"
    if value == "model":
        return (
            "--distribute model: model parallelism in Keras 3.15 is keras.distribution.ModelParallel, which "
            f"runs on the JAX backend, and this trainer runs on TensorFlow; {expected} "
            "(docs/scaling-out.md#model-parallelism shards the library's layers on JAX)"
        )
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
    """The `tf.distribute.Strategy` of `value` (checked by `refusal` first). Call it before
    TensorFlow touches a device: `data` without a GPU splits the CPU into two logical ones."""
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


def describe(value, chosen):
    """What a run trains on, on one line: the value, the engine, the replicas and their devices
    (this worker's, and which worker it is, with several)."""
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
