"""The benchmark suite keeps working: `python -m benchmarks.run --quick` on every
measure (tiny sizes; no timing is asserted: benchmarks are not tests)."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from benchmarks import bench_keras_hub

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TFA_ENV = os.path.join(ROOT, "benchmarks", "peers", ".venv-tfa", ".complete")
# The JAX and PyTorch workers of section 10 run in the venvs `make test-jax`
# and `make test-torch` build; --quick skips a backend whose venv is missing.
BACKEND_ENVS = {"tensorflow": None, "jax": ".venv-jax", "torch": ".venv-torch"}


def test_quick_benchmark_run_writes_every_section(tmp_path):
    argv = [sys.executable, "-m", "benchmarks.run", "--quick", "--out", str(tmp_path)]
    if not os.path.exists(TFA_ENV):
        # Building the tfa environment downloads ~600 MB: only `make bench` does it.
        print("tfa peer skipped: benchmarks/peers/.venv-tfa is not built (make bench builds it)")
        argv.append("--no-tfa")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    # A guard against a hang, not a timing: on the 2-core machine shared with the suite the quick
    # run (eleven sections, keras-hub's about half a minute) took near 10 minutes.
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    results = json.loads((tmp_path / "results.json").read_text())
    sections = results["sections"]
    assert set(sections) == {
        "decoder",
        "mha",
        "memory",
        "serving",
        "scaling",
        "gpu",
        "g2p",
        "options",
        "throughput",
        "backends",
        "keras_hub",
    }
    for name, section in sections.items():
        assert "error" not in section, (name, section.get("error"))
    assert results["quick"] and results["versions"]["tensorflow"]
    decoder = sections["decoder"]
    assert {"keras_attention", "keras_attention_xla", "plain_keras"} <= set(decoder["step_ms"])
    assert ("tfa" in decoder["step_ms"]) == os.path.exists(TFA_ENV)
    competitors = {k: v for k, v in decoder["parameters"].items() if not k.startswith("gru_no_attention")}
    assert len(set(competitors.values())) == 1, decoder["parameters"]  # the same model on every side
    # The lower bound has the GRU and the readout but no attention weights.
    assert decoder["parameters"]["gru_no_attention"] < decoder["parameters"]["keras_attention"]
    assert decoder["best_vs_best"]["vs_plain_keras"] > 0
    # The arithmetic limit: the step's matmul FLOPs (by hand for the quick
    # config: encoder 6,144, keys 12,288, 5 steps of 18,176, read-out 32,000,
    # three times for the backward) at the measured rate, and ours against it.
    limit = decoder["arithmetic_limit"]
    assert decoder["train_flops"]["ours"] == 3 * (6144 + 12288 + 5 * 18176 + 32000)
    rate = limit["matmul_gflops"] * 1e9
    assert limit["limit_ms"] == pytest.approx(1000 * decoder["train_flops"]["ours"] / rate, rel=0.01)
    assert limit["best_over_limit"] == pytest.approx(
        decoder["best_ms"]["keras_attention"] / limit["limit_ms"], rel=0.01
    )
    assert sections["memory"]["max_abs_diff_vs_naive"] <= 1e-5
    assert sections["serving"]["same_ids_all_paths"]
    int8 = sections["serving"]["int8"]
    assert all(int8["bytes"][name] < int8["float32_bytes"][name] for name in ("translate", "translate_beam"))
    assert {"onnxruntime_int8", "onnxruntime_beam5_int8"} <= set(sections["serving"]["latency_ms"])
    assert all(r["speedup_vs_keras"] > 0 for r in sections["mha"]["mha"])
    assert set(sections["g2p"]["decoder_step"]) == {"input_feeding", "luong", "no_attention"}
    options = sections["options"]["batches"]
    for row in options.values():
        assert row["ratio_vs_beam"]["beam"] == 1.0 and all(r > 0 for r in row["ratio_vs_beam"].values())
        assert {"runtime_options", "no_repeat_ngram_size", "coverage_penalty", "greedy"} <= set(row["ratio_vs_beam"])

    throughput = sections["throughput"]
    assert throughput["same_ids_all_cells"]
    assert [(c["decoder"], c["batch"]) for c in throughput["cells"].values()] == [
        (decoder, batch) for decoder in ("greedy", "beam 5") for batch in throughput["config"]["batches"]
    ]
    for cell in throughput["cells"].values():
        assert {"onnxruntime, library default", "saved_model", "keras_predict"} <= set(cell["per_second"])
        assert all(rate > 0 for rate in cell["per_second"].values())
        # The ratio to predict is the two throughputs' quotient.
        rate = cell["per_second"]
        expected = rate["onnxruntime, library default"] / rate["keras_predict"]
        assert cell["vs_keras_predict"]["onnxruntime"] == pytest.approx(expected, abs=0.006)
    assert throughput["settings"]["best"] in throughput["settings"]["tried"]

    backends = sections["backends"]
    built = {
        b for b, env in BACKEND_ENVS.items() if env is None or os.path.exists(os.path.join(ROOT, env, ".installed"))
    }
    assert set(backends["backends"]) == built and set(backends["skipped"]) == set(BACKEND_ENVS) - built
    for backend, result in backends["backends"].items():
        assert result["backend"] == backend
        for name, peer in result["peers"].items():
            # The same weights on both sides: the same outputs.
            assert peer["max_abs_diff"] <= 1e-5, (backend, name)
            assert peer["keras_over_ours"] > 0
        (case,) = result["chunking"]  # 12 queries in chunks of 5: the last one partial
        assert (case["chunk"], case["chunks"]) == (5, 3)
        assert case["max_abs_diff"] <= 1e-6 and case["chunked_over_unchunked"] > 0
        assert set(case["peak_mib"]) == {"unchunked", "chunked"}

    keras_hub = sections["keras_hub"]
    if importlib.util.find_spec("keras_hub") is None:
        assert "keras-hub is not installed" in keras_hub["skipped"]
    else:
        # The same weights on both sides: the same logits, and the same ids decoded.
        assert keras_hub["max_abs_logit_diff"] <= 1e-4
        # (tiny, untrained models: a near-tie may swap a token of a row between the implementations)
        for decoding in ("greedy", "beam"):
            assert keras_hub[decoding]["rows_as_ours"]["keras_attention"] == 1.0
            assert keras_hub[decoding]["rows_as_ours"]["keras_hub"] >= 0.75
        assert set(keras_hub["train_step_ms"]) == {"keras_attention", "keras_hub"}  # --quick: no XLA sides
        # The quick config's matmul FLOPs by hand: per encoder layer 4 * 2 * 20 * 16 * 16 (projections)
        # + 2 * 2 * 20 * 5 * 16 (scores) + 2 * 2 * 20 * 16 * 32 (feed-forward) = 88,320; a decoder layer
        # 2 * 40,960 + 2 * 6,400 + 40,960 = 135,680; the read-out 2 * 20 * 16 * 50 = 32,000; times 3.
        limit = keras_hub["arithmetic_limit"]
        assert bench_keras_hub.train_flops(keras_hub["config"]) == 3 * (88320 + 135680 + 32000)
        assert limit["best_over_limit"] == pytest.approx(
            keras_hub["train_best_ms"]["keras_attention"] / limit["limit_ms"], rel=0.01
        )
        for decoding in ("greedy", "beam"):
            rates = keras_hub[decoding]["tokens_per_second"]
            cfg = keras_hub["config"]
            for side, timing in keras_hub[decoding]["decode_ms"].items():
                expected = cfg["batch"] * cfg["length"] / (timing["median_ms"] / 1000)
                assert rates[side] == pytest.approx(expected, rel=0.01)

    markdown = (tmp_path / "results.md").read_text()
    assert markdown.startswith("# keras-attention benchmarks")
    assert 'int8 (`quantize="int8"`) against float32' in markdown
    headings = (
        "## Targets",
        "## 1.",
        "## 2.",
        "## 3.",
        "## 4.",
        "## 5.",
        "## 6.",
        "## 7.",
        "## 8.",
        "## 9.",
        "## 10.",
        "## 11.",
    )
    for heading in headings:
        assert heading in markdown


def test_the_benchmarks_page_block_is_generated_from_the_committed_results():
    from benchmarks import report

    benchmarks = os.path.join(ROOT, "benchmarks")
    with open(os.path.join(benchmarks, "results.json"), encoding="utf-8") as f:
        results = json.load(f)
    with open(report.PAGE, encoding="utf-8") as f:
        page = f.read()
    assert report.updated_page(page, results) == page, "run python -m benchmarks.report"
    with open(os.path.join(benchmarks, "results.md"), encoding="utf-8") as f:
        assert report.markdown(results) == f.read(), "run python -m benchmarks.report"
