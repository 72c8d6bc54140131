"""Element-wise comparisons and logic (WebNN): equal, not_equal, greater,
greater_or_equal, lesser, lesser_or_equal; logical_and, logical_or,
logical_xor, logical_not; is_nan, is_infinite; where.

WebNN's booleans are uint8 tensors of 0 and 1. The comparisons take two
operands of one data type (any jitnn type) and give uint8; the logical ops
take uint8 (nonzero is true) and give uint8; is_nan and is_infinite take
float32; ``where(condition, true_value, false_value)`` takes a uint8
condition and two values of one type, which it keeps. Every operand
broadcasts with the others (numpy's rules). NaN compares unequal to
everything, itself included: ``not_equal`` is true for it, the others false.

Plain ops: numpy code on the plain values (a blocked float32 input is read
back once, a counted reorder), with a plain result written into the plan's
buffer (a replayed plan runs each as one bound call: a padding mask's
comparisons cost ~2 us each instead of 10-40 us of Python).
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ..errors import JitnnValueError
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import ANY_DTYPE, FLOAT_ONLY, as_tensor, context_of, plain_into_op
from ._typed import host_integers, one_dtype

_UINT8 = (np.dtype(np.uint8),)

_COMPARISONS: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
    "greater_or_equal": np.greater_equal, "lesser": np.less,
    "lesser_or_equal": np.less_equal}
_LOGICAL: dict[str, Callable[..., np.ndarray]] = {
    "logical_and": np.logical_and, "logical_or": np.logical_or,
    "logical_xor": np.logical_xor, "logical_not": np.logical_not}
_TESTS = {"is_nan": np.isnan, "is_infinite": np.isinf}


# --- the spec --------------------------------------------------------------------

def comparison_reference(op: str, a, b) -> np.ndarray:
    """``a op b`` (numpy broadcasting, exact in the operands' own type) as uint8 0/1."""
    with np.errstate(invalid="ignore"):
        return _COMPARISONS[op](np.asarray(a), np.asarray(b)).astype(np.uint8)


def logical_reference(op: str, *args) -> np.ndarray:
    """The logical op on truth values (nonzero is true), or is_nan / is_infinite
    of a float array, as uint8 0/1."""
    if op in _TESTS:
        return _TESTS[op](np.asarray(args[0])).astype(np.uint8)
    return _LOGICAL[op](*(np.asarray(a) != 0 for a in args)).astype(np.uint8)


def where_reference(condition, true_value, false_value) -> np.ndarray:
    """``true_value`` where ``condition`` is nonzero, else ``false_value`` (all
    three broadcast), in the values' type."""
    true_value, false_value = np.asarray(true_value), np.asarray(false_value)
    return np.where(np.asarray(condition) != 0, true_value, false_value).astype(
        np.result_type(true_value, false_value))


# --- the ops ---------------------------------------------------------------------

def _broadcast_shape(op: str, names: tuple, tensors: tuple) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in tensors)))
    except ValueError:
        shapes = ", ".join(f"{n} {t.shape}" for n, t in zip(names, tensors))
        raise JitnnValueError(
            f"{op}: the shapes do not broadcast (numpy rules: aligned from the right, each "
            f"pair of dimensions equal or one of them 1): {shapes}") from None


def _plain(ctx, op: str, names: tuple, tensors: tuple, into: Callable[..., None],
           dtype: np.dtype) -> Tensor:
    """The result of ``into(*plain values, out)`` (a ufunc: broadcasting its
    operands, casting its booleans into uint8 ``out``)."""
    shape = _broadcast_shape(op, names, tensors)
    return plain_into_op(ctx, op, tensors, shape, into, dtype=dtype)


def _compare(op: str, a, b) -> Tensor:
    ctx = context_of(op, a, b)
    _, tensors = one_dtype(ctx, op, (("a", a), ("b", b)), numbers=False)
    return _plain(ctx, op, ("a", "b"), tuple(tensors), _COMPARISONS[op], np.dtype(np.uint8))


def _truth_values(ctx, op: str, name: str, value: object) -> Tensor:
    """A uint8 tensor, or host data of 0/1 or other uint8 values (bools, ints)."""
    if isinstance(value, Tensor):
        return as_tensor(ctx, value, op, name, _UINT8)
    return Tensor._holding(ctx, host_integers(op, name, value, _UINT8[0],
                                              "WebNN's truth values are uint8"))


def _logic(op: str, *args) -> Tensor:
    names = ("a", "b")[:len(args)]
    ctx = context_of(op, *args)
    tensors = tuple(_truth_values(ctx, op, name, v) for name, v in zip(names, args))
    # numpy's logical ufuncs take a nonzero integer as true
    return _plain(ctx, op, names, tensors, _LOGICAL[op], np.dtype(np.uint8))


def equal(a, b) -> Tensor:
    """``a == b`` as uint8 (any data type, both of one)."""
    return _compare("equal", a, b)


def not_equal(a, b) -> Tensor:
    """``a != b`` as uint8 (true where either is NaN)."""
    return _compare("not_equal", a, b)


def greater(a, b) -> Tensor:
    """``a > b`` as uint8."""
    return _compare("greater", a, b)


def greater_or_equal(a, b) -> Tensor:
    """``a >= b`` as uint8."""
    return _compare("greater_or_equal", a, b)


def lesser(a, b) -> Tensor:
    """``a < b`` as uint8."""
    return _compare("lesser", a, b)


def lesser_or_equal(a, b) -> Tensor:
    """``a <= b`` as uint8."""
    return _compare("lesser_or_equal", a, b)


def logical_and(a, b) -> Tensor:
    """``a and b`` on uint8 truth values (nonzero is true), as 0/1."""
    return _logic("logical_and", a, b)


def logical_or(a, b) -> Tensor:
    """``a or b`` on uint8 truth values, as 0/1."""
    return _logic("logical_or", a, b)


def logical_xor(a, b) -> Tensor:
    """``a xor b`` on uint8 truth values, as 0/1."""
    return _logic("logical_xor", a, b)


def logical_not(a) -> Tensor:
    """``not a`` on uint8 truth values: 1 where ``a`` is 0, else 0."""
    return _logic("logical_not", a)


def _test(op: str, x) -> Tensor:
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", FLOAT_ONLY)
    return _plain(ctx, op, ("x",), (x,), _TESTS[op], np.dtype(np.uint8))


def is_nan(x) -> Tensor:
    """1 where float32 ``x`` is NaN, else 0 (uint8)."""
    return _test("is_nan", x)


def is_infinite(x) -> Tensor:
    """1 where float32 ``x`` is +inf or -inf, else 0 (uint8)."""
    return _test("is_infinite", x)


def where(condition, true_value, false_value) -> Tensor:
    """``true_value`` where the uint8 ``condition`` is nonzero, else
    ``false_value``; the three broadcast together (numpy's rules), the values
    of one data type (any), which the result has."""
    op = "where"
    ctx = context_of(op, condition, true_value, false_value)
    condition = _truth_values(ctx, op, "condition", condition)
    dtype, values = one_dtype(ctx, op, (("true_value", true_value),
                                        ("false_value", false_value)), numbers=False)
    names = ("condition", "true_value", "false_value")
    return _plain(ctx, op, names, (condition, *values), _where_into, dtype)


def _where_into(condition: np.ndarray, true_value: np.ndarray, false_value: np.ndarray,
                out: np.ndarray) -> None:
    """:func:`where` into ``out`` (the values are of its type)."""
    np.copyto(out, np.where(condition, true_value, false_value))


# --- registration ----------------------------------------------------------------------

_ANY = tuple(d.name for d in ANY_DTYPE)
#: name: (WebNN name, ONNX op types the frontend maps to it)
_NAMES = {"equal": ("equal", ("Equal",)), "not_equal": ("notEqual", ()),
          "greater": ("greater", ("Greater",)),
          "greater_or_equal": ("greaterOrEqual", ("GreaterOrEqual",)),
          "lesser": ("lesser", ("Less",)), "lesser_or_equal": ("lesserOrEqual", ("LessOrEqual",)),
          "logical_and": ("logicalAnd", ("And",)), "logical_or": ("logicalOr", ("Or",)),
          "logical_xor": ("logicalXor", ("Xor",)), "logical_not": ("logicalNot", ("Not",)),
          "is_nan": ("isNaN", ("IsNaN",)), "is_infinite": ("isInfinite", ("IsInf",))}
for _name, (_webnn, _onnx) in _NAMES.items():
    _reference = functools.partial(
        comparison_reference if _name in _COMPARISONS else logical_reference, _name)
    _dtypes = _ANY if _name in _COMPARISONS else ("float32",) if _name in _TESTS \
        else ("uint8",)
    register_op(OpDef(_name, globals()[_name], _reference, webnn=_webnn, onnx=_onnx,
                      layouts="reads plain (a blocked input is read back once), writes "
                              "plain uint8", dtypes=_dtypes))
register_op(OpDef("where", where, where_reference, webnn="where", onnx=("Where",),
                  layouts="reads plain (a blocked input is read back once), writes plain",
                  dtypes=_ANY))
