"""conv2d GFLOP/s: jitnn against PyTorch (oneDNN), ONNX Runtime and OpenVINO, same run.

ResNet-50 layers and MobileNetV2 depthwise layers, batch 1 and 8 (quick:
batch 1, four layers at a quarter of their spatial size). Columns, each the
median of repeated runs after warm-up (compile excluded):

* jitnn blocked: the kernel alone (``jitnn.kernels.conv2d.conv2d_forward``),
  input already ``nChw{block}c`` and filter packed, output left blocked;
  compare with torch blocked (``to_mkldnn`` tensors and module).
* jitnn NCHW: what a caller of ``jitnn.conv2d`` pays from a numpy NCHW array
  to a numpy NCHW result: copy-in, reorder in, conv, reorder out into a
  preallocated array; compare with torch NCHW (``F.conv2d`` on NCHW tensors)
  and ONNX Runtime (a one-Conv model on NCHW input; ORT inserts its own
  NCHWc reorders inside) and OpenVINO (the same model on its CPU plugin:
  :func:`.harness.openvino_runner`).
* % of peak: jitnn blocked over the OpenBLAS sgemm rate with the same threads.

Option (``run.options``): ``batches``, a list of batch sizes (default [1, 8]).
"""

from __future__ import annotations

import sys

from .harness import (Column, Run, geomean, markdown_table, onnx_model, openvino_runner,
                      ort_session, ratio)

DESCRIPTION = ("conv2d on ResNet-50 and MobileNetV2 layers against PyTorch, ONNX Runtime and "
               "OpenVINO")
UNIT = "GFLOP/s"
PEERS = ("torch", "onnxruntime", "openvino")

# (name, C, O, H=W, kernel, stride, padding, groups)
RESNET50 = [
    ("conv1 7x7/2", 3, 64, 224, 7, 2, 3, 1),
    ("3x3 64ch 56", 64, 64, 56, 3, 1, 1, 1),
    ("3x3 128ch 28", 128, 128, 28, 3, 1, 1, 1),
    ("3x3 256ch 14", 256, 256, 14, 3, 1, 1, 1),
    ("3x3 512ch 7", 512, 512, 7, 3, 1, 1, 1),
    ("3x3/2 128ch 56", 128, 128, 56, 3, 2, 1, 1),
    ("3x3/2 256ch 28", 256, 256, 28, 3, 2, 1, 1),
    ("3x3/2 512ch 14", 512, 512, 14, 3, 2, 1, 1),
    ("1x1 64->256 56", 64, 256, 56, 1, 1, 0, 1),
    ("1x1 256->64 56", 256, 64, 56, 1, 1, 0, 1),
    ("1x1/2 256->512 56", 256, 512, 56, 1, 2, 0, 1),
    ("1x1 512->128 28", 512, 128, 28, 1, 1, 0, 1),
    ("1x1 1024->256 14", 1024, 256, 14, 1, 1, 0, 1),
    ("1x1 2048->512 7", 2048, 512, 7, 1, 1, 0, 1),
]
MOBILENET_DW = [
    ("dw 32ch 112", 32, 32, 112, 3, 1, 1, 32),
    ("dw 144ch 56", 144, 144, 56, 3, 1, 1, 144),
    ("dw/2 192ch 28", 192, 192, 28, 3, 2, 1, 192),
    ("dw 576ch 14", 576, 576, 14, 3, 1, 1, 576),
    ("dw 960ch 7", 960, 960, 7, 3, 1, 1, 960),
]
QUICK = ["conv1 7x7/2", "3x3 64ch 56", "1x1 256->64 56", "dw 144ch 56"]


def layers(quick: bool) -> list[tuple]:
    chosen = [(layer, "resnet50") for layer in RESNET50] + \
             [(layer, "mobilenetv2") for layer in MOBILENET_DW]
    if quick:  # a quarter of the spatial size: seconds, not minutes
        chosen = [((name, c, o, hw // 4, *rest), net) for (name, c, o, hw, *rest), net in chosen
                  if name in QUICK]
    return chosen


def batches_of(run: Run) -> list[int]:
    """The batch sizes to run: 1 in quick mode, else ``--batch`` or 1 and 8."""
    return [1] if run.quick else list(run.options.get("batches") or [1, 8])


def measure(run: Run) -> dict:
    import numpy as np

    import jitnn
    from jitnn.kernels import conv2d as kernels
    from jitnn.kernels import layout as layout_kernels

    torch = F = None
    if "torch" in run.peers:
        import torch
        import torch.nn.functional as F
        import torch.utils.mkldnn  # noqa: F401 - to_mkldnn for modules
    ctx = jitnn.Context(num_threads=run.threads)
    block = ctx.block
    batches = batches_of(run)
    todo = [(batch, layer) for batch in batches for layer in layers(run.quick)]
    rows = []
    for index, (batch, ((name, c, o, hw, k, s, p, g), net)) in enumerate(todo):
        rng = np.random.default_rng(0)
        x = rng.standard_normal((batch, c, hw, hw)).astype(np.float32)
        w = (rng.standard_normal((o, c // g, k, k)) * 0.1).astype(np.float32)
        oh = (hw + 2 * p - k) // s + 1
        flops = 2 * batch * o * oh * oh * (c // g) * k * k
        # jitnn, the kernel alone on blocked data
        first_layer = c < block
        packed = kernels.pack_conv2d_filter(w, c, g, block, input_is_plain=first_layer)
        if first_layer:
            xb = x
        else:
            xb = kernels.aligned_empty((batch, -(-c // block), hw, hw, block))
            layout_kernels.nchw_to_blocked(x, xb)
        yb = kernels.aligned_empty((batch, -(-o // block), oh, oh, block))
        ours_blocked, lo, hi = run.median(lambda: kernels.conv2d_forward(
            xb, packed, yb, (s, s), (1, 1), (p, p, p, p)))
        # jitnn, from an NCHW numpy array to an NCHW numpy array
        w_t = ctx.tensor(w)
        out = np.empty((batch, o, oh, oh), np.float32)
        ours_nchw, _, _ = run.median(lambda: jitnn.conv2d(
            ctx.tensor(x), w_t, strides=s, padding=p, groups=g).numpy(out=out))
        row = {"net": net, "layer": name, "batch": batch, "threads": run.threads,
               "block": block, "path": packed.path, "gflop": flops / 1e9,
               "jitnn_blocked": flops / ours_blocked / 1e9,
               "jitnn_blocked_spread": [flops / hi / 1e9, flops / lo / 1e9],
               "jitnn_nchw": flops / ours_nchw / 1e9,
               "torch_blocked": None, "torch_nchw": None, "onnxruntime": None,
               "openvino": None}
        if torch is not None:
            xt, wt = torch.from_numpy(x), torch.from_numpy(w)
            with torch.no_grad():
                row["torch_nchw"] = flops / run.median(
                    lambda: F.conv2d(xt, wt, stride=s, padding=p, groups=g))[0] / 1e9
                try:
                    conv = torch.nn.Conv2d(c, o, k, stride=s, padding=p, groups=g, bias=False)
                    conv.weight.data = wt
                    conv = torch.utils.mkldnn.to_mkldnn(conv)
                    xm = xt.to_mkldnn()
                    row["torch_blocked"] = flops / run.median(lambda: conv(xm))[0] / 1e9
                except RuntimeError as error:  # a torch build without mkldnn
                    print(f"  torch blocked failed for {name}: {error}", file=sys.stderr)
        model = onnx_model(
            {"op_type": "Conv", "inputs": ["x", "w"], "kernel_shape": [k, k],
             "strides": [s, s], "pads": [p, p, p, p], "group": g},
            {"x": x}, {"w": w}) if {"onnxruntime", "openvino"} & set(run.peers) else None
        feed = {"x": x}
        if "onnxruntime" in run.peers:
            session = ort_session(model, run.threads)
            row["onnxruntime"] = flops / run.median(lambda: session.run(None, feed))[0] / 1e9
            del session
        if "openvino" in run.peers:
            openvino_run = openvino_runner(model, run.threads)
            row["openvino"] = flops / run.median(lambda: openvino_run(feed))[0] / 1e9
            del openvino_run
        rows.append(row)
        run.progress(f"{index + 1}/{len(todo)} batch {batch} {name}: "
                     f"{row['jitnn_blocked']:.1f} GFLOP/s blocked")
    return {"rows": rows, "block": block}


def row_label(row: dict) -> str:
    return f"{row['layer']} b{row['batch']}"


def _columns(peak: float) -> list[Column]:
    return [
        Column("layer", lambda r: r["layer"], numeric=False),
        Column("batch", lambda r: r["batch"], "d"),
        Column("jitnn blocked", lambda r: r["jitnn_blocked"]),
        Column("torch blocked", lambda r: r["torch_blocked"], peer="torch"),
        Column("ratio", lambda r: ratio(r["jitnn_blocked"], r["torch_blocked"]), ".2f",
               peer="torch"),
        Column("jitnn NCHW", lambda r: r["jitnn_nchw"]),
        Column("torch NCHW", lambda r: r["torch_nchw"], peer="torch"),
        Column("ratio", lambda r: ratio(r["jitnn_nchw"], r["torch_nchw"]), ".2f", peer="torch"),
        Column("onnxruntime NCHW", lambda r: r["onnxruntime"], peer="onnxruntime"),
        Column("ratio", lambda r: ratio(r["jitnn_nchw"], r["onnxruntime"]), ".2f",
               peer="onnxruntime"),
        Column("openvino NCHW", lambda r: r.get("openvino"), peer="openvino"),
        Column("ratio", lambda r: ratio(r["jitnn_nchw"], r.get("openvino")), ".2f",
               peer="openvino"),
        Column("% of peak", lambda r: ratio(r["jitnn_blocked"], peak), "%"),
    ]


PLOT_COLUMNS = [("jitnn blocked", "jitnn_blocked"), ("torch blocked", "torch_blocked", "torch"),
                ("jitnn NCHW", "jitnn_nchw"), ("torch NCHW", "torch_nchw", "torch"),
                ("onnxruntime NCHW", "onnxruntime", "onnxruntime"),
                ("openvino NCHW", "openvino", "openvino")]

_GEOMEANS = [("jitnn blocked / torch blocked", "jitnn_blocked", "torch_blocked"),
             ("jitnn blocked / torch NCHW", "jitnn_blocked", "torch_nchw"),
             ("jitnn NCHW / torch NCHW", "jitnn_nchw", "torch_nchw"),
             ("jitnn NCHW / onnxruntime", "jitnn_nchw", "onnxruntime"),
             ("jitnn NCHW / openvino", "jitnn_nchw", "openvino")]


def render(result: dict) -> list[str]:
    lines = markdown_table(_columns(result["peak_gflops"]), result["rows"], result["peers"])
    for net in ("resnet50", "mobilenetv2"):
        for batch in sorted({r["batch"] for r in result["rows"]}):
            rows = [r for r in result["rows"] if r["net"] == net and r["batch"] == batch]
            parts = []
            for label, ours, theirs in _GEOMEANS:
                values = [ratio(r[ours], r.get(theirs)) for r in rows]
                if rows and all(v is not None for v in values):
                    parts.append(f"{label} {geomean(values):.2f}")
            if parts:
                lines.append(f"\ngeomean {net} batch {batch}: " + ", ".join(parts))
    return lines


def summary(results: list[dict]) -> list[str]:
    if len(results) < 2 or results[0]["threads"] != 1:
        return []
    lines = []
    for other in results[1:]:
        speedups = [ratio(b["jitnn_blocked"], a["jitnn_blocked"])
                    for a, b in zip(results[0]["rows"], other["rows"])]
        speedups = [v for v in speedups if v is not None]
        if speedups:
            lines.append(f"{other['threads']}-thread speedup of jitnn blocked over 1 thread: "
                         f"geomean {geomean(speedups):.2f} (min {min(speedups):.2f}, "
                         f"max {max(speedups):.2f})")
    return lines


COMPILE_LABEL = "path"
COMPILE_PROBE = r"""
import json, time, numpy as np
from jitnn.kernels import conv2d as k
out = {}
for name, c, o, ks, g, plain in [("direct", 16, 16, 3, 1, False), ("1x1", 16, 16, 1, 1, False),
                                 ("depthwise", 16, 16, 3, 16, False), ("first_layer", 3, 16, 7, 1, True)]:
    w = np.ones((o, c // g, ks, ks), np.float32)
    p = k.pack_conv2d_filter(w, c, g, 8, input_is_plain=plain)
    x = np.ones((1, c, 9, 9), np.float32) if plain else np.ones((1, 2, 9, 9, 8), np.float32)
    y = np.empty((1, 2, 9 - ks + 1, 9 - ks + 1, 8), np.float32)
    t = time.perf_counter(); k.conv2d_forward(x, p, y); out[name] = time.perf_counter() - t
print(json.dumps(out))
"""
