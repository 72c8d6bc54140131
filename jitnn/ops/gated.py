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

from typing import TYPE_CHECKING

from ..errors import JitnnValueError
from ..kernels import gated as gated_kernels
from ..kernels.buffers import aligned_empty
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import Node, Tensor, Value
from ._common import (Binding, as_tensor, context_of, pending, plain_buffer, plain_layout,
                      value_of)

if TYPE_CHECKING:
    from ..context import Context

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
    axes = x._axes if x.ndim == 4 else "nchw"
    # a node of its own kind: it writes the plan's buffer and replays as one bound call
    xv = value_of(x)
    node = Node(_OP, (xv,), kind="swiglu_rows", attrs={"x": xv, "rows": rows, "width": width},
                run=run_swiglu_rows, sig=("swiglu_rows", rows, width))
    return pending(ctx, shape, plain_layout(len(shape), axes), node, axes=axes)


def run_swiglu_rows(ctx: "Context", node: Node, value: Value,
                    out: np.ndarray | None) -> np.ndarray:
    """The swiglu of a plain tensor's rows, into ``out`` (the plan's buffer) if given."""
    a = node.attrs
    data = plain_buffer(a["x"])
    if out is None or out.shape != value.shape or not out.flags.c_contiguous:
        out = aligned_empty(value.shape)
    if out.size:
        ctx.launcher.launch(gated_kernels.swiglu_rows, data.reshape(a["rows"], 2 * a["width"]),
                            out.reshape(a["rows"], a["width"]))
    return out


def bind_swiglu_rows(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_swiglu_rows` just made, bound to its arrays."""
    a = node.attrs
    x = a["x"]
    if x._data is None or not x._data.flags.c_contiguous or x._data.shape != x._shape:
        return None
    call = gated_kernels.bind_swiglu_rows(x._data.reshape(a["rows"], 2 * a["width"]),
                                          result.reshape(a["rows"], a["width"]),
                                          ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], ((x, x._data),), (), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_swiglu_rows.bind = bind_swiglu_rows
register_kind(NodeKind("swiglu_rows", writes_into_buffer=True))


register_op(OpDef(_OP, swiglu, swiglu_reference, layouts="plain",
                  fusion="fused itself: the exported Sigmoid, Mul, Mul of a gated MLP in "
                         "one pass per row, on one GEMM's two halves"))
