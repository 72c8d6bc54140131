"""Op-by-op chains: jitnn's three policies against PyTorch, and the scheduler's overhead.

Two workloads, each called op by op the way a framework calls a backend, from a
numpy NCHW array to a numpy NCHW result (copy-in and readback included):

* the seed chain: 3 x (conv 3x3 64ch 56x56 + relu), batch 1;
* a ResNet-50 bottleneck block (256 -> 64 -> 64 -> 256 channels at 56x56:
  1x1 conv + batch norm + relu, 3x3 conv + batch norm + relu, 1x1 conv +
  batch norm, residual add, relu), batch 1.

Columns: jitnn under ``policy="blocked"`` (lazy, fused, blocked between ops),
``"eager"`` (each op at its call, blocked, no fusion) and ``"plain"`` (each op
at its call, converted back to NCHW after every op), with their reorder count
and reorder tax (share of the time spent in reorders, from ``ctx.stats``),
and below the table each policy's time in kernels (op launches and reorders,
``ctx.stats.launch_s + reorder_s``) against the rest, the runtime's own;
PyTorch eager on NCHW tensors, and PyTorch with ``to_mkldnn`` tensors and
modules (blocked between ops, converted at both ends).

The three policies are timed side by side in rounds
(:func:`harness.paired_seconds`: within a round each policy runs back to back
for a burst, warm in its own buffers), and "blocked speedup over plain" is
the median over rounds of the ratio within a round. PyTorch is timed apart:
its OpenMP threads spin after a call and would slow the burst after it.

Scheduler overhead: a chain of 1x1 conv + relu pairs on a 1x8x4x4 tensor
(kernels cost nothing there), timed through ``jitnn.conv2d``/``jitnn.relu``
and ``numpy()``, minus the same kernels called directly on preallocated
buffers, the two side by side in rounds (the median over rounds of the
difference within a round); divided by the number of ops recorded.
"""

from __future__ import annotations

import statistics

from .harness import Column, Run, markdown_table, ratio
from .workloads import POLICIES, jitnn_forward, parameters, workloads  # noqa: F401

DESCRIPTION = "op-by-op chains under jitnn's three policies against PyTorch, and scheduler overhead"
UNIT = "ms"
PEERS = ("torch",)


def _torch_modules(torch, kind, params):
    layers = []
    for w, bn, pad in params:
        conv = torch.nn.Conv2d(w.shape[1], w.shape[0], w.shape[2], padding=pad, bias=False)
        conv.weight.data = torch.from_numpy(w)
        norm = None
        if bn is not None:
            norm = torch.nn.BatchNorm2d(w.shape[0])
            norm.running_mean.data, norm.running_var.data = (torch.from_numpy(bn[0]),
                                                             torch.from_numpy(bn[1]))
            norm.weight.data, norm.bias.data = torch.from_numpy(bn[2]), torch.from_numpy(bn[3])
            norm.eval()
        layers.append((conv.eval(), norm))
    return layers


def _torch_forward(torch, kind, x, layers):
    h = x
    for i, (conv, norm) in enumerate(layers):
        h = conv(h)
        if norm is not None:
            h = norm(h)
        if kind == "seed" or i < 2:
            h = torch.relu(h)
    return h if kind == "seed" else torch.relu(h + x)


def measure(run: Run) -> dict:
    import numpy as np

    import jitnn

    torch = None
    if "torch" in run.peers:
        import torch
        import torch.utils.mkldnn  # noqa: F401
    rows = []
    for name, shape, kind, mid in workloads(run.quick):
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        params = parameters(kind, shape[1], mid, np)
        out = np.empty(shape, np.float32)
        row = {"label": name, "kind": kind, "threads": run.threads}
        results, calls, per_call, contexts = {}, {}, {}, {}
        for policy in POLICIES:
            ctx = jitnn.Context(num_threads=run.threads, policy=policy)
            weights = [(ctx.tensor(w), None if bn is None else [ctx.tensor(v) for v in bn], pad)
                       for w, bn, pad in params]

            def once(ctx=ctx, weights=weights):
                return jitnn_forward(jitnn, kind, ctx.tensor(x), weights).numpy(out=out)
            once()
            results[policy] = out.copy()
            ctx.reset_stats()
            once()
            per_call[policy], calls[policy], contexts[policy] = ctx.stats, once, ctx
            ctx.reset_stats()
        # the policies side by side in rounds: each runs back to back within
        # its burst, and the host's drifts hit all three alike
        seconds = run.paired(calls)
        for policy in POLICIES:
            stats, reps = per_call[policy], contexts[policy].stats
            median_s = statistics.median(seconds[policy])
            row[policy] = median_s * 1e3
            row[f"{policy}_spread"] = [min(seconds[policy]) * 1e3, max(seconds[policy]) * 1e3]
            row[f"{policy}_reorders"] = stats.reorders
            row[f"{policy}_reorder_mb"] = stats.reorder_bytes / 1e6
            row[f"{policy}_launches"] = stats.launches
            # share of the time in reorders, over all the calls of the rounds
            runs = max(1, reps.reorders // max(1, stats.reorders))
            row[f"{policy}_tax"] = reps.reorder_s / (median_s * runs) if stats.reorders else 0.0
            # time in kernels (op launches and reorders) per run, over the
            # rounds; the rest of a run is the runtime's own
            row[f"{policy}_kernel_ms"] = (reps.launch_s + reps.reorder_s) / runs * 1e3
            run.progress(f"{name}: {policy} {median_s * 1e3:.2f} ms")
        row["plain_over_blocked"] = statistics.median(
            plain / blocked for plain, blocked in zip(seconds["plain"], seconds["blocked"]))
        row["max_diff"] = float(max(np.abs(results[p] - results["blocked"]).max()
                                    for p in POLICIES))
        row["torch_nchw"] = row["torch_mkldnn"] = None
        if torch is not None:
            layers = _torch_modules(torch, kind, params)
            with torch.no_grad():
                def torch_nchw():
                    return _torch_forward(torch, kind, torch.from_numpy(x), layers).numpy()
                row["torch_nchw"] = run.median(torch_nchw)[0] * 1e3
                try:
                    mk = [(torch.utils.mkldnn.to_mkldnn(conv),
                           None if norm is None else torch.utils.mkldnn.to_mkldnn(norm))
                          for conv, norm in layers]

                    def torch_mkldnn():
                        return _torch_forward(torch, kind, torch.from_numpy(x).to_mkldnn(),
                                              mk).to_dense().numpy()
                    got = torch_mkldnn()
                    if np.abs(got - results["blocked"]).max() > 1e-2 * max(1.0, np.abs(got).max()):
                        raise RuntimeError("results differ from jitnn's")
                    row["torch_mkldnn"] = run.median(torch_mkldnn)[0] * 1e3
                except RuntimeError as error:
                    run.progress(f"torch to_mkldnn failed for {name}: {error}")
        rows.append(row)
    return {"rows": rows, "overhead": _overhead(run, np, jitnn)}


def _overhead(run: Run, np, jitnn) -> dict:
    """Per-op cost of recording, planning and running tiny ops, kernels excluded."""
    from jitnn.kernels import conv2d as conv_kernels
    from jitnn.kernels import eltwise as eltwise_kernels
    from jitnn.kernels import layout as layout_kernels

    pairs = 10 if run.quick else 25
    ctx = jitnn.Context(num_threads=run.threads)
    x_np = np.random.default_rng(2).standard_normal((1, 8, 4, 4)).astype(np.float32)
    w_np = (np.random.default_rng(3).standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)
    x, w = ctx.tensor(x_np), ctx.tensor(w_np)
    out = np.empty_like(x_np)

    def through_jitnn():
        h = x
        for _ in range(pairs):
            h = jitnn.relu(jitnn.conv2d(h, w))
        return h.numpy(out=out)
    # the same work as direct kernel calls (the kernels' own checked wrappers
    # included): reorder in, conv + fused relu per pair, reorder out
    block = ctx.block
    packed = conv_kernels.pack_conv2d_filter(w_np, 8, 1, block)
    bufs = [np.empty((1, -(-8 // block), 4, 4, block), np.float32) for _ in range(3)]

    def direct():
        layout_kernels.nchw_to_blocked(x_np, bufs[0])
        for i in range(pairs):
            conv_kernels.conv2d_forward(bufs[i % 2], packed, bufs[1 - i % 2], (1, 1), (1, 1),
                                        (0, 0, 0, 0), None, None, eltwise_kernels.RELU)
        layout_kernels.blocked_to_nchw(bufs[pairs % 2], out)
        return out
    # side by side in rounds, as the policies: a slow spell of the host
    # hits both, instead of whichever ran during it
    seconds = run.paired({"jitnn": through_jitnn, "direct": direct}, rounds=25)
    ops = 2 * pairs
    return {"ops": ops, "jitnn_us": statistics.median(seconds["jitnn"]) * 1e6,
            "direct_us": statistics.median(seconds["direct"]) * 1e6,
            "overhead_us_per_op": statistics.median(
                ours - theirs for ours, theirs in zip(seconds["jitnn"], seconds["direct"]))
            / ops * 1e6}


def row_label(row: dict) -> str:
    return row["label"]


def _columns() -> list[Column]:
    columns = [Column("workload", lambda r: r["label"], numeric=False)]
    for policy in POLICIES:
        columns += [
            Column(f"jitnn {policy} ms", lambda r, p=policy: r[p], ".2f"),
            Column("reorders (MB)", lambda r, p=policy: f"{r[p + '_reorders']} "
                   f"({r[p + '_reorder_mb']:.1f})", numeric=False),
            Column("tax", lambda r, p=policy: r[p + "_tax"], "%"),
        ]
    return columns + [
        Column("blocked speedup over plain",
               lambda r: r.get("plain_over_blocked", ratio(r["plain"], r["blocked"])), ".2f"),
        Column("torch NCHW ms", lambda r: r["torch_nchw"], ".2f", peer="torch"),
        Column("blocked / torch NCHW", lambda r: ratio(r["torch_nchw"], r["blocked"]), ".2f",
               peer="torch"),
        Column("torch mkldnn ms", lambda r: r["torch_mkldnn"], ".2f", peer="torch"),
        Column("blocked / torch mkldnn", lambda r: ratio(r["torch_mkldnn"], r["blocked"]),
               ".2f", peer="torch"),
    ]


PLOT_COLUMNS = [("jitnn blocked", "blocked"), ("jitnn eager", "eager"), ("jitnn plain", "plain"),
                ("torch NCHW", "torch_nchw", "torch"), ("torch mkldnn", "torch_mkldnn", "torch")]


def render(result: dict) -> list[str]:
    lines = markdown_table(_columns(), result["rows"], result["peers"])
    lines.append("\nratios are speeds (higher: jitnn blocked faster); launches per run: " + "; ".join(
        f"{r['label']}: " + ", ".join(f"{p} {r[p + '_launches']}" for p in POLICIES)
        for r in result["rows"]))
    lines.append("policies agree: max |difference| " + ", ".join(
        f"{r['max_diff']:.1e}" for r in result["rows"]))
    if all("blocked_kernel_ms" in r for r in result["rows"]):
        lines.append("time in kernels per run (op launches and reorders, from `ctx.stats`; the "
                     "rest, the runtime's own, in brackets): " + "; ".join(
                         f"{r['label']}: " + ", ".join(
                             f"{p} {r[p + '_kernel_ms']:.2f} ms "
                             f"(+{r[p] - r[p + '_kernel_ms']:.2f})" for p in POLICIES)
                         + f"; plain / blocked in kernels alone "
                         f"{r['plain_kernel_ms'] / r['blocked_kernel_ms']:.3f}"
                         for r in result["rows"]))
    o = result["overhead"]
    lines.append(f"\nscheduler overhead: {o['ops']} tiny ops (1x8x4x4, conv 1x1 + relu pairs) "
                 f"{o['jitnn_us']:.0f} us through jitnn vs {o['direct_us']:.0f} us as direct "
                 f"kernel calls, side by side in rounds: **{o['overhead_us_per_op']:.1f} us per op**")
    return lines
