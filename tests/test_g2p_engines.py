"""The engines table (examples/g2p/engines.py): its committed results file
holds every cell of the grid it was run with, its goals are the ratios of
those cells, and docs/serving.md's block is generated from it."""

import itertools
import json

import pytest

from tests import examples

engines = examples.load("g2p.engines")


@pytest.fixture(scope="module")
def document():
    assert engines.RESULTS.is_file(), "results/g2p_engines.json is committed (python -m examples.g2p.engines ...)"
    return json.loads(engines.RESULTS.read_text(encoding="utf-8"))


def _grid(document):
    cells = document["cells"]
    return (
        sorted({c["beam_width"] for c in cells}),
        sorted({c["batch_size"] for c in cells}),
        sorted({c["threads"] for c in cells}),
    )


def test_every_engine_precision_thread_batch_and_beam_is_measured(document):
    assert document["command"].startswith("python -m examples.g2p.engines ")
    assert len(document["load_average_start"]) == len(document["load_average_end"]) == 3
    widths, batches, threads = _grid(document)
    assert widths == [1, 2, 5] and batches == [1, 32, 256] and threads == [1, 2]
    for engine, precisions in engines.PRECISIONS.items():
        for precision, width, batch, count in itertools.product(precisions, widths, batches, threads):
            cell = engines._cell(
                document["cells"],
                engine=engine,
                precision=precision,
                beam_width=width,
                batch_size=batch,
                threads=count,
            )
            assert cell, (engine, precision, width, batch, count)
            assert len(cell["passes"]) == document["passes"]
            assert cell["words_per_second"] == pytest.approx(sorted(cell["passes"])[len(cell["passes"]) // 2])
            assert cell["words_per_second"] > 0
            assert cell["words"] == (document["batch_one_words"] if batch == 1 else document["sample_words"])
    assert len(document["cells"]) == sum(len(p) for p in engines.PRECISIONS.values()) * 3 * 3 * 2


def test_every_engine_is_scored_and_keras_agrees_with_itself(document):
    widths, _, _ = _grid(document)
    for engine, precisions in engines.PRECISIONS.items():
        for precision, width in itertools.product(precisions, widths):
            row = engines._cell(document["accuracy"], engine=engine, precision=precision, beam_width=width)
            assert row and row["words"] == document["wer_words"], (engine, precision, width)
            assert 0 <= row["per"] <= row["wer"] <= 100
            assert 0 <= row["same_as_keras"] <= 1
            if engine == "keras":
                assert row["same_as_keras"] == 1
    # The exports are verified against Keras: float32 onnxruntime, LiteRT and
    # OpenVINO decode what Keras decodes, greedy and beam.
    for engine in ("onnxruntime", "litert", "openvino"):
        for width in widths:
            row = engines._cell(document["accuracy"], engine=engine, precision="float32", beam_width=width)
            assert row["same_as_keras"] >= 0.99, (engine, width, row)
    peer = document["phonetisaurus"]
    assert peer["test_words"] == document["wer_words"] and 0 <= peer["wer"] <= 100 and peer["words_per_second"] > 0


def test_the_goals_are_the_ratios_of_the_cells(document):
    widths, batches, threads = _grid(document)
    recomputed = engines.goals(document["cells"], document["accuracy"], document["phonetisaurus"], batches, threads)
    assert recomputed == document["goals"]
    peer = document["phonetisaurus"]["words_per_second"]
    goal = document["goals"]["ctranslate2_over_phonetisaurus_beam2"]
    head = goal["headline"]
    cell = engines._cell(
        document["cells"],
        engine="ctranslate2",
        precision="float32",
        beam_width=2,
        batch_size=head["batch_size"],
        threads=head["threads"],
    )
    assert head["ratio"] == pytest.approx(cell["words_per_second"] / peer, abs=0.01)
    assert goal["met"] == (head["ratio"] >= 3)
    versus = document["goals"]["onnxruntime_vs_ctranslate2"]
    assert versus["of"] == 2 * len(widths) * len(batches) * len(threads)  # float32 and int8
    for row in versus["cells"]:
        key = {k: row[k] for k in ("precision", "threads", "beam_width", "batch_size")}
        ours = engines._cell(document["cells"], engine="onnxruntime", **key)["words_per_second"]
        theirs = engines._cell(document["cells"], engine="ctranslate2", **key)["words_per_second"]
        assert row["ctranslate2_over_onnxruntime"] == pytest.approx(theirs / ours, abs=0.01)
    if versus["worst"]["ctranslate2_over_onnxruntime"] > 1.5:  # then onnxruntime's time is profiled
        profile = document["onnxruntime_profile"]
        assert 0 < profile["kernels_share"] <= 1 and profile["by_operator"]


def test_the_serving_page_is_generated_from_the_results_file(document):
    page = engines.PAGE.read_text(encoding="utf-8")
    assert engines.updated_page(page, document) == page, "run python -m examples.g2p.engines --report"
    block = page.split(engines.BEGIN)[1].split(engines.END)[0]
    assert document["command"] in block and "Phonetisaurus" in block
    assert engines.main(["--report", "--check"]) == 0
