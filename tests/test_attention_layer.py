"""The thin base every attention layer inherits: hierarchy, dropout and seed, specs, config."""

import types

import keras
import numpy as np
import pytest

import keras_attention as ka
from keras_attention import _checks
from tests.layer_cases import SymbolicDim

# Each layer with the config keys (beyond name, trainable, dtype) it wrote
# before the layers shared a base: saved models hold exactly these.
LAYERS = {
    "AdditiveAttention": (
        lambda: ka.AdditiveAttention(4),
        [
            "dropout",
            "seed",
            "units",
            "use_bias",
            "normalize",
            "chunk_size",
            "kernel_initializer",
            "kernel_regularizer",
            "bias_initializer",
            "bias_regularizer",
        ],
    ),
    "DotAttention": (lambda: ka.DotAttention(), ["dropout", "seed", "use_scale"]),
    "ScaledDotAttention": (lambda: ka.ScaledDotAttention(), ["dropout", "seed"]),
    "GeneralAttention": (
        lambda: ka.GeneralAttention(),
        ["dropout", "seed", "kernel_initializer", "kernel_regularizer"],
    ),
    "ConcatAttention": (
        lambda: ka.ConcatAttention(3),
        ["dropout", "seed", "units", "activation", "chunk_size", "kernel_initializer", "kernel_regularizer"],
    ),
    "HardAttention": (lambda: ka.HardAttention("dot"), ["seed", "score", "mode", "straight_through", "temperature"]),
    "BahdanauMonotonicAttention": (
        lambda: ka.BahdanauMonotonicAttention(4),
        [
            "seed",
            "units",
            "use_bias",
            "normalize",
            "chunk_size",
            "kernel_initializer",
            "kernel_regularizer",
            "bias_initializer",
            "bias_regularizer",
            "sigmoid_noise",
            "score_bias_init",
            "mode",
        ],
    ),
    "LuongMonotonicAttention": (
        lambda: ka.LuongMonotonicAttention(),
        ["seed", "kernel_initializer", "kernel_regularizer", "sigmoid_noise", "score_bias_init", "mode", "use_scale"],
    ),
    "AttentionPooling": (
        lambda: ka.AttentionPooling(4),
        [
            "dropout",
            "seed",
            "units",
            "use_bias",
            "kernel_initializer",
            "kernel_regularizer",
            "bias_initializer",
            "bias_regularizer",
        ],
    ),
    "MultiHeadAttention": (
        lambda: ka.MultiHeadAttention(2, 3),
        [
            "num_heads",
            "key_dim",
            "value_dim",
            "dropout",
            "use_bias",
            "output_dim",
            "kernel_initializer",
            "kernel_regularizer",
            "bias_initializer",
            "bias_regularizer",
            "seed",
        ],
    ),
    "SelfAttention": (
        lambda: ka.SelfAttention(4),
        [
            "units",
            "score",
            "causal",
            "window",
            "regularization_weight",
            "use_bias",
            "dropout",
            "seed",
            "kernel_initializer",
            "kernel_regularizer",
            "bias_initializer",
            "bias_regularizer",
        ],
    ),
    "PointerAttention": (
        lambda: ka.PointerAttention(4),
        ["units", "use_bias", "kernel_initializer", "kernel_regularizer", "bias_initializer", "bias_regularizer"],
    ),
    "TargetedAttention": (
        lambda: ka.TargetedAttention(4),
        [
            "units",
            "mode",
            "kernel_initializer",
            "kernel_regularizer",
            "bias_initializer",
            "bias_regularizer",
            "dropout",
            "seed",
        ],
    ),
}
SCORE_LAYERS = {
    "AdditiveAttention",
    "DotAttention",
    "ScaledDotAttention",
    "GeneralAttention",
    "ConcatAttention",
    "HardAttention",
    "BahdanauMonotonicAttention",
    "LuongMonotonicAttention",
    "AttentionPooling",
}


# The Transformer's building blocks are layers built from attention, not
# attention mechanisms: they take (inputs[, memory]) rather than the
# mechanisms' (query, value) convention, and are tested by their own harness
# rows and tests/test_transformer_layers.py.
TRANSFORMER_BLOCKS = {
    "LearnedPositionEmbedding": "positional_learned",
    "RotaryPositionEmbedding": "positional_rotary",
    "SinusoidalPositionEncoding": "positional_sinusoidal",
    "TransformerDecoderLayer": "transformer_decoder",
    "TransformerDecoderStack": "transformer_decoder",
    "TransformerEncoderLayer": "transformer_encoder",
    "TransformerEncoderStack": "transformer_encoder",
}


def test_every_attention_layer_inherits_one_of_the_two_bases():
    layer_classes = {
        name
        for name in ka.layers.__all__
        if issubclass(getattr(ka.layers, name), keras.layers.Layer) and name not in ("AttentionLayer", "BaseAttention")
    }
    # Only the Transformer's own modules may hold a public layer that is not a mechanism.
    for name, module in TRANSFORMER_BLOCKS.items():
        assert getattr(ka.layers, name).__module__ == f"keras_attention.layers.{module}", name
        assert not issubclass(getattr(ka.layers, name), ka.AttentionLayer), name
    assert layer_classes - set(TRANSFORMER_BLOCKS) == set(LAYERS)
    for name in LAYERS:
        cls = getattr(ka, name)
        assert issubclass(cls, ka.AttentionLayer), name
        assert issubclass(cls, ka.BaseAttention) == (name in SCORE_LAYERS), name


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_config_keys_are_those_saved_models_hold(name):
    make, keys = LAYERS[name]
    config = make().get_config()
    assert sorted(config) == sorted(["name", "trainable", "dtype", *keys])
    assert type(make()).from_config(config).get_config() == config


def test_a_config_written_before_the_base_loads_unchanged():
    # MultiHeadAttention's config as the layer wrote it before it had a base
    # (its own key order, `dropout` in the middle and `seed` last).
    old = {
        "name": "mha",
        "trainable": True,
        "dtype": keras.dtype_policies.serialize(keras.dtype_policies.get("float32")),
        "num_heads": 2,
        "key_dim": 3,
        "value_dim": 4,
        "dropout": 0.25,
        "use_bias": False,
        "output_dim": 7,
        "kernel_initializer": keras.initializers.serialize(keras.initializers.GlorotUniform()),
        "kernel_regularizer": None,
        "bias_initializer": keras.initializers.serialize(keras.initializers.Zeros()),
        "bias_regularizer": None,
        "seed": 9,
    }
    layer = ka.MultiHeadAttention.from_config(old)
    assert (layer.dropout, layer.seed, layer.num_heads, layer.output_dim) == (0.25, 9, 2, 7)
    assert layer.get_config() == old


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: ka.PointerAttention(4, dropout=0.1), "dropout"),
        (lambda: ka.PointerAttention(4, seed=1), "seed"),
        (lambda: ka.HardAttention("dot", dropout=0.1), "dropout"),
        (lambda: ka.BahdanauMonotonicAttention(4, dropout=0.1), "dropout"),
        (lambda: ka.LuongMonotonicAttention(dropout=0.5), "dropout"),
    ],
)
def test_layers_without_dropout_or_seed_refuse_them(make, argument):
    with pytest.raises(ValueError, match=rf": takes no `{argument}` \(leave it out\); got {argument}="):
        make()


def test_drop_weights_drops_in_training_only_and_rescales():
    layer = ka.ScaledDotAttention(dropout=0.5, seed=3)
    weights = np.full((2, 3, 40), 0.25, "float32")
    np.testing.assert_array_equal(layer.drop_weights(weights, training=False), weights)
    np.testing.assert_array_equal(layer.drop_weights(weights), weights)
    dropped = np.asarray(layer.drop_weights(weights, training=True))
    assert set(np.unique(dropped)) == {0.0, 0.5}  # kept entries scaled by 1 / (1 - 0.5)
    # Without dropout nothing is drawn: no seed generator, no variable.
    assert ka.ScaledDotAttention().seed_generator is None
    assert ka.ScaledDotAttention().variables == []


def test_output_spec_gives_the_output_and_the_weights_in_the_compute_dtype():
    layer = ka.TargetedAttention(4, dtype="mixed_float16")
    output = layer.output_spec((2, 8))
    assert output.shape == (2, 8) and output.dtype == "float16"
    output, weights = layer.output_spec((2, 8), {"whole": (2, 5), "gates": (2, 3, 8)})
    assert weights["whole"].shape == (2, 5) and weights["gates"].shape == (2, 3, 8)
    assert weights["gates"].dtype == "float16"
    output = layer.output_spec((2, 5), output_dtype="float32")
    assert output.dtype == "float32"


@pytest.mark.parametrize(
    "layer, inputs, output_mask",
    [
        (ka.MultiHeadAttention(2, 3), lambda: (keras.Input((5, 4)), keras.Input((6, 4))), True),
        (ka.MultiHeadAttention(2, 3), lambda: (keras.Input((4,)), keras.Input((6, 4))), False),
        (ka.PointerAttention(3), lambda: (keras.Input((5, 4)), keras.Input((6, 4))), True),
        (ka.SelfAttention(3), lambda: (keras.Input((5, 4)),), True),
        (ka.AttentionPooling(3), lambda: (keras.Input((5, 4)),), False),
    ],
    ids=["mha", "mha_single_query", "pointer", "self", "pooling"],
)
def test_the_first_input_mask_passes_on_where_the_output_keeps_its_time_axis(layer, inputs, output_mask):
    inputs = inputs()
    masked = keras.layers.Masking()(inputs[0])
    output = layer(masked, *inputs[1:])
    mask = getattr(output, "_keras_mask", None)
    assert (mask is not None) == output_mask
    if output_mask:
        assert mask.shape == masked._keras_mask.shape


def test_shared_checks_name_the_owner_the_argument_and_the_value():
    with pytest.raises(
        ValueError,
        match=r"^Owner: the last dimension of `memory` must be known when the layer is built; got shape \(2, None\)\.$",
    ):
        _checks.check_known_last_dim("Owner", "memory", (2, None))
    assert _checks.check_known_last_dim("Owner", "memory", (None, 3)) == 3
    with pytest.raises(ValueError, match=r"^Owner: `n` must be an integer from 1 to 4; got 5\.$"):
        _checks.check_int("Owner", "n", 5, 1, maximum=4)
    assert _checks.check_int("Owner", "n", np.int64(4), 1, maximum=4) == 4
    config = keras.saving.serialize_keras_object(ka.DotAttention(name="dot"))
    resolved = _checks.resolve_layer(
        "Owner", "score", config, lambda layer: isinstance(layer, ka.DotAttention), "a DotAttention"
    )
    assert isinstance(resolved, ka.DotAttention) and resolved.name == "dot"
    with pytest.raises(ValueError, match=r"^Owner: `score` must be a DotAttention; got 3\.$"):
        _checks.resolve_layer("Owner", "score", 3, lambda layer: isinstance(layer, ka.DotAttention), "a DotAttention")


def test_symbolic_dimensions_count_as_unknown_in_shape_checks():
    # jax.export / jax2tf give symbolic dimensions, which refuse int()
    # (issue 18): a static check lets them through, as it does None.
    b, t = SymbolicDim(), SymbolicDim()
    assert _checks.static_shape((b, t, np.int64(5), 3)) == (None, None, 5, 3)
    _checks.check_input_shapes("Owner", (b, t, 4), (b, t, 5), (b, t, 6))
    _checks.check_mask_shape("Owner", "value_mask", types.SimpleNamespace(shape=(b, t)), (2, 7), "(batch, Tv)")
    assert _checks.check_known_last_dim("Owner", "memory", (b, t, 3)) == 3
    # The dimensions that are known are still checked.
    with pytest.raises(ValueError, match=r"^Owner: `key` and `value` must have the same length Tv; got key shape "):
        _checks.check_input_shapes("Owner", (b, t, 4), (b, 7, 5), (b, 6, 6))
    with pytest.raises(
        ValueError, match=r"the last dimension of `memory` must be known .*; got shape \(None, 3, None\)"
    ):
        _checks.check_known_last_dim("Owner", "memory", (b, 3, t))
