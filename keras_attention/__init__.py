"""keras-attention: attention layers and attention decoders for Keras 3.

Every layer is a registered, serialisable `keras.layers.Layer` written with
`keras.ops` only, so models that use them save to `.keras`, compile with XLA
and export to TensorFlow SavedModel and ONNX.

The top-level names come from the subpackages' `__all__`: every layer of
`keras_attention.layers` and the decoders of `keras_attention.decoders`, so
a mechanism is added to `layers/__init__.py` only; the cells, the losses, the
models and the ops are picked by name below.
"""

from keras_attention import (
    batching,
    decoders,
    decoding,
    evaluation,
    generated,
    layers,
    losses,
    models,
    ops,
    text,
    training,
)
from keras_attention.cells import AttentionGRUCell, AttentionLSTMCell, AttentionWrapper
from keras_attention.decoders import *  # noqa: F403  (decoders.__all__)
from keras_attention.export import export_model

# The G2P tool's models use two layers of their own (`WithoutMask`,
# `ScaledEmbedding`). Keras finds a custom class only once its module has
# run, so without these imports `import keras_attention` would not be
# enough to load the `.keras` files the tool writes (with
# `keras.saving.load_model` or `keras-attention-export`).
from keras_attention.g2p import model as _g2p_model  # noqa: F401
from keras_attention.g2p import transformer_model as _g2p_transformer_model  # noqa: F401
from keras_attention.layers import *  # noqa: F403  (layers.__all__)
from keras_attention.losses import SequenceLoss, sequence_loss
from keras_attention.models import PointerNetwork
from keras_attention.ops import masked_softmax, sequence_mask
from keras_attention.plot import plot_attention

__version__ = "0.1.0"

__all__ = [
    "AttentionGRUCell",
    "AttentionLSTMCell",
    "AttentionWrapper",
    "PointerNetwork",
    "SequenceLoss",
    "batching",
    "decoders",
    "decoding",
    "evaluation",
    "export_model",
    "generated",
    "losses",
    "masked_softmax",
    "models",
    "ops",
    "plot_attention",
    "sequence_loss",
    "sequence_mask",
    "text",
    "training",
]
__all__ += layers.__all__
__all__ += decoders.__all__
