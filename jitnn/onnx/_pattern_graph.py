"""The graph view the transformer patterns match on (:mod:`._patterns`,
:mod:`._norm_patterns`): who writes and reads each value of an ONNX graph,
which values are known at load time, and a matched :class:`Pattern`."""

from __future__ import annotations

from collections.abc import Callable

from ._common import Const, outer_reads
from ._fold import FOLD, SHAPE_ONLY
from ._proto import attribute_value

#: the op types whose output shape :func:`_infer_shape` knows (elementwise: broadcast)
_ELEMENTWISE = {"Mul", "Div", "Add", "Sub", "Pow", "Where"}
_UNARY = {"Softmax", "IsNaN", "Erf", "Sqrt", "Reciprocal", "Neg",
          *("Relu", "Sigmoid", "Tanh", "HardSwish", "LeakyRelu", "Gelu")}
_SHAPED = _ELEMENTWISE | _UNARY | {"MatMul", "Transpose", "Reshape", "Unsqueeze", "Expand",
                                    "Split", "Slice", "Concat"}


class _Graph:
    """Who writes and who reads each value of an ONNX graph, and which values
    are known at load time (the node loop's own rule: initializers, inputs
    given as constants, and what ``FOLD`` computes from those alone)."""

    def __init__(self, graph, order: list[int], values: dict):
        self.nodes = graph.node
        self.outputs = {o.name for o in graph.output}
        self.writer: dict[str, int] = {}
        self.readers: dict[str, list[int]] = {}
        self.const = {name for name, v in values.items() if isinstance(v, Const)}
        for index in order:
            node = self.nodes[index]
            for name in node.output:
                if name:
                    self.writer[name] = index
            # a subgraph's reads of this scope (If, Loop, Scan) are reads of the node
            for name in dict.fromkeys(n for n in [*node.input, *outer_reads(node)] if n):
                self.readers.setdefault(name, []).append(index)
            present = [n for n in node.input if n]
            if node.op_type in FOLD and node.domain in ("", "ai.onnx") and (
                    all(n in self.const for n in present) or node.op_type in SHAPE_ONLY):
                self.const.update(n for n in node.output if n)
        self.taken: set[int] = set()

    def node(self, name: str, *types: str):
        """The index of the node writing ``name`` if its type is one of
        ``types``, it runs at run time and no pattern took it; else None."""
        index = self.writer.get(name)
        if index is None or index in self.taken or name in self.const:
            return None
        node = self.nodes[index]
        if node.op_type not in types or node.domain not in ("", "ai.onnx"):
            return None
        return index

    def users(self, name: str) -> list[int]:
        """The nodes reading ``name``'s data (not ``Shape``/``Size``, which read its shape)."""
        return [r for r in self.readers.get(name, ())
                if self.nodes[r].op_type not in SHAPE_ONLY]

    def only_reader(self, name: str, *types: str):
        """The index of the one node reading ``name``'s data (a value that is
        not a graph output), if of one of ``types`` and free; else None."""
        readers = self.users(name)
        if len(readers) != 1 or name in self.outputs:
            return None
        index = readers[0]
        node = self.nodes[index]
        if index in self.taken or node.op_type not in types:
            return None
        return index

    def private(self, index: int, covered: set[int]) -> bool:
        """Whether every output of node ``index`` is read only by ``covered``
        nodes, or by ``Shape``/``Size`` (which read its shape, :func:`walk`
        gives them a placeholder of that shape when the node's type is one
        whose shape it infers), and is not a graph output."""
        shaped = self.nodes[index].op_type in _SHAPED
        return all(name not in self.outputs and all(
            r in covered or shaped and self.nodes[r].op_type in SHAPE_ONLY
            for r in self.readers.get(name, ())) for name in self.nodes[index].output if name)

    def shape_readers(self, index: int, covered: set[int]) -> bool:
        """Whether ``Shape``/``Size`` nodes outside ``covered`` read node ``index``."""
        return any(r not in covered for name in self.nodes[index].output if name
                   for r in self.readers.get(name, ()))

    def attr(self, index: int, name: str, default=None):
        for a in self.nodes[index].attribute:
            if a.name == name:
                return attribute_value(a)
        return default


class QkvSource:
    """Where a matched attention's Q, K and V come from when they are not
    converted values yet (one packed GEMM, or one packed head split): the
    match's ``plan`` and the two functions of the matching module that read
    it, ``shapes(values, plan)`` (Q's, K's and V's shapes, or None) and
    ``operands(cv, values, plan, packed)``. The attention's conversion calls
    them (it cannot import those modules: they import its helpers)."""

    def __init__(self, plan: dict, shapes: Callable, operands: Callable) -> None:
        self.plan, self._shapes, self._operands = plan, shapes, operands

    def shapes(self, values: dict) -> list[tuple[int, ...]] | None:
        return self._shapes(values, self.plan)

    def operands(self, cv, values: dict, packed: bool):
        return self._operands(cv, values, self.plan, packed)


class Pattern:
    """One matched pattern: the nodes it covers (``anchor``, the last, writes
    its result) and ``convert(cv, values) -> value or None`` (None: a constant
    is not what the pattern needs; the nodes then convert as they are)."""

    def __init__(self, kind: str, nodes: set[int], anchor: int, convert: Callable,
                 data: dict | None = None):
        self.kind, self.nodes, self.anchor, self.convert = kind, nodes, anchor, convert
        self.data = data or {}
        self.shaped: set[int] = set()       # held-back nodes that Shape/Size read


def _other(g: _Graph, index: int, name: str) -> str | None:
    """The other input of the two-input node ``index`` when one is ``name``."""
    inputs = list(g.nodes[index].input)
    if len(inputs) != 2 or inputs.count(name) != 1:
        return None
    return inputs[1] if inputs[0] == name else inputs[0]


def _const_operand(g: _Graph, index: int, name: str) -> str | None:
    """The other input of node ``index``, when it is a load-time constant."""
    other = _other(g, index, name)
    return other if other is not None and other in g.const else None


def _constant_matmul(g: _Graph, name: str) -> tuple[int, str, str] | None:
    """``MatMul(x, W)`` writing ``name``, ``W`` a load-time constant and ``x``
    not: (node, x, W), or None."""
    matmul = g.node(name, "MatMul")
    if matmul is None:
        return None
    x, w = g.nodes[matmul].input
    if w not in g.const or x in g.const:
        return None
    return matmul, x, w
