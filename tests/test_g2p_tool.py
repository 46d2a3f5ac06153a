"""The G2P tool (`keras-attention-g2p`, keras_attention/g2p/): lexicon files read and refused line by
line, the settings rule at several sizes, and train -> apply -> evaluate on a 50-word TSV (issue 35)."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_attention.g2p import lexicon, settings
from keras_attention.g2p.model import ModelConfig
from keras_attention.g2p.training import TrainConfig

ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return path


# ------------------------------------------------------------------ lexicons


def test_a_tsv_lexicon_keeps_every_pronunciation_of_a_word_together(tmp_path):
    path = write(tmp_path, "lex.tsv", "read\tR IY D\nread\tR EH D\nread\tR IY D\n\nété\te t e\r\n")
    found = lexicon.read_lexicon(path)
    assert found.format == "tsv" and found.skipped == []
    assert found.entries == {"read": [["R", "IY", "D"], ["R", "EH", "D"]], "été": [["e", "t", "e"]]}


def test_a_cmudict_lexicon_reads_variants_comments_and_keeps_stress(tmp_path):
    text = ";;; a comment\nREAD  R IY1 D\nREAD(2)  R EH1 D\nd'artagnan D AH0 R T AE1 NY AH0 N # foreign\n"
    found = lexicon.read_lexicon(write(tmp_path, "cmu.dict", text))
    assert found.format == "cmudict"
    assert found.entries == {
        "READ": [["R", "IY1", "D"], ["R", "EH1", "D"]],
        "d'artagnan": [["D", "AH0", "R", "T", "AE1", "NY", "AH0", "N"]],
    }


def test_skipped_entries_are_returned_with_their_line_and_reason(tmp_path):
    text = "ab\tA B\nempty\t\nsnake_case\tS K\nodd\t<s> O\n" + "".join(f"w{i}_\tW\n" for i in range(3))
    found = lexicon.read_lexicon(write(tmp_path, "lex.tsv", text))
    assert found.entries == {"ab": [["A", "B"]]}
    assert found.skipped[:3] == [
        (2, "empty", "no phones"),
        (3, "snake_case", "reserved character '_'"),
        (4, "odd", "reserved phone '<s>'"),
    ]
    summary = found.skipped_summary()
    assert summary.startswith("skipped 6 entries (line 2 'empty': no phones;") and summary.endswith("and 3 more)")


@pytest.mark.parametrize(
    "text, message",
    [
        ("ab\tA B\nno tab here\n", r"lex:2: expected 'word<TAB>phones' \(a TSV file\); got 'no tab here'"),
        ("ab\tA B\n\tA\n", r"lex:2: expected a word before the tab"),
        ("AB  A B\nLONELY\n", r"lex:2: expected 'WORD  PHONES' \(a CMUdict file\); got 'LONELY'"),
        ("", r"lex: no pronunciations found; expected 'word<TAB>phones' lines"),
        ("x\t\n", r"lex: no pronunciations found \(skipped 1 entry \(line 1 'x': no phones\)\)"),
        (b"ab\tA B\n\xff\tC\n", r"lex:2: not UTF-8 text"),
    ],
)
def test_a_malformed_lexicon_is_refused_with_its_file_and_line(tmp_path, text, message):
    with pytest.raises(lexicon.LexiconError, match=message) as raised:
        lexicon.read_lexicon(write(tmp_path, "lex", text))
    assert raised.value.path.endswith("lex")


def test_the_dev_split_is_seeded_and_scaled_with_the_lexicon():
    words = {f"w{i}": [["W"]] for i in range(800)}
    train, dev = lexicon.carve_dev(words, seed=1)
    assert len(dev) == 100 and len(train) == 700 and not set(train) & set(dev)
    assert lexicon.carve_dev(words, seed=1) == (train, dev) and lexicon.carve_dev(words, seed=2)[1] != dev
    assert [lexicon.dev_size(n) for n in (2, 50, 800, 5000, 117_109)] == [1, 12, 100, 500, 2000]
    with pytest.raises(ValueError, match="carve_dev: a dev set needs a lexicon of 2 words or more; got 1"):
        lexicon.carve_dev({"a": [["A"]]})


# ------------------------------------------------------------------ settings


def configs(chosen):
    return ModelConfig(**chosen["model"]), TrainConfig(**chosen["training"])


def test_the_rule_at_cmudict_size_is_the_cmudict_run():
    model, training = configs(settings.choose(109_156, set("abcdefghijklmnopqrstuvwxyz'")))
    # The published CMUdict run: luong decoder, 2x192 encoder, 384 decoder, 13 epochs, the defaults otherwise.
    assert model == ModelConfig(decoder="luong", encoder_units=192, decoder_units=384)
    assert training == TrainConfig(epochs=13, min_epochs=7)
    assert settings.choose(109_156, set("abc"))["normalization"] is None


def test_the_rule_at_sigmorphon_sizes_is_the_sigmorphon_runs():
    medium = settings.choose(8000, set("abcé"))
    model, training = configs(medium)
    assert model == ModelConfig(decoder="luong", encoder_units=128, dropout=0.3)
    assert training == TrainConfig(batch_size=64, epochs=22, patience=6, min_epochs=11)
    assert medium["ensemble"] == 4 and medium["normalization"] == "NFD"
    high = settings.choose(33_344, set("abc"))
    model, training = configs(high)
    assert model == ModelConfig(decoder="luong", dropout=0.2)
    assert training == TrainConfig(batch_size=128, epochs=12, patience=4, min_epochs=6) and high["ensemble"] == 2


def test_a_small_lexicon_gets_enough_updates_and_patience():
    chosen = settings.choose(800, set("abc"))
    training = chosen["training"]
    # 800 words in batches of 16: 50 updates a pass, 3 passes an epoch; 22 epochs = 3,300 updates,
    # patience 6 epochs = 900 updates, never before epoch 11.
    assert training == {"batch_size": 16, "passes_per_epoch": 3, "epochs": 22, "patience": 6, "min_epochs": 11}
    assert chosen["ensemble"] == 4 and chosen["model"]["dropout"] == 0.3
    assert settings.choose(500, set("a"))["training"]["passes_per_epoch"] == 4
    assert settings.choose(50, set("a"))["training"]["passes_per_epoch"] == 32
    assert settings.choose(8000, set("a"))["training"]["passes_per_epoch"] == 1


def test_the_rule_is_monotone_in_the_lexicon_size():
    sizes = [50, 300, 500, 800, 1000, 1499, 1500, 2000, 4000, 8000, 19_999, 20_000, 33_344, 60_000, 120_000]
    chosen = [settings.choose(n, set("a")) for n in sizes]
    batches = [c["training"]["batch_size"] for c in chosen]
    units = [c["model"]["encoder_units"] for c in chosen]
    dropouts = [c["model"]["dropout"] for c in chosen]
    ensembles = [c["ensemble"] for c in chosen]
    updates = [
        c["training"]["epochs"] * c["training"]["passes_per_epoch"] * -(-n // c["training"]["batch_size"])
        for n, c in zip(sizes, chosen)
    ]
    assert batches == sorted(batches) and units == sorted(units)
    assert dropouts == sorted(dropouts, reverse=True) and ensembles == sorted(ensembles, reverse=True)
    assert min(updates) >= settings.MIN_UPDATES and updates[-1] == max(updates)


def test_a_model_the_budget_stopped_unconverged_is_reported():
    from keras_attention.g2p.train_command import budget_cut

    config = TrainConfig(epochs=22, min_epochs=11)
    done = {"epochs": 22, "best_epoch": {"dev_wer": 30.0}}
    assert budget_cut([done, {"epochs": 12, "best_epoch": {"dev_wer": 40.0}}], config) is None
    cut = budget_cut([done, {"epochs": 2, "best_epoch": {"dev_wer": 98.0}}], config)
    assert cut == (
        "the time budget stopped 1 of 2 models after 2 of 22 epochs, before they could converge "
        "(dev WER 98%); give --minutes more time"
    )
    # Past min_epochs, a model is reported when the budget stopped it at its best epoch (still
    # improving), not when its best lies behind it (patience would have stopped it soon).
    improving = {"epochs": 15, "best_epoch": {"epoch": 15, "dev_wer": 31.4}}
    settled = {"epochs": 14, "best_epoch": {"epoch": 12, "dev_wer": 30.0}}
    assert budget_cut([done, settled], config) is None
    assert budget_cut([done, {"epochs": 22, "best_epoch": {"epoch": 22, "dev_wer": 29.0}}], config) is None
    assert budget_cut([settled, improving, improving, done], config) == (
        "the time budget stopped 2 of 4 models after 15, 15 of 22 epochs while they were still improving "
        "(dev WER 31%, 31%, each its best in its last epoch); give --minutes more time"
    )
    both = budget_cut([{"epochs": 2, "best_epoch": {"epoch": 2, "dev_wer": 98.0}}, improving], config)
    assert both == (
        "the time budget stopped 1 of 2 models after 2 of 22 epochs, before they could converge (dev WER 98%); "
        "the time budget stopped 1 of 2 models after 15 of 22 epochs while they were still improving "
        "(dev WER 31%, each its best in its last epoch); give --minutes more time"
    )


def test_the_trainer_gives_its_read_out_no_mask_and_keras_no_warning(tmp_path):
    import inspect
    import re
    import warnings

    import keras

    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p.vocabularies import vocabularies

    letters, phones = vocabularies({"ab": [["A", "B"]], "ba": [["B", "A", "A"]]})
    source, previous = letters.encode(["ab", "ba"]), np.array([[1, 3, 4, 0], [1, 4, 3, 3]], "int32")
    with warnings.catch_warnings():
        # Keras warned "Layer 'readout' (of type Sequential) was passed an input with a mask"
        # at the build and at every trace (the tool's train output showed it).
        warnings.simplefilter("error", UserWarning)
        models = g2p_model.build_models(letters, phones, ModelConfig(**settings.smoke()["model"]))
        logits = keras.ops.convert_to_numpy(models.trainer([source, previous]))
    assert logits.shape == (2, 4, len(phones)) and np.isfinite(logits).all()
    # The layer: the same values, no mask; it saves and loads by name.
    steps = keras.layers.Embedding(5, 3, mask_zero=True)
    embedded = steps(np.array([[1, 2, 0]]))
    unmasked = g2p_model.WithoutMask()
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(unmasked(embedded)), keras.ops.convert_to_numpy(embedded))
    assert unmasked.compute_mask(embedded, steps.compute_mask(np.array([[1, 2, 0]]))) is None
    models.trainer.save(tmp_path / "trainer.keras")
    restored = keras.saving.load_model(tmp_path / "trainer.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored([source, previous])), logits, atol=1e-6)
    (example,) = re.findall(r"```python\n(.*?)```", inspect.getdoc(g2p_model.WithoutMask), re.S)
    exec(example, {"keras": keras, "np": np})


def test_the_members_that_pronounce_best_together_on_dev_are_chosen():
    from keras_attention.g2p.train_command import choose_members

    # The measured case: member 0 never converged; the best two beat all four.
    alone = {0: (63.0, 29.6), 1: (44.0, 18.3), 2: (42.0, 15.6), 3: (44.0, 17.8)}
    together = {(2, 3): (36.0, 15.3), (2, 3, 1): (37.0, 14.6), (2, 3, 1, 0): (42.0, 16.0)}
    asked = []

    def dev_score(numbers):
        asked.append(tuple(numbers))
        return alone[numbers[0]] if len(numbers) == 1 else together[tuple(numbers)]

    chosen, tried = choose_members(4, dev_score)
    assert chosen == [2, 3]  # ranked alone 2, 3 (PER breaks the 44% tie), 1, 0
    assert [entry["members"] for entry in tried] == [[2], [2, 3], [2, 3, 1], [2, 3, 1, 0]]
    assert [entry["dev_wer"] for entry in tried] == [42.0, 36.0, 37.0, 42.0]
    assert sorted(asked) == [(0,), (1,), (2,), (2, 3), (2, 3, 1), (2, 3, 1, 0), (3,)]

    # A tie in WER and PER keeps the fewer members; one member is never scored.
    chosen, _ = choose_members(2, lambda numbers: (10.0, 2.0))
    assert chosen == [0]
    assert choose_members(1, lambda numbers: pytest.fail("nothing to choose")) == ([0], [])


def test_a_time_budget_shrinks_the_ensemble_then_the_epochs():
    free = settings.choose(8000, set("a"))
    # Two rounds of two models side by side: 2,750 updates of 0.030 + 0.00089 x 64 s, 22 epochs of 2 s,
    # 30 s a model.
    assert free["estimated_minutes"] == pytest.approx(2 * (2750 * 0.08696 + 22 * 2 + 30) / 60, abs=0.1)
    assert settings.choose(8000, set("a"), minutes=12)["ensemble"] == 4
    # The epochs go first while each model keeps half of them: 6 minutes for two rounds of 313 s,
    # floor(22 * (360 - 60) / (626 - 60)) = 11 epochs.
    tight = settings.choose(8000, set("a"), minutes=7)
    assert tight["ensemble"] == 4 and tight["training"]["epochs"] == 11 and tight["training"]["min_epochs"] == 6
    # Then the ensemble: 4 models would get 9 epochs; 2 side by side get floor(22 * (300 - 30) / (313 - 30)).
    tighter = settings.choose(8000, set("a"), minutes=6)
    assert tighter["ensemble"] == 2 and tighter["training"]["epochs"] == 20
    assert tighter["estimated_minutes"] <= 5.0 and tighter["training"]["max_minutes"] == 5.0
    # Never under one model a core: a model alone trains no faster than two side by side.
    tightest = settings.choose(8000, set("a"), minutes=3)
    assert tightest["ensemble"] == 2 and tightest["training"]["epochs"] == 6
    assert settings.choose(8000, set("a"), minutes=3, cores=1)["ensemble"] == 1
    assert tightest["estimated_minutes"] <= 2.0 and tightest["training"]["max_minutes"] == 2.0
    with pytest.raises(ValueError, match=r"choose: `minutes` must be a positive number of minutes or None; got 0"):
        settings.choose(100, set("a"), minutes=0)
    with pytest.raises(ValueError, match=r"choose: `train_words` must be a positive integer; got 0"):
        settings.choose(0, set("a"))


# ------------------------------------------------------------------ the command


def g2p(*arguments, check=True):
    completed = subprocess.run(
        [sys.executable, "-m", "keras_attention.g2p", *map(str, arguments)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    if check:
        assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    return completed


def error_lines(completed):
    return [line for line in completed.stderr.splitlines() if line.startswith("error:")]


def g2p_here(capsys, *arguments, check=True):
    """The command's `main` in this process (TensorFlow is imported already: seconds saved a call)."""
    from keras_attention.g2p.cli import main

    capsys.readouterr()
    try:
        code = main([str(argument) for argument in arguments])
    except SystemExit as exit:  # argparse's refusals
        code = exit.code
    captured = capsys.readouterr()
    completed = subprocess.CompletedProcess(arguments, code, captured.out, captured.err)
    if check:
        assert code == 0, captured.out[-3000:] + captured.err[-3000:]
    return completed


@pytest.mark.parametrize(
    "content, expected",
    [
        ("ab\tA B\nno tab\n", "error: {path}:2: expected 'word<TAB>phones' (a TSV file); got 'no tab'"),
        ("", "error: {path}: no pronunciations found; expected 'word<TAB>phones' lines"),
    ],
)
def test_the_command_refuses_a_malformed_lexicon_in_one_line(tmp_path, capsys, content, expected):
    path = write(tmp_path, "bad.tsv", content)
    completed = g2p_here(capsys, "train", "--lexicon", path, "--out", tmp_path / "model", check=False)
    assert completed.returncode == 2 and "Traceback" not in completed.stderr
    assert error_lines(completed) == [expected.format(path=path)]
    assert not (tmp_path / "model").exists()


def fifty_words(tmp_path):
    """A TSV of 50 made-up words pronounced letter by letter, and "read" with two pronunciations."""
    import random

    rng, letters, words = random.Random(0), "abdeiklmnoprstu", set()
    while len(words) < 50:
        words.add("".join(rng.choice(letters) for _ in range(rng.randint(3, 6))))
    lines = [f"{word}\t{' '.join(word.upper())}" for word in sorted(words)] + ["read\tR IY D", "read\tR EH D"]
    return write(tmp_path, "lexicon.tsv", "\n".join(lines) + "\n"), sorted(words)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The tool trained on the 50-word TSV (smoke settings; dev and test the same words: it memorises them)."""
    tmp_path = tmp_path_factory.mktemp("g2p_tool")
    path, words = fifty_words(tmp_path)
    model = tmp_path / "model"
    completed = g2p("train", "--lexicon", path, "--dev", path, "--test", path, "--out", model, "--smoke")
    return model, path, words, completed


def test_train_writes_the_model_directory_and_prints_its_settings(trained):
    model, _, _, completed = trained
    assert "settings: ensemble of 1, encoder 2x32, decoder 64 (input_feeding)" in completed.stdout
    assert "UserWarning" not in completed.stderr, completed.stderr[-2000:]  # Keras's mask warning, once
    recorded = json.loads((model / "settings.json").read_text())
    assert recorded["words"] == {"train": 51, "dev": 51, "test": 51} and recorded["beam_width"] == 5
    assert recorded["model"] == settings.smoke()["model"]
    results = json.loads((model / "results.json").read_text())
    # Trained and scored on the same 51 words: memorised.
    assert results["dev_wer"] <= 10.0 and results["test_wer"] <= 10.0 and results["test_words"] == 51
    for name in ("pronounce.onnx", "pronounce_greedy.onnx", "vocabulary.json"):
        assert (model / "export" / name).stat().st_size > 0
    assert (model / "member_0" / "results.json").is_file()


def test_apply_prints_n_best_lines_best_first_and_reports_unknown_letters(trained, capsys):
    model, _, words, _ = trained
    completed = g2p_here(capsys, "apply", "--model", model, "read", words[0], "zebra", "--nbest", 2)
    rows = [line.split("\t") for line in completed.stdout.splitlines()]
    assert [row[0] for row in rows] == ["read", "read", words[0], words[0]]
    scores = [float(row[1]) for row in rows]
    assert scores[0] >= scores[1] and scores[2] >= scores[3] and max(scores) <= 0.0
    assert {rows[0][2], rows[1][2]} == {"R IY D", "R EH D"} and rows[2][2] == " ".join(words[0].upper())
    assert "skipped 1 word(s) with letters the model never saw: 'zebra' (z)" in completed.stderr
    greedy = g2p_here(capsys, "apply", "--model", model, "--beam", 1, "read").stdout.split("\t")
    assert greedy[0] == "read" and greedy[2].strip() in {"R IY D", "R EH D"}
    refused = g2p_here(capsys, "apply", "--model", model, "read", "--beam", 3, check=False)
    assert refused.returncode == 2 and error_lines(refused) == [
        "error: --beam: this model's pronouncer searches with 1 (greedy) or 5 beams; got 3"
    ]


def test_evaluate_agrees_with_what_apply_prints(trained, tmp_path, capsys):
    model, path, words, _ = trained
    # Two words right, one wrong on purpose, one unpronounceable (counted wrong).
    best = {
        row.split("\t")[0]: row.split("\t")[2]
        for row in g2p_here(capsys, "apply", "--model", model, *words[:3]).stdout.splitlines()
    }
    test = write(
        tmp_path,
        "test.tsv",
        f"{words[0]}\t{best[words[0]]}\n{words[1]}\t{best[words[1]]}\n{words[2]}\tX X\nzoo\tZ UW\n",
    )
    completed = g2p_here(capsys, "evaluate", "--model", model, "--test", test)
    assert completed.stdout.startswith("WER 50.00% PER ")
    assert "on 4 words (1 not pronounced: unknown letters, counted wrong)" in completed.stdout
    assert g2p_here(capsys, "evaluate", "--model", model, "--test", path).stdout.startswith(
        "WER 0.00% PER 0.00% on 51 words"
    )


def test_the_command_refuses_what_it_cannot_use_in_one_line(trained, tmp_path, capsys):
    model, path, _, _ = trained
    cases = [
        (
            ("apply", "--model", tmp_path, "read"),
            f"error: --model: {str(tmp_path)!r} is not a finished model directory",
        ),
        (("apply", "--model", model), "error: apply: expected words to pronounce (WORDS... or --words FILE); got none"),
        (("apply", "--model", model, "read", "--nbest", "0"), "error: argument --nbest: expected a positive int"),
        (
            ("train", "--lexicon", path, "--out", tmp_path / "m", "--compare-phonetisaurus"),
            "error: --compare-phonetisaurus: expected --test FILE to compare on; got none",
        ),
        (
            # The model directory resumes the same run only.
            ("train", "--lexicon", path, "--dev", path, "--test", path, "--out", model, "--smoke", "--beam", 3),
            f"error: --out: {str(model)!r} holds a run with other settings or data (differing: beam_width)",
        ),
    ]
    for arguments, expected in cases:
        completed = g2p_here(capsys, *arguments, check=False)
        assert completed.returncode == 2 and "Traceback" not in completed.stderr, arguments
        assert len(error_lines(completed)) == 1 and error_lines(completed)[0].startswith(expected), completed.stderr


# ------------------------------------------------------------------ the Transformer member (issue 33, item 5)


def test_the_transformer_rule_gives_small_lexicons_a_smaller_model_and_more_dropout():
    small, medium, large = (settings.choose(n, set("abc"), architecture="transformer") for n in (800, 8000, 109_156))
    assert small["model"] == dict(architecture="transformer", layers=2, heads=4, model_dim=128, ff_dim=512, dropout=0.3)
    assert medium["model"] == dict(
        architecture="transformer", layers=3, heads=4, model_dim=128, ff_dim=512, dropout=0.3
    )
    # CMUdict's size: Yolchuyeva et al. 2019's 3+3 layers, d 256, 4 heads.
    assert large["model"] == dict(
        architecture="transformer", layers=3, heads=4, model_dim=256, ff_dim=1024, dropout=0.1
    )
    # Batches twice the LSTM's; 800 words in batches of 32: 25 updates a pass, 5 passes an epoch, 22 epochs
    # = 2,750 updates, 8% of them warm-up; 109,156 in 256s: 427 a pass, 13 epochs, 444 warm-up updates.
    assert small["training"] == dict(
        batch_size=32, passes_per_epoch=5, epochs=22, patience=6, min_epochs=11, learning_rate=1e-3, warmup_steps=220
    )
    assert large["training"]["batch_size"] == 256 and large["training"]["warmup_steps"] == 444
    assert large["training"]["epochs"] == 13 and large["ensemble"] == 2 and small["ensemble"] == 4
    # A model of the fields ModelConfig has, and the LSTM's rule unchanged (no architecture recorded).
    assert ModelConfig(**large["model"]).architecture == "transformer"
    assert "architecture" not in settings.choose(800, set("abc"))["model"]
    # A budget cuts the epochs, and the warm-up with them: 2 models side by side (one a core) of 4 epochs
    # of 427 updates in 30 minutes.
    budget = settings.choose(109_156, set("abc"), minutes=30, architecture="transformer")
    assert budget["ensemble"] == 2 and budget["training"]["epochs"] == 4
    assert budget["training"]["warmup_steps"] == round(0.08 * 4 * 427)
    assert budget["estimated_minutes"] <= 29
    with pytest.raises(ValueError, match=r"choose: `architecture` must be one of \('lstm', 'transformer'\); got 'rnn'"):
        settings.choose(800, set("a"), architecture="rnn")


def test_a_transformer_update_is_estimated_from_its_size():
    # 3+3 layers of d 256 and FFN 1024: 3 x (12 x 256^2 + 4 x 256 x 1024) weights.
    large = dict(layers=3, model_dim=256, ff_dim=1024)
    assert settings.transformer_parameters(large) == 3 * (12 * 256**2 + 4 * 256 * 1024)
    small = dict(layers=2, model_dim=128, ff_dim=512)
    assert settings.transformer_seconds_per_update(256, large) > 4 * settings.transformer_seconds_per_update(256, small)


@pytest.fixture(scope="module")
def trained_transformer(tmp_path_factory):
    """The tool trained with --architecture transformer on the 50-word TSV (dev and test the same words)."""
    tmp_path = tmp_path_factory.mktemp("g2p_transformer")
    path, words = fifty_words(tmp_path)
    model = tmp_path / "model"
    completed = g2p(
        "train", "--lexicon", path, "--dev", path, "--test", path, "--out", model, "--smoke",
        "--architecture", "transformer",
    )  # fmt: skip
    return model, path, words, completed


def test_a_transformer_memorises_fifty_words_and_exports_with_parity(trained_transformer):
    from keras_attention.g2p import lexicon as lexicons
    from keras_attention.g2p.members import load_members
    from keras_attention.g2p.pronouncer import OnnxPronouncer
    from keras_attention.g2p.train_command import configs as tool_configs
    from keras_attention.g2p.vocabularies import vocabularies

    model, path, words, completed = trained_transformer
    assert "settings: ensemble of 1, Transformer 1+1 layers, d 32, 2 heads, FFN 64, dropout 0.0" in completed.stdout
    recorded = json.loads((model / "settings.json").read_text())
    assert recorded["model"] == settings.smoke("transformer")["model"]
    results = json.loads((model / "results.json").read_text())
    # The acceptance: >= 90% of the words memorised, through the exported beam search.
    assert results["test_wer"] <= 10.0 and results["test_words"] == 51
    assert results["export_parity"]["pronounce/ids"] == 0 and results["export_parity"]["pronounce_greedy/ids"] == 0
    # Every word: the exported beam search's n-best ids are the Keras beam model's, scores to 1e-4.
    lexicon = lexicons.read_lexicon(path).entries
    letters, phones = vocabularies(lexicon)
    member = load_members(model, 1, letters, phones, tool_configs(recorded, recorded["beam_width"])[0])[0]
    names = sorted(lexicon)
    keras_output = member.beam.predict_on_batch(letters.encode(names))
    onnx = OnnxPronouncer(model / "export", recorded["beam_width"]).pronounce(names, nbest=5)
    for row, word in enumerate(names):
        lengths = np.asarray(keras_output["lengths"])[row]
        want = [
            (float(np.asarray(keras_output["scores"])[row, k]), phones.decode(np.asarray(keras_output["ids"])[row, k]))
            for k in np.argsort(-np.asarray(keras_output["scores"])[row], kind="stable")
            if lengths[k] > 0
        ]
        assert [p for _, p in onnx[word]] == [p for _, p in want], word
        np.testing.assert_allclose([s for s, _ in onnx[word]], [s for s, _ in want], atol=1e-4)


def test_an_ensemble_of_an_lstm_and_a_transformer_member_decodes_the_mixture_and_exports(trained_transformer, tmp_path):
    import keras

    from keras_attention.g2p import lexicon as lexicons
    from keras_attention.g2p import model as g2p_model
    from keras_attention.g2p.members import load_members
    from keras_attention.g2p.pronouncer import export_pronouncer
    from keras_attention.g2p.train_command import configs as tool_configs
    from keras_attention.g2p.vocabularies import vocabularies

    model, path, words, _ = trained_transformer
    recorded = json.loads((model / "settings.json").read_text())
    transformer_config = tool_configs(recorded, recorded["beam_width"])[0]
    lexicon = lexicons.read_lexicon(path).entries
    letters, phones = vocabularies(lexicon)
    transformer = load_members(model, 1, letters, phones, transformer_config)[0]
    keras.utils.set_random_seed(3)
    lstm = g2p_model.build_models(letters, phones, ModelConfig(**settings.smoke()["model"]))  # untrained
    greedy, beam = g2p_model.together([lstm, transformer], phones, transformer_config)
    source = letters.encode(words)
    decoded = {name: np.asarray(value) for name, value in greedy.predict_on_batch(source).items()}
    # Each greedy step picked the argmax of the members' mean probabilities, and the score sums their logs:
    # recomputed with the two teacher-forced models along the decoded ids.
    ids, lengths = decoded["ids"], decoded["lengths"]
    previous = np.concatenate([np.full((len(ids), 1), phones.start_id), ids[:, :-1]], 1).astype("int32")
    probabilities = np.mean(
        [keras.ops.convert_to_numpy(keras.ops.softmax(m.trainer([source, previous]))) for m in (lstm, transformer)],
        axis=0,
    )
    for row in range(len(ids)):
        steps = range(lengths[row])
        assert all(ids[row, t] == probabilities[row, t].argmax() for t in steps), words[row]
        want = sum(np.log(probabilities[row, t, ids[row, t]]) for t in steps)
        assert decoded["scores"][row] == pytest.approx(want, abs=1e-4)
    # The trained Transformer outvotes the near-uniform untrained LSTM, which only lowers every word's score.
    alone = {name: np.asarray(value) for name, value in transformer.greedy.predict_on_batch(source).items()}
    np.testing.assert_array_equal(alone["ids"], ids)
    assert (decoded["scores"] < alone["scores"] - 0.1).all()
    report = export_pronouncer(tmp_path / "export", greedy, beam, letters, phones, words[:19])
    assert report.ok and report.max_abs_diff("onnx", "ids", "pronounce") == 0
    assert report.max_abs_diff("onnx", "scores", "pronounce") < 1e-4


def test_the_command_refuses_a_bad_architecture_or_size_knob_in_one_line(tmp_path, capsys):
    path, _ = fifty_words(tmp_path)
    train = ("train", "--lexicon", path, "--out", tmp_path / "m")
    cases = [
        (("--architecture", "rnn"), "error: argument --architecture: invalid choice: 'rnn'"),
        (
            ("--architecture", "transformer", "--heads", "0"),
            "error: argument --heads: expected a positive int, got '0'",
        ),
        (("--dropout", "1.5"), "error: argument --dropout: expected a number in [0, 1), got '1.5'"),
        (
            ("--heads", "2"),
            "error: --heads: a Transformer size knob; expected --architecture transformer with it; got --architecture lstm",
        ),
        (
            ("--architecture", "transformer", "--model-dim", "100", "--heads", "3"),
            "error: --heads: expected a number of heads that divides the model size 100 (--model-dim) into equal "
            "heads; got 3",
        ),
    ]
    for arguments, expected in cases:
        completed = g2p_here(capsys, *train, *arguments, check=False)
        assert completed.returncode == 2 and "Traceback" not in completed.stderr, arguments
        assert len(error_lines(completed)) == 1 and error_lines(completed)[0].startswith(expected), completed.stderr
    assert not (tmp_path / "m").exists()


def test_the_size_knobs_override_the_rule_and_are_recorded(tmp_path):
    from keras_attention.g2p.cli import _override, parser

    path, _ = fifty_words(tmp_path)
    args = parser().parse_args(
        ["train", "--lexicon", str(path), "--out", str(tmp_path / "m"), "--architecture", "transformer"]
        + ["--layers", "4", "--model-dim", "192", "--heads", "6", "--dropout", "0.25", "--warmup-steps", "300"]
    )
    chosen = settings.choose(800, set("abc"), architecture="transformer")
    before = chosen["estimated_minutes"]
    _override(chosen, args, 800)
    assert chosen["model"] == dict(
        architecture="transformer", layers=4, heads=6, model_dim=192, ff_dim=512, dropout=0.25
    )
    assert chosen["training"]["warmup_steps"] == 300
    assert chosen["estimated_minutes"] > before  # a larger model, re-estimated


def test_import_keras_attention_alone_loads_every_keras_file_the_tool_writes(trained, trained_transformer, tmp_path):
    """A user loading the tool's `.keras` files needs `import keras_attention` only, not the tool's
    modules (which register its layers `WithoutMask` and `ScaledEmbedding`): loaded in a fresh
    process, each LSTM and Transformer trainer computes what it computes loaded here."""
    import keras

    files = sorted(str(path) for model, *_ in (trained, trained_transformer) for path in model.rglob("*.keras"))
    assert len(files) == 2, files
    inputs = [np.array([[1, 2, 3, 4], [4, 3, 0, 0]], "int32"), np.array([[1, 2, 3], [3, 2, 1]], "int32")]
    np.savez(tmp_path / "inputs.npz", *inputs)
    script = (
        "import sys, keras, numpy as np, keras_attention\n"
        "inputs = list(np.load(sys.argv[1]).values())\n"
        "for k, path in enumerate(sys.argv[3:]):\n"
        "    outputs = keras.saving.load_model(path, compile=False)(inputs)\n"
        "    np.save(f'{sys.argv[2]}/{k}.npy', keras.ops.convert_to_numpy(outputs))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", script, tmp_path / "inputs.npz", tmp_path, *files],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    for k, path in enumerate(files):
        here = keras.ops.convert_to_numpy(keras.saving.load_model(path, compile=False)(inputs))
        np.testing.assert_allclose(np.load(tmp_path / f"{k}.npy"), here, atol=1e-6, err_msg=path)
