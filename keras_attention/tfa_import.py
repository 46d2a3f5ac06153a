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
length bookkeeping (`length_convention="tfa"`).

The same as a command, writing the three models as `.keras` files:

    python -m keras_attention.tfa_import CHECKPOINT OUT_DIR --cell lstm --attention luong \
        --start-token 1 --end-token 2 --max-length 40 [--beam-width 5 --length-penalty-weight 0.6]

(also installed as `keras-attention-import-tfa`; `--help` lists the rest).
"""

import argparse
import os
import re
import sys
from pathlib import Path

import keras
import numpy as np

from keras_attention.cells.wrapper import AttentionWrapper
from keras_attention.decoders import AttentionDecoder, InferenceDecoder
from keras_attention.layers import AdditiveAttention, GeneralAttention

__all__ = ["ROLES", "import_tfa_seq2seq", "main", "read_tfa_checkpoint"]

ROLES = (
    "source_embedding",
    "encoder",
    "target_embedding",
    "decoder_cell",
    "attention_mechanism",
    "attention_layer",
    "output_layer",
)
_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"
_CELLS = {"lstm": (keras.layers.LSTM, keras.layers.LSTMCell), "gru": (keras.layers.GRU, keras.layers.GRUCell)}
_ATTENTIONS = ("luong", "bahdanau")


def read_tfa_checkpoint(path):
    """{variable path: array} of a TF checkpoint (its prefix, or a
    directory holding one) or a SavedModel directory, optimizer slots left
    out. Paths read as the checkpoint's object graph names them, e.g.
    `decoder/attention_mechanism/memory_layer/kernel`."""
    import tensorflow as tf

    path = Path(path)
    if (path / "variables" / "variables.index").is_file():  # a SavedModel
        path = path / "variables" / "variables"
    elif path.is_dir():
        latest = tf.train.latest_checkpoint(str(path))
        if latest is None:
            raise FileNotFoundError(f"`checkpoint` {str(path)!r}: no checkpoint or SavedModel in this directory.")
        path = Path(latest)
    if not Path(str(path) + ".index").is_file():
        raise FileNotFoundError(
            f"`checkpoint` {str(path)!r}: no such checkpoint (expected PREFIX.index beside PREFIX.data-*)."
        )
    reader = tf.train.load_checkpoint(str(path))
    return {
        key[: -len(_SUFFIX)]: reader.get_tensor(key)
        for key in reader.get_variable_to_shape_map()
        if key.endswith(_SUFFIX) and "OPTIMIZER_SLOT" not in key and not key.startswith("optimizer/")
    }


def _one(found, role, variables):
    if len(found) != 1:
        listing = ", ".join(sorted(variables))
        what = "none" if not found else f"several ({', '.join(sorted(found))})"
        raise ValueError(
            f"tfa checkpoint: cannot tell which weights are the {role}: found {what}. "
            f"Pass names={{{role!r}: 'path/in/checkpoint'}}. The checkpoint holds: {listing}."
        )
    return found[0]


def _locate(variables, names):
    """{role: checkpoint path prefix} by tfa's layout and the model's structure."""
    roles = dict(names)
    if "attention_mechanism" not in roles:
        roles["attention_mechanism"] = _one(
            [k[: -len("/memory_layer/kernel")] for k in variables if k.endswith("/memory_layer/kernel")],
            "attention_mechanism",
            variables,
        )
    top = roles["attention_mechanism"].split("/")[0]
    if "attention_layer" not in roles:
        layers = [k[: -len("/kernel")] for k in variables if re.search(r"_attention_layers/0/kernel$", k)]
        roles["attention_layer"] = layers[0] if len(layers) == 1 else None
    cells = [k[: -len("/recurrent_kernel")] for k in variables if k.endswith("/recurrent_kernel")]
    if "decoder_cell" not in roles:
        roles["decoder_cell"] = _one([c for c in cells if c.split("/")[0] == top], "decoder_cell", variables)
    if "encoder" not in roles:
        roles["encoder"] = _one([c for c in cells if c.split("/")[0] != top], "encoder", variables)
    embeddings = [k[: -len("/embeddings")] for k in variables if k.endswith("/embeddings")]
    if "target_embedding" not in roles:
        roles["target_embedding"] = _one(
            [e for e in embeddings if e.split("/")[0] == top], "target_embedding", variables
        )
    if "source_embedding" not in roles:
        roles["source_embedding"] = _one(
            [e for e in embeddings if e.split("/")[0] != top], "source_embedding", variables
        )
    if "output_layer" not in roles:
        claimed = {roles[r] for r in ROLES if r in roles and roles[r]}
        vocabulary = variables[roles["target_embedding"] + "/embeddings"].shape[0]
        dense = [
            k[: -len("/kernel")]
            for k, v in variables.items()
            if k.endswith("/kernel")
            and k.split("/")[0] == top
            and v.ndim == 2
            and v.shape[1] == vocabulary
            and not any(k.startswith(c + "/") for c in claimed)
        ]
        roles["output_layer"] = _one(dense, "output_layer", variables)
    return roles


def _get(variables, prefix, name):
    key = f"{prefix}/{name}"
    if key not in variables:
        raise ValueError(
            f"tfa checkpoint: no variable {key!r}; variables under {prefix!r}: "
            f"{sorted(k for k in variables if k.startswith(prefix + '/'))}."
        )
    return variables[key]


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
    mask_source_padding=True,
):
    """Build a tfa.seq2seq attention model with this library and load its trained weights.

    Args:
        checkpoint: a TF checkpoint prefix (`tf.train.Checkpoint(...).write`),
            a directory with one, or a SavedModel directory.
        cell: "lstm" or "gru", the cell inside tfa's `AttentionWrapper`.
        attention: "luong" (`LuongAttention`, scale=False) or "bahdanau"
            (`BahdanauAttention`, normalize=False).
        start_token, end_token, max_length: decoding, as given to tfa's
            samplers and `maximum_iterations`.
        beam_width, length_penalty_weight: the beam decoder's.
        encoder: "lstm" or "gru", the encoder RNN (default: as `cell`); its
            final state is the decoder's initial cell state.
        names: optional {role: checkpoint path}, for roles in `ROLES` whose
            weights the structure does not reveal (e.g.
            `{"output_layer": "decoder/fc"}`).
        mask_source_padding: the source embedding masks id 0, so the
            encoder skips padding and the attention ignores it (tfa's
            `mask_zero=True` with `memory_sequence_length`); False attends
            to every position, as a tfa model set up without lengths did.

    Returns:
        {"trainer": keras.Model([source, target_in]) -> logits,
         "greedy": keras.Model(source) -> {"ids", "scores", "lengths", "alignments"},
         "beam": the same with beams}, sharing their layers.

    Raises:
        FileNotFoundError: no checkpoint at `checkpoint`.
        ValueError: an unknown option, or a weight that cannot be found or
            has another shape than the model needs (named, with what the
            checkpoint holds).

    Example:

    ```python
    models = import_tfa_seq2seq("tfa_run/ckpt-12", cell="lstm", attention="luong",
                                start_token=1, end_token=2, max_length=40, beam_width=5,
                                length_penalty_weight=0.6)
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
    if not isinstance(checkpoint, (str, os.PathLike)):
        raise ValueError(f"`checkpoint` must be a path; got {checkpoint!r}.")
    variables = read_tfa_checkpoint(checkpoint)
    roles = _locate(variables, names)

    source_table = _get(variables, roles["source_embedding"], "embeddings")
    target_table = _get(variables, roles["target_embedding"], "embeddings")
    recurrent = _get(variables, roles["decoder_cell"], "recurrent_kernel")
    units = recurrent.shape[0]
    encoder_units = _get(variables, roles["encoder"], "recurrent_kernel").shape[0]
    attention_layer = None if roles["attention_layer"] is None else _get(variables, roles["attention_layer"], "kernel")
    mechanism = roles["attention_mechanism"]
    if attention == "luong":
        score = GeneralAttention(name="attention")
    else:
        score = AdditiveAttention(_get(variables, mechanism, "attention_v").shape[0], name="attention")

    rnn_layer, cell_class = _CELLS[encoder][0], _CELLS[cell][1]
    source = keras.Input((None,), dtype="int32", name="source")
    target_in = keras.Input((None,), dtype="int32", name="target_in")
    source_embedding = keras.layers.Embedding(
        *source_table.shape, mask_zero=mask_source_padding, name="source_embedding"
    )
    encoded = rnn_layer(encoder_units, return_sequences=True, return_state=True, name="encoder")(
        source_embedding(source)
    )
    memory, state = encoded[0], list(encoded[1:])
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
    decoded = AttentionDecoder(wrapper, name="decoder")(target_embedding(target_in), memory, initial_state=state)
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
        )(memory, initial_state=state)
        return keras.Model(source, outputs, name=f"tfa_{method}")

    models = {"trainer": trainer, "greedy": decoder_model("greedy"), "beam": decoder_model("beam")}

    assignments = [
        (source_embedding.embeddings, source_table, roles["source_embedding"] + "/embeddings"),
        (target_embedding.embeddings, target_table, roles["target_embedding"] + "/embeddings"),
        (readout.kernel, output_kernel, roles["output_layer"] + "/kernel"),
        (readout.bias, _get(variables, roles["output_layer"], "bias"), roles["output_layer"] + "/bias"),
    ]
    encoder_layer = trainer.get_layer("encoder")
    for weight, name in zip(encoder_layer.cell.weights, ("kernel", "recurrent_kernel", "bias")):
        assignments.append((weight, _get(variables, roles["encoder"], name), f"{roles['encoder']}/{name}"))
    for weight, name in zip(wrapper.cell.weights, ("kernel", "recurrent_kernel", "bias")):
        assignments.append((weight, _get(variables, roles["decoder_cell"], name), f"{roles['decoder_cell']}/{name}"))
    if attention == "luong":
        assignments.append(
            (
                score.bilinear_kernel,
                _get(variables, mechanism, "memory_layer/kernel"),
                f"{mechanism}/memory_layer/kernel",
            )
        )
    else:
        for weight, name in (
            (score.query_kernel, "query_layer/kernel"),
            (score.key_kernel, "memory_layer/kernel"),
            (score.score_vector, "attention_v"),
        ):
            assignments.append((weight, _get(variables, mechanism, name), f"{mechanism}/{name}"))
    if attention_layer is not None:
        # tfa's rows are [cell output ; context], ours [context ; cell output].
        swapped = np.concatenate([attention_layer[units:], attention_layer[:units]])
        assignments.append((wrapper.attention_kernel, swapped, roles["attention_layer"] + "/kernel"))
    for weight, value, where in assignments:
        if tuple(weight.shape) != tuple(value.shape):
            raise ValueError(
                f"tfa checkpoint: {where!r} has shape {tuple(value.shape)}, but the model needs "
                f"{tuple(weight.shape)} for {weight.path!r} (is `cell`/`attention`/`encoder` the tfa model's?)."
            )
        weight.assign(value.astype(weight.dtype))
    return models


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
    """`keras-attention-import-tfa CHECKPOINT OUT_DIR --cell ... --attention ...`: `import_tfa_seq2seq`,
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
        "--no-mask-source-padding", action="store_true", help="attend to id 0 too (tfa without lengths)"
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
            mask_source_padding=not args.no_mask_source_padding,
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
