"""Scaling out on JAX (`make test-jax`): `keras.distribution.DataParallel` over 4 CPU devices trains
the LSTM and Transformer seq2seq models to one device's losses and weights; `ModelParallel` on a
2 x 2 mesh with the library's layout map places each weight as documented and gives the unsharded
model's outputs, gradients and searches; the dates example trains under it (`--distribute model`).
On PyTorch, Keras 3 has no `keras.distribution`: a test
says so, and fails the day it has one. Each run is a subprocess: JAX must see its 4 devices
(`XLA_FLAGS`) before it starts."""

import functools
import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from tests import distributed_runs, examples
from tests.test_distribution import ROOT, assert_trains_like_one_device, expected_axes

pytestmark = pytest.mark.any_backend

on_jax = pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution runs on JAX")
FOUR = "--xla_force_host_platform_device_count=4"
# Compiled fast as the suite's other programs are (tests/conftest.py's XLA_FLAGS): the trainer's
# run, which checks what it prints and saves, not digits (21 s against 37 s alone), and the checks
# whose 1e-5 holds there as at XLA's defaults (measured, largest difference / bound: the LSTM's
# data-parallel weights 6e-8 / 2e-5; the sharded Transformer's outputs 2.6e-5 / 9.8e-5 against
# 1.5e-5 at the defaults, gradients 4.8e-6 / 1.8e-5 against 7.9e-6, search scores 4.5e-6 / 1e-5
# against 6.7e-6).
FOUR_FAST_CPUS = {"KERAS_BACKEND": "jax", "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {FOUR}".strip()}
# The data-parallel Transformer keeps XLA's fusion emitters (at optimisation level 0 still):
# without them, as the suite compiles, its weights after three SGD steps differed from one
# device's by 1.7e-4 (a layer norm's gamma; the bound 3.9e-5); with them by 1.9e-5 (1.7e-5 at
# XLA's defaults), in 9 s of CPU against 17 s at the defaults.
FOUR_CPUS_FUSED = {"KERAS_BACKEND": "jax", "XLA_FLAGS": f"{FOUR} --xla_backend_optimization_level=0"}
MODEL_PARALLEL = ("model_parallel_training", "model_parallel_greedy", "model_parallel_beam")
# Every check in two processes, each under the flags above that suit its checks, where one
# process per model compiled everything at XLA's defaults (the module's CPU time, the dates
# trainer's run included: 147 -> 68 s).
PROCESSES = (
    (FOUR_FAST_CPUS, ((("data_parallel", *MODEL_PARALLEL), "lstm"), (MODEL_PARALLEL, "transformer"))),
    (FOUR_CPUS_FUSED, ((("data_parallel",), "transformer"),)),
)


def run_checks(runs, environment):
    """`python -m tests.distributed_runs CHECK,... MODEL ...` for each (checks, model) of `runs`,
    in one fresh process (JAX sees its devices before it starts): {(check, model): its report}."""
    finished = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.distributed_runs",
            *(part for checks, model in runs for part in (",".join(checks), model)),
        ],
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **environment},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert finished.returncode == 0, finished.stderr[-4000:]
    expected = [(check, model) for checks, model in runs for check in checks]
    lines = [json.loads(line) for line in finished.stdout.strip().splitlines()[-len(expected) :]]
    assert [(line["check"], line["model"]) for line in lines] == expected
    return {(line["check"], line["model"]): line["report"] for line in lines}


@functools.cache
def _process(index):
    environment, runs = PROCESSES[index]
    return run_checks(runs, environment)


def run_distributed(check, model):
    index = next(
        i for i, (_, runs) in enumerate(PROCESSES) for checks, kind in runs if kind == model and check in checks
    )
    return _process(index)[check, model]


@on_jax
@pytest.mark.parametrize("model", distributed_runs.MODELS)
def test_data_parallel_over_four_cpus_trains_like_one_device(model):
    report = run_distributed("data_parallel", model)
    assert_trains_like_one_device(report, replicas=4)


@on_jax
@pytest.mark.parametrize("model", distributed_runs.MODELS)
def test_model_parallel_places_each_weight_and_keeps_outputs_and_gradients(model):
    report = run_distributed("model_parallel_training", model)
    placements = report["placements"]
    for path, axes in placements.items():
        assert axes == expected_axes(path, len(axes)), path
    assert sum("model" in axes for axes in placements.values()) == {"lstm": 7, "transformer": 31}[model]
    # To 1e-5 relative: the logits of N(0, 1) weights reach tens, where float32 rounds at 1e-6.
    assert report["output_difference"] <= 1e-5 * max(1.0, report["output_size"])
    loss, reference_loss = report["losses"]
    assert loss == pytest.approx(reference_loss, abs=1e-5)
    assert report["gradient_difference"] <= 1e-5 * max(1.0, report["gradient_size"])
    assert report["gradient_size"] > 1e-2  # gradients worth comparing


@on_jax
@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.parametrize("model", distributed_runs.MODELS)
def test_searches_on_the_sharded_model_find_the_same_ids(model, method):
    report = run_distributed(f"model_parallel_{method}", model)
    ids = np.array(report["ids"])
    np.testing.assert_array_equal(ids, report["reference_ids"])
    np.testing.assert_array_equal(report["lengths"], report["reference_lengths"])
    np.testing.assert_allclose(report["scores"], report["reference_scores"], rtol=1e-6, atol=1e-5)
    batch = distributed_runs.BATCH
    assert ids.shape == ((batch, distributed_runs.MAX_LENGTH) if method == "greedy" else (batch, 3, 5))
    # The rows decode differently: equal ids say something about the sharded model.
    assert len({tuple(row.ravel()) for row in ids}) > 1


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the PyTorch backend's state")
def test_keras_has_no_distribution_on_torch():
    """Keras 3.15 implements keras.distribution on JAX (and, experimentally, TensorFlow) only:
    on PyTorch its device queries fail. When a Keras release adds it, this fails, and
    docs/scaling-out.md gets a PyTorch row."""
    with pytest.raises(AttributeError):
        keras.distribution.list_devices()


# The weights of the dates example the library's layout map splits (the rest, the recurrent
# cells' and the initial state's, are replicated).
DATES_SPLIT = [
    "source_embedding/embeddings",
    "target_embedding/embeddings",
    "decoder/attention_gru/additive_attention/query_kernel",
    "decoder/attention_gru/additive_attention/key_kernel",
    "decoder/attention_gru/additive_attention/score_vector",
    "readout/kernel",
    "readout/bias",
]


@on_jax
def test_the_dates_trainer_trains_model_parallel_and_prints_where(tmp_path):
    arguments = ("--smoke", "--distribute", "model", "--samples", 128, "--epochs", 1, "--out", tmp_path)
    completed = examples.run("examples.translate_dates", *arguments, environment=FOUR_FAST_CPUS, timeout=600)
    assert (
        "distribute: model (keras.distribution.ModelParallel), a mesh of batch 2 x model 2, 2 replica(s) of the "
        "data: cpu:0, cpu:1, cpu:2, cpu:3; 0 GPU(s); precision float32; XLA on"
    ) in completed.stdout
    assert f"model parallel: 7 of 19 weights split over the mesh's model axis: {', '.join(DATES_SPLIT)}" in (
        completed.stdout
    )
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["distribute"] == "model" and results["replicas"] == 2
    assert np.isfinite(results["final_loss"]) and 0.0 <= results["greedy_character_accuracy"] <= 1.0
    # What it trained, saved whole: the decoders load on one device and decode.
    greedy = keras.models.load_model(tmp_path / "dates_greedy.keras")
    translate_dates = examples.load("translate_dates")
    decoded, _ = translate_dates.translate(greedy, ["3/3/15"])
    assert len(decoded) == 1 and set(decoded[0]) <= set("0123456789-")
    # Without matplotlib (the JAX venv has none) the pictures are skipped, and said to be.
    if importlib.util.find_spec("matplotlib") is None:
        assert "attention plots skipped: matplotlib is not installed" in completed.stdout
