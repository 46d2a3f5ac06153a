"""Every decoding option is classified (run-time, with its bounds, or fixed, with the reason) and
every run-time one reaches Keras, the exports and the serve command."""

import inspect

import pytest

from keras_attention.decoders.runtime_options import FIXED_OPTIONS, RUNTIME_OPTIONS
from keras_attention.decoders.search import SearchDecoder
from keras_attention.decoding import processors, strategies
from keras_attention.export.serve_cli import main as serve
from tests.test_runtime_options_export import OPTIONS

# Constructor arguments that are not options of the search itself.
NOT_OPTIONS = {
    "self": "the decoder",
    "runtime_options": "the list of run-time option names itself",
    "search": "the strategy object, whose fields are classified one by one",
    "processors": "the logits processors, whose fields are classified one by one",
    "kwargs": "a Keras layer's arguments (name, dtype)",
}


def test_every_constructor_option_is_classified_with_a_reason():
    for name in inspect.signature(SearchDecoder.__init__).parameters:
        if name in NOT_OPTIONS:
            continue
        if name in RUNTIME_OPTIONS:
            option = RUNTIME_OPTIONS[name]
            assert option.meaning and option.dtype in ("int32", "float32") and option.methods, name
        else:
            assert FIXED_OPTIONS.get(name), f"{name!r} is neither a run-time option nor fixed with a reason"
    # And no option is both.
    assert not set(RUNTIME_OPTIONS) & set(FIXED_OPTIONS)


def test_every_strategy_field_is_classified():
    # A strategy's field is a decoder option of the same name (a keyword of
    # the constructor, or, for a new control's, one through **kwargs).
    for strategy in strategies.registered().values():
        assert {field.name for field in strategy.runtime_fields} <= set(RUNTIME_OPTIONS)
        for name in strategy.fields():
            assert name in RUNTIME_OPTIONS or FIXED_OPTIONS.get(name), (strategy, name)


# The processors a call brings, by the argument that brings them.
CALL_INPUTS = {"allowed_tokens", "target_prefix", "banned_sequences", "stop_sequences"}


def test_every_processor_field_is_classified():
    # A processor's keywords are decoder options of the same name (sugar);
    # each is run-time (declared by the processor, with a meaning) or fixed
    # with a reason; one with no configuration comes with a call argument.
    sugar = processors.keyword_names()
    for name, cls in processors.registered().items():
        assert cls.keywords or cls.call_input in CALL_INPUTS, name
        declared = {field.name for field in cls.runtime_fields}
        assert declared <= set(cls.keywords) and declared <= set(RUNTIME_OPTIONS), name
        for keyword in cls.keywords:
            assert sugar[keyword] is cls
            assert keyword in declared or FIXED_OPTIONS.get(keyword), (name, keyword)
            if keyword in declared:
                assert RUNTIME_OPTIONS[keyword].methods == tuple(strategies.registered()), keyword
        # Its config is its keywords, and round-trips.
        assert set(cls().get_config()) == set(cls.keywords)
        assert cls.from_config(cls().get_config()) == cls()
    # Every run-time option is declared by exactly one of the loop, a
    # processor or strategies (the table has no list of its own).
    owners = {field.name for field in strategies.LOOP_FIELDS}
    owners |= {field.name for cls in processors.registered().values() for field in cls.runtime_fields}
    owners |= {field.name for cls in strategies.registered().values() for field in cls.runtime_fields}
    assert owners == set(RUNTIME_OPTIONS)


def test_every_runtime_option_is_exported_by_the_parity_test():
    # test_runtime_options_export sets each of these in Keras (`options=`),
    # the SavedModel and ONNX and checks their parity, for every method: a
    # new run-time option or method is refused here until it is exercised
    # there (a method's options shared with another may be exercised there).
    assert set(OPTIONS) == set(strategies.registered())
    for method, options in OPTIONS.items():
        assert set(options) <= {name for name, option in RUNTIME_OPTIONS.items() if method in option.methods}
    assert set().union(*OPTIONS.values()) == set(RUNTIME_OPTIONS)
    for method in ("greedy", "sample", "beam"):
        assert set(OPTIONS[method]) == {name for name, option in RUNTIME_OPTIONS.items() if method in option.methods}


def test_every_runtime_option_is_a_serve_flag(capsys):
    with pytest.raises(SystemExit):
        serve(["--help"])
    usage = capsys.readouterr().out
    for name in RUNTIME_OPTIONS:
        assert "--" + name.replace("_", "-") in usage, name
