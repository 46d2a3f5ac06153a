"""Attention layers. Each module holds one mechanism; `base` holds what they share."""

from keras_attention.layers.additive import AdditiveAttention
from keras_attention.layers.base import BaseAttention
from keras_attention.layers.concat import ConcatAttention
from keras_attention.layers.dot import DotAttention, ScaledDotAttention
from keras_attention.layers.general import GeneralAttention
from keras_attention.layers.hard import HardAttention

__all__ = [
    "AdditiveAttention",
    "BaseAttention",
    "ConcatAttention",
    "DotAttention",
    "GeneralAttention",
    "HardAttention",
    "ScaledDotAttention",
]
