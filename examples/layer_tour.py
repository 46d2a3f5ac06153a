"""Quick tour: one functional model per attention layer on a generated lookup task.

Task: a sequence of digit tokens (padded with 0) and one query digit; the label
is 1 when the query digit occurs in the sequence. A model can only solve it by
attending to the matching position, so after training the printed weights of
one example show where each layer looks.

    python -m examples.layer_tour [--epochs 6] [--samples 4000] [--out runs/tour]

For each layer it writes `<out>/<Layer>.png`: the weights of one held-out
sequence for each of the nine possible query digits (rows), a heat-map in
which every row should light up where its digit occurs.

`make tour` runs it; it also drew the README's lookup heat-map.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras
import numpy as np

import keras_attention as ka

VOCABULARY = 10  # 0 is padding, digits are 1..9
MAX_LENGTH = 12


def make_data(samples, rng):
    lengths = rng.integers(3, MAX_LENGTH + 1, size=samples)
    sequences = rng.integers(1, VOCABULARY, size=(samples, MAX_LENGTH))
    sequences[np.arange(MAX_LENGTH)[None, :] >= lengths[:, None]] = 0
    labels = rng.integers(0, 2, size=samples)
    queries = np.empty(samples, dtype="int64")
    for i, (sequence, label) in enumerate(zip(sequences, labels)):
        present = set(sequence[sequence > 0].tolist())
        pool = sorted(present) if label else sorted(set(range(1, VOCABULARY)) - present)
        if not pool:  # every digit present: the answer must be "yes"
            pool, labels[i] = sorted(present), 1
        queries[i] = rng.choice(pool)
    return sequences.astype("int32"), queries.astype("int32"), labels.astype("float32")


def layers_to_try():
    return {
        "AdditiveAttention": ka.AdditiveAttention(16),
        "DotAttention": ka.DotAttention(use_scale=True),
        "ScaledDotAttention": ka.ScaledDotAttention(),
        "GeneralAttention": ka.GeneralAttention(),
        "ConcatAttention": ka.ConcatAttention(units=16),
        "HardAttention": ka.HardAttention("dot"),
    }


def build_model(attention):
    sequence = keras.Input((None,), dtype="int32", name="sequence")
    query = keras.Input((), dtype="int32", name="query")
    embed = keras.layers.Embedding(VOCABULARY, 16, mask_zero=True)
    memory = embed(sequence)  # (B, T, 16), masked where the sequence is padded
    query_vector = embed(query)  # (B, 16): one query per example
    context, weights = attention(query_vector, memory, return_attention_scores=True)
    features = keras.layers.Concatenate()([context, query_vector])
    hidden = keras.layers.Dense(32, activation="relu")(features)
    output = keras.layers.Dense(1, activation="sigmoid", name="present")(hidden)
    trainer = keras.Model([sequence, query], output)
    inspector = keras.Model([sequence, query], weights)
    return trainer, inspector


def show_weights(name, sequence, query, weights):
    tokens = [str(t) for t in sequence if t > 0]
    print(f"  {name}: query digit {query}")
    print("    token  " + " ".join(f"{t:>5}" for t in tokens))
    print("    weight " + " ".join(f"{w:5.2f}" for w in weights[: len(tokens)]))


def plot_lookup(inspector, sequence, name, path):
    """Weights of every query digit over one sequence, as a (9, length) heat-map."""
    digits = np.arange(1, VOCABULARY, dtype="int32")
    sequences = np.repeat(sequence[None, :], len(digits), axis=0)
    weights = inspector.predict([sequences, digits], verbose=0)
    length = int((sequence > 0).sum())
    ka.plot_attention(
        weights[:, :length],
        source_tokens=[str(t) for t in sequence[:length]],
        target_tokens=[f"query {d}" for d in digits],
        path=path,
        title=name,
    )


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="runs/tour")
    args = parser.parse_args(argv)

    keras.utils.set_random_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    x_seq, x_query, y = make_data(args.samples, rng)
    t_seq, t_query, t_y = make_data(1000, rng)
    example = (t_seq[:1], t_query[:1])

    results = {}
    for name, attention in layers_to_try().items():
        trainer, inspector = build_model(attention)
        trainer.compile(optimizer=keras.optimizers.Adam(0.01), loss="binary_crossentropy", metrics=["accuracy"])
        ka.training.build_optimizer(trainer)
        print(f"\n{name}")
        start = time.perf_counter()
        trainer.fit([x_seq, x_query], y, epochs=args.epochs, batch_size=args.batch_size, verbose=2)
        seconds = time.perf_counter() - start
        _, accuracy = trainer.evaluate([t_seq, t_query], t_y, verbose=0)
        weights = inspector.predict(example, verbose=0)[0]
        print(f"  held-out accuracy {accuracy:.3f} ({seconds:.1f} s)")
        show_weights(name, example[0][0], int(example[1][0]), weights)
        os.makedirs(args.out, exist_ok=True)
        plot_lookup(inspector, example[0][0], name, os.path.join(args.out, f"{name}.png"))
        valid = example[0][0] > 0
        results[name] = {
            "accuracy": float(accuracy),
            "train_seconds": seconds,
            "padding_weight": float(weights[~valid].sum()),
            "weights_sum": float(weights.sum()),
        }

    path = os.path.join(args.out, "results.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nwrote {path}")
    print("layer                 accuracy  weight on padding")
    for name, result in results.items():
        print(f"{name:<22}{result['accuracy']:>8.3f}  {result['padding_weight']:.1f}")


if __name__ == "__main__":
    main()
