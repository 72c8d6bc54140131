"""The pooling ops: WebNN options and output-size rules, ONNX's
count_include_pad, plain and blocked inputs (blocks 4, 8, 16; C not a block
multiple; nchw and nhwc), layouts kept, no reorder for plain inputs, errors;
a PyTorch cross-check when torch is installed."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.pool import (average_pool2d_reference, global_average_pool2d_reference,
                            max_pool2d_reference)
from tests.test_ops_eltwise import (KINDS, _random, assert_close, assert_padding_lanes_zero,
                                    expected_layout, make)

REFERENCES = {"max_pool2d": max_pool2d_reference, "average_pool2d": average_pool2d_reference}

OPTIONS = [
    {"window_dimensions": (3, 3), "strides": 2, "padding": 1},
    {"window_dimensions": (2, 3), "strides": (2, 1), "padding": (1, 0, 2, 1), "dilations": (1, 2)},
    {"window_dimensions": 3, "strides": 2, "rounding_type": "ceil"},
    {"window_dimensions": (3, 2), "strides": (3, 2), "padding": (1, 1, 0, 1),
     "rounding_type": "ceil"},
    {"window_dimensions": (3, 3), "strides": 1, "padding": 1, "count_include_pad": True},
    {"window_dimensions": (3, 3), "strides": 2, "padding": (0, 2, 1, 2), "rounding_type": "ceil",
     "count_include_pad": True},
    {},                                                   # WebNN default: the whole plane
]


def _run(op, x, **options):
    if op == "max_pool2d":
        options.pop("count_include_pad", None)
    return getattr(jitnn, op)(x, **options)


def _want(op, x, **options):
    if op == "max_pool2d":
        options.pop("count_include_pad", None)
    return REFERENCES[op](x, **options)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 8, 9, 17, 64])
@pytest.mark.parametrize("op", ["max_pool2d", "average_pool2d"])
def test_pool_against_reference(op, channels, kind):
    x = _random((2, channels, 9, 11), channels)
    t = make(x, kind)
    for options in OPTIONS:
        got = _run(op, t, **options)
        want = _want(op, x, **options)
        assert got.pending and got.shape == want.shape, options
        assert got.layout == expected_layout(kind), options
        assert_close(got.numpy(), want, rtol=1e-5)
        if kind != "plain":
            assert_padding_lanes_zero(got)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", ["max_pool2d", "average_pool2d"])
def test_nan_in_a_window_gives_nan(op, kind):
    """A NaN anywhere in a window makes that output NaN (max_pool2d once
    skipped it, and gave -inf for an all-NaN window); inf as the reference."""
    x = _random((2, 9, 7, 8), 3)
    x[0, 1, 2, 3] = np.nan                       # inside the interior tiles
    x[1, 8, 0, 0] = np.nan                       # at a border
    x[0, 4, 4:6, 6:8] = np.nan                   # a whole 2 x 2 window
    x[1, 2, 5, 1] = np.inf
    x[1, 3, 5, 1] = -np.inf
    t = make(x, kind)
    for options in ({"window_dimensions": (2, 2), "strides": 2},
                    {"window_dimensions": (3, 3), "strides": 1, "padding": 1},
                    {"window_dimensions": (3, 3), "strides": 2, "padding": 1,
                     "rounding_type": "ceil"}):
        got = _run(op, t, **options).numpy()
        with np.errstate(invalid="ignore"):
            want = _want(op, x, **options)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=str(options))
        assert np.isnan(got).any()
        assert_close(got, want, rtol=1e-5)


@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block4"])
@pytest.mark.parametrize("channels", [3, 16])
@pytest.mark.parametrize("op", ["max_pool2d", "average_pool2d"])
def test_pool_nhwc(op, channels, kind):
    nhwc = _random((2, 7, 9, channels), 30)
    t = jitnn.tensor(nhwc) if kind == "plain" else make(nhwc, kind, axes="nhwc")
    for options in OPTIONS[:3] + OPTIONS[5:]:
        got = _run(op, t, layout="nhwc", **options)
        want = _want(op, nhwc, layout="nhwc", **options)
        assert got.layout == ("nhwc" if kind == "plain" else expected_layout(kind))
        assert got._axes == "nhwc"
        assert_close(got.numpy(), want, rtol=1e-5)


def test_blocked_input_with_the_other_axes_is_read_back():
    x = _random((2, 6, 5, 4), 31)
    t = make(x, "nChw8c")                                 # blocked with nchw axes
    got = jitnn.max_pool2d(t, 2, layout="nhwc")           # ... read as (N, H, W, C)
    assert got.layout == "nhwc"
    assert_close(got.numpy(), max_pool2d_reference(x, 2, layout="nhwc"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 7, 8, 17, 64])
def test_global_average_pool2d(kind, channels):
    x = _random((3, channels, 7, 5), 32)
    got = jitnn.global_average_pool2d(make(x, kind))
    assert got.shape == (3, channels, 1, 1) and got.layout == expected_layout(kind)
    assert_close(got.numpy(), global_average_pool2d_reference(x), rtol=1e-5)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = jitnn.global_average_pool2d(nhwc, layout="nhwc")
    assert got.shape == (3, 1, 1, channels) and got.layout == "nhwc"
    assert_close(got.numpy(), global_average_pool2d_reference(nhwc, layout="nhwc"), rtol=1e-5)


def test_large_parallel():
    x = _random((2, 17, 33, 35), 33)
    for kind in ("plain", "nChw8c"):
        for op in ("max_pool2d", "average_pool2d"):
            got = _run(op, make(x, kind), window_dimensions=3, padding=1)
            assert_close(got.numpy(), _want(op, x, window_dimensions=3, padding=1), rtol=1e-5)
        assert_close(jitnn.global_average_pool2d(make(x, kind)).numpy(),
                     global_average_pool2d_reference(x), rtol=1e-5)


def test_plain_input_is_pooled_without_a_reorder():
    ctx = jitnn.Context(block=8)
    x = ctx.tensor(_random((2, 9, 8, 8), 34))
    x_nhwc = ctx.tensor(_random((2, 8, 8, 9), 35))
    ctx.reset_stats()
    for t in (jitnn.max_pool2d(x, 2, strides=2), jitnn.average_pool2d(x_nhwc, 3, layout="nhwc"),
              jitnn.global_average_pool2d(x)):
        t._materialize()
    assert ctx.stats.reorders == 0 and ctx.stats.launches == 3


def test_webnn_output_sizes():
    """Shapes from the WebNN validation tests (WPT pooling.https.any.js)."""
    x = jitnn.tensor(np.zeros((1, 3, 7, 7), np.float32))
    opts = {"window_dimensions": (4, 4), "padding": (1, 1, 1, 1), "strides": (2, 2)}
    for op in ("max_pool2d", "average_pool2d"):
        pool = getattr(jitnn, op)
        assert pool(jitnn.tensor(np.zeros((1, 3, 4, 4), np.float32))).shape == (1, 3, 1, 1)
        assert pool(x, **opts).shape == (1, 3, 3, 3)
        assert pool(x, **opts, rounding_type="ceil").shape == (1, 3, 4, 4)
        assert pool(x, **opts, rounding_type="ceil", output_sizes=(3, 3)).shape == (1, 3, 3, 3)
        assert pool(x, **opts, output_sizes=[4, 4]).shape == (1, 3, 4, 4)
        assert pool(x, (4, 4), padding=(2, 1, 2, 1), strides=2).shape == (1, 3, 4, 4)
        y = jitnn.tensor(np.zeros((1, 2, 5, 5), np.float32))
        with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: output_sizes must be the floor"):
            pool(y, (2, 2), padding=2, strides=2, output_sizes=(3, 3))
        with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: output_sizes must be >= 1"):
            pool(y, (2, 2), padding=2, strides=2, output_sizes=(0, 4))
        with pytest.raises(jitnn.JitnnTypeError, match=r"output_sizes must be an int or a pair"):
            pool(y, (2, 2), padding=2, strides=2, output_sizes=(1, 2, 4, 4))
        with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: the output would be -2x4"):
            pool(y, (8, 2))
        with pytest.raises(jitnn.JitnnValueError, match=r"the output would be 3x0"):
            pool(y, (3, 6))


def test_webnn_ceil_keeps_a_window_that_starts_in_the_padding():
    """WebNN's spec formula (webnn issue 935): 5x5, window 3, stride 3, padding
    1, ceil -> 3x3; the last row and column of windows hold only padding and
    give 0. ONNX and PyTorch would give 2x2."""
    x = _random((1, 2, 5, 5), 36) + 10.0
    for kind in ("plain", "nChw8c"):
        for op in ("max_pool2d", "average_pool2d"):
            got = _run(op, make(x, kind), window_dimensions=3, strides=3, padding=1,
                       rounding_type="ceil").numpy()
            assert got.shape == (1, 2, 3, 3)
            assert np.all(got[:, :, 2, :] == 0) and np.all(got[:, :, :, 2] == 0)
            assert np.all(got[:, :, :2, :2] > 5)
            assert_close(got, _want(op, x, window_dimensions=3, strides=3, padding=1,
                                    rounding_type="ceil"), rtol=1e-5)


def test_count_include_pad_divisors():
    x = np.ones((1, 1, 3, 3), np.float32)
    got = jitnn.average_pool2d(x, 3, padding=1, count_include_pad=True).numpy()[0, 0]
    assert_close(got, np.array([[4, 6, 4], [6, 9, 6], [4, 6, 4]]) / 9.0)
    got = jitnn.average_pool2d(x, 3, padding=1).numpy()[0, 0]
    assert_close(got, np.ones((3, 3)))


@pytest.mark.parametrize("size,kernel,stride,pad,dilation", [
    (5, 2, 2, 1, 1),      # ceil adds a window that starts in the end padding: ONNX drops it
    (6, 3, 2, 1, 1),      # the last window reaches past the explicit padding
    (11, 3, 2, 1, 2), (9, 4, 3, 2, 1)])
def test_against_pytorch(size, kernel, stride, pad, dilation):
    torch = pytest.importorskip("torch")
    x = _random((2, 9, size, size + 1), 37)
    tx = torch.from_numpy(x)
    for ceil in (False, True):
        want = torch.nn.functional.max_pool2d(tx, kernel, stride, pad, dilation,
                                              ceil_mode=ceil).numpy()
        got = jitnn.max_pool2d(make(x, "nChw8c"), kernel, strides=stride, padding=pad,
                               dilations=dilation, output_sizes=want.shape[2:])
        assert_close(got.numpy(), want)
        if dilation == 1:
            for include in (False, True):
                want = torch.nn.functional.avg_pool2d(tx, kernel, stride, pad, ceil_mode=ceil,
                                                      count_include_pad=include).numpy()
                got = jitnn.average_pool2d(make(x, "block4"), kernel, strides=stride,
                                           padding=pad, output_sizes=want.shape[2:],
                                           count_include_pad=include)
                assert_close(got.numpy(), want, rtol=1e-5)
    webnn = jitnn.max_pool2d(x, 2, strides=2, padding=1, rounding_type="ceil")
    if (size, kernel, stride, pad) == (5, 2, 2, 1):
        assert webnn.shape[2] == 4                    # WebNN keeps the window ONNX drops


def test_pool_errors():
    x = jitnn.tensor(_random((1, 3, 6, 6)))
    with pytest.raises(jitnn.JitnnValueError, match=r"max_pool2d: input x must be 4-D .* \(3, 6, 6\)"):
        jitnn.max_pool2d(_random((3, 6, 6)))
    with pytest.raises(jitnn.JitnnValueError, match=r"average_pool2d: layout must be"):
        jitnn.average_pool2d(x, layout="chwn")
    with pytest.raises(jitnn.JitnnValueError, match=r"rounding_type must be 'floor' or 'ceil'"):
        jitnn.max_pool2d(x, 2, rounding_type="round")
    with pytest.raises(jitnn.JitnnValueError, match=r"window_dimensions must be >= 1"):
        jitnn.max_pool2d(x, (0, 2))
    with pytest.raises(jitnn.JitnnTypeError, match=r"window_dimensions must be an int or a pair"):
        jitnn.max_pool2d(x, (1, 1, 1, 1))
    with pytest.raises(jitnn.JitnnValueError, match=r"strides must be >= 1"):
        jitnn.max_pool2d(x, 2, strides=(0, 2))
    with pytest.raises(jitnn.JitnnTypeError, match=r"dilations must be an int or a pair"):
        jitnn.max_pool2d(x, 2, dilations=(1, 1, 2))
    with pytest.raises(jitnn.JitnnValueError, match=r"padding must be >= 0"):
        jitnn.average_pool2d(x, 2, padding=-1)
    with pytest.raises(jitnn.JitnnTypeError, match=r"padding must be an int, an \(h, w\) pair"):
        jitnn.average_pool2d(x, 2, padding=(1, 1, 1))
    with pytest.raises(jitnn.JitnnTypeError, match=r"count_include_pad must be a bool"):
        jitnn.average_pool2d(x, 2, count_include_pad="yes")
    with pytest.raises(jitnn.JitnnValueError, match=r"global_average_pool2d: input x must be 4-D"):
        jitnn.global_average_pool2d(np.ones((2, 3), np.float32))
    with pytest.raises(jitnn.JitnnValueError, match=r"global_average_pool2d: empty dimension"):
        jitnn.global_average_pool2d(np.ones((2, 3, 0, 4), np.float32))
