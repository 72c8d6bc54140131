"""The scheduler: from the pending work behind some tensors to a plan that runs it.

:func:`schedule` runs the passes of jitnn/passes.py (fusion only under the
``"blocked"`` policy) on the pending DAG, or reuses the plan of an earlier
flush whose DAG had the same shape (jitnn/plan_cache.py); a single op whose
inputs are computed skips the passes. :func:`explain` prints a plan.

Layouts are chosen when an op is recorded (a blocked kernel's output is
blocked under the ``"blocked"`` and ``"eager"`` policies, plain under
``"plain"``), so the plan's layouts are known before it runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import layouts, plan_cache
from .errors import JitnnTypeError
from .passes import (FUSING_PASSES, PASSES, collect, insert_reorders, kept_values,
                     kernel_layouts, pending_order)
from .plan import Plan, Step, mib, physical_bytes
from .registry import kind_of
from .tensor import Tensor, Value

if TYPE_CHECKING:
    from .context import Context


def _single_op_plan(ctx: "Context", v: Value) -> Plan:
    """The plan of one pending op whose inputs are all computed: nothing to
    fuse and no intermediate to place, so no pass but the reorders runs (the
    per-call cost of an eager op, e.g. a tiny matmul, stays small)."""
    node = v._node
    step = Step("op", v, node.label, node=node, flops=node.flops, kept=True,
                layouts_in=kernel_layouts(node, v), layout_out=v._layout,
                bytes_out=physical_bytes(v))
    plan = Plan(ctx.policy, [v], [step], {id(v)}, recorded_ops=1,
                peak_bytes=step.bytes_out)
    plan.log.append("single op with computed inputs: nothing to fuse or place")
    if node.memo is None and type(node.sig) is plan_cache.Token:
        # what the last single-op flush of this signature memoized (an eager
        # or plain program calls the same ops again with new nodes)
        node.memo = node.sig.memo
        plan.memo_homes.append((node.sig, node))
    if node.attrs.get("blocked_inputs"):
        plan = insert_reorders(plan)
    return plan


def schedule(ctx: "Context", roots: list[Value]) -> Plan:
    """Run the passes (fusion only under the ``"blocked"`` policy), or reuse
    the plan of an earlier flush whose pending DAG had the same shape
    (jitnn/plan_cache.py). Call under the context's flush lock."""
    if len(roots) == 1 and all(s._data is not None for s in roots[0]._node.inputs):
        return _single_op_plan(ctx, roots[0])
    order = pending_order(roots)
    kept = kept_values(order, roots)
    found = plan_cache.plan_key(ctx, order, kept, roots) if ctx.policy == "blocked" else None
    if found is not None:
        template = ctx.plans.get(found[0])
        if template is not None:
            return plan_cache.instantiate(template, ctx, roots, found[1])
    plan = collect(ctx, roots, order, kept)
    for pass_ in PASSES:
        if ctx.policy != "blocked" and pass_ in FUSING_PASSES:
            continue
        plan = pass_(plan)
    if found is not None:
        plan_cache.remember(ctx.plans, found[0], plan, found[1])
    return plan


# --- explain ------------------------------------------------------------------------

def describe(plan: Plan, title: str) -> str:
    """The plan as text: passes, steps, reorders, buffers, and measured times."""
    ops = plan.op_steps()
    reorders = [s for s in plan.steps if s.kind == "reorder"]
    lines = [f"{title}",
             f"policy {plan.policy}: {plan.recorded_ops} op(s) recorded -> {len(ops)} kernel "
             f"launch(es), {plan.fused_ops} fused away, {len(reorders)} reorder(s) planned"]
    lines += [f"  pass {entry}" for entry in plan.log]
    ran = plan.seconds is not None
    header = f"  {'#':>2}  {'step':<34} {'layouts in -> out':<30} {'MFLOP':>9} " \
             f"{'MB in/out':>13}  {'buffer':<10}" + ("   time" if ran else "")
    lines.append(header)
    for i, s in enumerate(plan.steps, 1):
        where = (f"kept ({s.buffer})" if s.buffer else "kept") if s.kept else s.buffer
        if s.buffer_place:
            where += f"@{s.buffer_place[0]}"       # written in place into a join's buffer
        layouts_in = s.layouts_in
        if s.kind == "op" and s.node is not None:
            # asked again: a kernel chosen by measurement at the first run
            # (jitnn/tuning.py) may differ from the one planned before it
            layouts_in = kernel_layouts(s.node, s.value)
        arrow = f"{','.join(layouts_in)} -> {s.layout_out}"
        time = f" {s.seconds * 1e3:7.3f} ms" if ran and s.seconds is not None else ""
        lines.append(f"  {i:>2}  {s.label:<34} {arrow:<30} {s.flops / 1e6:9.2f} "
                     f"{s.bytes_in / 1e6:6.2f}/{s.bytes_out / 1e6:<6.2f}  {where:<10}{time}")
        notes = s.notes
        if s.kind == "op" and s.node is not None and kind_of(s.node).explain is not None:
            notes = kind_of(s.node).explain(s.node, s.value)
        lines += [f"      {note}" for note in notes]
        for label, nbytes, seconds in s.inner_reorders:
            lines.append(f"      inside: {label}, {nbytes / 1e6:.2f} MB"
                         + (f", {seconds * 1e3:.3f} ms" if seconds is not None else ""))
    lines += [f"  {line}" for line in plan.read_lines]
    lines.append(f"  peak memory {mib(plan.peak_bytes)}: the plan's kept outputs, "
                 f"{plan.buffer_slots} intermediate buffer(s) ({len(plan.arena)} sharing an "
                 f"arena of {mib(plan.arena_bytes)}) and reorder copies")
    if ran:
        reorder_s = sum(s.seconds or 0.0 for s in reorders) + sum(
            r[2] or 0.0 for s in plan.steps for r in s.inner_reorders)
        total = plan.seconds
        lines.append(f"  ran in {total * 1e3:.3f} ms ({(plan.kernel_seconds or 0.0) * 1e3:.3f} ms in "
                     f"kernels); reorder tax "
                     f"{100 * reorder_s / total if total else 0:.1f} % "
                     f"({reorder_s * 1e3:.3f} ms in reorders, readback not included)")
    else:
        lines.append("  (not run yet: reading the tensor runs this plan)")
    return "\n".join(lines)


def explain(t) -> str:
    """The plan that computed ``t`` (with measured times), or that will compute
    it when read (planned now, without running anything)."""
    if not isinstance(t, Tensor):
        raise JitnnTypeError(f"explain: expected a jitnn.Tensor, got {type(t).__name__}")
    v = t._v
    ctx = v._ctx
    read = _read_line(v)
    if v._data is None:
        with ctx.flush_lock:
            if v._data is None:
                plan = schedule(ctx, [v])
                plan.read_lines = [read]
                return describe(plan, f"plan for {t!r}")
    plan = v._plan
    if plan is None:
        return (f"{t!r}: an input (copied in by jitnn.tensor), no plan\n  {read}")
    text = describe(plan, f"plan that computed {t!r} (flush of {len(plan.op_steps())} "
                          f"launch(es))")
    return text + "\n  " + read


def _read_line(v: Value) -> str:
    block = layouts.block_of(v._layout)
    nbytes = 4 * v.size
    if block is None:
        return f"read: {v._layout}, one copy of {nbytes / 1e6:.2f} MB into the caller's array"
    return (f"read: reorder {v._layout} -> {v._axes}, {nbytes / 1e6:.2f} MB straight into "
            f"the caller's array (one copy)")
