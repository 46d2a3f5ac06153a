"""Query chunking of the broadcast scores (AdditiveAttention, ConcatAttention
with units, BahdanauMonotonicAttention): same result as the direct form, same
gradients, XLA training, export, and the "auto" rule."""

import types

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_attention as ka
from keras_attention.layers import additive
from tests.export_check import assert_export_parity
from tests.gradient_check import assert_input_gradients_match, assert_weight_gradients_match
from tests.layer_cases import (
    SymbolicDim,
    lengths_mask,
    randomize,
    randomize_model,
    token_batch,
    unknown_shape_dataset,
)

TQ, TV = 7, 5  # 7 queries: chunks of 3 leave a partial last chunk

FACTORIES = {
    "additive": lambda **kw: ka.AdditiveAttention(6, use_bias=True, **kw),
    "additive_normalized": lambda **kw: ka.AdditiveAttention(6, normalize=True, **kw),
    "concat": lambda **kw: ka.ConcatAttention(units=6, activation="relu", **kw),
    "monotonic": lambda **kw: ka.BahdanauMonotonicAttention(6, normalize=True, **kw),
}
params = pytest.mark.parametrize("make", list(FACTORIES.values()), ids=list(FACTORIES))


def _inputs(rng, dtype="float32", batch=3):
    query = rng.normal(size=(batch, TQ, 4)).astype(dtype)
    value = rng.normal(size=(batch, TV, 5)).astype(dtype)
    key = rng.normal(size=(batch, TV, 3)).astype(dtype)
    return query, value, key


def _pair(make, rng, query, value, key, chunk_size, dtype="float32"):
    """A chunked layer and a direct (chunk_size=None) copy with the same weights."""
    chunked = make(chunk_size=chunk_size, dtype=dtype)
    direct = make(chunk_size=None, dtype=dtype)
    for layer in (chunked, direct):
        layer(query, value, key=key)
    randomize(chunked, rng)
    direct.set_weights(chunked.get_weights())
    return chunked, direct


@params
@pytest.mark.parametrize("chunk_size", [1, 3, 6, 7, 50])
def test_chunked_equals_direct(make, chunk_size):
    rng = np.random.default_rng(0)
    query, value, key = _inputs(rng)
    chunked, direct = _pair(make, rng, query, value, key, chunk_size)
    mask = lengths_mask([5, 2, 4], TV)
    got = chunked(query, value, key=key, value_mask=mask, return_attention_scores=True)
    want = direct(query, value, key=key, value_mask=mask, return_attention_scores=True)
    for a, b in zip(got, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


@params
@pytest.mark.parametrize("budget", [None, 2 * 3 * TV * 6 * 4], ids=["auto_whole", "auto_chunks_of_2"])
def test_chunked_equals_direct_in_a_graph_with_unknown_shapes(make, budget, monkeypatch):
    if budget is not None:
        monkeypatch.setattr(additive, "AUTO_CHUNK_BYTES", budget)
    rng = np.random.default_rng(1)
    query, value, key = _inputs(rng)
    chunked, direct = _pair(make, rng, query, value, key, 2)
    spec = [tf.TensorSpec([None, None, x.shape[-1]]) for x in (query, value, key)]
    for layer in (chunked, direct):
        layer.graph = tf.function(lambda q, v, k, layer=layer: layer(q, v, key=k), input_signature=spec)
    np.testing.assert_allclose(chunked.graph(query, value, key), direct.graph(query, value, key), atol=1e-6)
    # The auto rule with unknown shapes decides at run time.
    auto = make(chunk_size="auto")
    auto(query, value, key=key)
    auto.set_weights(direct.get_weights())
    graph = tf.function(lambda q, v, k: auto(q, v, key=k), input_signature=spec)
    np.testing.assert_allclose(graph(query, value, key), direct.graph(query, value, key), atol=1e-6)


@params
def test_chunked_gradients_match_finite_differences_in_float64(make):
    rng = np.random.default_rng(2)
    query, value, key = _inputs(rng, "float64", batch=2)
    layer, _ = _pair(make, rng, query, value, key, 3, dtype="float64")
    mask = lengths_mask([5, 3], TV)
    readout = rng.normal(size=(2, TQ, 5))

    def loss(q, v, k):
        return tf.reduce_sum(layer(q, v, key=k, value_mask=mask) * readout)

    tensors = [tf.constant(x) for x in (query, value, key)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value_of_loss = loss(*tensors)
    analytic = tape.gradient(value_of_loss, tensors + layer.trainable_weights)
    assert all(g is not None for g in analytic)
    assert_input_gradients_match(loss, [query, value, key], analytic)
    assert_weight_gradients_match(layer, lambda: loss(*tensors), analytic[3:])


@params
def test_chunked_gradients_equal_direct_gradients(make):
    rng = np.random.default_rng(3)
    query, value, key = _inputs(rng)
    chunked, direct = _pair(make, rng, query, value, key, 2)
    grads = []
    for layer in (chunked, direct):
        tensors = [tf.constant(x) for x in (query, value, key)]
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            loss = tf.reduce_sum(tf.sin(layer(*tensors[:2], key=tensors[2])))
        grads.append(tape.gradient(loss, tensors + layer.trainable_weights))
    for a, b in zip(*grads):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5)


def _model(make, chunk_size):
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    value = keras.layers.Embedding(20, 5, mask_zero=True)(source)
    query = keras.layers.Embedding(20, 4, mask_zero=True)(target)
    context = make(chunk_size=chunk_size, name="attention")(query, value)
    pooled = keras.layers.GlobalAveragePooling1D()(context)
    return keras.Model([source, target], keras.layers.Dense(3)(pooled))


@params
def test_chunked_layer_fits_with_xla_and_unknown_lengths(make):
    rng = np.random.default_rng(4)
    model = _model(make, 2)
    model.compile(
        optimizer=keras.optimizers.Adam(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    ka.training.build_optimizer(model)
    attention = model.get_layer("attention")
    before = [w.numpy().copy() for w in attention.trainable_weights]
    batches = [
        (
            (token_batch(rng, batch, source_length), token_batch(rng, batch, target_length)),
            rng.integers(0, 3, size=batch),
        )
        for batch, source_length, target_length in ((8, 7, 5), (5, 4, 6))
    ]
    history = model.fit(unknown_shape_dataset(batches), epochs=2, shuffle=False, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    predictions = model.predict([token_batch(rng, 4, 3), token_batch(rng, 4, 9)], verbose=0)
    assert predictions.shape == (4, 3) and np.isfinite(predictions).all()
    for old, new in zip(before, attention.trainable_weights):
        assert not np.allclose(old, new.numpy()), f"{new.path} did not train"


@pytest.mark.parametrize("name", ["additive", "concat"])
def test_chunked_layer_exports_with_parity(name, tmp_path):
    rng = np.random.default_rng(5)
    model = _model(FACTORIES[name], 2)
    randomize_model(model, rng)
    batches = [
        {"source": token_batch(rng, 3, 6), "target": token_batch(rng, 3, 5)},
        {"source": token_batch(rng, 1, 9), "target": token_batch(rng, 1, 2)},
    ]
    assert_export_parity(model, batches, tmp_path, atol=1e-5)


@params
def test_chunk_size_in_config_and_keras_file(make, tmp_path):
    assert make().chunk_size == "auto"
    for chunk_size in ("auto", None, 4):
        layer = make(chunk_size=chunk_size)
        config = layer.get_config()
        assert config["chunk_size"] == chunk_size
        assert type(layer).from_config(config).get_config() == config
    model = _model(make, 3)
    path = tmp_path / "model.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert loaded.get_layer("attention").chunk_size == 3
    inputs = [token_batch(np.random.default_rng(6), 2, 6), token_batch(np.random.default_rng(7), 2, 8)]
    np.testing.assert_array_equal(loaded(inputs), model(inputs))


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "big"])
def test_invalid_chunk_size_is_rejected(bad):
    with pytest.raises(ValueError, match="chunk_size"):
        ka.AdditiveAttention(4, chunk_size=bad)
    with pytest.raises(ValueError, match="chunk_size"):
        ka.ConcatAttention(units=4, chunk_size=bad)


def test_auto_rule_keeps_one_block_under_the_budget():
    budget = additive.AUTO_CHUNK_BYTES
    pq = keras.KerasTensor((32, 1024, 256))
    pk = keras.KerasTensor((32, 1024, 256))
    rows = additive._queries_per_chunk("auto", pq, pk)
    assert isinstance(rows, int) and rows * 32 * 1024 * 256 * 4 <= budget < (rows + 1) * 32 * 1024 * 256 * 4
    # A row bigger than the budget still gets one query per chunk.
    assert additive._queries_per_chunk("auto", keras.KerasTensor((64, 8, 256)), keras.KerasTensor((64, 4096, 256))) == 1
    # float16 blocks hold twice as many queries.
    pq16 = keras.KerasTensor((32, 1024, 256), dtype="float16")
    assert additive._queries_per_chunk("auto", pq16, pk) == 2 * rows
    assert additive._queries_per_chunk(None, pq, pk) is None
    assert additive._queries_per_chunk(5, pq, pk) == 5


def test_auto_rule_with_symbolic_sizes_takes_one_block_off_tensorflow(monkeypatch):
    # A symbolic size (jax.export / jax2tf, issue 18) refuses int(); JAX
    # needs the chunk count while tracing, which such a size cannot give.
    batch = SymbolicDim()
    pq = types.SimpleNamespace(shape=(batch, 7, 6), dtype="float32")
    pk = types.SimpleNamespace(shape=(batch, 5, 6), dtype="float32")
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    assert additive._queries_per_chunk("auto", pq, pk) is None
    assert additive._queries_per_chunk(3, pq, pk) == 3


@pytest.mark.skipif(
    keras.backend.backend() != "jax",
    reason="jax.export is JAX's own: this round trip through symbolic shapes runs on the JAX backend only",
)
@pytest.mark.parametrize("chunk_size", ["auto", 3])
def test_exports_from_jax_with_symbolic_batch_and_lengths(chunk_size):
    import jax
    from jax import export

    rng = np.random.default_rng(12)
    query, value, key = _inputs(rng)
    layer, direct = _pair(FACTORIES["additive"], rng, query, value, key, chunk_size)
    specs = export.symbolic_args_specs((query, value, key), ("b, tq, 4", "b, tv, 5", "b, tv, 3"))
    exported = export.export(jax.jit(lambda q, v, k: layer(q, v, key=k)))(*specs)
    np.testing.assert_allclose(exported.call(query, value, key), direct(query, value, key=key), atol=1e-5)
    short = tuple(x[:2, :4] if x is query else x[:2] for x in (query, value, key))
    np.testing.assert_allclose(exported.call(*short), direct(short[0], short[1], key=short[2]), atol=1e-5)


def test_auto_chunks_long_inputs_and_leaves_short_ones_whole(monkeypatch):
    rng = np.random.default_rng(8)
    query, value, key = _inputs(rng)
    layer, direct = _pair(FACTORIES["additive"], rng, query, value, key, "auto")
    calls = []
    original = additive._chunked_score
    monkeypatch.setattr(additive, "_chunked_score", lambda *a: calls.append(a[-1]) or original(*a))
    layer(query, value, key=key)
    assert calls == []  # 3 * 5 * 6 floats per query: far under the budget
    # Shrink the budget to two queries' blocks: 7 queries -> 4 chunks of 2.
    monkeypatch.setattr(additive, "AUTO_CHUNK_BYTES", 2 * 3 * TV * 6 * 4)
    got = layer(query, value, key=key)
    assert calls == [2]
    np.testing.assert_allclose(got, direct(query, value, key=key), atol=1e-6)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_chunked_mixed_precision(policy):
    rng = np.random.default_rng(9)
    query, value, key = _inputs(rng)
    layer = ka.AdditiveAttention(6, chunk_size=3, dtype=policy)
    context, weights = layer(query * 30, value, key=key * 30, return_attention_scores=True)
    assert context.dtype == policy.split("_")[1]
    weights = np.asarray(weights, np.float32)
    assert np.isfinite(weights).all()
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-2)


def test_decoder_with_chunked_attention_trains_and_matches():
    """A decoder's per-step query is never chunked; its output is unchanged."""
    rng = np.random.default_rng(10)
    targets = rng.normal(size=(2, 4, 5)).astype("float32")
    memory = rng.normal(size=(2, 7, 6)).astype("float32")
    outputs = []
    for chunk_size in (1, None):
        keras.utils.set_random_seed(3)
        cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4, chunk_size=chunk_size))
        outputs.append(np.asarray(ka.AttentionDecoder(cell)(targets, memory)))
    np.testing.assert_allclose(outputs[0], outputs[1], atol=1e-6)


@pytest.mark.parametrize("chunk_size", ["auto", 2])
def test_static_query_length_stays_static_in_graphs(chunk_size):
    layer = ka.AdditiveAttention(4, chunk_size=chunk_size)
    spec = [tf.TensorSpec([None, 7, 4]), tf.TensorSpec([None, None, 5])]
    graph = tf.function(lambda q, v: layer(q, v), input_signature=spec)
    assert graph.get_concrete_function().structured_outputs.shape.as_list() == [None, 7, 5]


def test_inference_decoder_with_auto_chunking_builds_on_keras_inputs():
    """A decoder's query has a static length of 1 while the batch and memory
    length are unknown: the score must keep that axis static."""
    cell = ka.AttentionGRUCell(8, ka.AdditiveAttention(4))
    memory = keras.Input((None, 6))
    decoded = ka.InferenceDecoder(cell, keras.layers.Embedding(10, 3), keras.layers.Dense(10), 1, 2, 5)(memory)
    model = keras.Model(memory, decoded)
    out = model.predict(np.random.default_rng(0).normal(size=(2, 9, 6)).astype("float32"), verbose=0)
    assert out["ids"].shape == (2, 5)


def _lstm_query_model(chunk_size):
    # A partial last batch makes Keras trace `fit` with an unknown batch
    # size, so "auto" decides at run time.
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    memory = keras.layers.Embedding(20, 6, mask_zero=True)(source)
    queries = keras.layers.LSTM(16, return_sequences=True)(keras.layers.Embedding(20, 8, mask_zero=True)(target))
    context = ka.AdditiveAttention(8, chunk_size=chunk_size, name="attention")(queries, memory)
    return keras.Model([source, target], keras.layers.Dense(5)(context))


@pytest.mark.parametrize("budget", [None, 2 * 4 * 7 * 8 * 4], ids=["auto_whole", "auto_chunks_of_2"])
def test_auto_chunking_with_run_time_shapes_trains_under_xla(budget, monkeypatch):
    """XLA cannot compile the gradient of a run-time choice whose chunked side
    keeps loop state (a FakeParam of DT_VARIANT): the choice must not need it."""
    if budget is not None:
        monkeypatch.setattr(additive, "AUTO_CHUNK_BYTES", budget)
    rng = np.random.default_rng(11)
    x = [token_batch(rng, 6, 7, min_length=2), token_batch(rng, 6, 5, min_length=2)]
    y = rng.integers(0, 5, size=(6, 5))
    histories = []
    for chunk_size in ("auto", None):
        keras.utils.set_random_seed(5)
        model = _lstm_query_model(chunk_size)
        model.compile(
            keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True), jit_compile=True
        )
        ka.training.build_optimizer(model)
        histories.append(model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0).history["loss"])
    assert np.isfinite(histories[0]).all()
    # The same losses as the unchunked twin, step after step.
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-5)
