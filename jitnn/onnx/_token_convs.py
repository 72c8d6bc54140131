"""Convolutions on token tensors, run channels-last without the transposes.

Hybrid vision transformers (PVT-v2, SegFormer's MiT, their overlapping patch
embeds) run convolutions on ``(N, L, C)`` token tensors, ``L = H * W``; the
export writes every one as

* ``Transpose(0, 2, 1)`` to ``(N, C, L)``, ``Reshape`` to ``(N, C, H, W)``
  (or, from a ``(N, H, W, C)`` tensor, ``Transpose(0, 3, 1, 2)``),
* the ``Conv`` (a depthwise 3x3 in the MLP, a k x k stride k spatial
  reduction in attention, a strided patch embed),
* ``Reshape`` to ``(N, C', L')`` and ``Transpose(0, 2, 1)`` back to tokens
  (or ``Transpose(0, 2, 3, 1)`` to ``(N, H', W', C')``).

Run as written that is a transpose copy, a reorder of the NCHW copy to the
blocked layout, the conv, a readback of its blocked result to NCHW and a
second transpose copy. Yet ``(N, L, C)`` tokens are the NHWC tensor ``(N, H,
W, C)`` as they lie in memory (a reshape is a view), and ``conv2d`` takes
``input_layout="nhwc"``: the reorder reads NHWC in one pass, and its result,
``(N, H', W', C')``, is read back as NHWC in one pass, of which the tokens
``(N, L', C')`` are a view again. An activation read only after the chain
(PVT-v2's GELU after the MLP's depthwise conv, as ``Erf`` and its ``Mul``
and ``Add`` nodes or one node) is the conv's epilogue: the blocked result is
activated in registers, where a pass of its own read and wrote the tokens
again (PVT-v2-B0's first stage: 3.2 MB, 0.66 ms a block). :func:`match`
finds the chains (each value between its nodes read by the next one only,
or by ``Shape``); the conversion checks the shapes (``H * W = L``, the
reshapes keep ``N`` and the channels) and the filter, and converts the
nodes as they are when anything does not fit.
"""

from __future__ import annotations

from collections.abc import Callable

from ..graph import Operand
from ._attention_convert import _float_tensor, _reshaped
from ._common import Const
from ._convert import same_pads
from ._pattern_graph import Pattern, _Graph

#: the permutation of the tokens' Transpose on either side, and those of a 4-D
#: channels-last tensor into the conv and out of it
_TOKENS_SWAP = [0, 2, 1]
_TO_NCHW = [0, 3, 1, 2]
_TO_NHWC = [0, 2, 3, 1]
#: activations after the chain that the conv's epilogue takes
_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
                "HardSwish": "hard_swish", "Gelu": "gelu"}


def _perm(g: _Graph, index: int) -> list[int] | None:
    perm = g.attr(index, "perm")
    return None if perm is None else [int(p) for p in perm]


def _only_into(g: _Graph, name: str, reader: int) -> bool:
    """Whether ``name``'s data is read by node ``reader`` alone (``Shape`` may
    read its shape) and it is not a graph output."""
    return name not in g.outputs and g.users(name) == [reader]


def _input_side(g: _Graph, conv: int) -> dict | None:
    """The transposes (and reshape) that make the conv's NCHW input from a
    channels-last tensor: {"x", "nodes", "reshape"}, or None."""
    source = g.nodes[conv].input[0]
    reshape = g.node(source, "Reshape")
    if reshape is not None:
        if not _only_into(g, source, conv) or g.nodes[reshape].input[1] not in g.const:
            return None
        swapped = g.nodes[reshape].input[0]
        transpose = g.node(swapped, "Transpose")
        if transpose is None or _perm(g, transpose) != _TOKENS_SWAP \
                or not _only_into(g, swapped, reshape):
            return None
        return {"x": g.nodes[transpose].input[0], "nodes": {transpose, reshape},
                "reshape": reshape}
    transpose = g.node(source, "Transpose")
    if transpose is None or _perm(g, transpose) != _TO_NCHW or not _only_into(g, source, conv):
        return None
    return {"x": g.nodes[transpose].input[0], "nodes": {transpose}, "reshape": None}


def _output_side(g: _Graph, conv: int) -> dict | None:
    """The reshape and transpose that make channels-last tokens of the conv's
    NCHW result: {"nodes", "reshape", "last"}, or None."""
    result = g.nodes[conv].output[0]
    reader = g.only_reader(result, "Reshape", "Transpose")
    if reader is None or g.nodes[reader].input[0] != result:
        return None
    if g.nodes[reader].op_type == "Transpose":
        if _perm(g, reader) != _TO_NHWC:
            return None
        return {"nodes": {reader}, "reshape": None, "last": reader}
    if g.nodes[reader].input[1] not in g.const:
        return None
    flat = g.nodes[reader].output[0]
    transpose = g.only_reader(flat, "Transpose")
    if transpose is None or _perm(g, transpose) != _TOKENS_SWAP:
        return None
    return {"nodes": {reader, transpose}, "reshape": reader, "last": transpose}


def match(g: _Graph, conv: int, gelus: dict | None = None,
          gelu_fits: Callable | None = None) -> Pattern | None:
    """The chain around ``Conv`` node ``conv``: channels-last in, the conv,
    channels-last out, and an activation after it; or None. ``gelus``: the
    erf GELU patterns by their input (a matched one is taken into the chain),
    ``gelu_fits(values, pattern)`` checks one's constants at conversion."""
    node = g.nodes[conv]
    if node.domain not in ("", "ai.onnx") or len(node.input) < 2 \
            or node.input[1] not in g.const or len(node.output) != 1:
        return None
    into, out = _input_side(g, conv), _output_side(g, conv)
    if into is None or out is None:
        return None
    covered = into["nodes"] | {conv} | out["nodes"]
    last, activation, gelu = out["last"], None, None
    tokens = g.nodes[last].output[0]
    act = g.only_reader(tokens, *_ACTIVATIONS)
    if act is not None and (g.nodes[act].op_type != "Gelu" or
                            g.attr(act, "approximate", "none") in ("none", b"none")):
        covered.add(act)
        last, activation = act, _ACTIVATIONS[g.nodes[act].op_type]
    elif gelus and gelu_fits is not None and tokens in gelus and tokens not in g.outputs \
            and gelus[tokens].data["approximate"] == "none" \
            and set(g.readers.get(tokens, ())) <= gelus[tokens].nodes:
        gelu = gelus[tokens]
        covered |= gelu.nodes
        last, activation = gelu.anchor, "gelu"
    plan = {"x": into["x"], "in_reshape": into["reshape"], "conv": conv,
            "out_reshape": out["reshape"], "activation": activation, "gelu": gelu,
            "gelu_fits": gelu_fits}
    return Pattern("token_conv", covered, last,
                   lambda cv, values: _convert(cv, values, g, plan))


def conv_output_shape(node, shapes: list) -> tuple[int, ...] | None:
    """The output shape of a 2-D ``Conv`` node from its inputs' shapes and a
    constant filter (what the ``Shape`` of a held-back conv reads), or None."""
    x, w = shapes[0], shapes[1]
    if x is None or w is None or len(x) != 4 or len(w) != 4:
        return None
    attrs = {a.name: a for a in node.attribute}
    kernel = list(w[2:])
    strides = list(attrs["strides"].ints) if "strides" in attrs else [1, 1]
    dilations = list(attrs["dilations"].ints) if "dilations" in attrs else [1, 1]
    pads = _pads(node, list(x[2:]), kernel, strides, dilations)
    if pads is None or len(strides) != 2 or len(dilations) != 2:
        return None
    sizes = []
    for size, k, s, d, (begin, end) in zip(x[2:], kernel, strides, dilations, pads):
        span = size + begin + end - d * (k - 1) - 1
        if s < 1 or span < 0:
            return None
        sizes.append(span // s + 1)
    return (x[0], w[0], *sizes)


def _pads(node, spatial: list[int], kernel: list[int], strides: list[int],
          dilations: list[int]) -> list[tuple[int, int]] | None:
    """The conv's (begin, end) padding per spatial axis (``pads`` or
    ``auto_pad``), or None for a value jitnn's Conv handler would refuse."""
    attrs = {a.name: a for a in node.attribute}
    auto_pad = attrs["auto_pad"].s.decode() if "auto_pad" in attrs else "NOTSET"
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if len(strides) != 2 or len(dilations) != 2:
            return None
        return [same_pads(auto_pad, spatial[i], kernel[i], strides[i], dilations[i])
                for i in range(2)]
    if auto_pad == "VALID":
        return [(0, 0), (0, 0)]
    if auto_pad not in ("NOTSET", ""):
        return None
    pads = list(attrs["pads"].ints) if "pads" in attrs else [0, 0, 0, 0]
    if len(pads) != 4 or any(p < 0 for p in pads):
        return None
    return [(pads[0], pads[2]), (pads[1], pads[3])]


def _channels_last_input(g: _Graph, values: dict, plan: dict) -> tuple | None:
    """(the conv's input as an NHWC operand, its NCHW shape), or None."""
    x = values[plan["x"]]
    if not _float_tensor(x):
        return None
    if plan["in_reshape"] is None:
        if len(x.shape) != 4:
            return None
        n, h, w, c = x.shape
        return x, (n, c, h, w)
    if len(x.shape) != 3:
        return None
    n, length, c = x.shape
    target = values[g.nodes[plan["in_reshape"]].input[1]]
    if not isinstance(target, Const):
        return None
    nchw = _reshaped((n, c, length), target.array.reshape(-1),
                     bool(g.attr(plan["in_reshape"], "allowzero", 0)))
    # (N, C, L) as (N, C, H, W) is the tokens as (N, H, W, C) only when N and C stay
    if nchw is None or len(nchw) != 4 or nchw[:2] != (n, c) or nchw[2] * nchw[3] != length:
        return None
    return x, nchw


def _convert(cv, values: dict, g: _Graph, plan: dict) -> Operand | None:
    found = _channels_last_input(g, values, plan)
    if found is None:
        return None
    x, (n, c, h, w) = found
    node = g.nodes[plan["conv"]]
    filt = values[node.input[1]]
    bias = values[node.input[2]] if len(node.input) > 2 and node.input[2] else None
    if not isinstance(filt, Const) or filt.array.ndim != 4 or filt.array.dtype.kind != "f":
        return None
    groups = int(g.attr(plan["conv"], "group", 1))
    o, per_group, kh, kw = filt.array.shape
    if groups < 1 or c % groups or o % groups or per_group != c // groups:
        return None
    kernel_shape = g.attr(plan["conv"], "kernel_shape")
    if kernel_shape is not None and [int(k) for k in kernel_shape] != [kh, kw]:
        return None
    if bias is not None and (not isinstance(bias, (Const, Operand)) or
                             tuple(bias.shape) != (o,)):
        return None
    shape = conv_output_shape(node, [(n, c, h, w), filt.array.shape])
    if shape is None or 0 in shape:
        return None
    strides = [int(s) for s in g.attr(plan["conv"], "strides", [1, 1])]
    dilations = [int(d) for d in g.attr(plan["conv"], "dilations", [1, 1])]
    pads = _pads(node, [h, w], [kh, kw], strides, dilations)
    out_h, out_w = shape[2:]
    if plan["out_reshape"] is not None:
        target = values[g.nodes[plan["out_reshape"]].input[1]]
        if not isinstance(target, Const):
            return None
        flat = _reshaped(shape, target.array.reshape(-1),
                         bool(g.attr(plan["out_reshape"], "allowzero", 0)))
        if flat != (n, o, out_h * out_w):
            return None
    (top, bottom), (left, right) = pads
    if plan["gelu"] is not None and not plan["gelu_fits"](values, plan["gelu"]):
        return None
    if plan["in_reshape"] is not None:
        x = cv.op("reshape", x, (n, h, w, c))     # the tokens as they lie: a view
    y = cv.op("conv2d", x, cv.float_operand(filt),
              None if bias is None else cv.float_operand(bias),
              strides=strides, dilations=dilations, padding=[top, bottom, left, right],
              groups=groups, input_layout="nhwc", activation=plan["activation"])
    if plan["out_reshape"] is None:
        return y
    return cv.op("reshape", y, (n, out_h * out_w, o))
