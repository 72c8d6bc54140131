"""conv_transpose2d: WebNN's ``convTranspose2d`` (transposed 2-D convolution).

Three layers, as for every op:

* :func:`conv_transpose2d_reference`: the spec, plain float64 numpy;
* :func:`conv_transpose2d_plan`: validation and shape inference (all the
  errors a caller can get), returning the output shape and the normalized
  options (:class:`ConvTranspose2dOptions`);
* :func:`conv_transpose2d_pack` and :func:`run_conv_transpose2d`: pack the
  filter once per block size, run the blocked kernel
  (``jitnn.kernels.conv_transpose2d``) on ``nChw{b}c`` data.

WebNN semantics: ``x`` is ``(N, C, H, W)`` (``input_layout="nchw"``) or
``(N, H, W, C)`` (``"nhwc"``); the filter is ``iohw`` ``(C, O/groups, KH,
KW)`` (the default), ``hwoi`` ``(KH, KW, O/groups, C)`` or ``ohwi`` ``(O/groups,
KH, KW, C)``; padding is ``[top, bottom, left, right]``; the output size is
``(in - 1) * stride + (k - 1) * dilation + 1 - pad_begin - pad_end +
output_padding``, or ``output_sizes`` when given (then ``output_padding`` is
ignored and the size must lie in ``[computed, computed + stride)``, computed
without output padding).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import layouts
from ..errors import JitnnValueError
from ..kernels import conv_transpose2d as ct_kernels
from ..kernels import epilogue
from ..kernels import layout as layout_kernels
from ..limits import check_shape, shape_arg
from ..registry import OpDef, register_op
from ..tensor import Node, Tensor, Value
from ._common import (as_tensor, blocked_buffer, context_of, frozen_options, int_pair,
                      padding4, parse_activation, pending, plain_buffer, value_of)

OP = "conv_transpose2d"

#: WebNN convTranspose2d filter layouts, and how to view each as iohw.
FILTER_LAYOUTS = ("iohw", "hwoi", "ohwi")
_FILTER_TO_IOHW = {"iohw": (0, 1, 2, 3), "hwoi": (3, 2, 0, 1), "ohwi": (3, 0, 1, 2)}


@dataclass(frozen=True)
class ConvTranspose2dOptions:
    """Normalized options of one conv_transpose2d call (from :func:`conv_transpose2d_plan`).

    ``output_padding`` is the effective one (derived from ``output_sizes``
    when those were given); ``activation`` is ``(code, param0, param1)`` of
    :mod:`jitnn.kernels.epilogue`.
    """
    in_channels: int
    out_channels: int
    groups: int
    kernel: tuple[int, int]
    input_size: tuple[int, int]
    output_size: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    padding: tuple[int, int, int, int]
    output_padding: tuple[int, int]
    input_layout: str
    filter_layout: str
    activation: tuple[int, float, float]
    has_bias: bool
    batch: int

    @property
    def nchw_out_shape(self) -> tuple[int, ...]:
        """``(N, O, OH, OW)``: the output's logical shape in nchw order."""
        return (self.batch, self.out_channels) + self.output_size


def blocked_out_shape(options: ConvTranspose2dOptions, block: int) -> tuple[int, ...]:
    """``(N, ceil(O / block), OH, OW, block)``: the blocked output buffer."""
    return layouts.blocked_shape((options.batch, options.out_channels) + options.output_size,
                                 block)


def filter_iohw_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """A convTranspose2d filter's shape in iohw order, from its shape in ``layout``."""
    if layout not in _FILTER_TO_IOHW:
        raise JitnnValueError(
            f"{OP}: filter_layout must be one of {FILTER_LAYOUTS}, got {layout!r}")
    return tuple(shape[axis] for axis in _FILTER_TO_IOHW[layout])


def filter_as_iohw(w: np.ndarray, layout: str) -> np.ndarray:
    """A view of a convTranspose2d filter in any WebNN layout, axes in iohw order."""
    if layout not in _FILTER_TO_IOHW:
        raise JitnnValueError(
            f"{OP}: filter_layout must be one of {FILTER_LAYOUTS}, got {layout!r}")
    return w.transpose(_FILTER_TO_IOHW[layout])


def conv_transpose2d_output_size(size: int, kernel: int, stride: int, dilation: int,
                                 pad_begin: int, pad_end: int, output_padding: int = 0) -> int:
    """WebNN: ``(in - 1) * s + (k - 1) * d + 1 - pad_begin - pad_end + output_padding``."""
    return ((size - 1) * stride + (kernel - 1) * dilation + 1 - pad_begin - pad_end
            + output_padding)


def _shape4(name: str, shape: object) -> tuple[int, ...]:
    items = shape_arg(OP, f"{name} shape", shape)     # ints within jitnn/limits.py's bounds
    if len(items) != 4:
        raise JitnnValueError(f"{OP}: {name} must be 4-D, got shape {items}")
    return items


def conv_transpose2d_plan(x_shape, w_shape, bias_shape=None, *, strides=1, dilations=1,
                          padding=0, output_padding=0, output_sizes=None, groups=1,
                          input_layout: str = "nchw", filter_layout: str = "iohw",
                          activation=None) -> tuple[tuple[int, ...], ConvTranspose2dOptions]:
    """Validate a conv_transpose2d call and infer its output shape.

    Returns ``(out_shape, options)``: ``out_shape`` is ``(N, O, OH, OW)`` for
    ``input_layout="nchw"`` or ``(N, OH, OW, O)`` for ``"nhwc"``; ``options``
    the normalized :class:`ConvTranspose2dOptions`. Raises
    :class:`~jitnn.errors.JitnnValueError` / :class:`~jitnn.errors.JitnnTypeError`
    naming the op, what was expected and what came.
    """
    if input_layout not in layouts.ACTIVATION_LAYOUTS:
        raise JitnnValueError(f"{OP}: input_layout must be 'nchw' or 'nhwc', got {input_layout!r}")
    if filter_layout not in FILTER_LAYOUTS:
        raise JitnnValueError(
            f"{OP}: filter_layout must be one of {FILTER_LAYOUTS}, got {filter_layout!r}")
    xs = _shape4("input x", x_shape)
    ws = _shape4("filter w", w_shape)
    sh, sw = int_pair(OP, "strides", strides, 1)
    dh, dw = int_pair(OP, "dilations", dilations, 1)
    pad = padding4(OP, padding)
    oph, opw = int_pair(OP, "output_padding", output_padding, 0)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise JitnnValueError(f"{OP}: groups must be an int >= 1, got {groups!r}")
    groups = int(groups)
    activation_args = parse_activation(OP, activation)

    if input_layout == "nchw":
        n, c, h, wd = xs
    else:
        n, h, wd, c = xs
    fc, group_out, kh, kw = filter_iohw_shape(ws, filter_layout)
    shapes = f"(x {xs} {input_layout}, w {ws} {filter_layout}, groups {groups})"
    if min(xs) < 1 or min(ws) < 1:
        raise JitnnValueError(f"{OP}: empty dimension {shapes}")
    if fc != c:
        raise JitnnValueError(f"{OP}: input has {c} channels but the filter expects {fc} {shapes}")
    if c % groups:
        raise JitnnValueError(
            f"{OP}: the input's {c} channels do not divide into {groups} groups {shapes}")
    o = group_out * groups
    if oph >= sh or opw >= sw:
        raise JitnnValueError(
            f"{OP}: output_padding {(oph, opw)} must be smaller than strides {(sh, sw)}")
    base_h = conv_transpose2d_output_size(h, kh, sh, dh, pad[0], pad[1])
    base_w = conv_transpose2d_output_size(wd, kw, sw, dw, pad[2], pad[3])
    geometry = (f"input {h}x{wd}, kernel {kh}x{kw}, strides {(sh, sw)}, "
                f"dilations {(dh, dw)}, padding {list(pad)}")
    if output_sizes is not None:
        oh, ow = int_pair(OP, "output_sizes", output_sizes, 1)
        if not (base_h <= oh < base_h + sh and base_w <= ow < base_w + sw):
            raise JitnnValueError(
                f"{OP}: output_sizes {(oh, ow)} must be in [{base_h}, {base_h + sh}) x "
                f"[{base_w}, {base_w + sw}) for {geometry}")
        oph, opw = oh - base_h, ow - base_w
    else:
        oh, ow = base_h + oph, base_w + opw
    if oh < 1 or ow < 1:
        raise JitnnValueError(f"{OP}: the output would be {oh}x{ow}: {geometry}, "
                              f"output_padding {(oph, opw)}")
    if bias_shape is not None:
        bias_dims = shape_arg(OP, "bias shape", bias_shape)
        if bias_dims != (o,):
            raise JitnnValueError(
                f"{OP}: bias must have shape ({o},) for {o} output channels, got {bias_dims}")
    options = ConvTranspose2dOptions(
        in_channels=c, out_channels=o, groups=groups, kernel=(kh, kw), input_size=(h, wd),
        output_size=(oh, ow), strides=(sh, sw), dilations=(dh, dw), padding=pad,
        output_padding=(oph, opw), input_layout=input_layout, filter_layout=filter_layout,
        activation=activation_args, has_bias=bias_shape is not None, batch=n)
    out_shape = (n, o, oh, ow) if input_layout == "nchw" else (n, oh, ow, o)
    # the output grows with the strides: refuse one no memory could hold
    check_shape(OP, "the result's shape", out_shape)
    return out_shape, options


def conv_transpose2d_reference(x, w, bias=None, *, strides=1, dilations=1, padding=0,
                               output_padding=0, output_sizes=None, groups=1,
                               input_layout: str = "nchw", filter_layout: str = "iohw",
                               activation=None) -> np.ndarray:
    """The spec: a plain float64 numpy transposed convolution with WebNN's semantics.

    Scatter form: every input pixel ``(ih, iw)`` adds ``x * w[:, :, kh, kw]``
    at ``(ih * sh + kh * dh, iw * sw + kw * dw)`` of a canvas of the full
    (unpadded) output; the result is the canvas cropped by the padding (rows
    past the canvas, from output padding, receive nothing but the bias).
    Returns float64 in the input's layout convention.
    """
    xa = np.asarray(x, np.float64)
    wa = np.asarray(w, np.float64)
    _, opts = conv_transpose2d_plan(
        xa.shape, wa.shape, None if bias is None else np.shape(bias), strides=strides,
        dilations=dilations, padding=padding, output_padding=output_padding,
        output_sizes=output_sizes, groups=groups, input_layout=input_layout,
        filter_layout=filter_layout, activation=activation)
    if input_layout == "nhwc":
        xa = xa.transpose(0, 3, 1, 2)
    wa = filter_as_iohw(wa, filter_layout)
    n, c, h, wd = xa.shape
    _, group_out, kh, kw = wa.shape
    sh, sw = opts.strides
    dh, dw = opts.dilations
    top, _, left, _ = opts.padding
    oh, ow = opts.output_size
    groups = opts.groups
    group_in = c // groups
    full_h = (h - 1) * sh + (kh - 1) * dh + 1
    full_w = (wd - 1) * sw + (kw - 1) * dw + 1
    canvas = np.zeros((n, group_out * groups, max(full_h, top + oh), max(full_w, left + ow)))
    for g in range(groups):
        xg = xa[:, g * group_in:(g + 1) * group_in]
        for i in range(kh):
            for j in range(kw):
                contribution = np.einsum("nchw,co->nohw", xg,
                                         wa[g * group_in:(g + 1) * group_in, :, i, j])
                canvas[:, g * group_out:(g + 1) * group_out,
                       i * dh:i * dh + (h - 1) * sh + 1:sh,
                       j * dw:j * dw + (wd - 1) * sw + 1:sw] += contribution
    out = canvas[:, :, top:top + oh, left:left + ow]
    if bias is not None:
        out = out + np.asarray(bias, np.float64)[None, :, None, None]
    code, p0, p1 = opts.activation
    out = epilogue.activation_reference(out, code, p0, p1)
    return out.transpose(0, 2, 3, 1) if input_layout == "nhwc" else out


def conv_transpose2d_pack(w, options: ConvTranspose2dOptions,
                          block: int) -> ct_kernels.PackedConvTranspose2dFilter:
    """Pack the filter ``w`` (in ``options.filter_layout``) for ``block``: once per
    (filter, block, groups, strides, dilations), the options the packing
    depends on (the kernel checks them); padding and sizes may vary."""
    wa = np.asarray(w)
    expected = filter_iohw_shape(wa.shape, options.filter_layout) if wa.ndim == 4 else None
    if expected is None or expected[0] != options.in_channels or \
            expected[1] * options.groups != options.out_channels or \
            tuple(expected[2:]) != options.kernel:
        raise JitnnValueError(f"{OP}: filter of shape {wa.shape} ({options.filter_layout}) "
                              f"does not match the planned options")
    layouts.check_block(block, OP)
    return ct_kernels.pack_conv_transpose2d_filter(
        filter_as_iohw(wa, options.filter_layout), options.in_channels, options.groups, block,
        options.strides, options.dilations)


def run_conv_transpose2d(x_blocked: np.ndarray, packed: ct_kernels.PackedConvTranspose2dFilter,
                         options: ConvTranspose2dOptions, bias: np.ndarray | None = None,
                         out: np.ndarray | None = None) -> np.ndarray:
    """Run the blocked kernel: ``x_blocked`` ``(N, ceil(C/b), H, W, b)`` (logical
    axes nchw, whatever ``options.input_layout`` was: the caller reorders) ->
    the blocked output ``(N, ceil(O/b), OH, OW, b)``, padding lanes zero.

    ``bias``: ``(O,)`` (or already padded ``(O_phys,)``), or None. ``out``: an
    optional caller-allocated output buffer (float32, C-contiguous, that shape);
    a new 64-byte-aligned one otherwise. Returns the output buffer.
    """
    block = packed.block
    if (packed.in_channels, packed.out_channels, packed.groups, packed.kernel) != (
            options.in_channels, options.out_channels, options.groups, options.kernel):
        raise JitnnValueError(
            f"{OP}: the packed filter ({packed.in_channels} -> {packed.out_channels} channels, "
            f"groups {packed.groups}, kernel {packed.kernel}) does not match the options "
            f"({options.in_channels} -> {options.out_channels}, groups {options.groups}, "
            f"kernel {options.kernel})")
    want_x = layouts.blocked_shape((options.batch, options.in_channels) + options.input_size,
                                   block)
    if getattr(x_blocked, "shape", None) != want_x:
        raise JitnnValueError(f"{OP}: blocked input has shape {getattr(x_blocked, 'shape', None)}, "
                              f"expected {want_x}")
    shape = blocked_out_shape(options, block)
    if out is None:
        out = ct_kernels.aligned_empty(shape)
    if bias is not None:
        bias = np.ascontiguousarray(bias, np.float32).reshape(-1)
    code, p0, p1 = options.activation
    ct_kernels.conv_transpose2d_forward(x_blocked, packed, out, options.strides,
                                        options.dilations, options.padding, bias, code, p0, p1)
    return out


# --- the op ---------------------------------------------------------------------------

def conv_transpose2d(x, w, bias=None, *, strides=1, dilations=1, padding=0, output_padding=0,
                     output_sizes=None, groups: int = 1, input_layout: str = "nchw",
                     filter_layout: str = "iohw", activation=None) -> Tensor:
    """Transposed 2-D convolution with WebNN's options; returns a pending Tensor,
    blocked like conv2d's result (plain under the ``"plain"`` policy).

    ``x``: ``(N, C, H, W)`` or ``(N, H, W, C)`` (``input_layout="nhwc"``); ``w``:
    ``iohw`` ``(C, O/groups, KH, KW)`` (default), ``hwoi`` or ``ohwi``; ``bias``
    ``(O,)``. See the module docstring for the output size. The filter is packed
    once per (filter tensor, block, groups, strides, dilations).
    """
    ctx = context_of(OP, x, w, bias)
    x = as_tensor(ctx, x, OP, "x")
    w = as_tensor(ctx, w, OP, "filter")
    bias_t = None if bias is None else as_tensor(ctx, bias, OP, "bias")
    key = (OP, x.shape, w.shape, None if bias_t is None else bias_t.shape,
           *frozen_options((strides, dilations, padding, output_padding, output_sizes, groups,
                            input_layout, filter_layout, activation)))
    out_shape, options = ctx.single_op_graph(key, lambda: conv_transpose2d_plan(
        x.shape, w.shape, None if bias_t is None else bias_t.shape, strides=strides,
        dilations=dilations, padding=padding, output_padding=output_padding,
        output_sizes=output_sizes, groups=groups, input_layout=input_layout,
        filter_layout=filter_layout, activation=activation))
    block = ctx.block
    x_value = value_of(x)
    reorder = () if (layouts.block_of(x.layout) == block and x._axes == input_layout) \
        else ((x_value, block, input_layout),)
    attrs = {"options": options, "w": value_of(w), "bias": value_of(bias_t),
             "block": block, "blocked_inputs": reorder}
    inputs = (x_value, attrs["w"]) + ((attrs["bias"],) if bias_t is not None else ())
    n, o = options.batch, options.out_channels
    kh, kw = options.kernel
    flops = 2 * n * o * (options.in_channels // options.groups) * kh * kw \
        * options.input_size[0] * options.input_size[1]
    # no pass rewrites this node (a reused plan runs it as recorded): the
    # options and which inputs need a reorder say all the passes see
    node = Node(OP, inputs, kind="conv_transpose2d", attrs=attrs,
                run=_run_node, flops=flops, sig=(OP, options, bias_t is None, bool(reorder)))
    layout = layouts.blocked_tag(block) if ctx.policy != "plain" else input_layout
    return pending(ctx, out_shape, layout, node, axes=input_layout)


def _run_node(ctx, node: Node, value: Value, out: np.ndarray | None) -> np.ndarray:
    a = node.attrs
    options, block = a["options"], a["block"]
    x_value = node.inputs[0]
    source = blocked_buffer(ctx, x_value, block, options.input_layout)
    w = a["w"]
    weights = plain_buffer(w)    # outside the filter's lock (see Value._derive)

    def pack():
        packed = ctx.launcher.side_work(lambda: conv_transpose2d_pack(weights, options, block))
        ctx.launcher.count(filter_packs=1, filter_pack_bytes=packed.weights.nbytes)
        return packed
    packed = w._derive(("conv_transpose2d_filter", block, options.filter_layout,
                        options.groups, options.strides, options.dilations), pack)
    bias = None if a["bias"] is None else plain_buffer(a["bias"])
    plain_result = layouts.block_of(value.layout) is None
    blocked = out if out is not None and not plain_result else \
        ct_kernels.aligned_empty(blocked_out_shape(options, block))
    # through the context: its thread count, counted as a launch
    ctx.launcher.launch(run_conv_transpose2d, source, packed, options, bias, blocked)
    if not plain_result:
        return blocked
    result = ct_kernels.aligned_empty(value.shape)
    kernel = layout_kernels.blocked_to_nchw if options.input_layout == "nchw" \
        else layout_kernels.blocked_to_nhwc
    return ctx.launcher.reorder(kernel, blocked, result)

register_op(OpDef(
    "conv_transpose2d", conv_transpose2d, conv_transpose2d_reference, webnn="convTranspose2d",
    onnx=("ConvTranspose",), kinds=("conv_transpose2d",), layouts="blocked",
    fusion="bias and activation in its kernel"))
