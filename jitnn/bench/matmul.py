"""matmul GFLOP/s: jitnn against numpy (OpenBLAS), PyTorch, ONNX Runtime and OpenVINO, same run.

Columns, each the median of repeated runs after warm-up (compile excluded):

* jitnn kernel: ``jitnn.kernels.matmul.gemm`` (``batched_matmul`` for a
  batch) into a preallocated output, B packed once beforehand when it is a
  constant (the weights of a layer);
* jitnn op: ``jitnn.matmul(a_tensor, b_tensor).numpy(out=buf)``, what a caller
  of the public op pays, runtime overhead included (B packed once per tensor);
* numpy: ``np.matmul(a, b, out=buf)`` (OpenBLAS sgemm); torch:
  ``torch.matmul``; onnxruntime: a one-MatMul model (B an initializer when
  it is a constant); openvino: the same model on OpenVINO's CPU plugin
  (:func:`.harness.openvino_runner`);
* % of peak: jitnn kernel over the OpenBLAS sgemm 1024^3 rate.

Also the per-call time of a 4x4 product for each, and (full runs) the cold
compile / cached load times of the gemm paths.
"""

from __future__ import annotations

from .harness import Column, Run, markdown_table, onnx_model, openvino_runner, ort_session, ratio

DESCRIPTION = ("matmul/gemm (square, FC, attention) against numpy, PyTorch, ONNX Runtime and "
               "OpenVINO")
UNIT = "GFLOP/s"
PEERS = ("numpy", "torch", "onnxruntime", "openvino")

SHAPES = [  # (name, batch, M, K, N, B constant?)
    ("square 64", 1, 64, 64, 64, False),
    ("square 128", 1, 128, 128, 128, False),
    ("square 256", 1, 256, 256, 256, False),
    ("square 512", 1, 512, 512, 512, False),
    ("square 1024", 1, 1024, 1024, 1024, False),
    ("square 2048", 1, 2048, 2048, 2048, False),
    ("FC 1x2048x1000", 1, 1, 2048, 1000, True),
    ("FC 8x2048x1000", 1, 8, 2048, 1000, True),
    ("attention 12x128x64 @ 12x64x128", 12, 128, 64, 128, False),
]
QUICK = ("square 64", "square 256", "FC 1x2048x1000", "attention 12x128x64 @ 12x64x128")


def measure(run: Run) -> dict:
    import numpy as np

    import jitnn
    from jitnn.kernels import matmul as kernels

    torch = None
    if "torch" in run.peers:
        import torch
    ctx = jitnn.Context(num_threads=run.threads)
    shapes = [s for s in SHAPES if not run.quick or s[0] in QUICK]
    rows = []
    for index, (name, batch, m, k, n, constant) in enumerate(shapes):
        rng = np.random.default_rng(0)
        shape_a = (batch, m, k) if batch > 1 else (m, k)
        shape_b = (batch, k, n) if batch > 1 else (k, n)
        a = rng.standard_normal(shape_a).astype(np.float32)
        b = rng.standard_normal(shape_b).astype(np.float32)
        out = np.empty(shape_a[:-1] + (n,), np.float32)
        flops = 2 * batch * m * n * k
        if batch > 1:
            kernel_call = lambda: kernels.batched_matmul(a, b, out)  # noqa: E731
        else:
            right = kernels.pack_b(b) if constant else b
            kernel_call = lambda: kernels.gemm(a, right, out)  # noqa: E731
        ours, lo, hi = run.median(kernel_call)
        a_t, b_t = ctx.tensor(a), ctx.tensor(b)
        op_s, _, _ = run.median(lambda: jitnn.matmul(a_t, b_t).numpy(out=out))
        row = {"shape": name, "threads": run.threads, "gflop": flops / 1e9,
               "jitnn_kernel": flops / ours / 1e9,
               "jitnn_kernel_spread": [flops / hi / 1e9, flops / lo / 1e9],
               "jitnn_op": flops / op_s / 1e9, "numpy": None, "torch": None,
               "onnxruntime": None, "openvino": None}
        if "numpy" in run.peers:
            row["numpy"] = flops / run.median(lambda: np.matmul(a, b, out=out))[0] / 1e9
        if torch is not None:
            ta, tb = torch.from_numpy(a), torch.from_numpy(b)
            row["torch"] = flops / run.median(lambda: torch.matmul(ta, tb))[0] / 1e9
        inputs, initializers = ({"a": a}, {"b": b}) if constant else ({"a": a, "b": b}, {})
        model = onnx_model({"op_type": "MatMul", "inputs": ["a", "b"]}, inputs, initializers) \
            if {"onnxruntime", "openvino"} & set(run.peers) else None
        feed = {"a": a} if constant else {"a": a, "b": b}
        if "onnxruntime" in run.peers:
            session = ort_session(model, run.threads)
            row["onnxruntime"] = flops / run.median(lambda: session.run(None, feed))[0] / 1e9
            del session
        if "openvino" in run.peers:
            openvino_run = openvino_runner(model, run.threads)
            row["openvino"] = flops / run.median(lambda: openvino_run(feed))[0] / 1e9
            del openvino_run
        rows.append(row)
        run.progress(f"{index + 1}/{len(shapes)} {name}: {row['jitnn_kernel']:.1f} GFLOP/s kernel"
                     + (f", numpy {row['numpy']:.1f}" if row["numpy"] else ""))
    # per-call time of a 4x4 product
    a4 = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
    o4 = np.empty((4, 4), np.float32)
    t4 = ctx.tensor(a4)
    reps = 200 if run.quick else 2000
    tiny = {"jitnn kernel": run.median(lambda: kernels.gemm(a4, a4, o4), min_reps=reps)[0],
            "jitnn op": run.median(lambda: jitnn.matmul(t4, t4).numpy(out=o4), min_reps=reps)[0]}
    if "numpy" in run.peers:
        tiny["numpy"] = run.median(lambda: np.matmul(a4, a4, out=o4), min_reps=reps)[0]
    if torch is not None:
        tiny["torch"] = run.median(lambda: torch.matmul(torch.from_numpy(a4), torch.from_numpy(a4)),
                                   min_reps=reps)[0]
    return {"rows": rows, "tiny_s": tiny}


def row_label(row: dict) -> str:
    return row["shape"]


def _columns(peak: float) -> list[Column]:
    return [
        Column("shape", lambda r: r["shape"], numeric=False),
        Column("jitnn kernel", lambda r: r["jitnn_kernel"]),
        Column("jitnn op", lambda r: r["jitnn_op"]),
        Column("numpy", lambda r: r["numpy"], peer="numpy"),
        Column("torch", lambda r: r["torch"], peer="torch"),
        Column("onnxruntime", lambda r: r["onnxruntime"], peer="onnxruntime"),
        Column("openvino", lambda r: r.get("openvino"), peer="openvino"),
        Column("kernel / numpy", lambda r: ratio(r["jitnn_kernel"], r["numpy"]), ".2f",
               peer="numpy"),
        Column("op / numpy", lambda r: ratio(r["jitnn_op"], r["numpy"]), ".2f", peer="numpy"),
        Column("kernel / torch", lambda r: ratio(r["jitnn_kernel"], r["torch"]), ".2f",
               peer="torch"),
        Column("kernel / onnxruntime", lambda r: ratio(r["jitnn_kernel"], r["onnxruntime"]),
               ".2f", peer="onnxruntime"),
        Column("kernel / openvino", lambda r: ratio(r["jitnn_kernel"], r.get("openvino")),
               ".2f", peer="openvino"),
        Column("% of peak", lambda r: ratio(r["jitnn_kernel"], peak), "%"),
    ]


PLOT_COLUMNS = [("jitnn kernel", "jitnn_kernel"), ("jitnn op", "jitnn_op"),
                ("numpy", "numpy", "numpy"), ("torch", "torch", "torch"),
                ("onnxruntime", "onnxruntime", "onnxruntime"),
                ("openvino", "openvino", "openvino")]


def render(result: dict) -> list[str]:
    lines = markdown_table(_columns(result["peak_gflops"]), result["rows"], result["peers"])
    lines.append("\nper-call time of a 4x4 product: " + ", ".join(
        f"{name} {seconds * 1e6:.1f} us" for name, seconds in result["tiny_s"].items()))
    return lines


COMPILE_LABEL = "gemm path"
COMPILE_PROBE = r"""
import json, time, numpy as np
from jitnn.kernels import matmul as k
out = {}
for name, (m, n, kk) in {"direct (4x4x4)": (4, 4, 4), "packed serial (64^3)": (64, 64, 64),
                         "packed parallel (512^3)": (512, 512, 512)}.items():
    a = np.ones((m, kk), np.float32); b = np.ones((kk, n), np.float32); o = np.empty((m, n), np.float32)
    t = time.perf_counter(); k.gemm(a, b, o); out[name] = time.perf_counter() - t
print(json.dumps(out))
"""
