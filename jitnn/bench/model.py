"""Whole ONNX models: jitnn (``jitnn.onnx``) against ONNX Runtime, OpenVINO and PyTorch.

``jitnn bench model MODEL.onnx`` times that model; without a path, the
networks of :mod:`jitnn.bench.networks` with random weights (ResNet-50,
MobileNetV2, the Inception-style network; reduced-width variants with
``--quick``), exported once to the networks cache. Batch 1 and 8 (``--batch``
to choose; 1 with ``--quick``). Per row, :func:`jitnn.bench.networks.bench_model`:

* jitnn ms: ``ctx.compute(graph, inputs, outputs)`` of the loaded graph, so
  the input copy in and the readback out are included; filters are packed once
  (first call, reported apart as "first s", which includes compiling kernels
  not in the cache);
* onnxruntime ms: an ``InferenceSession`` with every graph optimization
  (``ORT_ENABLE_ALL``, which includes its NCHWc layout pass) and
  ``intra_op_num_threads`` = the thread count;
* openvino ms: the model compiled by OpenVINO for its CPU plugin (the thread
  count, latency hint, float32: :func:`jitnn.bench.harness.openvino_runner`);
* torch ms: the same network in PyTorch (eager, ``inference_mode``,
  ``torch.set_num_threads``), for models exported by ``jitnn.bench.networks``
  only (others show "-");
* the engines take turns in 5 rounds (2 with ``--quick``) of 0.2 s bursts,
  each after a 0.2 s pause (a thread pool still spinning from the engine
  before would take a core); each time is the median over the rounds of
  each burst's median call;
* x ORT, x OV, x torch: the peer's time over jitnn's (> 1: jitnn is faster);
  max rel err: the largest |jitnn - onnxruntime| over the largest |onnxruntime|
  (OV max rel err: the same against OpenVINO).
"""

from __future__ import annotations

from .harness import Column, Run, geomean, markdown_table

DESCRIPTION = ("whole ONNX models (ResNet-50, MobileNetV2, Inception-style) vs ONNX Runtime, "
               "OpenVINO and PyTorch")
UNIT = "ms"
PEERS = ("onnxruntime", "openvino", "torch")

FULL = (("resnet50", {}), ("mobilenetv2", {}), ("inception", {}))
QUICK = (("resnet50", {"width": 0.25, "size": 64, "layers": (1, 1, 1, 1)}),
         ("mobilenetv2", {"width": 0.25, "size": 64}))


def measure(run: Run) -> dict:
    from . import networks

    import importlib.util

    path = run.options.get("path")
    if path:
        paths = [path]
    elif importlib.util.find_spec("torch") is None or importlib.util.find_spec("onnx") is None:
        run.progress("skipped: exporting the networks needs torch and onnx "
                     "(pip install 'jitnn[bench]'), or give a model: jitnn bench model MODEL.onnx")
        return {"rows": [], "skipped": "torch or onnx not installed"}
    else:
        paths = []
        for name, options in (QUICK if run.quick else FULL):
            run.progress(f"exporting {networks.variant_name(name, **options)} (cached)")
            paths.append(networks.export(name, **options))
    batches = run.options.get("batches") or ((1,) if run.quick else (1, 8))
    rows = []
    for model_path in paths:
        for batch in batches:
            run.progress(f"{model_path} batch {batch}")
            row = networks.bench_model(model_path, batch, run.threads, peers=run.peers,
                                       min_time=0.05 if run.quick else 1.0,
                                       min_reps=3 if run.quick else 5,
                                       warmup=1 if run.quick else 2)
            rows.append(row)
    return {"rows": rows}


def row_label(row: dict) -> str:
    return f"{row['model']} b{row['batch']}"


PLOT_COLUMNS = [("jitnn", "jitnn_ms"), ("onnxruntime", "onnxruntime_ms", "onnxruntime"),
                ("openvino", "openvino_ms", "openvino"), ("torch", "torch_ms", "torch")]

COLUMNS = [
    Column("model", lambda r: r["model"].removesuffix(".onnx"), numeric=False),
    Column("batch", lambda r: r["batch"], "d"),
    Column("jitnn ms", lambda r: r["jitnn_ms"], ".2f"),
    Column("onnxruntime ms", lambda r: r["onnxruntime_ms"], ".2f", peer="onnxruntime"),
    Column("openvino ms", lambda r: r.get("openvino_ms"), ".2f", peer="openvino"),
    Column("torch ms", lambda r: r["torch_ms"], ".2f", peer="torch"),
    Column("x ORT", lambda r: r.get("vs_onnxruntime"), ".2f", peer="onnxruntime"),
    Column("x OV", lambda r: r.get("vs_openvino"), ".2f", peer="openvino"),
    Column("x torch", lambda r: r.get("vs_torch"), ".2f", peer="torch"),
    Column("max rel err", lambda r: r.get("max_rel_err"), ".1e", peer="onnxruntime"),
    Column("OV max rel err", lambda r: r.get("openvino_max_rel_err"), ".1e", peer="openvino"),
    Column("jitnn first s", lambda r: r.get("jitnn_first_s"), ".2f"),
]


def render(result: dict) -> list[str]:
    if not result["rows"]:
        return [f"(no model measured: {result.get('skipped', 'no rows')})"]
    lines = markdown_table(COLUMNS, result["rows"], result["peers"])
    for peer, label in (("onnxruntime", "ONNX Runtime"), ("openvino", "OpenVINO"),
                        ("torch", "PyTorch")):
        if peer in result["peers"]:
            lines += ["", f"geomean speed vs {label}: "
                          f"{geomean(r.get('vs_' + peer) for r in result['rows']):.2f}x "
                          "(> 1: jitnn faster)"]
    return lines
