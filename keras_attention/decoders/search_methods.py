"""The decoders' `method=` keywords as search strategies: one mapping, read from the registry.

`method="beam", beam_width=4, ...` on a decoder is sugar for the registered
strategy of that name built from the decoder's attributes named as the
strategy's fields (`BeamSearch.fields()`); no second list of options.
"""

from keras_attention.decoding import strategies

__all__ = ["METHODS", "strategy_of"]

METHODS = tuple(strategies.registered())


def strategy_of(decoder):
    """The decoder's search strategy, from its `method` and its attributes."""
    cls = strategies.registered()[decoder.method]
    return cls(**{name: getattr(decoder, name) for name in cls.fields()})
