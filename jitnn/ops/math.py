"""Element-wise math (WebNN): the unary functions abs, ceil, floor, exp, log,
neg, sqrt, erf, reciprocal, sin, cos, tan, sign, identity and round_even;
the activations elu, softplus, softsign, hard_sigmoid and linear; the
binary pow and prelu.

float32: each unary op is one *math* step of the element-wise chain engine
(kernels/eltwise.py; its functions in kernels/vmath.py, written to
vectorize), in its input's layout: a blocked input gives a blocked result
(padding lanes zero), a plain one a plain result, and the scheduler merges
a run of them and of the other element-wise ops (``conv -> sqrt -> mul ->
erf -> add``) into one pass over memory. ``pow`` by a number or a
size-1 tensor (a graph's constant exponent) is such a step too,
exact for the exponents decomposed normalizations and GELUs use (``x**2``,
``x**0.5``, ``x**3``); ``pow`` by a tensor and ``prelu`` are binary steps
with numpy broadcasting (jitnn/ops/eltwise.py's lowering).

Integer types, where WebNN allows them (abs, neg, sign, prelu: int8, int32,
int64; identity, pow: every type): numpy code on plain buffers, wrapping
around on overflow (``abs(-128)`` is -128 as int8).

Semantics (the references below are the spec): NaN in, NaN out; ``sign`` is
0 at +-0; ``round_even`` rounds halves to even; ``softsign(+-inf)`` is +-1;
``pow`` is C's ``pow`` (``pow(x, 0) = 1`` even for NaN, ``pow(-8, 1/3) =
NaN``); ``prelu(x, slope)`` is ``x if x >= 0 else slope * x``.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..kernels import vmath
from ..limits import real_arg
from ..registry import OpDef, register_op
from ..tensor import FLOAT32, Tensor
from ._common import ANY_DTYPE, FLOAT_ONLY, as_tensor, context_of, is_number
from ._typed import INTEGER_BINARY, SIGNED_DTYPES, integer_op, one_dtype
from .eltwise import binary_float, binary_reference, unary_step

_erf = np.vectorize(math.erf, otypes=[np.float64])


# --- the spec --------------------------------------------------------------------

def _softsign(x: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.where(np.isinf(x), np.sign(x), x / (1.0 + np.abs(x)))


_FLOAT = {
    "abs": np.abs, "ceil": np.ceil, "floor": np.floor, "exp": np.exp, "log": np.log,
    "neg": np.negative, "sqrt": np.sqrt, "erf": _erf, "reciprocal": lambda x: 1.0 / x,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "sign": np.sign, "identity": np.array,
    "round_even": np.rint, "softplus": lambda x: np.logaddexp(0.0, x), "softsign": _softsign,
}
_INTEGER = {"abs": np.abs, "neg": np.negative, "sign": np.sign, "identity": np.array}


def math_reference(op: str, x, *, alpha: float = 1.0, beta: float = 0.0) -> np.ndarray:
    """WebNN's unary math and activations in float64: ``op`` one of the
    module docstring's; ``elu`` ``x if x > 0 else alpha (e^x - 1)``;
    ``hard_sigmoid`` ``max(0, min(1, alpha x + beta))``; ``linear`` ``alpha x
    + beta`` (the callers give WebNN's defaults: elu alpha 1, hard_sigmoid 0.2
    and 0.5, linear 1 and 0). An integer array (abs, neg, sign, identity): in
    its own type, wrapping."""
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        return np.asarray(_INTEGER[op](x), x.dtype)
    x = x.astype(np.float64)
    with np.errstate(all="ignore"):
        if op == "elu":
            return np.where(x > 0, x, alpha * np.expm1(x))
        if op == "hard_sigmoid":
            return np.maximum(np.minimum(alpha * x + beta, 1.0), 0.0)
        if op == "linear":
            return alpha * x + beta
        return np.asarray(_FLOAT[op](x), np.float64)


# --- the ops ---------------------------------------------------------------------

def _math(op: str, x, param0: float = 0.0, param1: float = 0.0,
          dtypes: tuple = FLOAT_ONLY) -> Tensor:
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", dtypes)
    if x.dtype != FLOAT32:
        return integer_op(ctx, op, (x,), _INTEGER[op], x.dtype)
    return unary_step(ctx, op, x, ("math", vmath.MATH_OPS[op], float(param0), float(param1)))


def _real(op: str, name: str, value: object) -> float:
    return real_arg(op, name, value)      # a number, finite, not NaN


def abs(x) -> Tensor:  # noqa: A001 - WebNN's name
    """``|x|`` (float32, int8, int32, int64)."""
    return _math("abs", x, dtypes=SIGNED_DTYPES)


def ceil(x) -> Tensor:
    """The smallest integer >= ``x``."""
    return _math("ceil", x)


def floor(x) -> Tensor:
    """The largest integer <= ``x``."""
    return _math("floor", x)


def round_even(x) -> Tensor:
    """``x`` rounded to the nearest integer, halves to the even one."""
    return _math("round_even", x)


def exp(x) -> Tensor:
    """``e**x``."""
    return _math("exp", x)


def log(x) -> Tensor:
    """The natural logarithm (``-inf`` at 0, NaN below)."""
    return _math("log", x)


def neg(x) -> Tensor:
    """``-x`` (float32, int8, int32, int64)."""
    return _math("neg", x, dtypes=SIGNED_DTYPES)


def sqrt(x) -> Tensor:
    """The square root (NaN below 0)."""
    return _math("sqrt", x)


def erf(x) -> Tensor:
    """The Gauss error function."""
    return _math("erf", x)


def reciprocal(x) -> Tensor:
    """``1 / x``."""
    return _math("reciprocal", x)


def sin(x) -> Tensor:
    """The sine (radians)."""
    return _math("sin", x)


def cos(x) -> Tensor:
    """The cosine (radians)."""
    return _math("cos", x)


def tan(x) -> Tensor:
    """The tangent (radians)."""
    return _math("tan", x)


def sign(x) -> Tensor:
    """1 for ``x > 0``, -1 for ``x < 0``, 0 for 0 (float32, int8, int32, int64)."""
    return _math("sign", x, dtypes=SIGNED_DTYPES)


def identity(x) -> Tensor:
    """``x``'s values (any data type; a float32 copy is a pass of the chain engine)."""
    return _math("identity", x, dtypes=ANY_DTYPE)


def elu(x, alpha: float = 1.0) -> Tensor:
    """``x if x > 0 else alpha * (e**x - 1)`` (WebNN's default alpha is 1)."""
    return _math("elu", x, _real("elu", "alpha", alpha))


def softplus(x) -> Tensor:
    """``ln(1 + e**x)``."""
    return _math("softplus", x)


def softsign(x) -> Tensor:
    """``x / (1 + |x|)``."""
    return _math("softsign", x)


def hard_sigmoid(x, alpha: float = 0.2, beta: float = 0.5) -> Tensor:
    """``max(0, min(1, alpha * x + beta))`` (WebNN's defaults 0.2 and 0.5)."""
    op = "hard_sigmoid"
    return _math(op, x, _real(op, "alpha", alpha), _real(op, "beta", beta))


def linear(x, alpha: float = 1.0, beta: float = 0.0) -> Tensor:
    """``alpha * x + beta`` (WebNN's defaults 1 and 0)."""
    op = "linear"
    return _math(op, x, _real(op, "alpha", alpha), _real(op, "beta", beta))


def pow(a, b) -> Tensor:  # noqa: A001 - WebNN's name
    """``a ** b`` with numpy broadcasting, both of one data type (any jitnn
    type; integers wrap, and a negative power of an integer truncates ``1 /
    a**-b`` toward zero). A float32 ``a`` to a number, or to a computed
    size-1 tensor of no larger rank (a graph's constant or input: its value
    read when the step runs) is one math step of the element-wise chain."""
    op = "pow"
    ctx = context_of(op, a, b)
    dtype, (a, b) = one_dtype(ctx, op, (("a", a), ("b", b)))
    if dtype != FLOAT32:
        return integer_op(ctx, op, (a, b), INTEGER_BINARY[op], dtype)
    if isinstance(a, Tensor) and is_number(b):
        return unary_step(ctx, op, a, ("math", vmath.POW, float(np.float32(b)), 0.0))
    if isinstance(a, Tensor) and isinstance(b, Tensor) and b.size == 1 and b.ndim <= a.ndim:
        return unary_step(ctx, op, a, ("math", vmath.POW, 0.0, 0.0), scalar=b)
    return binary_float(ctx, op, a, b)


def prelu(x, slope) -> Tensor:
    """``x if x >= 0 else slope * x``, ``slope`` broadcast with ``x`` (numpy's
    rules, both ways as WebNN's); float32, int8, int32 or int64, both of one type."""
    op = "prelu"
    ctx = context_of(op, x, slope)
    names = ("x", "slope")
    dtype, (x, slope) = one_dtype(ctx, op, ((names[0], x), (names[1], slope)), SIGNED_DTYPES)
    if dtype != FLOAT32:
        return integer_op(ctx, op, (x, slope), INTEGER_BINARY[op], dtype)
    return binary_float(ctx, op, x, slope, names)


# --- registration ----------------------------------------------------------------------

_SIGNED = tuple(d.name for d in SIGNED_DTYPES)
_ANY = tuple(d.name for d in ANY_DTYPE)
#: name: (WebNN name, ONNX op types the frontend maps to it, data types)
_UNARY = {
    "abs": ("abs", ("Abs",), _SIGNED), "ceil": ("ceil", ("Ceil",), ("float32",)),
    "floor": ("floor", ("Floor",), ("float32",)), "exp": ("exp", ("Exp",), ("float32",)),
    "log": ("log", ("Log",), ("float32",)), "neg": ("neg", ("Neg",), _SIGNED),
    "sqrt": ("sqrt", ("Sqrt",), ("float32",)), "erf": ("erf", ("Erf",), ("float32",)),
    "reciprocal": ("reciprocal", ("Reciprocal",), ("float32",)),
    "sin": ("sin", ("Sin",), ("float32",)), "cos": ("cos", ("Cos",), ("float32",)),
    "tan": ("tan", ("Tan",), ("float32",)), "sign": ("sign", ("Sign",), _SIGNED),
    "identity": ("identity", ("Identity",), _ANY),
    "round_even": ("roundEven", ("Round",), ("float32",)),
    "elu": ("elu", ("Elu",), ("float32",)), "softplus": ("softplus", ("Softplus",), ("float32",)),
    "softsign": ("softsign", ("Softsign",), ("float32",)),
    "hard_sigmoid": ("hardSigmoid", ("HardSigmoid",), ("float32",)),
    "linear": ("linear", (), ("float32",)),
}
_DEFAULTS = {"hard_sigmoid": {"alpha": 0.2, "beta": 0.5}}
for _name, (_webnn, _onnx, _dtypes) in _UNARY.items():
    _reference = functools.partial(math_reference, _name, **_DEFAULTS.get(_name, {}))
    register_op(OpDef(
        _name, globals()[_name], _reference, webnn=_webnn, onnx=_onnx,
        kinds=("eltwise", "eltwise_plain"),
        layouts="float32: blocked or plain, as its input" + ("; integers: plain"
                                                             if len(_dtypes) > 1 else ""),
        fusion="elementwise: a math step of the chain engine, merges into chains",
        dtypes=_dtypes))
register_op(OpDef(
    "pow", pow, functools.partial(binary_reference, "pow"), webnn="pow", onnx=("Pow",),
    kinds=("eltwise", "eltwise_plain", "binary_plain"),
    layouts="float32: blocked or plain, as its input; integers: plain",
    fusion="elementwise: by a number a math step (exact for 2, 3, 0.5, ...), else a binary "
           "step; merges into chains", dtypes=_ANY))
register_op(OpDef(
    "prelu", prelu, functools.partial(binary_reference, "prelu"), webnn="prelu",
    onnx=("PRelu",), kinds=("eltwise", "eltwise_plain", "binary_plain"),
    layouts="float32: blocked or plain, as its input; integers: plain",
    fusion="elementwise: a binary step, merges into chains", dtypes=_SIGNED))
