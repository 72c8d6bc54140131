"""Converting a matched attention pattern (jitnn/onnx/_patterns.py) into
``scaled_dot_product_attention``: its masks (constant, causal, boolean or
additive, per row or per head), grouped key-value heads repeated by the
exporter, and the checks on the converted values that decide whether the
pattern converts at all (the held-back nodes otherwise convert as they are).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ..graph import Operand
from ._common import Const

#: a mask value this negative drops a key as surely as -inf (exp underflows to 0)
_DROP = -1e9


def _repeat_groups(values, plan: dict, shape: tuple[int, ...]) -> int | None:
    """How many times a repeat of :func:`_repeat_plan` repeats each head of a
    ``(B, H, S, D)`` value of ``shape``: it must insert an axis after the
    heads, expand it to G and merge it into them, giving ``(B, H * G, S,
    D)``; else None."""
    if len(shape) != 4:
        return None
    b, h, s, d = shape
    if plan["first"] == "Unsqueeze":
        given = values.get(plan["first_input"]) if plan["first_input"] else None
        axes = [int(a) for a in given.array.reshape(-1)] if isinstance(given, Const) \
            else plan["axes"]
        if axes is None or [int(a) % 5 for a in axes] != [2]:
            return None
        inserted = (b, h, 1, s, d)
    else:
        target = values.get(plan["first_input"])
        if not isinstance(target, Const):
            return None
        inserted = _reshaped(shape, target.array.reshape(-1), plan["allowzero"][0])
        if inserted != (b, h, 1, s, d):
            return None
    expand, target = values.get(plan["shape"]), values.get(plan["target"])
    if not isinstance(expand, Const) or not isinstance(target, Const):
        return None
    try:
        expanded = tuple(int(n) for n in np.broadcast_shapes(
            inserted, tuple(int(n) for n in expand.array.reshape(-1))))
    except ValueError:
        return None
    if len(expanded) != 5 or expanded[:2] != (b, h) or expanded[3:] != (s, d):
        return None
    groups = expanded[2]
    merged = _reshaped(expanded, target.array.reshape(-1), plan["allowzero"][1])
    return groups if merged == (b, h * groups, s, d) else None


def _reshaped(shape: tuple[int, ...], target, allowzero: bool) -> tuple[int, ...] | None:
    """ONNX Reshape's output shape (0 copies a dim unless ``allowzero``, one -1
    inferred), or None if it does not fit."""
    dims = [int(d) for d in target]
    if not allowzero:
        if any(d == 0 and i >= len(shape) for i, d in enumerate(dims)):
            return None
        dims = [shape[i] if d == 0 else d for i, d in enumerate(dims)]
    size = math.prod(shape)
    if dims.count(-1) == 1:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or size % known:
            return None
        dims[dims.index(-1)] = size // known
    if any(d < 0 for d in dims) or math.prod(dims) != size:
        return None
    return tuple(dims)


def _scalar(value) -> float | None:
    """A size-1 float or integer constant as a float, else None."""
    if isinstance(value, Const) and value.array.size == 1 and value.array.dtype.kind in "fiu":
        return float(value.array.reshape(-1)[0])
    return None


def _float_tensor(value) -> bool:
    return isinstance(value, Operand) and value.dtype == np.float32


def _causal(keep: np.ndarray, sq: int, sk: int) -> bool:
    """Whether the bool array ``keep`` (broadcast to the scores) is the
    top-left causal triangle: key ``j`` kept for query row ``i`` iff ``j <= i``."""
    if keep.ndim < 2 or keep.shape[-2:] != (sq, sk):
        return False
    triangle = np.tri(sq, sk, dtype=bool)
    return bool((keep.reshape(-1, sq, sk) == triangle).all())


def _mask_operands(cv, values, plan, scores: tuple[int, ...]):
    """(mask operand or None, is_causal, NaN-free) from the Add and Where
    masks, or None when they cannot be one jitnn mask. NaN-free: no row of
    the scores can be all -inf (or hold +inf or NaN) for finite Q and K, so
    that no softmax row is NaN. Checks everything before it adds an op (a
    refused pattern leaves nothing in the graph)."""
    sq, sk = scores[-2:]
    # masks: (shape, make the operand, additive: a float mask added to the scores)
    masks, causal, nan_free = [], False, True
    view = scores                   # the scores' shape where the next step reads them
    for kind, _, operands in plan["steps"]:
        if kind == "reshape":
            target = values[operands[0]]
            view = None if not isinstance(target, Const) else \
                _reshaped(view, target.array.reshape(-1), operands[1])
            if view is None:
                return None
            continue
        if view != scores:
            # a mask added to a view of the scores (Swin's per-window shift mask
            # on (B, windows, H, N, N)): a constant, as the mask of the scores
            array = _view_mask(values[operands[0]], view, scores) if kind == "add" else None
            if array is None:
                return None
            nan_free &= bool(np.isfinite(array).all())
            masks.append((array.shape, lambda a=array: cv.float_operand(Const(a)), True, array))
            continue
        if kind == "add":
            mask = values[operands[0]]
            if isinstance(mask, Const) and mask.array.dtype.kind == "f":
                m = mask.array
                keep = m == 0
                if not causal and np.all(keep | (m <= _DROP)) and _causal(keep, sq, sk):
                    causal = True
                    continue
                nan_free &= bool(np.isfinite(m).all())
                masks.append((m.shape, lambda mask=mask: cv.float_operand(mask), True,
                              m.astype(np.float32, copy=False)))
            elif _float_tensor(mask):
                pair = plan["finite"].get(operands[0])
                nan_free &= pair is not None and all(
                    _scalar(values[n]) is not None and math.isfinite(_scalar(values[n]))
                    for n in pair)
                masks.append((mask.shape, lambda mask=mask: mask, True, None))
            else:
                return None
        elif kind == "where":
            cond, fill, keep_if_true = operands
            fill_value = _scalar(values[fill])
            if fill_value is None or not (fill_value <= _DROP):
                return None
            cond = values[cond]
            infinite = fill_value == -np.inf
            if isinstance(cond, Const):
                keep = cond.array.astype(bool) if keep_if_true else ~cond.array.astype(bool)
                if not causal and _causal(keep, sq, sk):
                    causal = True
                    continue
                nan_free &= not infinite
                # -inf: the additive mask it is; a finite fill replaces the score as
                # the kernel's boolean mask does (float32 lowest: the same weights)
                array = np.where(keep, 0.0, -np.inf).astype(np.float32) if infinite else keep
                masks.append((keep.shape, lambda a=array, i=infinite: cv.operand(
                    Const(a), np.float32 if i else None), infinite, array if infinite else None))
            elif cv.is_bool(cond):
                nan_free &= not infinite
                masks.append((cond.shape, lambda c=cond, k=keep_if_true, i=infinite:
                              _run_time_mask(cv, c, k, i), infinite, None))
            else:
                return None
    if view != scores:
        return None                      # the reshapes do not give the scores back
    if len(masks) > 1 and not all(additive for _, _, additive, _ in masks):
        return None                      # a boolean mask and another: not one jitnn mask
    for shape, _, _, _ in masks:
        try:
            if len(shape) > len(scores) or np.broadcast_shapes(tuple(shape), scores) != scores:
                return None
        except ValueError:
            return None
    # several additive masks (a relative position bias and the padding mask) add up;
    # constant ones at load time, in the order the run-time adds would take (the
    # same float32 sums): Swin's shifted blocks then run no (windows, H, N, N) add
    mask = None
    if len(masks) > 1 and all(array is not None for _, _, _, array in masks):
        total = masks[0][3]
        for _, _, _, array in masks[1:]:
            total = np.add(total, array, dtype=np.float32)
        return cv.float_operand(Const(np.ascontiguousarray(total))), causal, nan_free
    for _, make, _, _ in masks:
        mask = make() if mask is None else cv.op("add", mask, make())
    return mask, causal, nan_free


def _view_mask(mask, view: tuple[int, ...], scores: tuple[int, ...]) -> np.ndarray | None:
    """The constant float ``mask`` added to the scores viewed as ``view``, as
    a float32 mask of the scores' shape (the view's elements are the scores'
    in the same order), without the leading axes it does not vary along (Swin's
    per-window mask is ``(B * windows, 1, N, N)``, not one per head); None
    when it is no constant float that broadcasts to ``view``."""
    if not isinstance(mask, Const) or mask.array.dtype.kind != "f" \
            or len(mask.array.shape) > len(view):
        return None
    try:
        full = np.broadcast_to(mask.array.astype(np.float32), view).reshape(scores)
    except ValueError:
        return None
    for axis in range(len(scores) - 2):
        first = np.take(full, [0], axis=axis)
        if (full == first).all():
            full = first
    return np.ascontiguousarray(full)


def _run_time_mask(cv, cond: Operand, keep_if_true: bool, infinite: bool) -> Operand:
    """The attention mask of ``Where(cond, scores, fill)`` (``keep_if_true``)
    or ``Where(cond, fill, scores)`` on a run-time bool ``cond``: ``cond`` (or
    its negation) as the boolean mask; a ``-inf`` fill as the additive mask."""
    if not keep_if_true:
        cond = cv.op("logical_not", cond)
    if infinite:
        cond = cv.op("where", cond, cv.float_operand(Const(np.zeros((), np.float32))),
                     cv.float_operand(Const(np.array(-np.inf, np.float32))))
    return cond


def _attention(cv, values, plan) -> Operand | None:
    qkv = plan.get("qkv")             # a _pattern_graph.QkvSource
    if qkv is not None:
        # Q, K and V from their projections, not converted yet: their shapes for the checks
        heads = qkv.shapes(values)
        if heads is None:
            return None
        q, k, v = (SimpleNamespace(shape=h) for h in heads)
    else:
        q, k, v = values[plan["q"]], values[plan["k"]], values[plan["v"]]
        if not all(_float_tensor(t) for t in (q, k, v)):
            return None
    rank = len(q.shape)
    groups = 1                        # query heads per key-value head
    if plan["repeats"] is not None:
        counts = {_repeat_groups(values, r, t.shape) for r, t in zip(plan["repeats"], (k, v))}
        if len(counts) != 1 or None in counts or rank != 4 or q.shape[1] % min(counts):
            return None
        groups = counts.pop()
    layout = "bshd" if plan["bshd"] else "bhsd"
    if plan["bshd"]:
        if rank != 4 or len(k.shape) != 4 or len(v.shape) != 4:
            return None
        (b, sq, h, d), (bk, sk, hk, dk), (bv, skv, hv, _) = q.shape, k.shape, v.shape
        scores = (b, h, sq, sk)
        if hk == hv == 1 < h and groups == 1:
            # one key-value head broadcast to all (multi-query): grouped, read as it is
            groups, hk, hv = h, h, h
    else:
        if rank not in (3, 4) or len(k.shape) != rank or len(v.shape) != rank:
            return None
        if plan["k_mode"] == "kt":
            kt = k.shape
            k_shape = kt[:-2] + (kt[-1], kt[-2])
        elif plan["k_mode"] == "bshd":
            return None
        else:
            k_shape = k.shape
        lead = q.shape[:-2]
        if groups == 1 and rank == 4 and lead[1] > 1 \
                and k_shape[:-2] == v.shape[:-2] == (lead[0], 1):
            groups = lead[1]          # one key-value head broadcast to all (multi-query)
        kv_lead = lead if groups == 1 else (lead[0], lead[1] // groups)
        if k_shape[:-2] != kv_lead or v.shape[:-2] != kv_lead:
            return None                   # broadcast batch or heads: not one attention
        (sq, d), (sk, dk), (skv, _) = q.shape[-2:], k_shape[-2:], v.shape[-2:]
        b, h, bk, hk, bv, hv = 0, 0, 0, 0, 0, 0
        scores = lead + (sq, sk)
    if (bk, hk, bv, hv) != (b, h, b, h) or dk != d or skv != sk:
        return None
    for target, allowzero in plan["reshapes"]:
        result = scores[:-1] + (v.shape[-1],)
        shape = values[target]
        if not isinstance(shape, Const) or _reshaped(result, shape.array.reshape(-1),
                                                     allowzero) != result:
            return None
    axis = plan["axis"]
    if axis is None:
        axis = -1 if cv.opset >= 13 else 1
    if int(axis) % rank != rank - 1:
        return None
    scale = 1.0
    for name, divides in plan["scales"]:
        s = _scalar(values[name])
        if s is None or not math.isfinite(s) or s == 0.0:
            return None
        scale = scale / s if divides else scale * s
    if plan["guard"] is not None and _scalar(values[plan["guard"]]) != 0.0:
        return None
    # the head-merge Transpose(0, 2, 1, 3) after a (B, H, S, D) attention is its
    # output layout: written in place, and the output projection reads it as it is
    out_layout = "bshd" if plan["bshd"] or plan.get("out_bshd") else "bhsd"
    if rank != 4 and out_layout != layout:
        return None
    masked = _mask_operands(cv, values, plan, scores)
    if masked is None:
        return None
    mask, causal, nan_free = masked
    views = None
    if qkv is not None:
        # one GEMM's output read in place as Q, K and V when the kernel takes them as they
        # are (bshd, no groups); else the three projections apart
        if layout == "bshd" and groups == 1:
            q, views = qkv.operands(cv, values, True)
            k = v = q
        else:
            q, k, v = qkv.operands(cv, values, False)
    if plan["k_mode"] == "kt":
        k = cv.op("transpose", k, list(range(rank - 2)) + [rank - 1, rank - 2])
    # the guard zeroes the probabilities of a NaN row (every score -inf): its output
    # is 0, stored so by the kernel (no is_nan and where passes over the output:
    # GPT-2 small at 128 tokens 1.3 % faster). Left out when the masks cannot make
    # such a row: then only NaN or inf in Q or K would, which give NaN rows here
    # where the model gives 0
    guard = plan["guard"] is not None and not nan_free
    return cv.op("scaled_dot_product_attention", q, k, v, mask, scale=scale, is_causal=causal,
                 layout=layout, nan_to_zero=guard, views=views, groups=groups,
                 out_layout=out_layout)
