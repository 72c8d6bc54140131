"""Scatters (WebNN, ONNX without reduction): scatter_elements, scatter_nd.

Both return a copy of ``x`` with some elements replaced by ``updates`` (of
x's data type):

* ``scatter_elements(x, indices, updates, axis)``: ``out[..., indices[..., i,
  ...], ...] = updates[..., i, ...]`` along ``axis``; ``indices`` and
  ``updates`` have one shape, x's rank and x's sizes except along ``axis``.
* ``scatter_nd(x, indices, updates)``: each row ``(i0, ..., ik-1)`` of the last
  axis of ``indices`` (``k <= x.ndim``) replaces the block ``x[i0, ...,
  ik-1]`` by the matching block of ``updates``, whose shape is
  ``indices.shape[:-1] + x.shape[k:]``.

Index rules as the gathers' (jitnn/ops/_movement.py): host integers are
validated at the call; an index tensor is read when the op runs, a negative
index counting from the end, then clamped into range. Where two indices name
the same element, one of their updates lands there (numpy's assignment
order: the last one). Plain-layout ops: numpy on plain values (a blocked
input is read back first, one counted reorder).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import JitnnValueError
from ..registry import OpDef, register_op
from ..tensor import DTYPE_NAMES, Tensor
from ._common import ANY_DTYPE, as_tensor, axis_index, context_of, plain_op
from ._movement import (clamped_indices, elements_indices, exact, index_argument, nd_indices,
                        operand)


# --- the spec ----------------------------------------------------------------------

def scatter_elements_reference(x, indices, updates, axis: int = 0) -> np.ndarray:
    """The spec, element by element in row-major order (float64, or exact
    integers); run-time index rule (negative from the end, then clamped)."""
    out = exact(x).copy()
    updates = exact(updates).astype(out.dtype)
    index = clamped_indices(np.asarray(indices), out.shape[axis])
    for position in np.ndindex(*index.shape):
        target = list(position)
        target[axis] = index[position]
        out[tuple(target)] = updates[position]
    return out


def scatter_nd_reference(x, indices, updates) -> np.ndarray:
    out = exact(x).copy()
    indices = np.asarray(indices)
    k = indices.shape[-1]
    index = clamped_indices(indices, out.shape[:k])
    updates = exact(updates).astype(out.dtype)
    for position in np.ndindex(*indices.shape[:-1]):
        out[tuple(index[position])] = updates[position]
    return out


# --- the ops -----------------------------------------------------------------------------

def _operands(op: str, x, indices, updates) -> tuple:
    ctx = context_of(op, x, indices, updates)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: x must have rank >= 1, got a scalar")
    index = index_argument(ctx, op, indices)
    return ctx, x, index, operand(ctx, updates, op, "updates", x.dtype)


def _run(ctx, op: str, x: Tensor, index, updates: Tensor, write, pick) -> Tensor:
    """A copy of x's values with ``write(out, pick(index values), updates)``
    applied; the index tensor, when there is one, is read when it runs."""
    def compute(data: np.ndarray, values: np.ndarray, ids=None) -> np.ndarray:
        out = data.copy()
        write(out, pick(ids), values)
        return out
    if isinstance(index, Tensor):
        return plain_op(ctx, op, (x, updates, index), x.shape, compute, dtype=x.dtype)
    return plain_op(ctx, op, (x, updates), x.shape, compute, dtype=x.dtype)


def scatter_elements(x, indices, updates, axis: int = 0) -> Tensor:
    """A copy of ``x`` with ``out[..., indices[..., i, ...], ...] =
    updates[..., i, ...]`` along ``axis`` (WebNN scatterElements, ONNX
    ScatterElements without reduction; see the module docstring)."""
    op = "scatter_elements"
    ctx, x, index, updates = _operands(op, x, indices, updates)
    axis = axis_index(op, "axis", axis, x.ndim)
    if updates.shape != tuple(index.shape):
        raise JitnnValueError(f"{op}: updates {updates.shape} must have the shape of "
                              f"indices {tuple(index.shape)}")
    pick = elements_indices(op, x, index, axis)
    return _run(ctx, op, x, index, updates,
                lambda out, ids, values: np.put_along_axis(out, ids, values, axis), pick)


def scatter_nd(x, indices, updates) -> Tensor:
    """A copy of ``x`` with the block ``x[i0, ..., ik-1]`` replaced by the
    matching block of ``updates`` for each row of the last axis of
    ``indices`` (WebNN scatterND, ONNX ScatterND without reduction; see the
    module docstring)."""
    op = "scatter_nd"
    ctx, x, index, updates = _operands(op, x, indices, updates)
    k, pick = nd_indices(op, x, index)
    lead = tuple(index.shape[:-1])
    if updates.shape != lead + x.shape[k:]:
        raise JitnnValueError(
            f"{op}: updates {updates.shape} must have the shape indices.shape[:-1] + "
            f"x.shape[{k}:] = {lead + x.shape[k:]}")
    rows = math.prod(lead)

    def write(out: np.ndarray, ids: np.ndarray, values: np.ndarray) -> None:
        flat = ids.reshape(rows, k)
        blocks = values.reshape((rows,) + out.shape[k:])
        if k == 0:                      # every row replaces the whole of x
            if rows:
                out[...] = blocks[-1]
            return
        out[tuple(flat[:, j] for j in range(k))] = blocks
    return _run(ctx, op, x, index, updates, write, pick)


_LAYOUTS = "plain (a blocked input is read back once)"
register_op(OpDef("scatter_elements", scatter_elements, scatter_elements_reference,
                  webnn="scatterElements", layouts=_LAYOUTS, dtypes=DTYPE_NAMES))
register_op(OpDef("scatter_nd", scatter_nd, scatter_nd_reference, webnn="scatterND",
                  layouts=_LAYOUTS, dtypes=DTYPE_NAMES))
