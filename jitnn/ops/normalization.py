"""The normalizations (WebNN): batch_normalization (inference),
layer_normalization, instance_normalization; rms_normalization (ONNX's
RMSNormalization, Llama's RMSNorm); and softmax.

batch_normalization folds ``mean``, ``variance``, ``scale``, ``bias`` and
``epsilon`` into one per-channel ``x * a + b`` (float64 fold, then float32) and
runs it with the optional activation in one pass. Along the channel axis of a
blocked input it stays blocked (padding lanes zero although ``b`` is not);
any other case runs on the plain values.

layer_normalization and instance_normalization run the kernels of
kernels/normalization.py (statistics in float64):

* layer_normalization over the channel axis of a blocked 4-D tensor
  (ConvNeXt's LayerNorm over C per pixel) reads and writes the blocked buffer
  (padding lanes stay zero: their scale and bias are zero); over the last
  axes of a plain tensor (a transformer's ``(N, S, D)`` over D) it normalizes
  rows; over a run of adjacent axes in the middle, it runs the blocked
  kernel on a ``(before, run, after, 1)`` view; other axis sets are
  transposed so that the axes come last (numpy copies), as is a blocked
  input normalized over other axes after it is read back (one reorder).
  ``scale`` and ``bias`` have the shape of the normalized axes in the order
  ``axes`` lists them (WebNN).
* rms_normalization runs on plain data, one pass per row over the last axes,
  into the plan's buffer and replayed as one bound call, as the row layer
  norm (other axis sets are transposed last, as above).
* instance_normalization of a blocked input in its own layout reads and
  writes the blocked buffer; plain NCHW and NHWC are read in place.

softmax works on plain data (a blocked input is read back first).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import eltwise as eltwise_kernels
from ..kernels import epilogue
from ..kernels import normalization as norm_kernels
from ..kernels.buffers import aligned_empty
from ..limits import real_arg
from ..plan_cache import exact
from ..registry import NodeKind, OpDef, register_kind, register_op
from ..tensor import FLOAT32, Node, Tensor, Value
from ._common import (Binding, as_tensor, axis_index, channel_axis, context_of, is_blocked,
                      is_number, parse_activation, pending, plain_buffer, plain_into_op,
                      plain_layout, value_of)
from .eltwise import batch_norm_scale_shift, eltwise_node
from .reduction import axes_arg

if TYPE_CHECKING:
    from ..context import Context


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


def layer_normalization_reference(x, scale=None, bias=None, *, axes=None,
                                  epsilon: float = 1e-5) -> np.ndarray:
    """``(x - mean) / sqrt(var + epsilon) * scale + bias``, the mean and the
    variance over ``axes`` (None: all but the first; ``[]``: none, so the
    result is ``bias``, or 0), float64. ``scale`` and ``bias`` have the sizes
    of ``axes`` in the order ``axes`` lists them (WebNN)."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(1, x.ndim)) if axes is None else tuple(int(a) % x.ndim for a in axes)
    if axes:
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    else:
        mean, var = x, np.zeros_like(x)
    out = (x - mean) / np.sqrt(var + epsilon)
    shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]

    def broadcast(v) -> np.ndarray:       # axes order -> the input's axis order
        return np.asarray(v, np.float64).transpose(np.argsort(axes)).reshape(shape)

    if scale is not None:
        out = out * broadcast(scale)
    if bias is not None:
        out = out + broadcast(bias)
    return out


def rms_normalization_reference(x, scale=None, *, axes=None,
                                epsilon: float = 1e-5) -> np.ndarray:
    """``x / sqrt(mean(x^2) + epsilon) * scale``, the mean over ``axes`` (None:
    all but the first), float64; ``scale`` as in layer_normalization."""
    x = np.asarray(x, np.float64)
    axes = tuple(range(1, x.ndim)) if axes is None else tuple(int(a) % x.ndim for a in axes)
    square = (x * x).mean(axis=axes, keepdims=True) if axes else x * x
    out = x / np.sqrt(square + epsilon)
    if scale is not None:
        shape = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
        out = out * np.asarray(scale, np.float64).transpose(np.argsort(axes)).reshape(shape)
    return out


def instance_normalization_reference(x, scale=None, bias=None, *, epsilon: float = 1e-5,
                                     layout: str = "nchw") -> np.ndarray:
    """Each ``(n, c)`` plane normalized over H and W, times ``scale[c]``, plus
    ``bias[c]`` (``layout`` "nchw" or "nhwc"), float64."""
    x = np.asarray(x, np.float64)
    spatial, channel = ((2, 3), 1) if layout == "nchw" else ((1, 2), 3)
    mean = x.mean(axis=spatial, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=spatial, keepdims=True)
    out = (x - mean) / np.sqrt(var + epsilon)
    shape = [1, 1, 1, 1]
    shape[channel] = x.shape[channel]
    if scale is not None:
        out = out * np.asarray(scale, np.float64).reshape(shape)
    if bias is not None:
        out = out + np.asarray(bias, np.float64).reshape(shape)
    return out


# --- the ops ---------------------------------------------------------------------------

#: a plain batch normalization with fewer values per channel in a row than
#: this runs the row kernel (kernels.eltwise.channel_affine), not the blocked
#: kernel's planes
_PLANE_MIN = 256


@functools.cache
def _channel_affine_into(given: tuple[bool, ...], epsilon: float, channels: int, inner: int,
                         code: int, p0: float, p1: float):
    """``into(x, *statistics, out)`` of a plain batch normalization (the
    statistics that were ``given``, in order: mean, variance, scale, bias):
    folded into ``a, b`` (float64, then float32) and ``out = act(x * a + b)``."""
    def into(x: np.ndarray, *arrays: np.ndarray) -> None:
        out = arrays[-1]
        stats = iter(arrays[:-1])
        mean, variance, scale, bias = (next(stats) if g else None for g in given)
        eltwise_kernels.batch_norm_rows(x, mean, variance, scale, bias, epsilon, out,
                                        channels, inner)
        if code != epilogue.NONE:
            eltwise_kernels.eltwise_unary_plain(out, out, code, p0, p1)
    into.__name__ = into.__qualname__ = "batch_normalization_into"
    return into


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

    if inner < _PLANE_MIN and x.size:
        # few values per channel in a row (BatchNorm1d of (N, C) or (N, C, L)):
        # a row kernel into the plan's buffer, bound in a replay. (The blocked
        # kernel's view below reads planes of ``inner`` values: 1.9 ms for a
        # (196, 256) BatchNorm1d, 6 us this way; LeViT has 48.)
        given = tuple(t for t in vectors if t is not None)
        into = _channel_affine_into(tuple(t is not None for t in vectors), epsilon, channels,
                                    inner, code, p0, p1)
        axes = x._axes if x.ndim == 4 else "nchw"
        return plain_into_op(ctx, op, (x,) + given, x.shape, into, dtype=FLOAT32, axes=axes)

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

    def into(data: np.ndarray, out: np.ndarray) -> None:
        if data.size == 0:
            return
        # a row of -inf (every key masked) gives NaN, as ONNX Runtime and
        # PyTorch do, without numpy's warning
        with np.errstate(invalid="ignore"):
            np.subtract(data, data.max(axis=axis, keepdims=True), out=out)
            np.exp(out, out=out)
            out /= out.sum(axis=axis, keepdims=True)
    into.__name__ = into.__qualname__ = "softmax_into"

    # into the plan's buffer: a bound call in a replay
    return plain_into_op(ctx, op, (x,), x.shape, into, dtype=FLOAT32,
                         axes=x._axes if x.ndim == 4 else "nchw")

def _epsilon(op: str, epsilon: object) -> float:
    if not is_number(epsilon) or not epsilon >= 0:
        raise JitnnValueError(f"{op}: epsilon must be a number >= 0, got {epsilon!r}")
    return real_arg(op, "epsilon", epsilon)        # finite: inf would zero every x - mean


def _scale_bias(ctx, op: str, scale, bias, shape: tuple[int, ...], what: str) -> tuple:
    """``scale`` and ``bias`` as Tensors of ``shape`` (or None)."""
    found = []
    for name, value in (("scale", scale), ("bias", bias)):
        if value is None:
            found.append(None)
            continue
        t = as_tensor(ctx, value, op, name)
        if t.shape != shape:
            raise JitnnValueError(f"{op}: {name} must have shape {shape} ({what}), got "
                                  f"{t.shape}")
        found.append(t)
    return tuple(found)


def _flat(value, default: float, order: tuple, size: int, padded: int) -> np.ndarray:
    """float32 ``(padded,)``: ``value``'s plain values transposed by ``order``
    and flattened (``default`` for None), zeros from ``size`` on."""
    out = np.zeros(padded, np.float32)
    if value is None:
        out[:size] = default
    else:
        out[:size] = plain_buffer(value).transpose(order).reshape(-1)
    return out


def _affine(attrs: dict, size: int, padded: int, key: tuple,
            derived: list | None = None) -> tuple:
    """A layer norm's scale and bias as its kernel takes them (``(padded,)``,
    zero from ``size`` on), made once per scale and bias Value under ``key``;
    ``derived`` gets each ``(value, key, form)`` (what a :class:`Binding` checks)."""
    order = attrs["order"]
    found = []
    for name, default in (("scale", 1.0), ("bias", 0.0)):
        value = attrs[name]
        if value is None:
            found.append(_flat(None, default, order, size, padded))
            continue
        form = value._derive(key, lambda v=value, d=default: _flat(v, d, order, size, padded))
        if derived is not None:
            derived.append((value, key, form))
        found.append(form)
    return found[0], found[1]


def _blocked_affine(attrs: dict, derived: list | None = None) -> tuple:
    """The blocked norm's scale and bias (``(K * L,)``, zero past the channels)."""
    view = attrs["view"]
    padded = view[1] * view[3]
    return _affine(attrs, attrs["channels"], padded,
                   ("layer_norm_blocked", attrs["order"], padded), derived)


def run_layer_norm_blocked(ctx: "Context", node: Node, value: Value,
                           out: np.ndarray | None) -> np.ndarray:
    """The channel layer norm of a blocked tensor, into ``out`` if given."""
    a = node.attrs
    data = a["x"]._materialize()
    scale, bias = _blocked_affine(a)
    if out is None:
        out = aligned_empty(data.shape)
    view = a["view"]
    ctx.launcher.launch(norm_kernels.layer_norm_groups, data.reshape(view), scale, bias,
                        a["epsilon"], a["channels"], out.reshape(view))
    return out


def bind_layer_norm_blocked(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_layer_norm_blocked` just made, bound to its
    arrays (a replayed program runs it as one call: jitnn/executor.py)."""
    a = node.attrs
    x = a["x"]
    if x._data is None:
        return None
    derived: list = []
    scale, bias = _blocked_affine(a, derived)
    view = a["view"]
    call = norm_kernels.bind_layer_norm_groups(x._data.reshape(view), scale, bias, a["epsilon"],
                                               a["channels"], result.reshape(view),
                                               ctx.num_threads)
    if call is None:
        return None
    return Binding(call[0], call[1], ((x, x._data),), tuple(derived), result, ctx.num_threads)


# (the executor asks a node's run function for its binder)
run_layer_norm_blocked.bind = bind_layer_norm_blocked

register_kind(NodeKind("layer_norm_blocked", writes_into_buffer=True))


def _rows_affine(attrs: dict, derived: list | None = None) -> tuple:
    """The row norm's scale and bias (``(D,)``)."""
    return _affine(attrs, attrs["size"], attrs["size"], ("layer_norm_rows", attrs["order"]),
                   derived)


def _run_rows(ctx: "Context", node: Node, value: Value, out: np.ndarray | None,
              launch: Callable) -> np.ndarray:
    """A row norm of a plain tensor over its last axes, into ``out`` (the
    plan's buffer) if given: ``launch(x, scale, bias, out)`` on ``(M, D)`` rows."""
    a = node.attrs
    data = plain_buffer(a["x"])
    scale, bias = _rows_affine(a)
    if out is None or out.shape != value.shape:
        out = aligned_empty(value.shape)
    rows = (data.size // max(a["size"], 1), a["size"])
    launch(data.reshape(rows), scale, bias, out.reshape(rows))
    return out


def _bind_rows(ctx: "Context", node: Node, result: np.ndarray,
               bind_kernel: Callable) -> Binding | None:
    """The kernel call a row norm's run just made, bound to its arrays:
    ``bind_kernel(x, scale, bias, out)`` on ``(M, D)`` rows gives it."""
    a = node.attrs
    x = a["x"]
    if x._data is None or not x._data.flags.c_contiguous or x._data.shape != x._shape:
        return None
    derived: list = []
    scale, bias = _rows_affine(a, derived)
    rows = (x._data.size // max(a["size"], 1), a["size"])
    call = bind_kernel(x._data.reshape(rows), scale, bias, result.reshape(rows))
    if call is None:
        return None
    return Binding(call[0], call[1], ((x, x._data),), tuple(derived), result, ctx.num_threads)


def run_layer_norm_rows(ctx: "Context", node: Node, value: Value,
                        out: np.ndarray | None) -> np.ndarray:
    """The layer norm over each row of a plain tensor (its last axes), into
    ``out`` (the plan's buffer) if given."""
    eps = node.attrs["epsilon"]
    return _run_rows(ctx, node, value, out, lambda x, s, b, o: ctx.launcher.launch(
        norm_kernels.layer_norm_rows, x, s, b, eps, o))


def bind_layer_norm_rows(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_layer_norm_rows` just made, bound to its arrays."""
    eps = node.attrs["epsilon"]
    return _bind_rows(ctx, node, result, lambda x, s, b, o: norm_kernels.bind_layer_norm_rows(
        x, s, b, eps, o, ctx.num_threads))


run_layer_norm_rows.bind = bind_layer_norm_rows

register_kind(NodeKind("layer_norm_rows", writes_into_buffer=True))


def run_rms_norm_rows(ctx: "Context", node: Node, value: Value,
                      out: np.ndarray | None) -> np.ndarray:
    """The RMS norm over each row of a plain tensor (its last axes), into
    ``out`` (the plan's buffer) if given (the row layer norm's helpers; its
    bias is unused)."""
    eps = node.attrs["epsilon"]
    return _run_rows(ctx, node, value, out, lambda x, s, b, o: ctx.launcher.launch(
        norm_kernels.rms_norm_rows, x, s, eps, o))


def bind_rms_norm_rows(ctx: "Context", node: Node, result: np.ndarray) -> Binding | None:
    """The kernel call :func:`run_rms_norm_rows` just made, bound to its arrays."""
    eps = node.attrs["epsilon"]
    return _bind_rows(ctx, node, result, lambda x, s, b, o: norm_kernels.bind_rms_norm_rows(
        x, s, eps, o, ctx.num_threads))


run_rms_norm_rows.bind = bind_rms_norm_rows

register_kind(NodeKind("rms_norm_rows", writes_into_buffer=True))


def layer_normalization(x, scale=None, bias=None, *, axes=None,
                        epsilon: float = 1e-5) -> Tensor:
    """WebNN layerNormalization: ``(x - mean) / sqrt(var + epsilon) * scale +
    bias``, the mean and variance over ``axes`` (None, WebNN's default: every
    axis but the first; negative axes count from the end). ``scale`` and
    ``bias`` (default 1 and 0) have the sizes of those axes, in the order
    ``axes`` gives them. Blocked in, blocked out over the channel axis of a
    4-D tensor; see the module docstring for the other cases."""
    op = "layer_normalization"
    ctx = context_of(op, x, scale, bias)
    x = as_tensor(ctx, x, op, "input")
    axes = tuple(range(1, x.ndim)) if axes is None else axes_arg(op, axes, x.ndim)
    dims = tuple(x.shape[a] for a in axes)
    scale, bias = _scale_bias(ctx, op, scale, bias, dims,
                              f"the sizes of axes {list(axes)} of input {x.shape}")
    epsilon = _epsilon(op, epsilon)
    order = tuple(int(i) for i in np.argsort(axes))         # axes order -> sorted axes
    size = int(np.prod(dims, dtype=np.int64))
    xv, sv, bv = value_of(x), value_of(scale), value_of(bias)
    inputs = (x,) + tuple(t for t in (scale, bias) if t is not None)

    if is_blocked(x) and axes == (channel_axis(x._axes),):
        block = layouts.block_of(x.layout)
        n, h, w = (x.shape[0], *((x.shape[2:]) if x._axes == "nchw" else x.shape[1:3]))
        blocks = -(-size // block)
        attrs = {"x": xv, "scale": sv, "bias": bv, "epsilon": epsilon, "order": order,
                 "channels": size, "view": (n, blocks, h * w, block)}
        # a node of its own kind: it writes into the plan's buffer, and a
        # replayed plan runs it as one bound kernel call
        node = Node(op, tuple(value_of(t) for t in inputs), kind="layer_norm_blocked",
                    attrs=attrs, run=run_layer_norm_blocked)
        return pending(ctx, x.shape, x.layout, node, axes=x._axes)

    shape, ranked = x.shape, sorted(axes)
    adjacent = ranked == list(range(ranked[0], ranked[0] + len(ranked))) if ranked else True
    perm = None
    if not ranked:                                   # each element alone: (size, 1) rows
        before, after = x.size, 1
    elif adjacent:
        before = int(np.prod(shape[:ranked[0]], dtype=np.int64))
        after = int(np.prod(shape[ranked[-1] + 1:], dtype=np.int64))
    else:                                            # the axes last, by a transpose
        perm = tuple(i for i in range(x.ndim) if i not in axes) + tuple(ranked)
        before, after = x.size // max(size, 1), 1

    if not is_blocked(x) and perm is None and after == 1 and size and x.size:
        # a transformer's norm over the last axes: a node of its own kind, which
        # writes into the plan's buffer (no new array per run), its scale and
        # bias flattened once, run as one bound kernel call when replayed
        attrs = {"x": xv, "scale": sv, "bias": bv, "epsilon": epsilon, "order": order,
                 "size": size}
        node = Node(op, tuple(value_of(t) for t in inputs), kind="layer_norm_rows",
                    attrs=attrs, run=run_layer_norm_rows,
                    sig=("layer_norm_rows", exact(epsilon), order, size, sv is None,
                         bv is None))
        axes_tag = x._axes if x.ndim == 4 else "nchw"
        return pending(ctx, x.shape, plain_layout(x.ndim, axes_tag), node, axes=axes_tag)

    def produce_plain() -> np.ndarray:
        data = plain_buffer(xv)
        if perm is not None:
            data = np.ascontiguousarray(data.transpose(perm))
        out = aligned_empty(data.shape)
        s = _flat(sv, 1.0, order, size, size)
        b = _flat(bv, 0.0, order, size, size)
        if out.size:
            if after == 1:
                ctx.launcher.launch(norm_kernels.layer_norm_rows, data.reshape(before, size),
                                    s, b, epsilon, out.reshape(before, size))
            else:
                view = (before, size, after, 1)
                ctx.launcher.launch(norm_kernels.layer_norm_groups, data.reshape(view), s, b,
                                    epsilon, size, out.reshape(view))
        if perm is not None:
            out = np.ascontiguousarray(out.transpose(np.argsort(perm)))
        return out

    axes_tag = x._axes if x.ndim == 4 else "nchw"
    return Tensor(ctx, x.shape, plain_layout(x.ndim, axes_tag), producer=produce_plain,
                  axes=axes_tag, inputs=inputs, op=op)


def rms_normalization(x, scale=None, *, axes=None, epsilon: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x^2) + epsilon) * scale``, the mean over ``axes`` (None:
    every axis but the first, as layer_normalization; negative axes count from
    the end); ``scale`` (default 1) has the sizes of those axes in the order
    ``axes`` gives them. One pass per row when the axes are the last ones
    (a transformer's ``(N, S, D)`` over D); plain in, plain out."""
    op = "rms_normalization"
    ctx = context_of(op, x, scale)
    x = as_tensor(ctx, x, op, "input")
    axes = tuple(range(1, x.ndim)) if axes is None else axes_arg(op, axes, x.ndim)
    dims = tuple(x.shape[a] for a in axes)
    scale, _ = _scale_bias(ctx, op, scale, None, dims,
                           f"the sizes of axes {list(axes)} of input {x.shape}")
    epsilon = _epsilon(op, epsilon)
    order = tuple(int(i) for i in np.argsort(axes))         # axes order -> sorted axes
    size = int(np.prod(dims, dtype=np.int64))
    ranked = sorted(axes)
    # the axes last: as they are when they are the trailing ones, else by a transpose
    perm = None if ranked == list(range(x.ndim - len(ranked), x.ndim)) else \
        tuple(i for i in range(x.ndim) if i not in axes) + tuple(ranked)
    xv, sv = value_of(x), value_of(scale)
    inputs = (x,) + ((scale,) if scale is not None else ())
    axes_tag = x._axes if x.ndim == 4 else "nchw"

    if perm is None and size and x.size:
        # Llama's norm over the last axes: as the row layer norm, a node that
        # writes into the plan's buffer and replays as one bound kernel call
        attrs = {"x": xv, "scale": sv, "bias": None, "epsilon": epsilon, "order": order,
                 "size": size}
        node = Node(op, tuple(value_of(t) for t in inputs), kind="rms_norm_rows",
                    attrs=attrs, run=run_rms_norm_rows,
                    sig=("rms_norm_rows", exact(epsilon), order, size, sv is None))
        return pending(ctx, x.shape, plain_layout(x.ndim, axes_tag), node, axes=axes_tag)

    def produce_plain() -> np.ndarray:
        data = plain_buffer(xv)
        if perm is not None:
            data = np.ascontiguousarray(data.transpose(perm))
        out = aligned_empty(data.shape)
        if out.size:
            rows = data.reshape(-1, size)
            ctx.launcher.launch(norm_kernels.rms_norm_rows, rows, _flat(sv, 1.0, order, size, size),
                                epsilon, out.reshape(rows.shape))
        if perm is not None:
            out = np.ascontiguousarray(out.transpose(np.argsort(perm)))
        return out

    return Tensor(ctx, x.shape, plain_layout(x.ndim, axes_tag), producer=produce_plain,
                  axes=axes_tag, inputs=inputs, op=op)


def instance_normalization(x, scale=None, bias=None, *, epsilon: float = 1e-5,
                           layout: str = "nchw") -> Tensor:
    """WebNN instanceNormalization: each ``(n, c)`` plane of a 4-D ``x``
    normalized over H and W, times ``scale[c]`` plus ``bias[c]`` (``(C,)``,
    default 1 and 0); ``layout`` "nchw" or "nhwc" says where C is. A blocked
    input in that layout stays blocked."""
    op = "instance_normalization"
    ctx = context_of(op, x, scale, bias)
    if layout not in layouts.ACTIVATION_LAYOUTS:
        raise JitnnValueError(f"{op}: layout must be 'nchw' or 'nhwc', got {layout!r}")
    x = as_tensor(ctx, x, op, "input")
    if x.ndim != 4:
        raise JitnnValueError(f"{op}: input must be 4-D ({layout}), got shape {x.shape}")
    ca = channel_axis(layout)
    channels = x.shape[ca]
    scale, bias = _scale_bias(ctx, op, scale, bias, (channels,),
                              f"the {channels} channels of {layout} input {x.shape}")
    epsilon = _epsilon(op, epsilon)
    n = x.shape[0]
    h, w = x.shape[2:] if layout == "nchw" else x.shape[1:3]
    xv, sv, bv = value_of(x), value_of(scale), value_of(bias)
    inputs = (x,) + tuple(t for t in (scale, bias) if t is not None)
    blocked = is_blocked(x) and x._axes == layout
    if blocked:
        block = layouts.block_of(x.layout)
        blocks = -(-channels // block)
        view, groups = (n * blocks, h * w, block), (blocks, block)
    elif layout == "nchw":
        view, groups = (n * channels, h * w, 1), (channels, 1)
    else:
        view, groups = (n, h * w, channels), (1, channels)

    def produce() -> np.ndarray:
        data = xv._materialize() if blocked else plain_buffer(xv)
        out = aligned_empty(data.shape)
        size = groups[0] * groups[1]
        s = _flat(sv, 1.0, (0,), channels, size).reshape(groups)
        b = _flat(bv, 0.0, (0,), channels, size).reshape(groups)
        if out.size:
            ctx.launcher.launch(norm_kernels.instance_normalization, data.reshape(view), s, b,
                                epsilon, out.reshape(view))
        return out

    return Tensor(ctx, x.shape, x.layout if blocked else layout, producer=produce,
                  axes=layout, inputs=inputs, op=op)


register_op(OpDef("batch_normalization", batch_normalization, batch_normalization_reference,
                  webnn="batchNormalization", onnx=("BatchNormalization",), kinds=("eltwise",),
                  layouts="blocked or plain, as its input",
                  fusion="folded into the conv before it; else an elementwise pass"))
register_op(OpDef("softmax", softmax, softmax_reference, webnn="softmax", onnx=("Softmax",)))
register_op(OpDef("layer_normalization", layer_normalization, layer_normalization_reference,
                  webnn="layerNormalization",
                  layouts="blocked or plain (blocked in and out over C; else plain)"))
register_op(OpDef("rms_normalization", rms_normalization, rms_normalization_reference,
                  onnx=("RMSNormalization",), layouts="plain"))
register_op(OpDef("instance_normalization", instance_normalization,
                  instance_normalization_reference, webnn="instanceNormalization",
                  layouts="blocked or plain, as its input"))
