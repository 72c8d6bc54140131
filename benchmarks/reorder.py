"""Reorder throughput: jitnn's layout kernels against np.copyto and numpy.

    python benchmarks/reorder.py            # full table, 1 and 2 threads
    python benchmarks/reorder.py --quick    # small sizes only

Throughput is (bytes read + bytes written) / time, so a conversion that pads
C = 3 up to 8 gets credit for the larger buffer it writes. Every row compares,
in the same run, against ``np.copyto`` of the source's bytes (the memory-bound
ceiling, single-threaded in numpy) and against numpy doing the same conversion
with a transposed view and one strided copy. Also measured, each in a fresh
process with an empty kernel cache: ``import jitnn`` time and every reorder
kernel's cold compile time and its load time from the cache.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys

import numba
import numpy as np

from jitnn import layouts

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _harness import compile_table, compile_times, median_seconds  # noqa: E402
from jitnn.kernels import layout as kernels

BLOCK = 8


def cases(quick):
    sides = (16, 32, 64) if quick else (16, 32, 64, 128, 256, 512)
    for side in sides:
        yield (1, 64, side, side)
    yield (1, 3, 224, 224) if quick else (8, 3, 224, 224)
    yield (2, 17, 56, 56)


def reorder_rows(shape, threads):
    n, c, h, w = shape
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    blocked = layouts.reference_nchw_to_blocked(x, BLOCK)
    cp = layouts.padded_channels(c, BLOCK)
    plain_out, nhwc_out, blocked_out = np.empty_like(x), np.empty_like(nhwc), np.empty_like(blocked)
    copy_dst = np.empty_like(x)
    copy_s, _, _ = median_seconds(lambda: np.copyto(copy_dst, x))
    padded = np.zeros((n, cp, h, w), np.float32)
    padded_nhwc = np.zeros((n, h, w, cp), np.float32)

    def numpy_nchw_to_blocked():  # zero-pad (if needed) then one strided copy
        source = x
        if cp != c:
            padded[:, :c] = x
            source = padded
        np.copyto(blocked_out, source.reshape(n, cp // BLOCK, BLOCK, h, w).transpose(0, 1, 3, 4, 2))

    def numpy_blocked_to_nchw():
        view = blocked.transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w) if cp == c else \
            blocked.transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w)[:, :c]
        np.copyto(plain_out, view)

    def numpy_nhwc_to_blocked():
        source = nhwc
        if cp != c:
            padded_nhwc[..., :c] = nhwc
            source = padded_nhwc
        np.copyto(blocked_out, source.reshape(n, h, w, cp // BLOCK, BLOCK).transpose(0, 3, 1, 2, 4))

    def numpy_blocked_to_nhwc():
        np.copyto(nhwc_out, blocked.transpose(0, 2, 3, 1, 4).reshape(n, h, w, cp)[..., :c])

    conversions = [
        ("nchw -> nChw8c", lambda: kernels.nchw_to_blocked(x, blocked_out), numpy_nchw_to_blocked),
        ("nChw8c -> nchw", lambda: kernels.blocked_to_nchw(blocked, plain_out), numpy_blocked_to_nchw),
        ("nhwc -> nChw8c", lambda: kernels.nhwc_to_blocked(nhwc, blocked_out), numpy_nhwc_to_blocked),
        ("nChw8c -> nhwc", lambda: kernels.blocked_to_nhwc(blocked, nhwc_out), numpy_blocked_to_nhwc),
    ]
    moved = x.nbytes + blocked.nbytes
    for name, ours, theirs in conversions:
        numba.set_num_threads(threads)
        ours_s, _, _ = median_seconds(ours)
        numpy_s, _, _ = median_seconds(theirs)
        yield {
            "reorder": name, "shape": list(shape), "threads": threads,
            "mbytes": x.nbytes / 1e6,
            "jitnn_gbs": moved / ours_s / 1e9,
            "copyto_gbs": 2 * x.nbytes / copy_s / 1e9,
            "numpy_gbs": moved / numpy_s / 1e9,
        }


def filter_rows(threads):
    for shape in ((64, 64, 3, 3), (256, 256, 3, 3), (512, 2048, 1, 1)):
        w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        packed = np.empty((shape[0] // BLOCK, shape[1] // BLOCK, shape[2], shape[3], BLOCK, BLOCK),
                          np.float32)
        numba.set_num_threads(threads)
        ours_s, _, _ = median_seconds(lambda: kernels.pack_filter(w, 1, packed))
        dst = np.empty_like(w)
        copy_s, _, _ = median_seconds(lambda: np.copyto(dst, w))
        o, i, kh, kw = shape
        numpy_s, _, _ = median_seconds(lambda: np.copyto(
            packed, w.reshape(o // BLOCK, BLOCK, i // BLOCK, BLOCK, kh, kw).transpose(0, 2, 4, 5, 3, 1)))
        yield {"reorder": "oihw -> OIhw8i8o", "shape": list(shape), "threads": threads,
               "mbytes": w.nbytes / 1e6, "jitnn_gbs": 2 * w.nbytes / ours_s / 1e9,
               "copyto_gbs": 2 * w.nbytes / copy_s / 1e9,
               "numpy_gbs": 2 * w.nbytes / numpy_s / 1e9}


_COMPILE_PROBE = r"""
import json, sys, time
t0 = time.perf_counter()
import jitnn
import_s = time.perf_counter() - t0
import numpy as np
from jitnn.kernels import layout as k
x = np.ones((1, 9, 5, 7), np.float32); b = np.empty((1, 2, 5, 7, 8), np.float32)
nh = np.ones((1, 5, 7, 9), np.float32); w = np.ones((9, 9, 3, 3), np.float32)
p = np.empty((2, 2, 3, 3, 8, 8), np.float32)
calls = {"nchw_to_blocked": lambda: k.nchw_to_blocked(x, b),
         "blocked_to_nchw": lambda: k.blocked_to_nchw(b, x),
         "nhwc_to_blocked": lambda: k.nhwc_to_blocked(nh, b),
         "blocked_to_nhwc": lambda: k.blocked_to_nhwc(b, nh),
         "pack_filter": lambda: k.pack_filter(w, 1, p)}
out = {"import_s": import_s}
for name, call in calls.items():
    t = time.perf_counter(); call(); out[name] = time.perf_counter() - t
print(json.dumps(out))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    parser.add_argument("--json", help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    threads = [int(t) for t in args.threads.split(",")]
    rows = []
    for count in threads:
        for shape in cases(args.quick):
            rows.extend(reorder_rows(shape, count))
        rows.extend(filter_rows(count))
    compile_info = compile_times(_COMPILE_PROBE)

    print(f"# reorder throughput, {datetime.date.today()}, {platform.processor() or platform.machine()}, "
          f"numba {numba.__version__}, numpy {np.__version__}; GB/s = (read + written) / time")
    print("| reorder | shape | MB | threads | jitnn GB/s | np.copyto GB/s | x copyto | numpy transpose GB/s | x numpy |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['reorder']} | {'x'.join(map(str, r['shape']))} | {r['mbytes']:.2f} | {r['threads']} "
              f"| {r['jitnn_gbs']:.1f} | {r['copyto_gbs']:.1f} | {r['jitnn_gbs'] / r['copyto_gbs']:.2f} "
              f"| {r['numpy_gbs']:.1f} | {r['jitnn_gbs'] / r['numpy_gbs']:.1f} |")
    print()
    print(f"import jitnn (nothing compiled, empty cache): {compile_info['cold']['import_s'] * 1e3:.0f} ms")
    print("\n".join(compile_table(compile_info, "kernel")))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"rows": rows, "compile": compile_info}, handle, indent=1)


if __name__ == "__main__":
    main()
