"""Pointer network (Vinyals et al. 2015): an LSTM encoder-decoder whose output is a pointer."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoding import strategies
from keras_attention.decoding.beams import tile_batch
from keras_attention.decoding.strategies import BeamSearch
from keras_attention.layers.pointer import PointerAttention, logits_dtype
from keras_attention.models.pointer_search import END, constrain, pointer_strategy, split_options

__all__ = ["END", "PointerNetwork"]


@keras.saving.register_keras_serializable(package="keras_attention")
class PointerNetwork(keras.layers.Layer):
    """Pointer network: an LSTM encoder-decoder that points at its inputs.

    For inputs `P = (x_1 .. x_n)` and an output `C = (c_1 .. c_m)` of pointer
    ids (`c = k >= 1` means input element `x_k`; `c = 0` is the end):

        e_1 .. e_n, (h, c)  = LSTM_enc(x_1 .. x_n)
        memory              = [e_end ; e_1 .. e_n]                (learned e_end)
        h_i                 = LSTM_dec(z_i, h_{i-1}),  h_0 = the encoder's final state
        z_i                 = x_{c_{i-1}}, with z_1 = x_0 = a learned start vector
        s_{i,k}             = v^T tanh(W memory_k + U h_i)        (PointerAttention)
        p(c_i = k | c_<i, P) = softmax_k(s_{i,k})

    over the valid positions: the end, and every real (unpadded) input not
    yet chosen (with `mask_chosen=True`). The end is always valid, so no row
    is ever fully masked; once every real input has been chosen the end is
    the only choice, so a permutation ends by itself.

    Training (teacher forcing), `layer([inputs, targets])`: every step at
    once. The decoder reads `[x_0 ; x_{c_1} ; ... ; x_{c_{M-1}}]` and step
    `i`'s chosen mask is the union of `c_1 .. c_{i-1}` (a cumulative sum of
    one-hots, no loop over time). The logits carry a Keras mask that is true
    up to and including the first end in each row of `targets`, so
    `keras_attention.SequenceLoss()` is the masked cross-entropy over the
    real steps. Pad targets with 0 after the end; with `mask_chosen`, a
    target must not repeat a position (it would have a masked logit).

    Inference, `layer(inputs)`: decodes inside the graph (a
    `keras.ops.while_loop`): each step feeds the pointed-at input element
    back in and masks what was chosen. The search is one of
    `keras_attention.decoding`'s strategies (`search=`, e.g.
    `BeamSearch(4, num_hypotheses=2)` or `DiverseBeamSearch`); the keyword
    form `beam_width=None` is greedy, `beam_width=k` beam search of width k.
    It compiles with XLA and exports to SavedModel and ONNX. `decode`
    returns every hypothesis with its scores and takes the strategy's
    run-time options and the constraints that apply to positions
    (`min_length`, `allowed_positions`, `prefix`); `decoding_step` gives the
    step function for a search of one's own.

    Paper: Vinyals, Fortunato & Jaitly, "Pointer Networks", NeurIPS 2015,
    arXiv:1506.03134.

    Weights: the encoder and decoder LSTMs' (`units`), the PointerAttention's
    (`attention_units`), start_input `(d,)` and end_memory `(units,)`.

    Shapes: inputs `(B, Ts, d)` with `mask` `(B, Ts)` (taken from the inputs'
    Keras mask, e.g. `keras.layers.Masking`); targets int `(B, M)` in
    `[0, Ts]`. Teacher forcing returns logits `(B, M, Ts + 1)` (float32;
    column 0 is the end); inference returns the best hypothesis's ids
    `(B, max_length)` int32 (0 at the end and after it).

    Args:
        units: size of the encoder's and decoder's LSTM states.
        attention_units: size of the PointerAttention's hidden layer
            (default `units`).
        mask_chosen: never point twice at one position.
        max_length: the most pointers to decode, the end included (for a
            permutation of `n` inputs, `n + 1`); needed only for inference.
        beam_width: None for greedy decoding, else the beam width.
        length_penalty_weight: beam search's GNMT length penalty `alpha`.
        search: a search strategy (`keras_attention.decoding.get`: a
            strategy, its registered name or its config) in place of
            `beam_width` and `length_penalty_weight`.
        use_cudnn: passed to the LSTMs; on a GPU, export to ONNX needs False.
        **kwargs: standard `keras.layers.Layer` arguments (`name`, `dtype`).

    Example:

    ```python
    pointer = keras_attention.PointerNetwork(units=16, max_length=6)
    numbers = np.random.rand(2, 5, 1).astype("float32")         # (B, Ts, d)
    targets = np.argsort(numbers[..., 0], axis=1) + 1            # sorted order, 1-based
    logits = pointer([numbers, targets])   # (2, 5, 6): column 0 is the end
    ids = pointer(numbers)   # (2, 6): distinct ids in 1..5 (never padding), 0 = end
    ```
    """

    def __init__(
        self,
        units,
        attention_units=None,
        mask_chosen=True,
        max_length=None,
        beam_width=None,
        length_penalty_weight=0.0,
        use_cudnn="auto",
        search=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.units = _checks.check_positive_int(self, "units", units)
        self.attention_units = _checks.check_positive_int(self, "attention_units", attention_units, allow_none=True)
        self.max_length = _checks.check_positive_int(self, "max_length", max_length, allow_none=True)
        self.beam_width = _checks.check_positive_int(self, "beam_width", beam_width, allow_none=True)
        self.length_penalty_weight = _checks.check_number(
            self, "length_penalty_weight", length_penalty_weight, minimum=0
        )
        self.search = None if search is None else strategies.get(search)
        if self.search is not None and (self.beam_width is not None or self.length_penalty_weight):
            raise ValueError(
                f"PointerNetwork: give the search either as `search` ({self.search!r}) or as `beam_width` and "
                f"`length_penalty_weight`; got beam_width={beam_width!r}, "
                f"length_penalty_weight={length_penalty_weight!r} too."
            )
        self.mask_chosen = bool(mask_chosen)
        self.use_cudnn = use_cudnn
        self.supports_masking = True
        self.encoder = keras.layers.LSTM(
            self.units,
            return_sequences=True,
            return_state=True,
            use_cudnn=use_cudnn,
            dtype=self.dtype_policy,
            name="encoder",
        )
        self.decoder = keras.layers.LSTM(
            self.units, return_sequences=True, use_cudnn=use_cudnn, dtype=self.dtype_policy, name="decoder"
        )
        self.pointer = PointerAttention(self.attention_units or self.units, dtype=self.dtype_policy, name="pointer")

    # ---------------------------------------------------------------- checks

    @staticmethod
    def _split(inputs):
        """`(inputs, targets)` from `[inputs, targets]` (training) or `inputs`."""
        if isinstance(inputs, (list, tuple)):
            if len(inputs) != 2:
                raise ValueError(
                    "PointerNetwork: `inputs` must be the inputs `(B, Ts, d)` or the "
                    f"pair [inputs, targets]; got a sequence of {len(inputs)} items."
                )
            return inputs[0], inputs[1]
        return inputs, None

    @staticmethod
    def _is_pair_of_shapes(shape):
        return isinstance(shape, (list, tuple)) and len(shape) > 0 and isinstance(shape[0], (list, tuple))

    def _check_shapes(self, inputs_shape, targets_shape=None):
        inputs_shape = _checks.static_shape(inputs_shape)
        if len(inputs_shape) != 3:
            raise ValueError(f"PointerNetwork: `inputs` must have rank 3 (batch, Ts, d); got shape {inputs_shape}.")
        _checks.check_known_last_dim(self, "inputs", inputs_shape, when="")
        if targets_shape is not None:
            targets_shape = _checks.static_shape(targets_shape)
            if len(targets_shape) != 2:
                raise ValueError(
                    f"PointerNetwork: `targets` must have rank 2 (batch, M) of pointer ids; got shape {targets_shape}."
                )
            if not _checks.same_dim(inputs_shape[0], targets_shape[0]):
                raise ValueError(
                    "PointerNetwork: `inputs` and `targets` must have the same batch "
                    f"size; got shapes {inputs_shape} and {targets_shape}."
                )
        return inputs_shape, targets_shape

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

    @staticmethod
    def _inputs_mask(mask):
        if isinstance(mask, (list, tuple)):
            mask = mask[0]
        return mask

    # ----------------------------------------------------------------- build

    def build(self, inputs_shape):
        if self._is_pair_of_shapes(inputs_shape):
            inputs_shape, targets_shape = self._split(inputs_shape)
        else:
            targets_shape = None
        inputs_shape, _ = self._check_shapes(inputs_shape, targets_shape)
        dim = inputs_shape[-1]
        self.start_input = self.add_weight(name="start_input", shape=(dim,), initializer="random_uniform")
        self.end_memory = self.add_weight(name="end_memory", shape=(self.units,), initializer="random_uniform")
        self.encoder.build((None, None, dim))
        self.decoder.build((None, None, dim))
        self.pointer.build((None, None, self.units), (None, None, self.units))
        self.built = True

    # ------------------------------------------------------------ components

    def _encode(self, inputs, mask, training=None):
        """The pointed-at table, the memory, its valid positions and the state.

        Row 0 of each is the end / start; rows 1..Ts are the inputs.
        """
        inputs = ops.cast(inputs, self.compute_dtype)
        outputs, state_h, state_c = self.encoder(inputs, mask=mask, training=training)
        batch = ops.shape(inputs)[0]

        def first_row(vector, like):
            vector = ops.cast(ops.reshape(vector, (1, 1, -1)), like.dtype)
            return ops.broadcast_to(vector, (batch, 1, ops.shape(like)[-1]))

        elements = ops.concatenate([first_row(self.start_input, inputs), inputs], axis=1)
        memory = ops.concatenate([first_row(self.end_memory, outputs), outputs], axis=1)
        end_valid = ops.ones((batch, 1), "bool")
        if mask is None:
            valid = ops.ones((batch, ops.shape(memory)[1]), "bool")
        else:
            valid = ops.concatenate([end_valid, ops.cast(mask, "bool")], axis=1)
        return elements, memory, valid, [state_h, state_c]

    def _teacher_forced(self, elements, memory, valid, state, targets, training=None):
        targets = ops.cast(targets, "int32")
        batch, positions = ops.shape(targets)[0], ops.shape(memory)[1]
        previous = ops.concatenate([ops.zeros((batch, 1), "int32"), targets[:, :-1]], axis=1)
        # Out-of-range ids would make the gather fail on CPU and clamp under
        # XLA; clipping makes both behave the same.
        previous = ops.clip(previous, 0, positions - 1)
        decoder_inputs = ops.take_along_axis(elements, ops.expand_dims(previous, -1), axis=1)
        outputs = self.decoder(decoder_inputs, initial_state=state, training=training)
        chosen = None
        if self.mask_chosen:
            indices = ops.arange(positions, dtype="int32")
            picked = ops.logical_and(
                ops.equal(ops.expand_dims(previous, -1), indices), ops.greater(indices, END)
            )  # (B, M, Ts + 1): step i's input was position k
            chosen = ops.greater(ops.cumsum(ops.cast(picked, "int32"), axis=1), 0)
        return self.pointer(outputs, memory, memory_mask=valid, chosen_mask=chosen)

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
        return strategy.search(
            step_fn, state, runtime, start_tokens=END, end_token=END, max_length=max_length, length_limits=length_limits
        )

    def _stepper(self, constants):
        def step_fn(ids, state, time):
            return self.decode_step(ids, state, constants, time)

        return step_fn

    # ------------------------------------------------------------------ call

    def call(self, inputs, mask=None, training=None):
        inputs, targets = self._split(inputs)
        self._check_shapes(inputs.shape, None if targets is None else targets.shape)
        if targets is None:
            ids = self.decode(inputs, mask)["ids"]
            hypotheses = pointer_strategy(self.search, self.beam_width, self.length_penalty_weight).hypotheses
            return ids if hypotheses is None else ids[:, 0]
        elements, memory, valid, state = self._encode(inputs, self._inputs_mask(mask), training)
        return self._teacher_forced(elements, memory, valid, state, targets, training)

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_spec(self, inputs, mask=None, training=None):
        inputs, targets = self._split(inputs)
        inputs_shape, _ = self._check_shapes(inputs.shape, None if targets is None else targets.shape)
        if targets is None:
            self._check_decoding(self.max_length, self.beam_width)
            return keras.KerasTensor((inputs_shape[0], self.max_length), dtype="int32")
        positions = None if inputs_shape[1] is None else inputs_shape[1] + 1
        return keras.KerasTensor((inputs_shape[0], targets.shape[1], positions), dtype=logits_dtype(self.compute_dtype))

    def compute_mask(self, inputs, previous_mask=None):
        # Teacher-forced logits are real up to and including each row's first
        # end; decoded ids carry no mask (0 already marks the end).
        if not isinstance(inputs, (list, tuple)):
            return None
        is_end = ops.cast(ops.equal(ops.cast(inputs[1], "int32"), END), "int32")
        ends_before = ops.cumsum(is_end, axis=1) - is_end
        return ops.equal(ends_before, 0)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "attention_units": self.attention_units,
                "mask_chosen": self.mask_chosen,
                "max_length": self.max_length,
                "beam_width": self.beam_width,
                "length_penalty_weight": self.length_penalty_weight,
                "use_cudnn": self.use_cudnn,
                "search": None if self.search is None else keras.saving.serialize_keras_object(self.search),
            }
        )
        return config
