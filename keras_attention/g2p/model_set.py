"""What one G2P model is made of, whatever its architecture: its Keras
models over shared layers (`Models`) and the search options its pronouncers
take (`pronouncer_options`). Both architectures' builders (model.py for the
LSTM, transformer_model.py) return and use these."""

import dataclasses

import keras

from keras_attention.decoders import InferenceDecoder


@dataclasses.dataclass
class Models:
    """One G2P model's Keras models, over shared layers."""

    trainer: keras.Model  # [letters, previous phones] -> phone logits
    greedy: keras.Model  # letters -> greedy decoding, with alignments
    beam: keras.Model  # letters -> beam search
    encoder: keras.Model  # letters -> [memory, decoder state h, decoder state c] (a Transformer's: [memory])
    decoder: InferenceDecoder  # the greedy decoder (a Transformer's: TransformerInferenceDecoder) an ensemble steps


def pronouncer_options(config, target_vocabulary, method, return_alignments):
    """The search options of a pronouncer (one model's or an ensemble's)."""
    return dict(
        start_token=target_vocabulary.start_id,
        end_token=target_vocabulary.end_id,
        max_length=config.max_length,
        method=method,
        beam_width=config.beam_width,
        length_penalty_weight=config.length_penalty,
        early_stopping=config.early_stopping and method == "beam",
        return_alignments=return_alignments,
    )
