"""`ExportContext`: what every format's writer and runner is given, in one object."""

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class ExportContext:
    """One export in progress, as the format writers and runners see it.

    Writers put their artefacts under `staging` (renamed to `directory`
    once everything is written and verified) and name them by where they
    will end up (`final_path`); runners load them from `staging`.

    Attributes:
        signatures: the `Signature`s to write, in the order the caller
            named them.
        staging: the directory every artefact is written into.
        directory: where `staging` is renamed to once verified.
        backend: the Keras backend writing ("tensorflow", "jax", "torch").
        verify: whether the runners will be compared with Keras.
        atol: the tolerance of float outputs.
        options: {format name: {option: value}}: the `export_model` options
            each requested format declared (`register_format(options=)`),
            checked, e.g. `options["onnx"]["opset"]`.
        report: the `ExportReport` being filled in (a writer may add
            `notes`, `timings_s`).
        batches_function: signature -> its verification batches; read them
            through `batches`.
        traced: TensorFlow functions one writer traced for another to
            reuse, {signature name: function} (tracing a decode loop takes
            seconds: the SavedModel's endpoints serve tf2onnx).
        sessions: onnxruntime sessions a writer loaded to check its file,
            for the runners to reuse, {(signature name, precision): session}
            (loading a decoder's file takes about a second; the writer's
            check and the parity loaded each file twice).

    Example:

    ```python
    import tempfile, keras
    from keras_attention.export import export_model, formats

    seen = []

    def write_nothing(context):
        seen.append((context.backend, [s.name for s in context.signatures], context.options))
        return context.final_path("nothing")

    def run_keras(context):  # a runner for this illustration only: real ones run the artefact
        return lambda signature, arrays: signature.call_keras(arrays)

    formats.register_format("nothing", write_nothing, run_keras)
    inputs = keras.Input((3,), name="features")
    model = keras.Model(inputs, keras.layers.Dense(2, name="scores")(inputs))
    export_model(model, tempfile.mkdtemp() + "/export", formats=["nothing"])
    formats.unregister_format("nothing")
    assert seen == [(keras.backend.backend(), ["serving_default"], {"nothing": {}})]
    ```
    """

    signatures: list
    staging: Path
    directory: Path
    backend: str
    verify: bool
    atol: float
    options: dict
    report: object
    batches_function: object
    traced: dict = dataclasses.field(default_factory=dict)
    sessions: dict = dataclasses.field(default_factory=dict)
    _batches: dict = dataclasses.field(default_factory=dict, repr=False)
    _expected: dict = dataclasses.field(default_factory=dict, repr=False)

    def batches(self, signature):
        """The signature's verification batches (each a list of input arrays
        in signature order), computed once: every format and every check sees
        the same ones (generated batches draw from one random generator)."""
        if signature.name not in self._batches:
            self._batches[signature.name] = self.batches_function(signature)
        return self._batches[signature.name]

    def keras_outputs(self, signature):
        """Keras's outputs on the signature's verification batches, one
        {output name: numpy array} per batch, computed once: a decoder's
        eager call runs its loop op by op (seconds), and both the parity
        and a writer's own check (the fused recurrent layers) read them.
        Raises what the Keras model raises."""
        if signature.name not in self._expected:
            self._expected[signature.name] = [signature.call_keras(arrays) for arrays in self.batches(signature)]
        return self._expected[signature.name]

    def final_path(self, name):
        """Where `staging / name` will be once the export is in place, as the report records it."""
        return str(self.directory / name)
