"""AdditiveAttention's default chunking, per backend (issue 18): "auto" keeps
a block of the `(B, Tq, Tv, units)` score under 64 MiB on TensorFlow and JAX
and under 1 GiB on PyTorch, where chunking is slower (benchmarks/results.md,
section 10); the backend is read when the layer is called; an explicit
chunk_size overrides it; the result and its gradients are the same either
way, on whichever backend this runs."""

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention.layers import additive
from tests.backend_gradients import value_and_gradients

pytestmark = pytest.mark.any_backend

MIB = 2**20
# A shape benchmarks/bench_backends.py measures: a 256 MiB float32 block of
# 2 MiB per query.
B, T, UNITS = 32, 128, 128


def _rows(chunk_size="auto", dtype="float32"):
    query = keras.KerasTensor((B, T, UNITS), dtype=dtype)
    key = keras.KerasTensor((B, T, UNITS), dtype=dtype)
    return additive._queries_per_chunk(chunk_size, query, key)


@pytest.mark.parametrize(("backend", "budget"), [("tensorflow", 64 * MIB), ("jax", 64 * MIB), ("torch", 1024 * MIB)])
def test_the_auto_budget_is_chosen_per_backend_when_the_layer_is_called(backend, budget, monkeypatch):
    assert additive.auto_chunk_bytes(backend) == budget
    monkeypatch.setattr(keras.backend, "backend", lambda: backend)
    assert additive.auto_chunk_bytes() == budget
    # At the measured shape: 4 chunks of 32 queries on TensorFlow and JAX,
    # one block (512 queries fit in 1 GiB) on PyTorch.
    assert _rows() == {"tensorflow": 32, "jax": 32, "torch": 512}[backend]
    assert _rows(dtype="float16") == 2 * _rows()
    # An explicit chunk size is the same on every backend.
    assert _rows(8) == 8 and _rows(None) is None


def test_the_active_backend_s_budget_is_the_default():
    expected = 1024 * MIB if keras.backend.backend() == "torch" else 64 * MIB
    assert additive.auto_chunk_bytes() == expected
    assert ka.AdditiveAttention(4).chunk_size == "auto"
    assert ka.AdditiveAttention.from_config(ka.AdditiveAttention(4).get_config()).chunk_size == "auto"


def _layers(query, value, **sizes):
    """One layer per chunk size, all with the same random weights."""
    layers = {name: ka.AdditiveAttention(6, use_bias=True, chunk_size=size) for name, size in sizes.items()}
    for layer in layers.values():
        layer(query, value)
    rng = np.random.default_rng(0)
    weights = [rng.normal(size=w.shape).astype("float32") for w in next(iter(layers.values())).get_weights()]
    for layer in layers.values():
        layer.set_weights(weights)
    return layers


def test_results_and_gradients_are_the_same_chunked_or_not(monkeypatch):
    rng = np.random.default_rng(3)
    query = rng.normal(size=(3, 7, 4)).astype("float32")
    value = rng.normal(size=(3, 5, 5)).astype("float32")
    # This backend's "auto" budget, shrunk to two queries' (3, 5, 6) float32 blocks.
    monkeypatch.setattr(additive, "auto_chunk_bytes", lambda backend=None: 2 * 3 * 5 * 6 * 4)
    chunks = []
    original = additive._chunked_score
    monkeypatch.setattr(additive, "_chunked_score", lambda *a: chunks.append(a[-1]) or original(*a))
    layers = _layers(query, value, auto="auto", direct=None)
    chunks.clear()
    results = {}
    readout = rng.normal(size=(3, 7, 5)).astype("float32")
    for name, layer in layers.items():
        loss = lambda q, v, layer=layer: keras.ops.sum(layer(q, v) * keras.ops.convert_to_tensor(readout))  # noqa: E731
        output = keras.ops.convert_to_numpy(keras.ops.stop_gradient(layer(query, value)))  # PyTorch: detached
        results[name] = (output, *value_and_gradients(loss, [query, value], layer.trainable_weights))
    # "auto" chunked by the (shrunk) budget, None not at all.
    assert set(chunks) == {2}
    want_output, want_loss, want_grads = results["direct"]
    output, loss, grads = results["auto"]
    np.testing.assert_allclose(output, want_output, atol=1e-6)
    np.testing.assert_allclose(loss, want_loss, rtol=1e-6)
    assert len(grads) == len(want_grads) == 2 + len(layers["auto"].trainable_weights)
    for got, want in zip(grads, want_grads):
        np.testing.assert_allclose(got, want, atol=1e-5)
