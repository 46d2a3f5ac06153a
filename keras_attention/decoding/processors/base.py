"""`LogitsProcessor`: one constraint on the next token's logits, registered by name.

A processor holds its configuration (`MinLength(3)`), declares the run-time
fields a request may set (`runtime_fields`, from which the decoders' one
table of run-time options is built) and the decoder keywords it stands for
(`keywords`: `min_length=3` on a decoder is sugar for `MinLength(3)`),
serializes (`get_config` / `from_config`), and at each step of a search
edits the logits and the mask of forbidden ids in one hook, `process`. Its
per-example values (a run-time option's rows, the n-gram table) ride in the
search state, which every search tiles and reorders with its hypotheses.
`get("min_length")` (or a config dict, or a processor) gives a processor; a
new one is a subclass with the `register` decorator.
"""

import keras

from keras_attention.decoding.registry import NamedRegistry

__all__ = ["LogitsProcessor", "Step", "get", "register", "registered", "unregister"]

_NAMES = NamedRegistry("logits processor", "processor", lambda: LogitsProcessor, order=lambda cls: cls.order)


def register(name):
    """Class decorator: `name` finds the processor (`get(name)`), which Keras serializes too."""
    return _NAMES.register(name)


def unregister(name):
    """Forget the processor registered as `name`."""
    _NAMES.unregister(name)


def registered():
    """{name: processor class}, in the order they compose (`order`)."""
    return _NAMES.registered()


def get(identifier):
    """A processor from its registered name (default fields), its config
    (`{"class_name": ..., "config": ...}` from `keras.saving.serialize_keras_object`)
    or a processor itself.

    Example:

    ```python
    keras_attention.decoding.processors.get("min_length").min_length
    # 0
    ```
    """
    return _NAMES.get(identifier)


class Step:
    """What a processor's `process` reads at one step of the search.

    Attributes: `ids` `(N,)` the tokens chosen at the previous step, `time`
    the int32 index of the token being produced (the search's counter),
    `end_token`, `token` `(1, V)` the ids, `is_end` `(1, V)` bool, `history`
    `(N, max_length)` the tokens produced so far (-1 after them; None unless
    a processor `reads_history`).
    """

    def __init__(self, ids, time, end_token, token, is_end, history):
        self.ids, self.time, self.end_token = ids, time, end_token
        self.token, self.is_end, self.history = token, is_end, history


class LogitsProcessor:
    """Base of the logits processors.

    Class attributes: `order` (they compose by increasing order; the forced
    prefix is last, so that it wins), `runtime_fields` (`RuntimeField`s a
    request may set, each named as the processor's attribute holding its
    default), `keywords` (the decoder keywords it takes: its constructor's
    arguments), `call_input` (the call argument that brings it, e.g.
    "allowed_tokens", for one that has no configuration), `reads_history`
    and `reads_source_lengths` (what its `start` and `process` read).
    """

    registered_name = None
    order = 0
    runtime_fields = ()
    keywords = ()
    call_input = None
    reads_history = False
    reads_source_lengths = False

    def get_config(self):
        return {name: getattr(self, name) for name in self.keywords}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    @classmethod
    def from_keywords(cls, values, runtime_names):
        """The processor the decoder keywords `values` ask for, or None when
        they leave it doing nothing (its defaults, and none of its fields set
        at run time)."""
        given = {name: values[name] for name in cls.keywords if name in values}
        runtime = {field.name for field in cls.runtime_fields} & set(runtime_names)
        if not given and not runtime:
            return None
        processor = cls(**given)
        return processor if runtime or processor.acts() else None

    def acts(self):
        """Whether, with its constructor's values, it changes anything."""
        return True

    def check(self, owner, end_token, max_length):
        """Refuse a configuration that contradicts the search's (`owner` names the decoder)."""

    def start(self, batch, inputs):
        """Its part of the search state: a dict of `(batch, ...)` tensors.
        `inputs`: the call's `allowed_tokens`, `target_prefix`,
        `source_lengths`, `length_limits`, `max_length` and `values` (the
        run-time options' `(batch,)` rows), each possibly None. By default:
        the rows of its run-time fields that a request sets."""
        values = inputs.get("values") or {}
        return {field.name: values[field.name] for field in self.runtime_fields if field.name in values}

    def process(self, logits, forbidden, state, step):
        """`(logits, forbidden, state)` after this processor: `logits` `(N,
        V)` float32, `forbidden` `(N or 1, V)` bool or None (nothing yet);
        the composition gives the forbidden ids `NEG_INF` once, at the end."""
        raise NotImplementedError

    def value(self, state, name):
        """A field's per-example rows if a request set it (in `state`), else its number."""
        return state.get(name, getattr(self, name))

    @staticmethod
    def forbid(forbidden, more):
        return more if forbidden is None else keras.ops.logical_or(forbidden, more)

    def __repr__(self):
        arguments = ", ".join(f"{k}={v!r}" for k, v in self.get_config().items())
        return f"{type(self).__name__}({arguments})"

    def __eq__(self, other):
        return type(self) is type(other) and self.get_config() == other.get_config()

    def __hash__(self):
        return hash(type(self))
