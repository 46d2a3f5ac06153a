"""`AllowedTokens`: each example restricted to its own ids, given with the call."""

from keras import ops

from keras_attention.decoding.processors.base import LogitsProcessor, register

__all__ = ["AllowedTokens"]


@register("allowed_tokens")
class AllowedTokens(LogitsProcessor):
    """Example `b` produces only the ids where the call's `allowed_tokens`
    `(B, V)` bool is True; the end token is always allowed, so that every
    example can end. It has no configuration: a decoder adds it when a call
    gives `allowed_tokens`.

    Example:

    ```python
    keras_attention.decoding.processors.AllowedTokens()
    ```
    """

    order = 50
    call_input = "allowed_tokens"

    def start(self, batch, inputs):
        return {"allowed": ops.cast(inputs["allowed_tokens"], "bool")}

    def process(self, logits, forbidden, state, step):
        refused = ops.logical_not(ops.logical_or(state["allowed"], step.is_end))
        return logits, self.forbid(forbidden, refused), state
