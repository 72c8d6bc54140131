"""The pooling ops: WebNN options and output-size rules, ONNX's
count_include_pad, l2 pooling, plain and blocked inputs (blocks 4, 8, 16; C
not a block multiple; nchw and nhwc), layouts kept, no reorder for plain
inputs, errors; a PyTorch cross-check when torch is installed; WebNN's
l2Pool2d vectors, two of which are wrong."""

import re

import numpy as np
import pytest

import jitnn
from jitnn.ops.pool import (average_pool2d_reference, global_average_pool2d_reference,
                            l2_pool2d_reference, max_pool2d_reference)
from tests import wpt
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, per_block_and_threads, random, reference)

REFERENCES = {"max_pool2d": max_pool2d_reference, "average_pool2d": average_pool2d_reference,
              "l2_pool2d": l2_pool2d_reference}
POOLS = ["max_pool2d", "average_pool2d", "l2_pool2d"]

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
    if op != "average_pool2d":
        options.pop("count_include_pad", None)
    return getattr(jitnn, op)(x, **options)


def _want(op, x, **options):
    if op != "average_pool2d":
        options.pop("count_include_pad", None)
    return REFERENCES[op](x, **options)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 8, 9, 17, 64])
@pytest.mark.parametrize("op", POOLS)
def test_pool_against_reference(op, channels, kind):
    x = random((2, channels, 9, 11), channels)
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
@pytest.mark.parametrize("op", POOLS)
def test_nan_in_a_window_gives_nan(op, kind):
    """A NaN anywhere in a window makes that output NaN (max_pool2d once
    skipped it, and gave -inf for an all-NaN window); inf as the reference."""
    x = random((2, 9, 7, 8), 3)
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
@pytest.mark.parametrize("op", POOLS)
def test_pool_nhwc(op, channels, kind):
    nhwc = random((2, 7, 9, channels), 30)
    t = jitnn.tensor(nhwc) if kind == "plain" else make(nhwc, kind, axes="nhwc")
    for options in OPTIONS[:3] + OPTIONS[5:]:
        got = _run(op, t, layout="nhwc", **options)
        want = _want(op, nhwc, layout="nhwc", **options)
        assert got.layout == ("nhwc" if kind == "plain" else expected_layout(kind))
        assert got._axes == "nhwc"
        assert_close(got.numpy(), want, rtol=1e-5)


def test_blocked_input_with_the_other_axes_is_read_back():
    x = random((2, 6, 5, 4), 31)
    t = make(x, "nChw8c")                                 # blocked with nchw axes
    got = jitnn.max_pool2d(t, 2, layout="nhwc")           # ... read as (N, H, W, C)
    assert got.layout == "nhwc"
    assert_close(got.numpy(), max_pool2d_reference(x, 2, layout="nhwc"))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 7, 8, 17, 64])
def test_global_average_pool2d(kind, channels):
    x = random((3, channels, 7, 5), 32)
    got = jitnn.global_average_pool2d(make(x, kind))
    assert got.shape == (3, channels, 1, 1) and got.layout == expected_layout(kind)
    assert_close(got.numpy(), global_average_pool2d_reference(x), rtol=1e-5)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    got = jitnn.global_average_pool2d(nhwc, layout="nhwc")
    assert got.shape == (3, 1, 1, channels) and got.layout == "nhwc"
    assert_close(got.numpy(), global_average_pool2d_reference(nhwc, layout="nhwc"), rtol=1e-5)


def test_large_parallel():
    x = random((2, 17, 33, 35), 33)
    for kind in ("plain", "nChw8c"):
        for op in POOLS:
            got = _run(op, make(x, kind), window_dimensions=3, padding=1)
            assert_close(got.numpy(), _want(op, x, window_dimensions=3, padding=1), rtol=1e-5)
        assert_close(jitnn.global_average_pool2d(make(x, kind)).numpy(),
                     global_average_pool2d_reference(x), rtol=1e-5)


def test_plain_input_is_pooled_without_a_reorder():
    ctx = jitnn.Context(block=8)
    x = ctx.tensor(random((2, 9, 8, 8), 34))
    x_nhwc = ctx.tensor(random((2, 8, 8, 9), 35))
    with assert_schedule(ctx, kernels=3, reorders=0):
        for t in (jitnn.max_pool2d(x, 2, strides=2),
                  jitnn.average_pool2d(x_nhwc, 3, layout="nhwc"), jitnn.global_average_pool2d(x)):
            t._materialize()


def test_webnn_output_sizes():
    """Shapes from the WebNN validation tests (WPT pooling.https.any.js)."""
    x = jitnn.tensor(np.zeros((1, 3, 7, 7), np.float32))
    opts = {"window_dimensions": (4, 4), "padding": (1, 1, 1, 1), "strides": (2, 2)}
    for op in POOLS:
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


def test_ceil_drops_a_window_that_starts_in_the_padding():
    """webnn issue 935's case: 5x5, window 3, stride 3, padding 1, ceil. The
    plain ceil formula gives 3x3, whose last row and column of windows hold
    only padding; like PyTorch and ONNX, jitnn drops them: 2x2."""
    x = random((1, 2, 5, 5), 36) + 10.0
    for kind in ("plain", "nChw8c"):
        for op in POOLS:
            got = _run(op, make(x, kind), window_dimensions=3, strides=3, padding=1,
                       rounding_type="ceil").numpy()
            assert got.shape == (1, 2, 2, 2)
            assert np.all(got > 5)
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
    x = random((2, 9, size, size + 1), 37)
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
        # rounding_type alone gives PyTorch's size (ceil drops a window that
        # would start in the end padding)
        rounding = "ceil" if ceil else "floor"
        got = jitnn.max_pool2d(x, kernel, strides=stride, padding=pad, dilations=dilation,
                               rounding_type=rounding)
        assert got.shape == want.shape


def test_pool_errors():
    x = jitnn.tensor(random((1, 3, 6, 6)))
    with pytest.raises(jitnn.JitnnValueError, match=r"max_pool2d: input x must be 4-D .* \(3, 6, 6\)"):
        jitnn.max_pool2d(random((3, 6, 6)))
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


# --- ceil rounding and windows with no input element ----------------------------------
#
# The plain ceil formula once added a last window that starts in the end
# padding (or past the input): it holds no input element and came out 0.

def _torch_output_size(size, window, stride, dilation, pad_begin, pad_end, ceil):
    """PyTorch's pooling_output_size (aten/src/ATen/native/Pool.h), written out."""
    out = (size + pad_begin + pad_end - dilation * (window - 1) - 1
           + (stride - 1 if ceil else 0)) // stride + 1
    if ceil and (out - 1) * stride >= size + pad_begin:
        out -= 1                        # the last window must start inside the input
    return out


def _pool_float64(op, x, window, strides, dilations, padding, ceil, count_include_pad):
    """An independent float64 reference (NCHW), one window at a time: the max,
    the mean (count_include_pad: the sum over the taps inside the explicitly
    padded input) or the L2 norm of the window's input elements."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = window, strides, dilations
    top, bottom, left, right = padding
    oh = _torch_output_size(h, kh, sh, dh, top, bottom, ceil)
    ow = _torch_output_size(w, kw, sw, dw, left, right, ceil)
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        rows = [i * sh - top + k * dh for k in range(kh)]
        for j in range(ow):
            cols = [j * sw - left + k * dw for k in range(kw)]
            inside_rows = [r for r in rows if 0 <= r < h]
            inside_cols = [q for q in cols if 0 <= q < w]
            assert inside_rows and inside_cols, "a test geometry with an empty window"
            values = x[:, :, inside_rows][:, :, :, inside_cols].astype(np.float64)
            if op == "max_pool2d":
                out[:, :, i, j] = values.max(axis=(2, 3))
                continue
            if op == "l2_pool2d":
                out[:, :, i, j] = np.sqrt((values ** 2).sum(axis=(2, 3)))
                continue
            if count_include_pad:
                count = (sum(-top <= r < h + bottom for r in rows)
                         * sum(-left <= q < w + right for q in cols))
            else:
                count = len(inside_rows) * len(inside_cols)
            out[:, :, i, j] = values.sum(axis=(2, 3)) / count
    return out


# (window, strides, dilations, padding [t, b, l, r], ceil): strides larger than
# the window, ceil with and without padding (several drop a last window)
CEIL_GEOMETRIES = [
    ((1, 1), (1, 3), (1, 1), (0, 0, 0, 0), True),       # the report's example
    ((2, 2), (3, 3), (1, 1), (0, 0, 0, 0), True),
    ((2, 3), (3, 4), (1, 1), (1, 0, 0, 2), True),
    ((3, 3), (3, 3), (1, 1), (1, 1, 1, 1), True),       # webnn issue 935
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), True),
    ((3, 2), (4, 3), (1, 2), (1, 1, 1, 0), True),       # dilated
    ((2, 2), (3, 4), (1, 1), (1, 1, 1, 1), False),      # floor, strides > window
    ((1, 2), (2, 5), (1, 1), (0, 0, 1, 1), False),
]


def _pool_case(op, kind, x, geometry, count_include_pad):
    window, strides, dilations, padding, ceil = geometry
    options = dict(window_dimensions=window, strides=strides, dilations=dilations,
                   padding=padding, rounding_type="ceil" if ceil else "floor")
    if op == "average_pool2d":
        options["count_include_pad"] = count_include_pad
    if kind == "nhwc":
        got = getattr(jitnn, op)(np.ascontiguousarray(x.transpose(0, 2, 3, 1)),
                                 layout="nhwc", **options).numpy().transpose(0, 3, 1, 2)
    else:
        got = getattr(jitnn, op)(make(x, kind), **options).numpy()
    return got, _pool_float64(op, x, window, strides, dilations, padding, ceil,
                              count_include_pad)


@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block16", "nhwc"])
@pytest.mark.parametrize("channels", [1, 3, 7, 17])
@pytest.mark.parametrize("op,count_include_pad", [("max_pool2d", False),
                                                  ("average_pool2d", False),
                                                  ("average_pool2d", True),
                                                  ("l2_pool2d", False)])
def test_ceil_and_large_strides_against_float64(op, count_include_pad, channels, kind):
    """Every window of every geometry holds input: the output size follows
    PyTorch's rule and each value the float64 reference's. The input is
    negative, so a 0 written for an empty window could not pass as a max
    (nor as an L2 norm, which is > 0.5 here)."""
    for shape in ((2, channels, 7, 11), (3, channels, 5, 8)):
        x = -np.abs(random(shape, channels)) - 0.5
        for geometry in CEIL_GEOMETRIES:
            got, want = _pool_case(op, kind, x, geometry, count_include_pad)
            assert got.shape == want.shape, (shape, geometry)
            assert np.all(got > 0.5 if op == "l2_pool2d" else got < 0), (shape, geometry)
            assert_close(got, want, rtol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 17])
def test_max_pool_ceil_writes_no_zero(kind, channels):
    """The report: max_pool2d(-x, 1, strides=(1, 3), rounding_type="ceil") once
    gave a fourth output column of 0 for W = 8 (a window at column 9)."""
    x = np.abs(random((2, channels, 5, 8), 40)) + 1.0
    got = jitnn.max_pool2d(make(-x, kind), 1, strides=(1, 3), rounding_type="ceil")
    assert got.shape == (2, channels, 5, 3)
    np.testing.assert_array_equal(got.numpy(), -x[:, :, :, ::3])
    got = jitnn.average_pool2d(make(-x, kind), 1, strides=(1, 3), rounding_type="ceil")
    np.testing.assert_array_equal(got.numpy(), -x[:, :, :, ::3])


def test_output_sizes_of_the_plain_ceil_formula_are_refused():
    """WebNN's outputSizes: the floor or the ceil size. The plain ceil size
    (one window more, starting past the input) is neither."""
    x = -np.abs(random((2, 3, 5, 8), 41)) - 1.0
    got = jitnn.max_pool2d(x, 1, strides=(1, 3), output_sizes=(5, 3))
    np.testing.assert_array_equal(got.numpy(), x[:, :, :, ::3])
    for op in POOLS:
        with pytest.raises(jitnn.JitnnValueError,
                           match=rf"{op}: output_sizes must be the floor \[5, 3\] or ceil "
                                 r"\[5, 3\] output size on each axis, got \[5, 4\]"):
            getattr(jitnn, op)(x, 1, strides=(1, 3), output_sizes=(5, 4))


@pytest.mark.parametrize("op", ["max_pool2d", "average_pool2d"])
def test_windows_with_no_input_are_refused(op):
    """A window wholly in the padding has no max and no average: the geometry
    is refused at the call, naming the op and the window."""
    x = jitnn.tensor(random((2, 3, 6, 6), 42))
    pool = getattr(jitnn, op)
    expected = rf"{op}: every window must hold at least one input element, but all taps of "
    cases = [
        # padding >= window: the first window lies in the begin padding
        (dict(window_dimensions=2, padding=2), "the window of output row 0 fall in the padding"),
        # end padding >= window: windows past the input, with floor rounding too
        (dict(window_dimensions=3, padding=(0, 0, 0, 3)), "output column 6 fall"),
        (dict(window_dimensions=2, strides=2, padding=(0, 3, 0, 0), rounding_type="ceil"),
         "output row 3 fall"),
        # dilated taps that skip the whole input (padding 1 < window 2)
        (dict(window_dimensions=2, dilations=(1, 7), padding=(0, 0, 1, 1)), "output column 0"),
    ]
    for options, window in cases:
        if op == "average_pool2d":
            options["count_include_pad"] = True
        with pytest.raises(jitnn.JitnnValueError, match=expected + ".*" + window):
            pool(x, **options)
    # the largest padding that leaves every window an input element works
    got = pool(x, 3, padding=2).numpy()
    want = _pool_float64(op, x.numpy(), (3, 3), (1, 1), (1, 1), (2, 2, 2, 2), False, False)
    assert_close(got, want, rtol=1e-5)


def test_graph_builder_infers_the_ceil_size_and_refuses_empty_windows():
    """GraphBuilder infers shapes by running the same op on placeholders."""
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 5, 8))
    y = b.max_pool2d(x, 1, strides=(1, 3), rounding_type="ceil")
    assert y.shape == (2, 3, 5, 3)
    with pytest.raises(jitnn.JitnnValueError, match=r"max_pool2d: every window must hold"):
        b.max_pool2d(x, 2, padding=2)
    graph = b.build({"y": y})
    data = np.abs(random((2, 3, 5, 8), 43)) + 1.0
    out = np.empty((2, 3, 5, 3), np.float32)
    ctx.compute(graph, {"x": -data}, {"y": out})
    np.testing.assert_array_equal(out, -data[:, :, :, ::3])


# --- l2_pool2d -----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block16", "nhwc"])
def test_l2_windows_of_padding_alone_give_zero(kind):
    """Padding adds nothing to the sum of squares, so the L2 norm of a window
    wholly in the padding is 0 (max and average refuse such geometries)."""
    x = np.abs(random((2, 3, 6, 6), 44)) + 1.0
    for window, strides, dilations, padding, ceil in [
            ((2, 2), (1, 1), (1, 1), (2, 0, 0, 0), False),       # the first rows
            ((3, 3), (1, 1), (1, 1), (0, 0, 0, 3), False),       # the last column
            ((2, 2), (1, 1), (1, 7), (0, 0, 1, 1), False)]:      # taps that skip the input
        options = dict(window_dimensions=window, strides=strides, dilations=dilations,
                       padding=padding, rounding_type="ceil" if ceil else "floor")
        if kind == "nhwc":
            got = jitnn.l2_pool2d(np.ascontiguousarray(x.transpose(0, 2, 3, 1)), layout="nhwc",
                                  **options).numpy().transpose(0, 3, 1, 2)
        else:
            got = jitnn.l2_pool2d(make(x, kind), **options).numpy()
        want = l2_pool2d_reference(x, **options)
        assert (want == 0).any(), options
        np.testing.assert_array_equal(got == 0, want == 0)
        assert_close(got, want, rtol=1e-5)


def test_l2_by_hand():
    x = np.array([[3, 4], [0, 12]], np.float32).reshape(1, 1, 2, 2)
    assert jitnn.l2_pool2d(x).numpy().tolist() == [[[[13.0]]]]
    got = jitnn.l2_pool2d(x, 2, padding=(0, 1, 0, 1)).numpy()
    np.testing.assert_allclose(got[0, 0], [[13, np.sqrt(160)], [12, 12]], rtol=1e-6)


def test_l2_against_pytorch():
    """PyTorch's lp_pool2d with p = 2 (no padding; floor rounding: its ceil
    windows divide by a clipped count)."""
    torch = pytest.importorskip("torch")
    x = random((2, 9, 10, 11), 45)
    for kernel, stride in [(2, 2), (3, 1), (3, 2)]:
        want = torch.nn.functional.lp_pool2d(torch.from_numpy(x), 2, kernel, stride).numpy()
        for kind in ("plain", "nChw8c"):
            got = jitnn.l2_pool2d(make(x, kind), kernel, strides=stride).numpy()
            assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_l2_wpt_cases():
    """WebNN's l2Pool2d vectors: every case passes but the two whose expected
    values WPT got wrong: in the 3 x 3 outputs of 5 x 5 planes (window 3,
    strides 2, padding [1, 0, 0, 1], ceil), the four corner windows of the
    last column (clipped on both axes) hold the sum of the squares without
    the root. jitnn gives the roots, as its reference does."""
    if not (wpt.DATA / "wpt_l2_pool2d.json").exists():
        pytest.skip("tests/data/wpt/wpt_l2_pool2d.json is not in this tree")
    wrong = {"l2Pool2d float32 4D tensor options.roundingType=ceil",
             "l2Pool2d float32 4D tensor options.outputSizes ignores options.roundingType=floor"}
    names = set()
    for name, arrays, operator, want in wpt.float32_cases("wpt_l2_pool2d.json"):
        names.add(name)
        positional, options = wpt.arguments(operator, arrays)
        options = {re.sub(r"(?<!^)(?=[A-Z])", "_", k).lower(): v for k, v in options.items()}
        got = jitnn.l2_pool2d(*positional, **options).numpy()
        assert got.shape == want.shape, name
        assert_close(got, l2_pool2d_reference(*positional, **options), rtol=1e-5)
        if name not in wrong:
            assert_close(got, want, rtol=1e-5)
            continue
        bad = ~np.isclose(got, want, rtol=1e-5)
        assert got.shape == (1, 2, 3, 3) and bad.sum() == 4 and bad[:, :, [0, 2], 2].all()
        assert_close(got[bad] ** 2, want[bad], rtol=1e-5)      # WPT's: the squares' sum
    assert wrong <= names and len(names) == 14


@pytest.mark.parametrize("block, threads", per_block_and_threads())
def test_replayed_blocked_pools_are_bound_calls_into_plan_buffers(threads, block):
    """conv -> max pool -> conv -> global average pool -> conv, computed again
    on new inputs: both pools run as bound calls writing the plan's buffers,
    with the references' numbers at every run."""
    ctx = jitnn.Context(num_threads=threads, block=block)
    w1, w2 = random((17, 5, 1, 1), 70, 0.3), random((9, 17, 1, 1), 71, 0.3)
    w3 = random((3, 9, 1, 1), 72, 0.3)
    b = jitnn.GraphBuilder(ctx)
    y = b.conv2d(b.input("x", (2, 5, 11, 9)), b.constant(w1))
    y = b.max_pool2d(y, (3, 3), strides=2, padding=1)
    y = b.global_average_pool2d(b.conv2d(y, b.constant(w2)))
    graph = b.build({"y": b.conv2d(y, b.constant(w3))})
    conv = reference("conv2d")
    out = np.empty((2, 3, 1, 1), np.float32)
    for seed in range(3):
        x = random((2, 5, 11, 9), 73 + seed)
        ctx.compute(graph, {"x": x}, {"y": out})
        pooled = max_pool2d_reference(conv(x, w1), (3, 3), strides=2, padding=1)
        want = conv(global_average_pool2d_reference(conv(pooled, w2)), w3)
        assert_close(out, want, tol=1e-5)
    (program,) = graph._programs
    kinds = [(c.node.kind, bool(bound), bool(c.step.buffer)) for c, bound in
             zip(program.steps, program.bindings.steps) if c.step.kind == "op"]
    assert kinds.count(("pool_blocked", True, True)) == 2, kinds


@pytest.mark.parametrize("op", ["max_pool2d", "average_pool2d", "l2_pool2d"])
def test_a_large_plain_input_pools_through_the_blocked_layout(op):
    """A plain NCHW input of 16384 elements or more (PoolFormer's token
    mixer after its group norm) is pooled on blocked data and converted back:
    the reference's values, still plain, odd channels and sizes, two images."""
    x = random((2, 17, 23, 21), 4)
    options = {"strides": 1, "padding": 1}
    for extra in ({}, {"count_include_pad": True}) if op == "average_pool2d" else ({},):
        got = getattr(jitnn, op)(jitnn.tensor(x), (3, 3), **options, **extra)
        assert got.layout == "nchw"
        want = reference(op)(x, (3, 3), **options, **extra)
        assert_close(got.numpy(), want, rtol=1e-5, atol=1e-5)
