"""How often does the first letter come back? Self-attention with global, causal and local reach, against none.

Each sequence is 24 letters: a capital (A-H) and then 23 small letters
(a-h). The class is how many times the small form of the capital occurs,
0 to 6. Whether a letter counts depends on position 0, 1 to 23 positions
away, so the task shows what each attention pattern can reach. Four small
classifiers share everything but the mixing layer (token and position
features -> mixing -> feed-forward -> pooling -> Dense):

    multi_head    keras_attention.MultiHeadAttention: every position sees every other
    causal        keras_attention.SelfAttention(causal=True): position i sees j <= i,
                  which includes position 0
    local         keras_attention.SelfAttention(window=7): position i sees |i - j| <= 3,
                  so a letter can be related to the capital only through a position
                  that sees both: up to 6 positions from it
    mean_pooling  no attention: each position alone, then a masked mean

The attention variants pool with `keras_attention.AttentionPooling`. The
readout after pooling is linear, so the mean-pooling model's scores are a
sum of one term per position: it cannot relate a letter to the capital at
all, and stays near chance.

Results, per variant: held-out accuracy, the mean error of the count, how
much weight joins the counted letters and position 0 (either way), and
"link detection": put the capital's letter at one more position j and
measure how much the expected count rises (1 is right; beyond its reach a
model cannot follow), for every distance j. Plots: each attention variant's
weights on one held-out sequence (column 0 lights up in the rows of the
counted letters, or row 0 in their columns) and link detection against
distance.

    python -m examples.self_attention_classifier [--epochs N] [--samples N] [--out DIR] [--smoke] ...

Writes to `--out` (default runs/self_attention): results.json,
<variant>.keras, attention_<variant>.png, link_detection.png and per-variant
resumable checkpoints. The data is generated with a fixed seed: nothing is
downloaded.
"""

import argparse
import os

import keras
import numpy as np
from keras import ops

import keras_attention as ka
from examples import common

LENGTH = 24
LETTERS = "abcdefgh"
TOKENS = ["<pad>"] + list(LETTERS) + list(LETTERS.upper())  # small letter i is id i, its capital id i + 8
MAX_COUNT = 6
WINDOW = 7
# Positions 1-3 see the capital and the letters up to 3 further on, so one
# windowed layer can relate letters up to 6 positions away to the capital.
REACH = 2 * (WINDOW // 2)
VARIANTS = ("multi_head", "causal", "local", "mean_pooling")


def make_sequences(count, rng):
    """Sequences (ids) and how often the capital's small letter occurs in each (0 .. MAX_COUNT)."""
    letters = len(LETTERS)
    sequences = np.zeros((count, LENGTH), "int32")
    counts = rng.integers(0, MAX_COUNT + 1, size=count).astype("int32")
    for n in range(count):
        letter = int(rng.integers(1, letters + 1))
        sequences[n, 0] = letter + letters
        others = [i for i in range(1, letters + 1) if i != letter]
        sequences[n, 1:] = rng.choice(others, size=LENGTH - 1)
        sequences[n, 1 + rng.choice(LENGTH - 1, size=counts[n], replace=False)] = letter
    return sequences, counts


def counted(sequences):
    """Which positions hold the small form of their sequence's capital."""
    return sequences == (sequences[:, :1] - len(LETTERS))


@keras.saving.register_keras_serializable(package="examples")
class PositionEmbedding(keras.layers.Layer):
    """Appends a learned vector per position to each token's features.

    Appended rather than added, so that attention can find position 0 in
    features of its own while the letters stay intact for the comparison
    after it.
    """

    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self.dim = dim
        self.supports_masking = True

    def build(self, input_shape):
        self.positions = self.add_weight(
            name="positions", shape=(input_shape[1], self.dim), initializer="glorot_uniform"
        )

    def call(self, inputs):
        positions = ops.broadcast_to(ops.cast(self.positions, inputs.dtype), (*ops.shape(inputs)[:2], self.dim))
        return ops.concatenate([inputs, positions], axis=-1)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:2], input_shape[2] + self.dim)

    def get_config(self):
        return {**super().get_config(), "dim": self.dim}


def build_models(variant, dim=32):
    """The classifier and, for the attention variants, a model giving its class scores and weights."""
    ids = keras.Input((LENGTH,), dtype="int32", name="ids")
    x = keras.layers.Embedding(len(TOKENS), dim // 2, mask_zero=True, name="token_embedding")(ids)
    x = PositionEmbedding(dim // 2, name="position_embedding")(x)
    weights = None
    if variant == "multi_head":
        mixed, weights = ka.MultiHeadAttention(4, dim // 4, name="attention")(x, x, return_attention_scores=True)
    elif variant == "causal":
        mixed, weights = ka.SelfAttention(dim, causal=True, name="attention")(x, return_attention_scores=True)
    elif variant == "local":
        mixed, weights = ka.SelfAttention(dim, window=WINDOW, name="attention")(x, return_attention_scores=True)
    if weights is not None:
        x = keras.layers.LayerNormalization(name="attention_norm")(keras.layers.Add()([x, mixed]))
    # The feed-forward block compares a position's letter with what it attended to.
    hidden = keras.layers.Dense(4 * dim, activation="relu", name="feed_forward_in")(x)
    hidden = keras.layers.Dense(dim, name="feed_forward_out")(hidden)
    x = keras.layers.LayerNormalization(name="feed_forward_norm")(keras.layers.Add()([x, hidden]))
    if weights is None:
        pooled = keras.layers.GlobalAveragePooling1D(name="mean_pooling")(x)
    else:
        pooled = ka.AttentionPooling(dim, name="pooling")(x)
    probabilities = keras.layers.Dense(MAX_COUNT + 1, activation="softmax", dtype="float32", name="count")(pooled)
    classifier = keras.Model(ids, probabilities, name=variant)
    inspector = None if weights is None else keras.Model(ids, [probabilities, weights], name=f"{variant}_inspector")
    return classifier, inspector


def link_weights(weights, sequences):
    """How much weight joins the counted letters and the capital, each way.

    Returns `(to_capital, from_capital)`: the mean weight a counted letter
    puts on position 0, and the mean total weight position 0 puts on its
    counted letters (sequences with at least one); one value per head for
    weights `(B, H, T, T)`. A model may link either way round: a counted
    letter looks back at the capital, or the capital gathers its letters.
    """
    letters = counted(sequences)  # (B, T)
    some = letters.any(axis=1)
    if weights.ndim == 4:
        letters, some = letters[:, None], some[:, None]
    to_capital = (weights[..., 0] * letters).sum(axis=(0, -1)) / max(int(letters.sum()), 1)
    gathered = (weights[..., 0, :] * letters).sum(axis=-1)  # (B, [H])
    from_capital = (gathered * some).sum(axis=0) / max(int(some.sum()), 1)
    return to_capital, from_capital


# ----------------------------------------------------------------------- plots


def plot_weights(variant, weights, sequence, out):
    labels = [TOKENS[t] for t in sequence]
    count = int(counted(sequence[None])[0, 1:].sum())
    title = f"{variant}: '{labels[0]}' comes back {count} times"
    if weights.ndim == 3:  # (H, T, T): the head that links letters and capital most
        head = int(np.argmax(sum(link_weights(weights[None], sequence[None]))))
        weights, title = weights[head], f"{variant} (head {head}): '{labels[0]}' comes back {count} times"
    path = os.path.join(out, f"attention_{variant}.png")
    ka.plot_attention(weights, labels, labels, path=path, title=title)
    return path


def plot_link_detection(curves, out):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(6, 3.6))
    axes = figure.add_subplot()
    for variant, rises in curves.items():
        axes.plot(range(1, LENGTH), rises, marker="o", label=variant)
    axes.axvline(REACH, color="grey", linestyle=":", label=f"window reach ({REACH})")
    axes.set_xlabel("distance from the capital (position of the added letter)")
    axes.set_ylabel("rise of the expected count")
    axes.set_ylim(-0.25, 1.25)
    axes.legend(fontsize=7)
    figure.tight_layout()
    path = os.path.join(out, "link_detection.png")
    figure.savefig(path, dpi=150)
    return path


# ------------------------------------------------------------------------ main


def evaluate(classifier, inspector, test):
    """Accuracy, count error, link detection per distance and (if any) the attention weights.

    Link detection at distance j: put the capital's letter at position j
    (where it was not, in sequences below the largest count) and take the
    mean rise of the expected count; 1 when the model links j to position 0,
    about 0 when it cannot.
    """
    sequences, counts = test
    room = counts < MAX_COUNT
    added = []
    for j in range(1, LENGTH):
        rows = room & ~counted(sequences)[:, j]
        extra = sequences[rows].copy()
        extra[:, j] = extra[:, 0] - len(LETTERS)
        added.append((rows, extra))
    batch = np.concatenate([sequences] + [extra for _, extra in added])
    if inspector is None:
        probabilities, weights = classifier.predict(batch, batch_size=2048, verbose=0), None
    else:
        probabilities, weights = inspector.predict(batch, batch_size=2048, verbose=0)
        weights = np.asarray(weights[: len(sequences)], "float32")
    probabilities = np.asarray(probabilities, "float32")
    # The expected count moves smoothly even where the most likely one does not.
    expected = probabilities @ np.arange(MAX_COUNT + 1, dtype="float32")
    predicted = probabilities[: len(sequences)].argmax(axis=-1)
    start, rises = len(sequences), []
    for rows, extra in added:
        rises.append(float(np.mean(expected[start : start + len(extra)] - expected[: len(sequences)][rows])))
        start += len(extra)
    result = {
        "accuracy": float(np.mean(predicted == counts)),
        "count_mae": float(np.mean(np.abs(predicted - counts))),
        "near_link_rise": float(np.mean(rises[:REACH])),
        "far_link_rise": float(np.mean(rises[REACH:])),
    }
    if weights is not None:
        to_capital, from_capital = link_weights(weights, sequences)
        result["weight_to_capital"] = float(np.max(to_capital))
        result["weight_from_capital"] = float(np.max(from_capital))
        if weights.ndim == 4:
            result["weight_to_capital_per_head"] = [float(w) for w in to_capital]
            result["weight_from_capital_per_head"] = [float(w) for w in from_capital]
    return result, rises, weights


def train_variant(variant, args, strategy, data, test):
    # Each variant starts from the same seed and keeps its own checkpoints,
    # so a resumed run restores only the variant it was training.
    keras.utils.set_random_seed(args.seed)
    # Validation would cost each smoke variant one more traced function.
    validation = 0.0 if args.smoke else 0.1
    steps = args.epochs * int(np.ceil(np.ceil(len(data[0]) * (1 - validation)) / args.batch_size))
    variant_args = argparse.Namespace(**{**vars(args), "out": os.path.join(args.out, variant)})
    with strategy.scope():
        classifier, inspector = build_models(variant)
        classifier.compile(
            # The full rate for most of the run finds the link; the smaller
            # rates at the end keep the last epochs from shaking it loose.
            optimizer=keras.optimizers.Adam(
                keras.optimizers.schedules.PiecewiseConstantDecay(
                    [int(0.7 * steps), int(0.9 * steps)], [3e-3, 1e-3, 3e-4]
                )
            ),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=args.jit,
        )
        ka.training.build_optimizer(classifier)
    print(f"\n=== {variant}: {classifier.count_params()} parameters")
    with common.Timer() as training:
        history = classifier.fit(
            *data,
            batch_size=args.batch_size,
            epochs=args.epochs,
            validation_split=validation,
            callbacks=common.callbacks(variant_args),
            verbose=2 if args.smoke else "auto",
        )
    model_path = os.path.join(args.out, f"{variant}.keras")
    classifier.save(model_path)
    result, rises, weights = evaluate(classifier, inspector, test)
    result.update(
        {
            "final_loss": float(history.history["loss"][-1]),
            "train_seconds": training.seconds,
            "parameters": int(classifier.count_params()),
            "model": model_path,
        }
    )
    return result, rises, weights


def main(argv=None):
    args = common.parse_args(
        __doc__.splitlines()[0],
        argv,
        epochs=30,
        batch_size=64,
        samples=10000,
        out="runs/self_attention",
        smoke_epochs=1,
        smoke_samples=256,
        smoke_batch_size=64,
    )
    strategy = common.setup(args)
    data = make_sequences(args.samples, np.random.default_rng(args.seed))
    test_size = 200 if args.smoke else 2000
    test = make_sequences(test_size, np.random.default_rng(10_000 + args.seed))
    # A sequence whose letter comes back often, and mostly beyond the window.
    example = int(np.flatnonzero(test[1] >= 4)[0])

    results, curves, plots = {}, {}, []
    for variant in VARIANTS:
        results[variant], curves[variant], weights = train_variant(variant, args, strategy, data, test)
        if weights is not None:
            plots.append(plot_weights(variant, weights[example], test[0][example], args.out))
    plots.append(plot_link_detection(curves, args.out))

    common.write_results(
        args,
        {
            "task": "first_letter_count",
            "length": LENGTH,
            "letters": len(LETTERS),
            "classes": MAX_COUNT + 1,
            "window": WINDOW,
            "samples": args.samples,
            "epochs": args.epochs,
            "batch_size": args.batch_size,
            "test_sequences": test_size,
            "chance_accuracy": 1 / (MAX_COUNT + 1),
            "variants": results,
            "link_rise_by_distance": curves,
            "plots": plots,
            "mixed_precision": args.mixed_precision,
            "jit": args.jit,
            "distribute": args.distribute,
            "replicas": strategy.num_replicas_in_sync,
        },
    )
    print(
        f"\nheld-out results on {test_size} sequences of {LENGTH} (chance accuracy {1 / (MAX_COUNT + 1):.0%}; "
        f"the window relates letters up to {REACH} positions from the capital):"
    )
    print(
        f"  {'variant':<13} {'accuracy':>8} {'count MAE':>9} {'near rise':>9} {'far rise':>8} "
        f"{'to cap.':>7} {'from cap.':>9} {'train s':>7}"
    )
    for variant, r in results.items():
        to_capital, from_capital = (
            f"{r[k]:.2f}" if k in r else "-" for k in ("weight_to_capital", "weight_from_capital")
        )
        print(
            f"  {variant:<13} {r['accuracy']:8.1%} {r['count_mae']:9.2f} {r['near_link_rise']:9.2f} "
            f"{r['far_link_rise']:8.2f} {to_capital:>7} {from_capital:>9} {r['train_seconds']:7.0f}"
        )
    return results


if __name__ == "__main__":
    main()
