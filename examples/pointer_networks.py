"""Pointer networks (Vinyals et al. 2015) on sorting and on planar convex hulls.

Three `PointerNetwork`s, each trained with teacher forcing and
`SequenceLoss`, then decoded in the graph greedily and with beam search:

- `sorting`: 5 to 10 numbers in (0, 1]; the output points at them in
  ascending order, then at the end.
- `hull5` and `hull10`: n = 5 (n = 10) points uniform in the unit square;
  the output points at the hull's vertices counter-clockwise, starting from
  the hull vertex with the lowest input index, then at the end. The hull10
  model is also evaluated on n = 50 (far outside what it was trained on).

    python -m examples.pointer_networks [--tasks sorting hull5 hull10] [--epochs N]
        [--samples N] [--out DIR] [--results FILE] [--smoke] ...

Every epoch is new data: `keras_attention.generated.GeneratedBatches` draws each
batch from a generator seeded by (seed, epoch, batch), so a model never
sees an example twice. `--samples` is the number of examples per epoch and
`--epochs` the number of epochs, for every task given; by default each task
has its own (`TASKS`). The hull models read each point through a small
embedding (Dense 128 relu, Dense 128) before their 256-unit LSTMs. The
learning rate decays along a cosine to a twentieth over the run.

The hull is computed with Andrew's monotone chain in NumPy. The first vertex
is not repeated at the end: the paper's outputs close the polygon by
pointing at the first point again, but with `mask_chosen=True` the network
can never point twice at one input, and the end token already says "close
it here". Decoding is constrained in the two ways the task allows: a point
already chosen cannot be chosen again, and padding cannot be chosen.

Metrics, as in Table 1 of the paper, on 1,000 held-out inputs per n (fixed
seeds, disjoint from the training streams):

- sequence accuracy: the decoded pointers equal the target exactly (for the
  hull, this canonical start and orientation make the polygon unique);
- area coverage (hull only): area of the decoded polygon / area of the true
  hull, averaged over examples. A decoded polygon that is not simple (edges
  crossing or touching, fewer than 3 vertices, zero area) counts as 0 and as
  a "FAIL", the paper's word for such outputs; their count is reported. A
  clockwise but simple polygon counts with its (absolute) area.

The paper's Ptr-Net reached 92.0% (n = 5) and 87.0% (n = 10) hull accuracy
with one model trained on n = 5..50, and 69.6% at n = 50; its LSTM baseline
trained on n = 5 reached 87.7% at n = 5. (The paper reports no sorting
figures.)

Outputs in `--out`: results.json (also copied to `--results`), the trained
models (`<task>_trainer.keras`, `<task>_greedy.keras`), `hulls.png`
(decoded hulls over their points) and `sorting_pointers.png` /
`hull_pointers.png` (each step's pointer distribution, a heat-map over the
end and the inputs). Nothing is downloaded.
"""

import copy
import dataclasses
import logging
import os
import shutil
import sys

import keras
import numpy as np

import keras_attention as ka
from examples import common

# Decoding runs four models on several batch shapes, so tf.function
# retraces by design; its warnings about that would only be noise.
logging.getLogger("tensorflow").setLevel(logging.ERROR)

MIN_N, MAX_N = 5, 10  # the sorting task's lengths
MAX_LENGTH = MAX_N + 1  # every input once, then the end
END = 0  # pointer id of the end; id k >= 1 is input k (1-based)
FAR_N = 50  # the hull10 model is also evaluated here, as the paper's Table 1 does
VALIDATION_EXAMPLES = 2000
PAPER = {  # Vinyals et al. 2015, Table 1, hull accuracy
    5: {"Ptr-Net (trained n=5..50)": 0.920, "LSTM (trained n=5)": 0.877},
    10: {"Ptr-Net (trained n=5..50)": 0.870},
    50: {"Ptr-Net (trained n=5..50)": 0.696},
}


@dataclasses.dataclass(frozen=True)
class Task:
    """One model: what it learns, on which n, and how long."""

    kind: str  # "sorting" or "hull"
    n: object  # an int, or (low, high) for a mix of lengths
    units: int
    embedding: int  # width of the per-point embedding; 0 for none
    epochs: int
    samples: int  # examples per epoch, all fresh
    batch_size: int = 128
    learning_rate: float = 3e-3

    @property
    def width(self):
        return self.n if isinstance(self.n, int) else self.n[1]

    def make(self, count, rng, n=None):
        make = make_sorting if self.kind == "sorting" else make_hulls
        return make(count, rng, self.n if n is None else n)

    @property
    def dim(self):
        return 1 if self.kind == "sorting" else 2


# Sized to the 2-core CPU: about 11 minutes of training for hull5 and 24 for
# hull10, inside a budget of 30 minutes each.
TASKS = {
    "sorting": Task("sorting", (MIN_N, MAX_N), units=128, embedding=0, epochs=12, samples=57_000),
    "hull5": Task("hull", 5, units=256, embedding=128, epochs=50, samples=50_000),
    "hull10": Task("hull", 10, units=256, embedding=128, epochs=56, samples=50_000),
}


# ------------------------------------------------------------------------ data


def _uniform(rng, shape):
    # (0, 1] rather than [0, 1): an input of exactly 0 would read as padding
    # to the Masking layer.
    return (1.0 - rng.random(shape)).astype("float32")


def _lengths(rng, count, n):
    if isinstance(n, int):
        return np.full(count, n)
    return rng.integers(n[0], n[1] + 1, size=count)


def pad_targets(sequences, length=MAX_LENGTH):
    """1-based pointer ids, then the end (0), padded with 0 to `length`."""
    targets = np.zeros((len(sequences), length), "int32")
    for row, sequence in enumerate(sequences):
        targets[row, : len(sequence)] = np.asarray(sequence) + 1
    return targets


def make_sorting(count, rng, n=(MIN_N, MAX_N)):
    """Numbers `(count, max n, 1)` zero-padded, targets, lengths."""
    lengths = _lengths(rng, count, n)
    width = n if isinstance(n, int) else n[1]
    numbers = np.zeros((count, width, 1), "float32")
    orders = []
    for row, length in enumerate(lengths):
        numbers[row, :length, 0] = _uniform(rng, length)
        orders.append(np.argsort(numbers[row, :length, 0], kind="stable"))
    return numbers, pad_targets(orders, width + 1), lengths


def _cross(o, a, b):
    return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])


def convex_hull(points):
    """0-based indices of the hull of `points` (n, 2), counter-clockwise from the lowest index.

    Andrew's monotone chain: the lower hull left to right, then the upper
    hull right to left, is counter-clockwise. Collinear boundary points are
    not vertices (they have probability 0 for uniform points anyway).
    """
    points = np.asarray(points, np.float64)
    order = np.lexsort((points[:, 1], points[:, 0]))  # by x, then y
    if len(order) < 3:
        return list(order)

    def chain(indices):
        hull = []
        for i in indices:
            while len(hull) >= 2 and _cross(points[hull[-2]], points[hull[-1]], points[i]) <= 0:
                hull.pop()
            hull.append(int(i))
        return hull

    lower, upper = chain(order), chain(order[::-1])
    hull = lower[:-1] + upper[:-1]
    start = hull.index(min(hull))
    return hull[start:] + hull[:start]


def make_hulls(count, rng, n=(MIN_N, MAX_N)):
    """Points `(count, max n, 2)` zero-padded, hull targets, lengths."""
    lengths = _lengths(rng, count, n)
    width = n if isinstance(n, int) else n[1]
    points = np.zeros((count, width, 2), "float32")
    hulls = []
    for row, length in enumerate(lengths):
        points[row, :length] = _uniform(rng, (length, 2))
        hulls.append(convex_hull(points[row, :length]))
    return points, pad_targets(hulls, width + 1), lengths


# --------------------------------------------------------------------- metrics


def pointed(ids):
    """0-based input indices before the first end."""
    ids = list(np.asarray(ids))
    stop = ids.index(END) if END in ids else len(ids)
    return [int(i) - 1 for i in ids[:stop]]


def polygon_area(points):
    """Shoelace area, positive for counter-clockwise vertices."""
    x, y = np.asarray(points, np.float64).T
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def _segments_meet(p, q, r, s):
    """Closed segments pq and rs share a point (touching counts)."""
    d1, d2 = _cross(r, s, p), _cross(r, s, q)
    d3, d4 = _cross(p, q, r), _cross(p, q, s)
    if ((d1 > 0) != (d2 > 0)) and ((d3 > 0) != (d4 > 0)) and 0 not in (d1, d2, d3, d4):
        return True

    def on_segment(a, b, c):  # c collinear with ab and within its box
        return min(a[0], b[0]) <= c[0] <= max(a[0], b[0]) and min(a[1], b[1]) <= c[1] <= max(a[1], b[1])

    return any(
        d == 0 and on_segment(a, b, c) for d, a, b, c in ((d1, r, s, p), (d2, r, s, q), (d3, p, q, r), (d4, p, q, s))
    )


def is_simple_polygon(vertices):
    """At least 3 distinct vertices, nonzero area, and no two non-adjacent edges meet."""
    vertices = np.asarray(vertices, np.float64)
    count = len(vertices)
    if count < 3 or len({tuple(v) for v in vertices}) < count or abs(polygon_area(vertices)) <= 1e-12:
        return False
    edges = [(vertices[i], vertices[(i + 1) % count]) for i in range(count)]
    for i in range(count):
        for j in range(i + 2, count):
            if i == 0 and j == count - 1:
                continue  # the closing edge is adjacent to the first
            if _segments_meet(*edges[i], *edges[j]):
                return False
    return True


def hull_coverage(points, ids, target):
    """(coverage, failed): decoded polygon area / true hull area; 0 and True when not simple."""
    vertices = points[pointed(ids)]
    if not is_simple_polygon(vertices):
        return 0.0, True
    true_area = polygon_area(points[pointed(target)])
    return abs(polygon_area(vertices)) / true_area, False


def sequence_accuracy(ids, targets):
    return float(np.mean([pointed(a) == pointed(b) for a, b in zip(ids, targets)]))


# ----------------------------------------------------------------------- model

FRONT = ("padding", "embedding_hidden", "embedding")  # the layers before the PointerNetwork


def build_models(task, units, beam_width, name, max_length=None):
    """Teacher-forced trainer, greedy model and beam model for one task.

    The beam model has its own PointerNetwork (the beam width is a
    constructor argument): `copy_weights` gives it the trained weights.
    """
    inputs = keras.Input((None, task.dim), name="inputs")
    targets = keras.Input((None,), dtype="int32", name="targets")
    points = keras.layers.Masking(0.0, name="padding")(inputs)
    if task.embedding:
        # Dense layers pass the padding mask on to the PointerNetwork.
        points = keras.layers.Dense(task.embedding, activation="relu", name="embedding_hidden")(points)
        points = keras.layers.Dense(task.embedding, name="embedding")(points)
    max_length = max_length or task.width + 1
    network = ka.PointerNetwork(units, max_length=max_length, name="pointer_network")
    trainer = keras.Model([inputs, targets], network([points, targets]), name=f"{name}_trainer")
    greedy = keras.Model(inputs, network(points), name=f"{name}_greedy")
    return trainer, greedy, beam_model(trainer, beam_width, max_length, name)


def beam_model(trainer, beam_width, max_length, name, greedy=False, mask_chosen=True):
    """A decoding model (beam search, or greedy) sharing `trainer`'s front layers
    and holding a copy of its PointerNetwork's weights, for any `max_length`
    (and, for the ablation, without the constraint of distinct pointers)."""
    inputs = keras.Input((None, trainer.inputs[0].shape[-1]), name="inputs")
    points = inputs
    for layer_name in FRONT:
        if any(layer.name == layer_name for layer in trainer.layers):
            points = trainer.get_layer(layer_name)(points)
    trained = trainer.get_layer("pointer_network")
    network = ka.PointerNetwork(
        trained.units,
        max_length=max_length,
        beam_width=None if greedy else beam_width,
        mask_chosen=mask_chosen,
        name="pointer_network_beam",
    )
    model = keras.Model(inputs, network(points), name=f"{name}_{'greedy' if greedy else 'beam'}")
    if trained.built:
        network.set_weights(trained.get_weights())
    return model


def copy_weights(trainer, beam):
    beam.get_layer("pointer_network_beam").set_weights(trainer.get_layer("pointer_network").get_weights())


def batches(task, batch_size, samples, seed):
    """Fresh `([inputs, targets], targets)` batches every epoch."""

    def generate(rng, size):
        inputs, targets, _ = task.make(size, rng)
        return (inputs, targets), targets

    # Two threads draw the next batches while the model trains on this one:
    # the batches' trip through Keras's input pipeline costs as much as
    # drawing them.
    return ka.generated.GeneratedBatches(generate, batch_size, max(1, samples // batch_size), seed=seed, workers=2)


def train(args, strategy, name, task, validation):
    """Build, train and save one task's models; returns (trainer, greedy, beam, history, seconds)."""
    epochs = args.epochs or task.epochs
    samples = args.samples or task.samples
    batch_size = args.batch_size or task.batch_size
    units = args.units or task.units
    # Keras builds a distributed model from the first batch averaged over the
    # replicas, which fails when that batch splits unevenly: every batch
    # size here is a multiple of the replica count.
    replicas = strategy.num_replicas_in_sync
    batch_size = max(replicas, batch_size // replicas * replicas)
    held_out = len(validation[0]) // replicas * replicas
    inputs, targets, _ = validation
    validation = ([inputs[:held_out], targets[:held_out]], targets[:held_out])
    data = batches(task, batch_size, samples, seed=args.seed * 1000 + sorted(TASKS).index(name))
    steps = epochs * len(data)
    # Decaying the rate to a twentieth over the run is worth several points of
    # hull accuracy at this budget over a constant rate.
    learning_rate = keras.optimizers.schedules.CosineDecay(task.learning_rate, steps, alpha=0.05)
    with strategy.scope():
        trainer, greedy, beam = build_models(task, units, args.beam_width, name)
        trainer.compile(
            # Clipping as in the paper (norm 2): early pointer losses spike.
            optimizer=keras.optimizers.Adam(learning_rate, clipnorm=2.0),
            loss=ka.SequenceLoss(),
            jit_compile=args.jit,
        )
        ka.training.build_optimizer(trainer)
    # Each task resumes from its own backup: a run killed during one training
    # must not restore another's weights into it.
    task_args = copy.copy(args)
    task_args.out = os.path.join(args.out, name)
    os.makedirs(task_args.out, exist_ok=True)
    print(f"\n--- {name}: {epochs} epochs of {len(data) * batch_size} fresh examples, {held_out} for validation")
    with common.Timer() as timer:
        history = trainer.fit(
            data,
            epochs=epochs,
            validation_data=validation,
            callbacks=common.callbacks(task_args),
            verbose=2 if args.smoke else "auto",
        )
    copy_weights(trainer, beam)
    trainer.save(os.path.join(args.out, f"{name}_trainer.keras"))
    greedy.save(os.path.join(args.out, f"{name}_greedy.keras"))
    summary = {
        "n": task.n,
        "units": units,
        "embedding": task.embedding,
        "epochs": epochs,
        "examples_per_epoch": len(data) * batch_size,
        "batch_size": batch_size,
        "final_loss": float(history.history["loss"][-1]),
        "final_val_loss": float(history.history["val_loss"][-1]),
        "train_seconds": timer.seconds,
    }
    return trainer, greedy, beam, summary


def pointer_distributions(trainer, inputs, ids):
    """Each decoding step's probabilities over [end, x_1 .. x_n] for the decoded `ids`.

    Feeding the decoded ids back as teacher-forcing targets gives the same
    distributions the decoder chose from.
    """
    logits = np.asarray(trainer.predict([inputs, ids], verbose=0), np.float64)
    logits -= logits.max(-1, keepdims=True)
    probabilities = np.exp(logits)
    return probabilities / probabilities.sum(-1, keepdims=True)


# ----------------------------------------------------------------------- plots


def plot_pointers(trainer, inputs, ids, length, labels, path, title):
    """The first example's pointer distributions; `inputs` and `ids` are a batch.

    A batch rather than the one example: a distributed model would hand
    some replicas no example at all, which its LSTMs cannot run on.
    """
    ids, steps = ids[:64], len(pointed(ids[0])) + 1  # the pointers and the end
    weights = pointer_distributions(trainer, inputs[:64], ids)[0, :steps, : length + 1]
    ids = ids[0]
    rows = [labels[i] for i in pointed(ids)] + ["<end>"]
    ka.plot_attention(weights, ["<end>"] + labels[:length], rows, path=path, title=title)
    return path


def plot_hulls(points, targets, predictions, path):
    """Decoded and true hulls over each example's `points` (n_k, 2); six or fewer examples."""
    from matplotlib.figure import Figure  # only plotting needs matplotlib

    count = len(points)
    figure = Figure(figsize=(3 * -(-count // 2), 6))
    for k in range(count):
        axes = figure.add_subplot(2, -(-count // 2), k + 1)
        xy = points[k]
        axes.scatter(xy[:, 0], xy[:, 1], s=12, color="black", zorder=3)
        for i, (x, y) in enumerate(xy):
            axes.annotate(str(i + 1), (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
        for ids, style, label in ((targets[k], "--", "true"), (predictions[k], "-", "decoded")):
            vertices = xy[pointed(ids)]
            if len(vertices):
                closed = np.concatenate([vertices, vertices[:1]])
                axes.plot(closed[:, 0], closed[:, 1], style, label=label, linewidth=1.5 if style == "-" else 1)
        coverage, failed = hull_coverage(xy, predictions[k], targets[k])
        exact = pointed(predictions[k]) == pointed(targets[k])
        verdict = "exact" if exact else "FAIL" if failed else f"{coverage:.0%} area"
        axes.set_title(f"n={len(xy)}: {verdict}", fontsize=9)
        axes.set_xlim(0, 1)
        axes.set_ylim(0, 1)
        axes.set_aspect("equal")
        axes.tick_params(labelsize=6)
        if k == 0:
            axes.legend(fontsize=7, loc="lower right")
    figure.suptitle("convex hulls: greedy decoding (solid) and truth (dashed)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return path


# ------------------------------------------------------------------------ main


def evaluate(greedy, beam, test, kind):
    """Greedy and beam metrics on `test`, and the decoded ids."""
    inputs, targets, lengths = test
    results = {}
    for method, model in (("greedy", greedy), ("beam", beam)):
        ids = np.asarray(common.predict(model, inputs, batch_size=500))
        metrics = {"sequence_accuracy": sequence_accuracy(ids, targets), "examples": len(ids)}
        if kind == "sorting":
            for n in (MIN_N, MAX_N):
                metrics[f"sequence_accuracy_n{n}"] = sequence_accuracy(ids[lengths == n], targets[lengths == n])
        else:
            coverages, failures = zip(
                *(hull_coverage(inputs[row, : lengths[row]], ids[row], targets[row]) for row in range(len(ids)))
            )
            metrics.update(area_coverage=float(np.mean(coverages)), fail=int(np.sum(failures)))
        results[method] = metrics
        results[f"{method}_ids"] = ids
    return results


def options(parser):
    parser.add_argument(
        "--tasks", nargs="+", choices=sorted(TASKS), default=list(TASKS), help="the models to train (default: all)"
    )
    parser.add_argument("--units", type=int, help="LSTM units of every task's network (default: per task)")
    parser.add_argument("--results", help="also write the results JSON here (e.g. results/pointer_networks.json)")


def test_sets(task_name, task, size, seed):
    """{n: 1,000 (smoke: fewer) fixed held-out examples}, seeded apart from training."""
    rng = np.random.default_rng(10_000 + seed + sorted(TASKS).index(task_name))
    if task.kind == "sorting":
        return {"5..10": task.make(size, rng)}
    sets = {task.n: task.make(size, rng)}
    if task.n == 10:
        sets[FAR_N] = task.make(size // 4 if size < 1000 else size, rng, FAR_N)
    return sets


def run_task(args, strategy, name, test_size):
    task = TASKS[name]
    validation = task.make(64 if args.smoke else VALIDATION_EXAMPLES, np.random.default_rng(20_000 + args.seed))
    trainer, greedy, beam, summary = train(args, strategy, name, task, validation)
    summary["test"], decoded = {}, {}
    for n, test in test_sets(name, task, test_size, args.seed).items():
        if n == FAR_N:  # decoders long enough for n = 50
            greedy_far = beam_model(trainer, args.beam_width, FAR_N + 1, name, greedy=True)
            beam_far = beam_model(trainer, args.beam_width, FAR_N + 1, name)
            evaluation = evaluate(greedy_far, beam_far, test, task.kind)
        else:
            evaluation = evaluate(greedy, beam, test, task.kind)
        summary["test"][f"n{n}"] = {method: evaluation[method] for method in ("greedy", "beam")}
        if task.kind == "hull" and n != FAR_N:
            # The ablation of constrained decoding: the same weights, free to
            # point twice at one input.
            free = beam_model(trainer, args.beam_width, task.width + 1, name, greedy=True, mask_chosen=False)
            ids = np.asarray(common.predict(free, test[0], batch_size=500))
            summary["test"][f"n{n}"]["greedy_unconstrained"] = {"sequence_accuracy": sequence_accuracy(ids, test[1])}
        decoded[n] = (test, evaluation["greedy_ids"])
    return trainer, summary, decoded


def plots(args, trained):
    """The pointer heat-maps and the hull drawings of the tasks that ran."""
    paths = []
    if "sorting" in trained:
        trainer, decoded = trained["sorting"]
        (numbers, _, lengths), ids = decoded["5..10"]
        paths.append(
            plot_pointers(
                trainer,
                numbers,
                ids,
                lengths[0],
                [f"{x:.2f}" for x in numbers[0, :, 0]],
                os.path.join(args.out, "sorting_pointers.png"),
                "sorting: pointer distribution per step (greedy)",
            )
        )
    hulls = [(name, n) for name, n in (("hull5", 5), ("hull10", 10)) if name in trained]
    if hulls:
        name, n = hulls[-1]
        trainer, decoded = trained[name]
        (points, _, lengths), ids = decoded[n]
        paths.append(
            plot_pointers(
                trainer,
                points,
                ids,
                lengths[0],
                [f"{i + 1}" for i in range(n)],
                os.path.join(args.out, "hull_pointers.png"),
                f"hull n={n}: pointer distribution per step (greedy)",
            )
        )
        per = 6 // len(hulls)
        shown = [(trained[name][1][n][0], trained[name][1][n][1]) for name, n in hulls]
        paths.append(
            plot_hulls(
                [points[k, : lengths[k]] for (points, _, lengths), _ in shown for k in range(per)],
                [targets[k] for (_, targets, _), _ in shown for k in range(per)],
                [ids[k] for _, ids in shown for k in range(per)],
                os.path.join(args.out, "hulls.png"),
            )
        )
    return paths


def report(results):
    """The console table of a results dict."""
    lines = [f"\nsequence accuracy on {results['test_examples']} held-out inputs (beam width {results['beam_width']})"]
    lines.append(f"{'task':<22}{'greedy':>9}{'beam':>9}{'coverage g/b':>16}{'FAIL g/b':>11}   paper (accuracy)")
    tasks = results["tasks"]
    if "sorting" in tasks:
        g, b = tasks["sorting"]["test"]["n5..10"]["greedy"], tasks["sorting"]["test"]["n5..10"]["beam"]
        for label, key in (("5..10", ""), ("5", "_n5"), ("10", "_n10")):
            accuracy = "sequence_accuracy" + key
            lines.append(f"{f'sort n={label}':<22}{g[accuracy]:>9.1%}{b[accuracy]:>9.1%}{'':>27}   -")
    for name in ("hull5", "hull10"):
        for key, test in tasks.get(name, {}).get("test", {}).items():
            g, b = test["greedy"], test["beam"]
            paper = ", ".join(f"{label} {value:.1%}" for label, value in PAPER[int(key[1:])].items())
            lines.append(
                f"{f'{name} on {key[:1]}={key[1:]}':<22}{g['sequence_accuracy']:>9.1%}{b['sequence_accuracy']:>9.1%}"
                f"{g['area_coverage']:>9.1%}/{b['area_coverage']:.1%}{g['fail']:>6}/{b['fail']}   {paper}"
            )
    for name, task in tasks.items():
        lines.append(
            f"{name}: {task['epochs']} epochs x {task['examples_per_epoch']} fresh examples, "
            f"{task['train_seconds']:.0f} s of training"
        )
    return "\n".join(lines)


def readme_row(results):
    """The README's results row for this example, from a results JSON."""
    tasks = results["tasks"]
    sort = tasks["sorting"]["test"]["n5..10"]
    cells = [
        f"sorting 5-10 numbers: {sort['greedy']['sequence_accuracy']:.1%} greedy / "
        f"{sort['beam']['sequence_accuracy']:.1%} beam exact"
    ]
    for name, n in (("hull5", 5), ("hull10", 10)):
        test = tasks[name]["test"][f"n{n}"]
        cells.append(
            f"convex hull n={n}: **{test['greedy']['sequence_accuracy']:.1%}** greedy / "
            f"**{test['beam']['sequence_accuracy']:.1%}** beam, {test['beam']['area_coverage']:.1%} area coverage "
            f"(Ptr-Net {PAPER[n]['Ptr-Net (trained n=5..50)']:.1%})"
        )
    far = tasks["hull10"]["test"][f"n{FAR_N}"]
    cells.append(
        f"the n=10 model on n={FAR_N}: {far['beam']['sequence_accuracy']:.1%} beam, "
        f"{far['beam']['area_coverage']:.1%} coverage (Ptr-Net trained on 5..50: {PAPER[FAR_N]['Ptr-Net (trained n=5..50)']:.1%})"
    )
    seconds = " + ".join(f"{tasks[name]['train_seconds']:.0f}" for name in ("sorting", "hull5", "hull10"))
    return f"| `{results['command']}` | {'; '.join(cells)} | {seconds} s training |"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = common.parse_args(
        __doc__.splitlines()[0],
        argv,
        extra=options,
        epochs=None,
        batch_size=None,
        samples=None,
        out="runs/pointer",
        smoke_epochs=1,
        smoke_samples=256,
        smoke_batch_size=64,
    )
    if args.units is not None and args.units < 1:
        raise SystemExit(f"--units must be >= 1; got {args.units}")
    if args.smoke and args.units is None:
        args.units = 16
    args.beam_width = 3 if args.smoke else 5
    strategy = common.setup(args)
    test_size = 64 if args.smoke else 1000
    with common.Timer() as timer:
        trained, summaries = {}, {}
        for name in TASKS:
            if name in args.tasks:
                trainer, summaries[name], decoded = run_task(args, strategy, name, test_size)
                trained[name] = (trainer, decoded)
        paths = plots(args, trained)
    results = {
        "command": " ".join(["python -m examples.pointer_networks", *argv]),
        "wall_seconds": timer.seconds,
        "machine": common.machine(),
        "beam_width": args.beam_width,
        "test_examples": test_size,
        "tasks": summaries,
        "paper_hull_accuracy": {f"n{n}": value for n, value in PAPER.items()},
        "plots": paths,
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "distribute": args.distribute,
        "replicas": strategy.num_replicas_in_sync,
        "seed": args.seed,
    }
    path = common.write_results(args, results)
    if args.results:
        os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
        shutil.copyfile(path, args.results + ".tmp")
        os.replace(args.results + ".tmp", args.results)
        print(f"wrote {args.results}")
    print(report(results))
    return results


if __name__ == "__main__":
    main()
