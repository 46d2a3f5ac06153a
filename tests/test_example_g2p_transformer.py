"""examples.g2p.train with `--architecture transformer`: the rule's Transformer settings, the knobs over them."""

import pytest

from examples.g2p import train
from keras_attention.g2p import settings


def test_the_transformer_architecture_takes_the_rule_s_transformer_settings_and_the_knobs_over_them():
    lexicon = {f"w{i}": [["W", str(i % 7)]] for i in range(8000)}
    args = train.parse_args(["sigmorphon", "--architecture", "transformer", "--heads", "8", "--warmup-steps", "99"])
    model, training = train.configs(args, **train.settings_for(lexicon, args.architecture))
    chosen = settings.choose(8000, set("w0123456789"), architecture="transformer")
    assert (model.architecture, model.layers, model.model_dim, model.ff_dim) == ("transformer", 3, 128, 512)
    assert model.heads == 8 and model.dropout == chosen["model"]["dropout"] == 0.3
    assert training.batch_size == 128 and training.learning_rate == 1e-3 and training.warmup_steps == 99
    # The command line over the dataclass's defaults.
    assert (
        train.configs(train.parse_args(["cmudict", "--architecture", "transformer"]))[0].architecture == "transformer"
    )
    model, training = train.configs(
        train.parse_args(["cmudict", "--smoke", "--architecture", "transformer"]), **train.smoke_settings("transformer")
    )
    assert (model.architecture, model.model_dim, training.passes_per_epoch) == ("transformer", 32, 3)
    # Without --architecture: the LSTM, as before.
    model, _ = train.configs(train.parse_args(["cmudict"]), **train.settings_for(lexicon))
    assert model.architecture == "lstm" and model.encoder_units == 128


def test_a_transformer_knob_without_the_transformer_is_refused(capsys):
    with pytest.raises(SystemExit):
        train.parse_args(["cmudict", "--model-dim", "64"])
    assert (
        "argument --model-dim: a Transformer size knob; expected --architecture transformer with it; "
        "got --architecture lstm" in capsys.readouterr().err
    )
