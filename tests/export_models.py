"""Small models of each kind export_model tells apart (export/support.py):
layer models, a teacher-forced decoder and the decode loops, greedy and beam."""

import keras
import numpy as np

import keras_attention as ka
from tests.fixtures.backends.models import TARGET_VOCABULARY, _memory, greedy, multi_head, teacher_forced

__all__ = ["additive", "beam", "greedy", "multi_head", "sharpened_option_model", "teacher_forced"]


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


def sharpened_option_model(vocabulary, runtime_options, bias_seed, **search):
    """`(model, decoder)`: source ids -> a GRU decoder over Luong's general
    score (OpenVINO's runtime runs it, not the additive score's graph) with
    `runtime_options` as inputs, its embeddings and read-out sharpened and
    its biases drawn with `bias_seed`, so that the sources and the options
    change the ids. `search`: the decoder's method and beam width."""
    keras.utils.set_random_seed(0)
    source = keras.Input((None,), dtype="int32", name="source")
    embedding = keras.layers.Embedding(vocabulary, 6, mask_zero=True)
    decoder = ka.InferenceDecoder(
        ka.AttentionGRUCell(8, ka.GeneralAttention()),
        keras.layers.Embedding(vocabulary, 5),
        keras.layers.Dense(vocabulary),
        1,
        2,
        8,
        runtime_options=tuple(runtime_options),
        **search,
    )
    options = decoder.option_inputs()
    model = keras.Model({"source": source, **options}, decoder(embedding(source), options=options))
    for layer in (embedding, decoder.embedding):
        layer.set_weights([w * 10.0 for w in layer.get_weights()])
    kernel, _ = decoder.output_layer.get_weights()
    bias = np.random.default_rng(bias_seed).normal(0, 0.5, vocabulary) - 0.5 * (np.arange(vocabulary) == 2)
    decoder.output_layer.set_weights([kernel * 6.0, bias])
    return model, decoder
