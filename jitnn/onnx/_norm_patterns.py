"""Normalization patterns in exported ONNX graphs (matched by
:func:`jitnn.onnx._patterns.match`, converted as one jitnn op each):

* **layer normalization** of older exports: ``ReduceMean, Sub, Pow 2 (or Mul
  by itself), ReduceMean, Add eps, Sqrt, Div (or Reciprocal, Mul)``, optional
  ``Mul`` by a constant scale and ``Add`` of a constant bias over trailing
  axes: ``layer_normalization``.
* **RMS normalization** (Llama's, T5's, Gemma's RMSNorm; ONNX has the op only
  from opset 23): ``Pow 2 (or Mul by itself), ReduceMean, Add eps, Sqrt`` and
  ``Div(1, .)``, ``Reciprocal`` or a ``Div`` of x by it, ``Mul`` by x, an
  optional ``Cast`` to float and ``Mul`` by a constant scale, over trailing
  axes: ``rms_normalization``, one pass over each row where the ops took five
  launches and four passes over the data (Llama's 17 norms: 85 steps).

The matchers follow the rules of :mod:`._patterns` (op types and who reads
what; the constants are checked at conversion, where a mismatch converts the
nodes as they are).
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Operand
from ._attention_convert import _float_tensor, _scalar
from ._common import Const
from ._pattern_graph import Pattern, _const_operand, _Graph, _other

#: ONNX's TensorProto.FLOAT: a Cast to it is a no-op on float32 data
_FLOAT = 1


def _match_layer_norm(g: _Graph, mean: int) -> Pattern | None:
    x = g.nodes[mean].input[0]
    sub = g.only_reader(g.nodes[mean].output[0], "Sub")
    if sub is None or list(g.nodes[sub].input) != [x, g.nodes[mean].output[0]]:
        return None
    centered = g.nodes[sub].output[0]
    readers = g.users(centered)
    if len(readers) != 2 or centered in g.outputs:
        return None
    square = next((r for r in readers if g.nodes[r].op_type in ("Pow", "Mul")
                   and g.nodes[r].input[0] == centered), None)
    if square is None or square in g.taken:
        return None
    sq = g.nodes[square]
    if sq.op_type == "Mul" and list(sq.input) != [centered, centered]:
        return None
    two = sq.input[1] if sq.op_type == "Pow" else None
    if two is not None and two not in g.const:
        return None
    var = g.only_reader(sq.output[0], "ReduceMean")
    add = None if var is None else g.only_reader(g.nodes[var].output[0], "Add")
    eps = None if add is None else _const_operand(g, add, g.nodes[var].output[0])
    root = None if eps is None else g.only_reader(g.nodes[add].output[0], "Sqrt")
    if root is None:
        return None
    covered = {mean, sub, square, var, add, root}
    std = g.nodes[root].output[0]
    divide = g.only_reader(std, "Div", "Reciprocal")
    if divide is None:
        return None
    if g.nodes[divide].op_type == "Div":
        if list(g.nodes[divide].input) != [centered, std]:
            return None
        last = divide
    else:
        last = g.only_reader(g.nodes[divide].output[0], "Mul")
        if last is None or _other(g, last, g.nodes[divide].output[0]) != centered:
            return None
        covered.add(divide)
    covered.add(last)
    if set(readers) - covered:
        return None
    scale = bias = None
    step = g.only_reader(g.nodes[last].output[0], "Mul")
    if step is not None and _const_operand(g, step, g.nodes[last].output[0]) is not None:
        scale, last = _const_operand(g, step, g.nodes[last].output[0]), step
        covered.add(step)
    step = g.only_reader(g.nodes[last].output[0], "Add")
    if step is not None and _const_operand(g, step, g.nodes[last].output[0]) is not None:
        bias, last = _const_operand(g, step, g.nodes[last].output[0]), step
        covered.add(step)
    if any(not g.private(i, covered) for i in covered - {last}):
        return None
    plan = {"x": x, "means": (mean, var), "two": two, "eps": eps, "scale": scale, "bias": bias}
    return Pattern("layer_norm", covered, last,
                   lambda cv, values: _layer_norm(cv, values, g, plan))


def _match_rms_norm(g: _Graph, mean: int) -> Pattern | None:
    square = g.node(g.nodes[mean].input[0], "Pow", "Mul")
    if square is None:
        return None
    sq = g.nodes[square]
    x = sq.input[0]
    if sq.op_type == "Mul" and list(sq.input) != [x, x]:
        return None
    two = sq.input[1] if sq.op_type == "Pow" else None
    if two is not None and two not in g.const:
        return None
    if g.only_reader(sq.output[0], "ReduceMean") != mean:
        return None
    add = g.only_reader(g.nodes[mean].output[0], "Add")
    eps = None if add is None else _const_operand(g, add, g.nodes[mean].output[0])
    root = None if eps is None else g.only_reader(g.nodes[add].output[0], "Sqrt")
    if root is None:
        return None
    covered = {square, mean, add, root}
    std = g.nodes[root].output[0]
    step = g.only_reader(std, "Div", "Reciprocal")
    if step is None:
        return None
    one = None
    node = g.nodes[step]
    if node.op_type == "Div" and list(node.input) == [x, std]:
        last = step                                  # x / sqrt(...)
    else:
        if node.op_type == "Div":                    # 1 / sqrt(...), then a Mul by x
            if node.input[1] != std or node.input[0] not in g.const:
                return None
            one = node.input[0]
        covered.add(step)
        last = g.only_reader(node.output[0], "Mul")
        if last is None or _other(g, last, node.output[0]) != x:
            return None
    covered.add(last)
    cast = g.only_reader(g.nodes[last].output[0], "Cast")
    if cast is not None and g.attr(cast, "to") == _FLOAT:
        covered.add(cast)
        last = cast
    scale = None
    step = g.only_reader(g.nodes[last].output[0], "Mul")
    if step is not None and _const_operand(g, step, g.nodes[last].output[0]) is not None:
        scale, last = _const_operand(g, step, g.nodes[last].output[0]), step
        covered.add(step)
    if any(not g.private(i, covered) for i in covered - {last}):
        return None
    plan = {"x": x, "mean": mean, "two": two, "one": one, "eps": eps, "scale": scale}
    return Pattern("rms_norm", covered, last, lambda cv, values: _rms_norm(cv, values, g, plan))


# --- converting ------------------------------------------------------------------

def _reduce_axes(values, g: _Graph, index: int, rank: int) -> tuple[int, ...] | None:
    """The axes of ReduceMean node ``index`` (attribute, or input from opset
    18), sorted and non-negative; None for keepdims=0 or no axes given."""
    if not g.attr(index, "keepdims", 1):
        return None
    node = g.nodes[index]
    if len(node.input) > 1 and node.input[1]:
        given = values[node.input[1]]
        if not isinstance(given, Const):
            return None
        axes = [int(a) for a in given.array.reshape(-1)]
    else:
        axes = g.attr(index, "axes", None)
        if axes is None:
            return None
    return tuple(sorted(int(a) % rank for a in axes))


def _norm_parameter(value, shape: tuple[int, ...], axes: tuple[int, ...]):
    """A constant scale or bias as an array of the normalized axes' sizes, or
    None when it varies along another axis (it is not a layer norm's then)."""
    if not isinstance(value, Const) or value.array.dtype.kind not in "fiu":
        return None
    array = value.array
    if array.ndim > len(shape):
        return None
    full = (1,) * (len(shape) - array.ndim) + array.shape
    for i, size in enumerate(full):
        if size not in (1, shape[i]) or (i not in axes and size != 1):
            return None
    dims = tuple(shape[a] for a in axes)
    return np.broadcast_to(array.reshape(full), tuple(
        shape[i] if i in axes else 1 for i in range(len(shape)))).reshape(dims).astype(np.float32)


def _layer_norm(cv, values, g: _Graph, plan) -> Operand | None:
    x = values[plan["x"]]
    if not _float_tensor(x):
        return None
    rank = len(x.shape)
    axes = [_reduce_axes(values, g, i, rank) for i in plan["means"]]
    if axes[0] is None or axes[0] != axes[1] or not axes[0] \
            or axes[0] != tuple(range(rank - len(axes[0]), rank)):
        return None
    axes = axes[0]
    if plan["two"] is not None and _scalar(values[plan["two"]]) != 2.0:
        return None
    eps = _scalar(values[plan["eps"]])
    if eps is None or not (eps >= 0.0) or not math.isfinite(eps):
        return None
    operands = []
    for name in (plan["scale"], plan["bias"]):
        if name is None:
            operands.append(None)
            continue
        array = _norm_parameter(values[name], x.shape, axes)
        if array is None:
            return None
        operands.append(cv.float_operand(Const(array)))
    return cv.op("layer_normalization", x, operands[0], operands[1], axes=list(axes),
                 epsilon=eps)


def _rms_norm(cv, values, g: _Graph, plan) -> Operand | None:
    x = values[plan["x"]]
    if not _float_tensor(x):
        return None
    rank = len(x.shape)
    axes = _reduce_axes(values, g, plan["mean"], rank)
    if not axes or axes != tuple(range(rank - len(axes), rank)):
        return None
    for name, want in (("two", 2.0), ("one", 1.0)):
        if plan[name] is not None and _scalar(values[plan[name]]) != want:
            return None
    eps = _scalar(values[plan["eps"]])
    if eps is None or not (eps >= 0.0) or not math.isfinite(eps):
        return None
    scale = None
    if plan["scale"] is not None:
        array = _norm_parameter(values[plan["scale"]], x.shape, axes)
        if array is None:
            return None
        scale = cv.float_operand(Const(array))
    return cv.op("rms_normalization", x, scale, axes=list(axes), epsilon=eps)
