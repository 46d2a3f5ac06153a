"""Attention decoder cells: one step of a recurrent decoder that attends over a memory.

The layers that run them over a sequence, `AttentionDecoder` and
`InferenceDecoder`, are in `keras_attention.decoders`.
"""

from keras_attention.cells.base import AttentionCell, AttentionMemory
from keras_attention.cells.gru import AttentionGRUCell
from keras_attention.cells.lstm import AttentionLSTMCell
from keras_attention.cells.wrapper import AttentionWrapper

__all__ = [
    "AttentionCell",
    "AttentionGRUCell",
    "AttentionLSTMCell",
    "AttentionMemory",
    "AttentionWrapper",
]
