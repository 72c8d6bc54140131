"""group_normalization (PyTorch's GroupNorm, ONNX's GroupNormalization): the
channels of ``x`` (``(N, C, ...)``) in ``groups`` groups of ``C / groups``
consecutive channels, each ``(n, group)`` normalized over its channels and
every spatial position (statistics in float64), then ``* scale[c] +
bias[c]``.

A blocked NCHW input stays blocked: the kernel (kernels/group_norm.py) reads
and writes the ``nChw{cb}c`` buffer, whatever the groups' alignment with the
channel blocks (padding lanes stay zero). Any other input runs on its plain
values as ``(N, C, D1 * ... * Dk, 1)``. Either way the node writes into the
plan's buffer and a replayed plan runs it as one bound kernel call.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import layouts
from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import group_norm as group_norm_kernels
from ..kernels.buffers import aligned_empty
from ..plan_cache import exact
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import Node, Tensor, Value
from ._common import (Binding, as_tensor, context_of, is_blocked, pending, plain_buffer,
                      plain_layout, value_of)
from .normalization import _epsilon, _scale_bias

if TYPE_CHECKING:
    from ..context import Context


def group_normalization_reference(x, groups: int, scale=None, bias=None, *,
                                  epsilon: float = 1e-5) -> np.ndarray:
    """Each ``(n, group)`` of ``x`` ``(N, C, ...)`` normalized over its ``C /
    groups`` channels and all positions, times ``scale[c]`` plus ``bias[c]``, float64."""
    x = np.asarray(x, np.float64)
    n, channels = x.shape[:2]
    grouped = x.reshape(n, groups, -1)
    mean = grouped.mean(axis=2, keepdims=True)
    var = ((grouped - mean) ** 2).mean(axis=2, keepdims=True)
    out = ((grouped - mean) / np.sqrt(var + epsilon)).reshape(x.shape)
    shape = (1, channels) + (1,) * (x.ndim - 2)
    if scale is not None:
        out = out * np.asarray(scale, np.float64).reshape(shape)
    if bias is not None:
        out = out + np.asarray(bias, np.float64).reshape(shape)
    return out


def _padded(value: Value | None, default: float, channels: int, padded: int) -> np.ndarray:
    """float32 ``(padded,)``: ``value``'s ``channels`` values (``default``
    for None), zeros after."""
    out = np.zeros(padded, np.float32)
    out[:channels] = default if value is None else plain_buffer(value).reshape(-1)
    return out


def _affine(attrs: dict, derived: list | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's scale and bias (``(K * L,)``, zero past the channels),
    made once per scale and bias Value; ``derived`` gets each ``(value, key,
    form)`` (what a :class:`Binding` checks)."""
    channels, view = attrs["channels"], attrs["view"]
    padded = view[1] * view[3]
    key = ("group_norm", padded)
    found = []
    for name, default in (("scale", 1.0), ("bias", 0.0)):
        value = attrs[name]
        if value is None:
            found.append(_padded(None, default, channels, padded))
            continue
        plain_buffer(value)               # (computed outside the derive's lock: see _derive)
        form = value._derive(key, lambda v=value, d=default: _padded(v, d, channels, padded))
        if derived is not None:
            derived.append((value, key, form))
        found.append(form)
    return found[0], found[1]


def _input(attrs: dict) -> np.ndarray:
    """The buffer the kernel reads: the blocked one, or the plain values."""
    x = attrs["x"]
    return x._materialize() if attrs["blocked"] else plain_buffer(x)


def run_group_norm(ctx: "Context", node: Node, value: Value,
                   out: np.ndarray | None) -> np.ndarray:
    """The group normalization, into ``out`` (the plan's buffer) if given."""
    a = node.attrs
    data = _input(a)
    scale, bias = _affine(a)
    if out is None or out.shape != data.shape or np.may_share_memory(out, data):
        out = aligned_empty(data.shape)
    view = a["view"]
    if data.size == 0:
        return out
    ctx.launcher.launch(group_norm_kernels.group_norm, data.reshape(view), scale, bias,
                        a["groups"], a["epsilon"], a["channels"], out.reshape(view),
                        ctx.num_threads)
    return out


def bind_group_norm(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_group_norm` just made, bound to its arrays
    (a replayed program runs it as one call: jitnn/executor.py); None when
    the input was read through a copy (a blocked tensor read back)."""
    a = node.attrs
    x = a["x"]
    data = x._data
    if not isinstance(data, np.ndarray) or x._remake is not None or data.size == 0:
        return None
    if not a["blocked"] and (layouts.block_of(x._layout) is not None
                             or not data.flags.c_contiguous or data.shape != x._shape):
        return None
    derived: list = []
    scale, bias = _affine(a, derived)
    view = a["view"]
    call = group_norm_kernels.bind_group_norm(data.reshape(view), scale, bias, a["groups"],
                                              a["epsilon"], a["channels"],
                                              result.reshape(view), ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], ((x, data),), tuple(derived), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_group_norm.bind = bind_group_norm

register_kind(NodeKind("group_norm", writes_into_buffer=True))


def group_normalization(x, groups: int, scale=None, bias=None, *,
                        epsilon: float = 1e-5) -> Tensor:
    """GroupNorm: ``x`` ``(N, C, ...)`` with its channels in ``groups`` groups
    of ``C / groups`` consecutive channels; each ``(n, group)`` normalized
    over its channels and all positions, ``(x - mean) / sqrt(var + epsilon)
    * scale[c] + bias[c]`` (``scale``, ``bias``: ``(C,)``, default 1 and 0).
    GroupNorm(1, C) normalizes each image over everything (PoolFormer's);
    GroupNorm(C, C) is instance normalization. A blocked input stays blocked."""
    op = "group_normalization"
    ctx = context_of(op, x, scale, bias)
    x = as_tensor(ctx, x, op, "input")
    if x.ndim < 2:
        raise JitnnValueError(f"{op}: input must be (N, C, ...), of rank >= 2, got shape "
                              f"{x.shape}")
    blocked = is_blocked(x) and x._axes == "nchw"
    channels = x.shape[1]
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise JitnnTypeError(f"{op}: groups must be an int, got {groups!r}")
    if groups < 1 or channels % groups:
        raise JitnnValueError(f"{op}: groups must be >= 1 and divide the {channels} channels "
                              f"of input {x.shape}, got {groups}")
    groups = int(groups)
    scale, bias = _scale_bias(ctx, op, scale, bias, (channels,),
                              f"the {channels} channels of input {x.shape}")
    epsilon = _epsilon(op, epsilon)
    xv, sv, bv = value_of(x), value_of(scale), value_of(bias)
    inputs = (x,) + tuple(t for t in (scale, bias) if t is not None)
    n = x.shape[0]
    positions = int(np.prod(x.shape[2:], dtype=np.int64))
    if blocked:
        block = layouts.block_of(x.layout)
        view = (n, -(-channels // block), positions, block)
        layout, axes = x.layout, x._axes
    else:
        view = (n, channels, positions, 1)
        axes = x._axes if x.ndim == 4 else "nchw"
        layout = plain_layout(x.ndim, axes)
    attrs = {"x": xv, "scale": sv, "bias": bv, "groups": groups, "epsilon": epsilon,
             "channels": channels, "view": view, "blocked": blocked}
    node = Node(op, tuple(value_of(t) for t in inputs), kind="group_norm", attrs=attrs,
                run=run_group_norm,
                sig=("group_norm", groups, exact(epsilon), channels, view, blocked,
                     sv is None, bv is None))
    return pending(ctx, x.shape, layout, node, axes=axes)


register_op(OpDef("group_normalization", group_normalization, group_normalization_reference,
                  onnx=("GroupNormalization",), kinds=("group_norm",),
                  layouts="blocked or plain, as its input"))
