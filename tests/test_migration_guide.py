"""docs/migrating_from_tfa.md: its keras-attention code runs and does what the
text says, and its name tables cover tfa.seq2seq and name only what exists.

The guide's ```python blocks are keras-attention code and are run here; its
```python tfa blocks are tfa code (TensorFlow 2.15) and are not. A block whose
first line says "(continues the training block)" runs in a copy of the
namespace the training block left.
"""

import importlib
import json
import re
import shlex
import shutil

import keras
import numpy as np
import pytest
from keras import ops

import keras_attention as ka
from tests.test_docs import ROOT, _python_blocks

GUIDE = (ROOT / "docs" / "migrating_from_tfa.md").read_text()
BLOCKS = {block.splitlines()[0]: block for block in _python_blocks(GUIDE)}
CONTINUES = "(continues the training block)"
TRAINING = "# keras-attention: teacher-forced training"
GREEDY = "# keras-attention: greedy inference (continues the training block)"
BEAM = "# keras-attention: beam inference (continues the training block)"
SCHEDULED = "# keras-attention: scheduled sampling with a loop of your own (continues the training block)"
PORTING = "# keras-attention: porting trained tfa weights"
CUMPROD = "# keras-attention: safe_cumprod"
IMPORT = "# keras-attention: importing a tfa checkpoint"
TFA_BEAM = "# keras-attention: beam search ranked as tfa.seq2seq.BeamSearchDecoder ranked it"
OPENNMT = "# keras-attention: an OpenNMT-tf AttentionalRNNDecoder(num_layers=2, num_units=32)"

# The public names of tensorflow_addons/seq2seq/__init__.py in tfa 0.23.0.
TFA_PUBLIC_NAMES = {
    "AttentionMechanism", "AttentionWrapper", "AttentionWrapperState", "BahdanauAttention",
    "BahdanauMonotonicAttention", "LuongAttention", "LuongMonotonicAttention", "hardmax",
    "monotonic_attention", "safe_cumprod", "BasicDecoder", "BasicDecoderOutput", "BeamSearchDecoder",
    "BeamSearchDecoderOutput", "BeamSearchDecoderState", "FinalBeamSearchDecoderOutput", "gather_tree",
    "gather_tree_from_array", "tile_batch", "BaseDecoder", "Decoder", "dynamic_decode", "SequenceLoss",
    "sequence_loss", "CustomSampler", "GreedyEmbeddingSampler", "InferenceSampler", "SampleEmbeddingSampler",
    "Sampler", "ScheduledEmbeddingTrainingSampler", "ScheduledOutputTrainingSampler", "TrainingSampler",
}  # fmt: skip


def _section(title):
    """The guide's text from the `## title` heading to the next `## ` heading."""
    start = GUIDE.index(f"\n## {title}\n")
    end = GUIDE.find("\n## ", start + 1)
    return GUIDE[start : None if end < 0 else end]


def _run(title, training_namespace):
    namespace = dict(training_namespace) if CONTINUES in title else {}
    exec(compile(BLOCKS[title], f"<migrating_from_tfa: {title}>", "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def namespaces(tmp_path_factory):
    """Every runnable block, run once in the guide's order: {first line: namespace}."""
    keras.utils.set_random_seed(0)
    with pytest.MonkeyPatch.context() as patch:
        work = tmp_path_factory.mktemp("guide")
        patch.chdir(work)  # whatever a block writes stays out of the tree
        # The import block reads "training_checkpoints/ckpt": a model tfa trained.
        shutil.copytree(ROOT / "tests" / "fixtures" / "tfa_seq2seq" / "luong_lstm", work / "training_checkpoints")
        results = {TRAINING: _run(TRAINING, {})}
        for title in BLOCKS:
            if title != TRAINING:
                results[title] = _run(title, results[TRAINING])
    return results


def test_every_runnable_block_is_named_and_ran(namespaces):
    expected = {TRAINING, GREEDY, BEAM, SCHEDULED, PORTING, IMPORT, CUMPROD, TFA_BEAM, OPENNMT}
    assert set(BLOCKS) == expected, "a block was added, renamed or removed: give it a check here"
    assert set(namespaces) == expected
    # The tfa side is there too, and is never run.
    assert GUIDE.count("```python tfa\n") >= 3  # the three programs at least


def _teacher_forced_log_probs(ns, source_ids, ids):
    """Log-probabilities `(B, T, V)` of the training model fed `START ids[:-1]`
    (embedded by lookup, so that no id is taken for padding)."""
    encoder = keras.Model(ns["source"], [ns["memory"], ns["h"], ns["c"]])
    values, h0, c0 = encoder(source_ids)
    inputs = np.concatenate([np.full((len(ids), 1), ns["START"]), ids[:, :-1]], axis=1)
    embedded = ops.take(ns["target_embedding"].embeddings, inputs, axis=0)
    outputs = ka.AttentionDecoder(ns["cell"])(embedded, values, memory_mask=source_ids != 0, initial_state=[h0, c0])
    return ops.convert_to_numpy(ops.log_softmax(ns["readout"](outputs), axis=-1))


def _sum_along(log_probs, ids, lengths):
    chosen = np.take_along_axis(log_probs, ids[..., None], axis=-1)[..., 0]
    return (chosen * (np.arange(ids.shape[1]) < lengths[:, None])).sum(axis=1)


def test_training_program_trains(namespaces):
    ns = namespaces[TRAINING]
    assert np.isfinite(ns["history"].history["loss"]).all()
    logits = ns["trainer"].predict([ns["source_ids"][:4], ns["target_in_ids"][:4]], verbose=0)
    assert logits.shape == (4, 9, ns["TGT_VOCAB"])


def test_greedy_ids_are_the_argmax_path(namespaces):
    ns = namespaces[GREEDY]
    ids, lengths, end = ns["ids"], ns["lengths"], ns["END"]
    assert ids.shape == (4, 20)
    for row, length in zip(ids, lengths):
        assert 1 <= length <= 20
        assert end not in row[: length - 1]
        assert (row[length - 1 :] == end).all() or length == 20
    # Decoded on past any end token (an end id no step can produce), every id
    # is the argmax of the teacher-forced model fed the ids before it.
    source_ids = ns["source_ids"][:4]
    layers = (ns["cell"], ns["target_embedding"], ns["readout"])
    unending = ka.InferenceDecoder(*layers, start_token=ns["START"], end_token=ns["TGT_VOCAB"], max_length=20)
    model = keras.Model(ns["source"], unending(ns["memory"], initial_state=[ns["h"], ns["c"]]))
    full = model.predict(source_ids, verbose=0)
    log_probs = _teacher_forced_log_probs(ns, source_ids, full["ids"])
    np.testing.assert_array_equal(log_probs.argmax(-1), full["ids"])
    np.testing.assert_allclose(full["scores"], _sum_along(log_probs, full["ids"], np.full(4, 20)), atol=1e-4)
    for row, full_row, length in zip(ids, full["ids"], lengths):
        np.testing.assert_array_equal(row[:length], full_row[:length])
    np.testing.assert_allclose(ns["result"]["scores"], _sum_along(log_probs, ids, lengths), atol=1e-4)


def test_beam_returns_sorted_scored_hypotheses(namespaces):
    ns = namespaces[BEAM]
    ids, scores, log_probs, lengths = ns["ids"], ns["scores"], ns["log_probs"], ns["result"]["lengths"]
    assert ids.shape == (4, ns["BEAM"], 20) and scores.shape == log_probs.shape == (4, ns["BEAM"])
    assert (np.diff(scores, axis=1) <= 1e-6).all(), "beams are not sorted best first"
    # The score is the GNMT-penalised log-probability, length counting the end token.
    np.testing.assert_allclose(scores, log_probs / ((5.0 + lengths) / 6.0) ** 0.6, rtol=1e-5)
    # The best beam's log-probability is the teacher-forced model's.
    source_ids = ns["source_ids"][:4]
    best = _teacher_forced_log_probs(ns, source_ids, ids[:, 0])
    np.testing.assert_allclose(log_probs[:, 0], _sum_along(best, ids[:, 0], lengths[:, 0]), atol=1e-4)


def test_exhaustive_beam_is_at_least_as_good_as_greedy(namespaces):
    """With width V ** (L - 1) the beam keeps every prefix, so its best
    hypothesis is the most likely sequence of at most L tokens: greedy's can
    be no better (a theorem, not luck of the random weights)."""
    ns = namespaces[TRAINING]
    length, vocabulary = 3, ns["TGT_VOCAB"]
    common = dict(start_token=ns["START"], end_token=ns["END"], max_length=length, return_alignments=False)
    layers = (ns["cell"], ns["target_embedding"], ns["readout"])
    state = dict(initial_state=[ns["h"], ns["c"]])
    exhaustive = ka.InferenceDecoder(*layers, method="beam", beam_width=vocabulary ** (length - 1), **common)
    greedy = ka.InferenceDecoder(*layers, **common)
    model = keras.Model(ns["source"], [exhaustive(ns["memory"], **state), greedy(ns["memory"], **state)])
    beam_result, greedy_result = model.predict(ns["source_ids"][:4], verbose=0)
    assert (beam_result["log_probs"][:, 0] >= greedy_result["scores"] - 1e-4).all()


def test_scheduled_sampling_loop_is_the_trained_model(namespaces):
    ns = namespaces[SCHEDULED]
    assert tuple(ns["logits"].shape) == (8, 9, ns["TGT_VOCAB"])
    assert np.isfinite(ops.convert_to_numpy(ns["loss"]))
    # Sampling nothing, the loop is teacher forcing: the trainer's logits on real steps.
    source_ids, target_in_ids = ns["source_ids"][:8], ns["target_in_ids"][:8]
    loop = ops.convert_to_numpy(ns["scheduled_sampling_logits"](source_ids, target_in_ids, 0.0, training=False))
    trained = ns["trainer"].predict([source_ids, target_in_ids], verbose=0)
    real = target_in_ids != 0
    np.testing.assert_allclose(loop[real], trained[real], atol=1e-5)


def test_ported_weights_compute_tfa_formulas(namespaces):
    """After the port, one step computes tfa's Luong attention and attention
    layer (with the tanh of convention (a)) on tfa's row layout, and feeds
    the LSTM `[x ; previous attention]` as tfa's default `cell_input_fn`."""
    ns = namespaces[PORTING]
    cell, embed, units, memory_size = ns["cell"], ns["EMBED"], ns["UNITS"], ns["MEMORY"]
    rng = np.random.default_rng(1)
    values = rng.normal(size=(2, 5, memory_size)).astype("float32")
    x = rng.normal(size=(2, embed)).astype("float32")
    states = [rng.normal(size=(2, units)).astype("float32") for _ in range(3)]  # h, c, previous attention
    output, new_states, alignment = cell.step(x, states, cell.prepare_memory(values))
    h, _ = cell.cell(np.concatenate([x, states[2]], axis=1), states[:2])
    h = ops.convert_to_numpy(h)
    np.testing.assert_allclose(ops.convert_to_numpy(new_states[0]), h, atol=1e-5)
    scores = np.einsum("bd,btd->bt", h, values @ ns["memory_kernel"])  # tfa: q . memory_layer(k)
    weights = np.exp(scores - scores.max(1, keepdims=True))
    weights /= weights.sum(1, keepdims=True)
    np.testing.assert_allclose(ops.convert_to_numpy(alignment), weights, atol=1e-5)
    context = np.einsum("bt,btd->bd", weights, values)
    expected = np.tanh(np.concatenate([h, context], axis=1) @ ns["attention_layer"])  # tfa rows: [h ; c]
    np.testing.assert_allclose(ops.convert_to_numpy(output), expected, atol=1e-4)


def test_porting_table_names_existing_weights():
    table = _section("Porting trained weights")
    layers = [
        (ka.AdditiveAttention(4, normalize=True), ["query_kernel", "key_kernel", "score_vector", "scale", "bias"]),
        (ka.GeneralAttention(), ["bilinear_kernel"]),
        (ka.BahdanauMonotonicAttention(4), ["query_kernel", "key_kernel", "score_vector", "score_bias"]),
        (ka.LuongMonotonicAttention(), ["bilinear_kernel", "score_bias"]),
    ]
    for layer, names in layers:
        layer(np.zeros((1, 3), "float32"), np.zeros((1, 2, 5), "float32"))
        for name in names:
            assert f"`{name}`" in table
            assert isinstance(getattr(layer, name), keras.Variable), f"{type(layer).__name__}.{name}"
    assert "`AttentionWrapper.attention_kernel`" in table


def test_safe_cumprod_block_prints_what_it_says(namespaces):
    # The function itself is tested against tfa's definition in tests/test_ops.py.
    printed = ops.convert_to_numpy(
        namespaces[CUMPROD]["safe_cumprod"](1.0 - namespaces[CUMPROD]["p"], axis=-1, exclusive=True)
    )
    np.testing.assert_allclose(printed, [[1.0, 0.1, 0.05, 0.05]], rtol=1e-5)  # the guide's comment


def test_opennmt_cell_decodes(namespaces):
    cell = namespaces[OPENNMT]["cell"]
    outputs = ka.AttentionDecoder(cell)(np.zeros((2, 3, 8), "float32"), np.ones((2, 5, 32), "float32"))
    assert tuple(outputs.shape) == (2, 3, 32)


def test_name_tables_cover_every_tfa_public_name():
    rows = [line for line in _section("Name by name").splitlines() if line.startswith("| `tfa.seq2seq.")]
    named = {name for row in rows for name in re.findall(r"`tfa\.seq2seq\.(\w+)", row.split("|")[1])}
    assert named == TFA_PUBLIC_NAMES, f"missing: {TFA_PUBLIC_NAMES - named}; unknown: {named - TFA_PUBLIC_NAMES}"


def _resolve(dotted):
    parts = dotted.split(".")
    target = importlib.import_module(parts[0])
    for index, part in enumerate(parts[1:], start=2):
        if hasattr(target, part):
            target = getattr(target, part)
        else:  # a submodule nobody imported yet
            target = importlib.import_module(".".join(parts[:index]))
    return target


def test_guide_names_only_what_exists():
    """Every `keras_attention.…` and `keras.…` the guide names exists, except
    in the "Planned" notes (blockquotes), in the tfa code and in quoted error
    messages ('keras.src.engine')."""
    text = re.sub(r"```python tfa\n.*?```", "", GUIDE, flags=re.S)
    text = "\n".join(line for line in text.splitlines() if not line.startswith(">"))
    names = set(re.findall(r"(?<![\w.'])((?:keras_attention|keras)(?:\.\w+)+)", text))
    assert "keras_attention.AttentionWrapper" in names and "keras.ops.one_hot" in names
    missing = []
    for name in sorted(names):
        try:
            _resolve(name)
        except (AttributeError, ImportError):
            missing.append(name)
    assert not missing, f"the guide names what does not exist: {missing}"


def test_the_tfa_beam_block_builds_a_decoder_with_tfas_bookkeeping(namespaces):
    decoder = namespaces[TFA_BEAM]["decoder"]
    config = decoder.get_config()
    assert (config["method"], config["length_convention"], config["length_penalty_weight"]) == ("beam", "tfa", 0.6)
    result = decoder(np.random.default_rng(0).normal(size=(2, 7, 32)).astype("float32"))
    assert tuple(result["ids"].shape) == (2, 5, 20)


def test_the_import_block_saves_a_translator_that_decodes_tfas_greedy_ids(namespaces, tmp_path_factory):
    fixture = json.loads((ROOT / "tests" / "fixtures" / "tfa_seq2seq" / "luong_lstm" / "outputs.json").read_text())
    models = namespaces[IMPORT]["models"]
    result = models["greedy"].predict(np.asarray(fixture["source"], "int32"), verbose=0)
    for row, want, length in zip(result["ids"], fixture["greedy_ids"], fixture["greedy_lengths"]):
        np.testing.assert_array_equal(row[:length], want[:length])
    assert models["beam"].get_layer("beam_decoder").length_convention == "tfa"


def test_the_import_command_of_the_guide_writes_a_translator(tmp_path, monkeypatch, capsys):
    """The guide's command line, run through the command's `main` where the
    import block ran: its beam.keras decodes tfa's beam ids."""
    from keras_attention.tfa_import import main

    (command,) = re.findall(r"```bash\n(.*?)```", _section("Porting trained weights"), re.S)
    line = command.split("\n#")[0].replace("\\\n", " ")
    program, *args = shlex.split(line)
    assert program == "keras-attention-import-tfa"
    monkeypatch.chdir(tmp_path)
    shutil.copytree(ROOT / "tests" / "fixtures" / "tfa_seq2seq" / "luong_lstm", tmp_path / "training_checkpoints")
    assert main(args) == 0, capsys.readouterr().err
    fixture = json.loads((ROOT / "tests" / "fixtures" / "tfa_seq2seq" / "luong_lstm" / "outputs.json").read_text())
    beam = keras.saving.load_model(tmp_path / args[1] / "beam.keras")
    assert beam.get_layer("beam_decoder").length_convention == "tfa"
    greedy = keras.saving.load_model(tmp_path / args[1] / "greedy.keras")
    result = greedy.predict(np.asarray(fixture["source"], "int32"), verbose=0)
    for row, want, length in zip(result["ids"], fixture["greedy_ids"], fixture["greedy_lengths"]):
        np.testing.assert_array_equal(row[:length], want[:length])
