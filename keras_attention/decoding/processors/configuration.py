"""A decoder's processors from its `processors=` list and its keyword sugar, in one place.

`min_length=3, suppress_tokens=[0]` on a decoder is sugar for `processors=[
MinLength(3), SuppressTokens([0])]`: each registered processor names the
keywords it takes (`keywords`), so this reads the registry, not a second
list of options.
"""

from keras_attention import _checks
from keras_attention.decoding.processors.base import get, registered

__all__ = ["configured_processors", "keyword_names"]


def keyword_names():
    """{decoder keyword: the processor class that takes it}, from the registry."""
    return {keyword: cls for cls in registered().values() for keyword in cls.keywords}


def configured_processors(owner, processors, keywords, runtime_names, end_token, max_length):
    """The decoder's processors, in their composing order.

    `processors`: a list of processors (or names, or configs); `keywords`:
    {keyword: value} of the sugar; a processor that a run-time option
    (`runtime_names`) reads is added with its defaults when neither gives
    it. A processor given twice, or both ways, is refused, as is one that a
    call brings (`allowed_tokens`, `target_prefix`). Each is checked
    against the search's `end_token` and `max_length`.
    """
    if processors is None:
        processors = []
    if not isinstance(processors, (list, tuple)):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `processors` must be a list of logits processors (or their names); "
            f"got {processors!r:.120}."
        )
    chosen = {}
    for processor in map(get, processors):
        name = processor.registered_name
        if processor.call_input is not None:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `processors` lists {processor!r}, which a call adds by giving "
                f"`{processor.call_input}`; leave it out."
            )
        if name in chosen:
            raise ValueError(f"{_checks.owner_name(owner)}: `processors` lists {name!r} twice.")
        both = [keyword for keyword in processor.keywords if keyword in keywords]
        if both:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `{both[0]}` is given both as a keyword ({keywords[both[0]]!r}) and "
                f"by `processors` ({processor!r}); give it in one place."
            )
        chosen[name] = processor
    for name, cls in registered().items():
        if name not in chosen:
            processor = cls.from_keywords(keywords, runtime_names)
            if processor is not None:
                chosen[name] = processor
    for processor in chosen.values():
        processor.check(owner, end_token, max_length)
    return sorted(chosen.values(), key=lambda processor: processor.order)
