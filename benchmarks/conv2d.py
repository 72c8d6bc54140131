"""conv2d GFLOP/s: jitnn against PyTorch (oneDNN), NCHW and blocked, same run.

    python benchmarks/conv2d.py                  # 1 and 2 threads, batch 1 and 8
    python benchmarks/conv2d.py --quick          # batch 1, a few layers

Columns, each the median of repeated runs after warm-up (compile excluded):

* jitnn blocked: the kernel alone, input already ``nChw8c`` and filter packed,
  output left blocked; compare with torch blocked (``to_mkldnn`` tensors).
* jitnn NCHW: what a caller of ``jitnn.conv2d`` pays from a numpy NCHW array
  to a numpy NCHW result: copy-in, reorder in, conv, reorder out into a
  preallocated array; compare with torch NCHW (``F.conv2d`` on NCHW tensors).
* peak: the OpenBLAS sgemm rate (numpy, 1024^3) with the same threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import compile_table, compile_times, geomean, machine_facts, median_seconds, run_per_thread_count, sgemm_peak_gflops  # noqa: E402

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


def worker(threads: int, batches: list[int], quick: bool) -> dict:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch.utils.mkldnn

    import jitnn
    from jitnn.kernels import conv2d as kernels

    torch.set_num_threads(threads)
    ctx = jitnn.Context(num_threads=threads)
    rows = []
    layers = [(l, "resnet50") for l in RESNET50] + [(l, "mobilenetv2") for l in MOBILENET_DW]
    if quick:
        layers = [(l, net) for l, net in layers if l[0] in QUICK]
    for batch in batches:
        for (name, c, o, hw, k, s, p, g), net in layers:
            rng = np.random.default_rng(0)
            x = rng.standard_normal((batch, c, hw, hw)).astype(np.float32)
            w = rng.standard_normal((o, c // g, k, k)).astype(np.float32) * 0.1
            oh = (hw + 2 * p - k) // s + 1
            flops = 2 * batch * o * oh * oh * (c // g) * k * k
            # jitnn, kernel alone on blocked data
            w_t = ctx.tensor(w)
            jitnn.conv2d(ctx.tensor(x[:1, :, :8, :8]), w_t, strides=s, padding=p, groups=g).numpy()
            first_layer = c < ctx.block
            packed = kernels.pack_conv2d_filter(w, c, g, ctx.block, input_is_plain=first_layer)
            xb = x if first_layer else jitnn.reorder(ctx.tensor(x), f"nChw{ctx.block}c")._materialize()
            yb = np.empty((batch, -(-o // ctx.block), oh, oh, ctx.block), np.float32)
            import numba
            numba.set_num_threads(threads)
            ours_blocked, _, _ = median_seconds(lambda: kernels.conv2d_forward(
                xb, packed, yb, (s, s), (1, 1), (p, p, p, p)))
            # jitnn from NCHW numpy to NCHW numpy
            out = np.empty((batch, o, oh, oh), np.float32)
            ours_nchw, _, _ = median_seconds(lambda: jitnn.conv2d(
                ctx.tensor(x), w_t, strides=s, padding=p, groups=g).numpy(out=out))
            # torch
            xt, wt = torch.from_numpy(x), torch.from_numpy(w)
            with torch.no_grad():
                torch_nchw, _, _ = median_seconds(lambda: F.conv2d(xt, wt, stride=s, padding=p, groups=g))
                try:
                    conv = torch.nn.Conv2d(c, o, k, stride=s, padding=p, groups=g, bias=False)
                    conv.weight.data = wt
                    conv = torch.utils.mkldnn.to_mkldnn(conv)
                    xm = xt.to_mkldnn()
                    torch_blocked, _, _ = median_seconds(lambda: conv(xm))
                except RuntimeError:
                    torch_blocked = float("nan")
            rows.append({"net": net, "layer": name, "batch": batch, "threads": threads,
                         "gflop": flops / 1e9,
                         "jitnn_blocked": flops / ours_blocked / 1e9,
                         "jitnn_nchw": flops / ours_nchw / 1e9,
                         "torch_blocked": flops / torch_blocked / 1e9,
                         "torch_nchw": flops / torch_nchw / 1e9})
            print(f"  {threads}t b{batch} {name}: {rows[-1]['jitnn_blocked']:.1f} GFLOP/s", file=sys.stderr)
    return {"threads": threads, "peak": sgemm_peak_gflops(), "rows": rows,
            "machine": machine_facts(), "torch": torch.__version__}


_COMPILE_PROBE = r"""
import json, time, numpy as np
t0 = time.perf_counter()
from jitnn.kernels import conv2d as k
t_import = time.perf_counter() - t0
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


def report(results: list[dict], compile_info: dict | None) -> str:
    lines = []
    facts = results[0]["machine"]
    lines.append(f"{facts['date']}, {facts['cpu']} ({facts['simd']}), numba {facts['numba']} "
                 f"(LLVM {facts['llvm']}), torch {results[0]['torch']}. GFLOP/s, median of repeats.")
    for result in results:
        t = result["threads"]
        lines.append("")
        lines.append(f"**{t} thread{'s' if t > 1 else ''}** (OpenBLAS sgemm peak in this run: "
                     f"{result['peak']:.0f} GFLOP/s)")
        lines.append("")
        lines.append("| layer | batch | jitnn blocked | torch blocked | ratio | jitnn NCHW | torch NCHW | ratio | % of peak |")
        lines.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in result["rows"]:
            lines.append(
                f"| {r['layer']} | {r['batch']} | {r['jitnn_blocked']:.1f} | {r['torch_blocked']:.1f} "
                f"| {r['jitnn_blocked'] / r['torch_blocked']:.2f} | {r['jitnn_nchw']:.1f} | "
                f"{r['torch_nchw']:.1f} | {r['jitnn_nchw'] / r['torch_nchw']:.2f} | "
                f"{100 * r['jitnn_blocked'] / result['peak']:.0f} % |")
        for net in ("resnet50", "mobilenetv2"):
            for batch in sorted({r["batch"] for r in result["rows"]}):
                rows = [r for r in result["rows"] if r["net"] == net and r["batch"] == batch]
                if not rows:
                    continue
                lines.append(
                    f"\ngeomean {net} batch {batch}: jitnn blocked / torch blocked "
                    f"{geomean(r['jitnn_blocked'] / r['torch_blocked'] for r in rows):.2f}, "
                    f"jitnn blocked / torch NCHW {geomean(r['jitnn_blocked'] / r['torch_nchw'] for r in rows):.2f}, "
                    f"jitnn NCHW / torch NCHW {geomean(r['jitnn_nchw'] / r['torch_nchw'] for r in rows):.2f}")
    if len(results) > 1:
        one, two = results[0], results[1]
        speedups = [b["jitnn_blocked"] / a["jitnn_blocked"] for a, b in zip(one["rows"], two["rows"])]
        lines.append(f"\n{two['threads']}-thread speedup of jitnn blocked over 1 thread: geomean "
                     f"{geomean(speedups):.2f} (min {min(speedups):.2f}, max {max(speedups):.2f})")
    if compile_info:
        lines += [""] + compile_table(compile_info, "path")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    batches = [1] if args.quick else [int(b) for b in args.batches.split(",")]
    if args.worker:
        print(json.dumps(worker(int(args.threads), batches, args.quick)))
        return
    extra = ["--batches", ",".join(map(str, batches))] + (["--quick"] if args.quick else [])
    results = run_per_thread_count(os.path.abspath(__file__),
                                   [int(t) for t in args.threads.split(",")], extra)
    compile_info = None if args.quick else compile_times(_COMPILE_PROBE)
    print(report(results, compile_info))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"results": results, "compile": compile_info}, handle, indent=1)


if __name__ == "__main__":
    main()
