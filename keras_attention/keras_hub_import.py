"""From keras-hub: its `TransformerEncoder` / `TransformerDecoder` layers as ours, weights copied.

A keras-hub user's way in. `from_keras_hub(layer)` builds the
`TransformerEncoderLayer` or `TransformerDecoderLayer` that computes what a
built `keras_hub.layers.TransformerEncoder` or `TransformerDecoder` computes
(and, from a list of them, a `TransformerEncoderStack` or
`TransformerDecoderStack`), with keras-hub's settings read from its
`get_config` and its weights copied; `copy_from_keras_hub(layer, ours)` copies
the weights into layers of ours that exist already, after checking that
their settings agree. The decoder then runs cached, with every search of
`TransformerInferenceDecoder`.

keras-hub's layers and ours share Keras's weight layouts (`MultiHeadAttention`
kernels `(d, H, key_dim)`, `LayerNormalization`'s gamma and beta, `Dense`),
so the copy is one to one:

    keras-hub                                   ours
    _self_attention_layer (._query_dense, ...)  self_attention (query_kernel, query_bias, ...)
    _self_attention_layer_norm                  self_attention_norm
    _cross_attention_layer, its norm            cross_attention, cross_attention_norm
    _feedforward_intermediate_dense             feed_forward_in
    _feedforward_output_dense                   feed_forward_out
    _feedforward_layer_norm                     feed_forward_norm

and so are the settings: `normalize_first` is our `norm_first`;
`layer_norm_epsilon`, `activation`, `intermediate_dim`, `num_heads` and the
initializers keep their names; keras-hub's one `dropout` drops the sublayer
outputs and the attention weights (our `dropout` and `attention_dropout`;
its feed-forward has no inner dropout). keras-hub's padding masks hide keys
only; ours also mark the padded queries, so the outputs agree at every
valid position (padded positions carry nothing either way).

What does not map is refused, naming the argument, the value and what was
expected: an unbuilt layer (no weights yet), a decoder built without
cross-attention (a decoder-only model: ours attends over a memory), a layer
whose attention has no biases, layers of a list with different settings,
and settings or weight shapes that differ from the layer of ours given.

keras_hub is never imported here: a layer is recognised as keras-hub's by
its class, found in `sys.modules` only when the caller has imported it.
"""

import sys

import keras
import numpy as np

from keras_attention import _checks
from keras_attention.layers.transformer_decoder import TransformerDecoderLayer, TransformerDecoderStack
from keras_attention.layers.transformer_encoder import TransformerEncoderLayer, TransformerEncoderStack

__all__ = ["from_keras_hub", "copy_from_keras_hub"]

_FROM = "from_keras_hub"
_COPY = "copy_from_keras_hub"
# Settings whose difference changes what a copied layer computes.
_COMPUTING = ("num_heads", "intermediate_dim", "norm_first", "layer_norm_epsilon", "activation", "use_rotary")


def _hub_kind(owner, argument, layer):
    """`"encoder"` or `"decoder"` for a built keras-hub Transformer layer; refuses anything else."""
    hub = sys.modules.get("keras_hub")
    kinds = {} if hub is None else {"encoder": hub.layers.TransformerEncoder, "decoder": hub.layers.TransformerDecoder}
    kind = next((name for name, cls in kinds.items() if isinstance(layer, cls)), None)
    if kind is None:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `{argument}` must be a keras_hub.layers.TransformerEncoder or "
            f"TransformerDecoder; got {layer!r:.120}."
        )
    if not layer.built:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `{argument}` {layer.name!r} is not built, so it has no weights to copy; "
            "expected a built layer (call it once on inputs, or load its model)."
        )
    if kind == "decoder" and layer._cross_attention_layer is None:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `{argument}` {layer.name!r} was built without cross-attention "
            "(a decoder-only layer, called without encoder_sequence); expected a decoder built with an "
            "encoder_sequence, as TransformerDecoderLayer attends over a memory."
        )
    attention = layer._self_attention_layer
    if attention._query_dense.bias is None:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `{argument}` {layer.name!r} has attention without biases "
            "(use_bias=False); expected keras-hub's default, attention with biases."
        )
    return kind


def _options(layer):
    """Our layer options for a built keras-hub layer (its get_config, translated)."""
    config = layer.get_config()
    model_dim = layer._self_attention_layer._query_dense.kernel.shape[0]
    head_size = layer._self_attention_layer._key_dim
    return {
        "num_heads": config["num_heads"],
        "intermediate_dim": config["intermediate_dim"],
        # keras-hub rounds d / H down; ours divides exactly unless told the size.
        "key_dim": None if head_size * config["num_heads"] == model_dim else head_size,
        "dropout": config["dropout"],
        "attention_dropout": config["dropout"],
        "activation_dropout": 0.0,
        "activation": layer.activation,
        "norm_first": config["normalize_first"],
        "layer_norm_epsilon": config["layer_norm_epsilon"],
        "kernel_initializer": config["kernel_initializer"],
        "bias_initializer": config["bias_initializer"],
        "dtype": layer.dtype_policy.name,
    }


def _comparable(options):
    settings = {key: options.get(key) for key in _COMPUTING}
    settings["use_rotary"] = bool(settings["use_rotary"])
    settings["activation"] = keras.activations.serialize(keras.activations.get(settings["activation"]))
    return settings


def _hub_layers(owner, argument, layers):
    """`(kind, [layers])` for one keras-hub layer or a list of layers of one kind and one setting."""
    many = isinstance(layers, list | tuple)
    given = list(layers) if many else [layers]
    if not given:
        raise ValueError(f"{_checks.owner_name(owner)}: `{argument}` must hold at least one layer; got [].")
    kinds = [_hub_kind(owner, f"{argument}[{i}]" if many else argument, layer) for i, layer in enumerate(given)]
    first = _comparable(_options(given[0]))
    for index, (kind, layer) in enumerate(zip(kinds, given)):
        settings = _comparable(_options(layer))
        if kind != kinds[0] or settings != first:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `{argument}[{index}]` must be a {kinds[0]} with the settings of "
                f"`{argument}[0]` ({first}), as a stack has one set of options; got a {kind} with {settings}."
            )
    return kinds[0], given, many


def _assign(owner, argument, target, source):
    value = keras.ops.convert_to_numpy(source)
    if tuple(target.shape) != tuple(value.shape):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `{argument}` of shape {tuple(value.shape)} does not fit "
            f"{target.path} of shape {tuple(target.shape)}; expected layers of the same sizes."
        )
    target.assign(value.astype(np.dtype(target.dtype)))


def _copy_attention(owner, argument, ours, theirs):
    for part, dense in (
        ("query", theirs._query_dense),
        ("key", theirs._key_dense),
        ("value", theirs._value_dense),
        ("output", theirs._output_dense),
    ):
        _assign(owner, f"{argument}._{part}_dense.kernel", getattr(ours, f"{part}_kernel"), dense.kernel)
        _assign(owner, f"{argument}._{part}_dense.bias", getattr(ours, f"{part}_bias"), dense.bias)


def _copy_norm(owner, argument, ours, theirs):
    _assign(owner, f"{argument}.gamma", ours.gamma, theirs.gamma)
    _assign(owner, f"{argument}.beta", ours.beta, theirs.beta)


def _copy_layer(owner, argument, theirs, ours):
    """Check `ours`'s settings against `theirs`, build it if needed, copy every weight."""
    expected, got = _comparable(_options(theirs)), _comparable(ours.get_config())
    for key in _COMPUTING:
        if expected[key] != got[key]:
            raise ValueError(
                f"{_checks.owner_name(owner)}: the layer of ours {ours.name!r} has {key}={got[key]!r}; expected "
                f"{expected[key]!r}, the setting of `{argument}` {theirs.name!r}."
            )
    model_dim = theirs._self_attention_layer._query_dense.kernel.shape[0]
    cross = getattr(theirs, "_cross_attention_layer", None)
    if not ours.built:
        memory_shape = () if cross is None else ((None, None, cross._key_dense.kernel.shape[0]),)
        ours.build((None, None, model_dim), *memory_shape)
    _copy_attention(owner, f"{argument}._self_attention_layer", ours.self_attention, theirs._self_attention_layer)
    _copy_norm(
        owner, f"{argument}._self_attention_layer_norm", ours.self_attention_norm, theirs._self_attention_layer_norm
    )
    if cross is not None:
        _copy_attention(owner, f"{argument}._cross_attention_layer", ours.cross_attention, cross)
        _copy_norm(
            owner,
            f"{argument}._cross_attention_layer_norm",
            ours.cross_attention_norm,
            theirs._cross_attention_layer_norm,
        )
    for dense, mine in (("intermediate", ours.feed_forward_in), ("output", ours.feed_forward_out)):
        hub_dense = getattr(theirs, f"_feedforward_{dense}_dense")
        _assign(owner, f"{argument}._feedforward_{dense}_dense.kernel", mine.kernel, hub_dense.kernel)
        _assign(owner, f"{argument}._feedforward_{dense}_dense.bias", mine.bias, hub_dense.bias)
    _copy_norm(owner, f"{argument}._feedforward_layer_norm", ours.feed_forward_norm, theirs._feedforward_layer_norm)


_CLASSES = {
    ("encoder", False): TransformerEncoderLayer,
    ("decoder", False): TransformerDecoderLayer,
    ("encoder", True): TransformerEncoderStack,
    ("decoder", True): TransformerDecoderStack,
}


def copy_from_keras_hub(layers, ours, final_norm=None):
    """Copy the weights of built keras-hub Transformer layers into ours, after checking the settings agree.

        keras_hub.layers.TransformerEncoder        -> TransformerEncoderLayer
        keras_hub.layers.TransformerDecoder        -> TransformerDecoderLayer
        a list of TransformerEncoder (Decoder)     -> TransformerEncoderStack (DecoderStack)

    Each weight goes to its counterpart (see the module's table); `ours` is
    built first when it is not. The settings that change what a layer
    computes (`num_heads`, `intermediate_dim`, `norm_first` against
    `normalize_first`, `layer_norm_epsilon`, `activation`, no rotary) must
    agree, and so must every weight's shape; dropout rates may differ. A
    stack's final layer normalisation (`final_norm=True` on ours) takes the
    weights of `final_norm`, the `keras.layers.LayerNormalization` a
    keras-hub model applies after its pre-norm layers; a stack without one
    needs `final_norm=None`.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762
    (the layers on both sides).

    Shapes: no tensors; returns `ours`, its weights assigned.

    Args:
        layers: a built `keras_hub.layers.TransformerEncoder` or
            `TransformerDecoder` (with cross-attention), or a list of them.
        ours: the layer of ours to fill: of the class above for `layers`, a
            stack of `len(layers)` layers for a list.
        final_norm: a built `keras.layers.LayerNormalization` for a stack's
            final normalisation, or None.

    Example:

    ```python
    import keras_hub
    from keras_attention.keras_hub_import import copy_from_keras_hub
    hub = keras_hub.layers.TransformerEncoder(intermediate_dim=32, num_heads=2)
    x = np.random.rand(2, 5, 16).astype("float32")
    hub_output = hub(x)                                     # builds it
    ours = keras_attention.TransformerEncoderLayer(num_heads=2, intermediate_dim=32, norm_first=False)
    copy_from_keras_hub(hub, ours)
    np.testing.assert_allclose(ours(x), hub_output, atol=1e-5)
    ```
    """
    kind, given, many = _hub_layers(_COPY, "layers", layers)
    expected_class = _CLASSES[kind, many]
    if not isinstance(ours, expected_class):
        raise ValueError(
            f"{_COPY}: `ours` must be a {expected_class.__name__} for "
            f"{'a list of' if many else 'a'} keras-hub {kind} layer{'s' if many else ''}; got {ours!r:.120}."
        )
    if not many:
        _copy_layer(_COPY, "layers", given[0], ours)
        return ours
    if ours.num_layers != len(given):
        raise ValueError(
            f"{_COPY}: `ours` has {ours.num_layers} layers; expected {len(given)}, one per layer of `layers`."
        )
    if (ours.output_norm is None) != (final_norm is None):
        raise ValueError(
            f"{_COPY}: `final_norm` is {final_norm!r:.80} for a stack with final_norm={ours.final_norm}; expected "
            f"{'a built keras.layers.LayerNormalization' if ours.final_norm else 'None'}."
        )
    for index, (theirs, mine) in enumerate(zip(given, ours.transformer_layers)):
        _copy_layer(_COPY, f"layers[{index}]", theirs, mine)
    if final_norm is not None:
        _check_final_norm(_COPY, final_norm, given[0])
        if not ours.output_norm.built:
            ours.output_norm.build((None, None, final_norm.gamma.shape[0]))
        _copy_norm(_COPY, "final_norm", ours.output_norm, final_norm)
    ours.built = True
    return ours


def _check_final_norm(owner, final_norm, first):
    if not isinstance(final_norm, keras.layers.LayerNormalization) or not final_norm.built:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `final_norm` must be a built keras.layers.LayerNormalization; "
            f"got {final_norm!r:.120}."
        )
    epsilon = first.get_config()["layer_norm_epsilon"]
    if final_norm.epsilon != epsilon or not (final_norm.center and final_norm.scale):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `final_norm` has epsilon={final_norm.epsilon}, center={final_norm.center}, "
            f"scale={final_norm.scale}; expected epsilon={epsilon} (the layers'), with center and scale."
        )


def from_keras_hub(layers, final_norm=None):
    """Our Transformer layer (or stack) with the settings and weights of keras-hub's.

    Builds the counterpart of `copy_from_keras_hub`'s table from the
    keras-hub layer's `get_config` (`normalize_first` as `norm_first`,
    `dropout` as `dropout` and `attention_dropout`, the rest by name, the
    layer's dtype policy), then copies the weights. For a list, a stack of
    as many layers, with a final layer normalisation when `final_norm` (the
    `keras.layers.LayerNormalization` a keras-hub model puts after its
    layers) is given and none otherwise. The result computes keras-hub's
    outputs at every valid position: pass the padding masks as `mask` /
    `memory_mask`; the decoder is causal, as keras-hub's by default.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: no tensors; returns a built layer or stack.

    Args:
        layers: a built `keras_hub.layers.TransformerEncoder` or
            `TransformerDecoder` (with cross-attention), or a list of them
            with one setting.
        final_norm: for a list, a built `keras.layers.LayerNormalization`
            after the last layer, or None.

    Example:

    ```python
    import keras_hub
    from keras_attention.keras_hub_import import from_keras_hub
    hub = keras_hub.layers.TransformerDecoder(intermediate_dim=32, num_heads=2, normalize_first=True)
    target = np.random.rand(2, 4, 16).astype("float32")
    memory = np.random.rand(2, 6, 16).astype("float32")
    hub_output = hub(target, memory)                        # causal, with cross-attention
    ours = from_keras_hub(hub)                              # a TransformerDecoderLayer
    np.testing.assert_allclose(ours(target, memory), hub_output, atol=1e-5)
    ```
    """
    kind, given, many = _hub_layers(_FROM, "layers", layers)
    options = _options(given[0])
    if not many:
        ours = _CLASSES[kind, False](**options)
        return copy_from_keras_hub(given[0], ours)
    if final_norm is not None:
        _check_final_norm(_FROM, final_norm, given[0])
    ours = _CLASSES[kind, True](len(given), final_norm=final_norm is not None, **options)
    return copy_from_keras_hub(given, ours, final_norm=final_norm)
