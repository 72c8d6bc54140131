"""resample2d (jitnn/ops/resample.py, kernels/resample.py): WebNN's options
and sampling (half-pixel; nearest rounds a tie to the smaller index) against
the reference, blocked inputs kept blocked (blocks 4, 8, 16; C not a block
multiple; nchw and nhwc axes) with their padding lanes zero, plain NCHW and
NHWC without a reorder, every other pair of axes, the kernel on its own,
network shapes, and the errors."""

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from jitnn.kernels import resample as R
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, random, reference)

MODES = ("nearest-neighbor", "linear")
resample2d_reference = reference("resample2d")

OPTIONS = [
    {},                                            # scales [1, 1]: a copy
    {"scales": [2, 2]},
    {"scales": [0.5, 1.5]},                        # 7 x 5 -> 3 x 7
    {"scales": [1.3, 0.7]},                        # -> 9 x 3
    {"sizes": [11, 3]},
    {"sizes": [1, 1]},
    {"sizes": [4, 13], "scales": [3.0, 3.0]},      # sizes win
    {"sizes": [10, 6], "axes": [3, 2]},            # W = 10, H = 6
    {"scales": [2.0, 1.0], "axes": [3, 2]},
]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
@pytest.mark.parametrize("mode", MODES)
def test_against_reference(mode, channels, kind):
    x = random((2, channels, 7, 5), channels)
    t = make(x, kind)
    for options in OPTIONS:
        got = jitnn.resample2d(t, mode=mode, **options)
        want = resample2d_reference(x, mode=mode, **options)
        assert got.pending and got.shape == want.shape, options
        assert got.layout == expected_layout(kind), options
        assert_close(got.numpy(), want, rtol=1e-5, atol=1e-6)
        if kind != "plain":
            assert_padding_lanes_zero(got)


@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block16"])
@pytest.mark.parametrize("mode", MODES)
def test_nhwc(mode, kind):
    """Axes [1, 2] (NHWC): a blocked tensor with nhwc axes stays blocked, a
    plain one runs as one block of C channels."""
    nhwc = random((2, 7, 5, 9), 1)
    t = jitnn.tensor(nhwc) if kind == "plain" else make(nhwc, kind, axes="nhwc")
    for options in ({"scales": [2, 2], "axes": [1, 2]}, {"sizes": [3, 8], "axes": [1, 2]},
                    {"sizes": [8, 3], "axes": [2, 1]}):
        got = jitnn.resample2d(t, mode=mode, **options)
        assert got.layout == ("nchw" if kind == "plain" else expected_layout(kind))
        if kind != "plain":
            assert got._axes == "nhwc"
            assert_padding_lanes_zero(got)
        assert_close(got.numpy(), resample2d_reference(nhwc, mode=mode, **options),
                     rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
@pytest.mark.parametrize("mode", MODES)
def test_other_axes(mode, kind):
    """Any two distinct axes (WebNN): resampling N or C gives a plain result."""
    x = random((3, 5, 4, 6), 2)
    t = make(x, kind)
    for axes, sizes in [([0, 1], [7, 2]), ([1, 0], [2, 7]), ([0, 3], [1, 9]), ([1, 3], [8, 5]),
                        ([2, 0], [3, 5]), ([1, 2], [6, 6])]:
        got = jitnn.resample2d(t, mode=mode, sizes=sizes, axes=axes)
        assert got.layout == "nchw", axes
        assert_close(got.numpy(), resample2d_reference(x, mode=mode, sizes=sizes, axes=axes),
                     rtol=1e-5, atol=1e-6)


def test_plain_input_is_resampled_through_blocks_when_they_fill():
    """Plain NCHW with at least half a block of channels: converted to blocks
    and back (two counted reorders, faster than one-lane blocks), the result
    plain; fewer channels, and plain NHWC (one block of C lanes), in place."""
    ctx = jitnn.Context(block=8)
    wide = random((2, 9, 6, 5), 3)
    narrow = random((2, 3, 6, 5), 5)
    x_nhwc = ctx.tensor(random((2, 6, 5, 9), 4))
    for mode in MODES:
        with assert_schedule(ctx, kernels=1, reorders=2):
            got = jitnn.resample2d(ctx.tensor(wide), mode=mode, scales=[2, 2])
            got._materialize()
        assert got.layout == "nchw"
        assert_close(got.numpy(), resample2d_reference(wide, mode=mode, scales=[2, 2]),
                     rtol=1e-5, atol=1e-6)
    with assert_schedule(ctx, kernels=2, reorders=0):
        for t in (jitnn.resample2d(ctx.tensor(narrow), scales=[2, 2]),
                  jitnn.resample2d(x_nhwc, mode="linear", sizes=[4, 7], axes=[1, 2])):
            t._materialize()


def test_webnn_sampling_by_hand():
    """Half-pixel coordinates ``(o + 0.5) * n / m - 0.5`` clamped to the input;
    nearest takes ``ceil(x - 0.5)`` (a tie takes the smaller index); the scale
    is the ratio of the sizes, also when ``floor(n * scale) != n * scale``."""
    def row(values, mode="nearest-neighbor", **options):
        x = np.array(values, np.float32).reshape(1, 1, 1, -1)
        got = jitnn.resample2d(x, mode=mode, **options).numpy().reshape(-1)
        want = resample2d_reference(x, mode=mode, **options).reshape(-1)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        return got.tolist()
    assert row([10, 20, 30], scales=[1, 1.5]) == [10, 20, 20, 30]      # 3 -> 4, at 3 / 4
    assert row([10, 20, 30, 40], scales=[1, 0.75]) == [10, 20, 40]
    assert row([10, 20, 30, 40, 50], sizes=[1, 2]) == [20, 40]
    assert row([10, 20], sizes=[1, 3]) == [10, 10, 20]                 # the tie at 0.5
    assert row([10, 20, 30], sizes=[1, 1]) == [20]
    assert row([10], sizes=[1, 4]) == [10, 10, 10, 10]
    assert row([0, 4], "linear", scales=[1, 2]) == [0, 1, 3, 4]       # clamped at both ends
    assert row([0, 8, 16], "linear", sizes=[1, 2]) == [2, 14]          # at 0.25 and 1.75
    np.testing.assert_allclose(row([0, 3], "linear", sizes=[1, 3]), [0, 1.5, 3], rtol=1e-6)


def test_scales_are_float32():
    """WebNN's scales are float (float32): floor(10 * float32(0.7)) is 6,
    as in the spec's exact arithmetic and Chromium's (double) product."""
    x = np.zeros((1, 1, 10, 10), np.float32)
    assert jitnn.resample2d(x, scales=[0.7, 0.5]).shape == (1, 1, 6, 5)
    assert jitnn.resample2d(x, sizes=[7, 5]).shape == (1, 1, 7, 5)
    assert jitnn.resample2d(x, scales=[0.75, 1.25]).shape == (1, 1, 7, 12)


def test_graph_builder():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 4, 5))
    y = b.resample2d(x, mode="linear", scales=[2.0, 0.5])
    assert y.shape == (2, 3, 8, 2)
    with pytest.raises(jitnn.JitnnValueError, match=r"resample2d: axes must be two distinct"):
        b.resample2d(x, axes=[2, 2])
    graph = b.build({"y": y})
    for seed in (5, 6):                        # computed twice: the second replays the plan
        data = random((2, 3, 4, 5), seed)
        out = np.empty((2, 3, 8, 2), np.float32)
        ctx.compute(graph, {"x": data}, {"y": out})
        assert_close(out, resample2d_reference(data, mode="linear", scales=[2.0, 0.5]),
                     rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("block", [8, 16])
@pytest.mark.parametrize("mode", MODES)
def test_network_shape(mode, block):
    """A segmentation head's x2 upsampling: 1 x 64 x 56 x 56, blocked."""
    ctx = jitnn.Context(block=block)
    x = random((1, 64, 56, 56), 6)
    t = jitnn.reorder(ctx.tensor(x), f"nChw{block}c")
    got = jitnn.resample2d(t, mode=mode, scales=[2, 2])
    assert got.layout == f"nChw{block}c" and got.shape == (1, 64, 112, 112)
    assert_close(got.numpy(), resample2d_reference(x, mode=mode, scales=[2, 2]),
                 rtol=1e-5, atol=1e-6)


def test_stays_blocked_after_a_convolution():
    ctx = jitnn.Context(block=8)
    x = ctx.tensor(random((1, 9, 6, 5), 7))
    w = ctx.tensor(random((10, 9, 1, 1), 8))
    with assert_schedule(ctx, kernels=2, reorders=1):         # the input into nChw8c only
        y = jitnn.resample2d(jitnn.conv2d(x, w), mode="linear", scales=[2, 2])
        y._materialize()
    assert y.layout == "nChw8c"
    want = resample2d_reference(reference("conv2d")(x.numpy(), w.numpy()), mode="linear",
                                scales=[2, 2])
    assert_close(y.numpy(), want, rtol=1e-4, atol=1e-5)


# --- the kernel ------------------------------------------------------------------------


@pytest.mark.parametrize("cb", [1, 4, 8, 16])
@pytest.mark.parametrize("linear", [False, True])
def test_kernel(linear, cb, threads, record_calls):
    """Every element written (the output starts as NaN), padding lanes zero,
    on 1 and 2 threads (the large case takes the parallel driver)."""
    mode = MODES[linear]
    calls = record_calls(R, "_resample_parallel")
    for shape, size in [((2, 3, 5, 4), (9, 3)), ((1, 17, 6, 7), (12, 14)),
                        ((2, 9, 20, 21), (40, 42))]:
        x = random(shape, cb)
        xb = layouts.reference_nchw_to_blocked(x, cb)
        out = np.full(xb.shape[:2] + size + (cb,), np.nan, np.float32)
        R.resample2d(xb, out, linear)
        full = out.transpose(0, 1, 4, 2, 3).reshape(shape[0], -1, *size)
        assert_close(full[:, :shape[1]], resample2d_reference(x, mode=mode, sizes=list(size)),
                     rtol=1e-5, atol=1e-6)
        assert not full[:, shape[1]:].any(), "padding lanes"
    assert bool(calls) == (threads == 2 and cb > 1)       # cb 1: too small to share


def test_sample_table():
    index, weight = R.sample_table(4, 2, linear=True)         # x2: at -0.25, 0.25, 0.75, 1.25
    np.testing.assert_array_equal(index, [[0, 0, 0, 1], [1, 1, 1, 1]])
    np.testing.assert_array_equal(weight, [[1, 0.75, 0.25, 1], [0, 0.25, 0.75, 0]])
    index, weight = R.sample_table(3, 2, linear=False)        # at -1/6, 0.5 (a tie), 7/6
    np.testing.assert_array_equal(index[0], [0, 0, 1])
    with pytest.raises(ValueError, match="sizes must be >= 1"):
        R.sample_table(0, 2, linear=False)


def test_kernel_errors():
    x = layouts.reference_nchw_to_blocked(random((1, 3, 4, 4)), 8)
    with pytest.raises(ValueError, match=r"resample: out has shape"):
        R.resample2d(x, np.empty((1, 2, 8, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"must not overlap"):
        R.resample2d(x, x)
    with pytest.raises(ValueError, match=r"float32"):
        R.resample2d(x.astype(np.float64), np.empty((1, 1, 8, 8, 8), np.float32))
    with pytest.raises(ValueError, match=r"OH, OW must be >= 1"):
        R.resample2d(x, np.empty((1, 1, 0, 8, 8), np.float32))


# --- errors ----------------------------------------------------------------------------

def test_errors():
    x = jitnn.tensor(random((1, 3, 4, 5)))
    bad = [
        ({"scales": [0, 2]}, jitnn.JitnnValueError,
         r"resample2d: scales must be finite and > 0 \(as float32\), got \[0, 2\]"),
        ({"scales": [2, -1.0]}, jitnn.JitnnValueError, r"scales must be finite and > 0"),
        ({"scales": [1e-50, 1]}, jitnn.JitnnValueError, r"scales must be finite and > 0"),
        ({"scales": [float("inf"), 1]}, jitnn.JitnnValueError, r"scales must be finite"),
        ({"scales": [float("nan"), 1]}, jitnn.JitnnValueError, r"scales must be finite"),
        ({"scales": [2.0]}, jitnn.JitnnValueError,
         r"resample2d: scales must have 2 entries \(one per resampled axis\), got 1"),
        ({"scales": [2, 2, 2]}, jitnn.JitnnValueError, r"scales must have 2 entries"),
        ({"scales": ["2", 2]}, jitnn.JitnnTypeError, r"scales must be a sequence of 2 numbers"),
        ({"sizes": [4]}, jitnn.JitnnValueError, r"resample2d: sizes must have 2 entries"),
        ({"sizes": [4, 4, 4]}, jitnn.JitnnValueError, r"sizes must have 2 entries"),
        ({"sizes": [0, 4]}, jitnn.JitnnValueError, r"resample2d: sizes must be in \[1, "),
        ({"sizes": [4.0, 4]}, jitnn.JitnnTypeError, r"sizes must be a sequence of 2 ints"),
        ({"sizes": [4, 4], "scales": [1.0]}, jitnn.JitnnValueError,
         r"scales must have 2 entries"),
        ({"scales": [0.1, 1.0]}, jitnn.JitnnValueError,
         r"resample2d: scales \[0.10000000149011612, 1.0\] give output sizes \[0, 5\] along "
         r"axes \[2, 3\] of x \(1, 3, 4, 5\) \(floor\(size \* scale\)\); each must be in"),
        ({"axes": [2]}, jitnn.JitnnValueError, r"resample2d: axes must have 2 entries"),
        ({"axes": [1, 2, 3]}, jitnn.JitnnValueError, r"axes must have 2 entries"),
        ({"axes": [3, 3]}, jitnn.JitnnValueError,
         r"resample2d: axes must be two distinct axes in \[0, 3\], got \[3, 3\]"),
        ({"axes": [2, 4]}, jitnn.JitnnValueError, r"axes must be two distinct axes"),
        ({"axes": [-2, -1]}, jitnn.JitnnValueError, r"axes must be two distinct axes"),
        ({"axes": 2}, jitnn.JitnnTypeError, r"axes must be a sequence of 2 ints"),
        ({"mode": "cubic"}, jitnn.JitnnValueError,
         r"resample2d: mode must be one of \('nearest-neighbor', 'linear'\), got 'cubic'"),
    ]
    for options, error, message in bad:
        with pytest.raises(error, match=message):
            jitnn.resample2d(x, **options)
    with pytest.raises(jitnn.JitnnValueError, match=r"resample2d: x must be 4-D, got shape"):
        jitnn.resample2d(random((3, 4, 5)))
    with pytest.raises(jitnn.JitnnTypeError, match=r"resample2d: x must have dtype float32"):
        jitnn.resample2d(jitnn.tensor(np.zeros((1, 1, 2, 2), np.int32)))
    with pytest.raises(jitnn.JitnnValueError, match=r"axis 2 of x \(1, 1, 0, 2\) is empty"):
        jitnn.resample2d(np.zeros((1, 1, 0, 2), np.float32), sizes=[2, 2])
