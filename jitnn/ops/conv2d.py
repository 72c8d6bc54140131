"""conv2d: WebNN's 2-D convolution, run on blocked ``nChw{b}c`` data.

``y = act(conv(x, w) + bias)``. Shape inference and validation happen at the
call, before anything runs; the result is a pending Tensor in the blocked
layout, computed when read (or when a later op that needs it runs). A conv fed
by a blocked tensor reads it as it is, so a chain of convs converts layout
once on the way in and once on the way out. A filter Tensor is packed once
per block size and reused by every later call (pass the same Tensor).
"""

from __future__ import annotations

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import conv2d as conv_kernels
from ..kernels import epilogue
from ..tensor import Tensor
from ._common import (as_tensor, blocked_buffer, context_of, int_pair, padding4,
                      parse_activation)


def conv2d_output_size(size: int, kernel: int, stride: int, dilation: int,
                       pad_begin: int, pad_end: int) -> int:
    """WebNN: ``floor((in - ((k - 1) * d + 1) + pad_begin + pad_end) / s) + 1``."""
    return (size - ((kernel - 1) * dilation + 1) + pad_begin + pad_end) // stride + 1


def conv2d_reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
                     strides=1, padding=0, dilations=1, groups: int = 1,
                     input_layout: str = "nchw", filter_layout: str = "oihw",
                     activation=None) -> np.ndarray:
    """The spec: a plain float64 numpy convolution with WebNN's semantics."""
    sh, sw = int_pair("conv2d", "strides", strides, 1)
    dh, dw = int_pair("conv2d", "dilations", dilations, 1)
    top, bottom, left, right = padding4("conv2d", padding)
    xs = np.asarray(x, np.float64)
    if input_layout == "nhwc":
        xs = xs.transpose(0, 3, 1, 2)
    ws = layouts.filter_as_oihw(np.asarray(w, np.float64), filter_layout)
    n, c, h, wd = xs.shape
    o, group_in, kh, kw = ws.shape
    oh = conv2d_output_size(h, kh, sh, dh, top, bottom)
    ow = conv2d_output_size(wd, kw, sw, dw, left, right)
    padded = np.zeros((n, c, h + top + bottom, wd + left + right))
    padded[:, :, top:top + h, left:left + wd] = xs
    out = np.zeros((n, o, oh, ow))
    group_out = o // groups
    for g in range(groups):
        xg = padded[:, g * group_in:(g + 1) * group_in]
        wg = ws[g * group_out:(g + 1) * group_out]
        for i in range(kh):
            for j in range(kw):
                patch = xg[:, :, i * dh:i * dh + (oh - 1) * sh + 1:sh,
                           j * dw:j * dw + (ow - 1) * sw + 1:sw]
                out[:, g * group_out:(g + 1) * group_out] += np.einsum(
                    "nchw,oc->nohw", patch, wg[:, :, i, j])
    if bias is not None:
        out += np.asarray(bias, np.float64)[None, :, None, None]
    code, p0, p1 = parse_activation("conv2d", activation)
    out = epilogue.activation_reference(out, code, p0, p1)
    return out.transpose(0, 2, 3, 1) if input_layout == "nhwc" else out


def _check_rank4(op: str, name: str, t: Tensor) -> None:
    if t.ndim != 4:
        raise JitnnValueError(f"{op}: {name} must be 4-D, got shape {t.shape}")


def conv2d(x, w, bias=None, *, strides=1, padding=0, dilations=1, groups: int = 1,
           input_layout: str = "nchw", filter_layout: str = "oihw",
           activation=None) -> Tensor:
    """2-D convolution with WebNN's options; returns a pending, blocked Tensor.

    ``x``: ``(N, C, H, W)`` (``input_layout="nchw"``) or ``(N, H, W, C)``
    (``"nhwc"``). ``w``: ``oihw`` ``(O, C/groups, KH, KW)``, or ``hwio``,
    ``ohwi``, ``ihwo``. ``bias``: ``(O,)``. ``strides``/``dilations``: an int or
    an (h, w) pair; ``padding``: an int, an (h, w) pair or ``[top, bottom,
    left, right]``. ``activation``: None, ``"relu"``, ``"relu6"``,
    ``("clamp", min, max)``, ``("leaky_relu", alpha)``, ``"sigmoid"``, ``"tanh"``,
    ``"hard_swish"`` or ``"gelu"``, fused into the kernel. The output has the
    input's layout convention: ``(N, O, OH, OW)`` or ``(N, OH, OW, O)``.
    """
    op = "conv2d"
    ctx = context_of(op, x, w, bias)
    if input_layout not in layouts.ACTIVATION_LAYOUTS:
        raise JitnnValueError(f"{op}: input_layout must be 'nchw' or 'nhwc', got {input_layout!r}")
    if filter_layout not in layouts.FILTER_LAYOUTS:
        raise JitnnValueError(
            f"{op}: filter_layout must be one of {layouts.FILTER_LAYOUTS}, got {filter_layout!r}")
    x = as_tensor(ctx, x, op, "x")
    w = as_tensor(ctx, w, op, "filter")
    _check_rank4(op, "input x", x)
    _check_rank4(op, "filter w", w)
    sh, sw = int_pair(op, "strides", strides, 1)
    dh, dw = int_pair(op, "dilations", dilations, 1)
    pad = padding4(op, padding)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise JitnnValueError(f"{op}: groups must be an int >= 1, got {groups!r}")
    groups = int(groups)
    code, p0, p1 = parse_activation(op, activation)

    if input_layout == "nchw":
        n, c, h, wd = x.shape
    else:
        n, h, wd, c = x.shape
    o, group_in, kh, kw = layouts.filter_oihw_shape(w.shape, filter_layout)
    shapes = f"(x {x.shape} {input_layout}, w {w.shape} {filter_layout}, groups {groups})"
    if min(x.shape) < 1 or min(w.shape) < 1:
        raise JitnnValueError(f"{op}: empty dimension {shapes}")
    if c % groups or group_in * groups != c:
        raise JitnnValueError(
            f"{op}: input has {c} channels but the filter expects {group_in * groups} {shapes}")
    if o % groups:
        raise JitnnValueError(
            f"{op}: the filter's {o} output channels do not divide into {groups} groups {shapes}")
    oh = conv2d_output_size(h, kh, sh, dh, pad[0], pad[1])
    ow = conv2d_output_size(wd, kw, sw, dw, pad[2], pad[3])
    if oh < 1 or ow < 1:
        raise JitnnValueError(
            f"{op}: the output would be {oh}x{ow}: input {h}x{wd}, kernel {kh}x{kw}, "
            f"strides {(sh, sw)}, dilations {(dh, dw)}, padding {list(pad)}")
    bias_values = None
    if bias is not None:
        bias_t = as_tensor(ctx, bias, op, "bias")
        if bias_t.shape != (o,):
            raise JitnnValueError(
                f"{op}: bias must have shape ({o},) for {o} output channels, got {bias_t.shape}")
        bias_values = bias_t

    block = ctx.block
    # A plain NCHW input with fewer channels than a block (an RGB image) is
    # read as it is by the first-layer kernel instead of padded up to a block.
    first_layer = layouts.block_of(x.layout) is None and input_layout == "nchw" and c < block
    packed = w._derive(
        ("conv2d_filter", block, filter_layout, groups, c, first_layer),
        lambda: _pack(ctx, w, filter_layout, c, groups, block, first_layer))
    out_shape = (n, o, oh, ow) if input_layout == "nchw" else (n, oh, ow, o)
    out_blocked = (n, layouts.padded_channels(o, block) // block, oh, ow, block)

    def produce() -> np.ndarray:
        source = x._materialize() if first_layer else \
            blocked_buffer(ctx, x, block, input_layout)
        bias_array = None
        if bias_values is not None:
            bias_array = np.zeros(out_blocked[1] * block, np.float32)
            bias_array[:o] = bias_values._materialize()
        out = np.empty(out_blocked, np.float32)
        ctx._launch(conv_kernels.conv2d_forward, source, packed, out, (sh, sw), (dh, dw),
                    pad, bias_array, None, code, p0, p1)
        return out

    return Tensor(ctx, out_shape, layouts.blocked_tag(block), producer=produce,
                  axes=input_layout)


def _pack(ctx, w: Tensor, filter_layout: str, in_channels: int, groups: int, block: int,
          first_layer: bool):
    weights = w.numpy() if layouts.block_of(w.layout) is not None else w._materialize()
    packed = conv_kernels.pack_conv2d_filter(layouts.filter_as_oihw(weights, filter_layout),
                                             in_channels, groups, block,
                                             input_is_plain=first_layer)
    ctx._count(filter_packs=1, filter_pack_bytes=packed.weights.nbytes, launches=1)
    return packed
