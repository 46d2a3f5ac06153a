"""The processors composed into one step: what every search runs in place of the model's.

`processed_step(step_fn, state, processors, end_token, inputs)` wraps a step
of the protocol `step(ids, state, time)`: the model's logits go through each
processor in its declared `order` (each edits the logits or adds forbidden
ids), then the forbidden ids get the log-probability floor `NEG_INF` once,
so the log-softmax of the rest renormalises over what is allowed and the
scores the searches return are those of the constrained distribution. The
processors' state (and the history of ids, when one reads it) rides in the
search state beside the model's, so beam search tiles and reorders it with
the hypotheses.
"""

from keras import ops

from keras_attention.decoding import _loop
from keras_attention.decoding.processors.base import Step

__all__ = ["processed_step"]


def processed_step(step_fn, initial_state, processors, end_token, inputs):
    """`(step, state)` to give a search in place of `(step_fn, initial_state)`.

    Args:
        step_fn: `step(ids, state, time) -> (logits, state[, alignment])`
            (or `step(ids, state)`, as the searches accept).
        initial_state: the step's initial state (batch rows).
        processors: `LogitsProcessor`s (composed by their `order`).
        end_token: int.
        inputs: {"allowed_tokens", "target_prefix", "source_lengths",
            "length_limits", "max_length", "values"}: what the processors'
            `start` reads (see `LogitsProcessor.start`).
    """
    processors = sorted(processors, key=lambda processor: processor.order)
    batch = _loop.batch_size_of(0, initial_state)
    reads_history = any(processor.reads_history for processor in processors)
    if reads_history:
        if inputs.get("max_length") is None:
            raise ValueError("decoding: a repetition penalty or n-gram blocking needs the search's `max_length`.")
        inputs = {**inputs, "max_length": _loop.check_max_length(inputs["max_length"])}
    extra = {"processors": [processor.start(batch, inputs) for processor in processors]}
    if reads_history:
        extra["history"] = ops.full((batch, inputs["max_length"]), -1, "int32")
    step_fn = _loop.timed_step(step_fn)

    def step(ids, state, time):
        inner, extra = state
        logits, inner, alignment = _loop.call_step(step_fn, ids, inner, time)
        logits = ops.cast(logits, "float32")
        history = extra.get("history")
        if history is not None:
            # `ids` are the tokens chosen at the previous step (the start token at the first).
            columns = ops.expand_dims(ops.arange(ops.shape(history)[1], dtype="int32"), 0)
            written = ops.equal(columns, time - 1)
            history = ops.where(written, ops.expand_dims(ops.cast(ids, "int32"), 1), history)
        token = ops.expand_dims(ops.arange(ops.shape(logits)[-1], dtype="int32"), 0)  # (1, V)
        context = Step(ids, time, end_token, token, ops.equal(token, end_token), history)
        forbidden, states = None, []
        for processor, own in zip(processors, extra["processors"]):
            logits, forbidden, own = processor.process(logits, forbidden, dict(own), context)
            states.append(own)
        if forbidden is not None:
            logits = ops.where(forbidden, _loop.NEG_INF, logits)
        extra = {"processors": states, **({"history": history} if history is not None else {})}
        if alignment is None:
            return logits, (inner, extra)
        return logits, (inner, extra), alignment

    return step, (initial_state, extra)
