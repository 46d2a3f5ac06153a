"""`SuppressTokens`: ids never produced."""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding.processors.base import LogitsProcessor, register

__all__ = ["SuppressTokens", "check_suppress_tokens"]


def check_suppress_tokens(owner, ids, end_token=None):
    """`ids` as a sorted list of distinct ids (None stays None), refusing the end token."""
    if ids is None:
        return None
    if not isinstance(ids, (list, tuple)) or not all(_checks.is_int(i) and i >= 0 for i in ids):
        raise ValueError(f"{_checks.owner_name(owner)}: `suppress_tokens` must be a list of integer ids; got {ids!r}.")
    if end_token is not None and end_token in ids:
        raise ValueError(
            f"{_checks.owner_name(owner)}: `suppress_tokens` {list(ids)} includes the end token {end_token}: "
            "nothing could end."
        )
    return sorted({int(i) for i in ids})


@register("suppress_tokens")
class SuppressTokens(LogitsProcessor):
    """The ids `suppress_tokens` are never produced (the end token cannot be one).

    Example:

    ```python
    keras_attention.decoding.processors.SuppressTokens([0, 5])
    ```
    """

    order = 40
    keywords = ("suppress_tokens",)

    def __init__(self, suppress_tokens=None):
        self.suppress_tokens = check_suppress_tokens(type(self).__name__, suppress_tokens)

    def acts(self):
        return bool(self.suppress_tokens)

    def check(self, owner, end_token, max_length):
        check_suppress_tokens(owner, self.suppress_tokens, end_token)

    def process(self, logits, forbidden, state, step):
        if not self.suppress_tokens:
            return logits, forbidden, state
        ids = ops.convert_to_tensor(self.suppress_tokens, "int32")
        suppressed = ops.any(ops.equal(ops.expand_dims(step.token, -1), ids), axis=-1)
        return logits, self.forbid(forbidden, suppressed), state
