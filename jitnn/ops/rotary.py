"""Rotary position embedding: ``rotary_embedding(x, cos, sin)`` is ``x * cos
+ rotate_half(x) * sin`` with ``rotate_half(x) = concat(-x[..., D/2:],
x[..., :D/2])`` along the last axis (Llama's, Mistral's, Qwen's
``apply_rotary_pos_emb``), one pass per row (kernels/rotary.py) where the
exported graph takes seven ops: two ``Slice``, ``Neg``, ``Concat``, two
``Mul`` and ``Add``, each a launch and a pass over the data.

``x``: float32, any rank >= 1, last axis ``D`` even. ``cos``, ``sin``: the
same shape, broadcastable to ``x`` (numpy's rules), last axis ``D``. Tables
that vary only along the trailing axes (a ``(1, 1, S, D)`` table for a ``(B,
H, S, D)`` query) are read as ``(R, D)`` rows that repeat; other broadcasts
are expanded to ``x``'s shape first (a copy per run). Plain in, plain out.

``layout="bshd"``: ``x`` is the 4-D ``(B, S, H, D)`` head split before the
exporters' ``Transpose(0, 2, 1, 3)``, and the result is the ``(B, H, S, D)``
that the transpose and the embedding would give (the tables broadcast to
it): the kernel reads the rows in the other order, no transpose is copied.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import JitnnValueError
from ..kernels import rotary as rotary_kernels
from ..kernels.buffers import aligned_empty
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import as_tensor, context_of, plain_op

_OP = "rotary_embedding"


def rotary_embedding_reference(x, cos, sin, *, layout: str = "bhsd") -> np.ndarray:
    """``x * cos + concat(-x[..., h:], x[..., :h]) * sin``, ``h = D / 2``, float64
    (``layout="bshd"``: of ``x.transpose(0, 2, 1, 3)``)."""
    x = np.asarray(x, np.float64)
    if layout == "bshd":
        x = x.transpose(0, 2, 1, 3)
    h = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * np.asarray(cos, np.float64) + rotated * np.asarray(sin, np.float64)


def table_rows(x_shape: tuple[int, ...], table_shape: tuple[int, ...]) -> int | None:
    """The number ``R`` of distinct rows a table of ``table_shape`` gives the
    rows of ``x`` when read as ``(R, D)`` repeating (its leading axes all
    broadcast, its trailing ones ``x``'s), or None when it broadcasts
    otherwise (it is expanded to ``x``'s shape then)."""
    full = (1,) * (len(x_shape) - len(table_shape)) + tuple(table_shape)
    # the last axis (before D) along which the table does not match x
    split = max((i + 1 for i in range(len(x_shape) - 1) if full[i] != x_shape[i]), default=0)
    if any(n != 1 for n in full[:split]):
        return None
    return math.prod(x_shape[split:-1])


def rotary_embedding(x, cos, sin, *, layout: str = "bhsd") -> Tensor:
    """``x * cos + rotate_half(x) * sin`` (see the module docstring)."""
    ctx = context_of(_OP, x, cos, sin)
    x = as_tensor(ctx, x, _OP, "input")
    cos = as_tensor(ctx, cos, _OP, "cos")
    sin = as_tensor(ctx, sin, _OP, "sin")
    if layout not in ("bhsd", "bshd") or (layout == "bshd" and x.ndim != 4):
        raise JitnnValueError(f"{_OP}: layout must be 'bhsd' or, for a 4-D input, 'bshd'; "
                              f"got {layout!r} for input {x.shape}")
    source = x.shape
    # the result's shape: the tables broadcast to it
    shape = (source[0], source[2], source[1], source[3]) if layout == "bshd" else source
    if x.ndim < 1 or x.shape[-1] % 2:
        raise JitnnValueError(f"{_OP}: input's last axis must have an even size, got shape "
                              f"{x.shape}")
    if cos.shape != sin.shape or cos.ndim > x.ndim or not cos.shape \
            or cos.shape[-1] != x.shape[-1]:
        raise JitnnValueError(f"{_OP}: cos {cos.shape} and sin {sin.shape} must have one "
                              f"shape, of rank <= {x.ndim}, ending in {x.shape[-1]}")
    try:
        fits = np.broadcast_shapes(cos.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise JitnnValueError(f"{_OP}: cos and sin {cos.shape} do not broadcast to the "
                              f"result's {shape}")
    depth = shape[-1]
    heads, seq = (source[2], source[1]) if layout == "bshd" else (0, 0)
    rows = table_rows(shape, cos.shape)

    def compute(xd: np.ndarray, cd: np.ndarray, sd: np.ndarray) -> np.ndarray:
        out = aligned_empty(shape)
        if out.size == 0:
            return out
        if rows is None:               # a broadcast the kernel does not index: expand it
            cd = np.ascontiguousarray(np.broadcast_to(cd, shape))
            sd = np.ascontiguousarray(np.broadcast_to(sd, shape))
        table = -1 if rows is None else rows
        ctx.launcher.launch(rotary_kernels.rotary_rows, xd.reshape(-1, depth),
                            cd.reshape(table, depth), sd.reshape(table, depth),
                            out.reshape(-1, depth), heads, seq)
        return out

    axes = x._axes if x.ndim == 4 else "nchw"
    return plain_op(ctx, _OP, (x, cos, sin), shape, compute, axes=axes)


register_op(OpDef(_OP, rotary_embedding, rotary_embedding_reference, layouts="plain",
                  fusion="fused itself: the exported Slice, Neg, Concat, Mul, Mul, Add "
                         "chain in one pass per row"))
