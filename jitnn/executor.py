"""The executor: runs a scheduler plan, step by step, and times each step.

Buffers follow ``plan_buffers``: an intermediate reuses the array of a dead
one; a dead intermediate is released (its value can never be read again: the
scheduler only frees what nobody holds or reads later). The plan keeps only
descriptions and timings once it has run, so ``explain`` on a result never
keeps its inputs alive.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import numpy as np

from .ops._common import blocked_buffer
from .scheduler import Plan, physical_shape

if TYPE_CHECKING:
    from .context import Context


def _out_from_slot(slots: dict[str, np.ndarray], name: str, shape: tuple[int, ...]):
    array = slots.get(name)
    if array is None:
        return None
    count = math.prod(shape)
    if array.size != count:
        return None
    return array.reshape(-1).reshape(shape) if array.flags.c_contiguous else None


def _run_op(ctx: "Context", step, slots: dict[str, np.ndarray], plan: Plan) -> None:
    v = step.value
    node = step.node
    out = _out_from_slot(slots, step.buffer, physical_shape(v)) if step.buffer else None
    data = node.run(ctx, node, v, out)
    v._data = data
    v._node = None            # drops the references to its inputs
    v._plan = plan
    if step.buffer:
        slots[step.buffer] = data
    for dead in step.frees:
        dead._data = None
        dead._released = True
        dead._derived.clear()
    if node.fused:
        ctx._count(fused_ops=len(node.fused))


def execute(ctx: "Context", plan: Plan) -> None:
    """Run every step of ``plan``; values get their buffers, plan its times."""
    slots: dict[str, np.ndarray] = {}
    start = time.perf_counter()
    previous = ctx._tracing(None)
    try:
        for step in plan.steps:
            t0 = time.perf_counter()
            ctx._tracing(step.inner_reorders)
            if step.kind == "reorder":
                blocked_buffer(ctx, step.value, step.reorder_block, step.value._axes)
                # the reorder's own count is in inner_reorders; show it as the step
                step.inner_reorders.clear()
            else:
                _run_op(ctx, step, slots, plan)
            step.seconds = time.perf_counter() - t0
    finally:
        ctx._tracing(previous)
    plan.seconds = time.perf_counter() - start
    # keep descriptions only: the values may go
    for step in plan.steps:
        step.value = step.node = None
        step.frees = ()
    plan.roots = []
