"""A pointer network's inference: its step, its search and its run-time options.

`PointerDecoding` is the half of `PointerNetwork` that decodes (the layer
inherits it): the step of the decoders' protocol over the encoded inputs,
`decode` running any of `keras_attention.decoding`'s strategies over it, and
the run-time options an exported pointer model takes as inputs
(`option_specs`, `option_inputs`), drawn from the decoders' one table
(`keras_attention.decoders.runtime_options`) and checked by its functions.
"""

from keras import ops

from keras_attention import _checks
from keras_attention.decoders.runtime_options import (
    RuntimeOptionInputs,
    check_runtime_options,
)
from keras_attention.decoding.beams import tile_batch
from keras_attention.decoding.processors.forced_prefix import prefix_lengths
from keras_attention.decoding.strategies import BeamSearch
from keras_attention.models.pointer_search import END, constrain, pointer_strategy, split_options

__all__ = ["PointerDecoding", "check_pointer_options"]

# The options `decode(options=)` reads besides its strategy's run-time fields.
LENGTH_OPTIONS = ("max_length", "min_length")


def check_pointer_options(owner, names, strategy, max_length):
    """`names` as a tuple of the run-time options a pointer network with
    `strategy` and `max_length` takes: its strategy's run-time fields,
    `max_length` and `min_length` (checked as the decoders' are)."""
    names = check_runtime_options(owner, names, strategy.registered_name, getattr(strategy, "seed", None))
    readable = [field.name for field in strategy.runtime_fields] + list(LENGTH_OPTIONS)
    for name in names:
        if name not in readable:
            raise ValueError(
                f"{_checks.owner_name(owner)}: `runtime_options` names {name!r}, which a pointer network's "
                f"{strategy!r} does not read; expected names from {readable}."
            )
    if names and max_length is None:
        raise ValueError(
            f"{_checks.owner_name(owner)}: run-time options {list(names)} need `max_length`, the bound of the "
            "decoding (a run-time max_length is at most it); got None."
        )
    return names


class PointerDecoding(RuntimeOptionInputs):
    """The decoding half of `PointerNetwork` (see it): the step, the search
    and the run-time options. It reads the layer's `max_length`,
    `beam_width`, `length_penalty_weight`, `search` and `runtime_options`."""

    def _check_decoding(self, max_length, beam_width):
        if max_length is None:
            raise ValueError(
                "PointerNetwork: decoding needs `max_length`, the most pointers to "
                "produce with the end included (the longest input + 1 for a "
                "permutation); got None."
            )
        return (
            _checks.check_positive_int(self, "max_length", max_length),
            _checks.check_positive_int(self, "beam_width", beam_width, allow_none=True),
        )

    def decoding_step(self, inputs, mask=None):
        """`(step_fn, initial_state)` for the searches of `keras_attention.decoding`.

        `step_fn(ids, state, time) -> (logits (N, Ts + 1), state)`: `ids` are
        the previous pointer ids (start with `END`, i.e. `start_tokens=0`, and
        use `end_token=0`). The state holds the LSTM state, the chosen
        positions and the encoded memory, so beam search can tile and reorder
        it like any state. The memory's projection is computed here, once.
        """
        constants, state = self._decoding_start(inputs, mask)

        def step_fn(ids, state, time):
            return self.decode_step(ids, state, state, time)

        return step_fn, {**state, **constants}

    def _decoding_start(self, inputs, mask):
        """The per-sequence constants (encoded elements, projected keys, valid
        positions) and the initial recurrent state of a decoding."""
        self._check_shapes(inputs.shape)
        if not self.built:
            self.build(inputs.shape)
        elements, memory, valid, (state_h, state_c) = self._encode(inputs, self._inputs_mask(mask))
        constants = {"valid": valid, "elements": elements, "keys": self.pointer.project_memory(memory)}
        state = {"h": state_h, "c": state_c, "chosen": ops.zeros(ops.shape(valid), "bool")}
        return constants, state

    def decode_step(self, ids, states, prepared, time, noise=None):
        """One decoding step, the decoders' protocol: `(logits (N, Ts + 1),
        new states)` for the previous pointer ids `(N,)`, the states `{"h",
        "c", "chosen"}` (other entries pass through) and the prepared
        constants `{"elements", "keys", "valid"}` of `_decoding_start`
        (tiled for beam search). `time`, the search's counter, and `noise`
        are not read: the step draws nothing and needs no position."""
        ids = ops.cast(ids, "int32")
        indices = ops.arange(ops.shape(prepared["valid"])[1], dtype="int32")
        chosen = states["chosen"]
        if self.mask_chosen:
            picked = ops.equal(ops.expand_dims(ids, 1), indices)
            chosen = ops.logical_or(chosen, ops.logical_and(picked, ops.greater(indices, END)))
        element = ops.take_along_axis(prepared["elements"], ops.reshape(ids, (-1, 1, 1)), axis=1)[:, 0]
        output, (state_h, state_c) = self.decoder.cell(element, [states["h"], states["c"]])
        allowed = ops.logical_and(prepared["valid"], ops.logical_not(chosen))
        logits = self.pointer.pointer_logits(output, prepared["keys"], allowed)
        return logits, dict(states, h=state_h, c=state_c, chosen=chosen)

    def decode(
        self,
        inputs,
        mask=None,
        max_length=None,
        beam_width=None,
        search=None,
        options=None,
        min_length=0,
        allowed_positions=None,
        prefix=None,
    ):
        """Decode in the graph; returns `keras_attention.decoding`'s result dict.

        The search is `search` (a strategy, name or config), else a beam
        search of `beam_width`, else the layer's. Greedy and sampling give
        `ids (B, max_length)`; a beam-like strategy `ids (B, hypotheses,
        max_length)` best first. When fewer valid hypotheses exist than beams
        (few inputs, wide beam), the extra beams are empty: all ids 0,
        length 0, and a score of `-inf`. `max_length` defaults to the
        layer's.

        `options` {name: value} sets the strategy's run-time fields (e.g.
        `length_penalty_weight`, `diversity_strength`, `temperature`) and
        `max_length` / `min_length`, each one number or `(B,)` values, one
        per example. The constraints, in pointer ids (0 the end, k >= 1
        input k): `min_length`, the end forbidden before that many pointers
        (at most the inputs' count); `allowed_positions` `(B, Ts + 1)` bool,
        the positions each example may point at (the end always may);
        `prefix` `(B, P)` ids right-padded with -1, each example's forced
        first pointers.
        """
        max_length = self.max_length if max_length is None else max_length
        max_length, beam_width = self._check_decoding(max_length, beam_width)
        if search is None:
            search = self.search if beam_width is None else BeamSearch(beam_width, self.length_penalty_weight)
        strategy = pointer_strategy(search, self.beam_width, self.length_penalty_weight)
        constants, state = self._decoding_start(inputs, mask)
        runtime, length_limits, min_length = split_options(strategy, options, ops.shape(inputs)[0], min_length)
        if strategy.beams:
            # Every beam reads its own copy of its example's constants, tiled
            # once (the loop then need not carry, nor the search reorder, them).
            constants = tile_batch(constants, strategy.beams)
        step_fn, state = constrain(self._stepper(constants), state, max_length, min_length, allowed_positions, prefix)
        common = dict(start_tokens=END, end_token=END, max_length=max_length, length_limits=length_limits)
        if strategy.reads_prefix_lengths:  # alternatives part where the forced pointers end
            common["prefix_lengths"] = prefix_lengths(prefix, ops.shape(inputs)[0])
        return strategy.search(step_fn, state, runtime, **common)

    def _stepper(self, constants):
        def step_fn(ids, state, time):
            return self.decode_step(ids, state, constants, time)

        return step_fn

    # ---------------------------------------------------- run-time options

    def search_strategy(self):
        """The search strategy `call` runs: `search`, else the keyword form."""
        return pointer_strategy(self.search, self.beam_width, self.length_penalty_weight)

    def option_defaults(self):
        """{run-time option: its value when a request does not set it}: the constructor's."""
        strategy = self.search_strategy()
        constructor = {"max_length": self.max_length, "min_length": 0}
        values = {
            name: constructor[name] if name in constructor else getattr(strategy, name) for name in self.runtime_options
        }
        if "top_k" in values:
            values["top_k"] = values["top_k"] or 0  # 0 keeps every position
        return values
