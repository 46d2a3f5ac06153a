"""Scaling out on JAX (`make test-jax`): `keras.distribution.DataParallel` over 4 CPU devices trains
the LSTM and Transformer seq2seq models to one device's losses and weights; `ModelParallel` on a
2 x 2 mesh with the library's layout map places each weight as documented and gives the unsharded
model's outputs, gradients and searches. On PyTorch, Keras 3 has no `keras.distribution`: a test
says so, and fails the day it has one. Each run is a subprocess: JAX must see its 4 devices
(`XLA_FLAGS`) before it starts."""

import functools

import keras
import numpy as np
import pytest

from tests import distributed_runs
from tests.test_distribution import assert_trains_like_one_device, expected_axes, run_distributed_checks

pytestmark = pytest.mark.any_backend

on_jax = pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution runs on JAX")
FOUR_CPUS = {"KERAS_BACKEND": "jax", "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
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
