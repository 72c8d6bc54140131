"""The scheduler: from the pending work behind some tensors to a plan that runs it.

Each pass is a plain function from plan to plan, and each leaves a line in
``plan.log`` (``jitnn.explain`` prints them):

1. :func:`collect` - the pending DAG behind the tensors being read, in
   dependency order, one step per op; which values must be *kept* (the caller
   holds them, an op outside this flush reads them, or they are being read);
2. :func:`fold_batch_norms` - a batch normalization right after a conv2d is
   folded into the conv's filter and bias (when nothing else reads the conv);
3. :func:`fuse_epilogues` - a conv2d absorbs a following residual add and an
   activation into its kernel's epilogue; a matmul a bias or residual add and
   an activation;
4. :func:`fuse_eltwise_chains` - chains of single-consumer elementwise ops
   become one pass over memory (on blocked data, and on plain data when each
   operand is a scalar or has the chain's shape);
5. :func:`insert_reorders` - a plain input of a blocked kernel gets one
   reorder, shared by every op of the plan that reads it;
6. :func:`plan_buffers` - intermediates get buffers, reusing those of dead
   intermediates (in place where the kernel allows), and the plan's peak memory.

Fusion only ever removes a value that nobody can observe: not kept and read by
exactly one op. Passes rewrite the plan's steps (a step carries the node it
will run), never the recorded nodes, so planning for ``explain`` changes
nothing. Layouts are chosen when an op is recorded (a blocked kernel's
output is blocked under the ``"blocked"`` and ``"eager"`` policies, plain under
``"plain"``), so the plan's layouts are known before it runs.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from . import layouts, plan_cache
from .kernels import conv2d as conv_kernels, eltwise as eltwise_kernels
from .tensor import Node, Value

if TYPE_CHECKING:
    from .context import Context


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
    frees: tuple = ()              # values whose buffers are dead after this step
    reorder_block: int = 0         # reorder steps: the target block
    removed: bool = False          # fused into another step by a pass
    seconds: float | None = None   # measured after the run
    inner_reorders: list = dataclasses.field(default_factory=list)  # (label, bytes, s)


@dataclasses.dataclass
class Plan:
    """The steps that compute ``roots`` (and everything kept on the way)."""

    policy: str
    roots: list[Value]
    steps: list[Step]
    kept: set = dataclasses.field(default_factory=set)     # ids of kept values
    log: list[str] = dataclasses.field(default_factory=list)
    recorded_ops: int = 0
    fused_ops: int = 0
    peak_bytes: int = 0
    buffer_slots: int = 0
    seconds: float | None = None
    kernel_seconds: float | None = None    # of ``seconds``, in kernels (op kernels, reorders)
    read_lines: list[str] = dataclasses.field(default_factory=list)
    readers: dict = dataclasses.field(default_factory=dict)     # see _index_readers
    reused: bool = False           # made from an earlier flush's plan (plan_cache)
    #: (home, node): after the run, ``home.memo = node.memo`` (plan_cache)
    memo_homes: list = dataclasses.field(default_factory=list)

    def op_steps(self) -> list[Step]:
        return [s for s in self.steps if s.kind == "op"]


# --- helpers ------------------------------------------------------------------------

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
    return 4 * math.prod(physical_shape(v))


def _index_readers(plan: Plan) -> None:
    """``plan.readers[id(v)]``: the op steps reading ``v`` (once per read)."""
    plan.readers = {}
    for step in plan.steps:
        if step.kind == "op":
            for source in step.node.inputs:
                plan.readers.setdefault(id(source), []).append(step)


def _fusible(plan: Plan, v: Value) -> Step | None:
    """The one step reading ``v`` if ``v`` may be fused away into it, else None."""
    if id(v) in plan.kept:
        return None
    readers = plan.readers.get(id(v), ())
    return readers[0] if len(readers) == 1 else None


def _fuse(plan: Plan, fused: Step, reader: Step, node: Node) -> None:
    """``reader`` now runs ``node``, which does ``fused``'s work too: ``fused``
    leaves the plan and its inputs are read by ``reader`` instead."""
    reader.node = node
    reader.label = node.label
    reader.flops = node.flops
    fused.removed = True
    plan.readers.pop(id(fused.value), None)
    for source in fused.node.inputs:
        readers = plan.readers.get(id(source), [])
        plan.readers[id(source)] = [reader if r is fused else r for r in readers]


def _drop_removed(plan: Plan) -> None:
    plan.steps = [s for s in plan.steps if not s.removed]


# --- passes -------------------------------------------------------------------------

def pending_order(roots: list[Value]) -> list[Value]:
    """Every pending value the roots need, in dependency order."""
    order: list[Value] = []
    seen: set[int] = set()
    for root in roots:
        stack = [(root, False)]
        while stack:                      # iterative DFS: deep chains are fine
            v, expanded = stack.pop()
            if v._data is not None:
                continue
            if expanded:
                order.append(v)
                continue
            if id(v) in seen:
                continue
            seen.add(id(v))
            stack.append((v, True))
            for source in reversed(v._node.inputs):
                if source._data is None and id(source) not in seen:
                    stack.append((source, False))
    return order


def kept_values(order: list[Value], roots: list[Value]) -> set[int]:
    """Ids of the values of ``order`` that must be materialized: the roots,
    what the caller holds, and what an op outside ``order`` reads."""
    in_plan = set(map(id, order))
    kept = set(map(id, roots))
    for v in order:                       # plain loops: this runs at every flush
        if v.held:
            kept.add(id(v))
            continue
        for ref in v._consumers:
            c = ref()
            if c is not None and c._data is None and id(c) not in in_plan:
                kept.add(id(v))
                break
    return kept


def collect(ctx: "Context", roots: list[Value], order: list[Value], kept: set[int]) -> Plan:
    """The plan of the roots' pending values (``order``, from
    :func:`pending_order`), one step per op, and which must be *kept*
    (``kept``, from :func:`kept_values`)."""
    steps = [Step("op", v, v._node.label, node=v._node, flops=v._node.flops) for v in order]
    plan = Plan(ctx.policy, list(roots), steps, kept, recorded_ops=len(order))
    _index_readers(plan)
    plan.log.append(f"collect: {len(order)} pending op(s), {len(kept)} kept "
                    f"(read, held by the caller, or read by later ops)")
    return plan


def fold_batch_norms(plan: Plan) -> Plan:
    """conv2d -> batch_normalization (per channel, inference) becomes one conv2d
    with the normalization folded into its filter and bias."""
    folded = 0
    for step in list(plan.steps):
        v = step.value
        if step.kind != "op" or step.node.kind != "conv2d":
            continue
        node = step.node
        if node.attrs["bn"] is not None or node.attrs["residual"] is not None \
                or node.attrs["activation"][0] != eltwise_kernels.NONE:
            continue
        reader = _fusible(plan, v)
        if reader is None:
            continue
        consumer = reader.node
        if consumer.kind != "eltwise" or consumer.inputs[0] is not v \
                or len(consumer.attrs["steps"]) != 1 or consumer.attrs["steps"][0][0] != "affine":
            continue
        bn = consumer.attrs["steps"][0][1]         # (mean, variance, scale, bias, epsilon)
        if any(t is not None and t._data is None for t in bn[:4]):
            continue                               # statistics not computed yet
        extra = tuple(t for t in bn[:4] if t is not None)
        _fuse(plan, step, reader, node.replace(
            inputs=node.inputs + extra, attrs={**node.attrs, "bn": bn},
            fused=node.fused + (consumer.op,)))
        folded += 1
    _drop_removed(plan)
    plan.fused_ops += folded
    plan.log.append(f"fold_batch_norms: {folded} folded into a conv2d")
    return plan


def fuse_epilogues(plan: Plan) -> Plan:
    """conv2d -> add(same-shape tensor) -> activation become one conv2d launch
    (``act(conv + bias + residual)``), in that order only; matmul -> add(bias
    row or residual) -> activation one gemm launch (see :func:`_matmul_epilogue`)."""
    fused = 0
    changed = True
    while changed:
        changed = False
        for step in list(plan.steps):
            v = step.value
            if step.kind != "op" or step.node.kind not in ("conv2d", "matmul") or step.removed:
                continue
            node = step.node
            reader = _fusible(plan, v)
            if reader is None:
                continue
            consumer = reader.node
            if node.kind == "matmul":
                new = _matmul_epilogue(node, consumer, v, reader.value)
                if new is not None:
                    _fuse(plan, step, reader, new)
                    fused += 1
                    changed = True
                continue
            if consumer.kind != "eltwise" or len(consumer.attrs["steps"]) != 1:
                continue
            kind, *args = consumer.attrs["steps"][0]
            main = consumer.inputs[0]
            # add commutes: the conv's result may be either operand of the add
            residual = None
            if kind == "binary" and args[0] == "add":
                residual = args[1] if main is v else main if args[1] is v else None
            elif main is not v:
                continue
            attrs = dict(node.attrs)
            inputs = node.inputs
            if kind == "activation" and attrs["activation"][0] == eltwise_kernels.NONE:
                attrs["activation"] = tuple(args)
            elif (residual is not None and attrs["residual"] is None
                  and attrs["activation"][0] == eltwise_kernels.NONE
                  and residual._shape == v._shape and residual._axes == v._axes
                  and residual is not v):
                attrs["residual"] = residual
                inputs = inputs + (residual,)
                block = layouts.block_of(v._layout)
                if layouts.block_of(residual._layout) != block:
                    attrs["blocked_inputs"] = attrs["blocked_inputs"] + (
                        (residual, block, v._axes),)
            else:
                continue
            _fuse(plan, step, reader, node.replace(inputs=inputs, attrs=attrs,
                                                   fused=node.fused + (consumer.op,)))
            fused += 1
            changed = True
    _drop_removed(plan)
    plan.fused_ops += fused
    plan.log.append(f"fuse_epilogues: {fused} op(s) fused into conv2d epilogues")
    return plan


def _matmul_epilogue(node: Node, consumer: Node, v: Value, result: Value) -> Node | None:
    """matmul -> add(bias or residual) -> activation as one gemm launch
    (``act(alpha * A @ B + C)``), in that order only; None if it does not fit."""
    attrs = dict(node.attrs)
    if attrs["activation"][0] != eltwise_kernels.NONE:
        return None
    steps = consumer.attrs.get("steps", ())
    if consumer.kind == "eltwise_plain" and consumer.inputs[0] is v and len(steps) == 1 \
            and steps[0][0] == "activation":
        attrs["activation"] = tuple(steps[0][1:])
        return node.replace(attrs=attrs, fused=node.fused + (consumer.op,))
    if consumer.kind in ("binary_plain", "eltwise_plain") and consumer.attrs.get("op") == "add" \
            and attrs["c"] is None and result._shape == v._shape and v.ndim == 2:
        operands = [consumer.attrs["main"], consumer.attrs["other"]]
        if sum(t is v for t in operands) != 1:
            return None
        other = operands[1] if operands[0] is v else operands[0]
        if not isinstance(other, Value) or other.ndim > 2 \
                or layouts.block_of(other._layout) is not None:
            return None
        try:
            if np.broadcast_shapes(other._shape, v._shape) != v._shape:
                return None
        except ValueError:
            return None
        attrs["c"], attrs["beta"] = other, 1.0
        return node.replace(inputs=node.inputs + (other,), attrs=attrs,
                            fused=node.fused + (consumer.op,))
    return None


def _chain_kind(node: Node) -> str | None:
    """``"blocked"`` or ``"plain"`` for a node a chain may merge, else None. A
    plain one (``eltwise_plain``) is one pass of steps over its first input:
    activations, and binary ops with a scalar or same-shape operand."""
    if node.kind == "eltwise":
        return "blocked"
    if node.kind == "eltwise_plain":
        return "plain"
    return None


def fuse_eltwise_chains(plan: Plan) -> Plan:
    """Single-consumer elementwise ops run as one pass: on blocked data, and
    on plain data (any rank) when each op's operand is a scalar or has the
    chain's shape."""
    fused = 0
    for step in list(plan.steps):
        v = step.value
        if step.kind != "op" or step.removed:
            continue
        node = step.node
        kind = _chain_kind(node)
        if kind is None:
            continue
        reader = _fusible(plan, v)
        if reader is None:
            continue
        consumer = reader.node
        if _chain_kind(consumer) != kind or consumer.inputs[0] is not v \
                or any(t is v for t in consumer.inputs[1:]) or reader.value._shape != v._shape:
            continue
        steps = node.attrs["steps"] + consumer.attrs["steps"]
        tensors = sum(1 for s in steps if s[0] == "binary" and s[2] is not None
                      and s[2]._shape == v._shape and s[2].size > 1)
        if len(steps) > eltwise_kernels.MAX_STEPS or tensors > eltwise_kernels.MAX_TENSORS:
            continue
        # a merged plain node is a chain, no longer one binary op (its own attrs go)
        changes = {"attrs": {**node.attrs, "steps": steps}} if kind == "blocked" else \
            {"kind": "eltwise_plain", "attrs": {"steps": steps}}
        _fuse(plan, step, reader, node.replace(
            inputs=node.inputs + consumer.inputs[1:], fused=node.fused + (consumer.label,),
            flops=node.flops + consumer.flops, **changes))
        fused += 1
    _drop_removed(plan)
    plan.fused_ops += fused
    plan.log.append(f"fuse_eltwise_chains: {fused} op(s) merged into elementwise passes")
    return plan


def insert_reorders(plan: Plan) -> Plan:
    """One reorder step for each plain value a blocked kernel reads (shared)."""
    new_steps: list[Step] = []
    done: set = set()
    count = 0
    for step in plan.steps:
        if step.kind == "op":
            for source, block, axes in step.node.attrs.get("blocked_inputs", ()):
                key = (id(source), block, axes)
                if key in done or ("blocked", block, axes) in source._derived:
                    continue
                done.add(key)
                tag = layouts.blocked_tag(block)
                new_steps.append(Step(
                    "reorder", source, f"reorder {source._layout} -> {tag}",
                    layouts_in=(source._layout,), layout_out=tag,
                    bytes_in=physical_bytes(source),
                    bytes_out=4 * int(np.prod(layouts.blocked_shape(
                        source._shape if axes == "nchw" else
                        (source._shape[0], source._shape[3], source._shape[1],
                         source._shape[2]), block))),
                    reorder_block=block))
                count += 1
        new_steps.append(step)
    plan.steps = new_steps
    plan.log.append(f"insert_reorders: {count} reorder(s) into blocked layouts")
    return plan


def plan_buffers(plan: Plan) -> Plan:
    """Buffers for the ops' outputs: kept values get their own; an intermediate
    takes a dead intermediate's buffer: in place over a dying input of the
    same size when the kernel may write over its input, else the smallest
    free buffer it fits in (the start of it), else a new one. Fewer, reused
    buffers keep a small network's activations and weights in the caches
    (exact sizes only: MobileNetV2 made 25 buffers, 16.8 MiB). Also the
    plan's peak memory: the most bytes alive at once among the buffers the
    plan creates."""
    last_use: dict[int, int] = {}
    for i, step in enumerate(plan.steps):
        if step.kind == "op":
            node = step.node
            for source in node.inputs:
                last_use[id(source)] = i
            step.layouts_in = _kernel_layouts(node, step.value)
            step.layout_out = step.value._layout
            step.bytes_in = sum(physical_bytes(s) for s in node.inputs)
            step.bytes_out = physical_bytes(step.value)
            step.kept = id(step.value) in plan.kept
    # Only buffers the scheduler's own kernels made and only its own kernels
    # read may be reused: an opaque op may return or keep a view of its input.
    produced = {id(s.value) for s in plan.steps
                if s.kind == "op" and s.node.kind in STRUCTURED}
    for step in plan.steps:
        if step.kind == "op" and step.node.kind not in STRUCTURED:
            produced.difference_update(id(t) for t in step.node.inputs)
    free: dict[int, list[str]] = {}      # bytes -> free slot names
    slot_bytes: dict[str, int] = {}
    slot_of: dict[int, str] = {}
    retired: set[str] = set()
    live = peak = 0
    for i, step in enumerate(plan.steps):
        if step.kind == "reorder":
            live += step.bytes_out       # a reorder copy lives as long as its source's value
            peak = max(peak, live)
            continue
        v = step.value
        # (each once: a node may read one value twice, x * sigmoid(x), and a
        # slot freed twice would be handed to two live values at once)
        dying = list({id(s): s for s in step.node.inputs
                      if id(s) in produced and id(s) not in plan.kept
                      and last_use.get(id(s)) == i}.values())
        step.frees = tuple(dying)
        size = step.bytes_out
        # in place over a dying input when the kernel allows it (kept or not)
        inplace = _inplace_inputs(v, step.node)
        reuse = next((slot_of[id(s)] for s in dying
                      if id(s) in slot_of and slot_bytes[slot_of[id(s)]] == size
                      and any(s is t for t in inplace)), None)
        if reuse is not None:
            slot_of[id(v)] = reuse
            step.buffer = reuse
            if id(v) in plan.kept:
                retired.add(reuse)        # the caller keeps it: never reused again
        elif id(v) in plan.kept:
            live += size
        else:
            fits = [free_size for free_size, pool in free.items() if pool and free_size >= size]
            if fits:
                slot_of[id(v)] = free[min(fits)].pop()
            else:
                name = f"b{len(slot_bytes)}"
                slot_bytes[name] = size
                slot_of[id(v)] = name
                live += size
            step.buffer = slot_of[id(v)]
        peak = max(peak, live)
        for s in dying:
            slot = slot_of.get(id(s))
            if slot is not None and slot != slot_of.get(id(v)) and slot not in retired:
                free.setdefault(slot_bytes[slot], []).append(slot)
    plan.peak_bytes = peak
    plan.buffer_slots = len(slot_bytes)
    plan.log.append(f"plan_buffers: {len(slot_bytes)} intermediate buffer(s), "
                    f"peak {_mib(peak)} (outputs, intermediates and reorder copies)")
    return plan


def _kernel_layouts(node: Node, v: Value) -> tuple[str, ...]:
    """The layouts a node's kernel reads (after the plan's reorders); a conv2d
    that runs Winograd reads its filter transformed (``winograd:36OI8i8o``: the 6 x 6
    positions of ``G g Gt``, each an ``OI8i8o`` matrix)."""
    if node.kind == "conv2d":
        a = node.attrs
        b = a["block"]
        tag = layouts.blocked_tag(b)
        x = a["x"]._layout if a["first_layer"] else tag
        ic = a["in_channels"] if a["first_layer"] else b    # first layer: all C at once
        weights = f"OIhw{ic}i{b}o"
        if conv2d_algorithm(node, v) == "winograd":
            weights = f"winograd:{conv_kernels.winograd.POSITIONS}OI{b}i{b}o"
        found = (x, weights)
        return found + ((tag,) if a["residual"] is not None else ())
    return tuple(s._layout for s in node.inputs)


def conv2d_algorithm(node: Node, v: Value) -> str:
    """What runs conv2d ``node`` (with its fused ops) making ``v`` (see
    ``kernels.conv2d.conv2d_algorithm``): ``"winograd"``, or the packed
    filter's path."""
    a = node.attrs
    o, _, kh, kw = layouts.filter_oihw_shape(a["w"]._shape, a["filter_layout"])
    path = conv_kernels.conv2d_path((kh, kw), a["in_channels"], a["groups"], a["first_layer"])
    n, out_h, out_w = (v._shape[0], v._shape[2], v._shape[3]) if a["axes"] == "nchw" else \
        v._shape[:3]
    return conv_kernels.conv2d_algorithm(
        path, (kh, kw), a["strides"], a["dilations"], a["groups"], a["in_channels"], o, n,
        out_h, out_w, a["block"], v._ctx.conv_algorithm)


#: node kinds whose kernels write into a buffer the scheduler gives them
STRUCTURED = ("conv2d", "eltwise", "eltwise_plain", "matmul")


def _inplace_inputs(v: Value, node: Node) -> list[Value]:
    """Inputs whose buffer the op's kernel may overwrite with its output."""
    if node.kind in ("eltwise", "eltwise_plain"):
        return [s for s in node.inputs if s._shape == v._shape and s._layout == v._layout]
    if node.kind == "conv2d" and node.attrs["residual"] is not None:
        # never over the conv's own input (conv2d(h) + h): the kernel reads
        # x around every output pixel it writes
        residual = node.attrs["residual"]
        return [residual] if residual._layout == v._layout and \
            residual is not node.attrs["x"] else []
    return []


PASSES = (fold_batch_norms, fuse_epilogues, fuse_eltwise_chains, insert_reorders, plan_buffers)


def _single_op_plan(ctx: "Context", v: Value) -> Plan:
    """The plan of one pending op whose inputs are all computed: nothing to
    fuse and no intermediate to place, so no pass but the reorders runs (the
    per-call cost of an eager op, e.g. a tiny matmul, stays small)."""
    node = v._node
    step = Step("op", v, node.label, node=node, flops=node.flops, kept=True,
                layouts_in=_kernel_layouts(node, v), layout_out=v._layout,
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
        template = ctx._plans.get(found[0])
        if template is not None:
            return plan_cache.instantiate(template, ctx, roots, found[1])
    plan = collect(ctx, roots, order, kept)
    for pass_ in PASSES:
        if ctx.policy != "blocked" and pass_ in (fold_batch_norms, fuse_epilogues,
                                                 fuse_eltwise_chains):
            continue
        plan = pass_(plan)
    if found is not None:
        plan_cache.remember(ctx._plans, found[0], plan, found[1])
    return plan


# --- explain ------------------------------------------------------------------------

def _mib(count: int) -> str:
    return f"{count / 2**20:.2f} MiB" if count >= 2**16 else f"{count / 1024:.1f} KiB"


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
        arrow = f"{','.join(s.layouts_in)} -> {s.layout_out}"
        time = f" {s.seconds * 1e3:7.3f} ms" if ran and s.seconds is not None else ""
        lines.append(f"  {i:>2}  {s.label:<34} {arrow:<30} {s.flops / 1e6:9.2f} "
                     f"{s.bytes_in / 1e6:6.2f}/{s.bytes_out / 1e6:<6.2f}  {where:<10}{time}")
        for label, nbytes, seconds in s.inner_reorders:
            lines.append(f"      inside: {label}, {nbytes / 1e6:.2f} MB"
                         + (f", {seconds * 1e3:.3f} ms" if seconds is not None else ""))
    lines += [f"  {line}" for line in plan.read_lines]
    lines.append(f"  peak memory {_mib(plan.peak_bytes)}: the plan's kept outputs, "
                 f"{plan.buffer_slots} reused intermediate buffer(s) and reorder copies "
                 f"alive at once")
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
    from .tensor import Tensor
    if not isinstance(t, Tensor):
        from .errors import JitnnTypeError
        raise JitnnTypeError(f"explain: expected a jitnn.Tensor, got {type(t).__name__}")
    v = t._v
    ctx = v._ctx
    read = _read_line(v)
    if v._data is None:
        with ctx._flush_lock:
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
