"""Folding: ONNX ops whose inputs are all load-time constants run in numpy
when the model is loaded (the shape arithmetic exporters emit around Reshape,
``Shape -> Gather -> Unsqueeze -> Concat`` and friends, disappears). Arithmetic
on float constants folds in the constants' dtype, like ONNX Runtime's constant
folding; data movement folds exactly in any dtype."""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ._common import (Const, onnx_dtype, reshape_target, slice_index, split_sizes,
                      squeeze_shape, unsqueeze_shape)
from ._convert import _legacy_broadcast, batch_norm_training, op_shape
from ._convert_einsum import fold_einsum
from ._convert_math import fold_one_hot
from ._proto import to_array


def _fold_numpy(function: Callable) -> Callable:
    def fold(cv, arrays, attrs, outputs):
        return [function(*arrays)]
    return fold


def _fold_div(cv, arrays, attrs, outputs):
    a, b = arrays
    if a.dtype.kind in "iu":
        with np.errstate(divide="ignore"):
            return [np.trunc(a / b).astype(a.dtype)] if a.dtype.kind == "i" else [a // b]
    return [np.divide(a, b)]


def _fold_legacy(function):
    def fold(cv, arrays, attrs, outputs):
        a, b = arrays
        b = _legacy_broadcast(cv, Const(a), Const(b), attrs).array
        return [function(a, b).astype(np.result_type(a, b), copy=False)]
    return fold


def _fold_variadic(function):
    def fold(cv, arrays, attrs, outputs):
        result = arrays[0]
        for other in arrays[1:]:
            result = function(result, other)
        return [result]
    return fold


def _fold_constant(cv, arrays, attrs, outputs):
    if "value" in attrs:
        return [to_array(attrs["value"])]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return [np.array(attrs[key], dtype)]
    raise cv.unsupported(f"attributes {sorted(attrs)}")


def _fold_constant_of_shape(cv, arrays, attrs, outputs):
    value = to_array(attrs["value"]).reshape(-1)[0] if "value" in attrs \
        else np.float32(0)
    return [np.full(tuple(int(d) for d in arrays[0]), value, dtype=np.asarray(value).dtype)]


def _fold_gather(cv, arrays, attrs, outputs):
    return [np.take(arrays[0], arrays[1].astype(np.int64), axis=int(attrs.get("axis", 0)))]


def _fold_unsqueeze(cv, arrays, attrs, outputs):
    consts = [Const(a) for a in arrays]
    return [arrays[0].reshape(unsqueeze_shape(cv, consts[0], consts, attrs))]


def _fold_squeeze(cv, arrays, attrs, outputs):
    consts = [Const(a) for a in arrays]
    return [arrays[0].reshape(squeeze_shape(cv, consts[0], consts, attrs))]


def _fold_cast(cv, arrays, attrs, outputs):
    return [arrays[0].astype(onnx_dtype(int(attrs["to"])))]


def _fold_slice(cv, arrays, attrs, outputs):
    consts = [None if a is None else Const(a) for a in arrays]
    return [arrays[0][slice_index(cv, consts[0], consts, attrs)]]


def _fold_concat(cv, arrays, attrs, outputs):
    return [np.concatenate(arrays, axis=int(attrs["axis"]))]


def _fold_reshape(cv, arrays, attrs, outputs):
    consts = [Const(a) for a in arrays]
    return [arrays[0].reshape(reshape_target(cv, consts[0], consts, attrs))]


def _fold_shape(cv, arrays, attrs, outputs):
    return [op_shape(cv, [Const(arrays[0])], attrs)[0].array]


def _fold_range(cv, arrays, attrs, outputs):
    start, limit, delta = (a.reshape(()) for a in arrays)
    return [np.arange(start, limit, delta, dtype=np.result_type(start, limit, delta))]


def _fold_split(cv, arrays, attrs, outputs):
    x = arrays[0]
    axis = int(attrs.get("axis", 0)) % x.ndim
    sizes = split_sizes(cv, Const(x), [Const(a) for a in arrays], attrs, outputs, axis)
    return np.split(x, np.cumsum(sizes)[:-1], axis=axis)


def _fold_expand(cv, arrays, attrs, outputs):
    x, shape = arrays
    return [x * np.ones(tuple(int(d) for d in shape), x.dtype)]


def _fold_transpose(cv, arrays, attrs, outputs):
    perm = attrs.get("perm")
    return [np.transpose(arrays[0], None if perm is None else list(perm))]


def _fold_flatten(cv, arrays, attrs, outputs):
    x = arrays[0]
    axis = int(attrs.get("axis", 1)) % (x.ndim + 1) if x.ndim else 0
    return [x.reshape(math.prod(x.shape[:axis]), -1)]


def _fold_identity(cv, arrays, attrs, outputs):
    return [arrays[0]]


def _fold_where(cv, arrays, attrs, outputs):
    return [np.where(*arrays)]


def _fold_reduce(function):
    def fold(cv, arrays, attrs, outputs):
        x = arrays[0]
        axes = attrs.get("axes")
        if axes is None and len(arrays) > 1 and arrays[1] is not None:
            axes = [int(a) for a in arrays[1].reshape(-1)]
        if not axes:
            axes = () if attrs.get("noop_with_empty_axes", 0) else None
        else:
            axes = tuple(int(a) for a in axes)
        result = function(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1)))
        return [np.asarray(result).astype(x.dtype, copy=False)]
    return fold


def _fold_arg(function):
    def fold(cv, arrays, attrs, outputs):
        if attrs.get("select_last_index", 0):
            raise cv.unsupported("select_last_index=1 (jitnn gives the first index)")
        axis = int(attrs.get("axis", 0))
        result = function(arrays[0], axis=axis)
        if attrs.get("keepdims", 1):
            result = np.expand_dims(result, axis)
        return [np.asarray(result, np.int64)]
    return fold


def _fold_pow(cv, arrays, attrs, outputs):
    x, y = arrays
    with np.errstate(all="ignore"):
        return [np.power(x, y.astype(x.dtype) if x.dtype.kind == "f" else y).astype(x.dtype)]


def _fold_clip(cv, arrays, attrs, outputs):
    """``min(max(x, min), max)`` in x's dtype (so min > max gives max, as ONNX says);
    the bounds are attributes before opset 11, optional inputs since."""
    x = arrays[0]
    if cv.opset < 11:
        bounds = [attrs.get("min"), attrs.get("max")]
    else:
        bounds = [arrays[i] if len(arrays) > i else None for i in (1, 2)]
    y = x
    if bounds[0] is not None:
        y = np.maximum(y, np.asarray(bounds[0]).astype(x.dtype).reshape(()))
    if bounds[1] is not None:
        y = np.minimum(y, np.asarray(bounds[1]).astype(x.dtype).reshape(()))
    return [np.asarray(y, dtype=x.dtype)]


def _fold_eye_like(cv, arrays, attrs, outputs):
    """EyeLike reads its input's shape and type only: ones on diagonal ``k``
    (XLNet builds its attention masks with one), in ``dtype`` or the input's type."""
    x = arrays[0]
    if x.ndim != 2:
        raise cv.invalid(f"an input of shape {x.shape}: EyeLike needs a 2-D tensor")
    dtype = onnx_dtype(int(attrs["dtype"])) if "dtype" in attrs else cv.onnx_type(cv.inputs[0])
    return [np.eye(*x.shape, k=int(attrs.get("k", 0)), dtype=dtype)]


def _fold_mod(cv, arrays, attrs, outputs):
    a, b = arrays
    with np.errstate(all="ignore"):
        return [(np.fmod if attrs.get("fmod", 0) else np.mod)(a, b).astype(a.dtype)]


def _fold_is_inf(cv, arrays, attrs, outputs):
    x = arrays[0]
    positive, negative = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
    return [np.isinf(x) & (((x > 0) & bool(positive)) | ((x < 0) & bool(negative)))]


def _fold_erf(cv, arrays, attrs, outputs):
    x = arrays[0]
    return [np.vectorize(math.erf, otypes=[np.float64])(x).astype(x.dtype)]


def _fold_cum_sum(cv, arrays, attrs, outputs):
    x, axis = arrays[0], int(arrays[1].reshape(-1)[0])
    data = np.flip(x, axis) if attrs.get("reverse", 0) else x
    out = np.cumsum(data, axis=axis, dtype=x.dtype)
    if attrs.get("exclusive", 0):
        out = np.roll(out, 1, axis=axis)
        out[(slice(None),) * (axis % x.ndim) + (0,)] = 0
    return [np.flip(out, axis) if attrs.get("reverse", 0) else out]


def _fold_trilu(cv, arrays, attrs, outputs):
    k = int(arrays[1].reshape(-1)[0]) if len(arrays) > 1 and arrays[1] is not None else 0
    x = arrays[0]
    return [np.triu(x, k) if attrs.get("upper", 1) else np.tril(x, k)]


def _fold_gather_elements(cv, arrays, attrs, outputs):
    x, index = arrays
    axis = int(attrs.get("axis", 0)) % x.ndim
    index = np.where(index < 0, index + x.shape[axis], index)
    return [np.take_along_axis(x, index.astype(np.int64), axis=axis)]


def _fold_gather_nd(cv, arrays, attrs, outputs):
    x, index = arrays
    batch = int(attrs.get("batch_dims", 0))
    lead = x.shape[:batch]
    xs = x.reshape((-1,) + x.shape[batch:])
    ids = index.reshape((xs.shape[0], -1, index.shape[-1])).astype(np.int64)
    k = ids.shape[-1]
    picked = [[xs[b][tuple(row)] for row in ids[b]] for b in range(xs.shape[0])]
    return [np.array(picked, x.dtype).reshape(lead + index.shape[batch:-1] + x.shape[batch + k:])]


def _fold_scatter_elements(cv, arrays, attrs, outputs):
    if attrs.get("reduction", "none") != "none":
        raise cv.unsupported(f"reduction={attrs['reduction']!r} (jitnn's scatters replace)")
    x, index, updates = arrays
    axis = int(attrs.get("axis", 0)) % x.ndim
    out = x.copy()
    index = np.where(index < 0, index + x.shape[axis], index).astype(np.int64)
    np.put_along_axis(out, index, updates, axis=axis)
    return [out]


def _fold_scatter_nd(cv, arrays, attrs, outputs):
    if attrs.get("reduction", "none") != "none":
        raise cv.unsupported(f"reduction={attrs['reduction']!r} (jitnn's scatters replace)")
    x, index, updates = arrays
    out = x.copy()
    for row in np.ndindex(index.shape[:-1]):
        out[tuple(index[row])] = updates[row]
    return [out]


def _fold_pad(cv, arrays, attrs, outputs):
    x = arrays[0]
    rank = x.ndim
    if cv.opset < 11:
        pads = list(attrs.get("pads", attrs.get("paddings", [0] * 2 * rank)))
        value, axes = attrs.get("value", 0.0), list(range(rank))
    else:
        pads = [int(p) for p in arrays[1].reshape(-1)]
        value = arrays[2].reshape(-1)[0] if len(arrays) > 2 and arrays[2] is not None \
            and arrays[2].size else 0
        axes = [int(a) % rank for a in arrays[3].reshape(-1)] if len(arrays) > 3 and \
            arrays[3] is not None else list(range(rank))
    widths = [[0, 0] for _ in range(rank)]
    for k, axis in enumerate(axes):
        widths[axis] = [pads[k], pads[k + len(axes)]]
    index = tuple(slice(max(0, -b), x.shape[i] - max(0, -e)) for i, (b, e) in enumerate(widths))
    x = x[index]
    widths = [(max(0, b), max(0, e)) for b, e in widths]
    mode = attrs.get("mode", "constant")
    if mode == "constant":
        return [np.pad(x, widths, constant_values=np.asarray(value).astype(x.dtype))]
    return [np.pad(x, widths, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _fold_batch_normalization(cv, arrays, attrs, outputs):
    """BatchNormalization of constants: a weight standardized by a batch norm in
    training mode (NF-Nets' ScaledStdConv2d), in the input's dtype."""
    x, scale, bias, mean, var = arrays[:5]
    epsilon = float(attrs.get("epsilon", 1e-5))
    training = batch_norm_training(cv, attrs, outputs)
    lanes = (-1,) + (1,) * (x.ndim - 2)
    if training:
        axes = tuple(i for i in range(x.ndim) if i != 1)
        current_mean, current_var = x.mean(axis=axes), x.var(axis=axes)
    else:
        current_mean, current_var = mean, var
    y = (x - current_mean.reshape(lanes)) / np.sqrt(current_var.reshape(lanes) + epsilon) \
        * scale.reshape(lanes) + bias.reshape(lanes)
    results = [y.astype(x.dtype)]
    if training and outputs > 1:
        momentum = float(attrs.get("momentum", 0.9))
        results += [(mean * momentum + current_mean * (1 - momentum)).astype(x.dtype),
                    (var * momentum + current_var * (1 - momentum)).astype(x.dtype)]
    return results


def _fold_cast_like(cv, arrays, attrs, outputs):
    return [arrays[0].astype(arrays[1].dtype)]


FOLD: dict[str, Callable] = {
    "Constant": _fold_constant, "ConstantOfShape": _fold_constant_of_shape,
    "Shape": _fold_shape, "Gather": _fold_gather, "Unsqueeze": _fold_unsqueeze,
    "Squeeze": _fold_squeeze, "Cast": _fold_cast, "Slice": _fold_slice, "Concat": _fold_concat,
    "Reshape": _fold_reshape, "Range": _fold_range, "Split": _fold_split,
    "Expand": _fold_expand, "Tile": _fold_numpy(np.tile), "Transpose": _fold_transpose, "Flatten": _fold_flatten,
    "Identity": _fold_identity, "Where": _fold_where,
    "Add": _fold_legacy(np.add), "Sub": _fold_legacy(np.subtract),
    "Mul": _fold_legacy(np.multiply), "Div": _fold_div,
    "Max": _fold_variadic(np.maximum), "Min": _fold_variadic(np.minimum),
    "Sum": _fold_variadic(np.add),
    "Neg": _fold_numpy(np.negative), "Abs": _fold_numpy(np.abs),
    "Floor": _fold_numpy(np.floor), "Ceil": _fold_numpy(np.ceil),
    "Sqrt": _fold_numpy(np.sqrt),
    "Equal": _fold_numpy(np.equal), "Less": _fold_numpy(np.less),
    "Greater": _fold_numpy(np.greater), "Not": _fold_numpy(np.logical_not),
    "GreaterOrEqual": _fold_numpy(np.greater_equal), "LessOrEqual": _fold_numpy(np.less_equal),
    "And": _fold_numpy(np.logical_and), "Or": _fold_numpy(np.logical_or),
    "Xor": _fold_numpy(np.logical_xor),
    "Exp": _fold_numpy(np.exp), "Log": _fold_numpy(np.log), "Sin": _fold_numpy(np.sin),
    "Cos": _fold_numpy(np.cos), "Tan": _fold_numpy(np.tan), "Erf": _fold_erf,
    "Reciprocal": _fold_numpy(np.reciprocal), "Sign": _fold_numpy(np.sign),
    "Round": _fold_numpy(np.round), "IsNaN": _fold_numpy(np.isnan), "IsInf": _fold_is_inf,
    "Pow": _fold_pow, "Mod": _fold_mod, "Clip": _fold_clip, "CastLike": _fold_cast_like,
    "ReduceProd": _fold_reduce(np.prod), "ReduceSum": _fold_reduce(np.sum),
    "ReduceMax": _fold_reduce(np.max), "ReduceMin": _fold_reduce(np.min),
    "ReduceMean": _fold_reduce(np.mean),
    "ReduceL1": _fold_reduce(lambda x, **k: np.sum(np.abs(x), **k)),
    "ReduceSumSquare": _fold_reduce(lambda x, **k: np.sum(np.square(x), **k)),
    "ArgMax": _fold_arg(np.argmax), "ArgMin": _fold_arg(np.argmin),
    "CumSum": _fold_cum_sum, "Trilu": _fold_trilu, "GatherElements": _fold_gather_elements,
    "GatherND": _fold_gather_nd, "ScatterElements": _fold_scatter_elements,
    "ScatterND": _fold_scatter_nd, "Pad": _fold_pad, "Einsum": fold_einsum,
    "BatchNormalization": _fold_batch_normalization, "OneHot": fold_one_hot,
    "EyeLike": _fold_eye_like,
}


#: ops folded whatever their inputs: they only read shapes
SHAPE_ONLY = {"Shape", "Size", "EyeLike"}
