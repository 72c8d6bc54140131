"""Operands of one data type, and the integer math of the element-wise ops
(jitnn/ops/eltwise.py, math.py, logical.py).

WebNN's element-wise ops take operands of one data type. :func:`one_dtype`
finds it and brings host data to it; :func:`integer_op` runs an op on
integer tensors as numpy code on plain buffers (wrapping on overflow, as
numpy and C do). The integer ``div`` truncates toward zero (WebNN) and gives
0 for ``x / 0`` (WebNN leaves it undefined); a negative integer power
truncates ``1 / a**-b`` toward zero.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..tensor import FLOAT32, Tensor, as_array_copy
from ._common import ANY_DTYPE, as_tensor, is_number, plain_into_op, plain_op

if TYPE_CHECKING:
    from ..context import Context

#: float32 and the signed integer types (WebNN's relu, prelu, abs, neg, sign)
SIGNED_DTYPES = tuple(np.dtype(t) for t in (np.float32, np.int8, np.int32, np.int64))


def _prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, x * slope)


def _pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.power(a, b)


#: the binary ops on numpy arrays (float64 ones: the references)
NUMPY_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
    "maximum": np.maximum, "minimum": np.minimum, "pow": _pow, "prelu": _prelu}


def _truncating_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer ``a / b`` rounded toward zero (WebNN), 0 where ``b`` is 0."""
    q = np.floor_divide(a, b)                     # 0 where b == 0 (numpy)
    inexact = (a - q * b != 0) & (b != 0)
    if a.dtype.kind == "i":
        return q + (inexact & ((a < 0) != (b < 0))).astype(q.dtype)
    return q                                      # unsigned: floor is truncation


def _integer_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Integer ``a ** b`` (wrapping); a negative exponent truncates ``1 / a**-b``
    toward zero: 1 for a = 1, +-1 for a = -1, else 0 (also for a = 0)."""
    a, b = np.broadcast_arrays(a, b)
    negative = b < 0
    out = np.power(a, np.where(negative, 0, b).astype(b.dtype))
    if negative.any():
        odd = (b % 2) != 0
        inverse = np.where(a == 1, 1, np.where(a == -1, np.where(odd, -1, 1), 0))
        out = np.where(negative, inverse, out).astype(a.dtype)
    return out


#: ... on integer arrays of one type (the ops and their references)
INTEGER_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    **NUMPY_BINARY, "div": _truncating_div, "pow": _integer_pow}

#: the ufuncs that never warn on integer arrays (they wrap around on overflow)
_INTO_UFUNCS = (np.add, np.subtract, np.multiply, np.maximum, np.minimum)


def integer_bounds(op: str, dtype: np.dtype, lo, hi) -> tuple:
    """clamp's bounds for an integer type: ``ceil(lo)``, ``floor(hi)``, within
    the type's range (infinite bounds are its ends), as that type's values."""
    info = np.iinfo(dtype)
    lo = info.min if lo == -np.inf else max(math.ceil(lo), info.min)
    hi = info.max if hi == np.inf else min(math.floor(hi), info.max)
    if lo > hi:
        raise JitnnValueError(f"{op}: no {np.dtype(dtype)} value lies between min_value and "
                              f"max_value (within the type's range they give {lo} > {hi})")
    return dtype.type(lo), dtype.type(hi)


def one_dtype(ctx: Context, op: str, operands: tuple, dtypes: tuple = ANY_DTYPE,
              *, numbers: bool = True) -> tuple[np.dtype, list]:
    """The common data type of an op's operands ``((name, value), ...)`` (WebNN:
    one type for all of them) and the operands in it: Tensors as they are, host
    data as Tensors of that type, Python numbers as floats when it is float32
    and ``numbers`` (the kernels' scalar operands), else as 0-d tensors.

    The type is the Tensors' (they must agree); with no Tensor, the host
    arrays' own integer type when they agree and no number is a float, else
    float32. Refused with the op's name: Tensors of different types, a type
    not in ``dtypes``, host data that is not numbers, or (for an integer type)
    values that are not integers of its range."""
    tensors = [(name, v) for name, v in operands if isinstance(v, Tensor)]
    arrays = {}
    if tensors:
        dtype = tensors[0][1].dtype
        for name, t in tensors[1:]:
            if t.dtype != dtype:
                first = tensors[0][0]
                raise JitnnTypeError(
                    f"{op}: {first} and {name} must have the same dtype, got {dtype} and "
                    f"{t.dtype} (convert one with jitnn.cast)")
    else:
        kinds = set()
        for name, v in operands:
            if is_number(v):
                kinds.add(FLOAT32 if isinstance(v, (float, np.floating)) else None)
            else:
                arrays[name] = as_array_copy(v, f"{op}: {name}")
                kinds.add(arrays[name].dtype)
        kinds.discard(None)
        dtype = kinds.pop() if len(kinds) == 1 else FLOAT32
    if dtype not in dtypes:
        names = [d.name for d in dtypes]
        names = ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]
        got = f"a {dtype} tensor" if tensors else f"{dtype} data"
        raise JitnnTypeError(f"{op}: {(tensors or operands)[0][0]} must have dtype {names}, "
                             f"got {got}" + (" (convert it with jitnn.cast)"
                                             if FLOAT32 in dtypes else ""))
    converted = []
    for name, v in operands:
        if isinstance(v, Tensor):
            converted.append(v)
        elif dtype == FLOAT32:
            converted.append(float(v) if numbers and is_number(v)
                             else as_tensor(ctx, arrays.get(name, v), op, name))
        else:
            converted.append(Tensor._holding(ctx, host_integers(
                op, name, arrays.get(name, v), dtype, f"the other operand is a tensor of {dtype}",
                copied=name in arrays)))
    return dtype, converted


def host_integers(op: str, name: str, value: object, dtype: np.dtype, why: str, *,
                  copied: bool = False) -> np.ndarray:
    """Host data as a new array of integer type ``dtype``, if its values are
    integers of that type's range (``why``: the reason it must be that type,
    for the error); ``copied``: ``value`` is already an array of our own."""
    array = value if copied else as_array_copy(value, f"{op}: {name}")
    if array.dtype == dtype:
        return array
    info = np.iinfo(dtype)
    with np.errstate(invalid="ignore"):
        ok = array.dtype.kind in "biu" or bool(np.all(np.isfinite(array)) and
                                               np.all(array == np.trunc(array)))
        ok = ok and (array.size == 0 or (int(array.min()) >= info.min
                                         and int(array.max()) <= info.max))
    if not ok:
        raise JitnnTypeError(f"{op}: {name} must hold integers of {dtype}'s range ({why}), "
                             f"got {array.dtype} data"
                             + (f" {array.reshape(-1)[:4].tolist()}" if array.size else ""))
    return np.ascontiguousarray(array.astype(dtype))


def integer_op(ctx: Context, op: str, inputs: tuple, compute: Callable[..., np.ndarray],
               dtype: np.dtype) -> Tensor:
    """An op on integer tensors (numpy on plain buffers, broadcast), of ``dtype``.
    A numpy ufunc of one output (add, mul, maximum...: wrapping silently)
    writes into the plan's buffer (:func:`plain_into_op`)."""
    try:
        shape = tuple(np.broadcast_shapes(*(t.shape for t in inputs)))
    except ValueError:
        raise JitnnValueError(
            f"{op}: the shapes do not broadcast (numpy rules: aligned from the right, each "
            f"pair of dimensions equal or one of them 1): "
            f"{', '.join(str(t.shape) for t in inputs)}") from None

    if isinstance(compute, np.ufunc) and compute.nout == 1 and compute in _INTO_UFUNCS:
        return plain_into_op(ctx, op, inputs, shape, compute, dtype=dtype)

    def run(*arrays: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            out = compute(*arrays)
        return np.ascontiguousarray(np.broadcast_to(out, shape), dtype)
    return plain_op(ctx, op, inputs, shape, run, dtype=dtype)
