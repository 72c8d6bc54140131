"""conv2d speed against the channel block, and what padding small C costs.

A 3x3 convolution (padding 1, batch 1, O = C) at a fixed spatial size, for
C = 3, 16, 64, 256 and every block the kernels support (1, 4, 8, 16, 32), at
the kernel level: ``jitnn.kernels.conv2d.pack_conv2d_filter`` and
``conv2d_forward`` on an ``nChw{block}c`` input made by
``jitnn.kernels.layout.nchw_to_blocked``. Columns:

* memory: how much bigger the blocked activation is than the plain one,
  ``ceil(C / block) * block / C`` (C = 3 padded to 8 lanes: 2.7x);
* useful work: the share of the multiply-adds the kernel does that are not on
  padding lanes (input and output channels are both padded);
* GFLOP/s counts the logical convolution's flops only, so padding shows as
  lost speed; % of peak is over the OpenBLAS sgemm rate; "x block 8" compares
  with block 8 at the same C; torch NCHW (``F.conv2d``) is the same conv in
  PyTorch, for scale;
* reorders: the time of ``nchw -> nChw{block}c`` of the input plus
  ``nChw{block}c -> nchw`` of the output, as a share of the conv's time: the
  tax a framework pays when it converts around every op.

A block of 8 float32 fills one AVX2 register: smaller blocks leave vector
lanes idle (block 1 cannot vectorize over channels at all); block 16 (two
registers per block) measured a few percent faster than 8 for C >= 64 on this
Zen 3 (2026-11-22, 1 thread: 1.03-1.05x) but pads small C twice as far and
doubles the reorders' granularity, which is why the default stays 8; block 32
needs more registers per tile than the 16 AVX2 has and spills. The C = 3 row
marked "plain input" is the first-layer path, which reads the NCHW input as
it is, with no padding (what ONNX Runtime does too).
"""

from __future__ import annotations

from .harness import Column, Run, markdown_table, ratio

DESCRIPTION = "conv2d GFLOP/s against block size (1-32) and channel count, and what padding costs"
UNIT = "GFLOP/s"
PEERS = ("torch",)
BLOCKS = (1, 4, 8, 16, 32)
CHANNELS = (3, 16, 64, 256)
SIZE = 28
QUICK_CHANNELS = (3, 16, 64)
QUICK_SIZE = 8


def _padded(c: int, block: int) -> int:
    return -(-c // block) * block


def measure(run: Run) -> dict:
    import numpy as np

    from jitnn.kernels import conv2d as kernels
    from jitnn.kernels import layout as layout_kernels

    torch = None
    if "torch" in run.peers:
        import torch
        import torch.nn.functional as F
    size = QUICK_SIZE if run.quick else int(run.options.get("size", SIZE))
    channels = QUICK_CHANNELS if run.quick else tuple(run.options.get("channels", CHANNELS))
    todo = [(c, block, False) for c in channels for block in BLOCKS]
    todo += [(c, 8, True) for c in channels if c < 8]
    rows = []
    torch_rate = {}
    for index, (c, block, plain) in enumerate(todo):
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, c, size, size)).astype(np.float32)
        w = (rng.standard_normal((c, c, 3, 3)) * 0.1).astype(np.float32)
        flops = 2 * c * c * 9 * size * size
        cp = _padded(c, block)
        packed = kernels.pack_conv2d_filter(w, c, 1, block, input_is_plain=plain)
        if plain:
            xb = x
        else:
            xb = kernels.aligned_empty((1, cp // block, size, size, block))
            layout_kernels.nchw_to_blocked(x, xb)
        yb = kernels.aligned_empty((1, cp // block, size, size, block))
        conv_s, lo, hi = run.median(lambda: kernels.conv2d_forward(
            xb, packed, yb, (1, 1), (1, 1), (1, 1, 1, 1)))
        y_plain = np.empty((1, c, size, size), np.float32)
        out_s = run.median(lambda: layout_kernels.blocked_to_nchw(yb, y_plain))[0]
        in_s = 0.0 if plain else run.median(lambda: layout_kernels.nchw_to_blocked(x, xb))[0]
        if torch is not None and c not in torch_rate:
            xt, wt = torch.from_numpy(x), torch.from_numpy(w)
            with torch.no_grad():
                torch_rate[c] = flops / run.median(lambda: F.conv2d(xt, wt, padding=1))[0] / 1e9
        in_lanes = c if plain else cp
        rows.append({
            "channels": c, "block": block, "size": size, "threads": run.threads,
            "layout": "nchw in (first-layer path)" if plain else f"nChw{block}c",
            "plain_input": plain, "padded_channels": cp,
            "memory_factor": 1.0 if plain else cp / c,
            "useful_work": (c * c) / (in_lanes * cp),
            "gflop": flops / 1e9, "gflops": flops / conv_s / 1e9,
            "gflops_spread": [flops / hi / 1e9, flops / lo / 1e9],
            "conv_s": conv_s, "reorder_in_s": in_s, "reorder_out_s": out_s,
            "torch_nchw": torch_rate.get(c),
        })
        run.progress(f"{index + 1}/{len(todo)} C={c} {rows[-1]['layout']}: "
                     f"{rows[-1]['gflops']:.1f} GFLOP/s")
    for row in rows:
        base = next(r for r in rows if r["channels"] == row["channels"] and r["block"] == 8
                    and not r["plain_input"])
        row["vs_block8"] = row["gflops"] / base["gflops"]
    return {"rows": rows, "size": size}


def row_label(row: dict) -> str:
    return f"C={row['channels']} {row['layout']}"


def _columns(peak: float) -> list[Column]:
    return [
        Column("C", lambda r: r["channels"], "d"),
        Column("block", lambda r: r["block"], "d"),
        Column("layout", lambda r: r["layout"], numeric=False),
        Column("C in memory", lambda r: r["channels"] if r["plain_input"] else r["padded_channels"],
               "d"),
        Column("memory", lambda r: f"{r['memory_factor']:.2f}x"),
        Column("useful work", lambda r: r["useful_work"], "%"),
        Column("jitnn GFLOP/s", lambda r: r["gflops"]),
        Column("x block 8", lambda r: r["vs_block8"], ".2f"),
        Column("torch NCHW", lambda r: r["torch_nchw"], peer="torch"),
        Column("ratio", lambda r: ratio(r["gflops"], r["torch_nchw"]), ".2f", peer="torch"),
        Column("% of peak", lambda r: ratio(r["gflops"], peak), "%"),
        Column("reorders / conv", lambda r: ratio(r["reorder_in_s"] + r["reorder_out_s"],
                                                  r["conv_s"]), "%"),
    ]


PLOT_COLUMNS = [("jitnn", "gflops"), ("torch NCHW", "torch_nchw", "torch")]


def render(result: dict) -> list[str]:
    rows = result["rows"]
    size = result["size"]
    lines = [f"3x3 conv, padding 1, batch 1, O = C, {size}x{size}; GFLOP/s of the logical "
             "conv (padding lanes are work that does not count).", ""]
    lines += markdown_table(_columns(result["peak_gflops"]), rows, result["peers"])
    best = []
    for c in sorted({r["channels"] for r in rows}):
        blocked = [r for r in rows if r["channels"] == c and not r["plain_input"]]
        top = max(blocked, key=lambda r: r["gflops"])
        best.append(f"C={c}: {top['block']}")
    lines.append("\nfastest block per C: " + ", ".join(best))
    return lines


def plot(ax, result: dict) -> None:
    rows = result["rows"]
    for c in sorted({r["channels"] for r in rows}):
        line = [r for r in rows if r["channels"] == c and not r["plain_input"]]
        ax.plot([r["block"] for r in line], [r["gflops"] for r in line], marker="o",
                label=f"C={c} (memory at block 8: {_padded(c, 8) / c:.2f}x)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(BLOCKS))
    ax.set_xticklabels([str(b) for b in BLOCKS])
    ax.set_xlabel("block (channels per vector block)")
    ax.set_ylabel("GFLOP/s")
    ax.axhline(result["peak_gflops"], color="k", linestyle="--", linewidth=1,
               label="OpenBLAS sgemm peak")
    ax.legend(fontsize=7)


COMPILE_LABEL = "block"
COMPILE_PROBE = r"""
import json, time, numpy as np
from jitnn.kernels import conv2d as k
out = {}
for cb in (1, 4, 8, 16, 32):
    w = np.ones((16, 16, 3, 3), np.float32)
    p = k.pack_conv2d_filter(w, 16, 1, cb)
    x = np.ones((1, -(-16 // cb), 9, 9, cb), np.float32)
    y = np.empty((1, -(-16 // cb), 7, 7, cb), np.float32)
    t = time.perf_counter(); k.conv2d_forward(x, p, y); out[f"direct, block {cb}"] = time.perf_counter() - t
print(json.dumps(out))
"""
