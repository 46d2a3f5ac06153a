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


def track_model(archive, model):
    """Track `model` in `archive`: a functional or Sequential model layer by
    layer. ExportArchive walks what it tracks for lookup tables, and on a
    Keras model that walk traces the model's own default serving function
    (`_default_save_signature`), which the export never uses: a second
    trace of a decoder and its loop. A layer has no such function; the
    variables are those of the layers either way."""
    if isinstance(model, keras.Model) and getattr(model, "inputs", None) and model.layers:
        for layer in model.layers:
            track_model(archive, layer)
    elif not isinstance(model, keras.layers.InputLayer):
        archive.track(model)


def write(context):
    """Write every signature as an endpoint of one SavedModel in `context.staging`."""
    archive = keras.export.ExportArchive()
    on_tensorflow = context.backend == "tensorflow"
    for signature in context.signatures:
        track_model(archive, signature.model)
        if on_tensorflow:
            function = archive.add_endpoint(signature.name, signature.serve, signature.input_specs)
            context.traced[signature.name] = function
        else:
            # TensorFlow would also save the gradient of each endpoint; JAX has
            # none for a while_loop of dynamic length (the decode loops).
            archive.add_endpoint(
                signature.name,
                _serve_without_checks(signature),
                signature.input_specs,
                jax2tf_kwargs={"with_gradient": False},
            )
    archive.write_out(str(context.staging / SAVED_MODEL_DIR), verbose=False)
    first = context.signatures[0].name
    if all(signature.name != DEFAULT_SIGNATURE for signature in context.signatures):
        context.report.notes.append(f"SavedModel: {first!r} is also served as {DEFAULT_SIGNATURE!r}.")
    if not on_tensorflow and not context.verify:
        # Run once all the same: a JAX artefact TensorFlow cannot read fails only when called.
        run = runner(context)
        for signature in context.signatures:
            run(signature, context.batches(signature)[0])
    return context.final_path(SAVED_MODEL_DIR)


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
