"""examples/g2p/curve.py, the G2P tool against Phonetisaurus by lexicon size: the
points it trains (the words drawn, the files, the budgets), resuming, and the
results page's table. The tool's own training is tests/test_g2p_tool.py's; here
a stand-in writes its results."""

import json

import pytest

from tests import examples

curve = examples.load("g2p.curve")
report = examples.load("g2p.report")
data = examples.load("g2p.data")


def read_tsv(path):
    entries = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        word, phones = line.split("\t")
        entries.setdefault(word, []).append(phones.split(" "))
    return entries


def test_the_budget_is_the_tools_at_1000_and_10000_words_and_a_power_law_between():
    assert curve.budget_minutes(1000) == 10.0 and curve.budget_minutes(10_000) == 60.0
    # 10 * (n / 1000) ** log10(6): 5.83 at 500, 17.15 at 2,000, 50.4 at 8,000; 60 beyond 10,000.
    assert [curve.budget_minutes(n) for n in (500, 2000, 8000, 120_000)] == [5.8, 17.1, 50.4, 60.0]


def fake_tool(calls, wer=None, fail=()):
    """A stand-in for the tool: records its arguments, writes results as the tool does."""

    def train(train_file, test_file, model_dir, minutes, smoke):
        train_words, test_words = read_tsv(train_file), read_tsv(test_file)
        calls.append((train_file.parent.name, len(train_words), minutes, smoke))
        if train_file.parent.name in fail:
            return None
        ours = wer(len(train_words)) if wer else 50.0
        return {
            "test_wer": ours,
            "test_per": ours / 4,
            "chosen_members": [0, 1],
            "ensemble": 4,
            "train_wall_seconds": 12.5,
            "test_words": len(test_words),
            "phonetisaurus": {"wer": 45.0, "per": 11.0, "train_seconds": 3.0},
        }

    return train


def test_each_point_trains_the_tool_on_a_seeded_sample_and_scores_the_whole_test_split(tmp_path):
    calls = []
    results = tmp_path / "curve.json"
    document = curve.run(["dut"], [40, 20], tmp_path / "runs", results, train=fake_tool(calls, lambda n: 60.0 - n))
    assert calls == [("dut_40", 40, curve.budget_minutes(40), False), ("dut_20", 20, curve.budget_minutes(20), False)]
    split = data.sigmorphon_split("dut")
    for size in (20, 40):
        drawn = read_tsv(tmp_path / "runs" / f"dut_{size}" / "train.tsv")
        # Words of the training split, each with every pronunciation it has there.
        assert len(drawn) == size and all(split["train"][word] == options for word, options in drawn.items())
        assert read_tsv(tmp_path / "runs" / f"dut_{size}" / "test.tsv") == split["test"]
    # The same seed draws the same words.
    again = tmp_path / "again"
    curve.run(["dut"], [20], again / "runs", again / "curve.json", train=fake_tool([]))
    assert (again / "runs" / "dut_20" / "train.tsv").read_text() == (
        tmp_path / "runs" / "dut_20" / "train.tsv"
    ).read_text()
    # The points, in order of size, as the tool reported them.
    assert [(p["lexicon"], p["train_words"]) for p in document["points"]] == [("dut", 20), ("dut", 40)]
    first = document["points"][0]
    assert first["ours"] == {
        "wer": 40.0,
        "per": 10.0,
        "models": 2,
        "trained_models": 4,
        "train_seconds": 12.5,
        "time_budget_warning": None,
    }
    assert first["phonetisaurus"] == {"wer": 45.0, "per": 11.0, "train_seconds": 3.0} and first["test_words"] == 1000
    assert json.loads(results.read_text())["points"] == document["points"]


def test_a_killed_curve_resumes_and_a_failed_point_is_retried(tmp_path):
    results = tmp_path / "curve.json"
    calls = []
    document = curve.run(["dut"], [20, 30], tmp_path / "runs", results, train=fake_tool(calls, fail={"dut_30"}))
    assert [p["train_words"] for p in document["points"]] == [20] and len(calls) == 2
    calls.clear()
    document = curve.run(["dut"], [20, 30], tmp_path / "runs", results, train=fake_tool(calls))
    assert [c[0] for c in calls] == ["dut_30"]  # the finished point is read back, not trained again
    assert [p["train_words"] for p in document["points"]] == [20, 30]


def test_a_size_above_the_lexicon_or_an_unknown_lexicon_is_refused_in_one_line(capsys):
    for argv, message in (
        (["--lexicons", "dut", "--sizes", "9000"], "--sizes: dut has 8000 training words; got 9000"),
        (["--lexicons", "klingon"], "--lexicons: expected cmudict, medium or one of arm_e, bul"),
        (["--sizes", "0"], "--sizes: expected positive numbers of words; got [0]"),
    ):
        with pytest.raises(SystemExit) as exit:
            curve.main([*argv, "--results", "/nonexistent/never.json"])
        assert exit.value.code == 2
        assert message in capsys.readouterr().err


def test_the_table_marks_the_better_wer_and_a_budget_that_cut_training(tmp_path):
    calls = []
    document = curve.run(
        ["dut"], [20, 30], tmp_path / "runs", tmp_path / "c.json", train=fake_tool(calls, lambda n: 2 * n)
    )
    document["points"][1]["ours"]["time_budget_warning"] = "the time budget stopped 1 of 4 models"
    table = report.curve_table(document)
    rows = [line for line in table.splitlines() if line.startswith("| dut")]
    assert rows[0] == "| dut | 20 | 0.5 min | **40.00** | 10.00 | 2 of 4 | 45.00 | 11.00 |"
    assert rows[1] == "| dut | 30 | 0.7 min (cut by the budget) | 60.00 | 15.00 | 2 of 4 | **45.00** | 11.00 |"
    assert table.endswith("Ours has the lower WER at 1 of 2 points.")
