"""Gathers (WebNN, ONNX): gather, gather_elements, gather_nd.

* ``gather(x, indices, axis)``: the slices of ``x`` along ``axis`` at
  ``indices``; output shape ``x.shape[:axis] + indices.shape +
  x.shape[axis + 1:]`` (an embedding lookup: a ``(vocab, dim)`` table and
  ``(batch, seq)`` ids give ``(batch, seq, dim)``).
* ``gather_elements(x, indices, axis)``: ``out[i][j][k] = x[i][indices[i][j][k]][k]``
  for axis 1; ``indices`` has x's rank and x's sizes except along ``axis``,
  and the output its shape.
* ``gather_nd(x, indices)``: each row of the last axis of ``indices`` (``k <=
  x.ndim`` ints) picks ``x[i0, ..., ik-1]``, a ``x.shape[k:]`` block; output
  shape ``indices.shape[:-1] + x.shape[k:]``.

Indices are a host integer array (validated at the call) or an int32,
uint32 or int64 tensor, read when the op runs, then clamped into range (see
jitnn/ops/_movement.py): negative ones count from the end first. Every data
type for ``x``. Plain-layout ops: numpy on the plain values (a blocked ``x``
is read back first, one counted reorder), except ``gather`` of host indices
along the channels of a blocked float32 tensor, which stays blocked
(kernels/channel_gather.py: a channel shuffle needs no reorder).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import channel_gather as channel_gather_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import DTYPE_NAMES, FLOAT32, Node, Tensor, Value
from ._common import (ANY_DTYPE, Binding, as_tensor, axis_index, blocked_buffer, channel_axis,
                      context_of, is_blocked, pending, plain_buffer, plain_layout, plain_op,
                      value_of)
from ._movement import (check_not_empty_axis, clamped_indices, elements_indices, exact,
                        index_argument, nd_indices, resolve)

if TYPE_CHECKING:
    from ..context import Context


# --- the spec ----------------------------------------------------------------------

def gather_reference(x, indices, axis: int = 0) -> np.ndarray:
    """The spec, with the run-time rule for indices (negative from the end,
    then clamped into range); float64, or exact integers."""
    x = exact(x)
    index = clamped_indices(np.asarray(indices), x.shape[axis])
    return x[(slice(None),) * axis + (index,)]


def gather_elements_reference(x, indices, axis: int = 0) -> np.ndarray:
    x = exact(x)
    index = clamped_indices(np.asarray(indices), x.shape[axis])
    grid = list(np.indices(index.shape, sparse=True))
    grid[axis] = index
    return x[tuple(grid)]


def gather_nd_reference(x, indices) -> np.ndarray:
    x = exact(x)
    indices = np.asarray(indices)
    k = indices.shape[-1]
    index = clamped_indices(indices, x.shape[:k])
    rows = index.reshape(math.prod(indices.shape[:-1]), k)
    picked = [x[tuple(row)] for row in rows]
    return np.array(picked, x.dtype).reshape(indices.shape[:-1] + x.shape[k:])


# --- the ops -----------------------------------------------------------------------------

def _data(op: str, x, indices) -> tuple:
    ctx = context_of(op, x, indices)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: x must have rank >= 1, got a scalar")
    return ctx, x, index_argument(ctx, op, indices)


def _run(ctx, op: str, x: Tensor, index, shape: tuple[int, ...], compute, pick) -> Tensor:
    """The plain result ``compute(values of x, pick(index values))``: the index
    tensor is an input of the op, read when it runs; host indices were
    checked already (``pick`` ignores its argument then)."""
    if isinstance(index, Tensor):
        return plain_op(ctx, op, (x, index), shape,
                        lambda data, ids: compute(data, pick(ids)), dtype=x.dtype)
    return plain_op(ctx, op, (x,), shape, lambda data: compute(data, pick(None)),
                    dtype=x.dtype)


def gather(x, indices, axis: int = 0) -> Tensor:
    """The slices of ``x`` along ``axis`` at ``indices`` (WebNN/ONNX gather; see
    the module docstring): host integers, each in ``[-size, size)``, or an
    integer tensor whose values are clamped into range when it runs (a
    negative index counts from the end first); a plain result."""
    op = "gather"
    ctx, x, index = _data(op, x, indices)
    axis = axis_index(op, "axis", axis, x.ndim)
    size = x.shape[axis]
    what = f"axis {axis} of x {x.shape}"
    check_not_empty_axis(op, index.size, (size,), what)
    shape = x.shape[:axis] + tuple(index.shape) + x.shape[axis + 1:]
    pick = resolve(op, index, size, what)
    if (not isinstance(index, Tensor) and index.ndim == 1 and x.ndim == 4
            and x.dtype == FLOAT32 and is_blocked(x) and axis == channel_axis(x._axes)):
        return _gather_channels(ctx, x, pick(None), shape)
    if isinstance(index, Tensor) and x.dtype == FLOAT32 and not is_blocked(x):
        return _gather_rows(ctx, x, index, axis, shape)
    return _run(ctx, op, x, index, shape,
                lambda data, ids: np.take(data, ids, axis=axis), pick)


def _gather_rows(ctx, x: Tensor, index: Tensor, axis: int, shape: tuple[int, ...]) -> Tensor:
    """Run-time indices into a plain float32 ``x`` (an embedding lookup by
    token ids): a node of its own kind that writes into the plan's buffer, so
    that a replay hands the next step the same array at every run (a
    Llama's first RMS norm then stays one bound kernel call)."""
    xv, iv = value_of(x), value_of(index)
    attrs = {"x": xv, "indices": iv, "axis": axis, "size": x.shape[axis]}
    node = Node("gather", (xv, iv), kind="gather_rows", attrs=attrs, run=run_gather_rows)
    return pending(ctx, shape, plain_layout(len(shape)), node)


def run_gather_rows(ctx: "Context", node: Node, value: Value,
                    out: np.ndarray | None) -> np.ndarray:
    """The gather of :func:`_gather_rows`, into ``out`` (the plan's buffer) if given."""
    a = node.attrs
    if out is None or out.shape != value.shape or out.dtype != FLOAT32 \
            or not out.flags.c_contiguous:
        out = aligned_empty(value.shape)
    # (counted as a launch: its replayed bound call is one, jitnn/replay.py)
    ctx.launcher.launch(take_clamped, plain_buffer(a["x"]), plain_buffer(a["indices"]), out,
                        a["axis"], a["size"])
    return out


def take_clamped(data: np.ndarray, ids: np.ndarray, out: np.ndarray, axis: int,
                 size: int) -> None:
    """``out`` = the slices of ``data`` along ``axis`` (of ``size``) at run-time
    ``ids``: negative ones counted from the end, then clamped into range
    (:func:`clamped_indices`; numpy's "clip" mode clamps, and takes ``out``
    unbuffered)."""
    if ids.size and ids.min() < 0:
        ids = clamped_indices(ids, size)
    np.take(data, ids, axis=axis, out=out, mode="clip")


def bind_gather_rows(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The call :func:`run_gather_rows` just made, bound to its arrays (the
    table, a constant, and the ids, a graph input read in place: see
    jitnn.executor.InputFedBinding); None when either was read through a copy."""
    a = node.attrs
    reads = []
    for v in (a["x"], a["indices"]):
        if not isinstance(v._data, np.ndarray) or layouts.block_of(v._layout) is not None \
                or v._remake is not None:
            return None
        reads.append((v, v._data))
    args = (reads[0][1], reads[1][1], result, a["axis"], a["size"])
    return Binding(take_clamped, args, tuple(reads), (), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_gather_rows.bind = bind_gather_rows

register_kind(NodeKind("gather_rows", writes_into_buffer=True))


def _gather_channels(ctx, x: Tensor, source: np.ndarray, shape: tuple[int, ...]) -> Tensor:
    """Host channel indices on a blocked 4-D float32 ``x``: a blocked result,
    each output block gathered from the input blocks (a channel shuffle and
    the splits after it, without reading back to plain)."""
    block, axes = layouts.block_of(x.layout), x._axes
    source = np.ascontiguousarray(source, np.int64)
    n, c = shape[0], shape[channel_axis(axes)]
    h, w = (shape[2], shape[3]) if axes == "nchw" else (shape[1], shape[2])
    xv = value_of(x)           # (the node holds the Value, not the caller's handle)
    attrs = {"x": xv, "source": source, "block": block, "axes": axes,
             "out_shape": layouts.blocked_shape((n, c, h, w), block)}
    # a node of its own kind: it writes into the plan's buffer, and a replayed
    # plan runs it as one bound kernel call
    node = Node("gather", (xv,), kind="gather_channels", attrs=attrs, run=run_gather_channels)
    return pending(ctx, shape, x.layout, node, axes=axes)


def run_gather_channels(ctx: "Context", node: Node, value: Value,
                        out: np.ndarray | None) -> np.ndarray:
    """A channel gather on blocked data, into ``out`` if given."""
    a = node.attrs
    data = blocked_buffer(ctx, a["x"], a["block"], a["axes"])
    if out is None:
        out = aligned_empty(a["out_shape"])
    ctx.launcher.launch(channel_gather_kernels.gather_channels, data, a["source"], out)
    return out


def bind_gather_channels(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_gather_channels` just made, bound to its
    arrays; None when ``x`` was reordered for it (a copy made at every run)."""
    a = node.attrs
    x = a["x"]
    if x._data is None or layouts.block_of(x._layout) != a["block"] or x._axes != a["axes"]:
        return None
    kernel, args = channel_gather_kernels.bind_gather_channels(x._data, a["source"], result)
    return Binding(kernel, args, ((x, x._data),), (), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_gather_channels.bind = bind_gather_channels

register_kind(NodeKind("gather_channels", writes_into_buffer=True))


def gather_elements(x, indices, axis: int = 0) -> Tensor:
    """``out[..., i, ...] = x[..., indices[..., i, ...], ...]`` along ``axis``
    (WebNN gatherElements, ONNX GatherElements): ``indices`` has x's rank and
    x's sizes except along ``axis``; the output has ``indices``' shape. Index
    rules as :func:`gather`'s."""
    op = "gather_elements"
    ctx, x, index = _data(op, x, indices)
    axis = axis_index(op, "axis", axis, x.ndim)
    pick = elements_indices(op, x, index, axis)
    return _run(ctx, op, x, index, tuple(index.shape),
                lambda data, ids: np.take_along_axis(data, ids, axis=axis), pick)


def gather_nd(x, indices) -> Tensor:
    """The blocks ``x[i0, ..., ik-1]`` at each row ``(i0, ..., ik-1)`` of the last
    axis of ``indices`` (WebNN gatherND, ONNX GatherND without batch
    dimensions): output shape ``indices.shape[:-1] + x.shape[k:]``. Index rules
    as :func:`gather`'s, per axis."""
    op = "gather_nd"
    ctx, x, index = _data(op, x, indices)
    k, pick = nd_indices(op, x, index)
    lead = tuple(index.shape[:-1])
    shape = lead + x.shape[k:]

    def compute(data: np.ndarray, ids: np.ndarray) -> np.ndarray:
        rows = ids.reshape(math.prod(lead), k)
        if k == 0:                      # every row picks the whole of x
            return np.broadcast_to(data, (rows.shape[0],) + data.shape).reshape(shape)
        return data[tuple(rows[:, j] for j in range(k))].reshape(shape)
    return _run(ctx, op, x, index, shape, compute, pick)


_LAYOUTS = "plain (a blocked input is read back once)"
register_op(OpDef("gather", gather, gather_reference, webnn="gather", onnx=("Gather",),
                  layouts="host channel indices on blocked float32: blocked; else " + _LAYOUTS,
                  dtypes=DTYPE_NAMES))
register_op(OpDef("gather_elements", gather_elements, gather_elements_reference,
                  webnn="gatherElements", layouts=_LAYOUTS, dtypes=DTYPE_NAMES))
register_op(OpDef("gather_nd", gather_nd, gather_nd_reference, webnn="gatherND",
                  layouts=_LAYOUTS, dtypes=DTYPE_NAMES))
