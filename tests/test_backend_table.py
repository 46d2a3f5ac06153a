"""The backend table of docs/backends.md (tools/backend_table.py): generated from the
committed results/backends.json, its tests counted by area and outcome."""

import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def table():
    from tools import backend_table

    return backend_table


def test_the_page_block_is_generated_from_the_committed_results(table):
    assert table.main(["--check"]) == 0, "run python -m tools.backend_table --report"


def test_the_committed_results_cover_every_backend_and_count_every_test(table):
    results = json.loads(table.RESULTS.read_text(encoding="utf-8"))
    assert list(results["backends"]) == ["tensorflow", "jax", "torch"]
    for backend, section in results["backends"].items():
        assert "skipped" not in section, backend
        counts = [section["areas"][a][k] for a in section["areas"] for k in ("passed", "skipped", "failed", "error")]
        assert sum(counts) == sum(section["totals"].values()) > 0
        assert sorted(section["modules"]) == sorted(results["modules"]), backend
    # The table measured today's backend-neutral modules: converting one
    # (or dropping one) without running the tool again fails here.
    assert sorted(results["modules"]) == table.any_backend_modules(), "run python -m tools.backend_table"
    # Every backend ran the same tests (a test id skipped, not missing).
    assert len({sum(s["totals"].values()) for s in results["backends"].values()}) == 1


AREA_CASES = [
    ("test_export_backends.py::test_export_on_another_backend_names_it_and_the_way_out", "export"),
    ("test_keras_files_across_backends.py::test_a_file[jax-multi_head]", ".keras files across backends"),
    ("test_layer_discipline.py::test_matches_numpy_reference[key=value-masked-2-additive]", "score layers"),
    ("test_layer_discipline.py::test_get_config_round_trip_gives_identical_outputs[hard_sample]", "score layers"),
    (
        "test_layer_discipline.py::test_get_config_round_trip_gives_identical_outputs[decoder_gru_additive]",
        "decoders and decoding",
    ),
    (
        "test_layer_discipline.py::test_keras_file_round_trip_without_custom_objects[beam_general]",
        "decoders and decoding",
    ),
    (
        "test_layer_discipline.py::test_keras_file_round_trip_without_custom_objects[multi_head]",
        "multi-head and self-attention",
    ),
    ("test_layer_discipline.py::test_matches_numpy_reference[pooling]", "pooling and hierarchical"),
    ("test_layer_discipline.py::test_matches_numpy_reference[targeted_gated]", "pointer and targeted"),
    ("test_cells.py::test_gru_cell_matches_the_equations_step_by_step", "decoder cells"),
    ("test_cells.py::test_inference_decoder_reads_the_memory_keras_mask", "decoders and decoding"),
    ("test_losses.py::test_shape_errors", "other"),
]


def test_tests_are_counted_in_the_area_their_id_names(table):
    # One test, not one per case: each test's teardown clears a Keras session.
    assert {test_id: table.area_of(test_id) for test_id, _ in AREA_CASES} == dict(AREA_CASES)


def test_junit_reports_are_counted_by_outcome_and_skip_reason(table, tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="tests.test_cells" name="test_lstm_cell_matches_the_equations_step_by_step"/>'
        '<testcase classname="tests.test_layer_discipline" name="test_gradients[dot]">'
        '<skipped type="pytest.skip" message="float64: JAX runs without x64"/></testcase>'
        '<testcase classname="tests.test_layer_discipline" name="test_gradients[general]">'
        '<skipped type="pytest.skip" message="float64: JAX runs without x64"/></testcase>'
        '<testcase classname="tests.test_export_backends" name="test_refusal"><failure message="boom"/></testcase>'
        "</testsuite></testsuites>",
        encoding="utf-8",
    )
    tests = table.parse_junit(report)
    assert tests["test_cells.py::test_lstm_cell_matches_the_equations_step_by_step"] == ("passed", None)
    areas, modules = table.tally(tests)
    assert areas["score layers"]["skipped"] == 2 and areas["score layers"]["passed"] == 0
    assert areas["score layers"]["skip_reasons"] == {"float64: JAX runs without x64": 2}
    assert areas["export"]["failed"] == 1 and areas["decoder cells"]["passed"] == 1
    assert modules["test_layer_discipline.py"]["skipped"] == 2
    row = table.page_block(
        {
            "date": "today",
            "modules": ["test_cells.py"],
            "tensorflow_only_modules": [],
            "backends": {
                "jax": {"versions": {"keras": "3", "jax": "0"}, "seconds": 1.0, "areas": areas, "totals": {}}
                | {"totals": {k: sum(a[k] for a in areas.values()) for k in ("passed", "skipped", "failed", "error")}}
            },
        }
    )
    assert "| score layers | 0 passed, 2 skipped | skipped: float64: JAX runs without x64 (JAX 2) |" in row
    assert "| export | 0 passed, **1 failed** |" in row


def test_a_run_that_died_counts_what_it_reported_and_the_test_it_was_running(table):
    output = (
        "tests/test_cells.py::test_a PASSED [ 10%]\n"
        "tests/test_cells.py::test_b[x] SKIPPED (float64: no x64) [ 20%]\n"
        "tests/test_cells.py::test_c[beam_general] \nFatal Python error: Aborted\n"
    )
    assert table.parse_verbose(output, -6, "test_cells.py") == {
        "test_cells.py::test_a": ("passed", None),
        "test_cells.py::test_b[x]": ("skipped", "float64: no x64"),
        "test_cells.py::test_c[beam_general]": ("error", None),
    }
    assert table.parse_verbose("collecting ...\n", -11, "test_cells.py") == {
        "test_cells.py::(crashed with exit status -11)": ("error", None)
    }


def _section(table, tests, seconds):
    """A backend's section from made-up outcomes ({module: seconds} given)."""
    statuses = {m: 1 if any(o == "failed" for t, (o, _) in tests.items() if t.startswith(m)) else 0 for m in seconds}
    return table.section_of(tests, statuses, seconds, {"keras": "3", "jax": "0"})


CELLS = {
    "test_cells.py::test_gru_cell": ("passed", None),
    "test_cells.py::test_lstm_cell[f64]": ("skipped", "float64: no x64"),
}
LAYERS_BEFORE = {
    "test_layer_discipline.py::test_matches_numpy_reference[dot]": ("passed", None),
    "test_layer_discipline.py::test_gradients[dot]": ("skipped", "float64: no x64"),
    "test_layer_discipline.py::test_matches_numpy_reference[pooling]": ("failed", None),
}
LAYERS_AFTER = {
    "test_layer_discipline.py::test_matches_numpy_reference[dot]": ("passed", None),
    "test_layer_discipline.py::test_gradients[dot]": ("passed", None),
    "test_layer_discipline.py::test_matches_numpy_reference[pooling]": ("passed", None),
    "test_layer_discipline.py::test_matches_numpy_reference[multi_head]": ("passed", None),
}


def test_a_rerun_module_is_merged_as_if_everything_had_run_again(table):
    before = _section(table, CELLS | LAYERS_BEFORE, {"test_cells.py": 10.0, "test_layer_discipline.py": 30.0})
    rerun = _section(table, LAYERS_AFTER, {"test_layer_discipline.py": 20.0})
    merged = table.merge_section(before, rerun, ["test_layer_discipline.py"])
    everything = _section(table, CELLS | LAYERS_AFTER, {"test_cells.py": 10.0, "test_layer_discipline.py": 20.0})
    assert merged == everything
    # By hand: the failure and the dot gradient's skip are gone, the cells' skip kept.
    assert merged["totals"] == {"passed": 5, "skipped": 1, "failed": 0, "error": 0}
    assert merged["areas"]["score layers"]["skip_reasons"] == {}
    assert merged["areas"]["decoder cells"]["skip_reasons"] == {"float64: no x64": 1}
    assert merged["areas"]["pooling and hierarchical"] == {
        "passed": 1,
        "skipped": 0,
        "failed": 0,
        "error": 0,
        "skip_reasons": {},
        "modules": ["test_layer_discipline.py"],
    }
    assert merged["seconds"] == 30.0 and merged["exit_status"] == 0 and merged["exit_statuses"] == {}
    assert before["exit_statuses"] == {"test_layer_discipline.py": 1}


def test_a_section_without_per_module_areas_takes_new_modules_only(table):
    """The committed results predate `module_areas`: a module they lack is
    added to their areas; one they have cannot be taken out, and is refused."""
    old = _section(table, CELLS, {"test_cells.py": 10.0})
    del old["module_areas"], old["module_seconds"]
    new = _section(table, LAYERS_AFTER, {"test_layer_discipline.py": 20.0})
    merged = table.merge_section(old, new, ["test_layer_discipline.py"])
    everything = _section(table, CELLS | LAYERS_AFTER, {"test_cells.py": 10.0, "test_layer_discipline.py": 20.0})
    for key in ("totals", "areas", "modules", "seconds"):
        assert merged[key] == everything[key], key
    # The added module's areas are kept, so it can be rerun later; the old one cannot.
    assert list(merged["module_areas"]) == ["test_layer_discipline.py"]
    assert table.merge_problem(merged, ["test_layer_discipline.py"]) is None
    assert "test_cells.py" in table.merge_problem(merged, ["test_cells.py"])
    with pytest.raises(ValueError, match=r"merge_section: cannot merge \['test_cells.py'\]: .*per-module areas"):
        table.merge_section(old, _section(table, CELLS, {"test_cells.py": 1.0}), ["test_cells.py"])
    assert "no measured section" in table.merge_problem({"skipped": ".venv-jax is not built"}, ["test_cells.py"])


def test_modules_are_checked_before_anything_runs(table, tmp_path, capsys):
    results = tmp_path / "backends.json"
    old = _section(table, CELLS, {"test_cells.py": 10.0})
    del old["module_areas"]
    results.write_text(json.dumps({"backends": {"tensorflow": old}, "modules": ["test_cells.py"]}), encoding="utf-8")
    with pytest.raises(SystemExit):
        table.main(["--modules", "test_cells.py", "--backends", "tensorflow", "--results", str(results)])
    assert "cannot merge into" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        table.main(["--modules", "test_no_such_module.py", "--results", str(results)])
    assert "are not backend-neutral modules" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # jax has no section in this file to merge into
        table.main(["--modules", "tests/test_cells.py", "--backends", "jax", "--results", str(results)])
    assert "no measured section" in capsys.readouterr().err
    assert json.loads(results.read_text(encoding="utf-8"))["backends"] == {"tensorflow": old}


def test_the_page_names_the_modules_merged_since_the_run(table):
    section = _section(table, CELLS, {"test_cells.py": 10.0})
    block = table.page_block(
        {
            "date": "2026-11-26 21:00 UTC",
            "modules": ["test_cells.py"],
            "tensorflow_only_modules": [],
            "backends": {"jax": section},
            "reruns": [{"date": "2026-11-27 01:00 UTC", "modules": ["test_cells.py"], "backends": ["jax"]}],
        }
    )
    assert "Rerun since and merged in: test_cells.py on JAX (2026-11-27 01:00 UTC)." in block
