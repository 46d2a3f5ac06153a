"""The Hierarchical Attention Network builder and its fold / unfold layers."""

import inspect

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention
from keras_attention.layers.pooling import AttentionPooling
from keras_attention.models import hierarchical_attention_network
from keras_attention.models.hierarchical import FoldSentences, UnfoldSentences
from keras_attention.training import build_optimizer
from tests.layer_cases import randomize
from tests.test_docs import _python_blocks

pytestmark = pytest.mark.any_backend

VOCABULARY, CLASSES = 30, 3
SMALL = dict(embedding_dim=6, word_units=3, sentence_units=3)


def small_model(return_attention=True, seed=0, **kwargs):
    model = hierarchical_attention_network(
        VOCABULARY, CLASSES, return_attention=return_attention, **{**SMALL, **kwargs}
    )
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        randomize(layer, rng)  # sharp, non-uniform attention
    return model


def documents(rng, batch, sentences, words):
    """Ids with random sentence lengths (>= 1 word) and, in row 0, a padded last sentence."""
    ids = rng.integers(1, VOCABULARY, size=(batch, sentences, words)).astype("int32")
    lengths = rng.integers(1, words + 1, size=(batch, sentences))
    ids[np.arange(words)[None, None, :] >= lengths[:, :, None]] = 0
    ids[0, -1] = 0
    return ids


# ----------------------------------------------------------------------- masks


def test_padded_words_and_sentences_get_exactly_zero_weight():
    model = small_model()
    ids = documents(np.random.default_rng(1), 3, 4, 7)
    ids[1, 1] = 0  # a padded sentence between real ones
    probabilities, word_weights, sentence_weights = map(ops.convert_to_numpy, model(ids))
    assert probabilities.shape == (3, CLASSES) and word_weights.shape == (3, 4, 7)
    assert sentence_weights.shape == (3, 4)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)

    real_words = ids != 0
    real_sentences = real_words.any(-1)
    assert (word_weights[~real_words] == 0).all()
    assert (sentence_weights[~real_sentences] == 0).all()
    assert sentence_weights[0, 3] == 0 and sentence_weights[1, 1] == 0
    np.testing.assert_allclose(word_weights.sum(-1)[real_sentences], 1.0, atol=1e-6)
    assert (word_weights.sum(-1)[~real_sentences] == 0).all()
    np.testing.assert_allclose(sentence_weights.sum(-1), 1.0, atol=1e-6)
    # Randomised weights: the attention is not uniform, so the sums are a real check.
    assert np.ptp(word_weights[2, 0][real_words[2, 0]]) > 0.01 or real_words[2, 0].sum() == 1
    assert np.ptp(sentence_weights[2]) > 0.01


def test_extra_padding_changes_nothing():
    """Padded words and sentences are invisible: more of them gives the same outputs."""
    model = small_model()
    ids = documents(np.random.default_rng(2), 2, 3, 5)
    padded = np.zeros((2, 5, 8), "int32")
    padded[:, :3, :5] = ids
    outputs, padded_outputs = ([ops.convert_to_numpy(x) for x in model(i)] for i in (ids, padded))
    np.testing.assert_allclose(padded_outputs[0], outputs[0], atol=1e-6)
    np.testing.assert_allclose(padded_outputs[1][:, :3, :5], outputs[1], atol=1e-6)
    np.testing.assert_allclose(padded_outputs[2][:, :3], outputs[2], atol=1e-6)
    assert (padded_outputs[2][:, 3:] == 0).all()


def test_empty_document_gives_finite_probabilities_and_zero_weights():
    model = small_model()
    ids = np.zeros((2, 3, 4), "int32")
    ids[1, 0, 0] = 5
    probabilities, word_weights, sentence_weights = map(ops.convert_to_numpy, model(ids))
    assert np.isfinite(probabilities).all()
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)
    assert (word_weights[0] == 0).all() and (sentence_weights[0] == 0).all()
    assert word_weights[1, 0, 0] == pytest.approx(1.0) and sentence_weights[1, 0] == pytest.approx(1.0)


# ------------------------------------------------------------------- training


def test_fits_with_xla_and_unknown_lengths():
    rng = np.random.default_rng(3)
    model = small_model(return_attention=False)
    # XLA on TensorFlow, jax.jit on JAX; eager on PyTorch, where
    # jit_compile=True is torch.compile (minutes for this model).
    model.compile(
        optimizer=keras.optimizers.Adam(0.02),
        loss="sparse_categorical_crossentropy",
        jit_compile=keras.backend.backend() != "torch",
    )
    build_optimizer(model)
    attention = [model.get_layer("word_attention"), model.get_layer("sentence_attention")]
    before = [ops.convert_to_numpy(w).copy() for layer in attention for w in layer.trainable_weights]
    x, y = documents(rng, 16, 3, 6), rng.integers(0, CLASSES, size=16)
    history = model.fit(x, y, batch_size=8, epochs=3, verbose=0)
    losses = history.history["loss"]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    after = [ops.convert_to_numpy(w) for layer in attention for w in layer.trainable_weights]
    for old, new in zip(before, after):
        assert not np.allclose(old, new)
    # Other document shapes reuse the same model.
    predictions = model.predict(documents(rng, 2, 5, 9), verbose=0)
    assert predictions.shape == (2, CLASSES) and np.isfinite(predictions).all()


# -------------------------------------------------------------- serialisation


def test_keras_file_round_trip_without_custom_objects(tmp_path):
    model = small_model()
    ids = documents(np.random.default_rng(4), 2, 3, 5)
    model.save(tmp_path / "han.keras")
    loaded = keras.saving.load_model(tmp_path / "han.keras")  # safe mode, no custom_objects
    assert type(loaded.get_layer("fold_sentences")) is FoldSentences
    assert type(loaded.get_layer("unfold_sentences")) is UnfoldSentences
    assert type(loaded.get_layer("sentence_attention")) is AttentionPooling
    for got, want in zip(loaded(ids), model(ids)):
        np.testing.assert_array_equal(ops.convert_to_numpy(got), ops.convert_to_numpy(want))


# ------------------------------------------------------------------ structure


def test_fixed_sizes_and_layer_sizes():
    model = hierarchical_attention_network(
        VOCABULARY,
        4,
        embedding_dim=5,
        word_units=3,
        sentence_units=2,
        max_sentences=4,
        max_words=7,
        word_attention_units=9,
    )
    assert tuple(model.inputs[0].shape) == (None, 4, 7) and model.inputs[0].dtype == "int32"
    assert tuple(model.outputs[0].shape) == (None, 4) and len(model.outputs) == 1
    assert model.get_layer("word_attention").units == 9
    assert model.get_layer("sentence_attention").units == 4  # default 2 * sentence_units
    assert model.get_layer("word_attention").kernel.shape == (6, 9)  # bidirectional: 2 * 3
    assert model.get_layer("sentence_attention").kernel.shape == (4, 4)


def test_paper_defaults():
    model = hierarchical_attention_network(100, 5)
    assert model.get_layer("word_embedding").output_dim == 200
    assert model.get_layer("word_attention").kernel.shape == (100, 100)
    assert model.get_layer("sentence_attention").context_vector.shape == (100,)


def test_fold_and_unfold_layers():
    rng = np.random.default_rng(6)
    x = rng.normal(size=(2, 3, 4, 5)).astype("float32")
    folded = FoldSentences()(x)
    np.testing.assert_array_equal(ops.convert_to_numpy(folded), x.reshape(6, 4, 5))
    np.testing.assert_array_equal(ops.convert_to_numpy(UnfoldSentences()([folded, x])), x)
    # An eager Keras mask (B, S, W) folds to (B*S, W).
    ids = np.array([[[1, 2, 0], [0, 0, 0]], [[3, 0, 0], [4, 5, 6]]])
    embedded = keras.layers.Embedding(10, 2, mask_zero=True)(ids)
    folded_embedded = FoldSentences()(embedded)
    np.testing.assert_array_equal(ops.convert_to_numpy(folded_embedded._keras_mask), (ids != 0).reshape(4, 3))
    # A word mask on the reference becomes the sentence mask (any word real).
    unfolded = UnfoldSentences()([np.zeros((4, 7), "float32"), embedded])
    np.testing.assert_array_equal(ops.convert_to_numpy(unfolded._keras_mask), [[True, False], [True, True]])
    assert tuple(unfolded.shape) == (2, 2, 7)
    assert getattr(UnfoldSentences()([np.zeros((4, 7), "float32"), ids]), "_keras_mask", None) is None


# --------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"vocabulary_size": 1}, r"`vocabulary_size` must be an integer >= 2; got 1"),
        ({"num_classes": 1}, r"`num_classes` must be an integer >= 2; got 1"),
        ({"num_classes": 2.0}, r"`num_classes` must be an integer >= 2; got 2.0"),
        ({"embedding_dim": 0}, r"`embedding_dim` must be a positive integer; got 0"),
        ({"word_units": -1}, r"`word_units` must be a positive integer; got -1"),
        ({"sentence_units": None}, r"`sentence_units` must be a positive integer; got None"),
        ({"max_words": 0}, r"`max_words` must be a positive integer or None; got 0"),
        ({"max_sentences": "5"}, r"`max_sentences` must be a positive integer or None; got '5'"),
        (
            {"sentence_attention_units": True},
            r"`sentence_attention_units` must be a positive integer or None; got True",
        ),
    ],
)
def test_bad_builder_arguments(kwargs, message):
    arguments = {"vocabulary_size": VOCABULARY, "num_classes": CLASSES, **kwargs}
    with pytest.raises(ValueError, match=r"hierarchical_attention_network: " + message):
        hierarchical_attention_network(**arguments)


def test_fold_and_unfold_errors():
    with pytest.raises(ValueError, match=r"FoldSentences: `inputs` must have rank >= 3 .*; got shape \(2, 3\)"):
        FoldSentences()(np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match=r"UnfoldSentences: `inputs` must be a pair"):
        UnfoldSentences()(np.zeros((4, 3), "float32"))
    embedded = keras.layers.Embedding(10, 2, mask_zero=True)(keras.Input((None, None), dtype="int32"))
    with pytest.raises(
        ValueError,
        match=r"FoldSentences: cannot fold a Keras mask of unknown word length; got a mask of shape \(None, None, None\)",
    ):
        FoldSentences()(embedded)


# ----------------------------------------------------------------------- docs


def test_docstring_example_runs():
    doc = inspect.getdoc(hierarchical_attention_network)
    for section in ("Paper:", "Shapes:", "Example:", "arXiv:"):
        assert section in doc
    (example,) = _python_blocks(doc)
    scope = {"np": np, "keras_attention": keras_attention}
    exec(compile(example, "<hierarchical_attention_network example>", "exec"), scope)
    assert tuple(scope["word_weights"].shape) == (2, 3, 6)
    assert ops.convert_to_numpy(scope["sentence_weights"])[0, 2] == 0
