"""Reusing plans: an eager program that records the same ops every call is planned once.

A framework calling ops one at a time records the same pending DAG at every
inference: ``h = relu(conv2d(x, w1)); ...; h.numpy()`` with a new ``x`` and
the same filters. The scheduler's passes would make the same decisions again
(~20 us of Python per op), so :func:`jitnn.scheduler.schedule` asks this
module first: the pending DAG's *shape* is its key, and a flush whose key
was planned before gets that plan with its own values put in.

The key says everything the passes look at, with each Value replaced by its
place: the n-th pending value (dependency order, as ``collect`` found them)
or the n-th computed value the DAG reads. Per pending value: its shape,
layout, axes, whether it is kept, and its node, as the node's ``sig`` (which
its op sets: for conv2d, a token of the validated call, since its attributes
follow from the options and the inputs; for an activation, its name and
parameters; for a binary op, how it takes its other operand; for a batch
normalization, which statistics it has, epsilon and its activation; for
matmul and gemm, their scalars, transposes, activation and sizes; for a node
no pass rewrites, as an opaque one, what the passes see of it) and the places of its inputs. Per computed value: its shape,
layout, axes, which blocked copies it already has (``insert_reorders``
reuses them) and whether it is a graph's input (a constant may fold into a
conv, a graph input may not). And
the context's policy, block, thread count and convolution algorithm. Two DAGs with equal keys get identical plans from the passes, so
the stored plan (a template of places, holding no Value, array or closure)
is that plan.

A DAG is planned the normal way every time when one of its nodes has no
``sig`` (every op of jitnn's sets one; a new op may not), or when it reads a
pending value from outside the flush. The result is the same either way; only the
planning cost differs. ``explain`` says when a plan was reused. A reused
conv step also gets the memo of the last run (its launch and packed
filter, as weak references, checked before use), so it skips the ~10 us of
Python that plans a launch.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import TYPE_CHECKING

from .plan import Plan, Step
from .tensor import Node, Token, Value, exact  # noqa: F401 - exact, Token: re-exported

if TYPE_CHECKING:
    from .context import Context

#: plans a context keeps (least recently used go first)
MAX_PLANS = 64

#: first item of a place marker ``(_PLACE, n)``: an object no attribute holds
_PLACE = object()


class _Uncacheable(Exception):
    """The DAG holds something a key cannot compare by value."""


@dataclasses.dataclass
class _NodeTemplate:
    """A rewritten (fused) node with places instead of Values."""

    op: str
    kind: str
    run: object
    fused: tuple
    flops: int
    inputs: tuple
    static_attrs: dict          # attributes without places, shared as they are
    placed_attrs: tuple         # (name, template) pairs to fill in


@dataclasses.dataclass
class _StepTemplate:
    kind: str
    value: int
    label: str
    node: "_NodeTemplate | None"   # None: the value's own recorded node
    layouts_in: tuple
    layout_out: str
    flops: int
    bytes_in: int
    bytes_out: int
    kept: bool
    buffer: str
    frees: tuple
    reorder_block: int
    reorder_axes: str
    buffer_place: tuple
    #: the node's ``memo`` from its last run (weak references only: see
    #: ops/conv2d.py), handed to the next plan's node, which checks it
    memo: object = None


@dataclasses.dataclass
class PlanTemplate:
    steps: list
    kept: tuple
    log: list                   # what the passes logged, reuse line first
    recorded_ops: int
    fused_ops: int
    peak_bytes: int
    buffer_slots: int
    arena: dict
    arena_bytes: int


class _Signer:
    """Builds a DAG's key, numbering the Values it meets."""

    def __init__(self, order: list[Value]):
        self.values: list[Value] = list(order)
        self.place = {id(v): n for n, v in enumerate(order)}
        self.pending_count = len(order)

    def place_of(self, v: Value) -> int:
        n = self.place.get(id(v))
        if n is None:
            if v._data is None:
                raise _Uncacheable     # pending, yet not in the DAG being planned
            n = self.place[id(v)] = len(self.values)
            self.values.append(v)
        return n


def plan_key(ctx: "Context", order: list[Value], kept: set, roots: list[Value]
             ) -> tuple[tuple, list[Value]] | None:
    """``(key, values)``: the DAG's key and its Values by place (pending ones
    first, in ``order``), or None when it cannot be cached."""
    signer = _Signer(order)
    place_of = signer.place_of
    pending = []
    try:
        for v in order:                   # a plain loop: this runs at every flush
            node = v._node
            if node.sig is None:
                return None               # its op does not describe it (see Node)
            pending.append((v._shape, v._layout, v._axes, id(v) in kept, node.sig,
                            tuple([place_of(s) for s in node.inputs])))
        root_places = tuple([place_of(r) for r in roots])
    except _Uncacheable:
        return None
    computed = tuple([
        (v._shape, v._layout, v._axes,
         tuple([k for k in v._derived if type(k) is tuple and k and k[0] == "blocked"])
         if v._derived else (), v._graph_input)
        for v in signer.values[signer.pending_count:]])
    pending = tuple(pending)
    key = (ctx.policy, ctx.block, ctx.num_threads, ctx.conv_algorithm, pending, root_places,
           computed)
    return key, signer.values


def _to_places(item: object, place: dict) -> object:
    """``item`` with each Value replaced by its place marker."""
    kind = type(item)
    if kind is Value:
        return (_PLACE, place[id(item)])
    if kind is tuple:
        return tuple(_to_places(x, place) for x in item)
    if kind is list:
        return [_to_places(x, place) for x in item]
    if kind is dict:
        return {k: _to_places(x, place) for k, x in item.items()}
    if callable(item):
        # a closure would carry this flush's values into the next (no node
        # with a sig holds one; checked here so a template never does)
        raise KeyError("callable attribute")
    return item


def _holds_places(item: object) -> bool:
    kind = type(item)
    if kind is tuple:
        return (len(item) == 2 and item[0] is _PLACE) or any(_holds_places(x) for x in item)
    if kind is list or kind is dict:
        return True                   # mutable: rebuilt for every plan
    return False


def _filled(item: object, values: list[Value]) -> object:
    kind = type(item)
    if kind is tuple:
        if len(item) == 2 and item[0] is _PLACE:
            return values[item[1]]
        return tuple(_filled(x, values) for x in item)
    if kind is list:
        return [_filled(x, values) for x in item]
    if kind is dict:
        return {k: _filled(x, values) for k, x in item.items()}
    return item


def remember(cache: "PlanCache", key: tuple, plan: "Plan", values: list[Value]) -> None:
    """Keep the plan the passes just made under ``key``, as a template of
    places (not at all if a pass brought in a Value the key did not number,
    or a callable), and have its run hand each node's memo to the template."""
    try:
        template = _template(plan, {id(v): n for n, v in enumerate(values)})
    except KeyError:
        return
    cache.put(key, template)
    plan.memo_homes = [(t, step.node) for t, step in zip(template.steps, plan.steps)
                       if t.kind == "op"]


def _template(plan: "Plan", place: dict) -> PlanTemplate:
    steps = []
    for step in plan.steps:
        node = step.node
        template = None
        if node is not None and node is not step.value._node:
            attrs = _to_places(node.attrs, place)
            template = _NodeTemplate(
                node.op, node.kind, node.run, node.fused, node.flops,
                tuple(place[id(v)] for v in node.inputs),
                {k: a for k, a in attrs.items() if not _holds_places(a)},
                tuple((k, a) for k, a in attrs.items() if _holds_places(a)))
        steps.append(_StepTemplate(
            step.kind, place[id(step.value)], step.label, template, step.layouts_in,
            step.layout_out, step.flops, step.bytes_in, step.bytes_out, step.kept,
            step.buffer, tuple(place[id(v)] for v in step.frees), step.reorder_block,
            step.reorder_axes, step.buffer_place))
    kept = tuple(sorted(place[k] for k in plan.kept))      # plan.kept holds ids
    log = [f"plan_cache: reused the plan of an earlier flush whose pending DAG had this "
           f"shape ({plan.recorded_ops} op(s)); the passes below ran for it, none now"
           ] + plan.log
    return PlanTemplate(steps, kept, log, plan.recorded_ops, plan.fused_ops,
                        plan.peak_bytes, plan.buffer_slots, plan.arena, plan.arena_bytes)


def instantiate(template: PlanTemplate, ctx: "Context", roots: list[Value],
                values: list[Value]) -> "Plan":
    """The template's plan for these values."""
    steps = []
    memo_homes = []
    for t in template.steps:             # plain code: this runs at every flush
        v = values[t.value]
        node = None
        if t.kind == "op":
            if t.node is None:
                node = v._node
            else:
                n = t.node
                attrs = dict(n.static_attrs)
                for name, item in n.placed_attrs:
                    if type(item) is tuple and len(item) == 2 and item[0] is _PLACE:
                        attrs[name] = values[item[1]]        # the common case, a Value
                    else:
                        attrs[name] = _filled(item, values)
                node = Node(n.op, [values[i] for i in n.inputs], kind=n.kind, attrs=attrs,
                            run=n.run, fused=n.fused, flops=n.flops)
            if node.memo is None:
                node.memo = t.memo
            memo_homes.append((t, node))
        steps.append(Step(t.kind, v, t.label, node=node, layouts_in=t.layouts_in,
                          layout_out=t.layout_out, flops=t.flops, bytes_in=t.bytes_in,
                          bytes_out=t.bytes_out, kept=t.kept, buffer=t.buffer,
                          frees=tuple([values[i] for i in t.frees]) if t.frees else (),
                          reorder_block=t.reorder_block, reorder_axes=t.reorder_axes,
                          buffer_place=t.buffer_place))
    return Plan(ctx.policy, list(roots), steps, {id(values[i]) for i in template.kept},
                list(template.log),
                recorded_ops=template.recorded_ops, threads=ctx.num_threads,
                fused_ops=template.fused_ops,
                peak_bytes=template.peak_bytes, buffer_slots=template.buffer_slots,
                arena=template.arena, arena_bytes=template.arena_bytes,
                memo_homes=memo_homes, reused=True)


class PlanCache:
    """A context's reusable plans, by key (bounded, least recently used first
    out). Used under the context's flush lock only."""

    def __init__(self, size: int = MAX_PLANS):
        self.size = size
        self.plans: collections.OrderedDict = collections.OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: tuple) -> PlanTemplate | None:
        template = self.plans.get(key)
        if template is None:
            self.misses += 1
        else:
            self.hits += 1
            self.plans.move_to_end(key)
        return template

    def put(self, key: tuple, template: PlanTemplate) -> None:
        self.plans[key] = template
        if len(self.plans) > self.size:
            self.plans.popitem(last=False)
