"""CTranslate2: the Transformer converted by `export_ctranslate2` decodes what Keras decodes.

Small random encoder-decoders (d 16, 2 heads, 2 + 2 layers, 20 tokens),
pre-norm with and without a final norm and post-norm, sinusoidal and learned
positions; weights drawn so the outputs vary with the source and the end
token wins on part of the rows. Greedy ids, lengths and scores are compared
row by row with `TransformerInferenceDecoder` on 300 random sources; beam
search and int8 are measured and held to the thresholds stated where they are
asserted. Then every refusal, and the directory handling.
"""

import json
import os

import keras
import numpy as np
import pytest
from keras import ops

# Imported through the package, which imports CTranslate2 first with its
# int8-safe CPU backend (keras_attention/export/ctranslate2/library.py).
pytest.importorskip(
    "keras_attention.export.ctranslate2",
    reason="CTranslate2 is not installed: pip install 'keras-attention-decoders[ctranslate2]'",
)
import ctranslate2  # noqa: E402

import keras_attention as ka  # noqa: E402
from keras_attention.export.ctranslate2 import export_ctranslate2, translate_ids  # noqa: E402

V, D, START, END, MAX_LENGTH, ROWS, SOURCE_LENGTH = 20, 16, 1, 2, 10, 300, 8
SOURCE_TOKENS = ["<pad>", "<unk>"] + [f"s{i}" for i in range(2, V)]
TARGET_TOKENS = ["<pad>", "<s>", "</s>"] + [f"t{i}" for i in range(3, V)]
# CTranslate2's search options that are our defaults: no length penalty, the end token allowed at once.
SAME_AS_OURS = {"length_penalty": 0, "min_decoding_length": 0, "max_decoding_length": MAX_LENGTH}


def _randomize(model, rng, gain):
    """Weights whose outputs depend on the source and the position (scaled by fan-in, small biases)."""
    for variable in model.trainable_weights:
        name = variable.path.split("/")[-1]
        if name == "gamma":
            value = rng.uniform(0.5, 1.5, variable.shape)
        elif name == "beta" or name.endswith("bias"):
            value = rng.normal(0.0, 0.1, variable.shape)
        elif name == "embeddings":
            value = rng.normal(0.0, 1.0, variable.shape)
        else:
            value = rng.normal(0.0, gain / np.sqrt(variable.shape[0]), variable.shape)
        variable.assign(value.astype(variable.dtype))


class Seq2Seq:
    """A Transformer composed as `TransformerInferenceDecoder`'s docstring composes it."""

    def __init__(
        self, norm_first=True, position="sinusoidal", final_norm=None, seed=0, calibrate=True, **layer_options
    ):
        keras.utils.set_random_seed(seed)

        def positions():
            return ka.SinusoidalPositionEncoding() if position == "sinusoidal" else ka.LearnedPositionEmbedding(16)

        options = dict(num_heads=2, intermediate_dim=32, norm_first=norm_first, **layer_options)
        self.source_embedding = keras.layers.Embedding(V, D, mask_zero=True)
        self.source_position, self.target_position = positions(), positions()
        self.target_embedding = keras.layers.Embedding(V, D)
        self.encoder = ka.TransformerEncoderStack(2, final_norm=final_norm, **options)
        self.stack = ka.TransformerDecoderStack(2, final_norm=final_norm, **options)
        self.readout = keras.layers.Dense(V)
        source, target = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
        memory = self.encoder(self.source_position(self.source_embedding(source)))
        self.encode = keras.Model(source, memory)
        logits = self.readout(self.stack(self.target_position(self.target_embedding(target)), memory))
        self.trainer = trainer = keras.Model([source, target], logits)
        # Post-norm's normalised sublayers saturate into a few constant outputs with larger weights.
        _randomize(trainer, np.random.default_rng(seed), gain=1.5 if norm_first else 0.7)
        rng = np.random.default_rng(seed + 1)
        lengths = rng.integers(1, SOURCE_LENGTH + 1, ROWS)
        self.source = np.where(
            np.arange(SOURCE_LENGTH) < lengths[:, None], rng.integers(2, V, (ROWS, SOURCE_LENGTH)), 0
        )
        # Logits of a trained model's size (a spread of about 3), whatever the stack's output scale:
        # float32 scores of logits in the thousands differ by their rounding alone.
        spread = np.std(ops.convert_to_numpy(trainer([self.source, np.full((ROWS, 1), START)])))
        self.readout.kernel.assign(ops.convert_to_numpy(self.readout.kernel) * (3.0 / spread))
        self.memory = self.encode(self.source)
        if calibrate:
            self._end_wins_on_part_of_the_rows()

    def decoder(self, **options):
        return ka.TransformerInferenceDecoder(
            self.stack,
            self.target_embedding,
            self.readout,
            START,
            END,
            MAX_LENGTH,
            position=self.target_position,
            **options,
        )

    def decode(self, **options):
        result = self.decoder(**options)(self.memory, memory_mask=self.source != 0)
        return {key: ops.convert_to_numpy(result[key]) for key in ("ids", "lengths", "scores")}

    def sequence_log_probs(self, ids, lengths):
        """Each row's `sum_t log p(ids[t] | ids[:t], source)` over its `lengths` tokens, teacher-forced."""
        inputs = np.concatenate([np.full((len(ids), 1), START), ids[:, :-1]], 1).astype("int32")
        logits = ops.convert_to_numpy(self.trainer([self.source, inputs])).astype("float64")
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        token = np.take_along_axis(log_probs, ids[..., None].astype("int64"), -1)[..., 0]
        return np.where(np.arange(ids.shape[1]) < lengths[:, None], token, 0).sum(1)

    def _end_wins_on_part_of_the_rows(self):
        """Set the end token's bias so that greedy ends before the limit on 25-75% of the rows (bisection)."""
        bias = ops.convert_to_numpy(self.readout.bias)
        low, high = 0.0, 256.0
        for _ in range(12):
            bias[END] = (low + high) / 2
            self.readout.bias.assign(bias)
            self.greedy = self.decode()
            ended = (self.greedy["lengths"] < MAX_LENGTH).mean()
            if 0.25 <= ended <= 0.75:
                return
            low, high = (bias[END], high) if ended < 0.25 else (low, bias[END])
        raise AssertionError(f"no end-token bias ends 25-75% of the rows (last: {ended:.0%}): draw other weights")

    def export(self, directory, **options):
        return export_ctranslate2(
            directory,
            self.decoder(),
            self.encoder,
            self.source_embedding,
            SOURCE_TOKENS,
            TARGET_TOKENS,
            source_position=self.source_position,
            **options,
        )


CONFIGURATIONS = {
    "pre-norm, sinusoidal": dict(norm_first=True, position="sinusoidal"),
    "pre-norm without final norm, learned": dict(norm_first=True, position="learned", final_norm=False),
    "post-norm, sinusoidal": dict(norm_first=False, position="sinusoidal"),
    "post-norm, learned, gelu": dict(norm_first=False, position="learned", activation="gelu"),
}


@pytest.fixture(scope="module")
def calibrated():
    """Each configuration's calibrated model, built once for the module (the calibration decodes
    the 300 sources up to 12 times): `converted` and the int8 tests read the same pre-norm one,
    and no test changes a model's weights."""
    models = {}

    def model(name):
        if name not in models:
            models[name] = Seq2Seq(**CONFIGURATIONS[name])
        return models[name]

    return model


@pytest.fixture(scope="module")
def plain():
    """The default model, uncalibrated, for the tests that refuse an argument or write a
    directory: they read its layers and weights, none changes them."""
    return Seq2Seq(calibrate=False)


@pytest.fixture(scope="module", params=list(CONFIGURATIONS), ids=list(CONFIGURATIONS))
def converted(request, calibrated, tmp_path_factory):
    model = calibrated(request.param)
    directory = model.export(tmp_path_factory.mktemp("ct2") / "model")
    return model, directory, translator_of(directory)


def translator_of(directory):
    """One thread: CTranslate2's default thread pool contends with the test workers for a small
    machine's cores (a width-4 translation of the 300 rows: 6 s on 2 busy cores, 0.04 s alone)."""
    return ctranslate2.Translator(str(directory), device="cpu", intra_threads=1)


def test_greedy_ids_lengths_and_scores_equal_keras(converted):
    model, directory, translator = converted
    ours = model.greedy
    theirs = translate_ids(directory, model.source, translator=translator, beam_size=1, **SAME_AS_OURS)
    assert len({tuple(row) for row in ours["ids"]}) >= 30  # the outputs vary with the source
    assert 0.25 <= (ours["lengths"] < MAX_LENGTH).mean() < 1  # the end token wins on part of the rows
    same = (theirs["ids"][:, :MAX_LENGTH] == ours["ids"]).all(1) & (theirs["lengths"] == ours["lengths"])
    assert same.mean() >= 0.999, f"{(~same).sum()} of {ROWS} rows differ"
    # Both scores: the sum of the tokens' log-probabilities, the end token's included.
    np.testing.assert_allclose(theirs["scores"][same], ours["scores"][same], atol=1e-4)


def test_attention_is_our_alignments(converted):
    """`return_attention`: the last layer's cross-attention averaged over its heads, as our `alignments`."""
    model, directory, translator = converted
    result = model.decoder(return_alignments=True)(model.memory[:40], memory_mask=model.source[:40] != 0)
    alignments = ops.convert_to_numpy(result["alignments"])
    rows = [[SOURCE_TOKENS[i] for i in row if i] for row in model.source[:40]]
    results = translator.translate_batch(rows, beam_size=1, return_attention=True, **SAME_AS_OURS)
    compared = 0
    for row, result in enumerate(results):
        attention = np.array(result.attention[0]).reshape(-1, len(rows[row]))
        np.testing.assert_allclose(attention, alignments[row, : len(attention), : len(rows[row])], atol=1e-5)
        compared += len(attention)
    assert compared >= 80  # steps compared over the 40 rows


def test_beam_search_best_hypotheses(converted):
    """`method="beam"`: finished hypotheses keep their slot, as TensorFlow Addons' beam search
    did, where CTranslate2 moves them out of the beam and refills it with running ones (and
    stops once the top beam has ended), so fewer hypotheses keep running. The best hypotheses
    agree on most rows (measured: 98-100% at width 2, 87-99% at width 4, by configuration); on
    every row CTranslate2's is at least as likely as ours, and its score is the Keras model's for
    its ids: the two differ in the search, never in the model (`method="refilling_beam"`
    searches as CTranslate2 does: the next test)."""
    model, directory, translator = converted
    for width in (2, 4):
        ours = model.decode(method="beam", beam_width=width, length_penalty_weight=0.0)
        theirs = translate_ids(
            directory, model.source, translator=translator, beam_size=width, num_hypotheses=width, **SAME_AS_OURS
        )
        best = (theirs["ids"][:, 0, :MAX_LENGTH] == ours["ids"][:, 0]).all(1)
        assert best.mean() >= 0.8, (width, best.mean())
        np.testing.assert_allclose(theirs["scores"][best, 0], ours["scores"][best, 0], atol=1e-4)
        assert (theirs["scores"][:, 0] >= ours["scores"][:, 0] - 1e-4).all()
        keras_scores = model.sequence_log_probs(theirs["ids"][:, 0, :MAX_LENGTH], theirs["lengths"][:, 0])
        np.testing.assert_allclose(theirs["scores"][:, 0], keras_scores, atol=1e-4)


def test_refilling_beam_search_is_ctranslate2s(converted):
    """`method="refilling_beam"` is CTranslate2's beam search: every hypothesis of the n-best
    list, in order, with its score (measured: 100% of the rows at widths 2 and 4, without and
    with CTranslate2's default `length_penalty=1`, on every configuration), and with a coverage
    penalty. CTranslate2 4.8's CPU beam search reads another source's attention at the first
    step when the batch holds several (`unflatten_ids` indexes the batch before it is
    expanded, the attention after), so the coverage penalty is compared one source per call."""
    model, directory, translator = converted
    for width, alpha in ((2, 0.0), (4, 0.0), (4, 1.0)):
        ours = model.decode(method="refilling_beam", beam_width=width, length_penalty_weight=alpha)
        theirs = translate_ids(
            directory,
            model.source,
            translator=translator,
            beam_size=width,
            num_hypotheses=width,
            **{**SAME_AS_OURS, "length_penalty": alpha},
        )
        _assert_same_hypotheses(theirs, ours, (width, alpha))
        ended = ours["lengths"][:, 0] < MAX_LENGTH
        assert 0.25 <= ended.mean() < 1, (width, alpha, ended.mean())  # both ends are compared
    rows, options = 30, dict(beam_size=3, num_hypotheses=3, length_penalty=0.6, coverage_penalty=0.3)
    decoder = model.decoder(
        method="refilling_beam", beam_width=3, length_penalty_weight=0.6, coverage_penalty_weight=0.3
    )
    result = decoder(model.memory[:rows], memory_mask=model.source[:rows] != 0)
    ours = {key: ops.convert_to_numpy(result[key]) for key in ("ids", "lengths", "scores")}
    single = [
        translate_ids(directory, model.source[row : row + 1], translator=translator, **{**SAME_AS_OURS, **options})
        for row in range(rows)
    ]
    theirs = {key: np.concatenate([one[key] for one in single]) for key in ("ids", "lengths", "scores")}
    _assert_same_hypotheses(theirs, ours, "coverage")


def test_patience_is_ctranslate2s(converted):
    """Kasai et al.'s patience (arXiv:2204.05424) as CTranslate2's `patience`: with a penalty
    the search waits for `round(beam_width * patience)` ended hypotheses, so a patience of 2
    searches on after `beam_width` and returns up to twice as many; every hypothesis of the
    n-best lists equals CTranslate2's, in order, with its score."""
    model, directory, translator = converted
    base = model.decode(method="refilling_beam", beam_width=2, length_penalty_weight=1.0)
    for width, patience, hypotheses in ((2, 2.0, 4), (4, 0.5, 2), (3, 1.5, 4)):
        ours = model.decode(
            method="refilling_beam",
            beam_width=width,
            length_penalty_weight=1.0,
            patience=patience,
            num_hypotheses=hypotheses,
        )
        theirs = translate_ids(
            directory,
            model.source,
            translator=translator,
            beam_size=width,
            num_hypotheses=hypotheses,
            patience=patience,
            **{**SAME_AS_OURS, "length_penalty": 1.0},
        )
        _assert_same_hypotheses(theirs, ours, (width, patience, hypotheses))
        if width == 2:
            # Searching on finds a better-scored best hypothesis on some rows, never a worse one.
            assert (ours["scores"][:, 0] >= base["scores"][:, 0] - 1e-5).all()
            assert (ours["scores"][:, 0] > base["scores"][:, 0] + 1e-5).any()


def test_alternatives_at_a_prefix_are_ctranslate2s(converted):
    """`method="alternatives"` as CTranslate2's `return_alternatives` (with `beam_size=1`): at the
    end of each row's forced prefix (0 to 3 tokens), the 3 likeliest next tokens but the end token,
    each continued greedily; ids, lengths and scores equal CTranslate2's. With a threshold on the
    first token's probability, ours empties the alternatives CTranslate2 leaves out."""
    model, directory, translator = converted
    rng = np.random.default_rng(5)
    lengths = rng.integers(0, 4, ROWS)
    prefix = np.where(np.arange(3) < lengths[:, None], rng.integers(3, V, (ROWS, 3)), -1).astype("int32")
    tokens = [[TARGET_TOKENS[i] for i in row[:n]] for row, n in zip(prefix, lengths)]
    for threshold in (0.0, 0.05):
        decoder = model.decoder(method="alternatives", num_alternatives=3, min_expansion_probability=threshold)
        result = decoder(model.memory, memory_mask=model.source != 0, target_prefix=prefix)
        ours = {key: ops.convert_to_numpy(result[key]) for key in ("ids", "lengths", "scores")}
        empty = ours["scores"] == ka.decoding.NEG_INF
        # CTranslate2 4.8.5 dies (SIGFPE) on a row its threshold leaves without an alternative: ours
        # returns that row's three empty; CTranslate2 is asked for the others.
        rows = ~empty.all(1)
        theirs = translate_ids(
            directory,
            model.source[rows],
            translator=translator,
            beam_size=1,
            num_hypotheses=3,
            return_alternatives=True,
            min_alternative_expansion_prob=threshold,
            target_prefix=[row for row, keep in zip(tokens, rows) if keep],
            **SAME_AS_OURS,
        )
        missing = theirs["scores"] == -np.inf
        np.testing.assert_array_equal(missing, empty[rows])
        assert (ours["lengths"][empty] == np.broadcast_to(lengths[:, None], empty.shape)[empty]).all()
        same = (theirs["ids"][..., :MAX_LENGTH] == ours["ids"][rows]).all(2) & (
            theirs["lengths"] == ours["lengths"][rows]
        )
        assert same[~missing].mean() >= 0.999, (threshold, f"{(~same[~missing]).sum()} alternatives differ")
        kept = same & ~missing
        np.testing.assert_allclose(theirs["scores"][kept], ours["scores"][rows][kept], atol=1e-4)
        if threshold:
            assert 0 < empty.mean() < 1
        else:
            assert not empty.any() and rows.all()
            # Alternatives 0 and 1 of every row part at their first free token.
            assert (ours["ids"][:, 0] != ours["ids"][:, 1]).any(1).all()


def _assert_same_hypotheses(theirs, ours, case):
    same = (theirs["ids"][..., :MAX_LENGTH] == ours["ids"]).all((1, 2)) & (theirs["lengths"] == ours["lengths"]).all(1)
    assert same.mean() >= 0.999, (case, f"{(~same).sum()} of {len(same)} rows differ")
    np.testing.assert_allclose(theirs["scores"][same, 0], ours["scores"][same, 0], atol=1e-4, err_msg=str(case))
    np.testing.assert_allclose(theirs["scores"][same], ours["scores"][same], rtol=1e-5, atol=1e-4, err_msg=str(case))


def test_beam_search_n_best_equal_keras_when_no_hypothesis_ends_early(tmp_path):
    """Without an end token inside the limit the two searches are the same: every hypothesis, in order."""
    # Uncalibrated: the calibration sets only the end token's bias, which is set here.
    model = Seq2Seq(norm_first=True, position="sinusoidal", seed=3, calibrate=False)
    bias = ops.convert_to_numpy(model.readout.bias)
    bias[END] = -30.0
    model.readout.bias.assign(bias)
    directory = model.export(tmp_path / "model")
    ours = model.decode(method="beam", beam_width=3, length_penalty_weight=0.0)
    theirs = translate_ids(
        directory, model.source, translator=translator_of(directory), beam_size=3, num_hypotheses=3, **SAME_AS_OURS
    )
    assert len({tuple(row) for row in ours["ids"][:, 0]}) >= 30
    np.testing.assert_array_equal(theirs["ids"][..., :MAX_LENGTH], ours["ids"])
    np.testing.assert_allclose(theirs["scores"], ours["scores"], atol=1e-4)


@pytest.mark.parametrize("quantization", ["int8", "int8_float32"])
def test_int8_agreement(quantization, calibrated, tmp_path):
    """int8 weights (CTranslate2 also quantizes the activations of its int8 products): greedy ids
    equal float32 Keras's on >= 90% of the rows (measured: 94.7%), and the scores of those rows
    differ by 0.014 at the median (asserted: <= 0.05) and 0.16 at the 90th percentile."""
    model = calibrated("pre-norm, sinusoidal")
    directory = model.export(tmp_path / "model", quantization=quantization, max_positions=16)
    float32 = model.export(tmp_path / "float32", max_positions=16)
    # The kernels take a byte instead of four (biases, norms, scales and positions stay float32: 45%).
    assert (directory / "model.bin").stat().st_size < 0.5 * (float32 / "model.bin").stat().st_size
    theirs = translate_ids(directory, model.source, translator=translator_of(directory), beam_size=1, **SAME_AS_OURS)
    same = (theirs["ids"][:, :MAX_LENGTH] == model.greedy["ids"]).all(1)
    assert same.mean() >= 0.90, same.mean()
    assert np.median(np.abs(theirs["scores"][same] - model.greedy["scores"][same])) <= 0.05


# ------------------------------------------------------------------ refusals


def _recurrent(model):
    cell = ka.AttentionGRUCell(D, ka.GeneralAttention())
    decoder = ka.InferenceDecoder(cell, keras.layers.Embedding(V, D), keras.layers.Dense(V), START, END, MAX_LENGTH)
    decoder(model.memory[:2])
    return {"decoder": decoder}


def _rotary(model):
    stack = ka.TransformerDecoderStack(2, num_heads=2, intermediate_dim=32, use_rotary=True)
    decoder = ka.TransformerInferenceDecoder(stack, model.target_embedding, model.readout, START, END, MAX_LENGTH)
    decoder(model.memory[:2])
    return {"decoder": decoder}


REFUSALS = {
    "recurrent decoder": (
        _recurrent,
        "`decoder` is a InferenceDecoder; CTranslate2's TransformerSpec has no recurrent",
    ),
    "rotary positions": (_rotary, "`decoder.stack` uses rotary positions"),
    "activation": (dict(activation="elu"), "`encoder` uses the activation 'elu'; CTranslate2 has relu, gelu"),
    "head sizes": (dict(key_dim=4), "`encoder` has 2 heads of key_dim 4 for a model size of 16"),
    "post-norm with a final norm": (dict(norm_first=False, final_norm=True), "is post-norm with final_norm=True"),
    "positions": (lambda m: {"source_position": keras.layers.Identity()}, "`source_position` is a Identity"),
    "vocabulary size": (lambda m: {"target_vocabulary": TARGET_TOKENS[:-1]}, "has 19 tokens but the model's"),
    "repeated tokens": (lambda m: {"source_vocabulary": ["x"] * V}, "`source_vocabulary` repeats the tokens ['x']"),
    "quantization": (lambda m: {"quantization": "int4"}, "`quantization` is 'int4'; expected one of (None, "),
    "epsilons": (dict(layer_norm_epsilon=1e-6), "has layer_norm_epsilon 1e-05, the encoder 1e-06"),
    "end token": (
        lambda m: {"decoder": ka.TransformerInferenceDecoder(m.stack, m.target_embedding, m.readout, START, V, 4)},
        "`decoder.end_token` is 20, outside the target vocabulary's 20 ids",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS), ids=list(REFUSALS))
def test_refused_before_anything_is_written(case, tmp_path, request):
    change, message = REFUSALS[case]
    model = Seq2Seq(calibrate=False, **change) if isinstance(change, dict) else request.getfixturevalue("plain")
    arguments = {
        "output_dir": tmp_path / "model",
        "decoder": model.decoder(),
        "encoder": model.encoder,
        "source_embedding": model.source_embedding,
        "source_vocabulary": SOURCE_TOKENS,
        "target_vocabulary": TARGET_TOKENS,
        "source_position": model.source_position,
    }
    arguments["decoder"](model.memory[:2])
    if case == "epsilons":  # one stack's epsilon differs: the encoder's is the one asked for
        arguments["decoder"] = ka.TransformerInferenceDecoder(
            ka.TransformerDecoderStack(2, num_heads=2, intermediate_dim=32),
            model.target_embedding,
            model.readout,
            START,
            END,
            MAX_LENGTH,
        )
        arguments["decoder"](model.memory[:2])
    if callable(change):
        arguments.update(change(model))
    with pytest.raises(ValueError) as error:
        export_ctranslate2(**arguments)
    assert message in str(error.value)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a staging directory


def test_an_existing_directory_is_kept_unless_overwrite_and_replaced_whole(plain, tmp_path):
    model = plain
    export = lambda **options: model.export(tmp_path / "model", max_positions=16, **options)  # noqa: E731
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not empty; pass overwrite=True"):
        export()
    with pytest.raises(FileExistsError, match="is not a CTranslate2 model directory"):
        export(overwrite=True)
    assert (tmp_path / "model" / "notes.txt").read_text() == "mine"
    (tmp_path / "model" / "notes.txt").unlink()
    first = export()  # an empty directory is taken
    assert {p.name for p in first.iterdir()} >= {"model.bin", "config.json", "source_vocabulary.json"}
    int8 = export(overwrite=True, quantization="int8")
    assert int8 == first and (int8 / "model.bin").stat().st_size < 30_000
    assert [p.name for p in tmp_path.iterdir()] == ["model"]  # no staging or old copy left beside it


def test_vocabularies_of_the_text_module(plain, tmp_path):
    """`keras_attention.text.Vocabulary` works as a token list; its unknown token is CTranslate2's."""
    model = plain
    source = ka.text.Vocabulary(SOURCE_TOKENS, separator=" ", unknown_token="<unk>")
    target = ka.text.Vocabulary(TARGET_TOKENS, separator=" ", start_token="<s>", end_token="</s>")
    directory = export_ctranslate2(
        tmp_path / "model",
        model.decoder(),
        model.encoder,
        model.source_embedding,
        source,
        target,
        source_position=model.source_position,
        max_positions=16,
    )
    config = json.loads((directory / "config.json").read_text())
    assert (config["unk_token"], config["decoder_start_token"], config["eos_token"]) == ("<unk>", "<s>", "</s>")
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5) and not config["add_source_bos"]
    translator = translator_of(directory)
    # An unlisted source token reads as <unk>: the same translation as its id.
    as_text = translator.translate_batch([["s5", "never-seen"]], beam_size=1, **SAME_AS_OURS)
    as_ids = translate_ids(directory, np.array([[5, 1]]), translator=translator, beam_size=1, **SAME_AS_OURS)
    ids = [TARGET_TOKENS.index(token) for token in as_text[0].hypotheses[0]]
    np.testing.assert_array_equal(as_ids["ids"][0, : len(ids)], ids)


def test_the_package_imports_ctranslate2_with_mkl_on_x86_64_unless_told_otherwise(monkeypatch):
    """oneDNN's int8 products saturate on x86-64 CPUs without VNNI (library.py): measured on this
    module's int8 tests on an AVX2-only AMD EPYC, 67% of greedy rows identical with it, >= 90% with MKL."""
    from keras_attention.export.ctranslate2 import library

    monkeypatch.delenv("CT2_USE_MKL", raising=False)
    monkeypatch.setattr(library.platform, "machine", lambda: "x86_64")
    assert library.import_ctranslate2() is ctranslate2 and os.environ["CT2_USE_MKL"] == "1"
    monkeypatch.setenv("CT2_USE_MKL", "0")  # the user's choice stays
    library.import_ctranslate2()
    assert os.environ["CT2_USE_MKL"] == "0"
    monkeypatch.delenv("CT2_USE_MKL")
    monkeypatch.setattr(library.platform, "machine", lambda: "aarch64")  # no MKL there
    library.import_ctranslate2()
    assert "CT2_USE_MKL" not in os.environ
