"""Reorder throughput: jitnn's layout kernels against np.copyto and numpy.

Throughput is (bytes read + bytes written) / time, so a conversion that pads
C = 3 up to 8 gets credit for the larger buffer it writes. Every row compares,
in the same run, against ``np.copyto`` moving as many bytes (the
memory-bound ceiling: this suite's peak; single-threaded in numpy) and
against numpy doing the same conversion with a transposed view and one
strided copy (the numpy peer). Block 8 (``nChw8c``, AVX2's register).
The blocked buffers and packed filters are 64-byte aligned, as the runtime
allocates them; the plain arrays (the caller's) and the copy's are ``np.empty``.

The copy reads and writes half of the bytes the conversion moves each, so
both have the same working set: C = 3 reads 4.8 MB and writes 12.8 MB at
8x3x224x224, and a copy of the source's 4.8 MB would stay in a cache that
the conversion's 17.6 MB does not fit. jitnn's kernels and the copy are
timed side by side in rounds (:func:`harness.paired_seconds`); "x copyto" is
the median over rounds of the ratio within a round.

Where the buffers land matters as much as the code: the same copy of 4.2 MB
took 135 to 174 us in six sets of fresh buffers, and a conversion's ratio
moved from 0.79 to 0.93x with them (2026-11-23). So every row is measured on
``PLACEMENTS`` sets of buffers, allocated anew for the conversions and the
copy alike while the earlier sets stay alive (so they are new memory), in
``ROUNDS`` rounds each; a row's figures are medians over all those rounds.

The compile probe measures ``import jitnn`` and every reorder kernel's cold
compile and cached load, each in a fresh process with an empty kernel cache.
"""

from __future__ import annotations

import statistics

from .harness import Column, Run, markdown_table, ratio

DESCRIPTION = "layout reorders (nchw/nhwc <-> nChw8c, filter packing) against np.copyto and numpy"
UNIT = "GB/s"
PEERS = ("numpy",)
BLOCK = 8
FILTERS = ((64, 64, 3, 3), (256, 256, 3, 3), (512, 2048, 1, 1))
#: sets of buffers per row, and paired rounds on each (quick mode: one set)
PLACEMENTS = 3
ROUNDS = 8


def cases(quick: bool):
    sides = (16, 32, 64) if quick else (16, 32, 64, 128, 256, 512)
    for side in sides:
        yield (1, 64, side, side)
    yield (1, 3, 56, 56) if quick else (8, 3, 224, 224)
    yield (2, 17, 56, 56)
    if not quick:  # deep tensors, as in a ResNet's later stages; the last from memory
        yield from ((1, 256, 56, 56), (1, 512, 28, 28), (1, 2048, 7, 7), (4, 256, 56, 56))


def placed_seconds(run: Run, make_set) -> tuple[dict[str, list[float]], object]:
    """Per-call seconds of the functions of ``PLACEMENTS`` sets of buffers,
    paired in rounds set by set, and the first set's extra. ``make_set()``
    allocates a set and returns ``(functions, extra)``; all sets stay alive
    until the end, so each is new memory."""
    sets = [make_set() for _ in range(1 if run.quick else PLACEMENTS)]
    seconds: dict[str, list[float]] = {}
    for functions, _ in sets:
        for name, times in run.paired(functions, rounds=ROUNDS).items():
            seconds.setdefault(name, []).extend(times)
    return seconds, sets[0][1]


REORDERS = ("nchw -> nChw8c", "nChw8c -> nchw", "nhwc -> nChw8c", "nChw8c -> nhwc")


def reorder_rows(run: Run, shape):
    n, c, h, w = shape
    seconds, (numpy_functions, moved) = placed_seconds(run, lambda: _reorder_set(shape))
    for name in REORDERS:
        numpy_s = run.median(numpy_functions[name])[0] if "numpy" in run.peers else None
        yield row(run, name, shape, 4 * n * c * h * w, moved, seconds[name],
                  seconds["copyto"], numpy_s)


def _reorder_set(shape):
    """One set of buffers for ``shape``: ``(timed, (numpy, moved))``, the copy
    and jitnn's four conversions by name, numpy's by name, and the bytes a
    conversion moves."""
    import numpy as np

    from jitnn import layouts
    from jitnn.kernels import layout as kernels
    from jitnn.kernels.buffers import aligned_empty

    n, c, h, w = shape
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    # the blocked side is jitnn's own buffer, 64-byte aligned as the runtime
    # allocates it; the plain side is the caller's array (np.empty)
    blocked = aligned_empty(layouts.blocked_shape(shape, BLOCK))
    blocked[...] = layouts.reference_nchw_to_blocked(x, BLOCK)
    cp = layouts.padded_channels(c, BLOCK)
    plain_out, nhwc_out = np.empty_like(x), np.empty_like(nhwc)
    blocked_out = aligned_empty(blocked.shape)
    padded = np.zeros((n, cp, h, w), np.float32)
    padded_nhwc = np.zeros((n, h, w, cp), np.float32)

    def numpy_nchw_to_blocked():  # zero-pad (if needed) then one strided copy
        source = x
        if cp != c:
            padded[:, :c] = x
            source = padded
        np.copyto(blocked_out, source.reshape(n, cp // BLOCK, BLOCK, h, w).transpose(0, 1, 3, 4, 2))

    def numpy_blocked_to_nchw():
        np.copyto(plain_out, blocked.transpose(0, 1, 4, 2, 3).reshape(n, cp, h, w)[:, :c])

    def numpy_nhwc_to_blocked():
        source = nhwc
        if cp != c:
            padded_nhwc[..., :c] = nhwc
            source = padded_nhwc
        np.copyto(blocked_out, source.reshape(n, h, w, cp // BLOCK, BLOCK).transpose(0, 3, 1, 2, 4))

    def numpy_blocked_to_nhwc():
        np.copyto(nhwc_out, blocked.transpose(0, 2, 3, 1, 4).reshape(n, h, w, cp)[..., :c])

    moved = x.nbytes + blocked.nbytes
    timed = {
        "copyto": same_bytes_copy(moved),
        "nchw -> nChw8c": lambda: kernels.nchw_to_blocked(x, blocked_out),
        "nChw8c -> nchw": lambda: kernels.blocked_to_nchw(blocked, plain_out),
        "nhwc -> nChw8c": lambda: kernels.nhwc_to_blocked(nhwc, blocked_out),
        "nChw8c -> nhwc": lambda: kernels.blocked_to_nhwc(blocked, nhwc_out),
    }
    numpy_functions = dict(zip(REORDERS, (numpy_nchw_to_blocked, numpy_blocked_to_nchw,
                                          numpy_nhwc_to_blocked, numpy_blocked_to_nhwc)))
    return timed, (numpy_functions, moved)


def same_bytes_copy(moved: int):
    """``np.copyto`` of ``moved / 2`` bytes: it moves (reads plus writes) as many
    bytes as the conversion it is compared with."""
    import numpy as np

    source = np.random.default_rng(2).standard_normal(moved // 8).astype(np.float32)
    target = np.empty_like(source)
    return lambda: np.copyto(target, source)


def row(run: Run, name: str, shape, source_bytes: int, moved: int, ours: list[float],
        copy: list[float], numpy_s: float | None) -> dict:
    """One table row from the paired per-round times of a conversion and the copy."""
    ours_s = statistics.median(ours)
    return {
        "reorder": name, "shape": list(shape), "threads": run.threads,
        "mbytes": source_bytes / 1e6,
        "jitnn_gbs": moved / ours_s / 1e9,
        "jitnn_gbs_spread": [moved / max(ours) / 1e9, moved / min(ours) / 1e9],
        "copyto_gbs": moved / statistics.median(copy) / 1e9,
        "copyto_ratio": statistics.median(c / o for c, o in zip(copy, ours)),
        "numpy_gbs": moved / numpy_s / 1e9 if numpy_s else None,
    }


def filter_rows(run: Run):
    import numpy as np

    from jitnn.kernels import layout as kernels
    from jitnn.kernels.buffers import aligned_empty

    for shape in FILTERS[:1] if run.quick else FILTERS:
        o, i, kh, kw = shape

        def make_set():
            w = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
            # aligned, as pack_conv2d_filter allocates it
            packed = aligned_empty((o // BLOCK, i // BLOCK, kh, kw, BLOCK, BLOCK))
            moved = w.nbytes + packed.nbytes
            return ({"copyto": same_bytes_copy(moved),
                     "pack": lambda: kernels.pack_filter(w, 1, packed)},
                    (lambda: np.copyto(packed, w.reshape(o // BLOCK, BLOCK, i // BLOCK, BLOCK,
                                                         kh, kw).transpose(0, 2, 4, 5, 3, 1)),
                     moved))
        seconds, (numpy_pack, moved) = placed_seconds(run, make_set)
        numpy_s = run.median(numpy_pack)[0] if "numpy" in run.peers else None
        yield row(run, "oihw -> OIhw8i8o", shape, 4 * o * i * kh * kw, moved, seconds["pack"],
                  seconds["copyto"], numpy_s)


def measure(run: Run) -> dict:
    rows = []
    shapes = list(cases(run.quick))
    for k, shape in enumerate(shapes):
        rows.extend(reorder_rows(run, shape))
        run.progress(f"{k + 1}/{len(shapes) + 1} {'x'.join(map(str, shape))}: "
                     f"nchw -> nChw8c {rows[-4]['jitnn_gbs']:.1f} GB/s")
    rows.extend(filter_rows(run))
    run.progress(f"{len(shapes) + 1}/{len(shapes) + 1} filter packing: "
                 f"{rows[-1]['jitnn_gbs']:.1f} GB/s")
    return {"rows": rows, "block": BLOCK}


def row_label(row: dict) -> str:
    return f"{row['reorder']} {'x'.join(map(str, row['shape']))}"


COLUMNS = [
    Column("reorder", lambda r: r["reorder"], numeric=False),
    Column("shape", lambda r: "x".join(map(str, r["shape"])), numeric=False),
    Column("MB", lambda r: r["mbytes"], ".2f"),
    Column("threads", lambda r: r["threads"], "d"),
    Column("jitnn GB/s", lambda r: r["jitnn_gbs"]),
    Column("np.copyto GB/s", lambda r: r["copyto_gbs"]),
    Column("x copyto", lambda r: r.get("copyto_ratio", ratio(r["jitnn_gbs"], r["copyto_gbs"])),
           ".2f"),
    Column("numpy transpose GB/s", lambda r: r["numpy_gbs"], peer="numpy"),
    Column("x numpy", lambda r: ratio(r["jitnn_gbs"], r["numpy_gbs"]), ".1f", peer="numpy"),
]
PLOT_COLUMNS = [("jitnn", "jitnn_gbs"), ("np.copyto (peak)", "copyto_gbs"),
                ("numpy transpose", "numpy_gbs", "numpy")]


def render(result: dict) -> list[str]:
    return (["GB/s = (read + written) / time; the peak of a reorder is `np.copyto` moving as "
             "many bytes, timed side by side with it in rounds (\"x copyto\" is the median "
             "over rounds of the fraction of it).", ""]
            + markdown_table(COLUMNS, result["rows"], result["peers"]))


COMPILE_LABEL = "kernel"
COMPILE_PROBE = r"""
import json, time
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
# on one thread each runs its serial compile (kernels/_config.py, ThreadCountKernel)
import numba
numba.set_num_threads(1)
for name, call in calls.items():
    t = time.perf_counter(); call(); out[name + ", 1 thread"] = time.perf_counter() - t
print(json.dumps(out))
"""
