"""Shape ops: reshape, flatten, transpose (plain layout) and concat.

reshape, flatten and transpose give plain results. A blocked input is read
back to plain first, one counted reorder, unless its buffer already is the
plain array (``(N, C, 1, 1)`` with C a multiple of the block, as after a
global pool: then reshape and flatten cost nothing).

concat along the channel axis of blocked inputs stays blocked (the channel
concat kernel: whole block rows when every input starts on a block boundary,
lane shifts otherwise); plain inputs given with them are reordered to the
first blocked input's layout (counted). Any other axis, or no blocked input,
concatenates the plain values with numpy.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import concat as concat_kernels
from ..kernels.buffers import aligned_empty
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import (as_tensor, axis_index, blocked_buffer, channel_axis, context_of,
                      is_blocked, plain_buffer, plain_layout, plain_result, value_of)


# --- the spec ----------------------------------------------------------------------

def reshape_reference(x, new_shape) -> np.ndarray:
    return np.reshape(np.asarray(x, np.float64), tuple(new_shape))


def flatten_reference(x, start_axis: int = 1) -> np.ndarray:
    """ONNX Flatten: ``(prod(shape[:axis]), prod(shape[axis:]))``."""
    x = np.asarray(x, np.float64)
    axis = start_axis + x.ndim if start_axis < 0 else start_axis
    return x.reshape(int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:])))


def transpose_reference(x, permutation=None) -> np.ndarray:
    """WebNN transpose: ``permutation`` defaults to the reversed axes."""
    return np.transpose(np.asarray(x, np.float64), permutation)


def concat_reference(tensors, axis: int) -> np.ndarray:
    return np.concatenate([np.asarray(t, np.float64) for t in tensors], axis=axis)


# --- the ops ---------------------------------------------------------------------------

def reshape(x, new_shape: Sequence[int]) -> Tensor:
    """The values of ``x`` in row-major order with shape ``new_shape`` (one
    entry may be -1: the size that keeps the element count)."""
    op = "reshape"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
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
    return plain_result(ctx, shape, lambda data: data.reshape(shape), x, op)


def flatten(x, start_axis: int = 1) -> Tensor:
    """ONNX Flatten: a 2-D ``(prod(shape[:start_axis]), prod(shape[start_axis:]))``
    view of ``x`` (``start_axis`` in ``[-rank, rank]``)."""
    op = "flatten"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    axis = axis_index(op, "start_axis", start_axis, x.ndim, end=True)
    shape = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    return plain_result(ctx, shape, lambda data: data.reshape(shape), x, op)


def transpose(x, permutation: Sequence[int] | None = None) -> Tensor:
    """``x`` with its axes permuted: output axis ``i`` is input axis
    ``permutation[i]`` (WebNN; default: the axes reversed)."""
    op = "transpose"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
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
    return plain_result(ctx, shape, lambda data: np.ascontiguousarray(data.transpose(perm)),
                        x, op)


def concat(tensors: Sequence, axis: int) -> Tensor:
    """``tensors`` joined along ``axis`` (WebNN concat): equal ranks, equal
    sizes on every other axis. Along the channels of blocked inputs the result
    is blocked (see the module docstring); otherwise plain."""
    op = "concat"
    if isinstance(tensors, (Tensor, np.ndarray)) or not isinstance(tensors, Sequence):
        raise JitnnTypeError(f"{op}: tensors must be a list or tuple of tensors, got "
                             f"{type(tensors).__name__}")
    if not tensors:
        raise JitnnValueError(f"{op}: needs at least one tensor")
    ctx = context_of(op, *tensors)
    items = [as_tensor(ctx, t, op, f"tensors[{i}]") for i, t in enumerate(tensors)]
    rank = items[0].ndim
    if rank < 1:
        raise JitnnValueError(f"{op}: tensors must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, rank)
    first = items[0].shape
    for i, t in enumerate(items):
        if t.ndim != rank or any(t.shape[d] != first[d] for d in range(rank) if d != axis):
            raise JitnnValueError(
                f"{op}: tensors[{i}] has shape {t.shape} but tensors[0] has {first}: every "
                f"tensor must have rank {rank} and the same sizes except on axis {axis}")
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

        def produce_blocked() -> np.ndarray:
            inputs = [blocked_buffer(ctx, v, block, axes) for v in sources]
            out = aligned_empty(layouts.blocked_shape((n, c, h, w), block))
            ctx.launcher.launch(concat_kernels.concat_channels, inputs, channels, out)
            return out
        return Tensor(ctx, shape, lead.layout, producer=produce_blocked, axes=axes,
                      inputs=tuple(items), op=op)

    axes = lead._axes if lead is not None and rank == 4 else \
        (items[0]._axes if rank == 4 else "nchw")

    def produce_plain() -> np.ndarray:
        return np.concatenate([plain_buffer(v) for v in sources], axis=axis)
    return Tensor(ctx, shape, plain_layout(rank, axes), producer=produce_plain, axes=axes,
                  inputs=tuple(items), op=op)

register_op(OpDef("reshape", reshape, reshape_reference, webnn="reshape", onnx=("Reshape",)))
register_op(OpDef("flatten", flatten, flatten_reference, onnx=("Flatten",)))
register_op(OpDef("transpose", transpose, transpose_reference, webnn="transpose",
                  onnx=("Transpose",)))
register_op(OpDef("concat", concat, concat_reference, webnn="concat", onnx=("Concat",),
                  layouts="blocked along channels, else plain"))
