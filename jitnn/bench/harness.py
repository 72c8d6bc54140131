"""What every benchmark suite shares: timing, machine facts, threads, the
peak, peers, compile-time probes, tables, JSON and the plot.

Threads. Each thread count runs in its own process (:func:`run_suite`), with
``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS`` and
``NUMBA_NUM_THREADS`` set in its environment before numpy, torch or numba
load, so every library in that process uses the same number of threads;
torch additionally gets ``torch.set_num_threads`` in the child and ONNX
Runtime its ``intra_op_num_threads``. A quick run with a single thread count
may run in the calling process instead (``in_process=True``): numba and torch
threads are set there, OpenBLAS keeps the threads it started with (the
header says so), which is fine for checking that a suite works, not for
recording figures.

Timing. :func:`median_seconds` calls the function a few times first (so JIT
compilation and first-touch page faults happen outside the timed calls), then
reports the median and the spread (min, max) of the timed calls.
:func:`paired_seconds` times several functions in rounds instead, for ratios
between functions measured side by side (see there). Compile time is
measured apart, by :func:`compile_times`, in fresh processes sharing an empty
kernel cache.

The peak. Every run measures the OpenBLAS sgemm rate (numpy, 1024^3; 512^3
in quick mode) with its own threads; suites report their rates as a fraction
of it ("% of peak").
"""

from __future__ import annotations

import datetime
import importlib.util
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")

#: Peers a suite may compare with, and the modules each needs (ONNX Runtime
#: and OpenVINO run models that the suites build with the onnx package).
PEERS = {"torch": ("torch",), "onnxruntime": ("onnxruntime", "onnx"),
         "openvino": ("openvino", "onnx"), "numpy": ("numpy",)}

_RESULT_MARK = "JITNN_BENCH_RESULT "


# --- timing -----------------------------------------------------------------

def median_seconds(function: Callable[[], object], min_time: float = 0.3, min_reps: int = 5,
                   warmup: int = 2) -> tuple[float, float, float]:
    """Median and spread (min, max) of ``function()``'s run time in seconds,
    after ``warmup`` untimed calls (compilation happens in the warm-up).

    A full measurement (``min_time >= 0.3``) first sleeps 0.2 s: OpenBLAS keeps
    its threads spinning for ~0.1 s after a call, which slowed whatever was
    timed right after a numpy peer by up to 2x at 2 threads."""
    if min_time >= 0.3:
        time.sleep(0.2)
    for _ in range(warmup):
        function()
    times = []
    start = time.perf_counter()
    while len(times) < min_reps or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        function()
        times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2], times[0], times[-1]


def paired_seconds(functions: dict[str, Callable[[], object]], rounds: int = 15,
                   burst: float = 0.02, warmup: int = 2, pause: float = 0.0,
                   median: bool = False) -> dict[str, list[float]]:
    """Per-call seconds of every function in each of ``rounds`` rounds.

    A round runs each function back to back for a burst of at least ``burst``
    seconds (and 3 calls), one function after the other in a shuffled order
    (seeded, so runs repeat the same order). Each function stays warm in its
    own regime, as with :func:`median_seconds`, but the slow drifts of a
    shared host hit every function of a round alike. So the median over
    rounds of one function's time divided by another's *in the same round* is
    much steadier than the ratio of two separate 0.3 s medians: reorders
    against ``np.copyto`` on 1 thread came out mostly within +-0.05
    (interquartile; up to +-0.1 at C = 3) where separate medians moved by up
    to 0.3 between runs.

    ``pause``: seconds of sleep before each burst, so that thread pools that
    spin after a call (OpenBLAS for ~0.1 s, ONNX Runtime with its default
    spinning) are idle when the next function starts: whole models on 2
    threads, where a pool still spinning takes a core from the next engine.
    ``median``: a round's figure is the median of its calls, each timed,
    instead of the burst's mean (for calls of milliseconds, on a host whose
    slow calls come in bursts: MobileNetV2 on 2 threads, median 3.9 ms,
    ninetieth percentile 9 ms for every engine alike).
    """
    for function in functions.values():
        for _ in range(warmup):
            function()
    order = list(functions)
    shuffle = random.Random(0).shuffle
    seconds: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            function = functions[name]
            if pause:
                time.sleep(pause)
            function()  # the burst starts warm: the previous function ran in between
            calls, times, start = 0, [], time.perf_counter()
            while True:
                call_start = time.perf_counter() if median else 0.0
                function()
                now = time.perf_counter()
                calls += 1
                if median:
                    times.append(now - call_start)
                elapsed = now - start
                if calls >= 3 and elapsed >= burst:
                    break
            seconds[name].append(sorted(times)[calls // 2] if median else elapsed / calls)
    return seconds


def geomean(values: Iterable[float | None]) -> float:
    """Geometric mean of the positive finite values (nan if there are none)."""
    values = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b``, or None when either is missing, nan or b is 0."""
    if a is None or b is None or not (math.isfinite(a) and math.isfinite(b)) or b == 0:
        return None
    return a / b


# --- machine facts, the peak, peers ---------------------------------------------

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict:
    """CPU, SIMD level, cores and the versions that change the figures."""
    import llvmlite.binding as llvm
    import numba
    import numpy as np
    features = llvm.get_host_cpu_features()
    simd = ("AVX-512" if features.get("avx512f") else
            "AVX2 + FMA" if features.get("avx2") and features.get("fma") else
            "AVX2" if features.get("avx2") else "NEON" if features.get("neon") else "other")
    blas = "OpenBLAS"
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]["name"]
    except Exception:  # noqa: BLE001 - older numpy: keep the default name
        pass
    import jitnn
    return {"date": str(datetime.date.today()), "cpu": cpu_model(),
            "llvm_cpu": llvm.get_host_cpu_name(), "simd": simd, "cores": os.cpu_count(),
            "machine": platform.machine(), "jitnn": jitnn.__version__,
            "numba": numba.__version__, "llvm": ".".join(map(str, llvm.llvm_version_info)),
            "numpy": np.__version__, "blas": blas, "python": platform.python_version()}


def sgemm_peak_gflops(n: int = 1024, min_time: float = 0.3) -> float:
    """The OpenBLAS sgemm rate (numpy) at n x n x n with this process's threads."""
    import numpy as np
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    out = np.empty((n, n), np.float32)
    seconds, _, _ = median_seconds(lambda: np.matmul(a, b, out=out), min_time=min_time)
    return 2 * n ** 3 / seconds / 1e9


def missing_modules(peer: str) -> list[str]:
    """The modules peer ``peer`` needs that are not installed."""
    return [m for m in PEERS.get(peer, (peer,)) if importlib.util.find_spec(m) is None]


def installed(peer: str) -> bool:
    return not missing_modules(peer)


def peer_versions(peers: Iterable[str]) -> dict:
    versions = {}
    for peer in peers:
        try:
            versions[peer] = importlib.import_module(PEERS.get(peer, (peer,))[0]).__version__
        except Exception:  # noqa: BLE001 - a broken install is reported, not fatal
            versions[peer] = "?"
    return versions


def resolve_peers(requested: Iterable[str], suite_peers: Iterable[str]) -> tuple[list[str], list[str]]:
    """``(peers to run, lines about the skipped ones)`` for one suite: the
    requested peers that the suite knows and that are installed."""
    use, skipped = [], []
    for peer in suite_peers:
        if peer not in requested:
            continue
        missing = missing_modules(peer)
        if not missing:
            use.append(peer)
        else:
            skipped.append(f"{peer} skipped: {' and '.join(missing)} not installed "
                           f"(pip install {' '.join(missing)}, or pip install 'jitnn[bench]')")
    return use, skipped


# --- one suite at one thread count ---------------------------------------------

@dataclass
class Run:
    """What a suite's ``measure`` gets: the thread count, quick mode, the
    peers to compare with, and timing/progress helpers."""
    suite: str
    threads: int
    quick: bool
    peers: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)

    def median(self, function, min_time: float | None = None, min_reps: int = 5,
               warmup: int = 2) -> tuple[float, float, float]:
        """:func:`median_seconds`, shorter in quick mode."""
        if min_time is None:
            min_time = 0.02 if self.quick else 0.3
        if self.quick:
            min_reps = min(min_reps, 3)
            warmup = min(warmup, 1)
        return median_seconds(function, min_time=min_time, min_reps=min_reps, warmup=warmup)

    def paired(self, functions: dict[str, Callable[[], object]],
               rounds: int = 15) -> dict[str, list[float]]:
        """:func:`paired_seconds` (``rounds`` rounds of 20 ms bursts; 3 rounds of
        5 ms in quick mode), after the same 0.2 s pause as :func:`median_seconds`."""
        if self.quick:
            return paired_seconds(functions, rounds=3, burst=0.005, warmup=1)
        time.sleep(0.2)
        return paired_seconds(functions, rounds=rounds)

    def progress(self, message: str) -> None:
        """One progress line on stderr (the tables go to stdout)."""
        print(f"  [{self.suite} {self.threads}t] {message}", file=sys.stderr, flush=True)


def _set_threads(threads: int, peers: list[str]) -> str | None:
    """Set numba's and torch's threads in this process; returns a note when
    OpenBLAS may be running another count (in-process runs)."""
    import numba
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    if "torch" in peers:
        import torch
        torch.set_num_threads(threads)
    started = os.environ.get("OPENBLAS_NUM_THREADS")
    if started != str(threads):
        return (f"in-process run: OpenBLAS keeps its startup threads "
                f"(OPENBLAS_NUM_THREADS={started or 'unset'}); numba and torch use {threads}")
    return None


def measure_here(suite_name: str, threads: int, quick: bool, peers: list[str],
                 options: dict | None = None) -> dict:
    """Run one suite at one thread count in this process; the result dict the
    tables, JSON and plot are made from."""
    from . import load
    suite = load(suite_name)
    note = _set_threads(threads, peers)
    print(f"  [{suite_name} {threads}t] measuring the sgemm peak", file=sys.stderr, flush=True)
    peak = sgemm_peak_gflops(512 if quick else 1024, min_time=0.05 if quick else 0.3)
    run = Run(suite_name, threads, quick, list(peers), dict(options or {}))
    started = time.perf_counter()
    result = suite.measure(run)
    result.update({"suite": suite_name, "threads": threads, "quick": quick, "peers": list(peers),
                   "peak_gflops": peak, "peak_n": 512 if quick else 1024,
                   "seconds": time.perf_counter() - started, "machine": machine_facts(),
                   "versions": peer_versions(peers), "note": note})
    return result


def _child_main() -> None:
    """Entry of a per-thread-count process: arguments as JSON in argv[1]."""
    args = json.loads(sys.argv[1])
    result = measure_here(args["suite"], args["threads"], args["quick"], args["peers"],
                          args["options"])
    print(_RESULT_MARK + json.dumps(result), flush=True)


def _package_root() -> str:
    """The directory holding the ``jitnn`` package this process imported, so
    child processes import the same one whatever their working directory."""
    import jitnn
    return os.path.dirname(os.path.dirname(os.path.abspath(jitnn.__file__)))


def _child_command(code: str) -> list[str]:
    root = _package_root()
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {root!r}); {code}"]


def _end_with_parent():
    """A ``preexec_fn`` that makes the child end when this process does (Linux's
    parent-death signal), or None elsewhere. Without it a benchmark stopped by
    a signal leaves its per-thread-count child running, timing on cores that
    the next run then shares with it; ``subprocess.run`` ends the child itself
    on an exception such as KeyboardInterrupt."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import signal
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_parent_death_signal() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)
    return set_parent_death_signal


def measure_in_child(suite_name: str, threads: int, quick: bool, peers: list[str],
                     options: dict | None = None) -> dict:
    """Run one suite at one thread count in a fresh process with every
    library's thread variable set before it starts; its progress lines pass
    through to stderr."""
    env = {**os.environ, **{name: str(threads) for name in THREAD_VARS}}
    args = json.dumps({"suite": suite_name, "threads": threads, "quick": quick, "peers": peers,
                       "options": options or {}})
    command = _child_command(
        "from jitnn.bench.harness import _child_main; sys.argv[1:] = [" + repr(args) + "]; "
        "_child_main()")
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True,
                          cwd=tempfile.gettempdir(), preexec_fn=_end_with_parent())
    lines = [line for line in done.stdout.splitlines() if line.startswith(_RESULT_MARK)]
    if done.returncode != 0 or not lines:
        sys.stderr.write(done.stdout)
        raise RuntimeError(f"jitnn bench {suite_name}: the {threads}-thread process failed "
                           f"(exit code {done.returncode})")
    return json.loads(lines[-1][len(_RESULT_MARK):])


def ort_session(model, threads: int):
    """An ONNX Runtime CPU session for an ``onnx`` model with ``threads`` intra-op threads."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def openvino_runner(model, threads: int) -> Callable[[dict], list]:
    """An OpenVINO CPU run of an ONNX model (an ``onnx`` model, its bytes or a
    path): ``run(feed)`` returns the outputs as arrays, as ONNX Runtime's
    ``session.run(None, feed)``. ``threads`` inference threads, the latency
    hint (one stream), and float32 arithmetic: the CPU plugin's default
    precision is bfloat16 on CPUs with bf16 instructions (AVX512_BF16, AMX:
    AMD Zen 4 among them), which would time another computation."""
    import openvino

    core = openvino.Core()
    if hasattr(model, "SerializeToString"):
        model = model.SerializeToString()
    source = core.read_model(model) if isinstance(model, bytes) else os.fspath(model)
    compiled = core.compile_model(source, "CPU", {
        "INFERENCE_NUM_THREADS": threads, "PERFORMANCE_HINT": "LATENCY",
        "INFERENCE_PRECISION_HINT": "f32"})
    request = compiled.create_infer_request()

    def run(feed: dict) -> list:
        # the outputs copied out (not views of the request's buffers), as ORT's
        return list(request.infer(feed, share_inputs=True).values())
    return run


def onnx_model(node_kwargs: dict, inputs: dict, initializers: dict):
    """A one-node ONNX model: ``node_kwargs`` for ``onnx.helper.make_node``
    (output "y"), graph inputs and initializers as ``{name: float32 array}``."""
    from onnx import TensorProto, helper, numpy_helper
    node = helper.make_node(**node_kwargs, outputs=["y"])
    graph = helper.make_graph(
        [node], node_kwargs["op_type"],
        [helper.make_tensor_value_info(name, TensorProto.FLOAT, list(a.shape))
         for name, a in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(a, name) for name, a in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# --- compile time ----------------------------------------------------------------

def compile_times(probe: str) -> dict:
    """Run ``probe`` (Python code printing a JSON dict of seconds) twice in
    fresh processes sharing an empty kernel cache: the first run compiles
    ("cold"), the second loads from the cache ("cached")."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "JITNN_CACHE_DIR": cache}
        runs = []
        for _ in range(2):
            done = subprocess.run(_child_command(probe), env=env, cwd=cache,
                                  capture_output=True, text=True)
            if done.returncode != 0:
                sys.stderr.write(done.stderr)
                raise RuntimeError("compile-time probe failed")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"cold": runs[0], "cached": runs[1]}


def compile_table(compile_info: dict, label: str) -> list[str]:
    """Markdown rows of :func:`compile_times`' result, one per kernel or path."""
    lines = [f"| {label} | cold compile s | load from cache s |", "|---|---:|---:|"]
    for name, cold in compile_info["cold"].items():
        if name != "import_s":
            lines.append(f"| {name} | {cold:.2f} | {compile_info['cached'][name]:.3f} |")
    return lines


# --- tables ----------------------------------------------------------------------

@dataclass
class Column:
    """One table column: ``value(row)`` gives a number or text (None or nan
    print as "-"); ``peer`` drops the column when that peer did not run."""
    header: str
    value: Callable[[dict], object]
    fmt: str = ".1f"
    peer: str | None = None
    numeric: bool = True


def _cell(value, fmt: str) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and not math.isfinite(value):
        return "-"
    if isinstance(value, str):
        return value
    if fmt == "%":
        return f"{100 * value:.0f} %"
    return format(value, fmt)


def markdown_table(columns: list[Column], rows: list[dict], peers: Iterable[str]) -> list[str]:
    """A markdown table of ``rows``, leaving out the columns of absent peers."""
    peers = set(peers)
    shown = [c for c in columns if c.peer is None or c.peer in peers]
    lines = ["| " + " | ".join(c.header for c in shown) + " |",
             "|" + "|".join("---:" if c.numeric else "---" for c in shown) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(c.value(row), c.fmt) for c in shown) + " |")
    return lines


def thread_heading(result: dict, command: str) -> str:
    """The line above each table: thread count, the peak of the run, the
    command and the date."""
    t = result["threads"]
    facts = result["machine"]
    return (f"**{t} thread{'s' if t != 1 else ''}** (OpenBLAS sgemm {result['peak_n']}^3 "
            f"peak in this run: {result['peak_gflops']:.0f} GFLOP/s) - `{command}`, "
            f"{facts['date']}")


def facts_line(result: dict) -> str:
    facts = result["machine"]
    peers = "".join(f", {name} {version}" for name, version in result["versions"].items()
                    if name != "numpy")
    return (f"{facts['date']}, {facts['cpu']} ({facts['simd']}, {facts['cores']} cores), "
            f"jitnn {facts['jitnn']}, numba {facts['numba']} (LLVM {facts['llvm']}), "
            f"numpy {facts['numpy']} ({facts['blas']}){peers}, python {facts['python']}.")


# --- a whole benchmark run: suites x thread counts --------------------------------

def default_threads() -> list[int]:
    """1 and all cores."""
    return sorted({1, os.cpu_count() or 1})


def run_suite(name: str, threads: list[int], quick: bool, requested_peers: Iterable[str],
              in_process: bool | None = None, options: dict | None = None) -> dict:
    """Measure suite ``name`` at each thread count (each in its own process,
    unless ``in_process``; by default a quick run with one thread count runs
    in this process) and, in a full run, its compile-time probe."""
    from . import load
    suite = load(name)
    peers, skipped = resolve_peers(list(requested_peers), getattr(suite, "PEERS", ()))
    for line in skipped:
        print(f"  [{name}] {line}", file=sys.stderr, flush=True)
    if in_process is None:
        in_process = quick and len(threads) == 1
    results = []
    for count in threads:
        if in_process:
            results.append(measure_here(name, count, quick, peers, options))
        else:
            results.append(measure_in_child(name, count, quick, peers, options))
    compile_info = None
    probe = getattr(suite, "COMPILE_PROBE", None)
    if probe and not quick:
        print(f"  [{name}] compile-time probe (fresh processes, empty kernel cache)",
              file=sys.stderr, flush=True)
        compile_info = compile_times(probe)
    return {"suite": name, "unit": suite.UNIT, "description": suite.DESCRIPTION,
            "peers": peers, "skipped": skipped, "in_process": in_process,
            "results": results, "compile": compile_info}


def report(suite_run: dict, command: str) -> str:
    """The markdown of one suite's run: command, facts, skipped peers, then
    per thread count a heading (threads, peak, command, date) and the tables."""
    from . import load
    suite = load(suite_run["suite"])
    results = suite_run["results"]
    lines = [f"## {suite_run['suite']}: {suite_run['description']}", "",
             f"Command: `{command}`", "",
             facts_line(results[0]) + f" {suite_run['unit']}, median of repeats after "
             "warm-up (compile time excluded; see the compile table)."]
    lines += [f"{line}." for line in suite_run["skipped"]]
    if results[0]["quick"]:
        lines.append("Quick mode: tiny shapes and few repeats, to check that the suite runs; "
                     "not figures to record.")
    for result in results:
        lines += ["", thread_heading(result, command)]
        if result.get("note"):
            lines += ["", f"({result['note']})"]
        lines += [""] + list(suite.render(result))
    if hasattr(suite, "summary"):
        extra = list(suite.summary(results))
        if extra:
            lines += [""] + extra
    info = suite_run["compile"]
    if info:
        lines.append("")
        if "import_s" in info["cold"]:
            lines += [f"import jitnn (nothing compiled, empty cache): "
                      f"{info['cold']['import_s'] * 1e3:.0f} ms", ""]
        lines += compile_table(info, getattr(suite, "COMPILE_LABEL", "kernel"))
    return "\n".join(lines)


def to_json(suite_runs: list[dict], command: str, threads: list[int], quick: bool,
            requested_peers: Iterable[str]) -> dict:
    """Everything measured: the command, machine facts, each (suite, thread
    count) run and a flat list of every table row tagged with suite and threads."""
    runs, rows = [], []
    for suite_run in suite_runs:
        for result in suite_run["results"]:
            runs.append({key: value for key, value in result.items() if key != "rows"})
            rows += [{"suite": suite_run["suite"], **row, "threads": result["threads"]}
                     for row in result["rows"]]
    first = suite_runs[0]["results"][0] if suite_runs and suite_runs[0]["results"] else {}
    return {
        "command": command, "date": str(datetime.date.today()),
        "machine": first.get("machine"), "threads": threads, "quick": quick,
        "peers_requested": list(requested_peers),
        "suites": {s["suite"]: {key: s[key] for key in
                                ("unit", "description", "peers", "skipped", "in_process",
                                 "compile")} for s in suite_runs},
        "runs": runs, "rows": rows,
    }


def _default_plot(ax, result: dict, suite, unit: str) -> None:
    series = [(legend, key) for legend, key, *peer in suite.PLOT_COLUMNS
              if not peer or peer[0] in result["peers"]]
    rows = result["rows"]
    labels = [suite.row_label(row) if hasattr(suite, "row_label") else row.get("label", "?")
              for row in rows]
    height = 0.8 / max(1, len(series))
    for k, (legend, key) in enumerate(series):
        values = [row.get(key) if row.get(key) is not None and math.isfinite(row.get(key))
                  else 0.0 for row in rows]
        ax.barh([i + k * height for i in range(len(rows))], values, height=height, label=legend)
    ax.set_yticks([i + 0.4 - height / 2 for i in range(len(rows))])
    ax.set_yticklabels(labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(unit)
    if unit == "GFLOP/s":
        ax.axvline(result["peak_gflops"], color="k", linestyle="--", linewidth=1,
                   label="OpenBLAS sgemm peak")
    ax.legend(fontsize=7)


def plot(suite_runs: list[dict], path: str) -> str:
    """Write a PNG with one panel per (suite, thread count); returns a line
    saying where it went, or how to get matplotlib."""
    try:
        from matplotlib.figure import Figure  # no pyplot: leaves the backend alone
    except ImportError:
        return ("--plot needs matplotlib, which is not installed: pip install matplotlib "
                "(or pip install 'jitnn[bench]')")
    from . import load
    panels = [(s, result) for s in suite_runs for result in s["results"]]
    sizes = [min(14.0, max(3.0, 0.14 * len(result["rows"]) * max(1, len(load(s["suite"]).PLOT_COLUMNS))))
             for s, result in panels]
    fig = Figure(figsize=(10, sum(sizes) + 0.5))
    axes = fig.subplots(len(panels), 1, gridspec_kw={"height_ratios": sizes}, squeeze=False)
    for ax, (suite_run, result) in zip(axes[:, 0], panels):
        suite = load(suite_run["suite"])
        if hasattr(suite, "plot"):
            suite.plot(ax, result)
        else:
            _default_plot(ax, result, suite, suite_run["unit"])
        t = result["threads"]
        ax.set_title(f"jitnn bench {suite_run['suite']}, {t} thread{'s' if t != 1 else ''}, "
                     f"{result['machine']['date']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return f"plot written to {path}"


def bench(suites: list[str], threads: list[int] | None = None,
          peers: Iterable[str] = tuple(PEERS), quick: bool = False,
          json_path: str | None = None, plot_path: str | None = None,
          command: str = "jitnn bench", in_process: bool | None = None,
          options: dict | None = None, out=None) -> int:
    """Run ``suites`` and print their markdown reports to ``out`` (stdout);
    optionally write the JSON and the PNG. Returns an exit code."""
    out = out or sys.stdout
    threads = threads or default_threads()
    peers = list(peers)
    suite_runs = []
    for name in suites:
        suite_run = run_suite(name, threads, quick, peers, in_process, options)
        suite_runs.append(suite_run)
        print(report(suite_run, command), file=out, flush=True)
        print(file=out)
    if json_path:
        with open(json_path, "w") as handle:
            json.dump(to_json(suite_runs, command, threads, quick, peers), handle, indent=1)
        print(f"JSON written to {json_path}", file=out)
    if plot_path:
        print(plot(suite_runs, plot_path), file=out)
    return 0


def script_main(suite: str, doc: str, argv: list[str] | None = None,
                batches: bool = False, models: bool = False) -> int:
    """The ``benchmarks/<suite>.py`` command line: ``--threads 1,2``, ``--quick``,
    ``--peers``, ``--json``, ``--plot`` (and ``--batches 1,8`` for conv2d,
    ``--models a,b`` and ``--memory`` for the zoo), the same run as ``jitnn
    bench <suite>``."""
    import argparse
    import shlex
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    parser.add_argument("--quick", action="store_true", help="tiny shapes only")
    parser.add_argument("--peers", default=",".join(PEERS),
                        help="comma list of peers (torch, onnxruntime, openvino, numpy)")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    parser.add_argument("--plot", help="also draw a PNG (needs matplotlib)")
    if batches:
        parser.add_argument("--batches", default="1,8", help="batch sizes, e.g. 1,8")
    if models:
        parser.add_argument("--models", default="", help="a comma list of the zoo's models")
        parser.add_argument("--memory", action="store_true", help="also peak memory per model")
    args = parser.parse_args(argv)
    options = {"batches": [int(b) for b in args.batches.split(",")]} if batches else {}
    if models:
        options.update(models=[m for m in args.models.split(",") if m], memory=args.memory)
    return bench([suite], [int(t) for t in args.threads.split(",")],
                 [p for p in args.peers.split(",") if p], args.quick, args.json, args.plot,
                 command=shlex.join(["python", f"benchmarks/{suite}.py", *argv]),
                 options=options or None)
