"""Windows of a tensor: slice (WebNN, with strides), reverse and triangular.

slice: along axis ``i`` the window ``[starts[i], starts[i] + sizes[i])`` of
the input, every ``strides[i]``-th element of it (default 1), so the output
has ``ceil(sizes[i] / strides[i])`` elements there (WebNN: ``sizes`` is the
window's extent in the input, not the output's size). Needs ``starts[i] +
sizes[i] <= x.shape[i]``; ``sizes[i] = 0`` (an empty result) is accepted
too. ONNX's Slice (negative steps, clamped ends) maps onto it in the ONNX
frontend, or onto a slice followed by a reversal: ``n`` outputs every ``s``
elements are the window ``(n - 1) * s + 1`` with stride ``s``.

reverse: the input with the order of the elements along ``axes`` reversed
(default: every axis). triangular: the upper (or lower) triangle of the last
two axes, counted from ``diagonal``, the other elements zero.

Every data type. Plain results: a blocked input is read back to plain first
(one counted reorder, shared with any other plain op that reads it).
"""

from __future__ import annotations

import builtins
import functools
from typing import Callable, Sequence

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..limits import MAX_DIM, is_int
from ..registry import OpDef, register_op
from ..tensor import DTYPE_NAMES, Tensor
from ._common import ANY_DTYPE, as_tensor, context_of, plain_into_op, plain_result
from ._movement import axes_arg, exact, int_list
from .shape import _bound_as_view, _ViewAs


# --- the spec ----------------------------------------------------------------------

def slice_reference(x, starts, sizes, strides=None) -> np.ndarray:
    """WebNN slice (float64, or exact integers)."""
    x = exact(x)
    strides = strides or [1] * x.ndim
    return x[tuple(builtins.slice(b, b + n, s) for b, n, s in zip(starts, sizes, strides))]


def reverse_reference(x, axes=None) -> np.ndarray:
    x = exact(x)
    return np.flip(x, tuple(range(x.ndim)) if axes is None else tuple(axes)).copy()


def triangular_reference(x, upper: bool = True, diagonal: int = 0) -> np.ndarray:
    """Keeps element ``(.., i, j)`` where ``j - i >= diagonal`` (upper) or
    ``j - i <= diagonal`` (lower); zero elsewhere."""
    x = exact(x)
    i, j = np.indices(x.shape[-2:])
    keep = (j - i >= diagonal) if upper else (j - i <= diagonal)
    return np.where(keep, x, np.zeros((), x.dtype))


# --- the ops -------------------------------------------------------------------------

def slice(x, starts: Sequence[int], sizes: Sequence[int], *,  # noqa: A001 - WebNN's name
          strides: Sequence[int] | None = None) -> Tensor:
    """The window of ``x`` from ``starts`` of ``sizes`` elements per axis, every
    ``strides`` elements of it (WebNN slice; see the module docstring); a
    plain result."""
    op = "slice"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    rank = x.ndim
    starts = int_list(op, "starts", starts, length=rank, bounded=False)
    sizes = int_list(op, "sizes", sizes, length=rank, bounded=False)
    steps = (1,) * rank if strides is None else \
        int_list(op, "strides", strides, length=rank, bounded=False)
    # starts and sizes are bounded by x's shape; a stride is not (it may pass
    # the window), so it gets jitnn/limits.py's bound here
    for axis, (b, n, s, d) in enumerate(zip(starts, sizes, steps, x.shape)):
        if b < 0 or n < 0 or not 1 <= s <= MAX_DIM or b + n > d or (n and b >= d):
            raise JitnnValueError(
                f"{op}: axis {axis} of x {x.shape}: start {b}, size {n}, stride {s} do not fit "
                f"(need start >= 0, size >= 0, start + size <= {d}, "
                f"1 <= stride <= {MAX_DIM})")
    index = tuple(builtins.slice(b, b + n, s) for b, n, s in zip(starts, sizes, steps))
    shape = tuple(-(-n // s) for n, s in zip(sizes, steps))
    if x.ndim and all(s == 1 for s in steps) and _one_range(x.shape, shape):
        # a view, the same object at every run while x's array is (a replay
        # binds the steps reading it)
        return _bound_as_view(plain_result(ctx, shape, _ViewAs(shape, index), x, op))
    # copied into the plan's buffer, a bound call in a replay (EfficientViT's
    # attention slices 20 windows a run: each new array unbound its readers)
    return plain_into_op(ctx, op, (x,), shape, _window_into(tuple(starts), tuple(sizes),
                                                            tuple(steps)), dtype=x.dtype)


def _one_range(in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> bool:
    """Whether a window of stride 1 is one contiguous range of the input:
    every axis before the last one it cuts has size 1 in it."""
    cut = [axis for axis, (o, d) in enumerate(zip(out_shape, in_shape)) if o != d]
    return all(o == 1 for o in out_shape[:cut[-1]]) if cut else True


@functools.cache
def _window_into(starts: tuple[int, ...], sizes: tuple[int, ...],
                 steps: tuple[int, ...]) -> Callable[[np.ndarray, np.ndarray], None]:
    """``into(x, out)``: ``out = x[window]`` (:func:`slice`'s window)."""
    index = tuple(builtins.slice(b, b + n, s) for b, n, s in zip(starts, sizes, steps))

    def into(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x[index])
    into.__name__ = into.__qualname__ = "slice_into"
    return into


def reverse(x, axes: Sequence[int] | None = None) -> Tensor:
    """``x`` with the order of its elements reversed along ``axes`` (WebNN
    reverse: distinct axes; default every axis; ``[]`` copies); a plain result."""
    op = "reverse"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    found = tuple(range(x.ndim)) if axes is None else axes_arg(op, "axes", axes, x.ndim)
    index = tuple(builtins.slice(None, None, -1) if a in found else builtins.slice(None)
                  for a in range(x.ndim))
    return plain_result(ctx, x.shape, lambda data: data[index], x, op)


def triangular(x, upper: bool = True, diagonal: int = 0) -> Tensor:
    """The upper (``upper=True``: elements with ``col - row >= diagonal``) or
    lower (``col - row <= diagonal``) triangle of the last two axes of ``x``
    (rank >= 2), the other elements zero (WebNN triangular); a plain result."""
    op = "triangular"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    if x.ndim < 2:
        raise JitnnValueError(f"{op}: x must have rank >= 2, got shape {x.shape}")
    if not isinstance(upper, (bool, np.bool_)):
        raise JitnnTypeError(f"{op}: upper must be a bool, got {upper!r}")
    if not is_int(diagonal):
        raise JitnnTypeError(f"{op}: diagonal must be an int, got {diagonal!r}")
    (diagonal,) = int_list(op, "diagonal", (diagonal,))       # |diagonal| <= MAX_DIM
    pick = np.triu if upper else np.tril
    return plain_result(ctx, x.shape, lambda data: pick(data, diagonal), x, op)


register_op(OpDef("slice", slice, slice_reference, webnn="slice", onnx=("Slice",),
                  layouts="plain (a blocked input is read back once)", dtypes=DTYPE_NAMES))
register_op(OpDef("reverse", reverse, reverse_reference, webnn="reverse",
                  layouts="plain (a blocked input is read back once)", dtypes=DTYPE_NAMES))
register_op(OpDef("triangular", triangular, triangular_reference, webnn="triangular",
                  layouts="plain (a blocked input is read back once)", dtypes=DTYPE_NAMES))
