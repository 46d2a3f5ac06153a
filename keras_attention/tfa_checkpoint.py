"""Read a `tfa.seq2seq` model's TensorFlow checkpoint and tell what it holds.

`read_tfa_checkpoint` returns the checkpoint's variables by path;
`locate_roles` finds which of them play each part of the model
(`ROLES`); `describe_mechanism` reads which tfa attention mechanism and
settings the variables under the mechanism show, refusing those that
`keras_attention.tfa_import.import_tfa_seq2seq` does not reproduce exactly;
`refuse_unused` refuses a checkpoint whose weights the imported model does
not all use, and `shape_mismatch` explains a weight of another shape.
Only the checkpoint is read (`tf.train.load_checkpoint`): neither
tensorflow-addons nor TensorFlow 2.15 is needed.
"""

import re
from pathlib import Path

import numpy as np

__all__ = ["ROLES", "describe_mechanism", "locate_roles", "read_tfa_checkpoint", "refuse_unused", "shape_mismatch"]

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
_PORTING = "docs/migrating_from_tfa.md, 'Porting trained weights'"
_LISTED = 10  # unused variables named in the error; the rest are counted
_HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
_CHECKPOINT_FILE = re.compile(r"\.(index|data-\d+-of-\d+)$")
_HOW_TO_WRITE_ONE = (
    "in the TensorFlow 2.15 environment that trained the model, load the weights into it and write a "
    "checkpoint, `tf.train.Checkpoint(model=model).write('ckpt')` (or `model.save_weights('ckpt')`, "
    "without .h5), then import 'ckpt'"
)


def _refuse_file(path):
    """A file that is not a checkpoint prefix: say what it is and what to do."""
    with open(path, "rb") as file:
        head = file.read(len(_HDF5_SIGNATURE))
    if head == _HDF5_SIGNATURE or path.suffix in (".h5", ".hdf5"):
        raise ValueError(
            f"`checkpoint` {str(path)!r} is an HDF5 file (Keras `save_weights('*.h5')` or `save('*.h5')`); "
            f"HDF5 is not supported: it keeps no object paths to tell the model's parts apart. {_HOW_TO_WRITE_ONE}."
        )
    raise ValueError(
        f"`checkpoint` {str(path)!r} is a file but not a TensorFlow checkpoint (expected the prefix of "
        f"PREFIX.index and PREFIX.data-*, a directory holding one, or a SavedModel directory); {_HOW_TO_WRITE_ONE}."
    )


def read_tfa_checkpoint(path):
    """{variable path: array} of a TF checkpoint (its prefix, one of its
    files, or a directory holding one) or a SavedModel directory, optimizer
    slots left out. Paths read as the checkpoint's object graph names them,
    e.g. `decoder/attention_mechanism/memory_layer/kernel`. An HDF5 file is
    refused with what to do instead."""
    import tensorflow as tf

    path = Path(path)
    if (path / "variables" / "variables.index").is_file():  # a SavedModel
        path = path / "variables" / "variables"
    elif path.is_dir():
        latest = tf.train.latest_checkpoint(str(path))
        if latest is None:
            raise FileNotFoundError(f"`checkpoint` {str(path)!r}: no checkpoint or SavedModel in this directory.")
        path = Path(latest)
    elif path.is_file():
        prefix = Path(_CHECKPOINT_FILE.sub("", str(path)))
        if prefix == path or not Path(str(prefix) + ".index").is_file():
            _refuse_file(path)
        path = prefix
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


def _prefixes(variables, suffix):
    return sorted(k[: -len(suffix)] for k in variables if k.endswith(suffix))


def _under(path, top):
    return path.split("/")[0] == top


def locate_roles(variables, names):
    """{role: checkpoint path prefix} by tfa's layout and the model's structure
    (`names` first). Every role it cannot tell is named in one error, with its
    candidates, so that one run says all that `names=` needs."""
    roles = dict(names)
    problems = {}

    def pick(role, found, candidates):
        if role in roles:
            return
        if len(found) == 1:
            roles[role] = found[0]
        else:
            problems[role] = (found, candidates)

    mechanisms = _prefixes(variables, "/memory_layer/kernel")
    pick("attention_mechanism", mechanisms, mechanisms)
    # The mechanism's top-level object is the decoder's; the rest is the encoder's.
    top = roles["attention_mechanism"].split("/")[0] if "attention_mechanism" in roles else None
    if "attention_layer" not in roles:
        layers = [k[: -len("/kernel")] for k in variables if re.search(r"_attention_layers/\d+/kernel$", k)]
        roles["attention_layer"] = layers[0] if len(layers) == 1 else None
    cells = _prefixes(variables, "/recurrent_kernel")
    pick("decoder_cell", [c for c in cells if top is None or _under(c, top)], cells)
    pick("encoder", [c for c in cells if top is not None and not _under(c, top)], cells)
    embeddings = _prefixes(variables, "/embeddings")
    pick("target_embedding", [e for e in embeddings if top is None or _under(e, top)], embeddings)
    pick("source_embedding", [e for e in embeddings if top is not None and not _under(e, top)], embeddings)
    if "output_layer" not in roles:
        # The read-out maps to the target vocabulary: its kernel's columns are
        # the target embedding's rows (any embedding's while that one is unknown).
        targets = [roles["target_embedding"]] if "target_embedding" in roles else embeddings
        vocabularies = {variables[e + "/embeddings"].shape[0] for e in targets if e + "/embeddings" in variables}
        claimed = [roles[r] for r in ROLES if roles.get(r)]
        kernels = [k for k, v in variables.items() if k.endswith("/kernel") and v.ndim == 2]
        dense = [
            k[: -len("/kernel")]
            for k in kernels
            if (top is None or _under(k, top))
            and variables[k].shape[1] in vocabularies
            and not any(k.startswith(c + "/") for c in claimed)
        ]
        pick("output_layer", dense, sorted(k[: -len("/kernel")] for k in kernels))
    if problems:
        lines = []
        for role, (found, candidates) in problems.items():
            what = f"several ({', '.join(found)})" if found else "none"
            hint = "" if found or not candidates else f" (candidates: {', '.join(candidates)})"
            if role == "attention_mechanism" and found:
                hint = ": an AttentionWrapper given a list of mechanisms, which has no equivalent here (one attention per wrapper)"
            lines.append(f"{role}: found {what}{hint}")
        wanted = ", ".join(f"{role!r}: 'path/in/checkpoint'" for role in problems)
        raise ValueError(
            f"tfa checkpoint: cannot tell which weights play {len(problems)} role(s): {'; '.join(lines)}. "
            "Where the model has one layer per role that its checkpoint does not place as tfa's tutorial does "
            "(e.g. a subclassed model holding every layer under one name), pass them all in one go: "
            f"names={{{wanted}}} (the command: --name ROLE=PATH for each). Several layers for one role (a stacked "
            "or bidirectional RNN, two read-outs) make a model import_tfa_seq2seq does not build: naming one of "
            f"them leaves the others unused, which is refused; port it by hand ({_PORTING}). "
            f"The checkpoint holds: {', '.join(sorted(variables))}."
        )
    return roles


def _bookkeeping(variables, used):
    """Paths a training run saves beside the model's weights: counters
    (`save_counter`, integer scalars such as a step) and the variables of an
    optimizer tracked under another name than `optimizer` (which the reader
    leaves out), known by its integer scalar `iter` or `_iterations` and by
    holding none of the `used` weights."""

    def counter(value):
        return np.ndim(value) == 0 and np.asarray(value).dtype.kind in "iub"

    optimizers = [
        key.rsplit("/", 1)[0] + "/"
        for key, value in variables.items()
        if "/" in key and key.rsplit("/", 1)[1] in ("iter", "_iterations") and counter(value)
    ]
    optimizers = [o for o in optimizers if not any(path.startswith(o) for path in used)]
    return {
        key
        for key, value in variables.items()
        if key == "save_counter" or counter(value) or any(key.startswith(o) for o in optimizers)
    }


def refuse_unused(variables, used):
    """Refuses a checkpoint holding weights besides `used` (the paths the
    imported model reads) and bookkeeping: layers the importer does not
    build, without which the import would compute other numbers."""
    unused = sorted(set(variables) - set(used) - _bookkeeping(variables, used))
    if not unused:
        return
    listing = ", ".join(unused[:_LISTED]) + (f" and {len(unused) - _LISTED} more" if len(unused) > _LISTED else "")
    raise ValueError(
        f"tfa checkpoint: {len(unused)} variable(s) the imported model does not use: {listing}. "
        "So the tfa model has layers import_tfa_seq2seq does not build (a stacked or bidirectional RNN, a "
        "bridge between the encoder and the decoder, a normalisation, another layer before the read-out, "
        "a cell of your own...), and the model it would build from the rest computes other numbers; "
        f"port it by hand ({_PORTING})."
    )


# Variables under a tfa mechanism, by mechanism and setting.
_BAHDANAU = {"memory_layer/kernel", "query_layer/kernel", "attention_v"}
_NORMALIZED = {"attention_g", "attention_b"}
_LUONG = {"memory_layer/kernel"}
_SCALED = {"attention_g"}


def describe_mechanism(variables, mechanism, attention):
    """{"normalize": bool} (Bahdanau) or {"scale": bool} (Luong), read from
    the variables under `mechanism`; refuses a mechanism other than
    `attention` says, and any that is not imported exactly."""
    held = {k[len(mechanism) + 1 :] for k in variables if k.startswith(mechanism + "/")}
    listing = ", ".join(sorted(held))
    if "attention_score_bias" in held:
        kind = "BahdanauMonotonicAttention" if "attention_v" in held else "LuongMonotonicAttention"
        raise ValueError(
            f"tfa checkpoint: the mechanism at {mechanism!r} holds attention_score_bias ({listing}): a tfa "
            f"{kind}, which import_tfa_seq2seq does not import. Port it by hand to keras_attention.{kind} "
            f"({_PORTING})."
        )
    if held in (_BAHDANAU, _BAHDANAU | _NORMALIZED):
        found, setting = "bahdanau", {"normalize": bool(held & _NORMALIZED)}
    elif held in (_LUONG, _LUONG | _SCALED):
        found, setting = "luong", {"scale": bool(held & _SCALED)}
    else:
        raise ValueError(
            f"tfa checkpoint: the mechanism at {mechanism!r} holds {listing}, which is neither a tfa "
            "LuongAttention (memory_layer/kernel [, attention_g]) nor a BahdanauAttention (memory_layer/kernel, "
            f"query_layer/kernel, attention_v [, attention_g, attention_b]); port it by hand ({_PORTING})."
        )
    if found != attention:
        names = {"bahdanau": "BahdanauAttention", "luong": "LuongAttention"}
        raise ValueError(
            f"`attention`={attention!r}, but the mechanism at {mechanism!r} holds {listing}: a tfa "
            f"{names[found]}. Pass attention={found!r} (the command: --attention {found})."
        )
    return setting


def describe_attention_layer(variables, roles):
    """Refuses an attention layer tfa's `attention_layer_size` does not make
    (one bias-free kernel); a wrapper with several is a list of mechanisms."""
    layer = roles["attention_layer"]
    if layer is None:
        several = _prefixes(variables, "/kernel")
        several = [k for k in several if re.search(r"_attention_layers/\d+$", k)]
        if several:
            raise ValueError(
                f"tfa checkpoint: several attention layers ({', '.join(several)}): an AttentionWrapper with a "
                "list of attention mechanisms or layer sizes, which has no equivalent here (one attention per "
                f"wrapper); port it by hand ({_PORTING})."
            )
        return None
    extra = sorted(k for k in variables if k.startswith(layer + "/") and k != layer + "/kernel")
    if extra:
        raise ValueError(
            f"tfa checkpoint: the attention layer at {layer!r} also holds {', '.join(extra)}: an "
            "`attention_layer=` of your own, not the bias-free Dense of tfa's `attention_layer_size`, "
            f"which import_tfa_seq2seq does not import; port it by hand ({_PORTING})."
        )
    return variables[layer + "/kernel"]


_CELL_OPTIONS = {"encoder": "encoder", "decoder_cell": "cell"}  # role -> the option that picks its cell


def _likely_cause(variables, role, where, got, want, options):
    """Which tfa setting most likely differs, from a weight's shape."""
    prefix, name = where.rsplit("/", 1)
    option = _CELL_OPTIONS.get(role)
    if option and name == "bias" and len(want) == 2 and got == want[1:]:
        return (
            f"a one-row bias {got} is a tfa GRU(Cell) with reset_after=False; the importer builds Keras's default "
            f"reset_after=True (bias (2, 3 x units)), which computes other numbers: port it by hand ({_PORTING})"
        )
    if option and got[-1] != want[-1]:
        units = variables[prefix + "/recurrent_kernel"].shape[0] if prefix + "/recurrent_kernel" in variables else 0
        kind = {4 * units: "lstm", 3 * units: "gru"}.get(got[-1]) if units else None
        if kind and kind != options[option]:
            return (
                f"its width {got[-1]} is {'4' if kind == 'lstm' else '3'} x {units} units: a tfa "
                f"{kind.upper()} cell, not {option}={options[option]!r}; pass {option}={kind!r} "
                f"(the command: --{option} {kind})"
            )
        return f"another cell type or size than {option}={options[option]!r} builds; check `{option}`"
    if option and name == "kernel":
        feeds = {
            "encoder": "the source embedding",
            "decoder_cell": "the target embedding and the previous attention (tfa's default cell_input_fn)",
        }[role]
        return (
            f"the cell's input is {got[0]} wide, not {want[0]} ({feeds}): another layer, a bidirectional or "
            f"stacked RNN, or a cell_input_fn of your own, which the importer does not build; port it by hand "
            f"({_PORTING})"
        )
    if role == "output_layer" and name == "kernel":
        return (
            f"the read-out takes {got[0]} features, but the decoder outputs {want[0]} (the attention, "
            "output_attention=True): output_attention=False or a layer before the read-out, which the importer "
            f"does not build; port it by hand ({_PORTING})"
        )
    return (
        "the layer sizes read from the other weights disagree with it: check `cell`, `encoder`, `attention` and `names`"
    )


def shape_mismatch(variables, role, where, got, want, options):
    """The error for the checkpoint's `where` (playing `role`) whose shape
    `got` is not the built model's `want`: the variable, both shapes and the
    tfa setting that likely differs (`options`: the `cell` and `encoder` asked for)."""
    got, want = tuple(got), tuple(want)
    return ValueError(
        f"tfa checkpoint: {where!r} has shape {got}, but the model needs {want} for the {role}: "
        f"{_likely_cause(variables, role, where, got, want, options)}."
    )
