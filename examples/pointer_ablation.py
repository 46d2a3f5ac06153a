"""Which parts of the convex-hull recipe matter: an ablation at equal training time.

Each variant trains a pointer network on n = 10 hulls for the same wall-clock
budget (the learning rate follows a cosine over the budget, not over a fixed
number of steps), then decodes the same 1,000 held-out hulls as
`pointer_networks.py`'s hull10 model:

1. the previous recipe: 128 units, the raw (x, y) points, one fixed training
   set of 60,000 hulls seen again every epoch;
2. the same with fresh data every epoch (`GeneratedBatches`);
3. 256 units;
4. a per-point embedding (Dense 128 relu, Dense 128): the recipe.

The decoding choices (beam search, the distinct-pointer constraint) are
measured on the full run by `pointer_networks.py` itself.

    python -m examples.pointer_ablation [--minutes 5] [--out DIR] [--results FILE] [--smoke]
"""

import argparse
import math
import os
import shutil
import sys
import time

import keras
import numpy as np

import keras_attention as ka
from examples import common
from examples import pointer_networks as recipe

FIXED_EXAMPLES = 60_000
VARIANTS = (
    ("previous recipe: 128 units, raw points, one fixed set of 60,000", 128, 0, False),
    ("+ fresh data every epoch", 128, 0, True),
    ("+ 256 units", 256, 0, True),
    ("+ point embedding (the recipe)", 256, 128, True),
)


class TimeBudget(keras.callbacks.Callback):
    """A cosine learning rate over a wall-clock budget, and the stop when it is spent."""

    def __init__(self, seconds, peak, floor=0.05):
        super().__init__()
        self.seconds, self.peak, self.floor = seconds, peak, floor

    def on_train_begin(self, logs=None):
        self.start = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None):
        spent = min(1.0, (time.perf_counter() - self.start) / self.seconds)
        scale = self.floor + (1 - self.floor) * 0.5 * (1 + math.cos(math.pi * spent))
        self.model.optimizer.learning_rate.assign(self.peak * scale)
        if spent >= 1.0:
            self.model.stop_training = True


def run_variant(label, units, embedding, fresh, args, test):
    keras.utils.set_random_seed(args.seed)
    task = recipe.Task("hull", 10, units=units, embedding=embedding, epochs=1, samples=args.samples)
    trainer, greedy, beam = recipe.build_models(task, units, args.beam_width, "hull10")
    trainer.compile(optimizer=keras.optimizers.Adam(task.learning_rate, clipnorm=2.0), loss=ka.SequenceLoss())
    ka.training.build_optimizer(trainer)
    budget = TimeBudget(args.minutes * 60, task.learning_rate)
    if fresh:
        data = recipe.batches(task, args.batch_size, args.samples, seed=args.seed)
        history = trainer.fit(data, epochs=10_000, callbacks=[budget], verbose=0)
    else:
        points, targets, _ = task.make(args.fixed, np.random.default_rng(args.seed))
        history = trainer.fit(
            [points, targets], targets, batch_size=args.batch_size, epochs=10_000, callbacks=[budget], verbose=0
        )
    recipe.copy_weights(trainer, beam)
    evaluation = recipe.evaluate(greedy, beam, test, "hull")
    row = {
        "variant": label,
        "units": units,
        "embedding": embedding,
        "fresh_data": fresh,
        "epochs": len(history.history["loss"]),
        "final_loss": float(history.history["loss"][-1]),
        "train_seconds": time.perf_counter() - budget.start,
        "greedy": evaluation["greedy"],
        "beam": evaluation["beam"],
    }
    print(
        f"{label:<66}{row['greedy']['sequence_accuracy']:>8.1%}{row['beam']['sequence_accuracy']:>8.1%}"
        f"{row['epochs']:>8}",
        flush=True,
    )
    return row


def table(results):
    """The README's ablation table, from a results JSON."""
    lines = [
        f"| hull n=10, {results['minutes']:g} min of training each | greedy | beam {results['beam_width']} | epochs |",
        "|---|---|---|---|",
    ]
    for row in results["variants"]:
        lines.append(
            f"| {row['variant']} | {row['greedy']['sequence_accuracy']:.1%} | "
            f"{row['beam']['sequence_accuracy']:.1%} | {row['epochs']} |"
        )
    return "\n".join(lines)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="training minutes per variant (default 5)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/pointer_ablation")
    parser.add_argument("--results", help="also write the results JSON here (e.g. results/pointer_ablation.json)")
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run (used by the tests)")
    args = parser.parse_args(argv)
    if not args.minutes > 0:
        parser.error(f"--minutes must be > 0; got {args.minutes}")
    args.samples, args.fixed, args.batch_size = (256, 512, 64) if args.smoke else (50_000, FIXED_EXAMPLES, 128)
    args.beam_width = 3 if args.smoke else 5
    os.makedirs(args.out, exist_ok=True)
    test = recipe.test_sets("hull10", recipe.TASKS["hull10"], 64 if args.smoke else 1000, args.seed)[10]
    print(f"{'variant':<66}{'greedy':>8}{'beam':>8}{'epochs':>8}")
    variants = VARIANTS
    if args.smoke:  # tiny networks, the same four code paths
        variants = [(label, 8, 8 if embedding else 0, fresh) for label, _, embedding, fresh in VARIANTS]
    rows = [run_variant(*variant, args, test) for variant in variants]
    results = {
        "command": " ".join(["python -m examples.pointer_ablation", *argv]),
        "machine": common.machine(),
        "minutes": args.minutes,
        "beam_width": args.beam_width,
        "test_examples": len(test[0]),
        "variants": rows,
    }
    path = common.write_results(args, results)
    if args.results:
        shutil.copyfile(path, args.results + ".tmp")
        os.replace(args.results + ".tmp", args.results)
        print(f"wrote {args.results}")
    return results


if __name__ == "__main__":
    main()
