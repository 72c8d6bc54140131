"""resample2d: WebNN resample2d, nearest-neighbour or bilinear resampling of
two axes of a 4-D float32 tensor.

Options (WebNN's): ``mode`` ``"nearest-neighbor"`` or ``"linear"``;
``scales``: two floats > 0 (WebNN's ``float``: each is rounded to float32
first), default ``[1.0, 1.0]``; ``sizes``: two ints >= 1, which override
``scales`` (both are validated when both are given, as the spec's steps
do); ``axes``: the two distinct axes they apply to, in order, default
``[2, 3]`` (H and W of NCHW; ``[1, 2]`` for NHWC; any pair is allowed).
Output size along ``axes[i]``: ``sizes[i]``, else ``floor(size *
scales[i])`` (which must be >= 1).

Sampling (what WebNN's implementations and its conformance tests do; ONNX
Resize with ``coordinate_transformation_mode = "half_pixel"``): output
index ``o`` of an axis of input size ``n`` and output size ``m`` reads the
input coordinate ``x = (o + 0.5) * n / m - 0.5`` clamped to ``[0, n - 1]``;
the scale in that formula is always ``m / n``, the ratio of the sizes, as in
WPT's resample2d-nearest-half-pixel cases (``scales=[1, 1.5]`` on 3 columns
gives 4, sampled at ``n / m = 3 / 4``). Nearest neighbour takes index
``ceil(x - 0.5)`` (``nearest_mode = "round_prefer_floor"``: a tie takes the
smaller index); linear interpolates between ``floor(x)`` and the next index
(``align_corners`` false, no antialiasing when downsampling).

A blocked input resampled along its spatial axes (H and W, in either order)
stays blocked: one kernel (kernels/resample.py) reads and writes
``nChw{b}c``, parallel over (n, channel block, output rows). A plain NCHW
input with at least half a block of channels goes through blocks and back
(two counted reorders; the result is plain); a plain input otherwise runs
the same kernel where it lies (NCHW with axes {2, 3} as ``nChw1c``, NHWC
with axes {1, 2} as one block of C channels); other axes move to the end
first (a copy each way), and a blocked input resampled along N or C is read
back first (one counted reorder).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import layout as layout_kernels
from ..kernels import resample as resample_kernels
from ..kernels.buffers import aligned_empty
from ..limits import MAX_DIM, is_int, is_number
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import (as_tensor, blocked_buffer, context_of, is_blocked, plain_buffer,
                      plain_layout, value_of)

if TYPE_CHECKING:
    from ..context import Context

MODES = ("nearest-neighbor", "linear")


def _pair(op: str, name: str, value: object, check) -> tuple:
    try:
        items = tuple(value)  # type: ignore[arg-type]
    except TypeError:
        items = None
    if items is None or isinstance(value, (str, bytes)) or not all(map(check, items)):
        kind = "ints" if check is is_int else "numbers"
        raise JitnnTypeError(f"{op}: {name} must be a sequence of 2 {kind}, got {value!r}")
    if len(items) != 2:
        raise JitnnValueError(f"{op}: {name} must have 2 entries (one per resampled axis), "
                              f"got {len(items)}: {list(items)}")
    return items


def geometry(op: str, shape: tuple[int, ...], scales, sizes, axes) -> tuple[tuple, tuple]:
    """``(axes, output sizes)``: the two axes (ints in ``[0, 4)``) and their
    output sizes, validated (WebNN's rules; see the module docstring)."""
    axes = tuple(int(a) for a in _pair(op, "axes", axes, is_int))
    if not all(0 <= a < len(shape) for a in axes) or axes[0] == axes[1]:
        raise JitnnValueError(f"{op}: axes must be two distinct axes in [0, {len(shape) - 1}], "
                              f"got {list(axes)}")
    factors = None
    if scales is not None:
        given = _pair(op, "scales", scales, is_number)
        with np.errstate(over="ignore"):
            factors = tuple(float(np.float32(s)) for s in given)      # WebNN's float
        if not all(0 < f < math.inf for f in factors):
            raise JitnnValueError(f"{op}: scales must be finite and > 0 (as float32), got "
                                  f"{list(given)}")
    if sizes is not None:
        out = tuple(int(s) for s in _pair(op, "sizes", sizes, is_int))
        if not all(1 <= s <= MAX_DIM for s in out):
            raise JitnnValueError(f"{op}: sizes must be in [1, {MAX_DIM}], got {list(out)}")
    else:
        factors = factors or (1.0, 1.0)
        out = tuple(math.floor(shape[a] * f) for a, f in zip(axes, factors))
        if not all(1 <= s <= MAX_DIM for s in out):
            raise JitnnValueError(
                f"{op}: scales {list(factors)} give output sizes {list(out)} along axes "
                f"{list(axes)} of x {shape} (floor(size * scale)); each must be in "
                f"[1, {MAX_DIM}]")
    for a in axes:
        if shape[a] == 0:
            raise JitnnValueError(f"{op}: axis {a} of x {shape} is empty: nothing to resample")
    return axes, out


# --- the spec ----------------------------------------------------------------------

def resample2d_reference(x, *, mode: str = "nearest-neighbor", scales=None, sizes=None,
                         axes=(2, 3)) -> np.ndarray:
    """The spec, float64: along each axis, output ``o`` samples the
    half-pixel coordinate ``(o + 0.5) * n / m - 0.5`` clamped to ``[0, n -
    1]``, at index ``ceil(coordinate - 0.5)`` or linearly."""
    x = np.asarray(x, np.float64)
    axes, out_sizes = geometry("resample2d", x.shape, scales, sizes, axes)
    for axis, m in zip(axes, out_sizes):
        n = x.shape[axis]
        coordinate = np.clip((np.arange(m) + 0.5) * n / m - 0.5, 0.0, n - 1)
        if mode == "nearest-neighbor":
            x = np.take(x, np.ceil(coordinate - 0.5).astype(np.int64), axis=axis)
            continue
        first = np.floor(coordinate).astype(np.int64)
        fraction = coordinate - first
        shape = [1] * x.ndim
        shape[axis] = m
        fraction = fraction.reshape(shape)
        x = (np.take(x, first, axis=axis) * (1 - fraction)
             + np.take(x, np.minimum(first + 1, n - 1), axis=axis) * fraction)
    return x


# --- the op ------------------------------------------------------------------------------

def resample2d(x, *, mode: str = "nearest-neighbor", scales=None, sizes=None,
               axes=(2, 3)) -> Tensor:
    """WebNN resample2d: ``x`` (4-D float32) resampled along ``axes`` (two
    distinct axes, default ``[2, 3]``) to ``sizes``, or ``floor(size *
    scales)`` (``scales`` default ``[1.0, 1.0]``), by ``mode``
    ``"nearest-neighbor"`` or ``"linear"`` (half-pixel sampling; see the
    module docstring). A blocked input resampled along H and W stays
    blocked; otherwise a plain result."""
    op = "resample2d"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    if x.ndim != 4:
        raise JitnnValueError(f"{op}: x must be 4-D, got shape {x.shape}")
    if mode not in MODES:
        raise JitnnValueError(f"{op}: mode must be one of {MODES}, got {mode!r}")
    axes, out_sizes = geometry(op, x.shape, scales, sizes, axes)
    shape = list(x.shape)
    for a, m in zip(axes, out_sizes):
        shape[a] = m
    return _lowered(ctx, x, tuple(shape), tuple(sorted(axes)), mode == "linear")


def _lowered(ctx: Context, x: Tensor, shape: tuple[int, ...], axes: tuple[int, int],
             linear: bool) -> Tensor:
    """The pending result of the kernel on ``x`` (axes sorted): on its
    blocked buffer when it is blocked with ``axes`` its spatial ones, else on
    its plain values."""
    op = "resample2d"
    spatial = (2, 3) if x._axes == "nchw" else (1, 2)
    oh, ow = shape[spatial[0]], shape[spatial[1]]
    # the closures read x's Value, not the handle (see _common.plain_result)
    xv = value_of(x)

    def run(x5: np.ndarray, out5: np.ndarray) -> None:
        ctx.launcher.launch(resample_kernels.resample2d, x5, out5, linear)

    if is_blocked(x) and axes == spatial:
        def produce_blocked() -> np.ndarray:
            data = xv._materialize()
            out = aligned_empty(data.shape[:2] + (oh, ow, data.shape[4]))
            run(data, out)
            return out
        return Tensor(ctx, shape, x.layout, producer=produce_blocked, axes=x._axes,
                      inputs=(x,), op=op)

    p, q = axes

    block = ctx.block
    if not is_blocked(x) and x._axes == "nchw" and axes == (2, 3) and 2 * shape[1] >= block:
        # plain NCHW: converted to blocks and back (two counted reorders) runs
        # 3x faster than the kernel on one-lane blocks (1x512x28x28 x2
        # nearest, 1 thread: 0.9 against 2.7 ms); the result stays plain
        def produce_via_blocks() -> np.ndarray:
            data = blocked_buffer(ctx, xv, block, "nchw")
            out = aligned_empty(data.shape[:2] + (oh, ow, block))
            run(data, out)
            result = aligned_empty(shape)
            ctx.launcher.reorder(layout_kernels.blocked_to_nchw, out, result)
            return result
        return Tensor(ctx, shape, plain_layout(4, "nchw"), producer=produce_via_blocks,
                      inputs=(x,), op=op)

    def produce_plain() -> np.ndarray:
        data = plain_buffer(xv)          # a blocked x: read back (counted)
        if axes == (1, 2):               # NHWC: one block of all C channels
            n, h, w, c = data.shape
            out = aligned_empty(shape)
            run(data.reshape(n, 1, h, w, c), out.reshape(n, 1, shape[1], shape[2], c))
            return out
        moved = data if axes == (2, 3) else np.ascontiguousarray(
            np.moveaxis(data, (p, q), (2, 3)))
        out = aligned_empty(moved.shape[:2] + (shape[p], shape[q]))
        run(moved.reshape(moved.shape + (1,)), out.reshape(out.shape + (1,)))   # nChw1c
        if axes == (2, 3):
            return out
        result = aligned_empty(shape)
        np.copyto(result, np.moveaxis(out, (2, 3), (p, q)))
        return result
    return Tensor(ctx, shape, plain_layout(4, x._axes), producer=produce_plain, axes=x._axes,
                  inputs=(x,), op=op)


register_op(OpDef("resample2d", resample2d, resample2d_reference, webnn="resample2d",
                  layouts="blocked or plain, as its input (plain when it resamples N or C)"))
