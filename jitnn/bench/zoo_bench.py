"""The model zoo against ONNX Runtime, OpenVINO and PyTorch: ``jitnn bench zoo``.

Not the networks jitnn was tuned on: every model of :mod:`jitnn.bench.zoo`
(transformers, ConvNeXt, EfficientNet, MobileNetV3, RegNetY, DenseNet,
ShuffleNetV2, Swin, DeepLabV3) and its benchmark-only families (ResNet,
ResNet-D, ResNeXt, RegNetX, MobileNetV2/V3-Small, EfficientNet-B1,
SqueezeNet, GoogLeNet, VGG, MnasNet), seeded random weights, batch 1 (text
models: one sequence of 128 tokens), exported once to the zoo's cache.

Per model, in one process: jitnn (``jitnn.onnx.prepare``, then
``ctx.compute`` into caller arrays: input copy and readback included), ONNX
Runtime (every graph optimization, ``intra_op_num_threads``, workers not
spinning), OpenVINO (CPU plugin, the thread count, latency hint, float32)
and PyTorch eager (``inference_mode``), timed in interleaved rounds
(:func:`harness.paired_seconds`): the median per-call time of each engine, and
each ratio as the median of the per-round ratios. ``max rel err``: jitnn
against ONNX Runtime (max |diff| / max |ONNX Runtime|).

``--memory`` adds peak resident memory: for each model and engine a fresh
process imports the engine, loads the model, runs it twice and reports its
peak RSS (``VmHWM``) and its RSS after the imports; the table shows the
peak above the imports for jitnn and ONNX Runtime, and their ratio.

Options: ``--models a,b`` (default all), ``--memory``. ``--quick``: three
small models from the test data, no export.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import numpy as np

from .harness import Column, Run, geomean, markdown_table

DESCRIPTION = ("the model zoo (transformers, modern CNNs, segmentation; 20+ models) vs "
               "ONNX Runtime, OpenVINO and PyTorch, with peak memory")
UNIT = "ms"
PEERS = ("onnxruntime", "openvino", "torch")

#: the families, for the table
FAMILY = {
    "bert": "transformer", "gpt2": "transformer", "llama": "transformer", "vit": "transformer",
    "swin": "transformer", "convnext": "ConvNeXt", "efficientnet_b0": "EfficientNet",
    "efficientnet_b1": "EfficientNet", "mobilenetv3_large": "MobileNetV3",
    "mobilenetv3_small": "MobileNetV3", "regnety": "RegNet", "regnetx_400mf": "RegNet",
    "densenet121": "DenseNet", "shufflenetv2": "ShuffleNet", "deeplabv3": "segmentation",
    "resnet50": "ResNet", "resnet50d": "ResNet-D", "resnext50": "ResNeXt",
    "mobilenetv2": "MobileNetV2", "squeezenet": "SqueezeNet", "googlenet": "GoogLeNet",
    "vgg11": "VGG", "mnasnet": "MnasNet",
}
QUICK = ("mobilenetv3_large", "shufflenetv2", "bert")


def _models(run: Run) -> list[str]:
    from . import zoo
    chosen = run.options.get("models")
    every = list(zoo.MODELS) + list(zoo.BENCH_MODELS)
    if chosen and "beyond" in chosen:
        i = chosen.index("beyond")
        chosen = chosen[:i] + list(zoo.BEYOND) + chosen[i + 1:]
    if chosen:
        unknown = [m for m in chosen if m not in zoo.MODELS and zoo.bench_model(m) is None]
        if unknown:
            raise ValueError(f"bench zoo: unknown model(s) {', '.join(unknown)}; "
                             f"expected some of {', '.join(every)}, or "
                             f"{' or '.join(zoo.BY_LIBRARY)}:NAME (a classifier at 224 px)")
        return list(chosen)
    return list(QUICK) if run.quick else every


def _model_file(name: str, quick: bool) -> tuple[str, dict]:
    """The ONNX file and the inputs of one zoo model."""
    from . import zoo
    if quick:
        root = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "models")
        path = os.path.join(root, f"{name}.onnx")
        if os.path.exists(path):
            stored = np.load(os.path.join(root, f"{name}.npz"))
            feed = {k.split(".in.", 1)[1]: stored[k] for k in stored.files
                    if k.startswith("0.in.")}
            if feed:
                return path, feed
        return zoo.export(name, small=True), zoo.inputs(name, small=True)[0]
    path = zoo.export(name)
    if name in zoo.TEXT:
        built = zoo.build(name)
        return path, zoo.token_inputs(built.vocab, 1, 128, seed=8)
    return path, zoo.inputs(name)[0]


def _max_rel_err(ours: list, theirs: list) -> float:
    worst = 0.0
    for a, b in zip(ours, theirs):
        scale = float(np.max(np.abs(b))) or 1.0
        worst = max(worst, float(np.max(np.abs(np.asarray(a, np.float64) - b))) / scale)
    return worst


def _engines(run: Run, name: str, path: str, feed: dict) -> tuple[dict, dict]:
    """``({engine: call}, row)``: the calls to time, and what loading them told."""
    import jitnn
    import jitnn.onnx
    # (a LIBRARY:NAME model's family: its library)
    row: dict = {"model": name, "family": FAMILY.get(name, name.partition(":")[0] if ":" in name
                                                    else ""), "threads": run.threads}
    ctx = jitnn.Context(num_threads=run.threads)
    prepared = jitnn.onnx.prepare(path, ctx, input_shapes={k: v.shape for k, v in feed.items()})
    graph = prepared.graph
    outs = {k: np.empty(shape, graph.output_dtypes[k]) for k, shape in graph.outputs.items()}
    started = time.perf_counter()
    ctx.compute(graph, feed, outs)
    row["jitnn_first_s"] = time.perf_counter() - started
    calls = {"jitnn": lambda: ctx.compute(graph, feed, outs)}
    ours = [outs[k].copy() for k in graph.outputs]
    if "onnxruntime" in run.peers:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = run.threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.log_severity_level = 3
        session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        theirs = session.run(list(graph.outputs), feed)
        row["max_rel_err"] = _max_rel_err(ours, theirs)
        calls["onnxruntime"] = lambda: session.run(None, feed)
    if "openvino" in run.peers:
        from .harness import openvino_runner
        calls["openvino"] = (lambda run_ov: lambda: run_ov(feed))(openvino_runner(path,
                                                                                 run.threads))
    if "torch" in run.peers and not run.quick:
        import torch
        from . import zoo
        torch.set_num_threads(run.threads)
        built = zoo.build(name)
        args = [torch.from_numpy(feed[k]) for k in built.example]

        def run_torch():
            with torch.inference_mode():
                built.module(*args)
        calls["torch"] = run_torch
    return calls, row


def measure(run: Run) -> dict:
    import importlib.util
    if not run.quick and (importlib.util.find_spec("torch") is None
                          or importlib.util.find_spec("onnx") is None):
        run.progress("skipped: the zoo needs torch, onnx, torchvision, timm and transformers "
                     "(pip install 'jitnn[models]')")
        return {"rows": [], "skipped": "torch or onnx not installed"}
    rows = []
    for name in _models(run):
        run.progress(f"{name}: export (cached) and load")
        path, feed = _model_file(name, run.quick)
        calls, row = _engines(run, name, path, feed)
        run.progress(f"{name}: {len(calls)} engine(s), interleaved rounds")
        seconds = run.paired(calls, rounds=9)
        for engine, times in seconds.items():
            row[f"{engine}_ms"] = 1e3 * float(np.median(times))
        for peer in PEERS:
            if peer in seconds:
                ratios = np.array(seconds[peer]) / np.array(seconds["jitnn"])
                row[f"vs_{peer}"] = float(np.median(ratios))
        if run.options.get("memory"):
            for engine in ("jitnn", "onnxruntime"):
                if engine == "jitnn" or engine in run.peers:
                    row[f"{engine}_peak_mb"], row[f"{engine}_base_mb"] = \
                        peak_memory(engine, path, feed, run.threads)
            if row.get("onnxruntime_peak_mb"):
                row["memory_ratio"] = (row["jitnn_peak_mb"] - row["jitnn_base_mb"]) / max(
                    1.0, row["onnxruntime_peak_mb"] - row["onnxruntime_base_mb"])
        rows.append(row)
    return {"rows": rows}


_PROBE = r"""
import json, os, sys
import numpy as np
engine, path, feed_file, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
feed = dict(np.load(feed_file))
if engine == "jitnn":
    import jitnn, jitnn.onnx
else:
    import onnxruntime as ort
def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
base = rss_mb()
if engine == "jitnn":
    ctx = jitnn.Context(num_threads=threads)
    graph = jitnn.onnx.load(path, ctx, input_shapes={k: v.shape for k, v in feed.items()})
    outs = {k: np.empty(s, graph.output_dtypes[k]) for k, s in graph.outputs.items()}
    for _ in range(2):
        ctx.compute(graph, feed, outs)
else:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    for _ in range(2):
        session.run(None, feed)
# VmHWM, not ru_maxrss: Linux carries ru_maxrss over exec from the process that forked us
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
print(json.dumps({"peak_mb": peak, "base_mb": base}))
"""


def peak_memory(engine: str, path: str, feed: dict, threads: int) -> tuple[float, float]:
    """``(peak MB, MB after the imports)`` of a fresh process that loads the
    model with ``engine`` and runs it twice (kernels from the warm cache)."""
    import shutil
    import tempfile
    # an empty working directory: a folder named jitnn in the caller's would shadow the package
    folder = tempfile.mkdtemp(prefix="jitnn-memory-")
    try:
        feed_file = os.path.join(folder, "feed.npz")
        np.savez(feed_file, **feed)
        done = subprocess.run([sys.executable, "-c", _PROBE, engine, os.path.abspath(path),
                               feed_file, str(threads)], capture_output=True, text=True,
                              timeout=1800, cwd=folder)
        if done.returncode:
            raise RuntimeError(f"bench zoo: the {engine} memory probe failed: "
                               f"{done.stderr.strip()[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        return result["peak_mb"], result["base_mb"]
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def row_label(row: dict) -> str:
    return row["model"]


PLOT_COLUMNS = [("jitnn", "jitnn_ms"), ("onnxruntime", "onnxruntime_ms", "onnxruntime"),
                ("openvino", "openvino_ms", "openvino"), ("torch", "torch_ms", "torch")]

COLUMNS = [
    Column("model", lambda r: r["model"], numeric=False),
    Column("family", lambda r: r["family"], numeric=False),
    Column("jitnn ms", lambda r: r["jitnn_ms"], ".2f"),
    Column("ORT ms", lambda r: r.get("onnxruntime_ms"), ".2f", peer="onnxruntime"),
    Column("OV ms", lambda r: r.get("openvino_ms"), ".2f", peer="openvino"),
    Column("torch ms", lambda r: r.get("torch_ms"), ".2f", peer="torch"),
    Column("x ORT", lambda r: r.get("vs_onnxruntime"), ".2f", peer="onnxruntime"),
    Column("x OV", lambda r: r.get("vs_openvino"), ".2f", peer="openvino"),
    Column("x torch", lambda r: r.get("vs_torch"), ".2f", peer="torch"),
    Column("max rel err", lambda r: r.get("max_rel_err"), ".1e", peer="onnxruntime"),
    Column("jitnn MB", lambda r: None if "jitnn_peak_mb" not in r
           else r["jitnn_peak_mb"] - r["jitnn_base_mb"], ".0f"),
    Column("ORT MB", lambda r: None if "onnxruntime_peak_mb" not in r
           else r["onnxruntime_peak_mb"] - r["onnxruntime_base_mb"], ".0f",
           peer="onnxruntime"),
    Column("mem x ORT", lambda r: r.get("memory_ratio"), ".2f", peer="onnxruntime"),
    Column("first s", lambda r: r.get("jitnn_first_s"), ".1f"),
]


def render(result: dict) -> list[str]:
    rows = result["rows"]
    if not rows:
        return [f"(no model measured: {result.get('skipped', 'no rows')})"]
    lines = markdown_table(COLUMNS, rows, result["peers"])
    for peer, label in (("onnxruntime", "ONNX Runtime"), ("openvino", "OpenVINO"),
                        ("torch", "PyTorch")):
        if peer not in result["peers"]:
            continue
        ratios = [r.get("vs_" + peer) for r in rows]
        if not any(ratios):
            continue
        below = [r["model"] for r in rows if (r.get("vs_" + peer) or 1.0) < 0.8]
        lines += ["", f"geomean speed vs {label}: {geomean(ratios):.2f}x (> 1: jitnn faster); "
                      f"below 0.8x: {', '.join(below) or 'none'}"]
    return lines
