"""ONNX graph -> jitnn GraphBuilder: one handler per ONNX op.

Every ONNX value is, while converting, either a :class:`Const` (a numpy array
in its ONNX dtype, known at load time: initializers, ``Constant`` nodes, the
shapes of tensors, and everything computed from those alone) or a builder
:class:`~jitnn.graph.Operand` (a value computed when the graph runs: float32,
or an integer type; an ONNX bool is a uint8 0/1).
A node whose inputs are all constants is folded with numpy (the ``FOLD``
table: this is how the shape arithmetic that exporters emit around
``Reshape``, ``Shape -> Gather -> Unsqueeze -> Concat`` and friends,
disappears); otherwise its handler in ``OPS`` adds jitnn ops to the builder.
Shapes are static in a built graph, so ``Shape`` of an operand is a constant.

A constant becomes a builder constant (``b.constant``) the first time an op
needs it as a tensor, once per ONNX name: every dispatch of the graph then
reuses it, and a filter is packed once. A constant keeps its integer type
where the op consumes integers (indices, conditions, integer arithmetic) and
becomes float32 where the op computes in float32.

The handlers of the math, logic, reduction, normalization and indexing ops
are in jitnn/onnx/_convert_math.py, Resize in jitnn/onnx/_convert_resize.py; those of
Conv, ConvTranspose and the pools in jitnn/onnx/_convert_3d.py take rank-5 (3-D) inputs
and hand the others to the ones here.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from ..graph import Operand
from ._common import (Const, Converter, ints, jitnn_dtype, need_const, onnx_dtype, rank_of,
                      refused_dtype, reshape_target, shape_of, slice_index,
                      spatial_rank_check, split_sizes, squeeze_shape, unsqueeze_shape)
from ._validate import check_kernel_shape
from ._row_moves import fold as fold_rows
from ._shuffle import gathered_channels, shuffle_indices


def same_pads(auto_pad: str, size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """ONNX SAME_UPPER / SAME_LOWER: output ceil(size / stride), extra pad at the end / begin."""
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small = total // 2
    return (small, total - small) if auto_pad == "SAME_UPPER" else (total - small, small)


def conv_pads(cv: Converter, attrs: dict, spatial: list[int], kernel: list[int],
              strides: list[int], dilations: list[int]) -> list[tuple[int, int]]:
    """Per spatial axis (begin, end) padding from ``pads`` / ``auto_pad``."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    nd = len(spatial)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        return [same_pads(auto_pad, spatial[i], kernel[i], strides[i], dilations[i])
                for i in range(nd)]
    if auto_pad == "VALID":
        return [(0, 0)] * nd
    if auto_pad not in ("NOTSET", ""):
        raise cv.unsupported(f"auto_pad {auto_pad!r}")
    pads = list(attrs.get("pads", [0] * (2 * nd)))
    if len(pads) != 2 * nd:
        raise cv.unsupported(f"pads {pads} for {nd} spatial axes")
    return [(pads[i], pads[i + nd]) for i in range(nd)]


def webnn_padding(pads: list[tuple[int, int]]) -> list[int]:
    (top, bottom), (left, right) = pads
    return [top, bottom, left, right]


def to_2d(cv: Converter, x, rank: int):
    """A 1-D (N, C, L) operand as 2-D (N, C, 1, L)."""
    if rank == 4:
        return cv.operand(x)
    n, c, length = shape_of(x)
    return cv.op("reshape", cv.operand(x), (n, c, 1, length))


def from_2d(cv: Converter, y: Operand, rank: int) -> Operand:
    if rank == 4:
        return y
    n, c, _, length = y.shape
    return cv.op("reshape", y, (n, c, length))


def filter_2d(cv: Converter, w, rank: int):
    """A 1-D filter (A, B, K) as (A, B, 1, K); a constant stays a constant."""
    if rank == 4:
        return cv.operand(w)
    if isinstance(w, Const):
        key = ("2d", id(w))
        cached = cv._operands.get(key)   # type: ignore[call-overload]
        if cached is None:
            a, b_, k = w.shape
            cached = cv.operand(Const(w.array.reshape(a, b_, 1, k), w.name))
            cv._operands[key] = cached   # type: ignore[index]
        return cached
    a, b_, k = shape_of(w)
    return cv.op("reshape", cv.operand(w), (a, b_, 1, k))


def expand_1d(values: list[int], rank: int, fill: int) -> tuple[int, int]:
    return (fill, values[0]) if rank == 3 else (values[0], values[1])


def op_conv(cv: Converter, inputs, attrs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = spatial_rank_check(cv, x)
    if rank_of(w) != rank:
        raise cv.unsupported(f"filter rank {rank_of(w)} for input rank {rank}")
    check_kernel_shape(cv, attrs, w)
    nd = rank - 2
    kernel = list(shape_of(w)[2:])
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = conv_pads(cv, attrs, list(shape_of(x)[2:]), kernel, strides, dilations)
    if isinstance(w, Const) and nd == 2:
        w, pads = _without_dead_taps(w, list(shape_of(x)[2:]), strides, dilations, pads)
    groups = int(attrs.get("group", 1))
    if nd == 2 and isinstance(w, Const) and groups == 1 and tuple(shape_of(x)[2:]) == (1, 1) \
            and w.array.shape[2:] == (1, 1) and all(p == (0, 0) for p in pads) \
            and w.array.size >= _HEAD_FILTER_MIN:
        # a large 1x1 conv of a 1 x 1 map (a mobile net's head after its global
        # pool): a product of each image's channel row and the filter, on the
        # matmul kernels, whose one-row path streams the weights (MobileNetV4's
        # 960 -> 1280 head: 450 us as a conv, 142 us so, 1 thread). Smaller ones
        # stay convs: a squeeze-and-excitation block's pair (C -> C/4 -> C) is
        # one fused op of convs (ops/squeeze_excite.py)
        n, c = shape_of(x)[:2]
        o = w.array.shape[0]
        rows = cv.op("reshape", cv.operand(x), (n, c))
        filter_t = Const(np.ascontiguousarray(w.array.reshape(o, c).T), w.name)
        y = cv.op("matmul", rows, cv.operand(filter_t))
        if bias is not None:
            y = cv.op("add", y, cv.operand(bias))
        return [cv.op("reshape", y, (n, o, 1, 1))]
    if nd == 1:
        pads = [(0, 0)] + pads
    y = cv.op("conv2d", to_2d(cv, x, rank), filter_2d(cv, w, rank),
              None if bias is None else cv.operand(bias),
              strides=expand_1d(strides, rank, 1), dilations=expand_1d(dilations, rank, 1),
              padding=webnn_padding(pads), groups=groups)
    return [from_2d(cv, y, rank)]


#: a 1x1 filter over a 1 x 1 map with this many weights or more is a matmul
#: (4 MB: heads of 960 -> 1280; the largest squeeze-and-excitation pairs,
#: EfficientNet-B7's 3840 -> 160, have 614,400)
_HEAD_FILTER_MIN = 1 << 20


def _live_taps(size: int, kernel: int, stride: int, dilation: int, begin: int,
               end: int) -> tuple[int, int] | None:
    """The first and last kernel tap along one axis that reads an input element
    for some output position (the others read padding only), or None if none does."""
    out = (size + begin + end - dilation * (kernel - 1) - 1) // stride + 1
    live = [tap for tap in range(kernel)
            if any(0 <= o * stride - begin + tap * dilation < size for o in range(out))]
    return (live[0], live[-1]) if live else None


def _without_dead_taps(w: Const, spatial: list[int], strides: list[int],
                       dilations: list[int], pads: list[tuple[int, int]]):
    """A constant filter without the rows and columns of taps that only ever
    read padding, and the padding that keeps the output where it was (a
    dilated conv on a map smaller than its dilation: DeepLab's ASPP at
    dilation 24 and 36 on a 16 x 16 map is a 1x1 conv, 9x less work and no
    padded copy of the input); ``(w, pads)`` unchanged when every tap reads input."""
    kernel = w.array.shape[2:]
    cut, new_pads = [], []
    for axis in range(2):
        (begin, end), k, d = pads[axis], kernel[axis], dilations[axis]
        live = _live_taps(spatial[axis], k, strides[axis], d, begin, end)
        if live is None:
            return w, pads
        first, last = live
        begin, end = begin - first * d, end - (k - 1 - last) * d
        if begin < 0 or end < 0:
            return w, pads
        cut.append(slice(first, last + 1))
        new_pads.append((begin, end))
    if all(c == slice(0, k) for c, k in zip(cut, kernel)):
        return w, pads
    return Const(np.ascontiguousarray(w.array[:, :, cut[0], cut[1]]), w.name), new_pads


def op_conv_transpose(cv: Converter, inputs, attrs):
    x, w = inputs[0], inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    rank = spatial_rank_check(cv, x)
    check_kernel_shape(cv, attrs, w)
    nd = rank - 2
    spatial = list(shape_of(x)[2:])
    kernel = list(shape_of(w)[2:])
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads, output_padding = conv_transpose_pads(cv, attrs, spatial, kernel, strides, dilations)
    if nd == 1:
        pads = [(0, 0)] + pads
    y = cv.op("conv_transpose2d", to_2d(cv, x, rank), filter_2d(cv, w, rank),
              None if bias is None else cv.operand(bias),
              strides=expand_1d(strides, rank, 1), dilations=expand_1d(dilations, rank, 1),
              padding=webnn_padding(pads),
              output_padding=expand_1d(output_padding, rank, 0),
              groups=int(attrs.get("group", 1)), filter_layout="iohw")
    return [from_2d(cv, y, rank)]


def conv_transpose_pads(cv: Converter, attrs: dict, spatial: list[int], kernel: list[int],
                        strides: list[int], dilations: list[int]):
    """ConvTranspose's (begin, end) padding and output padding per spatial
    axis, from ``pads``, ``output_padding``, ``output_shape`` and ``auto_pad``."""
    nd = len(spatial)
    output_padding = list(attrs.get("output_padding", [0] * nd))
    auto_pad = attrs.get("auto_pad", "NOTSET")
    output_shape = attrs.get("output_shape")
    if output_shape is not None:
        output_shape = list(output_shape)[-nd:]
    pads = None
    if output_shape is None and auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        output_shape = [spatial[i] * strides[i] for i in range(nd)]
    if output_shape is not None:
        pads, extra = [], []
        for i in range(nd):
            total = (strides[i] * (spatial[i] - 1) + output_padding[i]
                     + (kernel[i] - 1) * dilations[i] + 1 - output_shape[i])
            if total < 0:               # a larger output: the rows past the end
                pads.append((0, 0))
                extra.append(output_padding[i] - total)
                continue
            small = total // 2
            pads.append((small, total - small) if auto_pad == "SAME_UPPER"
                        else (total - small, small))
            extra.append(output_padding[i])
        output_padding = extra
    else:
        pads = conv_pads(cv, {**attrs, "auto_pad": "NOTSET" if auto_pad == "VALID"
                              else auto_pad}, spatial, kernel, strides, dilations)
        if auto_pad == "VALID":
            pads = [(0, 0)] * nd
    return pads, output_padding


def op_gemm(cv: Converter, inputs, attrs):
    a, b = inputs[0], inputs[1]
    c = inputs[2] if len(inputs) > 2 else None
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    c_operand = None
    if c is not None and beta != 0.0:
        c_operand = cv.operand(c)
    y = cv.op("gemm", cv.operand(a), cv.operand(b), c_operand, alpha=alpha,
              beta=beta if c_operand is not None else 1.0,
              a_transpose=bool(attrs.get("transA", 0)),
              b_transpose=bool(attrs.get("transB", 0)))
    return [y]


def op_matmul(cv: Converter, inputs, attrs):
    a, b = inputs
    ra, rb = rank_of(a), rank_of(b)
    a_op, b_op = cv.operand(a), cv.operand(b)
    if ra == 1:
        a_op = cv.op("reshape", a_op, (1,) + shape_of(a))
    if rb == 1:
        b_op = cv.op("reshape", b_op, shape_of(b) + (1,))
    y = cv.op("matmul", a_op, b_op)
    if ra == 1 or rb == 1:
        shape = list(y.shape)
        if rb == 1:
            shape.pop(-1)
        if ra == 1:
            shape.pop(-2 if rb != 1 else -1)
        y = cv.op("reshape", y, tuple(shape))
    return [y]


def _unary(name: str) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        return [cv.op(name, cv.operand(inputs[0]))]
    return handler


def op_leaky_relu(cv: Converter, inputs, attrs):
    return [cv.op("leaky_relu", cv.operand(inputs[0]), float(attrs.get("alpha", 0.01)))]


def op_hard_sigmoid(cv: Converter, inputs, attrs):
    """``max(0, min(1, alpha * x + beta))``: jitnn's hard_sigmoid."""
    return [cv.op("hard_sigmoid", cv.float_operand(inputs[0]),
                  alpha=float(attrs.get("alpha", 0.2)), beta=float(attrs.get("beta", 0.5)))]


def op_prelu(cv: Converter, inputs, attrs):
    """``x if x >= 0 else slope * x``: jitnn's prelu (float32 and signed integers)."""
    x, slope = inputs
    xo = cv.operand(x)
    if isinstance(slope, Const) and cv.opset < 7 and slope.array.ndim == 1 \
            and rank_of(x) > 2 and slope.array.size == shape_of(x)[1]:
        # opset 6 PRelu: a (C,) slope runs along the channels
        slope = Const(slope.array.reshape((-1,) + (1,) * (rank_of(x) - 2)), slope.name)
    return [cv.op("prelu", xo, cv.operand(slope, xo.dtype))]


def op_clip(cv: Converter, inputs, attrs):
    x = cv.operand(inputs[0])
    if x.dtype != np.float32:
        return [op_clip_integer(cv, x, inputs, attrs)]
    if cv.opset < 11:
        lo = float(attrs.get("min", -np.inf))
        hi = float(attrs.get("max", np.inf))
        bounds = [lo, hi]
    else:
        bounds = []
        for i, default in ((1, -np.inf), (2, np.inf)):
            v = inputs[i] if len(inputs) > i else None
            if v is None:
                bounds.append(default)
            elif isinstance(v, Const):
                bounds.append(float(v.array.reshape(-1)[0]))
            else:
                bounds.append(cv.operand(v))
    lo, hi = bounds
    if isinstance(lo, float) and isinstance(hi, float):
        if lo > hi:           # ONNX/numpy: min(max(x, lo), hi) = hi everywhere
            lo = hi
        return [cv.op("clamp", x, lo, hi)]
    y = x
    if not (isinstance(lo, float) and lo == -np.inf):
        y = cv.op("maximum", y, lo)
    if not (isinstance(hi, float) and hi == np.inf):
        y = cv.op("minimum", y, hi)
    return [y]


def op_clip_integer(cv: Converter, x, inputs, attrs):
    """Clip of an integer tensor: constant bounds (exact integers) as one
    clamp, run-time ones as maximum / minimum; min > max gives max (ONNX)."""
    bounds = []
    for i in (1, 2):
        v = inputs[i] if len(inputs) > i else None
        bounds.append(v if v is None or not isinstance(v, Const)
                      else int(v.array.reshape(-1)[0]))
    lo, hi = bounds
    if not isinstance(lo, Operand) and not isinstance(hi, Operand):
        if lo is not None and hi is not None and lo > hi:
            lo = hi
        return cv.op("clamp", x, -np.inf if lo is None else lo, np.inf if hi is None else hi)
    y = x
    if lo is not None:
        y = cv.op("maximum", y, cv.operand(lo, x.dtype) if isinstance(lo, Operand) else lo)
    if hi is not None:
        y = cv.op("minimum", y, cv.operand(hi, x.dtype) if isinstance(hi, Operand) else hi)
    return y


def _legacy_broadcast(cv: Converter, a, b, attrs):
    """Opset < 7: ``broadcast=1`` aligns B with A from ``axis`` (default: the end)."""
    if cv.opset >= 7 or not attrs.get("broadcast", 0) or "axis" not in attrs:
        return b
    axis = int(attrs["axis"]) % rank_of(a)
    trailing = rank_of(a) - axis - rank_of(b)
    if trailing <= 0:
        return b
    shape = shape_of(b) + (1,) * trailing
    if isinstance(b, Const):
        return Const(b.array.reshape(shape), b.name)
    return cv.op("reshape", cv.operand(b), shape)


COMMUTATIVE = ("add", "mul", "maximum", "minimum")


def _commuted(name: str, a, b):
    """For a commutative op on two same-shape run-time tensors, the later-made
    operand first: the scheduler fuses an add into the conv2d that produces
    the op's first operand, and in a residual block ``x + conv(...)`` the
    conv's result is the later one (exact: these ops commute bit for bit)."""
    if name in COMMUTATIVE and isinstance(a, Operand) and isinstance(b, Operand) \
            and a.shape == b.shape and b._index > a._index:
        return b, a
    return a, b


def run_time_dtype(cv: Converter, *values) -> np.dtype:
    """The type in which an op on ``values`` computes: the run-time operands'
    (ONNX gives all of them one type), float32 if there is none."""
    for v in values:
        if isinstance(v, Operand):
            return np.dtype(v.dtype)
    for v in values:
        if isinstance(v, Const):
            held = jitnn_dtype(v.array.dtype)
            if held is None:
                raise cv.unsupported(f"tensor {v.name or '(constant)'!r} is "
                                     + refused_dtype(v.array.dtype))
            return held
    return np.dtype(np.float32)


def _binary(name: str) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        a, b = inputs
        b = _legacy_broadcast(cv, a, b, attrs)
        out_rank = max(rank_of(a), rank_of(b))
        dtype = run_time_dtype(cv, a, b)
        a, b = _commuted(name, cv.scalar_or_operand(a, out_rank, dtype),
                         cv.scalar_or_operand(b, out_rank, dtype))
        return [cv.op(name, a, b)]
    return handler


def _variadic(name: str, mean: bool = False) -> Callable:
    def handler(cv: Converter, inputs, attrs):
        items = [v for v in inputs if v is not None]
        rank = max(rank_of(v) for v in items)
        dtype = run_time_dtype(cv, *items)
        operands = [cv.scalar_or_operand(v, rank, dtype) for v in items]
        if not isinstance(operands[0], Operand):
            operands[0] = cv.operand(items[0], dtype)
        if len(operands) == 1:          # the max/min/sum/mean of one tensor is the tensor
            return [operands[0]]
        y = operands[0]
        for other in operands[1:]:
            y = cv.op(name, *_commuted(name, y, other))
        if mean:
            y = cv.op("div", y, float(len(operands)))
        return [y]
    return handler


def pool_output_sizes(attrs: dict, spatial: list[int], kernel: list[int], strides: list[int],
                      dilations: list[int], pads: list[tuple[int, int]]) -> list[int]:
    """A pool's output size per spatial axis as ONNX sizes it (auto_pad SAME,
    ceil_mode with its last window starting inside the input or its begin padding)."""
    ceil = bool(attrs.get("ceil_mode", 0))
    out = []
    for i in range(len(spatial)):
        span = spatial[i] + pads[i][0] + pads[i][1] - ((kernel[i] - 1) * dilations[i] + 1)
        if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER"):
            size = -(-spatial[i] // strides[i])
        elif ceil:
            size = -(-span // strides[i]) + 1
            # the last window must start inside the input or its begin padding
            if (size - 1) * strides[i] >= spatial[i] + pads[i][0]:
                size -= 1
        else:
            size = span // strides[i] + 1
        out.append(size)
    return out


def _pool_geometry(cv: Converter, x, attrs, kernel):
    rank = spatial_rank_check(cv, x)
    nd = rank - 2
    spatial = list(shape_of(x)[2:])
    strides = list(attrs.get("strides", [1] * nd))
    dilations = list(attrs.get("dilations", [1] * nd))
    pads = conv_pads(cv, attrs, spatial, kernel, strides, dilations)
    out = pool_output_sizes(attrs, spatial, kernel, strides, dilations, pads)
    if nd == 1:
        pads, kernel, strides, dilations, out = ([(0, 0)] + pads, [1] + kernel, [1] + strides,
                                                 [1] + dilations, [1] + out)
    return rank, dict(window_dimensions=tuple(kernel), strides=tuple(strides),
                      dilations=tuple(dilations), padding=webnn_padding(pads),
                      output_sizes=tuple(out))


def op_max_pool(cv: Converter, inputs, attrs, outputs=1):
    """MaxPool; an int8 / uint8 input pools in float32 (exact) and is cast back."""
    if outputs > 1:
        raise cv.unsupported("the Indices output of MaxPool")
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    rank, options = _pool_geometry(cv, x, attrs, kernel)
    dtype = cv.operand(x).dtype
    small = dtype in (np.int8, np.uint8)
    if small:
        x = cv.op("cast", cv.operand(x), np.float32)
    y = from_2d(cv, cv.op("max_pool2d", to_2d(cv, x, rank), **options), rank)
    return [cv.op("cast", y, dtype) if small else y]


def op_average_pool(cv: Converter, inputs, attrs):
    x = inputs[0]
    kernel = list(attrs["kernel_shape"])
    rank, options = _pool_geometry(cv, x, attrs, kernel)
    if attrs.get("auto_pad", "NOTSET") in ("SAME_UPPER", "SAME_LOWER") and \
            attrs.get("count_include_pad", 0):
        raise cv.unsupported("auto_pad SAME with count_include_pad=1")
    y = cv.op("average_pool2d", to_2d(cv, x, rank), **options,
              count_include_pad=bool(attrs.get("count_include_pad", 0)))
    return [from_2d(cv, y, rank)]


def op_global_average_pool(cv: Converter, inputs, attrs):
    x = inputs[0]
    rank = spatial_rank_check(cv, x)
    return [from_2d(cv, cv.op("global_average_pool2d", to_2d(cv, x, rank)), rank)]


def op_global_max_pool(cv: Converter, inputs, attrs):
    x = inputs[0]
    rank = spatial_rank_check(cv, x)
    return [from_2d(cv, cv.op("max_pool2d", to_2d(cv, x, rank)), rank)]


def batch_norm_training(cv: Converter, attrs: dict, outputs: int) -> bool:
    """Whether a BatchNormalization normalizes by its input's own statistics
    (``training_mode=1``, opset 14 and newer); older opsets' training
    outputs are refused."""
    if cv.opset >= 14:
        return bool(attrs.get("training_mode", 0))
    if outputs > 1:
        raise cv.unsupported("training outputs before opset 14 (jitnn runs inference and "
                             "opset 14's training_mode)")
    return False


def op_batch_normalization(cv: Converter, inputs, attrs, outputs=1):
    """Inference: jitnn's batch_normalization (folded into a preceding conv).
    ``training_mode=1`` (opset 14+): normalized by the input's own mean and
    (population) variance over every axis but the channels', as reductions;
    the running mean and variance outputs move toward them by ``momentum``."""
    x, scale, bias, mean, var = inputs[:5]
    channels = shape_of(x)[1]
    for v in (scale, bias, mean, var):
        if shape_of(v) != (channels,):
            raise cv.unsupported(f"statistics of shape {shape_of(v)} (expected ({channels},))")
    epsilon = float(attrs.get("epsilon", 1e-5))
    if not batch_norm_training(cv, attrs, outputs):
        return [cv.op("batch_normalization", cv.operand(x), cv.operand(mean), cv.operand(var),
                      cv.operand(scale), cv.operand(bias), epsilon=epsilon, axis=1)]
    xo = cv.float_operand(x)
    rank = len(xo.shape)
    axes = [i for i in range(rank) if i != 1]
    lanes = (channels,) + (1,) * (rank - 2)
    current_mean = cv.op("reduce_mean", xo, axes=axes, keep_dimensions=True)
    centered = cv.op("sub", xo, current_mean)
    current_var = cv.op("reduce_mean", cv.op("mul", centered, centered), axes=axes,
                        keep_dimensions=True)
    scaled = cv.op("div", centered, cv.op("sqrt", cv.op("add", current_var, epsilon)))
    def per_channel(v):
        if isinstance(v, Const):
            return cv.float_operand(Const(v.array.reshape(lanes)))
        return cv.op("reshape", cv.float_operand(v), lanes)
    y = cv.op("add", cv.op("mul", scaled, per_channel(scale)), per_channel(bias))
    results = [y]
    if outputs > 1:
        momentum = float(attrs.get("momentum", 0.9))
        for running, current in ((mean, current_mean), (var, current_var)):
            moved = cv.op("add", cv.op("mul", cv.float_operand(running), momentum),
                          cv.op("mul", cv.op("reshape", current, (channels,)), 1.0 - momentum))
            results.append(moved)
    return results


def op_concat(cv: Converter, inputs, attrs):
    items = [v for v in inputs if v is not None and math.prod(shape_of(v)) > 0] or inputs[:1]
    if len(items) == 1:
        return [cv.operand(items[0])]
    operands = [cv.operand(v) for v in items]
    axis = int(attrs["axis"]) % rank_of(items[0])
    picked = _slices_of_one(cv, operands, axis)
    if picked is not None:
        y = cv.origins.note(cv.op("gather", picked[0], picked[1], axis), "gather", *picked, axis)
        return [fold_rows(cv, cv.origins, y) or y]   # a roll ending row moves: one gather
    return [cv.op("concat", operands, axis)]


def _slices_of_one(cv: Converter, operands: list, axis: int) -> tuple | None:
    """``(source, indices)`` when every operand is a step-1 Slice of one
    source along the concat's ``axis`` only (a roll, Swin's cyclic shift:
    ``Concat(x[s:], x[:s])``): the concat is one gather of ``source`` at the
    slices' indices, one copy instead of one per slice and the concat's (the
    slices, read by nothing else, are never run). Else None."""
    sources = [cv.origins.of(y) for y in operands]
    if any(o is None or o[0] != "slice" or o[2] != axis or o[1] is not sources[0][1]
           for o in sources):
        return None
    return sources[0][1], np.concatenate([np.arange(o[3], o[4], dtype=np.int64)
                                          for o in sources])


def op_flatten(cv: Converter, inputs, attrs):
    return [cv.op("flatten", cv.operand(inputs[0]), int(attrs.get("axis", 1)))]


def op_reshape(cv: Converter, inputs, attrs):
    x = inputs[0]
    shape = reshape_target(cv, x, inputs, attrs)
    if shape == shape_of(x):
        return [cv.operand(x)]
    shuffle = shuffle_indices(cv.origins, x, tuple(shape))
    if shuffle is not None:             # a channel shuffle: one gather (jitnn/onnx/_shuffle.py)
        source, indices = shuffle
        return [cv.origins.note(cv.op("gather", source, indices, 1), "gather", source,
                                indices, 1)]
    y = cv.operand(x)
    y = cv.origins.note(cv.op("reshape", y, shape), "reshape", y, tuple(shape))
    return [fold_rows(cv, cv.origins, y) or y]     # row moves (Swin's windows): one gather


def op_transpose(cv: Converter, inputs, attrs):
    perm = attrs.get("perm")
    x = cv.operand(inputs[0])
    perm = None if perm is None else list(perm)
    y = cv.origins.note(cv.op("transpose", x, perm), "transpose", x, perm)
    return [fold_rows(cv, cv.origins, y) or y]     # row moves (Swin's windows): one gather


def _channel_parts(cv: Converter, x, axis: int, bounds) -> list | None:
    """Parts ``[start, stop)`` along ``axis`` of a channel gather, as gathers
    of the source (the permuted tensor is never made); None if ``x`` is not one."""
    gathered = gathered_channels(cv.origins, x, axis)
    if gathered is None:
        return None
    source, indices = gathered
    return [cv.op("gather", source, indices[start:stop], axis) for start, stop in bounds]


def op_softmax(cv: Converter, inputs, attrs):
    x = cv.operand(inputs[0])
    rank = len(x.shape)
    if cv.opset >= 13:
        return [cv.op("softmax", x, int(attrs.get("axis", -1)))]
    axis = int(attrs.get("axis", 1)) % max(rank, 1)
    if axis == rank - 1:
        return [cv.op("softmax", x, -1)]
    # opset < 13: the input coerced to 2-D at axis, softmax over the second axis
    flat = (math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))
    y = cv.op("softmax", cv.op("reshape", x, flat), -1)
    return [cv.op("reshape", y, x.shape)]


def op_lrn(cv: Converter, inputs, attrs):
    return [cv.op("lrn", cv.operand(inputs[0]), int(attrs["size"]),
                  alpha=float(attrs.get("alpha", 1e-4)), beta=float(attrs.get("beta", 0.75)),
                  bias=float(attrs.get("bias", 1.0)))]


def op_dropout(cv: Converter, inputs, attrs, outputs=1):
    x = inputs[0]
    training = inputs[2] if len(inputs) > 2 else None
    if training is not None:
        if not isinstance(training, Const) or bool(training.array):
            ratio = inputs[1] if len(inputs) > 1 else None
            if not (isinstance(ratio, Const) and float(ratio.array) == 0.0):
                raise cv.unsupported("training mode (Dropout runs as the identity)")
    if cv.opset < 7 and attrs.get("is_test", 0) == 0 and cv.opset >= 6:
        pass  # exporters set is_test; inference treats Dropout as the identity either way
    results = [x]
    if outputs > 1:
        results.append(Const(np.ones(shape_of(x), bool)))
    return results


def op_identity(cv: Converter, inputs, attrs):
    return [inputs[0]]


def op_shape(cv: Converter, inputs, attrs):
    shape = np.array(shape_of(inputs[0]), np.int64)
    start, end = attrs.get("start", 0), attrs.get("end")
    return [Const(shape[start:end])]


def op_size(cv: Converter, inputs, attrs):
    return [Const(np.array(math.prod(shape_of(inputs[0])), np.int64))]


def op_unsqueeze(cv: Converter, inputs, attrs):
    x = inputs[0]
    return [cv.op("reshape", cv.operand(x), unsqueeze_shape(cv, x, inputs, attrs))]


def op_squeeze(cv: Converter, inputs, attrs):
    x = inputs[0]
    return [cv.op("reshape", cv.operand(x), squeeze_shape(cv, x, inputs, attrs))]


def cast_to(cv: Converter, x, to: np.dtype) -> Operand:
    """Run-time ``x`` as ONNX type ``to``: jitnn's cast, a bool as ``x != 0``
    (uint8 0/1; NaN is true, as ONNX's)."""
    xo = cv.operand(x)
    if to == np.bool_:
        if cv.is_bool(xo):
            return xo
        return cv.mark_bool(cv.op("not_equal", xo, cv.operand(Const(np.zeros((), xo.dtype)))))
    held = jitnn_dtype(to)
    if held is None:
        raise cv.unsupported(f"Cast of a run-time tensor to {refused_dtype(to)}")
    if held == xo.dtype:
        return xo
    return cv.op("cast", xo, held)


def op_cast(cv: Converter, inputs, attrs):
    return [cast_to(cv, inputs[0], onnx_dtype(int(attrs["to"])))]


def op_cast_like(cv: Converter, inputs, attrs):
    return [cast_to(cv, inputs[0], cv.onnx_type(inputs[1]))]


def indices_of(cv: Converter, indices):
    """Indices for jitnn's gathers and scatters: a constant as a host int64
    array (checked when the op is added), a run-time tensor as it is
    (int32/int64; its values are clamped into range when the op runs)."""
    if isinstance(indices, Const):
        return indices.array.astype(np.int64)
    return cv.operand(indices)


def op_gather(cv: Converter, inputs, attrs):
    x, indices = inputs
    axis = int(attrs.get("axis", 0)) % max(rank_of(x), 1)
    if isinstance(indices, Const) and rank_of(x):
        # every index of the axis once, in order (torch.export writes a contiguous
        # as_strided, as in timm's classifier heads, as a Gather of arange): the same
        # data viewed as the indices' shape, a reshape instead of a copy
        size, flat = shape_of(x)[axis], indices.array.astype(np.int64).reshape(-1)
        if flat.size == size and np.array_equal(flat % max(size, 1), np.arange(size)) \
                and np.all((flat >= -size) & (flat < size)):
            shape = shape_of(x)[:axis] + tuple(indices.array.shape) + shape_of(x)[axis + 1:]
            return [cv.op("reshape", cv.operand(x), shape)]
    return [cv.op("gather", cv.operand(x), indices_of(cv, indices), int(attrs.get("axis", 0)))]


def op_slice(cv: Converter, inputs, attrs):
    x = inputs[0]
    index = slice_index(cv, x, inputs, attrs)
    y = cv.operand(x)
    shape = shape_of(x)
    cut = [axis for axis, s in enumerate(index) if s.indices(shape[axis]) != (0, shape[axis], 1)]
    if len(cut) == 1 and index[cut[0]].indices(shape[cut[0]])[2] == 1:
        start, stop, _ = index[cut[0]].indices(shape[cut[0]])
        parts = _channel_parts(cv, x, cut[0], [(start, stop)]) if stop > start else None
        if parts is not None:
            return parts
    starts, sizes, strides, reversed_axes = [], [], [], []
    for axis, s in enumerate(index):
        picked = range(*s.indices(shape[axis]))
        if picked.step < 0:
            reversed_axes.append((axis, picked))
            starts.append(0), sizes.append(shape[axis]), strides.append(1)
        else:
            starts.append(picked.start if len(picked) else 0)
            sizes.append((len(picked) - 1) * picked.step + 1 if len(picked) else 0)
            strides.append(picked.step)
    moved = [axis for axis, (b, n, s, d) in enumerate(zip(starts, sizes, strides, shape))
             if (b, n, s) != (0, d, 1)]
    if moved:
        source, y = y, cv.op("slice", y, starts, sizes, strides=strides)
        if len(moved) == 1 and strides[moved[0]] == 1 and not reversed_axes:
            # (a Concat of such slices of one source is one gather: _slices_of_one)
            a = moved[0]
            cv.origins.note(y, "slice", source, a, starts[a], starts[a] + sizes[a])
    for axis, picked in reversed_axes:
        y = cv.op("gather", y, np.array(list(picked), np.int64), axis)
    return [y]


def op_split(cv: Converter, inputs, attrs, outputs=1):
    x = inputs[0]
    axis = int(attrs.get("axis", 0)) % rank_of(x)
    sizes = split_sizes(cv, x, inputs, attrs, outputs, axis)
    if all(size >= 1 for size in sizes):
        ends = np.cumsum(sizes)
        parts = _channel_parts(cv, x, axis, list(zip(ends - sizes, ends)))
        if parts is not None:
            return parts
    if len(sizes) > 1 and all(size >= 1 for size in sizes) and sum(sizes) == shape_of(x)[axis]:
        return list(cv.op("split", cv.operand(x), sizes, axis))
    results, start = [], 0
    rank = rank_of(x)
    for size in sizes:
        starts = [0] * rank
        starts[axis] = start
        lengths = list(shape_of(x))
        lengths[axis] = size
        results.append(cv.op("slice", cv.operand(x), starts, lengths))
        start += size
    return results


def op_pad(cv: Converter, inputs, attrs):
    """jitnn's pad for constant, edge and reflect padding; wrap as a gather of
    the source rows (exact); negative pads as a slice first."""
    x = inputs[0]
    rank = rank_of(x)
    if cv.opset < 11:
        pads = list(attrs.get("pads", attrs.get("paddings", [0] * 2 * rank)))
        value = float(attrs.get("value", 0.0))
        axes = list(range(rank))
    else:
        pads = ints(need_const(cv, inputs[1], "the pads"))
        value_in = inputs[2] if len(inputs) > 2 else None
        value = 0.0 if value_in is None else \
            need_const(cv, value_in, "the constant value").array.reshape(-1)[0].item()
        axes = ints(need_const(cv, inputs[3], "the axes")) if len(inputs) > 3 and \
            inputs[3] is not None else list(range(rank))
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise cv.unsupported(f"mode {mode!r}")
    if len(pads) != 2 * len(axes):
        raise cv.invalid(f"pads {pads} must have 2 entries per padded axis ({len(axes)} axes)")
    y = cv.operand(x)
    begin, end = [0] * rank, [0] * rank
    for k, axis in enumerate(axes):
        begin[axis % rank], end[axis % rank] = pads[k], pads[k + len(axes)]
    if any(p < 0 for p in begin + end):
        starts = [max(0, -b) for b in begin]
        lengths = [size - max(0, -b) - max(0, -e) for size, b, e in zip(y.shape, begin, end)]
        y = cv.op("slice", y, starts, lengths)
        begin, end = [max(0, b) for b in begin], [max(0, e) for e in end]
    if not any(begin + end):
        return [y]
    if mode == "wrap":
        for axis in range(rank):
            if begin[axis] or end[axis]:
                index = np.pad(np.arange(y.shape[axis]), (begin[axis], end[axis]), mode="wrap")
                y = cv.op("gather", y, index.astype(np.int64), axis)
        return [y]
    if y.dtype != np.float32:
        value = int(value)
    return [cv.op("pad", y, begin, end, mode="reflection" if mode == "reflect" else mode,
                  value=value)]


def op_tile(cv: Converter, inputs, attrs):
    repeats = ints(need_const(cv, inputs[1], "the repeats"))
    return [cv.op("tile", cv.operand(inputs[0]), repeats)]


def op_expand(cv: Converter, inputs, attrs):
    shape = ints(need_const(cv, inputs[1], "the shape"))
    x = cv.operand(inputs[0])
    try:
        target = tuple(int(d) for d in np.broadcast_shapes(x.shape, tuple(shape)))
    except ValueError:
        raise cv.invalid(f"shape {shape} does not broadcast with the input's {x.shape}") from None
    if target == x.shape:
        return [x]
    return [cv.op("expand", x, shape)]


#: ONNX op type -> handler(converter, inputs, attrs[, outputs]) for run-time tensors
OPS: dict[str, Callable] = {
    "Conv": op_conv, "ConvTranspose": op_conv_transpose, "Gemm": op_gemm, "MatMul": op_matmul,
    "Relu": _unary("relu"), "Sigmoid": _unary("sigmoid"), "Tanh": _unary("tanh"),
    "HardSwish": _unary("hard_swish"), "LeakyRelu": op_leaky_relu,
    "HardSigmoid": op_hard_sigmoid, "Clip": op_clip, "PRelu": op_prelu,
    "Add": _binary("add"), "Sub": _binary("sub"), "Mul": _binary("mul"), "Div": _binary("div"),
    "Sum": _variadic("add"), "Max": _variadic("maximum"), "Min": _variadic("minimum"),
    "Mean": _variadic("add", mean=True),
    "MaxPool": op_max_pool, "AveragePool": op_average_pool,
    "GlobalAveragePool": op_global_average_pool, "GlobalMaxPool": op_global_max_pool,
    "BatchNormalization": op_batch_normalization, "Concat": op_concat, "Flatten": op_flatten,
    "Reshape": op_reshape, "Transpose": op_transpose, "Softmax": op_softmax, "LRN": op_lrn,
    "Dropout": op_dropout, "Identity": op_identity, "Shape": op_shape, "Size": op_size,
    "Unsqueeze": op_unsqueeze, "Squeeze": op_squeeze, "Cast": op_cast, "CastLike": op_cast_like,
    "Gather": op_gather, "Slice": op_slice, "Split": op_split, "Pad": op_pad, "Tile": op_tile,
    "Expand": op_expand,
}


#: handlers that take the number of outputs the node asks for
MULTI_OUTPUT = {"MaxPool", "BatchNormalization", "Dropout", "Split"}
