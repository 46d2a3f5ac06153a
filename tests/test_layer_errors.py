"""Bad input gives a ValueError naming the argument, what it got and what was expected."""

import json

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests.layer_cases import SCORE_CASES, case_params


def _zeros(*shape):
    return np.zeros(shape, "float32")


@case_params(SCORE_CASES)
@pytest.mark.parametrize(
    "query, value, key, message",
    [
        (
            (2, 3, 4, 4),
            (2, 5, 4),
            None,
            r"`query` must have rank 2 \(batch, dq\) or 3 \(batch, Tq, dq\); got shape \(2, 3, 4, 4\)",
        ),
        ((2, 4), (2, 4), None, r"`value` must have rank 3 \(batch, Tv, d\); got shape \(2, 4\)"),
        (
            (2, 4),
            (2, 5, 4),
            (2, 6, 4),
            r"`key` and `value` must have the same length Tv; got key shape \(2, 6, 4\) and value shape \(2, 5, 4\)",
        ),
        (
            (3, 4),
            (2, 5, 4),
            None,
            r"`query`, `value` and `key` must have the same batch size; got shapes \(3, 4\), \(2, 5, 4\)",
        ),
    ],
    ids=["query_rank", "value_rank", "key_length", "batch"],
)
def test_wrong_shapes(case, query, value, key, message):
    layer = case.make()
    with pytest.raises(ValueError, match=type(layer).__name__ + ": " + message):
        layer(_zeros(*query), _zeros(*value), key=None if key is None else _zeros(*key))


@case_params(SCORE_CASES)
@pytest.mark.parametrize(
    "query, kwargs, message",
    [
        (
            (2, 3, 4),
            {"value_mask": np.ones((2, 4), bool)},
            r"`value_mask` must have shape \(batch, Tv\) = \(2, 5\); got shape \(2, 4\)",
        ),
        (
            (2, 3, 4),
            {"query_mask": np.ones((2, 5), bool)},
            r"`query_mask` must have shape \(batch, Tq\) = \(2, 3\); got shape \(2, 5\)",
        ),
        (
            (2, 3, 4),
            {"attention_mask": np.ones((2, 5), bool)},
            r"`attention_mask` must have shape \(batch, Tq, Tv\) = \(2, 3, 5\); got shape \(2, 5\)",
        ),
        (
            (2, 4),
            {"attention_mask": np.ones((2, 3, 5), bool)},
            r"`attention_mask` must have shape \(batch, Tv\) = \(2, 5\); got shape \(2, 3, 5\)",
        ),
        (
            (2, 4),
            {"query_mask": np.ones((2, 3), bool)},
            r"`query_mask` must have shape \(batch,\) = \(2,\); got shape \(2, 3\)",
        ),
        ((2, 4), {"causal": True}, r"`causal=True` needs a rank-3 query"),
    ],
    ids=["value_mask", "query_mask", "attention_mask", "attention_mask_single", "query_mask_single", "causal_single"],
)
def test_mask_shape_mismatch(case, query, kwargs, message):
    layer = case.make()
    with pytest.raises(ValueError, match=message):
        layer(_zeros(*query), _zeros(2, 5, 4), **kwargs)


@pytest.mark.parametrize("layer", [ka.DotAttention(), ka.ScaledDotAttention(), ka.HardAttention("dot")], ids=type)
def test_dot_scores_need_equal_query_and_key_sizes(layer):
    with pytest.raises(
        ValueError,
        match=r"query last dimension dq=6 and key last dimension dk=4\. Use GeneralAttention or AdditiveAttention",
    ):
        layer(_zeros(2, 6), _zeros(2, 5, 4))


def test_unknown_feature_size_is_rejected_at_build():
    with pytest.raises(ValueError, match=r"the last dimension of `query` must be known"):
        ka.AdditiveAttention(4)(keras.Input((None, None)), keras.Input((None, 3)))


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ka.AdditiveAttention(0), r"AdditiveAttention: `units` must be a positive integer; got 0"),
        (lambda: ka.AdditiveAttention(-3), r"`units` must be a positive integer; got -3"),
        (lambda: ka.AdditiveAttention(2.5), r"`units` must be a positive integer; got 2.5"),
        (lambda: ka.ConcatAttention(units=0), r"ConcatAttention: `units` must be a positive integer or None; got 0"),
        (lambda: ka.DotAttention(dropout=1.0), r"DotAttention: `dropout` must be a number in \[0, 1\); got 1.0"),
        (lambda: ka.GeneralAttention(dropout=-0.1), r"`dropout` must be a number in \[0, 1\); got -0.1"),
    ],
)
def test_bad_constructor_arguments(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def _cell(units=4):
    return ka.AttentionGRUCell(units, ka.AdditiveAttention(3))


# Each pair builds the same object from NumPy scalars and from Python numbers.
NUMPY_SCALAR_PAIRS = {
    "additive": lambda n: ka.AdditiveAttention(n.int64(8), dropout=n.float32(0.25), chunk_size=n.int32(4)),
    "concat": lambda n: ka.ConcatAttention(units=n.int64(5)),
    "hard": lambda n: ka.HardAttention("dot", temperature=n.float32(0.5)),
    "monotonic": lambda n: ka.BahdanauMonotonicAttention(
        n.int64(4), sigmoid_noise=n.float32(0.5), score_bias_init=n.float32(-1.5)
    ),
    "multi_head": lambda n: ka.MultiHeadAttention(
        n.int64(2), n.int64(4), value_dim=n.int64(3), output_dim=n.int64(6), dropout=n.float32(0.25)
    ),
    "self_attention": lambda n: ka.SelfAttention(
        n.int64(4), window=n.int64(3), regularization_weight=n.float32(0.25), dropout=n.float64(0.5)
    ),
    "pooling": lambda n: ka.AttentionPooling(n.int16(4)),
    "pointer": lambda n: ka.PointerAttention(n.uint8(4)),
    "targeted": lambda n: ka.TargetedAttention(n.int64(4), dropout=n.float32(0.25)),
    "gru_cell": lambda n: ka.AttentionGRUCell(n.int64(4), ka.DotAttention()),
    "wrapper": lambda n: ka.AttentionWrapper(
        keras.layers.GRUCell(4), ka.DotAttention(), attention_layer_size=n.int64(5)
    ),
    "inference": lambda n: ka.InferenceDecoder(
        _cell(),
        keras.layers.Embedding(9, 3),
        keras.layers.Dense(9),
        n.int64(1),
        n.int32(2),
        n.int64(5),
        method="sample",
        beam_width=n.int64(3),
        length_penalty_weight=n.float32(0.5),
        coverage_penalty_weight=n.float32(0.25),
        temperature=n.float32(0.5),
        top_k=n.int64(3),
    ),
    "pointer_network": lambda n: ka.PointerNetwork(
        n.int64(8),
        attention_units=n.int64(4),
        max_length=n.int64(6),
        beam_width=n.int64(2),
        length_penalty_weight=n.float32(0.5),
    ),
}


class _Python:
    """Stands in for NumPy's scalar constructors with Python's own numbers."""

    def __getattr__(self, name):
        return float if name.startswith("float") else int


def _without_names(config):
    if isinstance(config, dict):
        return {k: _without_names(v) for k, v in config.items() if k != "name"}
    return config


@pytest.mark.parametrize("make", list(NUMPY_SCALAR_PAIRS.values()), ids=list(NUMPY_SCALAR_PAIRS))
def test_numpy_scalars_are_accepted_as_keras_accepts_them(make):
    from_numpy, from_python = make(np), make(_Python())
    config = from_numpy.get_config()
    # Kept as Python numbers: the config is JSON, as a .keras file needs.
    assert _without_names(json.loads(json.dumps(config))) == _without_names(from_python.get_config())
    assert type(from_numpy).from_config(config).get_config() == config


def test_numpy_scalars_in_the_decoding_functions_and_ops():
    steps = []

    def step(ids, state):
        steps.append(ids)
        return ops.one_hot(ops.minimum(ids + 1, 3), 4) * 5.0, state

    state = np.zeros((2, 1), "float32")
    greedy = ka.decoding.greedy_search(step, state, np.int64(1), np.int64(3), np.int64(4))
    np.testing.assert_array_equal(greedy["ids"], [[2, 3, 3, 3], [2, 3, 3, 3]])
    beams = ka.decoding.beam_search(
        step, state, np.int32(1), np.int64(3), np.int64(3), np.int64(2), length_penalty_weight=np.float32(0.5)
    )
    np.testing.assert_array_equal(np.asarray(beams["ids"])[:, 0], [[2, 3, 3], [2, 3, 3]])
    sampled = ka.decoding.sampling_search(step, state, 1, 3, 3, temperature=np.float32(1e-3), top_k=np.int64(2), seed=1)
    np.testing.assert_array_equal(sampled["ids"], [[2, 3, 3], [2, 3, 3]])
    assert ka.decoding.tile_batch(np.ones((2, 3)), np.int64(2)).shape == (4, 3)
    np.testing.assert_array_equal(ka.sequence_mask([1, 3], np.int64(4)), [[1, 0, 0, 0], [1, 1, 1, 0]])
    model = ka.models.hierarchical_attention_network(
        np.int64(20), np.int64(3), embedding_dim=np.int64(4), word_units=np.int64(2), sentence_units=np.int64(2)
    )
    assert model.output_shape == (None, 3)


@pytest.mark.parametrize(
    "make, message",
    [
        (
            lambda: ka.AdditiveAttention(np.int64(0)),
            r"AdditiveAttention: `units` must be a positive integer; got np.int64\(0\)",
        ),
        (
            lambda: ka.DotAttention(dropout=np.float32(1.5)),
            r"DotAttention: `dropout` must be a number in \[0, 1\); got np.float32\(1.5\)",
        ),
        (
            lambda: ka.AdditiveAttention(np.float32(8)),
            r"AdditiveAttention: `units` must be a positive integer; got np.float32\(8.0\)",
        ),
        (lambda: ka.AdditiveAttention(True), r"`units` must be a positive integer; got True"),
        (
            lambda: ka.PointerNetwork(8, length_penalty_weight=float("nan")),
            r"PointerNetwork: `length_penalty_weight` must be a finite number >= 0; got nan",
        ),
        (
            lambda: ka.HardAttention("dot", temperature=float("inf")),
            r"HardAttention: `temperature` must be a finite number > 0; got inf",
        ),
        (
            lambda: ka.SelfAttention(4, regularization_weight=float("nan")),
            r"SelfAttention: `regularization_weight` must be a finite number >= 0; got nan",
        ),
        (
            lambda: ka.LuongMonotonicAttention(sigmoid_noise=float("inf")),
            r"LuongMonotonicAttention: `sigmoid_noise` must be a finite number >= 0; got inf",
        ),
    ],
)
def test_numpy_scalars_of_the_wrong_kind_and_non_finite_numbers_are_named_in_the_error(make, message):
    with pytest.raises(ValueError, match=message):
        make()
