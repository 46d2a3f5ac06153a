"""`EnsembleDecoder`: one in-graph search over several trained decoders, their predictions averaged."""

import math

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoders.search import SearchDecoder

__all__ = ["EnsembleDecoder"]

COMBINATIONS = ("probabilities", "log_probabilities")


def _member(owner, index, member):
    # A member is a decoder of the search that prepares its own memory and
    # states: an InferenceDecoder (its cell's) or a TransformerInferenceDecoder
    # (its caches); not another ensemble, whose memory is a list.
    def accepts(given):
        return (
            isinstance(given, SearchDecoder)
            and not isinstance(given, EnsembleDecoder)
            and type(given).prepare_search is not SearchDecoder.prepare_search
        )

    return _checks.resolve_layer(
        owner, f"members[{index}]", member, accepts, "an InferenceDecoder or a TransformerInferenceDecoder"
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class EnsembleDecoder(SearchDecoder):
    """Decode with several trained models at once: one search, each step averaging their predictions.

    Each member is an `InferenceDecoder` (its cell, embedding and output
    layer; its own search options are not used) or a
    `TransformerInferenceDecoder` (its stack and caches) that reads its own memory of
    the same source. At every step each member `m` gives the next-token
    log-probabilities `log p_m(y | y_<t, x)` from its own state, the search
    ranks tokens by their combination

        log p(y) = log(1/M sum_m p_m(y))                  combine="probabilities"
        log p(y) = 1/M sum_m log p_m(y) - log Z           combine="log_probabilities"

    (`Z` renormalises the geometric mean), and every member's state follows
    the hypotheses the search keeps. Greedy, sampling and beam search and
    every option of `InferenceDecoder` work as there, and the whole ensemble
    exports as one model. An ensemble of independently trained models is the
    usual way to buy accuracy with decoding time; with one member it decodes
    what that member decodes.

    Paper: Sutskever et al. 2014, arXiv:1409.3215 (an ensemble of LSTM
    translation models, the probabilities averaged at each step of the beam
    search); Hinton 2002, Neural Computation 14(8) (products of experts, the
    geometric mean).

    Shapes: memories: a list of one memory per member, `(B, Ts, d_m)` over
    the same `Ts` source positions (`d_m` may differ); memory_mask `(B, Ts)`
    shared (default: the first Keras mask the memories carry);
    initial_state: a list of one state list per member (None for a member's
    default). Returns `InferenceDecoder`'s dict; `alignments` are the
    members' mean.

    Args:
        members: a list of `InferenceDecoder`s (or `TransformerInferenceDecoder`s)
            over one target vocabulary.
        combine: "probabilities" (the mean of the members' probabilities) or
            "log_probabilities" (their geometric mean).
        start_token: default: the first member's.
        end_token: default: the first member's.
        max_length: default: the first member's.
        **options: the search options of `InferenceDecoder` (method,
            beam_width, penalties, sampling, constraints, what to return,
            `runtime_options`: the call then takes `options=` as there).

    Example:

    ```python
    def member():
        cell = keras_attention.AttentionGRUCell(8, keras_attention.AdditiveAttention(4))
        return keras_attention.InferenceDecoder(
            cell, keras.layers.Embedding(12, 4), keras.layers.Dense(12), start_token=1, end_token=2, max_length=6)
    ensemble = keras_attention.EnsembleDecoder([member(), member()], method="beam", beam_width=3)
    memory = np.random.rand(2, 5, 6).astype("float32")
    result = ensemble([memory, memory])
    # result["ids"]: (2, 3, 6), result["scores"]: (2, 3)
    ```
    """

    def __init__(self, members, combine="probabilities", start_token=None, end_token=None, max_length=None, **options):
        if not isinstance(members, (list, tuple)) or not members:
            raise ValueError(
                f"EnsembleDecoder: `members` must be a non-empty list of InferenceDecoders; got {members!r}."
            )
        members = [_member("EnsembleDecoder", i, member) for i, member in enumerate(members)]
        first = members[0]
        super().__init__(
            first.start_token if start_token is None else start_token,
            first.end_token if end_token is None else end_token,
            first.max_length if max_length is None else max_length,
            **options,
        )
        _checks.check_choice(self, "combine", combine, COMBINATIONS)
        for index, member in enumerate(members):
            if getattr(member, "steps_bounded_by_max_length", False) and self.max_length > member.max_length:
                raise ValueError(
                    f"EnsembleDecoder: `max_length` must be at most {member.max_length}, the max_length of "
                    f"member {index} ({type(member).__name__}), which sizes its key/value caches; got "
                    f"{self.max_length}. Build that member with max_length={self.max_length}, or give the "
                    f"ensemble max_length <= {member.max_length}."
                )
        self.members = members
        self.combine = combine

    def build(self, memories_shape):
        self._check_memories(memories_shape, "memories")
        for member, shape in zip(self.members, memories_shape):
            if not member.built:
                member.build(shape)
        self.built = True

    def _check_memories(self, memories, argument):
        if not isinstance(memories, (list, tuple)) or len(memories) != len(self.members):
            raise ValueError(
                f"{_checks.owner_name(self)}: `{argument}` must be a list of {len(self.members)} "
                f"(one per member); got {memories!r}."
            )

    def decode_step(self, ids, states, prepared, time, noise=None):
        """One step of every member, combined: `(log-probabilities (N, V),
        the members' new states, mean alignment (N, Ts))`. `time` is the
        search's counter, `noise` one slice per member (see `step_noise`)."""
        log_probs, new_states, alignments = [], [], []
        noises = [None] * len(self.members) if noise is None else noise
        for member, member_states, memory, member_noise in zip(self.members, states, prepared, noises):
            logits, member_states, alignment = member.decode_step(ids, member_states, memory, time, noise=member_noise)
            log_probs.append(ops.log_softmax(ops.cast(logits, "float32"), axis=-1))
            new_states.append(member_states)
            alignments.append(alignment)
        sizes = {lp.shape[-1] for lp in log_probs}
        if len(sizes) > 1 and None not in sizes:
            raise ValueError(
                f"{_checks.owner_name(self)}: every member must predict over one vocabulary; "
                f"got output sizes {[lp.shape[-1] for lp in log_probs]}."
            )
        stacked = ops.stack(log_probs)
        if self.combine == "probabilities":
            combined = ops.logsumexp(stacked, axis=0) - math.log(len(self.members))
        else:
            combined = ops.log_softmax(ops.mean(stacked, axis=0), axis=-1)
        alignment = None
        if all(a is not None for a in alignments):
            alignment = ops.mean(ops.stack([ops.cast(a, "float32") for a in alignments]), axis=0)
        return combined, new_states, alignment

    def vocabulary_size(self):
        """The members' one vocabulary (the first's output width)."""
        return self.members[0].vocabulary_size()

    def step_noise(self, rows, source_length):
        """Each member's inference noise (see `InferenceDecoder.step_noise`),
        a list with None for a member that draws none; None when none does."""
        noises = [member.step_noise(rows, source_length) for member in self.members]
        return None if all(noise is None for noise in noises) else noises

    def prepare_search(self, memories, memory_mask=None, initial_state=None, owner=None):
        """`([prepared per member], [states per member])`: each member's own
        `prepare_search` over its memory (`initial_state`: None, or one entry
        per member)."""
        self._check_memories(memories, "memories")
        if initial_state is None:
            initial_state = [None] * len(self.members)
        self._check_memories(initial_state, "initial_state")
        prepared, states = [], []
        for member, memory, state in zip(self.members, memories, initial_state):
            member_memory, member_states = member.prepare_search(memory, memory_mask, state, owner=owner or self)
            prepared.append(member_memory)
            states.append(member_states)
        return prepared, states

    def search_source(self, memories):
        """The first memory: every member reads the same source."""
        return memories[0]

    def compute_output_spec(
        self,
        memories,
        memory_mask=None,
        initial_state=None,
        allowed_tokens=None,
        target_prefix=None,
        options=None,
        mask=None,
        banned_sequences=None,
        stop_sequences=None,
        constraints=None,
        constraint_groups=None,
    ):
        self._check_memories(memories, "memories")
        return self.output_spec_for(memories[0].shape[0], memories[0].shape[1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {"members": [keras.saving.serialize_keras_object(m) for m in self.members], "combine": self.combine}
        )
        return config
