"""What CTranslate2's `TransformerSpec` can express of our Transformer, and the converter that fills it."""

import keras
import numpy as np
from ctranslate2.converters import Converter
from ctranslate2.specs import common_spec, transformer_spec

from keras_attention import _checks
from keras_attention.decoders.transformer_inference import TransformerInferenceDecoder
from keras_attention.layers.positional_learned import LearnedPositionEmbedding
from keras_attention.layers.positional_sinusoidal import SinusoidalPositionEncoding
from keras_attention.layers.transformer_encoder import TransformerEncoderStack

OWNER = "export_ctranslate2"
QUANTIZATIONS = (None, "int8", "int8_float32")
DEFAULT_MAX_POSITIONS = 1024
# config.json's record of the position tables' rows, {"source": rows, "target": rows}: positions.py reads it.
RECORD_KEY = "keras_attention_positions"
_ACTIVATIONS = {
    keras.activations.relu: common_spec.Activation.RELU,
    keras.activations.gelu: common_spec.Activation.GELU,  # Keras's default: the exact (erf) GELU
    keras.activations.silu: common_spec.Activation.SWISH,
    keras.activations.tanh: common_spec.Activation.Tanh,
    keras.activations.sigmoid: common_spec.Activation.Sigmoid,
}


def _refuse(argument, problem, way_out):
    raise ValueError(f"{OWNER}: `{argument}` {problem}; {way_out}.")


def _numpy(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), dtype="float32")


# --------------------------------------------------------------- checking


def _tokens(argument, vocabulary, size):
    """The token strings of `vocabulary` (a list or a `text.Vocabulary`), checked against the model's size."""
    tokens = list(getattr(vocabulary, "tokens", vocabulary))
    if not all(isinstance(token, str) for token in tokens):
        _refuse(argument, "must hold token strings", "give a list of str or a keras_attention.text.Vocabulary")
    if len(tokens) != size:
        _refuse(argument, f"has {len(tokens)} tokens but the model's embedding has {size} rows", "give the model's")
    repeated = sorted({token for token in tokens if tokens.count(token) > 1})
    if repeated:
        _refuse(argument, f"repeats the tokens {repeated[:5]}", "CTranslate2 maps tokens to ids: make them unique")
    return tokens


def _embedding(argument, layer, model_dim):
    """The table CTranslate2 looks ids up in: the layer's rows times its
    `output_scale` when it has one (an `Embedding` whose outputs are scaled,
    as `g2p.transformer_model.ScaledEmbedding`'s by sqrt(d)). Another
    subclass of `Embedding` may compute anything from its table: refused."""
    if not isinstance(layer, keras.layers.Embedding) or not layer.built:
        _refuse(argument, f"is {layer!r:.80}", "expected a built keras.layers.Embedding")
    scale = getattr(layer, "output_scale", None)
    if type(layer) is not keras.layers.Embedding and scale is None:
        _refuse(
            argument,
            f"is a {type(layer).__name__}, a subclass of Embedding whose outputs the converter cannot read",
            "CTranslate2 takes a plain Embedding, or one whose outputs are its rows times its `output_scale`",
        )
    weight = _numpy(layer.embeddings)
    if weight.shape[1] != model_dim:
        _refuse(argument, f"has {weight.shape[1]} features but the model size is {model_dim}", "give the model's")
    # Folded into the table: Keras multiplies the looked-up row by the same float32 factor.
    return weight if scale is None else weight * np.float32(scale)


def _position_table(argument, layer, model_dim, max_positions):
    """Our layer's encodings of positions `0..P-1`: `(P, d)`, zeros without positions."""
    if layer is None:
        return np.zeros((max_positions, model_dim), "float32")
    if isinstance(layer, LearnedPositionEmbedding):
        max_positions = layer.max_length
    elif not isinstance(layer, SinusoidalPositionEncoding):
        _refuse(
            argument,
            f"is a {type(layer).__name__}",
            "CTranslate2 takes a table of absolute positions: use SinusoidalPositionEncoding, "
            "LearnedPositionEmbedding or None",
        )
    return _numpy(layer(np.zeros((1, max_positions, model_dim), "float32")))[0]


def _check_stack(argument, stack, memory_dim=None):
    """The first layer's settings, checked for what the spec can express."""
    if not stack.built:
        _refuse(argument, "is not built", "call the model once before converting")
    first = stack.transformer_layers[0]
    if first.use_rotary:
        _refuse(
            argument,
            "uses rotary positions (use_rotary=True)",
            "CTranslate2's TransformerSpec here takes absolute "
            "positions only: train with SinusoidalPositionEncoding or LearnedPositionEmbedding, or serve with "
            "keras_attention.export.export_model (ONNX)",
        )
    if first.activation not in _ACTIVATIONS:
        names = ", ".join(function.__name__ for function in _ACTIVATIONS)
        _refuse(argument, f"uses the activation {first.activation.__name__!r}", f"CTranslate2 has {names}")
    if stack.final_norm and not first.norm_first:
        _refuse(argument, "is post-norm with final_norm=True", "CTranslate2's post-norm stacks end without a norm")
    attention = first.self_attention
    model_dim = int(first.feed_forward_out.units)
    if attention.num_heads * attention.key_dim != model_dim or attention.value_dim not in (None, attention.key_dim):
        _refuse(
            argument,
            f"has {attention.num_heads} heads of key_dim {attention.key_dim} for a model size of {model_dim}",
            "CTranslate2 splits the model size among the heads: key_dim * num_heads == d",
        )
    if memory_dim is not None and int(first.cross_attention.key_kernel.shape[0]) != memory_dim:
        _refuse(
            argument,
            f"attends over a memory of size {first.cross_attention.key_kernel.shape[0]} but the "
            f"encoder's size is {memory_dim}",
            "give the encoder the decoder was trained with",
        )
    return first, model_dim


# --------------------------------------------------------------- the spec


def _linear(spec, kernel, bias):
    """A `(out, in)` CTranslate2 linear from a Keras kernel `(in, ..., out...)` flattened to 2-D."""
    spec.weight = np.ascontiguousarray(kernel.T)
    if bias is not None:
        spec.bias = bias.reshape(-1)


def _flat(variable, inputs_axes):
    value = _numpy(variable)
    return value.reshape(int(np.prod(value.shape[:inputs_axes])), -1)


def _bias(variable, size):
    return np.zeros((size,), "float32") if variable is None else _numpy(variable).reshape(-1)


def _attention(spec, attention, norm, fused):
    """`fused` groups the projections CTranslate2 computes as one linear: q|k|v, or q and k|v."""
    parts = {
        name: (_flat(getattr(attention, f"{name}_kernel"), 1), getattr(attention, f"{name}_bias"))
        for name in ("query", "key", "value")
    }
    for linear, names in zip(spec.linear, fused):
        kernels = [parts[name][0] for name in names]
        biases = [_bias(parts[name][1], kernels[i].shape[1]) for i, name in enumerate(names)]
        _linear(linear, np.concatenate(kernels, 1), np.concatenate(biases))
    out = _flat(attention.output_kernel, 2)
    _linear(spec.linear[-1], out, _bias(attention.output_bias, out.shape[1]))
    _norm(spec.layer_norm, norm)


def _norm(spec, norm):
    size = int(norm.gamma.shape[0] if norm.gamma is not None else norm.beta.shape[0])
    spec.gamma = np.ones((size,), "float32") if norm.gamma is None else _numpy(norm.gamma)
    spec.beta = np.zeros((size,), "float32") if norm.beta is None else _numpy(norm.beta)


def _feed_forward(spec, layer):
    for linear, dense in ((spec.linear_0, layer.feed_forward_in), (spec.linear_1, layer.feed_forward_out)):
        _linear(linear, _numpy(dense.kernel), None if dense.bias is None else _numpy(dense.bias))
    _norm(spec.layer_norm, layer.feed_forward_norm)


class KerasTransformerConverter(Converter):
    """CTranslate2's converter for this library's Transformer: `_load` fills a `TransformerSpec`.

    Every check runs in the constructor, so a model the spec cannot express
    is refused before `convert` writes anything. Arguments: those of
    `export_ctranslate2` (without the directory ones).
    """

    def __init__(
        self,
        decoder,
        encoder,
        source_embedding,
        source_vocabulary,
        target_vocabulary,
        source_position=None,
        max_positions=DEFAULT_MAX_POSITIONS,
    ):
        if not isinstance(decoder, TransformerInferenceDecoder):
            _refuse(
                "decoder",
                f"is a {type(decoder).__name__}",
                "CTranslate2's TransformerSpec has no recurrent "
                "decoder: give a TransformerInferenceDecoder, or serve with keras_attention.export.export_model",
            )
        if not isinstance(encoder, TransformerEncoderStack):
            _refuse("encoder", f"is a {type(encoder).__name__}", "give the TransformerEncoderStack")
        _checks.check_positive_int(OWNER, "max_positions", max_positions)
        encoder_first, model_dim = _check_stack("encoder", encoder)
        decoder_first, decoder_dim = _check_stack("decoder.stack", decoder.stack, memory_dim=model_dim)
        if decoder_first.layer_norm_epsilon != encoder_first.layer_norm_epsilon:
            _refuse(
                "decoder.stack",
                f"has layer_norm_epsilon {decoder_first.layer_norm_epsilon}, the encoder "
                f"{encoder_first.layer_norm_epsilon}",
                "CTranslate2 has one epsilon per model",
            )
        readout = decoder.output_layer
        if not isinstance(readout, keras.layers.Dense) or readout.activation is not keras.activations.linear:
            _refuse("decoder.output_layer", f"is {readout!r:.80}", "expected a keras.layers.Dense without activation")
        self.decoder, self.encoder = decoder, encoder
        self.source_weight = _embedding("source_embedding", source_embedding, model_dim)
        self.target_weight = _embedding("decoder.embedding", decoder.embedding, decoder_dim)
        if int(readout.units) != self.target_weight.shape[0]:
            _refuse(
                "decoder.output_layer",
                f"has {readout.units} units for {self.target_weight.shape[0]} target embeddings",
                "the read-out must score the target vocabulary",
            )
        self.source_tokens = _tokens("source_vocabulary", source_vocabulary, self.source_weight.shape[0])
        self.target_tokens = _tokens("target_vocabulary", target_vocabulary, self.target_weight.shape[0])
        self.source_positions = _position_table("source_position", source_position, model_dim, max_positions)
        self.target_positions = _position_table("decoder.position", decoder.position, decoder_dim, max_positions)
        self.encoder_first, self.decoder_first = encoder_first, decoder_first
        for argument, token in (("start_token", decoder.start_token), ("end_token", decoder.end_token)):
            if token >= len(self.target_tokens):
                _refuse(
                    f"decoder.{argument}",
                    f"is {token}, outside the target vocabulary's {len(self.target_tokens)} ids",
                    "give the decoder the ids it was trained with",
                )
        # Unlisted source tokens (text given to CTranslate2 directly): the vocabulary's own unknown token.
        self.unknown_token = getattr(source_vocabulary, "unknown_token", None) or (
            "<unk>" if "<unk>" in self.source_tokens else self.source_tokens[0]
        )

    def _stack_spec(self, stack_class, stack, first, **options):
        return stack_class(
            stack.num_layers,
            first.num_heads,
            pre_norm=first.norm_first,
            no_final_norm=not stack.final_norm,
            activation=_ACTIVATIONS[first.activation],
            **options,
        )

    def _load(self):
        encoder, stack, decoder = self.encoder, self.decoder.stack, self.decoder
        encoder_spec = self._stack_spec(transformer_spec.TransformerEncoderSpec, encoder, self.encoder_first)
        decoder_spec = self._stack_spec(
            transformer_spec.TransformerDecoderSpec,
            stack,
            self.decoder_first,
            alignment_heads=self.decoder_first.num_heads,  # ours: the last layer's heads averaged
        )
        spec = transformer_spec.TransformerSpec(encoder_spec, decoder_spec)
        for side, weight, table in (
            (encoder_spec, self.source_weight, self.source_positions),
            (decoder_spec, self.target_weight, self.target_positions),
        ):
            side.scale_embeddings = False  # our embeddings are added to the positions as they are
            (side.embeddings[0] if isinstance(side.embeddings, list) else side.embeddings).weight = weight
            side.position_encodings.encodings = table
        for layer_spec, layer in zip(encoder_spec.layer, encoder.transformer_layers):
            _attention(
                layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, [("query", "key", "value")]
            )
            _feed_forward(layer_spec.ffn, layer)
        for layer_spec, layer in zip(decoder_spec.layer, stack.transformer_layers):
            _attention(
                layer_spec.self_attention, layer.self_attention, layer.self_attention_norm, [("query", "key", "value")]
            )
            _attention(
                layer_spec.attention, layer.cross_attention, layer.cross_attention_norm, [("query",), ("key", "value")]
            )
            _feed_forward(layer_spec.ffn, layer)
        for side, stack_layer in ((encoder_spec, encoder), (decoder_spec, stack)):
            if stack_layer.output_norm is not None:
                _norm(side.layer_norm, stack_layer.output_norm)
        readout = decoder.output_layer
        _linear(decoder_spec.projection, _numpy(readout.kernel), None if readout.bias is None else _numpy(readout.bias))
        spec.register_source_vocabulary(self.source_tokens)
        spec.register_target_vocabulary(self.target_tokens)
        config = spec.config
        config.layer_norm_epsilon = float(self.encoder_first.layer_norm_epsilon)
        config.unk_token = self.unknown_token
        config.bos_token = config.decoder_start_token = self.target_tokens[decoder.start_token]
        config.eos_token = self.target_tokens[decoder.end_token]
        config.add_source_bos = config.add_source_eos = False
        # CTranslate2 keeps keys it does not know: the runners refuse requests beyond the tables before it fails.
        rows = {"source": len(self.source_positions), "target": len(self.target_positions)}
        config.add_attribute(RECORD_KEY, rows)
        return spec
