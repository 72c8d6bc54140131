"""Pooling: max_pool2d, average_pool2d (WebNN's options, plus ONNX's
``count_include_pad``), l2_pool2d and global_average_pool2d.

A blocked input stays blocked (same block); a plain input is pooled where it
lies, without a reorder: plain NCHW is ``nChw1c`` (``x[..., None]``) and plain
NHWC is one block of C channels (``(N, 1, H, W, C)``), both layouts the kernels
read.

Output size (WebNN): ``floor((in + pad_begin + pad_end - ((k - 1) * d + 1)) / s) + 1``,
or with ``ceil`` for ``rounding_type="ceil"``, minus a last window that would
start in the end padding (``(out - 1) * s >= in + pad_begin``), as PyTorch,
ONNX and the WebNN conformance tests do: the plain ceil formula would add a
window with no input element in it (webnn issue 935 leaves its value open).
``output_sizes`` may give the floor or the ceil size per axis (WebNN).

For max and average pooling every window must hold at least one element of
the input: a geometry where one lies wholly in the padding (padding >= the
window, or dilated taps that skip the input) is refused with a
JitnnValueError, since such a window has no max and no average. Padding
never takes part in a max; the average divides by the number of window
elements inside the input, or with ``count_include_pad=True`` inside the
explicitly padded input (ONNX; elements past the explicit padding never
count). L2 pooling is ``sqrt`` of the sum of the squares of the window's
elements inside the input: padding adds nothing, so a window of padding
alone gives 0 (allowed).

(WebNN's conformance vectors for l2Pool2d have two cases whose expected
values are wrong: ``roundingType=ceil`` and ``outputSizes ignores
roundingType=floor``, where WPT summed the squares of the windows past the
input's right edge without taking the root; jitnn gives the roots.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import layout as layout_kernels
from ..kernels import pool as pool_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import Node, Tensor, Value
from ._common import (Binding, as_tensor, context_of, int_pair, is_blocked, padding4, pending,
                      plain_buffer, plain_layout, value_of)

if TYPE_CHECKING:
    from ..context import Context

ROUNDING_TYPES = ("floor", "ceil")


def pool2d_output_size(size: int, window: int, stride: int, dilation: int, pad_begin: int,
                       pad_end: int, rounding_type: str = "floor") -> int:
    """``round((size + pad_begin + pad_end - ((window - 1) * dilation + 1)) / stride) + 1``
    with ``round`` floor or ceil; ceil drops a last window that would start in
    the end padding (PyTorch, ONNX). May be < 1: the window does not fit."""
    return pool_kernels.pool_output_size(size, window, stride, dilation, pad_begin, pad_end,
                                         rounding_type)


def _empty_window(size: int, window: int, stride: int, dilation: int, pad_begin: int,
                  out: int) -> int | None:
    """The first of the ``out`` output positions along an axis whose window
    holds no input element, or None.

    Window ``o`` starts at ``a = o * stride - pad_begin`` and reads ``a + k *
    dilation`` (``k < window``): it holds an input element iff ``a`` lies in
    one of the intervals ``[-k * dilation, size - k * dilation)``. The starts
    grow with ``o``, so in each gap between those intervals (in ascending
    order) only the first start at or after the gap's beginning can fall in
    it: O(window) steps, however large ``out`` is."""
    if -pad_begin < -(window - 1) * dilation:           # before the lowest interval
        return 0
    # Between intervals k and k - 1 (the taps skip the input: only when
    # dilation > size; otherwise the intervals touch), then past the input.
    gaps = [(size - k * dilation, -(k - 1) * dilation)
            for k in range(window - 1, 0, -1)] if dilation > size else []
    for low, high in gaps + [(size, None)]:
        o = max(0, -(-(low + pad_begin) // stride))     # the first start >= low
        if o < out and (high is None or o * stride - pad_begin < high):
            return o
    return None


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
    if kind == "l2_pool2d":                             # padding adds 0 to the sum
        return _nhwc_if(np.sqrt((values ** 2 * in_input[:, None, None]).sum(axis=0)), layout)
    if not count.all():
        raise ValueError(f"{kind}: a window holds no input element (the op refuses this geometry)")
    if kind == "max_pool2d":
        out = np.where(in_input[:, None, None], values, -np.inf).max(axis=0)
    else:
        divisor = in_padding.sum(axis=0) if count_include_pad else count
        out = (values * in_input[:, None, None]).sum(axis=0) / divisor
    return _nhwc_if(out, layout)


def _nhwc_if(out: np.ndarray, layout: str) -> np.ndarray:
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


def l2_pool2d_reference(x, window_dimensions=None, *, strides=1, dilations=1, padding=0,
                        rounding_type: str = "floor", output_sizes=None,
                        layout: str = "nchw") -> np.ndarray:
    """The spec: WebNN L2 pooling in float64, ``sqrt`` of the sum of the
    squares of each window's input elements (padding adds nothing)."""
    return _pool_reference("l2_pool2d", x, window_dimensions, strides, dilations, padding,
                           rounding_type, output_sizes, layout, False)


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


def run_pool_blocked(ctx: "Context", node: Node, value: Value,
                     out: np.ndarray | None) -> np.ndarray:
    """A pooling of blocked data (``attrs["run"](x5, out5)``), into ``out`` if given."""
    a = node.attrs
    data = a["x"]._materialize()
    if out is None:
        oh, ow = a["out_hw"]
        out = aligned_empty(data.shape[:2] + (oh, ow, data.shape[4]))
    ctx.launcher.launch(a["run"], data, out)
    return out


def bind_pool_blocked(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The call :func:`run_pool_blocked` just made, bound to its arrays."""
    x = node.attrs["x"]
    if x._data is None:
        return None
    if node.attrs["run"] is pool_kernels.global_average_pool2d:
        # the compiled kernel itself, not the checking wrapper around it
        kernel, args = pool_kernels.global_average_pool2d_call(x._data, result)
        return Binding(kernel, args, ((x, x._data),), (), result, ctx.num_threads)
    return Binding(node.attrs["run"], (x._data, result), ((x, x._data),), (), result,
                   ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_pool_blocked.bind = bind_pool_blocked

register_kind(NodeKind("pool_blocked", writes_into_buffer=True))


#: a plain NCHW input of this many elements or more pools through the blocked
#: layout and back; below, on its own ``nChw1c`` view (one lane a channel)
_BLOCKED_ROUND_TRIP = 16384


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
        # a node of its own kind: it writes into the plan's buffer, and a
        # replayed plan calls ``run`` on the same arrays (no op, no allocation)
        node = Node(op, (xv,), kind="pool_blocked",
                    attrs={"x": xv, "run": run, "out_hw": out_hw}, run=run_pool_blocked)
        return pending(ctx, out_shape, x.layout, node, axes=layout)

    block = ctx.block

    def produce_plain() -> np.ndarray:
        data = plain_buffer(xv)         # a blocked x with the other axes: read back (counted)
        if layout == "nchw" and c > 1 and data.size >= _BLOCKED_ROUND_TRIP:
            # through the blocked layout and back: the kernel's lanes are the
            # channels of a block; on nChw1c they are one channel (a 3 x 3
            # average over 64 x 56 x 56: 783 us that way, ~210 us this way)
            h, w = data.shape[2:]
            x5 = aligned_empty(layouts.blocked_shape((n, c, h, w), block))
            layout_kernels.nchw_to_blocked(data, x5)
            out5 = aligned_empty(layouts.blocked_shape((n, c, oh, ow), block))
            ctx.launcher.launch(run, x5, out5)
            out = aligned_empty(out_shape)
            layout_kernels.blocked_to_nchw(out5, out)
            return out
        if layout == "nchw":
            x5, out = data.reshape(data.shape + (1,)), aligned_empty((n, c, oh, ow, 1))
        else:
            h, w = data.shape[1:3]
            x5, out = data.reshape(n, 1, h, w, c), aligned_empty((n, 1, oh, ow, c))
        ctx.launcher.launch(run, x5, out)
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
    # A window of padding alone has no max and no average (the kernels would
    # have to invent a value): refuse the geometry. Its L2 norm is 0.
    for axis, empty in (("row", _empty_window(h, kh, sh, dh, pad[0], oh)),
                        ("column", _empty_window(w, kw, sw, dw, pad[2], ow))):
        if empty is not None and op != "l2_pool2d":
            raise JitnnValueError(
                f"{op}: every window must hold at least one input element, but all taps of "
                f"the window of output {axis} {empty} fall in the padding ({geometry}, "
                f"output {oh}x{ow})")
    if op == "max_pool2d":
        def run(x5: np.ndarray, out5: np.ndarray) -> None:
            pool_kernels.max_pool2d(x5, out5, (kh, kw), (sh, sw), (dh, dw), pad)
    elif op == "l2_pool2d":
        def run(x5: np.ndarray, out5: np.ndarray) -> None:
            pool_kernels.l2_pool2d(x5, out5, (kh, kw), (sh, sw), (dh, dw), pad)
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


def l2_pool2d(x, window_dimensions=None, *, strides=1, dilations=1, padding=0,
              rounding_type: str = "floor", output_sizes=None, layout: str = "nchw") -> Tensor:
    """WebNN l2Pool2d (options as :func:`max_pool2d`): ``sqrt`` of the sum of
    the squares of each window's elements inside the input (padding adds
    nothing; a window of padding alone gives 0)."""
    return _pool2d("l2_pool2d", x, window_dimensions, strides, dilations, padding,
                   rounding_type, output_sizes, layout, False)


def global_average_pool2d(x, *, layout: str = "nchw") -> Tensor:
    """The mean over H and W: ``(N, C, H, W)`` -> ``(N, C, 1, 1)`` (or
    ``(N, H, W, C)`` -> ``(N, 1, 1, C)`` with ``layout="nhwc"``), in ``x``'s layout."""
    op = "global_average_pool2d"
    ctx, x = _pool_input(op, x, layout)
    return _lowered(ctx, op, x, layout, (1, 1), pool_kernels.global_average_pool2d)

register_op(OpDef("max_pool2d", max_pool2d, max_pool2d_reference, webnn="maxPool2d",
                  onnx=("MaxPool",), layouts="blocked or plain, as its input"))
register_op(OpDef("average_pool2d", average_pool2d, average_pool2d_reference,
                  webnn="averagePool2d", onnx=("AveragePool",),
                  layouts="blocked or plain, as its input"))
register_op(OpDef("l2_pool2d", l2_pool2d, l2_pool2d_reference, webnn="l2Pool2d",
                  layouts="blocked or plain, as its input"))
register_op(OpDef("global_average_pool2d", global_average_pool2d,
                  global_average_pool2d_reference, onnx=("GlobalAveragePool",),
                  layouts="blocked or plain, as its input"))
