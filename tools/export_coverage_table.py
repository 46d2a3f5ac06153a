"""Export every public layer to SavedModel and ONNX and print the parity table.

    python -m tools.export_coverage_table [--out DIR] [--markdown FILE]

Builds small functional models that together use every public layer and
decoder of the library (one model output per layer), exports them with
`keras_attention.export_model` (several signatures in one SavedModel, one
ONNX file per signature), verifies parity on generated padded batches, and
prints the layer x format table docs/export.md shows. A documentation tool, not
part of the library: the table is `ExportReport.markdown()` of this export.
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Run from a checkout without installing: the package sits one level up.

import keras
import numpy as np

import keras_attention as ka

VOCABULARY, DIM = 20, 8


def attention_layers_model():
    """One output per attention layer, on padded source and target ids."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    target_span = keras.Input((None,), dtype="bool", name="target_span")
    memory = keras.layers.Embedding(VOCABULARY, DIM, mask_zero=True)(source)
    queries = keras.layers.Embedding(VOCABULARY, DIM, mask_zero=True)(target)
    pooled = keras.layers.GlobalAveragePooling1D

    cross = {
        "AdditiveAttention": ka.AdditiveAttention(DIM, use_bias=True),
        "AdditiveAttention_normalize": ka.AdditiveAttention(DIM, normalize=True),
        "DotAttention": ka.DotAttention(use_scale=True),
        "ScaledDotAttention": ka.ScaledDotAttention(),
        "GeneralAttention": ka.GeneralAttention(),
        "ConcatAttention_linear": ka.ConcatAttention(),
        "ConcatAttention": ka.ConcatAttention(units=DIM),
        "HardAttention": ka.HardAttention(ka.AdditiveAttention(DIM)),
        "BahdanauMonotonicAttention": ka.BahdanauMonotonicAttention(DIM),
        "LuongMonotonicAttention": ka.LuongMonotonicAttention(mode="recursive"),
        "MultiHeadAttention": ka.MultiHeadAttention(2, 4),
    }
    outputs = {name: pooled(name=name)(layer(queries, memory)) for name, layer in cross.items()}
    outputs["SelfAttention"] = pooled(name="SelfAttention")(ka.SelfAttention(DIM, causal=True, window=3)(memory))
    outputs["AttentionPooling"] = keras.layers.Identity(name="AttentionPooling")(ka.AttentionPooling(DIM)(memory))
    hidden = keras.layers.Bidirectional(keras.layers.LSTM(DIM // 2, return_sequences=True))(memory)
    for mode in ("vanilla", "contextualized", "gated"):
        name = f"TargetedAttention_{mode}"
        outputs[name] = keras.layers.Identity(name=name)(ka.TargetedAttention(DIM, mode=mode)(hidden, target_span))
    outputs["PointerAttention"] = keras.layers.Identity(name="PointerAttention")(
        ka.PointerAttention(DIM)(queries, memory)
    )
    return keras.Model([source, target, target_span], outputs, name="attention_layers")


def decoder_models():
    """Teacher-forced decoders for each cell and with scheduled sampling, greedy / beam in-graph decoding
    and an ensemble of two."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    memory = keras.layers.Embedding(VOCABULARY, DIM, mask_zero=True)(source)
    embedding = keras.layers.Embedding(VOCABULARY, DIM)
    cells = {
        "AttentionGRUCell": ka.AttentionGRUCell(DIM, ka.AdditiveAttention(DIM)),
        "AttentionLSTMCell": ka.AttentionLSTMCell(DIM, ka.GeneralAttention()),
        "AttentionWrapper": ka.AttentionWrapper(
            keras.layers.LSTMCell(DIM), ka.GeneralAttention(), attention_layer_size=DIM
        ),
    }
    outputs = {
        name: keras.layers.Identity(name=name)(ka.AttentionDecoder(cell)(embedding(target), memory))
        for name, cell in cells.items()
    }
    readout = keras.layers.Dense(VOCABULARY)
    # Outside training (as exported) scheduled sampling is teacher forcing.
    scheduled = ka.ScheduledSamplingDecoder(
        ka.AttentionGRUCell(DIM, ka.AdditiveAttention(DIM)),
        keras.layers.Embedding(VOCABULARY, DIM),
        keras.layers.Dense(VOCABULARY),
        sampling_probability=0.25,
    )
    outputs["ScheduledSamplingDecoder"] = keras.layers.Identity(name="ScheduledSamplingDecoder")(
        scheduled(target, memory)
    )
    teacher_forced = keras.Model([source, target], outputs, name="decoders")
    searches = {
        method: keras.Model(
            source,
            ka.InferenceDecoder(cells["AttentionGRUCell"], embedding, readout, 1, 2, 8, method=method, beam_width=3)(
                memory
            ),
            name=f"{method}_search",
        )
        for method in ("greedy", "beam")
    }
    # Two members, each with its own cell, embedding and readout, over one memory.
    members = [
        ka.InferenceDecoder(
            ka.AttentionGRUCell(DIM, ka.AdditiveAttention(DIM)),
            keras.layers.Embedding(VOCABULARY, DIM),
            keras.layers.Dense(VOCABULARY),
            1,
            2,
            8,
        )
        for _ in range(2)
    ]
    ensemble = ka.EnsembleDecoder(members, method="beam", beam_width=3)
    searches["ensemble"] = keras.Model(source, ensemble([memory, memory]), name="ensemble_search")
    return teacher_forced, searches


def composite_models():
    pointer = ka.PointerNetwork(DIM, max_length=6, beam_width=3, use_cudnn=False)
    points = keras.Input((None, 2), name="points")
    pointer_model = keras.Model(points, pointer(points), name="pointer_network")
    documents = ka.models.hierarchical_attention_network(
        VOCABULARY, 3, embedding_dim=DIM, word_units=4, sentence_units=4
    )
    return pointer_model, documents


def transformer_models():
    """A post-norm encoder layer and a pre-norm encoder stack under learned positions, a rotary
    decoder layer and a decoder stack teacher-forced under sinusoids, and the stack's in-graph beam
    search."""
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    options = dict(num_heads=2, intermediate_dim=2 * DIM)
    source_embedding = keras.layers.Embedding(VOCABULARY, DIM, mask_zero=True)
    target_embedding = keras.layers.Embedding(VOCABULARY, DIM)
    sinusoids = ka.SinusoidalPositionEncoding()
    learned = ka.LearnedPositionEmbedding(16)
    first = ka.TransformerEncoderLayer(norm_first=False, **options)
    memory = ka.TransformerEncoderStack(2, **options)(first(learned(source_embedding(source))))
    queries = sinusoids(target_embedding(target))
    stack = ka.TransformerDecoderStack(2, **options)
    readout = keras.layers.Dense(VOCABULARY)
    outputs = {
        "TransformerEncoderStack": keras.layers.Identity(name="TransformerEncoderStack")(memory),
        "TransformerDecoderLayer_rotary": keras.layers.Identity(name="TransformerDecoderLayer_rotary")(
            ka.TransformerDecoderLayer(use_rotary=True, **options)(queries, memory)
        ),
        "TransformerDecoderStack": keras.layers.Identity(name="TransformerDecoderStack")(
            readout(stack(queries, memory))
        ),
    }
    teacher_forced = keras.Model([source, target], outputs, name="transformer")
    decoder = ka.TransformerInferenceDecoder(
        stack, target_embedding, readout, 1, 2, 8, position=sinusoids, method="beam", beam_width=3
    )
    search = keras.Model(source, decoder(memory), name="transformer_search")
    return teacher_forced, search


def build_signatures():
    teacher_forced, searches = decoder_models()
    pointer_model, documents = composite_models()
    signatures = {
        "serving_default": attention_layers_model(),
        "decoders": teacher_forced,
        "greedy_search": searches["greedy"],
        "beam_search": searches["beam"],
        "ensemble_search": searches["ensemble"],
        "pointer_network": pointer_model,
        "hierarchical": documents,
    }
    signatures["transformer"], signatures["transformer_search"] = transformer_models()
    rng = np.random.default_rng(0)
    for model in signatures.values():
        for variable in model.trainable_weights:
            variable.assign(rng.normal(0, 0.4, variable.shape).astype(variable.dtype))
    return signatures


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="export directory (default: a temporary one)")
    parser.add_argument("--markdown", help="also write the table to this file")
    args = parser.parse_args(argv)
    keras.utils.set_random_seed(0)
    with tempfile.TemporaryDirectory() as scratch:
        out = args.out or os.path.join(scratch, "export")
        report = ka.export_model(build_signatures(), out, overwrite=True)
    table = report.markdown()
    print(table)
    print(f"\nONNX opset {report.opset}; each cell: the max |diff| against Keras over the generated padded batches")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table + "\n")
    return report


if __name__ == "__main__":
    main()
