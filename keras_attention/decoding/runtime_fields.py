"""`RuntimeField`: how a piece of decoding configuration declares a value a request may set.

A search strategy (`keras_attention.decoding.strategies`) and the step
constraints (`constraints.CONSTRAINT_FIELDS`) each declare the run-time
fields they read; the decoders' one table of run-time options
(`keras_attention.decoders.runtime_options.RUNTIME_OPTIONS`), which drives
the checks in Keras, the SavedModel's assertions and ONNX serving, is built
from these declarations, not written a second time.
"""

import dataclasses

__all__ = ["RuntimeField"]


@dataclasses.dataclass(frozen=True)
class RuntimeField:
    """One value a request may set: its name, dtype, bounds and meaning.

    `minimum` (exclusive with `strict`) and `maximum` bound it; `maximum`
    may be a number, "max_length" (the decoder's, the loop bound) or
    "below max_length".
    """

    name: str
    dtype: str
    minimum: float
    strict: bool = False
    maximum: object = None
    meaning: str = ""
