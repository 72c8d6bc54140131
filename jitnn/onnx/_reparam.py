"""Re-parameterizable multi-branch blocks as one convolution.

RepVGG, MobileOne, FastViT's and RepViT's blocks train as several branches
on one input summed: convolutions of different kernel sizes (a 3x3 and a
1x1, or k 3x3 "over-parameterized" copies), a batch normalization alone (the
identity branch, ``x * s + t``), a constant bias. Exported before their
re-parameterization (timm's models are, unless ``reparameterize_model`` ran),
the graph is a tree of ``Add`` over ``Conv(x, W_k, b_k)``,
``BatchNormalization(x)``, ``x`` itself and constants. The sum is linear in
``x``, so it is one convolution: each filter zero-padded to the largest
kernel (centred), the identity branches a centre tap of ``s`` on each
channel's own input, the filters and biases added (in float64, rounded
once). MobileOne-S0's blocks are 4 to 6 branches each: one conv instead of
four to six convs and their adds.

:func:`match` finds a tree from its last ``Add`` (the rules of
:mod:`._patterns`: the structure at match time; the constants, kernels,
strides and paddings at conversion, where a mismatch converts the nodes as
they are). Every branch's conv reads the same ``x`` with the same strides,
dilations and groups and pads it by half its extent on each side (odd
kernels: the branches' outputs line up pixel for pixel); the tree's inner
values are read by the tree alone.
"""

from __future__ import annotations

import numpy as np

from ..graph import Operand
from ._common import Const
from ._pattern_graph import Pattern, _Graph

#: a tree of more branches than this is not a block (none is)
_MAX_BRANCHES = 16


def match(g: _Graph, root: int) -> Pattern | None:
    """The sum tree ending at ``Add`` node ``root``, if it has at least two
    branches that are convs or identities of one input and one of them is a conv."""
    covered: set[int] = {root}
    convs: list[int] = []
    norms: list[int] = []
    plain: list[str] = []             # the input itself, added as it is
    constants: list[str] = []
    pending = list(g.nodes[root].input)
    while pending:
        if len(covered) > 2 * _MAX_BRANCHES:
            return None
        name = pending.pop()
        if name in g.const:
            constants.append(name)
            continue
        add = g.node(name, "Add")
        if add is not None and len(g.users(name)) == 1 and name not in g.outputs:
            covered.add(add)
            pending.extend(g.nodes[add].input)
            continue
        conv = g.node(name, "Conv")
        if conv is not None and len(g.nodes[conv].input) >= 2 and \
                all(n in g.const for n in g.nodes[conv].input[1:] if n):
            covered.add(conv)
            convs.append(conv)
            continue
        norm = g.node(name, "BatchNormalization")
        if norm is not None and len(g.nodes[norm].output) == 1 and \
                all(n in g.const for n in g.nodes[norm].input[1:]):
            covered.add(norm)
            norms.append(norm)
            continue
        plain.append(name)
    if not convs or len(convs) + len(norms) + len(plain) < 2:
        return None
    x = g.nodes[convs[0]].input[0]
    if any(g.nodes[i].input[0] != x for i in convs + norms) or any(p != x for p in plain):
        return None
    if any(not g.private(i, covered) for i in covered - {root}):
        return None
    plan = {"x": x, "convs": convs, "norms": norms, "plain": len(plain),
            "constants": constants}
    return Pattern("reparameterized", covered, root,
                   lambda cv, values: _convert(cv, values, g, plan))


def _convert(cv, values, g: _Graph, plan) -> Operand | None:
    x = values[plan["x"]]
    shape = getattr(x, "shape", None)
    if shape is None or len(shape) != 4:
        return None
    channels = shape[1]
    first = plan["convs"][0]
    strides = tuple(g.attr(first, "strides", (1, 1)))
    dilations = tuple(g.attr(first, "dilations", (1, 1)))
    groups = int(g.attr(first, "group", 1))
    filters = []
    for index in plan["convs"]:
        node = g.nodes[index]
        if g.attr(index, "auto_pad", "NOTSET") not in ("NOTSET", b"NOTSET") or \
                tuple(g.attr(index, "strides", (1, 1))) != strides or \
                tuple(g.attr(index, "dilations", (1, 1))) != dilations or \
                int(g.attr(index, "group", 1)) != groups:
            return None
        w = values[node.input[1]]
        if not isinstance(w, Const) or w.array.ndim != 4:
            return None
        kernel = w.array.shape[2:]
        pads = tuple(g.attr(index, "pads", (0, 0, 0, 0)))
        # odd kernels padded by half their extent on each side: centred, so
        # every branch's output pixel reads the same input window's centre
        if any(k % 2 == 0 for k in kernel) or len(pads) != 4 or pads != tuple(
                (k - 1) // 2 * d for k, d in zip(kernel * 2, dilations * 2)):
            return None
        bias = values[node.input[2]] if len(node.input) > 2 and node.input[2] else None
        if bias is not None and (not isinstance(bias, Const) or bias.array.shape != (w.array.shape[0],)):
            return None
        filters.append((w.array, None if bias is None else bias.array))
    out_channels, group_in = filters[0][0].shape[:2]
    if any(w.shape[:2] != (out_channels, group_in) for w, _ in filters) or \
            group_in * groups != channels:
        return None
    identities = len(plan["norms"]) + plan["plain"]
    if identities and out_channels != channels:
        return None
    size = tuple(max(w.shape[2 + i] for w, _ in filters) for i in range(2))
    merged = np.zeros((out_channels, group_in) + size, np.float64)
    bias = np.zeros(out_channels, np.float64)
    for w, b in filters:
        top, left = (size[0] - w.shape[2]) // 2, (size[1] - w.shape[3]) // 2
        merged[:, :, top:top + w.shape[2], left:left + w.shape[3]] += w
        if b is not None:
            bias += b
    # an identity branch: channel o's own input (its place o % group_in in
    # its group) at the centre tap, times the normalization's scale
    own = np.arange(out_channels) % group_in
    centre = (size[0] // 2, size[1] // 2)
    for index in plan["norms"]:
        params = [values[n] for n in g.nodes[index].input[1:]]
        if not all(isinstance(p, Const) and p.array.shape == (channels,) for p in params):
            return None
        gamma, beta, mean, var = (p.array.astype(np.float64) for p in params)
        scale = gamma / np.sqrt(var + float(g.attr(index, "epsilon", 1e-5)))
        merged[np.arange(out_channels), own, centre[0], centre[1]] += scale
        bias += beta - mean * scale
    merged[np.arange(out_channels), own, centre[0], centre[1]] += plan["plain"]
    for name in plan["constants"]:
        value = values[name]
        if not isinstance(value, Const):
            return None
        constant = np.asarray(value.array, np.float64)
        if constant.size == 1:
            bias += float(constant.reshape(-1)[0])
        elif constant.size == out_channels and constant.ndim >= 3 and \
                constant.shape[-2:] == (1, 1) and \
                constant.shape[-3] == out_channels and len(constant.shape) <= 4:
            bias += constant.reshape(-1)
        else:
            return None
    if not np.all(np.isfinite(merged)) or not np.all(np.isfinite(bias)):
        return None
    from ._convert import op_conv        # (the converter imports the patterns)
    pads = [(k - 1) // 2 * d for k, d in zip(size, dilations)]
    attrs = {"strides": list(strides), "dilations": list(dilations), "group": groups,
             "pads": pads + pads, "kernel_shape": list(size)}
    weight = Const(merged.astype(np.float32), g.nodes[first].input[1])
    return op_conv(cv, [x, weight, Const(bias.astype(np.float32))], attrs)[0]
