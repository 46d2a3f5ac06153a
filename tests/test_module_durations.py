"""tools/module_durations.py: the measured seconds of each test module, and
the longest-first order tests/conftest.py gives the suite."""

import json

from tools import module_durations

REPORT = (
    '<testsuites><testsuite name="pytest">'
    '<testcase classname="tests.test_slow" name="test_a" time="30.5"/>'
    '<testcase classname="tests.test_slow" name="test_b[x]" time="0.25"/>'
    '<testcase classname="tests.test_fast.TestGroup" name="test_c" time="1.0"><skipped message="no"/></testcase>'
    '<testcase classname="tests.test_fast" name="test_d" time="2.0"/>'
    '<testcase classname="" name="collection error" time="0.1"/>'
    "</testsuite></testsuites>"
)


def test_a_junit_report_is_summed_per_module(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(REPORT, encoding="utf-8")
    assert module_durations.module_seconds(report) == {
        "test_fast.py": {"seconds": 3.0, "tests": 2},
        "test_slow.py": {"seconds": 30.8, "tests": 2},
    }


def test_modules_are_ordered_longest_first_and_unknown_ones_estimated_per_test():
    section = {
        "seconds_per_test": 5.5,
        "modules": {"test_slow.py": {"seconds": 30.0, "tests": 2}, "test_fast.py": {"seconds": 3.0, "tests": 4}},
    }
    # An unmeasured module of 3 tests: 16.5 s; a measured one: its seconds.
    assert module_durations.estimated_seconds(section, "test_new.py", 3) == 16.5
    assert module_durations.estimated_seconds(section, "test_fast.py", 40) == 3.0
    collected = {"test_fast.py": 4, "test_new.py": 3, "test_slow.py": 2, "test_tiny.py": 0}
    assert module_durations.longest_first(collected, section) == [
        "test_slow.py",
        "test_new.py",
        "test_fast.py",
        "test_tiny.py",
    ]
    # Nothing measured: more tests first, ties in the collection order.
    assert module_durations.longest_first({"a": 1, "b": 5, "c": 1}, {}) == ["b", "a", "c"]


def test_a_whole_run_replaces_the_section_and_a_partial_one_is_merged(tmp_path, capsys):
    report, durations = tmp_path / "junit.xml", tmp_path / "module_seconds.json"
    report.write_text(REPORT, encoding="utf-8")
    old = {"seconds_per_test": 2.0, "modules": {"test_old.py": {"seconds": 9.0, "tests": 3}}}
    durations.write_text(json.dumps({"jax": old, "tensorflow": old}), encoding="utf-8")
    assert module_durations.main([str(report), "--file", str(durations), "--keep"]) == 0
    tensorflow = module_durations.read("tensorflow", durations)
    assert tensorflow["seconds_per_test"] == 2.0 and list(tensorflow["modules"]) == [
        "test_fast.py",
        "test_old.py",
        "test_slow.py",
    ]
    assert "test_slow.py: 31 s (2 tests)" in capsys.readouterr().out
    # A whole run: its modules alone, its mean per test (33.8 s over 4 tests).
    assert module_durations.main([str(report), "--file", str(durations)]) == 0
    assert module_durations.read("tensorflow", durations) == {
        "seconds_per_test": 8.45,
        "modules": module_durations.module_seconds(report),
    }
    assert module_durations.read("jax", durations) == old
    assert module_durations.read("torch", durations) == {}


def test_the_committed_durations_order_the_measured_slow_modules_first():
    """The file conftest reads holds TensorFlow's measured modules; the example
    smoke runs (minutes each, a few tests) come before the many-test modules."""
    section = json.loads(module_durations.DURATIONS.read_text(encoding="utf-8"))["tensorflow"]
    assert section["seconds_per_test"] > 0
    assert all(entry["seconds"] >= 0 and entry["tests"] > 0 for entry in section["modules"].values())
    collected = {"test_layer_errors.py": 132, "test_example_dates.py": 5, "test_text.py": 25}
    assert module_durations.longest_first(collected, section)[0] == "test_example_dates.py"
