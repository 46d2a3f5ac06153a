"""Training the models of an ensemble, one process per model, several at a time.

A small model's training step is mostly per-op overhead, which one process
spreads badly over two CPU cores: two processes with one thread each train
two models in about the time one takes alone (20 epochs of French: 143 s
alone; 135 and 153 s side by side). So `train_members` trains `jobs` models
at a time, each in a fresh process with `cores // jobs` threads, and each
leaves its trained weights in `member_<k>/g2p_trainer.keras`.
"""

import concurrent.futures
import contextlib
import dataclasses
import json
import multiprocessing
import os
import time

THREAD_VARIABLES = ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS", "OMP_NUM_THREADS")


def member_directory(out, number):
    return os.path.join(out, f"member_{number}")


def finished_results(out, number):
    """The results a finished member left in its directory, or None (not trained, or killed before the end)."""
    path = os.path.join(member_directory(out, number), "results.json")
    if not os.path.exists(path) or not os.path.exists(os.path.join(member_directory(out, number), "g2p_trainer.keras")):
        return None
    with open(path) as file:
        return json.load(file)


def train_member(
    number, split, letters, phones, model_config, train_config, out, label="", right_to_left=False, strategy=None
):
    """Train one model (seed `train_config.seed + number`) into `out`; its
    `Models` and results. With `right_to_left` it learns (and is selected
    on) the pronunciations reversed (bidirectional.py). Under a `tf.distribute`
    `strategy`, the model is built and trained in its scope."""
    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p import training
    from keras_attention.g2p.bidirectional import reversed_split

    if right_to_left:
        split = reversed_split(split)
    seed = train_config.seed + number
    training.set_seed(seed)
    os.makedirs(out, exist_ok=True)
    train_config = dataclasses.replace(train_config, seed=seed)
    with contextlib.nullcontext() if strategy is None else strategy.scope():
        models = g2p_model.build_models(letters, phones, model_config)
        history, train_seconds = training.train(
            models.trainer, models.greedy, split, letters, phones, train_config, out, label=label
        )
    models.trainer.save(os.path.join(out, "g2p_trainer.keras"))
    results = {
        "seed": seed,
        "direction": "right-to-left" if right_to_left else "left-to-right",
        "epochs": len(history),
        "train_seconds": round(train_seconds, 1),
        "best_epoch": training.best_epoch(history),
        "history": history,
    }
    with open(os.path.join(out, "results.json.tmp"), "w") as file:
        json.dump(results, file, indent=1)
    os.replace(os.path.join(out, "results.json.tmp"), os.path.join(out, "results.json"))
    return models, results


def _train_in_this_process(number, split, letters, phones, model_config, train_config, out, label, right_to_left):
    return train_member(number, split, letters, phones, model_config, train_config, out, label, right_to_left)[1]


@contextlib.contextmanager
def threads_each(count):
    """TensorFlow's thread pools in the processes started inside, `count` threads each."""
    saved = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    os.environ.update({name: str(count) for name in THREAD_VARIABLES})
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def train_members(
    count, split, letters, phones, model_config, train_config, out, jobs, name="", directions=None, resume=False
):
    """Train `count` models into `out/member_<k>`, `jobs` at a time in their
    own processes; returns ([Models], [results], wall seconds). The Models
    are rebuilt here with the trained weights. With `directions="both"` the
    odd-numbered models learn the pronunciations reversed. With `resume`,
    models that finished in an earlier run (their results.json written) are
    kept and not trained again."""
    from keras_attention.g2p.bidirectional import reads_right_to_left

    begin = time.perf_counter()
    threads = max(1, (os.cpu_count() or 1) // jobs)
    context = multiprocessing.get_context("spawn")  # a fresh TensorFlow in each
    done = {number: finished_results(out, number) for number in range(count)} if resume else {}
    with threads_each(threads), concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        futures = {
            number: pool.submit(
                _train_in_this_process,
                number,
                split,
                letters,
                phones,
                model_config,
                train_config,
                member_directory(out, number),
                f"{name} member {number}",
                reads_right_to_left(number, directions),
            )
            for number in range(count)
            if done.get(number) is None
        }
        results = [done[number] if futures.get(number) is None else futures[number].result() for number in range(count)]
    seconds = time.perf_counter() - begin
    return load_members(out, count, letters, phones, model_config), results, seconds


def load_members(out, count, letters, phones, model_config):
    """The `count` trained models in `out/member_<k>`, rebuilt as `Models`
    (trainer, greedy and beam over shared layers) with their trained weights."""
    import keras

    from keras_attention.g2p import model as g2p_model

    members = []
    for number in range(count):
        models = g2p_model.build_models(letters, phones, model_config)
        path = os.path.join(member_directory(out, number), "g2p_trainer.keras")
        models.trainer.set_weights(keras.saving.load_model(path).get_weights())
        members.append(models)
    return members
