"""``jitnn demo``: what layout costs, on this machine, in half a minute.

A framework calls conv2d op by op and reads only the last result (the seed
scenario), and runs a ResNet-50 bottleneck block (conv + batch norm + relu x 3
and a residual add). Both run under jitnn's three policies:

* ``plain``: every op converts its input to blocked and its result back to
  NCHW (what a backend does when the framework needs standard layout);
* ``eager``: every op runs at its call on blocked data (no conversions
  between ops, no fusion);
* ``blocked``: ops are recorded; the read runs one fused plan, blocked
  throughout, converted once at each end.

The table shows time, reorders, bytes reordered, the reorder tax (share of
time in reorders), the runtime's own share (time in neither the op kernels
nor the reorders: recording, planning, Python, copying the input in) and the
speedup over plain;
then the blocked plan as ``jitnn.explain`` prints it, and a plot of each
policy's time in op kernels, in reorders and in the runtime.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

import numpy as np

from . import compile_pool, default_context, precompile
from .bench.workloads import POLICIES, jitnn_forward, parameters, workloads
from .bench.harness import median_seconds

PLOT = "jitnn-demo.png"


def run(quick: bool = False, threads: int | None = None, plot: str | None = PLOT,
        out: TextIO | None = None) -> dict:
    """Run the demo, print its report to ``out`` (stdout); returns the measurements."""
    import jitnn
    out = sys.stdout if out is None else out

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    threads = threads or default_context().num_threads
    say(f"jitnn demo: op-by-op conv2d chains under three layout policies "
        f"({threads} thread{'s' if threads > 1 else ''}, block {default_context().block})")
    # the demo's kernels first, compiled on every core by worker processes
    # (a progress bar on stderr; nothing to do once they are in the cache)
    warmed = precompile.run_workloads(precompile.demo_workloads(threads, quick),
                                      compile_pool.default_workers())
    if warmed.needed:
        say(f"compiled {warmed.compiled} of jitnn's kernels in {warmed.seconds:.1f} s in "
            f"{warmed.workers} processes (first time only, then they load from the disk cache)")
    rows, explained = [], None
    first_call = True
    for name, shape, kind, mid in workloads(quick):
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        params = parameters(kind, shape[1], mid, np)
        result = np.empty(shape, np.float32)
        answers = {}
        for policy in POLICIES:
            ctx = jitnn.Context(num_threads=threads, policy=policy)
            weights = [(ctx.tensor(w), None if bn is None else [ctx.tensor(v) for v in bn], pad)
                       for w, bn, pad in params]

            def once(ctx=ctx, weights=weights):
                return jitnn_forward(jitnn, kind, ctx.tensor(x), weights).numpy(out=result)
            if first_call:
                print("warming up: the first run compiles jitnn's kernels (first time only, "
                      "then they load from the disk cache) ...", end="", file=out, flush=True)
            start = time.perf_counter()
            once()                                  # compiles (first run) and packs filters
            seconds = time.perf_counter() - start
            if first_call:
                say(f" {seconds:.1f} s")
                first_call = False
            elif ctx.stats.compile_s > 0.5:
                say(f"  compiled more kernels for {name} ({policy}) in {seconds:.1f} s")
            answers[policy] = result.copy()
            ctx.reset_stats()
            once()
            stats = ctx.stats
            # the bench suites' timing: median over >= 0.3 s of repeats after warm-up
            seconds = median_seconds(once, min_time=0.05 if quick else 0.3)[0]
            # the shares of the time (reorders, op kernels, the rest) over more
            # repeats timed as a whole (median_seconds sleeps before it times)
            ctx.reset_stats()
            start = time.perf_counter()
            for _ in range(3 if quick else 20):
                once()
            elapsed = time.perf_counter() - start
            spent = ctx.stats
            tax = spent.reorder_s / elapsed
            kernel_share = spent.launch_s / elapsed
            runtime_share = max(0.0, 1.0 - tax - kernel_share)
            rows.append({"workload": name, "policy": policy, "ms": seconds * 1e3,
                         "reorders": stats.reorders, "reorder_mb": stats.reorder_bytes / 1e6,
                         "tax": tax, "reorder_ms": tax * seconds * 1e3,
                         "kernel_ms": kernel_share * seconds * 1e3,
                         "runtime_share": runtime_share,
                         "launches": stats.launches, "fused": stats.fused_ops})
            if policy == "blocked" and kind == "seed":
                h = jitnn_forward(jitnn, kind, ctx.tensor(x), weights)
                h.numpy(out=result)
                explained = jitnn.explain(h)
        worst = max(float(np.abs(answers[p] - answers["blocked"]).max()) for p in POLICIES)
        rows[-1]["max_diff"] = worst
    say()
    say("| workload | policy | time ms | reorders | MB reordered | reorder tax | runtime's own "
        "| launches | fused ops | speedup over plain |")
    say("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        plain = next(r for r in rows if r["workload"] == row["workload"]
                     and r["policy"] == "plain")
        tax = row["tax"]
        row["speedup"] = plain["ms"] / row["ms"]
        say(f"| {row['workload']} | {row['policy']} | {row['ms']:.2f} | {row['reorders']} | "
            f"{row['reorder_mb']:.1f} | {100 * tax:.0f} % | {100 * row['runtime_share']:.0f} % "
            f"| {row['launches']} | {row['fused']} | {row['speedup']:.2f}x |")
    diffs = [r["max_diff"] for r in rows if "max_diff" in r]
    say(f"\nall three policies give the same numbers (largest difference {max(diffs):.1e}); "
        "only the cost differs.")
    say("(runtime's own: the share of the time in neither the op kernels nor the reorders "
        "(`ctx.stats.launch_s`,\n`reorder_s`): recording the ops, planning, allocating, Python, "
        "and copying the input into a tensor;\nthe plain policy also copies its result into the "
        "caller's array there)")
    say("(jitnn keeps freed tensor memory for reuse, see `jitnn info`; with JITNN_MALLOC_TUNING=0 "
        "the eager and plain\npolicies, which allocate new buffers for every op, also pay a page "
        "fault per 4 KiB of each new buffer)")
    say("\nthe blocked plan of the seed chain (jitnn.explain after the run):\n")
    say(explained)
    result_info = {"rows": rows, "explain": explained, "threads": threads, "plot": None}
    if plot:
        result_info["plot"] = _plot(rows, plot, say)
    return result_info


def _plot(rows: list[dict], path: str, say) -> str | None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib.figure import Figure
    except ImportError:
        say(f"\n(no plot: matplotlib is not installed; `pip install matplotlib` or "
            f"`pip install 'jitnn[bench]'` to get {path})")
        return None
    names = list(dict.fromkeys(r["workload"] for r in rows))
    figure = Figure(figsize=(4 + 3 * len(names), 4))
    axes = figure.subplots(1, len(names), squeeze=False)[0]
    for ax, workload in zip(axes, names):
        chosen = [r for r in rows if r["workload"] == workload]
        labels = [r["policy"] for r in chosen]
        kernels = [min(r["kernel_ms"], r["ms"]) for r in chosen]
        reorder = [min(r["reorder_ms"], r["ms"] - k) for r, k in zip(chosen, kernels)]
        runtime = [r["ms"] - k - t for r, k, t in zip(chosen, kernels, reorder)]
        ax.bar(labels, kernels, label="op kernels", color="#4c72b0")
        ax.bar(labels, reorder, bottom=kernels, label="reorders", color="#dd8452")
        ax.bar(labels, runtime, bottom=[k + t for k, t in zip(kernels, reorder)],
               label="runtime (Python, copy in)", color="#8c8c8c")
        ax.set_title(workload, fontsize=9)
        ax.set_ylabel("ms")
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=3)    # under the panels
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    figure.savefig(path, dpi=110)
    say(f"\nplot: {path} (each policy's time split into op kernels, reorders and the runtime)")
    return path
