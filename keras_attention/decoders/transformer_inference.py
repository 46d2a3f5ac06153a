"""`TransformerInferenceDecoder`: greedy, sampling or beam-search decoding of a Transformer, cached, in-graph."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoders.search import SearchDecoder
from keras_attention.layers.transformer_decoder import TransformerDecoderStack

__all__ = ["TransformerInferenceDecoder"]


def _layer(owner, argument, layer, accepts=None, expected="a Keras layer"):
    accepts = accepts or (lambda given: isinstance(given, keras.layers.Layer))
    return _checks.resolve_layer(owner, argument, layer, accepts, expected)


@keras.saving.register_keras_serializable(package="keras_attention")
class TransformerInferenceDecoder(SearchDecoder):
    """Decode token ids from an encoder memory with a Transformer decoder, one cached step at a time.

    Each step embeds the previous token, adds its position's encoding,
    runs every layer of the `TransformerDecoderStack` on that one position
    against the layer's key/value cache, and turns the result into logits:

        x_t = position(embedding(y_{t-1}), start=t)
        h_t, caches = stack.step(x_t, caches, memory projected once, t)
        logits_t = output_layer(h_t)

    The caches (per layer: keys and values `(N, H, max_length, key_dim)`, by head)
    are preallocated to `max_length` and written at the step index by a
    scatter (fixed shapes, so the loop compiles with XLA and exports to
    ONNX); beam search reorders them with the hypotheses, as every state.
    The cross-attention's keys and values are projected once per call
    (`prepared`, tiled for beam search). A step costs `O(t)` rather than
    recomputing the `O(t^2)` prefix, and its logits equal the teacher-forced
    model's at that position. Give it the stack, embedding, position layer
    and output layer of the teacher-forced training model, so the weights
    are shared: the searches, controls, run-time options and n-best of
    `InferenceDecoder` apply unchanged (see it for every option), and it can
    be a member of an `EnsembleDecoder`. `alignments` are the last layer's
    cross-attention weights, averaged over the heads.

    Paper: Vaswani et al., "Attention Is All You Need", arXiv:1706.03762;
    Wu et al. 2016, arXiv:1609.08144 (beam search penalties).

    Shapes: memory `(B, Ts, dm)` (the encoder output), memory_mask `(B, Ts)`
    (filled from the memory's Keras mask). Returns `InferenceDecoder`'s dict:
    `ids (B, L)`, `scores (B,)`, `lengths (B,)`, `alignments (B, L, Ts)`;
    with beam search a beam axis after the batch, and `log_probs (B, K)`.

    Args:
        stack: a `TransformerDecoderStack`.
        embedding: layer mapping ids `(N, 1)` to `(N, 1, d)`.
        output_layer: layer mapping `(N, 1, d)` to logits `(N, 1, V)`.
        start_token: the id fed at the first step, as in `InferenceDecoder`.
        end_token: the id that ends a hypothesis.
        max_length: the most tokens, the end token included.
        position: a layer adding position encodings with a `start` argument
            (`SinusoidalPositionEncoding`, `LearnedPositionEmbedding`), or
            None (a stack with `use_rotary`, or no positions).
        **options: `InferenceDecoder`'s search options.

    Example:

    ```python
    V, d = 12, 16
    embedding = keras.layers.Embedding(V, d)
    position = keras_attention.SinusoidalPositionEncoding()
    encoder = keras_attention.TransformerEncoderStack(2, num_heads=2, intermediate_dim=32)
    stack = keras_attention.TransformerDecoderStack(2, num_heads=2, intermediate_dim=32)
    readout = keras.layers.Dense(V)
    # Training model (teacher forcing): source ids and target inputs -> logits.
    source = keras.Input((None,), dtype="int32")
    target_in = keras.Input((None,), dtype="int32")
    memory = encoder(position(embedding(source)))
    logits = readout(stack(position(embedding(target_in)), memory))
    model = keras.Model([source, target_in], logits)
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    # Decoding model: the same layers, beam search with the caches.
    decoder = keras_attention.TransformerInferenceDecoder(
        stack, embedding, readout, start_token=1, end_token=2, max_length=6,
        position=position, method="beam", beam_width=3)
    result = decoder(encoder(position(embedding(np.array([[3, 4, 5], [6, 7, 8]])))))
    # result["ids"]: (2, 3, 6), result["alignments"]: (2, 3, 6, 3)
    ```
    """

    # Its caches hold `max_length` steps: a search that drives it longer (an
    # EnsembleDecoder's own max_length) would write past them.
    steps_bounded_by_max_length = True

    def __init__(self, stack, embedding, output_layer, start_token, end_token, max_length, position=None, **options):
        super().__init__(start_token, end_token, max_length, **options)
        self.stack = _layer(
            self,
            "stack",
            stack,
            lambda given: isinstance(given, TransformerDecoderStack),
            "a TransformerDecoderStack",
        )
        self.embedding = _layer(self, "embedding", embedding)
        self.output_layer = _layer(self, "output_layer", output_layer)
        self.position = None if position is None else _layer(self, "position", position)

    def build(self, memory_shape):
        if not self.embedding.built:
            self.embedding.build((None, None))
        embedded_shape = self.embedding.compute_output_shape((None, None))
        if self.position is not None and not self.position.built:
            self.position.build(embedded_shape)
        if not self.stack.built:
            self.stack.build(embedded_shape, memory_shape)
        if not self.output_layer.built:
            self.output_layer.build(embedded_shape)
        self.built = True

    def _returns_alignments(self):
        return (
            self.return_alignments
            or self.coverage_penalty_weight > 0
            or "coverage_penalty_weight" in (self.runtime_options)
        )

    def decode_step(self, ids, states, prepared, time, noise=None):
        """One cached step: `(logits (N, V), new caches, alignment (N, Ts) or
        None)` for the previous ids `(N,)`, every layer's cache (`states`),
        `prepared = {"memory": the projected memory, "memory_mask": ...}` and
        `time`, the int32 index of the token being produced (its position)."""
        x = self.embedding(ops.expand_dims(ids, 1))
        if self.position is not None:
            x = self.position(x, start=time)
        hidden, caches, weights = self.stack.step(
            x,
            list(states),
            prepared["memory"],
            prepared["memory_mask"],
            time,
            return_weights=self._returns_alignments(),
        )
        logits = ops.squeeze(self.output_layer(hidden), 1)
        alignment = None if weights is None else ops.mean(ops.cast(weights, "float32"), axis=1)
        return logits, caches, alignment

    def prepare_search(self, memory, memory_mask=None, initial_state=None, owner=None):
        """`(prepared, initial caches)` for `search` (or an `EnsembleDecoder`):
        the memory projected once, and zero caches of `max_length`."""
        if initial_state is not None:
            raise ValueError(
                f"{_checks.owner_name(owner or self)}: `initial_state` must be None (a Transformer starts from an "
                f"empty cache); got {initial_state!r:.80}."
            )
        prepared = {"memory": self.stack.project_memory(memory), "memory_mask": memory_mask}
        caches = self.stack.initial_cache(ops.shape(memory)[0], self.max_length)
        return prepared, caches

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "stack": keras.saving.serialize_keras_object(self.stack),
                "embedding": keras.saving.serialize_keras_object(self.embedding),
                "output_layer": keras.saving.serialize_keras_object(self.output_layer),
                "position": None if self.position is None else keras.saving.serialize_keras_object(self.position),
            }
        )
        return config
