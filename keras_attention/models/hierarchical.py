"""Hierarchical Attention Network (Yang et al. 2016): words -> sentences -> document."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.layers.pooling import AttentionPooling

__all__ = ["FoldSentences", "UnfoldSentences", "hierarchical_attention_network"]


@keras.saving.register_keras_serializable(package="keras_attention")
class FoldSentences(keras.layers.Layer):
    """`(B, S, W, ...) -> (B * S, W, ...)`: each sentence becomes a batch row.

    `S` and `W` may be unknown until run time. Fold the word ids, then embed
    them with `mask_zero=True`: the embedding then gives the word mask
    `(B * S, W)` directly. A Keras mask on the input is folded along only
    when `W` is known, because a functional model replays mask computations
    with the shapes known when it was built.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    @staticmethod
    def _check(shape):
        if len(shape) < 3:
            raise ValueError(
                f"FoldSentences: `inputs` must have rank >= 3 (batch, sentences, words, ...); got shape {tuple(shape)}."
            )

    def call(self, inputs):
        self._check(inputs.shape)
        shape = ops.shape(inputs)
        # B * S spelled out, not -1: ONNX cannot infer a -1 from an empty tensor.
        return ops.reshape(inputs, (shape[0] * shape[1], *shape[2:]))

    def compute_mask(self, inputs, previous_mask=None):
        if previous_mask is None:
            return None
        shape = ops.shape(previous_mask)
        if isinstance(previous_mask, keras.KerasTensor) and None in shape[2:]:
            raise ValueError(
                "FoldSentences: cannot fold a Keras mask of unknown word length; "
                f"got a mask of shape {tuple(shape)}. Fold the word ids first and "
                "embed them with `mask_zero=True`."
            )
        return ops.reshape(previous_mask, (shape[0] * shape[1], *shape[2:]))

    def compute_output_shape(self, inputs_shape):
        self._check(inputs_shape)
        batch, sentences = inputs_shape[0], inputs_shape[1]
        rows = None if batch is None or sentences is None else batch * sentences
        return (rows, *inputs_shape[2:])


@keras.saving.register_keras_serializable(package="keras_attention")
class UnfoldSentences(keras.layers.Layer):
    """`[(B * S, ...), reference (B, S, ...)] -> (B, S, ...)`: undoes `FoldSentences`.

    `B` and `S` are read from `reference` at run time. The output takes the
    reference's Keras mask as the sentence mask: a `(B, S)` mask as it is
    (e.g. from `keras.layers.Masking(0)` on the ids: a sentence of only
    padding is masked), a `(B, S, W)` word mask reduced to "any word is
    real". Without one the output carries no mask.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    @staticmethod
    def _check(inputs):
        if not isinstance(inputs, (list, tuple)) or len(inputs) != 2:
            raise ValueError(
                "UnfoldSentences: `inputs` must be a pair [folded (B * S, ...), "
                f"reference (B, S, ...)]; got {inputs!r}."
            )
        return inputs

    def call(self, inputs):
        folded, reference = self._check(inputs)
        reference_shape, folded_shape = ops.shape(reference), ops.shape(folded)
        return ops.reshape(folded, (reference_shape[0], reference_shape[1], *folded_shape[1:]))

    def compute_mask(self, inputs, previous_mask=None):
        reference_mask = None if previous_mask is None else previous_mask[1]
        if reference_mask is None:
            return None
        reference_mask = ops.cast(reference_mask, "bool")
        if len(reference_mask.shape) == 3:
            return ops.any(reference_mask, axis=-1)
        return reference_mask

    def compute_output_shape(self, inputs_shape):
        folded_shape, reference_shape = self._check(inputs_shape)
        return (reference_shape[0], reference_shape[1], *folded_shape[1:])


def _check_positive(argument, value, minimum=1, allow_none=False):
    """`value` as a Python int (NumPy integers accepted)."""
    if minimum == 1:
        return _checks.check_positive_int("hierarchical_attention_network", argument, value, allow_none)
    return _checks.check_int("hierarchical_attention_network", argument, value, minimum, allow_none=allow_none)


def hierarchical_attention_network(
    vocabulary_size,
    num_classes,
    embedding_dim=200,
    word_units=50,
    sentence_units=50,
    max_sentences=None,
    max_words=None,
    word_attention_units=None,
    sentence_attention_units=None,
    use_cudnn="auto",
    return_attention=False,
    name="hierarchical_attention_network",
):
    """A Hierarchical Attention Network for document classification.

    For a document of sentences `s`, each of words `w` (ids, 0 = padding):

        x_sw = Embedding(id_sw)
        h_sw = [GRU->(x_s)_w ; GRU<-(x_s)_w]          (within sentence s)
        s_s  = AttentionPooling_word(h_s1 .. h_sW)    (u = tanh(W h + b), u_w)
        h_s  = [GRU->(s)_s ; GRU<-(s)_s]              (over sentences)
        v    = AttentionPooling_sentence(h_1 .. h_S)  (its own W, b, u_s)
        p    = softmax(W_c v + b_c)

    Padded words get zero word weight and padded sentences (all ids 0) zero
    sentence weight; a padded sentence also gets all-zero word weights.
    Sentences are folded into the batch (`FoldSentences`) for the word
    encoder and unfolded (`UnfoldSentences`) after word attention, so the
    number of sentences and words may both be unknown.

    The defaults are the paper's: 200-d embeddings, 50 GRU units per
    direction, context vectors the size of the bidirectional state (100).

    On a GPU the GRUs may run on cuDNN (`use_cudnn="auto"`), which tf2onnx
    cannot convert: build with `use_cudnn=False` (or hide the GPU) to export
    to ONNX.

    Paper: Yang, Yang, Dyer, He, Smola & Hovy 2016, "Hierarchical Attention
    Networks for Document Classification", NAACL-HLT; the word and sentence
    attentions are additive-style scores (Bahdanau et al. arXiv:1409.0473)
    against a learned query, as in Lin et al. 2017, arXiv:1703.03130.

    Shapes: input int ids `(B, S, W)`; output class probabilities
    `(B, num_classes)`, and with `return_attention=True` also word weights
    `(B, S, W)` and sentence weights `(B, S)`.

    Args:
        vocabulary_size: number of ids, including the padding id 0.
        num_classes: number of classes (>= 2) of the softmax.
        embedding_dim: size of the word embeddings.
        word_units: GRU units per direction at the word level.
        sentence_units: GRU units per direction at the sentence level.
        max_sentences: fixed `S`, or None for unknown.
        max_words: fixed `W`, or None for unknown.
        word_attention_units: size of the word level's `u`; default
            `2 * word_units`.
        sentence_attention_units: size of the sentence level's `u`; default
            `2 * sentence_units`.
        use_cudnn: passed to both GRUs.
        return_attention: also output the word and sentence weights.
        name: the model's name.

    Returns:
        A functional `keras.Model` with input `ids` and output
        `probabilities`, or the list `[probabilities, word_attention_weights,
        sentence_attention_weights]` with `return_attention=True`.

    Example:

    ```python
    model = keras_attention.models.hierarchical_attention_network(
        vocabulary_size=50, num_classes=3, embedding_dim=8, word_units=4,
        sentence_units=4, return_attention=True)
    ids = np.random.randint(1, 50, size=(2, 3, 6))   # (B, S, W)
    ids[0, 2] = 0                                    # a padded sentence
    ids[:, :, 4:] = 0                                # padded words
    probabilities, word_weights, sentence_weights = model(ids)
    # (2, 3), (2, 3, 6), (2, 3); sentence_weights[0, 2] == 0
    ```
    """
    vocabulary_size = _check_positive("vocabulary_size", vocabulary_size, minimum=2)
    num_classes = _check_positive("num_classes", num_classes, minimum=2)
    embedding_dim = _check_positive("embedding_dim", embedding_dim)
    word_units = _check_positive("word_units", word_units)
    sentence_units = _check_positive("sentence_units", sentence_units)
    max_sentences = _check_positive("max_sentences", max_sentences, allow_none=True)
    max_words = _check_positive("max_words", max_words, allow_none=True)
    word_attention_units = _check_positive("word_attention_units", word_attention_units, allow_none=True)
    sentence_attention_units = _check_positive("sentence_attention_units", sentence_attention_units, allow_none=True)

    ids = keras.Input((max_sentences, max_words), dtype="int32", name="ids")
    # Sentences are folded before the embedding so that the embedding's
    # `mask_zero` gives the word mask of each folded sentence.
    words = FoldSentences(name="fold_sentences")(ids)  # (B*S, W)
    words = keras.layers.Embedding(vocabulary_size, embedding_dim, mask_zero=True, name="word_embedding")(
        words
    )  # (B*S, W, E), mask (B*S, W)
    words = keras.layers.Bidirectional(
        keras.layers.GRU(word_units, return_sequences=True, use_cudnn=use_cudnn),
        name="word_encoder",
    )(words)
    sentence_vectors, word_weights = AttentionPooling(word_attention_units or 2 * word_units, name="word_attention")(
        words, return_attention_scores=True
    )  # (B*S, 2u), (B*S, W)
    # Masking(0) over the ids masks a sentence whose words are all padding;
    # UnfoldSentences passes that (B, S) mask on to the sentence level.
    sentence_ids = keras.layers.Masking(0, name="sentence_mask")(ids)
    sentences = UnfoldSentences(name="unfold_sentences")([sentence_vectors, sentence_ids])
    sentences = keras.layers.Bidirectional(
        keras.layers.GRU(sentence_units, return_sequences=True, use_cudnn=use_cudnn),
        name="sentence_encoder",
    )(sentences)
    document, sentence_weights = AttentionPooling(
        sentence_attention_units or 2 * sentence_units, name="sentence_attention"
    )(sentences, return_attention_scores=True)
    probabilities = keras.layers.Dense(num_classes, activation="softmax", name="probabilities")(document)
    if not return_attention:
        return keras.Model(ids, probabilities, name=name)
    # Unfolded against the raw ids, which carry no mask: a weights output
    # with a Keras mask would silently mask a loss put on it.
    word_weights = UnfoldSentences(name="word_attention_weights")([word_weights, ids])
    sentence_weights = keras.layers.Identity(name="sentence_attention_weights")(sentence_weights)
    return keras.Model(ids, [probabilities, word_weights, sentence_weights], name=name)
