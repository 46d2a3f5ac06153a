"""Ready-made models built from the library's layers."""

from keras_attention.models.hierarchical import hierarchical_attention_network

__all__ = ["hierarchical_attention_network"]
