"""Compiling ahead in worker processes (jitnn/compile_pool.py) and
``jitnn.warmup`` (jitnn/precompile.py): the scout finds what a run would
compile without running its kernels, workers compile it into the shared
cache, and the run then loads every kernel; a plan's first run in a cold
process has a forked child scout it. Each end-to-end case runs in a process
of its own on an empty cache directory, with cheap kernels (pooling,
reorders, one element-wise pass)."""

import io
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from jitnn import compile_pool

# A small plan of three kernel steps (max pooling, average pooling, global
# average pooling, on plain nchw data): its kernels, on 1 thread, compile in
# a few seconds.
_WORKLOAD = """
import numpy as np, jitnn
def workload():
    ctx = jitnn.Context(num_threads=1)
    x = ctx.tensor(np.arange(2 * 9 * 8 * 8, dtype=np.float32).reshape(2, 9, 8, 8))
    pooled = jitnn.average_pool2d(jitnn.max_pool2d(x, 2, strides=2), 2, strides=2)
    return jitnn.global_average_pool2d(pooled).numpy()
def expected():
    x = np.arange(2 * 9 * 8 * 8, dtype=np.float32).reshape(2, 9, 8, 8)
    return x.reshape(2, 9, 4, 2, 4, 2).max(axis=(3, 5)).mean(axis=(2, 3), keepdims=True)
"""

# numba's compile events of jitnn's kernels in this process (loads from the
# cache are not compile events)
_COUNT_COMPILES = """
import numba.core.event as _event
COMPILED = []
class _Listener(_event.Listener):
    def on_start(self, ev):
        f = ev.data["dispatcher"].py_func
        if f.__module__.startswith("jitnn.kernels"):
            COMPILED.append(f.__qualname__)
    def on_end(self, ev):
        pass
_event.register("numba:compile", _Listener())
"""


def _run(code: str, cache, **env) -> dict:
    environment = {**os.environ, "JITNN_CACHE_DIR": str(cache), "JITNN_PROGRESS": "0", **env}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=environment, timeout=600)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_scout_finds_what_workers_then_compile_and_the_run_loads(tmp_path):
    found = _run(_WORKLOAD + """
import json
from jitnn import compile_pool
requests = compile_pool.scout(workload)
results = compile_pool.compile_ahead(requests, workers=1, out=None)
print(json.dumps({"names": [r.name for r in requests], "results": results}))
""", tmp_path)
    assert found["names"] and len(found["results"]) == len(found["names"])
    assert all(error is None for _, _, error in found["results"]), found["results"]
    # a new process: every kernel comes from the cache, the answer is right
    run = _run(_COUNT_COMPILES + _WORKLOAD + """
import json
out = workload()
print(json.dumps({"compiled": COMPILED, "ok": bool(np.allclose(out, expected()))}))
""", tmp_path)
    assert run["ok"]
    assert not [name for name in run["compiled"] if name in found["names"]], run["compiled"]


def test_a_cold_plan_is_scouted_in_a_fork_and_compiled_by_a_worker(tmp_path):
    log = tmp_path / "pool.log"
    run = _run(_WORKLOAD + """
import json, time
out = workload()
time.sleep(0.5)        # the scout's report reaches the log from a thread
print(json.dumps({"ok": bool(np.allclose(out, expected()))}))
""", tmp_path / "cache", JITNN_COMPILE_WORKERS="1", JITNN_POOL_LOG=str(log))
    assert run["ok"]
    lines = log.read_text().splitlines()
    scouted = [line for line in lines if "scout found" in line]
    assert scouted and "scout found 0" not in scouted[0], lines
    # each kernel the scout found compiled once: by the run or by the worker
    # (the run waits for a kernel a worker is compiling, then loads it)
    parent = scouted[0].split()[1]
    wanted = scouted[0].split("scout found ")[1].split(": ", 1)[1]
    by_process: dict = {}
    for line in lines:
        if "compiled here: " in line:
            name = line.split("compiled here: ")[1].split()[0]
            if repr(name) in wanted:
                by_process.setdefault(name, set()).add(line.split()[1] == parent)
    assert by_process and all(len(where) == 1 for where in by_process.values()), lines


def test_warmup_of_an_onnx_model_then_a_run_that_compiles_nothing(tmp_path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         helper.make_node("GlobalAveragePool", ["p"], ["y"])], "pools",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 9, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 9, 1, 1])])
    path = tmp_path / "pools.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    warmed = _run(f"""
import json, io, jitnn
report = jitnn.warmup({str(path)!r}, threads=1, workers=1, out=io.StringIO())
print(json.dumps({{"needed": report.needed, "compiled": report.compiled,
                  "failed": report.failed, "text": str(report)}}))
""", tmp_path / "cache")
    assert warmed["needed"] >= 2 and warmed["compiled"] == warmed["needed"], warmed
    assert not warmed["failed"] and "pools.onnx" in warmed["text"]
    run = _run(_COUNT_COMPILES + f"""
import json, numpy as np, jitnn, jitnn.onnx
x = np.arange(2 * 9 * 8 * 8, dtype=np.float32).reshape(2, 9, 8, 8)
y = jitnn.onnx.run({str(path)!r}, {{"x": x}}, jitnn.Context(num_threads=1))["y"]
want = x.reshape(2, 9, 4, 2, 4, 2).max(axis=(3, 5)).mean(axis=(2, 3), keepdims=True)
print(json.dumps({{"compiled": COMPILED, "ok": bool(np.allclose(y, want))}}))
""", tmp_path / "cache", JITNN_COMPILE_WORKERS="0")
    assert run["ok"]
    assert not run["compiled"], run["compiled"]     # all from the cache


# A conv the tuner has two candidates for (3x3, stride 1: direct and
# Winograd), measuring on: the scout runs both, the real cold run only the
# formula's (Winograd) until the other is compiled. The run's own compiles
# (numba's compile events of jitnn's kernels called from Python, before
# numba retypes them with literal arguments) get the key the scout gives.
_TUNED_CONV = """
import json, threading
import numpy as np, jitnn
import numba.core.event as event
from numba.core import types
from jitnn import compile_pool, registry
from jitnn.kernels import _linking
rng = np.random.default_rng(0)
x = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
w = (0.2 * rng.standard_normal((16, 16, 3, 3))).astype(np.float32)
def workload():
    ctx = jitnn.Context(num_threads=1)
    return jitnn.relu(jitnn.conv2d(ctx.tensor(x), ctx.tensor(w), padding=1)).numpy()
requests = compile_pool.scout(workload)
compiled, depth = [], threading.local()
class Compiles(event.Listener):
    def on_start(self, ev):
        depth.value = getattr(depth, "value", 0) + 1
        kernel, args = ev.data["dispatcher"], tuple(ev.data["args"])
        recipe = _linking.kernel_recipe(kernel)
        if depth.value == 1 and recipe is not None and not compile_pool.returns_value(
                kernel.py_func) and not any(isinstance(a, types.Literal) for a in args):
            compiled.append(((recipe, args), kernel.py_func.__qualname__))
    def on_end(self, ev):
        depth.value -= 1
event.register("numba:compile", Compiles())
y = workload()
want = np.maximum(registry.reference("conv2d")(x, w, padding=1), 0)
found = {(r.recipe, r.argtypes): r for r in requests}
print(json.dumps({
    "needed": [r.name for r in requests if not r.optional],
    "optional": [r.name for r in requests if r.optional],
    "compiled": [name for _, name in compiled],
    "missed": [name for key, name in compiled if key not in found],
    "compiled_optional": [name for key, name in compiled if key in found and found[key].optional],
    "ok": bool(np.allclose(y, want, rtol=1e-4, atol=1e-4))}))
"""


def test_the_scout_predicts_every_kernel_a_cold_run_compiles(tmp_path):
    run = _run(_TUNED_CONV, tmp_path, JITNN_COMPILE_WORKERS="0", JITNN_TUNE="1")
    assert run["ok"]
    # the run compiled (an empty cache), the Winograd driver among them ...
    assert any(name.startswith("winograd_driver") for name in run["compiled"]), run
    # ... and every one of its kernels was predicted, as needed
    assert run["missed"] == [] and run["compiled_optional"] == [], run
    # the direct candidate's driver was predicted too, as optional, and not compiled
    assert any(name.startswith("conv_driver") for name in run["optional"]), run
    assert not any(name.startswith("conv_driver") for name in run["compiled"]), run
    assert not set(run["optional"]) & set(run["needed"]), run


def test_ahead_order_puts_the_needed_last_found_first_then_the_optional():
    def request(name, optional=False):
        return compile_pool.Request((name,), (), (), name, optional)
    found = [request("a"), request("b", True), request("c"), request("d", True), request("e")]
    assert [r.name for r in compile_pool.ahead_order(found)] == ["e", "c", "a", "b", "d"]


def test_a_plan_with_only_optional_kernels_left_starts_no_worker():
    class Pool:
        def __init__(self):
            self.submitted = []

        def submit(self, request):
            self.submitted.append(request.name)
            return compile_pool.concurrent.futures.Future()

    def request(name, optional=False):
        return compile_pool.Request((name,), (), (), name, optional)
    warm = Pool()
    assert compile_pool.submit_found(warm, [request("b", True), request("d", True)]) == 0
    assert warm.submitted == []
    cold = Pool()
    found = compile_pool.ahead_order([request("a"), request("b", True), request("c")])
    assert compile_pool.submit_found(cold, found) == 3 and cold.submitted == ["c", "a", "b"]


def test_returns_value_reads_the_code():
    def nothing(x):
        x[0] = 1

    def bare_return(x):
        if x[0]:
            return
        x[0] = 1

    def something(x):
        return x[0] + 1

    assert not compile_pool.returns_value(nothing)
    assert not compile_pool.returns_value(bare_return)
    assert compile_pool.returns_value(something)


def test_default_workers_follow_the_environment(monkeypatch):
    monkeypatch.setenv("JITNN_COMPILE_WORKERS", "0")
    assert compile_pool.default_workers() == 0
    monkeypatch.setenv("JITNN_COMPILE_WORKERS", "3")
    assert compile_pool.default_workers(compiling_too=True) == 3
    monkeypatch.delenv("JITNN_COMPILE_WORKERS")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if compile_pool._config.CACHE_WRITABLE:
        assert compile_pool.default_workers() == cores
        assert compile_pool.default_workers(compiling_too=True) == cores - 1


def test_progress_shows_after_a_second_only():
    out = io.StringIO()
    quick = compile_pool.Progress(3, "compiling", out, after=1.0)
    for name in "abc":
        quick.step(name)
    quick.finish()
    assert out.getvalue() == ""             # finished within the second: silent
    slow = compile_pool.Progress(2, "compiling", out, after=0.0)
    slow.step("a")
    slow.step("b", "TypingError: no")
    slow.finish()
    text = out.getvalue()
    assert "compiling: 2 kernels ..." in text
    assert "2 kernels in" in text and "1 failed" in text


def test_warmup_refuses_bad_thread_counts():
    import jitnn
    for bad in (0, [1, 0], "2", []):
        with pytest.raises(ValueError, match="threads"):
            jitnn.warmup(threads=bad, workers=0)
    report = jitnn.warmup(threads=1, workers=0)     # no workers: nothing compiles
    assert report.needed == 0 and report.compiled == 0 and report.skipped
    assert np.isfinite(report.seconds)


def test_info_says_where_the_cache_is_what_it_holds_and_whether_it_fits(tmp_path):
    (tmp_path / "numba-0.1_other-cpu").mkdir()          # another configuration's directory
    code = """
import json, io, contextlib
from jitnn import cli
out = io.StringIO()
with contextlib.redirect_stdout(out):
    cli.main(["info"])
print(json.dumps(out.getvalue()))
"""
    text = _run(code, tmp_path)
    lines = {line.split("  ", 1)[0].strip(): line.split("  ", 1)[1].strip()
             for line in text.splitlines() if "  " in line}
    assert lines["kernel cache"].startswith(str(tmp_path))
    assert "other configuration" in lines["cache contents"]
    # a fresh process compiled its thread-layer probe: this CPU's kernels are there
    assert "built for this CPU" in lines["cache contents"], lines


def test_the_warmup_command(tmp_path, capsys):
    from jitnn import cli
    assert cli.main(["warmup", "--workers", "0", "--threads", "1"]) == 0
    assert "no worker processes" in capsys.readouterr().out
