"""Masked LSTM layers exported as fused ONNX nodes with sequence lengths.

tf2onnx fuses a Keras LSTM layer (a Bidirectional pair into one
bidirectional node) into one ONNX LSTM node only when no mask reaches
it. A masked layer, the usual encoder over padded ids, stays an ONNX Loop of
some thirty small operations per time step and direction, which costs a
served encoder-decoder about as much as its decoder. The fused node's
`sequence_lens` input computes the masked layer exactly when the mask is the
padding of an id input (`ids != 0`, as `Embedding(mask_zero=True)` gives) and
the padding comes after the tokens: the steps past an example's length are
skipped, the reverse direction starts at its last token and the final states
are those of its last token.

`traced_without_masks` traces a signature with the masks withheld from its
recurrent layers and tells, from the trace, which input's padding every mask
was; `fuse` gives every fused node those lengths and guards it against an
empty batch (onnxruntime's LSTM aborts the process on one). The exporter
compares the result with Keras and keeps the plain conversion when it
differs (`exporter._onnx_session`).
"""

import contextlib

import keras
import numpy as np

# The layers tf2onnx 1.17 fuses (it leaves Keras 3's GRU a Loop, masked or
# not), and the fused ops the empty-batch guard goes around.
RECURRENT_LAYERS = (keras.layers.LSTM,)
FUSED_OPS = ("LSTM", "GRU")


class NotFused(Exception):
    """Why a signature keeps the plain conversion (its message says; none
    when there was nothing to fuse)."""


def recurrent_layers(model):
    """The LSTM layers in `model` (nested models and Bidirectional wrappers
    included), each once, and the reason they cannot be fused, if any: the
    fused node's lengths are right only for a layer that returns its
    sequence (its last output would be read at the padded length) and runs
    forward or as half of a Bidirectional pair (a lone backward node would
    read the padding first)."""
    found, seen, refused = [], set(), None

    def visit(layer, paired=False):
        nonlocal refused
        if id(layer) in seen:
            return
        seen.add(id(layer))
        if isinstance(layer, RECURRENT_LAYERS):
            found.append(layer)
            if not layer.return_sequences:
                refused = f"LSTM {layer.name!r} returns its last output only (return_sequences=False)"
            elif layer.go_backwards and not paired:
                refused = f"LSTM {layer.name!r} runs backwards outside a Bidirectional wrapper"
        elif isinstance(layer, keras.layers.Bidirectional):
            visit(layer.forward_layer, paired=True)
            visit(layer.backward_layer, paired=True)
        for sublayer in getattr(layer, "layers", None) or []:
            visit(sublayer)

    visit(model)
    return found, refused


@contextlib.contextmanager
def _masks_withheld(layers):
    """Within the block each layer's `call` runs without its mask; yields
    the list of what each call was given: `(mask or None, whether an
    initial state was given)`."""
    calls = []
    patched = []
    try:
        for layer in layers:
            original = layer.call

            def call(*args, _original=original, **kwargs):
                initial_state = kwargs.get("initial_state", args[1] if len(args) > 1 else None)
                calls.append((kwargs.pop("mask", None), initial_state is not None))
                return _original(*args, **kwargs)

            layer.call = call  # an instance attribute: the class's method is untouched
            patched.append(layer)
        yield calls
    finally:
        for layer in patched:
            vars(layer).pop("call", None)


def traced_without_masks(signature, layers, refused=None):
    """A `tf.function` of `signature.serve`, traced with the masks withheld
    from `layers`, the name of the input whose padding (`!= 0`) every
    withheld mask was, and how many layer directions were called.

    Raises `NotFused` when a layer had no mask (it must run over every
    step; tf2onnx fuses it already), another mask, or an initial state (a
    row of padding only would end with zeros, not with it), and with
    `refused` (from `recurrent_layers`) when any layer was masked."""
    import tensorflow as tf

    function = tf.function(signature.serve, input_signature=signature.input_specs, autograph=False)
    with _masks_withheld(layers) as calls:
        function.get_concrete_function(*signature.input_specs)
    if all(mask is None for mask, _ in calls):
        raise NotFused()  # nothing to fuse: tf2onnx fuses unmasked layers itself
    if refused:
        raise NotFused(refused)
    if any(given for _, given in calls):
        raise NotFused("a recurrent layer is given an initial state")
    sources = {_padding_source(mask) for mask, _ in calls}
    if None in sources or len(sources) != 1:
        raise NotFused("a recurrent layer's mask is not the padding (!= 0) of one input, or one has none")
    (placeholder,) = sources
    for name, spec in zip(signature.input_names, signature.input_specs):
        if spec.name == placeholder:
            return function, name, len(calls)
    raise NotFused(f"the recurrent layers' mask comes from {placeholder!r}, which is no input of the signature")


def padded_variant(batches, input_name, input_names):
    """A batch of three copies of the verification batches' first row, its
    `input_name` ids cut after all, half and none of them and padded with 0
    (the other inputs' rows repeated; an input without that batch size, a
    run-time option's, as it is): whatever the caller's batches, the check
    then sees padding after the tokens and a row of padding only. None when
    there is no such row."""
    index = input_names.index(input_name)
    arrays = next((a for a in batches if np.ndim(a[index]) == 2), None)
    if arrays is None:
        return None
    ids = np.asarray(arrays[index])
    rows, length = ids.shape
    if not rows or not length:
        return None
    keep = np.array([length, max(length // 2, 1), 0])
    cut = np.where(np.arange(length)[None, :] < keep[:, None], np.repeat(ids[:1], 3, axis=0), 0).astype(ids.dtype)
    return [
        cut if name == input_name else (np.repeat(np.asarray(a)[:1], 3, axis=0) if np.shape(a)[:1] == (rows,) else a)
        for name, a in zip(input_names, arrays)
    ]


def _padding_source(mask):
    """The name of the placeholder `p` when `mask` is `p != 0`, else None."""
    import tensorflow as tf

    if mask is None:
        return None
    while mask.op.type == "Identity":
        mask = mask.op.inputs[0]
    if mask.op.type != "NotEqual":
        return None
    ids, padding = mask.op.inputs
    value = tf.get_static_value(padding)
    if value is None or np.ndim(value) != 0 or value != 0:
        return None
    while ids.op.type == "Identity":
        ids = ids.op.inputs[0]
    return ids.op.name if ids.op.type == "Placeholder" else None


def fuse(model_proto, input_name=None, directions=None):
    """Guard every fused LSTM/GRU node of `model_proto` against an empty
    batch and, with `input_name`, give it the lengths of that input's rows
    (entries != 0, counted). Returns how many nodes there are.

    `directions` is how many layer directions were traced without masks:
    the fused nodes must account for all of them (a bidirectional node for
    two), or some stayed a Loop that would run unmasked (`NotFused`)."""
    import onnx
    from onnx import TensorProto, helper

    graph = model_proto.graph
    fused = [node for node in graph.node if node.op_type in FUSED_OPS]
    covered = sum(2 if _direction(node) == "bidirectional" else 1 for node in fused)
    given = [node for node in fused if len(node.input) > 4 and node.input[4]]
    if input_name is not None and (covered != directions or given):
        raise NotFused(f"tf2onnx fused {covered} of the {directions} recurrent layer directions")
    if not fused:
        return 0
    constants = {
        "fused_rnn/start": np.array([0], np.int64),
        "fused_rnn/axis_1": np.array([1], np.int64),
        "fused_rnn/axis_2": np.array([2], np.int64),
        "fused_rnn/one": np.array([1], np.int64),
        "fused_rnn/start_scalar": np.array(0, np.int64),
        "fused_rnn/one_scalar": np.array(1, np.int64),
        "fused_rnn/no_length": np.array([0], np.int32),
    }
    graph.initializer.extend(onnx.numpy_helper.from_array(v, k) for k, v in constants.items())
    prelude, lengths = [], None
    if input_name is not None:
        (ids,) = [value for value in graph.input if value.name == input_name]
        dtype = helper.tensor_dtype_to_np_dtype(ids.type.tensor_type.elem_type)
        graph.initializer.append(onnx.numpy_helper.from_array(np.zeros((), dtype), "fused_rnn/padding_id"))
        lengths = "fused_rnn/lengths"
        prelude = [
            helper.make_node("Equal", [input_name, "fused_rnn/padding_id"], ["fused_rnn/is_padding"]),
            helper.make_node("Not", ["fused_rnn/is_padding"], ["fused_rnn/is_token"]),
            helper.make_node("Cast", ["fused_rnn/is_token"], ["fused_rnn/tokens"], to=TensorProto.INT32),
            helper.make_node("ReduceSum", ["fused_rnn/tokens", "fused_rnn/axis_1"], [lengths], keepdims=0),
        ]
    # The element type of the zeros: the node's weights' (float32 unless
    # the model is float64).
    weight_types = {tensor.name: tensor.data_type for tensor in graph.initializer}
    rewritten = []
    for node in graph.node:
        if node.op_type in FUSED_OPS:
            rewritten += _guarded(node, lengths, weight_types.get(node.input[1], TensorProto.FLOAT))
        else:
            rewritten.append(node)
    del graph.node[:]
    graph.node.extend(prelude + rewritten)
    return len(fused)


def _guarded(node, lengths, dtype):
    """`node` (inputs X `(steps, batch, features)`, W, R, B, sequence_lens,
    initial_h, initial_c, ...) between the nodes that give an empty batch
    one row of zeros (of length 0) and slice it off its outputs, and that
    feed it `lengths` when given."""
    from onnx import helper

    prefix = f"fused_rnn/{node.name}"
    inputs = list(node.input) + [""] * (5 - len(node.input))
    x = inputs[0]
    before = [
        helper.make_node("Shape", [x], [f"{prefix}/x_shape"]),
        helper.make_node("Slice", [f"{prefix}/x_shape", "fused_rnn/axis_1", "fused_rnn/axis_2"], [f"{prefix}/batch"]),
        helper.make_node("Min", [f"{prefix}/batch", "fused_rnn/one"], [f"{prefix}/nonempty"]),
        helper.make_node("Sub", ["fused_rnn/one", f"{prefix}/nonempty"], [f"{prefix}/unchecked_extra"]),
        *_refusing_zero_steps(f"{prefix}/x_shape", f"{prefix}/unchecked_extra", f"{prefix}/extra", prefix),
    ]
    inputs[0] = f"{prefix}/x"
    before += _with_extra_row(x, inputs[0], f"{prefix}/extra", inputs[0], dtype)
    node_lengths = lengths or inputs[4]
    if node_lengths:
        inputs[4] = f"{prefix}/lengths"
        before += [
            helper.make_node("Expand", ["fused_rnn/no_length", f"{prefix}/extra"], [f"{prefix}/extra_length"]),
            helper.make_node("Concat", [node_lengths, f"{prefix}/extra_length"], [inputs[4]], axis=0),
        ]
    for position in range(5, min(len(inputs), 7)):  # initial_h, initial_c: (directions, batch, units)
        if inputs[position]:
            state, inputs[position] = inputs[position], f"{prefix}/state_{position}"
            before += _with_extra_row(state, inputs[position], f"{prefix}/extra", inputs[position], dtype)
    outputs = list(node.output)
    wide = [f"{prefix}/output_{i}" if name else "" for i, name in enumerate(outputs)]
    del node.input[:], node.output[:]
    node.input.extend(inputs)
    node.output.extend(wide)
    after = [
        # Y: (steps, directions, batch, units); Y_h, Y_c: (directions, batch, units).
        helper.make_node(
            "Slice",
            [full, "fused_rnn/start", f"{prefix}/batch", "fused_rnn/axis_2" if i == 0 else "fused_rnn/axis_1"],
            [name],
        )
        for i, (name, full) in enumerate(zip(outputs, wide))
        if name
    ]
    return before + [node] + after


ZERO_STEPS_REFUSED = "refuses_an_input_of_zero_steps_as_keras_lstm_does"


def _refusing_zero_steps(x_shape, value, output, prefix):
    """Nodes passing `value` (an int64 tensor) on as `output`, or failing
    with an error that names `ZERO_STEPS_REFUSED` when the node's input of
    shape `x_shape` has no steps (a source of width 0).

    Keras's LSTM and GRU refuse zero steps (the SavedModel too). The fused
    node must not run them either: onnxruntime (1.31, EXTENDED level and
    above) folds the transpose of its time-major output into the next
    MatMul (a FusedMatMul with transBatchB), whose kernel divides by the
    zero length and kills the process with SIGFPE. ONNX has no assertion
    op: position 0 of the steps' range is gathered, which fails on an
    empty range and adds 0 otherwise."""
    from onnx import helper

    return [
        helper.make_node("Slice", [x_shape, "fused_rnn/start", "fused_rnn/one"], [f"{prefix}/steps"]),
        helper.make_node("Squeeze", [f"{prefix}/steps"], [f"{prefix}/steps_scalar"]),
        helper.make_node(
            "Range",
            ["fused_rnn/start_scalar", f"{prefix}/steps_scalar", "fused_rnn/one_scalar"],
            [f"{prefix}/positions"],
        ),
        helper.make_node(
            "Gather",
            [f"{prefix}/positions", "fused_rnn/start"],
            [f"{prefix}/first_position"],
            axis=0,
            name=f"{prefix}/{ZERO_STEPS_REFUSED}",
        ),
        helper.make_node("Add", [value, f"{prefix}/first_position"], [output]),
    ]


def _direction(node):
    for attribute in node.attribute:
        if attribute.name == "direction":
            return attribute.s.decode()
    return "forward"


def _with_extra_row(name, output, extra, prefix, dtype):
    """Nodes appending `extra` (a `(1,)` count) rows of zeros of `dtype` (an
    ONNX element type) to `name` along its axis 1."""
    from onnx import helper

    zero = helper.make_tensor("zero", dtype, [1], [0])
    return [
        helper.make_node("Shape", [name], [f"{prefix}/shape"]),
        helper.make_node("ScatterElements", [f"{prefix}/shape", "fused_rnn/axis_1", extra], [f"{prefix}/extra_shape"]),
        helper.make_node("ConstantOfShape", [f"{prefix}/extra_shape"], [f"{prefix}/zeros"], value=zero),
        helper.make_node("Concat", [name, f"{prefix}/zeros"], [output], axis=1),
    ]
