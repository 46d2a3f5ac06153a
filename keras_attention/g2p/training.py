"""Training a G2P model: length-bucketed `fit`, a warm-up then cosine schedule,
weight averaging, dev WER after every epoch, the best epoch kept, resumable."""

import dataclasses
import json
import os
import sys
import time

import keras
import numpy as np

from keras_attention.batching import LengthBucketedBatches
from keras_attention.g2p.pronounce import score
from keras_attention.losses import SequenceLoss
from keras_attention.training import build_optimizer


@dataclasses.dataclass
class TrainConfig:
    epochs: int = 12
    batch_size: int = 128
    learning_rate: float = 3e-3
    warmup_epochs: float = 0.5
    # Warm-up counted in updates instead (0: `warmup_epochs`): a Transformer's
    # recipe (Wu et al. 2021, arXiv:2005.10213) counts it in updates.
    warmup_steps: int = 0
    label_smoothing: float = 0.1
    ema_epochs: float = 1.0  # horizon of the weight average, in epochs (0: no averaging)
    clipnorm: float = 5.0
    patience: int = 4  # epochs without a better dev score (WER, then PER) before stopping
    min_epochs: int = 0  # never stopped early before this many epochs
    max_minutes: float = 0.0  # stop at an epoch's end once this much training time is spent (0: no limit)
    # Passes over the training words in one epoch: a small lexicon's epoch
    # is a few dozen updates, and each epoch's fixed cost (dev scoring, the
    # backup, the weight average's swap) would outweigh its training.
    passes_per_epoch: int = 1
    seed: int = 0
    jit: bool = False


def teacher_forcing_data(lexicon, letters, phones):
    """(letters, previous phones) inputs and next-phone targets, one row per pronunciation."""
    words, decoder_inputs, targets = [], [], []
    for word, options in lexicon.items():
        for pronunciation in options:
            words.append(letters.encode_one(word))
            ids = phones.encode_one(" ".join(pronunciation))
            decoder_inputs.append([phones.start_id] + ids)
            targets.append(ids + [phones.end_id])
    return (words, decoder_inputs), targets


def dev_score(entry):
    """What "better on dev" means: a lower WER, and on equal WER a lower PER.

    WER alone is flat while a model learns its first phones: on a small
    lexicon every word stays wrong (100%) for several epochs, so by WER the
    first epoch, barely past its warm-up, was the best and the model stopped
    `patience` epochs later with those weights, pronouncing one or two
    phones a word. PER keeps falling meanwhile."""
    return (entry["dev_wer"], entry["dev_per"])


PERFECT = (0.0, 0.0)  # the best `dev_score` there is


class DevEvaluation(keras.callbacks.Callback):
    """Greedy WER/PER on the dev words after each epoch (`dev_wer`, `dev_per` in
    the logs); keeps the weights of the best epoch (`dev_score`) in `path`
    and, with a `patience`, stops training after that many epochs without
    a better one, or at once at a perfect score (0% WER and PER), which no
    epoch can better."""

    def __init__(self, greedy, lexicon, letters, phones, path, label="", patience=None, min_epochs=0):
        super().__init__()
        self.greedy, self.lexicon, self.letters, self.phones, self.path = greedy, lexicon, letters, phones, path
        self.label, self.patience, self.min_epochs = label, patience, min_epochs
        self.best = None
        self.history = []

    def on_epoch_end(self, epoch, logs=None):
        begin = time.perf_counter()
        rates, _ = score(self.greedy, self.lexicon, self.letters, self.phones)
        logs = logs if logs is not None else {}
        logs["dev_wer"], logs["dev_per"] = rates["wer"], rates["per"]
        current = dev_score(logs)
        if self.best is None or current < self.best:
            self.best, self.best_epoch = current, epoch
            self.model.save_weights(self.path)
            if self.patience is not None and current == PERFECT and epoch + 1 >= self.min_epochs:
                # No later epoch can beat it (better is strictly lower), so
                # the weights kept are the same: patience would only spend
                # epochs. Only a lexicon learnt by heart gets here: the
                # smoke runs, trained and scored on their 50 words, spent
                # 8 of their 36 to 42 epochs so (measured).
                self.model.stop_training = True
        elif self.patience is not None and epoch - self.best_epoch >= self.patience and epoch + 1 >= self.min_epochs:
            self.model.stop_training = True
        self.history.append(
            {"epoch": epoch + 1, "dev_wer": rates["wer"], "dev_per": rates["per"], "loss": logs.get("loss")}
        )
        # With a label (models training side by side, no progress bar) a
        # whole line; else the end of Keras's line for the epoch.
        lead = f"{self.label} epoch {epoch + 1}: loss {logs.get('loss', float('nan')):.4f}," if self.label else " -"
        print(
            f"{lead} dev WER {rates['wer']:.2f}% PER {rates['per']:.2f}% ({time.perf_counter() - begin:.0f} s)",
            flush=True,
        )


class EpochClock(keras.callbacks.Callback):
    """Training seconds (evaluation excluded), for the accuracy-against-time curve."""

    def __init__(self):
        super().__init__()
        self.seconds, self.elapsed = 0.0, []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._last = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds += self._last - self._start
        self.elapsed.append(self.seconds)


class TimeBudget(keras.callbacks.Callback):
    """Stops training at the end of the epoch after which another would pass
    `minutes` of training (the best epoch's weights are kept as ever)."""

    def __init__(self, minutes):
        super().__init__()
        self.seconds = minutes * 60
        self.begin = None

    def on_epoch_begin(self, epoch, logs=None):
        if self.begin is None:
            self.begin = time.perf_counter()
        self._epoch_start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        if now - self.begin + (now - self._epoch_start) > self.seconds:
            self.model.stop_training = True


def training_batches(lexicon, letters, phones, config):
    """The length-bucketed batches of one epoch: `config.passes_per_epoch` passes over `lexicon`."""
    inputs, targets = teacher_forcing_data(lexicon, letters, phones)
    inputs, targets = tuple(rows * config.passes_per_epoch for rows in inputs), targets * config.passes_per_epoch
    # The read-out is a Sequential, which drops the Keras mask: weigh the
    # loss by the real target steps instead.
    return LengthBucketedBatches(inputs, targets, batch_size=config.batch_size, seed=config.seed, weigh_targets=True)


def compile_trainer(trainer, batches, config):
    """Compile `trainer` for `config.epochs` epochs of `batches`: Adam with a
    warm-up then cosine schedule, clipping and the weight average."""
    steps = config.epochs * len(batches)
    warmup = max(1, config.warmup_steps or int(config.warmup_epochs * len(batches)))
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, max(1, steps - warmup), alpha=0.02, warmup_target=config.learning_rate, warmup_steps=warmup
    )
    # The average's horizon is counted in epochs, so a small data set does
    # not average over its first, untrained, steps.
    momentum = 1.0 - 1.0 / max(2.0, config.ema_epochs * len(batches))
    optimizer = keras.optimizers.Adam(
        schedule, clipnorm=config.clipnorm, use_ema=config.ema_epochs > 0, ema_momentum=momentum
    )
    trainer.compile(optimizer, SequenceLoss(label_smoothing=config.label_smoothing), jit_compile=config.jit)
    # On TensorFlow the first step is then traced once, not twice (keras_attention.training).
    build_optimizer(trainer)


def train(trainer, greedy, data, letters, phones, config, out, verbose=None, label=""):
    """Fit `trainer` on data["train"], selecting on data["dev"]; returns the
    per-epoch history. The best epoch's (averaged) weights are left in the
    models; a killed run resumes from `out/backup`. With a `label`, one line
    per epoch names it (for models training side by side)."""
    batches = training_batches(data["train"], letters, phones, config)
    compile_trainer(trainer, batches, config)
    best_path = os.path.join(out, "best.weights.h5")
    clock = EpochClock()
    evaluation = DevEvaluation(
        greedy, data["dev"], letters, phones, best_path, label, config.patience, config.min_epochs
    )
    callbacks = [keras.callbacks.BackupAndRestore(os.path.join(out, "backup")), clock]
    if config.ema_epochs:
        # After BackupAndRestore (which saves the raw weights), before the
        # evaluation (which scores the averaged ones).
        callbacks.append(keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
    callbacks.append(evaluation)
    if config.max_minutes:
        callbacks.append(TimeBudget(config.max_minutes))
    if verbose is None:  # a progress bar in a terminal, a line per epoch in a log, the evaluation's with a label
        verbose = 0 if label else 1 if sys.stdout.isatty() else 2
    trainer.fit(batches, epochs=config.epochs, callbacks=callbacks, verbose=verbose)
    if os.path.exists(best_path):
        trainer.load_weights(best_path)
    history = []
    for entry, seconds in zip(evaluation.history, clock.elapsed[-len(evaluation.history) :]):
        history.append({**entry, "train_seconds": round(seconds, 1)})
    with open(os.path.join(out, "history.json"), "w") as file:
        json.dump(history, file, indent=1)
    return history, clock.seconds


def best_epoch(history):
    return min(history, key=dev_score) if history else None


def set_seed(seed):
    keras.utils.set_random_seed(seed)
    np.random.seed(seed)
