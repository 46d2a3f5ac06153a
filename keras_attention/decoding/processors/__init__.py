"""Logits processors: the constraints on each step's logits, as objects registered by name.

`MinLength`, `RelativeMaxLength`, `SuppressTokens`, `AllowedTokens`,
`RepetitionPenalty`, `ExponentialDecayLengthPenalty`, `NoRepeatNgram`,
`BannedSequences`, `StopSequences` (and, per request, `BannedSequencesInput`
and `StopSequencesInput`) and `ForcedPrefix` compose in their
declared `order` into one wrapped step (`processed_step`) that every search
runs; each declares its run-time fields, from which the decoders' table of
run-time options is built. `get("min_length")` gives one by name; a new
processor is one module with a `register` decorator.
"""

from keras_attention.decoding.processors.allowed_tokens import AllowedTokens
from keras_attention.decoding.processors.banned_sequences import BannedSequences, BannedSequencesInput
from keras_attention.decoding.processors.base import LogitsProcessor, Step, get, register, registered, unregister
from keras_attention.decoding.processors.composition import processed_step
from keras_attention.decoding.processors.configuration import configured_processors, keyword_names
from keras_attention.decoding.processors.forced_prefix import ForcedPrefix
from keras_attention.decoding.processors.length_decay import ExponentialDecayLengthPenalty
from keras_attention.decoding.processors.min_length import MinLength
from keras_attention.decoding.processors.no_repeat_ngram import NoRepeatNgram
from keras_attention.decoding.processors.relative_max_length import RelativeMaxLength, relative_max_lengths
from keras_attention.decoding.processors.repetition_penalty import RepetitionPenalty
from keras_attention.decoding.processors.stop_sequences import StopSequences, StopSequencesInput
from keras_attention.decoding.processors.suppress_tokens import SuppressTokens

__all__ = [
    "AllowedTokens",
    "BannedSequences",
    "BannedSequencesInput",
    "ExponentialDecayLengthPenalty",
    "ForcedPrefix",
    "LogitsProcessor",
    "MinLength",
    "NoRepeatNgram",
    "RelativeMaxLength",
    "RepetitionPenalty",
    "Step",
    "StopSequences",
    "StopSequencesInput",
    "SuppressTokens",
    "configured_processors",
    "get",
    "keyword_names",
    "processed_step",
    "register",
    "registered",
    "relative_max_lengths",
    "unregister",
]
