"""gather: WebNN/ONNX gather along one axis with constant integer indices.

``out = take(x, indices, axis)``: the output shape is ``x.shape[:axis] +
indices.shape + x.shape[axis + 1:]``; negative indices count from the end
(ONNX). The indices are host integers given at the call (an index tensor
whose values are known when the graph is built), validated then. A
plain-layout op: it reads the plain values (a blocked input is read back
first, one counted reorder).
"""

from __future__ import annotations

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import as_tensor, axis_index, context_of, plain_result


def gather_reference(x, indices, axis: int = 0) -> np.ndarray:
    """The spec: ``numpy.take`` in float64 (negative indices from the end)."""
    return np.take(np.asarray(x, np.float64), np.asarray(indices, np.int64), axis=axis)


def gather(x, indices, axis: int = 0) -> Tensor:
    """The slices of ``x`` along ``axis`` at ``indices`` (host integers, any
    shape, each in ``[-size, size)``); a plain result."""
    op = "gather"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: x must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, x.ndim)
    index = np.asarray(indices)
    if index.dtype.kind not in "iu":
        raise JitnnTypeError(f"{op}: indices must be integers, got dtype {index.dtype}")
    size = x.shape[axis]
    if index.size and (index.min() < -size or index.max() >= size):
        raise JitnnValueError(
            f"{op}: indices must be in [{-size}, {size}) for axis {axis} of x {x.shape}, "
            f"got values in [{index.min()}, {index.max()}]")
    index = np.where(index < 0, index + size, index).astype(np.intp)
    shape = x.shape[:axis] + index.shape + x.shape[axis + 1:]

    return plain_result(ctx, shape,
                        lambda data: np.ascontiguousarray(np.take(data, index, axis=axis)), x, op)

register_op(OpDef("gather", gather, gather_reference, webnn="gather", onnx=("Gather",)))
