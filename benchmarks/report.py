"""benchmarks/results.json -> benchmarks/results.md, and the benchmark block of docs/benchmarks.md.

python -m benchmarks.report          # rewrite results.md and the page's block from results.json
python -m benchmarks.report --check  # exit 1 if either is out of date
"""

import argparse
import json
import pathlib
import sys

from tools.readme_block import replace_block

HERE = pathlib.Path(__file__).resolve().parent
PAGE = HERE.parent / "docs" / "benchmarks.md"

BEGIN, END = "<!-- bench-results:begin -->", "<!-- bench-results:end -->"


def _fmt(value, digits=1):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _met(value, target, higher=True):
    if value is None:
        return "-"
    ok = value >= target if higher else value <= target
    return "met" if ok else "**missed**"


def _mha_rows(entries):
    """Rows of an MHA comparison: T, B, our and Keras's fwd+bwd medians, the ratio."""
    return [
        [
            r["T"],
            r["B"],
            r["fwd_bwd_ms"]["keras_attention"]["median_ms"],
            r["fwd_bwd_ms"]["keras"]["median_ms"],
            _fmt(r["speedup_vs_keras"], 2) + "x",
        ]
        for r in entries
    ]


def _table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _meta(section):
    meta = section.get("meta", {})
    load = meta.get("loadavg_before")
    return f"_({meta.get('seconds', '?')} s; load average before: {load[0] if load else '?'})_"


def _reruns(sections):
    """Sections last written by another command (a later `--only` run)."""
    first = {}
    for name, s in sections.items():
        command = s.get("meta", {}).get("command")
        if command:
            date, names = first.get(command, (s["meta"].get("date"), []))
            first[command] = (min(date, s["meta"].get("date")), names + [name])
    if len(first) <= 1:
        return ""
    return "; sections written by: " + "; ".join(
        f"`{c}` at {d} ({', '.join(n)})" for c, (d, n) in sorted(first.items(), key=lambda kv: kv[1][0])
    )


def markdown(results):
    """The whole of benchmarks/results.md."""
    out, header_end, summary = _render(results)
    if summary:
        out[header_end:header_end] = ["## Targets", "", targets_table(summary), ""]
    return "\n".join(out).rstrip() + "\n"


def targets_table(summary):
    return _table(["measure", "target", "result", ""], summary)


def _render(results):
    """results.md's lines, where its targets table goes, and that table's rows."""
    machine, versions = results["machine"], results["versions"]
    sections = results["sections"]
    out = ["# keras-attention benchmarks", ""]
    if results.get("quick"):
        out += ["**--quick run: tiny sizes, 2 repetitions. These numbers only show that the suite runs.**", ""]
    out += [
        f"- Machine: {machine.get('cpu', '?')}, {machine.get('cpu_count')} cores, "
        f"{machine.get('memory_gib', '?')} GiB RAM, {machine.get('platform')}",
        f"- Versions: Python {machine.get('python')}, " + ", ".join(f"{k} {v}" for k, v in versions.items() if v),
        f"- Date: {machine.get('date')}; command: `{results.get('command')}` (`make bench`)" + _reruns(sections),
        f"- Load average (1, 5, 15 min) at start {machine.get('loadavg_at_start')}, at end "
        f"{machine.get('loadavg_at_end')} on {machine.get('cpu_count')} cores: above ~1.5 the machine "
        "was shared and the timings are noisy (the ratios less so: the sides alternate).",
        "- Timings are medians after warm-up, the sides of each comparison alternating in one run.",
        "",
    ]
    header_end = len(out)
    summary = []

    s = sections.get("decoder")
    if s and "error" not in s:
        cfg = s["config"]
        out += [
            f"## 1. Attention-decoder training step {_meta(s)}",
            "",
            f"B={cfg['batch']}, Ts={cfg['source_length']}, Tt={cfg['target_length']}, embedding {cfg['embedding']}, "
            f"units {cfg['units']}, vocabulary {cfg['vocabulary']}; {s['method']}.",
            "",
        ]
        ours = s["step_ms"]["keras_attention"]["median_ms"]
        rows = []
        labels = {
            "keras_attention": "keras-attention (AttentionDecoder + AttentionWrapper)",
            "keras_attention_xla": "keras-attention, jit_compile=True",
            "plain_keras": "plain Keras RNN, keys projected every step",
            "plain_keras_xla": "plain Keras RNN, jit_compile=True",
            "tfa": "tfa.seq2seq AttentionWrapper + BasicDecoder (TF 2.15)",
            "tfa_xla": "tfa.seq2seq, train step jit_compile=True",
            "gru_no_attention": "lower bound: bare keras.layers.GRU, no attention",
            "gru_no_attention_xla": "lower bound, jit_compile=True",
        }
        gflops = s.get("achieved_gflops", {})
        for name, stats in s["step_ms"].items():
            rows.append(
                [
                    labels.get(name, name),
                    stats["median_ms"],
                    stats["min_ms"],
                    stats["max_ms"],
                    _fmt(stats["median_ms"] / ours, 2) + "x",
                    gflops.get(name),
                ]
            )
        out += [_table(["side", "median ms/step", "min", "max", "time / ours", "matmul GFLOP/s"], rows), ""]
        if "train_gflop" in s:
            out += [
                f"Matmul work per training step: {s['train_gflop']['ours']} GFLOP with the keys projected once "
                f"(ours, tfa), {s['train_gflop']['plain']} GFLOP projecting them at every step (plain); "
                f"trainable parameters: {s.get('parameters')}.",
                "",
            ]
        if "arithmetic_limit" in s:
            limit = s["arithmetic_limit"]
            floor = s.get("best_ms", {}).get("gru_no_attention")
            size = limit["matmul_size"]
            out += [
                f"Arithmetic limit: at this machine's float32 matmul rate ({limit['matmul_gflops']} GFLOP/s, a "
                f"{size} x {size} product in the same run) our step's matmuls alone would take "
                f"{limit['limit_ms']:.1f} ms; ours at its faster setting takes "
                f"{_fmt(limit['best_over_limit'], 2)}x that (target {s['targets']['best_over_limit']:g}x)"
                + (
                    f", and the bare Keras GRU without attention {floor / limit['limit_ms']:.2f}x."
                    if floor and limit["limit_ms"]
                    else "."
                ),
                "",
            ]
        if "profile" in s:
            prof = s["profile"]
            rows = []
            for name, p in prof.items():
                if "error" in p:
                    continue
                top = ", ".join(f"{t['type']} {t['ms_per_step']}" for t in p["top_op_types"][:4])
                rows.append([name, p["wall_ms_per_step"], p["ops_per_step"], p["mean_us_per_op"], top])
            out += [
                "Profile (TensorFlow profiler, op self time):",
                "",
                _table(["side", "ms/step (profiled)", "ops/step", "mean us/op", "top op types (ms/step)"], rows),
                "",
            ]
        if "tfa_skipped" in s:
            out += [f"tfa peer not measured: {s['tfa_skipped']}.", ""]
        sp, bb, best = s["speedup"], s.get("best_vs_best", {}), s.get("best_ms", {})
        if best:
            out += [
                "Best against best (each side at its faster setting, with or without XLA): "
                + ", ".join(f"{labels.get(k, k).split(',')[0]} {v:.1f} ms" for k, v in best.items())
                + "."
            ]
            if "gru_no_attention" in best and "plain_keras" in best:
                needed = best["plain_keras"] / 2.0
                out += [
                    f"The 2x target against the plain loop asks for {needed:.1f} ms per step; a bare Keras GRU with "
                    f"no attention at all already takes {best['gru_no_attention']:.1f} ms, which leaves "
                    f"{needed - best['gru_no_attention']:.1f} ms for the whole attention (ours spends "
                    f"{best['keras_attention'] - best['gru_no_attention']:.1f} ms on it)."
                ]
            out += [""]
        probe = s.get("source_length_probe")
        if probe:
            rows = [
                [
                    p["source_length"],
                    p["step_ms"]["keras_attention"],
                    p["step_ms"]["keras_attention_xla"],
                    p["step_ms"]["plain_keras"],
                    _fmt(p["vs_plain_keras"], 2) + "x",
                    _fmt(p["best_vs_plain_keras"], 2) + "x",
                ]
                for p in probe
            ]
            out += [
                "Longer sources: the per-step key projection that the library saves grows with Ts, and so does "
                "the (B, Ts, units) tanh block of the additive score that every side computes at every step:",
                "",
                _table(["Ts", "ours ms", "ours XLA ms", "plain ms", "plain / ours", "plain / ours at best"], rows),
                "",
            ]

        def ratios(peer, target):
            text = (
                f"{_fmt(sp['vs_' + peer], 2)}x both without XLA, "
                f"{_fmt(sp.get('xla_vs_' + peer + '_xla'), 2)}x both with XLA"
            )
            best_ratio = bb["vs_" + peer]
            return f"{_fmt(best_ratio, 2)}x best against best; " + text, _met(best_ratio, target)

        tfa_target = s.get("targets", {}).get("vs_tfa", 1.5)
        summary.append(["1. train step vs plain Keras", ">= 2x", *ratios("plain_keras", 2.0)])
        if "vs_tfa" in sp:
            summary.append(["1. train step vs tfa.seq2seq", f">= {tfa_target:g}x", *ratios("tfa", tfa_target)])
        else:
            summary.append(["1. train step vs tfa.seq2seq", f">= {tfa_target:g}x", "not measured", "-"])
        limit = s.get("arithmetic_limit")
        if limit:
            over, limit_target = limit["best_over_limit"], s["targets"]["best_over_limit"]
            summary.append(
                [
                    "1. train step / its arithmetic limit",
                    f"<= {limit_target:g}x",
                    f"{_fmt(over, 2)}x ({best['keras_attention']:.1f} ms against {limit['limit_ms']:.1f} ms)",
                    _met(over, limit_target, higher=False),
                ]
            )

    s = sections.get("mha")
    if s and "error" not in s:
        cfg = s["config"]
        out += [
            f"## 2. MultiHeadAttention forward + backward {_meta(s)}",
            "",
            f"Self-attention, d_model {cfg['d_model']}, {cfg['num_heads']} heads of {cfg['key_dim']}, "
            f"B*T = {cfg['tokens']} tokens; {s['method']}.",
            "",
        ]
        rows = _mha_rows(s["mha"])
        out += [_table(["T", "B", "keras-attention ms", "keras.layers.MultiHeadAttention ms", "speedup"], rows), ""]
        f = s["scaled_dot_flops"]
        out += [
            f"Scaled-dot attention forward at T={f['T']} (N={f['N']} heads x batch, d={f['d_head']}): "
            f"{f['time_ms']['scaled_dot_attention']['median_ms']:.1f} ms = {f['gflops']['scaled_dot_attention']} GFLOP/s "
            f"(its two matmuls) against {f['gflops']['matmul']} GFLOP/s for a bare QK^T matmul "
            f"({f['time_ms']['matmul']['median_ms']:.1f} ms): **{100 * f['fraction_of_matmul_rate']:.0f}%** of the matmul rate"
            + (
                f"; {100 * f['fraction_of_two_matmuls_rate']:.0f}% of the rate of the same two matmuls without the softmax "
                f"({f['gflops']['two_matmuls']} GFLOP/s)"
                if "two_matmuls" in f["gflops"]
                else ""
            )
            + ".",
            "",
        ]
        worst = min(r["speedup_vs_keras"] for r in s["mha"])
        summary.append(
            [
                "2. MHA fwd+bwd vs Keras (worst T)",
                ">= 1.0x",
                f"{_fmt(worst, 3)}x (T = "
                + ", ".join(str(r["T"]) for r in s["mha"])
                + ": "
                + " / ".join(_fmt(r["speedup_vs_keras"], 2) for r in s["mha"])
                + "x)",
                _met(worst, 1.0),
            ]
        )
        summary.append(
            [
                "2. scaled-dot FLOP rate / matmul",
                ">= 50%",
                f"{100 * f['fraction_of_matmul_rate']:.0f}%",
                _met(f["fraction_of_matmul_rate"], 0.5),
            ]
        )

    s = sections.get("memory")
    if s and "error" not in s:
        cfg = s["config"]
        out += [
            f"## 3. Additive attention peak memory {_meta(s)}",
            "",
            f"Tq = Tv = {cfg['length']}, units {cfg['units']}, value size {cfg['value_dim']}. {s['method']}.",
            "",
        ]
        rows = [[r["variant"], r["B"], r["peak_mib"], _fmt(r["naive_block_mib"], 0), r["seconds"]] for r in s["rows"]]
        out += [_table(["variant", "B", "peak MiB", "(B,Tq,Tv,u) block MiB", "seconds"], rows), ""]
        extrapolated = " (extrapolated from the measured batches)" if s["naive_peak_extrapolated"] else ""
        out += [
            f"At B={cfg['batch']}: naive {s['naive_peak_mib_at_B']:.0f} MiB{extrapolated} against "
            f"{s['ours_peak_mib_at_B']:.0f} MiB chunked: **{s['reduction_at_B']}x** lower. Max |difference| "
            f"from Keras's AdditiveAttention: {s['max_abs_diff_vs_naive']:.1e}.",
            "",
        ]
        if "train" in s:
            t = s["train"]
            out += [
                f"Forward + backward at B={cfg['batch']}: naive {t['naive_peak_mib_at_B_extrapolated']:.0f} MiB "
                f"(extrapolated) against {t['ours_peak_mib_at_B']:.0f} MiB: {t['reduction_at_B']}x lower.",
                "",
            ]
        summary.append(
            ["3. additive peak memory reduction", ">= 8x", f"{s['reduction_at_B']}x", _met(s["reduction_at_B"], 8.0)]
        )
        summary.append(
            [
                "3. same result as naive",
                "<= 1e-5",
                f"{s['max_abs_diff_vs_naive']:.1e}",
                _met(s["max_abs_diff_vs_naive"], 1e-5, higher=False),
            ]
        )

    s = sections.get("serving")
    if s and "error" not in s:
        out += [
            f"## 4. Serving one date (dates model, greedy) {_meta(s)}",
            "",
            f'"{s["config"]["date"]}", {s["config"]["steps"]} decoder steps; {s["method"]}. '
            f"Same ids on every path: {s['same_ids_all_paths']}.",
            "",
        ]
        rows = [[name, v["p50_ms"], v["p99_ms"], v["calls"]] for name, v in s["latency_ms"].items()]
        out += [_table(["path", "p50 ms", "p99 ms", "calls"], rows), ""]
        b = s["beam5_over_greedy_p50"]
        out += [
            f"onnxruntime is {s['onnx_speedup_vs_saved_model_p50']}x faster than the SavedModel and "
            f"{s['onnx_speedup_vs_keras_predict_p50']}x faster than `predict` (p50). Beam 5 / greedy: "
            f"{b['onnxruntime']}x (onnxruntime), {b['saved_model']}x (SavedModel).",
            "",
        ]
        q = s.get("int8")
        if q:
            sizes = ", ".join(
                f"{name} {q['bytes'][name] / 1e6:.2f} MB (float32 {q['float32_bytes'][name] / 1e6:.2f} MB)"
                for name in q["bytes"]
            )
            out += [
                f'int8 (`quantize="int8"`) against float32 through onnxruntime (p50): '
                f"{q['speedup_vs_float32_p50']['greedy']}x greedy, {q['speedup_vs_float32_p50']['beam5']}x beam 5; "
                f"{sizes}; same ids as float32 on the date: {q['same_ids_as_float32']}. {q['note']}.",
                "",
            ]
        if s.get("profile"):
            ort, tfp = s["profile"]["onnxruntime"], s["profile"]["saved_model"]
            out += [
                f"Profile: onnxruntime runs {ort['kernels_per_call']} kernels per call ({ort['kernel_ms_per_call']} ms of "
                f"kernel time in a {ort['model_run_ms']} ms profiled run; profiling inflates both; top: "
                + ", ".join(f"{t['type']} {t['ms_per_call']}" for t in ort["top_op_types"][:4])
                + f"); the TensorFlow profiler sees {tfp['ops_per_step']} top-level ops per SavedModel call "
                f"({tfp['op_self_time_ms_per_step']} ms of op time in {tfp['wall_ms_per_step']} ms: the rest is the "
                "function-call and while-loop machinery).",
                "",
            ]
        best = max(s["onnx_speedup_vs_saved_model_p50"], s.get("onnx_1thread_speedup_vs_saved_model_p50") or 0)
        summary.append(
            [
                "4. onnxruntime vs SavedModel (p50)",
                ">= 2x",
                f"{s['onnx_speedup_vs_saved_model_p50']}x "
                f"(1 thread: {s.get('onnx_1thread_speedup_vs_saved_model_p50')}x)",
                _met(best, 2.0),
            ]
        )
        worst = max(b.values())
        summary.append(["4. beam 5 / greedy (worst path)", "<= 3x", f"{worst}x", _met(worst, 3.0, higher=False)])

    s = sections.get("scaling")
    if s and "error" not in s:
        out += [f"## 5. Decode time against length {_meta(s)}", "", s["method"] + ".", ""]
        for axis in ("source", "target"):
            rows = [[r["Ts"], r["Tt"], r["median_ms"]] for r in s[axis]["rows"]]
            out += [
                _table(["Ts", "Tt", "median ms"], rows),
                "",
                f"{axis} length: log-log slope {s[axis]['exponent']} over the whole range, "
                f"{s[axis]['exponent_upper_half']} over the upper half; fit time = a + b * length^k: "
                f"k = {s[axis]['offset_power_fit']['k']}, a = {s[axis]['offset_power_fit']['fixed_ms']} ms "
                f"({_fmt(100 * (s[axis]['offset_power_fit']['fixed_share_at_min'] or 0), 0)}% of the shortest).",
                "",
            ]
            summary.append(
                [
                    f"5. exponent vs {axis} length",
                    "about 1",
                    f"slope {s[axis]['exponent']} (upper half {s[axis]['exponent_upper_half']}); "
                    f"k = {s[axis]['offset_power_fit']['k']} in a + b L^k",
                    "reported",
                ]
            )
        if "transformer" in s:  # results from before the Transformer rows have none
            from benchmarks import bench_scaling

            out += bench_scaling.transformer_markdown(s["transformer"], _table, _fmt)
            summary += bench_scaling.transformer_summary_rows(s["transformer"])

    s = sections.get("gpu")
    if s and "error" not in s:
        out += [f"## 6. GPU {_meta(s)}", ""]
        if "skipped" in s:
            out += [f"Not measured: {s['skipped']}.", ""]
        else:
            out += [f"Device: {s['device']}.", ""]
            rows = [[k, v["median_ms"]] for k, v in s["decoder_step_ms"].items()]
            out += [_table(["decoder train step", "median ms"], rows), ""]
            rows = _mha_rows(s["mha"])
            out += [_table(["T", "B", "keras-attention MHA ms", "Keras MHA ms", "speedup"], rows), ""]

    s = sections.get("g2p")
    if s and "error" not in s:
        m, cfg = s["model"], s["config"]
        out += [
            f"## 7. The G2P model's choices on CMUdict {_meta(s)}",
            "",
            f"The example's model (BiLSTM {m['encoder_layers']} x {m['encoder_units']}, decoder {m['decoder_units']}, "
            f"additive attention {m['attention_units']}) on length-bucketed batches of {cfg['batch']} CMUdict words.",
            "",
        ]
        labels = {
            "input_feeding": "input feeding (AttentionLSTMCell, attention in the loop)",
            "luong": "no input feeding (AttentionWrapper: one LSTM pass, one attention call)",
            "no_attention": "lower bound: plain LSTM decoder, no attention",
        }
        ours = s["decoder_step"]["input_feeding"]["median_ms"]
        rows = [
            [labels.get(k, k), v["median_ms"], v["min_ms"], v["max_ms"], _fmt(ours / v["median_ms"], 2) + "x"]
            for k, v in s["decoder_step"].items()
        ]
        out += [_table(["training step", "median ms", "min", "max", "speed vs input feeding"], rows), ""]
        f, b = s["fit_step"], s["beam_decode"]
        out += [
            f"`fit` on `LengthBucketedBatches`: {f['fit']['median_ms']:.1f} ms a step against "
            f"{f['train_on_batch']['median_ms']:.1f} ms for a `train_on_batch` loop over the same "
            f"{cfg['fit_batches']} batches ({s['fit_vs_train_on_batch']}x). Beam-5 decoding of "
            f"{cfg['decode_words']} words ({cfg['max_length']} steps each): {b['without_alignments']['median_ms']:.0f} ms "
            f"without the alignment history, {b['with_alignments']['median_ms']:.0f} ms with it "
            f"({s['alignments_cost']}x).",
            "",
        ]
        summary.append(["7. G2P step without input feeding", "reported", f"{s['decoder_speedup']}x faster", "reported"])
        summary.append(
            [
                "7. fit / train_on_batch per step",
                "about 1x",
                f"{s['fit_vs_train_on_batch']}x",
                _met(s["fit_vs_train_on_batch"], 1.15, higher=False),
            ]
        )

    s = sections.get("options")
    if s and "error" not in s:
        from benchmarks import bench_options

        out += bench_options.markdown(s, _table, _meta(s))
        summary.append(bench_options.summary_row(s, _fmt))

    s = sections.get("throughput")
    if s and "error" not in s:
        from benchmarks import bench_throughput

        out += bench_throughput.markdown(s, _table, _meta(s))
        summary.append(bench_throughput.summary_row(s, _fmt))

    s = sections.get("backends")
    if s and "error" not in s:
        from benchmarks import bench_backends

        out += bench_backends.markdown(s, _table, _meta(s))
        summary.append(bench_backends.summary_row(s, _fmt))

    s = sections.get("keras_hub")
    if s and "error" not in s and "skipped" not in s:
        from benchmarks import bench_keras_hub

        out += bench_keras_hub.markdown(s, _table, _meta(s))
        summary += bench_keras_hub.summary_rows(s, _fmt, _met)
    elif s and "skipped" in s:
        out += [f"## 11. The Transformer against keras-hub's: skipped ({s['skipped']})", ""]

    for name, s in sections.items():
        if "error" in s:
            out += [f"## {name}: failed", "", f"`{s['error']}`", ""]

    return out, header_end, summary


def page_block(results):
    """The page's benchmark block: the targets table, the serving throughput table, then the
    across-backends tables."""
    _, _, summary = _render(results)
    lines = [targets_table(summary), ""]
    s = results["sections"].get("throughput")
    if s and "error" not in s:
        from benchmarks import bench_throughput

        lines += [
            "Serving throughput (section 9): dates per second through the exported dates decoder, "
            f"{s['config']['steps']} steps each; {s['method']}; same ids on every path: {s['same_ids_all_cells']}. "
            f"`{s['meta']['command']}` on {s['meta']['date']}, load average {s['meta']['loadavg_before'][0]} before.",
            "",
            bench_throughput.throughput_table(s, _table),
            "",
        ]
    s = results["sections"].get("backends")
    if s and "error" not in s:
        from benchmarks import bench_backends

        lines += bench_backends.readme_lines(s, _table)
    return "\n".join(lines).rstrip()


def updated_page(text, results):
    return replace_block(text, BEGIN, END, page_block(results), PAGE.name)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that results.md and the page are up to date")
    args = parser.parse_args(argv)
    results = json.loads((HERE / "results.json").read_text(encoding="utf-8"))
    files = {
        HERE / "results.md": markdown(results),
        PAGE: updated_page(PAGE.read_text(encoding="utf-8"), results),
    }
    stale = [path.name for path, text in files.items() if path.read_text(encoding="utf-8") != text]
    if args.check:
        if stale:
            print(
                f"error: {', '.join(stale)} out of date with benchmarks/results.json; run python -m benchmarks.report",
                file=sys.stderr,
            )
            return 1
        return 0
    for path, text in files.items():
        path.write_text(text, encoding="utf-8")
    print(f"updated {', '.join(stale) or 'nothing (up to date)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
