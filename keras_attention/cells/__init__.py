"""Attention decoder cells and the layer that runs them over a target sequence."""

from keras_attention.cells.base import AttentionCell, AttentionMemory
from keras_attention.cells.decoder import AttentionDecoder
from keras_attention.cells.gru import AttentionGRUCell
from keras_attention.cells.inference import InferenceDecoder
from keras_attention.cells.lstm import AttentionLSTMCell
from keras_attention.cells.wrapper import AttentionWrapper

__all__ = [
    "AttentionCell",
    "AttentionDecoder",
    "AttentionGRUCell",
    "AttentionLSTMCell",
    "AttentionMemory",
    "AttentionWrapper",
    "InferenceDecoder",
]
