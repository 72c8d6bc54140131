"""Group normalization from ONNX: jitnn's ``group_normalization`` for

* the **GroupNormalization** op (opset 18: ``scale`` and ``bias`` of one
  value per group, each repeated over its ``C / num_groups`` channels;
  opset 21: one per channel; the statistics in float64 whatever
  ``stash_type`` asks);
* the **exported GroupNorm** of ``torch.onnx.export`` before opset 18
  (PoolFormer's GroupNorm(1, C), a diffusion UNet's GroupNorm(32, C)):
  ``Reshape(N, G, -1)``, ``InstanceNormalization`` with scale 1 and bias 0,
  ``Reshape`` back to the input's shape, an optional ``Mul`` by a constant
  scale and ``Add`` of a constant bias that vary along the channels only
  (``(C, 1, 1)``): one op where the five ran on plain data (the instance
  norm on an ``(N, G, C / G * H * W)`` view), so the ops around it stay
  blocked. Matched by :func:`match` (the rules of :mod:`._patterns`: the
  structure at match time, the constants at conversion, where a mismatch
  converts the nodes as they are).
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Operand
from ._attention_convert import _float_tensor, _reshaped
from ._common import Const, Converter, shape_of
from ._norm_patterns import _norm_parameter
from ._pattern_graph import Pattern, _const_operand, _Graph


def op_group_normalization(cv: Converter, inputs, attrs):
    """GroupNormalization (opsets 18 and 21): ``num_groups`` groups of the
    channels of ``X`` ``(N, C, ...)``, scale and bias per group (18) or per
    channel (21)."""
    x = cv.float_operand(inputs[0])
    if len(x.shape) < 2:
        raise cv.invalid(f"input of shape {x.shape}: GroupNormalization needs (N, C, ...)")
    if "num_groups" not in attrs:
        raise cv.invalid("the num_groups attribute is missing")
    groups, channels = int(attrs["num_groups"]), x.shape[1]
    if groups < 1 or channels % groups:
        raise cv.invalid(f"num_groups {groups} does not divide the {channels} channels of "
                         f"input {x.shape}")
    per_channel = cv.opset >= 21
    size = channels if per_channel else groups
    parameters = []
    for name, value in (("scale", inputs[1]), ("bias", inputs[2])):
        if shape_of(value) != (size,):
            raise cv.invalid(f"{name} must have shape ({size},) ("
                             + ("one per channel" if per_channel else "one per group, opset < 21")
                             + f"), got {shape_of(value)}")
        parameters.append(cv.float_operand(value) if per_channel
                          else _per_channel(cv, value, groups, channels))
    return [cv.op("group_normalization", x, groups, parameters[0], parameters[1],
                  epsilon=float(attrs.get("epsilon", 1e-5)))]


def _per_channel(cv: Converter, value, groups: int, channels: int) -> Operand:
    """A ``(groups,)`` parameter repeated over each group's channels: ``(channels,)``."""
    repeat = channels // groups
    if isinstance(value, Const):
        return cv.float_operand(Const(np.repeat(value.array.astype(np.float32), repeat)))
    column = cv.op("reshape", cv.float_operand(value), (groups, 1))
    return cv.op("reshape", cv.op("expand", column, [groups, repeat]), (channels,))


# --- the exported pattern ------------------------------------------------------------

def match(g: _Graph, norm: int) -> Pattern | None:
    """The exported GroupNorm around ``InstanceNormalization`` node ``norm``."""
    node = g.nodes[norm]
    if len(node.input) != 3 or not all(n in g.const for n in node.input[1:]):
        return None
    first = g.node(node.input[0], "Reshape")
    if first is None or g.nodes[first].input[1] not in g.const:
        return None
    x = g.nodes[first].input[0]
    last = g.only_reader(node.output[0], "Reshape")
    if last is None or g.nodes[last].input[1] not in g.const:
        return None
    back = last
    covered = {first, norm, back}
    scale = bias = None
    for op_type in ("Mul", "Add"):
        step = g.only_reader(g.nodes[last].output[0], op_type)
        const = None if step is None else _const_operand(g, step, g.nodes[last].output[0])
        if const is not None:
            if op_type == "Mul":
                scale = const
            else:
                bias = const
            last = step
            covered.add(step)
    if any(not g.private(i, covered) for i in covered - {last}):
        return None
    plan = {"x": x, "first": first, "norm": norm, "back": back, "scale": scale, "bias": bias}
    return Pattern("group_norm", covered, last, lambda cv, values: _convert(cv, values, g, plan))


def _convert(cv, values, g: _Graph, plan) -> Operand | None:
    x = values[plan["x"]]
    if not _float_tensor(x) or len(x.shape) < 2 or not x.shape[0]:
        return None
    shape = tuple(x.shape)
    first, back = g.nodes[plan["first"]], g.nodes[plan["back"]]
    grouped = _reshaped(shape, values[first.input[1]].array.reshape(-1),
                        bool(g.attr(plan["first"], "allowzero", 0)))
    if grouped is None or len(grouped) != 3 or grouped[0] != shape[0]:
        return None
    groups = grouped[1]
    if not groups or shape[1] % groups:
        return None
    restored = _reshaped(grouped, values[back.input[1]].array.reshape(-1),
                         bool(g.attr(plan["back"], "allowzero", 0)))
    if restored != shape:
        return None
    norm = g.nodes[plan["norm"]]
    ones, zeros = (values[n] for n in norm.input[1:])
    if not all(isinstance(v, Const) and v.array.shape == (groups,) for v in (ones, zeros)) \
            or not (np.all(ones.array == 1) and np.all(zeros.array == 0)):
        return None
    epsilon = float(g.attr(plan["norm"], "epsilon", 1e-5))
    if not (epsilon >= 0.0) or not math.isfinite(epsilon):
        return None
    operands = []
    for name in (plan["scale"], plan["bias"]):
        if name is None:
            operands.append(None)
            continue
        array = _norm_parameter(values[name], shape, (1,))
        if array is None:
            return None
        operands.append(cv.float_operand(Const(np.ascontiguousarray(array))))
    return cv.op("group_normalization", x, groups, operands[0], operands[1], epsilon=epsilon)


#: ONNX op type -> handler, for the ops of this module
OPS = {"GroupNormalization": op_group_normalization}
