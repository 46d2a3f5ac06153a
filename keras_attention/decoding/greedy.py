"""Single-hypothesis decoding: greedy search and sampling."""

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_max_index
from keras_attention.decoding import _loop
from keras_attention.decoding.constraints import check_top_p, top_p_filter
from keras_attention.decoding.hashed_random import hashed_uniform, row_seeds

__all__ = ["greedy_search", "sampling_search"]


def single_path_search(
    step_fn,
    initial_state,
    start_tokens,
    end_token,
    max_length,
    choose,
    pad_token,
    return_alignments,
    return_token_log_probs=False,
    length_limits=None,
):
    """The loop of `greedy_search` and `sampling_search` (and the
    alternatives' continuations): `choose(log_probs, time)` gives each row's
    token; the other arguments and the result are `greedy_search`'s."""
    step_fn = _loop.timed_step(step_fn)
    max_length = _loop.check_max_length(max_length)
    end_token, pad_token = _loop.check_tokens(end_token, pad_token)
    batch = _loop.batch_size_of(start_tokens, initial_state)
    first_ids = _loop.start_ids(start_tokens, batch)
    if length_limits is not None:
        length_limits = ops.cast(length_limits, "int32")

    def advance(time, logits, alignment, finished, scores, lengths, out_ids, alignments, token_log_probs):
        log_probs = _loop.log_probabilities(logits)
        token = ops.where(finished, pad_token, choose(log_probs, time))
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
        if length_limits is not None:
            # An example stops after its own number of tokens, as a search of
            # that max_length would: no end token forced.
            finished = ops.logical_or(finished, ops.greater_equal(time + 1, length_limits))
        return token, finished, scores, lengths, out_ids, alignments, token_log_probs

    # The first step runs outside the loop: it tells the alignment length
    # (the memory length), which the alignment buffer must be allocated with.
    time = _loop.first_time()
    logits, state, alignment = _loop.call_step(step_fn, first_ids, initial_state, time)
    alignments = _loop.ABSENT
    if alignment is not None and return_alignments:
        alignments = ops.zeros((batch, max_length, ops.shape(alignment)[-1]), "float32")
    token, *carried = advance(
        time,
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
        logits, state, alignment = _loop.call_step(step_fn, token, state, time)
        token, *carried = advance(time, logits, alignment, *carried)
        return (time + 1, token, state, *carried)

    loop_vars = (ops.convert_to_tensor(1, "int32"), token, state, *carried)
    _, _, _, _, scores, lengths, out_ids, alignments, token_log_probs = ops.while_loop(cond, body, loop_vars)
    result = {
        "ids": out_ids,
        "scores": scores,
        "lengths": lengths,
        "finished": _loop.ended(out_ids, lengths, end_token),
    }
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
    length_limits=None,
):
    """Greedy decoding inside the graph: at each step take the most likely token.

    `step_fn(ids, state, time) -> (logits, state)` (or `(logits, state,
    alignment)`) advances every hypothesis by one token: `ids` is `(batch,)`
    int32, `time` the int32 scalar index of the token being produced (the
    loop's own counter, 0 first), `logits` is `(batch, vocabulary)`,
    `alignment` is `(batch, source_length)`. A step written without the
    time, `step_fn(ids, state)`, is accepted too: it is recognised once, by
    its signature (no third positional parameter without a default), and
    called without it.
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
        length_limits: optional `(batch,)` ints in `[1, max_length]`:
            example `b` stops after `length_limits[b]` tokens, as a search
            with that `max_length` would (the loop bound and the output
            width stay `max_length`; ids after the limit are `pad_token`).

    Returns:
        A dict: `ids (batch, max_length)` int32; `scores (batch,)` the sum of
        the log-probabilities of the produced tokens; `lengths (batch,)` the
        number of tokens produced, the end token included; `finished
        (batch,)` bool, whether the sequence produced `end_token` (False for
        one cut at `max_length` or its `length_limits`, whose ids are padded
        with `pad_token` all the same); and, when the step
        returns alignments and `return_alignments` is on,
        `alignments (batch, max_length, source_length)` (zero after the end).
    """

    def choose(log_probs, time):
        return first_max_index(log_probs)  # ties: the lowest id, on every backend

    return single_path_search(
        step_fn,
        initial_state,
        start_tokens,
        end_token,
        max_length,
        choose,
        pad_token,
        return_alignments,
        _checks.check_bool("greedy_search", "return_token_log_probs", return_token_log_probs),
        length_limits,
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
    length_limits=None,
):
    """Sampling decoding inside the graph: each token drawn from the model.

    At each step the next token is drawn from `softmax(logits / temperature)`
    restricted to the `top_k` most likely tokens (all tokens when `top_k` is
    None), then to the smallest set of those whose probability reaches
    `top_p` (nucleus sampling; `top_p_filter`), with the Gumbel-max trick (`top_k` of logits plus Gumbel noise), so
    the loop uses only ops that compile with XLA. The returned `scores` are the
    log-probabilities under the model itself (temperature 1, no truncation).

    `temperature`, `top_k` and `top_p` are each one number for every
    example or a `(batch,)` tensor of one per example (run-time inputs of an
    exported decoder, checked where they are fed).

    Args:
        step_fn: as in `greedy_search`.
        initial_state: as in `greedy_search`.
        start_tokens: as in `greedy_search`.
        end_token: as in `greedy_search`.
        max_length: as in `greedy_search`.
        pad_token: as in `greedy_search`.
        return_alignments: as in `greedy_search`.
        return_token_log_probs: as in `greedy_search`.
        length_limits: as in `greedy_search`.
        temperature: > 0; below 1 sharpens, above 1 flattens the distribution.
        top_k: keep only the k most likely tokens at each step (None: all;
            per example, 0 keeps all).
        top_p: in (0, 1]; keep the smallest set of most likely tokens whose
            probability (after temperature and `top_k`) reaches it (1: all).
        seed: a `(batch,)` tensor of integer seeds >= 0, one per example;
            or one integer for the batch, example `b` then drawing with
            `row_seeds(seed, b)` (the seed itself for row 0; rows differ,
            and the same call gives the same samples); or a
            `keras.random.SeedGenerator` (or None: a fresh one), from which
            one seed per example is drawn before the loop, new at each call
            (inside a compiled function pass a SeedGenerator created
            outside it; its random op does not export to ONNX). The draws
            are `hashed_uniform(seed, step, token)`, a pure function of the
            example's seed, identical in Keras, SavedModel and ONNX, and
            free of random state inside the loop (a seed generator advanced
            there leaks tracers on JAX and does not compile with XLA).

    Returns:
        As `greedy_search`.
    """
    owner = "sampling_search"
    temperature = _loop.option_rows(
        temperature, "float32", lambda v: _checks.check_number(owner, "temperature", v, minimum=0, strict=True)
    )
    top_k = _loop.option_rows(top_k, "int32", lambda v: _checks.check_positive_int(owner, "top_k", v, allow_none=True))
    top_p = _loop.option_rows(top_p, "float32", lambda v: check_top_p(owner, v))
    batch = _loop.batch_size_of(start_tokens, initial_state)
    if isinstance(seed, keras.random.SeedGenerator) or seed is None:
        generator = seed if isinstance(seed, keras.random.SeedGenerator) else keras.random.SeedGenerator(seed)
        seed = keras.random.randint((batch,), 0, 2**31 - 1, dtype="int32", seed=generator)
    elif _loop.is_rows(seed):
        seed = _loop.option_rows(seed, "int32", None)
    else:
        # No random op: an integer seed exports (ONNX has none of TensorFlow's).
        seed = _checks.check_int(owner, "seed", seed, 0, "an integer seed", maximum=2**31 - 1)
        seed = row_seeds(ops.full((batch,), seed, "int32"), ops.arange(batch, dtype="int32"))
    tiny = float(np.finfo("float32").tiny)
    # A temperature under float32's smallest normal number would flush to a
    # subnormal or to zero in float32: at that temperature sampling is argmax
    # anyway, which the smallest normal temperature gives too.
    temperature = (
        ops.expand_dims(ops.maximum(temperature, tiny), 1) if _loop.is_rows(temperature) else max(temperature, tiny)
    )

    def choose(log_probs, time):
        # The best token's logit becomes exactly 0 and stays 0 after the
        # division, however small the temperature; dividing the raw
        # log-probabilities instead sends them all to -inf (token 0 wins).
        # (`initial`: an empty batch has no maximum to take; axis 1, not -1:
        # onnxruntime leaves an empty tensor unreduced over a negative axis.)
        best = ops.max(log_probs, axis=1, keepdims=True, initial=float("-inf"))
        logits = (log_probs - best) / temperature
        logits = _top_k_filter(logits, top_k)
        if _loop.is_rows(top_p) or top_p < 1:
            logits = top_p_filter(logits, top_p)
        uniform = hashed_uniform(seed, time, ops.shape(logits)[-1])
        return first_max_index(logits - ops.log(-ops.log(uniform)))

    return single_path_search(
        step_fn,
        initial_state,
        start_tokens,
        end_token,
        max_length,
        choose,
        pad_token,
        return_alignments,
        _checks.check_bool("sampling_search", "return_token_log_probs", return_token_log_probs),
        length_limits,
    )


def _top_k_filter(logits, top_k):
    """Logits outside each row's `top_k` most likely get `NEG_INF` (ties at
    the k-th kept); `top_k` None, or per example 0 or at least the
    vocabulary, keeps every token."""
    vocabulary = logits.shape[-1]
    if not _loop.is_rows(top_k):
        # Keeping at least the whole vocabulary keeps every token: no filter.
        if top_k is None or (vocabulary is not None and top_k >= vocabulary):
            return logits
        kth_best = ops.top_k(logits, top_k)[0][:, -1:]
        return ops.where(ops.less(logits, kth_best), _loop.NEG_INF, logits)
    vocabulary = ops.shape(logits)[-1]
    ordered = ops.top_k(logits, vocabulary)[0]  # descending
    k = ops.expand_dims(top_k, 1)
    kth_best = ops.take_along_axis(ordered, ops.clip(k - 1, 0, vocabulary - 1), axis=1)
    keep_all = ops.logical_or(ops.less_equal(k, 0), ops.greater_equal(k, vocabulary))
    # Logical ops, not a boolean select: onnxruntime has no boolean Where.
    dropped = ops.logical_and(ops.less(logits, kth_best), ops.logical_not(keep_all))
    return ops.where(dropped, _loop.NEG_INF, logits)
