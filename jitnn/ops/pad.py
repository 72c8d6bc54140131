"""pad: WebNN pad, ``beginning_padding[i]`` and ``ending_padding[i]``
elements added before and after axis ``i``, for a tensor of any rank and
data type.

Modes (WebNN's, as ONNX Pad's ``constant``, ``edge``, ``reflect``):

* ``"constant"``: ``value`` (default 0; for an integer tensor an integer
  that its type holds; for float32 any float32, NaN and infinities too);
* ``"edge"``: the nearest element of the axis (the axis must not be empty
  where it is padded);
* ``"reflection"``: the axis mirrored about its first or last element, which
  is not repeated (``[1, 2, 3]`` padded by 2 is ``[3, 2, 1, 2, 3, 2, 1]``);
  each padding must be smaller than its axis (refused otherwise).

A blocked 4-D input padded on its spatial axes only (H and W; N and C
unpadded) stays blocked: one kernel (kernels/pad.py) reads and writes
``nChw{b}c``, the constant going to the real channels only, so the padding
lanes stay zero. Anything else runs as numpy on the plain values (a blocked
input padded along N or C is read back first, one counted reorder).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import JitnnTypeError, JitnnValueError
from ..kernels import pad as pad_kernels
from ..kernels.buffers import aligned_empty
from ..limits import check_max, check_shape, is_int, is_number
from ..registry import OpDef, register_op
from ..tensor import DTYPE_NAMES, FLOAT32, Tensor
from ._common import (ANY_DTYPE, as_tensor, channel_axis, context_of, is_blocked,
                      plain_into_op, value_of)

#: WebNN's padding modes, and numpy's name of each
MODES = {"constant": "constant", "edge": "edge", "reflection": "reflect"}
_KERNEL_MODES = {"constant": pad_kernels.CONSTANT, "edge": pad_kernels.EDGE,
                 "reflection": pad_kernels.REFLECTION}


# --- the spec ----------------------------------------------------------------------

def pad_reference(x, beginning_padding, ending_padding, *, mode: str = "constant",
                  value=0.0) -> np.ndarray:
    """The spec: ``numpy.pad`` (``edge``, ``reflect`` or ``constant`` with
    ``value``), in float64 (integer tensors in their own type: the
    padding only moves values)."""
    x = np.asarray(x)
    if x.dtype.kind == "f":
        x = x.astype(np.float64)
    widths = [(int(b), int(e)) for b, e in zip(beginning_padding, ending_padding)]
    if x.ndim == 0:
        return x.copy()                      # nothing to pad (numpy refuses no widths)
    if mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=value)
    return np.pad(x, widths, mode=MODES[mode])


# --- the op ------------------------------------------------------------------------------

def _paddings(op: str, name: str, values: object, x_shape: tuple[int, ...]) -> tuple[int, ...]:
    rank = len(x_shape)
    try:
        items = tuple(values)  # type: ignore[arg-type]
    except TypeError:
        items = None
    if items is None or isinstance(values, (str, bytes)) or not all(map(is_int, items)):
        raise JitnnTypeError(f"{op}: {name} must be a sequence of {rank} ints (one per axis "
                             f"of x {x_shape}), got {values!r}")
    if len(items) != rank:
        raise JitnnValueError(f"{op}: {name} must have {rank} entries (one per axis of x "
                              f"{x_shape}), got {len(items)}: {list(items)}")
    if min(items, default=0) < 0:
        raise JitnnValueError(f"{op}: {name} must be >= 0, got {list(items)}")
    check_max(op, name, items, list(items))
    return tuple(int(v) for v in items)


def _pad_value(op: str, value: object, dtype: np.dtype) -> object:
    """``value`` as a scalar of ``dtype``: any float32 for float32 (NaN and
    infinities too), an integer the type holds for an integer type."""
    if not is_number(value):
        raise JitnnTypeError(f"{op}: value must be a number, got {value!r}")
    if dtype == FLOAT32:
        number = float(value)  # type: ignore[arg-type]
        if np.isfinite(number) and abs(number) > float(np.finfo(np.float32).max):
            raise JitnnValueError(f"{op}: value {value!r} is beyond float32's range")
        return np.float32(number)
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        raise JitnnValueError(f"{op}: value must be an integer for a {dtype} tensor, "
                              f"got {value!r}")
    info = np.iinfo(dtype)
    number = int(value)  # type: ignore[call-overload]
    if not info.min <= number <= info.max:
        raise JitnnValueError(f"{op}: value {number} does not fit the {dtype} tensor "
                              f"([{info.min}, {info.max}])")
    return dtype.type(number)


def pad(x, beginning_padding: Sequence[int], ending_padding: Sequence[int], *,
        mode: str = "constant", value=0.0) -> Tensor:
    """WebNN pad: ``x`` (any rank and data type) with ``beginning_padding[i]``
    elements before and ``ending_padding[i]`` after axis ``i`` (one int >= 0
    per axis), filled by ``mode``: ``"constant"`` (``value``), ``"edge"`` or
    ``"reflection"`` (padding < the axis size). A blocked input padded on H
    and W only stays blocked; otherwise a plain result."""
    op = "pad"
    ctx = context_of(op, x)
    x = as_tensor(ctx, x, op, "x", dtypes=ANY_DTYPE)
    begin = _paddings(op, "beginning_padding", beginning_padding, x.shape)
    end = _paddings(op, "ending_padding", ending_padding, x.shape)
    if mode not in MODES:
        raise JitnnValueError(f"{op}: mode must be one of {tuple(MODES)}, got {mode!r}")
    fill = _pad_value(op, value, x.dtype)
    for axis, (b, e, size) in enumerate(zip(begin, end, x.shape)):
        if mode == "reflection" and max(b, e) >= size and max(b, e) > 0:
            raise JitnnValueError(
                f"{op}: reflection padding must be smaller than the axis it pads, but axis "
                f"{axis} of x {x.shape} has size {size} and padding ({b}, {e})")
        if mode == "edge" and size == 0 and max(b, e) > 0:
            raise JitnnValueError(f"{op}: edge padding needs elements to repeat, but axis "
                                  f"{axis} of x {x.shape} is empty and padded by ({b}, {e})")
    shape = tuple(b + size + e for b, size, e in zip(begin, x.shape, end))
    check_shape(op, "the result's shape", shape)

    if is_blocked(x):
        c_axis = channel_axis(x._axes)
        if begin[0] == end[0] == begin[c_axis] == end[c_axis] == 0:
            return _pad_blocked(ctx, x, shape, begin, end, mode, fill)
    widths = tuple(zip(begin, end))
    # into the plan's buffer: a bound call in a replay (EfficientViT pads its
    # attention's values with a column of ones)
    def into(data: np.ndarray, out: np.ndarray) -> None:
        out[tuple(slice(b, b + n) for b, n in zip(begin, data.shape))] = data
        # the border, slab by slab, axis after axis as numpy's pad: a slab
        # spans the other axes whole, so the corners come out right once the
        # last axis is done
        for axis, ((b, e), n) in enumerate(zip(widths, data.shape)):
            def slab(start, stop, step=1):
                return (slice(None),) * axis + (slice(start, stop, step),)
            last = b + n - 1                       # the input's last element
            if mode == "constant":
                before, after = fill, fill
            elif mode == "edge":
                before, after = out[slab(b, b + 1)], out[slab(last, last + 1)]
            else:                                  # reflection, about the end elements
                before = out[slab(2 * b, b, -1)] if b else None
                after = out[slab(last - 1, last - 1 - e if last - 1 - e >= 0 else None, -1)] \
                    if e else None
            if b:
                out[slab(0, b)] = before
            if e:
                out[slab(last + 1, last + 1 + e)] = after
    into.__name__ = into.__qualname__ = f"pad_{mode}_into"
    return plain_into_op(ctx, op, (x,), shape, into, dtype=x.dtype,
                         axes=x._axes if x.ndim == 4 else "nchw")


def _pad_blocked(ctx, x: Tensor, shape: tuple[int, ...], begin: tuple[int, ...],
                 end: tuple[int, ...], mode: str, fill: np.float32) -> Tensor:
    """The pending blocked result of padding H and W of blocked ``x``."""
    h_axis, w_axis = (2, 3) if x._axes == "nchw" else (1, 2)
    padding = (begin[h_axis], end[h_axis], begin[w_axis], end[w_axis])
    channels = x.shape[channel_axis(x._axes)]
    kernel_mode = _KERNEL_MODES[mode]
    # the closure reads x's Value, not the handle (see _common.plain_result)
    xv = value_of(x)

    def produce() -> np.ndarray:
        data = xv._materialize()
        n, blocks, h, w, cb = data.shape
        out = aligned_empty((n, blocks, padding[0] + h + padding[1],
                             padding[2] + w + padding[3], cb))
        ctx.launcher.launch(pad_kernels.pad2d, data, out, padding, kernel_mode, fill, channels)
        return out
    return Tensor(ctx, shape, x.layout, producer=produce, axes=x._axes, inputs=(x,), op="pad")


register_op(OpDef("pad", pad, pad_reference, webnn="pad", dtypes=DTYPE_NAMES,
                  layouts="blocked or plain, as its input (plain when padding N or C)"))
