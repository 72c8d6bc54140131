"""Q, K and V of a fused attention (:mod:`._patterns`) as parts of one packed
head split, read in place by the attention.

timm's ViT and Swin (and their descendants) write the projections as one
linear layer of ``3 * H * D`` columns and split its heads as::

    qkv = Reshape(x, (B, S, 3, H, D))        # x: (B, S, 3 * H * D)
    t = Transpose(qkv, perm=(2, 0, 3, 1, 4)) # (3, B, H, S, D)
    q, k, v = t[0], t[1], t[2]               # Split + Squeeze, Slice + Squeeze or Gather

and the attention's output goes into ``Transpose(0, 2, 1, 3)`` (then a
``Reshape`` to ``(B, S, H * D)``). Part ``p``'s head ``h`` is columns ``[p *
H * D + h * D, ... + D)`` of ``x``: the attention reads them as strided
``views`` of ``x`` in its ``bshd`` layout and writes the ``(B, S, H, D)``
output that the second transpose would give. The ``(3, B, H, S, D)`` copy
before the attention and the ``(B, S, H, D)`` one after it are not made
(Swin-T's first stage: 3136 rows x 288 columns, then x 96, per block).

Left to convert as exported when a value on the way is read outside the
attention, or the constants (the reshape's shape, the split sizes, the
slices' bounds, the gathered index, the squeezed axis) are not those of the
three parts of axis 0.
"""

from __future__ import annotations

from ._attention_convert import _float_tensor, _reshaped
from ._common import Const
from ._pattern_graph import QkvSource, _Graph

#: read the packed head split in place (False: convert the nodes as exported)
ENABLED = True


def _squeezed(g: _Graph, name: str) -> tuple[list[int], str, str | None] | None:
    """``Squeeze(s, axes=[0])`` writing ``name`` (the axes checked at
    conversion): ([node], s, the axes input or None), or None."""
    index = g.node(name, "Squeeze")
    if index is None:
        return None
    node = g.nodes[index]
    axes = node.input[1] if len(node.input) > 1 and node.input[1] else None
    if axes is None and [int(a) for a in g.attr(index, "axes", [])] != [0]:
        return None
    if axes is not None and axes not in g.const:
        return None
    return [index], node.input[0], axes


def _part(g: _Graph, name: str) -> dict | None:
    """How ``name`` is one part of axis 0 of a value: ``{"nodes", "source",
    "kind", ...}`` (the constants are checked at conversion), or None."""
    index = g.node(name, "Gather")
    if index is not None:
        node = g.nodes[index]
        if int(g.attr(index, "axis", 0)) != 0 or node.input[1] not in g.const:
            return None
        return {"nodes": [index], "source": node.input[0], "kind": "gather",
                "index": node.input[1]}
    squeezed = _squeezed(g, name)
    if squeezed is None:
        return None
    nodes, inner, axes = squeezed
    index = g.node(inner, "Split", "Slice")
    if index is None:
        return None
    node = g.nodes[index]
    part = {"nodes": nodes + [index], "source": node.input[0], "axes_of_squeeze": axes}
    if node.op_type == "Split":
        if int(g.attr(index, "axis", 0)) != 0 or len(node.output) != 3:
            return None
        sizes = node.input[1] if len(node.input) > 1 and node.input[1] else None
        if sizes is not None and sizes not in g.const:
            return None
        part.update(kind="split", split=index, output=list(node.output).index(inner),
                    sizes=sizes, sizes_attr=g.attr(index, "split", None))
        return part
    bounds = [n if n else None for n in list(node.input[1:5])]
    if len(bounds) < 3 or any(b is not None and b not in g.const for b in bounds):
        return None
    part.update(kind="slice", bounds=bounds + [None] * (4 - len(bounds)))
    return part


def match(g: _Graph, q: str, k: str, v: str,
          covered: set[int]) -> tuple[set[int], QkvSource] | None:
    """The head split writing the attention's ``(B, H, S, D)`` ``q``, ``k``
    and ``v`` as parts of one ``Transpose(Reshape(x), (2, 0, 3, 1, 4))``:
    (its nodes, what converts them), or None."""
    if not ENABLED:
        return None
    parts = [_part(g, name) for name in (q, k, v)]
    if None in parts or len({p["source"] for p in parts}) != 1:
        return None
    transpose = g.node(parts[0]["source"], "Transpose")
    if transpose is None or [int(a) for a in g.attr(transpose, "perm", [])] != [2, 0, 3, 1, 4]:
        return None
    reshape = g.node(g.nodes[transpose].input[0], "Reshape")
    if reshape is None or g.nodes[reshape].input[1] not in g.const:
        return None
    nodes = {transpose, reshape}
    for p in parts:
        nodes |= set(p["nodes"])
    if len({n for p in parts for n in p["nodes"][:1]}) != 3:
        return None                        # one node giving two of Q, K and V
    if nodes & covered or not all(g.private(i, covered | nodes) for i in nodes):
        return None
    plan = {"source": g.nodes[reshape].input[0], "parts": parts,
            "target": (g.nodes[reshape].input[1], bool(g.attr(reshape, "allowzero", 0)))}
    return nodes, QkvSource(plan, shapes, operands)


def _ints(values: dict, name: str | None) -> list[int] | None:
    given = values.get(name) if name is not None else None
    if not isinstance(given, Const) or given.array.dtype.kind not in "iu":
        return None
    return [int(n) for n in given.array.reshape(-1)]


def _which(values: dict, part: dict) -> int | None:
    """Which of the 3 parts of axis 0 ``part`` takes, or None when its constants
    take something else."""
    if part["kind"] != "gather" and part["axes_of_squeeze"] is not None \
            and _ints(values, part["axes_of_squeeze"]) not in ([0], [-5]):
        return None
    if part["kind"] == "gather":
        given = values.get(part["index"])
        if not isinstance(given, Const) or given.array.ndim != 0 \
                or given.array.dtype.kind not in "iu":
            return None                    # a 1-element index keeps the axis: not a part
        which = int(given.array) % 3 if -3 <= int(given.array) < 3 else None
        return which
    if part["kind"] == "split":
        sizes = _ints(values, part["sizes"]) if part["sizes"] is not None else \
            ([int(n) for n in part["sizes_attr"]] if part["sizes_attr"] is not None else [1, 1, 1])
        return part["output"] if sizes == [1, 1, 1] else None
    starts, ends, axes, steps = part["bounds"]
    starts, ends = _ints(values, starts), _ints(values, ends)
    axes = [0] if axes is None else _ints(values, axes)
    steps = [1] if steps is None else _ints(values, steps)
    if starts is None or ends is None or axes not in ([0], [-5]) or steps != [1] \
            or len(starts) != 1 or len(ends) != 1:
        return None
    start = starts[0] + 3 if starts[0] < 0 else starts[0]
    end = min(ends[0] + 3 if ends[0] < 0 else ends[0], 3)
    return start if 0 <= start < 3 and end == start + 1 else None


def shapes(values: dict, plan: dict) -> list[tuple[int, ...]] | None:
    """The ``(B, S, H, D)`` shapes of Q, K and V without converting anything
    (checks only), keeping their columns for :func:`operands` in ``plan``."""
    x = values.get(plan["source"])
    target = values.get(plan["target"][0])
    if not _float_tensor(x) or not isinstance(target, Const):
        return None
    split = _reshaped(tuple(x.shape), target.array.reshape(-1), plan["target"][1])
    if split is None or len(split) != 5 or split[2] != 3:
        return None
    which = [_which(values, p) for p in plan["parts"]]
    if None in which or len(set(which)) != 3:
        return None
    b, s, _, h, d = split
    plan["rows"] = (b, s, 3 * h * d)
    plan["views"] = tuple((p * h * d, h, d) for p in which)
    return [(b, s, h, d)] * 3


def operands(cv, values: dict, plan: dict, packed: bool):
    """After :func:`shapes`: ``(x, views)``, the ``(B, S, 3 * H * D)`` operand
    that Q, K and V are views of (``packed``), or the three ``(B, S, H, D)``
    operands sliced out (the attention runs another layout)."""
    x = values[plan["source"]]
    if tuple(x.shape) != plan["rows"]:
        x = cv.op("reshape", x, plan["rows"])
    if packed:
        return x, plan["views"]
    b, s, _ = plan["rows"]
    return [cv.op("reshape", cv.op("slice", x, [0, 0, c], [b, s, h * d]), (b, s, h, d))
            for c, h, d in plan["views"]]
