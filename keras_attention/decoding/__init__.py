"""In-graph decoding over any step function `step(ids, state) -> (logits, state)`.

Greedy search, sampling and beam search run inside `keras.ops.while_loop`, so
they compile with XLA and export, loop included, to SavedModel and ONNX.
"""

from keras_attention.decoding.beam_search import beam_search, length_penalty
from keras_attention.decoding.beams import gather_tree, tile_batch
from keras_attention.decoding.greedy import greedy_search, sampling_search

__all__ = [
    "beam_search",
    "gather_tree",
    "greedy_search",
    "length_penalty",
    "sampling_search",
    "tile_batch",
]
