"""import_tfa_seq2seq on every tfa configuration it must import exactly or
refuse (issue 34): BahdanauAttention(normalize=True), LuongAttention(scale=True),
the four ways of masking the source, a mechanism other than `attention=`
says, monotonic mechanisms, a subclassed single model, HDF5 weights. The
checkpoints are models tfa 0.23 trained (tests/fixtures/tfa_seq2seq, with
the script that made them); no test here imports tensorflow-addons."""

import json

import keras
import numpy as np
import pytest

from keras_attention.tfa_checkpoint import (
    describe_attention_layer,
    describe_mechanism,
    locate_roles,
    read_tfa_checkpoint,
)
from keras_attention.tfa_import import import_tfa_seq2seq, main
from tests.test_tfa_import import FIXTURES, load
from tests.test_tfa_import_beams import agrees_with_score

# tfa setting -> fixture: each imports to tfa's logits, greedy ids and beam ids.
EXACT = {
    "BahdanauAttention(normalize=True)": "bahdanau_normalized_lstm",
    "LuongAttention(scale=True)": "luong_scaled_gru",
    "no mask_zero, full-width lengths (the NMT tutorial)": "tutorial_unmasked_full_lengths",
    "no mask_zero, the source's lengths": "unmasked_encoder_source_lengths",
    "mask_zero, no lengths": "masked_encoder_no_lengths",
    "a subclassed single model, roles named": "subclassed_single_model",
}
# The subclassed model's checkpoint puts every layer under `model`.
SINGLE_NAMES = {
    "source_embedding": "model/source_embedding",
    "encoder": "model/encoder_rnn/cell",
    "target_embedding": "model/embedding",
    "decoder_cell": "model/decoder_cell",
    "output_layer": "model/fc",
}


def load_variant(variant, **overrides):
    if variant == "subclassed_single_model":
        overrides.setdefault("names", SINGLE_NAMES)
    return load(variant, **overrides)


def logits_of(fixture, models):
    source, target_in = (np.asarray(fixture[k], "int32") for k in ("source", "target_in"))
    return models["trainer"].predict([source, target_in], verbose=0)


@pytest.fixture(scope="module", params=list(EXACT.values()), ids=list(EXACT))
def imported(request):
    return load_variant(request.param)


def test_the_configuration_imports_to_tfas_logits_greedy_and_beam_ids(imported):
    fixture, models = imported
    want = np.asarray(fixture["logits"])
    assert np.abs(want).max() > 1.0  # trained weights, not a near-zero output
    # Folding LuongAttention's g into the kernel rounds once more: rtol covers it.
    np.testing.assert_allclose(logits_of(fixture, models), want, atol=1e-5, rtol=1e-6)
    source = np.asarray(fixture["source"], "int32")
    greedy = models["greedy"].predict(source, verbose=0)
    np.testing.assert_array_equal(greedy["lengths"], fixture["greedy_lengths"])
    for row, want_row, length in zip(greedy["ids"], fixture["greedy_ids"], fixture["greedy_lengths"]):
        np.testing.assert_array_equal(row[:length], want_row[:length])
    beam = models["beam"].predict(source, verbose=0)
    np.testing.assert_array_equal(beam["lengths"], fixture["beam_lengths"])
    np.testing.assert_allclose(beam["scores"], fixture["beam_scores"], atol=1e-5)
    # tfa's predicted_ids can disagree with its own scores (test_tfa_import_beams):
    # ours are tfa's on every beam whose ids are its score's hypothesis.
    tfa_ids, tfa_lengths = np.asarray(fixture["beam_ids"]), np.asarray(fixture["beam_lengths"])
    tfa_agrees = agrees_with_score(models["trainer"], source, tfa_ids, tfa_lengths, np.asarray(fixture["beam_scores"]))
    assert tfa_agrees[:, 0].all()
    for b, k in zip(*np.nonzero(tfa_agrees)):
        np.testing.assert_array_equal(beam["ids"][b, k, : tfa_lengths[b, k]], tfa_ids[b, k, : tfa_lengths[b, k]])


def test_the_normalized_and_scaled_weights_are_read_not_ignored():
    """Issue 34, item 1: attention_g and attention_b were ignored (logits off by about 5)."""
    variables = read_tfa_checkpoint(FIXTURES / "bahdanau_normalized_lstm" / "ckpt")
    _, models = load_variant("bahdanau_normalized_lstm")
    score = models["trainer"].get_layer("decoder").cell.attention
    assert score.normalize
    g, b = (variables[f"decoder/attention_mechanism/attention_{name}"] for name in ("g", "b"))
    assert abs(float(g) - np.sqrt(1.0 / score.units)) > 0.1 and np.abs(b).max() > 0.1  # trained, not initial
    np.testing.assert_array_equal(score.scale.numpy(), g)
    np.testing.assert_array_equal(score.bias.numpy(), b)
    # LuongAttention's g multiplies the score k^T W q: it is folded into W.
    variables = read_tfa_checkpoint(FIXTURES / "luong_scaled_gru" / "ckpt")
    _, models = load_variant("luong_scaled_gru")
    g = float(variables["decoder/attention_mechanism/attention_g"])
    assert abs(g - 1.0) > 0.1  # trained away from its initial 1
    kernel = models["trainer"].get_layer("decoder").cell.attention.bilinear_kernel.numpy()
    np.testing.assert_allclose(kernel, g * variables["decoder/attention_mechanism/memory_layer/kernel"], rtol=1e-6)


@pytest.mark.parametrize(
    "variant, right",
    [
        ("tutorial_unmasked_full_lengths", dict(mask_zero=False, memory_sequence_length="full")),
        ("unmasked_encoder_source_lengths", dict(mask_zero=False, memory_sequence_length="source")),
        ("masked_encoder_no_lengths", dict(mask_zero=True, memory_sequence_length="full")),
        ("luong_lstm", dict(mask_zero=True, memory_sequence_length="source")),
    ],
)
def test_each_way_of_masking_needs_its_own_options(variant, right):
    """Issue 34, item 3: the fixtures tell the four settings apart; only the right one gives tfa's logits.
    Sixteen models: the trainer alone is built (the decoders are checked per
    fixture above) and called eagerly (predict traces a function per model:
    3 to 4 times the cost of the rest)."""
    fixture = json.loads((FIXTURES / variant / "outputs.json").read_text())
    want = np.asarray(fixture["logits"])
    source, target_in = (np.asarray(fixture[k], "int32") for k in ("source", "target_in"))
    for mask_zero in (True, False):
        for lengths in ("source", "full"):
            _, models = load_variant(variant, mask_zero=mask_zero, memory_sequence_length=lengths, build=["trainer"])
            assert list(models) == ["trainer"]
            error = np.abs(keras.ops.convert_to_numpy(models["trainer"]([source, target_in])) - want).max()
            if (mask_zero, lengths) == (right["mask_zero"], right["memory_sequence_length"]):
                assert error < 2e-5
            else:
                assert error > 0.05, (mask_zero, lengths)


@pytest.mark.parametrize("variant", ["unmasked_encoder_source_lengths", "masked_encoder_no_lengths"])
def test_a_model_with_its_own_memory_mask_saves_and_loads(variant, tmp_path):
    """The two settings whose attention mask is not the encoder's Keras mask
    compute it in the model (from the source ids): it survives `.keras`."""
    fixture, models = load_variant(variant)
    source = np.asarray(fixture["source"], "int32")
    for kind in ("trainer", "beam"):
        models[kind].save(tmp_path / f"{kind}.keras")
    trainer = keras.saving.load_model(tmp_path / "trainer.keras")
    np.testing.assert_allclose(logits_of(fixture, {"trainer": trainer}), fixture["logits"], atol=1e-5)
    beam = keras.saving.load_model(tmp_path / "beam.keras").predict(source, verbose=0)
    np.testing.assert_array_equal(beam["ids"], models["beam"].predict(source, verbose=0)["ids"])
    np.testing.assert_array_equal(beam["lengths"], fixture["beam_lengths"])


def test_the_masking_must_be_stated():
    with pytest.raises(ValueError, match=r"say how the tfa model masked its source .* got mask_zero=None"):
        load_variant("luong_lstm", mask_zero=None, memory_sequence_length=None)
    with pytest.raises(ValueError, match=r"got mask_zero=True, memory_sequence_length=None"):
        load_variant("luong_lstm", memory_sequence_length=None)
    with pytest.raises(ValueError, match=r"`memory_sequence_length` must be one of \['source', 'full'\]; got 'all'"):
        load_variant("luong_lstm", memory_sequence_length="all")
    with pytest.raises(ValueError, match=r"`mask_zero` must be True or False; got 1"):
        load_variant("luong_lstm", mask_zero=1)
    # The pre-release shorthand is gone, not silently accepted.
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'mask_source_padding'"):
        load_variant("luong_lstm", mask_source_padding=True)


def test_build_names_the_models_to_build():
    fixture, models = load_variant("luong_lstm", build=("greedy",))
    assert list(models) == ["greedy"]
    result = models["greedy"].predict(np.asarray(fixture["source"], "int32"), verbose=0)
    np.testing.assert_array_equal(result["lengths"], fixture["greedy_lengths"])
    for wrong in ("trainer", (), ["trainer", "decoder"], None):
        with pytest.raises(ValueError, match=r"`build` must name one or more of \['trainer', 'greedy', 'beam'\]; got "):
            load_variant("luong_lstm", build=wrong)


def test_another_mechanism_than_attention_says_is_refused_naming_the_right_one():
    """Issue 34, item 2: a Bahdanau checkpoint read as Luong imported silently, logits off by 20."""
    with pytest.raises(
        ValueError,
        match=r"`attention`='luong', but the mechanism at 'decoder/attention_mechanism' holds attention_v, "
        r"memory_layer/kernel, query_layer/kernel: a tfa BahdanauAttention. Pass attention='bahdanau'",
    ):
        load_variant("bahdanau_gru", attention="luong")
    with pytest.raises(ValueError, match=r"holds attention_b, attention_g, attention_v, .*Pass attention='bahdanau'"):
        load_variant("bahdanau_normalized_lstm", attention="luong")
    with pytest.raises(ValueError, match=r"holds attention_g, memory_layer/kernel: a tfa LuongAttention"):
        load_variant("luong_scaled_gru", attention="bahdanau")


def test_a_monotonic_mechanism_is_refused_with_the_way_out():
    with pytest.raises(
        ValueError,
        match=r"holds attention_score_bias .*: a tfa BahdanauMonotonicAttention, which import_tfa_seq2seq does not "
        r"import. Port it by hand to keras_attention.BahdanauMonotonicAttention",
    ):
        load_variant("bahdanau_monotonic_gru", attention="bahdanau")


def test_a_subclassed_single_model_names_every_missing_role_in_one_error():
    """Issue 34, item 4: one run, one error, every role it cannot tell with its candidates
    (the read-out it finds: the only kernel onto the target vocabulary)."""
    with pytest.raises(ValueError) as error:
        load_variant("subclassed_single_model", names={})
    message = str(error.value)
    assert "cannot tell which weights play 4 role(s)" in message
    assert "decoder_cell: found several (model/decoder_cell, model/encoder_rnn/cell)" in message
    assert "encoder: found none (candidates: model/decoder_cell, model/encoder_rnn/cell)" in message
    assert "target_embedding: found several (model/embedding, model/source_embedding)" in message
    assert "source_embedding: found none (candidates: model/embedding, model/source_embedding)" in message
    wanted = "{'decoder_cell': 'path/in/checkpoint', 'encoder': 'path/in/checkpoint', "
    wanted += "'target_embedding': 'path/in/checkpoint', 'source_embedding': 'path/in/checkpoint'}"
    assert f"pass them all in one go: names={wanted} (the command: --name ROLE=PATH for each)" in message
    assert "Several layers for one role (a stacked or bidirectional RNN, two read-outs)" in message
    # Naming some roles leaves only the others in the error.
    with pytest.raises(ValueError, match=r"play 2 role\(s\): decoder_cell: found several .*; encoder: found none"):
        load_variant("subclassed_single_model", names={k: SINGLE_NAMES[k] for k in SINGLE_NAMES if "embedding" in k})


def test_hdf5_weights_are_refused_with_what_to_do(tmp_path, capsys):
    """Issue 34, item 5: an .h5 file that exists was 'no such checkpoint'."""
    h5 = FIXTURES / "subclassed_single_model" / "weights.h5"
    with pytest.raises(
        ValueError, match=r"is an HDF5 file .*HDF5 is not supported.*tf.train.Checkpoint\(model=model\)"
    ):
        import_tfa_seq2seq(h5, "lstm", "luong", 1, 2, 5, mask_zero=True, memory_sequence_length="source")
    renamed = tmp_path / "weights.bin"  # known by its signature, whatever its name
    renamed.write_bytes(h5.read_bytes())
    with pytest.raises(ValueError, match=r"is an HDF5 file"):
        import_tfa_seq2seq(renamed, "lstm", "luong", 1, 2, 5, mask_zero=True, memory_sequence_length="source")
    other = tmp_path / "notes.txt"
    other.write_text("not weights")
    with pytest.raises(ValueError, match=r"is a file but not a TensorFlow checkpoint"):
        import_tfa_seq2seq(other, "lstm", "luong", 1, 2, 5, mask_zero=True, memory_sequence_length="source")
    args = [str(h5), str(tmp_path / "out"), "--cell", "lstm", "--attention", "luong", "--mask-zero", "true"]
    args += ["--memory-sequence-length", "source", "--start-token", "1", "--end-token", "2", "--max-length", "5"]
    assert main(args) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "HDF5 is not supported" in errors[0]


def test_one_of_the_checkpoint_files_reads_as_its_prefix():
    prefix = FIXTURES / "luong_lstm" / "ckpt"
    want = read_tfa_checkpoint(prefix)
    for name in ("ckpt.index", "ckpt.data-00000-of-00001"):
        got = read_tfa_checkpoint(FIXTURES / "luong_lstm" / name)
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])


def test_layouts_it_does_not_reproduce_are_refused_naming_the_tfa_setting():
    """Configurations the fixtures do not hold, as variable dicts."""
    kernel = np.zeros((4, 4), "float32")
    mechanism = {"d/m/memory_layer/kernel": kernel}
    with pytest.raises(ValueError, match=r"holds memory_layer/bias, memory_layer/kernel, which is neither a tfa"):
        describe_mechanism({**mechanism, "d/m/memory_layer/bias": kernel[0]}, "d/m", "luong")
    layer = {"attention_layer": "d/cell/_attention_layers/0"}
    with pytest.raises(
        ValueError, match=r"also holds d/cell/_attention_layers/0/bias: an `attention_layer=` of your own"
    ):
        describe_attention_layer(
            {"d/cell/_attention_layers/0/kernel": kernel, "d/cell/_attention_layers/0/bias": kernel[0]}, layer
        )
    two = {f"d/cell/_attention_layers/{i}/kernel": kernel for i in range(2)}
    with pytest.raises(ValueError, match=r"several attention layers .*a list of attention mechanisms"):
        describe_attention_layer(two, {"attention_layer": None})
    with pytest.raises(
        ValueError,
        match=r"attention_mechanism: found several \(d/a, d/b\): an AttentionWrapper given "
        r"a list of mechanisms, which has no equivalent here",
    ):
        locate_roles({"d/a/memory_layer/kernel": kernel, "d/b/memory_layer/kernel": kernel}, {})


def write_checkpoint(path, variables, save=False):
    """A TF checkpoint holding `variables` ({path: array}) at those object
    paths; its prefix. `save=True` writes it as `tf.train.Checkpoint.save`
    does, numbered and with a `save_counter`."""
    import tensorflow as tf

    root = tf.Module()
    for key, value in variables.items():
        node = root
        *parents, leaf = key.split("/")
        for part in parents:
            if not hasattr(node, part):
                setattr(node, part, tf.Module())
            node = getattr(node, part)
        setattr(node, leaf, tf.Variable(value))
    tops = {key.split("/")[0] for key in variables}
    checkpoint = tf.train.Checkpoint(**{top: getattr(root, top) for top in tops})
    return checkpoint.save(str(path)) if save else checkpoint.write(str(path))


def test_a_bahdanau_mechanism_narrower_than_the_cell_imports(tmp_path):
    """The mechanism's units (8 here) and the cell's (16) are separate sizes."""
    variables = read_tfa_checkpoint(FIXTURES / "bahdanau_normalized_lstm" / "ckpt")
    rng = np.random.default_rng(0)
    mechanism = "decoder/attention_mechanism"
    for name in ("query_layer/kernel", "memory_layer/kernel", "attention_v", "attention_b"):
        key = f"{mechanism}/{name}"
        variables[key] = rng.normal(size=variables[key].shape[:-1] + (8,)).astype("float32")
    write_checkpoint(tmp_path / "ckpt", variables)
    fixture = json.loads((FIXTURES / "bahdanau_normalized_lstm" / "outputs.json").read_text())
    models = import_tfa_seq2seq(
        tmp_path / "ckpt", "lstm", "bahdanau", 1, 2, 9, mask_zero=True, memory_sequence_length="source"
    )
    score = models["trainer"].get_layer("decoder").cell.attention
    assert (
        score.units,
        score.query_kernel.shape,
        tuple(models["trainer"].get_layer("decoder").cell.cell.recurrent_kernel.shape),
    ) == (8, (16, 8), (16, 64))
    np.testing.assert_array_equal(score.key_kernel.numpy(), variables[f"{mechanism}/memory_layer/kernel"])
    assert logits_of(fixture, models).shape == np.asarray(fixture["logits"]).shape


def test_the_command_states_each_refusal_in_one_line(tmp_path, capsys):
    def run(variant, *extra):
        args = [str(FIXTURES / variant / "ckpt"), str(tmp_path / "out"), "--start-token", "1", "--end-token", "2"]
        args += ["--max-length", "9", "--mask-zero", "true", "--memory-sequence-length", "source", *extra]
        status = main(args)
        return status, [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]

    status, errors = run("bahdanau_gru", "--cell", "gru", "--attention", "luong")
    assert status == 1 and len(errors) == 1
    assert "a tfa BahdanauAttention. Pass attention='bahdanau' (the command: --attention bahdanau)" in errors[0]
    status, errors = run("subclassed_single_model", "--cell", "lstm", "--attention", "luong")
    assert status == 1 and len(errors) == 1 and "cannot tell which weights play 4 role(s)" in errors[0]
    names = [f"--name={role}={path}" for role, path in SINGLE_NAMES.items()]
    assert run("subclassed_single_model", "--cell", "lstm", "--attention", "luong", *names) == (0, [])
    # The masking is a required option: a usage error names it.
    with pytest.raises(SystemExit) as exit:
        main([str(FIXTURES / "luong_lstm" / "ckpt"), str(tmp_path / "o"), "--cell", "lstm", "--attention", "luong"])
    assert exit.value.code == 2
    assert "--mask-zero" in capsys.readouterr().err


def test_a_shape_mismatch_names_the_tfa_setting_that_likely_differs(tmp_path):
    """The variable, its shape, the shape the model needs, and why."""

    def refused(variant, match, variables=None, **overrides):
        if variables is not None:
            overrides["checkpoint"] = write_checkpoint(tmp_path / variant, variables)
        checkpoint = overrides.pop("checkpoint", FIXTURES / variant / "ckpt")
        fixture = json.loads((FIXTURES / variant / "outputs.json").read_text())
        options = {**fixture["variant"], **overrides}
        with pytest.raises(ValueError, match=match):
            import_tfa_seq2seq(
                checkpoint,
                options["cell"],
                options["attention"],
                1,
                2,
                9,
                encoder=options.get("encoder"),
                mask_zero=True,
                memory_sequence_length="source",
            )

    # Another cell type: the width says which, and the option to pass.
    refused(
        "bahdanau_gru",
        r"'encoder/rnn/cell/kernel' has shape \(8, 48\), but the model needs \(8, 64\) for the encoder: its width "
        r"48 is 3 x 16 units: a tfa GRU cell, not encoder='lstm'; pass encoder='gru' \(the command: --encoder gru\)",
        encoder="lstm",
    )
    refused(
        "bahdanau_gru",
        r"'decoder/decoder_cell/kernel' has shape \(24, 48\), but the model needs \(24, 64\) for the decoder_cell: "
        r".*a tfa GRU cell, not cell='lstm'; pass cell='gru' \(the command: --cell gru\)",
        cell="lstm",
        encoder="gru",
    )
    refused("luong_lstm", r"its width 64 is 4 x 16 units: a tfa LSTM cell, not cell='gru'", cell="gru", encoder="lstm")
    # A GRU with one bias row: reset_after=False.
    variables = read_tfa_checkpoint(FIXTURES / "bahdanau_gru" / "ckpt")
    for cell in ("encoder/rnn/cell", "decoder/decoder_cell"):
        variables[f"{cell}/bias"] = variables[f"{cell}/bias"][0]
    refused(
        "bahdanau_gru",
        r"'encoder/rnn/cell/bias' has shape \(48,\), but the model needs \(2, 48\) for the encoder: a one-row bias "
        r"\(48,\) is a tfa GRU\(Cell\) with reset_after=False; the importer builds Keras's default reset_after=True",
        variables,
    )
    # An encoder fed something wider than the source embedding.
    variables = read_tfa_checkpoint(FIXTURES / "luong_lstm" / "ckpt")
    variables["encoder/rnn/cell/kernel"] = np.zeros((10, 64), "float32")
    refused(
        "luong_lstm",
        r"\(10, 64\), but the model needs \(8, 64\) for the encoder: the cell's input is 10 wide, not 8 \(the source embedding\)",
        variables,
    )
    # A read-out that does not read the attention.
    variables = read_tfa_checkpoint(FIXTURES / "luong_lstm" / "ckpt")
    variables["decoder/fc/kernel"] = np.zeros((20, 13), "float32")
    refused(
        "luong_lstm",
        r"'decoder/fc/kernel' has shape \(20, 13\), but the model needs \(16, 13\) for the output_layer: the read-out "
        r"takes 20 features, but the decoder outputs 16 \(the attention, output_attention=True\)",
        variables,
    )
