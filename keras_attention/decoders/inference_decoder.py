"""`InferenceDecoder`: greedy, sampling or beam-search decoding of an attention cell, in-graph."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.cells.base import attention_cell
from keras_attention.decoders.search import SearchDecoder

__all__ = ["InferenceDecoder"]


def _layer(owner, argument, layer):
    return _checks.resolve_layer(
        owner, argument, layer, lambda given: isinstance(given, keras.layers.Layer), "a Keras layer"
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class InferenceDecoder(SearchDecoder):
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
    `ids (B, L)` int32, `scores (B,)`, `lengths (B,)`, `finished (B,)` bool
    (the hypothesis produced the end token: False for one cut at the
    `max_length`, the constructor's or a request's, whose ids are padded with
    end ids all the same), `alignments (B, L, Ts)` (with
    `return_alignments`); with `method="beam"` each gains a beam axis
    after the batch (`(B, K, L)`, ...) and `log_probs (B, K)` is added, beams
    sorted best first; beams beyond the valid hypotheses (a vocabulary too
    small for the width) are empty: end tokens, length 0, score `-inf`.

    Args:
        cell: an attention cell of this library (built by training, or built
            here on first call).
        embedding: layer mapping ids `(N,)` to `(N, dy)`.
        output_layer: layer mapping the cell output to logits `(N, V)`.
        start_token: the id fed at the first step.
        end_token: the id that ends a hypothesis.
        max_length: the most tokens produced.
        output_uses_inputs: feed `[o_t ; x_t]` to `output_layer`.
        **options: the search options (`SearchDecoder`'s), listed next.

    Keyword Args:
        method: "greedy", "sample" or "beam".
        beam_width: beam search's number of hypotheses.
        length_penalty_weight: beam search's length penalty (GNMT's).
        coverage_penalty_weight: beam search's coverage penalty (GNMT's).
        early_stopping: beam search stops once, for every example, the best
            finished hypothesis scores at least `L / lp(max_length)` for
            every running hypothesis of log-probability `L` (`L` itself
            without a length penalty), the most it could still reach. The
            best beam is the full search's; lower beams may be cut short
            (returned unfinished, as at `max_length`). See `beam_search`.
        length_convention: "default", or "tfa" for the hypotheses and
            ranking of `tfa.seq2seq.BeamSearchDecoder` with a length or
            coverage penalty (its length bookkeeping; see `beam_search`).
        temperature: sampling's temperature.
        top_k: sampling from the k most likely tokens.
        top_p: nucleus sampling, after temperature and `top_k`; 1 keeps
            every token.
        seed: sampling's seed.
        min_length: the end token is forbidden before this many tokens.
        max_length_ratio: with a ratio, example `b` has at most
            `min(max_length, floor(ratio * source_length[b] + offset))`
            tokens (the end included), its source length read from the
            memory mask.
        max_length_offset: the `offset` of that limit.
        suppress_tokens: ids never produced (not the end token).
        repetition_penalty: >= 1; CTRL's penalty on the logits of tokens
            already produced (1: none).
        no_repeat_ngram_size: n > 0 forbids repeating any n-gram (0: none).
            These constraints hold for every method. Call arguments go
            with them: the `allowed_tokens` `(B, V)` bool restricts each
            example to its own ids (the end token always allowed),
            `target_prefix` `(B, P)` ids (right-padded with -1) forces each
            example's first tokens, after which decoding continues freely,
            and `banned_sequences`, `stop_sequences` `(B, S, L)` ids give
            each example its own sequences (each right-padded with -1, a
            row of -1 none), beside the decoder's `banned_sequences` and
            `stop_sequences` keywords.
            See `keras_attention.decoding.constrained_step`.
        return_alignments: keep and return the alignment history. Off, the
            loop carries no `(B, L, Ts)` buffer: what a serving model wants.
        num_hypotheses: beam search returns only the best n <= beam_width
            hypotheses (default: all `beam_width`), best first.
        return_token_log_probs: also return `token_log_probs (B, [n,] L)`,
            each token's log-probability (0 after the end; they sum to the
            score without penalties).
        processors: the constraints as logits processors instead of (or
            beside) their keywords, e.g. `[keras_attention.decoding.processors.
            MinLength(3), NoRepeatNgram(2)]` (or registered names, or
            configs); they compose in their declared order, and the config
            saves them. `min_length=3` is sugar for `MinLength(3)`.
        search: the search as a strategy object instead of the keyword
            form, e.g. `keras_attention.decoding.BeamSearch(4,
            length_penalty_weight=0.6)` (or "beam", or its config); its
            fields are this decoder's `method`, `beam_width`, ... options.
        runtime_options: names of options a request may set at call time,
            e.g. `("temperature", "top_p", "seed")`: `max_length` (at most
            the constructor's, which stays the loop bound and the output
            width), `min_length`, `length_penalty_weight`,
            `coverage_penalty_weight`, `temperature`, `top_k` (0: all),
            `top_p`, `seed`, `repetition_penalty`, `no_repeat_ngram_size`
            (`beam_width`, `num_hypotheses` and `method` shape the loop and
            cannot). The call then takes `options={name: value}`: one value
            for every example or `(B,)` values, one per example; an option
            left out (or empty) takes the constructor's value.
            `Model.predict` slices every input by rows: pass it
            `decoder.predict_inputs(inputs)`, the options written out per
            example (what the direct call gives). Exported
            (`option_inputs()` gives the model inputs), each is an input of
            the SavedModel and ONNX signatures with that default, checked
            where it is fed. With a run-time `seed` the draws are a function
            of (seed, step, token): the same sample in Keras, SavedModel and
            ONNX; a seed per row whatever the rest of the batch, one seed for
            the batch (or the constructor's, left out) drawing row `b` with
            `keras_attention.decoding.row_seeds(seed, b)`, so rows differ.
            A constructor `seed` alone seeds a generator in Keras (new
            samples at each call); exported, the integer seed is used as one
            seed for the batch (the same samples at each request).

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
        output_uses_inputs=False,
        **options,
    ):
        # The search options are SearchDecoder's, given through: one list.
        super().__init__(start_token, end_token, max_length, **options)
        self.cell = attention_cell(self, cell)
        self.embedding = _layer(self, "embedding", embedding)
        self.output_layer = _layer(self, "output_layer", output_layer)
        self.output_uses_inputs = bool(output_uses_inputs)

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

    def decode_step(self, ids, states, memory, time, noise=None):
        """One decoding step: `(logits (N, V), new states, alignment (N, Ts))`
        for the previous ids `(N,)`, the cell's states and an
        `AttentionMemory` (from `cell.prepare_memory`). The searches call it
        with `time`, their int32 scalar counter (the index of the token being
        produced; an attention cell's step does not read it, so
        `keras_attention.decoders.stepwise_models` exports it with None).
        `noise (N, Ts)`: the step's slice of `step_noise` (None: the
        attention draws its own)."""
        # The layers see (N, 1, ...): one step of the sequences they were
        # trained on.
        inputs = ops.squeeze(self.embedding(ops.expand_dims(ids, 1)), 1)
        output, states, alignment = self.cell.step(inputs, list(states), memory, noise=noise)
        readout = ops.concatenate([output, ops.cast(inputs, output.dtype)], -1) if self.output_uses_inputs else output
        logits = ops.squeeze(self.output_layer(ops.expand_dims(readout, 1)), 1)
        return logits, states, alignment

    def vocabulary_size(self):
        """The output layer's width (the logits'), once built."""
        if not self.built:
            return None
        readout = self.cell.output_size + (
            self.embedding.compute_output_shape((None, None))[-1] if self.output_uses_inputs else 0
        )
        return self.output_layer.compute_output_shape((None, 1, readout))[-1]

    def step_noise(self, rows, source_length):
        """The attention's random numbers in inference for every step (the
        Gumbel noise of HardAttention's "sample" mode), or None."""
        return self.cell.attention.step_noise(rows, self.max_length, source_length, training=False)

    def prepare_search(self, memory, memory_mask=None, initial_state=None, owner=None):
        """`(prepared memory, initial cell states)` for `search`: the cell's
        `prepare_memory` and `initial_state_for` (the given states, checked,
        or the cell's own)."""
        prepared = self.cell.prepare_memory(memory, memory_mask, owner=owner or self)
        return prepared, self.cell.initial_state_for(prepared, ops.shape(memory)[0], initial_state)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cell": keras.saving.serialize_keras_object(self.cell),
                "embedding": keras.saving.serialize_keras_object(self.embedding),
                "output_layer": keras.saving.serialize_keras_object(self.output_layer),
                "output_uses_inputs": self.output_uses_inputs,
            }
        )
        return config
