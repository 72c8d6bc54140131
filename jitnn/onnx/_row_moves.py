"""Chains of row moves converted as one gather of rows.

Swin (and other windowed vision transformers) moves whole token rows of a
``(B, H, W, C)`` tensor between its per-token layers: the cyclic shift
(``torch.roll`` on two axes, exported as ``Slice`` + ``Concat`` per axis,
each one gather: ``_convert._slices_of_one``), the window partition
(``Reshape`` to ``(B, H/w, w, W/w, w, C)``, ``Transpose(0, 1, 3, 2, 4, 5)``,
``Reshape`` to ``(-1, w * w, C)``) and their reverse. Every step keeps the
last axis (the channels) whole: the chain is a fixed permutation of the
rows. Converted one by one it copies the tensor at each roll and at each
transpose (three copies before a shifted block's attention, three after).

When a Reshape, Transpose or roll's gather ends such a chain with at least
two copies in it, it converts as one ``gather`` of the chain's source viewed
as ``(rows, C)`` at the composed row indices (computed at load time on an
index array), reshaped to the result's shape; the earlier steps, read by
nothing else, are never run. The result is noted (``"rows"``), so that a
later step of the chain composes with it. A chain read elsewhere in between
still converts correctly: that reader keeps its own copy.
"""

from __future__ import annotations

import math

import numpy as np

from ..graph import Operand
from ._shuffle import Origins

#: convert row-move chains as one gather (False: step by step, as exported)
ENABLED = True


def _is_copy(how: str, made: tuple) -> bool:
    if how == "transpose":
        perm = made[2]
        return list(perm) != list(range(len(perm)))
    return how in ("gather", "rows")


def fold(cv, origins: Origins, result: Operand) -> Operand | None:
    """``result`` as one gather of rows of the chain's source when the steps
    that made it (noted in ``origins``) move whole rows only, with at least
    one transpose among them and two copies; else None."""
    if not ENABLED or len(result.shape) < 2:
        return None
    width = result.shape[-1]
    chain, x, copies, transposed = [], result, 0, False
    while True:
        made = origins.of(x)
        if made is None:
            break
        how, source = made[0], made[1]
        rank = len(source.shape)
        if rank < 2 or source.shape[-1] != width or source.dtype != result.dtype:
            break
        if how == "transpose":
            perm = made[2]
            if perm is None or list(perm)[-1] != rank - 1:
                break
            transposed = True
        elif how in ("gather", "slice"):
            if (made[3] if how == "gather" else made[2]) % rank == rank - 1:
                break
        elif how not in ("reshape", "rows"):
            break
        chain.append(made)
        copies += _is_copy(how, made)
        x = source
        if how == "rows":               # already composed from its own source
            break
    if copies < 2 or not transposed and not any(m[0] == "rows" for m in chain):
        return None
    source = x
    rows = math.prod(source.shape[:-1])
    index = np.arange(rows, dtype=np.int64).reshape(source.shape[:-1])
    for made in reversed(chain):
        how = made[0]
        if how == "rows":
            index = made[2]
        elif how == "reshape":
            index = index.reshape(tuple(made[2])[:-1])
        elif how == "transpose":
            index = index.transpose(list(made[2])[:-1])
        elif how == "gather":
            index = np.take(index, np.asarray(made[2]), axis=made[3] % (index.ndim + 1))
        else:                           # a step-1 slice of one axis
            index = np.take(index, np.arange(made[3], made[4]), axis=made[2] % (index.ndim + 1))
    if index.shape != tuple(result.shape[:-1]):
        return None
    flat = cv.op("reshape", source, (rows, width)) if len(source.shape) != 2 else source
    picked = cv.op("gather", flat, np.ascontiguousarray(index.reshape(-1)), 0)
    out = cv.op("reshape", picked, tuple(result.shape))
    return origins.note(out, "rows", source, index)
