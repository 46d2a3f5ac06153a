"""Ready-made models built from the library's layers."""

from keras_attention.models.hierarchical import hierarchical_attention_network
from keras_attention.models.pointer import PointerNetwork

__all__ = ["PointerNetwork", "hierarchical_attention_network"]
