"""Pointer network (Vinyals et al. 2015): an LSTM encoder-decoder whose output is a pointer."""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention.decoding import strategies
from keras_attention.layers.pointer import PointerAttention, logits_dtype
from keras_attention.models.pointer_decoding import PointerDecoding, check_pointer_options
from keras_attention.models.pointer_search import END

__all__ = ["END", "PointerNetwork"]


@keras.saving.register_keras_serializable(package="keras_attention")
class PointerNetwork(PointerDecoding, keras.layers.Layer):
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
    step function for a search of one's own. The options named in
    `runtime_options` are inputs of `layer(inputs, options={name: value})`
    too, as the decoders' are: `option_inputs()` gives them as optional
    `(B,)` `keras.Input`s, so an exported functional model takes them per
    request (a value left out is the constructor's; a bad one is refused,
    naming the option, in Keras, the SavedModel and ONNX serving).

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
        runtime_options: the options `call` takes per request (`options=`):
            names among the strategy's run-time fields, `max_length` (at
            most the constructor's) and `min_length` (default 0).
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
        runtime_options=None,
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
        self.runtime_options = check_pointer_options(self, runtime_options, self.search_strategy(), self.max_length)
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

    # ------------------------------------------------------------------ call

    def call(self, inputs, mask=None, training=None, options=None, inputs_mask=None):
        # Keras fills `inputs_mask`, not `mask`, from the inputs' Keras mask
        # when `options` holds tensors (more than one tensor argument).
        mask = inputs_mask if mask is None else mask
        inputs, targets = self._split(inputs)
        self._check_shapes(inputs.shape, None if targets is None else targets.shape)
        if targets is None:
            values = self._option_values(options, ops.shape(inputs)[0])
            ids = self.decode(inputs, mask, options=values)["ids"]
            return ids if self.search_strategy().hypotheses is None else ids[:, 0]
        if any(value is not None for value in (options or {}).values()):
            raise ValueError(
                f"PointerNetwork: `options` set the decoding; teacher forcing ([inputs, targets]) takes none; "
                f"got {sorted(options)}."
            )
        elements, memory, valid, state = self._encode(inputs, self._inputs_mask(mask), training)
        return self._teacher_forced(elements, memory, valid, state, targets, training)

    # ---------------------------------------------------- shapes, masks, config

    def compute_output_spec(self, inputs, mask=None, training=None, options=None, inputs_mask=None):
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
                "runtime_options": list(self.runtime_options),
            }
        )
        return config
