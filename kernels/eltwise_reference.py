"""The spec of the elementwise kernels (:mod:`.eltwise`): numpy references
on plain NCHW tensors, in float64, that the tests compare the kernels with.

Operands as the kernels' plain forms: ``x: (N, C, H, W)`` (any rank >= 2),
a chain operand ``(N, C, H, W)``, ``(C,)``, ``(N, C)`` or a scalar.
"""

from __future__ import annotations

import numpy as np

from .eltwise import ADD, DIV, MAXIMUM, MUL, SUB, _activation_code, _op_code
from .epilogue import activation_reference


def unary_reference(x, activation, param0=0.0, param1=0.0):
    """``act(x)`` in float64."""
    return activation_reference(x, _activation_code(activation), param0, param1)


def binary_reference(op, a, b):
    """``a op b`` with numpy broadcasting, in float64."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    code = _op_code(op)
    if code == ADD:
        return a + b
    if code == SUB:
        return a - b
    if code == MUL:
        return a * b
    if code == DIV:
        return a / b
    if code == MAXIMUM:
        return np.maximum(a, b)
    return np.minimum(a, b)


def batch_normalization_reference(x, mean, variance, scale=None, bias=None, epsilon=1e-5):
    """``(x - mean) / sqrt(variance + epsilon) * scale + bias`` over axis 1 of NCHW ``x``."""
    x = np.asarray(x, np.float64)
    per_channel = (1, -1) + (1,) * (x.ndim - 2)

    def column(v, default):
        v = np.full(x.shape[1], default) if v is None else np.asarray(v, np.float64)
        return v.reshape(per_channel)

    return ((x - column(mean, 0.0)) / np.sqrt(column(variance, 1.0) + epsilon)
            * column(scale, 1.0) + column(bias, 0.0))


def _plain_operand(v, x):
    """A chain operand in plain form, shaped to broadcast against NCHW ``x``."""
    v = np.asarray(v, np.float64)
    if v.ndim == 1 and x.ndim >= 2:          # per-channel
        return v.reshape((1, -1) + (1,) * (x.ndim - 2))
    if v.ndim == 2 and x.ndim > 2:           # per-(n, c)
        return v.reshape(v.shape + (1,) * (x.ndim - 2))
    return v                                 # same shape, or a scalar


def eltwise_chain_reference(x, steps):
    """The steps of :func:`eltwise_chain` composed with numpy, on plain NCHW
    ``x`` with plain operands (NCHW tensor, ``(C,)``, ``(N, C)``, scalar)."""
    t = np.asarray(x, np.float64)
    for step in steps:
        if step[0] == "activation":
            t = activation_reference(t, step[1], step[2], step[3])
        elif step[0] == "binary":
            _, op, operand, reverse = step
            y = _plain_operand(operand, t)
            t = binary_reference(op, y, t) if reverse else binary_reference(op, t, y)
        elif step[0] == "affine":
            t = t * _plain_operand(step[1], t) + _plain_operand(step[2], t)
        else:
            raise ValueError(f"eltwise: unknown step {step!r}")
    return t
