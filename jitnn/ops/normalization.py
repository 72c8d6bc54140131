"""batch_normalization (inference, WebNN) and softmax.

batch_normalization folds ``mean``, ``variance``, ``scale``, ``bias`` and
``epsilon`` into one per-channel ``x * a + b`` (float64 fold, then float32) and
runs it with the optional activation in one pass. Along the channel axis of a
blocked input it stays blocked (padding lanes zero although ``b`` is not);
any other case runs on the plain values.

softmax works on plain data (a blocked input is read back first).
"""

from __future__ import annotations

import numpy as np

from ..errors import JitnnValueError
from ..kernels import eltwise as eltwise_kernels
from ..kernels import epilogue
from ..kernels.buffers import aligned_empty
from ..limits import real_arg
from ..plan_cache import exact
from ..registry import OpDef, register_op
from ..tensor import Tensor
from ._common import (as_tensor, axis_index, channel_axis, context_of, is_blocked, is_number,
                      parse_activation, pending, plain_buffer, plain_layout, plain_result,
                      value_of)
from .eltwise import batch_norm_scale_shift, eltwise_node


# --- the spec ----------------------------------------------------------------------

def batch_normalization_reference(x, mean, variance, scale=None, bias=None, *,
                                  epsilon: float = 1e-5, axis: int = 1,
                                  activation=None) -> np.ndarray:
    """``act((x - mean) / sqrt(variance + epsilon) * scale + bias)`` along ``axis``, float64."""
    x = np.asarray(x, np.float64)
    axis = axis % x.ndim
    shape = [1] * x.ndim
    shape[axis] = x.shape[axis]

    def column(v, default: float) -> np.ndarray:
        v = np.full(x.shape[axis], default) if v is None else np.asarray(v, np.float64)
        return v.reshape(shape)

    out = ((x - column(mean, 0.0)) / np.sqrt(column(variance, 1.0) + epsilon)
           * column(scale, 1.0) + column(bias, 0.0))
    code, p0, p1 = parse_activation("batch_normalization", activation)
    return epilogue.activation_reference(out, code, p0, p1)


def softmax_reference(x, axis: int = -1) -> np.ndarray:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``, float64."""
    x = np.asarray(x, np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# --- the ops ---------------------------------------------------------------------------

def batch_normalization(x, mean, variance, scale=None, bias=None, *, epsilon: float = 1e-5,
                        axis: int = 1, activation=None) -> Tensor:
    """WebNN batchNormalization (inference): ``(x - mean) / sqrt(variance + epsilon)
    * scale + bias`` along ``axis`` (1 for NCHW; 3 for NHWC), then ``activation``
    (the names conv2d takes). ``mean``, ``variance``, ``scale``, ``bias``:
    ``(C,)`` with ``C = x.shape[axis]``; ``scale`` defaults to 1, ``bias`` to 0."""
    op = "batch_normalization"
    ctx = context_of(op, x, mean, variance, scale, bias)
    x = as_tensor(ctx, x, op, "x")
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: x must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, x.ndim)
    channels = x.shape[axis]
    vectors = []
    for name, value in (("mean", mean), ("variance", variance), ("scale", scale),
                        ("bias", bias)):
        if value is None:
            vectors.append(None)
            continue
        t = as_tensor(ctx, value, op, name)
        if t.shape != (channels,):
            raise JitnnValueError(
                f"{op}: {name} must have shape ({channels},) for the {channels} channels "
                f"along axis {axis} of x {x.shape}, got {t.shape}")
        vectors.append(t)
    if not is_number(epsilon) or not epsilon >= 0:
        raise JitnnValueError(f"{op}: epsilon must be a number >= 0, got {epsilon!r}")
    code, p0, p1 = parse_activation(op, activation)
    epsilon = real_arg(op, "epsilon", epsilon)     # finite: inf would zero every x - mean

    # Values, not the caller's handles (a handle kept here would count as the
    # caller holding it: see _common.plain_result)
    bn = tuple(value_of(v) for v in vectors) + (epsilon,)

    if is_blocked(x) and axis == channel_axis(x._axes):
        # a node the scheduler can fold into a preceding conv2d (Values only)
        steps = [("affine", bn)]
        if code != epilogue.NONE:
            steps.append(("activation", code, p0, p1))
        inputs = (value_of(x),) + tuple(v for v in bn[:4] if v is not None)
        node = eltwise_node(op, inputs, steps, channels)
        # the node's whole description, given its inputs (see Node.sig): which
        # statistics were given (they are its inputs after x, in order), epsilon
        # and the activation
        node.sig = (op, tuple(v is not None for v in vectors), exact(epsilon), code,
                    exact(p0), exact(p1))
        return pending(ctx, x.shape, x.layout, node, axes=x._axes)

    outer = int(np.prod(x.shape[:axis], dtype=np.int64))
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    view = (outer, channels, inner, 1, 1)      # a plain tensor as nChw1c around the axis
    xv, shape = value_of(x), x.shape

    def produce_plain() -> np.ndarray:
        a, b = batch_norm_scale_shift(bn)
        data = plain_buffer(xv)
        out = aligned_empty(shape)
        if out.size:
            ctx.launcher.launch(eltwise_kernels.batch_normalization, data.reshape(view), a, b,
                        out.reshape(view), channels, code, p0, p1)
        return out

    axes = x._axes if x.ndim == 4 else "nchw"
    return Tensor(ctx, x.shape, plain_layout(x.ndim, axes), producer=produce_plain, axes=axes,
                  inputs=(x, *(v for v in vectors if v is not None)), op=op)


def softmax(x, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis`` (computed as ``exp(x - max)``), on plain data."""
    op = "softmax"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x")
    if x.ndim < 1:
        raise JitnnValueError(f"{op}: x must have rank >= 1, got a scalar")
    axis = axis_index(op, "axis", axis, x.ndim)

    def compute(data: np.ndarray) -> np.ndarray:
        if data.size == 0:
            return np.empty(data.shape, np.float32)
        out = data - data.max(axis=axis, keepdims=True)
        np.exp(out, out=out)
        out /= out.sum(axis=axis, keepdims=True)
        return out

    return plain_result(ctx, x.shape, compute, x, op, x._axes if x.ndim == 4 else "nchw")

register_op(OpDef("batch_normalization", batch_normalization, batch_normalization_reference,
                  webnn="batchNormalization", onnx=("BatchNormalization",), kinds=("eltwise",),
                  layouts="blocked or plain, as its input",
                  fusion="folded into the conv before it; else an elementwise pass"))
register_op(OpDef("softmax", softmax, softmax_reference, webnn="softmax", onnx=("Softmax",)))
