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

_MOVED = {"AttentionDecoder", "InferenceDecoder"}


def __getattr__(name):
    # The decoders lived here before `keras_attention.decoders`; old imports keep working.
    if name in _MOVED:
        import warnings

        from keras_attention import decoders

        warnings.warn(
            f"`keras_attention.cells.{name}` moved to `keras_attention.decoders.{name}` "
            f"(also `keras_attention.{name}`); the old path will be removed.",
            DeprecationWarning,
            stacklevel=2,
        )
        # Kept here after the first use: `from keras_attention.cells import X`
        # looks the name up twice, and one warning is enough.
        globals()[name] = getattr(decoders, name)
        return globals()[name]
    raise AttributeError(f"module 'keras_attention.cells' has no attribute {name!r}")
