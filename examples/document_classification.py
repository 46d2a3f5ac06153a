"""Classify generated documents with a Hierarchical Attention Network, and see where it looks.

Each document has 5-15 sentences of 5-12 words. One or two *key* sentences
contain a cue word ("verdict", "overall", ...) and two or three topic words
of the document's class (sports, science, finance, music). The other
sentences are distractors: filler words, and often one or two topic words of
a *decoy* class. Topic words only count inside key sentences, and the decoy
words usually outnumber the key ones, so counting topic words (the "bag of
words" baseline in the results) mostly answers the decoy: the model has to
find the key sentences first.

The model is `keras_attention.models.hierarchical_attention_network` (Yang et
al. 2016): a word-level BiGRU with attention pooling gives one vector per
sentence, a sentence-level BiGRU with attention pooling gives the document.
The results report held-out accuracy and how often the sentence with the
largest sentence weight is a key sentence (the "key sentence hit rate"), and
the plots show the word weights of one document (rows = sentences) and its
sentence weights. The hit rate stays below the accuracy: the sentence-level
BiGRU carries a key sentence's content into its neighbours (mostly into the
last sentence), so attention on one of those can classify just as well.

    python -m examples.document_classification [--epochs N] [--samples N] [--out DIR] [--smoke] ...

Writes to `--out` (default runs/documents): results.json, han.keras,
word_attention.png, sentence_attention.png and the resumable checkpoints.
The data is generated with a fixed seed: nothing is downloaded.
"""

import os

import keras
import numpy as np

import keras_attention as ka
from examples import common

TOPICS = {
    "sports": ["goal", "match", "team", "coach", "league", "score"],
    "science": ["atom", "cell", "theory", "lab", "gene", "orbit"],
    "finance": ["bank", "stock", "loan", "market", "profit", "bond"],
    "music": ["song", "band", "chord", "guitar", "album", "tempo"],
}
CLASSES = list(TOPICS)
CUES = ["verdict", "overall", "mainly", "clearly"]
FILLER = (
    "the a of and to in is was it for on with as at by this that from they we "
    "he she an be have has had were are not but or one all so some into than "
    "then there when what which who will would can just over also"
).split()
VOCABULARY = ["<pad>"] + FILLER + CUES + [w for c in CLASSES for w in TOPICS[c]]
WORD_ID = {w: i for i, w in enumerate(VOCABULARY)}
TOPIC_CLASS = {WORD_ID[w]: c for c, words in enumerate(TOPICS.values()) for w in words}
CUE_IDS = {WORD_ID[w] for w in CUES}
MAX_SENTENCES, MAX_WORDS = 15, 12


def _sentence(rng, topic_words):
    length = int(rng.integers(5, MAX_WORDS + 1))
    words = list(rng.choice(FILLER, size=length))
    for position, word in zip(rng.choice(length, size=len(topic_words), replace=False), topic_words):
        words[position] = word
    return words


def make_documents(count, rng):
    """Documents as word lists, their labels, and which sentences are key sentences."""
    documents, labels, keys = [], [], []
    for _ in range(count):
        label = int(rng.integers(len(CLASSES)))
        decoy = int(rng.choice([c for c in range(len(CLASSES)) if c != label]))
        sentences = int(rng.integers(5, MAX_SENTENCES + 1))
        key = set(rng.choice(sentences, size=int(rng.integers(1, 3)), replace=False).tolist())
        document = []
        for s in range(sentences):
            if s in key:
                words = [rng.choice(CUES)] + list(rng.choice(TOPICS[CLASSES[label]], size=int(rng.integers(2, 4))))
            else:
                # Decoys sit in most distractors, so a count of topic words
                # would mostly name the decoy class.
                decoys = int(rng.choice([0, 1, 2], p=[0.3, 0.4, 0.3]))
                words = list(rng.choice(TOPICS[CLASSES[decoy]], size=decoys))
            document.append(_sentence(rng, words))
        documents.append(document)
        labels.append(label)
        keys.append(sorted(key))
    return documents, np.array(labels, "int32"), keys


def encode(documents):
    ids = np.zeros((len(documents), MAX_SENTENCES, MAX_WORDS), "int32")
    for d, document in enumerate(documents):
        for s, sentence in enumerate(document):
            ids[d, s, : len(sentence)] = [WORD_ID[w] for w in sentence]
    return ids


def bag_of_words_guess(ids):
    """The class with the most topic words anywhere: what ignoring structure gets."""
    counts = np.zeros((len(ids), len(CLASSES)))
    for word, c in TOPIC_CLASS.items():
        counts[:, c] += (ids == word).sum(axis=(1, 2))
    return counts.argmax(axis=1)


# ----------------------------------------------------------------------- plots


def plot_word_attention(document, key, word_weights, title, path):
    """Rows are sentences, columns word positions; each cell is labelled with its word."""
    weights = word_weights[: len(document), :MAX_WORDS]
    rows = [f"{'key ' if s in key else ''}s{s + 1}" for s in range(len(document))]
    figure = ka.plot_attention(
        weights,
        [str(w + 1) for w in range(MAX_WORDS)],
        rows,
        title=title,
        annotate=False,
        xlabel="word position",
        ylabel="sentence",
    )
    axes = figure.axes[0]
    for s, sentence in enumerate(document):
        for w, word in enumerate(sentence):
            colour = "black" if weights[s, w] > 0.6 else "white"
            axes.text(w, s, word, ha="center", va="center", fontsize=4.5, color=colour)
    figure.savefig(path, dpi=200)
    return path


def plot_sentence_attention(document, key, sentence_weights, title, path):
    columns = [f"{'key ' if s in key else ''}s{s + 1}" for s in range(len(document))]
    figure = ka.plot_attention(
        sentence_weights[None, : len(document)], columns, ["document"], title=title, xlabel="sentence", ylabel=""
    )
    figure.savefig(path, dpi=150)
    return path


# ------------------------------------------------------------------------ main


def main(argv=None):
    args = common.parse_args(
        __doc__.splitlines()[0],
        argv,
        epochs=6,
        batch_size=64,
        samples=8000,
        out="runs/documents",
        smoke_epochs=1,
        smoke_samples=256,
        smoke_batch_size=64,
    )
    strategy = common.setup(args)
    test_size = 200 if args.smoke else 1000
    train_documents, train_labels, _ = make_documents(args.samples, np.random.default_rng(args.seed))
    test_documents, test_labels, test_keys = make_documents(test_size, np.random.default_rng(10_000 + args.seed))
    train_ids, test_ids = encode(train_documents), encode(test_documents)

    with strategy.scope():
        model = ka.models.hierarchical_attention_network(
            vocabulary_size=len(VOCABULARY),
            num_classes=len(CLASSES),
            embedding_dim=32,
            word_units=32,
            sentence_units=32,
            max_sentences=MAX_SENTENCES,
            max_words=MAX_WORDS,
            return_attention=True,
            name="han",
        )
        # Only the class probabilities train; the weights outputs are for reading.
        classifier = keras.Model(model.input, model.outputs[0], name="han_classifier")
        classifier.compile(
            optimizer=keras.optimizers.Adam(3e-3),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy"],
            jit_compile=args.jit,
        )
        ka.training.build_optimizer(classifier)
    classifier.summary()
    with common.Timer() as training:
        history = classifier.fit(
            train_ids,
            train_labels,
            batch_size=args.batch_size,
            epochs=args.epochs,
            validation_split=0.1,
            callbacks=common.callbacks(args),
            verbose=2 if args.smoke else "auto",
        )
    model_path = os.path.join(args.out, "han.keras")
    model.save(model_path)

    probabilities, word_weights, sentence_weights = (
        np.asarray(x, "float32") for x in model.predict(test_ids, batch_size=256, verbose=0)
    )
    predictions = probabilities.argmax(axis=1)
    accuracy = float(np.mean(predictions == test_labels))
    bag_accuracy = float(np.mean(bag_of_words_guess(test_ids) == test_labels))
    top_sentence = sentence_weights.argmax(axis=1)
    key_hits = np.array([s in key for s, key in zip(top_sentence, test_keys)])
    key_mass = np.array([sentence_weights[d, key].sum() for d, key in enumerate(test_keys)])
    # In the top sentence, does the top word carry meaning (a cue or a topic word)?
    docs = np.arange(test_size)
    top_words = test_ids[docs, top_sentence, word_weights[docs, top_sentence].argmax(-1)]
    meaningful = np.array([w in CUE_IDS or w in TOPIC_CLASS for w in top_words])

    doc = 0
    document, key = test_documents[doc], test_keys[doc]
    title = f"true {CLASSES[test_labels[doc]]}, predicted {CLASSES[predictions[doc]]}"
    plots = [
        plot_word_attention(
            document, key, word_weights[doc], f"word weights ({title})", os.path.join(args.out, "word_attention.png")
        ),
        plot_sentence_attention(
            document, key, sentence_weights[doc], "sentence weights", os.path.join(args.out, "sentence_attention.png")
        ),
    ]

    results = {
        "task": "documents",
        "samples": args.samples,
        "epochs": args.epochs,
        "batch_size": args.batch_size,
        "test_documents": test_size,
        "classes": CLASSES,
        "accuracy": accuracy,
        "chance_accuracy": 1 / len(CLASSES),
        "bag_of_words_accuracy": bag_accuracy,
        "key_sentence_hit_rate": float(key_hits.mean()),
        "key_sentence_weight": float(key_mass.mean()),
        "top_word_is_cue_or_topic_rate": float(meaningful.mean()),
        "final_loss": float(history.history["loss"][-1]),
        "train_seconds": training.seconds,
        "model": model_path,
        "plots": plots,
        "mixed_precision": args.mixed_precision,
        "jit": args.jit,
        "distribute": args.distribute,
        "replicas": strategy.num_replicas_in_sync,
    }
    common.write_results(args, results)
    print(
        f"\naccuracy on {test_size} held-out documents: {accuracy:.2%} "
        f"(chance {1 / len(CLASSES):.0%}, counting topic words {bag_accuracy:.2%})"
    )
    print(f"key sentence hit rate {key_hits.mean():.2%}; mean sentence weight on key sentences {key_mass.mean():.2f}")
    print(f"training {training.seconds:.0f} s")
    for s, sentence in enumerate(document):
        marker = "*" if s in key else " "
        print(f"  {marker} {sentence_weights[doc, s]:.2f}  {' '.join(sentence)}")
    return results


if __name__ == "__main__":
    main()
