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
it): the kernel reads the rows in the other order, no transpose is copied. With
``columns=(start, H)`` too, ``x`` is the 3-D ``(B, S, N)`` output of a wider
product and the head split is its columns ``start`` to ``start + H * D``
(``D``: the tables' last axis), read in place: the query and key of one GEMM
on packed weights (jitnn/onnx/_qkv_patterns.py) take no split copies.

``split_heads(x, heads, depth, start=0)``: the ``(B, H, S, D)`` heads of
columns ``start`` to ``start + H * D`` of a ``(B, S, N)`` tensor, one copy
(the value beside the rotated query and key of such a GEMM, where the export
runs a split, its head ``Reshape`` and ``Transpose(0, 2, 1, 3)``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import rotary as rotary_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import Node, Tensor, Value
from ._common import (Binding, as_tensor, context_of, pending, plain_buffer, plain_layout,
                      plain_op, value_of)

if TYPE_CHECKING:
    from ..context import Context

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


def _packed_heads(x: Tensor, start: int, heads: int, depth: int, op: str) -> tuple:
    """The ``(B, S, H, D)`` head split of columns ``start`` on of a ``(B, S, N)`` ``x``."""
    if x.ndim != 3 or heads < 1 or depth < 1 or start < 0 \
            or start + heads * depth > x.shape[2]:
        raise JitnnValueError(f"{op}: {heads} heads of {depth} from column {start} do not "
                              f"fit a (B, S, N) input; got {x.shape}")
    return (x.shape[0], x.shape[1], heads, depth)


def rotary_embedding(x, cos, sin, *, layout: str = "bhsd",
                     columns: tuple[int, int] | None = None) -> Tensor:
    """``x * cos + rotate_half(x) * sin`` (see the module docstring)."""
    ctx = context_of(_OP, x, cos, sin)
    x = as_tensor(ctx, x, _OP, "input")
    cos = as_tensor(ctx, cos, _OP, "cos")
    sin = as_tensor(ctx, sin, _OP, "sin")
    source = x.shape
    column = 0
    if columns is not None:
        if layout != "bshd" or not cos.ndim:
            raise JitnnValueError(f"{_OP}: columns need layout 'bshd' and tables")
        column = int(columns[0])
        source = _packed_heads(x, column, int(columns[1]), cos.shape[-1], _OP)
    elif layout not in ("bhsd", "bshd") or (layout == "bshd" and x.ndim != 4):
        raise JitnnValueError(f"{_OP}: layout must be 'bhsd' or, for a 4-D input, 'bshd'; "
                              f"got {layout!r} for input {x.shape}")
    # the result's shape: the tables broadcast to it
    shape = (source[0], source[2], source[1], source[3]) if layout == "bshd" else source
    if len(source) < 1 or source[-1] % 2:
        raise JitnnValueError(f"{_OP}: input's last axis must have an even size, got shape "
                              f"{source}")
    if cos.shape != sin.shape or cos.ndim > len(source) or not cos.shape \
            or cos.shape[-1] != source[-1]:
        raise JitnnValueError(f"{_OP}: cos {cos.shape} and sin {sin.shape} must have one "
                              f"shape, of rank <= {len(source)}, ending in {source[-1]}")
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
    axes = x._axes if x.ndim == 4 else "nchw"
    if rows is not None and math.prod(shape):
        # tables the kernel indexes as they are: a node of its own kind that writes the
        # plan's buffer and replays as one bound call
        xv, cv, sv = value_of(x), value_of(cos), value_of(sin)
        attrs = {"x": xv, "cos": cv, "sin": sv, "rows": rows, "depth": depth, "heads": heads,
                 "seq": seq, "column": column, "batch": source[0]}
        node = Node(_OP, (xv, cv, sv), kind="rotary_rows", attrs=attrs, run=run_rotary_rows,
                    sig=("rotary_rows", rows, depth, heads, seq, column, source[0]))
        return pending(ctx, shape, plain_layout(len(shape), axes), node, axes=axes)

    def compute(xd: np.ndarray, cd: np.ndarray, sd: np.ndarray) -> np.ndarray:
        out = aligned_empty(shape)
        if out.size == 0:
            return out
        if rows is None:               # a broadcast the kernel does not index: expand it
            cd = np.ascontiguousarray(np.broadcast_to(cd, shape))
            sd = np.ascontiguousarray(np.broadcast_to(sd, shape))
        table = -1 if rows is None else rows
        # the (B, S) rows of the head split (as wide as x's, from its column)
        xr = xd.reshape(seq * source[0], -1) if heads else xd.reshape(-1, depth)
        ctx.launcher.launch(rotary_kernels.rotary_rows, xr, cd.reshape(table, depth),
                            sd.reshape(table, depth), out.reshape(-1, depth), heads, seq,
                            column)
        return out

    return plain_op(ctx, _OP, (x, cos, sin), shape, compute, axes=axes)


def _bound_data(values) -> tuple | None:
    """The plain C-contiguous arrays of ``values`` as they are, or None."""
    arrays = tuple(v._data for v in values)
    if any(not isinstance(d, np.ndarray) or d.dtype != np.float32 or not d.flags.c_contiguous
           or d.shape != v._shape or layouts.block_of(v._layout) is not None
           for d, v in zip(arrays, values)):
        return None
    return arrays


def _out(value: Value, out: np.ndarray | None) -> np.ndarray:
    """``out`` (the plan's buffer) when it fits ``value``, else a new array."""
    if out is None or out.shape != value.shape or out.dtype != np.float32 \
            or not out.flags.c_contiguous:
        return aligned_empty(value.shape)
    return out


def _rotary_arrays(a: dict, xd: np.ndarray, cd: np.ndarray, sd: np.ndarray,
                   out: np.ndarray) -> tuple:
    """The kernel's 2-D views: the (B, S) rows of a head split (as wide as x's,
    from its column), the tables' rows, the result's rows."""
    depth = a["depth"]
    xr = xd.reshape(a["seq"] * a["batch"], -1) if a["heads"] else xd.reshape(-1, depth)
    return (xr, cd.reshape(a["rows"], depth), sd.reshape(a["rows"], depth),
            out.reshape(-1, depth))


def run_rotary_rows(ctx: "Context", node: Node, value: Value,
                    out: np.ndarray | None) -> np.ndarray:
    """The embedding of a ``rotary_rows`` node, into ``out`` (the plan's buffer) if given."""
    a = node.attrs
    out = _out(value, out)
    data = (plain_buffer(a[k]) for k in ("x", "cos", "sin"))
    ctx.launcher.launch(rotary_kernels.rotary_rows, *_rotary_arrays(a, *data, out),
                        a["heads"], a["seq"], a["column"])
    return out


def bind_rotary_rows(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_rotary_rows` just made, bound to its arrays."""
    a = node.attrs
    x = _bound_data((a["x"],))
    if x is None:
        return None
    reads, derived, tables = [(a["x"], x[0])], [], []
    for v in (a["cos"], a["sin"]):
        if v.held:
            # a constant table (the graph holds it): a form kept on the value, so the
            # bound call holds the same array at every run
            key = ("rotary_table", v._shape)
            form = v._derive(key, lambda v=v: np.ascontiguousarray(plain_buffer(v), np.float32))
            derived.append((v, key, form))
            tables.append(form)
        else:                      # computed at each run: read in place
            data = _bound_data((v,))
            if data is None:
                return None
            reads.append((v, data[0]))
            tables.append(data[0])
    call = rotary_kernels.bind_rotary_rows(*_rotary_arrays(a, x[0], *tables, result),
                                           a["heads"], a["seq"], a["column"], ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], tuple(reads), tuple(derived), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_rotary_rows.bind = bind_rotary_rows
register_kind(NodeKind("rotary_rows", writes_into_buffer=True))


def split_heads_reference(x, heads: int, depth: int, start: int = 0) -> np.ndarray:
    """``x[..., start:start + heads * depth]`` as ``(B, S, H, D)``, transposed to ``(B, H, S, D)``."""
    x = np.asarray(x, np.float64)
    b, s = x.shape[:2]
    part = x[:, :, start:start + heads * depth].reshape(b, s, heads, depth)
    return np.ascontiguousarray(part.transpose(0, 2, 1, 3))


def split_heads(x, heads: int, depth: int, start: int = 0) -> Tensor:
    """The ``(B, H, S, D)`` heads of columns ``start`` on of a ``(B, S, N)``
    ``x`` (see the module docstring)."""
    op = "split_heads"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "input")
    heads, depth, start = int(heads), int(depth), int(start)
    b, s, _, _ = _packed_heads(x, start, heads, depth, op)
    shape = (b, heads, s, depth)
    xv = value_of(x)
    attrs = {"x": xv, "heads": heads, "depth": depth, "start": start, "rows": b * s}
    node = Node(op, (xv,), kind="split_heads", attrs=attrs, run=run_split_heads,
                sig=("split_heads", heads, depth, start, b * s))
    return pending(ctx, shape, plain_layout(4), node)


def run_split_heads(ctx: "Context", node: Node, value: Value,
                    out: np.ndarray | None) -> np.ndarray:
    """The copy of a ``split_heads`` node, into ``out`` (the plan's buffer) if given."""
    a = node.attrs
    out = _out(value, out)
    if out.size:
        ctx.launcher.launch(rotary_kernels.head_rows, plain_buffer(a["x"]).reshape(a["rows"], -1),
                            out.reshape(-1, a["depth"]), a["heads"], value.shape[2], a["start"])
    return out


def bind_split_heads(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_split_heads` just made, bound to its arrays."""
    a = node.attrs
    data = _bound_data((a["x"],))
    call = None if data is None else rotary_kernels.bind_head_rows(
        data[0].reshape(a["rows"], -1), result.reshape(-1, a["depth"]), a["heads"],
        result.shape[2], a["start"], ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], ((a["x"], data[0]),), (), result, ctx.num_threads)


run_split_heads.bind = bind_split_heads
register_kind(NodeKind("split_heads", writes_into_buffer=True))


register_op(OpDef(_OP, rotary_embedding, rotary_embedding_reference, layouts="plain",
                  fusion="fused itself: the exported Slice, Neg, Concat, Mul, Mul, Add "
                         "chain in one pass per row"))
register_op(OpDef("split_heads", split_heads, split_heads_reference, layouts="plain",
                  fusion="fused itself: a column split, its head Reshape and "
                         "Transpose(0, 2, 1, 3) as one copy"))
