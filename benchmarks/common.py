"""Timing, memory and environment helpers shared by the benchmarks."""

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def summary(seconds):
    """Median and spread (ms) of per-call times in seconds."""
    ms = sorted(1000.0 * s for s in seconds)
    return {
        "median_ms": round(statistics.median(ms), 4),
        "min_ms": round(ms[0], 4),
        "max_ms": round(ms[-1], 4),
        "reps": len(ms),
    }


def percentiles(seconds, qs=(50, 99)):
    import numpy as np

    ms = 1000.0 * np.asarray(seconds)
    out = {f"p{q}_ms": round(float(np.percentile(ms, q)), 4) for q in qs}
    out["mean_ms"] = round(float(ms.mean()), 4)
    out["calls"] = len(ms)
    return out


def time_calls(fn, number):
    """Seconds per call of `fn` over `number` back-to-back calls."""
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) / number


def alternate(sides, repeats, warmup=1, number=1, log=None):
    """Time every side in turn, `repeats` rounds after `warmup` rounds.

    `sides` is {name: fn}; `fn()` runs one call, or, when it is a
    `RemoteSide`, the timing is taken on the other side of the pipe. The
    order rotates each round so that no side is always first after a pause.
    Returns {name: [seconds per call, one per round]}.
    """
    names = list(sides)
    for _ in range(warmup):
        for name in names:
            _time_side(sides[name], number)
    times = {name: [] for name in names}
    for round_ in range(repeats):
        order = names[round_ % len(names) :] + names[: round_ % len(names)]
        for name in order:
            times[name].append(_time_side(sides[name], number))
        if log:
            rounds = ", ".join(f"{n} {1000 * times[n][-1]:.1f} ms" for n in names)
            log(f"    round {round_ + 1}/{repeats}: {rounds}")
    return times


def _time_side(side, number):
    if isinstance(side, RemoteSide):
        return side.run(number)
    return time_calls(side, number)


class RemoteSide:
    """A worker process (e.g. in the tfa environment) that times its own calls.

    Protocol: the worker prints one JSON line `{"ready": ...}` once built, then
    answers each stdin line `{"number": N}` with `{"seconds": per_call}`.
    """

    def __init__(self, argv, env=None, cwd=None, timeout=1800):
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=cwd,
            bufsize=1,
        )
        self.timeout = timeout
        self._info = None

    @property
    def info(self):
        """The worker's ready line (waits for it: start workers early)."""
        if self._info is None:
            self._info = self._read()
        return self._info

    def _read(self):
        line = self.process.stdout.readline()
        if not line:
            error = self.process.stderr.read()
            raise RuntimeError(f"peer worker died: {error[-3000:]}")
        return json.loads(line)

    def run(self, number):
        self.info  # noqa: B018 (ready first)
        self.process.stdin.write(json.dumps({"number": number}) + "\n")
        self.process.stdin.flush()
        return self._read()["seconds"]

    def close(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()


def serve_worker(step, info):
    """The worker side of `RemoteSide`: time `step()` on request."""
    print(json.dumps({"ready": True, **info}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        number = json.loads(line)["number"]
        print(json.dumps({"seconds": time_calls(step, number)}), flush=True)


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def rss_bytes():
    """(current RSS, peak RSS since the last reset) of this process."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, value = line.split(":", 1)
            fields[key] = value
    return int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024


def reset_peak_rss():
    """Reset VmHWM to the current RSS (Linux >= 4.0: write 5 to clear_refs)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def machine():
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_at_start": loadavg(),
    }
    from examples.common import cpu_model

    if cpu_model():
        info["cpu"] = cpu_model()
    try:
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    return info


def versions():
    import importlib.metadata

    # The library under its project name; its distribution is keras-attention-decoders.
    out = {"keras-attention": importlib.metadata.version("keras-attention-decoders")}
    for package in ("keras", "tensorflow", "numpy", "onnxruntime", "tf2onnx", "onnx"):
        try:
            out[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            out[package] = None
    return out


def ratio(slow, fast):
    return round(slow / fast, 3) if fast else None


def fit_exponent(xs, ys):
    """Slope of log(y) against log(x): y ~ x ** slope."""
    import numpy as np

    slope, _ = np.polyfit(np.log(xs), np.log(ys), 1)
    return round(float(slope), 3)


def profile_ops(step, number=3, top=12):
    """Run `step()` `number` times under the TensorFlow profiler; return the
    op count and self time (ms per step) per op type, busiest first.

    Uses the profiler's framework_op_stats tool (op-level self times on the
    host: on CPU that is all the work). IDLE time is reported separately.
    """
    import glob
    import tempfile

    import tensorflow as tf

    try:
        from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as tools
    except ImportError:  # TF <= 2.15
        from tensorflow.python.profiler.internal import _pywrap_profiler as tools
    with tempfile.TemporaryDirectory() as directory:
        tf.profiler.experimental.start(directory)
        begin = time.perf_counter()
        for _ in range(number):
            step()
        wall = (time.perf_counter() - begin) / number
        tf.profiler.experimental.stop()
        paths = glob.glob(os.path.join(directory, "**", "*.xplane.pb"), recursive=True)
        data, ok = tools.xspace_to_tools_data(paths, "framework_op_stats", {})
        if ok:  # TF >= 2.16: a JSON (gviz) table
            table = json.loads(data)
            table = table[0] if isinstance(table, list) else table
            ids = [c["id"] for c in table["cols"]]
            records = [dict(zip(ids, (c.get("v") for c in row["c"]))) for row in table["rows"]]
        else:  # TF 2.15: a TfStatsDatabase protobuf
            data, ok = tools.xspace_to_tools_data(paths, "tensorflow_stats", {})
            records = _tf_stats_records(data)
    by_type, idle_us, ops = {}, 0.0, 0
    for r in records:
        if r["type"] == "IDLE":
            idle_us += r["total_self_time"]
            continue
        entry = by_type.setdefault(r["type"], [0, 0.0])
        entry[0] += r["occurrences"]
        entry[1] += r["total_self_time"]
        ops += r["occurrences"]
    busy_ms = sum(v[1] for v in by_type.values()) / 1000 / number
    rows = sorted(by_type.items(), key=lambda kv: -kv[1][1])
    return {
        "wall_ms_per_step": round(1000 * wall, 2),
        "op_self_time_ms_per_step": round(busy_ms, 2),
        "ops_per_step": round(ops / number),
        "mean_us_per_op": round(1000 * busy_ms / max(1, ops / number), 2),
        "top_op_types": [
            {"type": k, "count_per_step": round(v[0] / number), "ms_per_step": round(v[1] / 1000 / number, 2)}
            for k, v in rows[:top]
        ],
    }


def _protobuf_fields(data):
    """(field number, wire type, value) of a serialized protobuf message."""
    import struct

    position = 0

    def varint():
        nonlocal position
        result = shift = 0
        while True:
            byte = data[position]
            position += 1
            result |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return result

    while position < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            yield number, wire, varint()
        elif wire == 1:
            yield number, wire, struct.unpack("<d", data[position : position + 8])[0]
            position += 8
        elif wire == 2:
            length = varint()
            yield number, wire, data[position : position + length]
            position += length
        elif wire == 5:
            yield number, wire, struct.unpack("<f", data[position : position + 4])[0]
            position += 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")


def _tf_stats_records(data):
    """The op records of TF 2.15's TfStatsDatabase (its first table):
    op_type = field 3, occurrences = 5, total_self_time_in_us = 8."""
    table = next(value for number, wire, value in _protobuf_fields(data) if wire == 2)
    records = []
    for number, wire, record in _protobuf_fields(table):
        if number != 1 or wire != 2:
            continue
        fields = {n: v for n, _, v in _protobuf_fields(record)}
        records.append(
            {
                "type": fields.get(3, b"").decode(),
                "occurrences": fields.get(5, 0),
                "total_self_time": fields.get(8, 0.0),
            }
        )
    return records


def fit_offset_power(xs, ys):
    """Least-squares fit of y = a + b * x ** k (a, b >= 0), k on a grid.

    The plain log-log slope mixes a fixed per-call cost (a) into the
    exponent; this separates it: k is the exponent of the length-dependent
    part. Returns {"k", "fixed_ms", "coefficient", "fixed_share_at_min"}.
    """
    import numpy as np

    xs, ys = np.asarray(xs, float), np.asarray(ys, float)
    best = None
    for k in np.arange(0.2, 3.0001, 0.01):
        basis = xs**k
        design = np.stack([np.ones_like(basis), basis], 1)
        (a, b), *_ = np.linalg.lstsq(design, ys, rcond=None)
        if a < 0:  # no negative fixed cost: refit through the origin
            a, b = 0.0, float(basis @ ys / (basis @ basis))
        if b < 0:
            continue
        error = float(((a + b * basis - ys) ** 2).sum())
        if best is None or error < best[0]:
            best = (error, k, a, b)
    if best is None:  # times falling with length: noise only
        return {"k": None, "fixed_ms": None, "coefficient": None, "fixed_share_at_min": None}
    _, k, a, b = best
    return {
        "k": round(float(k), 2),
        "fixed_ms": round(float(a), 3),
        "coefficient": float(b),
        "fixed_share_at_min": round(float(a / ys[0]), 3) if ys[0] else None,
    }
