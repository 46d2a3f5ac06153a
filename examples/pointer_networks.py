"""Pointer networks (Vinyals et al. 2015) on sorting and on planar convex hulls.

Two `PointerNetwork`s, each trained with teacher forcing and
`SequenceLoss`, then decoded in the graph greedily and with beam search:

- sorting: 5 to 10 numbers in (0, 1]; the output points at them in
  ascending order, then at the end.
- convex hull: 5 to 10 points uniform in the unit square (one model for
  every n, as the paper trained one model on n = 5..50); the output points
  at the hull's vertices counter-clockwise, starting from the hull vertex
  with the lowest input index, then at the end.

    python examples/pointer_networks.py [--epochs N] [--samples N] [--out DIR] [--smoke] ...

`--samples` is the number of training examples of each task. The hull is
computed with Andrew's monotone chain in NumPy. The first vertex is not
repeated at the end: the paper's outputs close the polygon by pointing at
the first point again, but with `mask_chosen=True` the network can never
point twice at one input, and the end token already says "close it here".

Metrics, as in Table 1 of the paper, on held-out inputs:

- sequence accuracy: the decoded pointers equal the target exactly (for the
  hull, this canonical start and orientation make the polygon unique);
- area coverage (hull only): area of the decoded polygon / area of the true
  hull, averaged over examples. A decoded polygon that is not simple (edges
  crossing or touching, fewer than 3 vertices, zero area) counts as 0 and as
  a "FAIL", the paper's word for such outputs; their count is reported. A
  clockwise but simple polygon counts with its (absolute) area.

The paper's Ptr-Net reached 92.0% (n = 5) and 87.0% (n = 10) hull accuracy
and its LSTM baseline 87.7% (n = 5), with bigger models trained on far more
data (n = 5..50) for far longer than this example's few minutes on a CPU:
compare the trend, not the digits. (The paper reports no sorting figures.)

Outputs in `--out`: results.json, the trained models (`*_trainer.keras`,
`*_greedy.keras`), `hulls.png` (decoded hulls over their points) and
`sorting_pointers.png` / `hull_pointers.png` (each step's pointer
distribution, a heat-map over the end and the inputs). The data is generated
with fixed seeds: nothing is downloaded.
"""

import copy
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import common
import keras
import numpy as np

import keras_attention as ka

# Decoding runs four models on several batch shapes, so tf.function
# retraces by design; its warnings about that would only be noise.
logging.getLogger("tensorflow").setLevel(logging.ERROR)

MIN_N, MAX_N = 5, 10
MAX_LENGTH = MAX_N + 1  # every input once, then the end
VALIDATION = 0.05  # the fraction of the training examples held out for val_loss
END = 0  # pointer id of the end; id k >= 1 is input k (1-based)
PAPER = {  # Vinyals et al. 2015, Table 1, hull accuracy
    ("hull", 5): {"Ptr-Net (trained n=5..50)": 0.920, "LSTM (trained n=5)": 0.877},
    ("hull", 10): {"Ptr-Net (trained n=5..50)": 0.870},
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


def pad_targets(sequences):
    """1-based pointer ids, then the end (0), padded with 0 to `MAX_LENGTH`."""
    targets = np.zeros((len(sequences), MAX_LENGTH), "int32")
    for row, sequence in enumerate(sequences):
        targets[row, : len(sequence)] = np.asarray(sequence) + 1
    return targets


def make_sorting(count, rng, n=(MIN_N, MAX_N)):
    """Numbers `(count, MAX_N, 1)` zero-padded, targets, lengths."""
    lengths = _lengths(rng, count, n)
    numbers = np.zeros((count, MAX_N, 1), "float32")
    orders = []
    for row, length in enumerate(lengths):
        numbers[row, :length, 0] = _uniform(rng, length)
        orders.append(np.argsort(numbers[row, :length, 0], kind="stable"))
    return numbers, pad_targets(orders), lengths


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
    """Points `(count, MAX_N, 2)` zero-padded, hull targets, lengths."""
    lengths = _lengths(rng, count, n)
    points = np.zeros((count, MAX_N, 2), "float32")
    hulls = []
    for row, length in enumerate(lengths):
        points[row, :length] = _uniform(rng, (length, 2))
        hulls.append(convex_hull(points[row, :length]))
    return points, pad_targets(hulls), lengths


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


def build_models(dim, units, beam_width, name):
    """Teacher-forced trainer, greedy model and beam model for `dim`-feature inputs.

    The beam model has its own PointerNetwork (the beam width is a
    constructor argument): `copy_weights` gives it the trained weights.
    """
    inputs = keras.Input((None, dim), name="inputs")
    targets = keras.Input((None,), dtype="int32", name="targets")
    masked = keras.layers.Masking(0.0, name="padding")(inputs)
    network = ka.PointerNetwork(units, max_length=MAX_LENGTH, name="pointer_network")
    trainer = keras.Model([inputs, targets], network([masked, targets]), name=f"{name}_trainer")
    greedy = keras.Model(inputs, network(masked), name=f"{name}_greedy")
    beam_network = ka.PointerNetwork(units, max_length=MAX_LENGTH, beam_width=beam_width, name="pointer_network_beam")
    beam = keras.Model(inputs, beam_network(masked), name=f"{name}_beam")
    return trainer, greedy, beam


def copy_weights(trainer, beam):
    beam.get_layer("pointer_network_beam").set_weights(trainer.get_layer("pointer_network").get_weights())


def train(args, strategy, name, data, dim):
    """Build, train and save one task's models; returns (trainer, greedy, beam, history, seconds)."""
    inputs, targets, _ = data
    # Keras builds a distributed model from the first batch averaged over the
    # replicas, which fails when that batch splits unevenly: the validation
    # set's size is a multiple of the replica count.
    held_out = int(len(inputs) * VALIDATION) // strategy.num_replicas_in_sync * strategy.num_replicas_in_sync
    validation = ([inputs[-held_out:], targets[-held_out:]], targets[-held_out:]) if held_out else None
    inputs, targets = inputs[: len(inputs) - held_out], targets[: len(targets) - held_out]
    steps = args.epochs * -(-len(inputs) // args.batch_size)
    # Decaying the rate to a twentieth over the run is worth several points of
    # hull accuracy at this budget over a constant rate.
    learning_rate = keras.optimizers.schedules.CosineDecay(args.learning_rate, steps, alpha=0.05)
    with strategy.scope():
        trainer, greedy, beam = build_models(dim, args.units, args.beam_width, name)
        trainer.compile(
            # Clipping as in the paper (norm 2): early pointer losses spike.
            optimizer=keras.optimizers.Adam(learning_rate, clipnorm=2.0),
            loss=ka.SequenceLoss(),
            jit_compile=args.jit,
        )
    # Each task resumes from its own backup: a run killed during the second
    # training must not restore the first one's weights into it.
    task_args = copy.copy(args)
    task_args.out = os.path.join(args.out, name)
    os.makedirs(task_args.out, exist_ok=True)
    print(f"\n--- {name}: {len(inputs)} training and {held_out} validation examples")
    with common.Timer() as timer:
        history = trainer.fit(
            [inputs, targets],
            targets,
            batch_size=args.batch_size,
            epochs=args.epochs,
            validation_data=validation,
            callbacks=common.callbacks(task_args),
            verbose=2 if args.smoke else "auto",
        )
    copy_weights(trainer, beam)
    trainer.save(os.path.join(args.out, f"{name}_trainer.keras"))
    greedy.save(os.path.join(args.out, f"{name}_greedy.keras"))
    return trainer, greedy, beam, history.history, timer.seconds


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


def plot_hulls(points, lengths, targets, predictions, path, count=6):
    from matplotlib.figure import Figure  # only plotting needs matplotlib

    figure = Figure(figsize=(3 * count / 2, 6))
    for k in range(count):
        axes = figure.add_subplot(2, count // 2, k + 1)
        xy = points[k, : lengths[k]]
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
        axes.set_title(f"n={lengths[k]}: {verdict}", fontsize=9)
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


def evaluate_sorting(greedy, beam, test):
    numbers, targets, lengths = test
    results = {}
    for method, model in (("greedy", greedy), ("beam", beam)):
        ids = np.asarray(common.predict(model, numbers, batch_size=500))
        results[method] = {"sequence_accuracy": sequence_accuracy(ids, targets)}
        for n in (MIN_N, MAX_N):
            results[method][f"sequence_accuracy_n{n}"] = sequence_accuracy(ids[lengths == n], targets[lengths == n])
        results[f"{method}_ids"] = ids
    return results


def evaluate_hull(greedy, beam, test):
    points, targets, lengths = test
    results = {}
    for method, model in (("greedy", greedy), ("beam", beam)):
        ids = np.asarray(common.predict(model, points, batch_size=500))
        coverages, failures = zip(
            *(hull_coverage(points[row, : lengths[row]], ids[row], targets[row]) for row in range(len(ids)))
        )
        results[method] = {
            "sequence_accuracy": sequence_accuracy(ids, targets),
            "area_coverage": float(np.mean(coverages)),
            "fail": int(np.sum(failures)),
            "examples": len(ids),
        }
        results[f"{method}_ids"] = ids
    return results


def main(argv=None):
    args = common.parse_args(
        __doc__.splitlines()[0],
        argv,
        epochs=12,
        batch_size=128,
        samples=60000,
        out="runs/pointer",
        smoke_epochs=1,
        smoke_samples=256,
        smoke_batch_size=64,
    )
    args.units = 16 if args.smoke else 128
    args.beam_width = 3 if args.smoke else 5
    args.learning_rate = 3e-3
    strategy = common.setup(args)
    test_size = 64 if args.smoke else 1000
    test_rng = np.random.default_rng(10_000 + args.seed)  # disjoint from the training seed's stream
    rng = np.random.default_rng(args.seed)

    sort_test = make_sorting(test_size, test_rng)
    sort_trainer, sort_greedy, sort_beam, sort_history, sort_seconds = train(
        args, strategy, "sorting", make_sorting(args.samples, rng), dim=1
    )
    sorting = evaluate_sorting(sort_greedy, sort_beam, sort_test)

    hull_tests = {n: make_hulls(test_size, test_rng, n) for n in (MIN_N, MAX_N)}
    hull_trainer, hull_greedy, hull_beam, hull_history, hull_seconds = train(
        args, strategy, "hull", make_hulls(args.samples, rng), dim=2
    )
    hulls = {n: evaluate_hull(hull_greedy, hull_beam, test) for n, test in hull_tests.items()}

    numbers, _, lengths = sort_test
    points5, targets5, lengths5 = hull_tests[MIN_N]
    points10, targets10, lengths10 = hull_tests[MAX_N]
    plots = [
        plot_pointers(
            sort_trainer,
            numbers,
            sorting["greedy_ids"],
            lengths[0],
            [f"{x:.2f}" for x in numbers[0, :, 0]],
            os.path.join(args.out, "sorting_pointers.png"),
            "sorting: pointer distribution per step (greedy)",
        ),
        plot_pointers(
            hull_trainer,
            points10,
            hulls[MAX_N]["greedy_ids"],
            lengths10[0],
            [f"{i + 1}" for i in range(MAX_N)],
            os.path.join(args.out, "hull_pointers.png"),
            "hull n=10: pointer distribution per step (greedy)",
        ),
        plot_hulls(
            np.concatenate([points5[:3], points10[:3]]),
            np.concatenate([lengths5[:3], lengths10[:3]]),
            np.concatenate([targets5[:3], targets10[:3]]),
            np.concatenate([hulls[MIN_N]["greedy_ids"][:3], hulls[MAX_N]["greedy_ids"][:3]]),
            os.path.join(args.out, "hulls.png"),
        ),
    ]

    results = {
        "samples_per_task": args.samples,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "units": args.units,
        "beam_width": args.beam_width,
        "test_examples": test_size,
        "sorting": {
            "greedy": sorting["greedy"],
            "beam": sorting["beam"],
            "final_loss": float(sort_history["loss"][-1]),
            "train_seconds": sort_seconds,
        },
        "hull": {f"n{n}": {"greedy": hulls[n]["greedy"], "beam": hulls[n]["beam"]} for n in (MIN_N, MAX_N)},
        "paper_hull_accuracy": {f"n{n}": value for (_, n), value in PAPER.items()},
        "plots": plots,
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "distribute": args.distribute,
        "replicas": strategy.num_replicas_in_sync,
    }
    results["hull"].update(final_loss=float(hull_history["loss"][-1]), train_seconds=hull_seconds)
    common.write_results(args, results)

    print(f"\nsequence accuracy on {test_size} held-out inputs (beam width {args.beam_width})")
    print(f"{'task':<22}{'greedy':>9}{'beam':>9}{'coverage g/b':>16}{'FAIL g/b':>11}   paper (accuracy)")
    g, b = sorting["greedy"], sorting["beam"]
    for label, key in (("5..10", ""), ("5", "_n5"), ("10", "_n10")):
        accuracy = "sequence_accuracy" + key
        print(f"{f'sort n={label}':<22}{g[accuracy]:>9.1%}{b[accuracy]:>9.1%}{'':>27}   -")
    for n in (MIN_N, MAX_N):
        g, b = hulls[n]["greedy"], hulls[n]["beam"]
        paper = ", ".join(f"{name} {value:.1%}" for name, value in PAPER[("hull", n)].items())
        print(
            f"{f'hull n={n}':<22}{g['sequence_accuracy']:>9.1%}{b['sequence_accuracy']:>9.1%}"
            f"{g['area_coverage']:>9.1%}/{b['area_coverage']:.1%}{g['fail']:>6}/{b['fail']}   {paper}"
        )
    print(
        f"The paper trained bigger models on far more data (n = 5..50) for far longer; this run: "
        f"{args.samples} examples x {args.epochs} epochs per task, {sort_seconds:.0f} s (sorting) + "
        f"{hull_seconds:.0f} s (hull) of training."
    )
    return results


if __name__ == "__main__":
    main()
