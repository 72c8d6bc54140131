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
=========== ==== ======================= =====================================

All arithmetic is float32: numba promotes ``float32 * 0.5`` to float64, which
halves the vector width, so every constant here is an ``np.float32``.

NaN in, NaN out, for every activation (as numpy's ``maximum`` gives it). Numba's
``max(a, b)`` is ``b if b > a else a``: it keeps a NaN in ``a`` but drops one
in ``b``, so the NaN-carrying value always goes first, and
:func:`nan_maximum` / :func:`nan_minimum` serve where either side may be NaN.
"""

import math

import numpy as np

from ._config import jit

NONE, RELU, CLAMP, LEAKY_RELU, SIGMOID, TANH, HARD_SWISH, GELU = range(8)

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
        return _ONE / (_ONE + np.exp(-x))
    if code == TANH:
        return np.tanh(x)
    if code == HARD_SWISH:
        # the gate divided by 6 first: x * 6 overflows for |x| > 5.7e37
        return x * (min(max(x + _THREE, _ZERO), _SIX) * _INV_SIX)
    if code == GELU:
        return _HALF * x * (_ONE + np.float32(math.erf(x * _INV_SQRT2)))
    return x


@jit()
def activate_pixels(yf, start, npix, stride, lanes, act, p0, p1):
    """Apply activation ``act`` in place to ``npix`` pixels of ``lanes``
    channels starting at flat offset ``start``, ``stride`` apart.

    One loop per activation so each loop body holds a single activation
    (``activate`` is called with a constant code and folds to it)."""
    if act == LEAKY_RELU:
        for p in range(npix):
            base = start + p * stride
            for o in range(lanes):
                k = np.uint64(base + o)
                yf[k] = activate(yf[k], LEAKY_RELU, p0, p1)
    elif act == SIGMOID:
        for p in range(npix):
            base = start + p * stride
            for o in range(lanes):
                k = np.uint64(base + o)
                yf[k] = activate(yf[k], SIGMOID, p0, p1)
    elif act == TANH:
        for p in range(npix):
            base = start + p * stride
            for o in range(lanes):
                k = np.uint64(base + o)
                yf[k] = activate(yf[k], TANH, p0, p1)
    elif act == HARD_SWISH:
        for p in range(npix):
            base = start + p * stride
            for o in range(lanes):
                k = np.uint64(base + o)
                yf[k] = activate(yf[k], HARD_SWISH, p0, p1)
    elif act == GELU:
        for p in range(npix):
            base = start + p * stride
            for o in range(lanes):
                k = np.uint64(base + o)
                yf[k] = activate(yf[k], GELU, p0, p1)
    elif act != NONE:
        for p in range(npix):
            base = start + p * stride
            for o in range(lanes):
                k = np.uint64(base + o)
                yf[k] = activate(yf[k], act, p0, p1)


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
    if code == NONE:
        return x
    raise ValueError(f"unknown activation code {code}")
