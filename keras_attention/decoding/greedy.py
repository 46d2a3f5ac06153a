"""Single-hypothesis decoding: greedy search and sampling."""

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention.decoding import _loop
from keras_attention.decoding.constraints import check_top_p, top_p_filter

__all__ = ["greedy_search", "sampling_search"]


def _single_path_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    choose,
    pad_token,
    return_alignments,
    return_token_log_probs=False,
):
    max_length = _loop.check_max_length(max_length)
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    batch = _loop.batch_size_of(start_tokens, initial_state)
    first_ids = _loop.start_ids(start_tokens, batch)

    def advance(time, logits, alignment, finished, scores, lengths, out_ids, alignments, token_log_probs):
        log_probs = _loop.log_probabilities(logits)
        token = ops.where(finished, pad_token, choose(log_probs))
        token_log_prob = ops.take_along_axis(log_probs, ops.expand_dims(token, 1), axis=1)[:, 0]
        running = ops.logical_not(finished)
        scores = scores + ops.where(running, token_log_prob, 0.0)
        if _loop.is_carried(token_log_probs):
            token_log_probs = _loop.write_at(
                token_log_probs, time, ops.where(running, token_log_prob, 0.0), time_axis=1
            )
        lengths = lengths + ops.cast(running, "int32")
        out_ids = _loop.write_at(out_ids, time, token, time_axis=1)
        if _loop.is_carried(alignments):
            alignment = ops.where(ops.expand_dims(running, 1), ops.cast(alignment, "float32"), 0.0)
            alignments = _loop.write_at(alignments, time, alignment, time_axis=1)
        finished = ops.logical_or(finished, ops.equal(token, end_token))
        return token, finished, scores, lengths, out_ids, alignments, token_log_probs

    # The first step runs outside the loop: it tells the alignment length
    # (the memory length), which the alignment buffer must be allocated with.
    logits, state, alignment = _loop.call_step(step_fn, first_ids, initial_state)
    alignments = _loop.ABSENT
    if alignment is not None and return_alignments:
        alignments = ops.zeros((batch, max_length, ops.shape(alignment)[-1]), "float32")
    token, *carried = advance(
        0,
        logits,
        alignment,
        ops.zeros((batch,), "bool"),
        ops.zeros((batch,), "float32"),
        ops.zeros((batch,), "int32"),
        ops.full((batch, max_length), pad_token, dtype="int32"),
        alignments,
        ops.zeros((batch, max_length), "float32") if return_token_log_probs else _loop.ABSENT,
    )

    def cond(time, token, state, finished, *unused):
        return ops.logical_and(ops.less(time, max_length), ops.logical_not(ops.all(finished)))

    def body(time, token, state, *carried):
        logits, state, alignment = _loop.call_step(step_fn, token, state)
        token, *carried = advance(time, logits, alignment, *carried)
        return (time + 1, token, state, *carried)

    loop_vars = (ops.convert_to_tensor(1, "int32"), token, state, *carried)
    _, _, _, _, scores, lengths, out_ids, alignments, token_log_probs = ops.while_loop(cond, body, loop_vars)
    result = {"ids": out_ids, "scores": scores, "lengths": lengths}
    if _loop.is_carried(alignments):
        result["alignments"] = alignments
    if _loop.is_carried(token_log_probs):
        result["token_log_probs"] = token_log_probs
    return result


def greedy_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    pad_token=None,
    return_alignments=True,
    return_token_log_probs=False,
):
    """Greedy decoding inside the graph: at each step take the most likely token.

    `step_fn(ids, state) -> (logits, state)` (or `(logits, state, alignment)`)
    advances every hypothesis by one token: `ids` is `(batch,)` int32,
    `logits` is `(batch, vocabulary)`, `alignment` is `(batch, source_length)`.
    The loop is a `keras.ops.while_loop` that stops after `max_length` steps
    or once every sequence has produced `end_token`; it compiles with XLA and
    exports to SavedModel and ONNX.

    Args:
        step_fn: the decoder step.
        initial_state: any nest of tensors with leading dimension `batch`.
        start_tokens: `(batch,)` ids for the first step, or one int.
        end_token: the id that ends a sequence.
        max_length: a Python int, the most tokens to produce.
        pad_token: the id written after a sequence ended (default: `end_token`).
        return_alignments: keep the alignments the step returns (False: the
            loop carries no alignment buffer).
        return_token_log_probs: also return `token_log_probs (batch,
            max_length)`, each produced token's log-probability (0 after
            the end); they sum to `scores`.

    Returns:
        A dict: `ids (batch, max_length)` int32; `scores (batch,)` the sum of
        the log-probabilities of the produced tokens; `lengths (batch,)` the
        number of tokens produced, the end token included; and, when the step
        returns alignments and `return_alignments` is on,
        `alignments (batch, max_length, source_length)` (zero after the end).
    """

    def choose(log_probs):
        return ops.cast(ops.top_k(log_probs, 1)[1][:, 0], "int32")

    return _single_path_search(
        step_fn,
        initial_state,
        start_tokens,
        end_token,
        max_length,
        choose,
        pad_token,
        return_alignments,
        _checks.check_bool("greedy_search", "return_token_log_probs", return_token_log_probs),
    )


def sampling_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    temperature=1.0,
    top_k=None,
    seed=None,
    pad_token=None,
    return_alignments=True,
    top_p=1.0,
    return_token_log_probs=False,
):
    """Sampling decoding inside the graph: each token drawn from the model.

    At each step the next token is drawn from `softmax(logits / temperature)`
    restricted to the `top_k` most likely tokens (all tokens when `top_k` is
    None), then to the smallest set of those whose probability reaches
    `top_p` (nucleus sampling; `top_p_filter`), with the Gumbel-max trick (`top_k` of logits plus Gumbel noise), so
    the loop uses only ops that compile with XLA. The returned `scores` are the
    log-probabilities under the model itself (temperature 1, no truncation).

    Args:
        step_fn, initial_state, start_tokens, end_token, max_length, pad_token,
        return_alignments, return_token_log_probs: as in `greedy_search`.
        temperature: > 0; below 1 sharpens, above 1 flattens the distribution.
        top_k: keep only the k most likely tokens at each step (None: all).
        top_p: in (0, 1]; keep the smallest set of most likely tokens whose
            probability (after temperature and `top_k`) reaches it (1: all).
        seed: an int or a `keras.random.SeedGenerator`. Inside a compiled
            function pass a SeedGenerator created outside it.

    Returns:
        As `greedy_search`.
    """
    temperature = _checks.check_number("sampling_search", "temperature", temperature, minimum=0, strict=True)
    top_k = _checks.check_positive_int("sampling_search", "top_k", top_k, allow_none=True)
    top_p = check_top_p("sampling_search", top_p)
    seed = seed if isinstance(seed, keras.random.SeedGenerator) else keras.random.SeedGenerator(seed)
    tiny = float(np.finfo("float32").tiny)
    # A temperature under float32's smallest normal number would flush to a
    # subnormal or to zero in float32: at that temperature sampling is argmax
    # anyway, which the smallest normal temperature gives too.
    temperature = max(temperature, tiny)

    def choose(log_probs):
        # The best token's logit becomes exactly 0 and stays 0 after the
        # division, however small the temperature; dividing the raw
        # log-probabilities instead sends them all to -inf (token 0 wins).
        # (`initial`: an empty batch has no maximum to take.)
        best = ops.max(log_probs, axis=-1, keepdims=True, initial=float("-inf"))
        logits = (log_probs - best) / temperature
        vocabulary = logits.shape[-1]
        # Keeping at least the whole vocabulary keeps every token: no filter.
        if top_k is not None and (vocabulary is None or top_k < vocabulary):
            kth_best = ops.top_k(logits, top_k)[0][:, -1:]
            logits = ops.where(ops.less(logits, kth_best), _loop.NEG_INF, logits)
        if top_p < 1:
            logits = top_p_filter(logits, top_p)
        uniform = keras.random.uniform(ops.shape(logits), minval=tiny, maxval=1.0, seed=seed)
        return ops.cast(ops.top_k(logits - ops.log(-ops.log(uniform)), 1)[1][:, 0], "int32")

    return _single_path_search(
        step_fn,
        initial_state,
        start_tokens,
        end_token,
        max_length,
        choose,
        pad_token,
        return_alignments,
        _checks.check_bool("sampling_search", "return_token_log_probs", return_token_log_probs),
    )
