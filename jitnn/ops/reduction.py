"""Reductions (WebNN's ten: reduce_l1, reduce_l2, reduce_log_sum,
reduce_log_sum_exp, reduce_max, reduce_mean, reduce_min, reduce_product,
reduce_sum, reduce_sum_square), arg_min / arg_max, cumulative_sum and
top_k_indices (ONNX's TopK, with a gather of its values).

Reductions take WebNN's options: ``axes`` (default: every axis; an empty
list reduces nothing, so each element is "reduced" alone: ``|x|`` for L1,
``x^2`` for the sum of squares, ...) and ``keep_dimensions`` (default False).
An axis may also be negative (from the end). Data types, as WebNN: float32
for all; also int32, int64 and uint32 for reduce_l1, reduce_product,
reduce_sum and reduce_sum_square (integer math that wraps, as the data
type); every jitnn type for reduce_max and reduce_min.

Lowering (float32): the Numba kernel of kernels/reduce.py, on an
``(outer, R, inner)`` view of the data reduced over its middle axis.

* A blocked input reduced over its spatial axes (H and W: global pooling;
  or H or W alone, or no axis) is read in place, as ``(N * C_phys // cb,
  H * W, cb)`` and the like: with ``keep_dimensions`` (or no axis) the result
  stays blocked in the input's layout (padding lanes zero), else it is plain
  (the ``(N, C)`` of a classifier head: a slice of the blocked result).
* Any other blocked input is read back to plain first (one counted reorder).
* A plain input reduced over adjacent axes (size-1 axes do not count) is
  read in place; other axis sets are transposed first (a numpy copy) so that
  the reduced axes come last.

Both write into the plan's buffer, and a replayed plan runs the kernel
itself on the same arrays (a bound call, without the op's Python or the
kernel's checks); a blocked input's plain ``(N, C)`` result or re-zeroed
padding lanes bind the wrapper that does that work, and a transposed
input runs the op again at each run.

Integer inputs run as numpy on plain data. arg_min / arg_max (any data type,
first index on ties: ONNX's ``select_last_index=0``) and cumulative_sum
(float32 summed in float64, or the integer type) are plain numpy ops too.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import reduce as reduce_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import FLOAT32, Node, Tensor, Value
from ._common import (ANY_DTYPE, FLOAT_ONLY, Binding, as_tensor, axis_index, channel_axis,
                      context_of, is_blocked, pending, plain_buffer, plain_into_op, plain_layout,
                      plain_op, value_of)

if TYPE_CHECKING:
    from ..context import Context

#: the reductions (jitnn's short name -> WebNN's name)
REDUCTIONS = {"l1": "reduceL1", "l2": "reduceL2", "log_sum": "reduceLogSum",
              "log_sum_exp": "reduceLogSumExp", "max": "reduceMax", "mean": "reduceMean",
              "min": "reduceMin", "product": "reduceProduct", "sum": "reduceSum",
              "sum_square": "reduceSumSquare"}

_WRAPPING_INTEGERS = tuple(np.dtype(t) for t in (np.int32, np.int64, np.uint32))
#: the data types each reduction takes (WebNN's; jitnn has no float16 or uint64)
DTYPES = {op: FLOAT_ONLY for op in REDUCTIONS}
DTYPES.update(dict.fromkeys(("l1", "product", "sum", "sum_square"),
                            FLOAT_ONLY + _WRAPPING_INTEGERS))
DTYPES.update(dict.fromkeys(("max", "min"), ANY_DTYPE))
#: cumulative_sum's data types (WebNN's, less float16 and uint64)
CUMULATIVE_DTYPES = FLOAT_ONLY + _WRAPPING_INTEGERS


# --- arguments ---------------------------------------------------------------------

def axes_arg(op: str, axes: object, rank: int, name: str = "axes") -> tuple[int, ...]:
    """A list of distinct axes of a rank-``rank`` tensor (each in ``[-rank,
    rank)``), as non-negative ints in the order given. None is every axis."""
    if axes is None:
        return tuple(range(rank))
    if isinstance(axes, (str, bytes)) or not isinstance(axes, Sequence) \
            and not isinstance(axes, np.ndarray):
        raise JitnnTypeError(f"{op}: {name} must be a list of ints, got {axes!r}")
    found = []
    for axis in list(axes):
        if isinstance(axis, (bool, np.bool_)) or not isinstance(axis, (int, np.integer)):
            raise JitnnTypeError(f"{op}: {name} must be a list of ints, got {axes!r}")
        if not -rank <= axis < rank:
            raise JitnnValueError(f"{op}: {name} must be in [{-rank}, {rank - 1}] for a "
                                  f"rank-{rank} tensor, got {list(axes)!r}")
        found.append(int(axis) % rank)
    if len(set(found)) != len(found):
        raise JitnnValueError(f"{op}: {name} must not repeat an axis, got {list(axes)!r}")
    return tuple(found)


def _bool_arg(op: str, name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise JitnnTypeError(f"{op}: {name} must be a bool, got {value!r}")
    return bool(value)


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keep: bool) -> tuple:
    if keep:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def run_view(shape: tuple[int, ...], axes: tuple[int, ...]):
    """How to see a plain tensor of ``shape`` as ``(outer, R, inner)`` reduced
    over ``axes``: ``(None, (outer, R, inner))`` when the reduced axes are
    adjacent once size-1 axes are left out, else ``(perm, (outer, R, 1))``:
    transpose by ``perm`` (kept axes, then reduced) first."""
    size = math.prod(shape)
    reduced = [a for a in sorted(axes) if shape[a] != 1]
    count = math.prod(shape[a] for a in axes)
    if not reduced:                                   # only size-1 axes: nothing to add up
        return None, (size, 1, 1)
    real = [i for i, d in enumerate(shape) if d != 1]
    where = [real.index(a) for a in reduced]
    if where == list(range(where[0], where[0] + len(where))):
        outer = math.prod(shape[i] for i in real[:where[0]])
        inner = math.prod(shape[i] for i in real[where[-1] + 1:])
        return None, (outer, count, inner)
    kept = [i for i in range(len(shape)) if i not in axes]
    outer = math.prod(shape[i] for i in kept)
    return tuple(kept) + tuple(sorted(axes)), (outer, count, 1)


# --- the spec ----------------------------------------------------------------------

def reduction_reference(op: str, x, axes=None, keep_dimensions: bool = False) -> np.ndarray:
    """WebNN's reduction ``op`` (a key of :data:`REDUCTIONS`) of ``x`` over
    ``axes`` (None: all; ``[]``: none) in float64."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(x.ndim)) if axes is None else tuple(int(a) % x.ndim for a in axes)
    keep = {"axis": axes, "keepdims": bool(keep_dimensions)}
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if op == "sum":
            return np.sum(x, **keep)
        if op == "mean":
            return np.mean(x, **keep) if axes else x.copy()
        if op == "l1":
            return np.sum(np.abs(x), **keep)
        if op == "l2":
            return np.sqrt(np.sum(x * x, **keep))
        if op == "sum_square":
            return np.sum(x * x, **keep)
        if op == "log_sum":
            return np.log(np.sum(x, **keep))
        if op == "log_sum_exp":
            m = np.max(x, axis=axes, keepdims=True) if x.size else np.zeros([1] * x.ndim)
            shift = np.where(np.isinf(m), 0.0, m)
            out = np.log(np.sum(np.exp(x - shift), axis=axes, keepdims=True)) + shift
            return out if keep_dimensions else np.squeeze(out, axis=axes)
        if op == "max":
            return np.max(x, **keep)
        if op == "min":
            return np.min(x, **keep)
        if op == "product":
            return np.prod(x, **keep)
    raise ValueError(f"reduction_reference: unknown reduction {op!r}")


def arg_reduction_reference(op: str, x, axis: int, keep_dimensions: bool = False,
                            output_data_type: str = "int32") -> np.ndarray:
    """``op`` "min" or "max": the index of the first minimum / maximum along
    ``axis`` (NaN counts as the extreme, as numpy's), as int64."""
    x = np.asarray(x, np.float64)
    function = np.argmin if op == "min" else np.argmax
    return function(x, axis=axis, keepdims=bool(keep_dimensions)).astype(np.int64)


def cumulative_sum_reference(x, axis: int, exclusive: bool = False,
                             reversed: bool = False) -> np.ndarray:  # noqa: A002 (WebNN's name)
    """The running sum along ``axis`` in float64: ``exclusive`` leaves each
    element out of its own sum, ``reversed`` sums from the end."""
    x = np.asarray(x, np.float64)
    if reversed:
        x = np.flip(x, axis)
    out = np.cumsum(x, axis=axis)
    if exclusive:
        out = out - x
    return np.flip(out, axis) if reversed else out


# --- reductions ----------------------------------------------------------------------

def _integer_reduce(op: str, data: np.ndarray, axes: tuple[int, ...], keep: bool) -> np.ndarray:
    dtype = data.dtype
    if op == "l1":
        data = np.abs(data)
    elif op == "sum_square":
        data = data * data
    if op in ("l1", "sum", "sum_square"):
        return np.sum(data, axis=axes, keepdims=keep, dtype=dtype)
    if op == "product":
        return np.prod(data, axis=axes, keepdims=keep, dtype=dtype)
    function = np.max if op == "max" else np.min
    return function(data, axis=axes, keepdims=keep) if axes else data.copy()


def _spatial_view(x: Tensor, axes: tuple[int, ...]):
    """For a blocked ``x`` reduced over ``axes``, all spatial (or none): the
    ``(outer, R, inner)`` view of its buffer ``(N, CB, H, W, cb)`` and the
    blocked result's buffer shape, or None."""
    h_axis, w_axis = (2, 3) if x._axes == "nchw" else (1, 2)
    if x.ndim != 4 or not set(axes) <= {h_axis, w_axis}:
        return None
    n, c = x.shape[0], x.shape[channel_axis(x._axes)]
    h, w = x.shape[h_axis], x.shape[w_axis]
    cb = layouts.block_of(x.layout)
    blocks = -(-c // cb)
    if set(axes) == {h_axis, w_axis}:
        return (n * blocks, h * w, cb), (n, blocks, 1, 1, cb)
    if axes == (h_axis,):
        return (n * blocks, h, w * cb), (n, blocks, 1, w, cb)
    if axes == (w_axis,):
        return (n * blocks * h, w, cb), (n, blocks, h, 1, cb)
    return (n * blocks * h * w, 1, cb), (n, blocks, h, w, cb)


def _blocked_reduce(ctx, op: str, name: str, x: Tensor, axes: tuple[int, ...], keep: bool,
                    out_shape: tuple, view: tuple, buffer_shape: tuple) -> Tensor:
    channels = x.shape[channel_axis(x._axes)]
    cb = buffer_shape[4]
    plain = not (keep or not axes)
    xv = value_of(x)
    attrs = {"x": xv, "code": reduce_kernels.OPS[op], "view": view, "buffer_shape": buffer_shape,
             "channels": channels, "axes": x._axes, "out_shape": out_shape, "plain": plain,
             # padding lanes hold f(0, ..., 0): log(0) and log(H * W) are not 0
             "rezero": op in ("log_sum", "log_sum_exp") and channels % cb != 0}
    # a node of its own kind: it writes into the plan's buffer, and a replayed
    # plan runs it on the same arrays without the op
    node = Node(name, (xv,), kind="reduce_blocked", attrs=attrs, run=run_reduce_blocked)
    if plain:
        return pending(ctx, out_shape, plain_layout(len(out_shape)), node)
    return pending(ctx, out_shape, x.layout, node, axes=x._axes)


def _reduce_blocked_into(a: dict, data: np.ndarray, blocked: np.ndarray,
                         out: np.ndarray) -> np.ndarray:
    """Reduce blocked ``data`` into the blocked ``blocked``; for a plain result
    (the ``(N, C)`` of a classifier head) copy its channels into ``out``."""
    view = a["view"]
    reduce_kernels.reduce(data.reshape(view), blocked.reshape(view[0], view[2]), a["code"])
    if a["rezero"]:
        cb, channels = blocked.shape[4], a["channels"]
        blocked[:, channels // cb, :, :, channels % cb:] = 0
    if out is blocked:
        return out
    n, blocks, h, w, lanes = blocked.shape
    if a["axes"] == "nchw":
        logical = np.moveaxis(blocked, 4, 2).reshape(n, blocks * lanes, h, w)
        logical = logical[:, :a["channels"]]
    else:
        logical = np.moveaxis(blocked, 1, 3).reshape(n, h, w, blocks * lanes)
        logical = logical[..., :a["channels"]]
    np.copyto(out, logical.reshape(a["out_shape"]))
    return out


def _reduce_buffers(a: dict, out: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
    """The blocked result's array and the output's: the same for a blocked result."""
    if not a["plain"]:
        out = aligned_empty(a["buffer_shape"]) if out is None else out
        return out, out
    return aligned_empty(a["buffer_shape"]), aligned_empty(a["out_shape"]) if out is None else out


def run_reduce_blocked(ctx: "Context", node: Node, value: Value,
                       out: np.ndarray | None) -> np.ndarray:
    """A spatial reduction of blocked data, into ``out`` if given."""
    a = node.attrs
    blocked, out = _reduce_buffers(a, out)
    ctx.launcher.launch(_reduce_blocked_into, a, a["x"]._materialize(), blocked, out)
    return out


def bind_reduce_blocked(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The call :func:`run_reduce_blocked` just made, bound to its arrays (a
    blocked scratch of its own for a plain result)."""
    a = node.attrs
    x = a["x"]
    if x._data is None:
        return None
    if not a["plain"] and not a["rezero"]:
        # the compiled kernel itself, not the checking wrapper around it (a
        # 2048 x 7 x 7 mean: ~3 us of checks and reshapes against ~9 us)
        view = a["view"]
        kernel, args = reduce_kernels.reduce_call(x._data.reshape(view),
                                                  result.reshape(view[0], view[2]), a["code"])
        return Binding(kernel, args, ((x, x._data),), (), result, ctx.num_threads)
    blocked, out = _reduce_buffers(a, result)
    return Binding(_reduce_blocked_into, (a, x._data, blocked, out), ((x, x._data),), (),
                   result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_reduce_blocked.bind = bind_reduce_blocked

register_kind(NodeKind("reduce_blocked", writes_into_buffer=True))


def _reduce(op: str, x, axes, keep_dimensions) -> Tensor:
    name = f"reduce_{op}"
    ctx = context_of(name, x)
    x = as_tensor(ctx, x, name, "input", DTYPES[op])
    axes = axes_arg(name, axes, x.ndim)
    keep = _bool_arg(name, "keep_dimensions", keep_dimensions)
    out_shape = _reduced_shape(x.shape, axes, keep)
    # math.prod, not np.prod: ~7 us of a 50 us eager call on small inputs
    count = math.prod(x.shape[a] for a in axes)
    if count == 0 and x.dtype != FLOAT32 and op in ("max", "min"):
        raise JitnnValueError(f"{name}: an integer maximum or minimum over no element "
                              f"(axes {list(axes)} of input {x.shape}) has no value")
    if x.dtype != FLOAT32:
        return plain_op(ctx, name, (x,), out_shape,
                        lambda data: _integer_reduce(op, data, axes, keep), dtype=x.dtype)
    if is_blocked(x):
        spatial = _spatial_view(x, axes)
        if spatial is not None:
            return _blocked_reduce(ctx, op, name, x, axes, keep, out_shape, *spatial)
    perm, view = run_view(x.shape, axes)
    axes_tag = x._axes if x.ndim == 4 and len(out_shape) == 4 else "nchw"
    xv = value_of(x)
    attrs = {"x": xv, "code": reduce_kernels.OPS[op], "view": view, "perm": perm,
             "out_shape": out_shape}
    # writes into the plan's buffer, and a replayed plan runs the kernel on
    # the same arrays without the op (~6 us of Python a run: a third of a
    # plain 2048 x 7 x 7 mean's kernel)
    node = Node(name, (xv,), kind="reduce_plain", attrs=attrs, run=run_reduce_plain)
    return pending(ctx, out_shape, plain_layout(len(out_shape), axes_tag), node, axes=axes_tag)


def run_reduce_plain(ctx: "Context", node: Node, value: Value,
                     out: np.ndarray | None) -> np.ndarray:
    """A reduction of plain data (a blocked input read back first), into
    ``out`` if given."""
    a = node.attrs
    data = plain_buffer(a["x"])
    if a["perm"] is not None:
        data = np.ascontiguousarray(data.transpose(a["perm"]))
    if out is None or out.shape != value.shape or not out.flags.c_contiguous \
            or np.may_share_memory(out, data):
        out = aligned_empty(value.shape)
    view = a["view"]
    ctx.launcher.launch(reduce_kernels.reduce, data.reshape(view),
                        out.reshape(view[0], view[2]), a["code"])
    return out


def bind_reduce_plain(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_reduce_plain` just made, bound to its
    arrays; None when the input was transposed or read through a copy."""
    a = node.attrs
    x = a["x"]
    data = x._data
    if a["perm"] is not None or not isinstance(data, np.ndarray) \
            or layouts.block_of(x._layout) is not None or x._remake is not None:
        return None
    view = a["view"]
    kernel, args = reduce_kernels.reduce_call(data.reshape(view),
                                              result.reshape(view[0], view[2]), a["code"])
    return Binding(kernel, args, ((x, data),), (), result, ctx.num_threads)


run_reduce_plain.bind = bind_reduce_plain

register_kind(NodeKind("reduce_plain", writes_into_buffer=True))


def _make_reduction(op: str):
    def reduction(x, *, axes=None, keep_dimensions: bool = False) -> Tensor:
        return _reduce(op, x, axes, keep_dimensions)
    reduction.__name__ = reduction.__qualname__ = f"reduce_{op}"
    reduction.__doc__ = (
        f"WebNN {REDUCTIONS[op]}: the {_DESCRIPTIONS[op]} of ``x`` over ``axes`` "
        "(None: every axis; ``[]``: none; negative axes count from the end), the "
        "reduced axes kept as 1s with ``keep_dimensions``. Data types: "
        f"{', '.join(d.name for d in DTYPES[op])}. See the module docstring for the "
        "layouts.")
    return reduction


_DESCRIPTIONS = {"l1": "sum of absolute values", "l2": "square root of the sum of squares",
                 "log_sum": "natural log of the sum",
                 "log_sum_exp": "log of the sum of exponentials (max + log(sum(exp(x - max))))",
                 "max": "maximum (NaN if any is NaN)", "mean": "mean",
                 "min": "minimum (NaN if any is NaN)", "product": "product", "sum": "sum",
                 "sum_square": "sum of squares"}

reduce_l1 = _make_reduction("l1")
reduce_l2 = _make_reduction("l2")
reduce_log_sum = _make_reduction("log_sum")
reduce_log_sum_exp = _make_reduction("log_sum_exp")
reduce_max = _make_reduction("max")
reduce_mean = _make_reduction("mean")
reduce_min = _make_reduction("min")
reduce_product = _make_reduction("product")
reduce_sum = _make_reduction("sum")
reduce_sum_square = _make_reduction("sum_square")


# --- arg_min, arg_max ------------------------------------------------------------------

#: arg_min / arg_max's output types (WebNN's outputDataType)
_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))


def _arg_reduce(op: str, x, axis, keep_dimensions, output_data_type) -> Tensor:
    name = f"arg_{op}"
    ctx = context_of(name, x)
    x = as_tensor(ctx, x, name, "input", ANY_DTYPE)
    if x.ndim < 1:
        raise JitnnValueError(f"{name}: input must have rank >= 1, got a scalar")
    axis = axis_index(name, "axis", axis, x.ndim)
    keep = _bool_arg(name, "keep_dimensions", keep_dimensions)
    try:
        dtype = None if isinstance(output_data_type, bool) else np.dtype(output_data_type)
    except TypeError:
        dtype = None
    if output_data_type is None or dtype not in _INDEX_TYPES:
        raise JitnnTypeError(f"{name}: output_data_type must be 'int32' or 'int64', got "
                             f"{output_data_type!r}")
    if x.shape[axis] == 0:
        raise JitnnValueError(f"{name}: axis {axis} of input {x.shape} is empty: no index")
    out_shape = _reduced_shape(x.shape, (axis,), keep)
    function = np.argmin if op == "min" else np.argmax
    return plain_op(ctx, name, (x,), out_shape,
                    lambda data: function(data, axis=axis, keepdims=keep), dtype=dtype)


def arg_min(x, axis: int, *, keep_dimensions: bool = False,
            output_data_type: str = "int32") -> Tensor:
    """WebNN argMin: the index of the first minimum of ``x`` along ``axis``,
    as ``output_data_type`` ("int32" or "int64"); ``axis`` kept as 1 with
    ``keep_dimensions``. Any data type; NaN counts as the minimum (numpy)."""
    return _arg_reduce("min", x, axis, keep_dimensions, output_data_type)


def arg_max(x, axis: int, *, keep_dimensions: bool = False,
            output_data_type: str = "int32") -> Tensor:
    """WebNN argMax: the index of the first maximum (as :func:`arg_min`)."""
    return _arg_reduce("max", x, axis, keep_dimensions, output_data_type)


# --- cumulative_sum ----------------------------------------------------------------------

def cumulative_sum(x, axis: int, *, exclusive: bool = False,
                   reversed: bool = False) -> Tensor:  # noqa: A002 (WebNN's option name)
    """WebNN cumulativeSum: the running sum of ``x`` along ``axis``;
    ``exclusive``: each element left out of its own sum (the first is 0);
    ``reversed``: summed from the end. float32 (summed in float64, rounded
    once), int32, int64, uint32 (wrapping)."""
    op = "cumulative_sum"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "input", CUMULATIVE_DTYPES)
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: input must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, x.ndim)
    exclusive = _bool_arg(op, "exclusive", exclusive)
    backward = _bool_arg(op, "reversed", reversed)
    total = np.float64 if x.dtype == FLOAT32 else x.dtype

    def compute(data: np.ndarray) -> np.ndarray:
        if backward:
            data = np.flip(data, axis)
        out = np.cumsum(data, axis=axis, dtype=total)
        if exclusive:
            out = np.roll(out, 1, axis=axis)
            out[(slice(None),) * axis + (0,)] = 0
        return np.ascontiguousarray(np.flip(out, axis) if backward else out, dtype=x.dtype)

    def into(data: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, compute(data))

    # (into the plan's buffer: a replay runs it as one bound call, and the ops
    # reading it are bound too: a position-id computation's products)
    axes_tag = x._axes if x.ndim == 4 else "nchw"
    return plain_into_op(ctx, op, (x,), x.shape, into, dtype=x.dtype, axes=axes_tag)


# --- top_k_indices -------------------------------------------------------------------

def _top_k_order(data: np.ndarray, k: int, largest: bool) -> np.ndarray:
    """The indices of the ``k`` first elements of each row (last axis) of
    ``data`` in ONNX TopK's order: by value, equal values by index. Largest
    first: a stable ascending sort of the reversed row, read backwards (no
    negation, which would overflow the smallest integer)."""
    n = data.shape[-1]
    if not largest:
        order = np.argsort(data, axis=-1, kind="stable")
    else:
        order = (n - 1) - np.argsort(data[..., ::-1], axis=-1, kind="stable")[..., ::-1]
    return np.ascontiguousarray(order[..., :k], dtype=np.int64)


def top_k_indices_reference(x, k: int, largest: bool = True) -> np.ndarray:
    """The spec: the indices of the ``k`` largest (smallest) of each row, as
    a stable sort of the float64 values orders them."""
    return _top_k_order(np.asarray(x, np.float64), int(k), bool(largest))


def top_k_indices(x, k: int, *, largest: bool = True) -> Tensor:
    """The indices (int64) of the ``k`` largest values of ``x`` along its last
    axis, largest first (with ``largest=False``: the smallest, smallest
    first); equal values by index, as ONNX's TopK orders them; NaN counts
    as the largest value (PyTorch's topk). A sort of each row (numpy's
    stable sort): ONNX's TopK gathers its values with ``gather_elements``.
    Any data type."""
    op = "top_k_indices"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "input", ANY_DTYPE)
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: input must have rank >= 1, got a scalar")
    n = x.shape[-1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= n:
        raise JitnnValueError(f"{op}: k must be an integer from 1 to the last axis' {n}, "
                              f"got {k!r}")
    largest = _bool_arg(op, "largest", largest)
    shape = x.shape[:-1] + (int(k),)
    return plain_op(ctx, op, (x,), shape, lambda data: _top_k_order(data, int(k), largest),
                    dtype=np.int64, axes=x._axes if x.ndim == 4 else "nchw")


# --- registration --------------------------------------------------------------------

_REDUCE_LAYOUTS = "blocked or plain (blocked over H, W: read in place, blocked out if kept)"
for _op, _webnn in REDUCTIONS.items():
    register_op(OpDef(f"reduce_{_op}", globals()[f"reduce_{_op}"],
                      functools.partial(reduction_reference, _op), webnn=_webnn,
                      layouts=_REDUCE_LAYOUTS, dtypes=tuple(d.name for d in DTYPES[_op])))
for _op in ("min", "max"):
    register_op(OpDef(f"arg_{_op}", globals()[f"arg_{_op}"],
                      functools.partial(arg_reduction_reference, _op),
                      webnn=f"arg{_op.capitalize()}", layouts="plain",
                      dtypes=tuple(d.name for d in ANY_DTYPE)))
register_op(OpDef("cumulative_sum", cumulative_sum, cumulative_sum_reference,
                  webnn="cumulativeSum", layouts="plain",
                  dtypes=tuple(d.name for d in CUMULATIVE_DTYPES)))
register_op(OpDef("top_k_indices", top_k_indices, top_k_indices_reference, onnx=("TopK",),
                  layouts="plain", dtypes=tuple(d.name for d in ANY_DTYPE)))
