"""`NamedRegistry`: the classes of one kind of decoding configuration, found by name.

The search strategies and the logits processors each keep one: a class
registers under a name (and with Keras, so a decoder's config serializes
it), and `get` takes that name, a serialized config or an instance.
"""

import keras

__all__ = ["NamedRegistry"]


class NamedRegistry:
    """{name: class} of one kind (`kind`, e.g. "search strategy"), whose
    instances are of `base()` (a callable: the base class is defined after
    its registry); `order` optionally sorts `registered()`."""

    def __init__(self, kind, noun, base, order=None):
        self.kind, self.noun, self.base, self.order = kind, noun, base, order
        self.classes = {}

    def register(self, name):
        """Class decorator: `name` finds the class (`get(name)`), which Keras serializes too."""

        def decorate(cls):
            cls.registered_name = name
            self.classes[name] = keras.saving.register_keras_serializable(package="keras_attention")(cls)
            return cls

        return decorate

    def unregister(self, name):
        """Forget `name` (a class registered for a test or a notebook's session);
        an unknown name is refused."""
        if name not in self.classes:
            raise ValueError(f"no {self.kind} is registered as {name!r}; registered: {sorted(self.classes)}.")
        del self.classes[name]

    def registered(self):
        """{name: class}, in registration order or by `order`."""
        if self.order is None:
            return dict(self.classes)
        return dict(sorted(self.classes.items(), key=lambda item: self.order(item[1])))

    def get(self, identifier):
        """An instance from a registered name (default fields), a config
        (`{"class_name": ..., "config": ...}`) or an instance itself."""
        base = self.base()
        if isinstance(identifier, base):
            return identifier
        if isinstance(identifier, str) and identifier in self.classes:
            return self.classes[identifier]()
        if isinstance(identifier, dict):
            instance = keras.saving.deserialize_keras_object(identifier)
            if isinstance(instance, base):
                return instance
        raise ValueError(
            f"decoding: a {self.kind} must be one of {list(self.classes)}, its config or a {self.noun}; "
            f"got {identifier!r:.120}."
        )
