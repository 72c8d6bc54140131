"""matmul GFLOP/s: jitnn against numpy (OpenBLAS) and PyTorch, same run.

    python benchmarks/matmul.py              # 1 and 2 threads
    python benchmarks/matmul.py --quick      # a few shapes

Columns, each the median of repeated runs after warm-up (compile excluded):

* jitnn kernel: ``jitnn.kernels.matmul.gemm`` into a preallocated output, B
  packed once beforehand when it is a constant (the weights of a layer);
* jitnn op: ``jitnn.matmul(a_tensor, b_tensor).numpy(out=buf)``, what a caller
  of the public op pays, runtime overhead included (B packed once per tensor);
* numpy: ``np.matmul(a, b, out=buf)`` (OpenBLAS sgemm); torch: ``torch.matmul``.

Also: the per-call time of a 4x4 product for each, and cold compile / cached
load times of the gemm kernels (in fresh processes with an empty cache).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import compile_table, compile_times, machine_facts, median_seconds, run_per_thread_count, sgemm_peak_gflops  # noqa: E402

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
QUICK = ("square 64", "square 256", "FC 1x2048x1000")


def worker(threads: int, quick: bool) -> dict:
    import numba
    import numpy as np
    import torch

    import jitnn
    from jitnn.kernels import matmul as kernels

    torch.set_num_threads(threads)
    numba.set_num_threads(threads)
    ctx = jitnn.Context(num_threads=threads)
    rows = []
    for name, batch, m, k, n, constant in SHAPES:
        if quick and name not in QUICK:
            continue
        rng = np.random.default_rng(0)
        shape_a = (batch, m, k) if batch > 1 else (m, k)
        shape_b = (batch, k, n) if batch > 1 else (k, n)
        a = rng.standard_normal(shape_a).astype(np.float32)
        b = rng.standard_normal(shape_b).astype(np.float32)
        out = np.empty(shape_a[:-1] + (n,), np.float32)
        flops = 2 * batch * m * n * k
        if batch > 1:
            kernel_call = lambda: kernels.batched_matmul(a, b, out)
        else:
            right = kernels.pack_b(b) if constant else b
            kernel_call = lambda: kernels.gemm(a, right, out)
        ours, lo, hi = median_seconds(kernel_call)
        a_t, b_t = ctx.tensor(a), ctx.tensor(b)
        op_s, _, _ = median_seconds(lambda: jitnn.matmul(a_t, b_t).numpy(out=out))
        numpy_s, _, _ = median_seconds(lambda: np.matmul(a, b, out=out))
        ta, tb = torch.from_numpy(a), torch.from_numpy(b)
        torch_s, _, _ = median_seconds(lambda: torch.matmul(ta, tb))
        rows.append({"shape": name, "threads": threads, "jitnn_kernel": flops / ours / 1e9,
                     "jitnn_kernel_spread": [flops / hi / 1e9, flops / lo / 1e9],
                     "jitnn_op": flops / op_s / 1e9, "numpy": flops / numpy_s / 1e9,
                     "torch": flops / torch_s / 1e9})
        print(f"  {threads}t {name}: {rows[-1]['jitnn_kernel']:.1f} vs numpy {rows[-1]['numpy']:.1f}",
              file=sys.stderr)
    # per-call time of a 4x4 product
    a4 = np.random.default_rng(1).standard_normal((4, 4)).astype(np.float32)
    o4 = np.empty((4, 4), np.float32)
    t4 = ctx.tensor(a4)
    tiny = {
        "jitnn kernel": median_seconds(lambda: kernels.gemm(a4, a4, o4), min_reps=2000)[0],
        "jitnn op": median_seconds(lambda: jitnn.matmul(t4, t4).numpy(out=o4), min_reps=2000)[0],
        "numpy": median_seconds(lambda: np.matmul(a4, a4, out=o4), min_reps=2000)[0],
        "torch": median_seconds(lambda: torch.matmul(torch.from_numpy(a4), torch.from_numpy(a4)),
                                min_reps=2000)[0],
    }
    return {"threads": threads, "peak": sgemm_peak_gflops(), "rows": rows, "tiny_s": tiny,
            "machine": machine_facts(), "torch": torch.__version__}


_COMPILE_PROBE = r"""
import json, time, numpy as np
from jitnn.kernels import matmul as k
out = {}
for name, (m, n, kk) in {"direct (4x4x4)": (4, 4, 4), "packed serial (64^3)": (64, 64, 64),
                         "packed parallel (512^3)": (512, 512, 512)}.items():
    a = np.ones((m, kk), np.float32); b = np.ones((kk, n), np.float32); o = np.empty((m, n), np.float32)
    t = time.perf_counter(); k.gemm(a, b, o); out[name] = time.perf_counter() - t
print(json.dumps(out))
"""


def report(results, compile_info) -> str:
    facts = results[0]["machine"]
    lines = [f"{facts['date']}, {facts['cpu']} ({facts['simd']}), numba {facts['numba']} "
             f"(LLVM {facts['llvm']}), numpy {facts['numpy']} (OpenBLAS), torch {results[0]['torch']}. "
             "GFLOP/s, median of repeats."]
    for result in results:
        t = result["threads"]
        lines += ["", f"**{t} thread{'s' if t > 1 else ''}** (OpenBLAS sgemm 1024^3 peak in this run: "
                      f"{result['peak']:.0f} GFLOP/s)", "",
                  "| shape | jitnn kernel | jitnn op | numpy | torch | kernel / numpy | op / numpy | kernel / torch |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in result["rows"]:
            lines.append(f"| {r['shape']} | {r['jitnn_kernel']:.1f} | {r['jitnn_op']:.1f} | {r['numpy']:.1f} "
                         f"| {r['torch']:.1f} | {r['jitnn_kernel'] / r['numpy']:.2f} "
                         f"| {r['jitnn_op'] / r['numpy']:.2f} | {r['jitnn_kernel'] / r['torch']:.2f} |")
        tiny = result["tiny_s"]
        lines.append("\nper-call time of a 4x4 product: " + ", ".join(
            f"{name} {seconds * 1e6:.1f} us" for name, seconds in tiny.items()))
    if compile_info:
        lines += [""] + compile_table(compile_info, "gemm path")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(int(args.threads), args.quick)))
        return
    results = run_per_thread_count(os.path.abspath(__file__),
                                   [int(t) for t in args.threads.split(",")],
                                   ["--quick"] if args.quick else [])
    compile_info = None if args.quick else compile_times(_COMPILE_PROBE)
    print(report(results, compile_info))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"results": results, "compile": compile_info}, handle, indent=1)


if __name__ == "__main__":
    main()
