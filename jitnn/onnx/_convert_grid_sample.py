"""ONNX GridSample (opset 16 and newer) on jitnn gathers and element-wise ops.

Each output pixel ``(n, i, j)`` reads the input at the point ``grid[n, i,
j] = (x, y)``, in [-1, 1] across the width and height (``align_corners``:
-1 and 1 are the corner pixels' centres; else their outer edges). The point
is taken to pixel coordinates, then by ``padding_mode``: ``border`` clamps
it into the image, ``reflection`` reflects it at the edges (between the
corner centres, or the outer edges) and then clamps it; ``zeros`` leaves it,
and every neighbour outside the image reads 0.

``bilinear`` (opset 20: ``linear``) sums the four neighbours at ``floor(x)``
and ``floor(x) + 1`` (and y) times their weights, ``nearest`` reads the one
at ``x`` rounded half to even (as ONNX and PyTorch do). Each neighbour is one
``gather_elements`` of the input's flattened planes at the run-time index
``y * W + x`` (clamped into the image; a neighbour outside reads a weight of
0 in ``zeros`` mode), so the grid may be computed at run time, as in the
deformable attention of Mask2Former and RT-DETR, or RAFT's correlation
lookups. Bicubic sampling and volumes (rank-5 inputs, opset 20) are refused
by name.
"""

from __future__ import annotations

import numpy as np

from ..graph import Operand
from ._common import Converter, rank_of, shape_of

PADDING_MODES = ("zeros", "border", "reflection")
#: the ``mode`` names of opset 16 and of opset 20, by what jitnn runs
LINEAR, NEAREST = ("bilinear", "linear"), ("nearest",)
#: the flat index y * W + x is computed in float32, exact below 2**24
MAX_PLANE = 1 << 24


def _pixel_coordinates(cv: Converter, g: Operand, size: int, align_corners: bool,
                       padding: str) -> Operand:
    """Normalized coordinates ``g`` of an axis of ``size`` pixels as pixel
    coordinates, reflected and clamped as ``padding`` says."""
    if align_corners:                      # -1 and 1: the centres of pixels 0 and size - 1
        x = cv.op("mul", cv.op("add", g, 1.0), (size - 1) / 2.0)
    else:                                  # -1 and 1: the outer edges of those pixels
        x = cv.op("sub", cv.op("mul", cv.op("add", g, 1.0), size / 2.0), 0.5)
    if padding == "reflection":
        x = _reflect(cv, x, *((0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)))
    if padding != "zeros":
        x = cv.op("clamp", x, 0.0, float(size - 1))
    return x


def _reflect(cv: Converter, x: Operand, low: float, high: float) -> Operand:
    """``x`` reflected at ``low`` and ``high`` until it lies between them:
    ``d = |x - low|`` is ``flips`` whole spans and ``extra``; an even number of
    flips lands at ``low + extra``, an odd one at ``high - extra``."""
    span = high - low
    if span <= 0:                          # a 1-pixel axis with align_corners
        return cv.op("mul", x, 0.0)
    distance = cv.op("abs", cv.op("sub", x, low))
    flips = cv.op("floor", cv.op("mul", distance, 1.0 / span))
    extra = cv.op("sub", distance, cv.op("mul", flips, span))
    odd = cv.op("sub", flips, cv.op("mul", cv.op("floor", cv.op("mul", flips, 0.5)), 2.0))
    # low + extra when even, high - extra = low + extra + (span - 2 extra) when odd
    turn = cv.op("mul", odd, cv.op("sub", span, cv.op("mul", extra, 2.0)))
    return cv.op("add", cv.op("add", extra, low), turn)


def _inside(cv: Converter, x: Operand, size: int) -> Operand:
    """1.0 where integral coordinate ``x`` is a pixel of an axis of ``size``, else 0.0."""
    inside = cv.op("logical_and", cv.op("greater_or_equal", x, 0.0),
                   cv.op("lesser_or_equal", x, float(size - 1)))
    return cv.op("cast", inside, np.float32)


def op_grid_sample(cv: Converter, inputs, attrs):
    x, grid = inputs[0], inputs[1]
    mode = attrs.get("mode", "bilinear" if cv.opset < 20 else "linear")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    padding = attrs.get("padding_mode", "zeros")
    padding = padding.decode() if isinstance(padding, bytes) else padding
    align_corners = bool(attrs.get("align_corners", 0))
    if mode not in LINEAR + NEAREST:
        if mode in ("bicubic", "cubic"):
            raise cv.unsupported(f"mode {mode!r} is not supported: jitnn samples a grid "
                                 "bilinearly or by the nearest pixel")
        raise cv.invalid(f"mode {mode!r} is not one of bilinear, nearest, bicubic (opset 20: "
                         "linear, nearest, cubic)")
    if padding not in PADDING_MODES:
        raise cv.invalid(f"padding_mode {padding!r} is not one of {', '.join(PADDING_MODES)}")
    if rank_of(x) == 5:
        raise cv.unsupported(f"a volume (a rank-5 input of shape {shape_of(x)}) is not "
                             "supported: jitnn samples 2-D grids of (N, C, H, W) inputs")
    if rank_of(x) != 4 or rank_of(grid) != 4 or shape_of(grid)[3] != 2 \
            or shape_of(grid)[0] != shape_of(x)[0]:
        raise cv.invalid(f"an input of shape {shape_of(x)} and a grid of shape "
                         f"{shape_of(grid)}: GridSample needs (N, C, H, W) and (N, H_out, "
                         "W_out, 2)")
    n, c, height, width = shape_of(x)
    _, out_h, out_w, _ = shape_of(grid)
    points = out_h * out_w
    if height * width >= MAX_PLANE:
        raise cv.unsupported(f"an input plane of {height} x {width} pixels: jitnn samples "
                             f"planes of fewer than {MAX_PLANE} pixels")
    g = cv.float_operand(grid)
    planes = cv.op("reshape", cv.float_operand(x), (n, c, height * width))
    coordinates = []
    for axis, size in ((0, width), (1, height)):
        part = cv.op("slice", g, (0, 0, 0, axis), (n, out_h, out_w, 1))
        coordinates.append(_pixel_coordinates(
            cv, cv.op("reshape", part, (n, 1, points)), size, align_corners, padding))
    px, py = coordinates

    def read(ix: Operand, iy: Operand, weight: Operand | None) -> Operand:
        """The input at integral coordinates (ix, iy), times ``weight`` and, in
        ``zeros`` mode, by whether the pixel is inside the image."""
        if padding == "zeros":
            inside = cv.op("mul", _inside(cv, ix, width), _inside(cv, iy, height))
            weight = inside if weight is None else cv.op("mul", weight, inside)
        if padding == "zeros" or weight is not None:
            # (border and reflection: the point is inside, but its neighbour at floor + 1
            # may be one past the edge, with weight 0: read the edge, not the next row)
            ix = cv.op("clamp", ix, 0.0, float(width - 1))
            iy = cv.op("clamp", iy, 0.0, float(height - 1))
        index = cv.op("cast", cv.op("add", cv.op("mul", iy, float(width)), ix), np.int32)
        value = cv.op("gather_elements", planes, cv.op("expand", index, (n, c, points)), 2)
        return value if weight is None else cv.op("mul", value, weight)

    if mode in NEAREST:
        y = read(cv.op("round_even", px), cv.op("round_even", py), None)
    else:
        x0, y0 = cv.op("floor", px), cv.op("floor", py)
        x1, y1 = cv.op("add", x0, 1.0), cv.op("add", y0, 1.0)
        wx1, wy1 = cv.op("sub", px, x0), cv.op("sub", py, y0)
        wx0, wy0 = cv.op("sub", 1.0, wx1), cv.op("sub", 1.0, wy1)
        y = None
        for ix, wx in ((x0, wx0), (x1, wx1)):
            for iy, wy in ((y0, wy0), (y1, wy1)):
                term = read(ix, iy, cv.op("mul", wx, wy))
                y = term if y is None else cv.op("add", y, term)
    return [cv.op("reshape", y, (n, c, out_h, out_w))]


OPS = {"GridSample": op_grid_sample}
