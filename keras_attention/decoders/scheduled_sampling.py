"""`ScheduledSamplingDecoder`: teacher forcing from target ids to logits,
feeding back the model's own previous prediction with a scheduled probability."""

import math

import keras
import numpy as np
from keras import ops

from keras_attention import _checks
from keras_attention._reductions import first_max_index
from keras_attention.cells.base import attention_cell, check_memory
from keras_attention.decoders.attention_decoder import run_cell, run_rnn

__all__ = ["ScheduledSamplingDecoder"]

SAMPLINGS = ("argmax", "sample")


def _layer(owner, argument, layer):
    return _checks.resolve_layer(
        owner, argument, layer, lambda given: isinstance(given, keras.layers.Layer), "a Keras layer"
    )


def _probability(owner, value):
    """A probability in [0, 1], or a `LearningRateSchedule` of the step (or its config)."""
    if isinstance(value, dict):
        value = keras.optimizers.schedules.deserialize(value)
    if isinstance(value, keras.optimizers.schedules.LearningRateSchedule):
        return value
    if not (_is_number(value) and 0 <= value <= 1):
        raise ValueError(
            f"{_checks.owner_name(owner)}: `sampling_probability` must be a number in [0, 1] or a "
            f"keras.optimizers.schedules.LearningRateSchedule of the training step; got {value!r}."
        )
    return float(value)


def _is_number(value):
    return (_checks.is_int(value) or isinstance(value, (float, np.floating))) and math.isfinite(value)


class _FeedbackCell(keras.layers.Layer):
    """One step of scheduled sampling around an attention cell, for a Keras
    RNN: its input is `[gold x_t ; coin_t ; u_t]`, its last state the
    previous step's read-out. Made per call; it owns no weights."""

    def __init__(self, step, state_size, output_size, **kwargs):
        super().__init__(**kwargs)
        self._step = step  # a function: not tracked as a sublayer
        self.state_size = state_size
        self.output_size = output_size
        self.built = True

    def call(self, inputs, states, training=None):
        return self._step(inputs, list(states), training)


@keras.saving.register_keras_serializable(package="keras_attention")
class ScheduledSamplingDecoder(keras.layers.Layer):
    """Teacher forcing from target ids to logits, with scheduled sampling.

    The training decoder of a sequence model, embedding and read-out
    included. At each step `t` of training the cell is fed the gold token
    `y_{t-1}` (teacher forcing) or, with probability `p`, the model's own
    prediction from the previous step:

        x_t = embedding(y_{t-1})                                with probability 1 - p
        x_t = embedding(choose(output_layer(o_{t-1})))          with probability p
        o_t, state = cell(x_t, state, memory);  logits_t = output_layer(o_t)

    (`[o ; x]` read out with `output_uses_inputs`, as `InferenceDecoder`
    does), `choose` the argmax or a draw from the softmax (`sampling`), the
    first step always fed its gold token. Training on its own predictions
    narrows the gap between teacher-forced training and decoding, where
    every input is a prediction (exposure bias). `p` is a number or a
    schedule over training steps: any
    `keras.optimizers.schedules.LearningRateSchedule` (its value clipped to
    [0, 1]), e.g. `PolynomialDecay(0.0, 5000, 0.25)` rises linearly from 0
    to 0.25 over 5000 steps; the layer counts its training calls (one per
    step of `fit`) in a non-trainable variable, saved with the model, so a
    resumed training resumes the schedule. Outside training, and with
    `p = 0`, it is plain teacher forcing: `output_layer(AttentionDecoder(cell)(
    embedding(ids), memory))`. The choice of token is not differentiated
    (the gradient reaches the embedding of the token fed, not the choice).
    Give `InferenceDecoder` the same cell, embedding and output layer to
    decode with the trained weights. Works with masks (padded targets keep
    the state), `fit(jit_compile=True)` and `.keras` files.

    Paper: Bengio et al. 2015, "Scheduled Sampling for Sequence Prediction
    with Recurrent Neural Networks", arXiv:1506.03099.

    Shapes: target_ids `(B, Tt)` int (the decoder inputs: the start token,
    then the target without its last token), memory `(B, Ts, dm)`,
    memory_mask `(B, Ts)`, target_mask `(B, Tt)` (default: the embedding's
    mask, with `mask_zero`), initial_state: the cell's states. Returns
    logits `(B, Tt, V)` (their Keras mask the target mask), and the
    alignments `(B, Tt, Ts)` with `return_alignments`.

    Args:
        cell: an attention cell of this library.
        embedding: layer mapping ids `(B, T)` to `(B, T, dy)`.
        output_layer: layer mapping cell outputs `(B, T, d)` to logits.
        sampling_probability: `p`, a number in [0, 1] (default 0: teacher
            forcing) or a `LearningRateSchedule` of the training step.
        sampling: "argmax" (feed the most likely token) or "sample" (a
            token drawn from the predicted distribution).
        output_uses_inputs: read out `[o_t ; x_t]`.
        return_alignments: also return the alignment history.
        seed: seed of the coin flips and draws.

    Example:

    ```python
    cell = keras_attention.AttentionGRUCell(16, keras_attention.AdditiveAttention(8))
    schedule = keras.optimizers.schedules.PolynomialDecay(0.0, 1000, 0.25)  # p: 0 -> 0.25 over 1000 steps
    decoder = keras_attention.ScheduledSamplingDecoder(
        cell, keras.layers.Embedding(12, 4, mask_zero=True), keras.layers.Dense(12), sampling_probability=schedule)
    logits = decoder(np.array([[1, 5, 6, 0]]), np.random.rand(1, 5, 6).astype("float32"), training=True)
    # logits: (1, 4, 12); decoder.current_sampling_probability(): 0.00025 after one step
    ```
    """

    def __init__(
        self,
        cell,
        embedding,
        output_layer,
        sampling_probability=0.0,
        sampling="argmax",
        output_uses_inputs=False,
        return_alignments=False,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cell = attention_cell(self, cell)
        self.embedding = _layer(self, "embedding", embedding)
        self.output_layer = _layer(self, "output_layer", output_layer)
        self.sampling_probability = _probability(self, sampling_probability)
        _checks.check_choice(self, "sampling", sampling, SAMPLINGS)
        self.sampling = sampling
        self.output_uses_inputs = _checks.check_bool(self, "output_uses_inputs", output_uses_inputs)
        self.return_alignments = _checks.check_bool(self, "return_alignments", return_alignments)
        self.seed = _checks.check_int(self, "seed", seed, 0, "an integer", allow_none=True)
        self.scheduled = self.sampling_probability != 0
        # Only a decoder that samples draws, and only a schedule counts:
        # teacher forcing keeps the weights of a plain decoder.
        self.seed_generator = keras.random.SeedGenerator(seed) if self.scheduled else None
        self.sampling_steps = None
        self.supports_masking = True

    @property
    def _has_schedule(self):
        return isinstance(self.sampling_probability, keras.optimizers.schedules.LearningRateSchedule)

    def build(self, target_ids_shape, memory_shape):
        if not self.embedding.built:
            self.embedding.build(target_ids_shape)
        embedded_shape = self.embedding.compute_output_shape(target_ids_shape)
        if not self.cell.built:
            self.cell.build(embedded_shape, memory_shape)
        if not self.output_layer.built:
            self.output_layer.build((None, None, self._readout_size(embedded_shape[-1])))
        if self._has_schedule:
            self.sampling_steps = self.add_weight(
                shape=(), dtype="int64", initializer="zeros", trainable=False, name="sampling_steps"
            )
        self.built = True

    def _readout_size(self, input_dim):
        return self.cell.output_size + (input_dim if self.output_uses_inputs else 0)

    def current_sampling_probability(self):
        """`p` at the current training step (the schedule's value, clipped to [0, 1])."""
        if not self._has_schedule:
            return self.sampling_probability
        step = 0.0 if self.sampling_steps is None else ops.cast(self.sampling_steps, "float32")
        return float(ops.clip(ops.cast(self.sampling_probability(step), "float32"), 0.0, 1.0))

    def call(self, target_ids, memory, memory_mask=None, target_mask=None, initial_state=None, training=None):
        check_memory(self, memory, memory_mask)
        embedded = self.embedding(target_ids)
        if target_mask is None:
            target_mask = self.embedding.compute_mask(target_ids)
        prepared = self.cell.prepare_memory(memory, memory_mask, owner=self)
        initial_state = self.cell.initial_state_for(prepared, ops.shape(target_ids)[0], initial_state)
        if training and self.scheduled:
            outputs, fed, alignments = self._scheduled(embedded, prepared, initial_state, target_mask, training)
        else:
            outputs, _, alignments = run_cell(
                self.cell,
                embedded,
                prepared,
                initial_state,
                target_mask,
                training,
                self.return_alignments,
                True,
                self.dtype_policy,
            )
            fed = embedded
        readout = ops.concatenate([outputs, ops.cast(fed, outputs.dtype)], -1) if self.output_uses_inputs else outputs
        logits = self.output_layer(readout, training=training)
        return (logits, alignments) if self.return_alignments else logits

    def _probability_now(self):
        """`p` for this training step (as a tensor), and the step counted."""
        if not self._has_schedule:
            return ops.convert_to_tensor(self.sampling_probability, "float32")
        value = self.sampling_probability(ops.cast(self.sampling_steps, "float32"))
        self.sampling_steps.assign_add(ops.ones((), "int64"))
        return ops.clip(ops.cast(value, "float32"), 0.0, 1.0)

    def _scheduled(self, embedded, prepared, initial_state, target_mask, training):
        """The loop with feedback: `(outputs, inputs fed, alignments or None)`."""
        batch, steps, dy = ops.shape(embedded)[0], ops.shape(embedded)[1], embedded.shape[-1]
        dtype = embedded.dtype
        # Coins and draws before the loop: a seed generator advanced inside
        # a loop would not compile with XLA.
        draws = keras.random.uniform((batch, steps, 2), seed=self.seed_generator)
        later = ops.expand_dims(ops.greater(ops.arange(steps), 0), 0)  # the first step is fed its gold token
        coins = ops.logical_and(ops.less(draws[..., 0], self._probability_now()), later)
        step_inputs = ops.concatenate(
            [embedded, ops.cast(ops.expand_dims(coins, -1), dtype), ops.cast(draws[..., 1:], dtype)], -1
        )
        readout_size = self._readout_size(dy)

        def step(inputs, states, training):
            inputs, noise = self.cell.split_step_noise(inputs)
            gold, coin, draw = inputs[:, :dy], inputs[:, dy], inputs[:, dy + 1]
            *cell_states, previous = states
            # The model's own prediction from the previous step; the choice is not differentiated.
            # (training=False: the prediction the model would make decoding, no dropout.)
            logits = self.output_layer(ops.expand_dims(ops.stop_gradient(previous), 1), training=False)
            predicted = self.embedding(ops.expand_dims(self._choose(ops.squeeze(logits, 1), draw), 1), training=False)
            predicted = ops.squeeze(predicted, 1)
            fed = ops.where(ops.expand_dims(ops.greater(coin, 0.5), 1), ops.cast(predicted, gold.dtype), gold)
            output, new_states, alignment = self.cell.step(fed, cell_states, prepared, training=training, noise=noise)
            readout = ops.concatenate([output, ops.cast(fed, output.dtype)], -1) if self.output_uses_inputs else output
            parts = [output, ops.cast(fed, output.dtype), ops.cast(alignment, output.dtype)]
            return ops.concatenate(parts, -1), list(new_states) + [readout]

        cell = _FeedbackCell(
            step, list(self.cell.state_size) + [readout_size], self.cell.output_size, dtype=self.dtype_policy
        )
        previous = ops.zeros((batch, readout_size), self.compute_dtype)
        outputs, _, rest = run_rnn(
            self.cell,
            cell,
            step_inputs,
            prepared,
            list(initial_state) + [previous],
            target_mask,
            training,
            True,
            True,
            self.dtype_policy,
            step_input_dim=dy,
            step_extra_dim=dy,
        )
        fed, alignments = rest[..., :dy], rest[..., dy:]
        return outputs, fed, alignments if self.return_alignments else None

    def _choose(self, logits, draw):
        """The token fed back: the argmax, or the inverse CDF at `draw` in [0, 1)."""
        if self.sampling == "argmax":
            return first_max_index(logits)  # ties: the lowest id, on every backend
        cumulative = ops.cumsum(ops.softmax(ops.cast(logits, "float32"), axis=-1), axis=-1)
        below = ops.sum(ops.cast(ops.less(cumulative, ops.expand_dims(ops.cast(draw, "float32"), 1)), "int32"), -1)
        return ops.minimum(below, ops.shape(logits)[-1] - 1)

    def compute_output_spec(
        self, target_ids, memory, memory_mask=None, target_mask=None, initial_state=None, training=None
    ):
        if not self.built:
            self.build(target_ids.shape, memory.shape)
        batch, steps = target_ids.shape[0], target_ids.shape[1]
        embedded_shape = self.embedding.compute_output_shape(target_ids.shape)
        readout = (batch, steps, self._readout_size(embedded_shape[-1]))
        logits = keras.KerasTensor(
            self.output_layer.compute_output_shape(readout), dtype=self.output_layer.compute_dtype
        )
        if not self.return_alignments:
            return logits
        return logits, keras.KerasTensor((batch, steps, memory.shape[1]), dtype=self.compute_dtype)

    def compute_mask(self, target_ids, previous_mask=None):
        mask = self.embedding.compute_mask(target_ids) if previous_mask is None else previous_mask
        return [mask, None] if self.return_alignments else mask

    def get_config(self):
        config = super().get_config()
        probability = self.sampling_probability
        config.update(
            {
                "cell": keras.saving.serialize_keras_object(self.cell),
                "embedding": keras.saving.serialize_keras_object(self.embedding),
                "output_layer": keras.saving.serialize_keras_object(self.output_layer),
                "sampling_probability": (
                    keras.optimizers.schedules.serialize(probability) if self._has_schedule else probability
                ),
                "sampling": self.sampling,
                "output_uses_inputs": self.output_uses_inputs,
                "return_alignments": self.return_alignments,
                "seed": self.seed,
            }
        )
        return config
