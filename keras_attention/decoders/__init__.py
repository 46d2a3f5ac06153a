"""Layers that run an attention cell over a sequence: teacher-forced and in-graph decoding.

`AttentionDecoder` runs a cell of `keras_attention.cells` over target inputs
(teacher forcing, for training); `ScheduledSamplingDecoder` trains from target
ids to logits, feeding back the model's own predictions with a scheduled
probability; `InferenceDecoder` decodes token ids with the
same cell inside the graph (greedy, sampling or beam search, from
`keras_attention.decoding`); `EnsembleDecoder` runs one such search over
several trained decoders, averaging their predictions; `stepwise_models`
splits an `InferenceDecoder` into `encode` and `step` models for a decoding
loop driven from outside; `TransformerInferenceDecoder` runs the same searches
over a Transformer decoder stack with a key/value cache per layer, and
`transformer_stepwise_models` splits it into `encode` and `step` models with
the caches as explicit inputs and outputs.
"""

from keras_attention.decoders.attention_decoder import AttentionDecoder
from keras_attention.decoders.ensemble import EnsembleDecoder
from keras_attention.decoders.inference_decoder import InferenceDecoder
from keras_attention.decoders.scheduled_sampling import ScheduledSamplingDecoder
from keras_attention.decoders.stepwise import stepwise_models
from keras_attention.decoders.transformer_inference import TransformerInferenceDecoder
from keras_attention.decoders.transformer_stepwise import transformer_stepwise_models

__all__ = [
    "AttentionDecoder",
    "EnsembleDecoder",
    "InferenceDecoder",
    "ScheduledSamplingDecoder",
    "TransformerInferenceDecoder",
    "stepwise_models",
    "transformer_stepwise_models",
]
