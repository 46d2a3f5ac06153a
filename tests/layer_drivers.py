"""One driver per public layer: how to call it on a query/value batch with
masks, and what its attention weights must look like.

Every driver takes the same inputs, so one table serves the tests that run
every layer the same way (half precision, empty inputs, the property-based
test): `query (B, Tq, D)`, `value (B, Tv, D)` (also the sequence of the
sequence layers), boolean `query_valid (B, Tq)` and `value_valid (B, Tv)`.
`run` works on eager tensors and on `keras.Input`s alike, so a driver also
builds functional models.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np
from keras import ops

import keras_attention as ka

D = 4  # the size of every feature axis
VOCABULARY = 7  # ids of the inference decoders; 1 starts, 2 ends
MAX_LENGTH = 3


@dataclasses.dataclass(frozen=True)
class Driver:
    id: str
    make: Callable  # (dtype) -> layer
    run: Callable  # (layer, query, value, query_valid, value_valid) -> {name: tensor}
    # The weights output's expected pattern: "soft" (rows sum to 1 over the
    # allowed positions, 0 with none), "hard" (one-hot or zero rows),
    # "at_most_one" (monotonic: rows sum to at most 1), or None.
    weights: str | None = "soft"
    # (query_valid, value_valid) -> boolean array broadcastable to the
    # weights: where they may be non-zero.
    allowed: Callable | None = None
    # Outputs that are ids (exact, integer) rather than floats.
    ids: tuple = ()
    # Draws random numbers in inference (sampling): two copies differ.
    random: bool = False

    @property
    def zero_context(self):
        """Whether `output` is a weighted sum of values, zero on a row with
        no allowed position (the attention layers; not the decoders, whose
        outputs carry a state)."""
        return self.allowed is not None and not self.id.startswith(("decoder", "greedy", "beam", "sample"))


def _cross(query_valid, value_valid):
    return query_valid[:, :, None] & value_valid[:, None, :]


def _keys(query_valid, value_valid):
    return value_valid[:, None, :]


def _self(query_valid, value_valid):
    return value_valid[:, :, None] & value_valid[:, None, :]


def _score(make, weights="soft"):
    def run(layer, query, value, query_valid, value_valid):
        context, scores = layer(
            query, value, query_mask=query_valid, value_mask=value_valid, return_attention_scores=True
        )
        return {"output": context, "weights": scores}

    return make, run, weights, _cross


def _self_attention(**options):
    def allowed(query_valid, value_valid):
        length = value_valid.shape[1]
        rows, cols = np.arange(length)[:, None], np.arange(length)[None, :]
        band = np.ones((length, length), bool)
        if options.get("causal"):
            band &= cols <= rows
        window = options.get("window")
        if window is not None:
            if options.get("causal"):
                band &= cols > rows - window
            else:
                band &= (cols - rows >= -(window // 2)) & (cols - rows <= (window - 1) // 2)
        return _self(query_valid, value_valid) & band[None]

    def run(layer, query, value, query_valid, value_valid):
        output, weights = layer(value, mask=value_valid, return_attention_scores=True)
        return {"output": output, "weights": weights}

    return (lambda dtype: ka.SelfAttention(3, dtype=dtype, **options)), run, "soft", allowed


def _pooling():
    def run(layer, query, value, query_valid, value_valid):
        pooled, weights = layer(value, mask=value_valid, return_attention_scores=True)
        return {"output": pooled, "weights": weights}

    return (lambda dtype: ka.AttentionPooling(3, dtype=dtype)), run, "soft", lambda q, v: v


def _targeted(mode):
    def run(layer, query, value, query_valid, value_valid):
        # The target: the first valid position of each example.
        first = ops.equal(ops.cumsum(ops.cast(value_valid, "int32"), axis=1), 1)
        target = ops.logical_and(first, value_valid)
        output, scores = layer(value, target, hidden_mask=value_valid, return_attention_scores=True)
        weights = scores if mode == "vanilla" else scores["whole"]
        return {"output": output, "weights": weights}

    return (lambda dtype: ka.TargetedAttention(3, mode=mode, dtype=dtype)), run, "soft", lambda q, v: v


def _multi_head(explicit):
    def run(layer, query, value, query_valid, value_valid):
        if not explicit:
            return {"output": layer(query, value, query_mask=query_valid, value_mask=value_valid)}
        output, weights = layer(
            query, value, query_mask=query_valid, value_mask=value_valid, return_attention_scores=True
        )
        return {"output": output, "weights": weights}

    def allowed(query_valid, value_valid):
        return _cross(query_valid, value_valid)[:, None]

    make = lambda dtype: ka.MultiHeadAttention(2, 3, dtype=dtype)  # noqa: E731
    return make, run, ("soft" if explicit else None), allowed


def _pointer():
    def run(layer, query, value, query_valid, value_valid):
        return {"logits": layer(query, value, memory_mask=value_valid)}

    return (lambda dtype: ka.PointerAttention(3, dtype=dtype)), run, None, None


def _decoder(make_cell, weights="soft"):
    def make(dtype):
        return ka.AttentionDecoder(make_cell(dtype), return_alignments=True, dtype=dtype)

    def run(layer, query, value, query_valid, value_valid):
        outputs, alignments = layer(query, value, memory_mask=value_valid)
        return {"output": outputs, "weights": alignments}

    return make, run, weights, _keys


def _inference(method, attention):
    def make(dtype):
        cell = ka.AttentionGRUCell(5, attention(dtype), dtype=dtype)
        return ka.InferenceDecoder(
            cell,
            keras.layers.Embedding(VOCABULARY, 3, dtype=dtype),
            keras.layers.Dense(VOCABULARY, dtype=dtype),
            1,
            2,
            MAX_LENGTH,
            method=method,
            beam_width=3,
            dtype=dtype,
        )

    def run(layer, query, value, query_valid, value_valid):
        result = layer(value, memory_mask=value_valid)
        return {
            "ids": result["ids"],
            "lengths": result["lengths"],
            "scores": result["scores"],
            "weights": result["alignments"],
        }

    def allowed(query_valid, value_valid):
        valid = value_valid[:, None, :]
        return valid[:, None] if method == "beam" else valid

    return make, run, "soft_or_finished", allowed


def _pointer_network():
    def run(layer, query, value, query_valid, value_valid):
        return {"ids": layer(value, mask=value_valid)}

    return (lambda dtype: ka.PointerNetwork(5, max_length=MAX_LENGTH, beam_width=2, dtype=dtype)), run, None, None


_TABLE = {
    "additive": _score(lambda dtype: ka.AdditiveAttention(3, use_bias=True, dtype=dtype)),
    "additive_normalized": _score(lambda dtype: ka.AdditiveAttention(3, normalize=True, dtype=dtype)),
    "dot": _score(lambda dtype: ka.DotAttention(dtype=dtype)),
    "dot_scaled": _score(lambda dtype: ka.DotAttention(use_scale=True, dtype=dtype)),
    "scaled_dot": _score(lambda dtype: ka.ScaledDotAttention(dtype=dtype)),
    "general": _score(lambda dtype: ka.GeneralAttention(dtype=dtype)),
    "concat_linear": _score(lambda dtype: ka.ConcatAttention(dtype=dtype)),
    "concat": _score(lambda dtype: ka.ConcatAttention(units=3, dtype=dtype)),
    "hard_dot": _score(lambda dtype: ka.HardAttention("dot", dtype=dtype), "hard"),
    "hard_additive": _score(lambda dtype: ka.HardAttention(ka.AdditiveAttention(3), dtype=dtype), "hard"),
    "hard_sample": _score(lambda dtype: ka.HardAttention("general", mode="sample", seed=1, dtype=dtype), "hard"),
    "bahdanau_monotonic": _score(lambda dtype: ka.BahdanauMonotonicAttention(3, dtype=dtype), "at_most_one"),
    "luong_monotonic": _score(
        lambda dtype: ka.LuongMonotonicAttention(use_scale=True, mode="recursive", dtype=dtype), "at_most_one"
    ),
    "multi_head": _multi_head(explicit=False),
    "multi_head_weights": _multi_head(explicit=True),
    "self_attention": _self_attention(),
    "self_attention_additive": _self_attention(score="additive"),
    "self_attention_causal_window": _self_attention(causal=True, window=2),
    "self_attention_window": _self_attention(window=3),
    "pooling": _pooling(),
    "targeted_vanilla": _targeted("vanilla"),
    "targeted_gated": _targeted("gated"),
    "pointer": _pointer(),
    "decoder_gru_additive": _decoder(lambda dtype: ka.AttentionGRUCell(5, ka.AdditiveAttention(3), dtype=dtype)),
    "decoder_wrapper_monotonic": _decoder(
        lambda dtype: ka.AttentionWrapper(
            keras.layers.GRUCell(5, dtype=dtype), ka.BahdanauMonotonicAttention(3), dtype=dtype
        ),
        "at_most_one",
    ),
    "decoder_lstm_scaled_dot": _decoder(lambda dtype: ka.AttentionLSTMCell(D, ka.ScaledDotAttention(), dtype=dtype)),
    "greedy_additive": _inference("greedy", lambda dtype: ka.AdditiveAttention(3)),
    "beam_general": _inference("beam", lambda dtype: ka.GeneralAttention()),
    "sample_concat": _inference("sample", lambda dtype: ka.ConcatAttention(3)),
    "pointer_network": _pointer_network(),
}

_DECODING = ("greedy", "beam", "sample", "pointer_network")
DRIVERS = {
    id: Driver(id, make, run, weights, allowed, ("ids", "lengths") if id.startswith(_DECODING) else (), "sample" in id)
    for id, (make, run, weights, allowed) in _TABLE.items()
}


def check_weights(driver, weights, query_valid, value_valid, atol=1e-5):
    """The weights' pattern: zero where not allowed, rows as `driver.weights` says."""
    weights = np.asarray(weights, np.float64)
    assert np.isfinite(weights).all(), f"{driver.id}: weights not finite"
    allowed = np.broadcast_to(driver.allowed(query_valid, value_valid), weights.shape)
    assert (weights[~allowed] == 0).all(), f"{driver.id}: weight on a masked position"
    assert (weights >= 0).all(), f"{driver.id}: negative weight"
    sums = weights.sum(-1)
    any_allowed = allowed.any(-1)
    if driver.weights == "soft":
        np.testing.assert_allclose(sums, np.where(any_allowed, 1.0, 0.0), atol=atol, err_msg=driver.id)
    elif driver.weights == "soft_or_finished":  # rows after a decoding's end are zero
        assert (np.isclose(sums, 1.0, atol=atol) | (sums == 0)).all(), driver.id
        assert (sums[~any_allowed] == 0).all(), driver.id
    elif driver.weights == "hard":
        assert np.isin(weights, (0.0, 1.0)).all(), driver.id
        np.testing.assert_array_equal(sums, np.where(any_allowed, 1.0, 0.0), err_msg=driver.id)
    elif driver.weights == "at_most_one":
        assert (sums <= 1.0 + atol).all(), driver.id


def check_results(driver, results, query_valid, value_valid, atol=1e-5, label=""):
    """One row of results per example, finite floats, and the weights' pattern."""
    batch = query_valid.shape[0]
    for name, value in results.items():
        value = np.asarray(value)
        assert value.shape[:1] == (batch,), f"{driver.id} {name}{label}: shape {value.shape} for a batch of {batch}"
        if name not in driver.ids:
            assert np.isfinite(value.astype(np.float64)).all(), f"{driver.id} {name}{label} is not finite"
    if driver.weights is not None and "weights" in results:
        check_weights(driver, results["weights"], query_valid, value_valid, atol=atol)


def driver_params(drivers=None):
    import pytest

    drivers = list(DRIVERS.values()) if drivers is None else drivers
    return pytest.mark.parametrize("driver", drivers, ids=[d.id for d in drivers])


def data(rng, batch, query_length, value_length, scale=1.0, query_lengths=None, value_lengths=None):
    """Inputs for a driver: right-padded masks from the given lengths (random
    lengths from 0 to the full length when None)."""
    query = (rng.normal(size=(batch, query_length, D)) * scale).astype("float32")
    value = (rng.normal(size=(batch, value_length, D)) * scale).astype("float32")
    if query_lengths is None:
        query_lengths = rng.integers(0, query_length + 1, size=batch)
    if value_lengths is None:
        value_lengths = rng.integers(0, value_length + 1, size=batch)
    query_valid = np.arange(query_length)[None, :] < np.asarray(query_lengths)[:, None]
    value_valid = np.arange(value_length)[None, :] < np.asarray(value_lengths)[:, None]
    return query, value, query_valid.reshape(batch, query_length), value_valid.reshape(batch, value_length)


def functional_model(drivers, dtype="float32"):
    """One model running every driver on shared inputs of unknown batch and lengths."""
    inputs = {
        "query": keras.Input((None, D), name="query"),
        "value": keras.Input((None, D), name="value"),
        "query_valid": keras.Input((None,), dtype="bool", name="query_valid"),
        "value_valid": keras.Input((None,), dtype="bool", name="value_valid"),
    }
    outputs, layers = {}, {}
    for driver in drivers:
        layer = layers[driver.id] = driver.make(dtype)
        for name, tensor in driver.run(layer, *inputs.values()).items():
            outputs[f"{driver.id}__{name}"] = tensor
    return keras.Model(inputs, outputs), layers
