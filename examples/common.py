"""What every example training shares: options, devices, distribution, callbacks, results.

Each example calls `parse_args` with its own defaults, `setup(args)` to get a
distribution strategy (and the mixed-precision policy), builds and compiles
its model inside `strategy.scope()`, trains with `callbacks(args)` (a killed
run resumes where it stopped), and ends with `write_results`. `--distribute`
is the G2P trainer's (keras_attention/g2p/distribute.py): none, data,
multiworker (only an example with its own loop: translate_dates.py) or model
(only an example that runs on JAX, where Keras's model parallelism runs:
translate_dates.py). TensorFlow is imported only where a run uses it.
"""

import argparse
import json
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import importlib.metadata

import keras

from keras_attention.g2p import distribute


def parse_args(
    description, argv=None, extra=None, multiworker_loop=False, model_parallel=False, refuse=None, **defaults
):
    """The options every example has; `defaults` sets the full-size values.

    `--smoke` switches to `smoke_*` defaults (seconds-long runs for the tests)
    for whatever the command line does not set; a default of None leaves the
    option None unless given (the example then picks a value per task).
    `extra(parser)` adds an example's own options. `multiworker_loop`: the
    example trains without `fit` under `--distribute multiworker` (which
    `fit` fails under); the others refuse that value. `model_parallel`: the
    example runs on JAX, and takes `--distribute model` there. `refuse(args)`: why
    the example cannot run these options together (one line), or None.
    """
    parser = argparse.ArgumentParser(description=description)
    if extra is not None:
        extra(parser)
    parser.add_argument("--epochs", type=int, help=f"training epochs (default {_default(defaults, 'epochs')})")
    parser.add_argument("--batch-size", type=int, help=f"batch size (default {_default(defaults, 'batch_size')})")
    parser.add_argument("--samples", type=int, help=f"training examples (default {_default(defaults, 'samples')})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the data and the weights")
    parser.add_argument("--out", default=defaults.get("out", "runs/example"), help="output directory")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run (used by the tests)")
    parser.add_argument("--distribute", default="none", help=distribute.HELP)
    parser.add_argument("--mixed-precision", action="store_true", help="train in mixed_float16")
    parser.add_argument("--jit", action="store_true", help="compile training steps with XLA")
    args = parser.parse_args(argv)
    refused = distribute.refusal(args.distribute, keras.backend.backend(), multiworker_loop, model_parallel)
    if not refused and args.distribute == "multiworker":
        given = [flag for flag, on in (("--mixed-precision", args.mixed_precision), ("--jit", args.jit)) if on]
        if given:
            refused = (
                "--distribute multiworker: examples/multi_worker.py's loop has no loss scaling and no XLA; "
                f"expected neither --mixed-precision nor --jit with it; got {' '.join(given)}"
            )
    refused = refused or (refuse(args) if refuse is not None else None)
    if refused:
        parser.error(refused)
    prefix = "smoke_" if args.smoke else ""
    for name in ("epochs", "batch_size", "samples"):
        if getattr(args, name) is None:
            setattr(args, name, defaults.get(prefix + name, defaults[name]))
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1; got {getattr(args, name)}")
    return args


def _default(defaults, name):
    return "per task" if defaults[name] is None else defaults[name]


def setup(args):
    """Seeds, devices, precision and the distribution strategy for `args`."""
    keras.utils.set_random_seed(args.seed)
    # Before anything touches a device: `data` may split the CPU in two.
    strategy = distribute.strategy(args.distribute)
    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_float16")
    print(
        f"{distribute.describe(args.distribute, strategy)}; {distribute.gpu_count()} GPU(s); "
        # JAX compiles every step with XLA; the others when asked (--jit).
        f"precision {keras.config.dtype_policy().name}; XLA {'on' if args.jit or keras.backend.backend() == 'jax' else 'off'}",
        flush=True,
    )
    os.makedirs(args.out, exist_ok=True)
    return strategy


def callbacks(args):
    """Resume a killed run where it stopped, and keep the last epoch's model."""
    return [
        keras.callbacks.BackupAndRestore(os.path.join(args.out, "backup")),
        keras.callbacks.ModelCheckpoint(os.path.join(args.out, "checkpoint.keras")),
    ]


def predict(model, inputs, batch_size):
    """`model.predict` without the progress bar.

    `predict`, not `predict_on_batch`: under MirroredStrategy the latter runs
    the whole batch on every replica and returns it once per replica.
    """
    return model.predict(inputs, batch_size=batch_size, verbose=0)


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start


def cpu_model():
    """The CPU's model name (Linux's /proc/cpuinfo), or None where it cannot be read: two
    machines that both say `x86_64` trained the same G2P model 3 times apart in speed."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine():
    """Where a result was measured: the platform, the CPU, cores and versions."""
    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "tensorflow": _installed("tensorflow"),
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "gpus": distribute.gpu_count(),
    }


def _installed(distribution):
    """The installed version of `distribution`, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def write_results(args, results):
    path = os.path.join(args.out, "results.json")
    with open(path + ".tmp", "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)
    print(f"wrote {path}")
    return path
