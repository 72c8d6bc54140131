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
from ._convert import _legacy_broadcast, op_shape


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
    from onnx import numpy_helper
    if "value" in attrs:
        return [numpy_helper.to_array(attrs["value"])]
    for key, dtype in (("value_float", np.float32), ("value_floats", np.float32),
                       ("value_int", np.int64), ("value_ints", np.int64)):
        if key in attrs:
            return [np.array(attrs[key], dtype)]
    raise cv.unsupported(f"attributes {sorted(attrs)}")


def _fold_constant_of_shape(cv, arrays, attrs, outputs):
    from onnx import numpy_helper
    value = numpy_helper.to_array(attrs["value"]).reshape(-1)[0] if "value" in attrs \
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
            axes = [int(a) for a in arrays[1]]
        axes = tuple(axes) if axes else None
        return [np.asarray(function(x, axis=axes, keepdims=bool(attrs.get("keepdims", 1))))]
    return fold


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
    "And": _fold_numpy(np.logical_and), "Or": _fold_numpy(np.logical_or),
    "ReduceProd": _fold_reduce(np.prod), "ReduceSum": _fold_reduce(np.sum),
    "ReduceMax": _fold_reduce(np.max), "ReduceMin": _fold_reduce(np.min),
}


#: ops folded whatever their inputs: they only read shapes
SHAPE_ONLY = {"Shape", "Size"}
