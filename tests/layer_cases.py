"""The one table every generic layer test runs over: a row per public layer
configuration, cell and decoder.

A row is a factory (`make(**kwargs)`, `dtype` and `name` included), a driver
(`run(layer, query, value, query_valid, value_valid) -> {name: tensor}`: how
to call it on the shared inputs with masks), the pattern its attention
weights must have, an optional NumPy score reference (the score layers: then
tests/test_layer_discipline.py checks the formula, hand cases and masks with
a separate key too), and flags: `skip` names the generic checks that do not
apply, with why. Every driver takes the same inputs, `query (B, Tq, D)`,
`value (B, Tv, D)` (also the sequence of the sequence layers), boolean
`query_valid (B, Tq)` and `value_valid (B, Tv)`; `run` works on eager tensors
and on `keras.Input`s alike, so a row also builds functional models.

A new mechanism joins the whole discipline (tests/test_layer_discipline.py,
test_empty_inputs.py, test_precision.py, test_properties.py) by adding a row.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np
from keras import ops

import keras_attention as ka
from tests import reference

D = 4  # the size of every feature axis of the shared inputs
VOCABULARY = 7  # ids of the inference decoders; 1 starts, 2 ends
MAX_LENGTH = 3

# Why generic checks do not apply to a row (keys of `Case.skip`).
_IDS = "decodes ids with an argmax or a sample: no gradient to check or to fit"


class SymbolicDim:
    """Stands for a symbolic dimension (JAX's shape polymorphism under
    `jax.export` / jax2tf, torch's `SymInt`): it has no `int()` and no
    comparison it can decide, as JAX's raise `InconclusiveDimensionOperation`."""

    def _refuse(self, *_):
        raise TypeError("a symbolic dimension used where a constant is needed")

    __int__ = __index__ = __bool__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = object.__hash__


def top_k_with_ties_to_the_highest_index(top_k):
    """`top_k` that returns the highest index among equal values: what torch's
    `topk`, which promises no order among ties, may do. Patched over
    `keras.ops.top_k`, it shows whether a choice leans on the tie order."""

    def flipped_top_k(x, k, sorted=True):
        values, indices = top_k(ops.flip(x, -1), k, sorted=sorted)
        return values, ops.shape(x)[-1] - 1 - indices

    return flipped_top_k


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    make: Callable  # (**layer_kwargs) -> layer
    run: Callable  # (layer, query, value, query_valid, value_valid) -> {name: tensor}
    # The weights output's expected pattern: "soft" (rows sum to 1 over the
    # allowed positions, 0 with none), "hard" (one-hot or zero rows),
    # "at_most_one" (monotonic: rows sum to at most 1), "soft_or_finished"
    # (decodings: rows after the end are zero), or None.
    weights: str | None = "soft"
    # (query_valid, value_valid) -> boolean array broadcastable to the
    # weights: where they may be non-zero.
    allowed: Callable | None = None
    # The NumPy score function of a score layer: (weights: dict, q, k) -> (B, Tq, Tv).
    scores: Callable | None = None
    same_dims: bool = False  # the score needs dq == dk
    hard: bool = False
    # Outputs that are ids (exact, integer) rather than floats.
    ids: tuple = ()
    # Draws random numbers in inference (sampling): two copies differ.
    random: bool = False
    # The float output the fit and the gradient checks read.
    readout: Callable = lambda results: results["output"]  # noqa: E731
    # Which of (query, value) the output depends on (finite differences).
    inputs_used: tuple = (0, 1)
    # Entries the layer's get_config must hold.
    config: dict = dataclasses.field(default_factory=dict)
    # Generic checks that do not apply: {check: why}.
    skip: dict = dataclasses.field(default_factory=dict)

    @property
    def zero_context(self):
        """Whether `output` is a weighted sum of values, zero on a row with
        no allowed position (the attention layers; not the decoders, whose
        outputs carry a state)."""
        return self.allowed is not None and not self.id.startswith(("decoder", "greedy", "beam", "sample", "ensemble"))

    def reference(self, weights, query, value, key, mask):
        scores = self.scores(weights, query, key)
        attend = reference.hard_attend if self.hard else reference.attend
        return attend(scores, value, mask)


def _cross(query_valid, value_valid):
    return query_valid[:, :, None] & value_valid[:, None, :]


def _keys(query_valid, value_valid):
    return value_valid[:, None, :]


def _self(query_valid, value_valid):
    return value_valid[:, :, None] & value_valid[:, None, :]


def _run_score(layer, query, value, query_valid, value_valid):
    context, scores = layer(query, value, query_mask=query_valid, value_mask=value_valid, return_attention_scores=True)
    return {"output": context, "weights": scores}


def score(id, make, scores=None, weights="soft", **flags):
    return Case(id, make, _run_score, weights, _cross, scores, **flags)


def self_attention(id, **options):
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

    return Case(id, lambda **kw: ka.SelfAttention(3, **options, **kw), run, "soft", allowed, inputs_used=(1,))


def _run_pooling(layer, query, value, query_valid, value_valid):
    pooled, weights = layer(value, mask=value_valid, return_attention_scores=True)
    return {"output": pooled, "weights": weights}


def targeted(mode):
    def run(layer, query, value, query_valid, value_valid):
        # The target: the first valid position of each example.
        first = ops.equal(ops.cumsum(ops.cast(value_valid, "int32"), axis=1), 1)
        target = ops.logical_and(first, value_valid)
        output, scores = layer(value, target, hidden_mask=value_valid, return_attention_scores=True)
        weights = scores if mode == "vanilla" else scores["whole"]
        return {"output": output, "weights": weights}

    make = lambda **kw: ka.TargetedAttention(3, mode=mode, **kw)  # noqa: E731
    return Case(f"targeted_{mode}", make, run, "soft", lambda q, v: v, inputs_used=(1,), config={"mode": mode})


def multi_head(explicit):
    def run(layer, query, value, query_valid, value_valid):
        if not explicit:
            return {"output": layer(query, value, query_mask=query_valid, value_mask=value_valid)}
        output, weights = layer(
            query, value, query_mask=query_valid, value_mask=value_valid, return_attention_scores=True
        )
        return {"output": output, "weights": weights}

    def allowed(query_valid, value_valid):
        return _cross(query_valid, value_valid)[:, None]

    return Case(
        "multi_head_weights" if explicit else "multi_head",
        lambda **kw: ka.MultiHeadAttention(2, 3, **kw),
        run,
        "soft" if explicit else None,
        allowed,
        config={"num_heads": 2, "key_dim": 3, "value_dim": None, "output_dim": None, "use_bias": True},
    )


def _run_pointer(layer, query, value, query_valid, value_valid):
    return {"logits": layer(query, value, memory_mask=value_valid)}


def decoder(id, make_cell, weights="soft"):
    def make(**kw):
        return ka.AttentionDecoder(make_cell(kw.get("dtype")), return_alignments=True, **kw)

    def run(layer, query, value, query_valid, value_valid):
        outputs, alignments = layer(query, value, memory_mask=value_valid)
        return {"output": outputs, "weights": alignments}

    return Case(id, make, run, weights, _keys)


def scheduled_sampling(id):
    """Target ids from the shared query (its largest feature, 1..D), fed
    back half of the time in training (the fit check runs that loop)."""

    def make(**kw):
        dtype = kw.get("dtype")
        return ka.ScheduledSamplingDecoder(
            ka.AttentionGRUCell(5, ka.AdditiveAttention(3, dtype=dtype), dtype=dtype),
            keras.layers.Embedding(VOCABULARY, 3, dtype=dtype),
            keras.layers.Dense(VOCABULARY, dtype=dtype),
            sampling_probability=0.5,
            return_alignments=True,
            seed=1,
            **kw,
        )

    def run(layer, query, value, query_valid, value_valid):
        # Unmasked targets, as the AttentionDecoder rows' (padded steps would
        # repeat the last valid step's alignment); masks: test_scheduled_sampling.py.
        ids = ops.top_k(query, 1)[1][..., 0] + 1
        logits, alignments = layer(ids, value, memory_mask=value_valid)
        return {"output": logits, "weights": alignments}

    # The ids are a step function of the query: only the memory has a gradient.
    return Case(id, make, run, "soft", _keys, inputs_used=(1,), config={"sampling_probability": 0.5})


def _member_decoder(attention, method="greedy", **kw):
    dtype = kw.get("dtype")
    return ka.InferenceDecoder(
        ka.AttentionGRUCell(5, attention, dtype=dtype),
        keras.layers.Embedding(VOCABULARY, 3, dtype=dtype),
        keras.layers.Dense(VOCABULARY, dtype=dtype),
        1,
        2,
        MAX_LENGTH,
        method=method,
        beam_width=3,
        **kw,
    )


def inference(id, method, attention, **options):
    # With a run-time seed, sampling draws are a function of the seeds: as
    # reproducible (and exportable) as greedy decoding.
    random = method == "sample" and "seed" not in options.get("runtime_options", ())
    return _decoding_case(
        id, method, lambda **kw: _member_decoder(attention(), method, **options, **kw), memories=1, random=random
    )


def ensemble(id, method, **options):
    """Two members over one source (an additive and a general attention)."""

    def make(**kw):
        dtype = kw.get("dtype")
        members = [
            _member_decoder(ka.AdditiveAttention(3, dtype=dtype), dtype=dtype),
            _member_decoder(ka.GeneralAttention(dtype=dtype), dtype=dtype),
        ]
        return ka.EnsembleDecoder(members, method=method, beam_width=3, **options, **kw)

    return _decoding_case(id, method, make, memories=2)


def _decoding_case(id, method, make, memories, random=None):
    def run(layer, query, value, query_valid, value_valid):
        result = layer(value if memories == 1 else [value] * memories, memory_mask=value_valid)
        return {
            "ids": result["ids"],
            "lengths": result["lengths"],
            "scores": result["scores"],
            "weights": result["alignments"],
        }

    def allowed(query_valid, value_valid):
        valid = value_valid[:, None, :]
        return valid[:, None] if method == "beam" else valid

    skip = {"fit": _IDS, "gradients": _IDS}
    random = method == "sample" if random is None else random
    return Case(id, make, run, "soft_or_finished", allowed, ids=("ids", "lengths"), random=random, skip=skip)


def _run_sequence(layer, query, value, query_valid, value_valid):
    return {"output": layer(value, mask=value_valid)}


def _run_position(layer, query, value, query_valid, value_valid):
    return {"output": layer(value)}


def _run_target_over_memory(layer, query, value, query_valid, value_valid):
    return {"output": layer(query, value, mask=query_valid, memory_mask=value_valid)}


_TRANSFORMER = {"num_heads": 2, "intermediate_dim": 6}


def sequence_layer(id, make, run=_run_sequence, inputs_used=(1,), config=None, skip=None):
    """A layer mapping sequences to sequences (positions, Transformer layers): no weights output."""
    return Case(id, make, run, None, None, inputs_used=inputs_used, config=config or {}, skip=skip or {})


def _transformer_decoder(method, **options):
    def make(**kw):
        dtype = kw.get("dtype")
        return ka.TransformerInferenceDecoder(
            ka.TransformerDecoderStack(2, **_TRANSFORMER, use_rotary=True, dtype=dtype),
            keras.layers.Embedding(VOCABULARY, D, dtype=dtype),
            keras.layers.Dense(VOCABULARY, dtype=dtype),
            1,
            2,
            MAX_LENGTH,
            position=ka.SinusoidalPositionEncoding(dtype=dtype),
            method=method,
            beam_width=3,
            **options,
            **kw,
        )

    return make


def _run_pointer_network(layer, query, value, query_valid, value_valid):
    return {"ids": layer(value, mask=value_valid)}


_HARD_GRADIENTS = (
    "hard selection is piecewise constant in the query and the score weights: "
    "only the value's gradient is a true derivative (straight-through: test_hard_attention.py)"
)

CASES = [
    score(
        "additive",
        lambda **kw: ka.AdditiveAttention(5, use_bias=True, **kw),
        reference.additive_scores,
        config={"units": 5, "use_bias": True},
    ),
    score("additive_normalized", lambda **kw: ka.AdditiveAttention(5, normalize=True, **kw), reference.additive_scores),
    score("dot", lambda **kw: ka.DotAttention(**kw), reference.dot_scores, same_dims=True),
    score("dot_scaled", lambda **kw: ka.DotAttention(use_scale=True, **kw), reference.dot_scores, same_dims=True),
    score("scaled_dot", lambda **kw: ka.ScaledDotAttention(**kw), reference.scaled_dot_scores, same_dims=True),
    score("general", lambda **kw: ka.GeneralAttention(**kw), reference.general_scores),
    score("concat_linear", lambda **kw: ka.ConcatAttention(**kw), reference.concat_scores),
    score("concat", lambda **kw: ka.ConcatAttention(units=5, **kw), reference.concat_scores),
    score(
        "hard_dot",
        lambda **kw: ka.HardAttention("dot", **kw),
        reference.dot_scores,
        "hard",
        same_dims=True,
        hard=True,
        inputs_used=(1,),
    ),
    score(
        "hard_additive",
        lambda **kw: ka.HardAttention(ka.AdditiveAttention(4, use_bias=True), **kw),
        reference.additive_scores,
        "hard",
        hard=True,
        inputs_used=(1,),
        skip={"weight_gradients": _HARD_GRADIENTS},
    ),
    score(
        "hard_sample",
        lambda **kw: ka.HardAttention("general", mode="sample", seed=1, **kw),
        weights="hard",
        hard=True,
        random=True,
        inputs_used=(1,),
        config={"mode": "sample", "seed": 1},
        skip={"gradients": "samples: a finite difference would compare two draws"},
    ),
    score("bahdanau_monotonic", lambda **kw: ka.BahdanauMonotonicAttention(3, **kw), weights="at_most_one"),
    score(
        "luong_monotonic",
        lambda **kw: ka.LuongMonotonicAttention(use_scale=True, mode="recursive", **kw),
        weights="at_most_one",
        config={"mode": "recursive"},
    ),
    multi_head(explicit=False),
    multi_head(explicit=True),
    self_attention("self_attention"),
    self_attention("self_attention_additive", score="additive"),
    self_attention("self_attention_causal_window", causal=True, window=2),
    self_attention("self_attention_window", window=3),
    Case(
        "pooling",
        lambda **kw: ka.AttentionPooling(3, **kw),
        _run_pooling,
        "soft",
        lambda q, v: v,
        inputs_used=(1,),
        config={"units": 3, "use_bias": True},
    ),
    targeted("vanilla"),
    targeted("gated"),
    Case(
        "pointer",
        lambda **kw: ka.PointerAttention(3, **kw),
        _run_pointer,
        None,
        None,
        # Masked logits are a large negative constant: read probabilities.
        readout=lambda results: ops.softmax(results["logits"]),
    ),
    decoder("decoder_gru_additive", lambda dtype: ka.AttentionGRUCell(5, ka.AdditiveAttention(3), dtype=dtype)),
    decoder(
        "decoder_wrapper_monotonic",
        lambda dtype: ka.AttentionWrapper(
            keras.layers.GRUCell(5, dtype=dtype), ka.BahdanauMonotonicAttention(3), dtype=dtype
        ),
        "at_most_one",
    ),
    decoder("decoder_lstm_scaled_dot", lambda dtype: ka.AttentionLSTMCell(D, ka.ScaledDotAttention(), dtype=dtype)),
    scheduled_sampling("decoder_scheduled_sampling"),
    inference("greedy_additive", "greedy", lambda: ka.AdditiveAttention(3)),
    inference("beam_general", "beam", lambda: ka.GeneralAttention()),
    inference("sample_concat", "sample", lambda: ka.ConcatAttention(3)),
    # Every option a request may set, at its default: the run-time graph.
    inference(
        "beam_runtime_options",
        "beam",
        lambda: ka.AdditiveAttention(3),
        runtime_options=(
            "max_length",
            "min_length",
            "length_penalty_weight",
            "coverage_penalty_weight",
            "repetition_penalty",
            "no_repeat_ngram_size",
        ),
    ),
    inference(
        "sample_runtime_options",
        "sample",
        lambda: ka.GeneralAttention(),
        seed=1,
        runtime_options=("max_length", "temperature", "top_k", "top_p", "seed"),
    ),
    ensemble("ensemble_beam", "beam"),
    ensemble("ensemble_greedy_geometric", "greedy", combine="log_probabilities"),
    sequence_layer("sinusoidal_position", lambda **kw: ka.SinusoidalPositionEncoding(**kw), _run_position),
    sequence_layer("learned_position", lambda **kw: ka.LearnedPositionEmbedding(16, **kw), _run_position),
    sequence_layer("rotary_position", lambda **kw: ka.RotaryPositionEmbedding(**kw), _run_position),
    sequence_layer(
        "transformer_encoder_layer",
        lambda **kw: ka.TransformerEncoderLayer(**_TRANSFORMER, **kw),
        config={"num_heads": 2, "intermediate_dim": 6, "norm_first": True},
    ),
    sequence_layer(
        "transformer_encoder_stack_post_norm",
        lambda **kw: ka.TransformerEncoderStack(2, **_TRANSFORMER, norm_first=False, use_rotary=True, **kw),
        config={"num_layers": 2, "norm_first": False, "use_rotary": True, "final_norm": False},
    ),
    sequence_layer(
        "transformer_decoder_layer",
        lambda **kw: ka.TransformerDecoderLayer(**_TRANSFORMER, **kw),
        _run_target_over_memory,
        inputs_used=(0, 1),
    ),
    sequence_layer(
        "transformer_decoder_stack",
        lambda **kw: ka.TransformerDecoderStack(2, **_TRANSFORMER, use_rotary=True, **kw),
        _run_target_over_memory,
        inputs_used=(0, 1),
        config={"num_layers": 2, "final_norm": True},
        skip={
            "fit": "each cross-attention's key bias cancels in the softmax (MultiHeadAttention) and gets only "
            "rounding noise, too little to move it here; the transformer_decoder_layer row fits"
        },
    ),
    _decoding_case("greedy_transformer", "greedy", _transformer_decoder("greedy"), memories=1),
    _decoding_case("beam_transformer", "beam", _transformer_decoder("beam", num_hypotheses=2), memories=1),
    Case(
        "pointer_network",
        lambda **kw: ka.PointerNetwork(5, max_length=MAX_LENGTH, beam_width=2, **kw),
        _run_pointer_network,
        None,
        None,
        ids=("ids",),
        skip={
            "fit": _IDS,
            "gradients": _IDS,
            "model": "a keras.Model: its own .keras round trip is in test_pointer.py",
        },
    ),
]
DRIVERS = {case.id: case for case in CASES}
SCORE_CASES = [case for case in CASES if case.scores is not None]
SOFT_CASES = [case for case in SCORE_CASES if not case.hard]


def case_params(cases=CASES, check=None, argname="case"):
    """Parametrise a test over `cases`, leaving out those whose `skip` names `check`."""
    import pytest

    cases = [case for case in cases if check not in case.skip]
    return pytest.mark.parametrize(argname, cases, ids=[case.id for case in cases])


def driver_params(cases=CASES):
    return case_params(cases, argname="driver")


# ------------------------------------------------------------------ results


def check_weights(case, weights, query_valid, value_valid, atol=1e-5):
    """The weights' pattern: zero where not allowed, rows as `case.weights` says."""
    weights = np.asarray(weights, np.float64)
    assert np.isfinite(weights).all(), f"{case.id}: weights not finite"
    allowed = np.broadcast_to(case.allowed(query_valid, value_valid), weights.shape)
    assert (weights[~allowed] == 0).all(), f"{case.id}: weight on a masked position"
    assert (weights >= 0).all(), f"{case.id}: negative weight"
    sums = weights.sum(-1)
    any_allowed = allowed.any(-1)
    if case.weights == "soft":
        np.testing.assert_allclose(sums, np.where(any_allowed, 1.0, 0.0), atol=atol, err_msg=case.id)
    elif case.weights == "soft_or_finished":  # rows after a decoding's end are zero
        assert (np.isclose(sums, 1.0, atol=atol) | (sums == 0)).all(), case.id
        assert (sums[~any_allowed] == 0).all(), case.id
    elif case.weights == "hard":
        assert np.isin(weights, (0.0, 1.0)).all(), case.id
        np.testing.assert_array_equal(sums, np.where(any_allowed, 1.0, 0.0), err_msg=case.id)
    elif case.weights == "at_most_one":
        assert (sums <= 1.0 + atol).all(), case.id


def check_results(case, results, query_valid, value_valid, atol=1e-5, label=""):
    """One row of results per example, finite floats, and the weights' pattern."""
    batch = query_valid.shape[0]
    for name, value in results.items():
        value = np.asarray(value)
        assert value.shape[:1] == (batch,), f"{case.id} {name}{label}: shape {value.shape} for a batch of {batch}"
        if name not in case.ids:
            assert np.isfinite(value.astype(np.float64)).all(), f"{case.id} {name}{label} is not finite"
    if case.weights is not None and "weights" in results:
        check_weights(case, results["weights"], query_valid, value_valid, atol=atol)


def data(rng, batch, query_length, value_length, scale=1.0, query_lengths=None, value_lengths=None, dtype="float32"):
    """Inputs for a row: right-padded masks from the given lengths (random
    lengths from 0 to the full length when None)."""
    query = (rng.normal(size=(batch, query_length, D)) * scale).astype(dtype)
    value = (rng.normal(size=(batch, value_length, D)) * scale).astype(dtype)
    if query_lengths is None:
        query_lengths = rng.integers(0, query_length + 1, size=batch)
    if value_lengths is None:
        value_lengths = rng.integers(0, value_length + 1, size=batch)
    query_valid = np.arange(query_length)[None, :] < np.asarray(query_lengths)[:, None]
    value_valid = np.arange(value_length)[None, :] < np.asarray(value_lengths)[:, None]
    return query, value, query_valid.reshape(batch, query_length), value_valid.reshape(batch, value_length)


INPUT_NAMES = ["query", "value", "query_valid", "value_valid"]


def model_inputs(dtype="float32"):
    """The shared inputs as `keras.Input`s of unknown batch and lengths."""
    return {
        "query": keras.Input((None, D), name="query", dtype=dtype),
        "value": keras.Input((None, D), name="value", dtype=dtype),
        "query_valid": keras.Input((None,), dtype="bool", name="query_valid"),
        "value_valid": keras.Input((None,), dtype="bool", name="value_valid"),
    }


def functional_model(cases, dtype="float32"):
    """One model running every case on shared inputs of unknown batch and lengths."""
    inputs = model_inputs()
    outputs, layers = {}, {}
    for case in cases:
        layer = layers[case.id] = case.make(dtype=dtype, name=case.id)
        for name, tensor in case.run(layer, *inputs.values()).items():
            outputs[f"{case.id}__{name}"] = tensor
    return keras.Model(inputs, outputs), layers


# ------------------------------------------------------- helpers of the tests


def dims(case, separate_key=True):
    """(dq, dk, dv) for a score case: dk differs from dq unless the score forbids it."""
    dq = 4
    dk = dq if case.same_dims else 3
    dv = 5 if separate_key else dk
    return dq, dk, dv


def weights_of(layer):
    """The layer's trainable weights as float64 arrays, keyed by weight name."""
    return {
        variable.path.split("/")[-1]: np.asarray(variable.numpy(), np.float64) for variable in layer.trainable_weights
    }


def randomize(layer, rng):
    """Give every weight a random, non-default value (scales stay positive)."""
    for variable in layer.trainable_weights:
        name = variable.path.split("/")[-1]
        if name == "scale":
            value = rng.uniform(0.5, 1.5, variable.shape)
        else:
            value = rng.normal(0.0, 0.6, variable.shape)
        variable.assign(value.astype(variable.dtype))


def randomize_model(model, rng, scale=0.5):
    """Give every trainable weight of a whole model a N(0, scale) value."""
    for variable in model.trainable_weights:
        variable.assign(rng.normal(0, scale, variable.shape).astype(variable.dtype))


def built_layer(case, rng, query, value, key=None, **layer_kwargs):
    layer = case.make(**layer_kwargs)
    layer(query, value, key=key)
    randomize(layer, rng)
    return layer


def lengths_mask(lengths, maxlen):
    return np.arange(maxlen)[None, :] < np.asarray(lengths)[:, None]


def keras_model(case, dq, dk, dv, vocabulary=20):
    """A functional model with unknown lengths and Keras masks from padding id 0.

    source ids -> embedding (dv) -> value; a Dense of it (dk) -> key;
    target ids -> embedding (dq) -> query; attention -> masked mean -> logits.
    """
    source = keras.Input((None,), dtype="int32", name="source")
    target = keras.Input((None,), dtype="int32", name="target")
    value = keras.layers.Embedding(vocabulary, dv, mask_zero=True)(source)
    key = keras.layers.Dense(dk)(value)
    query = keras.layers.Embedding(vocabulary, dq, mask_zero=True)(target)
    context = case.make(name="attention")(query, value, key=key)
    pooled = keras.layers.GlobalAveragePooling1D()(context)
    return keras.Model([source, target], keras.layers.Dense(3)(pooled))


def token_batch(rng, batch, length, vocabulary=20, min_length=1):
    """Random ids with right padding (id 0) after a random length per row."""
    ids = rng.integers(1, vocabulary, size=(batch, length)).astype("int32")
    lengths = rng.integers(min_length, length + 1, size=batch)
    ids[np.arange(length)[None, :] >= lengths[:, None]] = 0
    return ids


class VaryingLengthBatches(keras.utils.PyDataset):
    """`batches` (tuples of arrays of various batch sizes and lengths), one
    per step, in order: what `fit` reads on the backends without tf.data
    (each new shape is a new trace under JAX's jit)."""

    def __init__(self, batches):
        super().__init__()
        self.batches = batches

    def __len__(self):
        return len(self.batches)

    def __getitem__(self, index):
        return self.batches[index]


def unknown_shape_dataset(batches, features_known=False):
    """`batches` (tuples of arrays of various batch sizes and lengths) as a
    tf.data pipeline whose every dimension is unknown when Keras traces its
    train step, as with real data. (`fit` on NumPy arrays that split into
    equal batches traces with static shapes, where no run-time shape logic
    is ever compiled.) `features_known` keeps the feature size of (B, T, d)
    arrays, which a layer needs to build its weights."""
    import tensorflow as tf

    def spec(array):
        # With `features_known`, the feature axis of a (B, T, d) array keeps its size.
        shape = (None,) * (array.ndim - 1) + (array.shape[-1] if features_known and array.ndim == 3 else None,)
        return tf.TensorSpec(shape[-array.ndim :] if array.ndim else (), tf.as_dtype(array.dtype))

    signature = keras.tree.map_structure(spec, batches[0])
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
