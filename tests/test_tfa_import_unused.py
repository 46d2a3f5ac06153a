"""import_tfa_seq2seq refuses a checkpoint holding weights the model it builds
does not use (a bridge, a normalisation, a stacked decoder, a second
read-out...): importing the rest would give other numbers, with no error.
The checkpoints are the NMT tutorial's model tfa trained
(tests/fixtures/tfa_seq2seq) with the extra layers' variables written beside
its own, at the paths tf.keras would give them."""

import json

import numpy as np
import pytest

from keras_attention.tfa_checkpoint import read_tfa_checkpoint
from keras_attention.tfa_import import import_tfa_seq2seq, main
from tests.test_tfa_import import FIXTURES
from tests.test_tfa_import_configurations import logits_of, write_checkpoint

TUTORIAL = "tutorial_unmasked_full_lengths"  # GRU, Bahdanau, no mask_zero, full-width lengths
OPTIONS = dict(
    cell="gru",
    attention="bahdanau",
    start_token=1,
    end_token=2,
    max_length=9,
    mask_zero=False,
    memory_sequence_length="full",
)
UNITS, VOCABULARY = 16, 13  # the fixture's cell size and target vocabulary
OUT_OF_REACH = "the tfa model has layers import_tfa_seq2seq does not build"


def weights(*shape):
    return np.random.default_rng(len(shape)).normal(size=shape).astype("float32")


def tutorial_with(tmp_path, extra):
    """The tutorial checkpoint's variables and `extra` ({path: array}) written as one checkpoint."""
    variables = read_tfa_checkpoint(FIXTURES / TUTORIAL / "ckpt")
    assert not set(extra) & set(variables)
    write_checkpoint(tmp_path / "ckpt", {**variables, **extra})
    return tmp_path / "ckpt"


EXTRA_LAYERS = {
    "a bridge Dense between the encoder state and the decoder": (
        {"decoder/bridge/kernel": weights(UNITS, UNITS), "decoder/bridge/bias": weights(UNITS)},
        {},
    ),
    "a LayerNormalization": (
        {"decoder/layer_norm/gamma": weights(UNITS), "decoder/layer_norm/beta": weights(UNITS)},
        {},
    ),
    "a stacked decoder, its first cell named": (
        {
            "decoder/decoder_cell_2/kernel": weights(UNITS, 3 * UNITS),
            "decoder/decoder_cell_2/recurrent_kernel": weights(UNITS, 3 * UNITS),
            "decoder/decoder_cell_2/bias": weights(2, 3 * UNITS),
        },
        {"decoder_cell": "decoder/decoder_cell"},
    ),
    "a second Dense onto the vocabulary, the first named": (
        {"decoder/fc_2/kernel": weights(UNITS, VOCABULARY), "decoder/fc_2/bias": weights(VOCABULARY)},
        {"output_layer": "decoder/fc"},
    ),
    "an unknown variable under the decoder cell": ({"decoder/decoder_cell/extra_gate": weights(3 * UNITS)}, {}),
}


@pytest.mark.parametrize("extra, names", list(EXTRA_LAYERS.values()), ids=list(EXTRA_LAYERS))
def test_a_checkpoint_with_weights_the_model_does_not_use_is_refused(tmp_path, extra, names):
    checkpoint = tutorial_with(tmp_path, extra)
    unused = ", ".join(sorted(extra))
    with pytest.raises(ValueError) as error:
        import_tfa_seq2seq(checkpoint, names=names, **OPTIONS)
    message = str(error.value)
    assert f"tfa checkpoint: {len(extra)} variable(s) the imported model does not use: {unused}." in message
    assert OUT_OF_REACH in message and "a stacked or bidirectional RNN" in message
    assert "port it by hand (docs/migrating_from_tfa.md, 'Porting trained weights')" in message


def test_the_command_refuses_it_in_one_line(tmp_path, capsys):
    checkpoint = tutorial_with(tmp_path, EXTRA_LAYERS["a LayerNormalization"][0])
    args = [str(checkpoint), str(tmp_path / "out"), "--cell", "gru", "--attention", "bahdanau"]
    args += ["--start-token", "1", "--end-token", "2", "--max-length", "9"]
    args += ["--mask-zero", "false", "--memory-sequence-length", "full"]
    assert main(args) == 1
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1
    assert (
        "2 variable(s) the imported model does not use: decoder/layer_norm/beta, decoder/layer_norm/gamma" in errors[0]
    )
    assert not (tmp_path / "out").exists()


def test_a_stack_of_cells_is_not_an_invitation_to_name_one():
    """Several cells beside the mechanism: the error says a stack is not imported."""
    from keras_attention.tfa_checkpoint import locate_roles

    variables = read_tfa_checkpoint(FIXTURES / TUTORIAL / "ckpt")
    variables["decoder/decoder_cell_2/recurrent_kernel"] = weights(UNITS, 3 * UNITS)
    with pytest.raises(ValueError) as error:
        locate_roles(variables, {})
    message = str(error.value)
    assert "decoder_cell: found several (decoder/decoder_cell, decoder/decoder_cell_2)" in message
    assert (
        "Several layers for one role (a stacked or bidirectional RNN, two read-outs) make a model "
        "import_tfa_seq2seq does not build: naming one of them leaves the others unused, which is refused; "
        "port it by hand (docs/migrating_from_tfa.md, 'Porting trained weights')"
    ) in message


def test_many_unused_variables_are_counted_past_ten(tmp_path):
    extra = {f"decoder/block_{i:02d}/kernel": weights(UNITS, UNITS) for i in range(13)}
    with pytest.raises(ValueError) as error:
        import_tfa_seq2seq(tutorial_with(tmp_path, extra), **OPTIONS)
    listed = ", ".join(f"decoder/block_{i:02d}/kernel" for i in range(10))
    assert f"13 variable(s) the imported model does not use: {listed} and 3 more." in str(error.value)


def test_bookkeeping_beside_the_weights_is_not_unused(tmp_path):
    """Counters and an optimizer's variables (under `optimizer/`, or under
    another name, known by its integer `iter` (tf.keras's legacy optimizers)
    or `_iterations` (the newer ones, Keras 3's too)) are a training run's
    bookkeeping: the model still imports, to tfa's logits."""
    variables = read_tfa_checkpoint(FIXTURES / TUTORIAL / "ckpt")
    extra = {
        "step": np.int64(120),
        "opt/iter": np.int64(120),
        "opt/learning_rate": np.float32(0.01),
        "adam/_iterations": np.int64(120),
        "adam/_learning_rate": np.float32(0.01),
        "adam/_variables/2": weights(UNITS, VOCABULARY),
        "optimizer/iter": np.int64(120),
        "optimizer/beta_1": np.float32(0.9),
    }
    checkpoint = write_checkpoint(tmp_path / "ckpt", {**variables, **extra}, save=True)
    assert {"save_counter", "step", "opt/learning_rate", "adam/_variables/2"} <= set(read_tfa_checkpoint(checkpoint))
    fixture = json.loads((FIXTURES / TUTORIAL / "outputs.json").read_text())
    models = import_tfa_seq2seq(checkpoint, **OPTIONS)
    np.testing.assert_allclose(logits_of(fixture, models), fixture["logits"], atol=1e-5)


def test_a_counter_inside_the_model_does_not_hide_its_other_weights(tmp_path):
    """An integer `iter` marks an optimizer only outside the model's layers."""
    extra = {"decoder/iter": np.int64(3), "decoder/bridge/kernel": weights(UNITS, UNITS)}
    with pytest.raises(ValueError, match=r"1 variable\(s\) the imported model does not use: decoder/bridge/kernel\."):
        import_tfa_seq2seq(tutorial_with(tmp_path, extra), **OPTIONS)
