"""Bad input gives a ValueError naming the argument, what it got and what was expected."""

import keras
import numpy as np
import pytest

import keras_attention as ka
from tests.layer_cases import CASES, case_params


def _zeros(*shape):
    return np.zeros(shape, "float32")


@case_params()
@pytest.mark.parametrize(
    "query, value, key, message",
    [
        ((2, 3, 4, 4), (2, 5, 4), None, r"`query` must have rank 2 \(batch, dq\) or 3 \(batch, Tq, dq\); got shape \(2, 3, 4, 4\)"),
        ((2, 4), (2, 4), None, r"`value` must have rank 3 \(batch, Tv, d\); got shape \(2, 4\)"),
        ((2, 4), (2, 5, 4), (2, 6, 4), r"`key` and `value` must have the same length Tv; got key shape \(2, 6, 4\) and value shape \(2, 5, 4\)"),
        ((3, 4), (2, 5, 4), None, r"`query`, `value` and `key` must have the same batch size; got shapes \(3, 4\), \(2, 5, 4\)"),
    ],
    ids=["query_rank", "value_rank", "key_length", "batch"],
)
def test_wrong_shapes(case, query, value, key, message):
    layer = case.make()
    with pytest.raises(ValueError, match=type(layer).__name__ + ": " + message):
        layer(_zeros(*query), _zeros(*value), key=None if key is None else _zeros(*key))


@case_params()
@pytest.mark.parametrize(
    "query, kwargs, message",
    [
        ((2, 3, 4), {"value_mask": np.ones((2, 4), bool)}, r"`value_mask` must have shape \(batch, Tv\) = \(2, 5\); got shape \(2, 4\)"),
        ((2, 3, 4), {"query_mask": np.ones((2, 5), bool)}, r"`query_mask` must have shape \(batch, Tq\) = \(2, 3\); got shape \(2, 5\)"),
        ((2, 3, 4), {"attention_mask": np.ones((2, 5), bool)}, r"`attention_mask` must have shape \(batch, Tq, Tv\) = \(2, 3, 5\); got shape \(2, 5\)"),
        ((2, 4), {"attention_mask": np.ones((2, 3, 5), bool)}, r"`attention_mask` must have shape \(batch, Tv\) = \(2, 5\); got shape \(2, 3, 5\)"),
        ((2, 4), {"query_mask": np.ones((2, 3), bool)}, r"`query_mask` must have shape \(batch,\) = \(2,\); got shape \(2, 3\)"),
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
    with pytest.raises(ValueError, match=r"query last dimension dq=6 and key last dimension dk=4\. Use GeneralAttention or AdditiveAttention"):
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


def test_every_case_is_covered():
    """Each public score layer appears in the discipline table."""
    covered = {type(case.make()) for case in CASES}
    assert covered == {
        ka.AdditiveAttention, ka.DotAttention, ka.ScaledDotAttention,
        ka.GeneralAttention, ka.ConcatAttention, ka.HardAttention,
    }
