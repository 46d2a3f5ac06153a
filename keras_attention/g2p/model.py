"""The grapheme-to-phoneme model: a BiLSTM encoder and an attention LSTM decoder (or a Transformer).

    letters -> Embedding -> BiLSTM x L -> memory h_1..h_S
    phones:  y_t = readout([s_t ; c_t]),  (s_t, c_t) = AttentionLSTMCell(y_{t-1}, s_{t-1}, h)
             (or, with decoder="luong": s_t = LSTM(y_{t-1}, s_{t-1}), c_t = attend(s_t, h),
              y_t = readout(tanh(W [c_t ; s_t])))

Three models share every layer: the teacher-forced trainer, and the greedy and
beam-search pronouncers (`InferenceDecoder`), whose decode loop runs in the
graph and exports with them. The decoder starts from the encoder's final
states (through a tanh bridge), as in Bahdanau et al. 2014. Several trained
models pronounce together through `EnsembleDecoder` (`build_ensemble`): one
search, each step averaging their phone probabilities. With
`architecture="transformer"` the model is a Transformer encoder-decoder
instead (transformer_model.py), with the same three models; an ensemble may
mix both kinds.
"""

import dataclasses

import keras

from keras_attention.cells import AttentionLSTMCell, AttentionWrapper
from keras_attention.decoders import AttentionDecoder, EnsembleDecoder, InferenceDecoder
from keras_attention.g2p.model_set import Models, pronouncer_options
from keras_attention.layers import AdditiveAttention


@keras.saving.register_keras_serializable(package="keras_attention")
class WithoutMask(keras.layers.Layer):
    """Its input, without the Keras mask it carried.

    The teacher-forced trainer weighs its loss by the real target steps
    (`LengthBucketedBatches(weigh_targets=True)`), so its read-out, a
    `Sequential`, needs no mask; given one, Keras warns that it drops it, at
    every trace of the model.

    Shapes: any tensor, returned as it is, with no mask.

    Example:

    ```python
    from keras_attention.g2p.model import WithoutMask
    steps = keras.layers.Embedding(5, 3, mask_zero=True)(keras.Input((None,), dtype="int32"))
    unmasked = WithoutMask()(steps)  # the same vectors; a Sequential after it sees no mask
    ```
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs):
        # A new tensor: an eager tensor keeps the mask Keras attached to it.
        return keras.ops.copy(inputs)

    def compute_mask(self, inputs, previous_mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return input_shape


@dataclasses.dataclass
class ModelConfig:
    embedding: int = 64
    encoder_units: int = 128  # per direction
    encoder_layers: int = 2
    decoder_units: int = 256
    attention_units: int = 128
    dropout: float = 0.2
    max_length: int = 32  # phones produced at most
    beam_width: int = 5
    length_penalty: float = 0.0
    # Beam search stops once every word's best pronunciation is decided:
    # the same best beam, fewer steps (lower beams may end unfinished).
    early_stopping: bool = False
    # "input_feeding": AttentionLSTMCell, each step's LSTM reads the context
    # of the step before (Bahdanau). "luong": an LSTM over the phones, then
    # one attention call over every step (no input feeding), which
    # AttentionDecoder trains without a per-step loop of attention.
    decoder: str = "input_feeding"
    # The decoder's symbols: "phones" (one per phone) or "characters" (the
    # NFD characters of each phone: a base letter and its marks; phones.py).
    phone_symbols: str = "phones"
    # "lstm": the fields above; "transformer": transformer_model.py, sized
    # by the four below (`dropout`, `max_length` and the search's apply to both).
    architecture: str = "lstm"
    layers: int = 3  # Transformer encoder layers, and as many decoder layers
    heads: int = 4  # attention heads (they divide model_dim)
    model_dim: int = 256  # Transformer model size d (embeddings and every layer's output)
    ff_dim: int = 1024  # the feed-forward layers' hidden size


DECODERS = ("input_feeding", "luong")
PHONE_SYMBOLS = ("phones", "characters")
ARCHITECTURES = ("lstm", "transformer")
# The options of ModelConfig that take one of a few values.
CHOICES = {"decoder": DECODERS, "phone_symbols": PHONE_SYMBOLS, "architecture": ARCHITECTURES}
# What each option means, for command lines built from ModelConfig's fields.
HELP = {
    "architecture": "the model: 'lstm' (BiLSTM encoder, attention LSTM decoder) or 'transformer' (pre-norm "
    "Transformer encoder-decoder, cached decoding)",
    "layers": "Transformer: encoder layers, and as many decoder layers",
    "heads": "Transformer: attention heads (must divide --model-dim)",
    "model_dim": "Transformer: model size d (embeddings and every layer's output)",
    "ff_dim": "Transformer: the feed-forward layers' hidden size",
    "dropout": "dropout rate (LSTM: encoder inputs and read-out; Transformer: embeddings and every sublayer)",
}
TRANSFORMER_FIELDS = ("layers", "heads", "model_dim", "ff_dim")


def decoder_cell(config):
    attention = AdditiveAttention(config.attention_units)
    if config.decoder == "input_feeding":
        return AttentionLSTMCell(config.decoder_units, attention, name="decoder_cell")
    if config.decoder == "luong":
        return AttentionWrapper(
            keras.layers.LSTMCell(config.decoder_units),
            attention,
            attention_layer_size=config.decoder_units,
            input_feeding=False,
            name="decoder_cell",
        )
    raise ValueError(f"ModelConfig: `decoder` must be one of {DECODERS}; got {config.decoder!r}.")


def build_models(source_vocabulary, target_vocabulary, config, beam_alignments=False):
    """A `Models` over shared layers. The greedy model returns the alignments
    (for the heat-maps); the beam model, which serves, only with
    `beam_alignments`. `config.architecture` picks the LSTM model or the
    Transformer (transformer_model.py)."""
    if config.architecture == "transformer":
        from keras_attention.g2p.transformer_model import build_transformer_models

        return build_transformer_models(source_vocabulary, target_vocabulary, config, beam_alignments)
    if config.architecture != "lstm":
        raise ValueError(f"ModelConfig: `architecture` must be one of {ARCHITECTURES}; got {config.architecture!r}.")
    letters = keras.Input((None,), dtype="int32", name="letters")
    previous_phones = keras.Input((None,), dtype="int32", name="previous_phones")

    memory = keras.layers.Embedding(len(source_vocabulary), config.embedding, mask_zero=True, name="letter_embedding")(
        letters
    )
    final_states = None
    for layer in range(config.encoder_layers):
        memory = keras.layers.Dropout(config.dropout, name=f"encoder_dropout_{layer}")(memory)
        memory, *final_states = keras.layers.Bidirectional(
            keras.layers.LSTM(config.encoder_units, return_sequences=True, return_state=True),
            name=f"encoder_{layer}",
        )(memory)
    forward_h, forward_c, backward_h, backward_c = final_states
    bridge = keras.layers.Dense(config.decoder_units, activation="tanh", name="bridge_h")
    initial_state = [
        bridge(keras.layers.Concatenate()([forward_h, backward_h])),
        keras.layers.Dense(config.decoder_units, name="bridge_c")(keras.layers.Concatenate()([forward_c, backward_c])),
    ]

    cell = decoder_cell(config)
    phone_embedding = keras.layers.Embedding(
        len(target_vocabulary), config.embedding, mask_zero=True, name="phone_embedding"
    )
    readout = keras.Sequential(
        [keras.layers.Dropout(config.dropout), keras.layers.Dense(len(target_vocabulary), dtype="float32")],
        name="readout",
    )
    outputs = AttentionDecoder(cell, name="decoder")(
        phone_embedding(previous_phones), memory, initial_state=initial_state
    )
    # The loss weighs the real target steps itself (training.py): the read-out
    # (a Sequential, which takes no mask) is given none.
    logits = readout(WithoutMask(name="phone_steps")(outputs))
    trainer = keras.Model([letters, previous_phones], logits, name="g2p_trainer")

    decoders = {}
    for method in ("greedy", "beam"):
        decoders[method] = InferenceDecoder(
            cell,
            phone_embedding,
            readout,
            **pronouncer_options(config, target_vocabulary, method, method == "greedy" or beam_alignments),
            name=f"{method}_decoder",
        )
    greedy, beam = (
        keras.Model(letters, decoders[method](memory, initial_state=initial_state), name=f"g2p_{method}")
        for method in ("greedy", "beam")
    )
    encoder = keras.Model(letters, [memory, *initial_state], name="g2p_encoder")
    return Models(trainer, greedy, beam, encoder, decoders["greedy"])


def build_ensemble(members, target_vocabulary, config, method, return_alignments=False):
    """letters -> one `method` search over every member (`Models`), each
    reading its own encoder's memory and starting from its own bridge (a
    Transformer member: from its empty cache; LSTM and Transformer members
    mix): the members' phone probabilities are averaged at every step."""
    letters = keras.Input((None,), dtype="int32", name="letters")
    memories, states = [], []
    for number, member in enumerate(members):
        # The same encoder layers under a name of their own in this model.
        encoder = keras.Model(member.encoder.inputs, member.encoder.outputs, name=f"g2p_encoder_{number}")
        outputs = encoder(letters)
        # A Transformer's encoder has one output (Keras returns it bare): no state to start from.
        memory, *state = outputs if isinstance(outputs, (list, tuple)) else [outputs]
        memories.append(memory)
        states.append(state or None)
    ensemble = EnsembleDecoder(
        [member.decoder for member in members],
        **pronouncer_options(config, target_vocabulary, method, return_alignments),
        name=f"ensemble_{method}_decoder",
    )
    decoded = ensemble(memories, memory_mask=keras.ops.not_equal(letters, 0), initial_state=states)
    return keras.Model(letters, decoded, name=f"g2p_ensemble_{method}")


def together(members, phones, config):
    """The greedy and beam models of one model (`Models`), or of several pronouncing together."""
    if len(members) == 1:
        return members[0].greedy, members[0].beam
    return (
        build_ensemble(members, phones, config, "greedy", return_alignments=True),
        build_ensemble(members, phones, config, "beam"),
    )
