import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

# XLA's CPU programs compiled without LLVM's optimisations and with XLA's
# older loop emitters instead of its fusion emitters: the tests run tiny
# shapes, where compiling is the cost, not running (measured: JAX's
# decoding tests, each eager call of a loop a new XLA program, 31 -> 24 s
# on one test at level 0; TensorFlow's XLA fits of every layer 214 -> 183 s
# at level 0, then 144 -> 98 s without the fusion emitters; JAX's
# test_precision and test_cells 203 -> 123 s). XLA's own graph passes still
# run: what does not compile still fails. Both flags are known to the XLA
# of the pinned TensorFlow and jaxlib (an unknown flag aborts the process).
# Set before TensorFlow or JAX is imported (the examples' subprocesses
# inherit them); benchmarks and gpu-check run outside the tests, at the
# defaults.
TEST_XLA_FLAGS = {"xla_backend_optimization_level": "0", "xla_cpu_use_fusion_emitters": "false"}
for _flag, _value in TEST_XLA_FLAGS.items():
    if _flag not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --{_flag}={_value}".strip()

# TensorFlow and OpenMP one-threaded. `make test` runs more workers than
# cores (the Makefile's PYTEST_WORKERS), and each worker's thread pools spun
# and switched on cores the other workers were using. Measured on the 2-core
# machine: four of the longest TensorFlow modules, 2 workers 302 s, 3 workers
# 280 s, 3 one-threaded workers 248 s (CPU time 535 -> 472 s); the clean-clone
# TensorFlow suite 1538 -> 1329 s. (XLA's CPU matrix products are left
# multi-threaded: one-threaded, XLA emits its own at level 0, whose rounding
# differs by position, and identical keys no longer tie in JAX's hard_dot.)
# A test that needs threads sets its own (the G2P tool's side-by-side models do).
for _variable in ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

import keras  # noqa: E402
import pytest  # noqa: E402

if keras.backend.backend() == "jax":
    # Each eager call of a decoding loop compiles it anew on JAX: the worker
    # keeps one compilation per program (tests/jax_compiles.py says how).
    from tests import jax_compiles

    jax_compiles.install()

# The line that makes a test module backend-neutral (`make test-jax`,
# `make test-torch`): it imports nothing of TensorFlow and uses
# keras.ops, keras.random and tests/backend_gradients.py only.
ANY_BACKEND = "pytestmark = pytest.mark.any_backend"


def pytest_ignore_collect(collection_path, config):
    """Off TensorFlow, only the backend-neutral test modules: the others
    import TensorFlow or test the TensorFlow-only export."""
    if keras.backend.backend() == "tensorflow" or collection_path.suffix != ".py":
        return None
    if not collection_path.name.startswith("test_"):
        return None
    return ANY_BACKEND not in collection_path.read_text(encoding="utf-8")


@pytest.fixture(autouse=True)
def _fresh_keras_state():
    """Each test starts from float32 and a fresh Keras session."""
    keras.config.set_dtype_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.config.set_dtype_policy("float32")
    # Without a full garbage collection after every test: with TensorFlow
    # loaded one takes 0.2 to 0.5 s (hundreds of thousands of objects),
    # minutes over the suite; Python's own collector still runs as usual.
    keras.backend.clear_session(free_memory=False)


def pytest_collection_modifyitems(config, items):
    """The test modules longest first (measured in tests/module_seconds.json,
    tools/module_durations.py), each module's tests in their own order: the
    workers of `make test` (`--dist loadfile --no-loadscope-reorder`) take
    the modules in this order, so no minutes-long module starts last."""
    from tools import module_durations

    counts = {}
    for item in items:
        counts[item.path.name] = counts.get(item.path.name, 0) + 1
    order = module_durations.longest_first(counts, module_durations.read(keras.backend.backend()))
    rank = {name: i for i, name in enumerate(order)}
    items.sort(key=lambda item: rank[item.path.name])
