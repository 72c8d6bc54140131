"""The rotary position embedding pattern of exported ONNX graphs (matched by
:func:`jitnn.onnx._patterns.match`, converted as one jitnn op):

``Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h:)), Slice(x, :h), axis=-1),
sin))``, each ``Mul`` and the ``Add`` with their inputs in either order, the
slices over the last axis at its half ``h`` (steps absent or 1): the
``x * cos + rotate_half(x) * sin`` of Llama's, Mistral's, Qwen's and
Gemma's ``apply_rotary_pos_emb`` as ``torch.onnx.export`` writes it (and
GPT-NeoX's, Phi's on the rotated part). It becomes
``rotary_embedding(x, cos, sin)``: one pass where the seven ops took seven
launches and passes (Llama's query and key in each layer: 14 steps).

``cos`` and ``sin`` may be constants or computed (a table gathered by
position ids); they must broadcast to ``x``. The slice bounds are checked at
conversion (they are load-time constants, often computed from ``x``'s
shape); a mismatch converts the nodes as they are. When ``x`` is the
``Transpose(0, 2, 1, 3)`` of the head split ``(B, S, H, D)`` that nothing
else reads, the transpose is taken in: ``rotary_embedding(.., layout="bshd")``
reads the rows in place (the query's and key's transposes are not copied).
"""

from __future__ import annotations

import numpy as np

from ..graph import Operand
from ._attention_convert import _float_tensor
from ._common import Const
from ._pattern_graph import Pattern, _Graph, _other


def _slice_of(g: _Graph, name: str) -> int | None:
    """The index of the free ``Slice`` node writing ``name`` (opset 10+: bounds as inputs)."""
    index = g.node(name, "Slice")
    if index is None or len(g.nodes[index].input) < 3:
        return None
    return index


def _match_rotary(g: _Graph, concat: int) -> Pattern | None:
    node = g.nodes[concat]
    if len(node.input) != 2:
        return None
    neg = g.node(node.input[0], "Neg")
    low = _slice_of(g, node.input[1])
    if neg is None or low is None:
        return None
    high = _slice_of(g, g.nodes[neg].input[0])
    if high is None:
        return None
    x = g.nodes[low].input[0]
    if g.nodes[high].input[0] != x or x in g.const:
        return None
    rotated = node.output[0]
    mul_sin = g.only_reader(rotated, "Mul")
    sin = None if mul_sin is None else _other(g, mul_sin, rotated)
    add = None if mul_sin is None else g.only_reader(g.nodes[mul_sin].output[0], "Add")
    if add is None or sin is None:
        return None
    mul_cos = g.node(_other(g, add, g.nodes[mul_sin].output[0]) or "", "Mul")
    cos = None if mul_cos is None else _other(g, mul_cos, x)
    if cos is None:
        return None
    covered = {low, high, neg, concat, mul_sin, mul_cos, add}
    layout = "bhsd"
    transpose = g.node(x, "Transpose")
    if transpose is not None and list(g.attr(transpose, "perm", [])) == [0, 2, 1, 3] \
            and set(g.users(x)) == {low, high, mul_cos} and x not in g.outputs:
        # the head split's Transpose(0, 2, 1, 3) before it: read in place (layout "bshd")
        covered.add(transpose)
        x, layout = g.nodes[transpose].input[0], "bshd"
    if any(not g.private(i, covered) for i in covered - {add}):
        return None
    plan = {"x": x, "cos": cos, "sin": sin, "concat": concat, "low": low, "high": high,
            "layout": layout}
    return Pattern("rotary", covered, add, lambda cv, values: _rotary(cv, values, g, plan),
                   data=plan)


def match_at(g: _Graph, name: str) -> Pattern | None:
    """The rotary embedding whose last ``Add`` writes ``name``, or None."""
    add = g.node(name, "Add")
    for product in () if add is None else g.nodes[add].input:
        mul = g.node(product, "Mul")
        for operand in () if mul is None else g.nodes[mul].input:
            concat = g.node(operand, "Concat")
            found = None if concat is None else _match_rotary(g, concat)
            if found is not None and found.anchor == add:
                return found
    return None


def _ints(values, name: str) -> list[int] | None:
    value = values.get(name) if name else None
    if not isinstance(value, Const) or value.array.dtype.kind not in "iu":
        return None
    return [int(v) for v in value.array.reshape(-1)]


def _half_slice(values, g: _Graph, index: int, rank: int, depth: int) -> tuple | None:
    """``(start, end)`` of Slice ``index`` over the last axis, clamped to
    ``[0, depth]``, or None when it slices another axis or with a step."""
    inputs = list(g.nodes[index].input) + [""] * 2
    starts, ends = _ints(values, inputs[1]), _ints(values, inputs[2])
    axes = _ints(values, inputs[3]) if inputs[3] else [rank - 1] if rank == 1 else None
    steps = _ints(values, inputs[4]) if inputs[4] else [1]
    if None in (starts, ends, axes, steps) or not (len(starts) == len(ends) == len(axes)
                                                    == len(steps) == 1):
        return None
    if axes[0] % rank != rank - 1 or steps[0] != 1:
        return None
    bounds = []
    for b in (starts[0], ends[0]):
        b = b + depth if b < 0 else b
        bounds.append(min(max(b, 0), depth))
    return tuple(bounds)


def _rotary(cv, values, g: _Graph, plan) -> Operand | None:
    x = values[plan["x"]]
    found = tables(values, g, plan, tuple(x.shape)) if _float_tensor(x) else None
    if found is None:
        return None
    return cv.op("rotary_embedding", x, *(cv.float_operand(v) if isinstance(v, Const) else v
                                          for v in found), layout=plan["layout"])


def tables(values, g: _Graph, plan, x_shape: tuple[int, ...]) -> tuple | None:
    """The converted ``(cos, sin)`` of matched embedding ``plan`` on an ``x``
    of ``x_shape``, when its slices, concatenation and tables are the
    embedding's (checks only); else None."""
    cos, sin = values[plan["cos"]], values[plan["sin"]]
    if not all(_float_tensor(v) or isinstance(v, Const) and v.array.dtype.kind == "f"
               for v in (cos, sin)):
        return None
    rank = len(x_shape)
    depth = x_shape[-1] if rank else 0
    # the shape of the value the slices read (after the transpose when it is taken in)
    shape = x_shape
    if plan["layout"] == "bshd":
        if rank != 4:
            return None
        shape = (shape[0], shape[2], shape[1], shape[3])
    axis = g.attr(plan["concat"], "axis", 0)
    if rank == 0 or depth % 2 or axis % rank != rank - 1:
        return None
    half = depth // 2
    if _half_slice(values, g, plan["low"], rank, depth) != (0, half) \
            or _half_slice(values, g, plan["high"], rank, depth) != (half, depth):
        return None
    shapes = [tuple(v.shape) for v in (cos, sin)]
    if shapes[0] != shapes[1] or len(shapes[0]) > rank or not shapes[0] \
            or shapes[0][-1] != depth:
        return None
    try:
        if np.broadcast_shapes(shapes[0], shape) != shape:
            return None
    except ValueError:
        return None
    return cos, sin
