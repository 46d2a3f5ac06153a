"""The G2P example on small lexicons: members selected on a dev score that moves, and the
system chosen on dev among the ways an ensemble can pronounce (issue 34, item 15)."""

import numpy as np
import pytest

from keras_attention.g2p import lexicon, training
from tests import examples

choice = examples.load("g2p.choice")
data = examples.load("g2p.data")


def fixed(predictions):
    """A system pronouncing each word as `predictions[word]` says."""
    return lambda words: [predictions[word] for word in words]


def test_the_choice_on_dev_keeps_a_model_alone_when_the_ensemble_learnt_nothing():
    dev = {"ab": [["A", "B"]], "ba": [["B", "A"]], "aa": [["A", "A"]]}
    test = {"bb": [["B", "B"]], "abab": [["A", "B", "A", "B"]]}
    # What a small lexicon gave: the rescored ensemble elects near-empty
    # pronunciations; model 0 learnt two dev words of three; model 1 one.
    candidates = {
        "both directions, rescored": fixed({"ab": ["A"], "ba": [], "aa": [], "bb": [], "abab": ["A"]}),
        "model 0 alone, beam": fixed(
            {"ab": ["A", "B"], "ba": ["B", "A"], "aa": ["A"], "bb": ["B", "B"], "abab": ["A", "B", "A"]}
        ),
        "model 1 alone, beam": fixed(
            {"ab": ["A", "B"], "ba": ["B"], "aa": ["B"], "bb": ["B", "B"], "abab": ["A", "B", "A", "B"]}
        ),
    }
    chosen, table = choice.choose(candidates, dev, test)
    assert chosen == "model 0 alone, beam"
    assert table["both directions, rescored"]["dev_wer"] == 100.0
    assert table["both directions, rescored"]["dev_per"] == pytest.approx(100 * 5 / 6)  # 1 + 2 + 2 edits of 6
    assert table["model 0 alone, beam"]["dev_wer"] == pytest.approx(100 / 3)
    assert table["model 0 alone, beam"]["dev_per"] == pytest.approx(100 / 6)
    assert table["model 1 alone, beam"]["dev_wer"] == pytest.approx(200 / 3)
    # Test is scored for every system, never used to choose: model 1 is
    # better there, and still not chosen.
    assert table["model 0 alone, beam"]["test_wer"] == 50.0 and table["model 1 alone, beam"]["test_wer"] == 0.0
    assert all(entry["test_words_per_second"] > 0 for entry in table.values())


def test_the_choice_breaks_a_tie_on_dev_wer_by_per_then_by_order():
    rates = {
        "both directions, rescored": {"wer": 20.0, "per": 5.0},
        "left-to-right ensemble, beam": {"wer": 20.0, "per": 4.0},
        "model 0 alone, beam": {"wer": 20.0, "per": 4.0},
        "model 1 alone, greedy": {"wer": 25.0, "per": 1.0},
    }
    assert choice.best_on_dev(rates) == "left-to-right ensemble, beam"
    with pytest.raises(ValueError, match="best_on_dev: `dev_rates` must name at least one system; got none"):
        choice.best_on_dev({})


def test_the_choice_is_never_worse_on_dev_than_the_best_model_alone():
    rng = np.random.default_rng(0)
    for _ in range(200):
        names = ["both directions, rescored", "left-to-right ensemble, beam", "left-to-right ensemble, greedy"]
        names += [f"model {k} alone, {method}" for k in range(4) for method in ("beam", "greedy")]
        # Coarse values, so that ties happen.
        rates = {name: {"wer": float(rng.integers(0, 5) * 25), "per": float(rng.integers(0, 4) * 10)} for name in names}
        chosen = choice.best_on_dev(rates)
        alone = [rates[name] for name in names if name.startswith("model ")]
        best_alone = min((entry["wer"], entry["per"]) for entry in alone)
        assert (rates[chosen]["wer"], rates[chosen]["per"]) <= best_alone
        assert rates[chosen]["wer"] == min(entry["wer"] for entry in rates.values())


def test_the_systems_are_every_way_the_models_pronounce_right_to_left_ones_turned_back():
    class Beam:
        def __init__(self, ids):
            self.ids = np.asarray(ids, "int32")

        def predict_on_batch(self, letter_ids):
            return {"ids": np.repeat(self.ids[None], len(letter_ids), axis=0)}

    from keras_attention.text import Vocabulary

    letters = Vocabulary.build(["ab"], unknown_token="<unk>")
    phones = Vocabulary.build(["A B"], separator=" ", start_token="<s>", end_token="</s>")
    a, b, end = phones.encode_one("A B") + [phones.end_id]

    class Models:
        def __init__(self, ids):
            self.greedy, self.beam = Beam(ids), Beam([ids])  # greedy (L,), beam (K, L)

    members = [Models([a, b, end]), Models([b, b, a, end])]
    found = choice.systems(members, [False, True], None, None, letters, phones)
    assert list(found) == [
        "model 0 alone, beam",
        "model 0 alone, greedy",
        "model 1 alone, beam",
        "model 1 alone, greedy",
    ]
    assert found["model 0 alone, beam"](["ab"]) == [["A", "B"]]
    assert found["model 1 alone, greedy"](["ab"]) == [["A", "B", "B"]]  # read right to left: B B A
    ensembles = {"greedy": Beam([a, end]), "beam": Beam([[b, end]])}
    found = choice.systems(members, [False, True], ensembles, type("P", (), {"pronounce": None})(), letters, phones)
    assert list(found)[:3] == [
        "both directions, rescored",
        "left-to-right ensemble, beam",
        "left-to-right ensemble, greedy",
    ]
    assert found["left-to-right ensemble, beam"](["ab"]) == [["B"]]


class _Trainer:
    """Stands for the Keras model a callback drives: records which epochs' weights were saved."""

    def __init__(self):
        self.stop_training, self.saved = False, []

    def save_weights(self, path):
        self.saved.append(self.epoch)


class _Greedy:
    """A greedy model whose pronunciations, epoch by epoch, are given."""

    def __init__(self, phones, epochs):
        self.phones, self.epochs, self.epoch = phones, epochs, 0

    def predict_on_batch(self, letter_ids):
        rows = [self.phones.encode_one(" ".join(p)) + [self.phones.end_id] for p in self.epochs[self.epoch]]
        width = max(map(len, rows))
        return {"ids": np.array([row + [self.phones.pad_id] * (width - len(row)) for row in rows], "int32")}


def test_a_model_is_kept_and_trained_on_while_its_dev_per_falls_under_a_flat_wer():
    from keras_attention.text import Vocabulary

    letters = Vocabulary.build(["abc", "ab"], unknown_token="<unk>")
    phones = Vocabulary.build(["A B C"], separator=" ", start_token="<s>", end_token="</s>")
    dev = {"ab": [["A", "B"]], "abc": [["A", "B", "C"]]}  # scored in length order: ab, abc
    # Every epoch gets both words wrong (dev WER 100%) but the first two,
    # and the pronunciations come closer: PER 80, 60, 40, then 60.
    epochs = [
        [["C"], ["C", "C"]],  # 2 + 2 edits of 5 reference phones
        [["A"], ["C", "C"]],  # 1 + 2
        [["A"], ["A", "C"]],  # 1 + 1
        [["A"], ["C", "C"]],
        [["A"], ["C", "C"]],
        [["A"], ["C", "C"]],
    ]
    greedy, trainer = _Greedy(phones, epochs), _Trainer()
    evaluation = training.DevEvaluation(greedy, dev, letters, phones, "unused", patience=3)
    evaluation.set_model(trainer)
    for epoch in range(len(epochs)):
        greedy.epoch = trainer.epoch = epoch
        evaluation.on_epoch_end(epoch, {"loss": 1.0})
        if trainer.stop_training:
            break
    # By WER alone the first epoch was best and training stopped at the
    # fourth with its weights; by (WER, PER) the third is kept, and
    # training stops three epochs after it.
    assert trainer.saved == [0, 1, 2]
    assert epoch == 5 and trainer.stop_training
    assert [entry["dev_wer"] for entry in evaluation.history] == [100.0] * 6
    assert [entry["dev_per"] for entry in evaluation.history] == [80.0, 60.0, 40.0, 60.0, 60.0, 60.0]
    assert training.best_epoch(evaluation.history)["epoch"] == 3


def test_a_small_lexicon_is_a_seeded_sample_of_the_training_words():
    words = {f"w{i:03d}": [["P", str(i)]] for i in range(100)}
    small = lexicon.sample(words, 10, seed=3)
    assert len(small) == 10 and all(small[word] == words[word] for word in small)
    assert small == lexicon.sample(words, 10, seed=3) and small != lexicon.sample(words, 10, seed=4)
    # Drawn from the whole alphabet, not its first words.
    assert max(small) > "w050"
    for count in (0, 101):
        with pytest.raises(
            ValueError, match=f"sample: `count` must be between 1 and the lexicon's 100 words; got {count}"
        ):
            lexicon.sample(words, count)


def test_train_words_refuses_an_empty_lexicon(capsys):
    train = examples.load("g2p.train")
    assert train.parse_args(["sigmorphon", "--languages", "dut", "--train-words", "800"]).train_words == 800
    with pytest.raises(SystemExit):
        train.parse_args(["sigmorphon", "--train-words", "0"])
    assert "argument --train-words: expected an integer >= 1, got 0" in capsys.readouterr().err
