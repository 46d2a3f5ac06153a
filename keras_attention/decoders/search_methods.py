"""The decoders' `method=` keywords as search strategies: one mapping, read from the registry.

`method="beam", beam_width=4, ...` on a decoder is sugar for the registered
strategy of that name built from the decoder's attributes named as the
strategy's fields (`BeamSearch.fields()`); no second list of options.
"""

from keras_attention import _checks
from keras_attention.decoding import strategies

__all__ = ["METHODS", "adopt_strategy", "keyword_less_fields", "strategy_of"]

METHODS = tuple(strategies.registered())


def strategy_of(decoder):
    """The decoder's search strategy, from its `method` and its attributes."""
    cls = strategies.registered()[decoder.method]
    return cls(**{name: getattr(decoder, name) for name in cls.fields()})


def keyword_less_fields(method, keywords):
    """The fields of `method`'s strategy that are not among the decoder's
    `keywords` (a new control's, e.g. `min_p`): they come through `**kwargs`."""
    return [name for name in strategies.registered()[method].fields() if name not in keywords]


def adopt_strategy(decoder, strategy, method, extra, given, keywords):
    """Set the strategy's fields on `decoder` as attributes of the same names.

    With `strategy` (the `search=` argument) every field is taken from it; a
    field also given as a keyword, away from its default, is refused rather
    than overridden. Without it, the fields that have no keyword (`extra`,
    or the strategy's defaults) are checked by building the strategy.
    `keywords`: the decoder constructor's parameters, `given` their values."""
    if strategy is not None:
        for name, value in strategy.get_config().items():
            if name in keywords and given[name] != keywords[name].default:
                raise ValueError(
                    f"{_checks.owner_name(decoder)}: `{name}` is given both as a keyword ({given[name]!r}) and by "
                    f"`search` {strategy!r}; give it in one place."
                )
            setattr(decoder, name, value)
        return
    own = keyword_less_fields(method, keywords)
    if not own:
        return
    cls = strategies.registered()[method]
    defaults = cls().get_config()
    checked = cls(
        **{name: extra.get(name, defaults[name]) if name in own else getattr(decoder, name) for name in defaults}
    )
    for name in own:
        setattr(decoder, name, getattr(checked, name))
