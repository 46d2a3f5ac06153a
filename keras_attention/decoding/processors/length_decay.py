"""`ExponentialDecayLengthPenalty`: the end token made exponentially more likely after a start index."""

from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.processors.base import LogitsProcessor, register
from keras_attention.decoding.runtime_fields import RuntimeField

__all__ = ["ExponentialDecayLengthPenalty"]

# The largest boost, in nats: far past any gap between two float32
# log-probabilities that matter, and finite where `factor ** k` overflows.
MAX_BOOST = 1e4


@register("exponential_decay_length_penalty")
class ExponentialDecayLengthPenalty(LogitsProcessor):
    """From the token `t = length_decay_start` on (0-based), the end token's
    logit is raised by `-log p(end) * (length_decay_factor ** (t - start) - 1)`,
    `p` the step's distribution before the raise: a soft length limit that
    grows exponentially, where `max_length` is a hard one. Hugging Face's
    `exponential_decay_length_penalty=(start_index, decay_factor)` as its
    beam search applies it (to log-probabilities; on an encoder-decoder its
    start index counts the generated tokens, as here). `length_decay_factor`
    is >= 1 (1: none); the raise is capped at 10,000 nats, past which the end
    is certain. A forbidden end (`min_length`) stays forbidden.

    Shapes: the logits `(N, V)`; run-time values are `(N,)`, one per row.

    Example:

    ```python
    import numpy as np
    from keras import ops

    # p(end) = 0.25 at the third token of a decay from the second by 2:
    # its logit rises by -log 0.25 * (2 - 1) = log 4, so the end's odds grow 4-fold.
    penalty = keras_attention.decoding.processors.ExponentialDecayLengthPenalty(1, 2.0)
    logits = np.log(np.array([[0.25, 0.5, 0.25]], "float32"))  # the end token is id 0
    step = keras_attention.decoding.processors.Step(
        None, 2, 0, ops.arange(3)[None], ops.equal(ops.arange(3), 0)[None], None)
    raised, _, _ = penalty.process(ops.convert_to_tensor(logits), None, {}, step)
    np.testing.assert_allclose(ops.convert_to_numpy(raised), np.log([[1.0, 0.5, 0.25]]), rtol=1e-6)
    ```
    """

    order = 15  # after the repetition penalty, which may change the end's logit
    keywords = ("length_decay_start", "length_decay_factor")
    runtime_fields = (
        RuntimeField(
            "length_decay_start",
            "int32",
            0,
            meaning="the token from which the end's log-probability is raised exponentially",
        ),
        RuntimeField("length_decay_factor", "float32", 1, meaning="the raise's base: -log p(end) * (factor ** k - 1)"),
    )

    def __init__(self, length_decay_start=0, length_decay_factor=1.0):
        owner = type(self).__name__
        self.length_decay_start = _checks.check_int(owner, "length_decay_start", length_decay_start, 0)
        self.length_decay_factor = _checks.check_number(owner, "length_decay_factor", length_decay_factor, minimum=1)

    def acts(self):
        return self.length_decay_factor != 1

    def process(self, logits, forbidden, state, step):
        start, factor = self.value(state, "length_decay_start"), self.value(state, "length_decay_factor")
        if _loop.is_rows(start):
            start = ops.expand_dims(start, 1)
        if _loop.is_rows(factor):
            factor = ops.expand_dims(factor, 1)
        steps = ops.cast(step.time - start, "float32")  # k, negative before the start
        growth = ops.where(
            ops.greater_equal(steps, 0.0),
            ops.minimum(ops.power(factor, ops.maximum(steps, 0.0)) - 1.0, MAX_BOOST),
            0.0,
        )
        # -log p(end) = logsumexp(logits) - logit(end): no (N, V) log-softmax
        # at each step. It is >= 0 and finite (the logits are), growth in
        # [0, MAX_BOOST]: their product is finite or +inf, never NaN, and the
        # cap makes it finite.
        end_logit = ops.take(logits, step.end_token, axis=1)
        surprisal = ops.expand_dims(ops.logsumexp(logits, axis=1) - end_logit, 1)
        boost = ops.minimum(surprisal * growth, MAX_BOOST)
        return ops.where(step.is_end, logits + boost, logits), forbidden, state
