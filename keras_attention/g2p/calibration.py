"""This machine's training speed, measured before a time budget is shared out.

`settings.choose` fits the ensemble and the epochs into `--minutes` from
seconds per update measured on one machine. Machines differ more than a
rule can know: on a 2-core AMD EPYC the 500-word model's update took 0.135 s
beside a second model, the rule's figure 0.044 s, and a budget of 5.8
minutes stopped all four models after 4 to 6 of their 13 epochs, unconverged
(their dev WER 28% to 74% and still falling, the cosine schedule never
decayed; 42.6% test WER together).

`measure` trains the chosen model for a few updates on the lexicon, as the
ensemble will train: `jobs` models side by side, each in a fresh process
with `cores // jobs` threads (members.py). It returns what the estimate
needs: the seconds of one update once traced (the median after a warm-up,
which a late retrace cannot skew), the seconds a model costs before that
(the process's start, TensorFlow's import, building, the first traces) and
the calibration's own wall seconds, which the budget pays.
"""

import concurrent.futures
import multiprocessing
import os
import statistics
import time

WARMUP_UPDATES = 4  # the first traces (Keras traces each of the first two batch shapes, then a general one)
TIMED_UPDATES = 16


def measure(lexicon, settings, jobs, cores=None):
    """{"seconds_per_update", "model_seconds", "wall_seconds", "jobs"} of `settings`' model and
    training ({"model", "training", "normalization", "beam_width"}) on `lexicon` ({word:
    [phones, ...]}), `jobs` processes side by side sharing `cores` cores (default: all)."""
    from keras_attention.g2p.members import threads_each

    begin = time.perf_counter()
    cores = cores or os.cpu_count() or 1
    context = multiprocessing.get_context("spawn")  # a fresh TensorFlow in each, as the members get
    with threads_each(max(1, cores // jobs)), concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        timings = list(pool.map(time_updates, [lexicon] * jobs, [settings] * jobs))
    return {
        "seconds_per_update": round(statistics.mean(t["seconds_per_update"] for t in timings), 4),
        "model_seconds": round(statistics.mean(t["model_seconds"] for t in timings), 1),
        "wall_seconds": round(time.perf_counter() - begin, 1),
        "jobs": jobs,
    }


def time_updates(lexicon, settings, warmup=WARMUP_UPDATES, timed=TIMED_UPDATES, clock=time.perf_counter):
    """Train `settings`' model on `lexicon` for `warmup + timed` updates in this process
    (what one member does first), read by `clock`; {"seconds_per_update", "model_seconds"}."""
    begin = clock()
    import keras

    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p import training
    from keras_attention.g2p.train_command import configs
    from keras_attention.g2p.vocabularies import vocabularies

    letters, phones = vocabularies(lexicon, settings.get("normalization"))
    model_config, train_config = configs(settings, settings.get("beam_width", 1))
    training.set_seed(train_config.seed)
    models = g2p_model.build_models(letters, phones, model_config)
    batches = training.training_batches(lexicon, letters, phones, train_config)
    training.compile_trainer(models.trainer, batches, train_config)
    # A small lexicon's epoch may hold fewer batches than the calibration asks: its epochs repeat.
    steps = warmup + timed
    ends = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if len(ends) < steps:
                ends.append(clock())
            if len(ends) == steps:
                self.model.stop_training = True

    models.trainer.fit(batches, epochs=-(-steps // len(batches)), verbose=0, callbacks=[Clock()])
    per_update = statistics.median(b - a for a, b in zip(ends[warmup - 1 :], ends[warmup:]))
    return {
        "seconds_per_update": per_update,
        "model_seconds": max(0.0, ends[warmup - 1] - begin - warmup * per_update),
    }
