"""Shape ops: reshape, flatten, transpose, concat, split, expand, tile.

Every data type (float32 and jitnn's integer types: ids, masks, indices);
integer tensors stay integer and plain. reshape, flatten, transpose, split,
expand and tile give plain results. A blocked input is read back to plain
first, one counted reorder shared by every op that reads it (its plain copy
is kept with it: the parts of a split read it once), unless its buffer
already is the plain array (``(N, C, 1, 1)`` with C a multiple of the block,
as after a global pool: then reshape and flatten cost nothing).

concat along the channel axis of blocked inputs stays blocked (the channel
concat kernel: whole block rows when every input starts on a block boundary,
lane shifts otherwise); plain inputs given with them are reordered to the
first blocked input's layout (counted). Any other axis, or no blocked input,
concatenates the plain values with numpy.
"""

from __future__ import annotations

import builtins
import functools
import math
import weakref
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import concat as concat_kernels
from ..kernels import transpose as transpose_kernels
from ..kernels._config import numba_threads
from ..kernels.buffers import aligned_empty
from ..limits import check_shape, shape_arg
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import DTYPE_NAMES, FLOAT32, Node, Tensor, Value
from ._common import (ANY_DTYPE, Binding, as_tensor, axis_index, bind_view, blocked_buffer,
                      channel_axis, context_of, is_blocked, pending, plain_buffer, plain_into_op,
                      plain_layout, plain_result, value_of)
from ._movement import exact, int_list, operand

if TYPE_CHECKING:
    from ..context import Context


# --- the spec ----------------------------------------------------------------------

def reshape_reference(x, new_shape) -> np.ndarray:
    """The spec (float64, or exact integers, as every data-movement reference)."""
    return np.reshape(exact(x), tuple(new_shape))


def flatten_reference(x, start_axis: int = 1) -> np.ndarray:
    """ONNX Flatten: ``(prod(shape[:axis]), prod(shape[axis:]))``."""
    x = exact(x)
    axis = start_axis + x.ndim if start_axis < 0 else start_axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


def transpose_reference(x, permutation=None) -> np.ndarray:
    """WebNN transpose: ``permutation`` defaults to the reversed axes."""
    return np.transpose(exact(x), permutation)


def concat_reference(tensors, axis: int) -> np.ndarray:
    return np.concatenate([exact(t) for t in tensors], axis=axis)


def split_reference(x, splits, axis: int = 0) -> list[np.ndarray]:
    x = exact(x)
    size = x.shape[axis]
    sizes = [size // splits] * splits if isinstance(splits, (int, np.integer)) else splits
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def expand_reference(x, new_shape) -> np.ndarray:
    x = exact(x)
    return x + np.zeros(new_shape, x.dtype)


def tile_reference(x, repetitions) -> np.ndarray:
    """Output element ``i`` is input element ``i % shape`` on every axis."""
    x = exact(x)
    index = np.ix_(*[np.arange(d * r) % d for d, r in zip(x.shape, repetitions)])
    return x[index] if x.ndim else x.copy()


# --- the ops ---------------------------------------------------------------------------

def reshape(x, new_shape: Sequence[int]) -> Tensor:
    """The values of ``x`` in row-major order with shape ``new_shape`` (one
    entry may be -1: the size that keeps the element count)."""
    op = "reshape"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    try:
        dims = [d for d in new_shape]
    except TypeError:
        raise JitnnTypeError(f"{op}: new_shape must be a sequence of ints, got {new_shape!r}") \
            from None
    if not all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in dims):
        raise JitnnTypeError(f"{op}: new_shape must be a sequence of ints, got {new_shape!r}")
    dims = [int(d) for d in dims]
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise JitnnValueError(
            f"{op}: new_shape entries must be >= 0, with at most one -1, got {tuple(dims)}")
    # element counts in Python ints: numpy's int64 product wraps around (so
    # [4, 2**62 + 1] would have "4" elements)
    known = math.prod(d for d in dims if d != -1)
    if -1 in dims:
        if known == 0 or x.size % known:
            raise JitnnValueError(
                f"{op}: cannot infer the -1 in {tuple(dims)} for x {x.shape} ({x.size} elements)")
        dims[dims.index(-1)] = x.size // known
    shape = tuple(dims)
    if math.prod(shape) != x.size:
        raise JitnnValueError(
            f"{op}: new_shape {shape} has {math.prod(shape)} elements but "
            f"x {x.shape} has {x.size}")
    return _reshaped(ctx, op, x, shape)


#: an integer tensor (ids, a mask) of at most this many bytes is reshaped by a
#: copy into the plan's buffer (a bound call of ~1 us in a replay, and the ops
#: reading it read a stable array, so they are bound too: a padding mask's
#: reshapes); a float32 or larger one by a view of its values (no copy, and a
#: product reads through it: jitnn/ops/matmul.py)
_COPIED_RESHAPE_BYTES = 1 << 14


def _reshaped(ctx: Context, op: str, x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``x``'s values in row-major order as ``shape`` (the same count)."""
    if x.dtype != FLOAT32 and x.size * x.dtype.itemsize <= _COPIED_RESHAPE_BYTES:
        return plain_into_op(ctx, op, (x,), shape, _copy_reshaped, dtype=x.dtype)
    return _bound_as_view(plain_result(ctx, shape, _ViewAs(shape), x, op))


def _bound_as_view(result: Tensor) -> Tensor:
    """``result``, a view of its input, bound as one in a replay (no call)."""
    node = result._v._node
    if node is not None:                 # (None: the eager policy ran it already)
        node.run.bind = bind_view
    return result


class _ViewAs:
    """A reshape's compute: ``data.reshape(shape)`` (a split's part:
    ``data[index]``), the same view object at every run while ``data`` is the
    same array (a plan's buffer, in a
    replay), so the steps reading it can be bound (a binding reads the array
    of its last run: jitnn/executor.py). Weak references only: nothing is
    kept alive for the next run."""

    __slots__ = ("shape", "index", "data", "view")

    def __init__(self, shape: tuple[int, ...], index: tuple | None = None):
        self.shape, self.index = shape, index      # index: a split's part, data[index]
        self.data = self.view = None

    def __call__(self, data: np.ndarray) -> np.ndarray:
        view = None if self.view is None else self.view()
        if view is None or self.data() is not data:
            view = data.reshape(self.shape) if self.index is None else data[self.index]
            self.data, self.view = weakref.ref(data), weakref.ref(view)
        return view


def _copy_reshaped(data: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out.reshape(data.shape), data)


def flatten(x, start_axis: int = 1) -> Tensor:
    """ONNX Flatten: a 2-D ``(prod(shape[:start_axis]), prod(shape[start_axis:]))``
    view of ``x`` (``start_axis`` in ``[-rank, rank]``)."""
    op = "flatten"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    axis = axis_index(op, "start_axis", start_axis, x.ndim, end=True)
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return _reshaped(ctx, op, x, shape)


def transpose(x, permutation: Sequence[int] | None = None) -> Tensor:
    """``x`` with its axes permuted: output axis ``i`` is input axis
    ``permutation[i]`` (WebNN; default: the axes reversed)."""
    op = "transpose"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    if permutation is None:
        perm = tuple(range(x.ndim))[::-1]
    else:
        try:
            perm = tuple(permutation)
        except TypeError:
            raise JitnnTypeError(
                f"{op}: permutation must be a sequence of ints, got {permutation!r}") from None
        if not all(isinstance(p, (int, np.integer)) and not isinstance(p, bool) for p in perm):
            raise JitnnTypeError(f"{op}: permutation must be a sequence of ints, got {perm!r}")
        perm = tuple(int(p) for p in perm)
        if sorted(perm) != list(range(x.ndim)):
            raise JitnnValueError(
                f"{op}: permutation must order the axes 0..{x.ndim - 1} of x {x.shape} "
                f"each once, got {perm}")
    shape = tuple(x.shape[p] for p in perm)
    dims = transpose_kernels.swap_dims(x.shape, perm) if x.dtype == FLOAT32 else None
    if dims is not None and not is_blocked(x):
        # two groups of axes swapped (tokens <-> channels, heads): the tiled
        # kernel, into the plan's buffer (a replay binds it)
        return plain_into_op(ctx, op, (x,), shape, _swap_into(dims), dtype=x.dtype)
    # any other permutation: numpy's strided copy, into the plan's buffer too
    return plain_into_op(ctx, op, (x,), shape, _permute_into(perm), dtype=x.dtype)


@functools.cache
def _permute_into(perm: tuple[int, ...]):
    """``into(x, out)``: ``out = x.transpose(perm)``."""
    def into(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x.transpose(perm))
    into.__name__ = into.__qualname__ = "transpose_into"
    return into


@functools.cache
def _swap_into(dims: tuple[int, int, int, int]):
    """``into(x, out)`` of :func:`plain_into_op`: ``kernels.transpose`` for
    these dims on the numba thread count of the call."""
    def into(x: np.ndarray, out: np.ndarray) -> None:
        transpose_kernels.transpose_swap(x, out, dims, numba_threads())
    into.__name__ = into.__qualname__ = "transpose_swap_into"
    return into


def concat(inputs: Sequence, axis: int) -> Tensor:
    """``inputs`` joined along ``axis`` (WebNN concat): one data type, equal
    ranks, equal sizes on every other axis (host arrays take the first
    tensor's type). Along the channels of blocked inputs the result is
    blocked (see the module docstring); otherwise plain."""
    op = "concat"
    if isinstance(inputs, (Tensor, np.ndarray)) or not isinstance(inputs, Sequence):
        raise JitnnTypeError(f"{op}: inputs must be a list or tuple of tensors, got "
                             f"{type(inputs).__name__}")
    if not inputs:
        raise JitnnValueError(f"{op}: needs at least one tensor")
    ctx = context_of(op, *inputs)
    lead_dtype = next((t.dtype for t in inputs if isinstance(t, Tensor)), None)
    items = [operand(ctx, t, op, f"inputs[{i}]", lead_dtype) for i, t in enumerate(inputs)]
    dtype = items[0].dtype
    for i, t in enumerate(items):
        if t.dtype != dtype:
            raise JitnnTypeError(f"{op}: inputs[{i}] is {t.dtype} but inputs[0] is {dtype}: "
                                 "every input must have the same data type")
    rank = items[0].ndim
    if rank < 1:
        raise JitnnValueError(f"{op}: inputs must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, rank)
    first = items[0].shape
    for i, t in enumerate(items):
        if t.ndim != rank or any(t.shape[d] != first[d] for d in range(rank) if d != axis):
            raise JitnnValueError(
                f"{op}: inputs[{i}] has shape {t.shape} but inputs[0] has {first}: every "
                f"input must have rank {rank} and the same sizes except on axis {axis}")
    shape = first[:axis] + (sum(t.shape[axis] for t in items),) + first[axis + 1:]
    # the closures read the Values: handles they kept would count as the
    # caller holding every input (each kept in an array of its own)
    sources = [value_of(t) for t in items]

    lead = next((t for t in items if is_blocked(t)), None)
    if (lead is not None and rank == 4 and axis == channel_axis(lead._axes)
            and min(min(t.shape) for t in items) > 0):
        block, axes = layouts.block_of(lead.layout), lead._axes
        channels = [t.shape[axis] for t in items]
        n, c = shape[0], shape[axis]
        h, w = (shape[2], shape[3]) if axes == "nchw" else (shape[1], shape[2])

        attrs = {"sources": tuple(sources), "channels": channels, "block": block,
                 "axes": axes, "out_shape": layouts.blocked_shape((n, c, h, w), block)}
        # a node of its own kind: it writes into the plan's buffer, and a
        # replayed plan runs it as one bound call
        node = Node(op, tuple(sources), kind="concat_channels", attrs=attrs,
                    run=run_concat_channels)
        return pending(ctx, shape, lead.layout, node, axes=axes)

    axes = lead._axes if lead is not None and rank == 4 else \
        (items[0]._axes if rank == 4 else "nchw")

    # into the plan's buffer: a replay binds it
    return plain_into_op(ctx, op, items, shape, _concat_into(axis), dtype=dtype, axes=axes)


@functools.cache
def _concat_into(axis: int):
    """``into(*parts, out)``: the parts joined along ``axis`` into ``out``."""
    def into(*arrays: np.ndarray) -> None:
        np.concatenate(arrays[:-1], axis=axis, out=arrays[-1])
    into.__name__ = into.__qualname__ = "concat_into"
    return into


def run_concat_channels(ctx: "Context", node: Node, value: Value,
                        out: np.ndarray | None) -> np.ndarray:
    """A concat along the channels of blocked data, into ``out`` if given."""
    a = node.attrs
    blocked = [blocked_buffer(ctx, v, a["block"], a["axes"]) for v in a["sources"]]
    if out is None:
        out = aligned_empty(a["out_shape"])
    ctx.launcher.launch(concat_kernels.concat_channels, blocked, a["channels"], out)
    return out


def bind_concat_channels(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The copies :func:`run_concat_channels` just made, bound to their
    arrays; None when an input was reordered for it (a copy made every run)."""
    a = node.attrs
    sources = a["sources"]
    if any(v._data is None or layouts.block_of(v._layout) != a["block"] or v._axes != a["axes"]
           for v in sources):
        return None
    kernel, args = concat_kernels.bind_concat_channels([v._data for v in sources],
                                                       a["channels"], result, ctx.num_threads)
    return Binding(kernel, args, tuple((v, v._data) for v in sources), (), result,
                   ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_concat_channels.bind = bind_concat_channels


def _concat_places(node: Node, value: Value) -> list | None:
    """Where each input starts in a channel concat's blocked output, in
    elements, when the inputs' own kernels can write there instead: one image
    (its channel blocks are contiguous ranges of the output), every input
    blocked as the output is, each but the last a whole number of blocks."""
    a = node.attrs
    n, _, h, w, block = a["out_shape"]
    sources = a["sources"]
    if n != 1 or any(layouts.block_of(v._layout) != a["block"] or v._axes != a["axes"]
                     for v in sources) or any(c % block for c in a["channels"][:-1]):
        return None
    offsets = np.cumsum([0] + list(a["channels"][:-1])) // block * (h * w * block)
    return [(v, int(offset)) for v, offset in zip(sources, offsets)]


register_kind(NodeKind("concat_channels", writes_into_buffer=True,
                       places_inputs=_concat_places))


def split(x, splits, axis: int = 0) -> list[Tensor]:
    """``x`` cut along ``axis`` into ``splits`` equal parts (an int that divides
    the axis) or into parts of the sizes ``splits`` (ints >= 1 that sum to
    the axis): WebNN split; a list of plain tensors, in order."""
    op = "split"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: x must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, x.ndim)
    size = x.shape[axis]
    if isinstance(splits, (int, np.integer)) and not isinstance(splits, bool):
        count = int(splits)
        if count < 1 or size % count:
            raise JitnnValueError(
                f"{op}: splits={count} must be >= 1 and divide axis {axis} of x {x.shape} "
                f"(size {size}) into equal parts")
        sizes = (size // count,) * count
    else:
        try:
            sizes = int_list(op, "splits", splits, minimum=1)
        except JitnnTypeError:
            raise JitnnTypeError(f"{op}: splits must be an int or a sequence of ints, got "
                                 f"{splits!r}") from None
        if not sizes or sum(sizes) != size:
            raise JitnnValueError(
                f"{op}: splits {sizes} must sum to axis {axis} of x {x.shape} (size {size}), "
                f"got {sum(sizes)}")
    parts, start = [], 0
    # a part is a contiguous range of x when every axis before ``axis`` has size 1
    contiguous = math.prod(x.shape[:axis]) == 1
    for part in sizes:
        index = (builtins.slice(None),) * axis + (builtins.slice(start, start + part),)
        shape = x.shape[:axis] + (part,) + x.shape[axis + 1:]
        if contiguous:
            parts.append(_bound_as_view(plain_result(ctx, shape, _ViewAs(shape, index), x, op)))
        else:
            # copied into the plan's buffer (a replay binds it, and the ops
            # reading it: LeViT's Q, K and V, split off one projection)
            parts.append(plain_into_op(ctx, op, (x,), shape,
                                       _part_into(axis, start, start + part), dtype=x.dtype))
        start += part
    return parts


@functools.cache
def _part_into(axis: int, start: int, stop: int) -> Callable:
    """``into(x, out)``: ``out = x[..., start:stop, ...]`` along ``axis`` (a
    split's part that is not one range of ``x``)."""
    index = (builtins.slice(None),) * axis + (builtins.slice(start, stop),)

    def into(x: np.ndarray, out: np.ndarray) -> None:
        np.copyto(out, x[index])
    into.__name__ = into.__qualname__ = "split_part_into"
    return into


def _broadcast_shape(op: str, shape: tuple[int, ...], new_shape: tuple[int, ...]
                    ) -> tuple[int, ...]:
    """numpy's (bidirectional) broadcast of two shapes, or a JitnnValueError."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(shape, new_shape))
    except ValueError:
        raise JitnnValueError(
            f"{op}: x {shape} and new_shape {new_shape} do not broadcast (numpy rules: "
            "aligned from the right, each pair of sizes equal or one of them 1)") from None


def expand(x, new_shape: Sequence[int]) -> Tensor:
    """``x`` broadcast with ``new_shape`` (WebNN expand: bidirectional, numpy's
    rules; the result has the broadcast of both shapes); a plain result."""
    op = "expand"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    dims = shape_arg(op, "new_shape", new_shape)
    shape = _broadcast_shape(op, x.shape, dims)
    # into the plan's buffer: a bound call in a replay (np.copyto broadcasts)
    return plain_into_op(ctx, op, (x,), shape, _expand_into, dtype=x.dtype)


def _expand_into(data: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, data)


def tile(x, repetitions: Sequence[int]) -> Tensor:
    """``x`` repeated ``repetitions[i]`` times along axis ``i`` (WebNN tile: one
    int >= 1 per axis); a plain result."""
    op = "tile"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    reps = int_list(op, "repetitions", repetitions, length=x.ndim, minimum=1)
    shape = tuple(d * r for d, r in zip(x.shape, reps))
    check_shape(op, "the result's shape", shape)
    return plain_result(ctx, shape, lambda data: np.tile(data, reps).reshape(shape), x, op)


_PLAIN = "plain (a blocked input is read back once)"

register_op(OpDef("reshape", reshape, reshape_reference, webnn="reshape", onnx=("Reshape",),
                  layouts=_PLAIN + "; free when the blocked buffer is the plain array",
                  dtypes=DTYPE_NAMES))
register_op(OpDef("flatten", flatten, flatten_reference, onnx=("Flatten",),
                  layouts=_PLAIN + "; free when the blocked buffer is the plain array",
                  dtypes=DTYPE_NAMES))
register_op(OpDef("transpose", transpose, transpose_reference, webnn="transpose",
                  onnx=("Transpose",), layouts=_PLAIN, dtypes=DTYPE_NAMES))
register_op(OpDef("concat", concat, concat_reference, webnn="concat", onnx=("Concat",),
                  layouts="blocked along the channels of blocked inputs, else plain",
                  dtypes=DTYPE_NAMES))
register_op(OpDef("split", split, split_reference, webnn="split", onnx=("Split",),
                  layouts=_PLAIN, dtypes=DTYPE_NAMES))
register_op(OpDef("expand", expand, expand_reference, webnn="expand", onnx=("Expand",),
                  layouts=_PLAIN, dtypes=DTYPE_NAMES))
register_op(OpDef("tile", tile, tile_reference, webnn="tile", onnx=("Tile",),
                  layouts=_PLAIN, dtypes=DTYPE_NAMES))
