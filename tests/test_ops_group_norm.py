"""group_normalization against its float64 reference: plain and blocked
inputs (blocks 4, 8, 16; C = 1, 3, 7, 9, 17, 18, 64), groups from 1 to C,
also groups that straddle channel blocks (C = 18 in groups of 6 or 2 on
blocks of 8), odd H and W, N > 1, ranks 2 to 5, with and without scale and
bias; blocked results with zero padding lanes and no reorder between convs,
a replayed graph's bound call, the kernel's one- and two-thread runs, and
the errors."""

import numpy as np
import pytest

import jitnn
from jitnn.kernels import group_norm as group_norm_kernels
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, random, reference)

EPS32 = float(np.finfo(np.float32).eps)


def _affine(channels, seed):
    return random((channels,), seed), random((channels,), seed + 1)


def _divisors(channels):
    return [g for g in range(1, channels + 1) if channels % g == 0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17, 18])
def test_group_norm(kind, channels):
    x = random((2, channels, 5, 7), channels + 10) * 2 + 3
    scale, bias = _affine(channels, 30)
    t = make(x, kind)
    for groups in _divisors(channels):
        for options in ({}, {"scale": scale}, {"bias": bias},
                        {"scale": scale, "bias": bias, "epsilon": 1e-2}):
            got = jitnn.group_normalization(t, groups, **options)
            assert got.layout == expected_layout(kind)
            if kind != "plain":
                assert_padding_lanes_zero(got)
            want = reference("group_normalization")(x, groups, **options)
            assert_close(got.numpy(), want, tol=2e-6)


def test_group_norm_matches_instance_and_layer_norm():
    """GroupNorm(C, C) is instance normalization, GroupNorm(1, C) a layer
    normalization over (C, H, W) with per-channel scale and bias."""
    x = random((3, 9, 7, 5), 40) - 1
    scale, bias = _affine(9, 41)
    assert_close(reference("group_normalization")(x, 9, scale, bias),
                 reference("instance_normalization")(x, scale, bias), tol=1e-12)
    full = reference("layer_normalization")(x, axes=[1, 2, 3])
    assert_close(reference("group_normalization")(x, 1), full, tol=1e-12)
    got = jitnn.group_normalization(make(x, "nChw8c"), 9, scale, bias)
    assert_close(got.numpy(), reference("instance_normalization")(x, scale, bias), tol=2e-6)


@pytest.mark.parametrize("shape", [(4, 6), (2, 6, 11), (2, 6, 3, 5, 7)])
def test_group_norm_other_ranks(shape):
    x = random(shape, 42) * 3
    scale, bias = _affine(6, 43)
    for groups in (1, 2, 3, 6):
        got = jitnn.group_normalization(x, groups, scale, bias)
        assert got.shape == shape
        assert_close(got.numpy(), reference("group_normalization")(x, groups, scale, bias),
                     tol=2e-6)


@pytest.mark.parametrize("groups", [1, 32])
def test_group_norm_network_shapes(groups, threads):
    """PoolFormer's GroupNorm(1, 64) at 56 x 56 and a UNet's GroupNorm(32,
    C), blocked, on 1 and 2 threads (GroupNorm(1, C) of one image splits
    over pixel chunks on two)."""
    ctx = jitnn.Context(num_threads=threads)
    for shape in ((1, 64, 56, 56), (2, 128, 15, 15)):
        x = random(shape, 44) * 2 + 0.5
        scale, bias = _affine(shape[1], 45)
        t = jitnn.reorder(ctx.tensor(x), "nChw8c")
        got = jitnn.group_normalization(t, groups, scale, bias)
        assert_close(got.numpy(), reference("group_normalization")(x, groups, scale, bias),
                     tol=8 * EPS32)


def test_group_norm_stays_blocked_between_convs():
    """conv, group norm, conv: no reorder, one launch each."""
    ctx = jitnn.Context(num_threads=1)
    x = random((2, 3, 9, 11), 46)               # fewer than a block: the conv reads it plain
    w1, w2 = random((18, 3, 1, 1), 47), random((7, 18, 3, 3), 48)
    scale, bias = _affine(18, 49)
    with assert_schedule(ctx, reorders=1, kernels=3):        # reading the result back
        a = jitnn.conv2d(ctx.tensor(x), w1)
        y = jitnn.conv2d(jitnn.group_normalization(a, 6, scale, bias), w2, padding=1)
        got = y.numpy()
    mid = reference("group_normalization")(reference("conv2d")(x, w1), 6, scale, bias)
    assert_close(got, reference("conv2d")(mid, w2, padding=(1, 1, 1, 1)), tol=1e-5)


def test_group_norm_in_a_replayed_graph_is_a_bound_call(threads):
    ctx = jitnn.Context(num_threads=threads)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 18, 13, 9))
    scale, bias = _affine(18, 50)
    w = random((18, 18, 1, 1), 51)
    h = b.conv2d(x, b.constant(w))
    y = b.group_normalization(h, 3, b.constant(scale), b.constant(bias))
    p = b.group_normalization(x, 9)                       # plain: on the graph's input
    graph = b.build({"y": y, "p": p})
    out = {"y": np.zeros((2, 18, 13, 9), np.float32), "p": np.zeros((2, 18, 13, 9), np.float32)}
    for seed in (52, 53, 54):
        data = random((2, 18, 13, 9), seed)
        ctx.compute(graph, {"x": data}, out)
        want = reference("group_normalization")(reference("conv2d")(data, w), 3, scale, bias)
        assert_close(out["y"], want, tol=1e-5)
        assert_close(out["p"], reference("group_normalization")(data, 9), tol=2e-6)
    (program,) = graph._programs
    kinds = [(c_.node.kind, bool(bound)) for c_, bound in
             zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
    assert kinds.count(("group_norm", True)) == 2, kinds


def test_group_norm_scale_and_bias_from_graph_inputs():
    """scale and bias as graph inputs, new values at each run: blocked and plain."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x, s, t = b.input("x", (2, 18, 5, 7)), b.input("s", (18,)), b.input("b", (18,))
    w = random((18, 18, 1, 1), 61)
    graph = b.build({"y": b.group_normalization(b.conv2d(x, b.constant(w)), 3, s, t),
                     "p": b.group_normalization(x, 6, s, t)})
    out = {"y": np.zeros((2, 18, 5, 7), np.float32), "p": np.zeros((2, 18, 5, 7), np.float32)}
    for seed in (62, 63, 64):
        data, scale, bias = random((2, 18, 5, 7), seed), *_affine(18, seed + 10)
        ctx.compute(graph, {"x": data, "s": scale, "b": bias}, out)
        want = reference("group_normalization")(reference("conv2d")(data, w), 3, scale, bias)
        assert_close(out["y"], want, tol=1e-5)
        assert_close(out["p"], reference("group_normalization")(data, 6, scale, bias), tol=2e-6)


def test_group_norm_of_constant_and_large_mean():
    """A constant group is normalized to 0 (variance 0, epsilon keeps it
    finite); a mean 1000 times the spread keeps float32 accuracy."""
    x = np.ones((1, 4, 3, 3), np.float32) * 5
    got = jitnn.group_normalization(make(x, "nChw8c"), 2).numpy()
    assert not got.any()
    x = random((2, 6, 7, 7), 55) + 1000
    got = jitnn.group_normalization(make(x, "nChw8c"), 3).numpy()
    assert_close(got, reference("group_normalization")(x, 3), tol=2e-3)


def test_group_norm_empty():
    x = np.zeros((0, 6, 3, 3), np.float32)
    assert jitnn.group_normalization(x, 2).numpy().shape == (0, 6, 3, 3)


def test_group_norm_errors():
    op = "group_normalization"
    x = jitnn.tensor(random((2, 6, 4, 5), 56))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: groups must be >= 1 and divide "
                                                    r"the 6 channels of input \(2, 6, 4, 5\), "
                                                    "got 4"):
        jitnn.group_normalization(x, 4)
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: groups must be >= 1"):
        jitnn.group_normalization(x, 0)
    with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: groups must be an int, got 2.0"):
        jitnn.group_normalization(x, 2.0)
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: scale must have shape \(6,\) "
                                                    r"\(the 6 channels"):
        jitnn.group_normalization(x, 2, np.ones(3))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: bias must have shape \(6,\)"):
        jitnn.group_normalization(make(random((2, 6, 4, 5), 57), "nChw8c"), 3,
                                  bias=np.ones((6, 1)))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: input must be \(N, C, ...\)"):
        jitnn.group_normalization(random((6,), 58), 1)
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: epsilon must be a number >= 0"):
        jitnn.group_normalization(x, 2, epsilon=-1.0)
    with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: input must have dtype float32"):
        jitnn.group_normalization(jitnn.tensor(np.ones((1, 2, 2, 2), np.int32)), 1)


# --- the kernel ----------------------------------------------------------------------------

@pytest.mark.parametrize("lanes", [1, 8, 16])
def test_kernel_one_and_two_threads_and_in_place(lanes):
    """The two-thread run splits each plane into pixel chunks (a combine
    step adds them): the same values within rounding; in place too."""
    k, pixels = 3, 3001
    channels = k * lanes - (lanes // 2)
    x = random((2, k, pixels, lanes), 59) * 2 + 1
    x[:, -1, :, lanes - lanes // 2:] = 0                    # padding lanes
    scale, bias = np.zeros(k * lanes, np.float32), np.zeros(k * lanes, np.float32)
    scale[:channels], bias[:channels] = _affine(channels, 60)
    groups = [g for g in _divisors(channels) if g > 1][0]
    one, two = np.empty_like(x), np.empty_like(x)
    group_norm_kernels.group_norm(x, scale, bias, groups, 1e-5, channels, one, threads=1)
    group_norm_kernels.group_norm(x, scale, bias, groups, 1e-5, channels, two, threads=2)
    plain = x.transpose(0, 1, 3, 2).reshape(2, k * lanes, pixels)[:, :channels]
    want = reference("group_normalization")(plain, groups, scale[:channels], bias[:channels])
    for got in (one, two):
        assert not got[:, -1, :, lanes - lanes // 2:].any()
        assert_close(got.transpose(0, 1, 3, 2).reshape(2, k * lanes, pixels)[:, :channels],
                     want, tol=4 * EPS32)
    copy = x.copy()
    group_norm_kernels.group_norm(copy, scale, bias, groups, 1e-5, channels, copy, threads=2)
    np.testing.assert_array_equal(copy, two)


def test_kernel_checks():
    x = np.zeros((1, 2, 3, 8), np.float32)
    s = np.ones(16, np.float32)
    with pytest.raises(ValueError, match=r"group_norm: groups must divide the 12 channels"):
        group_norm_kernels.group_norm(x, s, s, 5, 1e-5, 12, np.empty_like(x))
    with pytest.raises(ValueError, match=r"channels must be in \(8, 16\]"):
        group_norm_kernels.group_norm(x, s, s, 1, 1e-5, 5, np.empty_like(x))
    with pytest.raises(ValueError, match=r"scale must have shape \(16,\)"):
        group_norm_kernels.group_norm(x, s[:8], s, 1, 1e-5, 16, np.empty_like(x))
    with pytest.raises(ValueError, match=r"the lane count must divide 32"):
        group_norm_kernels.group_norm(np.zeros((1, 1, 3, 3), np.float32),
                                      np.ones(3, np.float32), np.ones(3, np.float32), 1, 1e-5,
                                      3, np.empty((1, 1, 3, 3), np.float32))
    with pytest.raises(ValueError, match=r"out must be x itself or not overlap it"):
        flat = np.zeros(2 * 3 * 8 + 8, np.float32)
        group_norm_kernels.group_norm(flat[:48].reshape(1, 2, 3, 8), s, s, 1, 1e-5, 16,
                                      flat[8:].reshape(1, 2, 3, 8))
