"""A plan: the steps that compute some pending values, what the scheduler's
passes make and the executor runs.

A :class:`Step` is one launch: a (possibly fused) op, or a reorder of a
plain value into a blocked layout. A :class:`Plan` lists them in order, with
what the passes logged (``jitnn.explain`` prints it), which values are kept
for the caller, the buffers and the peak memory, and, once run, its times.
"""

from __future__ import annotations

import dataclasses
import math

from . import layouts
from .tensor import Node, Value


@dataclasses.dataclass(slots=True)     # slots: a reused plan makes one per launch per flush
class Step:
    """One launch of the plan: a (possibly fused) op, or a reorder."""

    kind: str                      # "op" or "reorder"
    value: Value | None            # what it computes (op) or converts (reorder)
    label: str
    node: Node | None = None       # the op to run: the value's node, or a fused rewrite
    layouts_in: tuple[str, ...] = ()
    layout_out: str = ""
    flops: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    kept: bool = False             # output materialized for the caller
    buffer: str = ""               # buffer slot of an intermediate ("b0", ...)
    #: in a join's buffer (an input its join copies nothing of: passes.plan_buffers):
    #: ``(offset, size)`` in elements, where the value starts in the slot and the
    #: slot's whole size (the step may be the first to make it); () otherwise
    buffer_place: tuple = ()
    frees: tuple = ()              # values whose buffers are dead after this step
    reorder_block: int = 0         # reorder steps: the target block (0: back to plain)
    reorder_axes: str = "nchw"     # ... and the logical axes the reading kernel takes
    removed: bool = False          # fused into another step by a pass
    seconds: float | None = None   # measured after the run
    inner_reorders: list = dataclasses.field(default_factory=list)  # (label, bytes, s)
    notes: tuple = ()              # explain's lines under the step, kept after the run


@dataclasses.dataclass
class Plan:
    """The steps that compute ``roots`` (and everything kept on the way)."""

    policy: str
    roots: list[Value]
    steps: list[Step]
    kept: set = dataclasses.field(default_factory=set)     # ids of kept values
    log: list[str] = dataclasses.field(default_factory=list)
    recorded_ops: int = 0
    #: the context's thread count (part of a plan's cache key: plan_cache)
    threads: int = 1
    fused_ops: int = 0
    peak_bytes: int = 0
    buffer_slots: int = 0
    #: the buffer slots that share one array: ``{slot: (byte offset, bytes)}``
    #: (passes.plan_buffers), and that array's size
    arena: dict = dataclasses.field(default_factory=dict)
    arena_bytes: int = 0
    seconds: float | None = None
    kernel_seconds: float | None = None    # of ``seconds``, in kernels (op kernels, reorders)
    read_lines: list[str] = dataclasses.field(default_factory=list)
    readers: dict = dataclasses.field(default_factory=dict)     # see _index_readers
    reused: bool = False           # made from an earlier flush's plan (plan_cache)
    #: (home, node): after the run, ``home.memo = node.memo`` (plan_cache)
    memo_homes: list = dataclasses.field(default_factory=list)

    def op_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "op"]


#: physical shapes by (shape, layout, axes): asked several times per op
_PHYSICAL_SHAPES: dict[tuple, tuple[int, ...]] = {}


def physical_shape(v: Value) -> tuple[int, ...]:
    key = (v._shape, v._layout, v._axes)
    found = _PHYSICAL_SHAPES.get(key)
    if found is None:
        found = _physical_shape(*key)
        if len(_PHYSICAL_SHAPES) < 4096:
            _PHYSICAL_SHAPES[key] = found
    return found


def _physical_shape(shape: tuple[int, ...], layout: str, axes: str) -> tuple[int, ...]:
    block = layouts.block_of(layout)
    if block is None:
        return shape
    nchw = shape if axes == "nchw" else (shape[0], shape[3], shape[1], shape[2])
    return layouts.blocked_shape(nchw, block)


def physical_bytes(v: Value) -> int:
    return v.dtype.itemsize * math.prod(physical_shape(v))


def mib(count: int) -> str:
    """A byte count for people: MiB, or KiB below 64 KiB."""
    return f"{count / 2**20:.2f} MiB" if count >= 2**16 else f"{count / 1024:.1f} KiB"
