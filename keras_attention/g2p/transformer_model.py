"""The grapheme-to-phoneme model as a Transformer: an encoder stack over the letters, a decoder stack over the phones.

    letters:  h_0 = Dropout(sqrt(d) E_letters[x] + PE)        -> TransformerEncoderStack (L layers) -> memory
    phones:   g_0 = Dropout(sqrt(d) E_phones[y_<t] + PE(t))   -> TransformerDecoderStack (L layers, memory)
              logits_t = W g_L,t + b

Pre-norm layers (`norm_first`: they train without a long warm-up), sinusoidal
positions, embeddings scaled by sqrt(d) (Vaswani et al. 2017, section 3.4),
`heads` heads of d / heads each and a feed-forward layer of `ff_dim`; the
same `dropout` on the embeddings and on every sublayer's output. As with the
LSTM model (model.py), one set of layers makes the teacher-forced trainer
and the greedy and beam pronouncers: the pronouncers are
`TransformerInferenceDecoder`s, whose key/value caches are preallocated to
`max_length` and written at the step index, so the search runs in the graph
and exports to ONNX with the loop inside; and the greedy decoder can be a
member of an `EnsembleDecoder`, beside LSTM members (model.build_ensemble).

Papers: Vaswani et al. 2017, arXiv:1706.03762; Yolchuyeva et al. 2019,
"Transformer based Grapheme-to-Phoneme Conversion" (Interspeech; 3+3
layers, d 256, 4 heads on CMUdict); Wu et al. 2021, arXiv:2005.10213
(character Transformers: warm-up, label smoothing, dropout 0.3 on small
data, large batches).
"""

import math

import keras
from keras import ops

from keras_attention.decoders import TransformerInferenceDecoder
from keras_attention.g2p.model_set import Models, pronouncer_options
from keras_attention.layers import SinusoidalPositionEncoding, TransformerDecoderStack, TransformerEncoderStack


@keras.saving.register_keras_serializable(package="keras_attention")
class ScaledEmbedding(keras.layers.Embedding):
    """An `Embedding` whose vectors are multiplied by sqrt(output_dim).

    Added to sinusoidal positions of amplitude 1, unscaled embeddings
    (initialised near zero) would start drowned by them; Vaswani et al.
    scale them by sqrt(d) (section 3.4).

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762.

    Shapes: ids `(B, T)` -> `(B, T, output_dim)`.

    Example:

    ```python
    from keras_attention.g2p.transformer_model import ScaledEmbedding
    layer = ScaledEmbedding(10, 16)
    vectors = layer(np.array([[1, 2, 0]]))  # 4 x layer.embeddings[[1, 2, 0]]
    ```
    """

    @property
    def output_scale(self):
        """The factor of every vector, sqrt(output_dim): what converters to
        other engines fold into the table (CTranslate2's `export_ctranslate2`)."""
        return math.sqrt(self.output_dim)

    def call(self, inputs):
        return super().call(inputs) * self.output_scale


def check_config(config):
    """Refuse Transformer sizes that cannot build (ValueError naming the option)."""
    for name in ("layers", "heads", "model_dim", "ff_dim"):
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"ModelConfig: `{name}` must be a positive integer; got {value!r}.")
    if config.model_dim % config.heads:
        raise ValueError(
            f"ModelConfig: `heads` must divide `model_dim` ({config.model_dim}) into equal heads; got {config.heads}."
        )
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"ModelConfig: `dropout` must be a number in [0, 1); got {config.dropout!r}.")


def build_transformer_models(source_vocabulary, target_vocabulary, config, beam_alignments=False):
    """model_set.Models over shared Transformer layers (see the module's doc);
    its encoder maps letters to `[memory]` (a Transformer decoder starts from
    an empty cache, not from a state)."""

    check_config(config)
    letters = keras.Input((None,), dtype="int32", name="letters")
    previous_phones = keras.Input((None,), dtype="int32", name="previous_phones")
    stack_options = dict(
        num_heads=config.heads, intermediate_dim=config.ff_dim, dropout=config.dropout, norm_first=True
    )
    position = SinusoidalPositionEncoding(name="position")
    letter_embedding = ScaledEmbedding(
        len(source_vocabulary), config.model_dim, mask_zero=True, name="letter_embedding"
    )
    embedded = keras.layers.Dropout(config.dropout, name="letter_dropout")(position(letter_embedding(letters)))
    letter_mask = ops.not_equal(letters, 0)
    memory = TransformerEncoderStack(config.layers, name="encoder", **stack_options)(embedded, mask=letter_mask)

    # Padding after a pronunciation's end token is only ever seen by later
    # (padded) positions under the causal mask: the phones need no mask.
    phone_embedding = ScaledEmbedding(len(target_vocabulary), config.model_dim, name="phone_embedding")
    stack = TransformerDecoderStack(config.layers, name="decoder", **stack_options)
    readout = keras.layers.Dense(len(target_vocabulary), dtype="float32", name="readout")
    phones_in = keras.layers.Dropout(config.dropout, name="phone_dropout")(position(phone_embedding(previous_phones)))
    logits = readout(stack(phones_in, memory, memory_mask=letter_mask))
    trainer = keras.Model([letters, previous_phones], logits, name="g2p_trainer")

    decoders = {
        method: TransformerInferenceDecoder(
            stack,
            phone_embedding,
            readout,
            position=position,
            **pronouncer_options(config, target_vocabulary, method, method == "greedy" or beam_alignments),
            name=f"{method}_decoder",
        )
        for method in ("greedy", "beam")
    }
    greedy, beam = (
        keras.Model(letters, decoders[method](memory, memory_mask=letter_mask), name=f"g2p_{method}")
        for method in ("greedy", "beam")
    )
    encoder = keras.Model(letters, [memory], name="g2p_encoder")
    return Models(trainer, greedy, beam, encoder, decoders["greedy"])
