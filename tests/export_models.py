"""Small models of each kind export_model tells apart (export/support.py):
layer models, a teacher-forced decoder and the decode loops, greedy and beam."""

import keras

import keras_attention as ka
from tests.fixtures.backends.models import TARGET_VOCABULARY, _memory, greedy, multi_head, teacher_forced

__all__ = ["additive", "beam", "greedy", "multi_head", "teacher_forced"]


def additive():
    """Unmasked additive attention of float queries over float values: two inputs, one output."""
    query = keras.Input((None, 4), name="query")
    value = keras.Input((None, 6), name="value")
    context = ka.AdditiveAttention(5)(query, value)
    return keras.Model([query, value], keras.layers.Dense(3, name="scores")(context))


def beam():
    """`greedy`'s decoder searching with a beam of 3."""
    source = keras.Input((None,), dtype="int32", name="source")
    decoded = ka.InferenceDecoder(
        ka.AttentionGRUCell(8, ka.GeneralAttention()),
        keras.layers.Embedding(TARGET_VOCABULARY, 5),
        keras.layers.Dense(TARGET_VOCABULARY),
        1,
        2,
        6,
        method="beam",
        beam_width=3,
    )(_memory(source))
    return keras.Model(source, {"ids": decoded["ids"], "scores": decoded["scores"]})
