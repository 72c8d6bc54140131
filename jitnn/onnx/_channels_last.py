"""Per-pixel work on a channels-last view of an NCHW tensor, run on the tensor itself.

ConvNeXt's block (and its ``LayerNorm2d``) is exported as a ``Transpose(0, 2,
3, 1)`` to NHWC, then ops that act on the last axis only, then a
``Transpose(0, 3, 1, 2)`` back:

* ``LayerNormalization`` over the last axis (constant scale and bias);
* ``MatMul`` by a constant 2-D weight ``(K, N)``, ``Add`` of a constant bias,
  an optional activation (an ONNX activation op or a GELU pattern of
  :mod:`._patterns`): a linear layer applied to every pixel;
* a layer scale: a ``Mul`` by a constant of shape ``(N,)`` right after a
  linear layer without activation (Hugging Face's ConvNeXt), or after the
  transpose back, by a constant of shape ``(N, 1, 1)`` (timm's, torchvision's).

Run as written, every block converts 2 transposes (plain copies), runs its
linear layers as GEMMs on ``(H * W, C)`` rows, GELU as its own pass after the
reshape back, and the layer scale and the residual add as two more passes
before the next depthwise conv reorders the sum to the blocked layout again.
Here the chain is the same maths on the NCHW tensor: ``layer_normalization``
over axis 1 (a blocked kernel: the channels of each pixel, lanes and blocks),
each linear layer a 1x1 ``conv2d`` with filter ``Wᵀ`` and its bias (an
activation after it, which the scheduler fuses into the conv where that is
faster), and the layer scale folded into the last conv's filter and bias
(``(h W + b) g = h (W g) + b g``), so the residual ``Add`` that follows is
absorbed by that conv's epilogue. No transpose is left, and the data stay
blocked from the depthwise conv to the residual sum.

:func:`match` finds the chains; the values between their nodes must be read
by the chain alone (not by ``Shape``, not graph outputs).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._attention_convert import _float_tensor
from ._common import Const
from ._pattern_graph import Pattern, _const_operand, _Graph

#: ONNX activation op -> jitnn op (with its ``alpha`` for LeakyRelu)
_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
                "HardSwish": "hard_swish", "LeakyRelu": "leaky_relu", "Gelu": "gelu"}


def _perm(g: _Graph, index: int) -> list[int] | None:
    perm = g.attr(index, "perm")
    return None if perm is None else [int(p) for p in perm]


def _linear(g: _Graph, matmul: int, name: str, covered: set[int], gelus: dict):
    """``MatMul(name, W)``, ``Add`` of a constant, an optional activation:
    (the step, the value it writes), its nodes added to ``covered``; or None."""
    x, w = g.nodes[matmul].input
    if x != name or w not in g.const:
        return None
    product = g.nodes[matmul].output[0]
    add = g.only_reader(product, "Add")
    bias = None if add is None else _const_operand(g, add, product)
    if bias is None:
        return None
    covered |= {matmul, add}
    out = g.nodes[add].output[0]
    step = {"kind": "linear", "w": w, "bias": bias, "activation": None, "gelu": None}
    act = g.only_reader(out, *_ACTIVATIONS)
    if act is not None:
        op = g.nodes[act].op_type
        approximate = g.attr(act, "approximate", "none")
        approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
        if op == "Gelu" and approximate not in ("none", "tanh"):
            return step, out
        covered.add(act)
        step["activation"] = ("leaky_relu", float(g.attr(act, "alpha", 0.01))) \
            if op == "LeakyRelu" else (_ACTIVATIONS[op], approximate) if op == "Gelu" \
            else (_ACTIVATIONS[op],)
        return step, g.nodes[act].output[0]
    gelu = gelus.get(out)
    if gelu is not None and out not in g.outputs and set(g.readers.get(out, ())) <= gelu.nodes \
            and not gelu.nodes & g.taken:
        covered |= gelu.nodes
        step["gelu"] = gelu
        return step, g.nodes[gelu.anchor].output[0]
    return step, out


def match_channels_last(g: _Graph, transpose: int, gelus: dict,
                        gelu_constants: Callable) -> Pattern | None:
    """The chain from ``Transpose(0, 2, 3, 1)`` node ``transpose`` to the
    ``Transpose(0, 3, 1, 2)`` (and layer-scale ``Mul``) that ends it, or None.
    ``gelu_constants(values, consts, terms)``: whether a GELU pattern's
    constants are GELU's (:mod:`._patterns`' check)."""
    if _perm(g, transpose) != [0, 2, 3, 1]:
        return None
    x = g.nodes[transpose].input[0]
    name = g.nodes[transpose].output[0]
    covered, steps = {transpose}, []
    while True:
        reader = g.only_reader(name, "LayerNormalization", "MatMul", "Transpose", "Mul")
        if reader is None:
            return None
        node = g.nodes[reader]
        if node.op_type == "Mul":
            # a layer scale on the last axis, before the transpose back
            # (Hugging Face's ConvNeXt): folded into the linear layer before it
            step = steps[-1] if steps else None
            scale = _const_operand(g, reader, name)
            if step is None or step["kind"] != "linear" or step["activation"] is not None \
                    or step["gelu"] is not None or "layer_scale" in step or scale is None:
                return None
            covered.add(reader)
            step["layer_scale"] = scale
            name = node.output[0]
            continue
        if node.op_type == "Transpose":
            if _perm(g, reader) != [0, 3, 1, 2] or not steps:
                return None
            covered.add(reader)
            last, name = reader, node.output[0]
            break
        if node.op_type == "LayerNormalization":
            if node.input[0] != name or int(g.attr(reader, "axis", -1)) not in (-1, 3) \
                    or any(o for o in node.output[1:]) \
                    or any(p not in g.const for p in node.input[1:] if p):
                return None
            covered.add(reader)
            steps.append({"kind": "norm", "scale": node.input[1],
                          "bias": node.input[2] if len(node.input) > 2 and node.input[2]
                          else None, "epsilon": float(g.attr(reader, "epsilon", 1e-5))})
            name = node.output[0]
            continue
        found = _linear(g, reader, name, covered, gelus)
        if found is None:
            return None
        step, name = found
        steps.append(step)
    scale = None
    mul = g.only_reader(name, "Mul")
    if mul is not None and steps[-1]["kind"] == "linear" and steps[-1]["activation"] is None \
            and steps[-1]["gelu"] is None:
        scale = _const_operand(g, mul, name)
        if scale is not None:
            covered.add(mul)
            last = mul
    if any(name in g.outputs or any(r not in covered for r in g.readers.get(name, ()))
           for i in covered - {last} for name in g.nodes[i].output if name):
        return None
    plan = {"x": x, "steps": steps, "scale": scale, "gelu_constants": gelu_constants}
    return Pattern("channels_last", covered, last,
                   lambda cv, values: _convert(cv, values, plan))


def match(g: _Graph, transposes: list[int], gelus: dict, take,
          gelu_constants: Callable) -> None:
    """Take (``take(pattern)``) every chain starting at one of ``transposes``;
    the GELU patterns a chain took leave ``gelus``."""
    for index in transposes:
        if index not in g.taken:
            pattern = take(match_channels_last(g, index, gelus, gelu_constants))
            if pattern is not None:
                for x in [x for x, p in gelus.items() if p.nodes & pattern.nodes]:
                    del gelus[x]


def _vector(value, size: int) -> np.ndarray | None:
    """A constant's numbers as a float32 vector of ``size`` (a size-1 constant
    broadcast), when every axis but the last is 1; else None."""
    if not isinstance(value, Const) or value.array.dtype.kind != "f":
        return None
    array = value.array
    if array.size not in (1, size) or any(s != 1 for s in array.shape[:-1]):
        return None
    return np.ascontiguousarray(np.broadcast_to(array.reshape(-1), (size,)), np.float32)


def _channel_scale(value, channels: int) -> np.ndarray | None:
    """A layer-scale constant that multiplies an NCHW tensor by channel: shape
    ``(C, 1, 1)``, ``(1, C, 1, 1)`` or a scalar, as a float64 vector."""
    if not isinstance(value, Const) or value.array.dtype.kind != "f" or value.array.ndim > 4:
        return None
    shape = (1,) * (4 - value.array.ndim) + value.array.shape
    if shape[0] != 1 or shape[2:] != (1, 1) or shape[1] not in (1, channels):
        return None
    return np.broadcast_to(value.array.reshape(-1).astype(np.float64), (channels,))


def _convert(cv, values, plan):
    y = values[plan["x"]]
    if not _float_tensor(y) or len(y.shape) != 4:
        return None
    channels = y.shape[1]
    steps = plan["steps"]
    # check every constant before emitting an op: a misfit converts the nodes as they are
    layers = []
    for i, step in enumerate(steps):
        if step["kind"] == "norm":
            scale = _vector(values[step["scale"]], channels)
            bias = None if step["bias"] is None else _vector(values[step["bias"]], channels)
            if scale is None or (step["bias"] is not None and bias is None):
                return None
            layers.append(("norm", scale, bias, step["epsilon"]))
            continue
        w = values[step["w"]]
        if not isinstance(w, Const) or w.array.ndim != 2 or w.array.dtype.kind != "f" \
                or w.array.shape[0] != channels:
            return None
        n = w.array.shape[1]
        bias = _vector(values[step["bias"]], n)
        gelu = step["gelu"]
        if bias is None or gelu is not None and not plan["gelu_constants"](
                values, gelu.data["consts"], gelu.data.get("terms")):
            return None
        weight = w.array.astype(np.float64)
        bias64 = bias.astype(np.float64)
        if "layer_scale" in step:
            gamma = _vector(values[step["layer_scale"]], n)
            if gamma is None:
                return None
            weight, bias64 = weight * gamma, bias64 * gamma
        if i == len(steps) - 1 and plan["scale"] is not None:
            gamma = _channel_scale(values[plan["scale"]], n)
            if gamma is None:
                return None
            weight, bias64 = weight * gamma, bias64 * gamma
        filt = np.ascontiguousarray(weight.T.reshape(n, channels, 1, 1), np.float32)
        activation = step["activation"] or (("gelu", gelu.data["approximate"])
                                            if gelu is not None else None)
        layers.append(("conv", filt, bias64.astype(np.float32), activation))
        channels = n
    for layer in layers:
        if layer[0] == "norm":
            _, scale, bias, epsilon = layer
            y = cv.op("layer_normalization", y, cv.float_operand(Const(scale)),
                      None if bias is None else cv.float_operand(Const(bias)),
                      axes=[1], epsilon=epsilon)
            continue
        _, filt, bias, activation = layer
        y = cv.op("conv2d", y, cv.float_operand(Const(filt)), cv.float_operand(Const(bias)))
        if activation is None:
            continue
        if activation[0] == "gelu":
            y = cv.op("gelu", y, approximate=activation[1])
        else:
            y = cv.op(*activation[:1], y, *activation[1:])
    return y
