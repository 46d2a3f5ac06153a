"""keras-hub's TransformerEncoder / TransformerDecoder copied into ours (keras_attention.keras_hub_import):
the same outputs at every valid position, pre-norm and post-norm, with padding masks; the same cached
steps and greedy ids as keras-hub's cached loop; what cannot map refused. TensorFlow venv only
(keras-hub pulls tensorflow-text); skipped where keras-hub is absent."""

import inspect
import re
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
from keras import ops

keras_hub = pytest.importorskip("keras_hub", reason="keras-hub is not installed (the keras-hub extra, in dev)")

import keras_attention as ka  # noqa: E402
from keras_attention.keras_hub_import import copy_from_keras_hub, from_keras_hub  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
B, T, S, D, HEADS, FFN = 3, 5, 6, 16, 2, 24
TARGET_VALID = np.array([[True] * 5, [True] * 3 + [False] * 2, [True] * 4 + [False]])
SOURCE_VALID = np.array([[True] * 6, [True] * 2 + [False] * 4, [True] * 5 + [False]])


def randomized(layer, seed):
    """Every weight drawn at random (biases, gammas and betas too), so a weight left uncopied shows."""
    rng = np.random.default_rng(seed)
    for variable in layer.weights:
        variable.assign(
            rng.normal(0.0, 0.3, variable.shape).astype("float32") + (1.0 if "gamma" in variable.path else 0.0)
        )
    return layer


def hub_encoder(seed=0, **options):
    options = {"intermediate_dim": FFN, "num_heads": HEADS, **options}
    layer = keras_hub.layers.TransformerEncoder(**options)
    layer.build((None, None, D))
    return randomized(layer, seed)


def hub_decoder(seed=0, memory_dim=D, **options):
    options = {"intermediate_dim": FFN, "num_heads": HEADS, **options}
    layer = keras_hub.layers.TransformerDecoder(**options)
    layer.build((None, None, D), (None, None, memory_dim))
    return randomized(layer, seed)


def inputs(seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(B, T, D)).astype("float32"), rng.normal(size=(B, S, D)).astype("float32")


def valid_rows(array, valid):
    return np.asarray(array)[valid]


# ------------------------------------------------------------------ outputs


@pytest.mark.parametrize(
    "options",
    [
        {"normalize_first": False},
        {"normalize_first": True},
        {"normalize_first": True, "activation": "gelu", "layer_norm_epsilon": 1e-6, "dropout": 0.1},
    ],
    ids=["post-norm", "pre-norm", "gelu-eps-dropout"],
)
def test_encoder_outputs_equal_keras_hubs_at_valid_positions(options):
    hub = hub_encoder(**options)
    x, _ = inputs()
    expected = hub(x, padding_mask=TARGET_VALID)
    ours = from_keras_hub(hub)
    assert isinstance(ours, ka.TransformerEncoderLayer)
    assert ours.norm_first == options["normalize_first"]
    assert ours.dropout == ours.attention_dropout == options.get("dropout", 0.0)
    assert ours.activation_dropout == 0.0
    got = ours(x, mask=TARGET_VALID)
    np.testing.assert_allclose(valid_rows(got, TARGET_VALID), valid_rows(expected, TARGET_VALID), atol=1e-5)
    # Without a mask, every position.
    np.testing.assert_allclose(ours(x), hub(x), atol=1e-5)


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post-norm", "pre-norm"])
def test_decoder_outputs_equal_keras_hubs_with_causal_and_padding_masks(normalize_first):
    hub = hub_decoder(normalize_first=normalize_first, memory_dim=12)
    x, _ = inputs()
    memory = np.random.default_rng(2).normal(size=(B, S, 12)).astype("float32")
    expected = hub(x, memory, decoder_padding_mask=TARGET_VALID, encoder_padding_mask=SOURCE_VALID)
    ours = from_keras_hub(hub)
    assert isinstance(ours, ka.TransformerDecoderLayer)
    got = ours(x, memory, mask=TARGET_VALID, memory_mask=SOURCE_VALID)
    np.testing.assert_allclose(valid_rows(got, TARGET_VALID), valid_rows(expected, TARGET_VALID), atol=1e-5)
    # The masks matter: without them the outputs differ.
    assert np.abs(np.asarray(ours(x, memory)) - np.asarray(expected))[TARGET_VALID].max() > 1e-2


def test_stacks_equal_keras_hub_layers_in_sequence_with_a_final_norm():
    x, memory = inputs()
    encoders = [hub_encoder(seed, normalize_first=True) for seed in range(3)]
    decoders = [hub_decoder(10 + seed, normalize_first=True) for seed in range(3)]
    norm = keras.layers.LayerNormalization(epsilon=1e-5)
    norm.build((None, None, D))
    randomized(norm, 7)
    encoded, decoded = x, x
    for encoder in encoders:
        encoded = encoder(encoded, padding_mask=SOURCE_VALID[:, :T])
    encoded = norm(encoded)
    for decoder in decoders:
        decoded = decoder(decoded, memory, decoder_padding_mask=TARGET_VALID, encoder_padding_mask=SOURCE_VALID)
    encoder_stack = from_keras_hub(encoders, final_norm=norm)
    decoder_stack = from_keras_hub(decoders)
    assert isinstance(encoder_stack, ka.TransformerEncoderStack) and encoder_stack.final_norm
    assert isinstance(decoder_stack, ka.TransformerDecoderStack) and not decoder_stack.final_norm
    assert encoder_stack.num_layers == decoder_stack.num_layers == 3
    got = encoder_stack(x, mask=SOURCE_VALID[:, :T])
    np.testing.assert_allclose(
        valid_rows(got, SOURCE_VALID[:, :T]), valid_rows(encoded, SOURCE_VALID[:, :T]), atol=1e-5
    )
    got = decoder_stack(x, memory, mask=TARGET_VALID, memory_mask=SOURCE_VALID)
    np.testing.assert_allclose(valid_rows(got, TARGET_VALID), valid_rows(decoded, TARGET_VALID), atol=1e-5)


def test_copy_into_an_existing_stack_replaces_every_weight():
    decoders = [hub_decoder(seed) for seed in range(2)]
    stack = ka.TransformerDecoderStack(2, num_heads=HEADS, intermediate_dim=FFN, norm_first=False)
    assert copy_from_keras_hub(decoders, stack) is stack
    hub_values = [v for layer in decoders for v in layer.weights]
    ours = stack.weights
    assert len(ours) == len(hub_values) == 2 * 26
    # Every one of ours holds a keras-hub value (none left at its initial value).
    hub_sums = sorted(float(np.sum(np.asarray(v))) for v in hub_values)
    np.testing.assert_allclose(sorted(float(np.sum(np.asarray(v))) for v in ours), hub_sums, rtol=1e-6, atol=1e-6)


# ------------------------------------------------------------ cached decoding


def hub_cached_step(layers, x, caches, cross_caches, memory, memory_valid, time):
    """One position through keras-hub's decoders with their caches, as keras-hub's models generate."""
    new_caches = []
    for layer, cache, cross in zip(layers, caches, cross_caches):
        x, cache, _ = layer(
            x,
            memory,
            encoder_padding_mask=memory_valid,
            self_attention_cache=cache,
            self_attention_cache_update_index=time,
            cross_attention_cache=cross,
            cross_attention_cache_update_index=None,
        )
        new_caches.append(cache)
    return x, new_caches


def hub_caches(layers, memory, length):
    head_size = D // HEADS
    caches = [ops.zeros((len(memory), 2, length, HEADS, head_size)) for _ in layers]
    cross = [
        ops.stack(
            [layer._cross_attention_layer._key_dense(memory), layer._cross_attention_layer._value_dense(memory)], 1
        )
        for layer in layers
    ]
    return caches, cross


@pytest.mark.parametrize("normalize_first", [False, True], ids=["post-norm", "pre-norm"])
def test_cached_steps_and_greedy_ids_equal_keras_hubs_cached_loop(normalize_first):
    vocabulary, start, end, length = 11, 1, 2, 7
    _, memory = inputs()
    layers = [hub_decoder(20 + seed, normalize_first=normalize_first) for seed in range(2)]
    stack = from_keras_hub(layers)
    embedding, readout = keras.layers.Embedding(vocabulary, D), keras.layers.Dense(vocabulary)
    embedding.build((None, None))
    readout.build((None, None, D))
    randomized(embedding, 30), randomized(readout, 31)
    # Step by step on the same inputs: the hidden states agree at every step.
    x = np.random.default_rng(3).normal(size=(B, length, D)).astype("float32")
    caches, cross = hub_caches(layers, memory, length)
    ours_caches, projected = stack.initial_cache(B, length), stack.project_memory(memory)
    for time in range(length):
        expected, caches = hub_cached_step(layers, x[:, time : time + 1], caches, cross, memory, SOURCE_VALID, time)
        got, ours_caches, _ = stack.step(x[:, time : time + 1], ours_caches, projected, SOURCE_VALID, time)
        np.testing.assert_allclose(got, expected, atol=1e-5, err_msg=f"step {time}")
    # Greedy decoding: keras-hub's cached loop against TransformerInferenceDecoder.
    caches, cross = hub_caches(layers, memory, length)
    previous, hub_ids, hub_scores = np.full((B,), start), [], np.zeros(B)
    for time in range(length):
        hidden, caches = hub_cached_step(
            layers, embedding(previous[:, None]), caches, cross, memory, SOURCE_VALID, time
        )
        logits = np.asarray(readout(hidden))[:, 0].astype("float64")
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
        previous = logits.argmax(-1)
        hub_ids.append(previous)
        hub_scores += log_probs[np.arange(B), previous]
    hub_ids = np.stack(hub_ids, 1)
    decoder = ka.TransformerInferenceDecoder(stack, embedding, readout, start, end, length, method="greedy")
    result = decoder(ops.convert_to_tensor(memory), memory_mask=SOURCE_VALID)
    ids, lengths = np.asarray(result["ids"]), np.asarray(result["lengths"])
    for row in range(B):
        np.testing.assert_array_equal(ids[row, : lengths[row]], hub_ids[row, : lengths[row]])
        if lengths[row] == length:  # no end token: the score sums every step's log-probability
            np.testing.assert_allclose(np.asarray(result["scores"])[row], hub_scores[row], atol=1e-4)


# ------------------------------------------------------------------ refusals


def test_refuses_what_cannot_map():
    unbuilt = keras_hub.layers.TransformerEncoder(intermediate_dim=FFN, num_heads=HEADS)
    with pytest.raises(ValueError, match=r"from_keras_hub: `layers` .* is not built.*expected a built layer"):
        from_keras_hub(unbuilt)
    decoder_only = keras_hub.layers.TransformerDecoder(intermediate_dim=FFN, num_heads=HEADS)
    decoder_only.build((None, None, D))
    with pytest.raises(ValueError, match=r"`layers` .* without cross-attention.*expected a decoder built with"):
        from_keras_hub(decoder_only)
    with pytest.raises(ValueError, match=r"`layers` must be a keras_hub.layers.TransformerEncoder.*got <Dense"):
        from_keras_hub(keras.layers.Dense(3))
    with pytest.raises(ValueError, match=r"`layers\[1\]` must be a encoder with the settings of `layers\[0\]`"):
        from_keras_hub([hub_encoder(), hub_encoder(normalize_first=True)])
    with pytest.raises(ValueError, match=r"must hold at least one layer; got \[\]"):
        from_keras_hub([])
    norm = keras.layers.LayerNormalization(epsilon=1e-3)
    norm.build((None, None, D))
    with pytest.raises(ValueError, match=r"`final_norm` has epsilon=0.001.*expected epsilon=1e-05"):
        from_keras_hub([hub_encoder()], final_norm=norm)


def test_copy_refuses_mismatched_settings_sizes_and_classes():
    hub = hub_encoder()
    with pytest.raises(ValueError, match=r"has norm_first=True; expected False, the setting of `layers`"):
        copy_from_keras_hub(hub, ka.TransformerEncoderLayer(num_heads=HEADS, intermediate_dim=FFN))
    with pytest.raises(ValueError, match=r"has intermediate_dim=8; expected 24"):
        copy_from_keras_hub(hub, ka.TransformerEncoderLayer(num_heads=HEADS, intermediate_dim=8, norm_first=False))
    wider = ka.TransformerEncoderLayer(num_heads=HEADS, intermediate_dim=FFN, norm_first=False)
    wider.build((None, None, 2 * D))
    with pytest.raises(ValueError, match=r"`layers._self_attention_layer._query_dense.kernel` of shape \(16, 2, 8\) "):
        copy_from_keras_hub(hub, wider)
    with pytest.raises(ValueError, match=r"`ours` must be a TransformerEncoderLayer for a keras-hub encoder layer"):
        copy_from_keras_hub(hub, ka.TransformerDecoderLayer(num_heads=HEADS, intermediate_dim=FFN, norm_first=False))
    stack = ka.TransformerEncoderStack(3, num_heads=HEADS, intermediate_dim=FFN, norm_first=False)
    with pytest.raises(ValueError, match=r"`ours` has 3 layers; expected 2"):
        copy_from_keras_hub([hub, hub_encoder(1)], stack)
    pre_norm_stack = ka.TransformerEncoderStack(1, num_heads=HEADS, intermediate_dim=FFN, norm_first=True)
    with pytest.raises(ValueError, match=r"`final_norm` is None for a stack with final_norm=True; expected a built"):
        copy_from_keras_hub([hub_encoder(normalize_first=True)], pre_norm_stack)


# ------------------------------------------------------------------ docs


@pytest.mark.parametrize("function", [copy_from_keras_hub, from_keras_hub], ids=lambda f: f.__name__)
def test_docstring_sections_and_example_run(function):
    doc = inspect.getdoc(function)
    for section in ("Paper:", "Shapes:", "Example:", "arXiv:"):
        assert section in doc
    (example,) = re.findall(r"```python\n(.*?)```", doc, re.S)
    exec(compile(example, f"<{function.__name__} example>", "exec"), {"np": np, "keras": keras, "keras_attention": ka})


def test_transformer_page_section_runs():
    """docs/transformer.md's "From keras-hub" block (not run by test_docs: keras-hub is an extra)."""
    page = (ROOT / "docs" / "transformer.md").read_text()
    section = page.split("## From keras-hub")[1].split("\n## ")[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace = {}
    exec(compile(block, "<docs/transformer.md: From keras-hub>", "exec"), namespace)
    assert namespace["ids"].shape == (2, 8)


def test_importing_keras_attention_does_not_import_keras_hub():
    code = "import sys, keras_attention, keras_attention.keras_hub_import; print('keras_hub' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"
