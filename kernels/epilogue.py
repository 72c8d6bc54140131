"""Activations shared by every fused epilogue (conv2d, matmul, eltwise).

An activation is an integer code plus two float32 parameters, so a kernel
takes ``(activation, param0, param1)`` instead of a Python callable:

=========== ==== ======================= =====================================
name        code param0, param1          value
=========== ==== ======================= =====================================
none        0    -                       ``x``
relu        1    -                       ``max(x, 0)``
clamp       2    min, max                ``min(max(x, min), max)`` (relu6: 0, 6)
leaky_relu  3    alpha                   ``x if x >= 0 else alpha * x``
sigmoid     4    -                       ``1 / (1 + exp(-x))``
tanh        5    -                       ``tanh(x)``
hard_swish  6    -                       ``x * min(max(x + 3, 0), 6) / 6``
gelu        7    -                       ``0.5 x (1 + erf(x / sqrt(2)))``
silu        8    -                       ``x / (1 + exp(-x))`` (swish)
hard_sigmoid 9   alpha, beta             ``min(max(alpha x + beta, 0), 1)``
=========== ==== ======================= =====================================

silu and hard_sigmoid are fusion targets only: the scheduler gives a conv2d
or matmul epilogue ``x * sigmoid(x)`` (SiLU, as exporters write it) and a
following ``hard_sigmoid`` (squeeze-and-excitation gates); they are not in
:data:`ACTIVATIONS`, the names an op's ``activation=`` option takes.

All arithmetic is float32: numba promotes ``float32 * 0.5`` to float64, which
halves the vector width, so every constant here is an ``np.float32``.

NaN in, NaN out, for every activation (as numpy's ``maximum`` gives it). Numba's
``max(a, b)`` is ``b if b > a else a``: it keeps a NaN in ``a`` but drops one
in ``b``, so the NaN-carrying value always goes first, and
:func:`nan_maximum` / :func:`nan_minimum` serve where either side may be NaN.

sigmoid and tanh use :func:`vector_exp`, an ``exp`` written out (Cephes'
``expf``: range reduction and a degree-6 polynomial, within 2 ulp) instead of
the C library's: a loop calling ``expf`` or ``tanhf`` cannot be vectorized
(numba has no vector math library here), and measured on 262144 floats, 1
thread, ``tanhf`` took 5.5 ms against numpy's 0.74 ms. gelu is
:func:`vector_gelu`, erfc as one polynomial and an e** (< 4.2 ulp): with
libm's ``erf`` per element, a 1x1 conv 96 -> 384 on 56x56 with its GELU fused
took 15.6 ms against 1.8 ms for the conv and 1.2 ms for a GELU pass.
"""

import math

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from ._config import FASTMATH, jit

NONE, RELU, CLAMP, LEAKY_RELU, SIGMOID, TANH, HARD_SWISH, GELU, SILU, HARD_SIGMOID = range(10)
#: the highest activation code an epilogue takes
LAST_ACTIVATION = HARD_SIGMOID

#: activation name -> code, as the runtime and the docs spell them
ACTIVATIONS = {"none": NONE, "relu": RELU, "clamp": CLAMP, "leaky_relu": LEAKY_RELU,
               "sigmoid": SIGMOID, "tanh": TANH, "hard_swish": HARD_SWISH, "gelu": GELU}

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_HALF = np.float32(0.5)
_THREE = np.float32(3.0)
_SIX = np.float32(6.0)
_INV_SIX = np.float32(1.0 / 6.0)
_INV_SQRT2 = np.float32(1.0 / math.sqrt(2.0))


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose IEEE bit pattern is the low 32 bits of the integer
    ``bits`` (a bitcast: vectorizes, unlike ``ldexp``)."""
    if not isinstance(bits, types.Integer):
        return None

    def codegen(context, builder, signature, args):
        value = args[0]
        if bits.bitwidth > 32:
            value = builder.trunc(value, ir.IntType(32))
        return builder.bitcast(value, ir.FloatType())

    return types.float32(bits), codegen


@intrinsic
def fma(typingctx, a, b, c):
    """``a * b + c`` with one rounding (``llvm.fma``; vectorizes): written
    out, ``x * y - x * y`` is folded to 0 before contraction could keep the
    product's rounding error, and contraction needs FMA units: without them
    (x86-64's baseline) ``llvm.fma`` is a libm call, still one rounding."""
    if not (a == b == c == types.float32):
        return None

    def codegen(context, builder, signature, args):
        return builder.fma(*args)

    return types.float32(a, b, c), codegen


def _inline(function):
    """A scalar function inlined into its callers by numba (``inline="always"``,
    jitnn's fastmath): LLVM's inliner leaves a function as large as
    :func:`vector_gelu` a call inside the loops, which then stay scalar."""
    return numba.njit(inline="always", fastmath=set(FASTMATH), nogil=True,
                      error_model="numpy")(function)


_LOG2E = np.float32(1.4426950408889634)
_LN2_HIGH = np.float32(0.693359375)        # ln 2 in two parts: n * high is exact
_LN2_LOW = np.float32(-2.12194440e-4)
_EXP_MAX = np.float32(89.0)                # e**89 overflows to inf
_EXP_MIN = np.float32(-104.0)              # e**-104 rounds to 0 (denormals above)
_EXP_P = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                       4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))
_TANH_P = tuple(np.float32(c) for c in (-5.70498872745e-3, 2.06390887954e-2,
                                        -5.37397155531e-2, 1.33314422036e-1,
                                        -3.33332819422e-1))
_TANH_SMALL = np.float32(0.625)
_TWO = np.float32(2.0)


@jit()
def expm1_reduced(r):
    """``e**r - 1`` for ``|r| <= ln 2 / 2`` (the reduced argument of
    :func:`vector_exp`), by Cephes' polynomial: ``r + r**2 P(r)``."""
    p = _EXP_P[0]
    p = p * r + _EXP_P[1]
    p = p * r + _EXP_P[2]
    p = p * r + _EXP_P[3]
    p = p * r + _EXP_P[4]
    p = p * r + _EXP_P[5]
    return p * r * r + r


@jit()
def vector_exp(x):
    """``e**x`` for float32 ``x``, branch-free so loops of it vectorize:
    ``x = n ln 2 + r`` with ``|r| <= ln 2 / 2``, ``e**r`` by Cephes' polynomial,
    times ``2**n`` built from exponent bits (in two factors, so that results
    from the largest float down into the denormals come out right). NaN stays
    NaN, inf gives inf, -inf gives 0."""
    clamped = min(max(x, _EXP_MIN), _EXP_MAX)
    clamped = clamped if clamped == clamped else _ZERO      # NaN: any finite value
    n = np.floor(clamped * _LOG2E + _HALF)
    r = clamped - n * _LN2_HIGH - n * _LN2_LOW
    p = expm1_reduced(r) + _ONE
    count = np.int32(n)
    half = count >> 1
    low = _float_from_bits((half + 127) << 23)
    high = _float_from_bits((count - half + 127) << 23)
    result = p * low * high
    return result if x == x else x


@jit()
def vector_tanh(x):
    """``tanh(x)`` for float32 ``x``, branch-free (Cephes' ``tanhf``, within 2
    ulp): an odd polynomial below 0.625 in magnitude, ``1 - 2 / (e**2|x| + 1)``
    above. -0 and NaN come back as they went in."""
    s = x * x
    p = _TANH_P[0]
    p = p * s + _TANH_P[1]
    p = p * s + _TANH_P[2]
    p = p * s + _TANH_P[3]
    p = p * s + _TANH_P[4]
    small = p * s * x + x
    z = abs(x)
    large = _ONE - _TWO / (vector_exp(z + z) + _ONE)
    large = -large if x < _ZERO else large
    small = small if x != _ZERO else x                       # keeps the sign of -0
    return large if z >= _TANH_SMALL else small


_ROUND = np.float32(12582912.0)            # 1.5 * 2**23: adding it rounds to an integer
_SILU_TAIL = np.float32(-87.0)             # e**-87 is a normal float; below, silu is ~0


@jit()
def _silu(x):
    """``x * sigmoid(x)`` (within 3 ulp; 0 below -87, where it is below
    1e-35 in magnitude; NaN for NaN and -inf): ``x / (1 + t)``, times ``t``
    for ``x < 0``, with ``t = e**-|x|`` (no overflow). ``t`` is
    :func:`vector_exp`'s polynomial for arguments in [-87, 0] only, where
    ``2**n`` is one normal float: no clamping of NaN, no two-factor scale,
    and ``n`` rounded by adding and subtracting 1.5 * 2**23 (a NaN ``x``
    only reaches selects that discard it). 25 vector operations instead of
    38: SiLU on 401408 floats, 1 thread, 0.44 -> 0.33 ns per float."""
    a = max(-abs(x), _SILU_TAIL)
    n = (a * _LOG2E + _ROUND) - _ROUND
    r = a - n * _LN2_HIGH - n * _LN2_LOW
    p = expm1_reduced(r) + _ONE
    t = p * _float_from_bits((np.int32(n) + 127) << 23)
    t = t if -abs(x) >= _SILU_TAIL else _ZERO
    q = x / (_ONE + t)
    q = q if x >= _ZERO else q * t
    return q if x == x else x


#: the low part of 1 / sqrt(2) as a sum of two floats (_INV_SQRT2 the high)
_INV_SQRT2_LOW = np.float32(1.2101617485882343e-08)
_FOUR = np.float32(4.0)


#: ln(erfc(t)) + t^2 = G(t - 2) for t in [0, 4], one polynomial for the whole
#: of gelu's range (Chebyshev fit, degree 11: 2.5e-8; in float32 Horner 2.5e-7)
_GELU_ERFC = tuple(np.float32(c) for c in (-1.3649412393569946, -0.4181608259677887,
                                    0.07624869793653488, -0.01646505855023861,
                                    0.0035721093881875277, -0.0007325399783439934,
                                    0.0001338371803285554, -2.0560913981171325e-05,
                                    2.6803320452017942e-06, 1.2712969521544437e-07,
                                    -3.400320736091089e-07, 7.857524053633824e-08))


@_inline
def vector_gelu(x):
    """``0.5 x (1 + erf(x / sqrt 2))`` (< 4.2 ulp against float64 down to x =
    -5.6, then 0: |gelu| < 4.4e-8), every GELU's: the element-wise
    chain's, the conv and matmul epilogues'. One formula for every ``x``, no branch evaluated twice:
    with ``z = x / sqrt 2`` and ``t = min(|z|, 4)``, ``e = erfc(t) = e**(G(t)
    - t^2)`` and ``1 + erf(z)`` is ``e`` for ``z < 0`` (erfc itself, accurate
    relative to itself: no ``1 + erf`` that cancels), ``2 - e`` above, 0 below
    ``z = -4``. ``t^2`` is a sum of two floats (FMA) and e**'s reduced argument
    ``G - t^2 - n ln 2`` takes in its low part: a float32 exponent near -15
    would be off by 8 ulp of its e**; ``z`` carries its rounding error along
    (erfc magnifies it 2 z^2 times). The exponent lies in [-18, 0], so e** needs no clamping and its
    ``2**n`` is one normal float (as :func:`_silu`'s). The erf form with
    two polynomials (|z| < 1 and above) and a general e** took 1.14 ns per
    float, this one 0.80 (AVX-512, 1 thread, 262144 floats)."""
    z = x * _INV_SQRT2
    z_low = fma(x, _INV_SQRT2, -z) + x * _INV_SQRT2_LOW    # z's rounding error
    a = abs(z)
    t = min(a, _FOUR)                                       # NaN stays NaN
    t_low = (z_low if z > _ZERO else -z_low) if a <= _FOUR else _ZERO   # (inf: NaN)
    u = t - _TWO
    g = _GELU_ERFC[11]
    g = g * u + _GELU_ERFC[10]
    g = g * u + _GELU_ERFC[9]
    g = g * u + _GELU_ERFC[8]
    g = g * u + _GELU_ERFC[7]
    g = g * u + _GELU_ERFC[6]
    g = g * u + _GELU_ERFC[5]
    g = g * u + _GELU_ERFC[4]
    g = g * u + _GELU_ERFC[3]
    g = g * u + _GELU_ERFC[2]
    g = g * u + _GELU_ERFC[1]
    g = g * u + _GELU_ERFC[0]
    high = t * t
    low = fma(t, t, -high)                      # the rounding error of t^2
    s = g - high
    n = (s * _LOG2E + _ROUND) - _ROUND
    # r = s - n ln 2 with the low parts: -high - n ln2_high is exact from t = 0.6
    # up (a multiple of high's ulp below 2 high) and off by 3e-8 at most below,
    # where it replaces the TwoSum of g - high (5 operations)
    r = (fma(-n, _LN2_HIGH, -high) + g) + fma(-n, _LN2_LOW, -(low + _TWO * t * t_low))
    e = (expm1_reduced(r) + _ONE) * _float_from_bits((np.int32(n) + 127) << 23)
    one_plus = e if z < _ZERO else _TWO - e
    one_plus = _ZERO if z < -_FOUR else one_plus
    return _HALF * x * one_plus


@jit()
def nan_maximum(a, b):
    """``max(a, b)``, NaN if either is NaN (numpy's ``maximum``). Written with
    ``|``, not ``or``, so it stays one branch-free select that vectorizes."""
    return a if (a > b) | (a != a) else b


@jit()
def nan_minimum(a, b):
    """``min(a, b)``, NaN if either is NaN (numpy's ``minimum``)."""
    return a if (a < b) | (a != a) else b


@jit()
def activate(x, code, param0, param1):
    """Apply activation ``code`` to the float32 scalar ``x``.

    Callers in hot loops should branch on ``code`` outside the loop (or let
    LLVM unswitch it) so each loop body holds one activation.
    """
    if code == RELU:
        return max(x, _ZERO)       # x first: NaN stays NaN
    if code == CLAMP:
        return min(max(x, param0), param1)
    if code == LEAKY_RELU:
        return x if x >= _ZERO else param0 * x
    if code == SIGMOID:
        # e**-|x| never overflows: 1 / (1 + t) for x >= 0, t / (1 + t) below
        # (down to the denormals, where 1 / (1 + e**-x) would give 0)
        t = vector_exp(-abs(x))
        s = _ONE / (_ONE + t)
        return s if x >= _ZERO else t * s
    if code == TANH:
        return vector_tanh(x)
    if code == HARD_SWISH:
        # the gate divided by 6 first: x * 6 overflows for |x| > 5.7e37
        return x * (min(max(x + _THREE, _ZERO), _SIX) * _INV_SIX)
    if code == GELU:
        return vector_gelu(x)
    if code == SILU:
        return _silu(x)
    if code == HARD_SIGMOID:
        return min(max(param0 * x + param1, _ZERO), _ONE)
    return x


@jit()
def activate_span(yf, start, count, act, p0, p1):
    """Apply activation ``act`` in place to ``count`` contiguous floats of
    ``yf`` from flat offset ``start``.

    One loop per activation, so each loop body holds a single activation
    (``activate`` is called with a constant code and folds to it), over
    unsigned indices (no negative-index wraparound in the loop: it
    vectorizes). A conv's tile of a few pixels of a block is one such span:
    looping pixels, then lanes, instead left the 8 lanes of each pixel to the
    scalar remainder of a 16-wide vector loop (sigmoid on 1x96x112x112 in
    4-pixel tiles: 6.1 ms, as one span: 0.57 ms)."""
    base = np.uint64(start)
    n = np.uint64(count)
    if act == LEAKY_RELU:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], LEAKY_RELU, p0, p1)
    elif act == SIGMOID:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], SIGMOID, p0, p1)
    elif act == TANH:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], TANH, p0, p1)
    elif act == HARD_SWISH:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], HARD_SWISH, p0, p1)
    elif act == GELU:
        for j in range(n):
            k = base + j
            yf[k] = vector_gelu(yf[k])          # inlined by numba: the loop vectorizes
    elif act == SILU:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], SILU, p0, p1)
    elif act == HARD_SIGMOID:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], HARD_SIGMOID, p0, p1)
    elif act != NONE:
        for j in range(n):
            k = base + j
            yf[k] = activate(yf[k], act, p0, p1)


@jit()
def activate_pixels(yf, start, npix, stride, lanes, act, p0, p1):
    """Apply activation ``act`` in place to ``npix`` pixels of ``lanes``
    channels starting at flat offset ``start``, ``stride`` apart: one span
    when the pixels are contiguous (``lanes == stride``), else a span per pixel."""
    if lanes == stride:
        activate_span(yf, start, npix * lanes, act, p0, p1)
    else:
        for p in range(npix):
            activate_span(yf, start + p * stride, lanes, act, p0, p1)


def activation_reference(x: np.ndarray, code: int, param0: float = 0.0,
                         param1: float = 0.0) -> np.ndarray:
    """The numpy spec of :func:`activate`, computed in float64."""
    x = np.asarray(x, np.float64)
    if code == RELU:
        return np.maximum(x, 0.0)
    if code == CLAMP:
        return np.minimum(np.maximum(x, param0), param1)
    if code == LEAKY_RELU:
        return np.where(x >= 0, x, param0 * x)
    if code == SIGMOID:
        return 1.0 / (1.0 + np.exp(-x))
    if code == TANH:
        return np.tanh(x)
    if code == HARD_SWISH:
        return x * np.clip(x + 3.0, 0.0, 6.0) / 6.0
    if code == GELU:
        from math import erf
        return 0.5 * x * (1.0 + np.vectorize(erf)(x / math.sqrt(2.0)))
    if code == SILU:
        return x / (1.0 + np.exp(-x))
    if code == HARD_SIGMOID:
        return np.minimum(np.maximum(param0 * x + param1, 0.0), 1.0)
    if code == NONE:
        return x
    raise ValueError(f"unknown activation code {code}")
