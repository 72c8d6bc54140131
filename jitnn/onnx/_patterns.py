"""Transformer patterns in exported ONNX graphs, converted as fused jitnn ops.

``torch.onnx.export`` (opset 17, TorchScript) writes a transformer's pieces
as chains of small ops; jitnn has one op, or one fused launch, for each:

* **attention**: ``MatMul(Q, Kᵀ)``, ``Mul``/``Div`` by constant scales (on
  the scores, or on Q and Kᵀ as the exporter writes SDPA), an ``Add`` and/or
  a ``Where`` mask, ``Softmax(-1)``, the exporter's guard ``Where(IsNaN(p), 0,
  p)``, ``MatMul(., V)``: one ``scaled_dot_product_attention``, with
  ``layout="bshd"`` (the transposes skipped) when Q, K, V come from
  ``Transpose(0, 2, 1, 3)`` (Kᵀ: ``(0, 2, 3, 1)``) of ``(B, S, H, D)`` tensors
  and the result goes into ``Transpose(0, 2, 1, 3)``. A constant top-left
  causal mask (0 and <= -1e9 or -inf, or a bool ``Where`` condition) is
  ``is_causal``. The guard becomes the op's ``nan_to_zero`` (NaN outputs stored as 0), left out
  when no mask can make a row all -inf (no mask, causal, a finite fill: then
  only NaN or inf in Q or K give NaN rows, which the guarded model zeroes).
  Grouped-query attention (Llama: K and V of fewer heads, each repeated for
  its group of query heads by ``Unsqueeze(2)`` (or a ``Reshape``), ``Expand``,
  ``Reshape``) runs on the un-repeated K and V (``groups``: query head h
  reads key-value head h // G; the masks and ``is_causal`` as they are); so
  does multi-query attention (Falcon: one K and V head that the MatMuls
  broadcast). A ``(B, H, S, D)`` attention (Llama's, after the rotary
  embeddings) whose result goes into the head-merge ``Transpose(0, 2, 1,
  3)`` writes that ``(B, S, H, D)`` layout itself (``out_layout``): no
  transpose runs, and the output projection reads the buffer in place. Two
  ``Add`` masks (a relative position bias and the padding mask) add up into
  one. A constant mask added to a ``Reshape`` view of the
  scores that a second ``Reshape`` undoes (Swin's shifted windows: ``(images,
  windows, H, N, N)`` + a per-window mask) is that mask on the scores.
* **GELU**: ``Div(x, √2)`` or ``Mul(x, 1/√2)``, ``Erf``, ``Add 1``, and the
  ``Mul`` by ``x`` and by 0.5 in any order: ``gelu(x)``. The tanh
  approximation (GPT-2's ``gelu_new``, BLOOM's): ``Tanh`` of ``√(2/π) (x +
  0.044715 x³)`` written with any ``Mul``, ``Add`` and ``Pow`` nodes, ``Add 1``
  and the same ``Mul``s: ``gelu(x, approximate="tanh")``.
* **linear**: ``MatMul(x, W)`` (constant 2-D ``W``), ``Add`` of a constant
  bias on the last axis, an optional activation (Relu, Sigmoid, Tanh,
  HardSwish, LeakyRelu, Gelu or a GELU pattern) run on the 2-D ``(rows,
  K)`` view of ``x``, so that the GEMM's epilogue takes the bias and the
  activation (a 3-D ``x`` takes the batched product, which fuses neither);
  the tanh GELU runs as its own pass after it (see ``GELU_IN_EPILOGUE``).
  Without a bias, a ``MatMul`` of 3-D (or higher) ``x`` by a constant 2-D
  ``W`` (Llama's projections) is the 2-D product and a reshape back too, so
  that the epilogue takes the residual add after it.
* **layer normalization** of older exports and **RMS normalization**
  (Llama's RMSNorm): ``layer_normalization``, ``rms_normalization``; their
  matchers are in :mod:`._norm_patterns`.
* **rotary position embedding** (Llama's ``x * cos + rotate_half(x) * sin``:
  ``Slice``, ``Neg``, ``Concat``, ``Mul``, ``Mul``, ``Add``):
  ``rotary_embedding``; its matcher is in :mod:`._rotary_patterns`.
* **gated MLP** (Llama's ``silu(gate_proj(x)) * up_proj(x)``): one GEMM on
  the two weights side by side and ``swiglu``; matched in
  :mod:`._gated_mlp`, before the MatMuls become linears.
* **convs on token tensors** (PVT-v2, SegFormer): ``Transpose(0, 2, 1)``,
  ``Reshape(N, C, H, W)``, ``Conv``, ``Reshape(N, C', L')``, ``Transpose(0,
  2, 1)``: one ``conv2d`` with ``input_layout="nhwc"`` on the tokens; matched
  in :mod:`._token_convs`.
* **re-parameterizable branches** (RepVGG, MobileOne, FastViT): a tree of
  ``Add`` over convs of one input, its batch normalization, itself and
  constants: one ``conv2d`` of the summed filters; matched in :mod:`._reparam`.
* **a linear layer's batch normalization** (LeViT's ``Linear`` + ``BatchNorm1d``:
  ``MatMul``, ``Flatten``, ``BatchNormalization``, ``Reshape``): one linear
  of the scaled weights; matched in :mod:`._linear_norm`.

:func:`walk` drives the frontend's node loop: it matches the patterns on the
graph's structure (op types, attributes, which values are known at load
time, who reads what), then yields the nodes to convert one by one, holding
back those a pattern covers; at a pattern's last node it converts the
pattern from the converted values, checking the constants (scales, mask
fills, GELU's constants, epsilon...). When a check fails the held-back nodes
are yielded after all and convert as they are. A pattern matches only where
none of its intermediate values is a graph output or read outside it (but
by ``Shape``: that gets a placeholder of the value's shape). ``ENABLED =
False`` turns every fusion off.
"""

from __future__ import annotations

import math
from collections import ChainMap
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np

from ..graph import Operand
from . import (_channels_last, _gated_mlp, _group_norm, _linear_norm, _packed_heads,
               _qkv_patterns, _reparam, _token_convs)
from ._attention_convert import _attention, _float_tensor, _reshaped, _scalar
from ._common import Const, UnsupportedError
from ._norm_patterns import _match_layer_norm, _match_rms_norm
from ._pattern_graph import _ELEMENTWISE, _UNARY, Pattern, _const_operand, _Graph, _other
from ._rotary_patterns import _match_rotary

#: ONNX activations the linear pattern takes into the GEMM's epilogue
_ACTIVATIONS = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh",
                "HardSwish": "hard_swish", "LeakyRelu": "leaky_relu", "Gelu": "gelu"}

#: convert the patterns (False: every node converts on its own)
ENABLED = True

#: GELU after a linear layer (input of rank >= 3) in the GEMM's epilogue, one launch; else its
#: own pass after the reshape back (on 2-D data the scheduler takes it in anyway). The
#: epilogue runs the element-wise pass's gelu (kernels/vmath.py, the same bits), on each
#: tile's rows: with libm's scalar ``erf`` (before) 512 x 768 x 3072 with the bias, 1 thread,
#: took 47 ms fused, against the GEMM's 26 and the pass's 2; now fused is faster than the
#: GEMM and the pass alone, but in Swin-T the pass still won (in one process, 11 rounds:
#: sums of per-step minima 132.0 ms with the pass, 135.0 fused). Since the epilogue runs
#: gelu in place over each stored tile (kernels/matmul/tiles.py), the fused GELU costs about
#: half the pass: zoo models, 1 thread, JITNN_TUNE=0, pass vs epilogue prepared side by
#: side and alternated in one process, 9 rounds, best of 3 process CPU time: BERT-base
#: 246.6 -> 239.3 ms (median ratio 0.982), ViT-B/16 369.7 -> 367.1 (0.993), Swin-T 123.7 ->
#: 119.4 (0.946), the same output bits. The tanh form stays a pass.
GELU_IN_EPILOGUE = True

# --- matching ------------------------------------------------------------------

def _scales(g: _Graph, name: str) -> tuple[str, list[tuple[int, str, bool]]]:
    """Walk up from ``name`` through ``Mul``/``Div`` by constants, each read
    only by the next: (the value above them, [(node, constant, divides)])."""
    found = []
    while True:
        index = g.node(name, "Mul", "Div")
        if index is None or len(g.users(name)) != 1 or name in g.outputs:
            return name, found
        node = g.nodes[index]
        if node.op_type == "Div":
            if node.input[1] not in g.const or node.input[0] in g.const:
                return name, found
            found.append((index, node.input[1], True))
            name = node.input[0]
        else:
            a, b = node.input
            if (a in g.const) == (b in g.const):
                return name, found
            const, name = (a, b) if a in g.const else (b, a)
            found.append((index, const, False))


def _transpose(g: _Graph, name: str, *perms: list[int]):
    """The Transpose writing ``name`` if its perm is one of ``perms``."""
    index = g.node(name, "Transpose")
    if index is not None and list(g.attr(index, "perm", [])) in [list(p) for p in perms]:
        return index
    return None


def _score_chain(g: _Graph, name: str, depth: int = 0):
    """Walk up from the softmax input through the masks and scales to the
    ``MatMul(Q, Kᵀ)``: ([(kind, node, operands)] from the matmul down, matmul
    index), or None. Each value on the way is read by the next node only."""
    if depth > 6 or name in g.outputs or len(g.users(name)) != 1:
        return None
    index = g.node(name, "MatMul", "Mul", "Div", "Add", "Where", "Reshape")
    if index is None:
        return None
    node = g.nodes[index]
    op = node.op_type
    if op == "MatMul":
        return [], index
    candidates = []
    if op == "Reshape" and node.input[1] in g.const:
        # Swin's shifted windows: scores viewed as (B, windows, H, N, N) for the
        # per-window mask, then back (checked where the masks convert)
        candidates.append((node.input[0], ("reshape", index,
                                           (node.input[1], bool(g.attr(index, "allowzero", 0))))))
    if op in ("Mul", "Div"):
        if node.input[1] in g.const and node.input[0] not in g.const:
            candidates.append((node.input[0], ("scale", index, (node.input[1], op == "Div"))))
        elif op == "Mul" and node.input[0] in g.const and node.input[1] not in g.const:
            candidates.append((node.input[1], ("scale", index, (node.input[0], False))))
    elif op == "Add":
        a, b = node.input
        for chain, mask in ((a, b), (b, a)):
            if chain not in g.const:
                candidates.append((chain, ("add", index, (mask,))))
    elif op == "Where" and len(node.input) == 3:
        cond, a, b = node.input
        if b in g.const and a not in g.const:
            candidates.append((a, ("where", index, (cond, b, True))))
        elif a in g.const and b not in g.const:
            candidates.append((b, ("where", index, (cond, a, False))))
    for above, step in candidates:
        found = _score_chain(g, above, depth + 1)
        if found is not None:
            steps, matmul = found
            return steps + [step], matmul
    return None


def _match_attention(g: _Graph, softmax: int) -> Pattern | None:
    sm = g.nodes[softmax]
    covered = {softmax}
    probs = sm.output[0]
    guard = None
    readers = g.users(probs)
    if len(readers) == 2 and probs not in g.outputs:
        # the exporter's guard for rows whose every score is -inf: Where(IsNaN(p), 0, p)
        isnan = next((r for r in readers if g.nodes[r].op_type == "IsNaN"), None)
        where = next((r for r in readers if g.nodes[r].op_type == "Where"), None)
        if isnan is None or where is None or isnan in g.taken or where in g.taken:
            return None
        w = g.nodes[where]
        if list(w.input) != [g.nodes[isnan].output[0], w.input[1], probs] \
                or w.input[1] not in g.const or g.users(g.nodes[isnan].output[0]) != [where]:
            return None
        guard, probs = w.input[1], w.output[0]
        covered |= {isnan, where}
    second = g.only_reader(probs, "MatMul")
    if second is None or g.nodes[second].input[0] != probs or g.nodes[second].input[1] == probs:
        return None
    covered.add(second)
    found = _score_chain(g, sm.input[0])
    if found is None:
        return None
    steps, first = found
    kinds = [s[0] for s in steps]
    # scales next to the product, then at most two Add masks (they add up) and one Where
    masks = [k for k in kinds if k != "scale"]
    if kinds != sorted(kinds, key=lambda k: k != "scale") or masks.count("add") > 2 \
            or masks.count("where") > 1 or masks.count("reshape") not in (0, 2) \
            or first in g.taken:
        return None
    covered |= {first} | {s[1] for s in steps}
    scales = [(s[2][0], s[2][1]) for s in steps if s[0] == "scale"]

    # Q: scales, then the head-split transpose (and scales before it)
    q_top, q_scales = _scales(g, g.nodes[first].input[0])
    q_t = _transpose(g, q_top, [0, 2, 1, 3])
    q_src, q_before = (g.nodes[q_t].input[0], []) if q_t is not None else (q_top, [])
    if q_t is not None and g.private(q_t, covered | {n for n, _, _ in q_scales}):
        q_src, q_before = _scales(g, q_src)
    # Kᵀ: scales, then (0, 2, 3, 1) of (B, S, H, D), or (0, 1, 3, 2) of (B, H, S, D)
    # (or the dynamo exporter's form of it, a 3-D swap between two Reshapes)
    k_top, k_scales = _scales(g, g.nodes[first].input[1])
    k_nodes, k_bshd, k_bhsd, k_view = [], None, None, None
    t = _transpose(g, k_top, [0, 2, 3, 1])
    if t is not None:
        k_nodes, k_bshd = [t], g.nodes[t].input[0]
    else:
        t = _transpose(g, k_top, [0, 1, 3, 2], [0, 2, 1])
        k_chain = None if t is None else [t]
        if t is None and (k_view := _swap_view(g, k_top)) is not None:
            k_chain = k_view["nodes"]
        if k_chain is not None:
            k_nodes, k_bhsd = list(k_chain), g.nodes[k_chain[-1]].input[0]
            inner = _transpose(g, k_bhsd, [0, 2, 1, 3])
            if inner is not None and g.users(k_bhsd) == [k_chain[-1]] \
                    and k_bhsd not in g.outputs:
                k_nodes.append(inner)
                k_bshd = g.nodes[inner].input[0]
    v_name = g.nodes[second].input[1]
    v_t = _transpose(g, v_name, [0, 2, 1, 3])
    # the result, through Reshapes to its own shape (the exporter's SDPA writes one)
    # into the head-merge Transpose(0, 2, 1, 3)
    out, out_reshapes = g.nodes[second].output[0], []
    while (r := g.only_reader(out, "Reshape")) is not None and g.nodes[r].input[0] == out \
            and g.nodes[r].input[1] in g.const and len(out_reshapes) < 2:
        out_reshapes.append(r)
        out = g.nodes[r].output[0]
    out_t = g.only_reader(out, "Transpose")
    if out_t is not None and list(g.attr(out_t, "perm", [])) != [0, 2, 1, 3]:
        out_t = None
    scales += [(c, d) for _, c, d in q_scales + k_scales]
    covered |= {n for n, _, _ in q_scales + k_scales}
    # Q, K and V as parts of one packed head split (timm's ViT, Swin): read in place, bshd
    heads = _packed_heads.match(g, q_top, k_bhsd, v_name, covered | set(k_nodes) | {out_t} | set(
        out_reshapes)) if q_t is None and v_t is None and len(k_nodes) == 1 and \
        k_bhsd is not None and out_t is not None else None
    bshd = heads is not None or \
        q_t is not None and k_bshd is not None and v_t is not None and out_t is not None
    if heads is not None:
        covered |= {out_t} | set(out_reshapes) | set(k_nodes) | heads[0]
        q, k, v, k_mode = None, None, None, "bshd"
    elif bshd:
        covered |= {out_t} | {n for n, _, _ in q_before} | set(out_reshapes)
        scales += [(c, d) for _, c, d in q_before]
        for index in [q_t, v_t] + k_nodes:
            # a transpose read elsewhere too still converts; attention reads its input
            if g.private(index, covered):
                covered.add(index)
        q, k, v, k_mode = q_src, k_bshd, g.nodes[v_t].input[0], "bshd"
    else:
        chain = k_nodes[:3 if k_view is not None else 1]
        if k_bhsd is not None and all(g.private(i, covered | set(chain)) for i in chain):
            covered |= set(chain)
            k, k_mode = k_bhsd, "bhsd"
        else:
            k, k_mode, k_view = k_top, "kt", None    # Kᵀ read as computed
        q, v = q_top, v_name
    # grouped-query attention: K and V of fewer heads, each repeated for a group of Q's
    repeats = None
    if k_mode == "bhsd":
        k_repeat, v_repeat = _repeat_kv(g, k), _repeat_kv(g, v)
        if k_repeat is not None and v_repeat is not None:
            nodes = set(k_repeat[1]) | set(v_repeat[1])
            if all(g.private(i, covered | nodes) for i in nodes):
                covered |= nodes
                repeats = [_repeat_plan(g, k_repeat), _repeat_plan(g, v_repeat)]
                k, v = k_repeat[0], v_repeat[0]
    # a (B, H, S, D) attention whose result goes into the head-merge transpose
    # (Llama's, after rotary embeddings): the attention writes the transposed
    # layout, and the output projection reads its buffer as it is
    out_bshd = not bshd and out_t is not None
    if out_bshd:
        covered |= {out_t} | set(out_reshapes)
    anchor = out_t if bshd or out_bshd else second
    # Q, K and V from one input's three projections (BERT, ViT) or one's Split (GPT-2)
    qkv = heads if heads is not None else \
        _qkv_patterns.match(g, q, k, v, covered) if bshd and repeats is None else None
    if qkv is None and not bshd and k_mode == "bhsd":
        # Q and K through rotary embeddings (Llama): the projections as one GEMM all the same
        qkv = _qkv_patterns.match_rotary(g, q, k, v, covered)
    if qkv is not None:
        covered |= qkv[0]
    for index in covered - {anchor}:
        if not g.private(index, covered):
            return None
    plan = {"q": q, "k": k, "v": v, "k_mode": k_mode, "bshd": bshd, "scales": scales,
            "reshapes": [(g.nodes[r].input[1], bool(g.attr(r, "allowzero", 0)))
                         for r in out_reshapes] if bshd or out_bshd else [],
            "out_bshd": out_bshd,
            "steps": steps, "guard": guard, "axis": g.attr(softmax, "axis", None),
            "finite": _finite_masks(g, steps), "repeats": repeats,
            "qkv": None if qkv is None else qkv[1]}
    if k_view is None:
        return Pattern("attention", covered, anchor,
                       lambda cv, values: _attention(cv, values, plan))
    k_view["bhsd"] = k_bhsd
    # the shape of the (B, H, S, D) K that the views are checked against, given
    # to the values like a Shape reader's when its writer is held back
    return Pattern("attention", covered, anchor,
                   lambda cv, values: _swapped_k_attention(cv, values, plan, k_view),
                   {"shaped": {g.writer.get(k_bhsd)}})


def _swap_view(g: _Graph, name: str) -> dict | None:
    """``Reshape(Transpose(Reshape(x, t1), (0, 2, 1)), t2)`` writing ``name``
    (torch.export's Kᵀ: ``(B, H, S, D)`` viewed as ``(B·H, S, D)``, its last
    two axes swapped, viewed as ``(B, H, D, S)``), the targets load-time
    constants whose values :func:`_swap_view_fits` checks: ``{"nodes": [outer
    Reshape, Transpose, inner Reshape], "targets": [(t1, allowzero), (t2,
    allowzero)]}``, or None."""
    outer = g.node(name, "Reshape")
    if outer is None or g.nodes[outer].input[1] not in g.const:
        return None
    t = _transpose(g, g.nodes[outer].input[0], [0, 2, 1])
    if t is None or g.users(g.nodes[t].input[0]) != [t]:
        return None
    inner = g.node(g.nodes[t].input[0], "Reshape")
    if inner is None or g.nodes[inner].input[1] not in g.const \
            or g.users(g.nodes[t].output[0]) != [outer]:
        return None
    return {"nodes": [outer, t, inner],
            "targets": [(g.nodes[r].input[1], bool(g.attr(r, "allowzero", 0)))
                        for r in (inner, outer)]}


def _swap_view_fits(values: dict, view: dict) -> tuple[int, int, int, int] | None:
    """The ``(B, H, S, D)`` shape of K when the Reshapes of a :func:`_swap_view`
    make the swap of the last two axes of the tensor they view, else None. That
    tensor is K itself, or (``nn.MultiheadAttention``'s heads, split as ``(B·H,
    S, D)``) a 3-D ``(B·H, S, D)`` whose outer view gives B and H; its shape from
    the converted values (the value itself, or the shape :func:`walk` gave it
    when its writer is held back)."""
    x = values.get(view["bhsd"])
    targets = [values.get(t) for t, _ in view["targets"]]
    if x is None or not all(isinstance(t, Const) for t in targets):
        return None
    shape = tuple(x.shape)
    if len(shape) not in (3, 4):
        return None
    s, d = shape[-2:]
    n = math.prod(shape[:-2])
    (_, first), (_, second) = view["targets"]
    kt = _reshaped((n, d, s), targets[1].array.reshape(-1), second)
    if _reshaped(shape, targets[0].array.reshape(-1), first) != (n, s, d) or kt is None \
            or len(kt) != 4 or kt[2:] != (d, s) or len(shape) == 4 and kt[:2] != shape[:2]:
        return None
    return kt[0], kt[1], s, d


def _swapped_k_attention(cv, values, plan: dict, view: dict) -> Operand | None:
    """The attention of a Kᵀ written as a :func:`_swap_view`: K read as the
    ``(B, H, S, D)`` tensor, a free view of the 3-D ``(B·H, S, D)`` one when
    the heads were split so; None when the views do not fit."""
    k_shape = _swap_view_fits(values, view)
    if k_shape is None:
        return None
    k = values[view["bhsd"]]
    if len(k.shape) == 3:
        # (given by value only: a held-back writer's K has no operand to view yet)
        if plan["qkv"] is not None or plan["repeats"] is not None or not _float_tensor(k):
            return None
        values = ChainMap({view["bhsd"]: cv.op("reshape", k, k_shape)}, values)
    return _attention(cv, values, plan)


def _repeat_kv(g: _Graph, name: str) -> tuple[str, list[int]] | None:
    """transformers' ``repeat_kv`` as exported: ``Reshape(Expand(Unsqueeze(kv,
    2)))`` (or a Reshape for the Unsqueeze) writing ``name``: (kv, the three
    nodes), each value read by the next only; its shapes are checked when the
    pattern converts (:func:`_repeat_groups`)."""
    reshape = g.node(name, "Reshape")
    expanded = None if reshape is None else g.nodes[reshape].input[0]
    expand = None if expanded is None else g.node(expanded, "Expand")
    if expand is None or g.users(expanded) != [reshape] or expanded in g.outputs:
        return None
    inserted = g.nodes[expand].input[0]
    unsqueeze = g.node(inserted, "Unsqueeze", "Reshape")
    if unsqueeze is None or g.users(inserted) != [expand] or inserted in g.outputs:
        return None
    return g.nodes[unsqueeze].input[0], [unsqueeze, expand, reshape]


def _repeat_plan(g: _Graph, repeat: tuple[str, list[int]]) -> dict:
    """What :func:`_repeat_groups` needs of a matched repeat: its nodes' constant inputs."""
    first, expand, reshape = repeat[1]
    node = g.nodes[first]
    return {"first": node.op_type, "first_input": node.input[1] if len(node.input) > 1 else None,
            "axes": g.attr(first, "axes", None),
            "allowzero": (bool(g.attr(first, "allowzero", 0)),
                          bool(g.attr(reshape, "allowzero", 0))),
            "shape": g.nodes[expand].input[1], "target": g.nodes[reshape].input[1]}


def _finite_masks(g: _Graph, steps) -> dict[str, tuple[str, str]]:
    """The run-time Add masks written as ``Where(cond, a, b)`` of two
    constants (BERT's, GPT-2's and Llama's exports): {mask: (a, b)}. When
    both are finite no row of the scores is all -inf (see _mask_operands)."""
    found = {}
    for kind, _, operands in steps:
        where = g.node(operands[0], "Where") if kind == "add" else None
        if where is not None and all(n in g.const for n in g.nodes[where].input[1:]):
            found[operands[0]] = tuple(g.nodes[where].input[1:])
    return found


def _split_const(g: _Graph, index: int) -> tuple[str, str] | None:
    """(the constant, the other input) of two-input node ``index`` when exactly one
    of its inputs is a load-time constant."""
    a, b = g.nodes[index].input
    if (a in g.const) == (b in g.const):
        return None
    return (a, b) if a in g.const else (b, a)


def _gelu_tail(g: _Graph, one_plus: str, x: str, covered: set[int]) -> tuple[int, str] | None:
    """After ``1 + erf(..)`` or ``1 + tanh(..)`` (the value ``one_plus``): the
    ``Mul`` by ``x`` and by 0.5, in any order. Returns (the last node, the 0.5
    constant) and adds the nodes to ``covered``, or None."""
    first = g.only_reader(one_plus, "Mul")
    if first is None:
        return None
    partner = _other(g, first, one_plus)
    covered.add(first)
    if partner == x:                                   # x * (1 + f) * 0.5
        last = g.only_reader(g.nodes[first].output[0], "Mul")
        half = None if last is None else _const_operand(g, last, g.nodes[first].output[0])
    elif partner in g.const:                           # (1 + f) * 0.5 * x
        half = partner
        last = g.only_reader(g.nodes[first].output[0], "Mul")
        if last is None or _other(g, last, g.nodes[first].output[0]) != x:
            return None
    else:                                              # (x * 0.5) * (1 + f)
        last, h = first, g.node(partner, "Mul")
        half = None if h is None else _const_operand(g, h, x)
        if half is None or g.users(partner) != [first] or partner in g.outputs:
            return None
        covered.add(h)
    if last is None or half is None:
        return None
    covered.add(last)
    return last, half


def _match_gelu(g: _Graph, erf: int) -> Pattern | None:
    """``0.5 * x * (1 + erf(x / √2))`` in the orders exporters write it."""
    e = g.nodes[erf]
    div = g.node(e.input[0], "Div", "Mul")
    if div is None:
        return None
    d = g.nodes[div]
    if d.op_type == "Div":
        x, c = d.input
        if c not in g.const or x in g.const:
            return None
    else:
        split = _split_const(g, div)
        if split is None:
            return None
        c, x = split
    consts = [(c, math.sqrt(2.0) if d.op_type == "Div" else math.sqrt(0.5))]
    add = g.only_reader(e.output[0], "Add")
    if add is None or _const_operand(g, add, e.output[0]) is None:
        return None
    consts.append((_const_operand(g, add, e.output[0]), 1.0))
    covered = {div, erf, add}
    tail = _gelu_tail(g, g.nodes[add].output[0], x, covered)
    if tail is None:
        return None
    last, half = tail
    consts.append((half, 0.5))
    if any(not g.private(i, covered) for i in covered - {last}):
        return None
    return Pattern("gelu", covered, last,
                   lambda cv, values: _gelu(cv, values, x, consts, "none"),
                   {"x": x, "consts": consts, "approximate": "none"})


#: a term of a polynomial in x: c * x ** (n + e1 + e2 ...), with c the product of the
#: named constants and e1, e2 ... the named exponents of Pow(x, e) (their values known when
#: the pattern converts)
_Term = tuple[int, tuple[str, ...], tuple[str, ...]]


def _variable(g: _Graph, name: str, depth: int = 0) -> str | None:
    """The run-time value an expression of ``Mul``, ``Add`` and ``Pow`` nodes
    (each read once) starts from: the first value down its operands that is
    read more than once or written by another op."""
    index = g.node(name, "Mul", "Add", "Pow")
    if depth > 8 or index is None or len(g.users(name)) != 1 or name in g.outputs:
        return name
    above = next((n for n in g.nodes[index].input if n not in g.const), None)
    return None if above is None else _variable(g, above, depth + 1)


def _polynomial(g: _Graph, name: str, x: str, nodes: set[int],
                depth: int = 0) -> list[_Term] | None:
    """``name`` as a sum of terms in ``x`` (see ``_Term``) when it is computed
    from ``x`` and constants by ``Mul``, ``Add`` and ``Pow(x, constant)``
    nodes, each value read once (the nodes go into ``nodes``); else None."""
    if name == x:
        return [(1, (), ())]
    if name in g.const:
        return [(0, (), (name,))]
    index = g.node(name, "Mul", "Add", "Pow")
    if depth > 6 or index is None or len(g.users(name)) != 1 or name in g.outputs:
        return None
    node = g.nodes[index]
    if len(node.input) != 2:
        return None
    nodes.add(index)
    if node.op_type == "Pow":
        base, exponent = node.input
        return [(0, (exponent,), ())] if base == x and exponent in g.const else None
    parts = [_polynomial(g, n, x, nodes, depth + 1) for n in node.input]
    if None in parts:
        return None
    a, b = parts
    if node.op_type == "Add":
        return a + b
    terms = [(n1 + n2, e1 + e2, c1 + c2) for n1, e1, c1 in a for n2, e2, c2 in b]
    return terms if len(terms) <= 6 else None


def _match_gelu_tanh(g: _Graph, tanh: int) -> Pattern | None:
    """``0.5 * x * (1 + tanh(√(2/π) * (x + 0.044715 * x³)))`` in the forms
    exporters write: PyTorch's ``gelu(approximate="tanh")`` and GPT-2's
    ``gelu_new`` (``Pow(x, 3)``), ``x * x * x``, BLOOM's ``√(2/π) * x * (1 +
    0.044715 * x * x)``, the products and sums in any order: the argument of
    ``Tanh`` is any polynomial of ``Mul``, ``Add`` and ``Pow`` nodes in ``x``
    whose coefficients, known when the pattern converts, are these."""
    argument = g.nodes[tanh].input[0]
    x = _variable(g, argument)
    nodes: set[int] = set()
    terms = None if x is None or x == argument else _polynomial(g, argument, x, nodes)
    if terms is None:
        return None
    one = g.only_reader(g.nodes[tanh].output[0], "Add")
    if one is None or _const_operand(g, one, g.nodes[tanh].output[0]) is None:
        return None
    covered = nodes | {tanh, one}
    tail = _gelu_tail(g, g.nodes[one].output[0], x, covered)
    if tail is None:
        return None
    last, half = tail
    consts = [(_const_operand(g, one, g.nodes[tanh].output[0]), 1.0), (half, 0.5)]
    if any(not g.private(i, covered) for i in covered - {last}):
        return None
    return Pattern("gelu", covered, last,
                   lambda cv, values: _gelu(cv, values, x, consts, "tanh", terms),
                   {"x": x, "consts": consts, "approximate": "tanh", "terms": terms})


def _match_linear(g: _Graph, matmul: int, gelus: dict[str, Pattern]) -> Pattern | None:
    x, w = g.nodes[matmul].input
    if w not in g.const or x in g.const:
        return None
    product = g.nodes[matmul].output[0]
    add = g.only_reader(product, "Add")
    bias = None if add is None else _const_operand(g, add, product)
    if bias is None:
        # no bias: a 3-D (or higher) x still runs as the 2-D product of its rows and a
        # reshape back, whose residual add the GEMM's epilogue takes (Llama's, Mistral's
        # bias-free projections); a 2-D x converts as it is (the same op)
        plan = {"x": x, "w": w, "bias": None, "activation": None, "gelu": None,
                "approximate": "none"}
        return Pattern("linear", {matmul}, matmul, lambda cv, values: _linear(cv, values, plan))
    covered, last, activation, gelu = {matmul, add}, add, None, None
    approximate = "none"
    out = g.nodes[add].output[0]
    act = g.only_reader(out, *_ACTIVATIONS)
    if act is not None:
        covered.add(act)
        last, activation = act, _ACTIVATIONS[g.nodes[act].op_type]
        if activation == "gelu":
            approximate = g.attr(act, "approximate", "none")
            approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
            if approximate not in ("none", "tanh"):
                return None
        if activation == "leaky_relu":
            activation = ("leaky_relu", float(g.attr(act, "alpha", 0.01)))
    elif out in gelus and out not in g.outputs \
            and set(g.readers.get(out, ())) <= gelus[out].nodes:
        gelu = gelus[out]
        covered |= gelu.nodes
        last, activation, approximate = gelu.anchor, "gelu", gelu.data["approximate"]
    plan = {"x": x, "w": w, "bias": bias, "activation": activation, "gelu": gelu,
            "approximate": approximate}
    return Pattern("linear", covered, last, lambda cv, values: _linear(cv, values, plan))


def match(graph, order: list[int], values: dict) -> list[Pattern]:
    """The patterns of ``graph`` (nodes in ``order``; ``values``: the values
    known before the first node, Consts and graph inputs), none overlapping."""
    g = _Graph(graph, order, values)
    found: list[Pattern] = []

    def take(pattern: Pattern | None) -> Pattern | None:
        if pattern is not None and not pattern.nodes & g.taken:
            g.taken |= pattern.nodes
            pattern.shaped = {i for i in pattern.nodes - {pattern.anchor}
                              if g.shape_readers(i, pattern.nodes)} | \
                (pattern.data.get("shaped", set()) & pattern.nodes - {pattern.anchor})
            found.append(pattern)
            return pattern
        return None
    by_type: dict[str, list[int]] = {}
    for index in order:
        by_type.setdefault(graph.node[index].op_type, []).append(index)
    for index in by_type.get("Softmax", []):
        take(_match_attention(g, index))
    gelus = {}
    for op_type, matcher in (("Erf", _match_gelu), ("Tanh", _match_gelu_tanh)):
        for index in by_type.get(op_type, []):
            pattern = matcher(g, index)
            if pattern is not None and not pattern.nodes & g.taken and \
                    not any(pattern.nodes & p.nodes for p in gelus.values()):
                gelus[pattern.data["x"]] = pattern
    # convs on token tensors (PVT-v2, SegFormer): channels-last in and out, no transposes
    for index in by_type.get("Conv", []):
        token_conv = take(_token_convs.match(g, index, gelus, _gelu_fits))
        if token_conv is not None:
            gelus = {x: p for x, p in gelus.items() if not p.nodes & token_conv.nodes}
    # re-parameterizable branches (RepVGG, MobileOne): each tree of adds from its last
    for index in reversed(by_type.get("Add", [])):
        if index not in g.taken:
            take(_reparam.match(g, index))
    # a linear layer's batch normalization folded into it (LeViT), before the plain linears
    for index in by_type.get("BatchNormalization", []):
        take(_linear_norm.match(g, index))
    # per-pixel chains on a channels-last view (ConvNeXt), before their MatMuls are linears
    _channels_last.match(g, by_type.get("Transpose", []), gelus, take, _gelu_constants)
    for index in by_type.get("Sigmoid", []):
        take(_gated_mlp.match_swiglu(g, index))
    for index in by_type.get("MatMul", []):
        linear = None if index in g.taken else take(_match_linear(g, index, gelus))
        if linear is not None:
            gelus = {x: p for x, p in gelus.items() if not p.nodes & linear.nodes}
    for pattern in gelus.values():
        take(pattern)
    for matcher in (_match_layer_norm, _match_rms_norm):
        for index in by_type.get("ReduceMean", []):
            if index not in g.taken:
                take(matcher(g, index))
    for index in by_type.get("Concat", []):
        if index not in g.taken:
            take(_match_rotary(g, index))
    for index in by_type.get("InstanceNormalization", []):
        take(_group_norm.match(g, index))
    return found


def walk(graph, order: list[int], values: dict, cv) -> Iterator[int]:
    """The node loop's order, with the patterns converted: yields the indices
    of the nodes to convert as they are; a pattern's nodes are held back until
    its last one, where the pattern's value is written to ``values`` (or, if
    its constants do not fit, the held-back nodes are yielded after all)."""
    patterns = match(graph, order, values) if ENABLED else []
    if not patterns:
        yield from order
        return
    owner = {index: p for p in patterns for index in p.nodes}
    held: dict[int, list[int]] = {}
    held_shapes: dict[str, tuple[int, ...]] = {}
    for index in order:
        pattern = owner.get(index)
        if pattern is None:
            yield index
            continue
        if index != pattern.anchor:
            node = graph.node[index]
            shapes = _split_shapes(node, values, held_shapes) if node.op_type == "Split" \
                else [_infer_shape(node, values, held_shapes)]
            if shapes is not None and None not in shapes:
                held_shapes.update(zip(node.output, shapes))
            if index in pattern.shaped:
                # Shape or Size read this held-back value: give them its shape
                if shapes is None or None in shapes:  # give up the pattern: convert its nodes
                    for i in pattern.nodes:
                        owner.pop(i, None)
                    yield from held.pop(id(pattern), [])
                    yield index
                    continue
                for name, shape in zip(node.output, shapes):
                    values[name] = SimpleNamespace(shape=shape)
            held.setdefault(id(pattern), []).append(index)
            continue
        node = graph.node[index]
        cv.node, cv.index = node, index
        try:
            result = pattern.convert(cv, values)
        except UnsupportedError:
            result = None                 # jitnn refused an operand: convert the nodes
        if result is None:
            yield from held.pop(id(pattern), [])
            yield index
            continue
        held.pop(id(pattern), None)
        values[node.output[0]] = result


# --- converting ------------------------------------------------------------------


def _infer_shape(node, values: dict, held: dict) -> tuple[int, ...] | None:
    """The output shape of a held-back ``node`` from its inputs' shapes (in
    ``values``, or ``held``: those of held-back values), or None."""
    shapes = [(values[n].shape if n in values else held.get(n)) if n else None
              for n in node.input]
    if any(s is None for s, n in zip(shapes, node.input) if n):
        return None
    try:
        if node.op_type in _UNARY:
            return tuple(shapes[0])
        if node.op_type in _ELEMENTWISE:
            return tuple(np.broadcast_shapes(*[s for s in shapes if s is not None]))
        if node.op_type == "Transpose":
            perm = next((list(a.ints) for a in node.attribute if a.name == "perm"),
                        list(range(len(shapes[0])))[::-1])
            return tuple(shapes[0][p] for p in perm)
        if node.op_type == "Conv":
            return _token_convs.conv_output_shape(node, shapes)
        if node.op_type == "MatMul":
            a, b = shapes
            if len(a) < 2 or len(b) < 2 or a[-1] != b[-2]:
                return None
            return tuple(np.broadcast_shapes(a[:-2], b[:-2])) + (a[-2], b[-1])
        if node.op_type == "Expand" and isinstance(values.get(node.input[1]), Const):
            return tuple(int(n) for n in np.broadcast_shapes(
                tuple(shapes[0]), tuple(int(n) for n in values[node.input[1]].array.reshape(-1))))
        if node.op_type == "Unsqueeze":
            given = values.get(node.input[1]) if len(node.input) > 1 else None
            axes = [int(a) for a in given.array.reshape(-1)] if isinstance(given, Const) else \
                next((list(a.ints) for a in node.attribute if a.name == "axes"), None)
            if axes is None:
                return None
            shape, rank = list(shapes[0]), len(shapes[0]) + len(axes)
            for axis in sorted(a % rank for a in axes):
                shape.insert(axis, 1)
            return tuple(shape)
        if node.op_type == "Reshape" and isinstance(values.get(node.input[1]), Const):
            allowzero = next((a.i for a in node.attribute if a.name == "allowzero"), 0)
            return _reshaped(tuple(shapes[0]), values[node.input[1]].array.reshape(-1),
                             bool(allowzero))
        if node.op_type == "Concat":
            axis = next(a.i for a in node.attribute if a.name == "axis") % len(shapes[0])
            parts = [tuple(s) for s in shapes if s is not None]
            if any(len(s) != len(parts[0]) or s[:axis] + s[axis + 1:] != parts[0][:axis]
                   + parts[0][axis + 1:] for s in parts):
                return None
            return parts[0][:axis] + (sum(s[axis] for s in parts),) + parts[0][axis + 1:]
        if node.op_type == "Slice" and len(node.input) >= 3:
            # opset 10+: bounds as constant inputs; a zero-stride view of the shape sliced
            bounds = [values.get(n) if n else None for n in list(node.input[1:5])]
            if not all(isinstance(b, Const) for b in bounds[:2]) or not all(
                    b is None or isinstance(b, Const) for b in bounds[2:]):
                return None
            starts, ends = (b.array.reshape(-1).tolist() for b in bounds[:2])
            rank = len(shapes[0])
            axes = bounds[2].array.reshape(-1).tolist() if len(bounds) > 2 and bounds[2] \
                is not None else list(range(len(starts)))
            steps = bounds[3].array.reshape(-1).tolist() if len(bounds) > 3 and bounds[3] \
                is not None else [1] * len(starts)
            index = [slice(None)] * rank
            for start, end, axis, step in zip(starts, ends, axes, steps):
                index[int(axis) % rank] = slice(int(start), int(end), int(step))
            return np.broadcast_to(np.empty((), bool), tuple(shapes[0]))[tuple(index)].shape
    except (ValueError, IndexError, StopIteration):
        return None
    return None


def _split_shapes(node, values: dict, held: dict) -> list[tuple[int, ...]] | None:
    """The output shapes of a held-back ``Split`` (sizes given as a constant
    input or attribute, or equal parts), or None."""
    shape = values[node.input[0]].shape if node.input[0] in values else held.get(node.input[0])
    if shape is None:
        return None
    axis = next((a.i for a in node.attribute if a.name == "axis"), 0) % len(shape)
    sizes = next((list(a.ints) for a in node.attribute if a.name == "split"), None)
    if len(node.input) > 1 and node.input[1]:
        given = values.get(node.input[1])
        sizes = [int(n) for n in given.array.reshape(-1)] if isinstance(given, Const) else None
    elif sizes is None and shape[axis] % len(node.output) == 0:
        sizes = [shape[axis] // len(node.output)] * len(node.output)
    if sizes is None or len(sizes) != len(node.output) or sum(sizes) != shape[axis]:
        return None
    return [tuple(shape[:axis]) + (n,) + tuple(shape[axis + 1:]) for n in sizes]


#: the tanh GELU's argument: its coefficients of x and x³
_GELU_TANH_TERMS = {1: math.sqrt(2.0 / math.pi), 3: math.sqrt(2.0 / math.pi) * 0.044715}


def _gelu_fits(values, gelu: Pattern) -> bool:
    """:func:`_gelu_constants` of a matched GELU pattern."""
    return _gelu_constants(values, gelu.data["consts"], gelu.data.get("terms"))


def _gelu_constants(values, consts, terms=None) -> bool:
    """Whether each constant is its expected value (float32 rounding allowed),
    and the polynomial ``terms`` (the tanh GELU's argument, see ``_Term``) is
    ``√(2/π) (x + 0.044715 x³)``."""
    got = [_scalar(values[name]) for name, _ in consts]
    if not all(v is not None and abs(v - want) <= 1e-6 * want
               for v, (_, want) in zip(got, consts)):
        return False
    if terms is None:
        return True
    coefficients: dict[float, float] = {}
    for count, exponents, factors in terms:
        numbers = [_scalar(values[name]) for name in exponents + factors]
        if None in numbers:
            return False
        power = count + sum(numbers[:len(exponents)])
        coefficients[power] = coefficients.get(power, 0.0) + math.prod(numbers[len(exponents):])
    return set(coefficients) == set(_GELU_TANH_TERMS) and all(
        abs(coefficients[p] - want) <= 1e-6 * want for p, want in _GELU_TANH_TERMS.items())


def _gelu(cv, values, x: str, consts, approximate: str, terms=None) -> Operand | None:
    value = values[x]
    if not _float_tensor(value) or not _gelu_constants(values, consts, terms):
        return None
    return cv.op("gelu", value, approximate=approximate)


def _linear(cv, values, plan) -> Operand | None:
    x, w = values[plan["x"]], values[plan["w"]]
    bias = None if plan["bias"] is None else values[plan["bias"]]
    if not _float_tensor(x) or len(x.shape) < 2 or not isinstance(w, Const) \
            or w.array.ndim != 2 or w.array.dtype.kind != "f" or x.shape[-1] != w.shape[0]:
        return None
    n = w.shape[1]
    if bias is None:
        if len(x.shape) == 2:
            return None
        rows = math.prod(x.shape[:-1])
        y = cv.op("matmul", cv.op("reshape", x, (rows, x.shape[-1])), cv.float_operand(w))
        return cv.op("reshape", y, x.shape[:-1] + (n,))
    if not isinstance(bias, Const) or bias.array.dtype.kind != "f" \
            or bias.array.ndim > len(x.shape) or bias.array.size not in (1, n) \
            or any(s != 1 for s in bias.array.shape[:-1]):
        return None
    gelu = plan["gelu"]
    if gelu is not None and not _gelu_constants(values, gelu.data["consts"],
                                                gelu.data.get("terms")):
        return None
    rows = math.prod(x.shape[:-1])
    flat = cv.op("reshape", x, (rows, x.shape[-1])) if len(x.shape) != 2 else x
    bias_operand = cv.float_operand(bias) if bias.array.ndim == 1 else \
        cv.float_operand(Const(bias.array.reshape(-1)))
    y = cv.op("add", cv.op("matmul", flat, cv.float_operand(w)), bias_operand)
    activation, approximate = plan["activation"], plan["approximate"]
    # the tanh GELU is no epilogue activation: always its own pass
    late = activation == "gelu" and (not GELU_IN_EPILOGUE or approximate != "none")
    if isinstance(activation, tuple):
        y = cv.op(activation[0], y, *activation[1:])
    elif activation is not None and not late:
        y = cv.op(activation, y)
    if len(x.shape) != 2:
        y = cv.op("reshape", y, x.shape[:-1] + (n,))
    # after the reshape, GELU is no epilogue of the GEMM: its own vectorized pass
    return cv.op("gelu", y, approximate=approximate) if late else y

