"""The Q, K and V projections of a fused attention (:mod:`._patterns`) as one
GEMM whose output the attention reads in place.

Two exported shapes of them, each ending in the head split ``Reshape(., (B,
S, H, D))`` that the attention pattern reads in its ``bshd`` layout:

* **three linears** (BERT, ViT, T5): ``MatMul(x, W) [+ bias]`` for each of Q,
  K and V on the same ``x`` with constant 2-D weights of the same K rows.
  The weights are packed at load time into one ``[K x (Nq + Nk + Nv)]``
  weight (the biases into one, zeros for a missing one): one GEMM of ``(B *
  S) x K x (Nq + Nk + Nv)`` instead of three, whose ``(B, S, N)`` result
  the attention reads as strided views (``views=`` of
  ``scaled_dot_product_attention``). At 1 thread, 128 x 768 x 2304 is 3.7 %
  faster than three 128 x 768 x 768 products (6.8 % at 197 rows).
* **one GEMM and a Split** on its last axis (GPT-2's ``Conv1D`` ``c_attn``):
  the Split's parts are read as views of its input, no copies.

And one where Q and K pass a **rotary embedding** before the attention
(Llama, Mistral, Qwen2: :func:`match_rotary`): the three linears' heads
each ``Transpose(0, 2, 1, 3)``-ed, Q's and K's into the embedding, V's
(grouped-query attention: K and V of fewer heads, repeated or not) into the
attention's ``(B, H, S, D)`` operands. The weights are packed into one
GEMM as above; ``rotary_embedding(columns=...)`` reads Q's and K's heads
from its rows in place and ``split_heads`` copies V's out once (the
transpose the export ran anyway): one 128 x 512 x 1024 product for Llama's
512 + 256 + 256 columns.

Each is left to convert as it is (the attention then reads its copies)
when a value on the way is read outside the attention, a weight is no
load-time constant, the inputs differ, or the shapes do not fit (a Reshape
to other than ``(B, S, H, D)``, an embedding's slices or tables other than
the rotation's).
"""

from __future__ import annotations

import numpy as np

from . import _rotary_patterns
from ._attention_convert import _float_tensor, _reshaped
from ._common import Const
from ._pattern_graph import QkvSource, _const_operand, _constant_matmul, _Graph

#: pack the three projections into one GEMM (False: three GEMMs, as exported)
ENABLED = True


def _projection(g: _Graph, name: str) -> tuple[list[int], str, str, str | None] | None:
    """``MatMul(x, W) [+ bias]`` writing ``name`` (``W`` and ``bias`` load-time
    constants): (nodes, x, W, bias or None)."""
    add = g.node(name, "Add")
    bias = None
    if add is not None:
        for product in g.nodes[add].input:
            if product not in g.const and g.node(product, "MatMul") is not None:
                bias = _const_operand(g, add, product)
                name = product
                break
        if bias is None:
            return None
    found = _constant_matmul(g, name)
    if found is None:
        return None
    matmul, x, w = found
    return ([matmul] if add is None else [matmul, add]), x, w, bias


def match(g: _Graph, q: str, k: str, v: str,
          covered: set[int]) -> tuple[set[int], QkvSource] | None:
    """The projections writing the attention's ``q``, ``k``, ``v`` (each a
    ``(B, S, H, D)`` head split): (their nodes, what converts them), or None."""
    if not ENABLED:
        return None
    reshapes = [g.node(name, "Reshape") for name in (q, k, v)]
    if None in reshapes or len(set(reshapes)) != 3:
        return None
    sources = [g.nodes[r].input[0] for r in reshapes]
    targets = [(g.nodes[r].input[1], bool(g.attr(r, "allowzero", 0))) for r in reshapes]
    nodes = set(reshapes)
    split = g.node(sources[0], "Split")
    if split is not None:
        outputs = list(g.nodes[split].output)
        if len(outputs) != 3 or sorted(sources) != sorted(outputs) or \
                any(g.node(s, "Split") != split for s in sources):
            return None
        nodes.add(split)
        node = g.nodes[split]
        plan = {"kind": "split", "source": node.input[0],
                "sizes": node.input[1] if len(node.input) > 1 and node.input[1] else None,
                "sizes_attr": g.attr(split, "split", None), "axis": g.attr(split, "axis", 0),
                "parts": [outputs.index(s) for s in sources]}
    else:
        found = [_projection(g, s) for s in sources]
        if None in found or len({x for _, x, _, _ in found}) != 1:
            return None
        for projection_nodes, _, _, _ in found:
            nodes |= set(projection_nodes)
        plan = {"kind": "linear", "source": found[0][1],
                "weights": [w for _, _, w, _ in found], "biases": [b for _, _, _, b in found]}
    if len(nodes) != (4 if split is not None else 3 + sum(len(f[0]) for f in found)):
        return None                        # a node shared by two of Q, K and V
    if not all(g.private(i, covered | nodes) for i in nodes):
        return None
    plan["targets"] = targets
    return nodes, QkvSource(plan, shapes, operands)


def match_rotary(g: _Graph, q: str, k: str, v: str,
                 covered: set[int]) -> tuple[set[int], QkvSource] | None:
    """The projections writing the attention's ``(B, H, S, D)`` ``q`` and ``k``
    through a rotary embedding of their head split's transpose and ``v`` as
    that transpose alone: (their nodes, what converts them), or None."""
    if not ENABLED:
        return None
    rotaries = [_rotary_patterns.match_at(g, name) for name in (q, k)]
    v_t = g.node(v, "Transpose")
    if None in rotaries or v_t is None or list(g.attr(v_t, "perm", [])) != [0, 2, 1, 3] \
            or any(r.data["layout"] != "bshd" for r in rotaries):
        return None
    reshapes = [g.node(name, "Reshape")
                for name in (rotaries[0].data["x"], rotaries[1].data["x"], g.nodes[v_t].input[0])]
    if None in reshapes or len(set(reshapes)) != 3:
        return None
    found = [_projection(g, g.nodes[r].input[0]) for r in reshapes]
    if None in found or len({x for _, x, _, _ in found}) != 1:
        return None
    nodes = set(reshapes) | {v_t} | rotaries[0].nodes | rotaries[1].nodes
    for projection_nodes, _, _, _ in found:
        nodes |= set(projection_nodes)
    if len(nodes) != 4 + len(rotaries[0].nodes) + len(rotaries[1].nodes) \
            + sum(len(f[0]) for f in found):
        return None                        # a node shared by two of Q, K and V
    if nodes & covered or not all(g.private(i, covered | nodes) for i in nodes):
        return None
    plan = {"kind": "rotary", "source": found[0][1], "weights": [w for _, _, w, _ in found],
            "biases": [b for _, _, _, b in found], "graph": g,
            "rotary": [r.data for r in rotaries],
            "targets": [(g.nodes[r].input[1], bool(g.attr(r, "allowzero", 0)))
                        for r in reshapes]}
    return nodes, QkvSource(plan, shapes, operands)


def _split_sizes(values: dict, plan: dict, width: int) -> list[int] | None:
    sizes = plan["sizes"]
    if sizes is not None:
        given = values.get(sizes)
        if not isinstance(given, Const):
            return None
        sizes = [int(n) for n in given.array.reshape(-1)]
    elif plan["sizes_attr"] is not None:
        sizes = [int(n) for n in plan["sizes_attr"]]
    elif width % 3 == 0:
        sizes = [width // 3] * 3
    return sizes if sizes and len(sizes) == 3 and sum(sizes) == width \
        and min(sizes) > 0 else None


def _head_shape(values: dict, target: tuple[str, bool], shape: tuple[int, ...]):
    """The ``(B, S, H, D)`` the head split's Reshape gives of ``shape`` ``(B,
    S, N)``, or None."""
    given = values.get(target[0])
    if not isinstance(given, Const):
        return None
    out = _reshaped(shape, given.array.reshape(-1), target[1])
    return out if out is not None and len(out) == 4 and out[:2] == shape[:2] else None


def shapes(values: dict, plan: dict) -> list[tuple[int, ...]] | None:
    """The ``(B, S, H, D)`` shapes of Q, K and V without converting anything
    (checks only), keeping the packing for :func:`operands` in ``plan``."""
    x = values.get(plan["source"])
    if not _float_tensor(x) or len(x.shape) != 3:
        return None
    if plan["kind"] == "split":
        if int(plan["axis"]) % 3 != 2:
            return None
        sizes = _split_sizes(values, plan, x.shape[2])
        if sizes is None:
            return None
        starts = [sum(sizes[:i]) for i in range(3)]
        columns = [(starts[p], sizes[p]) for p in plan["parts"]]
    else:
        weights = [values.get(w) for w in plan["weights"]]
        if not all(isinstance(w, Const) and w.array.ndim == 2 and w.array.dtype.kind == "f"
                   and w.array.shape[0] == x.shape[2] for w in weights):
            return None
        widths = [w.array.shape[1] for w in weights]
        for name, n in zip(plan["biases"], widths):
            b = None if name is None else values.get(name)
            if name is not None and not (
                    isinstance(b, Const) and b.array.dtype.kind == "f" and b.array.size == n
                    and b.array.ndim <= 3 and all(s == 1 for s in b.array.shape[:-1])):
                return None
        columns = [(sum(widths[:i]), widths[i]) for i in range(3)]
    heads = []
    for (start, width), target in zip(columns, plan["targets"]):
        shape = _head_shape(values, target, x.shape[:2] + (width,))
        if shape is None:
            return None
        heads.append(shape)
    plan["views"] = tuple((start, h[2], h[3]) for (start, _), h in zip(columns, heads))
    if plan["kind"] != "rotary":
        return heads
    # Q and K through their embeddings, V transposed: (B, H, S, D) as the attention reads them
    found = [_rotary_patterns.tables(values, plan["graph"], r, h)
             for r, h in zip(plan["rotary"], heads)]
    if None in found:
        return None
    plan["tables"] = found
    return [(b, h, s, d) for b, s, h, d in heads]


def operands(cv, values: dict, plan: dict, packed: bool):
    """After :func:`shapes`: ``(P, views)``, the ``(B, S, N)`` operand Q, K
    and V are views of (``packed``), or the three ``(B, S, H, D)`` operands
    computed apart (the attention runs another layout or groups of heads)."""
    x = values[plan["source"]]
    b, s, width = x.shape
    if plan["kind"] == "split":
        if packed:
            return x, plan["views"]
        return [cv.op("reshape", cv.op("slice", x, [0, 0, c], [b, s, h * d]), (b, s, h, d))
                for c, h, d in plan["views"]]
    weights = [values[w].array.astype(np.float32, copy=False) for w in plan["weights"]]
    biases = [None if name is None else
              values[name].array.reshape(-1).astype(np.float32, copy=False)
              for name in plan["biases"]]
    flat = cv.op("reshape", x, (b * s, width))
    if plan["kind"] == "rotary":
        packed = True                      # Q, K and V always come out of the one product
    if not packed:
        out = []
        for w, bias, (_, h, d) in zip(weights, biases, plan["views"]):
            y = cv.op("matmul", flat, cv.float_operand(Const(w)))
            if bias is not None:
                y = cv.op("add", y, cv.float_operand(Const(bias)))
            out.append(cv.op("reshape", y, (b, s, h, d)))
        return out
    # one weight of the three side by side: one GEMM, its epilogue adds the one bias
    weight = np.ascontiguousarray(np.concatenate(weights, axis=1))
    y = cv.op("matmul", flat, cv.float_operand(Const(weight)))
    if any(bias is not None for bias in biases):
        bias = np.concatenate([np.zeros(w.shape[1], np.float32) if bias is None else bias
                               for w, bias in zip(weights, biases)])
        y = cv.op("add", y, cv.float_operand(Const(bias)))
    y = cv.op("reshape", y, (b, s, weight.shape[1]))
    if plan["kind"] != "rotary":
        return y, plan["views"]
    # the embeddings read Q's and K's heads in the product's rows; V's heads copied out once
    out = [cv.op("rotary_embedding", y, *(cv.float_operand(t) if isinstance(t, Const) else t
                                           for t in tables), layout="bshd", columns=(c, h))
           for (c, h, _), tables in zip(plan["views"], plan["tables"])]
    c, h, d = plan["views"][2]
    return out + [cv.op("split_heads", y, h, d, c)]

