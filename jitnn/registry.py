"""The op registry: every op, and every kind of node the ops record, declared once.

Two tables, filled by the op modules (``jitnn/ops/*.py``) when they are
imported:

* :class:`OpDef`, one per user-facing op (``relu``, ``conv2d``, ...): its
  names (jitnn's, WebNN's, the ONNX op types that map to it), the eager
  function (validation, shape inference, the node it records), its float64
  reference (the spec that kernels and fused plans are tested against), the
  layouts it reads and writes and how it fuses. The graph builder, the docs'
  op table and the tests look ops up here by name.
* :class:`NodeKind`, one per lowering (what a recorded :class:`~jitnn.tensor.Node`
  runs: ``"conv2d"``, ``"eltwise"``, ...): its role for the scheduler and the
  hooks its passes call. The scheduler knows roles, never op names, and
  imports no kernel module: an op's fusion rules live with the op.

Roles: an *anchor* (conv2d, matmul) runs one kernel with an epilogue and may
absorb the ops after it (``fold``: a batch normalization into its weights;
``absorb``: a residual add or an activation into its epilogue); an
*elementwise* kind merges with the elementwise ops after it into one pass
over memory (``merge``); ``"none"``: run as it is.

Adding an op: one module in ``jitnn/ops/`` that defines the function and its
reference and registers them (plus a kernel in ``kernels/`` and tests).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from .tensor import Node, Value

#: what the scheduler does with a node kind (see the module docstring)
ROLES = ("anchor", "elementwise", "none")


@dataclasses.dataclass(frozen=True)
class NodeKind:
    """How the scheduler's passes treat nodes of one kind."""

    name: str
    role: str = "none"
    #: the kernel writes into the buffer the plan gives it (so the buffer
    #: planner may hand it a dead intermediate's array, and reuse its output's)
    writes_into_buffer: bool = False
    #: ``(node, value) -> layouts`` its kernel reads (explain); default: its inputs'
    kernel_layouts: Optional[Callable[["Node", "Value"], tuple]] = None
    #: ``(node, value) -> lines`` explain prints under its step (how the kernel
    #: was chosen: a conv's algorithm, measured or by formula)
    explain: Optional[Callable[["Node", "Value"], list]] = None
    #: ``(value, node) -> inputs`` whose buffer its kernel may overwrite with its output
    inplace_inputs: Optional[Callable[["Value", "Node"], list]] = None
    #: anchor: ``(node, consumer, value, consumer's value) -> node`` with the
    #: following op folded into its weights, or None (a batch normalization
    #: into a conv's filter)
    fold: Optional[Callable[["Node", "Node", "Value", "Value"], Optional["Node"]]] = None
    #: anchor: ``(node, consumer, value, consumer's value) -> node`` with the
    #: following op in its epilogue, or None
    absorb: Optional[Callable[["Node", "Node", "Value", "Value"], Optional["Node"]]] = None
    #: elementwise: ``(node, consumer, value, consumer's value) -> node`` doing
    #: both in one pass, or None
    merge: Optional[Callable[["Node", "Node", "Value", "Value"], Optional["Node"]]] = None
    #: elementwise: ``(gate, product, x) -> node``: when ``gate`` reads only ``x``
    #: and ``product`` is ``x * gate(x)``, one node doing both on ``x`` (SiLU:
    #: ``x * sigmoid(x)``) that an anchor may absorb, else None
    self_gated: Optional[Callable[["Node", "Node", "Value"], Optional["Node"]]] = None
    #: ``(node, value, plan) -> (end, node, replaced) or None``: a pattern of
    #: several ops around this node run as one ``node`` computing the value
    #: ``end`` (the pattern's last); the ops making the values ``replaced`` leave
    #: the plan. ``plan`` answers who makes and who reads a value
    #: (:class:`jitnn.passes.PlanQueries`). A squeeze-and-excitation block, found
    #: from its excite conv.
    pattern: Optional[Callable] = None
    #: ``(node, value) -> [(input, offset), ...] or None``: a join whose kernel
    #: only copies each input into its output, starting at ``offset`` elements
    #: (a channel concat of blocked batch-1 data): the buffer planner may have
    #: the inputs' own kernels write there, and the join then copies nothing
    places_inputs: Optional[Callable[["Node", "Value"], Optional[list]]] = None

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"NodeKind {self.name!r}: role must be one of {ROLES}")


@dataclasses.dataclass(frozen=True)
class OpDef:
    """One op, as users and the tests see it."""

    name: str                      # jitnn.<name>, GraphBuilder.<name>
    function: Callable             # the eager op: validates, infers shapes, records
    reference: Callable            # the spec: float64 numpy, plain layout
    webnn: Optional[str] = None    # MLGraphBuilder's name, where WebNN has the op
    onnx: tuple = ()               # ONNX op types that map to it
    kinds: tuple = ()              # node kinds it records (see NodeKind)
    layouts: str = "plain"         # what it reads and writes: "blocked or plain", ...
    fusion: str = ""               # how it fuses, in words (docs, explain)
    builder: bool = True           # a GraphBuilder method
    dtypes: tuple = ("float32",)   # the data types of its (main) input


_KINDS: dict[str, NodeKind] = {}
_OPS: dict[str, OpDef] = {}
#: a node kind nobody registered: run as it is (an opaque closure, a placeholder)
OPAQUE = NodeKind("opaque")


def register_kind(kind: NodeKind) -> NodeKind:
    if kind.name in _KINDS:
        raise ValueError(f"node kind {kind.name!r} is registered already")
    _KINDS[kind.name] = kind
    return kind


def kind_of(node: "Node") -> NodeKind:
    """The :class:`NodeKind` of ``node`` (:data:`OPAQUE` for an unknown kind)."""
    return _KINDS.get(node.kind, OPAQUE)


def register_op(op: OpDef) -> OpDef:
    if op.name in _OPS:
        raise ValueError(f"op {op.name!r} is registered already")
    _OPS[op.name] = op
    return op


def op(name: str) -> OpDef:
    """The op named ``name`` (jitnn's name); KeyError if there is none."""
    return _OPS[name]


def ops() -> list[OpDef]:
    """Every registered op, by name."""
    return [_OPS[name] for name in sorted(_OPS)]


def reference(name: str) -> Callable:
    """The float64 reference of op ``name`` (what tests compare with)."""
    return _OPS[name].reference


def markdown_table() -> str:
    """The op table of docs/ops.md: every op, its WebNN and ONNX names, its
    data types, the layouts it runs in and how it fuses."""
    rows = ["| op | WebNN | ONNX | dtypes | layouts | fusion |",
            "|---|---|---|---|---|---|"]
    for entry in ops():
        cells = (f"`{entry.name}`", f"`{entry.webnn}`" if entry.webnn else "-",
                 ", ".join(entry.onnx) or "-", ", ".join(entry.dtypes), entry.layouts,
                 entry.fusion or "-")
        rows.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(rows) + "\n"
