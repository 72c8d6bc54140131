"""Pooling: max_pool2d, average_pool2d (WebNN's options, plus ONNX's
``count_include_pad``) and global_average_pool2d.

A blocked input stays blocked (same block); a plain input is pooled where it
lies, without a reorder: plain NCHW is ``nChw1c`` (``x[..., None]``) and plain
NHWC is one block of C channels (``(N, 1, H, W, C)``), both layouts the kernels
read.

Output size (WebNN): ``floor((in + pad_begin + pad_end - ((k - 1) * d + 1)) / s) + 1``,
or with ``ceil`` for ``rounding_type="ceil"``. That is the plain ceil formula of
the WebNN spec: unlike ONNX and PyTorch it keeps a last window that starts in
the end padding. To get ONNX's size, pass it as ``output_sizes`` (WebNN accepts
the floor or the ceil size per axis). A window with no element of the input
gives 0 (as TFLite does; the WebNN spec leaves it open, webnn issue 935).
Padding never takes part in a max; the average divides by the number of
window elements inside the input, or with ``count_include_pad=True`` inside the
explicitly padded input (ONNX; elements past the explicit padding never count).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from .. import layouts
from ..context import Context
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import pool as pool_kernels
from ..kernels.conv2d import aligned_empty
from ..tensor import Tensor
from ._common import (as_tensor, context_of, int_pair, is_blocked, padding4,
                      plain_buffer, plain_layout, value_of)

ROUNDING_TYPES = ("floor", "ceil")


def pool2d_output_size(size: int, window: int, stride: int, dilation: int, pad_begin: int,
                       pad_end: int, rounding_type: str = "floor") -> int:
    """WebNN: ``round((size + pad_begin + pad_end - ((window - 1) * dilation + 1)) / stride) + 1``
    with ``round`` floor or ceil (may be < 1: the window does not fit)."""
    span = size + pad_begin + pad_end - ((window - 1) * dilation + 1)
    if span < 0:
        return span // stride + 1
    return (span // stride if rounding_type == "floor" else -(-span // stride)) + 1


# --- the spec ----------------------------------------------------------------------

def _pool_reference(kind: str, x, window_dimensions, strides, dilations, padding,
                    rounding_type, output_sizes, layout, count_include_pad) -> np.ndarray:
    xs = np.asarray(x, np.float64)
    if layout == "nhwc":
        xs = xs.transpose(0, 3, 1, 2)
    n, c, h, w = xs.shape
    kh, kw = (h, w) if window_dimensions is None else int_pair(kind, "window", window_dimensions, 1)
    sh, sw = int_pair(kind, "strides", strides, 1)
    dh, dw = int_pair(kind, "dilations", dilations, 1)
    top, bottom, left, right = padding4(kind, padding)
    if output_sizes is None:
        oh = pool2d_output_size(h, kh, sh, dh, top, bottom, rounding_type)
        ow = pool2d_output_size(w, kw, sw, dw, left, right, rounding_type)
    else:
        oh, ow = output_sizes
    # A canvas holding every tap of every window: the input at (top, left),
    # `inside` marks the input, `padded` the explicitly padded input.
    rows = max(top + h + bottom, (oh - 1) * sh + (kh - 1) * dh + 1)
    cols = max(left + w + right, (ow - 1) * sw + (kw - 1) * dw + 1)
    canvas = np.zeros((n, c, rows, cols))
    canvas[:, :, top:top + h, left:left + w] = xs
    inside = np.zeros((rows, cols), bool)
    inside[top:top + h, left:left + w] = True
    padded = np.zeros((rows, cols), bool)
    padded[:top + h + bottom, :left + w + right] = True
    values, in_input, in_padding = [], [], []
    for i in range(kh):
        for j in range(kw):
            window = (slice(i * dh, i * dh + (oh - 1) * sh + 1, sh),
                      slice(j * dw, j * dw + (ow - 1) * sw + 1, sw))
            values.append(canvas[(Ellipsis,) + window])
            in_input.append(inside[window])
            in_padding.append(padded[window])
    values, in_input, in_padding = np.stack(values), np.stack(in_input), np.stack(in_padding)
    count = in_input.sum(axis=0)                        # (oh, ow) input taps per window
    if kind == "max_pool2d":
        out = np.where(in_input[:, None, None], values, -np.inf).max(axis=0)
    else:
        divisor = in_padding.sum(axis=0) if count_include_pad else count
        out = (values * in_input[:, None, None]).sum(axis=0) / np.maximum(divisor, 1)
    out = np.where(count > 0, out, 0.0)                 # no input in the window: 0
    return out.transpose(0, 2, 3, 1) if layout == "nhwc" else out


def max_pool2d_reference(x, window_dimensions=None, *, strides=1, dilations=1, padding=0,
                         rounding_type: str = "floor", output_sizes=None,
                         layout: str = "nchw") -> np.ndarray:
    """The spec: WebNN max pooling in float64 (see the module docstring)."""
    return _pool_reference("max_pool2d", x, window_dimensions, strides, dilations, padding,
                           rounding_type, output_sizes, layout, False)


def average_pool2d_reference(x, window_dimensions=None, *, strides=1, dilations=1, padding=0,
                             rounding_type: str = "floor", output_sizes=None,
                             layout: str = "nchw", count_include_pad: bool = False) -> np.ndarray:
    """The spec: WebNN average pooling (ONNX's ``count_include_pad``) in float64."""
    return _pool_reference("average_pool2d", x, window_dimensions, strides, dilations, padding,
                           rounding_type, output_sizes, layout, count_include_pad)


def global_average_pool2d_reference(x, *, layout: str = "nchw") -> np.ndarray:
    """The spec: the mean over H and W, keeping them as 1s, in float64."""
    return np.asarray(x, np.float64).mean(axis=(2, 3) if layout == "nchw" else (1, 2),
                                          keepdims=True)


# --- the ops ---------------------------------------------------------------------------

def _pool_input(op: str, x: object, layout: str) -> tuple[Context, Tensor]:
    ctx = context_of(op, x)
    if layout not in layouts.ACTIVATION_LAYOUTS:
        raise JitnnValueError(f"{op}: layout must be 'nchw' or 'nhwc', got {layout!r}")
    x = as_tensor(ctx, x, op, "x")
    if x.ndim != 4:
        raise JitnnValueError(f"{op}: input x must be 4-D ({layout}), got shape {x.shape}")
    if min(x.shape) < 1:
        raise JitnnValueError(f"{op}: empty dimension in x {x.shape}")
    return ctx, x


def _lowered(ctx: Context, op: str, x: Tensor, layout: str, out_hw: tuple[int, int],
             run: Callable[[np.ndarray, np.ndarray], object]) -> Tensor:
    """The pending result of ``run(x5, out5)`` on ``x`` viewed as a blocked
    buffer: its own when blocked with axes ``layout``, else its plain values
    (``nChw1c`` for nchw, one C-channel block for nhwc)."""
    oh, ow = out_hw
    if layout == "nchw":
        n, c = x.shape[:2]
        out_shape = (n, c, oh, ow)
    else:
        n, c = x.shape[0], x.shape[3]
        out_shape = (n, oh, ow, c)
    # The closures read x's Value, not the handle: a handle they kept would
    # count as the caller holding x, and x would be kept (its own array at
    # every run) instead of a buffer the plan reuses.
    xv = value_of(x)
    if is_blocked(x) and x._axes == layout:
        def produce_blocked() -> np.ndarray:
            data = xv._materialize()
            out = aligned_empty(data.shape[:2] + (oh, ow, data.shape[4]))
            ctx._launch(run, data, out)
            return out
        return Tensor(ctx, out_shape, x.layout, producer=produce_blocked, axes=layout,
                      inputs=(x,), op=op)

    def produce_plain() -> np.ndarray:
        data = plain_buffer(xv)         # a blocked x with the other axes: read back (counted)
        if layout == "nchw":
            x5, out = data.reshape(data.shape + (1,)), aligned_empty((n, c, oh, ow, 1))
        else:
            h, w = data.shape[1:3]
            x5, out = data.reshape(n, 1, h, w, c), aligned_empty((n, 1, oh, ow, c))
        ctx._launch(run, x5, out)
        return out.reshape(out_shape)
    return Tensor(ctx, out_shape, plain_layout(4, layout), producer=produce_plain, axes=layout,
                  inputs=(x,), op=op)


def _pool2d(op: str, x, window_dimensions, strides, dilations, padding, rounding_type,
            output_sizes, layout, count_include_pad: bool) -> Tensor:
    ctx, x = _pool_input(op, x, layout)
    h, w = x.shape[2:] if layout == "nchw" else x.shape[1:3]
    if window_dimensions is None:
        kh, kw = h, w                                   # WebNN: the whole plane
    else:
        kh, kw = int_pair(op, "window_dimensions", window_dimensions, 1)
    sh, sw = int_pair(op, "strides", strides, 1)
    dh, dw = int_pair(op, "dilations", dilations, 1)
    pad = padding4(op, padding)
    if rounding_type not in ROUNDING_TYPES:
        raise JitnnValueError(
            f"{op}: rounding_type must be 'floor' or 'ceil', got {rounding_type!r}")
    if not isinstance(count_include_pad, (bool, np.bool_)):
        raise JitnnTypeError(f"{op}: count_include_pad must be a bool, got {count_include_pad!r}")
    geometry = (f"input {h}x{w}, window {kh}x{kw}, strides {(sh, sw)}, dilations {(dh, dw)}, "
                f"padding {list(pad)}")
    floor = (pool2d_output_size(h, kh, sh, dh, pad[0], pad[1], "floor"),
             pool2d_output_size(w, kw, sw, dw, pad[2], pad[3], "floor"))
    ceil = (pool2d_output_size(h, kh, sh, dh, pad[0], pad[1], "ceil"),
            pool2d_output_size(w, kw, sw, dw, pad[2], pad[3], "ceil"))
    if output_sizes is None:
        oh, ow = floor if rounding_type == "floor" else ceil
    else:
        oh, ow = int_pair(op, "output_sizes", output_sizes, 1)
        if oh not in (floor[0], ceil[0]) or ow not in (floor[1], ceil[1]):
            raise JitnnValueError(
                f"{op}: output_sizes must be the floor {list(floor)} or ceil {list(ceil)} "
                f"output size on each axis, got {[oh, ow]} ({geometry})")
    if oh < 1 or ow < 1:
        raise JitnnValueError(f"{op}: the output would be {oh}x{ow}: the window does not fit "
                              f"({geometry})")
    if op == "max_pool2d":
        def run(x5: np.ndarray, out5: np.ndarray) -> None:
            pool_kernels.max_pool2d(x5, out5, (kh, kw), (sh, sw), (dh, dw), pad)
    else:
        def run(x5: np.ndarray, out5: np.ndarray) -> None:
            pool_kernels.average_pool2d(x5, out5, (kh, kw), (sh, sw), (dh, dw), pad,
                                        bool(count_include_pad))
    return _lowered(ctx, op, x, layout, (oh, ow), run)


def max_pool2d(x, window_dimensions=None, *, strides=1, dilations=1, padding=0,
               rounding_type: str = "floor", output_sizes=None, layout: str = "nchw") -> Tensor:
    """WebNN maxPool2d: the maximum over each window (padding never wins).

    ``x``: ``(N, C, H, W)`` (``layout="nchw"``) or ``(N, H, W, C)`` (``"nhwc"``).
    ``window_dimensions``: ``(KH, KW)`` or an int; None (WebNN's default) is
    the whole plane. ``strides``, ``dilations``: an int or an (h, w) pair;
    ``padding``: an int, an (h, w) pair or ``[top, bottom, left, right]``;
    ``rounding_type``: ``"floor"`` or ``"ceil"`` of the output size;
    ``output_sizes``: ``(OH, OW)``, the floor or ceil size per axis (then
    ``rounding_type`` is ignored). Returns a pending Tensor in ``x``'s layout.
    """
    return _pool2d("max_pool2d", x, window_dimensions, strides, dilations, padding,
                   rounding_type, output_sizes, layout, False)


def average_pool2d(x, window_dimensions=None, *, strides=1, dilations=1, padding=0,
                   rounding_type: str = "floor", output_sizes=None, layout: str = "nchw",
                   count_include_pad: bool = False) -> Tensor:
    """WebNN averagePool2d (options as :func:`max_pool2d`): the mean over the
    window's elements inside the input (WebNN, ``count_include_pad=False``), or
    with ``count_include_pad=True`` (ONNX) the sum divided by the number of
    window elements inside the explicitly padded input."""
    return _pool2d("average_pool2d", x, window_dimensions, strides, dilations, padding,
                   rounding_type, output_sizes, layout, count_include_pad)


def global_average_pool2d(x, *, layout: str = "nchw") -> Tensor:
    """The mean over H and W: ``(N, C, H, W)`` -> ``(N, C, 1, 1)`` (or
    ``(N, H, W, C)`` -> ``(N, 1, 1, C)`` with ``layout="nhwc"``), in ``x``'s layout."""
    op = "global_average_pool2d"
    ctx, x = _pool_input(op, x, layout)
    return _lowered(ctx, op, x, layout, (1, 1), pool_kernels.global_average_pool2d)
