"""The JAX workers' memo of compiled programs (tests/jax_compiles.py): a
decoder called again reuses its loop's compilation, and a decoder of the
same shape with other weights reuses it too and still answers with its own
weights (they are operands of the program, not constants in it)."""

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests import jax_compiles

pytestmark = pytest.mark.any_backend

on_jax_only = pytest.mark.skipif(keras.backend.backend() != "jax", reason="the memo is installed on JAX only")


def _decoder(seed):
    keras.utils.set_random_seed(seed)
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(6))
    return ka.InferenceDecoder(cell, keras.layers.Embedding(11, 5), keras.layers.Dense(11), 1, 2, 5)


@on_jax_only
def test_a_second_call_and_a_twin_decoder_reuse_the_compiled_loop():
    import jax

    rng = np.random.default_rng(0)
    memory = rng.normal(size=(2, 4, 6)).astype("float32")
    mask = np.array([[True] * 4, [True, True, False, False]])
    first, twin = _decoder(1), _decoder(2)
    first(memory, memory_mask=mask)
    twin(memory, memory_mask=mask)  # built, and each eager op's shapes compiled once
    before = dict(jax_compiles.counts)
    scores = ops.convert_to_numpy(twin(memory, memory_mask=mask)["scores"])
    assert jax_compiles.counts["compiled"] == before["compiled"]
    assert jax_compiles.counts["reused"] > before["reused"]
    # The twin's own answer: the whole call traced under jax.jit, a program of its own.
    traced = jax.jit(lambda m: twin(m, memory_mask=mask)["scores"])
    np.testing.assert_allclose(scores, np.asarray(traced(memory)), rtol=1e-5, atol=1e-6)
    assert not np.allclose(scores, ops.convert_to_numpy(first(memory, memory_mask=mask)["scores"]))
