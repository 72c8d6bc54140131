"""cast: a tensor's values in another jitnn data type (WebNN cast).

WebNN leaves the results that do not fit the target type implementation-
defined (webmachinelearning/webnn#489); jitnn's rules, one per kind of cast:

* float32 to an integer type: truncated toward zero (``-2.5 -> -2``, what
  WebNN's conformance vectors expect), then saturated to the type's range
  (``300.0 -> 255`` as uint8, ``-1.0 -> 0`` as uint32, ``1e20 -> 2**31 - 1``
  as int32); NaN gives 0. Never undefined, unlike C's conversion;
* integer to integer: the low bits, two's complement (``300 -> 44`` as
  uint8, ``-1 -> 4294967295`` as uint32), as C, numpy and ONNX do;
* to float32: rounded to the nearest float32 (ints above 2**24 may change);
* to its own type: the tensor itself (tensors are immutable), still blocked
  if it was.

float16 is not a jitnn data type: ``type="float16"`` is refused. A plain op
(numpy on the plain values; a blocked input is read back first, one counted
reorder); the result is plain.
"""

from __future__ import annotations

import numpy as np

from ..errors import JitnnTypeError
from ..registry import OpDef, register_op
from ..tensor import DTYPE_NAMES, Tensor, dtype_arg
from ._common import ANY_DTYPE, as_tensor, context_of, plain_into_op


# --- the spec ----------------------------------------------------------------------

def _cast_one(value, target: np.dtype) -> int:
    """One value to an integer type by the module docstring's rules, in
    Python's exact ints."""
    info = np.iinfo(target)
    if isinstance(value, float):
        if value != value:                       # NaN
            return 0
        if abs(value) == float("inf"):
            return info.max if value > 0 else info.min
        return min(max(int(value), info.min), info.max)   # int() truncates toward zero
    span = info.max - info.min + 1
    return (value - info.min) % span + info.min


def cast_reference(x, type) -> np.ndarray:  # noqa: A002 - WebNN's name
    """The spec, in the target type: to an integer type element by element in
    exact arithmetic; to float32 IEEE's rounding to nearest."""
    target = np.dtype(type)
    x = np.asarray(x)
    if target.kind == "f":
        return x.astype(target)
    values = [_cast_one(v, target) for v in x.ravel().tolist()]
    return np.array(values, object).astype(target).reshape(x.shape)


# --- the op -------------------------------------------------------------------------------

def cast_values(data: np.ndarray, target: np.dtype) -> np.ndarray:
    """``data`` in type ``target`` by the module docstring's rules (vectorized)."""
    if data.dtype.kind == "f" and target.kind in "iu":
        info = np.iinfo(target)
        whole = np.trunc(data.astype(np.float64))          # float32 -> float64 is exact
        # compared in float64: the type's max rounds up to a power of two for
        # int64, so f >= max means "does not fit" there too
        low, high = whole <= info.min, whole >= info.max
        out = np.where(low | high | np.isnan(whole), 0, whole).astype(target)
        out[low] = info.min
        out[high] = info.max
        return out
    return data.astype(target)                             # wraps, or rounds to float32


def cast(x, type) -> Tensor:  # noqa: A002 - WebNN's name
    """``x``'s values as data type ``type`` (``"float32"``, ``"int32"``,
    ``"int64"``, ``"uint32"``, ``"int8"``, ``"uint8"`` or a numpy dtype): WebNN
    cast, with the rules of the module docstring (float to int truncates toward
    zero and saturates; int to int wraps; float16 is refused)."""
    op = "cast"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", ANY_DTYPE)
    try:
        float16 = np.dtype(type) == np.float16
    except TypeError:
        float16 = False
    if float16:
        raise JitnnTypeError(f"{op}: type float16 is not a jitnn data type (jitnn computes "
                             "in float32); cast to 'float32' instead")
    target = dtype_arg(op, type, "type")
    if target == x.dtype:
        return x
    return plain_into_op(ctx, op, (x,), x.shape, _cast_into, dtype=target)


def _cast_into(data: np.ndarray, out: np.ndarray) -> None:
    """``data`` cast into ``out``'s type (:func:`cast_values`)."""
    if data.dtype.kind == "f" and out.dtype.kind in "iu":
        np.copyto(out, cast_values(data, out.dtype))
    else:
        np.copyto(out, data, casting="unsafe")              # wraps, or rounds to float32


register_op(OpDef("cast", cast, cast_reference, webnn="cast", onnx=("Cast",),
                  layouts="plain (a blocked input is read back once); to its own type: "
                          "the input as it is",
                  dtypes=DTYPE_NAMES))
