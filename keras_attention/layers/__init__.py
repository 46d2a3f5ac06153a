"""Attention layers. Each module holds one mechanism; `base` holds what they share."""

from keras_attention.layers.additive import AdditiveAttention
from keras_attention.layers.attention_layer import AttentionLayer
from keras_attention.layers.base import BaseAttention
from keras_attention.layers.concat import ConcatAttention
from keras_attention.layers.dot import DotAttention, ScaledDotAttention
from keras_attention.layers.general import GeneralAttention
from keras_attention.layers.hard import HardAttention
from keras_attention.layers.monotonic import BahdanauMonotonicAttention, LuongMonotonicAttention
from keras_attention.layers.multi_head import MultiHeadAttention
from keras_attention.layers.pointer import PointerAttention
from keras_attention.layers.pooling import AttentionPooling
from keras_attention.layers.positional_learned import LearnedPositionEmbedding
from keras_attention.layers.positional_rotary import RotaryPositionEmbedding
from keras_attention.layers.positional_sinusoidal import SinusoidalPositionEncoding
from keras_attention.layers.self_attention import SelfAttention
from keras_attention.layers.targeted import TargetedAttention
from keras_attention.layers.transformer_decoder import TransformerDecoderLayer, TransformerDecoderStack
from keras_attention.layers.transformer_encoder import TransformerEncoderLayer, TransformerEncoderStack

__all__ = [
    "AdditiveAttention",
    "AttentionLayer",
    "AttentionPooling",
    "BahdanauMonotonicAttention",
    "BaseAttention",
    "ConcatAttention",
    "DotAttention",
    "GeneralAttention",
    "HardAttention",
    "LearnedPositionEmbedding",
    "LuongMonotonicAttention",
    "MultiHeadAttention",
    "PointerAttention",
    "RotaryPositionEmbedding",
    "ScaledDotAttention",
    "SelfAttention",
    "SinusoidalPositionEncoding",
    "TargetedAttention",
    "TransformerDecoderLayer",
    "TransformerDecoderStack",
    "TransformerEncoderLayer",
    "TransformerEncoderStack",
]
