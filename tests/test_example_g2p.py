"""The grapheme-to-phoneme example at smoke size: the whole pipeline on 50 real words."""

import functools
import json
from pathlib import Path

import numpy as np
import pytest

from keras_attention.g2p import bidirectional, lexicon, phones
from keras_attention.text import Vocabulary
from tests import examples

data = examples.load("g2p.data")
# Parsed once for the module's tests (about 2 s a parse; the tests only read it).
cmudict_split = functools.cache(data.cmudict_split)


def run(*arguments, timeout=1200):
    return examples.run("examples.g2p.train", *arguments, timeout=timeout).stdout


@pytest.fixture(scope="module")
def cmudict_smoke(tmp_path_factory):
    out = tmp_path_factory.mktemp("g2p_cmudict")
    # Two models pronouncing together: the export, the serve command and the
    # serving study below all go through the ensemble (SIGMORPHON's smoke
    # covers one model alone). One after the other (--jobs 1): the ensemble
    # of tests/test_example_g2p_sigmorphon.py trains its two side by side,
    # each process starting TensorFlow anew (measured: 10 s of CPU).
    stdout = run(
        *("cmudict", "--smoke", "--ensemble", "2", "--jobs", "1", "--out", out),
        *("--results", out / "results" / "g2p_cmudict.json"),
    )
    return out, json.loads((out / "results.json").read_text()), stdout


def test_cmudict_split_is_the_documented_one():
    split = cmudict_split()
    assert len(split["test"]) == 7817
    assert len(split["train"]) + len(split["dev"]) == 117109
    assert not set(split["test"]) & set(split["train"]) and not set(split["dev"]) & set(split["train"])
    # Stress digits are gone; every pronunciation of a word stays with it.
    assert split["train"]["abbreviate"] == [["AH", "B", "R", "IY", "V", "IY", "EY", "T"]]
    assert all(
        not any(ch.isdigit() for p in options for phone in p for ch in phone) for options in split["test"].values()
    )


def test_smoke_model_memorises_its_fifty_words_and_exports_with_parity(cmudict_smoke):
    out, results, stdout = cmudict_smoke
    ours = results["ours"]
    assert results["test_words"] == 50 and results["smoke"] is True
    # The smoke model is trained and tested on the same 50 words: it must learn them.
    assert ours["wer_greedy"] <= 10.0 and ours["wer"] <= 10.0
    assert 0.0 <= ours["per"] <= ours["wer"]
    assert ours["history"] and ours["history"][-1]["train_seconds"] > 0
    assert ours["ensemble"] == 2 and [member["seed"] for member in ours["members"]] == [0, 1]
    member_seconds = [member["train_seconds"] for member in ours["members"]]
    if ours["jobs"] == 1:  # one after the other: the members' times add up
        assert ours["train_seconds"] == pytest.approx(sum(member_seconds), abs=0.2)
    else:  # side by side: the wall time spans the slowest member, and the pool's start-up
        assert max(member_seconds) - 0.2 <= ours["train_seconds"] <= sum(member_seconds) + 60
    for number, member in enumerate(ours["members"]):
        for name in ("g2p_trainer.keras", "history.json", "best.weights.h5"):
            assert (out / f"member_{number}" / name).stat().st_size > 0, (number, name)
        assert member["test_wer"] <= 10.0  # each model learnt the words on its own too
    assert ours["onnx_serving"]["same_as_keras"] >= 0.999
    assert all(diff <= 1e-4 for diff in ours["export_parity"].values())
    for name in (
        "g2p_greedy.keras",
        "g2p_beam.keras",
        "export/pronounce.onnx",
        "export/vocabulary.json",
    ):
        assert (out / name).stat().st_size > 0, name
    assert len(ours["plots"]) == 4 and all(Path(p).stat().st_size > 0 for p in ours["plots"])
    assert (out / "results" / "g2p_cmudict.json").read_text() == (out / "results.json").read_text()
    # The peer ran on the same words and was scored the same way.
    peer = results["phonetisaurus"]
    assert peer["test_words"] == 50 and 0.0 <= peer["wer"] <= 100.0 and peer["words_per_second"] > 0
    assert "phonetisaurus:" in stdout


def test_serve_command_pronounces_a_word_list(cmudict_smoke, tmp_path, capsys):
    from keras_attention.export.serve_cli import main

    out, _, _ = cmudict_smoke
    words = sorted(lexicon.subset(cmudict_split()["train"], 50))[:5]
    (tmp_path / "words.txt").write_text("\n".join(words) + "\n")
    # `keras-attention-serve`'s main in this process, TensorFlow imported already
    # (tests/test_export.py runs the command itself).
    capsys.readouterr()
    assert main([str(out / "export"), "--signature", "pronounce", "--texts", str(tmp_path / "words.txt")]) in (0, None)
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines] == words
    train_words = cmudict_split()["train"]
    # The memorised words come back as their phones, separated by spaces.
    right = sum(line.split("\t")[1].split() in train_words[line.split("\t")[0]] for line in lines)
    assert right >= 4


class _FixedBeam:
    """A beam model whose n-best is given: `hypotheses[word]` = [(phones, score), ...]."""

    def __init__(self, hypotheses, phones_vocabulary, width=3, length=6):
        self.hypotheses, self.phones, self.width, self.length = hypotheses, phones_vocabulary, width, length
        self.words = None

    def predict_on_batch(self, letter_ids):
        ids = np.zeros((len(self.words), self.width, self.length), "int32")
        scores = np.full((len(self.words), self.width), -np.inf)
        lengths = np.zeros((len(self.words), self.width), "int32")
        for b, word in enumerate(self.words):
            for k, (tokens, score) in enumerate(self.hypotheses[word]):
                encoded = self.phones.encode_one(" ".join(tokens)) + [self.phones.end_id]
                ids[b, k, : len(encoded)] = encoded
                scores[b, k], lengths[b, k] = score, len(encoded)
        return {"ids": ids, "scores": scores, "log_probs": scores, "lengths": lengths}


class _TableTrainer:
    """A teacher-forced model giving each (word, phones) pair the log-probability in `table`
    (logits 0 everywhere but the target's at step 0, which carries the whole score)."""

    def __init__(self, table, letters_vocabulary, phones_vocabulary):
        self.table, self.letters, self.phones = table, letters_vocabulary, phones_vocabulary

    def predict_on_batch(self, inputs):
        letter_ids, previous = inputs
        logits = np.zeros(previous.shape + (len(self.phones),))
        for row in range(previous.shape[0]):
            word = "".join(self.letters.decode(letter_ids[row : row + 1])[0])
            ids = [int(i) for i in previous[row, 1:] if i != self.phones.pad_id]
            tokens = tuple(self.phones.id_to_token(i) for i in ids)
            target = (ids + [self.phones.end_id])[0]
            # softmax over V logits with the target's at x: log p = x - log(e^x + V - 1).
            wanted, others = self.table[(word, tokens)], len(self.phones) - 1
            # Solve x - log(e^x + others) = wanted for x.
            logits[row, 0, target] = wanted + np.log(others) - np.log1p(-np.exp(wanted))
            logits[row, 1:, :] = -1e9
            for step, token in enumerate(ids[1:] + [self.phones.end_id], start=1):
                logits[row, step, token] = 0.0  # probability 1 after the first step
        return logits


def test_bidirectional_pronouncer_picks_the_best_mean_score_among_both_directions_proposals():
    letters = Vocabulary.build(["ab", "ba"], unknown_token="<unk>")
    phone_vocabulary = Vocabulary.build(["A B C"], separator=" ", start_token="<s>", end_token="</s>")
    forward_beam = _FixedBeam({"ab": [(["A", "B"], -0.1), (["A", "C"], -2.0)], "ba": [(["B"], -0.5)]}, phone_vocabulary)
    # The right-to-left beam proposes reversed pronunciations: C A is "A C", B B is "B B".
    backward_beam = _FixedBeam(
        {"ab": [(["C", "A"], -0.2)], "ba": [(["B", "B"], -0.3), (["B"], -0.4)]}, phone_vocabulary
    )
    forward = {("ab", ("A", "B")): -0.1, ("ab", ("A", "C")): -2.0, ("ba", ("B",)): -0.5, ("ba", ("B", "B")): -3.0}
    # Read reversed: ("B", "A") is the forward pronunciation "A B".
    backward = {("ab", ("B", "A")): -4.0, ("ab", ("C", "A")): -0.3, ("ba", ("B",)): -0.2, ("ba", ("B", "B")): -0.1}
    pronouncer = bidirectional.BidirectionalPronouncer(
        {"left-to-right": forward_beam, "right-to-left": backward_beam},
        [_TableTrainer(forward, letters, phone_vocabulary), _TableTrainer(backward, letters, phone_vocabulary)],
        [False, True],
        letters,
        phone_vocabulary,
    )
    words = ["ab", "ba"]
    for beam in (forward_beam, backward_beam):
        beam.words = words  # one batch, in this order (both have length 2)
    assert pronouncer.proposals(words) == [[["A", "B"], ["A", "C"]], [["B"], ["B", "B"]]]
    # ab: A B scores -0.1 - 4.0, A C -2.0 - 0.3: the backward model overrules the forward beam's best.
    # ba: B scores -0.5 - 0.2, B B -3.0 - 0.1.
    assert pronouncer.pronounce(words) == [["A", "C"], ["B"]]
    log_p = bidirectional.log_likelihoods(
        pronouncer.trainers[1], ["ab", "ab"], [["C", "A"], ["B", "A"]], letters, phone_vocabulary
    )
    np.testing.assert_allclose(log_p, [-0.3, -4.0], rtol=1e-9)
    assert bidirectional.reversed_lexicon({"ab": [["A", "B"], ["A"]]}) == {"ab": [["B", "A"], ["A"]]}
    assert [bidirectional.reads_right_to_left(k, "both") for k in range(4)] == [False, True, False, True]
    assert not bidirectional.reads_right_to_left(1, "left-to-right")


def test_bidirectional_pronouncer_never_elects_an_empty_pronunciation():
    # A model that never learnt (one of four, say) ends at once: its beam
    # proposes the empty pronunciation, which every flat-scoring model finds
    # likelier than any real one (one step against several).
    letters = Vocabulary.build(["ab"], unknown_token="<unk>")
    phone_vocabulary = Vocabulary.build(["A B"], separator=" ", start_token="<s>", end_token="</s>")
    learnt = _FixedBeam({"ab": [(["A", "B"], -0.2), (["A"], -3.0)]}, phone_vocabulary)
    untrained = _FixedBeam({"ab": [([], -0.7), (["B"], -2.0)]}, phone_vocabulary)
    learnt.words = untrained.words = ["ab"]
    scores = {("ab", ("A", "B")): -0.2, ("ab", ("A",)): -3.0, ("ab", ()): -3.5, ("ab", ("B",)): -6.0}
    flat = {("ab", ("A", "B")): -4.5, ("ab", ("A",)): -3.0, ("ab", ()): -0.7, ("ab", ("B",)): -2.0}
    # Read reversed by the right-to-left model: ("B", "A") is "A B".
    flat_backward = {("ab", tuple(reversed(tokens))): value for (_, tokens), value in flat.items()}
    pronouncer = bidirectional.BidirectionalPronouncer(
        {"left-to-right": learnt, "right-to-left": untrained},
        [_TableTrainer(scores, letters, phone_vocabulary), _TableTrainer(flat_backward, letters, phone_vocabulary)],
        [False, True],
        letters,
        phone_vocabulary,
    )
    # The empty proposal (sum -4.2, the best of all) is not among them;
    # "A B" (-4.7) beats "A" (-6.0) and "B" (-8.0).
    assert pronouncer.proposals(["ab"]) == [[["A", "B"], ["A"], ["B"]]]
    assert pronouncer.pronounce(["ab"]) == [["A", "B"]]


def test_phone_characters_come_back_as_the_phones():
    cases = {
        "ǎː t͡s": ["a", "\u030c", "ː", "t", "\u0361", "s"],  # accent and length on one vowel; a tie bar
        "t͡ɕʰ a": ["t", "\u0361", "ɕ", "ʰ", "a"],  # an aspirated affricate
        "t ɕ": ["t", "ɕ"],  # two phones stay two
        "a ˧˦ ŋ ˦ˀ˥": ["a", "˧", "˦", "ŋ", "˦", "ˀ", "˥"],  # Vietnamese tones: one phone each
    }
    for text, chars in cases.items():
        assert phones.to_characters(text.split()) == chars
        assert phones.from_characters(chars) == text.split()
    for language in data.MEDIUM_LANGUAGES:  # every pronunciation of every file comes back
        split = data.sigmorphon_split(language)
        assert not any(phones.round_trips(split[side]) for side in split), language
    vocabulary = phones.PhoneCharacters.build(["ǎ b", "t͡s ěː"], start_token="<s>", end_token="</s>")
    assert "ǎ" not in vocabulary.tokens and "\u030c" in vocabulary.tokens  # the caron is its own symbol
    ids = vocabulary.encode(["ǎː t͡s", "b"], add_end=True)
    assert vocabulary.decode(ids) == [["ǎː", "t͡s"], ["b"]]
    assert vocabulary.decode(ids[:, None]) == [[["ǎː", "t͡s"]], [["b"]]]  # beams: (B, K, L)


def test_sigmorphon_files_are_shipped_with_their_attribution():
    for language in data.MEDIUM_LANGUAGES + data.HIGH_LANGUAGES:
        split = data.sigmorphon_split(language)
        expected = (33344, 4168, 4168) if language == "eng_us" else (8000, 1000, 1000)
        assert tuple(sum(map(len, split[side].values())) for side in ("train", "dev", "test")) == expected, language
    readme = (data.SIGMORPHON_DIR / "README.md").read_text()
    assert "CC BY-SA 3.0" in readme and "WikiPron" in readme


def test_the_results_page_is_generated_from_the_committed_results_files():
    report = examples.load("g2p.report")
    page = report.PAGE.read_text(encoding="utf-8")
    assert report.updated_page(page) == page, "run python -m examples.g2p.report"


@pytest.fixture
def parsed_once(monkeypatch):
    """The serving study, run in this process, reads the module's parse of CMUdict."""
    monkeypatch.setattr(data, "cmudict_split", cmudict_split)


def test_serving_study_scores_and_serves_each_beam_width_like_keras(cmudict_smoke, tmp_path, parsed_once):
    out, _, _ = cmudict_smoke
    examples.run_here(
        "examples.g2p.serving",
        out,
        *("--beam-widths", 1, 3, "--limit", 40, "--batch-size", 16),
        *(
            "--phonetisaurus-model",
            out / "phonetisaurus" / "train" / "model.fst",
            "--results",
            tmp_path / "serving.json",
            "--int8",
        ),
    )
    document = json.loads((tmp_path / "serving.json").read_text())
    assert document["test_words"] == 40 and [row["beam_width"] for row in document["widths"]] == [1, 3]
    for row in document["widths"]:
        # ONNX, in its own process, decodes what Keras decodes, word for word.
        assert row["same_as_keras"] == 1.0
        assert 0.0 <= row["per"] <= row["wer"] <= 100.0
        assert row["onnx_words_per_second"] > 0 and len(row["onnx_passes"]) == 3
        # Matrix products are part, never all, of a profiled pass's time.
        assert 0.0 < row["matmul_share"] < 1.0 and 0.0 < row["int8"]["matmul_share"] < 1.0
        assert (out / f"serve_beam{row['beam_width']}" / "pronounce.onnx").is_file()
        # The int8 copy is served and scored from what it served: where it
        # agrees with Keras on every word, its error rates are Keras's.
        int8 = row["int8"]
        assert (out / f"serve_beam{row['beam_width']}" / "pronounce.int8.onnx").stat().st_size == int8["bytes"]
        assert int8["bytes"] < int8["float32_bytes"] and int8["onnx_words_per_second"] > 0
        assert 0.0 <= int8["per"] <= int8["wer"] <= 100.0 and 0.0 <= int8["same_as_keras"] <= 1.0
        if int8["same_as_keras"] == 1.0:
            assert (int8["wer"], int8["per"]) == (row["wer"], row["per"])
    # Phonetisaurus is timed on the same words in the same run.
    peer = document["phonetisaurus"]
    assert peer["test_words"] == 40 and peer["words_per_second"] > 0 and 0.0 <= peer["per"] <= peer["wer"] <= 100.0
    report = examples.load("g2p.report")
    table = report.serving_table(document, json.loads((out / "results.json").read_text()))
    assert table.count("\n| ") == 6  # the header, two widths, their int8 copies and Phonetisaurus
    assert f"| {row['matmul_share']:.0%} |" in table
    assert "| 3 | " in table and "| 3, int8 | " in table and "| Phonetisaurus |" in table


def test_serving_study_serves_the_first_models_of_an_ensemble_alone(cmudict_smoke, tmp_path, parsed_once):
    out, results, _ = cmudict_smoke
    examples.run_here(
        "examples.g2p.serving",
        out,
        *("--members", 1, "--beam-widths", 2, "--limit", 20, "--batch-size", 16),
        # No peer here: nothing to time it from.
        *("--phonetisaurus-model", tmp_path / "none.fst", "--peer", tmp_path / "none.json"),
        *("--results", tmp_path / "one.json"),
    )
    document = json.loads((tmp_path / "one.json").read_text())
    assert document["members"] == 1 and document["phonetisaurus"] is None
    (row,) = document["widths"]
    assert row["same_as_keras"] == 1.0 and 0.0 <= row["per"] <= row["wer"] <= 100.0
    # Beside the whole ensemble's export, not over it.
    assert (out / "serve_beam2_members1" / "pronounce.onnx").is_file()
    report = examples.load("g2p.report")
    assert "ensemble of" not in report.serving_table(document, results)
    assert "ensemble of 2" in report.serving_table({**document, "members": 2}, results)
    refused = examples.run("examples.g2p.serving", out, "--members", 3, check=False)
    assert refused.returncode == 2 and "argument --members: the run has 2 model(s); got 3" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_serving_study_refuses_a_directory_that_is_not_a_run(tmp_path):
    completed = examples.run("examples.g2p.serving", tmp_path, check=False)
    assert completed.returncode == 2
    assert f"argument run: {str(tmp_path)!r} has no results.json" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_rescoring_study_scores_each_rule_on_hand_made_proposals():
    study = examples.load("g2p.rescoring_study")
    backwards = [False, True, False, True]

    def option(tokens, scores, **ranks):
        return {"tokens": tokens, "ranks": ranks, "scores": scores}

    collected = [
        # Word 1: the default (sum of the four models' log-probabilities)
        # picks the short "A" (-4.4 against -4.8); normalised by length
        # (alpha 1: -4.8 / 4 against -4.4 / 2) the long, right one wins.
        [
            option(["A", "B", "C"], [-1.2, -1.2, -1.2, -1.2], ensemble_l2r=0),
            option(["A"], [-1.1, -1.1, -1.1, -1.1], ensemble_r2l=0, member_0=0, member_1=0),
        ],
        # Word 2: only single models propose "B B"; the ensembles-only rules
        # cannot pick it, the every-model rule can.
        [
            option(["B"], [-2.0, -2.0, -2.0, -2.0], ensemble_l2r=0, ensemble_r2l=0),
            option(["B", "B"], [-0.1, -0.1, -0.1, -0.1], member_2=1),
        ],
    ]
    references = [[["A", "B", "C"]], [["B"]]]
    results = study.evaluate(collected, references, backwards)
    assert results["default: mean log-prob"] == 50.0  # word 1 wrong, word 2 right
    assert results["length-normalised, alpha 1.0"] == 0.0
    assert results["every model's n-best too"] == 100.0
    # Votes: "A" is the 1-best of ensemble_r2l, member_0 and member_1 (3 votes against 1).
    assert results["1-best votes, then mean log-prob"] == 50.0  # word 2: "B" has 2 votes, "B B" none
    assert results["oracle (right answer proposed)"] == 0.0
    # The direction weight: 0.7 * (-1.2 - 1.2) + 0.3 * (-1.2 - 1.2) against the same for -1.1: the short one.
    assert results["left-to-right weight 0.7"] == 50.0
