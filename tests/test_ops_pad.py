"""pad (jitnn/ops/pad.py, kernels/pad.py): WebNN's three modes on every rank
and data type against the reference, blocked inputs padded on H and W kept
blocked (blocks 4, 8, 16; C not a block multiple; nchw and nhwc axes) with
their padding lanes zero, the channel and batch axes through the plain
path, the kernel on its own, a network shape, and the errors."""

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from jitnn.kernels import pad as P
from jitnn.tensor import DTYPE_NAMES
from tests.helpers import (KINDS, assert_padding_lanes_zero, assert_schedule, expected_layout,
                           make, random, reference)

MODES = ("constant", "edge", "reflection")
pad_reference = reference("pad")

# (beginning, ending) on H and W of a 7 x 5 plane: reflection needs < 7 and < 5
SPATIAL = [((2, 1), (3, 4)), ((0, 0), (1, 0)), ((6, 0), (0, 4)), ((1, 1), (1, 1))]


def _nchw(h, w):
    return [0, 0, h[0], w[0]], [0, 0, h[1], w[1]]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
def test_blocked_and_plain_against_reference(channels, kind):
    x = random((2, channels, 7, 5), channels)
    t = make(x, kind)
    for (top, left), (bottom, right) in SPATIAL:
        begin, end = _nchw((top, bottom), (left, right))
        for mode, value in [("constant", 0.0), ("constant", -2.5), ("edge", 0.0),
                            ("reflection", 0.0)]:
            got = jitnn.pad(t, begin, end, mode=mode, value=value)
            want = pad_reference(x, begin, end, mode=mode, value=value)
            assert got.pending and got.layout == expected_layout(kind), (mode, begin, end)
            np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))
            if kind != "plain":
                assert_padding_lanes_zero(got)     # the constant -2.5 stays off them


@pytest.mark.parametrize("kind", ["nChw8c", "block16"])
def test_blocked_nhwc_axes(kind):
    """A blocked tensor with logical axes (N, H, W, C): its H and W are axes 1, 2."""
    nhwc = random((2, 7, 5, 9), 1)
    t = make(nhwc, kind, axes="nhwc")
    for mode in MODES:
        got = jitnn.pad(t, [0, 2, 1, 0], [0, 3, 4, 0], mode=mode, value=3.0)
        assert got.layout == expected_layout(kind) and got._axes == "nhwc"
        np.testing.assert_array_equal(
            got.numpy(), pad_reference(nhwc, [0, 2, 1, 0], [0, 3, 4, 0], mode=mode,
                                       value=3.0).astype(np.float32))
        assert_padding_lanes_zero(got)


@pytest.mark.parametrize("kind", ["nChw8c", "block16"])
def test_blocked_padded_on_batch_or_channels_runs_plain(kind):
    """Padding C of a blocked tensor would change which lanes are padding:
    it runs on the plain values (as padding N) and gives a plain result."""
    x = random((2, 9, 5, 4), 2)
    t = make(x, kind)
    for begin, end in [([0, 1, 0, 0], [0, 6, 0, 0]), ([1, 0, 1, 0], [1, 0, 0, 1]),
                       ([0, 3, 1, 1], [0, 0, 1, 1])]:
        for mode in MODES:
            got = jitnn.pad(t, begin, end, mode=mode, value=1.0)
            assert got.layout == "nchw"
            np.testing.assert_array_equal(
                got.numpy(), pad_reference(x, begin, end, mode=mode, value=1.0)
                .astype(np.float32))


@pytest.mark.parametrize("shape", [(), (9,), (3, 3), (4, 1, 3), (2, 3, 4, 5), (1, 3, 2, 1, 4)])
@pytest.mark.parametrize("mode", MODES)
def test_every_rank(mode, shape):
    x = random(shape, len(shape))
    begin = [min(1 + i % 2, max(0, d - 1)) for i, d in enumerate(shape)]
    end = [min(i % 3, max(0, d - 1)) for i, d in enumerate(shape)]
    got = jitnn.pad(x, begin, end, mode=mode, value=0.5)
    want = pad_reference(x, begin, end, mode=mode, value=0.5)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.numpy(), want.astype(np.float32))


@pytest.mark.parametrize("dtype", [d for d in DTYPE_NAMES if d != "float32"])
@pytest.mark.parametrize("mode", MODES)
def test_integer_dtypes(mode, dtype):
    """Every jitnn integer type keeps its type; the constant is one of it."""
    info = np.iinfo(dtype)
    x = np.random.default_rng(3).integers(max(info.min, -100), min(info.max, 100),
                                          (2, 3, 4, 5)).astype(dtype)
    value = info.max if mode == "constant" else 0
    got = jitnn.pad(jitnn.tensor(x), [0, 1, 2, 3], [1, 2, 3, 0], mode=mode, value=value)
    assert got.dtype == np.dtype(dtype) and got.layout == "nchw"
    want = pad_reference(x, [0, 1, 2, 3], [1, 2, 3, 0], mode=mode, value=value)
    assert want.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.numpy(), want)


def test_int32_modes_by_hand():
    x = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    pad = lambda mode, value=0: jitnn.pad(x, [1, 2], [0, 2], mode=mode, value=value).numpy()
    np.testing.assert_array_equal(pad("constant", -7), [[-7] * 7, [-7, -7, 1, 2, 3, -7, -7],
                                                        [-7, -7, 4, 5, 6, -7, -7]])
    np.testing.assert_array_equal(pad("edge"), [[1, 1, 1, 2, 3, 3, 3], [1, 1, 1, 2, 3, 3, 3],
                                                [4, 4, 4, 5, 6, 6, 6]])
    np.testing.assert_array_equal(pad("reflection"), [[6, 5, 4, 5, 6, 5, 4],
                                                      [3, 2, 1, 2, 3, 2, 1],
                                                      [6, 5, 4, 5, 6, 5, 4]])
    assert jitnn.pad(np.array([7], np.int64), [1], [1], value=2**62).numpy().tolist() == \
        [2**62, 7, 2**62]


def test_special_constants():
    """WebNN's MLNumber: NaN and infinities pad float32 as they are."""
    x = random((1, 3, 2, 2), 4)
    for value in (np.nan, np.inf, -np.inf):
        for t in (jitnn.tensor(x), make(x, "nChw8c")):
            got = jitnn.pad(t, [0, 0, 1, 0], [0, 0, 0, 1], value=value).numpy()
            np.testing.assert_array_equal(got, pad_reference(x, [0, 0, 1, 0], [0, 0, 0, 1],
                                                             value=value).astype(np.float32))


def test_stays_blocked_between_convolutions():
    """conv -> reflection pad -> conv: no reorder around the pad."""
    ctx = jitnn.Context(block=8)
    x = ctx.tensor(random((1, 9, 8, 7), 5))
    w1, w2 = ctx.tensor(random((16, 9, 3, 3), 6)), ctx.tensor(random((5, 16, 3, 3), 7))
    with assert_schedule(ctx, kernels=3, reorders=1):      # the input into nChw8c only
        y = jitnn.conv2d(jitnn.pad(jitnn.conv2d(x, w1), [0, 0, 1, 1], [0, 0, 1, 1],
                                   mode="reflection"), w2)
        y._materialize()
    assert y.layout == "nChw8c"
    h = reference("conv2d")(x.numpy(), w1.numpy())
    h = pad_reference(h, [0, 0, 1, 1], [0, 0, 1, 1], mode="reflection")
    np.testing.assert_allclose(y.numpy(), reference("conv2d")(h, w2.numpy()), rtol=1e-4,
                               atol=1e-4)


def test_graph_builder():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 4, 5), dtype="int32")
    y = b.pad(x, [0, 0, 2, 2], [0, 1, 2, 2], mode="reflection")
    assert y.shape == (2, 4, 8, 9) and y.dtype == np.int32
    with pytest.raises(jitnn.JitnnValueError, match=r"pad: reflection padding"):
        b.pad(x, [0, 0, 4, 0], [0, 0, 0, 0], mode="reflection")
    graph = b.build({"y": y})
    for start in (0, -60):                     # computed twice: the second replays the plan
        data = np.arange(start, start + 120, dtype=np.int32).reshape(2, 3, 4, 5)
        out = np.empty((2, 4, 8, 9), np.int32)
        ctx.compute(graph, {"x": data}, {"y": out})
        np.testing.assert_array_equal(out, pad_reference(data, [0, 0, 2, 2], [0, 1, 2, 2],
                                                         mode="reflection"))


@pytest.mark.parametrize("block", [8, 16])
def test_network_shape(block):
    """A style-transfer net's reflection pad: 1 x 256 x 28 x 28, pad 1."""
    ctx = jitnn.Context(block=block)
    x = random((1, 256, 28, 28), 8)
    t = jitnn.reorder(ctx.tensor(x), f"nChw{block}c")
    got = jitnn.pad(t, [0, 0, 1, 1], [0, 0, 1, 1], mode="reflection")
    assert got.layout == f"nChw{block}c" and got.shape == (1, 256, 30, 30)
    np.testing.assert_array_equal(got.numpy(), np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)),
                                                      mode="reflect"))


# --- the kernel ------------------------------------------------------------------------


@pytest.mark.parametrize("cb", [1, 4, 8, 16])
@pytest.mark.parametrize("mode", MODES)
def test_kernel(mode, cb, threads, record_calls):
    """Every element written (the output starts as NaN), padding lanes zero,
    on 1 and 2 threads (a large case takes the parallel driver)."""
    calls = record_calls(P, "_pad_parallel")
    for shape, padding in [((2, 3, 5, 4), (1, 2, 3, 0)), ((1, 17, 6, 7), (0, 5, 6, 2)),
                           ((2, 9, 40, 41), (2, 1, 1, 3))]:
        x = random(shape, cb)
        xb = layouts.reference_nchw_to_blocked(x, cb)
        top, bottom, left, right = padding
        out = np.full((shape[0], xb.shape[1], top + shape[2] + bottom,
                       left + shape[3] + right, cb), np.nan, np.float32)
        P.pad2d(xb, out, padding, getattr(P, mode.upper()), 4.0, shape[1])
        want = pad_reference(x, [0, 0, top, left], [0, 0, bottom, right], mode=mode, value=4.0)
        full = out.transpose(0, 1, 4, 2, 3).reshape(shape[0], -1, *out.shape[2:4])
        np.testing.assert_array_equal(full[:, :shape[1]], want.astype(np.float32))
        assert not full[:, shape[1]:].any(), "padding lanes"
    assert bool(calls) == (threads == 2)


def test_kernel_errors():
    x = layouts.reference_nchw_to_blocked(random((1, 3, 4, 4)), 8)
    out = np.empty((1, 1, 6, 6, 8), np.float32)
    with pytest.raises(ValueError, match=r"pad: out has shape"):
        P.pad2d(x, out, (1, 1, 1, 0))
    with pytest.raises(ValueError, match=r"pad: reflection padding needs padding < H = 4"):
        P.pad2d(x, np.empty((1, 1, 9, 4, 8), np.float32), (4, 1, 0, 0), P.REFLECTION)
    with pytest.raises(ValueError, match=r"padding must be >= 0"):
        P.pad2d(x, out, (-1, 3, 1, 1))
    with pytest.raises(ValueError, match=r"do not fill the last of 1 blocks"):
        P.pad2d(x, out, (1, 1, 1, 1), channels=9)
    with pytest.raises(ValueError, match=r"must not overlap"):
        P.pad2d(x, x, (0, 0, 0, 0))
    with pytest.raises(ValueError, match=r"float32"):
        P.pad2d(x.astype(np.float64), out, (1, 1, 1, 1))


# --- errors ----------------------------------------------------------------------------

def test_errors():
    x = jitnn.tensor(random((1, 3, 4, 5)))
    bad = [
        ((x, [0, 0, -1, 0], [0, 0, 0, 0]), {}, jitnn.JitnnValueError,
         r"pad: beginning_padding must be >= 0, got \[0, 0, -1, 0\]"),
        ((x, [0, 0, 1], [0, 0, 0, 0]), {}, jitnn.JitnnValueError,
         r"pad: beginning_padding must have 4 entries \(one per axis of x \(1, 3, 4, 5\)\), "
         r"got 3"),
        ((x, [0, 0, 0, 0], [0, 0, 0, 0, 0]), {}, jitnn.JitnnValueError,
         r"pad: ending_padding must have 4 entries"),
        ((x, [0, 0, 1.0, 0], [0, 0, 0, 0]), {}, jitnn.JitnnTypeError,
         r"pad: beginning_padding must be a sequence of 4 ints"),
        ((x, 1, [0, 0, 0, 0]), {}, jitnn.JitnnTypeError, r"beginning_padding must be a sequence"),
        ((x, [0, 0, 4, 0], [0, 0, 0, 0]), {"mode": "reflection"}, jitnn.JitnnValueError,
         r"pad: reflection padding must be smaller than the axis it pads, but axis 2 of x "
         r"\(1, 3, 4, 5\) has size 4 and padding \(4, 0\)"),
        ((x, [0, 0, 0, 0], [0, 0, 0, 7]), {"mode": "reflection"}, jitnn.JitnnValueError,
         r"axis 3 .* has size 5 and padding \(0, 7\)"),
        ((x, [0, 0, 1, 0], [0, 0, 0, 0]), {"mode": "symmetric"}, jitnn.JitnnValueError,
         r"pad: mode must be one of \('constant', 'edge', 'reflection'\), got 'symmetric'"),
        ((x, [0, 0, 1, 0], [0, 0, 0, 0]), {"value": "1"}, jitnn.JitnnTypeError,
         r"pad: value must be a number, got '1'"),
        ((x, [0, 0, 1, 0], [0, 0, 0, 0]), {"value": True}, jitnn.JitnnTypeError,
         r"value must be a number"),
        ((x, [0, 0, 1, 0], [0, 0, 0, 0]), {"value": 1e39}, jitnn.JitnnValueError,
         r"pad: value 1e\+39 is beyond float32's range"),
        ((np.zeros((2, 0, 3), np.float32), [0, 1, 0], [0, 0, 0]), {"mode": "edge"},
         jitnn.JitnnValueError, r"pad: edge padding needs elements to repeat, but axis 1"),
        ((x, [0, 0, 2**31, 0], [0, 0, 0, 0]), {}, jitnn.JitnnValueError,
         r"beginning_padding must be <= 2147483647"),
    ]
    for args, kwargs, error, message in bad:
        with pytest.raises(error, match=message):
            jitnn.pad(*args, **kwargs)
    ints = jitnn.tensor(np.zeros((2, 2), np.int8))
    with pytest.raises(jitnn.JitnnValueError, match=r"pad: value 300 does not fit the int8 "
                                                    r"tensor \(\[-128, 127\]\)"):
        jitnn.pad(ints, [1, 0], [0, 0], value=300)
    with pytest.raises(jitnn.JitnnValueError, match=r"value must be an integer for a int8 "
                                                    r"tensor, got 1.5"):
        jitnn.pad(ints, [1, 0], [0, 0], value=1.5)
    with pytest.raises(jitnn.JitnnValueError, match=r"value must be an integer .* got nan"):
        jitnn.pad(ints, [1, 0], [0, 0], value=float("nan"))
    # constant padding of an empty axis is fine, and 2.0 is an integer
    got = jitnn.pad(np.zeros((0, 2), np.int32), [1, 0], [0, 1], value=2.0)
    np.testing.assert_array_equal(got.numpy(), [[2, 2, 2]])
