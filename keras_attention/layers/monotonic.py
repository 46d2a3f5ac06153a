"""Monotonic attention (Raffel et al. 2017): Bahdanau and Luong variants, as in tfa.seq2seq.

At each decoder step the memory is scanned left to right from where the
previous step attended, and each position `j` is "chosen" with probability
`p_j = sigmoid(e_j)`. The training-time alignment is the expectation of that
hard process given the previous step's alignment; at test time the process
itself ("hard" mode) runs in linear time.
"""

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._precision import softmax_dtype
from keras_attention.layers.additive import AdditiveAttention
from keras_attention.layers.dot import dot_scores, scale_config, use_scale_argument
from keras_attention.layers.general import GeneralAttention
from keras_attention.layers.monotonic_alignment import MODES, monotonic_alignment

__all__ = ["BahdanauMonotonicAttention", "LuongMonotonicAttention", "monotonic_alignment"]


class _Monotonic:
    """What both monotonic variants add to their score layer."""

    # The alignment is a probability of stopping, not a softmax to drop from.
    # `seed` seeds the pre-sigmoid noise.
    base_arguments = ("seed",)

    def _init_monotonic(self, sigmoid_noise, score_bias_init, mode, seed):
        _checks.check_choice(self, "mode", mode, MODES)
        self.sigmoid_noise = _checks.check_number(self, "sigmoid_noise", sigmoid_noise, minimum=0)
        self.score_bias_init = _checks.check_number(self, "score_bias_init", score_bias_init)
        self.mode = mode
        self.noise_seed_generator = keras.random.SeedGenerator(seed) if self.sigmoid_noise > 0 else None

    def _build_score_bias(self):
        self.score_bias = self.add_weight(
            name="score_bias", shape=(), initializer=keras.initializers.Constant(self.score_bias_init)
        )

    def initial_alignment(self, values):
        """`(B, Ts)` one-hot at position 0, in the dtype of `values (B, Ts, d)`."""
        values = ops.convert_to_tensor(values)
        first = ops.equal(ops.arange(ops.shape(values)[1]), 0)
        zeros = ops.zeros_like(values[..., 0])
        return ops.where(first, ops.ones_like(zeros), zeros)

    # The decoder-step protocol: the state is the previous step's alignment,
    # one entry per memory position.

    @property
    def attention_state_size(self):
        return [None]

    def initial_attention_state(self, values):
        return [self.initial_alignment(values)]

    def step_noise(self, batch_size, steps, memory_length, training=None):
        """The pre-sigmoid noise of `steps` decoder steps in training, drawn
        before the loop (see `BaseAttention.step_noise`): `(B, steps, Ts)`
        standard normal, or None outside training or without `sigmoid_noise`."""
        if not (training and self.sigmoid_noise > 0):
            return None
        return keras.random.normal((batch_size, steps, memory_length), seed=self.noise_seed_generator)

    def attend_step(self, query, projected_key, value, mask=None, attention_state=(), training=None, noise=None):
        (previous_alignment,) = attention_state
        context, alignment = self._attend_one_query(
            query,
            projected_key,
            value,
            mask,
            training,
            noise=noise,
            previous_alignment=ops.expand_dims(previous_alignment, 1),
        )
        return context, alignment, [alignment]

    def attend(
        self, projected_query, projected_key, value, mask=None, training=None, previous_alignment=None, noise=None
    ):
        """One monotonic step: `(context (B, Tq, dv), alignment (B, Tq, Ts))`.

        `previous_alignment (B, Tq, Ts)` (or broadcastable) defaults to the
        initial alignment, one-hot at position 0. `noise` (broadcastable to
        the alignment): standard normal draws for the pre-sigmoid noise in
        training, drawn before a decoder's loop (`step_noise`); None draws
        them here.
        """
        if previous_alignment is None:
            previous_alignment = ops.expand_dims(self.initial_alignment(value), 1)
        scores = self.score(projected_query, projected_key)
        # Probability maths in float32 (float64 for float64 layers): a float16
        # product of many (1 - p) underflows within a few dozen positions.
        work = softmax_dtype(scores.dtype)
        energy = ops.cast(scores, work) + ops.cast(self.score_bias, work)
        if training and self.sigmoid_noise > 0:
            # Raffel et al. add the noise in training only, to push the
            # energies out of the sigmoid's linear range so that the hard
            # test-time process matches the trained expectation.
            if noise is None:
                noise = keras.random.normal(ops.shape(energy), dtype=work, seed=self.noise_seed_generator)
            energy = energy + self.sigmoid_noise * ops.cast(noise, work)
        if self.mode == "hard":
            p_choose = ops.cast(ops.greater(energy, 0.0), work)
        else:
            p_choose = ops.sigmoid(energy)
        if mask is not None:
            mask = ops.broadcast_to(ops.cast(mask, "bool"), ops.shape(p_choose))
            p_choose = ops.where(mask, p_choose, ops.zeros_like(p_choose))
        # Left to broadcast in the arithmetic, not with broadcast_to: inside a
        # decoder's loop the gradient of broadcast_to reads the target shape
        # saved from the forward pass, which XLA cannot take as a constant.
        previous_alignment = ops.cast(previous_alignment, work)
        alignment = monotonic_alignment(p_choose, previous_alignment, self.mode)
        alignment = ops.cast(alignment, value.dtype)
        return ops.matmul(alignment, value), alignment

    def _monotonic_config(self, config):
        config.update({"sigmoid_noise": self.sigmoid_noise, "score_bias_init": self.score_bias_init, "mode": self.mode})
        return config


_SHARED_DOC = """
    `p_j` is the probability that the hard process stops at (chooses) memory
    position `j`; the energy adds a learned scalar bias `r` (initialised to
    `score_bias_init`) to the score. Given the previous step's alignment
    `a_prev` (at the first step one-hot at position 0):

        p_j = sigmoid(e_j + r + sigmoid_noise * N(0, 1))     (noise in training only)
        recursive: q_j = (1 - p_{j-1}) q_{j-1} + a_prev_j,    a_j = p_j q_j
        parallel:  the same alignment in closed form (tfa's),
                   a = p * cumprod_excl(1 - p) * cumsum(a_prev / clip(cumprod_excl(1 - p), 1e-10, 1))
        hard:      p_j = 1[e_j + r > 0],  a = one-hot at the first j at or after
                   the previous choice with p_j = 1 (all zeros if there is none)
        c = sum_j a_j v_j

    The alignment need not sum to 1: the mass not placed is the probability
    that the process ran off the end of the memory. That is expected of
    monotonic attention; the context is then shrunk towards zero. Padded
    memory positions get `p = 0`, hence exactly zero alignment. In "hard"
    mode, a step that chooses nothing gives a zero alignment, and so do all
    later steps (as in tfa).

    Modes: "parallel" (the default) is one vectorised pass, exact up to
    rounding except where `p` is so close to 1 that `cumprod_excl(1 - p)`
    falls under 1e-10; "recursive" is the exact recursion, a loop over the
    memory positions (slower); "hard" is the test-time process (it has no
    gradient with respect to the energies). Train in a soft mode and decode
    with a "hard" copy of the layer (same weights, `mode="hard"`).

    `sigmoid_noise` is added only when `training` is true: Raffel et al. add
    it in training to push the energies towards saturation, and inference
    stays deterministic (tfa added it whenever `sigmoid_noise > 0`).

    In a decoder cell (`AttentionGRUCell`, `AttentionLSTMCell`,
    `AttentionWrapper`) the previous alignment is the attention's own state
    (`attention_state_size`, `attend_step`), carried after the cell's states
    and starting from `initial_alignment(memory)`. Called on its own, the layer does one
    step from the initial alignment for each query; a custom loop calls
    `attend(projected_query, projected_key, value, mask, previous_alignment=...)`.
    The probability maths runs in float32 (float64 for float64 layers).

    Paper: Raffel, Luong, Liu, Weiss & Eck 2017, "Online and Linear-Time
    Attention by Enforcing Monotonic Alignments", arXiv:1704.00784.
"""


@keras.saving.register_keras_serializable(package="keras_attention")
class BahdanauMonotonicAttention(_Monotonic, AdditiveAttention):
    __doc__ = (
        """Monotonic attention with Bahdanau's additive energy (tfa's `BahdanauMonotonicAttention`).

    Energy, for the query `q` and each key `k_j`:

        e_j = w_v^T tanh(W_q q + W_k k_j [+ b])

    (with `normalize=True`, `w_v` is weight-normalised: `g * w_v / ||w_v||`,
    and the bias `b` is used, as `AdditiveAttention`).
"""
        + _SHARED_DOC
        + """
    Weights: those of `AdditiveAttention` (query_kernel `(dq, units)`,
    key_kernel `(dk, units)`, score_vector `(units,)`, bias, scale) and
    score_bias `()`.

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Ts, dv)`, key
    `(B, Ts, dk)` (default: value); output `(B, dv)` or `(B, Tq, dv)`;
    alignment (`return_attention_scores=True`) `(B, Ts)` or `(B, Tq, Ts)`.
    `attend` takes and returns rank-3 tensors, `previous_alignment (B, Tq, Ts)`.

    Args:
        units: size of the hidden layer inside the score.
        normalize: weight-normalise the score vector (implies a bias).
        sigmoid_noise: standard deviation (>= 0) of the pre-sigmoid noise in training.
        score_bias_init: initial value of the scalar bias `r` (tfa advises
            a negative value such as -4 for long memories, so that the process
            does not stop at the first positions).
        mode: "parallel", "recursive" or "hard".
        use_bias: add `b` inside the tanh without weight normalisation.
        kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer: as in `keras.layers.Dense`.
        seed: seed for the noise.

    Example:

    ```python
    attention = keras_attention.BahdanauMonotonicAttention(8, score_bias_init=-1.0)
    cell = keras_attention.AttentionGRUCell(16, attention)
    decoder = keras_attention.AttentionDecoder(cell, return_alignments=True)
    targets = np.random.rand(2, 4, 5).astype("float32")     # (B, Tt, dy)
    memory = np.random.rand(2, 7, 6).astype("float32")      # (B, Ts, dv)
    outputs, alignments = decoder(targets, memory)
    # alignments: (2, 4, 7); each row sums to at most 1
    one_step = attention(np.random.rand(2, 16).astype("float32"), memory)  # (2, 6)
    ```
    """
    )

    def __init__(
        self,
        units,
        normalize=False,
        sigmoid_noise=0.0,
        score_bias_init=0.0,
        mode="parallel",
        use_bias=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(
            units,
            use_bias=use_bias,
            normalize=normalize,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            seed=seed,
            **kwargs,
        )
        self._init_monotonic(sigmoid_noise, score_bias_init, mode, seed)

    def build_score(self, query_dim, key_dim):
        super().build_score(query_dim, key_dim)
        self._build_score_bias()

    def get_config(self):
        return self._monotonic_config(super().get_config())


@keras.saving.register_keras_serializable(package="keras_attention")
class LuongMonotonicAttention(_Monotonic, GeneralAttention):
    __doc__ = (
        """Monotonic attention with Luong's bilinear energy (tfa's `LuongMonotonicAttention`).

    Energy, for the query `q` (size `dq`) and each key `k_j` (size `dk`):

        e_j = k_j^T W q            (use_scale=False)
        e_j = g * k_j^T W q        (use_scale=True, learned scalar g initialised to 1)

    tfa's `q^T (W_mem k_j)` with its memory layer `W_mem = W^T` (its `units`
    is the query size, here inferred). The keys are projected once per sequence.
"""
        + _SHARED_DOC
        + """
    Weights: bilinear_kernel `(dk, dq)` = `W`, scale `()` (with `use_scale=True`),
    score_bias `()`.

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Ts, dv)`, key
    `(B, Ts, dk)` (default: value); output `(B, dv)` or `(B, Tq, dv)`;
    alignment (`return_attention_scores=True`) `(B, Ts)` or `(B, Tq, Ts)`.
    `attend` takes and returns rank-3 tensors, `previous_alignment (B, Tq, Ts)`.

    Args:
        use_scale: learn the scalar `g` (default False).
        sigmoid_noise: standard deviation (>= 0) of the pre-sigmoid noise in training.
        score_bias_init: initial value of the scalar bias `r`.
        mode: "parallel", "recursive" or "hard".
        kernel_initializer, kernel_regularizer: for `W`.
        seed: seed for the noise.
        scale: deprecated name of `use_scale` (a `DeprecationWarning`);
            configs saved with it load unchanged.

    Example:

    ```python
    attention = keras_attention.LuongMonotonicAttention(use_scale=True, score_bias_init=1.0)
    cell = keras_attention.AttentionWrapper(keras.layers.GRUCell(8), attention)
    targets = np.random.rand(2, 4, 5).astype("float32")     # (B, Tt, dy)
    memory = np.random.rand(2, 7, 6).astype("float32")      # (B, Ts, dv)
    decoder = keras_attention.AttentionDecoder(cell, return_alignments=True)
    outputs, alignments = decoder(targets, memory)  # soft ("parallel"), for training
    # Test time: the same weights with the hard process.
    config = cell.get_config()
    config["attention"]["config"]["mode"] = "hard"
    hard_cell = keras_attention.AttentionWrapper.from_config(config)
    hard_decoder = keras_attention.AttentionDecoder(hard_cell, return_alignments=True)
    hard_decoder(targets, memory)
    hard_cell.set_weights(cell.get_weights())
    outputs, hard_alignments = hard_decoder(targets, memory)
    # hard_alignments: (2, 4, 7), each row one-hot or zero, positions non-decreasing
    ```
    """
    )

    def __init__(
        self,
        use_scale=None,
        sigmoid_noise=0.0,
        score_bias_init=0.0,
        mode="parallel",
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        seed=None,
        scale=None,
        **kwargs,
    ):
        use_scale = use_scale_argument(self, use_scale, scale)
        super().__init__(
            kernel_initializer=kernel_initializer, kernel_regularizer=kernel_regularizer, seed=seed, **kwargs
        )
        self.use_scale = use_scale
        self._init_monotonic(sigmoid_noise, score_bias_init, mode, seed)

    def build_score(self, query_dim, key_dim):
        super().build_score(query_dim, key_dim)
        self.scale = None
        if self.use_scale:
            self.scale = self.add_weight(name="scale", shape=(), initializer="ones")
        self._build_score_bias()

    def score(self, projected_query, projected_key):
        scores = dot_scores(projected_query, projected_key)
        if self.scale is not None:
            scores = scores * self.scale
        return scores

    def get_config(self):
        config = self._monotonic_config(super().get_config())
        config["use_scale"] = self.use_scale
        return config

    @classmethod
    def from_config(cls, config):
        return super().from_config(scale_config(config))
