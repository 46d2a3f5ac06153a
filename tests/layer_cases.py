"""The table of layer configurations every generic test runs over.

A case pairs a layer factory with the NumPy score function of its formula.
New score layers join the whole test discipline by adding a row here.
"""

import dataclasses
from collections.abc import Callable

import keras
import numpy as np

import keras_attention as ka
from tests import reference


@dataclasses.dataclass(frozen=True)
class Case:
    id: str
    make: Callable  # (**layer_kwargs) -> layer
    scores: Callable  # (weights: dict, q, k) -> (B, Tq, Tv)
    same_dims: bool = False  # the score needs dq == dk
    hard: bool = False

    def reference(self, weights, query, value, key, mask):
        scores = self.scores(weights, query, key)
        attend = reference.hard_attend if self.hard else reference.attend
        return attend(scores, value, mask)


CASES = [
    Case("additive", lambda **kw: ka.AdditiveAttention(5, use_bias=True, **kw), reference.additive_scores),
    Case("additive_normalized", lambda **kw: ka.AdditiveAttention(5, normalize=True, **kw), reference.additive_scores),
    Case("dot", lambda **kw: ka.DotAttention(**kw), reference.dot_scores, same_dims=True),
    Case("dot_scaled", lambda **kw: ka.DotAttention(use_scale=True, **kw), reference.dot_scores, same_dims=True),
    Case("scaled_dot", lambda **kw: ka.ScaledDotAttention(**kw), reference.scaled_dot_scores, same_dims=True),
    Case("general", lambda **kw: ka.GeneralAttention(**kw), reference.general_scores),
    Case("concat_linear", lambda **kw: ka.ConcatAttention(**kw), reference.concat_scores),
    Case("concat", lambda **kw: ka.ConcatAttention(units=5, **kw), reference.concat_scores),
    Case("hard_dot", lambda **kw: ka.HardAttention("dot", **kw), reference.dot_scores, same_dims=True, hard=True),
    Case(
        "hard_additive",
        lambda **kw: ka.HardAttention(ka.AdditiveAttention(4, use_bias=True), **kw),
        reference.additive_scores,
        hard=True,
    ),
]
SOFT_CASES = [case for case in CASES if not case.hard]


def case_params(cases=CASES):
    import pytest

    return pytest.mark.parametrize("case", cases, ids=[case.id for case in cases])


def dims(case, separate_key=True):
    """(dq, dk, dv) for a case: dk differs from dq unless the score forbids it."""
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


def unknown_shape_dataset(batches):
    """`batches` (tuples of arrays of various batch sizes and lengths) as a
    tf.data pipeline whose every dimension is unknown when Keras traces its
    train step, as with real data. (`fit` on NumPy arrays that split into
    equal batches traces with static shapes, where no run-time shape logic
    is ever compiled.)"""
    import tensorflow as tf

    signature = keras.tree.map_structure(
        lambda array: tf.TensorSpec((None,) * array.ndim, tf.as_dtype(array.dtype)), batches[0]
    )
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=signature)
