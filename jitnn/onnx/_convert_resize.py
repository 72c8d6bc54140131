"""ONNX Resize (opset 11 and newer) on jitnn ops.

Resize is separable: along each resized axis, output ``o`` is a weighted sum
of a few input rows (nearest: one, linear: two, cubic: four, antialias:
more), whose positions and weights depend on the shapes and attributes only.
They are computed here at load time in float64 (the ONNX reference's rules:
the coordinate transformation, the neighbours at ``floor(x)`` and after,
clamped into the axis as edge padding, ``exclude_outside``, the extrapolated
positions of ``tf_crop_and_resize``), and the axis becomes a ``gather`` of
the rows (nearest) or a sum of gathers times the constant weights.

The common case runs as jitnn's ``resample2d`` instead (a blocked kernel): a
4-D input resized along two axes with nearest ``round_prefer_floor`` or
linear sampling, half-pixel coordinates and an output size that is exactly
the input size times the scale, where resample2d samples the same positions.
"""

from __future__ import annotations

import math

import numpy as np

from ._common import Const, Converter, need_const, shape_of

MODES = ("nearest", "linear", "cubic")
COORDINATES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _optional_const(cv: Converter, inputs, index: int, what: str) -> np.ndarray | None:
    value = inputs[index] if len(inputs) > index else None
    if value is None:
        return None
    array = need_const(cv, value, what).array
    return array if array.size else None


def geometry(cv: Converter, shape: tuple[int, ...], inputs, attrs):
    """``(scales, sizes, roi)``: per axis of the input, the scale factor and
    output size (the reference's arithmetic: scales as float32, ``floor(size
    * scale)``; from sizes ``size / input``, or one scale for all axes with
    ``keep_aspect_ratio_policy``), and the full-rank roi or None."""
    rank = len(shape)
    axes = [int(a) % rank for a in attrs.get("axes", range(rank))]
    roi = _optional_const(cv, inputs, 1, "the roi")
    scales = _optional_const(cv, inputs, 2, "the scales")
    sizes = _optional_const(cv, inputs, 3, "the sizes")
    if (scales is None) == (sizes is None):
        raise cv.invalid("exactly one of scales and sizes must be given")
    given = scales if scales is not None else sizes
    if given.size != len(axes):
        raise cv.invalid(f"{'scales' if scales is not None else 'sizes'} has {given.size} "
                         f"entries for {len(axes)} axes")
    if roi is not None:
        roi = np.asarray(roi, np.float64).reshape(-1)
        if roi.size != 2 * len(axes):
            raise cv.invalid(f"roi has {roi.size} entries for {len(axes)} axes")
        full = [0.0] * rank + [1.0] * rank
        for i, a in enumerate(axes):
            full[a], full[rank + a] = roi[i], roi[len(axes) + i]
        roi = np.array(full)
    if scales is not None:
        factors = np.ones(rank, np.float32)
        factors[axes] = scales.astype(np.float32).reshape(-1)
        if not np.all(factors > 0):
            raise cv.invalid(f"scales {scales.tolist()} must be > 0")
        out = (factors * np.array(shape)).astype(int)
        return [float(f) for f in factors], [int(o) for o in out], roi
    out = list(shape)
    for i, a in enumerate(axes):
        out[a] = int(sizes.reshape(-1)[i])
    if any(o < 0 for o in out):
        raise cv.invalid(f"sizes {sizes.tolist()} must be >= 0")
    factors = [o / s if s else 1.0 for o, s in zip(out, shape)]
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise cv.unsupported(f"keep_aspect_ratio_policy {policy!r}")
        pick = min if policy == "not_larger" else max
        scale = pick(factors[a] for a in axes)
        factors = [scale if i in axes else 1.0 for i in range(rank)]
        out = [int(scale * shape[i] + 0.5) if i in axes else shape[i] for i in range(rank)]
    return factors, out, roi


def _coordinates(mode: str, scale: float, size: int, out: int, roi) -> np.ndarray:
    """The input coordinate each output position samples (float64)."""
    y = np.arange(out, dtype=np.float64)
    width = scale * size                         # the reference's float output width
    if mode == "align_corners":
        return np.zeros(out) if width == 1 else y * (size - 1) / (width - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if width == 1:
            x = np.full(out, (end - start) * (size - 1) / 2)
        else:
            x = y * (end - start) * (size - 1) / (width - 1)
        return x + start * (size - 1)
    if mode == "pytorch_half_pixel":
        return np.full(out, -0.5) if width == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = size / 2 * (1 - out / width)
        return offset + (y + 0.5) / scale - 0.5
    return (y + 0.5) / scale - 0.5               # half_pixel


def _cubic(ratio: np.ndarray, a: float) -> np.ndarray:
    r = ratio[:, None] + np.array([1.0, 0.0, -1.0, -2.0])       # distances to the 4 taps
    d = np.abs(r)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _antialias(ratio: np.ndarray, scale: float, cubic: bool, a: float) -> np.ndarray:
    scale = min(scale, 1.0)
    start = int(np.floor((-2 if cubic else -1) / scale) + 1)
    count = 2 - 2 * start
    args = (np.arange(start, start + count)[None, :] - ratio[:, None]) * scale
    if cubic:
        d = np.abs(args)
        weights = np.where(d <= 1, (a + 2) * d ** 3 - (a + 3) * d ** 2 + 1,
                           np.where(d < 2, a * d ** 3 - 5 * a * d ** 2 + 8 * a * d - 4 * a, 0.0))
    else:
        weights = np.clip(1 - np.abs(args), 0, 1)
    return weights / weights.sum(axis=1, keepdims=True)


def taps(attrs, scale: float, size: int, out: int, roi) -> tuple[np.ndarray, np.ndarray,
                                                                 np.ndarray | None]:
    """``(indices (out, n), weights (out, n), extrapolated (out,) or None)``
    for one axis, as the ONNX reference computes them."""
    mode = attrs.get("mode", "nearest")
    x = _coordinates(attrs.get("coordinate_transformation_mode", "half_pixel"),
                     scale, size, out, roi)
    outside = None
    if roi is not None and attrs.get("coordinate_transformation_mode") == "tf_crop_and_resize":
        outside = (x < 0) | (x > size - 1)
    whole = np.floor(x)
    ratio = np.where(x == whole, 1.0, x - whole)   # the reference prefers the left pixel
    a = float(attrs.get("cubic_coeff_a", -0.75))
    if mode == "nearest":
        nearest = attrs.get("nearest_mode", "round_prefer_floor")
        upper = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5,
                 "floor": np.zeros(out, bool), "ceil": np.ones(out, bool)}[nearest]
        upper = np.where(ratio == 1.0, True, upper)
        weights = np.stack([~upper, upper], axis=1).astype(np.float64)
    elif attrs.get("antialias", 0):
        weights = _antialias(ratio, scale, mode == "cubic", a)
    elif mode == "linear":
        weights = np.stack([1 - ratio, ratio], axis=1)
    else:
        weights = _cubic(ratio, a)
    n = weights.shape[1]
    pad = -(-n // 2)
    padded = x + pad
    p = np.floor(padded).astype(np.int64)
    frac = padded - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        base = -((n - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    index = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if attrs.get("exclude_outside", 0):
        weights = np.where((index < 0) | (index >= size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(index, 0, size - 1), weights, outside


def _resample2d_matches(attrs, shape, factors, out, changed) -> bool:
    """Whether resample2d samples what ONNX does (see the module docstring)."""
    if len(shape) != 4 or len(changed) > 2 or attrs.get("antialias", 0) \
            or attrs.get("exclude_outside", 0):
        return False
    mode = attrs.get("mode", "nearest")
    if mode == "nearest" and attrs.get("nearest_mode", "round_prefer_floor") != \
            "round_prefer_floor" or mode == "cubic":
        return False
    coordinates = attrs.get("coordinate_transformation_mode", "half_pixel")
    if coordinates not in ("half_pixel", "pytorch_half_pixel", "half_pixel_symmetric"):
        return False
    for a in changed:
        if out[a] < 1 or factors[a] * shape[a] != out[a] or \
                (coordinates == "pytorch_half_pixel" and out[a] == 1):
            return False
    return True


def op_resize(cv: Converter, inputs, attrs):
    if cv.opset < 11:
        raise cv.unsupported("Resize before opset 11 (its asymmetric-only form)")
    x = cv.operand(inputs[0])
    if x.dtype != np.float32:
        raise cv.unsupported(f"a {x.dtype} input (jitnn resizes float32 tensors)")
    mode = attrs.get("mode", "nearest")
    coordinates = attrs.get("coordinate_transformation_mode", "half_pixel")
    if mode not in MODES or coordinates not in COORDINATES or \
            attrs.get("nearest_mode", "round_prefer_floor") not in NEAREST_MODES:
        raise cv.unsupported(f"mode {mode!r}, coordinate_transformation_mode {coordinates!r}, "
                             f"nearest_mode {attrs.get('nearest_mode')!r}")
    if mode == "nearest" and attrs.get("antialias", 0):
        raise cv.invalid("antialias applies to linear and cubic modes only")
    shape = shape_of(x)
    factors, out, roi = geometry(cv, shape, inputs, attrs)
    if coordinates == "tf_crop_and_resize" and roi is None:
        raise cv.invalid("tf_crop_and_resize needs the roi")
    changed = [a for a in range(len(shape))
               if not (math.isclose(factors[a], 1.0) and out[a] == shape[a]
                       and (roi is None or (math.isclose(roi[a], 0.0)
                                            and math.isclose(roi[a + len(shape)], 1.0))))]
    if not changed:
        return [x]
    if _resample2d_matches(attrs, shape, factors, out, changed):
        axes = changed + [a for a in (2, 3, 1, 0) if a not in changed][:2 - len(changed)]
        return [cv.op("resample2d", x, mode="linear" if mode == "linear" else
                      "nearest-neighbor", sizes=[out[a] for a in sorted(axes)],
                      axes=sorted(axes))]
    y = x
    for a in changed:
        axis_roi = None if roi is None else (roi[a], roi[a + len(shape)])
        index, weights, outside = taps(attrs, factors[a], shape[a], out[a], axis_roi)
        y = _along(cv, y, a, index, weights)
        if outside is not None and outside.any():
            mask_shape = [1] * len(shape)
            mask_shape[a] = out[a]
            mask = cv.operand(Const(outside.reshape(mask_shape)))
            fill = float(attrs.get("extrapolation_value", 0.0))
            y = cv.op("where", mask, cv.operand(Const(np.full((), fill, np.float32))), y)
    return [y]


def _along(cv: Converter, y, axis: int, index: np.ndarray, weights: np.ndarray):
    """``sum_t weights[:, t] * y[index[:, t]]`` along ``axis`` (a gather when
    each output takes one row with weight 1)."""
    picked = weights != 0
    if np.all(picked.sum(axis=1) == 1) and np.all(weights[picked] == 1.0):
        return cv.op("gather", y, index[picked].astype(np.int64), axis)
    shape = [1] * len(y.shape)
    shape[axis] = index.shape[0]
    total = None
    for t in range(index.shape[1]):
        if not weights[:, t].any():
            continue
        term = cv.op("gather", y, index[:, t].astype(np.int64), axis)
        w = cv.operand(Const(weights[:, t].astype(np.float32).reshape(shape)))
        term = cv.op("mul", term, w)
        total = term if total is None else cv.op("add", total, term)
    return total


OPS = {"Resize": op_resize}
