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

import keras
import numpy as np
import pytest

from tests import distributed_runs, examples
from tests.test_distribution import assert_trains_like_one_device, expected_axes, run_distributed_checks

pytestmark = pytest.mark.any_backend

on_jax = pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution runs on JAX")
# XLA's own optimisations kept: the checks compare one device with four to 1e-5, and compiled
# without them (the suite's TEST_XLA_FLAGS) a data-parallel Transformer's weights after three
# Adam steps differed by 1.7e-4 (4e-5 of their size), where Adam's first steps magnify rounding.
FOUR_CPUS = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
# The trainer's run checks what it prints and saves, not digits: compiled fast as the suite's
# other programs are (21 s against 37 s alone).
FOUR_FAST_CPUS = {**FOUR_CPUS, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {FOUR_CPUS['XLA_FLAGS']}".strip()}
CHECKS = ("data_parallel", "model_parallel_training", "model_parallel_greedy", "model_parallel_beam")


@functools.cache
def _reports(model):
    # Every check of a model in one process: a JAX process's start-up is most of a check's time.
    return run_distributed_checks(CHECKS, model, **FOUR_CPUS)


def run_distributed(check, model):
    return _reports(model)[check]


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
