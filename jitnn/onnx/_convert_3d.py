"""3-D (rank-5, ``(N, C, D, H, W)``) Conv, ConvTranspose, MaxPool, AveragePool
and the global pools, lowered onto jitnn's 2-D ops (no kernel of their own).

A 3-D convolution runs as 2-D ones over the depth planes: the input viewed
depth-major as ``(N*D, C, H, W)`` (its "depth-major" form); for each depth
tap ``kd`` the planes that tap reads (``kd * dilation + od * stride`` of the
depth-padded input, a strided slice) go through one ``conv2d`` with the
filter's ``kd``-th slice ``W[:, :, kd]``, and the partial results are summed,
each add fused into the next tap's conv2d as its residual (the bias on the
first tap only); a ConvTranspose likewise, with conv_transpose2d
(:func:`op_conv_transpose_3d`). Consecutive 3-D convolutions stay depth-major: the
converter remembers each result's depth-major form, and an elementwise op
between them (the ReLU, the residual add of a video ResNet) is replayed on
those forms (:func:`depth_major`), so the rank-5 result, a transpose of it,
is only made where something else reads it.

A pool is separable: the max (mean) over a 3-D window is the max (mean) over
its depth of the max (mean) over its (H, W) window, padding and ceil_mode
per axis as ONNX has them (the element count of a mean window is the product
of its counts along each axis), so a pool is two 2-D pools on reshapes of
``(N, C, D, H, W)``, without a transpose.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..graph import Operand
from ._common import Const, Converter, rank_of, shape_of
from ._convert import (_commuted, _live_taps, _without_dead_taps, conv_pads, conv_transpose_pads,
                       op_average_pool, op_conv, op_conv_transpose, op_global_average_pool,
                       op_global_max_pool, op_max_pool, pool_output_sizes, webnn_padding)
from ._validate import check_kernel_shape

#: builder ops that act element by element on same-shape operands, replayed on
#: the depth-major forms of their inputs (a permutation of the elements commutes with them)
_ELEMENTWISE = frozenset((
    "relu", "sigmoid", "tanh", "clamp", "leaky_relu", "hard_swish", "hard_sigmoid", "gelu",
    "elu", "add", "sub", "mul", "div", "maximum", "minimum", "prelu"))

#: how many elementwise ops deep :func:`depth_major` looks for a known form
_REPLAY_DEPTH = 4


def _to_depth_major(cv: Converter, x5: Operand) -> Operand:
    n, c, d, h, w = x5.shape
    moved = cv.op("transpose", x5, (0, 2, 1, 3, 4))
    return cv.op("reshape", moved, (n * d, c, h, w))


def _from_depth_major(cv: Converter, y4: Operand, n: int, d: int) -> Operand:
    """The rank-5 ``(N, C, D, H, W)`` of depth-major ``y4``; remembered as its form."""
    _, c, h, w = y4.shape
    y5 = cv.op("transpose", cv.op("reshape", y4, (n, d, c, h, w)), (0, 2, 1, 3, 4))
    cv.shared.setdefault("depth_major", {})[id(y5)] = (y5, y4)
    return y5


def _producer(cv: Converter, x: Operand):
    """The builder's record of the op that made ``x`` (None for an input or constant)."""
    for recorded in reversed(cv.b._ops):
        if recorded.index == x._index:
            return recorded
        if isinstance(recorded.index, int) and recorded.index < x._index:
            return None
    return None


def _replayed(cv: Converter, x: Operand, depth: int) -> Operand | None:
    """The depth-major form of ``x`` from the forms the converter knows: a
    remembered one, or ``x``'s elementwise op replayed on its inputs' forms
    when at least one of them is known (None when none is)."""
    table = cv.shared.setdefault("depth_major", {})
    known = table.get(id(x))
    if known is not None and known[0] is x:
        return known[1]
    if depth == 0:
        return None
    recorded = _producer(cv, x)
    if recorded is None or recorded.op not in _ELEMENTWISE \
            or any(isinstance(v, Operand) for v in recorded.kwargs.values()):
        return None
    operands = [a for a in recorded.args if isinstance(a, Operand)]
    if any(a.shape != x.shape for a in operands):
        return None                         # a broadcast: its operand has no depth-major form
    forms = {id(a): _replayed(cv, a, depth - 1) for a in operands}
    if all(f is None for f in forms.values()):
        return None
    args = [a if not isinstance(a, Operand) else forms[id(a)] or _to_depth_major(cv, a)
            for a in recorded.args]
    if len(args) == 2:
        args = list(_commuted(recorded.op, *args))
    y4 = cv.op(recorded.op, *args, **recorded.kwargs)
    table[id(x)] = (x, y4)
    return y4


def depth_major(cv: Converter, x) -> Operand:
    """Rank-5 ``x`` ``(N, C, D, H, W)`` as ``(N*D, C, H, W)``: a known form
    (see :func:`_replayed`) or a transpose and reshape, made once per value."""
    x5 = cv.operand(x)
    y4 = _replayed(cv, x5, _REPLAY_DEPTH)
    if y4 is None:
        y4 = _to_depth_major(cv, x5)
        cv.shared["depth_major"][id(x5)] = (x5, y4)
    return y4


def _strides_dilations(cv: Converter, attrs: dict) -> tuple[list[int], list[int]]:
    found = []
    for name in ("strides", "dilations"):
        values = [int(v) for v in attrs.get(name, [1] * 3)]
        if len(values) != 3 or min(values) < 1:
            raise cv.invalid(f"{name} {values}: a 3-D {cv.node.op_type} needs 3 values >= 1")
        found.append(values)
    return found[0], found[1]


def _filter_tap(cv: Converter, w, tap: int, plane: list[int], strides: list[int],
                dilations: list[int], pads: list[tuple[int, int]]):
    """The filter's depth tap ``tap`` ``W[:, :, tap]`` as a 2-D filter and the
    (H, W) padding to use with it: a constant one without the taps that only
    read padding (as a 2-D Conv's), made once per filter and tap."""
    if not isinstance(w, Const):
        o, per_group, _, kh, kw = shape_of(w)
        part = cv.op("slice", cv.operand(w), [0, 0, tap, 0, 0], [o, per_group, 1, kh, kw])
        return cv.op("reshape", part, (o, per_group, kh, kw)), pads
    key = ("3d", id(w), tap, tuple(plane), tuple(strides), tuple(dilations), tuple(pads))
    cached = cv._operands.get(key)   # type: ignore[call-overload]
    if cached is None:
        tap_filter, tap_pads = _without_dead_taps(
            Const(np.ascontiguousarray(w.array[:, :, tap]), w.name), plane, strides,
            dilations, pads)
        cached = (cv.float_operand(tap_filter), tap_pads)
        cv._operands[key] = cached   # type: ignore[index]
        cv._keep.append(w)
    return cached


def op_conv_3d(cv: Converter, inputs, attrs):
    """Conv of a rank-5 input: one conv2d per live depth tap (module docstring)."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if rank_of(w) != 5:
        raise cv.invalid(f"a filter of shape {shape_of(w)} for an input of shape {shape_of(x)}: "
                         "a 3-D Conv needs a rank-5 filter (O, C/group, kD, kH, kW)")
    check_kernel_shape(cv, attrs, w)
    n, channels, depth, height, width = shape_of(x)
    out_channels, per_group, *kernel = shape_of(w)
    group = int(attrs.get("group", 1))
    if group < 1 or channels != per_group * group or out_channels % group:
        raise cv.invalid(f"an input of {channels} channels (shape {shape_of(x)}) and a filter "
                         f"of shape {shape_of(w)} with group={group}: the input needs "
                         f"group x {per_group} = {per_group * group} channels and the filter's "
                         "output channels must divide by group")
    strides, dilations = _strides_dilations(cv, attrs)
    pads = conv_pads(cv, attrs, [depth, height, width], kernel, strides, dilations)
    (begin, end), stride, dilation, taps = pads[0], strides[0], dilations[0], kernel[0]
    depth_out = (depth + begin + end - (taps - 1) * dilation - 1) // stride + 1
    if depth_out < 1:
        raise cv.invalid(f"a depth of {depth} padded by {pads[0]} is smaller than the filter's "
                         f"dilated depth {(taps - 1) * dilation + 1}: no output plane")
    live = _live_taps(depth, taps, stride, dilation, begin, end)
    x4 = depth_major(cv, x)
    if taps == 1 and stride == 1 and begin == 0 and end == 0:
        planes = {0: x4}                     # every depth plane, as it is
    else:
        planes = _tap_planes(cv, x4, n, depth, begin, depth_out, taps, stride, dilation,
                             range(live[0], live[1] + 1) if live else range(1))
    acc = None
    for tap, plane in planes.items():
        tap_filter, tap_pads = _filter_tap(cv, w, tap, [height, width], strides[1:],
                                           dilations[1:], pads[1:])
        y = cv.op("conv2d", plane, tap_filter,
                  None if bias is None or acc is not None else cv.operand(bias),
                  strides=tuple(strides[1:]), dilations=tuple(dilations[1:]),
                  padding=webnn_padding(tap_pads), groups=group)
        # the running sum second: the scheduler fuses it into this conv as its residual
        acc = y if acc is None else cv.op("add", y, acc)
    return [_from_depth_major(cv, acc, n, depth_out)]


def _tap_planes(cv: Converter, x4: Operand, n: int, depth: int, begin: int, depth_out: int,
                taps: int, stride: int, dilation: int, live) -> dict[int, Operand]:
    """For each depth tap in ``live``, the ``depth_out`` planes it reads
    (``tap * dilation + od * stride`` of the input padded by ``begin`` zero
    planes in front and as many as the last output plane needs behind), as
    ``(N*depth_out, C, H, W)``."""
    _, channels, height, width = x4.shape
    x5 = cv.op("reshape", x4, (n, depth, channels, height, width))
    span = (depth_out - 1) * stride + 1
    needed = (depth_out - 1) * stride + (taps - 1) * dilation + 1
    behind = max(0, needed - depth - begin)
    if begin or behind:
        x5 = cv.op("pad", x5, [0, begin, 0, 0, 0], [0, behind, 0, 0, 0])
    planes = {}
    for tap in live:
        part = x5
        if tap * dilation != 0 or span != x5.shape[1] or stride != 1:
            part = cv.op("slice", x5, [0, tap * dilation, 0, 0, 0],
                         [n, span, channels, height, width], strides=[1, stride, 1, 1, 1])
        planes[tap] = cv.op("reshape", part, (n * depth_out, channels, height, width))
    return planes


def op_conv_transpose_3d(cv: Converter, inputs, attrs):
    """ConvTranspose of a rank-5 input: output plane ``od`` sums, over the
    depth taps ``kd``, the 2-D transposed conv by ``W[:, :, kd]`` of input
    plane ``i`` where ``i * stride + kd * dilation - pad = od``. With the
    input's planes spread ``stride`` apart (zero planes between them, a pad
    of a reshape) that is plane ``od + pad - kd * dilation``: a unit-stride
    slice per tap, as a Conv's (the zero planes cost their conv_transpose2d)."""
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    if rank_of(w) != 5:
        raise cv.invalid(f"a filter of shape {shape_of(w)} for an input of shape {shape_of(x)}: "
                         "a 3-D ConvTranspose needs a rank-5 filter (C, O/group, kD, kH, kW)")
    check_kernel_shape(cv, attrs, w)
    n, channels, depth, height, width = shape_of(x)
    in_channels, per_group, *kernel = shape_of(w)
    group = int(attrs.get("group", 1))
    if group < 1 or channels != in_channels or in_channels % group:
        raise cv.invalid(f"an input of {channels} channels (shape {shape_of(x)}) and a filter "
                         f"of shape {shape_of(w)} with group={group}: the filter's first axis "
                         "must be the input's channels, and divide by group")
    strides, dilations = _strides_dilations(cv, attrs)
    pads, output_padding = conv_transpose_pads(cv, attrs, [depth, height, width], kernel,
                                               strides, dilations)
    (begin, end), stride, dilation, taps = pads[0], strides[0], dilations[0], kernel[0]
    depth_out = stride * (depth - 1) + output_padding[0] + (taps - 1) * dilation + 1 - begin - end
    if depth_out < 1:
        raise cv.invalid(f"a depth of {depth} with pads {pads[0]}: no output plane")
    x4 = depth_major(cv, x)
    x5 = cv.op("reshape", x4, (n, depth, 1, channels * height * width))
    if stride > 1:                           # the input planes `stride` apart
        x5 = cv.op("pad", x5, [0, 0, 0, 0], [0, 0, stride - 1, 0])
    spread = depth * stride
    x5 = cv.op("reshape", x5, (n, spread, channels, height, width))
    front = max(0, (taps - 1) * dilation - begin)
    behind = max(0, begin + depth_out - spread)
    if front or behind:
        x5 = cv.op("pad", x5, [0, front, 0, 0, 0], [0, behind, 0, 0, 0])
    live = [t for t in range(taps) if any(
        0 <= (od + begin - t * dilation) < spread and (od + begin - t * dilation) % stride == 0
        and (od + begin - t * dilation) // stride < depth for od in range(depth_out))] or [0]
    acc = None
    for tap in live:
        start = front + begin - tap * dilation
        part = x5
        if start or depth_out != x5.shape[1]:
            part = cv.op("slice", x5, [0, start, 0, 0, 0], [n, depth_out, channels, height, width])
        plane = cv.op("reshape", part, (n * depth_out, channels, height, width))
        y = cv.op("conv_transpose2d", plane, _transposed_filter_tap(cv, w, tap),
                  None if bias is None or acc is not None else cv.operand(bias),
                  strides=tuple(strides[1:]), dilations=tuple(dilations[1:]),
                  padding=webnn_padding(pads[1:]), output_padding=tuple(output_padding[1:]),
                  groups=group, filter_layout="iohw")
        acc = y if acc is None else cv.op("add", y, acc)
    return [_from_depth_major(cv, acc, n, depth_out)]


def _transposed_filter_tap(cv: Converter, w, tap: int) -> Operand:
    """``W[:, :, tap]`` of a ConvTranspose filter (C, O/group, kD, kH, kW)."""
    if not isinstance(w, Const):
        c, per_group, _, kh, kw = shape_of(w)
        part = cv.op("slice", cv.operand(w), [0, 0, tap, 0, 0], [c, per_group, 1, kh, kw])
        return cv.op("reshape", part, (c, per_group, kh, kw))
    key = ("3d transposed", id(w), tap)
    cached = cv._operands.get(key)   # type: ignore[call-overload]
    if cached is None:
        cached = cv.float_operand(Const(np.ascontiguousarray(w.array[:, :, tap]), w.name))
        cv._operands[key] = cached   # type: ignore[index]
        cv._keep.append(w)
    return cached


def _pool_3d(cv: Converter, name: str, x, attrs, **options) -> Operand:
    """A 3-D pool as the 2-D pool ``name`` over each (H, W) plane, then over
    the depth (the (N, C, D, H', W') result viewed as (N, C, D, H'*W')); a
    pass whose window is one element with stride 1 and no padding is left out."""
    kernel = [int(k) for k in attrs["kernel_shape"]]
    if len(kernel) != 3:
        raise cv.invalid(f"kernel_shape {kernel} for an input of shape {shape_of(x)}: a 3-D "
                         "pool needs 3 (kD, kH, kW)")
    n, channels, depth, height, width = shape_of(x)
    strides, dilations = _strides_dilations(cv, attrs)
    pads = conv_pads(cv, attrs, [depth, height, width], kernel, strides, dilations)
    out = pool_output_sizes(attrs, [depth, height, width], kernel, strides, dilations, pads)
    if min(out) < 1:
        raise cv.invalid(f"an input of shape {shape_of(x)} padded by {pads} gives no output "
                         f"for kernel_shape {kernel}")
    y = cv.operand(x)
    if (kernel[1:], strides[1:], pads[1:]) != ([1, 1], [1, 1], [(0, 0), (0, 0)]) \
            or out[1:] != [height, width]:
        planes = cv.op("reshape", y, (n, channels * depth, height, width))
        planes = cv.op(name, planes, window_dimensions=tuple(kernel[1:]),
                       strides=tuple(strides[1:]), dilations=tuple(dilations[1:]),
                       padding=webnn_padding(pads[1:]), output_sizes=tuple(out[1:]), **options)
        y = cv.op("reshape", planes, (n, channels, depth) + tuple(out[1:]))
    if (kernel[0], strides[0], pads[0]) != (1, 1, (0, 0)) or out[0] != depth:
        rest = out[1] * out[2]
        flat = cv.op("reshape", y, (n, channels, depth, rest))
        flat = cv.op(name, flat, window_dimensions=(kernel[0], 1), strides=(strides[0], 1),
                     dilations=(dilations[0], 1), padding=[pads[0][0], pads[0][1], 0, 0],
                     output_sizes=(out[0], rest), **options)
        y = cv.op("reshape", flat, (n, channels) + tuple(out))
    return y


def op_max_pool_3d(cv: Converter, inputs, attrs, outputs=1):
    """MaxPool of a rank-5 input; an int8 / uint8 input pools in float32 (exact), cast back."""
    if outputs > 1:
        raise cv.unsupported("the Indices output of MaxPool")
    x = cv.operand(inputs[0])
    dtype = x.dtype
    small = dtype in (np.int8, np.uint8)
    if small:
        x = cv.op("cast", x, np.float32)
    y = _pool_3d(cv, "max_pool2d", x, attrs)
    return [cv.op("cast", y, dtype) if small else y]


def op_average_pool_3d(cv: Converter, inputs, attrs):
    if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") and \
            attrs.get("count_include_pad", 0):
        raise cv.unsupported("auto_pad SAME with count_include_pad=1")
    return [_pool_3d(cv, "average_pool2d", inputs[0], attrs,
                     count_include_pad=bool(attrs.get("count_include_pad", 0)))]


def op_global_average_pool_3d(cv: Converter, inputs, attrs):
    return _global_pool_3d(cv, inputs[0], "mean")


def op_global_max_pool_3d(cv: Converter, inputs, attrs):
    return _global_pool_3d(cv, inputs[0], "max")


def _global_pool_3d(cv: Converter, x, reduce: str) -> list:
    """GlobalAveragePool (``reduce="mean"``) or GlobalMaxPool (``"max"``) of
    a rank-5 input: the 2-D global pool of every (H, W) plane and then the
    mean or max over the depth, on the depth-major form when the input has one
    (a 3-D conv's result), else one 2-D pool of the (N, C, D*H, W) view."""
    x = cv.operand(x)
    n, channels, depth, height, width = x.shape
    known = _replayed(cv, x, _REPLAY_DEPTH)
    if known is None:
        planes = cv.op("reshape", x, (n, channels, depth * height, width))
        y = cv.op("global_average_pool2d", planes) if reduce == "mean" \
            else cv.op("max_pool2d", planes)
        return [cv.op("reshape", y, (n, channels, 1, 1, 1))]
    y = cv.op("global_average_pool2d", known) if reduce == "mean" \
        else cv.op("max_pool2d", known)
    y = cv.op("reshape", y, (n, depth, channels))
    y = cv.op("reduce_mean" if reduce == "mean" else "reduce_max", y, axes=[1],
              keep_dimensions=False)
    return [cv.op("reshape", y, (n, channels, 1, 1, 1))]


def _by_rank(two_d: Callable, three_d: Callable) -> Callable:
    """The handler of an op that runs ``three_d`` on a rank-5 input, ``two_d`` on the others."""
    def handler(cv: Converter, inputs, attrs, *outputs):
        return (three_d if rank_of(inputs[0]) == 5 else two_d)(cv, inputs, attrs, *outputs)
    return handler


#: ONNX op type -> handler, for 1-D to 3-D inputs (replacing jitnn/onnx/_convert.py's)
OPS: dict[str, Callable] = {
    "Conv": _by_rank(op_conv, op_conv_3d),
    "ConvTranspose": _by_rank(op_conv_transpose, op_conv_transpose_3d),
    "MaxPool": _by_rank(op_max_pool, op_max_pool_3d),
    "AveragePool": _by_rank(op_average_pool, op_average_pool_3d),
    "GlobalAveragePool": _by_rank(op_global_average_pool, op_global_average_pool_3d),
    "GlobalMaxPool": _by_rank(op_global_max_pool, op_global_max_pool_3d),
}
