"""Scaling out on TensorFlow, and the layout map's patterns: `MirroredStrategy` over two logical
CPUs trains the LSTM and Transformer seq2seq models to one device's losses and weights, and so
does `MultiWorkerMirroredStrategy` with two worker processes (the LSTM model); the
library's `LayoutMap` splits exactly the weights it documents; docs/scaling-out.md's matrix
names these tests (the JAX runs: tests/test_distribution_jax.py)."""

import ast
import contextlib
import inspect
import json
import os
import re
import signal as signal_module
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention import distribution
from tests import distributed_runs

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "scaling-out.md"


def run_distributed_checks(checks, model, **env):
    """`python -m tests.distributed_runs CHECK,... model` in a fresh process (its devices are set
    up before the backend starts): {check: its JSON report}."""
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **env}
    finished = subprocess.run(
        [sys.executable, "-m", "tests.distributed_runs", ",".join(checks), model],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    lines = [json.loads(line) for line in finished.stdout.strip().splitlines()[-len(checks) :]]
    assert [(line["check"], line["model"]) for line in lines] == [(check, model) for check in checks]
    return {line["check"]: line["report"] for line in lines}


def run_distributed(check, model, **env):
    """One check's report (see `run_distributed_checks`)."""
    return run_distributed_checks([check], model, **env)[check]


def assert_trains_like_one_device(report, replicas):
    """Batch for batch the same loss, and the same weights after, to 1e-5 (relative where the
    weights exceed 1: the Transformer's N(0, 1) kernels reach 4, where float32 rounds at 5e-7)."""
    assert report["replicas"] == replicas
    one, many = report["losses_one_device"], report["losses_distributed"]
    assert len(one) == distributed_runs.BATCHES
    np.testing.assert_allclose(many, one, rtol=0, atol=1e-5)
    assert report["weight_difference"] <= 1e-5 * max(1.0, report["weight_size"])
    # The runs did train: the weights moved well beyond the tolerance.
    assert report["trained_distance"] > 1e-2


def expected_axes(path, rank):
    """The split the layout map documents, decided from the weight's name, owner and rank
    (not from the map's patterns): mesh axis per dimension, all None when replicated."""
    parts = path.split("/")
    name, owner = parts[-1], parts[-2] if len(parts) > 1 else ""
    split = None
    if rank == 3 and name in ("query_kernel", "key_kernel", "value_kernel"):
        split = 1  # MultiHeadAttention (d, H, k): heads
    elif rank == 2 and name in ("query_bias", "key_bias", "value_bias"):
        split = 0
    elif rank == 3 and name == "output_kernel":
        split = 0
    elif owner == "feed_forward_in":
        split = rank - 1
    elif owner == "feed_forward_out" and name == "kernel":
        split = 0
    elif owner.startswith("additive_attention") and name in ("query_kernel", "key_kernel", "score_vector", "bias"):
        split = rank - 1
    elif name == "embeddings" or owner == "readout":
        split = rank - 1
    return [("model" if axis == split else None) for axis in range(rank)]


def other_layers_model():
    """A bare `MultiHeadAttention`, a Transformer layer and the library's other weighted layers
    under their default names: a single-head `SelfAttention` is also `self_attention`."""
    x = keras.Input((5, 8))
    h = ka.MultiHeadAttention(num_heads=2, key_dim=4)(x, x)
    h = ka.TransformerEncoderLayer(num_heads=2, intermediate_dim=8)(h)
    h = ka.SelfAttention(8, use_bias=True)(h)
    h = ka.LearnedPositionEmbedding(6)(h)
    h = ka.GeneralAttention()(h, h)
    h = ka.ConcatAttention(units=4)(h, h)
    pooled = ka.AttentionPooling(4)(h)
    return keras.Model(x, keras.layers.Dense(3)(pooled))


@pytest.fixture(scope="module")
def layouts():
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices=["cpu:0", "cpu:1"])
    return distribution.layout_map(mesh)


@pytest.mark.parametrize("model", ["lstm", "transformer", "other_layers"])
def test_the_layout_map_splits_every_documented_weight_and_nothing_else(layouts, model):
    trainer = other_layers_model() if model == "other_layers" else distributed_runs.build(model)[0]
    split = []
    for weight in trainer.weights:
        layout = layouts[weight.path]
        axes = [None] * len(weight.shape) if layout is None else list(layout.axes)
        assert axes == expected_axes(weight.path, len(weight.shape)), weight.path
        if layout is not None:
            split.append(weight.path)
            # Every split axis divides over the model axis (2 devices).
            (axis,) = [i for i, name in enumerate(axes) if name == "model"]
            assert weight.shape[axis] % 2 == 0, weight.path
    # lstm: 2 embeddings, 3 additive, 2 readout; transformer: 3 attentions of 7, 2 feed-forwards
    # of 3, 2 embeddings, 2 readout; other: 2 attentions, 1 feed-forward, 1 position embedding.
    counts = {"lstm": 7, "transformer": 3 * 7 + 2 * 3 + 2 + 2, "other_layers": 2 * 7 + 3 + 1}
    assert len(split) == counts[model], split


def test_the_single_head_self_attention_keeps_its_kernels_whole(layouts):
    """`SelfAttention`'s 2-D kernels share the default name `self_attention` with the Transformer's
    multi-head sub-layers: only the latter are split (a 3-D layout would not fit)."""
    assert layouts["self_attention/query_kernel"] is None
    assert layouts["transformer_encoder_layer/self_attention/query_kernel"].axes == (None, "model", None)
    assert layouts["encoder/layer_3/cross_attention/value_bias"].axes == ("model", None)
    assert layouts["multi_head_attention_2/output_kernel"].axes == ("model", None, None)
    assert layouts["multi_head_attention_2/output_bias"] is None


def test_the_layout_map_takes_another_output_projection_and_axis_name():
    mesh = keras.distribution.DeviceMesh((2, 1), ["tensor", "data"], devices=["cpu:0", "cpu:1"])
    layouts = distribution.layout_map(mesh, model_axis="tensor", output_projection="logits|to_vocabulary")
    assert layouts["decoder/logits/kernel"].axes == (None, "tensor")
    assert layouts["to_vocabulary/bias"].axes == ("tensor",)
    assert layouts["readout/kernel"] is None
    assert layouts["layer_0/feed_forward_out/kernel"].axes == ("tensor", None)
    assert distribution.layout_map(mesh, "tensor", output_projection=None)["readout/kernel"] is None
    # A LayoutMap the user adds to.
    layouts["my_block/attention/query_kernel"] = (None, "tensor", None)
    assert layouts["my_block/attention/query_kernel"].axes == (None, "tensor", None)


@pytest.mark.parametrize(
    "arguments, error, message",
    [
        ({"device_mesh": [2, 2]}, TypeError, r"layout_map: `device_mesh` must be a keras.distribution.DeviceMesh; "),
        ({"model_axis": "tensor"}, ValueError, r"layout_map: unknown `model_axis` 'tensor'; expected one of 'batch'"),
        ({"output_projection": 3}, TypeError, r"`output_projection` must be a layer name .* received 3 of type int"),
        ({"output_projection": "read(out"}, ValueError, r"`output_projection` must be a valid regular expression"),
    ],
)
def test_bad_arguments_are_named(arguments, error, message):
    mesh = keras.distribution.DeviceMesh((1, 2), ["batch", "model"], devices=["cpu:0", "cpu:1"])
    with pytest.raises(error, match=message):
        distribution.layout_map(**{"device_mesh": mesh, **arguments})


def test_the_documented_example_runs():
    doc = inspect.getdoc(distribution.layout_map)
    for section in ("Paper:", "arXiv:1909.08053", "Example:"):
        assert section in doc
    (example,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    exec(compile(textwrap.dedent(example), "<layout_map example>", "exec"), {})


@pytest.mark.parametrize("model", distributed_runs.MODELS)
def test_mirrored_strategy_over_two_cpus_trains_like_one_device(model):
    report = run_distributed("data_parallel", model, KERAS_BACKEND="tensorflow")
    assert_trains_like_one_device(report, replicas=2)


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for each in sockets:
        each.bind(("localhost", 0))
    ports = [each.getsockname()[1] for each in sockets]
    for each in sockets:
        each.close()
    return ports


@contextlib.contextmanager
def two_workers(logs, *arguments, module="tests.distributed_runs"):
    """Two worker processes of a cluster on free localhost ports, each running `python -m
    MODULE ARGUMENTS` (by default `tests.distributed_runs`) with its output in logs/worker_<i>.out
    and .err; the processes left running are killed on the way out, whatever happened."""
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(2)]}
    processes, files = [], []
    try:
        for index in range(2):
            files += [open(logs / f"worker_{index}.out", "w"), open(logs / f"worker_{index}.err", "w")]
            environment = {
                **os.environ,
                "KERAS_BACKEND": "tensorflow",
                "TF_CPP_MIN_LOG_LEVEL": "3",
                "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
            }
            command = [sys.executable, "-m", module, *map(str, arguments)]
            processes.append(subprocess.Popen(command, cwd=ROOT, env=environment, stdout=files[-2], stderr=files[-1]))
        yield processes
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        for process in processes:
            process.wait(timeout=60)
        for file in files:
            file.close()


def worker_reports(processes, logs, timeout=300):
    """Each worker's JSON report, once both have finished (their output's last line)."""
    reports = []
    for index, process in enumerate(processes):
        returncode = process.wait(timeout=timeout)
        assert returncode == 0, (logs / f"worker_{index}.err").read_text()[-4000:]
        reports.append(json.loads((logs / f"worker_{index}.out").read_text().strip().splitlines()[-1])["report"])
    assert [report["task"] for report in reports] == [0, 1]
    return reports


def test_two_worker_processes_train_like_one_device(tmp_path):
    """`MultiWorkerMirroredStrategy` with two worker processes on localhost (`TF_CONFIG`), each
    training on its half of every global batch: both end with one device's losses and weights."""
    with two_workers(tmp_path, "multi_worker", "lstm") as workers:
        reports = worker_reports(workers, tmp_path)
    for report in reports:
        assert report["first_step"] == 0 and not report["resumed"]
        assert_trains_like_one_device(report, replicas=2)


# Steps 0..7, a backup after every second (after steps 1, 3, 5, 7); worker 1 is killed after
# step 4, before a backup, while worker 0 waits for it in step 5: the cluster restarts from the
# backup taken after step 3 and runs steps 4..7 again.
STEPS, SAVE_EVERY, KILLED_AFTER, RESUMED_AT = 8, 2, 4, 4


def test_a_killed_worker_resumes_from_the_last_backup_and_ends_as_an_uninterrupted_run(tmp_path):
    """Two workers train with examples/multi_worker.py's loop, backing up every second step;
    worker 1 is killed (SIGKILL) mid-run and both are restarted, as a cluster manager would.
    The data of a step is decided by its number, so the restarted cluster resumes from the
    last backup and ends with the weights of an uninterrupted run (one device over the same
    batches, which the test above shows to be the two workers' result) to 1e-5, its losses
    continuing the killed run's."""
    backup, killed_logs, resumed_logs = tmp_path / "backup", tmp_path / "killed", tmp_path / "resumed"
    killed_logs.mkdir(), resumed_logs.mkdir()
    signal = tmp_path / "worker_1_passed_the_step"
    options = ("multi_worker", "lstm", "--steps", STEPS, "--backup", backup, "--save-every", SAVE_EVERY)
    with two_workers(killed_logs, *options, "--stop-after", KILLED_AFTER, "--signal", signal) as workers:
        deadline = time.monotonic() + 120
        while not signal.exists():
            for index, worker in enumerate(workers):
                assert worker.poll() is None, (killed_logs / f"worker_{index}.err").read_text()[-4000:]
            assert time.monotonic() < deadline, "worker 1 never reached the step"
            time.sleep(0.2)
        workers[1].send_signal(signal_module.SIGKILL)
        assert workers[1].wait(timeout=30) == -signal_module.SIGKILL
        # Worker 0 waits for its lost peer in step 5's all-reduce: the cluster manager stops it.
        assert workers[0].poll() is None
    # The chief's backup after step 3, and no worker's temporary one.
    assert sorted(path.name for path in backup.iterdir()) == [
        "checkpoint",
        f"ckpt-{RESUMED_AT}.data-00000-of-00001",
        f"ckpt-{RESUMED_AT}.index",
    ]
    killed = [json.loads(line) for line in (killed_logs / "worker_1.out").read_text().splitlines()]
    assert [line["step"] for line in killed] == list(range(KILLED_AFTER + 1))

    with two_workers(resumed_logs, *options) as workers:
        reports = worker_reports(workers, resumed_logs)
    for report in reports:
        assert report["resumed"] and report["first_step"] == RESUMED_AT
        one, resumed = report["losses_one_device"], report["losses_distributed"]
        assert len(one) == STEPS and len(resumed) == STEPS - RESUMED_AT
        # The loss curve: the killed run's steps, then the resumed run's, are one device's.
        np.testing.assert_allclose([line["loss"] for line in killed], one[: KILLED_AFTER + 1], rtol=0, atol=1e-5)
        np.testing.assert_allclose(resumed, one[RESUMED_AT:], rtol=0, atol=1e-5)
        # The restarted workers built their models with other weights: only the restored ones end here.
        assert report["weight_difference"] <= 1e-5
        assert report["trained_distance"] > 1e-2
    assert sorted(path.name for path in backup.iterdir()) == [
        "checkpoint",
        f"ckpt-{STEPS}.data-00000-of-00001",
        f"ckpt-{STEPS}.index",
    ]


# ------------------------------------------------------------- the docs page


def matrix_rows(text):
    """The rows of the page's test matrix (the table under "## What is tested")."""
    section = text.split("## What is tested", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    header, _, *body = rows
    assert [cell.strip() for cell in header.strip("|").split("|")] == ["Backend", "Engine", "What is tested", "Test"]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in body]


def distribution_tests():
    """`file::test` of every test function in tests/test_distribution*.py."""
    found = set()
    for path in sorted(ROOT.glob("tests/test_distribution*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found |= {f"{path.name}::{node.name}" for node in tree.body if isinstance(node, ast.FunctionDef)}
        found = {name for name in found if name.split("::")[1].startswith("test_")}
    return found


def test_the_scaling_out_page_matrix_names_every_distribution_test():
    rows = matrix_rows(PAGE.read_text(encoding="utf-8"))
    named = set()
    for backend, engine, tested, tests in rows:
        assert backend in ("TensorFlow", "JAX", "PyTorch", "any"), backend
        assert engine and tested
        for test in re.findall(r"`([\w.]+::\w+)`", tests):
            named.add(test)
    assert named == distribution_tests() - {
        # The page's own check, not a row of the matrix.
        "test_distribution.py::test_the_scaling_out_page_matrix_names_every_distribution_test"
    }


def test_the_page_is_in_the_site_navigation():
    assert re.search(r"^\s+- Scaling out: scaling-out\.md$", (ROOT / "mkdocs.yml").read_text(), re.M)
