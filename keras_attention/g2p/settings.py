"""The settings a lexicon gets: one rule from its size and alphabet, within a time budget.

`choose(train_words, alphabet, minutes)` returns the model's and the
training's settings (the fields of `model.ModelConfig` and
`training.TrainConfig` it sets), the ensemble's size and the letters'
Unicode normalization:

- model: the decoder without input feeding ("luong"), a 2x128 BiLSTM encoder
  and a 256-unit decoder; from 60,000 words (CMUdict's size) 2x192 and 384;
- batch: 16 words under 1,500, 32 under 4,000, 64 under 20,000, then 128;
- an epoch of at least 125 updates (the 8,000-word runs' epoch): a
  smaller lexicon is passed over several times an epoch, so that the
  epoch's fixed costs (dev scoring, the backup) stay small beside its
  training, and patience and the schedule mean what they mean at 8,000;
- epochs: 22 (12 from 20,000 words, 13 from 60,000), and more where that
  is under 2,750 updates (the 8,000-word SIGMORPHON runs' 22 epochs of 125),
  so a small lexicon is seen many times instead of stopping after a few
  dozen updates;
- dropout 0.3 under 20,000 words, 0.2 above;
- early stopping counted in updates: patience 6 epochs (4 from 20,000
  words) and at least 750 updates, never before half the epochs (a model on
  800 words with 6 epochs' patience stopped after 90 updates, unconverged,
  at 100% dev WER);
- an ensemble of 4 models under 20,000 words, 2 above;
- normalization: NFD when a letter is not ASCII (accents and Hangul split
  into parts the model shares across words), none otherwise.

With `architecture="transformer"` (transformer_model.py) the model is a
pre-norm Transformer sized by the same size classes, smaller and with more
dropout on less data (Wu et al. 2021, arXiv:2005.10213: dropout 0.3 on
small data; Yolchuyeva et al. 2019: 3+3 layers, d 256, 4 heads on CMUdict):

- 3+3 layers, d 256, FFN 1024, dropout 0.1 from 60,000 words; d 192, FFN
  768, dropout 0.2 from 20,000; d 128, FFN 512, dropout 0.3 below, with
  2+2 layers under 4,000 words; 4 heads;
- batches twice the LSTM's (a Transformer's step is a few large products,
  and its recipe wants large batches), a peak learning rate of 1e-3 after a
  warm-up of 8% of the updates (50 to 4,000), then the cosine decay;
- the epochs, early stopping and ensemble of the LSTM's rule.

CMUdict's run (109,156 training words) and SIGMORPHON 2021 medium's (8,000
words) are this rule at their sizes (tests pin both). With `minutes`, the
estimated training time (`estimate_seconds`: measured seconds per update on
2 CPU cores, models trained side by side) is brought within the budget by fewer
epochs while each model keeps at least half of them, then by a smaller
ensemble, never under one model a core (on 500 words, 4 models of 14-15 epochs pronounced better than 2
of 22); training also stops at the budget whatever the estimate said
(`TrainConfig.max_minutes`). The command measures this machine's speed
first (calibration.py) and gives it as `measured`, which then stands for
`seconds_per_update` and `MODEL_SECONDS`.
"""

import math

LARGE_WORDS = 60_000  # CMUdict's size class
MEDIUM_WORDS = 20_000  # above: SIGMORPHON's high-resource size class
MIN_UPDATES = 2_750
EPOCH_UPDATES = 125  # an epoch of the 8,000-word runs; smaller lexicons pass over their words several times an epoch
# Seconds an epoch costs besides its updates (dev scoring, the backup, saving the best weights).
EPOCH_SECONDS = 2.0
# Seconds a model costs besides its epochs: its process's start, and tracing the training step
# for the batch shapes it meets (on 400 words, 13 epochs of 25 updates took 105 s on a loaded machine).
MODEL_SECONDS = 30.0
PATIENCE_UPDATES = 750
# Minutes for export, process start-up and test scoring, outside the training budget.
OVERHEAD_MINUTES = 1.0


SMALL_WORDS = 4_000  # below: a 2+2-layer Transformer
ARCHITECTURES = ("lstm", "transformer")
TRANSFORMER_LEARNING_RATE = 1e-3
WARMUP_SHARE, WARMUP_MIN, WARMUP_MAX = 0.08, 50, 4_000


def batch_size(train_words):
    return 16 if train_words < 1500 else 32 if train_words < 4000 else 64 if train_words < MEDIUM_WORDS else 128


def seconds_per_update(batch, large):
    """One training update of one model in its own process with one thread
    (2 CPU cores, two models side by side), the 2x128/256 model, as
    measured (2026-11-28, each the mean of the two models' steady epochs):
    0.044 s at batch 16, 0.063 at 32, 0.081 at 64, 0.147 at 128; the
    2x192/384 model 1.4x the time at 128. (The earlier rule, 0.013 +
    0.00067 b, was under by 1.4x to 1.9x: the budget cut 500-word runs
    at 14 of their 22 epochs.)"""
    return (0.030 + 0.00089 * batch) * (1.4 if large else 1.0)


def transformer_parameters(model):
    """A Transformer's weights in the layers (embeddings left out): per layer
    pair, 4 d^2 (self-attention) + 2 d f (FFN) in the encoder and 8 d^2 + 2 d f
    in the decoder."""
    d, f = model["model_dim"], model["ff_dim"]
    return model["layers"] * (12 * d * d + 4 * d * f)


def transformer_seconds_per_update(batch, model):
    """One Transformer training update, one thread, two models side by side
    (as `seconds_per_update`): about proportional to batch x weights, as
    measured at 3 layers: 0.074 s at batch 128 with d 128, 0.34 s at 256
    with d 192 and 0.66 s at 256 with d 256 (each measured beside the
    LSTM's update at batch 128 and scaled to its 0.099 s, the machine being
    loaded). What was measured is the ratio to the LSTM's update, so the
    figures follow `seconds_per_update`'s (0.147 s at 128 since its
    re-measurement)."""
    lstm_measured_then = 0.099
    ratio = (0.03 + 0.00045 * batch * transformer_parameters(model) / 1e6) / lstm_measured_then
    return ratio * seconds_per_update(128, large=False)


def _updates_per_pass(train_words, batch):
    return max(1, math.ceil(train_words / batch))


def passes_per_epoch(train_words, batch):
    return max(1, math.ceil(EPOCH_UPDATES / _updates_per_pass(train_words, batch)))


def estimate_seconds(train_words, settings, cores=2):
    """Training seconds of `settings` on `train_words` words: each model's
    updates, rounds of `cores` models side by side. With a `"measured"`
    entry in `settings` (calibration.py: this machine's seconds per update
    and per model, measured) those figures stand for the rule's."""
    training = settings["training"]
    batch, epochs = training["batch_size"], training["epochs"]
    model = settings["model"]
    measured = settings.get("measured")
    if measured:
        per_update, per_model = measured["seconds_per_update"], measured["model_seconds"]
    elif model.get("architecture", "lstm") == "transformer":
        per_update, per_model = transformer_seconds_per_update(batch, model), MODEL_SECONDS
    else:
        per_update, per_model = seconds_per_update(batch, model["encoder_units"] > 128), MODEL_SECONDS
    updates = epochs * training.get("passes_per_epoch", 1) * _updates_per_pass(train_words, batch)
    return _rounds(settings, cores) * (updates * per_update + epochs * EPOCH_SECONDS + per_model)


def _rounds(settings, cores):
    """How many rounds of `cores` models side by side train the ensemble."""
    return math.ceil(settings["ensemble"] / min(settings["ensemble"], cores))


def _epochs_within(budget, epochs, train_words, settings, cores):
    """The epochs of `settings`' models that fit in `budget` seconds (at most `epochs`)."""
    estimate = estimate_seconds(train_words, settings, cores)
    if estimate <= budget:
        return epochs
    per_model = settings["measured"]["model_seconds"] if settings.get("measured") else MODEL_SECONDS
    fixed = _rounds(settings, cores) * per_model  # paid whatever the epochs
    return max(1, math.floor(epochs * max(budget - fixed, 0) / (estimate - fixed)))


def _stopping(epochs, updates_per_epoch, patience_epochs):
    return dict(
        epochs=epochs,
        patience=max(patience_epochs, math.ceil(PATIENCE_UPDATES / updates_per_epoch)),
        min_epochs=math.ceil(epochs / 2),
    )


def _transformer_model(train_words):
    large, medium = train_words >= LARGE_WORDS, train_words >= MEDIUM_WORDS
    model_dim = 256 if large else 192 if medium else 128
    return dict(
        architecture="transformer",
        layers=3 if train_words >= SMALL_WORDS else 2,
        heads=4,
        model_dim=model_dim,
        ff_dim=4 * model_dim,
        dropout=0.1 if large else 0.2 if medium else 0.3,
    )


def _warmup_steps(updates):
    return min(WARMUP_MAX, max(WARMUP_MIN, round(WARMUP_SHARE * updates)))


def choose(train_words, alphabet, minutes=None, cores=2, architecture="lstm", measured=None):
    """{"model", "training", "ensemble", "normalization", "estimated_minutes"}
    for a lexicon of `train_words` words written with the characters
    `alphabet`, trained within `minutes` (None: no budget) on `cores` cores,
    an `architecture` ("lstm" or "transformer") model. `measured`: this
    machine's speed for that model ({"seconds_per_update", "model_seconds"},
    calibration.py), used instead of the rule's figures and kept in the
    settings (`"measured"`)."""
    if isinstance(train_words, bool) or not isinstance(train_words, int) or train_words < 1:
        raise ValueError(f"choose: `train_words` must be a positive integer; got {train_words!r}.")
    if minutes is not None and not minutes > 0:
        raise ValueError(f"choose: `minutes` must be a positive number of minutes or None; got {minutes!r}.")
    if architecture not in ARCHITECTURES:
        raise ValueError(f"choose: `architecture` must be one of {ARCHITECTURES}; got {architecture!r}.")
    transformer = architecture == "transformer"
    large, medium = train_words >= LARGE_WORDS, train_words >= MEDIUM_WORDS
    batch = batch_size(train_words) * (2 if transformer else 1)
    passes = passes_per_epoch(train_words, batch)
    per_epoch = passes * _updates_per_pass(train_words, batch)
    epochs = max(13 if large else 12 if medium else 22, math.ceil(MIN_UPDATES / per_epoch))
    patience_epochs = 4 if medium else 6
    settings = {
        "model": dict(
            decoder="luong",
            encoder_units=192 if large else 128,
            decoder_units=384 if large else 256,
            dropout=0.2 if medium else 0.3,
        ),
        "training": dict(batch_size=batch, passes_per_epoch=passes, **_stopping(epochs, per_epoch, patience_epochs)),
        "ensemble": 2 if medium else 4,
        "normalization": None if all(char.isascii() for char in alphabet) else "NFD",
    }
    if transformer:
        settings["model"] = _transformer_model(train_words)
        settings["training"]["learning_rate"] = TRANSFORMER_LEARNING_RATE
    if measured:
        settings["measured"] = dict(measured)
    if minutes is not None:
        budget = max(minutes - OVERHEAD_MINUTES, minutes / 2) * 60
        # The ensemble shrinks only while its models would get under half
        # their epochs: measured on 500 words, 4 models of 14-15 epochs
        # scored 48.5% (Dutch) and 21.6% (Hungarian) test WER, 2 models of
        # all 22 epochs 54.4% and 25.4%. And only while that saves a round:
        # a model alone on 2 cores trains no faster than each of two side by
        # side (500 Dutch words: 0.13-0.17 s an update alone with 2 threads,
        # 0.139 s each beside another), so fewer models than cores would
        # only lose a model.
        while settings["ensemble"] > cores and _epochs_within(budget, epochs, train_words, settings, cores) < math.ceil(
            epochs / 2
        ):
            settings["ensemble"] //= 2
        if estimate_seconds(train_words, settings, cores) > budget:
            epochs = _epochs_within(budget, epochs, train_words, settings, cores)
            settings["training"].update(_stopping(epochs, per_epoch, patience_epochs))
        settings["training"]["max_minutes"] = round(budget / 60 / _rounds(settings, cores), 2)
    if transformer:  # a share of the updates the epochs (cut by the budget or not) make
        settings["training"]["warmup_steps"] = _warmup_steps(settings["training"]["epochs"] * per_epoch)
    settings["estimated_minutes"] = round(estimate_seconds(train_words, settings, cores) / 60, 1)
    return settings


def smoke(architecture="lstm"):
    """Seconds-long settings for tests: a tiny model that memorises a few dozen words."""
    if architecture == "transformer":
        # Measured: 51 words memorised (0% WER) after 8 epochs of 3 passes (17 of
        # one pass, each epoch's dev scoring then costing more than its updates).
        return {
            "model": dict(architecture="transformer", layers=1, heads=2, model_dim=32, ff_dim=64, dropout=0.0),
            "training": dict(
                epochs=12,
                batch_size=10,
                learning_rate=3e-3,
                warmup_epochs=0.3,
                label_smoothing=0.0,
                ema_epochs=0.0,
                patience=3,
                min_epochs=0,
                passes_per_epoch=3,
            ),
            "ensemble": 1,
            "normalization": None,
        }
    return {
        "model": dict(
            embedding=16, encoder_units=32, encoder_layers=1, decoder_units=64, attention_units=32, dropout=0.0
        ),
        "training": dict(
            epochs=60,
            batch_size=10,
            learning_rate=1e-2,
            warmup_epochs=1,
            label_smoothing=0.0,
            ema_epochs=0.0,
            # Memorised (0% dev WER) near epoch 35 of 60; stopped 8 epochs
            # after the last better dev score with the best weights.
            patience=8,
            min_epochs=0,
            passes_per_epoch=1,
        ),
        "ensemble": 1,
        "normalization": None,
    }
