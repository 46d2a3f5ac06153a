"""Import a model trained with `tfa.seq2seq` from its TensorFlow checkpoint.

`import_tfa_seq2seq` reads the checkpoint (or SavedModel) of the model the
TensorFlow NMT-with-attention tutorial builds, an embedding and an LSTM or
GRU encoder, then an embedding, an `AttentionWrapper` around an `LSTMCell` or
`GRUCell` with `LuongAttention` or `BahdanauAttention`, and a `Dense`
read-out, and returns the same model built with this library, weights
assigned: a teacher-forced trainer and greedy and beam decoders that share
its layers. Only the checkpoint is read (`tf.train.load_checkpoint`):
neither tensorflow-addons nor TensorFlow 2.15 is needed.

Each weight is found by where tfa puts it (`memory_layer/kernel`,
`query_layer/kernel`, `attention_v` under the mechanism,
`_attention_layers/0/kernel` under the wrapper) or, for the layers the user
named, by structure: the two `embeddings`, the recurrent cell beside the
mechanism (the decoder's) and the one outside it (the encoder's), and the
read-out kernel of shape `(units or attention size, target vocabulary)`.
`names=` overrides any role by its checkpoint path when a model is laid out
otherwise. The conventions that differ are set to tfa's: the attention
layer is linear (`attention_activation=None`) and beam search uses tfa's
length bookkeeping (`length_convention="tfa"`). `mask_zero` and
`memory_sequence_length` say how the tfa model masked its source, which a
checkpoint does not record. A mechanism or layer the checkpoint shows to be
one this module does not reproduce exactly (another mechanism than
`attention` says, a monotonic one, a list of them, an attention layer of
your own) is refused with what to do (`keras_attention.tfa_checkpoint`), and
so is a checkpoint holding any weight the built model does not use (a layer
it does not build: a stacked or bidirectional RNN, a bridge, a
normalisation...).

The same as a command, writing the three models as `.keras` files:

    python -m keras_attention.tfa_import CHECKPOINT OUT_DIR --cell lstm --attention luong \
        --mask-zero true --memory-sequence-length source \
        --start-token 1 --end-token 2 --max-length 40 [--beam-width 5 --length-penalty-weight 0.6]

(also installed as `keras-attention-import-tfa`; `--help` lists the rest).
"""

import argparse
import os
import sys
from pathlib import Path

import keras
import numpy as np
from keras import ops

from keras_attention.cells.wrapper import AttentionWrapper
from keras_attention.decoders import AttentionDecoder, InferenceDecoder
from keras_attention.layers import AdditiveAttention, GeneralAttention
from keras_attention.tfa_checkpoint import (
    ROLES,
    describe_attention_layer,
    describe_mechanism,
    locate_roles,
    read_tfa_checkpoint,
    refuse_unused,
    shape_mismatch,
)

__all__ = ["MEMORY_SEQUENCE_LENGTHS", "MODELS", "ROLES", "import_tfa_seq2seq", "main", "read_tfa_checkpoint"]

_CELLS = {"lstm": (keras.layers.LSTM, keras.layers.LSTMCell), "gru": (keras.layers.GRU, keras.layers.GRUCell)}
_ATTENTIONS = ("luong", "bahdanau")
MEMORY_SEQUENCE_LENGTHS = ("source", "full")
MODELS = ("trainer", "greedy", "beam")


def _get(variables, prefix, name):
    key = f"{prefix}/{name}"
    if key not in variables:
        raise ValueError(
            f"tfa checkpoint: no variable {key!r}; variables under {prefix!r}: "
            f"{sorted(k for k in variables if k.startswith(prefix + '/'))}."
        )
    return variables[key]


def _check_masking(mask_zero, memory_sequence_length):
    if mask_zero is None or memory_sequence_length is None:
        raise ValueError(
            "import_tfa_seq2seq: say how the tfa model masked its source (a checkpoint does not record it): "
            "`mask_zero` (True when its source Embedding had mask_zero=True, so the encoder skipped padding) and "
            "`memory_sequence_length` ('source' when setup_memory was given the source's lengths, 'full' when it "
            "was given none or the padded width, as the TensorFlow NMT tutorial does); "
            f"got mask_zero={mask_zero!r}, memory_sequence_length={memory_sequence_length!r}."
        )
    if not isinstance(mask_zero, bool):
        raise ValueError(f"`mask_zero` must be True or False; got {mask_zero!r}.")
    if memory_sequence_length not in MEMORY_SEQUENCE_LENGTHS:
        raise ValueError(
            f"`memory_sequence_length` must be one of {list(MEMORY_SEQUENCE_LENGTHS)}; got {memory_sequence_length!r}."
        )


def import_tfa_seq2seq(
    checkpoint,
    cell,
    attention,
    start_token,
    end_token,
    max_length,
    beam_width=4,
    length_penalty_weight=0.0,
    encoder=None,
    names=None,
    mask_zero=None,
    memory_sequence_length=None,
    build=MODELS,
):
    """Build a tfa.seq2seq attention model with this library and load its trained weights.

    Args:
        checkpoint: a TF checkpoint prefix (`tf.train.Checkpoint(...).write`),
            a directory with one, or a SavedModel directory.
        cell: "lstm" or "gru", the cell inside tfa's `AttentionWrapper`.
        attention: "luong" (`LuongAttention`) or "bahdanau"
            (`BahdanauAttention`), with or without `scale=True` /
            `normalize=True` (read from the checkpoint). A checkpoint whose
            mechanism is the other one is refused, naming the right value.
        start_token: decoding's start id, as given to tfa's samplers.
        end_token: decoding's end id, as given to tfa's samplers.
        max_length: the most tokens decoded (tfa's `maximum_iterations`).
        beam_width: the beam decoder's width.
        length_penalty_weight: the beam decoder's length penalty.
        encoder: "lstm" or "gru", the encoder RNN (default: as `cell`); its
            final state is the decoder's initial cell state.
        names: optional {role: checkpoint path}, for roles in `ROLES` whose
            weights the structure does not reveal (e.g.
            `{"output_layer": "decoder/fc"}`).
        mask_zero: required; the tfa source `Embedding`'s `mask_zero`.
            True: the encoder skips the padding (id 0), as it did in tfa.
        memory_sequence_length: required; what tfa's `setup_memory` was
            given. "source": the source's lengths, so the attention ignores
            the padding (id 0 at the end of a row); "full": no lengths, or
            the padded width (the TensorFlow NMT tutorial's
            `[max_length_input] * batch`), so it attends to every position.
            The four combinations each import exactly.
        build: a list or tuple naming which of `MODELS` to build and
            return (all three by default; e.g. `["trainer"]` to fine-tune).

    Returns:
        A dict of the models `build` names, sharing their layers: "trainer"
            (`keras.Model([source, target_in])` -> logits), "greedy"
            (`keras.Model(source)` -> {"ids", "scores", "lengths",
            "alignments"}) and "beam" (the same with beams).

    Raises:
        FileNotFoundError: no checkpoint at `checkpoint`.
        ValueError: an unknown or missing option; a weight that cannot be
            found (every role at once) or has another shape than the model
            needs (named, with both shapes and the tfa setting that likely
            differs); a mechanism other than `attention`, or a tfa
            configuration this import does not reproduce exactly (monotonic
            mechanisms, a list of mechanisms, an attention layer of your
            own, weights the imported model does not use: a stacked or
            bidirectional RNN, a bridge, a normalisation...), named with
            what to do; an HDF5 file.

    Example:

    ```python
    models = import_tfa_seq2seq("tfa_run/ckpt-12", cell="lstm", attention="luong",
                                start_token=1, end_token=2, max_length=40, beam_width=5,
                                length_penalty_weight=0.6, mask_zero=True,
                                memory_sequence_length="source")
    models["beam"].save("translator.keras")
    ```
    """
    if cell not in _CELLS:
        raise ValueError(f"`cell` must be one of {sorted(_CELLS)}; got {cell!r}.")
    encoder = cell if encoder is None else encoder
    if encoder not in _CELLS:
        raise ValueError(f"`encoder` must be one of {sorted(_CELLS)}; got {encoder!r}.")
    if attention not in _ATTENTIONS:
        raise ValueError(f"`attention` must be one of {list(_ATTENTIONS)}; got {attention!r}.")
    names = dict(names or {})
    unknown = set(names) - set(ROLES)
    if unknown:
        raise ValueError(f"`names` has unknown roles {sorted(unknown)}; roles are {list(ROLES)}.")
    _check_masking(mask_zero, memory_sequence_length)
    if not isinstance(build, (list, tuple, set, frozenset)) or not set(build) or not set(build) <= set(MODELS):
        raise ValueError(f"`build` must name one or more of {list(MODELS)}; got {build!r}.")
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"`checkpoint` must be a path; got {checkpoint!r}.")
    variables = read_tfa_checkpoint(checkpoint)
    roles = locate_roles(variables, names)
    mechanism = roles["attention_mechanism"]
    setting = describe_mechanism(variables, mechanism, attention)
    attention_layer = describe_attention_layer(variables, roles)

    source_table = _get(variables, roles["source_embedding"], "embeddings")
    target_table = _get(variables, roles["target_embedding"], "embeddings")
    recurrent = _get(variables, roles["decoder_cell"], "recurrent_kernel")
    units = recurrent.shape[0]
    encoder_units = _get(variables, roles["encoder"], "recurrent_kernel").shape[0]
    if attention == "luong":
        score = GeneralAttention(name="attention")
    else:
        attention_units = _get(variables, mechanism, "attention_v").shape[0]
        score = AdditiveAttention(attention_units, normalize=setting["normalize"], name="attention")

    rnn_layer, cell_class = _CELLS[encoder][0], _CELLS[cell][1]
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    source_embedding = keras.layers.Embedding(*source_table.shape, mask_zero=mask_zero, name="source_embedding")
    encoded = rnn_layer(encoder_units, return_sequences=True, return_state=True, name="encoder")(
        source_embedding(source)
    )
    memory, state = encoded[0], list(encoded[1:])
    # Without an explicit mask the attention takes the encoder output's Keras
    # mask, which is there exactly when the encoder was masked.
    memory_mask = None
    if memory_sequence_length == "source" and not mask_zero:
        memory_mask = ops.not_equal(source, 0)
    elif memory_sequence_length == "full" and mask_zero:
        memory_mask = ops.ones_like(source, dtype="bool")
    wrapper = AttentionWrapper(
        cell_class(units, name="decoder_cell"),
        score,
        attention_layer_size=None if attention_layer is None else attention_layer.shape[1],
        attention_activation=None,  # tfa's attention layer is linear
        name="attention_wrapper",
    )
    target_embedding = keras.layers.Embedding(*target_table.shape, name="target_embedding")
    output_kernel = _get(variables, roles["output_layer"], "kernel")
    readout = keras.layers.Dense(output_kernel.shape[1], name="readout")
    decoded = AttentionDecoder(wrapper, name="decoder")(
        target_embedding(target_in), memory, memory_mask=memory_mask, initial_state=state
    )
    trainer = keras.Model([source, target_in], readout(decoded), name="tfa_trainer")

    def decoder_model(method):
        options = dict(beam_width=beam_width, length_penalty_weight=length_penalty_weight, length_convention="tfa")
        outputs = InferenceDecoder(
            wrapper,
            target_embedding,
            readout,
            start_token,
            end_token,
            max_length,
            method=method,
            name=f"{method}_decoder",
            **(options if method == "beam" else {}),
        )(memory, memory_mask=memory_mask, initial_state=state)
        return keras.Model(source, outputs, name=f"tfa_{method}")

    # (weight, value, its checkpoint path, role)
    assignments = [
        (source_embedding.embeddings, source_table, roles["source_embedding"] + "/embeddings", "source_embedding"),
        (target_embedding.embeddings, target_table, roles["target_embedding"] + "/embeddings", "target_embedding"),
    ]
    assignments += [
        (weight, _get(variables, roles["output_layer"], name), f"{roles['output_layer']}/{name}", "output_layer")
        for weight, name in ((readout.kernel, "kernel"), (readout.bias, "bias"))
    ]
    for role, layer in (("encoder", trainer.get_layer("encoder").cell), ("decoder_cell", wrapper.cell)):
        for weight, name in zip(layer.weights, ("kernel", "recurrent_kernel", "bias")):
            assignments.append((weight, _get(variables, roles[role], name), f"{roles[role]}/{name}", role))
    memory_kernel = _get(variables, mechanism, "memory_layer/kernel")
    if attention == "luong":
        # tfa's scale=True score is g * q^T (W k): g folds into W exactly.
        scale = _get(variables, mechanism, "attention_g") if setting["scale"] else 1.0
        named = [(score.bilinear_kernel, scale * memory_kernel, "memory_layer/kernel")]
    else:
        named = [(score.key_kernel, memory_kernel, "memory_layer/kernel")]
        names_read = ["query_layer/kernel", "attention_v"] + (
            ["attention_g", "attention_b"] if setting["normalize"] else []
        )
        weights = [score.query_kernel, score.score_vector] + ([score.scale, score.bias] if setting["normalize"] else [])
        named += [(weight, _get(variables, mechanism, name), name) for weight, name in zip(weights, names_read)]
    assignments += [(weight, value, f"{mechanism}/{name}", "attention_mechanism") for weight, value, name in named]
    if attention_layer is not None:
        # tfa's rows are [cell output ; context], ours [context ; cell output].
        swapped = np.concatenate([attention_layer[units:], attention_layer[:units]])
        assignments.append((wrapper.attention_kernel, swapped, roles["attention_layer"] + "/kernel", "attention_layer"))
    # Every weight must be used: one left over is a layer this model lacks.
    # The mechanism's are all read (describe_mechanism knows each; g may fold into W).
    held = [key for key in variables if key.startswith(mechanism + "/")]
    refuse_unused(variables, [where for _, _, where, _ in assignments] + held)
    for weight, value, where, role in assignments:
        if tuple(weight.shape) != tuple(value.shape):
            raise shape_mismatch(variables, role, where, value.shape, weight.shape, {"cell": cell, "encoder": encoder})
        weight.assign(np.asarray(value).astype(weight.dtype))
    models = {"trainer": trainer}
    models.update((method, decoder_model(method)) for method in ("greedy", "beam") if method in build)
    return {kind: models[kind] for kind in MODELS if kind in build}


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one `error: ...` line (status 2), as the export command prints them."""

    def error(self, message):
        print(f"error: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def _role(text):
    role, separator, path = text.partition("=")
    if not separator or not role or not path:
        raise argparse.ArgumentTypeError(f"expected ROLE=PATH, got {text!r}")
    return role, path


def main(argv=None):
    """`keras-attention-import-tfa CHECKPOINT OUT_DIR --cell ... --attention ... --mask-zero ...
    --memory-sequence-length ...`: `import_tfa_seq2seq`,
    then OUT_DIR/trainer.keras, greedy.keras and beam.keras. Returns the exit status: 0, or 1 with
    one `error: ...` line on stderr (usage errors exit with 2)."""
    parser = _Parser(
        prog="keras-attention-import-tfa",
        description="Import a tfa.seq2seq model from its TF checkpoint or SavedModel and save it as .keras files.",
    )
    parser.add_argument("checkpoint", help="a checkpoint prefix, a directory holding one, or a SavedModel directory")
    parser.add_argument("out_dir", help="where to write trainer.keras, greedy.keras and beam.keras")
    parser.add_argument("--cell", required=True, choices=sorted(_CELLS), help="the cell inside AttentionWrapper")
    parser.add_argument("--attention", required=True, choices=_ATTENTIONS)
    parser.add_argument("--encoder", choices=sorted(_CELLS), help="the encoder RNN (default: as --cell)")
    parser.add_argument("--start-token", type=int, required=True)
    parser.add_argument("--end-token", type=int, required=True)
    parser.add_argument("--max-length", type=int, required=True)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--length-penalty-weight", type=float, default=0.0)
    parser.add_argument(
        "--name", action="append", type=_role, default=[], metavar="ROLE=PATH", help=f"one of {list(ROLES)}; repeatable"
    )
    parser.add_argument(
        "--mask-zero",
        required=True,
        choices=("true", "false"),
        help="the tfa source Embedding's mask_zero (true: the encoder skipped padding, id 0)",
    )
    parser.add_argument(
        "--memory-sequence-length",
        required=True,
        choices=MEMORY_SEQUENCE_LENGTHS,
        help="what tfa's setup_memory was given: source (the source's lengths) or full (none, or the padded width)",
    )
    parser.add_argument("--force", action="store_true", help="replace .keras files already in OUT_DIR")
    args = parser.parse_args(argv)
    out_dir = Path(args.out_dir)
    paths = {kind: out_dir / f"{kind}.keras" for kind in ("trainer", "greedy", "beam")}
    try:
        existing = [str(path) for path in paths.values() if path.exists()]
        if existing and not args.force:
            raise FileExistsError(f"{', '.join(existing)} already exist; pass --force to replace them.")
        models = import_tfa_seq2seq(
            args.checkpoint,
            args.cell,
            args.attention,
            args.start_token,
            args.end_token,
            args.max_length,
            beam_width=args.beam_width,
            length_penalty_weight=args.length_penalty_weight,
            encoder=args.encoder,
            names=dict(args.name),
            mask_zero=args.mask_zero == "true",
            memory_sequence_length=args.memory_sequence_length,
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        for kind, path in paths.items():
            models[kind].save(path)
    except Exception as error:  # a command prints one line, never a traceback
        from keras_attention.export.cli import error_line

        print(error_line(error), file=sys.stderr)
        return 1
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
