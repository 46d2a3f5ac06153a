"""The exported decoders' inputs of token ids (forced prefixes, per-request
banned and stop sequences, constraints and their groups): which model
inputs feed them (`model_prefixes`, recorded in the signature and the
export's report) and the SavedModel's assertions on their values
(`checked_prefixes`), what Keras refuses eagerly and ONNX serving checks in
Python (`keras_attention.export.serving.check_prefixes`)."""

from keras_attention.decoders.runtime_options import broadcast_option
from keras_attention.decoders.search import SearchDecoder

__all__ = ["checked_prefixes", "model_prefixes"]


def checked_prefixes(signature, tensors):
    """`tensors`, the forced-prefix inputs behind assertions: ids in the
    vocabulary (-1 pads), and no more tokens than the example's max_length
    (the run-time `max_length` input's rows when there is one): what Keras
    refuses eagerly (`check_prefix_values`), which the graph would cut."""
    import tensorflow as tf

    named = dict(zip(signature.input_names, tensors))
    checked = {}
    for name, facts in signature.prefixes.items():
        if facts.get("kind") == "constraint_groups":
            with tf.control_dependencies(_group_assertions(name, named[name], named.get(facts["constraints"]))):
                checked[name] = tf.identity(named[name])
            continue
        if facts.get("kind", "target_prefix") != "target_prefix":
            with tf.control_dependencies(_sequence_assertions(name, tf.cast(named[name], tf.int32), facts)):
                checked[name] = tf.identity(named[name])
            continue
        prefix = tf.cast(named[name], tf.int32)
        assertions = []
        if facts["vocabulary"] is not None:
            top = facts["vocabulary"] - 1
            valid = tf.reduce_all((prefix >= -1) & (prefix <= top))
            message = f"input `{name}` holds an id outside the vocabulary: expected ids from 0 to {top} (-1 pads); got"
            assertions.append(tf.debugging.Assert(valid, [message, prefix], summarize=16))
        lengths = tf.reduce_sum(tf.cast(prefix >= 0, tf.int32), axis=1)
        limits = facts["max_length"]
        if "max_length" in signature.options:
            limits = broadcast_option(named["max_length"], limits, tf.shape(prefix)[0], "int32")
        message = f"input `{name}` forces more tokens than an example's max_length; got the prefix lengths"
        assertions.append(
            tf.debugging.Assert(tf.reduce_all(lengths <= limits), [message, lengths, "and max_length", limits])
        )
        with tf.control_dependencies(assertions):
            checked[name] = tf.identity(named[name])
    return [checked.get(n, t) for n, t in named.items()]


def _group_assertions(name, groups, constraints):
    """The SavedModel's assertions on `constraint_groups`: group numbers >= 0,
    one per phrase of the `constraints` fed beside them (when an input)."""
    import tensorflow as tf

    checks = [
        tf.debugging.Assert(tf.reduce_all(groups >= 0), [f"input `{name}` must hold group numbers >= 0; got", groups])
    ]
    if constraints is not None:
        fits = tf.reduce_all(tf.equal(tf.shape(groups), tf.shape(constraints)[:2]))
        message = f"input `{name}` must have one group number per phrase of the constraints, (batch, phrases); got"
        checks.append(
            tf.debugging.Assert(fits, [message, tf.shape(groups), "for constraints of", tf.shape(constraints)])
        )
    return checks


def _sequence_assertions(name, table, facts):
    """The SavedModel's assertions on per-request token sequences `(B, S,
    L)`: what `check_sequence_values` refuses in Keras and ONNX serving."""
    import tensorflow as tf

    top = facts["vocabulary"] - 1 if facts["vocabulary"] is not None else tf.int32.max
    after_padding = (table >= 0) & (tf.cumsum(tf.cast(table < 0, tf.int32), axis=2) > 0)
    checks = (
        ((table >= -1) & (table <= top), f"holds an id outside the vocabulary: expected ids from 0 to {top}"),
        (table != facts["end_token"], f"holds the end token {facts['end_token']}: nothing is produced after it"),
        (~after_padding, "holds an id after its -1 padding: each sequence is right-padded"),
    )
    if facts.get("most") is not None:
        fits = tf.shape(table)[1] <= facts["most"]
        checks += ((fits, f"holds more sequences per example than the {facts['most']} of `max_constraints`"),)
    return [
        tf.debugging.Assert(tf.reduce_all(valid), [f"input `{name}` {message}; got", table], summarize=16)
        for valid, message in checks
    ]


# The decoders' call arguments that take token ids, with their position in
# `SearchDecoder.call` (a functional model may give them positionally).
TOKEN_ARGUMENTS = {"target_prefix": 4, "banned_sequences": 7, "stop_sequences": 8, "constraints": 9}
CONSTRAINT_GROUPS = 10  # `constraint_groups`' position: checked against the `constraints` fed beside it


def model_prefixes(model, named_inputs):
    """{input name: facts} of the model inputs fed as a decoder's token-id
    arguments (`named_inputs`: [(name, KerasTensor)]): {"vocabulary",
    "max_length"} for a `target_prefix`, {"kind", "vocabulary",
    "end_token"} for per-request `banned_sequences`, `stop_sequences` and
    `constraints` ("most": the constraint slots), and {"kind":
    "constraint_groups", "constraints": the input fed as the constraints}."""
    names = {id(tensor): name for name, tensor in named_inputs}
    found = {}

    def argument_of(arguments, argument, position):
        value = arguments.kwargs.get(argument)
        if value is None and len(arguments.args) > position:
            value = arguments.args[position]
        return value

    def visit(layer):
        if isinstance(layer, SearchDecoder):
            for node in getattr(layer, "_inbound_nodes", []):
                arguments = node.arguments
                groups = argument_of(arguments, "constraint_groups", CONSTRAINT_GROUPS)
                if id(groups) in names:
                    phrases = names.get(id(argument_of(arguments, "constraints", TOKEN_ARGUMENTS["constraints"])))
                    found[names[id(groups)]] = {"kind": "constraint_groups", "constraints": phrases}
                for argument, position in TOKEN_ARGUMENTS.items():
                    value = argument_of(arguments, argument, position)
                    if id(value) not in names:
                        continue
                    facts = {"vocabulary": layer.vocabulary_size()}
                    if argument == "target_prefix":
                        facts["max_length"] = layer.max_length
                    else:
                        facts.update(kind=argument, end_token=layer.end_token)
                    if argument == "constraints":
                        facts["most"] = layer.max_constraints
                    found[names[id(value)]] = facts
            return
        for sublayer in getattr(layer, "layers", None) or []:
            visit(sublayer)

    visit(model)
    return found
