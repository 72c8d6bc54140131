"""``jitnn bench``: every suite runs in quick mode and prints its tables; the
JSON holds what it promises. No timing assertions: only that things run."""

import json
import os
import pathlib
import runpy
import subprocess
import sys
import time

import pytest

import jitnn
from jitnn import cli
from jitnn.bench import SUITES, harness, load

ROOT = pathlib.Path(__file__).resolve().parent.parent
MACHINE_FACTS = ("date", "cpu", "simd", "cores", "numba", "llvm", "numpy", "python", "jitnn")


def _bench(capsys, tmp_path, *args):
    path = tmp_path / "out.json"
    assert cli.main(["bench", *args, "--quick", "--threads", "1", "--json", str(path)]) == 0
    out = capsys.readouterr()
    return out.out, out.err, json.loads(path.read_text())


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of the markdown table whose header line starts with ``header``."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def _check_common(out, err, data, suite, command_part):
    assert f"## {suite}:" in out
    assert "Command: `jitnn bench " + suite in out
    assert "**1 thread** (OpenBLAS sgemm" in out          # thread count + peak above the table
    assert data["machine"]["date"] in out                 # the date too
    assert f"[{suite} 1t]" in err                         # progress lines go to stderr
    assert data["command"].startswith(f"jitnn bench {suite}") and command_part in data["command"]
    assert data["threads"] == [1] and data["quick"] is True
    for fact in MACHINE_FACTS:
        assert data["machine"][fact] not in (None, ""), fact
    info = data["suites"][suite]
    assert {"unit", "description", "peers", "skipped", "in_process", "compile"} <= set(info)
    assert info["in_process"] is True and info["compile"] is None   # no probe in quick mode
    (run,) = data["runs"]
    assert run["suite"] == suite and run["threads"] == 1 and run["peak_gflops"] > 0
    assert run["machine"]["cpu"] == data["machine"]["cpu"]
    assert data["rows"] and all(r["suite"] == suite and r["threads"] == 1 for r in data["rows"])
    return info, run


def test_reorder_quick(capsys, tmp_path):
    out, err, data = _bench(capsys, tmp_path, "reorder", "--peers", "numpy")
    info, _ = _check_common(out, err, data, "reorder", "--peers numpy")
    assert info["unit"] == "GB/s" and info["peers"] == ["numpy"]
    rows = _table_rows(out, "| reorder | shape |")
    names = {r[0] for r in rows}
    assert names == {"nchw -> nChw8c", "nChw8c -> nchw", "nhwc -> nChw8c", "nChw8c -> nhwc",
                     "oihw -> OIhw8i8o"}
    assert len(rows) == len(data["rows"])
    for row in data["rows"]:
        assert {"reorder", "shape", "mbytes", "jitnn_gbs", "copyto_gbs", "copyto_ratio",
                "numpy_gbs"} <= set(row)
        assert row["jitnn_gbs"] > 0 and row["numpy_gbs"] > 0 and row["copyto_ratio"] > 0


def test_paired_seconds_times_every_function_in_every_round():
    calls = {"fast": 0, "slow": 0}

    def fast():
        calls["fast"] += 1

    def slow():
        calls["slow"] += 1
        time.sleep(0.002)

    seconds = harness.paired_seconds({"fast": fast, "slow": slow}, rounds=4, burst=0.005)
    assert set(seconds) == {"fast", "slow"}
    assert all(len(times) == 4 for times in seconds.values())
    assert all(fast_s < 0.002 <= slow_s for fast_s, slow_s in zip(seconds["fast"], seconds["slow"]))
    # 2 warm-up calls, then per round a warm call and a burst of at least 3
    assert calls["slow"] >= 2 + 4 * 4 and calls["fast"] > calls["slow"]


def test_matmul_quick_reports_a_missing_peer(capsys, tmp_path, monkeypatch):
    real = harness.missing_modules
    monkeypatch.setattr(harness, "missing_modules",
                        lambda peer: ["onnxruntime"] if peer == "onnxruntime" else real(peer))
    out, err, data = _bench(capsys, tmp_path, "matmul", "--peers", "numpy,onnxruntime")
    info, run = _check_common(out, err, data, "matmul", "--peers numpy,onnxruntime")
    assert info["peers"] == ["numpy"]
    assert any("onnxruntime skipped" in line for line in info["skipped"])
    assert "onnxruntime skipped: onnxruntime not installed" in out
    header = "| shape | jitnn kernel | jitnn op | numpy | kernel / numpy | op / numpy | % of peak |"
    assert header in out                                  # no torch/onnxruntime columns
    assert {r[0] for r in _table_rows(out, "| shape |")} == {r["shape"] for r in data["rows"]}
    assert "per-call time of a 4x4 product" in out
    assert set(run["tiny_s"]) == {"jitnn kernel", "jitnn op", "numpy"}
    for row in data["rows"]:
        assert row["jitnn_kernel"] > 0 and row["jitnn_op"] > 0 and row["numpy"] > 0
        assert row["torch"] is None and row["onnxruntime"] is None


@pytest.mark.slow     # compiles every conv path: ~50 s with a cold kernel cache
def test_conv2d_quick_with_every_installed_peer(capsys, tmp_path):
    out, err, data = _bench(capsys, tmp_path, "conv2d")
    info, run = _check_common(out, err, data, "conv2d", "conv2d")
    header = "| layer | batch | jitnn blocked |"
    rows = _table_rows(out, header)
    assert [r[0] for r in rows] == ["conv1 7x7/2", "3x3 64ch 56", "1x1 256->64 56", "dw 144ch 56"]
    assert all(r[-1].endswith("%") for r in rows)        # fraction of peak
    if harness.installed("torch") or harness.installed("onnxruntime"):
        assert "geomean resnet50 batch 1" in out            # ratios need a peer
    for peer in ("torch", "onnxruntime"):
        if harness.installed(peer):
            assert peer in info["peers"]
        else:
            assert any(line.startswith(peer) for line in info["skipped"])
    for row in data["rows"]:
        assert {"net", "layer", "batch", "gflop", "jitnn_blocked", "jitnn_nchw", "torch_blocked",
                "torch_nchw", "onnxruntime"} <= set(row)
        assert row["jitnn_blocked"] > 0 and row["jitnn_nchw"] > 0
        if "torch" in info["peers"]:
            assert row["torch_nchw"] > 0
        if "onnxruntime" in info["peers"]:
            assert row["onnxruntime"] > 0
    if "torch" in info["peers"]:
        assert "| torch blocked | ratio |" in out and "torch" in run["versions"]


@pytest.mark.slow     # compiles the conv drivers of five block sizes: ~90 s cold
def test_blocks_quick_with_plot(capsys, tmp_path):
    png = tmp_path / "blocks.png"
    out, err, data = _bench(capsys, tmp_path, "blocks", "--peers", "numpy", "--plot", str(png))
    _check_common(out, err, data, "blocks", "--plot")
    rows = _table_rows(out, "| C | block |")
    blocked = [(int(r[0]), int(r[1])) for r in rows if r[2].startswith("nChw")]
    assert blocked == [(c, b) for c in (3, 16, 64) for b in (1, 4, 8, 16, 32)]
    by_key = {(r["channels"], r["block"], r["plain_input"]): r for r in data["rows"]}
    assert by_key[(3, 8, False)]["memory_factor"] == pytest.approx(8 / 3)   # C = 3 -> 8: 2.7x
    assert by_key[(3, 8, True)]["memory_factor"] == 1.0                     # first-layer path
    assert by_key[(16, 32, False)]["memory_factor"] == 2.0
    assert by_key[(3, 8, False)]["useful_work"] == pytest.approx(9 / 64)
    assert "| 3 | 8 | nChw8c | 8 | 2.67x |" in out
    assert all(r["gflops"] > 0 and r["vs_block8"] > 0 for r in data["rows"])
    assert by_key[(64, 8, False)]["vs_block8"] == 1.0
    assert "fastest block per C" in out
    if _has("matplotlib"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"plot written to {png}" in out
    else:
        assert "pip install matplotlib" in out


def _has(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is not None


def test_plot_without_matplotlib_says_how_to_get_it(monkeypatch, tmp_path):
    import sys
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    message = harness.plot([], str(tmp_path / "x.png"))
    assert "pip install matplotlib" in message and not (tmp_path / "x.png").exists()


def test_a_thread_count_runs_in_its_own_process():
    run = harness.run_suite("reorder", [1], quick=True, requested_peers=[], in_process=False)
    (result,) = run["results"]
    assert run["in_process"] is False and result["threads"] == 1
    assert result["note"] is None                 # OPENBLAS_NUM_THREADS was set before numpy
    assert result["rows"] and result["peers"] == []


_PARENT = """
import subprocess, sys
from jitnn.bench import harness
subprocess.run([sys.executable, "-c",
                "import os, time; print(os.getpid(), flush=True); time.sleep(120)"],
               preexec_fn=harness._end_with_parent())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")
def test_a_killed_bench_takes_its_per_thread_child_with_it():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE,
                              text=True, cwd=ROOT)
    child = int(parent.stdout.readline())
    parent.kill()                                 # no Python cleanup runs: SIGKILL
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        os.kill(child, 9)
        pytest.fail("the child outlived its killed parent")


def test_every_suite_defines_the_registry_api():
    for name in SUITES:
        suite = load(name)
        for attribute in ("DESCRIPTION", "UNIT", "PEERS", "measure", "render"):
            assert hasattr(suite, attribute), (name, attribute)
        assert hasattr(suite, "PLOT_COLUMNS") or hasattr(suite, "plot"), name
        assert set(suite.PEERS) <= set(harness.PEERS), name
    with pytest.raises(ValueError, match="unknown suite 'nope'"):
        load("nope")


def test_bench_help_and_argument_errors(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["bench", "--help"])
    assert exit_info.value.code == 0
    help_text = capsys.readouterr().out
    for name in (*SUITES, "all", "--threads", "--peers", "--quick", "--json", "--plot"):
        assert name in help_text
    with pytest.raises(SystemExit, match="unknown peer tensorflow"):
        cli.main(["bench", "matmul", "--peers", "numpy,tensorflow"])
    with pytest.raises(SystemExit, match="--threads expects positive integers"):
        cli.main(["bench", "matmul", "--threads", "0"])
    assert cli._thread_counts(["1,2", "4", "2"]) == [1, 2, 4]
    assert cli._thread_counts(None) is None
    assert harness.default_threads()[0] == 1


def test_benchmark_scripts_wrap_the_package(capsys, tmp_path):
    path = tmp_path / "r.json"
    module = runpy.run_path(str(ROOT / "benchmarks" / "reorder.py"))
    assert module["main"](["--quick", "--threads", "1", "--peers", "", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert "Command: `python benchmarks/reorder.py --quick --threads 1" in out
    assert json.loads(path.read_text())["rows"]
    # every suite has its script (the model suite's is networks.py, which also exports; the
    # torch suite's torch_compile.py: a benchmarks/torch.py would shadow PyTorch for the
    # scripts run from that folder)
    scripts = {"torch": "torch_compile"}
    for name in (n for n in SUITES if n != "model"):
        module = runpy.run_path(str(ROOT / "benchmarks" / f"{scripts.get(name, name)}.py"))
        with pytest.raises(SystemExit) as exit_info:
            module["main"](["--help"])
        assert exit_info.value.code == 0
        assert "--threads" in capsys.readouterr().out
    assert not (ROOT / "benchmarks" / "_harness.py").exists()
    assert not (ROOT / "benchmarks" / "torch.py").exists()


def test_chain_quick_policies_agree_and_overhead_is_reported(capsys, tmp_path):
    out, err, data = _bench(capsys, tmp_path, "chain", "--peers", "torch")
    info, run = _check_common(out, err, data, "chain", "--peers torch")
    assert "| workload | jitnn blocked ms |" in out
    assert ("torch NCHW ms" in out) == harness.installed("torch")
    labels = {r[0] for r in _table_rows(out, "| workload |")}
    assert labels == {"seed chain (quick)", "bottleneck (quick)"}
    for row in data["rows"]:
        assert row["max_diff"] < 1e-3                        # the policies agree
        # plain: a reorder into and out of each of the 3 convs, but for the
        # input of a conv with fewer channels than a block, which it reads in
        # place (the quick bottleneck's 8-channel middle, on 16-channel blocks)
        narrow = 2 if row["kind"] == "bottleneck" and jitnn.Context().block > 8 else 0
        assert row["blocked_reorders"] == 2 and row["plain_reorders"] == 6 - narrow
        assert row["blocked_launches"] == 3
        assert row["blocked"] > 0 and row["eager"] > 0 and row["plain"] > 0
        assert row["plain_over_blocked"] > 0 and 0 <= row["blocked_tax"] < 1
    assert run["overhead"]["ops"] == 20 and "us per op" in out



def test_conv2d_suite_defaults_its_batches_when_the_cli_passes_none():
    # `jitnn bench conv2d` without --batch hands the suite batches=None
    from types import SimpleNamespace

    from jitnn.bench.conv2d import batches_of
    assert batches_of(SimpleNamespace(quick=False, options={"batches": None})) == [1, 8]
    assert batches_of(SimpleNamespace(quick=False, options={})) == [1, 8]
    assert batches_of(SimpleNamespace(quick=False, options={"batches": [8]})) == [8]
    assert batches_of(SimpleNamespace(quick=True, options={"batches": [8]})) == [1]


def test_ops_quick_times_every_op_without_peers(capsys):
    assert cli.main(["bench", "ops", "--quick", "--threads", "1", "--peers", ""]) == 0
    out = capsys.readouterr().out
    for label in ("reduce_mean H,W", "layer_norm C", "resample2d x2 nearest",
                  "resample2d x2 linear", "pad 1 reflection"):
        assert f"| {label} |" in out
    assert "onnxruntime ms" not in out


def test_openvino_runner_computes_in_float32():
    # OpenVINO's CPU plugin computes in bfloat16 on CPUs with bf16
    # instructions (Zen 4) unless told otherwise: a relative error of ~1e-2
    pytest.importorskip("openvino")
    pytest.importorskip("onnx")
    import numpy as np
    rng = np.random.default_rng(0)
    a = rng.standard_normal((17, 64)).astype(np.float32)
    b = rng.standard_normal((64, 9)).astype(np.float32)
    run = harness.openvino_runner(
        harness.onnx_model({"op_type": "MatMul", "inputs": ["a", "b"]}, {"a": a}, {"b": b}), 1)
    (result,) = run({"a": a})
    expected = a.astype(np.float64) @ b.astype(np.float64)
    assert result.shape == (17, 9) and result.dtype == np.float32
    assert np.abs(result - expected).max() <= 1e-5 * np.abs(expected).max()


def test_ops_quick_with_openvino(capsys):
    pytest.importorskip("openvino")
    pytest.importorskip("onnx")
    assert cli.main(["bench", "ops", "--quick", "--threads", "1", "--peers", "openvino"]) == 0
    out = capsys.readouterr().out
    rows = _table_rows(out, "| op | shape | jitnn ms | jitnn plain ms | openvino ms | x OV |")
    assert len(rows) == len(load("ops").cases(quick=True))
    assert all(float(row[4]) > 0 and float(row[5]) > 0 for row in rows)
    assert "geomean speed vs OpenVINO" in out and "onnxruntime ms" not in out
