"""The SavedModel format: one SavedModel, one named signature per exported
model, written with `keras.export.ExportArchive` (through jax2tf on JAX)
and run with `tf.saved_model.load` for parity."""

import keras

from keras_attention.export.layout import DEFAULT_SIGNATURE, SAVED_MODEL_DIR
from keras_attention.export.report import ExportError

NAME = "saved_model"  # its name in the registry (`formats`)
# JAX's StableHLO newer than TensorFlow's XlaCallModule reads (support.py, note b).
_STABLEHLO_SKEW = "failed to deserialize portable artifact"


def _serve_without_checks(signature):
    """Flat named inputs in, {output name: tensor} out. Unlike
    `Signature.serve`, no run-time option checks: those are TensorFlow ops,
    which a JAX graph cannot hold."""

    def serve(*tensors):
        outputs = signature.model(keras.tree.pack_sequence_as(signature.structure, list(tensors)), training=False)
        return dict(zip(signature.output_names, keras.tree.flatten(outputs)))

    return serve


def tracked_layers(model):
    """The layers whose variables an export saves: a functional or
    Sequential model layer by layer, anything else as itself. Walking a
    Keras model as a whole for its lookup tables would trace the model's own
    default serving function (`_default_save_signature`), which the export
    never uses: a second trace of a decoder and its loop. A layer has no
    such function; the variables are those of the layers either way."""
    if isinstance(model, keras.Model) and getattr(model, "inputs", None) and model.layers:
        for layer in model.layers:
            yield from tracked_layers(layer)
    elif not isinstance(model, keras.layers.InputLayer):
        yield model


def track_model(archive, model):
    """Track `model` in a `keras.export.ExportArchive`, layer by layer (`tracked_layers`)."""
    for layer in tracked_layers(model):
        archive.track(layer)


def write(context):
    """Write every signature as an endpoint of one SavedModel in `context.staging`."""
    path = context.staging / SAVED_MODEL_DIR
    if context.backend == "tensorflow":
        _write_traced_once(context, path)
    else:
        _write_through_jax2tf(context, path)
    first = context.signatures[0].name
    if all(signature.name != DEFAULT_SIGNATURE for signature in context.signatures):
        context.report.notes.append(f"SavedModel: {first!r} is also served as {DEFAULT_SIGNATURE!r}.")
    if context.backend != "tensorflow" and not context.verify:
        # Run once all the same: a JAX artefact TensorFlow cannot read fails only when called.
        run = runner(context)
        for signature in context.signatures:
            run(signature, context.batches(signature)[0])
    return context.final_path(SAVED_MODEL_DIR)


def _write_traced_once(context, path):
    """On TensorFlow: each signature traced once, and that trace saved and
    handed to the other writers (`context.traced`).

    `keras.export.ExportArchive` traces each endpoint twice: once to list
    the variables it reads, and again inside `tf.saved_model.save`, which
    keys its traces by its own context; a decoder's trace takes seconds.
    Saving the traced concrete functions themselves takes none. The
    SavedModel is the archive's: the endpoints as signatures and as
    attributes (the first also as `serving_default`), the variables, and
    the lookup tables of the layers."""
    import tensorflow as tf

    # Not a tf.Module: its `variables` is a read-only property, and the
    # archive's root (which a loaded model's `.variables` reads) is this.
    root, traced = tf.__internal__.tracking.AutoTrackable(), {}
    for signature in context.signatures:
        function = tf.function(signature.serve, input_signature=signature.input_specs, autograph=False)
        traced[signature.name] = function.get_concrete_function()
        context.traced[signature.name] = function
    layers = _unique(layer for s in context.signatures for layer in tracked_layers(s.model))
    root.variables = _unique(v for layer in layers for v in layer.variables)
    root.trainable_variables = _unique(v for layer in layers for v in layer.trainable_variables)
    root.non_trainable_variables = _unique(v for layer in layers for v in layer.non_trainable_variables)
    root.lookup_tables = _unique(
        resource
        for layer in layers
        for resource in tf.train.TrackableView(layer).descendants()
        if isinstance(resource, tf.saved_model.experimental.TrackableResource)
    )
    for name, function in traced.items():
        setattr(root, name, function)
    signatures = dict(traced)
    signatures.setdefault(DEFAULT_SIGNATURE, traced[context.signatures[0].name])
    tf.saved_model.save(root, str(path), signatures=signatures)


def _unique(items):
    """`items` in order, each object once."""
    return list({id(item): item for item in items}.values())


def _write_through_jax2tf(context, path):
    """On JAX (and PyTorch): Keras's archive, each endpoint through jax2tf."""
    archive = keras.export.ExportArchive()
    for signature in context.signatures:
        track_model(archive, signature.model)
        # TensorFlow would also save the gradient of each endpoint; JAX has
        # none for a while_loop of dynamic length (the decode loops).
        archive.add_endpoint(
            signature.name,
            _serve_without_checks(signature),
            signature.input_specs,
            jax2tf_kwargs={"with_gradient": False},
        )
    archive.write_out(str(path), verbose=False)


def runner(context):
    """`run(signature, arrays)` on the SavedModel written in `context.staging`."""
    import tensorflow as tf

    loaded = tf.saved_model.load(str(context.staging / SAVED_MODEL_DIR))

    def run(signature, arrays):
        function = loaded.signatures[signature.name]
        try:
            result = function(**{n: tf.constant(a) for n, a in zip(signature.input_names, arrays)})
        except Exception as error:
            if _STABLEHLO_SKEW not in str(error):
                raise
            raise ExportError(
                f"signature {signature.name!r}: the SavedModel written on JAX does not run in TensorFlow "
                f"{tf.__version__}: jax2tf serialized an op (e.g. JAX's top_k, in beam search) as StableHLO newer "
                "than TensorFlow's XlaCallModule reads. Export the .keras file under KERAS_BACKEND=tensorflow. "
                "Nothing was written."
            ) from error
        return {k: v.numpy() for k, v in result.items()}

    return run
