"""Batch normalization after a linear layer, folded into its weights.

LeViT's linear layers are a ``Linear`` and a ``BatchNorm1d`` (timm's
``LinearNorm``), exported as ``MatMul(x, W)`` (``x``: ``(B, N, K)``, ``W``
constant), a ``Flatten(axis=2)`` (or a ``Reshape``) to ``(B * N, C)``, a
``BatchNormalization`` over ``C`` and a ``Reshape`` back to the product's
shape. At inference the normalization is ``y * s + t`` per output column
(``s = gamma / sqrt(var + epsilon)``, ``t = beta - mean * s``), so the whole
is one linear layer, ``x @ (W * s) + t`` (a bias ``b`` added to the product:
``b * s + t``), its weights computed in float64 and rounded once; its GEMM
takes the bias, and an activation read only after it (LeViT's HardSwish), in
its epilogue. ONNX Runtime's optimizer folds the same (``MatMulBNFusion``).
LeViT-128S: 46 normalizations of 19 us each and their flatten and reshape
steps were a tenth of its time.

:func:`match` finds the nodes from the ``BatchNormalization``; the constants,
ranks and shapes are checked at conversion (a mismatch converts the nodes as
they are).
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Operand
from ._attention_convert import _float_tensor, _reshaped
from ._common import Const
from ._pattern_graph import Pattern, _const_operand, _constant_matmul, _Graph

#: activations after the folded layer that its GEMM's epilogue takes
_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
                "HardSwish": "hard_swish", "LeakyRelu": "leaky_relu"}


def match(g: _Graph, norm: int) -> Pattern | None:
    """``[Add(]MatMul(x, W)[, b)]``, an optional ``Flatten``/``Reshape`` to
    2-D, ``BatchNormalization`` at node ``norm``, an optional ``Reshape``
    back and an optional activation, each value read by the next alone."""
    node = g.nodes[norm]
    if len(node.output) != 1 or len(node.input) != 5 or \
            not all(n in g.const for n in node.input[1:]):
        return None
    covered = {norm}
    flat = node.input[0]
    flatten = g.node(flat, "Flatten", "Reshape")
    if flatten is not None:
        if g.nodes[flatten].op_type == "Reshape" and g.nodes[flatten].input[1] not in g.const:
            return None
        covered.add(flatten)
        product = g.nodes[flatten].input[0]
    else:
        product = flat
    bias = None
    add = g.node(product, "Add")
    if add is not None:
        matmul_out = next((n for n in g.nodes[add].input if g.node(n, "MatMul") is not None),
                          None)
        bias = None if matmul_out is None else _const_operand(g, add, matmul_out)
        if bias is None:
            return None
        covered.add(add)
        product = matmul_out
    found = _constant_matmul(g, product)
    if found is None:
        return None
    matmul, x, w = found
    covered.add(matmul)
    last, out = norm, node.output[0]
    back = g.only_reader(out, "Reshape")
    if back is not None and g.nodes[back].input[1] in g.const:
        covered.add(back)
        last, out = back, g.nodes[back].output[0]
    else:
        back = None
    activation = None
    act = g.only_reader(out, *_ACTIVATIONS)
    if act is not None:
        covered.add(act)
        last = act
        activation = _ACTIVATIONS[g.nodes[act].op_type]
        if activation == "leaky_relu":
            activation = ("leaky_relu", float(g.attr(act, "alpha", 0.01)))
    if any(not g.private(i, covered) for i in covered - {last}):
        return None
    plan = {"x": x, "w": w, "bias": bias, "flatten": flatten, "norm": norm, "back": back,
            "activation": activation}
    return Pattern("linear_norm", covered, last, lambda cv, values: _convert(cv, values, g, plan))


def _convert(cv, values, g: _Graph, plan) -> Operand | None:
    x, w = values[plan["x"]], values[plan["w"]]
    if not _float_tensor(x) or len(x.shape) < 2 or not isinstance(w, Const) \
            or w.array.ndim != 2 or w.array.dtype.kind != "f" or x.shape[-1] != w.shape[0]:
        return None
    lead, columns = x.shape[:-1], w.shape[1]
    product = lead + (columns,)
    rows = math.prod(lead)
    flatten = plan["flatten"]
    if flatten is None:
        flat = product
    elif g.nodes[flatten].op_type == "Flatten":
        axis = int(g.attr(flatten, "axis", 1))
        axis += len(product) if axis < 0 else 0
        flat = (math.prod(product[:axis]), math.prod(product[axis:]))
    else:
        target = values[g.nodes[flatten].input[1]]
        flat = _reshaped(product, target.array.reshape(-1),
                         bool(g.attr(flatten, "allowzero", 0))) \
            if isinstance(target, Const) else None
    # the normalization's channel axis (1) must be the product's columns
    if flat != (rows, columns):
        return None
    norm = plan["norm"]
    if int(g.attr(norm, "training_mode", 0)):
        return None
    params = [values[n] for n in g.nodes[norm].input[1:]]
    if not all(isinstance(p, Const) and p.array.shape == (columns,) for p in params):
        return None
    gamma, beta, mean, var = (p.array.astype(np.float64) for p in params)
    scale = gamma / np.sqrt(var + float(g.attr(norm, "epsilon", 1e-5)))
    shift = beta - mean * scale
    bias = np.zeros(columns) if plan["bias"] is None else values[plan["bias"]]
    if isinstance(bias, Const):
        if bias.array.dtype.kind != "f" or bias.array.size not in (1, columns) or \
                any(s != 1 for s in bias.array.shape[:-1]):
            return None
        bias = bias.array
    elif plan["bias"] is not None:
        return None
    weights = w.array.astype(np.float64) * scale
    bias = np.broadcast_to(np.asarray(bias, np.float64).reshape(-1), (columns,)) * scale + shift
    if not (np.all(np.isfinite(weights)) and np.all(np.isfinite(bias))):
        return None
    shape = (rows, columns)
    if plan["back"] is not None:
        target = values[g.nodes[plan["back"]].input[1]]
        shape = _reshaped(shape, target.array.reshape(-1),
                          bool(g.attr(plan["back"], "allowzero", 0))) \
            if isinstance(target, Const) else None
        if shape is None:
            return None
    flat_x = cv.op("reshape", x, (rows, x.shape[-1])) if len(x.shape) != 2 else x
    y = cv.op("add", cv.op("matmul", flat_x, cv.float_operand(Const(weights.astype(np.float32)))),
              cv.float_operand(Const(bias.astype(np.float32))))
    activation = plan["activation"]
    if isinstance(activation, tuple):
        y = cv.op(activation[0], y, *activation[1:])
    elif activation is not None:
        y = cv.op(activation, y)
    return y if shape == (rows, columns) else cv.op("reshape", y, shape)
