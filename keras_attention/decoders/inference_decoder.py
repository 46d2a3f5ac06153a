"""`InferenceDecoder`: greedy, sampling or beam-search decoding of an attention cell, in-graph."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.cells.base import AttentionMemory, attention_cell
from keras_attention.decoding import (
    LENGTH_CONVENTIONS,
    beam_search,
    constrained_step,
    greedy_search,
    relative_max_lengths,
    sampling_search,
    tile_batch,
)
from keras_attention.decoding.constraints import check_repetition_penalty, check_suppress_tokens, check_top_p

__all__ = ["InferenceDecoder"]


def _greedy(decoder, step, initial_state, common):
    return greedy_search(step, initial_state, **common)


def _sample(decoder, step, initial_state, common):
    return sampling_search(
        step,
        initial_state,
        temperature=decoder.temperature,
        top_k=decoder.top_k,
        top_p=decoder.top_p,
        seed=decoder.seed_generator,
        **common,
    )


def _beam(decoder, step, initial_state, common):
    result = beam_search(
        step,
        initial_state,
        beam_width=decoder.beam_width,
        length_penalty_weight=decoder.length_penalty_weight,
        coverage_penalty_weight=decoder.coverage_penalty_weight,
        early_stopping=decoder.early_stopping,
        length_convention=decoder.length_convention,
        **common,
    )
    if decoder.num_hypotheses is not None:  # the best n of the beams, best first
        result = {name: value[:, : decoder.num_hypotheses] for name, value in result.items()}
    return result


# A table rather than a chain of ifs: a method is one entry, its search with
# the options it reads, and the valid names come from the same table.
_SEARCHES = {"greedy": _greedy, "sample": _sample, "beam": _beam}
_METHODS = tuple(_SEARCHES)


def _layer(owner, argument, layer):
    return _checks.resolve_layer(
        owner, argument, layer, lambda given: isinstance(given, keras.layers.Layer), "a Keras layer"
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class InferenceDecoder(keras.layers.Layer):
    """Decode token ids from an encoder memory with an attention cell, inside the graph.

    Each step embeds the previous token, runs `cell.step` against the memory
    (its keys projected once per call) and turns the cell output into logits
    with `output_layer`. Both layers are called as the teacher-forced model
    calls them, on a time axis (here of length 1: ids `(N, 1)`, outputs
    `(N, 1, d)`), so any layer that trains decodes, a `keras.Sequential`
    read-out with dropout included:

        x_t = embedding(y_{t-1});  o_t, state = cell(x_t, state, memory)
        logits_t = output_layer(o_t)   (or output_layer([o_t ; x_t]) with
                                        `output_uses_inputs`, Bahdanau's read-out)

    then picks tokens greedily, by sampling (temperature, top-k), or by beam
    search (GNMT length and coverage penalties): see
    `keras_attention.decoding`. Give it the same cell, embedding and output
    layer as the teacher-forced training model so the weights are shared. The
    whole loop is `keras.ops` and exports to SavedModel and ONNX.

    Paper: Bahdanau et al. 2014, arXiv:1409.0473 (the decoder); Wu et al.
    2016, arXiv:1609.08144 (beam search penalties).

    Shapes: memory `(B, Ts, dm)`, memory_mask `(B, Ts)` (filled from the
    memory's Keras mask), initial_state: the cell's states (default zeros;
    see the cell for which states a user may give). Returns a dict:
    `ids (B, L)` int32, `scores (B,)`, `lengths (B,)`, `alignments (B, L, Ts)`
    (with `return_alignments`); with `method="beam"` each gains a beam axis
    after the batch (`(B, K, L)`, ...) and `log_probs (B, K)` is added, beams
    sorted best first; beams beyond the valid hypotheses (a vocabulary too
    small for the width) are empty: end tokens, length 0, score `-inf`.

    Args:
        cell: an attention cell of this library (built by training, or built
            here on first call).
        embedding: layer mapping ids `(N,)` to `(N, dy)`.
        output_layer: layer mapping the cell output to logits `(N, V)`.
        start_token, end_token: ids; `max_length`: the most tokens produced.
        method: "greedy", "sample" or "beam".
        beam_width, length_penalty_weight, coverage_penalty_weight: beam search.
        early_stopping: beam search stops once, for every example, the best
            finished hypothesis scores at least `L / lp(max_length)` for
            every running hypothesis of log-probability `L` (`L` itself
            without a length penalty), the most it could still reach. The
            best beam is the full search's; lower beams may be cut short
            (returned unfinished, as at `max_length`). See `beam_search`.
        length_convention: "default", or "tfa" for the hypotheses and
            ranking of `tfa.seq2seq.BeamSearchDecoder` with a length or
            coverage penalty (its length bookkeeping; see `beam_search`).
        temperature, top_k, top_p, seed: sampling (`top_p`: nucleus
            sampling, after temperature and `top_k`; 1 keeps every token).
        min_length: the end token is forbidden before this many tokens.
        max_length_ratio, max_length_offset: with a ratio, example `b` has
            at most `min(max_length, floor(ratio * source_length[b] +
            offset))` tokens (the end included), its source length read
            from the memory mask.
        suppress_tokens: ids never produced (not the end token).
        repetition_penalty: >= 1; CTRL's penalty on the logits of tokens
            already produced (1: none).
        no_repeat_ngram_size: n > 0 forbids repeating any n-gram (0: none).
        These hold for every method. Two call arguments go with them: the
        `allowed_tokens` `(B, V)` bool restricts each example to its own ids
        (the end token always allowed), and `target_prefix` `(B, P)` ids
        (right-padded with -1) forces each example's first tokens, after
        which decoding continues freely. See
        `keras_attention.decoding.constrained_step`.
        output_uses_inputs: feed `[o_t ; x_t]` to `output_layer`.
        return_alignments: keep and return the alignment history. Off, the
            loop carries no `(B, L, Ts)` buffer: what a serving model wants.
        num_hypotheses: beam search returns only the best n <= beam_width
            hypotheses (default: all `beam_width`), best first.
        return_token_log_probs: also return `token_log_probs (B, [n,] L)`,
            each token's log-probability (0 after the end; they sum to the
            score without penalties).

    Example:

    ```python
    cell = keras_attention.AttentionGRUCell(16, keras_attention.AdditiveAttention(8))
    decoder = keras_attention.InferenceDecoder(
        cell, keras.layers.Embedding(12, 4), keras.layers.Dense(12),
        start_token=1, end_token=2, max_length=6, method="beam", beam_width=3)
    result = decoder(np.random.rand(2, 5, 6).astype("float32"))
    # result["ids"]: (2, 3, 6), result["alignments"]: (2, 3, 6, 5)
    ```
    """

    def __init__(
        self,
        cell,
        embedding,
        output_layer,
        start_token,
        end_token,
        max_length,
        method="greedy",
        beam_width=4,
        length_penalty_weight=0.0,
        coverage_penalty_weight=0.0,
        temperature=1.0,
        top_k=None,
        seed=None,
        output_uses_inputs=False,
        return_alignments=True,
        early_stopping=False,
        length_convention="default",
        top_p=1.0,
        min_length=0,
        max_length_ratio=None,
        max_length_offset=0.0,
        suppress_tokens=None,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        num_hypotheses=None,
        return_token_log_probs=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        _checks.check_choice(self, "method", method, _METHODS)
        # Every option is checked here, whichever method uses it: a bad value
        # is a mistake now, not at the first predict, deep in the loop.
        self.start_token = _checks.check_int(self, "start_token", start_token, 0, "an integer id")
        self.end_token = _checks.check_int(self, "end_token", end_token, 0, "an integer id")
        self.max_length = _checks.check_positive_int(self, "max_length", max_length)
        self.beam_width = _checks.check_positive_int(self, "beam_width", beam_width)
        self.length_penalty_weight = _checks.check_number(
            self, "length_penalty_weight", length_penalty_weight, minimum=0
        )
        self.coverage_penalty_weight = _checks.check_number(
            self, "coverage_penalty_weight", coverage_penalty_weight, minimum=0
        )
        self.temperature = _checks.check_number(self, "temperature", temperature, minimum=0, strict=True)
        self.top_k = _checks.check_positive_int(self, "top_k", top_k, allow_none=True)
        self.early_stopping = _checks.check_bool(self, "early_stopping", early_stopping)
        _checks.check_choice(self, "length_convention", length_convention, LENGTH_CONVENTIONS)
        self.length_convention = length_convention
        self.top_p = check_top_p(self, top_p)
        self.min_length = _checks.check_int(self, "min_length", min_length, 0, "an integer")
        if self.min_length >= self.max_length:
            raise ValueError(
                f"{_checks.owner_name(self)}: `min_length` must be below `max_length` {self.max_length} "
                f"(the end token needs a step); got {min_length!r}."
            )
        self.max_length_ratio = _checks.check_number(
            self, "max_length_ratio", max_length_ratio, minimum=0, strict=True, allow_none=True
        )
        self.max_length_offset = _checks.check_number(self, "max_length_offset", max_length_offset)
        self.suppress_tokens = check_suppress_tokens(self, suppress_tokens, self.end_token)
        self.repetition_penalty = check_repetition_penalty(self, repetition_penalty)
        self.no_repeat_ngram_size = _checks.check_int(
            self, "no_repeat_ngram_size", no_repeat_ngram_size, 0, "an integer"
        )
        self.num_hypotheses = _checks.check_positive_int(self, "num_hypotheses", num_hypotheses, allow_none=True)
        if self.num_hypotheses is not None and self.num_hypotheses > self.beam_width:
            raise ValueError(
                f"{_checks.owner_name(self)}: `num_hypotheses` must be at most `beam_width` {self.beam_width}; "
                f"got {num_hypotheses!r}."
            )
        self.return_token_log_probs = _checks.check_bool(self, "return_token_log_probs", return_token_log_probs)
        self.cell = attention_cell(self, cell)
        self.embedding = _layer(self, "embedding", embedding)
        self.output_layer = _layer(self, "output_layer", output_layer)
        self.method = method
        self.seed = seed
        self.output_uses_inputs = bool(output_uses_inputs)
        self.return_alignments = bool(return_alignments)
        self.seed_generator = keras.random.SeedGenerator(seed) if method == "sample" else None
        # The outputs have no time axis of the memory: no mask goes on.
        self.supports_masking = True

    def build(self, memory_shape):
        if not self.embedding.built:
            self.embedding.build((None, None))
        embedded_shape = self.embedding.compute_output_shape((None, None))
        if not self.cell.built:
            self.cell.build(embedded_shape, memory_shape)
        if not self.output_layer.built:
            readout = self.cell.output_size + (embedded_shape[-1] if self.output_uses_inputs else 0)
            self.output_layer.build((None, None, readout))
        self.built = True

    def decode_step(self, ids, states, memory):
        """One decoding step: `(logits (N, V), new states, alignment (N, Ts))`
        for the previous ids `(N,)`, the cell's states and an
        `AttentionMemory` (from `cell.prepare_memory`). The searches call it;
        `keras_attention.decoders.stepwise_models` exports it."""
        # The layers see (N, 1, ...): one step of the sequences they were
        # trained on.
        inputs = ops.squeeze(self.embedding(ops.expand_dims(ids, 1)), 1)
        output, states, alignment = self.cell.step(inputs, list(states), memory)
        readout = ops.concatenate([output, ops.cast(inputs, output.dtype)], -1) if self.output_uses_inputs else output
        logits = ops.squeeze(self.output_layer(ops.expand_dims(readout, 1)), 1)
        return logits, states, alignment

    def call(self, memory, memory_mask=None, initial_state=None, allowed_tokens=None, target_prefix=None, mask=None):
        # Keras fills `mask` from the memory's Keras mask when the memory is
        # the only tensor argument, and `memory_mask` when there are more.
        memory_mask = mask if memory_mask is None else memory_mask
        prepared = self.cell.prepare_memory(memory, memory_mask, owner=self)
        initial_state = self.cell.initial_state_for(prepared, ops.shape(memory)[0], initial_state)
        if self.method == "beam":
            # Every beam reads its own copy of its example's memory.
            prepared = AttentionMemory(
                *(None if part is None else tile_batch(part, self.beam_width) for part in prepared)
            )

        def step(ids, states):
            return self.decode_step(ids, states, prepared)

        constrained = (
            self.min_length,
            self.max_length_ratio is not None,
            self.suppress_tokens,
            allowed_tokens is not None,
            self.repetition_penalty != 1,
            self.no_repeat_ngram_size,
            target_prefix is not None,
        )
        if any(constrained):
            max_lengths = None
            if self.max_length_ratio is not None:
                source_lengths = (
                    ops.full((ops.shape(memory)[0],), ops.shape(memory)[1], "int32")
                    if memory_mask is None
                    else ops.sum(ops.cast(memory_mask, "int32"), axis=1)
                )
                max_lengths = relative_max_lengths(
                    source_lengths, self.max_length_ratio, self.max_length_offset, self.max_length
                )
            step, initial_state = constrained_step(
                step,
                initial_state,
                self.end_token,
                min_length=self.min_length,
                max_lengths=max_lengths,
                suppress_tokens=self.suppress_tokens,
                allowed_tokens=allowed_tokens,
                repetition_penalty=self.repetition_penalty,
                no_repeat_ngram_size=self.no_repeat_ngram_size,
                prefix=target_prefix,
                max_length=self.max_length,
            )

        common = dict(
            start_tokens=self.start_token,
            end_token=self.end_token,
            max_length=self.max_length,
            return_alignments=self.return_alignments,
            return_token_log_probs=self.return_token_log_probs,
        )
        return _SEARCHES[self.method](self, step, initial_state, common)

    def compute_mask(self, memory, previous_mask=None):
        return None

    def compute_output_spec(
        self, memory, memory_mask=None, initial_state=None, allowed_tokens=None, target_prefix=None, mask=None
    ):
        batch, source = memory.shape[0], memory.shape[1]
        lead = (batch, self.num_hypotheses or self.beam_width) if self.method == "beam" else (batch,)
        spec = {
            "ids": keras.KerasTensor((*lead, self.max_length), dtype="int32"),
            "scores": keras.KerasTensor(lead, dtype="float32"),
            "lengths": keras.KerasTensor(lead, dtype="int32"),
        }
        if self.return_alignments:
            spec["alignments"] = keras.KerasTensor((*lead, self.max_length, source), dtype="float32")
        if self.method == "beam":
            spec["log_probs"] = keras.KerasTensor(lead, dtype="float32")
        if self.return_token_log_probs:
            spec["token_log_probs"] = keras.KerasTensor((*lead, self.max_length), dtype="float32")
        return spec

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": keras.saving.serialize_keras_object(self.cell),
                "embedding": keras.saving.serialize_keras_object(self.embedding),
                "output_layer": keras.saving.serialize_keras_object(self.output_layer),
                "start_token": self.start_token,
                "end_token": self.end_token,
                "max_length": self.max_length,
                "method": self.method,
                "beam_width": self.beam_width,
                "length_penalty_weight": self.length_penalty_weight,
                "coverage_penalty_weight": self.coverage_penalty_weight,
                "temperature": self.temperature,
                "top_k": self.top_k,
                "seed": self.seed,
                "output_uses_inputs": self.output_uses_inputs,
                "return_alignments": self.return_alignments,
                "early_stopping": self.early_stopping,
                "length_convention": self.length_convention,
                "top_p": self.top_p,
                "min_length": self.min_length,
                "max_length_ratio": self.max_length_ratio,
                "max_length_offset": self.max_length_offset,
                "suppress_tokens": self.suppress_tokens,
                "repetition_penalty": self.repetition_penalty,
                "no_repeat_ngram_size": self.no_repeat_ngram_size,
                "num_hypotheses": self.num_hypotheses,
                "return_token_log_probs": self.return_token_log_probs,
            }
        )
        return config
