"""keras-attention: attention layers and attention decoders for Keras 3.

Every layer is a registered, serialisable `keras.layers.Layer` written with
`keras.ops` only, so models that use them save to `.keras`, compile with XLA
and export to TensorFlow SavedModel and ONNX.
"""

from keras_attention import batching, decoding, evaluation, losses, models, ops, text
from keras_attention.cells import AttentionGRUCell, AttentionLSTMCell, AttentionWrapper
from keras_attention.decoders import AttentionDecoder, InferenceDecoder
from keras_attention.export import export_model
from keras_attention.layers import (
    AdditiveAttention,
    AttentionLayer,
    AttentionPooling,
    BahdanauMonotonicAttention,
    BaseAttention,
    ConcatAttention,
    DotAttention,
    GeneralAttention,
    HardAttention,
    LuongMonotonicAttention,
    MultiHeadAttention,
    PointerAttention,
    ScaledDotAttention,
    SelfAttention,
    TargetedAttention,
)
from keras_attention.losses import SequenceLoss, sequence_loss
from keras_attention.models import PointerNetwork
from keras_attention.ops import masked_softmax, sequence_mask
from keras_attention.plot import plot_attention

__version__ = "0.1.0"

__all__ = [
    "AdditiveAttention",
    "AttentionDecoder",
    "AttentionLayer",
    "AttentionGRUCell",
    "AttentionLSTMCell",
    "AttentionWrapper",
    "InferenceDecoder",
    "AttentionPooling",
    "BahdanauMonotonicAttention",
    "BaseAttention",
    "ConcatAttention",
    "DotAttention",
    "GeneralAttention",
    "HardAttention",
    "LuongMonotonicAttention",
    "MultiHeadAttention",
    "PointerAttention",
    "PointerNetwork",
    "ScaledDotAttention",
    "SelfAttention",
    "SequenceLoss",
    "TargetedAttention",
    "batching",
    "decoding",
    "evaluation",
    "export_model",
    "losses",
    "masked_softmax",
    "models",
    "ops",
    "plot_attention",
    "sequence_loss",
    "sequence_mask",
    "text",
]
