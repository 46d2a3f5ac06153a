"""export_ctranslate2 verifies what it wrote: CTranslate2's log-probabilities of sampled target tokens
against the Keras layers', teacher-forced; an embedding scaled in its `call` (the G2P Transformer's)
converts exactly, and a conversion that disagrees with Keras is refused with nothing written."""

import json
import math

import keras
import numpy as np
import pytest

pytest.importorskip(
    "keras_attention.export.ctranslate2",
    reason="CTranslate2 is not installed: pip install 'keras-attention-decoders[ctranslate2]'",
)

from keras_attention.export.ctranslate2 import export_ctranslate2, translate_ids  # noqa: E402
from keras_attention.export.ctranslate2.verification import keras_log_probs, sample_sources  # noqa: E402
from keras_attention.export.report import ExportError  # noqa: E402
from keras_attention.g2p.model import ModelConfig  # noqa: E402
from keras_attention.g2p.transformer_model import build_transformer_models  # noqa: E402
from keras_attention.text import Vocabulary  # noqa: E402
from tests.test_ctranslate2 import END, Seq2Seq, V  # noqa: E402

LETTERS = Vocabulary(["<pad>", "<unk>"] + [chr(97 + i) for i in range(26)], unknown_token="<unk>")
PHONES = Vocabulary(
    ["<pad>", "<s>", "</s>"] + [f"P{i}" for i in range(20)], separator=" ", start_token="<s>", end_token="</s>"
)
MAX_LENGTH = 12


@pytest.fixture(scope="module")
def g2p_transformer():
    """The G2P tool's Transformer (ScaledEmbedding: its rows times sqrt(d) in `call`), untrained."""
    keras.utils.set_random_seed(0)
    config = ModelConfig(architecture="transformer", model_dim=32, layers=2, heads=2, ff_dim=64, dropout=0.0)
    return build_transformer_models(LETTERS, PHONES, ModelConfig(**{**vars(config), "max_length": MAX_LENGTH}))


def _export(models, directory, **options):
    trainer = models.trainer
    return export_ctranslate2(
        directory,
        models.decoder,
        trainer.get_layer("encoder"),
        trainer.get_layer("letter_embedding"),
        LETTERS.tokens,
        PHONES.tokens,
        source_position=trainer.get_layer("position"),
        **options,
    )


def test_a_scaled_embedding_converts_exactly_and_the_parity_is_recorded(g2p_transformer, tmp_path):
    """Before the scale was read, CTranslate2 decoded 9 of these 20 rows as Keras did (the embeddings
    entered unscaled); now every row, with Keras's scores."""
    directory = _export(g2p_transformer, tmp_path / "model")
    sources = np.random.default_rng(0).integers(2, len(LETTERS.tokens), (20, 7)).astype("int32")
    ours = {k: np.asarray(v) for k, v in g2p_transformer.greedy.predict(sources, verbose=0).items()}
    theirs = translate_ids(
        directory, sources, beam_size=1, length_penalty=0, min_decoding_length=0, max_decoding_length=MAX_LENGTH
    )
    np.testing.assert_array_equal(theirs["ids"][:, :MAX_LENGTH], ours["ids"])
    np.testing.assert_array_equal(theirs["lengths"], ours["lengths"])
    np.testing.assert_allclose(theirs["scores"], ours["scores"], atol=1e-4)
    parity = json.loads((directory / "config.json").read_text())["keras_attention_parity"]
    assert parity["rows"] == 8 and parity["compared"] == "float32" and parity["atol"] == 1e-4
    assert 0.0 <= parity["max_abs_log_prob_diff"] <= 1e-4
    # Each row's target tokens and its end token: between 2 and 13 a row.
    assert 8 * 2 <= parity["tokens"] <= 8 * 13


class _LyingEmbedding(keras.layers.Embedding):
    """Says its outputs are its rows, but doubles them."""

    output_scale = 1.0

    def call(self, inputs):
        return super().call(inputs) * 2.0


class _OpaqueEmbedding(keras.layers.Embedding):
    def call(self, inputs):
        return super().call(inputs) + 1.0


def _swapped_source_embedding(model, layer_class):
    """`model`'s source embedding as a `layer_class` with the same table."""
    layer = layer_class(V, model.source_embedding.output_dim, mask_zero=True)
    layer.build((None, None))
    layer.set_weights(model.source_embedding.get_weights())
    return layer


def _export_seq2seq(model, directory, source_embedding=None, **options):
    return export_ctranslate2(
        directory,
        model.decoder(),
        model.encoder,
        source_embedding or model.source_embedding,
        ["<pad>", "<unk>"] + [f"s{i}" for i in range(2, V)],
        ["<pad>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)],
        source_position=model.source_position,
        **options,
    )


@pytest.fixture(scope="module")
def seq2seq():
    return Seq2Seq(calibrate=False, seed=5)


def test_a_conversion_that_disagrees_with_keras_is_refused_and_nothing_is_written(seq2seq, tmp_path):
    lying = _swapped_source_embedding(seq2seq, _LyingEmbedding)
    with pytest.raises(ExportError, match=r"log-probabilities differ from the Keras layers' by .* over `atol` 0.0001"):
        _export_seq2seq(seq2seq, tmp_path / "model", source_embedding=lying)
    assert list(tmp_path.iterdir()) == []  # neither the directory nor its staging copy
    # verify=False writes it, unverified and unrecorded.
    directory = _export_seq2seq(seq2seq, tmp_path / "model", source_embedding=lying, verify=False)
    assert "keras_attention_parity" not in json.loads((directory / "config.json").read_text())


def test_an_embedding_subclass_the_converter_cannot_read_is_refused_before_writing(seq2seq, tmp_path):
    opaque = _swapped_source_embedding(seq2seq, _OpaqueEmbedding)
    with pytest.raises(ValueError, match=r"`source_embedding` is a _OpaqueEmbedding, a subclass of Embedding"):
        _export_seq2seq(seq2seq, tmp_path / "model", source_embedding=opaque)
    assert list(tmp_path.iterdir()) == []


def test_an_int8_model_is_written_from_the_verified_float32_one(seq2seq, tmp_path):
    # Short position tables (never quantized) leave the file mostly the quantized weights.
    plain = _export_seq2seq(seq2seq, tmp_path / "float32", max_positions=16)
    int8 = _export_seq2seq(seq2seq, tmp_path / "int8", quantization="int8", max_positions=16)
    record = json.loads((int8 / "config.json").read_text())["keras_attention_parity"]
    assert record == json.loads((plain / "config.json").read_text())["keras_attention_parity"]
    assert record["compared"] == "float32" and record["max_abs_log_prob_diff"] <= 1e-4
    assert (int8 / "model.bin").stat().st_size < 0.6 * (plain / "model.bin").stat().st_size


def test_the_given_sources_are_verified_and_drawn_rows_stay_within_the_tables(seq2seq, tmp_path):
    given = np.array([[3, 4, 5, 0], [7, 0, 0, 0], [9, 9, 9, 9]], "int32")
    directory = _export_seq2seq(seq2seq, tmp_path / "given", sample_source_ids=given)
    assert json.loads((directory / "config.json").read_text())["keras_attention_parity"]["rows"] == 3
    # Tables of 3 positions: sources of at most 3 tokens, targets of at most 2 and the end token.
    small = _export_seq2seq(seq2seq, tmp_path / "small", max_positions=3)
    record = json.loads((small / "config.json").read_text())["keras_attention_parity"]
    assert 8 * 2 <= record["tokens"] <= 8 * 3
    assert (sample_sources(V, longest=3) != 0).sum(1).max() == 3


def test_keras_log_probs_of_a_read_out_without_kernel_are_the_biases_log_softmax(seq2seq):
    """With a zero read-out kernel every step's distribution is softmax(bias): each token's
    log-probability is known by hand, whatever the source and the prefix."""
    decoder = seq2seq.decoder()
    readout = keras.layers.Dense(V)
    readout.build((None, seq2seq.readout.kernel.shape[0]))
    bias = np.linspace(-1.0, 1.0, V).astype("float32")
    readout.set_weights([np.zeros(readout.kernel.shape, "float32"), bias])
    decoder.output_layer = readout
    layers = {
        "decoder": decoder,
        "encoder": seq2seq.encoder,
        "source_embedding": seq2seq.source_embedding,
        "source_position": seq2seq.source_position,
    }
    targets = [[5, 6, 7], [9]]
    got = keras_log_probs(layers, np.array([[3, 4], [5, 0]]), targets)
    normaliser = math.log(sum(math.exp(b) for b in bias.astype("float64")))
    for row, ids in enumerate(targets):
        np.testing.assert_allclose(got[row], [bias[i] - normaliser for i in [*ids, END]], atol=1e-6)
