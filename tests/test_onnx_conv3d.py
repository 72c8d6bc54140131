"""3-D Conv, ConvTranspose, MaxPool, AveragePool and the global pools (rank-5 inputs) in the
ONNX frontend, lowered onto 2-D ops (jitnn/onnx/_convert_3d.py), against
float64 numpy references written here tap by tap: channels that do not fill a
block (C = 1, 3, 7, 9, 17), odd D/H/W, N > 1, strides, dilations, asymmetric
pads, auto_pad, groups (depthwise among them), bias or none, depth kernels of
1 and 3, ceil_mode and count_include_pad; a chain of two 3-D convs with a
ReLU and a residual, which stays depth-major with its adds fused into the
convs; and broken models refused by name.

The conv cases share a few 2-D conv geometries: every new one compiles a
kernel of its own (seconds each)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx")

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from jitnn.errors import JitnnValueError  # noqa: E402
from tests.helpers import random  # noqa: E402
from tests.onnx_nets import Net  # noqa: E402


# --- the float64 references ---------------------------------------------------------

def _explicit_pads(attrs: dict, spatial, kernel, strides, dilations) -> list[tuple[int, int]]:
    """ONNX's pads for ``auto_pad`` (SAME: output ceil(in / stride), the odd
    pad at the end for SAME_UPPER, at the begin for SAME_LOWER)."""
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad == "VALID":
        return [(0, 0)] * 3
    if auto_pad.startswith("SAME"):
        pads = []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            pads.append((small, large) if auto_pad == "SAME_UPPER" else (large, small))
        return pads
    pads = attrs.get("pads", [0] * 6)
    return [(pads[i], pads[i + 3]) for i in range(3)]


def conv3d_reference(x, w, bias, attrs) -> np.ndarray:
    """ONNX Conv of (N, C, D, H, W) in float64: a sum over the filter's taps of
    strided windows of the zero-padded input, group by group."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    kernel = w.shape[2:]
    strides = attrs.get("strides", [1] * 3)
    dilations = attrs.get("dilations", [1] * 3)
    group = attrs.get("group", 1)
    pads = _explicit_pads(attrs, x.shape[2:], kernel, strides, dilations)
    padded = np.pad(x, [(0, 0), (0, 0)] + pads)
    out = [(padded.shape[2 + i] - (kernel[i] - 1) * dilations[i] - 1) // strides[i] + 1
           for i in range(3)]
    o, per_group = w.shape[:2]
    y = np.zeros((x.shape[0], o) + tuple(out))
    for tap in itertools.product(*(range(k) for k in kernel)):
        window = padded[(slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (n - 1) * s + 1, s)
            for t, d, n, s in zip(tap, dilations, out, strides))]
        for g in range(group):
            outs, ins = slice(g * o // group, (g + 1) * o // group), \
                slice(g * per_group, (g + 1) * per_group)
            y[:, outs] += np.einsum("ncdhw,oc->nodhw", window[:, ins],
                                    w[outs, :, tap[0], tap[1], tap[2]])
    if bias is not None:
        y += bias.astype(np.float64).reshape(1, -1, 1, 1, 1)
    return y


def _pool_sizes(attrs, spatial, kernel, strides, dilations, pads) -> list[int]:
    sizes = []
    for size, k, s, d, (b, e) in zip(spatial, kernel, strides, dilations, pads):
        if attrs.get("auto_pad", "NOTSET").startswith("SAME"):
            sizes.append(-(-size // s))
            continue
        span = size + b + e - (k - 1) * d - 1
        if attrs.get("ceil_mode", 0):
            n = -(-span // s) + 1
            if (n - 1) * s >= size + b:     # a window starting past the input and its begin pad
                n -= 1
        else:
            n = span // s + 1
        sizes.append(n)
    return sizes


def pool3d_reference(x, attrs, kind: str) -> np.ndarray:
    """ONNX MaxPool / AveragePool of (N, C, D, H, W) in float64, window by
    window: padding never wins a max; a mean divides by the window's input
    elements, or with ``count_include_pad`` by its elements inside the
    explicitly padded input (not the ceil_mode overhang)."""
    x = x.astype(np.float64)
    kernel = attrs["kernel_shape"]
    strides = attrs.get("strides", [1] * 3)
    dilations = attrs.get("dilations", [1] * 3)
    pads = _explicit_pads(attrs, x.shape[2:], kernel, strides, dilations)
    out = _pool_sizes(attrs, x.shape[2:], kernel, strides, dilations, pads)
    y = np.zeros(x.shape[:2] + tuple(out))
    for position in itertools.product(*(range(n) for n in out)):
        inside, counted = [], 1
        for axis, (p, k, s, d, (b, e)) in enumerate(zip(position, kernel, strides, dilations,
                                                        pads)):
            taps = [p * s - b + t * d for t in range(k)]
            inside.append([i for i in taps if 0 <= i < x.shape[2 + axis]])
            counted *= sum(1 for i in taps if -b <= i < x.shape[2 + axis] + e)
        window = x[:, :, inside[0]][:, :, :, inside[1]][:, :, :, :, inside[2]]
        if kind == "max":
            y[(slice(None), slice(None)) + position] = window.max(axis=(2, 3, 4))
        else:
            divisor = counted if attrs.get("count_include_pad", 0) else \
                len(inside[0]) * len(inside[1]) * len(inside[2])
            y[(slice(None), slice(None)) + position] = window.sum(axis=(2, 3, 4)) / divisor
    return y


# --- running -------------------------------------------------------------------------

def _run(model, feed):
    converted = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))
    return converted, converted.run(feed)


def _steps(converted) -> list[str]:
    """The steps of the model's plan (``conv2d + add + relu``, ``transpose``, ...),
    from jitnn.explain's step lines."""
    feed = {name: np.zeros(shape, np.float32) for name, shape in converted.inputs.items()}
    lines = []
    for t in converted.dispatch(feed).values():
        t.numpy()
        lines += [line.split(None, 1)[1].split("  ")[0] for line in
                  jitnn.explain(t).splitlines()
                  if line.strip()[:1].isdigit() and len(line.split()) > 2]
    return lines


def _conv_model(x_shape, w, bias, attrs):
    net = Net(0)
    inputs = [net.input("x", x_shape), net.const(w)]
    if bias is not None:
        inputs.append(net.const(bias))
    return net.model([net("Conv", *inputs, **attrs)])


def _check_conv(x_shape, o, kernel, attrs, bias=True, seed=0):
    rng = np.random.default_rng(seed)
    c = x_shape[1]
    per_group = c // attrs.get("group", 1)
    w = (rng.standard_normal((o, per_group) + kernel) / np.sqrt(per_group * np.prod(kernel))
         ).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32) if bias else None
    x = random(x_shape, seed + 1)
    _, got = _run(_conv_model(x_shape, w, b, attrs), {"x": x})
    want = conv3d_reference(x, w, b, attrs)
    (y,) = got.values()
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# (input shape, output channels, kernel, attributes, bias): a few 2-D geometries
# ((kH, kW), stride, dilation, groups, channels) serve several cases each
CONV_CASES = {
    "3x3x3_pads_bias": ((2, 3, 5, 7, 9), 5, (3, 3, 3), dict(pads=[1, 1, 1, 1, 1, 1]), True),
    "3x3x3_asymmetric_pads_no_bias": ((2, 3, 5, 7, 9), 5, (3, 3, 3),
                                      dict(pads=[2, 1, 0, 0, 1, 2]), False),
    "3x3x3_same_upper_depth_stride": ((1, 3, 7, 7, 9), 5, (3, 3, 3),
                                      dict(auto_pad="SAME_UPPER", strides=[2, 1, 1]), True),
    "3x3x3_same_lower_depth_dilation": ((2, 3, 9, 7, 9), 5, (3, 3, 3),
                                        dict(auto_pad="SAME_LOWER", dilations=[2, 1, 1]), True),
    "3x3x3_valid": ((2, 3, 5, 7, 9), 5, (3, 3, 3), dict(auto_pad="VALID"), True),
    "1x3x3_one_channel_strides": ((3, 1, 5, 9, 11), 6, (1, 3, 3),
                                  dict(strides=[2, 2, 2], pads=[0, 1, 1, 0, 1, 1]), False),
    "3x1x1_dilated_depth": ((2, 7, 9, 5, 7), 10, (3, 1, 1),
                            dict(dilations=[3, 1, 1], pads=[2, 0, 0, 3, 0, 0]), True),
    "2x3x3_groups": ((2, 9, 4, 7, 9), 6, (2, 3, 3),
                     dict(group=3, strides=[1, 2, 2], pads=[1, 0, 1, 0, 1, 2]), True),
    "3x3x3_depthwise": ((2, 17, 5, 7, 9), 17, (3, 3, 3),
                        dict(group=17, pads=[1, 1, 1, 1, 1, 1]), True),
}


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv3d_against_reference(name):
    x_shape, o, kernel, attrs, bias = CONV_CASES[name]
    _check_conv(x_shape, o, kernel, attrs, bias)


@pytest.mark.slow
def test_conv3d_dilated_planes_and_strided_video_stem():
    """R3D's 3x7x7 stem with its (1, 2, 2) stride, and a 3x3x3 dilated on
    every axis on 17 channels (2-D conv geometries of their own: compiles)."""
    _check_conv((1, 3, 5, 29, 31), 13, (3, 7, 7),
                dict(strides=[1, 2, 2], pads=[1, 3, 3, 1, 3, 3]), True)
    _check_conv((2, 17, 7, 9, 11), 11, (3, 3, 3),
                dict(dilations=[2, 2, 2], pads=[2, 2, 2, 2, 2, 2]), False)


def test_conv3d_run_time_filter():
    """A filter given as a graph input: its depth taps are sliced at run time."""
    net = Net(0)
    x, w = net.input("x", (2, 3, 5, 7, 9)), net.input("w", (5, 3, 3, 3, 3))
    model = net.model([net("Conv", x, w, pads=[1] * 6)])
    feed = {"x": random((2, 3, 5, 7, 9), 1), "w": random((5, 3, 3, 3, 3), 2, 0.2)}
    _, got = _run(model, feed)
    want = conv3d_reference(feed["x"], feed["w"], None, dict(pads=[1] * 6))
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-4,
                               atol=1e-4 * np.abs(want).max())


def test_conv3d_chain_stays_depth_major_with_fused_adds():
    """Two 3x3x3 convs, a ReLU between them, the input added back and a
    ReLU, then GlobalAveragePool (a video ResNet's block and head): the
    values of the float64 reference; the depth-tap sums, the residual and
    the ReLUs run in the convs' epilogues or on the depth-major planes, with
    one transpose (the input's) and no transpose back."""
    rng = np.random.default_rng(3)
    net = Net(0)
    shape = (2, 7, 5, 9, 11)
    w1 = (rng.standard_normal((7, 7, 3, 3, 3)) * 0.1).astype(np.float32)
    b1 = rng.standard_normal(7).astype(np.float32)
    w2 = (rng.standard_normal((7, 7, 3, 3, 3)) * 0.1).astype(np.float32)
    x = net.input("x", shape)
    pads = dict(pads=[1] * 6)
    h = net("Relu", net("Conv", x, net.const(w1), net.const(b1), **pads))
    y = net("Relu", net("Add", net("Conv", h, net.const(w2), **pads), x))
    model = net.model([net("GlobalAveragePool", y)])
    feed = {"x": random(shape, 4)}
    converted, got = _run(model, feed)
    relu = lambda v: np.maximum(v, 0.0)  # noqa: E731
    hidden = relu(conv3d_reference(feed["x"], w1, b1, pads))
    block = relu(conv3d_reference(hidden, w2, None, pads) + feed["x"])
    want = block.mean(axis=(2, 3, 4), keepdims=True)
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-4, atol=1e-5)
    steps = _steps(converted)
    ops = [step.split()[0] for step in steps]
    assert ops.count("transpose") == 1
    assert sum(s.startswith("conv2d + add") for s in steps) == 4     # two taps a conv
    assert any(s.startswith("conv2d + add + relu") for s in steps)    # the first conv's ReLU
    assert ops.count("conv2d") == 6                                   # 3 taps a conv
    assert ops.count("add") == 1 and any(s.startswith("add + relu") for s in steps)  # residual


def _pool_model(x_shape, op, attrs, dtype=None):
    from onnx import TensorProto
    net = Net(0)
    x = net.input("x", x_shape, TensorProto.FLOAT if dtype is None else dtype)
    model = net.model([net(op, x, **attrs)])
    if dtype is not None:
        model.graph.output[0].type.tensor_type.elem_type = dtype
    return model


# (op, input shape, attributes)
POOL_CASES = {
    "max_default": ("MaxPool", (2, 3, 5, 7, 9), dict(kernel_shape=[2, 2, 2])),
    "max_strides_pads": ("MaxPool", (2, 7, 7, 9, 11),
                         dict(kernel_shape=[3, 3, 3], strides=[2, 2, 2],
                              pads=[1, 0, 1, 1, 1, 0])),
    "max_dilations_ceil": ("MaxPool", (1, 9, 9, 7, 9),
                           dict(kernel_shape=[2, 3, 2], dilations=[2, 1, 2], strides=[2, 2, 3],
                                ceil_mode=1)),
    "max_same_lower": ("MaxPool", (2, 1, 5, 7, 9),
                       dict(kernel_shape=[3, 2, 3], strides=[2, 2, 2], auto_pad="SAME_LOWER")),
    "max_depth_only": ("MaxPool", (2, 17, 9, 5, 7), dict(kernel_shape=[3, 1, 1],
                                                         strides=[2, 1, 1])),
    "max_planes_only": ("MaxPool", (2, 17, 3, 5, 7), dict(kernel_shape=[1, 3, 3],
                                                          pads=[0, 1, 1, 0, 1, 1])),
    "average_default": ("AveragePool", (2, 3, 5, 7, 9), dict(kernel_shape=[2, 2, 2])),
    "average_pads_excluded": ("AveragePool", (2, 7, 7, 9, 11),
                              dict(kernel_shape=[3, 3, 3], strides=[2, 1, 2],
                                   pads=[1, 1, 0, 2, 0, 1])),
    "average_pads_included": ("AveragePool", (2, 7, 7, 9, 11),
                              dict(kernel_shape=[3, 3, 3], strides=[2, 1, 2],
                                   pads=[1, 1, 0, 2, 0, 1], count_include_pad=1)),
    "average_ceil_included": ("AveragePool", (1, 9, 8, 7, 9),
                              dict(kernel_shape=[3, 2, 3], strides=[2, 2, 2], pads=[1] * 6,
                                   ceil_mode=1, count_include_pad=1)),
    "average_ceil_excluded_dilated": ("AveragePool", (2, 3, 9, 7, 9),
                                      dict(kernel_shape=[2, 2, 2], strides=[3, 2, 2],
                                           dilations=[2, 2, 1], ceil_mode=1)),
    "average_same_upper": ("AveragePool", (2, 1, 5, 7, 9),
                           dict(kernel_shape=[3, 3, 2], strides=[2, 1, 2],
                                auto_pad="SAME_UPPER")),
    "average_valid": ("AveragePool", (2, 3, 5, 7, 9),
                      dict(kernel_shape=[3, 3, 3], strides=[1, 2, 2], auto_pad="VALID")),
}


@pytest.mark.parametrize("name", sorted(POOL_CASES))
def test_pool3d_against_reference(name):
    op, shape, attrs = POOL_CASES[name]
    x = random(shape, 5)
    _, got = _run(_pool_model(shape, op, attrs), {"x": x})
    want = pool3d_reference(x, attrs, "max" if op == "MaxPool" else "mean")
    y = next(iter(got.values()))
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)


def test_max_pool3d_of_int8_is_exact():
    from onnx import TensorProto
    shape = (2, 3, 5, 7, 9)
    attrs = dict(kernel_shape=[3, 2, 2], strides=[2, 2, 2], pads=[1, 0, 1, 1, 1, 0])
    x = np.random.default_rng(6).integers(-128, 128, shape).astype(np.int8)
    _, got = _run(_pool_model(shape, "MaxPool", attrs, TensorProto.INT8), {"x": x})
    y = next(iter(got.values()))
    assert y.dtype == np.int8
    np.testing.assert_array_equal(y, pool3d_reference(x, attrs, "max").astype(np.int8))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools_of_rank_5(op):
    shape = (2, 7, 5, 9, 11)
    x = random(shape, 7)
    _, got = _run(_pool_model(shape, op, {}), {"x": x})
    reduce = np.mean if op == "GlobalAveragePool" else np.max
    want = reduce(x.astype(np.float64), axis=(2, 3, 4), keepdims=True)
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-5, atol=1e-6)


def test_global_max_pool_of_a_conv3d():
    """GlobalMaxPool reads a 3-D conv's depth-major result (a max per plane,
    then over the depth)."""
    rng = np.random.default_rng(8)
    w = (rng.standard_normal((5, 3, 1, 3, 3)) * 0.3).astype(np.float32)
    net = Net(0)
    conv = net("Conv", net.input("x", (2, 3, 5, 7, 9)), net.const(w), pads=[0, 1, 1, 0, 1, 1])
    model = net.model([net("GlobalMaxPool", conv)])
    x = random((2, 3, 5, 7, 9), 9)
    _, got = _run(model, {"x": x})
    want = conv3d_reference(x, w, None, dict(pads=[0, 1, 1, 0, 1, 1])).max(
        axis=(2, 3, 4), keepdims=True)
    np.testing.assert_allclose(next(iter(got.values())), want, rtol=1e-5, atol=1e-5)


def conv_transpose3d_reference(x, w, bias, attrs) -> np.ndarray:
    """ONNX ConvTranspose of (N, C, D, H, W) in float64, explicit pads and
    output_padding: each tap scatters the input, ``stride`` apart, into the
    full output, which is then cut by the pads."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    kernel = w.shape[2:]
    strides = attrs.get("strides", [1] * 3)
    dilations = attrs.get("dilations", [1] * 3)
    extra = attrs.get("output_padding", [0] * 3)
    pads = attrs.get("pads", [0] * 6)
    group = attrs.get("group", 1)
    c, per_group = w.shape[:2]
    full = [s * (n - 1) + (k - 1) * d + 1 + e for n, k, s, d, e in
            zip(x.shape[2:], kernel, strides, dilations, extra)]
    y = np.zeros((x.shape[0], per_group * group) + tuple(full))
    for tap in itertools.product(*(range(k) for k in kernel)):
        target = (slice(None), slice(None)) + tuple(
            slice(t * d, t * d + (n - 1) * s + 1, s)
            for t, d, n, s in zip(tap, dilations, x.shape[2:], strides))
        for g in range(group):
            ins, outs = slice(g * c // group, (g + 1) * c // group), \
                slice(g * per_group, (g + 1) * per_group)
            part = np.einsum("ncdhw,co->nodhw", x[:, ins], w[ins, :, tap[0], tap[1], tap[2]])
            y[(slice(None), outs) + target[2:]] += part
    y = y[(slice(None), slice(None)) + tuple(
        slice(pads[i], full[i] - pads[i + 3]) for i in range(3))]
    if bias is not None:
        y += bias.astype(np.float64).reshape(1, -1, 1, 1, 1)
    return y


def _conv_transpose_model(x_shape, w, bias, attrs):
    net = Net(0)
    inputs = [net.input("x", x_shape), net.const(w)]
    if bias is not None:
        inputs.append(net.const(bias))
    return net.model([net("ConvTranspose", *inputs, **attrs)])


# (input shape, output channels per group, kernel, attributes, bias)
CONV_TRANSPOSE_CASES = {
    "stride_2_pads_output_padding": ((2, 3, 3, 5, 7), 5, (3, 3, 3),
                                     dict(strides=[2, 2, 2], pads=[1, 1, 1, 1, 0, 1],
                                          output_padding=[1, 1, 0]), True),
    "depth_dilation_groups": ((2, 4, 5, 5, 7), 3, (2, 3, 3),
                              dict(group=2, dilations=[2, 1, 1], pads=[0, 1, 1, 2, 1, 1]),
                              False),
    "same_upper_depth_stride": ((1, 7, 3, 5, 7), 5, (3, 3, 3),
                                dict(auto_pad="SAME_UPPER", strides=[3, 1, 1]), True),
}


@pytest.mark.parametrize("name", sorted(CONV_TRANSPOSE_CASES))
def test_conv_transpose3d_against_reference(name):
    x_shape, per_group, kernel, attrs, bias = CONV_TRANSPOSE_CASES[name]
    rng = np.random.default_rng(10)
    w = (rng.standard_normal((x_shape[1], per_group) + kernel) * 0.3).astype(np.float32)
    b = rng.standard_normal(per_group * attrs.get("group", 1)).astype(np.float32) \
        if bias else None
    x = random(x_shape, 11)
    _, got = _run(_conv_transpose_model(x_shape, w, b, attrs), {"x": x})
    if attrs.get("auto_pad", "NOTSET").startswith("SAME"):
        # SAME: the output is input x stride; the pads are what that leaves, the odd one at
        # the end (SAME_UPPER)
        reference = dict(attrs, auto_pad="NOTSET")
        totals = [s * (n - 1) + k - n * s for n, k, s in
                  zip(x_shape[2:], kernel, attrs.get("strides", [1] * 3))]
        reference["pads"] = [t // 2 for t in totals] + [t - t // 2 for t in totals]
    else:
        reference = attrs
    want = conv_transpose3d_reference(x, w, b, reference)
    y = next(iter(got.values()))
    assert y.shape == want.shape
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


# --- broken models ---------------------------------------------------------------------

def _load(model):
    return jitnn.onnx.prepare(model, jitnn.Context(num_threads=1))


def test_conv3d_filter_of_the_wrong_rank_is_refused():
    model = _conv_model((1, 3, 5, 7, 9), np.zeros((4, 3, 3, 3), np.float32), None, {})
    with pytest.raises(JitnnValueError, match=r"Conv.*filter of shape \(4, 3, 3, 3\).*rank-5"):
        _load(model)


def test_conv3d_channel_mismatch_is_refused():
    model = _conv_model((1, 4, 5, 7, 9), np.zeros((6, 3, 3, 3, 3), np.float32), None, {})
    with pytest.raises(JitnnValueError, match=r"Conv.*4 channels.*group=1.*needs group x 3"):
        _load(model)
    model = _conv_model((1, 6, 5, 7, 9), np.zeros((4, 2, 3, 3, 3), np.float32), None,
                        dict(group=3))
    with pytest.raises(JitnnValueError, match=r"must divide by group"):
        _load(model)


def test_conv3d_filter_deeper_than_the_padded_input_is_refused():
    model = _conv_model((1, 3, 2, 7, 9), np.zeros((4, 3, 3, 3, 3), np.float32), None, {})
    with pytest.raises(JitnnValueError, match=r"Conv.*depth of 2.*dilated depth 3"):
        _load(model)


def test_pool3d_kernel_of_the_wrong_length_is_refused():
    model = _pool_model((1, 3, 5, 7, 9), "MaxPool", dict(kernel_shape=[2, 2]))
    with pytest.raises(JitnnValueError, match=r"MaxPool.*kernel_shape \[2, 2\].*needs 3"):
        _load(model)


def test_conv_transpose3d_filter_of_the_wrong_shape_is_refused():
    model = _conv_transpose_model((1, 4, 3, 4, 5), np.zeros((4, 2, 3, 3), np.float32), None, {})
    with pytest.raises(JitnnValueError, match=r"ConvTranspose.*filter of shape \(4, 2, 3, 3\)"):
        _load(model)
    model = _conv_transpose_model((1, 4, 3, 4, 5), np.zeros((3, 2, 3, 3, 3), np.float32), None,
                                  {})
    with pytest.raises(JitnnValueError, match=r"ConvTranspose.*4 channels.*first axis"):
        _load(model)
