"""`ExportContext`: what every format's writer and runner is given, in one object."""

import dataclasses
from pathlib import Path


@dataclasses.dataclass
class ExportContext:
    """One export in progress, as the format writers and runners see it.

    Writers put their artefacts under `staging` (renamed to `directory`
    once everything is written and verified) and name them by where they
    will end up (`final_path`); runners load them from `staging`.
    """

    signatures: list  # `Signature`s, in the order the caller named them
    staging: Path
    directory: Path
    backend: str  # the Keras backend writing: "tensorflow", "jax" or "torch"
    opset: int
    verify: bool
    atol: float
    quantize: object  # None or a precision of QUANTIZATIONS ("int8")
    report: object  # the `ExportReport` being filled in
    batches_function: object  # signature -> its verification batches, as `samples.batches_function` builds
    # TensorFlow functions traced by one writer for another to reuse, {signature name: function}:
    # tracing a decode loop takes seconds (the SavedModel's endpoints serve tf2onnx).
    traced: dict = dataclasses.field(default_factory=dict)
    _batches: dict = dataclasses.field(default_factory=dict, repr=False)

    def batches(self, signature):
        """The signature's verification batches, computed once: every format
        and every check sees the same ones (generated batches draw from one
        random generator)."""
        if signature.name not in self._batches:
            self._batches[signature.name] = self.batches_function(signature)
        return self._batches[signature.name]

    def final_path(self, name):
        """Where `staging / name` will be once the export is in place, as the report records it."""
        return str(self.directory / name)
