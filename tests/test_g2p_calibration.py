"""The G2P tool's time budget at this machine's measured speed (keras_attention/g2p/calibration.py):
the rule refitted to measured seconds, the measurement's arithmetic on a real training run, and
the command measuring once and reusing the figure when it resumes (issue 35)."""

import json

import pytest

from keras_attention.g2p import calibration, cli, settings

# 400 words (a 500-word lexicon less its dev words) as a 2-core AMD EPYC trains them: 0.135 s an update
# beside a second model, 40 s a model before its first update (the rule: 0.044 s and 30 s).
SLOW = {"seconds_per_update": 0.135, "model_seconds": 40.0, "wall_seconds": 30.0, "jobs": 2}


def test_a_measured_speed_replaces_the_rules_figures():
    by_rule = settings.choose(400, set("abc"), minutes=5.8)
    assert by_rule["ensemble"] == 4 and by_rule["training"]["epochs"] == 15 and "measured" not in by_rule
    measured = settings.choose(400, set("abc"), minutes=5.8, measured=SLOW)
    # 22 epochs of 5 passes of 25 updates, budget 4.8 min = 288 s. Four models (two rounds) would get
    # floor(22 * (288 - 80) / (2 * (2750 * 0.135 + 44 + 40) - 80)) = 5 epochs, under half of 22; two
    # side by side floor(22 * (288 - 40) / (2750 * 0.135 + 44 + 40 - 40)) = 13.
    assert measured["ensemble"] == 2 and measured["training"]["epochs"] == 13
    assert measured["training"]["min_epochs"] == 7 and measured["training"]["max_minutes"] == 4.8
    assert measured["estimated_minutes"] == round((13 * 125 * 0.135 + 13 * 2 + 40) / 60, 1)
    assert measured["measured"] == SLOW
    # The estimate reads the measured figures from the settings.
    assert settings.estimate_seconds(400, measured) == pytest.approx(13 * 125 * 0.135 + 13 * 2 + 40)
    # A fast machine keeps the whole ensemble and every epoch where the rule's figures cut them.
    fast = settings.choose(400, set("abc"), minutes=5.8, measured={**SLOW, "seconds_per_update": 0.02})
    assert fast["ensemble"] == 4 and fast["training"]["epochs"] == 22


def test_the_measurement_is_the_median_update_after_the_warm_up_of_a_real_training_run():
    words = {f"w{n}{chr(97 + n % 26)}": [[chr(97 + n % 26), "x"]] for n in range(30)}
    chosen = {**settings.smoke(), "beam_width": 1}
    # A scripted clock: the start, then the end of each update (30 words in batches of 10 is 3 updates
    # an epoch, so 2 + 5 updates take three epochs).
    ticks = iter([0.0, 9.0, 10.0, 10.5, 11.0, 11.7, 12.2, 12.7, 99.0])
    timed = calibration.time_updates(words, chosen, warmup=2, timed=5, clock=lambda: next(ticks))
    # Updates 3..7 took 0.5, 0.5, 0.7, 0.5, 0.5 s: the median 0.5; before them 10 s, less 2 updates.
    assert timed == {"seconds_per_update": pytest.approx(0.5), "model_seconds": pytest.approx(9.0)}
    assert next(ticks) == 99.0  # exactly 7 updates were run and timed


def test_measure_times_the_model_in_fresh_processes_as_the_members_train():
    words = {f"w{n}{chr(97 + n % 26)}": [[chr(97 + n % 26), "x"]] for n in range(30)}
    measured = calibration.measure(words, {**settings.smoke(), "beam_width": 1}, jobs=1, cores=1)
    assert set(measured) == {"seconds_per_update", "model_seconds", "wall_seconds", "jobs"}
    assert measured["jobs"] == 1 and 0 < measured["seconds_per_update"] < measured["model_seconds"]
    # The process's start, TensorFlow's import and the traces are in the model's seconds, and all
    # of it in the wall time.
    assert measured["model_seconds"] + 20 * measured["seconds_per_update"] < measured["wall_seconds"]


def test_the_command_measures_once_and_a_resumed_run_reuses_the_figure(tmp_path, monkeypatch, capsys):
    calls = []

    def measure(lexicon, chosen, jobs, cores=None):
        calls.append((len(lexicon), chosen["ensemble"], jobs, chosen["beam_width"]))
        return SLOW

    monkeypatch.setattr(calibration, "measure", measure)
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 2)
    train = {f"w{n}": [["a"]] for n in range(400)}
    args = cli.parser().parse_args(["train", "--lexicon", "x.tsv", "--out", str(tmp_path), "--minutes", "6.3"])
    chosen = settings.choose(400, set("w0123456789"), minutes=6.3)
    refitted = cli._calibrated(chosen, args, train)
    assert calls == [(400, 4, 2, 5)]  # the rule's ensemble, two side by side, the export's beam
    # The calibration's 30 s come out of the budget: 5.8 minutes left, as in the test above.
    expected = settings.choose(400, set("w0123456789"), minutes=5.8, measured=SLOW)
    expected["training"]["seed"] = 0
    assert refitted == expected
    assert "this machine: 0.135 s an update, 40 s a model before its first (measured in 30 s" in capsys.readouterr().out
    # A resumed run finds the figure in settings.json: no second measurement, the same choice.
    (tmp_path / "settings.json").write_text(json.dumps({**refitted, "beam_width": 5}))
    again = cli._calibrated(chosen, args, train)
    assert calls == [(400, 4, 2, 5)] and again == refitted
