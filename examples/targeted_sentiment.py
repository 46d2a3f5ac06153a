"""Targeted sentiment: the polarity of one entity in a sentence that holds several.

A generated corpus in which every sentence names two or three entities of
which at least two differ in polarity ("the camera is great but the battery
is awful"); every entity of a sentence is the target of one example, so the
same sentence appears with different targets and different labels
(negative / neutral / positive) and only the target decides the label.
Templates vary the clause order, the connectives, the intensifiers, the
distractor openings and closings, and include negated positives ("is not
good": negative), neutral, factual clauses ("comes in black"), and clauses
about two entities: comparatives ("the screen is better than the camera":
positive, negative), coordinations ("the food and the staff were great")
and contrasts ("unlike the menu , the wine list was superb").

The model, for each of `TargetedAttention`'s three modes (Liu & Zhang 2017):

    words -> Embedding(mask_zero) -> Bidirectional(LSTM) -> TargetedAttention(mode) -> Dense(3)

with the target mask (1 on the target's words) as the second input. It
reports accuracy and macro-F1 on held-out sentences (none of them in the
training set) for each mode, and how well a model that ignores the target
could do at best (the majority label of each test sentence).

    python -m examples.targeted_sentiment [--epochs N] [--samples N] [--out DIR] [--smoke] ...

`--samples` is the number of training examples (sentence, target). Outputs
in `--out`: results.json, `targeted_<mode>.keras` (the trained models),
`vocabulary.json`, and `attention_<mode>.png`: one test sentence's attention
weights over its words for each of its targets (rows; the contextualized
and gated modes get one row per part: whole sentence, left and right
context). The data is generated with fixed seeds: nothing is downloaded.
"""

import copy
import json
import logging
import os

import keras
import numpy as np

import keras_attention as ka
from examples import common

# Each mode builds new models, so tf.function retraces by design; its
# warnings about that would only be noise.
logging.getLogger("tensorflow").setLevel(logging.ERROR)

LABELS = ["negative", "neutral", "positive"]
NEGATIVE, NEUTRAL, POSITIVE = 0, 1, 2
MODES = ("vanilla", "contextualized", "gated")
PAD, UNK = 0, 1

ENTITIES = [
    "camera",
    "battery life",
    "screen",
    "keyboard",
    "speakers",
    "price",
    "design",
    "software",
    "customer service",
    "food",
    "waiter",
    "pasta",
    "dessert",
    "wine list",
    "music",
    "location",
    "room",
    "bed",
    "breakfast",
    "wifi",
    "view",
    "staff",
    "touchpad",
    "charger",
    "menu",
    "pool",
]
POSITIVE_WORDS = [
    "great",
    "excellent",
    "amazing",
    "fantastic",
    "superb",
    "wonderful",
    "good",
    "lovely",
    "outstanding",
    "brilliant",
    "perfect",
    "impressive",
    "solid",
    "decent",
]
NEGATIVE_WORDS = [
    "awful",
    "terrible",
    "horrible",
    "poor",
    "bad",
    "disappointing",
    "mediocre",
    "dreadful",
    "useless",
    "weak",
    "annoying",
    "pathetic",
    "flimsy",
    "unacceptable",
]
BETTER = ["better", "much better", "far better", "nicer", "more reliable"]
WORSE = ["worse", "much worse", "far worse", "less reliable", "weaker"]
INTENSIFIERS = ["", "", "", "really", "very", "quite", "so", "pretty", "truly", "rather"]
COPULAS = ["is", "was", "seems", "looked", "felt"]
# Factual predicates: no opinion about the entity, so its label is neutral.
NEUTRAL_PREDICATES = [
    "comes in black",
    "is made of plastic",
    "was updated last week",
    "is on the second floor",
    "arrived on tuesday",
    "is the standard one",
    "was described in the manual",
    "was changed in may",
    "is next to the entrance",
    "came with the package",
    "was listed on the website",
    "is in the back",
]
POSITIVE_VERBS = ["i loved the {e}", "i really liked the {e}", "we enjoyed the {e}", "i would recommend the {e}"]
NEGATIVE_VERBS = ["i hated the {e}", "i could not stand the {e}", "we regretted the {e}", "i would avoid the {e}"]
NEUTRAL_VERBS = ["i noticed the {e}", "we checked the {e}", "i asked about the {e}", "we used the {e}"]
OPENERS = [
    "",
    "",
    "",
    "honestly ,",
    "overall ,",
    "to be fair ,",
    "i have to say",
    "after a week ,",
    "in my opinion ,",
    "well ,",
    "as expected ,",
    "last night",
]
CONNECTIVES = ["but", ", but", "while", "whereas", "and", ", however ,", "; on the other hand ,", "yet", ", though"]
CLOSERS = ["", "", "", ".", "!", "to be honest", "overall", "i think", "for the money", "this time"]


def opinion(label, rng):
    """A predicate (after "the X is") that gives the polarity `label`."""
    intensifier = rng.choice(INTENSIFIERS)
    if label == NEGATIVE and rng.random() < 0.3:
        # A negated positive word: the word alone would point the wrong way.
        return f"not {rng.choice(['', '', 'really', 'very', 'so', 'that'])} {rng.choice(POSITIVE_WORDS)}"
    return f"{intensifier} {rng.choice(POSITIVE_WORDS if label == POSITIVE else NEGATIVE_WORDS)}"


def clause(entity, label, rng):
    """A clause about one entity that gives it the polarity `label`."""
    choice = rng.random()
    if label == NEUTRAL:
        if choice < 0.6:
            return f"the {entity} {rng.choice(NEUTRAL_PREDICATES)}"
        return rng.choice(NEUTRAL_VERBS).format(e=entity)
    if choice < 0.25:
        return rng.choice(POSITIVE_VERBS if label == POSITIVE else NEGATIVE_VERBS).format(e=entity)
    return f"the {entity} {rng.choice(COPULAS)} {opinion(label, rng)}"


def pair_clause(first, second, labels, rng):
    """A clause about two entities at once, or None when no form fits their labels.

    Comparatives give the better one positive and the other negative; a
    coordination gives both the same label; "unlike" opposes them.
    """
    opposed = set(labels) == {NEGATIVE, POSITIVE}
    choice = rng.random()
    if opposed and choice < 0.4:
        better, worse = (first, second) if labels[0] == POSITIVE else (second, first)
        if rng.random() < 0.5:
            return f"the {better} {rng.choice(COPULAS)} {rng.choice(BETTER)} than the {worse}"
        return f"the {worse} {rng.choice(COPULAS)} {rng.choice(WORSE)} than the {better}"
    if opposed and choice < 0.7:
        return f"unlike the {second} , the {first} {rng.choice(COPULAS)} {opinion(labels[0], rng)}"
    if labels[0] == labels[1] and choice < 0.6:
        if labels[0] == NEUTRAL:
            return rng.choice(NEUTRAL_VERBS).format(e=f"{first} and the {second}")
        return f"the {first} and the {second} {rng.choice(['are', 'were'])} {opinion(labels[0], rng)}"
    return None


def _disjoint_entities(count, rng):
    # Entities share no word, so a target's words point at one entity only.
    while True:
        chosen = list(rng.choice(ENTITIES, size=count, replace=False))
        words = [w for e in chosen for w in e.split()]
        if len(words) == len(set(words)):
            return chosen


def make_sentence(rng):
    """(words, [(first, last) word span, label] per entity) with at least two labels."""
    count = 2 if rng.random() < 0.6 else 3
    entities = _disjoint_entities(count, rng)
    while True:
        labels = [int(label) for label in rng.integers(0, 3, size=count)]
        if len(set(labels)) > 1:
            break
    clauses, i = [], 0
    while i < count:
        both = pair_clause(entities[i], entities[i + 1], labels[i : i + 2], rng) if i + 1 < count else None
        if both is not None:
            clauses.append(both)
            i += 2
        else:
            clauses.append(clause(entities[i], labels[i], rng))
            i += 1
    if len(clauses) == 2 and rng.random() < 0.2:
        text = f"although {clauses[0]} , {clauses[1]}"
    else:
        text = clauses[0]
        for c in clauses[1:]:
            text += f" {rng.choice(CONNECTIVES)} {c}"
    text = f"{rng.choice(OPENERS)} {text} {rng.choice(CLOSERS)}"
    words = text.split()
    targets = []
    for entity, label in zip(entities, labels):
        parts = entity.split()
        first = next(i for i in range(len(words)) if words[i : i + len(parts)] == parts)
        targets.append(((first, first + len(parts) - 1), label))
    return words, targets


def make_corpus(count, rng, exclude=()):
    """At least `count` examples (words, span, label), whole sentences, none in `exclude`."""
    examples, seen = [], set(exclude)
    while len(examples) < count:
        words, targets = make_sentence(rng)
        key = " ".join(words)
        if key in seen:
            continue
        seen.add(key)
        examples += [(words, span, label) for span, label in targets]
    return examples


def encode(examples, vocabulary, length):
    ids = np.zeros((len(examples), length), "int32")
    target = np.zeros((len(examples), length), "int32")
    labels = np.array([label for _, _, label in examples], "int32")
    for row, (words, (first, last), _) in enumerate(examples):
        ids[row, : len(words)] = [vocabulary.get(w, UNK) for w in words]
        target[row, first : last + 1] = 1
    return ids, target, labels


# --------------------------------------------------------------------- metrics


def macro_f1(labels, predictions, classes=3):
    """Mean over classes of 2 TP / (2 TP + FP + FN); a class never seen nor predicted scores 0."""
    scores = []
    for c in range(classes):
        tp = np.sum((predictions == c) & (labels == c))
        fp = np.sum((predictions == c) & (labels != c))
        fn = np.sum((predictions != c) & (labels == c))
        scores.append(2 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0)
    return float(np.mean(scores))


def target_blind_ceiling(examples):
    """Best accuracy of any classifier that sees the sentence but not the target.

    It can at best answer each sentence's most frequent label.
    """
    by_sentence = {}
    for words, _, label in examples:
        by_sentence.setdefault(" ".join(words), []).append(label)
    best = sum(np.bincount(labels).max() for labels in by_sentence.values())
    return best / len(examples)


# ----------------------------------------------------------------------- model


def build_models(mode, vocabulary_size, embedding=64, units=64, attention_units=64):
    """The classifier and a model that returns its attention weights (same layers)."""
    words = keras.Input((None,), dtype="int32", name="words")
    target = keras.Input((None,), dtype="int32", name="target")
    embedded = keras.layers.Embedding(vocabulary_size, embedding, mask_zero=True, name="embedding")(words)
    hidden = keras.layers.Bidirectional(keras.layers.LSTM(units, return_sequences=True), name="bilstm")(embedded)
    # One call that returns the weights too: a second call of the same layer
    # with another number of outputs would break the functional graph (Keras
    # checks a graph against the outputs of a layer's first call).
    sentence, scores = ka.TargetedAttention(attention_units, mode=mode, name="attention")(
        hidden, target, return_attention_scores=True
    )
    sentence = keras.layers.Dropout(0.2, name="dropout")(sentence)
    logits = keras.layers.Dense(len(LABELS), dtype="float32", name="classifier")(sentence)
    classifier = keras.Model([words, target], logits, name=f"targeted_{mode}")
    if mode != "vanilla":
        scores = {part: scores[part] for part in ("whole", "left", "right")}
    return classifier, keras.Model([words, target], scores, name=f"attention_{mode}")


def plot_sentence(predictions, attention_model, mode, example_rows, examples, encoded, path):
    """One sentence, every target: a row of weights over the words per target (and part)."""
    words = examples[example_rows[0]][0]
    # A batch of 64 rather than the sentence's few rows: a distributed model
    # would hand some replicas no example at all, which its LSTMs cannot run
    # on.
    batch = [x[:64] for x in encoded[:2]]
    scores = common.predict(attention_model, batch, batch_size=32)
    predicted = predictions[example_rows]
    scores = {"whole": scores} if mode == "vanilla" else scores
    parts = {part: np.asarray(weights)[example_rows] for part, weights in scores.items()}
    rows, labels = [], []
    for k, row in enumerate(example_rows):
        _, (first, last), label = examples[row]
        name = " ".join(words[first : last + 1])
        for part, weights in parts.items():
            rows.append(np.asarray(weights, np.float32)[k, : len(words)])
            part_name = "" if mode == "vanilla" else f" / {part}"
            labels.append(f"{name}: {LABELS[label]}, predicted {LABELS[predicted[k]]}{part_name}")
    # plot_attention's default size (a third of an inch per cell), widened
    # for these long row labels.
    figsize = (max(4.0, 0.32 * len(words) + 2.2) + 0.07 * max(map(len, labels)), max(3.0, 0.32 * len(rows) + 1.6) + 0.8)
    figure = ka.plot_attention(np.stack(rows), words, labels, title=f"TargetedAttention, {mode}", figsize=figsize)
    figure.savefig(path, dpi=150)
    return path


# ------------------------------------------------------------------------ main


def main(argv=None):
    args = common.parse_args(
        __doc__.splitlines()[0],
        argv,
        epochs=3,
        batch_size=64,
        samples=20000,
        out="runs/targeted",
        smoke_epochs=1,
        smoke_samples=256,
        smoke_batch_size=64,
    )
    strategy = common.setup(args)
    test_size = 150 if args.smoke else 3000
    test = make_corpus(test_size, np.random.default_rng(10_000 + args.seed))
    train = make_corpus(args.samples, np.random.default_rng(args.seed), exclude={" ".join(w) for w, _, _ in test})
    vocabulary = {w: i for i, w in enumerate(["<pad>", "<unk>"] + sorted({w for ws, _, _ in train for w in ws}))}
    length = max(len(words) for words, _, _ in train + test)
    train_data, test_data = encode(train, vocabulary, length), encode(test, vocabulary, length)
    # The last examples are the validation set. Its size is a multiple
    # of the replica count: Keras builds a distributed model from the first
    # batch averaged over the replicas, which fails on an uneven split.
    replicas = strategy.num_replicas_in_sync
    held_out = len(train) // 20 // replicas * replicas
    validation = ([x[-held_out:] for x in train_data[:2]], train_data[2][-held_out:]) if held_out else None
    train_data = tuple(x[: len(train) - held_out] for x in train_data)
    with open(os.path.join(args.out, "vocabulary.json"), "w") as f:
        json.dump({"words": list(vocabulary), "labels": LABELS}, f, indent=1)

    # The plotted sentence: the first test sentence with three targets (its
    # examples are consecutive, and among the first 64 the plot predicts).
    sentence = next((words for words, _, _ in test[:60] if sum(w == words for w, _, _ in test[:64]) == 3), test[0][0])
    sentence_rows = [i for i, (words, _, _) in enumerate(test[:64]) if words == sentence]
    results = {
        "samples": len(train) - held_out,
        "validation_examples": held_out,
        "test_examples": len(test),
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "label_counts_test": {name: int(np.sum(test_data[2] == i)) for i, name in enumerate(LABELS)},
        "target_blind_accuracy_ceiling": target_blind_ceiling(test),
        "modes": {},
        "plots": [],
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "distribute": args.distribute,
        "replicas": strategy.num_replicas_in_sync,
    }
    for mode in MODES:
        keras.utils.set_random_seed(args.seed)  # every mode starts from the same seed
        with strategy.scope():
            classifier, attention_model = build_models(mode, len(vocabulary))
            classifier.compile(
                optimizer=keras.optimizers.Adam(2e-3),
                loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                metrics=["accuracy"],
                jit_compile=args.jit,
            )
            ka.training.build_optimizer(classifier)
        # A backup per mode: a run killed in one mode resumes that mode only.
        mode_args = copy.copy(args)
        mode_args.out = os.path.join(args.out, mode)
        os.makedirs(mode_args.out, exist_ok=True)
        print(f"\n--- TargetedAttention(mode={mode!r})")
        with common.Timer() as training:
            history = classifier.fit(
                list(train_data[:2]),
                train_data[2],
                batch_size=args.batch_size,
                epochs=args.epochs,
                validation_data=validation,
                callbacks=common.callbacks(mode_args),
                verbose=2 if args.smoke else "auto",
            )
        classifier.save(os.path.join(args.out, f"targeted_{mode}.keras"))
        logits = classifier.predict(list(test_data[:2]), batch_size=500, verbose=0)
        predictions = np.argmax(logits, axis=-1)
        results["modes"][mode] = {
            "accuracy": float(np.mean(predictions == test_data[2])),
            "macro_f1": macro_f1(test_data[2], predictions),
            "final_loss": float(history.history["loss"][-1]),
            "train_seconds": training.seconds,
        }
        results["plots"].append(
            plot_sentence(
                predictions,
                attention_model,
                mode,
                sentence_rows,
                test,
                test_data,
                os.path.join(args.out, f"attention_{mode}.png"),
            )
        )
    common.write_results(args, results)

    print(
        f"\n{len(test)} held-out examples ({len(train) - held_out} training); "
        f"a target-blind model could reach at most {results['target_blind_accuracy_ceiling']:.1%}"
    )
    print(f"{'mode':<16}{'accuracy':>10}{'macro-F1':>10}{'train s':>9}")
    for mode, r in results["modes"].items():
        print(f"{mode:<16}{r['accuracy']:>10.1%}{r['macro_f1']:>10.3f}{r['train_seconds']:>9.0f}")
    print("plotted sentence:", " ".join(sentence))
    return results


if __name__ == "__main__":
    main()
