"""slice: WebNN slice (``starts``, ``sizes``, ``strides``) of a tensor.

Output axis ``i`` takes ``sizes[i]`` elements of input axis ``i`` from
``starts[i]`` every ``strides[i]`` (all >= 0; strides >= 1, default 1), so
``starts[i] + (sizes[i] - 1) * strides[i] < x.shape[i]``. ONNX's Slice
(negative steps, clamped ends) maps onto it in the ONNX frontend, or onto a
slice followed by a reversal. A plain-layout op: it reads the plain values (a
blocked input is read back first, one counted reorder).
"""

from __future__ import annotations

import builtins
from typing import Sequence

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..limits import MAX_DIM
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import as_tensor, context_of, plain_result


def slice_reference(x, starts, sizes, strides=None) -> np.ndarray:
    """The spec, float64."""
    x = np.asarray(x, np.float64)
    strides = strides or [1] * x.ndim
    index = tuple(builtins.slice(b, b + (n - 1) * s + 1 if n else b, s)
                  for b, n, s in zip(starts, sizes, strides))
    return x[index]


def _ints(op: str, name: str, values, rank: int) -> tuple[int, ...]:
    try:
        items = tuple(values)
    except TypeError:
        raise JitnnTypeError(f"{op}: {name} must be a sequence of ints, got {values!r}") from None
    if len(items) != rank or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                     for v in items):
        raise JitnnTypeError(f"{op}: {name} must be {rank} ints (one per axis), got {values!r}")
    return tuple(int(v) for v in items)


def slice(x, starts: Sequence[int], sizes: Sequence[int], *,  # noqa: A001 - WebNN's name
          strides: Sequence[int] | None = None) -> Tensor:
    """The window of ``x`` from ``starts`` with ``sizes`` elements per axis,
    every ``strides`` elements (WebNN slice); a plain result."""
    op = "slice"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    rank = x.ndim
    starts = _ints(op, "starts", starts, rank)
    sizes = _ints(op, "sizes", sizes, rank)
    steps = (1,) * rank if strides is None else _ints(op, "strides", strides, rank)
    # starts and sizes are bounded by x's shape; a stride is not when the size
    # is 0 or 1, so it gets jitnn/limits.py's bound (numpy refuses a step
    # beyond int64 only when the slice runs)
    for axis, (b, n, s, d) in enumerate(zip(starts, sizes, steps, x.shape)):
        if b < 0 or n < 0 or not 1 <= s <= MAX_DIM or (n and b + (n - 1) * s >= d) or b > d:
            raise JitnnValueError(
                f"{op}: axis {axis} of x {x.shape}: start {b}, size {n}, stride {s} do not fit "
                f"(need start >= 0, size >= 0, 1 <= stride <= {MAX_DIM}, "
                f"start + (size - 1) * stride < {d})")
    index = tuple(builtins.slice(b, b + (n - 1) * s + 1 if n else b, s)
                  for b, n, s in zip(starts, sizes, steps))

    return plain_result(ctx, sizes, lambda data: np.ascontiguousarray(data[index]), x, op)

register_op(OpDef("slice", slice, slice_reference, webnn="slice", onnx=("Slice",)))
