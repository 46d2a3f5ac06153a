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
"""

import os
import re
from pathlib import Path

import keras
import numpy as np

from keras_attention.cells.wrapper import AttentionWrapper
from keras_attention.decoders import AttentionDecoder, InferenceDecoder
from keras_attention.layers import AdditiveAttention, GeneralAttention

__all__ = ["ROLES", "import_tfa_seq2seq", "read_tfa_checkpoint"]

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
