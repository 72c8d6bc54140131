"""Vector math: float32 functions written so that a loop of them vectorizes,
and the span loop of the element-wise chain's *math* steps (kernels/eltwise.py).

Buffers: ``src`` and ``dst`` are float32 pointers to ``m`` contiguous floats
(one span of the chain engine: any layout, the engine masks padding lanes).

A loop that calls libm (``math.sin``, ``math.erf``...) stays scalar: numba has
no vector math library here. So every function below is branch-free float
arithmetic (selects, not jumps), inlined into its loop by numba, that LLVM's
loop vectorizer turns into SIMD code (AVX2, AVX-512), and the chain engine
applies one function per loop (``math_span``: one loop per code, the code
looked up once per span). They are kept out of ``epilogue.activate``, which
every conv2d and matmul kernel compiles: a code here costs those kernels
nothing. The chain's gelu is ``epilogue.vector_gelu`` (< 4.2 ulp), every GELU's,
imported here as :func:`gelu`.

=============== ==== ============== ============================================
name            code param0, 1      value (float32 accuracy, measured by the
                                    tests over dense sweeps and the specials)
=============== ==== ============== ============================================
identity        0    -              ``x``
abs             1    -              ``|x|``
neg             2    -              ``-x``
ceil            3    -              ``ceil(x)``
floor           4    -              ``floor(x)``
round_even      5    -              nearest integer, halves to even
sign            6    -              1, -1, or 0 for +-0 (NaN stays)
sqrt            7    -              correctly rounded
reciprocal      8    -              ``1 / x``
exp             9    -              ``epilogue.vector_exp``, <= 2 ulp
log             10   -              :func:`vector_log`, < 1 ulp
erf             11   -              :func:`vector_erf`, < 1.5 ulp
sin, cos, tan   12-14               :func:`_trig`, < 0.51 ulp (float64 inside)
elu             15   alpha          ``x if x > 0 else alpha (e^x - 1)``,
                                    :func:`vector_expm1`, < 2 ulp
softplus        16   -              ``ln(1 + e^x)``, < 3 ulp
softsign        17   -              ``x / (1 + |x|)`` (+-1 at +-inf), < 2 ulp
hard_sigmoid    18   alpha, beta    ``max(0, min(1, alpha x + beta))``
linear          19   alpha, beta    ``alpha x + beta``
pow             20   exponent       ``x ** exponent`` as numpy's (C's pow; 0.5
                                    is sqrt): products for the exponents 0,
                                    +-1, +-2, 3, 4 (< 2.5 ulp), sqrt for +-0.5,
                                    else libm's ``pow`` in float64 (scalar)
gelu_tanh       21   -              ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
                                    x^3)))``, :func:`gelu_tanh`, < 3.5 ulp down
                                    to 1e-36 in magnitude (then 0)
=============== ==== ============== ============================================

NaN in, NaN out everywhere (``pow(NaN, 0)`` is 1, as IEEE says); infinities
and denormals as the float64 functions give them. sin, cos and tan reduce
the argument in float64 (exact for ``|x| < 1e6``) and evaluate float64
polynomials: their one error is the final rounding to float32; larger
arguments take a scalar loop over libm's float64 functions. Coefficients are
near-minimax fits (Lawson's iteratively reweighted least squares, in mpmath
precision) made for this module. jitnn's fast-math flags include ``nsz``, so
LLVM may drop the sign of a zero result; the odd functions keep -0 by an
explicit select (the tests check erf, sin, tan, sqrt and softsign).
"""

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._config import FASTMATH, jit
from .epilogue import _float_from_bits, expm1_reduced, fma, vector_exp
from .epilogue import vector_gelu as gelu       # the chain's gelu (conv, matmul epilogues too)


def _inline(function):
    """A scalar function inlined into its callers by numba (``inline="always"``,
    jitnn's fastmath): LLVM's inliner left the larger ones (erf, expm1, tan) as
    calls inside the loops, which then stayed scalar."""
    return numba.njit(inline="always", fastmath=set(FASTMATH), nogil=True,
                      error_model="numpy")(function)

(IDENTITY, ABS, NEG, CEIL, FLOOR, ROUND_EVEN, SIGN, SQRT, RECIPROCAL, EXP, LOG, ERF,
 SIN, COS, TAN, ELU, SOFTPLUS, SOFTSIGN, HARD_SIGMOID, LINEAR, POW, GELU_TANH) = range(22)

#: math step name -> code, as the runtime spells them
MATH_OPS = {"identity": IDENTITY, "abs": ABS, "neg": NEG, "ceil": CEIL, "floor": FLOOR,
            "round_even": ROUND_EVEN, "sign": SIGN, "sqrt": SQRT, "reciprocal": RECIPROCAL,
            "exp": EXP, "log": LOG, "erf": ERF, "sin": SIN, "cos": COS, "tan": TAN,
            "elu": ELU, "softplus": SOFTPLUS, "softsign": SOFTSIGN,
            "hard_sigmoid": HARD_SIGMOID, "linear": LINEAR, "pow": POW,
            "gelu_tanh": GELU_TANH}

_F = np.float32
_ZERO, _ONE, _HALF, _TWO = _F(0.0), _F(1.0), _F(0.5), _F(2.0)
_INF = _F(np.inf)
_NAN = _F(np.nan)


@intrinsic
def _bits_of_float(typingctx, x):
    """The IEEE bit pattern of the float32 ``x`` as an int32 (a bitcast)."""
    if x != types.float32:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(32))

    return types.int32(x), codegen


# --- log, log1p, expm1 ----------------------------------------------------------

#: log(1 + f) = f - f^2 / 2 + f^3 P(f) for f in [sqrt(1/2) - 1, sqrt(2) - 1]
#: (P's relative error 6.5e-8 before rounding to float32)
_LOG_P = tuple(_F(c) for c in (0.3333333, -0.24999994, 0.20000714, -0.16668057,
                                0.14249323, -0.12420144, 0.11677003, -0.11514591,
                                0.07037648))
_LN2_HIGH = _F(0.693359375)                 # ln 2 in two parts: e * high is exact
_LN2_LOW = _F(-2.12194440e-4)
_SQRT2 = _F(1.4142135)
_MIN_NORMAL = _F(1.17549435e-38)
_TWO23 = _F(8388608.0)


@_inline
def vector_log(x):
    """``ln(x)`` for float32 ``x``, branch-free (< 1 ulp): ``x = 2^e m`` with
    ``m`` in ``[sqrt(1/2), sqrt(2))`` from the exponent bits (denormals scaled
    by 2^23 first), ``ln m`` by a polynomial in ``m - 1``. ``ln 0 = -inf``,
    ``ln x = NaN`` below 0, ``ln inf = inf``, NaN stays NaN."""
    small = x < _MIN_NORMAL
    scaled = x * _TWO23 if small else x
    bits = _bits_of_float(scaled)
    e = ((bits >> 23) & 0xFF) - 127 - (23 if small else 0)
    m = _float_from_bits((bits & 0x7FFFFF) | 0x3F800000)       # [1, 2)
    big = m > _SQRT2
    m = m * _HALF if big else m
    e = e + 1 if big else e
    f = m - _ONE                                               # exact
    p = _LOG_P[8]
    p = p * f + _LOG_P[7]
    p = p * f + _LOG_P[6]
    p = p * f + _LOG_P[5]
    p = p * f + _LOG_P[4]
    p = p * f + _LOG_P[3]
    p = p * f + _LOG_P[2]
    p = p * f + _LOG_P[1]
    p = p * f + _LOG_P[0]
    z = f * f
    ef = _F(e)
    y = f * z * p + ef * _LN2_LOW - _HALF * z
    r = f + y + ef * _LN2_HIGH
    r = r if x > _ZERO else (-_INF if x == _ZERO else _NAN)
    r = x if x == _INF else r
    return r if x == x else x


@_inline
def vector_log1p(x):
    """``ln(1 + x)``, accurate for small ``x`` too (``u = 1 + x`` and
    ``ln(u) x / (u - 1)``, which cancels the rounding of ``u``)."""
    u = x + _ONE
    d = u - _ONE
    r = vector_log(u) * (x / d)
    r = x if d == _ZERO else r
    r = x if x == _INF else r
    return r if x == x else x


_EXPM1_MIN = _F(-88.0)                  # e**x - 1 rounds to -1 below
_EXPM1_BIG = _F(40.0)                   # above: e**x, the - 1 is lost in rounding
_LOG2E = _F(1.4426950408889634)


@_inline
def vector_expm1(x):
    """``e**x - 1``, accurate near 0 too: ``x = n ln 2 + r``, ``e**r - 1`` by
    the polynomial of ``epilogue.vector_exp`` without its 1, then
    ``2^n (e**r - 1) + (2^n - 1)``; above 40, ``vector_exp``."""
    c = min(max(x, _EXPM1_MIN), _EXPM1_BIG)
    c = c if c == c else _ZERO
    n = np.floor(c * _LOG2E + _HALF)
    r = c - n * _LN2_HIGH - n * _LN2_LOW
    em1 = expm1_reduced(r)
    scale = _float_from_bits((np.int32(n) + 127) << 23)        # 2^n, n in [-127, 58]
    scale = scale if n > _F(-127.0) else _ZERO
    r = scale * em1 + (scale - _ONE)
    r = vector_exp(x) if x > _EXPM1_BIG else r
    return r if x == x else x


# --- erf ----------------------------------------------------------------------------

#: erf(x) = x + x P(x^2) for |x| < 1 (P's error 1.2e-9)
_ERF_SMALL = tuple(_F(c) for c in (0.12837916612625122, -0.3761262595653534,
                                    0.11283600330352783, -0.026854444295167923,
                                    0.005189535208046436, -0.0008020842215046287,
                                    7.88912147982046e-05))
#: ln(erfc(t)) + t^2 = Q(t - 2.5) for t in [1, 4] (Q's error 1.2e-8); erf(t)
#: rounds to 1 from t = 3.92 on
_ERF_LARGE = tuple(_F(c) for c in (-1.556815266609192, -0.35268068313598633,
                                    0.05610639229416847, -0.010858487337827682,
                                    0.0021650814451277256, -0.0004201731353532523,
                                    7.745493348920718e-05, -1.3301707440405153e-05,
                                    1.5998168692021864e-06))
_FOUR = _F(4.0)
_ERF_CENTER = _F(2.5)


@_inline
def _erf_small(x):
    """``erf(x)`` for ``|x| < 1``: ``x + x P(x^2)``."""
    s = x * x
    p = _ERF_SMALL[6]
    p = p * s + _ERF_SMALL[5]
    p = p * s + _ERF_SMALL[4]
    p = p * s + _ERF_SMALL[3]
    p = p * s + _ERF_SMALL[2]
    p = p * s + _ERF_SMALL[1]
    p = p * s + _ERF_SMALL[0]
    return x * p + x


@_inline
def _erfc_large(t, t_low):
    """``erfc(t + t_low)`` for ``t`` in ``[1, 4]`` (``t_low``: a tiny part of
    the argument that ``t`` could not hold): ``e**(Q(t) - (t + t_low)^2)``,
    the square exact to first order (``t^2`` as a sum of two floats by an
    FMA), so the value is accurate relative to itself, not only to 1."""
    u = t - _ERF_CENTER
    q = _ERF_LARGE[8]
    q = q * u + _ERF_LARGE[7]
    q = q * u + _ERF_LARGE[6]
    q = q * u + _ERF_LARGE[5]
    q = q * u + _ERF_LARGE[4]
    q = q * u + _ERF_LARGE[3]
    q = q * u + _ERF_LARGE[2]
    q = q * u + _ERF_LARGE[1]
    q = q * u + _ERF_LARGE[0]
    high = t * t
    low = fma(t, t, -high)                      # the rounding error of t^2
    # the exponent q - t^2 as a sum of two floats (TwoSum): a float32 exponent
    # near -15 alone would be off by up to 5e-7, 8 ulp of its e**
    a = q - high
    b = a - q
    error = (q - (a - b)) + (-high - b)
    return vector_exp(a) * (_ONE + ((error - low) - _TWO * t * t_low))


@_inline
def vector_erf(x):
    """``erf(x)`` for float32 ``x``, branch-free (< 1.5 ulp): below 1 in
    magnitude an odd polynomial, above ``1 - erfc(|x|)`` with the sign of
    ``x`` (1 from 3.92 on, where erf rounds to 1)."""
    large = _ONE - _erfc_large(min(max(abs(x), _ONE), _FOUR), _ZERO)
    large = -large if x < _ZERO else large
    r = _erf_small(x) if abs(x) < _ONE else large
    return r if x == x else x


# --- sin, cos, tan ---------------------------------------------------------------------

#: sin r = r + r^3 S(r^2), cos r = 1 - r^2 / 2 + r^4 C(r^2) for |r| <= pi / 4
#: (float64; S's error 1.7e-10, C's 5.7e-11)
_SIN_P = (-0.16666666663814975, 0.00833333186277577, -0.00019840081492792736,
          2.724934977487507e-06)
_COS_P = (0.04166666666429911, -0.0013888887665407584, 2.480059744560315e-05,
          -2.7300634175224636e-07)
#: pi / 2 in two float64 parts, the first of 33 bits: j * high is exact for |j| < 2^20
_PIO2_HIGH = 1.5707963267341256
_PIO2_LOW = 6.077100506506192e-11
_TWO_OVER_PI = 0.6366197723675814
#: from here on the reduction is not exact: libm's float64 functions, scalar
TRIG_LIMIT = _F(1e6)


@_inline
def _trig(x, kind):
    """sin (``kind`` 0), cos (1) or tan (2) of float32 ``x`` for ``|x| <
    TRIG_LIMIT``, in float64: ``x = j pi / 2 + r`` (Cody-Waite, exact),
    the polynomials of sin r and cos r, the quadrant ``j mod 4`` choosing."""
    d = np.float64(x)
    j = np.rint(d * _TWO_OVER_PI)
    r = (d - j * _PIO2_HIGH) - j * _PIO2_LOW
    s = r * r
    sp = ((_SIN_P[3] * s + _SIN_P[2]) * s + _SIN_P[1]) * s + _SIN_P[0]
    sin_r = r + r * s * sp
    cp = ((_COS_P[3] * s + _COS_P[2]) * s + _COS_P[1]) * s + _COS_P[0]
    cos_r = 1.0 - 0.5 * s + s * s * cp
    # the quadrant j mod 4, in floats; cos x = sin(x + pi / 2): one quadrant on.
    # Selects, not branches, on ``kind`` too: the three share one loop
    q = j + (1.0 if kind == 1 else 0.0)
    q = q - 4.0 * np.floor(q * 0.25)
    odd = (q == 1.0) | (q == 3.0)
    v = cos_r if odd else sin_r
    v = -v if q >= 2.0 else v
    tangent = -cos_r / sin_r if odd else sin_r / cos_r
    result = np.float32(tangent if kind == 2 else v)
    return result if x != _ZERO or kind == 1 else x      # keeps the sign of -0


@jit()
def _trig_large(src, dst, m, kind):
    """The elements past TRIG_LIMIT (rare: a scalar pass of compares) by libm."""
    for j in range(m):
        x = src[j]
        if abs(x) >= TRIG_LIMIT and abs(x) < _INF:
            d = np.float64(x)
            v = math.sin(d) if kind == 0 else math.cos(d) if kind == 1 else math.tan(d)
            dst[j] = np.float32(v)


# --- the small ones ----------------------------------------------------------------------

@_inline
def scalar_pow(x, y):
    """``x ** y`` for float32 ``x, y`` by libm's float64 ``pow`` (C99's
    special cases: ``pow(x, 0) = 1``, ``pow(-8, 1/3) = NaN``, ``pow(0, -1) =
    inf``); not vectorized."""
    return np.float32(math.pow(np.float64(x), np.float64(y)))


#: 2 sqrt(2 / pi) and the cube's coefficient of the tanh GELU (float64: see gelu_tanh)
_GELU_TANH_SCALE = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_TANH_CUBE = 0.044715


@_inline
def gelu_tanh(x):
    """The tanh approximation of GELU, ``0.5 x (1 + tanh(u))`` with ``u = sqrt(2 /
    pi) (x + 0.044715 x^3)`` (PyTorch's ``approximate="tanh"``, GPT-2's
    ``gelu_new``), computed as ``x / (1 + e^-2u)``, the same value (``1 +
    tanh(u) = 2 / (1 + e^-2u)``): where ``tanh(u)`` nears -1 the sum ``1 +
    tanh(u)`` would cancel, the quotient keeps its digits (-1.2e-37 at x = -10,
    where the float32 sum gives 0). ``2u`` is computed in float64 and split into
    a float32 ``hi + lo``, ``e^-2u = e^-hi (1 - lo)``: a float32 ``2u`` would carry
    a relative error that ``e^-2u`` multiplies by ``|2u|`` (15 ulp at x = -3.2,
    170 near the underflow). -0 and NaN stay, +inf gives +inf, -inf NaN (as the
    formula: -inf times 0)."""
    wide = np.float64(x)
    u2 = _GELU_TANH_SCALE * (wide + _GELU_TANH_CUBE * (wide * wide * wide))
    hi = _F(u2)
    lo = _F(u2 - np.float64(hi)) if abs(hi) < _INF else _ZERO
    return x / (_ONE + vector_exp(-hi) * (_ONE - lo))


@_inline
def _sign(x):
    r = _ONE if x > _ZERO else (-_ONE if x < _ZERO else _ZERO)
    return r if x == x else x


@_inline
def _softplus(x):
    # ln(1 + e^x) = max(x, 0) + ln(1 + e^-|x|): no overflow, no cancellation
    return max(x, _ZERO) + vector_log1p(vector_exp(-abs(x)))


@_inline
def _softsign(x):
    r = x / (_ONE + abs(x))
    return r if abs(x) != _INF else (_ONE if x > _ZERO else -_ONE)


@_inline
def _elu(x, alpha):
    return x if x > _ZERO else alpha * vector_expm1(x)


@_inline
def _rsqrt_pow(x):
    """``x ** -0.5`` as C's pow (inf at +-0, 0 at +-inf), as ``sqrt(x) / x``:
    two correctly rounded operations. (``1 / sqrt(x)`` is what LLVM's
    fast-math turns into a reciprocal square root estimate.)"""
    r = np.sqrt(x) / x
    r = _INF if x == _ZERO else r
    return _ZERO if abs(x) == _INF else r


@jit()
def _pow_span(src, dst, m, y):
    """``dst = src ** y`` for a scalar exponent: the exponents of decomposed
    normalizations and GELUs exactly (one product or sqrt), others by libm."""
    if y == _TWO:
        for j in range(m):
            dst[j] = src[j] * src[j]
    elif y == _HALF:
        for j in range(m):
            dst[j] = np.sqrt(src[j])                 # numpy's pow(x, 0.5) too
    elif y == _F(3.0):
        for j in range(m):
            dst[j] = src[j] * src[j] * src[j]
    elif y == _ONE:
        for j in range(m):
            dst[j] = src[j]
    elif y == -_ONE:
        for j in range(m):
            dst[j] = _ONE / src[j]
    elif y == _ZERO:
        for j in range(m):
            dst[j] = _ONE
    elif y == _F(-2.0):
        for j in range(m):
            r = _ONE / src[j]                       # not 1 / x^2: x^2 overflows first
            dst[j] = r * r
    elif y == _F(4.0):
        for j in range(m):
            s = src[j] * src[j]
            dst[j] = s * s
    elif y == -_HALF:
        for j in range(m):
            dst[j] = _rsqrt_pow(src[j])
    else:
        for j in range(m):
            dst[j] = scalar_pow(src[j], y)


@jit()
def math_span(src, dst, m, code, p0, p1):
    """``dst = f(src)`` for math code ``code`` (the table above) with
    parameters ``p0, p1``: one loop per code, so each loop body holds one
    function and vectorizes."""
    if code == ABS:
        for j in range(m):
            dst[j] = abs(src[j])
    elif code == NEG:
        for j in range(m):
            dst[j] = -src[j]
    elif code == CEIL:
        for j in range(m):
            dst[j] = np.ceil(src[j])
    elif code == FLOOR:
        for j in range(m):
            dst[j] = np.floor(src[j])
    elif code == ROUND_EVEN:
        for j in range(m):
            dst[j] = np.rint(src[j])
    elif code == SIGN:
        for j in range(m):
            dst[j] = _sign(src[j])
    elif code == SQRT:
        for j in range(m):
            dst[j] = np.sqrt(src[j])
    elif code == RECIPROCAL:
        for j in range(m):
            dst[j] = _ONE / src[j]
    elif code == EXP:
        for j in range(m):
            dst[j] = vector_exp(src[j])
    elif code == LOG:
        for j in range(m):
            dst[j] = vector_log(src[j])
    elif code == ERF:
        for j in range(m):
            dst[j] = vector_erf(src[j])
    elif SIN <= code <= TAN:                # one loop (one copy of the code) for the three
        kind = code - SIN
        for j in range(m):
            dst[j] = _trig(src[j], kind)
        _trig_large(src, dst, m, kind)
    elif code == ELU:
        for j in range(m):
            dst[j] = _elu(src[j], p0)
    elif code == SOFTPLUS:
        for j in range(m):
            dst[j] = _softplus(src[j])
    elif code == SOFTSIGN:
        for j in range(m):
            dst[j] = _softsign(src[j])
    elif code == HARD_SIGMOID:
        for j in range(m):
            dst[j] = max(min(p0 * src[j] + p1, _ONE), _ZERO)   # NaN first: it stays
    elif code == LINEAR:
        for j in range(m):
            dst[j] = p0 * src[j] + p1
    elif code == POW:
        _pow_span(src, dst, m, p0)
    elif code == GELU_TANH:
        for j in range(m):
            dst[j] = gelu_tanh(src[j])
    else:  # IDENTITY
        for j in range(m):
            dst[j] = src[j]
