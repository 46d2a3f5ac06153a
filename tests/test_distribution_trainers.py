"""The trainers take `--distribute` (issue 37, item 4): the dates example trains with two worker
processes (`multiworker`, examples/multi_worker.py's loop), the G2P trainer under MirroredStrategy
over two logical CPUs (`data`), each printing what it trains on; the values a trainer cannot run
are refused in one line naming the argument, the value and what is expected. (The dates example
under `data`: tests/test_example_dates.py.)"""

import json

import pytest

from examples import common
from keras_attention.g2p import distribute
from tests import examples
from tests.test_distribution import two_workers
from tests.test_g2p_tool import error_lines, fifty_words, g2p, g2p_here

translate_dates = examples.load("translate_dates")
TF_CONFIG = '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 0}}'


def test_the_dates_trainer_trains_with_two_workers_and_prints_where(tmp_path):
    """Two workers on localhost, each training on its half of every global batch of 64 for the
    smoke run's one epoch (7 steps of 64 of its 486 training rows); the chief writes the outputs."""
    out, logs = tmp_path / "out", tmp_path / "logs"
    logs.mkdir()
    with two_workers(
        logs, "--smoke", "--out", out, "--distribute", "multiworker", module="examples.translate_dates"
    ) as workers:
        for index, worker in enumerate(workers):
            assert worker.wait(timeout=300) == 0, (logs / f"worker_{index}.err").read_text()[-4000:]
    stdout = [(logs / f"worker_{index}.out").read_text() for index in range(2)]
    for index, text in enumerate(stdout):
        assert (
            "distribute: multiworker (tf.distribute.MultiWorkerMirroredStrategy), 2 replica(s) in sync; this is "
            f"worker {index} of 2 processes, its devices: /job:worker/replica:0/task:{index}/device:CPU:0"
        ) in text
        assert "trained steps 0 to 7 (7 an epoch)" in text
    # One cluster: the workers' epoch losses are the same numbers.
    losses = [[line for line in text.splitlines() if line.startswith("epoch 1/1: loss ")] for text in stdout]
    assert len(losses[0]) == 1 and losses[0] == losses[1]
    assert "worker 1: trained; the chief evaluates and writes the outputs" in stdout[1]
    results = json.loads((out / "results.json").read_text())
    assert results["distribute"] == "multiworker" and results["replicas"] == 2
    assert f"epoch 1/1: loss {results['final_loss']:.4f}" == losses[0][0]
    # One epoch learns at least the fixed dashes, as one device does (measured: 0.20).
    assert results["greedy_character_accuracy"] > 0.12
    for name in ("dates_trainer.keras", "dates_greedy.keras", "dates_beam.keras", "vocabulary.json"):
        assert (out / name).stat().st_size > 0, name
    # The backup after the epoch, the chief's only.
    assert sorted(path.name for path in (out / "multiworker_backup").iterdir()) == [
        "checkpoint",
        "ckpt-7.data-00000-of-00001",
        "ckpt-7.index",
    ]


def test_the_g2p_trainer_trains_data_parallel_and_prints_where(tmp_path):
    """`keras-attention-g2p train --distribute data` on the 50-word lexicon, 2 epochs of the smoke
    settings under MirroredStrategy over two logical CPUs; exported with parity as ever."""
    path, _ = fifty_words(tmp_path)
    model = tmp_path / "model"
    completed = g2p(
        "train", "--lexicon", path, "--dev", path, "--out", model, "--smoke", "--epochs", 2, "--distribute", "data"
    )
    assert (
        "distribute: data (tf.distribute.MirroredStrategy), 2 replica(s) in sync: "
        "/job:localhost/replica:0/task:0/device:CPU:0, /job:localhost/replica:0/task:0/device:CPU:1"
    ) in completed.stdout.splitlines()
    results = json.loads((model / "results.json").read_text())
    assert results["replicas"] == 2
    history = json.loads((model / "member_0" / "history.json").read_text())
    losses = [epoch["loss"] for epoch in history]
    # Two epochs, the second learning from the first (measured: 5.97, 5.49).
    assert len(losses) == 2 and losses[0] > losses[1]
    assert results["export_parity"]["pronounce/ids"] == 0 and results["export_parity"]["pronounce_greedy/ids"] == 0


EXPECTED = "expected one of none, data, model, multiworker"


@pytest.mark.parametrize(
    "arguments, environment, message",
    [
        (["--distribute", "pipeline"], {}, f"--distribute: {EXPECTED}; got 'pipeline'"),
        (
            ["--distribute", "model"],
            {},
            "--distribute model: keras.distribution.ModelParallel places weights on the JAX backend only "
            "(Keras 3.15); expected KERAS_BACKEND=jax with it; got tensorflow",
        ),
        (["--distribute", "multiworker"], {}, "--distribute multiworker: expected TF_CONFIG in the environment"),
        (
            ["--distribute", "multiworker"],
            {"TF_CONFIG": "{"},
            "--distribute multiworker: expected TF_CONFIG to be JSON",
        ),
        (
            ["--distribute", "multiworker", "--jit"],
            {"TF_CONFIG": TF_CONFIG},
            "--distribute multiworker: examples/multi_worker.py's loop has no loss scaling and no XLA; expected "
            "neither --mixed-precision nor --jit with it; got --jit",
        ),
        (
            ["--distribute", "multiworker", "--scheduled-sampling", "0.5"],
            {"TF_CONFIG": TF_CONFIG},
            "--scheduled-sampling: examples/multi_worker.py's loop trains without it; expected no "
            "--scheduled-sampling with --distribute multiworker; got 0.5",
        ),
    ],
    ids=["unknown", "model", "no_tf_config", "bad_tf_config", "jit", "scheduled_sampling"],
)
def test_the_dates_trainer_refuses_what_it_cannot_run_in_one_line(arguments, environment, message, monkeypatch, capsys):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(SystemExit) as exit:
        translate_dates.main(["--smoke", *arguments])
    assert exit.value.code == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert line.split("error: ", 1)[1].startswith(message), line


def test_an_example_that_trains_with_fit_refuses_several_workers(monkeypatch, capsys):
    monkeypatch.setenv("TF_CONFIG", TF_CONFIG)
    with pytest.raises(SystemExit):
        common.parse_args("an example", ["--distribute", "multiworker"], epochs=1, batch_size=8, samples=8)
    assert (
        "error: --distribute multiworker: this trainer trains with Keras's fit, which fails under "
        "tf.distribute.MultiWorkerMirroredStrategy in Keras 3.15 (keras-team/keras#20585); expected one of none, "
        "data (a loop that trains with several workers and survives losing one: docs/scaling-out.md#several-workers)"
    ) in capsys.readouterr().err


@pytest.mark.parametrize(
    "value, message",
    [
        ("pipeline", "error: --distribute: expected one of none, data; got 'pipeline'"),
        ("model", "error: --distribute model: model parallelism in Keras 3.15 is keras.distribution.ModelParallel"),
        ("multiworker", "error: --distribute multiworker: this trainer trains with Keras's fit, which fails under"),
    ],
    ids=["unknown", "model", "multiworker"],
)
def test_the_g2p_trainer_refuses_what_it_cannot_run_in_one_line(value, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", TF_CONFIG)
    path, _ = fifty_words(tmp_path)
    completed = g2p_here(
        capsys, "train", "--lexicon", path, "--out", tmp_path / "m", "--distribute", value, check=False
    )
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    assert len(error_lines(completed)) == 1 and error_lines(completed)[0].startswith(message), completed.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("value", ["data", "multiworker"])
def test_tf_distribute_is_refused_off_tensorflow(value):
    """The trainers need TensorFlow; should one run on JAX, `tf.distribute` would not place its model."""
    assert distribute.refusal(value, "jax", multiworker_loop=True, environ={"TF_CONFIG": TF_CONFIG}) == (
        f"--distribute {value}: tf.distribute trains Keras models on the TensorFlow backend; "
        "expected KERAS_BACKEND=tensorflow with it; got jax"
    )
    assert distribute.refusal("none", "jax") is None


def test_model_parallelism_is_offered_where_a_trainer_runs_on_jax_with_an_even_number_of_devices():
    """Only a trainer that runs on JAX takes `model` (the dates example; its run is in
    tests/test_distribution_jax.py); the mesh halves each split weight over two devices."""
    devices = ["cpu:0", "cpu:1", "cpu:2", "cpu:3"]
    assert distribute.refusal("model", "jax", model_parallel=True, devices=devices) is None
    assert distribute.refusal("model", "jax", model_parallel=True, devices=devices[:2]) is None
    for count in (1, 3):
        assert distribute.refusal("model", "jax", model_parallel=True, devices=devices[:count]) == (
            "--distribute model: expected an even number of devices, at least 2 (each split weight is halved "
            f"over a `model` axis of 2); got {count} (on CPUs: XLA_FLAGS=--xla_force_host_platform_device_count=4)"
        )
    assert distribute.refusal("model", "torch", model_parallel=True, devices=devices) == (
        "--distribute model: keras.distribution.ModelParallel places weights on the JAX backend only "
        "(Keras 3.15); expected KERAS_BACKEND=jax with it; got torch"
    )
    # A trainer on TensorFlow (the G2P tool) refuses it on any backend, naming what it offers.
    assert distribute.refusal("model", "jax", devices=devices).startswith(
        "--distribute model: model parallelism in Keras 3.15 is keras.distribution.ModelParallel, which runs on "
        "the JAX backend, and this trainer runs on TensorFlow; expected one of none, data ("
    )
