"""The scheduler's passes: plain functions from plan to plan.

Each leaves a line in ``plan.log`` (``jitnn.explain`` prints them):

1. :func:`collect` - the pending DAG behind the tensors being read, in
   dependency order, one step per op; which values must be *kept* (the caller
   holds them, an op outside this flush reads them, or they are being read);
2. :func:`fold_batch_norms` - an anchor (conv2d) folds the op after it into
   its weights (a batch normalization, then per-channel constants multiplied
   or added: a layer scale, into the filter and bias);
3. :func:`fuse_swish` - ``x * sigmoid(x)`` after an anchor becomes its
   SiLU epilogue;
4. :func:`fuse_epilogues` - an anchor absorbs the ops after it into its
   kernel's epilogue (conv2d: a residual add, then an activation; matmul: a
   bias or residual add, then an activation);
5. :func:`fuse_patterns` - multi-op patterns a node kind recognizes run as
   one node (a squeeze-and-excitation block: pool, two 1x1 convs, gate,
   channel multiply);
6. :func:`fuse_eltwise_chains` - chains of single-consumer elementwise ops
   become one pass over memory;
7. :func:`insert_reorders` - a plain input of a blocked kernel gets one
   reorder, shared by every op of the plan that reads it;
8. :func:`plan_buffers` - intermediates get buffers, reusing those of dead
   intermediates (in place where the kernel allows), and the plan's peak memory.

The passes know node *roles* from the op registry (jitnn/registry.py), not op
names: what may fold, absorb or merge is each op's own rule, called through
its :class:`~jitnn.registry.NodeKind`. Fusion only ever removes a value that
nobody can observe: not kept and read by exactly one op. Passes rewrite the
plan's steps (a step carries the node it will run), never the recorded
nodes, so planning for ``explain`` changes nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import layouts
from .plan import Plan, Step, mib, physical_bytes
from .registry import kind_of
from .tensor import Node, Value

if TYPE_CHECKING:
    from .context import Context


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
    plan = Plan(ctx.policy, list(roots), steps, kept, recorded_ops=len(order),
                threads=ctx.num_threads)
    _index_readers(plan)
    plan.log.append(f"collect: {len(order)} pending op(s), {len(kept)} kept "
                    f"(read, held by the caller, or read by later ops)")
    return plan


def _fuse_by_rule(plan: Plan, rule_of, repeat: bool = False) -> int:
    """Fuse each op step into the one step reading its value where the rule
    ``rule_of(kind)`` of the step's node kind (``fold``, ``absorb`` or
    ``merge``: ``(node, consumer, value, consumer's value) -> node or None``)
    allows; with ``repeat``, sweep again until nothing changes (a fused node
    may absorb its new reader too). Returns how many ops were fused away."""
    fused = 0
    changed = True
    while changed:
        changed = False
        for step in list(plan.steps):
            if step.kind != "op" or step.removed:
                continue
            rule = rule_of(kind_of(step.node))
            reader = _fusible(plan, step.value) if rule is not None else None
            if reader is None:
                continue
            node = rule(step.node, reader.node, step.value, reader.value)
            if node is not None:
                _fuse(plan, step, reader, node)
                fused += 1
                changed = repeat
    _drop_removed(plan)
    plan.fused_ops += fused
    return fused


def fold_batch_norms(plan: Plan) -> Plan:
    """An anchor whose value only one op reads folds that op into its weights
    where its kind's ``fold`` rule allows (conv2d -> batch_normalization: the
    normalization folded into the conv's filter and bias; then a mul, add or
    sub of a per-channel constant, a layer scale: into them too)."""
    folded_ops: dict[str, int] = {}

    def counted(fold):
        def rule(node: Node, consumer: Node, v: Value, result: Value) -> Node | None:
            made = fold(node, consumer, v, result)
            if made is not None:
                folded_ops[consumer.op] = folded_ops.get(consumer.op, 0) + 1
            return made
        return rule
    folded = _fuse_by_rule(plan, lambda kind: None if kind.fold is None else counted(kind.fold))
    which = ", ".join(f"{n} {op}" for op, n in sorted(folded_ops.items()))
    plan.log.append(f"fold_batch_norms: {folded} folded into a conv2d"
                    + (f" ({which})" if which else ""))
    return plan


def fuse_swish(plan: Plan) -> Plan:
    """``x * sigmoid(x)`` (SiLU, or swish, as exporters write it: a gate op and a
    product both reading ``x``) after an anchor becomes the anchor's epilogue
    activation: one launch instead of the anchor and a pass that reads its
    output twice. The gate's kind says what ``x * gate(x)`` is as one op
    (``self_gated``), the anchor's ``absorb`` rule whether it takes it; only
    where nobody else reads ``x`` or the gate."""
    producer = {id(s.value): s for s in plan.steps if s.kind == "op"}
    fused = 0
    for gate in list(plan.steps):
        rule = kind_of(gate.node).self_gated if gate.kind == "op" else None
        if rule is None or gate.removed or len(gate.node.inputs) != 1:
            continue
        x = gate.node.inputs[0]
        anchor = producer.get(id(x))
        product = _fusible(plan, gate.value)
        if anchor is None or anchor.removed or product is None or id(x) in plan.kept \
                or kind_of(anchor.node).absorb is None:
            continue
        readers = plan.readers.get(id(x), ())
        if len(readers) != 2 or {id(r) for r in readers} != {id(gate), id(product)}:
            continue
        gated = rule(gate.node, product.node, x)
        node = None if gated is None else \
            kind_of(anchor.node).absorb(anchor.node, gated, x, product.value)
        if node is None:
            continue
        node = node.replace(fused=node.fused[:-1] + (gate.node.label, product.node.op))
        gate.removed = anchor.removed = True
        product.node, product.label, product.flops = node, node.label, node.flops
        plan.readers.pop(id(x), None)
        plan.readers.pop(id(gate.value), None)
        for source in anchor.node.inputs:
            plan.readers[id(source)] = [product if r is anchor else r
                                        for r in plan.readers.get(id(source), [])]
        fused += 2
    _drop_removed(plan)
    plan.fused_ops += fused
    plan.log.append(f"fuse_swish: {fused // 2} x * gate(x) fused into an epilogue (SiLU)")
    return plan


class PlanQueries:
    """What a node kind's ``pattern`` rule may ask of the plan: which node
    makes a value (pending in this plan), and the one node that may fuse a
    value away (its only reader, the value not kept)."""

    def __init__(self, plan: Plan):
        self._plan = plan
        self._steps = [s for s in plan.steps if s.kind == "op" and not s.removed]
        self._by_value = {id(s.value): s for s in self._steps}
        self._by_node = {id(s.node): s for s in self._steps}

    def producer(self, value: Value) -> Node | None:
        step = self._by_value.get(id(value))
        return None if step is None else step.node

    def only_reader(self, value: Value) -> Node | None:
        step = _fusible(self._plan, value)
        return None if step is None else step.node

    def value_of(self, node: Node) -> Value:
        return self._by_node[id(node)].value

    def step_of(self, value: Value) -> Step:
        return self._by_value[id(value)]


def fuse_patterns(plan: Plan) -> Plan:
    """Patterns of several ops that a node kind recognizes from one of its
    nodes (``NodeKind.pattern``: a squeeze-and-excitation block from its
    excite conv) run as one node; the ops it replaces leave the plan."""
    fused = 0
    queries = PlanQueries(plan)        # made again only after a match changes the plan
    for step in list(plan.steps):
        rule = kind_of(step.node).pattern if step.kind == "op" else None
        if rule is None or step.removed:
            continue
        found = rule(step.node, step.value, queries)
        if found is None:
            continue
        end, node, replaced = found
        target = queries.step_of(end)
        for value in replaced:
            queries.step_of(value).removed = True
        target.node, target.label, target.flops = node, node.label, node.flops
        fused += len(replaced)
        _drop_removed(plan)
        _index_readers(plan)
        queries = PlanQueries(plan)
    plan.fused_ops += fused
    plan.log.append(f"fuse_patterns: {fused} op(s) fused into multi-op patterns "
                    f"(squeeze-and-excitation)")
    return plan


def fuse_epilogues(plan: Plan) -> Plan:
    """An anchor absorbs the single reader of its value into its kernel's
    epilogue where its kind's ``absorb`` rule allows, again and again
    (conv2d -> add(same-shape tensor) -> activation as one launch)."""
    fused = _fuse_by_rule(plan, lambda kind: kind.absorb, repeat=True)
    plan.log.append(f"fuse_epilogues: {fused} op(s) fused into conv2d epilogues")
    return plan


def fuse_eltwise_chains(plan: Plan) -> Plan:
    """Single-consumer elementwise ops run as one pass where their kind's
    ``merge`` rule allows (on blocked data, and on plain data when each op's
    operand is a scalar or has the chain's shape)."""
    fused = _fuse_by_rule(plan, lambda kind: kind.merge)
    plan.log.append(f"fuse_eltwise_chains: {fused} op(s) merged into elementwise passes")
    return plan


def insert_reorders(plan: Plan) -> Plan:
    """One reorder step for each plain value a blocked kernel reads, and one
    back to plain for each blocked value an op reads plain (each shared)."""
    new_steps: list[Step] = []
    done: set = set()
    count = back = 0
    for step in plan.steps:
        if step.kind == "op":
            for source, block, axes in step.node.attrs.get("blocked_inputs", ()):
                key = (id(source), block, axes)
                if key in done or ("blocked", block, axes) in source._derived:
                    continue
                done.add(key)
                tag = layouts.blocked_tag(block)
                # (a plain 4-D value's order is the axes the kernel reads it in)
                origin = axes if layouts.block_of(source._layout) is None else source._layout
                new_steps.append(Step(
                    "reorder", source, f"reorder {origin} -> {tag}",
                    layouts_in=(source._layout,), layout_out=tag,
                    bytes_in=physical_bytes(source),
                    bytes_out=4 * int(np.prod(layouts.blocked_shape(
                        source._shape if axes == "nchw" else
                        (source._shape[0], source._shape[3], source._shape[1],
                         source._shape[2]), block))),
                    reorder_block=block, reorder_axes=axes))
                count += 1
            if _reads_plain(step.node):
                for source in step.node.inputs:
                    if _read_back(source) and (id(source), 0, "plain") not in done \
                            and ("plain",) not in source._derived:
                        done.add((id(source), 0, "plain"))
                        new_steps.append(_readback_step(source))
                        back += 1
        new_steps.append(step)
    plan.steps = new_steps
    plan.log.append(f"insert_reorders: {count} reorder(s) into blocked layouts, {back} back "
                    f"to plain")
    return plan


def _reads_plain(node: Node) -> bool:
    """Whether ``node`` reads its inputs' plain values (ops/_common.py's
    ``plain_into_op`` and ``plain_op`` nodes): a blocked input is read back first."""
    return node.kind == "plain_into" or node.attrs.get("reads_plain", False)


def _read_back(v: Value) -> bool:
    """Whether an op reading ``v``'s plain values makes a copy: ``v`` is
    blocked, in an order other than plain's."""
    block = layouts.block_of(v._layout)
    return block is not None and not layouts.same_order_as_plain(v._shape, v._axes, block)


def _readback_step(source: Value) -> Step:
    """The step reading blocked ``source`` back to plain for the ops that
    read it so (``reorder_block`` 0): a replay writes it into the same array
    at every run, so those ops, and the views they make, can be bound."""
    plain = source._axes if len(source._shape) == 4 else layouts.plain_tag(len(source._shape))
    return Step("reorder", source, f"reorder {source._layout} -> {plain}",
                layouts_in=(source._layout,), layout_out=plain,
                bytes_in=physical_bytes(source),
                bytes_out=source._dtype.itemsize * int(np.prod(source._shape)),
                reorder_block=0, reorder_axes=source._axes)


def plan_buffers(plan: Plan) -> Plan:
    """Buffers for the ops' outputs: kept values get their own; an intermediate
    gets a buffer slot, in place over a dying input of the same size when the
    kernel may write over its input. The slots freed within the plan share
    one arena (``Plan.arena``): each at a byte offset where no slot live at
    the same time lies, placed largest first (TensorFlow Lite's greedy by
    size), so a network's activations take little more than its largest
    live set (a dead slot reused whole by smaller values, as before, left
    SqueezeNet's 1.5 MiB concat beside its 3 MiB first activation). A slot
    live to the plan's end (read by an op that may keep a view of it) is an
    array of its own, so a view a caller keeps holds only that. On several
    threads a small slot's place rests a few steps after its last read
    (:data:`SETTLE_STEPS`). Also the plan's peak memory: the arena, those
    arrays, the kept values and the reorder copies."""
    last_use: dict[int, int] = {}
    for i, step in enumerate(plan.steps):
        if step.kind == "op":
            node = step.node
            for source in node.inputs:
                last_use[id(source)] = i
            step.layouts_in = kernel_layouts(node, step.value)
            step.layout_out = step.value._layout
            step.bytes_in = sum(physical_bytes(s) for s in node.inputs)
            step.bytes_out = physical_bytes(step.value)
            step.kept = id(step.value) in plan.kept
    # Only buffers the scheduler's own kernels made and only its own kernels
    # read may be reused: an opaque op may return or keep a view of its input.
    produced = {id(s.value) for s in plan.steps
                if s.kind == "op" and kind_of(s.node).writes_into_buffer}
    for step in plan.steps:
        if step.kind == "op" and not kind_of(step.node).writes_into_buffer:
            produced.difference_update(id(t) for t in step.node.inputs)
    members, joins = _placed_inputs(plan, last_use, produced)
    slot_bytes: dict[str, int] = {}
    #: per slot, the steps it is live over: first written to freed (or the end)
    spans: dict[str, list[int]] = {}
    slot_of: dict[int, str] = {}
    retired: set[str] = set()
    others = 0                           # bytes of the kept values and the reorder copies
    end = len(plan.steps)

    def new_slot(size: int, at: int) -> str:
        name = f"b{len(slot_bytes)}"
        slot_bytes[name] = size
        spans[name] = [at, end]
        return name

    join_slot: dict[int, str] = {}       # id(join value) -> its buffer
    for i, step in enumerate(plan.steps):
        if step.kind == "reorder":
            others += step.bytes_out     # a reorder copy lives as long as its source's value
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
        inplace = inplace_inputs(v, step.node)
        reuse = next((slot_of[id(s)] for s in dying
                      if id(s) in slot_of and slot_bytes[slot_of[id(s)]] == size
                      and any(s is t for t in inplace)), None)
        join = members[id(v)][0] if id(v) in members else id(v) if id(v) in joins else None
        if join is not None:
            # a join's input is written where the join would copy it; the join's
            # buffer is taken at its first input (see _placed_inputs)
            if join not in join_slot:
                join_slot[join] = new_slot(joins[join], i)
            slot_of[id(v)] = step.buffer = join_slot[join]
            offset = members[id(v)][1] if id(v) in members else 0
            step.buffer_place = (offset, slot_bytes[step.buffer] // v.dtype.itemsize)
        elif reuse is not None:
            slot_of[id(v)] = reuse
            step.buffer = reuse
            if id(v) in plan.kept:
                retired.add(reuse)        # the caller keeps it: never reused again
        elif id(v) in plan.kept:
            others += size
        else:
            slot_of[id(v)] = step.buffer = new_slot(size, i)
        for s in dying:
            slot = slot_of.get(id(s))
            if slot is not None and slot != slot_of.get(id(v)) and slot not in retired:
                spans[slot][1] = i
    freed = {name: span for name, span in spans.items() if span[1] < end}
    settle = SETTLE_STEPS if plan.threads > 1 else 0
    plan.arena, plan.arena_bytes = arena_offsets(
        {name: slot_bytes[name] for name in freed},
        {name: [first, last + (settle if slot_bytes[name] <= SETTLE_MAX_BYTES else 0)]
         for name, (first, last) in freed.items()})
    own = sum(size for name, size in slot_bytes.items() if name not in freed)
    plan.peak_bytes = plan.arena_bytes + own + others
    plan.buffer_slots = len(slot_bytes)
    plan.log.append(f"plan_buffers: {len(slot_bytes)} intermediate buffer(s), {len(freed)} "
                    f"sharing an arena of {mib(plan.arena_bytes)} "
                    f"({mib(sum(slot_bytes[name] for name in freed))} if each had its own); "
                    f"peak {mib(plan.peak_bytes)} (outputs, intermediates and reorder copies)"
                    + (f"; {len(members)} value(s) written in place into {len(joins)} join(s)"
                       if joins else ""))
    return plan


#: an arena slot starts on a cache line (a whole zmm register: kernels/buffers.py)
ARENA_ALIGNMENT = 64

#: On several threads, an arena slot of at most SETTLE_MAX_BYTES keeps its
#: place for SETTLE_STEPS steps after its last read before another slot may
#: take it. A thread writing memory that another core read moments ago must
#: first take each cache line back from that core's cache: in MobileNetV2 on
#: 2 threads, a 384-channel depthwise conv at 14 x 14 writing where the
#: projection after the conv before it had just read (both threads reading
#: every channel) took 35 us, and 21 us elsewhere (the model 3.95 -> 3.86
#: ms, EfficientNet-B0 9.7 -> 9.3, for arenas 13-40 % larger on 2 threads).
#: A larger slot does not stay in a core's L2 (1-2 MiB) to be taken back.
SETTLE_STEPS = 3
SETTLE_MAX_BYTES = 1 << 20


def arena_offsets(sizes: dict[str, int], spans: dict[str, list[int]]
                  ) -> tuple[dict[str, tuple[int, int]], int]:
    """``({slot: (byte offset, bytes)}, arena bytes)``: each slot at the lowest
    aligned offset that overlaps no slot placed before it whose span of steps
    meets its own, the largest placed first (greedy by size; ties by first
    step, so the order is deterministic)."""
    placed: list[tuple[int, int, int, int]] = []     # (offset, end, first step, last step)
    layout: dict[str, tuple[int, int]] = {}
    for name in sorted(sizes, key=lambda n: (-sizes[n], spans[n][0], n)):
        first, last = spans[name]
        size = -(-sizes[name] // ARENA_ALIGNMENT) * ARENA_ALIGNMENT
        offset = 0
        for start, stop in sorted((start, stop) for start, stop, f, l in placed
                                  if f <= last and first <= l):
            if offset + size <= start:
                break
            offset = max(offset, stop)
        placed.append((offset, offset + size, first, last))
        layout[name] = (offset, sizes[name])
    return layout, max((stop for _, stop, _, _ in placed), default=0)


def _placed_inputs(plan: Plan, last_use: dict[int, int], produced: set[int]
                   ) -> tuple[dict[int, tuple[int, int]], dict[int, int]]:
    """The joins whose inputs are written straight into the join's buffer
    (a concat's producers write their slices, as oneDNN and ONNX Runtime do:
    the concat copies nothing): ``(members, joins)``, ``members[id(input)] =
    (id(join value), offset in elements)``, ``joins[id(join value)] = its
    bytes``. A join qualifies when its kind places its inputs (``NodeKind.
    places_inputs``) and every input is made by an earlier step of this plan
    into the buffer it is given, read last by the join (so no later reader
    finds the join's buffer reused), not kept, read once by it and in no
    other join, and not a join's output itself; the join's value is not kept."""
    made_at = {id(s.value): i for i, s in enumerate(plan.steps) if s.kind == "op"}
    members: dict[int, tuple[int, int]] = {}
    joins: dict[int, int] = {}
    for i, step in enumerate(plan.steps):
        rule = kind_of(step.node).places_inputs if step.kind == "op" else None
        if rule is None or id(step.value) in plan.kept or id(step.value) in members:
            continue
        placed = rule(step.node, step.value)
        if not placed:
            continue
        ids = [id(v) for v, _ in placed]
        if len(set(ids)) != len(ids) or any(
                k not in produced or k in plan.kept or k in members or k in joins
                or last_use.get(k) != i or made_at.get(k, i) >= i for k in ids):
            continue
        joins[id(step.value)] = step.bytes_out
        for v, offset in placed:
            members[id(v)] = (id(step.value), offset)
    return members, joins


def kernel_layouts(node: Node, v: Value) -> tuple[str, ...]:
    """The layouts a node's kernel reads (after the plan's reorders)."""
    layouts_of = kind_of(node).kernel_layouts
    if layouts_of is not None:
        return layouts_of(node, v)
    return tuple(s._layout for s in node.inputs)


def inplace_inputs(v: Value, node: Node) -> list[Value]:
    """Inputs whose buffer the node's kernel may overwrite with its output."""
    rule = kind_of(node).inplace_inputs
    return [] if rule is None else rule(v, node)


#: the passes in order; only ``insert_reorders`` and ``plan_buffers`` run
#: under the "eager" and "plain" policies (no fusion)
PASSES = (fold_batch_norms, fuse_swish, fuse_epilogues, fuse_patterns, fuse_eltwise_chains,
          insert_reorders, plan_buffers)
FUSING_PASSES = (fold_batch_norms, fuse_swish, fuse_epilogues, fuse_patterns,
                 fuse_eltwise_chains)
