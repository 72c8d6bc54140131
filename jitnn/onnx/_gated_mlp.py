"""The gated MLP of Llama-style decoders (Llama, Mistral, Qwen2): ``Mul(Mul(g,
Sigmoid(g)), u)`` with ``g = MatMul(x, Wg)`` and ``u = MatMul(x, Wu)`` (the
SiLU of ``gate_proj`` times ``up_proj``, the inputs of each ``Mul`` in
either order), matched by :func:`jitnn.onnx._patterns.match` before the
MatMuls become linears.

It converts as one GEMM of ``x``'s rows by ``[Wg | Wu]`` (the weights packed
side by side at load time) and ``swiglu`` over its two halves: one product
of ``(B * S) x K x 2 N`` instead of two of ``N`` columns, and one pass
(jitnn/ops/gated.py) instead of the sigmoid and two products. Llama's
128 x 512 x 1376 pair measured 2 x 2.04 ms against 3.93 ms for the one
128 x 512 x 2752 product (1 thread, host shared).

Left to convert as it is when a value on the way is read elsewhere, a weight
is no 2-D load-time constant, or the two weights differ in shape.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Operand
from ._attention_convert import _float_tensor
from ._common import Const
from ._pattern_graph import Pattern, _constant_matmul, _Graph, _other

#: convert the gated MLP as one GEMM and swiglu (False: as exported)
ENABLED = True


def match_swiglu(g: _Graph, sigmoid: int) -> Pattern | None:
    """The gated MLP whose gate's ``Sigmoid`` is node ``sigmoid``, or None."""
    if not ENABLED:
        return None
    gate = g.nodes[sigmoid].input[0]
    gate_mm = _constant_matmul(g, gate)
    silu = g.only_reader(g.nodes[sigmoid].output[0], "Mul")
    if gate_mm is None or silu is None or _other(g, silu, g.nodes[sigmoid].output[0]) != gate:
        return None
    if sorted(g.users(gate)) != sorted([sigmoid, silu]) or gate in g.outputs:
        return None
    product = g.only_reader(g.nodes[silu].output[0], "Mul")
    up = None if product is None else _other(g, product, g.nodes[silu].output[0])
    up_mm = None if up is None else _constant_matmul(g, up)
    if up_mm is None or up_mm[1] != gate_mm[1] or up_mm[0] == gate_mm[0]:
        return None
    covered = {gate_mm[0], sigmoid, silu, up_mm[0], product}
    if any(not g.private(i, covered) for i in covered - {product}):
        return None
    plan = {"x": gate_mm[1], "gate": gate_mm[2], "up": up_mm[2]}
    return Pattern("swiglu", covered, product, lambda cv, values: _swiglu(cv, values, plan))


def _swiglu(cv, values, plan) -> Operand | None:
    x, gate, up = values[plan["x"]], values[plan["gate"]], values[plan["up"]]
    if not _float_tensor(x) or len(x.shape) < 2:
        return None
    if not all(isinstance(w, Const) and w.array.ndim == 2 and w.array.dtype.kind == "f"
               and w.array.shape == (x.shape[-1], gate.array.shape[1]) for w in (gate, up)):
        return None
    k, n = gate.array.shape
    weight = np.ascontiguousarray(np.concatenate(
        [w.array.astype(np.float32, copy=False) for w in (gate, up)], axis=1))
    rows = math.prod(x.shape[:-1])
    flat = cv.op("reshape", x, (rows, k)) if len(x.shape) != 2 else x
    y = cv.op("swiglu", cv.op("matmul", flat, cv.float_operand(Const(weight))))
    return cv.op("reshape", y, tuple(x.shape[:-1]) + (n,)) if len(x.shape) != 2 else y
