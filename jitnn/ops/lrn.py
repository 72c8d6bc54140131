"""lrn: local response normalization across channels (ONNX LRN, AlexNet/GoogLeNet).

``y[n, c] = x[n, c] / (bias + alpha / size * sum(x[n, c']^2))^beta`` over the
channels ``c'`` in ``[c - floor((size - 1) / 2), c + ceil((size - 1) / 2)]``
that exist. A plain-layout op: it reads the plain values (a blocked input is
read back first, one counted reorder) and computes with numpy in float32.
"""

from __future__ import annotations

import numpy as np

from ..errors import JitnnValueError
from ..limits import int_arg, real_arg
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import as_tensor, context_of, plain_result


def lrn_reference(x, size: int, *, alpha: float = 1e-4, beta: float = 0.75,
                  bias: float = 1.0) -> np.ndarray:
    """The spec (ONNX LRN) in float64, channels on axis 1."""
    x = np.asarray(x, np.float64)
    squares = x * x
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    total = np.zeros_like(x)
    channels = x.shape[1]
    for c in range(channels):
        lo, hi = max(0, c - before), min(channels, c + after + 1)
        total[:, c] = squares[:, lo:hi].sum(axis=1)
    return x / (bias + alpha / size * total) ** beta


def lrn(x, size: int, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Tensor:
    """Local response normalization across the channels (axis 1) of ``x``
    (rank >= 3), ONNX semantics and defaults; a plain result."""
    op = "lrn"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    if x.ndim < 3:
        raise JitnnValueError(f"{op}: x must have rank >= 3 (N, C, ...), got shape {x.shape}")
    size = int_arg(op, "size", size, 1)             # a window: <= 2**31 - 1
    # NaN or infinite parameters would make every output NaN, 0 or x
    alpha, beta, bias = (real_arg(op, name, value) for name, value in
                         (("alpha", alpha), ("beta", beta), ("bias", bias)))
    before, after = (size - 1) // 2, -(-(size - 1) // 2)

    def compute(data: np.ndarray) -> np.ndarray:
        squares = np.square(data, dtype=np.float32)
        # a running sum over the channel axis: window sums by differences of prefix sums
        prefix = np.zeros((data.shape[0], data.shape[1] + 1) + data.shape[2:], np.float64)
        np.cumsum(squares, axis=1, dtype=np.float64, out=prefix[:, 1:])
        channels = data.shape[1]
        lo = np.clip(np.arange(channels) - before, 0, channels)
        hi = np.clip(np.arange(channels) + after + 1, 0, channels)
        total = prefix[:, hi] - prefix[:, lo]
        scale = (bias + (alpha / size) * total) ** beta
        return (data / scale).astype(np.float32)

    return plain_result(ctx, x.shape, compute, x, op, x._axes if x.ndim == 4 else "nchw")

register_op(OpDef("lrn", lrn, lrn_reference, onnx=("LRN",)))
