"""The gated linear unit of Llama-style MLPs: ``swiglu(x)`` is ``silu(x[...,
:N]) * x[..., N:]`` over the last axis of ``2 N`` values, one pass per row
(kernels/gated.py).

The ONNX loader (jitnn/onnx/_gated_mlp.py) packs an MLP's ``gate_proj`` and
``up_proj`` weights side by side so that the two products of one input run
as one GEMM, whose output this op reads: the exported ``Sigmoid``, ``Mul``,
``Mul`` (three launches and passes) become one pass.

``x``: float32, rank >= 1, last axis even. Plain in, plain out.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import JitnnValueError
from ..kernels import gated as gated_kernels
from ..kernels.buffers import aligned_empty
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import as_tensor, context_of, plain_op

_OP = "swiglu"


def swiglu_reference(x) -> np.ndarray:
    """``silu(x[..., :N]) * x[..., N:]``, float64."""
    x = np.asarray(x, np.float64)
    n = x.shape[-1] // 2
    gate, up = x[..., :n], x[..., n:]
    return gate / (1.0 + np.exp(-gate)) * up


def swiglu(x) -> Tensor:
    """``silu(x[..., :N]) * x[..., N:]`` (see the module docstring)."""
    ctx = context_of(_OP, x)
    x = as_tensor(ctx, x, _OP, "input")
    if x.ndim < 1 or x.shape[-1] % 2:
        raise JitnnValueError(f"{_OP}: input's last axis must have an even size, got shape "
                              f"{x.shape}")
    width = x.shape[-1] // 2
    shape = tuple(x.shape[:-1]) + (width,)
    rows = math.prod(shape[:-1])

    def compute(xd: np.ndarray) -> np.ndarray:
        out = aligned_empty(shape)
        if out.size:
            ctx.launcher.launch(gated_kernels.swiglu_rows, xd.reshape(rows, 2 * width),
                                out.reshape(rows, width))
        return out

    axes = x._axes if x.ndim == 4 else "nchw"
    return plain_op(ctx, _OP, (x,), shape, compute, axes=axes)


register_op(OpDef(_OP, swiglu, swiglu_reference, layouts="plain",
                  fusion="fused itself: the exported Sigmoid, Mul, Mul of a gated MLP in "
                         "one pass per row, on one GEMM's two halves"))
