"""Additive (Bahdanau) attention."""

import math

import keras
from keras import ops

from keras_attention import _checks
from keras_attention._weights import WeightSettings
from keras_attention.layers.base import BaseAttention

__all__ = ["AdditiveAttention", "additive_score", "AUTO_CHUNK_BYTES", "TORCH_AUTO_CHUNK_BYTES", "auto_chunk_bytes"]

# The "auto" query chunk keeps one `(B, chunk, Tv, units)` block of the
# additive score under this many bytes (at least one query per chunk) on
# TensorFlow and JAX, where the chunked form measured as fast as the direct
# one or faster (its loop is compiled: a while loop, `lax.map`), with a
# fraction of the memory.
AUTO_CHUNK_BYTES = 64 * 2**20
# On PyTorch `ops.map` and `keras.remat` are Python-level (a loop of eager
# calls, `torch.utils.checkpoint`): chunking measured 1.6x to 2.3x slower
# there, so "auto" leaves blocks up to this size whole and bounds only
# larger ones, where memory outweighs the time (benchmarks/results.md,
# section 10).
TORCH_AUTO_CHUNK_BYTES = 2**30

_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8}


def check_chunk_size(layer, chunk_size):
    """`chunk_size` must be "auto", None or a positive integer."""
    if chunk_size is None or (isinstance(chunk_size, str) and chunk_size == "auto"):
        return chunk_size
    return _checks.check_int(layer, "chunk_size", chunk_size, 1, meaning='"auto", None or an integer')


def _dense_score(projected_query, projected_key, vector, activation):
    hidden = activation(ops.expand_dims(projected_query, 2) + ops.expand_dims(projected_key, 1))  # (B, Tq, Tv, units)
    # An einsum, not a tensordot (whose dynamic reshapes XLA cannot compile
    # inside a decoder's loop gradient) nor a broadcast multiply-and-sum
    # (whose backward tiles the (B, Tq, Tv, units) block, a slower decoder
    # step with or without XLA: benchmarks/results.md, decoder section).
    # The vector as a (units, 1) matrix: OpenVINO's CPU runtime mis-shapes the
    # reshapes TensorFlow writes around `bqvu,u->bqv` (a Reshape given (50, 1)
    # values for a (1, 2, 5, 1) pattern) and runs these. Measured in benchmark
    # 1's training step, the two forms in one process: 0.92x the time without
    # XLA, 1.01x with; a broadcast matmul was 1.08x with XLA.
    return ops.squeeze(ops.einsum("bqvu,uo->bqvo", hidden, ops.expand_dims(vector, -1)), -1)


def auto_chunk_bytes(backend=None):
    """The byte budget of one block under `chunk_size="auto"` on `backend`
    (default: the active Keras backend, read at call time)."""
    backend = keras.backend.backend() if backend is None else backend
    return TORCH_AUTO_CHUNK_BYTES if backend == "torch" else AUTO_CHUNK_BYTES


def _queries_per_chunk(chunk_size, projected_query, projected_key):
    """Queries per block: None (no chunking), a Python int, or (when the
    batch, key length or units are unknown until run time, on TensorFlow) a
    scalar tensor."""
    if chunk_size != "auto":
        return chunk_size
    itemsize = _ITEMSIZE.get(keras.backend.standardize_dtype(projected_query.dtype), 4)
    budget = auto_chunk_bytes()
    sizes = (projected_query.shape[0], projected_key.shape[1], projected_key.shape[-1])
    if all(_checks.is_int(size) for size in sizes):
        # An empty batch or memory makes an empty block: no size to bound.
        block = max(1, itemsize * math.prod(int(size) for size in sizes))
        return max(1, budget // block)
    if keras.backend.backend() != "tensorflow":
        # A size that is not a plain int here is symbolic (JAX's shape
        # polymorphism under jax.export / jax2tf, torch.export's SymInt):
        # these backends need the chunk count while tracing, and a count
        # computed from a symbolic size exists only at run time, so the
        # score is computed in one block (the same numbers).
        return None
    # Successive floor divisions: floor(floor(a / b) / c) == floor(a / (b c)),
    # without forming the (possibly int32-overflowing) product. A size of 0
    # divides as 1 (an empty block), not by zero.
    rows = budget // itemsize
    for size in (ops.shape(projected_query)[0], ops.shape(projected_key)[1], ops.shape(projected_key)[-1]):
        rows = rows // ops.maximum(size, 1)
    return ops.maximum(rows, 1)


def _chunked_score(projected_query, projected_key, vector, activation, rows):
    """The score computed `rows` queries at a time (the last chunk padded).

    `ops.map` (a TensorFlow `map_fn`: a while loop that XLA compiles and
    tf2onnx exports as an ONNX Loop) runs one chunk per iteration; each chunk
    is rematerialised (`keras.remat`), so training keeps only the chunk's
    inputs for the backward pass and recomputes its `(B, rows, Tv, units)`
    block there, one chunk at a time.
    """
    shape = ops.shape(projected_query)
    batch, query_length, units = shape[0], shape[1], shape[2]
    count = (query_length + rows - 1) // rows
    padded = ops.pad(projected_query, [[0, 0], [0, count * rows - query_length], [0, 0]])
    chunks = ops.transpose(ops.reshape(padded, (batch, count, rows, units)), (1, 0, 2, 3))
    block = keras.remat(lambda query, key, vec: _dense_score(query, key, vec, activation))
    scores = ops.map(lambda query: block(query, projected_key, vector), chunks)  # (n, B, rows, Tv)
    # The key length spelled out, not -1: ONNX cannot infer a -1 from an
    # empty tensor.
    scores = ops.reshape(ops.transpose(scores, (1, 0, 2, 3)), (batch, count * rows, ops.shape(projected_key)[1]))
    scores = scores[:, :query_length]
    if _checks.is_int(projected_query.shape[1]):
        # Keep a static query length static (slicing an unknown axis loses it).
        scores = ops.reshape(scores, (batch, projected_query.shape[1], ops.shape(projected_key)[1]))
    return scores


def additive_score(projected_query, projected_key, vector, activation=ops.tanh, chunk_size=None):
    """`e[b, i, j] = vector . activation(pq[b, i] + pk[b, j])`.

    The score of both Bahdanau's additive and Luong's concat attention once
    the query and key have been projected to the same `units` space.

    The direct form builds a `(B, Tq, Tv, units)` intermediate. With
    `chunk_size` it is built for at most that many queries at a time (the
    result is the same): an integer, or "auto" for as many queries as keep
    one block under `auto_chunk_bytes()` (64 MiB on TensorFlow and JAX,
    1 GiB on PyTorch). Inputs with no more queries than one chunk (a
    decoder's single query, say) take the direct form.
    """
    vector = ops.cast(ops.convert_to_tensor(vector), projected_query.dtype)
    rows = _queries_per_chunk(chunk_size, projected_query, projected_key)
    if rows is None:
        return _dense_score(projected_query, projected_key, vector, activation)
    query_length = projected_query.shape[1]
    if not _checks.is_int(query_length):
        query_length = None  # unknown until run time, or symbolic (jax.export)
    if query_length == 1:  # a decoder's step: nothing to chunk
        return _dense_score(projected_query, projected_key, vector, activation)
    if isinstance(rows, int):
        if query_length is not None and query_length <= rows:
            return _dense_score(projected_query, projected_key, vector, activation)
        return _chunked_score(projected_query, projected_key, vector, activation, rows)
    # "auto" with shapes known only at run time: decide there. The chunked
    # side is rematerialised as a whole: its gradient then recomputes the
    # chunk loop instead of reading the loop's saved state (TensorLists) out
    # of the conditional, state that XLA cannot stand in for on the side not
    # taken (a DT_VARIANT FakeParam, which it does not compile).
    chunked = keras.remat(lambda query, key, vec: _chunked_score(query, key, vec, activation, rows))
    return ops.cond(
        rows >= ops.shape(projected_query)[1],
        lambda: _dense_score(projected_query, projected_key, vector, activation),
        lambda: chunked(projected_query, projected_key, vector),
    )


@keras.saving.register_keras_serializable(package="keras_attention")
class AdditiveAttention(WeightSettings, BaseAttention):
    """Additive attention (Bahdanau et al. 2014).

    Score, for a query `q` and each key `k_i`:

        e_i = w_v^T tanh(W_q q + W_k k_i [+ b])
        alpha = softmax(e) over valid positions,   c = sum_i alpha_i v_i

    With `normalize=True` the score vector is weight-normalised (Salimans &
    Kingma 2016, as TensorFlow Addons' `BahdanauAttention(normalize=True)`):
    `w_v` becomes `g * w_v / ||w_v||` with a learned scalar `g` (initialised to
    `sqrt(1 / units)`), and the bias `b` is always used.

    The query and key sizes may differ. The key projection `W_k k_i + b` is
    done once per sequence (`project_key`); a decoder reuses it at each step.

    Paper: Bahdanau, Cho & Bengio, "Neural Machine Translation by Jointly
    Learning to Align and Translate", arXiv:1409.0473.

    Weights (stored as Keras kernels, `(input, output)`, so `W_q = query_kernel^T`):
        query_kernel `(dq, units)`, key_kernel `(dk, units)`,
        score_vector `(units,)`, bias `(units,)` (with `use_bias` or
        `normalize`), scale `()` (with `normalize`).

    Shapes: query `(B, dq)` or `(B, Tq, dq)`, value `(B, Tv, dv)`, key
    `(B, Tv, dk)` (default: value); output `(B, dv)` or `(B, Tq, dv)`. See
    `BaseAttention` for masks and the other call arguments.

    Args:
        units: size `u` of the hidden layer inside the score.
        use_bias: add the bias `b` inside the tanh.
        normalize: use the weight-normalised score vector (implies a bias).
        kernel_initializer: as in `keras.layers.Dense`.
        bias_initializer: as in `keras.layers.Dense`.
        kernel_regularizer: as in `keras.layers.Dense`.
        bias_regularizer: as in `keras.layers.Dense`.
        dropout: fraction of the attention weights dropped in training.
        seed: seed for the dropout.
        chunk_size: queries per block of the score's `(B, Tq, Tv, units)`
            intermediate. "auto" (default) keeps a block under a budget
            chosen per backend by measurement (`auto_chunk_bytes()`, read
            from `keras.backend.backend()` at call time) and computes
            smaller inputs in one piece; an integer fixes the chunk on
            every backend; None never chunks. Same result either way; the
            peak memory of the score is `B * chunk * Tv * units` elements
            instead of `B * Tq * Tv * units` (also in training: chunks are
            recomputed in the backward pass).

            The budgets: 64 MiB on TensorFlow and JAX, where chunking is
            as fast or faster; 1 GiB on PyTorch, where `ops.map` and
            `keras.remat` are Python-level and chunking is slower.
            Forward + backward, unchunked against chunked into 64 MiB
            blocks, with the peak memory of one step (`python
            benchmarks/run.py --only backends`, benchmarks/results.md
            section 10; medians of 7 alternating rounds on a 2-core CPU
            shared with other work, load average 5 to 10):

                backend     B, T, units   unchunked  chunked         peak MiB
                TensorFlow  32, 128, 128    206 ms    231 ms (1.12x)   554 -> 309
                TensorFlow   2, 1024, 64    736 ms    776 ms (1.05x)  1123 -> 293
                JAX         32, 128, 128    838 ms    534 ms (0.64x)   537 -> 155
                JAX          2, 1024, 64   5224 ms   3393 ms (0.65x)  1585 -> 218
                PyTorch     32, 128, 128   1777 ms   3391 ms (1.91x)   780 -> 226
                PyTorch      2, 1024, 64   5476 ms   7356 ms (1.34x)  1557 -> 233

            Other runs of the same cases (chunked / unchunked): an
            earlier one TensorFlow 0.76x and 0.87x, JAX 0.66x and 0.88x,
            PyTorch 1.64x and 2.27x; TensorFlow alone with 11 rounds 0.56x
            and 0.67x. Chunking is as fast or faster on TensorFlow and
            JAX (their loops are compiled) and slower on PyTorch in every
            run. On PyTorch pass an integer to bound the memory of blocks
            under 1 GiB too.

    Example:

    ```python
    layer = keras_attention.AdditiveAttention(units=16)
    decoder_state = np.random.rand(2, 8).astype("float32")      # (B, dq)
    encoder_states = np.random.rand(2, 5, 12).astype("float32")  # (B, Tv, dv)
    context, weights = layer(decoder_state, encoder_states,
                             return_attention_scores=True)
    # context: (2, 12), weights: (2, 5), each row of weights sums to 1
    ```
    """

    def __init__(
        self,
        units,
        use_bias=False,
        normalize=False,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        dropout=0.0,
        seed=None,
        chunk_size="auto",
        **kwargs,
    ):
        super().__init__(dropout=dropout, seed=seed, **kwargs)
        self.units = _checks.check_positive_int(self, "units", units)
        self.chunk_size = check_chunk_size(self, chunk_size)
        self.use_bias = bool(use_bias)
        self.normalize = bool(normalize)
        self._set_weight_settings(kernel_initializer, kernel_regularizer, bias_initializer, bias_regularizer)

    def build_score(self, query_dim, key_dim):
        self.query_kernel = self._add_kernel("query_kernel", (query_dim, self.units))
        self.key_kernel = self._add_kernel("key_kernel", (key_dim, self.units))
        self.score_vector = self._add_kernel("score_vector", (self.units,))
        self.bias = None
        if self.use_bias or self.normalize:
            self.bias = self._add_bias("bias", (self.units,))
        self.scale = None
        if self.normalize:
            self.scale = self.add_weight(
                name="scale",
                shape=(),
                initializer=keras.initializers.Constant(math.sqrt(1.0 / self.units)),
            )

    def project_query(self, query):
        return ops.matmul(query, self.query_kernel)

    def project_key(self, key):
        projected = ops.matmul(key, self.key_kernel)
        # The bias sits with the keys: it is then added once per sequence
        # rather than once per decoder step.
        if self.bias is not None:
            projected = projected + self.bias
        return projected

    def score(self, projected_query, projected_key):
        vector = ops.convert_to_tensor(self.score_vector)
        if self.normalize:
            vector = self.scale * vector / ops.sqrt(ops.sum(ops.square(vector)))
        return additive_score(projected_query, projected_key, vector, chunk_size=self.chunk_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "units": self.units,
                "use_bias": self.use_bias,
                "normalize": self.normalize,
                "chunk_size": self.chunk_size,
                **self._weight_settings_config(),
            }
        )
        return config
