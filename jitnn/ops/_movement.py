"""What the data-movement ops share (shape.py, slice.py, gather.py,
scatter.py, cast.py): operands of any data type, int-list arguments, exact
references, and the index rules of gather and scatter.

Indices (gather, gather_elements, gather_nd, scatter_elements, scatter_nd)
come in two forms:

* a host integer array, known at the call: validated then (each index in
  ``[-size, size)``; out of range raises, naming the op), negative ones
  counting from the end (ONNX);
* an integer tensor (int32, uint32 or int64), a builder operand in a graph,
  possibly a run-time graph input: its values are known only when the op
  runs, and a recorded op must never fail at a flush for an input its
  validation accepted. So negative ones count from the end first, then every
  index is clamped into ``[0, size - 1]`` (what Chromium's WebNN does, and
  what WebNN's conformance vectors expect of out-of-bound constant indices).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..limits import check_max, is_int
from ..tensor import FLOAT32, Tensor, as_array_copy
from ._common import ANY_DTYPE, as_tensor

if TYPE_CHECKING:
    from ..context import Context

#: the data types an index tensor may have (WebNN's gather and scatter)
INDEX_DTYPES: tuple[np.dtype, ...] = tuple(np.dtype(t) for t in (np.int32, np.uint32, np.int64))


def exact(x) -> np.ndarray:
    """A reference's view of its input: floating-point data as float64,
    integer data as it is (an int64 above 2**53 stays exact)."""
    array = np.asarray(x)
    return array.astype(np.float64) if array.dtype.kind == "f" else array


def operand(ctx: "Context", value: object, op: str, name: str,
            dtype: np.dtype | None = None) -> Tensor:
    """A data operand of any jitnn type. With ``dtype`` (the type of the op's
    first operand) a Tensor must have it and a host array converts to it by
    value; floating-point host data is refused for an integer ``dtype`` (it
    would be truncated silently)."""
    if dtype is None or isinstance(value, Tensor):
        t = as_tensor(ctx, value, op, name, ANY_DTYPE)
        if dtype is not None and t.dtype != dtype:
            raise JitnnTypeError(f"{op}: {name} must have the dtype of the first operand "
                                 f"({dtype}), got a {t.dtype} tensor")
        return t
    try:
        kind = np.asarray(value).dtype
    except (ValueError, TypeError):      # ragged: as_array_copy names the problem
        kind = None
    if dtype != FLOAT32 and kind is not None and kind.kind == "f":
        raise JitnnTypeError(f"{op}: {name} must be {dtype} data like the first operand, "
                             f"got floating-point data ({kind})")
    try:
        array = as_array_copy(value, f"{op}: {name}", dtype)
    except JitnnTypeError as error:
        raise JitnnTypeError(str(error)) from None
    return Tensor._holding(ctx, array)


def int_list(op: str, name: str, values: object, *, length: int | None = None,
             minimum: int | None = None, bounded: bool = True) -> tuple[int, ...]:
    """A sequence of ints (numpy ints too; not bools, floats or strs), of
    ``length`` items if given, each ``>= minimum`` if given and (``bounded``)
    at most jitnn/limits.py's MAX_DIM in magnitude, as Python ints."""
    items: tuple = ()
    if not isinstance(values, (str, bytes, Tensor)):
        try:
            items = tuple(values)  # type: ignore[arg-type]
        except TypeError:
            items = (None,)
    if isinstance(values, (str, bytes, Tensor)) or not all(map(is_int, items)):
        raise JitnnTypeError(f"{op}: {name} must be a sequence of ints, got {values!r}")
    if length is not None and len(items) != length:
        raise JitnnValueError(
            f"{op}: {name} must have {length} item(s) (one per axis of the input), got "
            f"{len(items)}: {tuple(int(v) for v in items)}")
    ints = tuple(int(v) for v in items)
    if minimum is not None and any(v < minimum for v in ints):
        raise JitnnValueError(f"{op}: {name} must be >= {minimum}, got {ints}")
    if bounded:
        check_max(op, name, tuple(abs(v) for v in ints), ints)
    return ints


def axes_arg(op: str, name: str, axes: object, rank: int) -> tuple[int, ...]:
    """Distinct axes in ``[-rank, rank)``, as non-negative ints in the given order."""
    items = int_list(op, name, axes)
    if any(not -rank <= a < rank for a in items):
        raise JitnnValueError(
            f"{op}: {name} must be in [{-rank}, {rank - 1}] for a rank-{rank} input, got {items}")
    found = tuple(a % rank if rank else a for a in items)
    if len(set(found)) != len(found):
        raise JitnnValueError(f"{op}: {name} must not repeat an axis, got {items}")
    return found


# --- indices -----------------------------------------------------------------------------

def index_argument(ctx: "Context", op: str, indices: object) -> "Tensor | np.ndarray":
    """``indices`` as an index Tensor (int32, uint32 or int64: read when the op
    runs) or a host integer array (validated by :func:`host_indices`)."""
    if isinstance(indices, Tensor):
        if indices.dtype not in INDEX_DTYPES:
            raise JitnnTypeError(f"{op}: indices must be an int32, uint32 or int64 tensor, "
                                 f"got a {indices.dtype} tensor")
        return indices
    try:
        array = np.asarray(indices)
    except (ValueError, TypeError) as error:
        raise JitnnTypeError(f"{op}: indices must be an integer array, got a "
                             f"{type(indices).__name__} numpy cannot read ({error})") from None
    if array.size == 0 and array.dtype.kind == "f":
        array = array.astype(np.int64)  # [] is float64 to numpy; no value says otherwise
    if array.dtype.kind not in "iu":
        raise JitnnTypeError(f"{op}: indices must be integers (int32, uint32 or int64), "
                             f"got dtype {array.dtype}")
    return array


def host_indices(op: str, index: np.ndarray, sizes, what: str) -> np.ndarray:
    """Host ``index`` checked against ``sizes`` (an int, or one size per item
    of its last axis: gather_nd's index tuples) and counted from the end where
    negative, as intp; out of ``[-size, size)`` raises, naming ``what``."""
    bound = np.asarray(sizes, np.int64)
    if index.size:
        low = index < -bound
        high = index >= bound
        if low.any() or high.any():
            bad = index[low | high].ravel()[0]
            raise JitnnValueError(
                f"{op}: indices must be in [-size, size) for {what}, got {bad} (values in "
                f"[{index.min()}, {index.max()}]; a tensor of indices is clamped instead)")
    values = index.astype(np.int64)
    return np.where(values < 0, values + bound, values).astype(np.intp)


def clamped_indices(index: np.ndarray, sizes) -> np.ndarray:
    """Run-time ``index`` counted from the end where negative, then clamped
    into ``[0, size - 1]`` (sizes >= 1) as intp: never out of bounds."""
    bound = np.asarray(sizes, np.int64)
    values = index.astype(np.int64)
    values = np.where(values < 0, values + bound, values)
    return np.clip(values, 0, bound - 1).astype(np.intp)


def resolve(op: str, index: "Tensor | np.ndarray", sizes, what: str):
    """The function ``indices -> valid intp indices`` the op's run applies:
    a host array is validated now (and the function ignores its argument),
    a tensor's values are clamped when it runs."""
    if isinstance(index, Tensor):
        return lambda values: clamped_indices(values, sizes)
    checked = host_indices(op, index, sizes, what)
    return lambda values: checked


def check_not_empty_axis(op: str, index_size: int, sizes: Sequence[int], what: str) -> None:
    """Indices into an axis of size 0 cannot be valid (nor clamped into it)."""
    if index_size and min(sizes, default=1) == 0:
        raise JitnnValueError(f"{op}: {what} has size 0, so indices must be empty, got "
                              f"{index_size} of them")


def elements_indices(op: str, x, index, axis: int):
    """The index picker of a gather_elements/scatter_elements along ``axis``:
    ``index`` must have x's rank and its sizes on every other axis."""
    if index.ndim != x.ndim or any(index.shape[d] != x.shape[d]
                                   for d in range(x.ndim) if d != axis):
        raise JitnnValueError(
            f"{op}: indices {tuple(index.shape)} must have the rank of x {x.shape} and its "
            f"sizes on every axis but axis {axis}")
    what = f"axis {axis} of x {x.shape}"
    check_not_empty_axis(op, index.size, (x.shape[axis],), what)
    return resolve(op, index, x.shape[axis], what)


def nd_indices(op: str, x, index) -> tuple[int, object]:
    """``(k, picker)`` of a gather_nd/scatter_nd: each row of ``index``'s last
    axis holds ``k`` coordinates into x's first ``k`` axes."""
    if index.ndim < 1:
        raise JitnnValueError(f"{op}: indices must have rank >= 1, got a scalar")
    k = index.shape[-1]
    if k > x.ndim:
        raise JitnnValueError(
            f"{op}: indices {tuple(index.shape)} pick {k} coordinates, more than x {x.shape} "
            f"has axes")
    what = f"the first {k} axes of x {x.shape}"
    check_not_empty_axis(op, index.size, x.shape[:k], what)
    return k, resolve(op, index, x.shape[:k], what)
