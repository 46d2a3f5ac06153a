"""The search every in-graph decoder shares: its options, their checks and config.

`SearchDecoder` owns the decoding options (method, beam width, penalties,
sampling, constraints, what to return) and runs the search over a
`decode_step(ids, states, prepared, time, noise=None)` its subclass defines:
`InferenceDecoder` steps one attention cell, `EnsembleDecoder` several.
"""

import inspect

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoders.call_inputs import check_prefix, check_token_inputs
from keras_attention.decoders.predict_inputs import expand_options
from keras_attention.decoders.runtime_options import (
    RuntimeOptionInputs,
    check_runtime_options,
)
from keras_attention.decoders.search_methods import METHODS, adopt_strategy, keyword_less_fields, strategy_of
from keras_attention.decoding import LENGTH_CONVENTIONS, strategies, tile_batch
from keras_attention.decoding import processors as processors_package
from keras_attention.decoding.constraints import check_top_p
from keras_attention.decoding.hashed_random import decoder_seed
from keras_attention.decoding.processors import forced_prefix

__all__ = ["SearchDecoder", "noise_at"]


def noise_at(noise, time):
    """Step `time`'s slice of pre-drawn noise: each `(rows, steps, ...)`
    tensor of the nest at `min(time, steps - 1)` (None stays None)."""
    if noise is None:
        return None

    def at(values):
        return ops.take(values, ops.minimum(time, ops.shape(values)[1] - 1), axis=1)

    return keras.tree.map_structure(at, noise, none_is_leaf=False)


def first_mask(mask):
    """The memory's mask; of several memories over one source (an ensemble's),
    the first that any of them carries."""
    if isinstance(mask, (list, tuple)):
        return next((m for m in mask if m is not None), None)
    return mask


class SearchDecoder(RuntimeOptionInputs, keras.layers.Layer):
    """Base of the in-graph decoders: the search options and the search.

    A subclass defines `decode_step(ids, states, prepared, time,
    noise=None) -> (logits, states, alignment)` and calls `search` from its `call` with what the step
    reads (`prepared`, tiled here for beam search) and its initial states.
    The options are `InferenceDecoder`'s: see it for their meaning. The
    search may also be given as a strategy object, `search=BeamSearch(4)`
    (or a registered name, or its config): the keyword form (`method="beam",
    beam_width=4`) is sugar for it, the strategy's fields being the
    decoder's attributes of the same names.
    """

    def __init__(
        self,
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
        return_alignments=True,
        early_stopping=False,
        length_convention="default",
        top_p=1.0,
        num_hypotheses=None,
        return_token_log_probs=False,
        runtime_options=None,
        search=None,
        processors=None,
        **kwargs,
    ):
        strategy = None
        if search is not None:
            strategy = strategies.get(search)
            method = strategy.registered_name
        _checks.check_choice(type(self).__name__, "method", method, METHODS)
        # A field of the method's strategy that has no keyword here (a new
        # control's, e.g. min_p) comes through **kwargs: the registry says
        # which, and the strategy checks it.
        keywords = inspect.signature(SearchDecoder.__init__).parameters
        extra = {name: kwargs.pop(name) for name in keyword_less_fields(method, keywords) if name in kwargs}
        # The logits processors' keywords (min_length=3, ...) are sugar for
        # the processors: the registry names them.
        sugar = {name: kwargs.pop(name) for name in processors_package.keyword_names() if name in kwargs}
        super().__init__(**kwargs)
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
        # A strategy may return more than its beams (a refilling beam's patience).
        most = getattr(strategies.registered().get(method), "most_hypotheses", None)
        most = None if most is None else most(self.beam_width, extra)
        self.num_hypotheses = strategies.check_num_hypotheses(self, num_hypotheses, self.beam_width, most)
        self.return_token_log_probs = _checks.check_bool(self, "return_token_log_probs", return_token_log_probs)
        self.method = method
        self.seed = seed
        adopt_strategy(self, strategy, method, extra, locals(), keywords)
        self.runtime_options = check_runtime_options(self, runtime_options, method, self.seed)
        self.processors = processors_package.configured_processors(
            self, processors, sugar, self.runtime_options, self.end_token, self.max_length
        )
        self.return_alignments = bool(return_alignments)
        draws = "seed" in strategies.registered()[method].fields()
        self.seed_generator = keras.random.SeedGenerator(self.seed) if draws else None
        # The outputs have no time axis of the memory: no mask goes on.
        self.supports_masking = True

    def decode_step(self, ids, states, prepared, time, noise=None):
        """One step of the protocol: `(logits (N, V), states, alignment (N, Ts)
        or None)` for the previous ids `(N,)`, given `time`, the int32 scalar
        index of the token being produced (the search's loop counter), and
        `noise`, that step's slice of `step_noise` (or None)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define decode_step(ids, states, prepared, time, noise=None)."
        )

    def vocabulary_size(self):
        """The number of ids a step scores (its logits' width), when known; None here."""
        return None

    def prepare_search(self, memory, memory_mask=None, initial_state=None, owner=None):
        """`(prepared, initial states)` for `search`: what the steps read of the
        memory, computed once per call, and the states the first step takes.
        `owner` is the layer named in errors (an ensemble names itself)."""
        raise NotImplementedError(
            f"{type(self).__name__} must define prepare_search(memory, memory_mask=None, initial_state=None, "
            "owner=None)."
        )

    def search_source(self, memory):
        """The tensor whose shape gives the batch and the source length: the memory."""
        return memory

    def call(
        self,
        memory,
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
        # Keras fills `mask` from the memory's Keras mask when the memory is
        # the only tensor argument, and `memory_mask` when there are more; an
        # ensemble's memories share one source, so any of their masks serves.
        memory_mask = first_mask(mask if memory_mask is None else memory_mask)
        prepared, states = self.prepare_search(memory, memory_mask, initial_state)
        source = self.search_source(memory)
        sequences = {
            "banned_sequences": banned_sequences,
            "stop_sequences": stop_sequences,
            "constraints": constraints,
            "constraint_groups": constraint_groups,
        }
        return self.search(prepared, states, source, memory_mask, allowed_tokens, target_prefix, options, sequences)

    def step_noise(self, rows, source_length):
        """The random numbers `decode_step` reads at each step, drawn before
        the search's loop for all `max_length` steps: a nest of `(rows,
        steps, ...)` tensors, step `t`'s slice (`noise_at`) passed as
        `decode_step(..., noise=)`; or None (here: the step draws nothing)."""
        return None

    def option_defaults(self):
        """{run-time option: its value when a request does not set it}: the constructor's."""
        values = {name: getattr(self._option_holder(name), name) for name in self.runtime_options}
        if "top_k" in values:
            values["top_k"] = values["top_k"] or 0  # 0 keeps every token
        return values

    def _option_holder(self, name):
        """What holds run-time option `name`'s default: its processor, or the decoder (the strategy's fields)."""
        return next((p for p in self.processors if name in {f.name for f in p.runtime_fields}), self)

    def predict_inputs(self, inputs):
        """`inputs` for `Model.predict` with every run-time option written out
        per example (predict slices each input by rows, so one value for a
        batch cannot go through it): see `predict_inputs.expand_options`."""
        return expand_options(self, inputs)

    def search(
        self,
        prepared,
        initial_state,
        memory,
        memory_mask,
        allowed_tokens=None,
        target_prefix=None,
        options=None,
        sequences=None,
    ):
        """Run the configured search over `decode_step(ids, states, prepared, time, noise)`.

        `prepared` is what `decode_step` reads (tiled here for beam search),
        `memory` `(B, Ts, ...)` and `memory_mask` give the batch and the
        source lengths, `options` the run-time options' values, `sequences`
        the call's per-request token sequences ({"banned_sequences",
        "stop_sequences", "constraints"}: `(B, S, L)` or None; and
        "constraint_groups" `(B, S)`). A decoder over other memories
        (`EnsembleDecoder`) prepares its own and searches through this."""
        values = self._option_values(options, ops.shape(memory)[0])
        check_prefix(self, target_prefix, None if options is None else options.get("max_length"))
        sequences = {name: value for name, value in (sequences or {}).items() if value is not None}
        strategy = strategy_of(self)
        phrases = {name: sequences.pop(name) for name in ("constraints", "constraint_groups") if name in sequences}
        if phrases and not strategy.reads_constraints:
            raise ValueError(
                f"{_checks.owner_name(self)}: `{next(iter(phrases))}` needs a search that meets constraints "
                f'(method="constrained_beam"); this decoder\'s method is {self.method!r}.'
            )
        check_token_inputs(self, sequences, phrases, memory)

        beams = strategy.beams
        if beams:
            # Every beam reads its own copy of its example's memory.
            prepared = keras.tree.map_structure(lambda part: tile_batch(part, beams), prepared, none_is_leaf=False)

        rows = ops.shape(memory)[0] * (beams or 1)
        # The step's random numbers for every step, drawn before the loop (a
        # seed generator advanced inside it leaks tracers on JAX and does not
        # compile with XLA); the search's counter picks the step's slice.
        noise = self.step_noise(rows, ops.shape(memory)[1])

        def step(ids, states, time):
            return self.decode_step(ids, states, prepared, time, noise=noise_at(noise, time))

        length_limits = values.get("max_length")
        calls = {"allowed_tokens": allowed_tokens, "target_prefix": target_prefix, **sequences}
        active = list(self.processors) + [
            cls() for cls in processors_package.registered().values() if calls.get(cls.call_input) is not None
        ]
        if active:
            source_lengths = None
            if any(processor.reads_source_lengths for processor in active):
                source_lengths = (
                    ops.full((ops.shape(memory)[0],), ops.shape(memory)[1], "int32")
                    if memory_mask is None
                    else ops.sum(ops.cast(memory_mask, "int32"), axis=1)
                )
            inputs = dict(
                calls,
                source_lengths=source_lengths,
                length_limits=length_limits,
                max_length=self.max_length,
                values=values,
            )
            step, initial_state = processors_package.processed_step(step, initial_state, active, self.end_token, inputs)

        common = dict(
            start_tokens=self.start_token,
            end_token=self.end_token,
            max_length=self.max_length,
            return_alignments=self.return_alignments,
            return_token_log_probs=self.return_token_log_probs,
            length_limits=length_limits,
        )
        if strategy.reads_constraints:
            common["constraints"], common["groups"] = phrases.get("constraints"), phrases.get("constraint_groups")
        if strategy.reads_prefix_lengths:
            common["prefix_lengths"] = forced_prefix.prefix_lengths(target_prefix, ops.shape(memory)[0])
        runtime = {field.name: values[field.name] for field in strategy.runtime_fields if field.name in values}
        if self.seed_generator is not None and "seed" not in runtime:
            runtime["seed"] = decoder_seed(self, self.seed, self.seed_generator)  # exported: the seed
        return strategy.search(step, initial_state, runtime, **common)

    def compute_mask(self, memory, previous_mask=None):
        return None

    def compute_output_spec(
        self,
        memory,
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
        return self.output_spec_for(memory.shape[0], memory.shape[1])

    def output_spec_for(self, batch, source):
        """The outputs' specs for a batch of `batch` sources of `source` positions."""
        strategy = strategy_of(self)
        hypotheses = strategy.hypotheses
        lead = (batch,) if hypotheses is None else (batch, hypotheses)
        spec = {
            "ids": keras.KerasTensor((*lead, self.max_length), dtype="int32"),
            "scores": keras.KerasTensor(lead, dtype="float32"),
            "lengths": keras.KerasTensor(lead, dtype="int32"),
            "finished": keras.KerasTensor(lead, dtype="bool"),
        }
        if self.return_alignments:
            spec["alignments"] = keras.KerasTensor((*lead, self.max_length, source), dtype="float32")
        if hypotheses is not None:
            spec["log_probs"] = keras.KerasTensor(lead, dtype="float32")
        if self.return_token_log_probs:
            spec["token_log_probs"] = keras.KerasTensor((*lead, self.max_length), dtype="float32")
        for name, (shape, dtype) in strategy.extra_output_specs(lead).items():
            spec[name] = keras.KerasTensor(shape, dtype=dtype)
        return spec

    def get_config(self):
        config = super().get_config()
        config.update(
            {
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
                "return_alignments": self.return_alignments,
                "early_stopping": self.early_stopping,
                "length_convention": self.length_convention,
                "top_p": self.top_p,
                "processors": [keras.saving.serialize_keras_object(p) for p in self.processors],
                "num_hypotheses": self.num_hypotheses,
                "return_token_log_probs": self.return_token_log_probs,
                "runtime_options": list(self.runtime_options),
            }
        )
        config.update(strategy_of(self).get_config())  # a new control's fields too
        return config
