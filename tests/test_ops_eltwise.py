"""The elementwise ops and batch_normalization: values against the float64
references on plain and blocked inputs (blocks 4, 8, 16; C not a block
multiple), broadcasting paths, layouts kept, padding lanes zero, reorders
counted, errors raised before anything runs."""

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from jitnn.ops.eltwise import binary_reference, unary_reference
from jitnn.ops.normalization import batch_normalization_reference
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, random)

BINARY = ["add", "sub", "mul", "div", "maximum", "minimum"]


# --- unary ---------------------------------------------------------------------------

UNARY = [("relu", {}), ("clamp", {"min_value": -0.5, "max_value": 1.5}),
         ("clamp", {"min_value": 0.25}), ("clamp", {}), ("sigmoid", {}), ("tanh", {}),
         ("leaky_relu", {}), ("leaky_relu", {"alpha": 0.3}), ("hard_swish", {}), ("gelu", {}),
         ("gelu", {"approximate": "tanh"})]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 8, 9, 17, 64])
@pytest.mark.parametrize("op,options", UNARY, ids=lambda v: str(v))
def test_unary_against_reference(op, options, channels, kind):
    x = random((2, channels, 5, 7), channels, scale=3.0)
    t = make(x, kind)
    y = getattr(jitnn, op)(t, **options)
    assert y.pending and y.shape == x.shape and y.layout == t.layout
    assert_close(y.numpy(), unary_reference(op, x, **options), rtol=1e-5)
    if kind != "plain":
        assert_padding_lanes_zero(y)    # sigmoid(0) = 0.5, clamp(0, 0.25) = 0.25 must not leak


def _with_specials(x):
    """``x`` with NaN, +-inf and values near float32's limits in every channel."""
    x = x.copy()
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    specials = np.array([np.nan, np.inf, -np.inf, 3e38, -3e38, 1e-40, -0.0], np.float32)
    flat[:, :, :specials.size] = specials
    return x


@pytest.mark.parametrize("policy", ["blocked", "plain", "eager"])
@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
@pytest.mark.parametrize("op,options", UNARY, ids=lambda v: str(v))
def test_unary_nan_and_inf_as_the_reference(op, options, kind, policy):
    """NaN in, NaN out (relu(NaN) once gave 0 alone and NaN fused), inf and
    huge values as the float64 reference (hard_swish(3e38) once overflowed)."""
    x = _with_specials(random((2, 9, 3, 5), 7, scale=3.0))
    ctx = jitnn.Context(policy=policy)
    t = ctx.tensor(x) if kind == "plain" else jitnn.reorder(ctx.tensor(x), "nChw8c")
    with np.errstate(all="ignore"):
        want = unary_reference(op, x, **options)
        got = getattr(jitnn, op)(t, **options).numpy()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
        assert_close(got, want, rtol=1e-5)


@pytest.mark.parametrize("policy", ["blocked", "plain", "eager"])
@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_and_minimum_carry_nan_from_either_side(op, policy):
    ctx = jitnn.Context(policy=policy)
    a = _with_specials(random((2, 9, 3, 5), 8))
    b = random((2, 9, 3, 5), 9)
    for left, right in ((a, b), (b, a)):
        for operand in (right, right[0, :, 0, 0].reshape(9, 1, 1)):   # same shape, per channel
            want = binary_reference(op, left, operand)
            got = getattr(jitnn, op)(jitnn.reorder(ctx.tensor(left), "nChw8c"), operand)
            assert_close(got.numpy(), want)
            assert_close(getattr(jitnn, op)(ctx.tensor(left), operand).numpy(), want)


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (2, 3, 4, 5, 2), (0, 3)])
def test_unary_plain_any_rank(shape):
    x = random(shape, 1, scale=3.0)
    y = jitnn.hard_swish(x)
    assert y.layout == layouts.plain_tag(len(shape))
    assert_close(y.numpy(), unary_reference("hard_swish", x))


def test_unary_large_parallel_and_nhwc_blocked():
    x = random((2, 17, 33, 35), 2, scale=2.0)
    assert_close(jitnn.gelu(make(x, "nChw8c")).numpy(), unary_reference("gelu", x), rtol=1e-5)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    t = make(nhwc, "block4", axes="nhwc")
    y = jitnn.sigmoid(t)
    assert y.layout == "nChw4c" and y._axes == "nhwc"
    assert_close(y.numpy(), unary_reference("sigmoid", nhwc))
    assert_padding_lanes_zero(y)


def test_unary_chain_stays_blocked_without_reorders():
    ctx = jitnn.Context(block=8)
    x = random((2, 9, 5, 5), 3)
    t = jitnn.reorder(ctx.tensor(x), "nChw8c")
    t._materialize()
    y = jitnn.tanh(jitnn.clamp(jitnn.relu(t), max_value=0.5))
    with assert_schedule(ctx, kernels=1, reorders=0, fused=2):    # the chain as one pass
        y._materialize()
    assert y.layout == "nChw8c"
    want = np.tanh(np.clip(x.astype(np.float64), 0, 0.5))
    assert_close(y.numpy(), want)


def test_unary_chain_under_the_eager_policy_runs_op_by_op():
    ctx = jitnn.Context(block=8, policy="eager")
    x = random((2, 9, 5, 5), 3)
    t = jitnn.reorder(ctx.tensor(x), "nChw8c")
    with assert_schedule(ctx, kernels=3, fused=0):
        y = jitnn.tanh(jitnn.clamp(jitnn.relu(t), max_value=0.5))
    assert not y.pending                      # ran at the call
    assert_close(y.numpy(), np.tanh(np.clip(x.astype(np.float64), 0, 0.5)))


def test_unary_errors():
    x = jitnn.tensor(random((1, 3, 2, 2)))
    with pytest.raises(jitnn.JitnnValueError, match=r"clamp: min_value must be <= max_value"):
        jitnn.clamp(x, 2.0, 1.0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"clamp: max_value must be a number"):
        jitnn.clamp(x, 0.0, "6")
    with pytest.raises(jitnn.JitnnValueError, match=r"clamp: min_value must be <= max_value"):
        jitnn.clamp(x, np.inf, 1.0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"leaky_relu: alpha must be a number"):
        jitnn.leaky_relu(x, alpha=None)
    with pytest.raises(jitnn.JitnnTypeError, match=r"relu: x"):
        jitnn.relu("not an array")
    with pytest.raises(jitnn.JitnnValueError, match=r"gelu: approximate must be one of "
                       r"\('none', 'tanh'\), got 'erf'"):
        jitnn.gelu(x, approximate="erf")
    with pytest.raises(TypeError):
        jitnn.sigmoid(np.array([1 + 2j]))


# --- binary ----------------------------------------------------------------------------

def _operands(n, c, h, w):
    """(name, operand shape or 'scalar') pairs covering every lowering path."""
    return [("same", (n, c, h, w)), ("channel", (1, c, 1, 1)), ("channel3d", (c, 1, 1)),
            ("n_c", (n, c, 1, 1)), ("n_only", (n, 1, 1, 1)), ("size1", (1, 1, 1, 1)),
            ("rank1", (1,)), ("zero_d", ()), ("scalar", "scalar"), ("spatial", (1, 1, h, w)),
            ("rows", (n, 1, h, 1)), ("last", (w,))]


def _operand_value(shape, seed):
    if shape == "scalar":
        return 1.75
    # away from 0 so division stays well conditioned
    v = random(shape, seed)
    return (np.sign(v) + (v == 0) + v).astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [3, 8, 17])
def test_binary_every_operand_form(kind, channels):
    n, h, w = 2, 5, 7
    x = random((n, channels, h, w), 4)
    t = make(x, kind)
    for name, shape in _operands(n, channels, h, w):
        y = _operand_value(shape, 5)
        for op in BINARY:
            for left, right, lv, rv in ((t, y, x, y), (y, t, y, x)):
                got = getattr(jitnn, op)(left, right)
                assert got.pending and got.shape == x.shape, (name, op)
                assert got.layout == expected_layout(kind), (name, op, got.layout)
                assert_close(got.numpy(), binary_reference(op, lv, rv), rtol=1e-6, atol=1e-6)
                if kind != "plain":
                    assert_padding_lanes_zero(got)


@pytest.mark.parametrize("kind", KINDS)
def test_binary_blocked_operands(kind):
    """Blocked second operands: same block, another block, a global pool's (N, C, 1, 1)."""
    n, c, h, w = 2, 9, 3, 5
    x, y = random((n, c, h, w), 6), random((n, c, h, w), 7)
    pooled = y.mean(axis=(2, 3), keepdims=True)
    t = make(x, kind)
    ctx = t.context
    for other_layout in ("nChw4c", "nChw8c", "nChw16c"):
        other = jitnn.reorder(ctx.tensor(y), other_layout)
        got = jitnn.mul(t, other)
        want_layout = expected_layout(kind) if kind != "plain" else other_layout
        assert got.layout == want_layout
        assert_close(got.numpy(), binary_reference("mul", x, y))
        p = jitnn.global_average_pool2d(other)
        got = jitnn.mul(t, p)
        assert got.layout == expected_layout(kind)
        assert_close(got.numpy(), binary_reference("mul", x, pooled), rtol=1e-5)
        got = jitnn.sub(p, t)
        assert_close(got.numpy(), binary_reference("sub", pooled, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((4, 300), (300,)),                   # FC bias: one-element planes, materialized
    ((2, 6, 24, 24), (2, 6, 1, 1)),       # per-(n, c), long planes: lanes
    ((2, 6, 24, 24), (6, 1, 1)),          # per-channel, long planes: lanes
    ((2, 3, 4, 600), (1, 3, 4, 1)),       # a run of two axes, long planes: lanes
    ((2, 6, 3, 3), (1, 6, 1, 1)),         # short planes: materialized
    ((3, 1, 4, 5), (1, 6, 1, 1)),         # both broadcast
    ((6, 1, 1), (2, 1, 4, 5)),            # both broadcast, reversed ranks
    ((2, 3, 4, 5, 6), (3, 1, 1, 6)),      # rank 5
    ((2, 3, 4), (4,)), ((7,), ()), ((), ()), ((0, 3), (3,)),
])
@pytest.mark.parametrize("op", BINARY)
def test_binary_plain_broadcasting(op, a_shape, b_shape):
    a, b = _operand_value(a_shape, 8), _operand_value(b_shape, 9)
    got = getattr(jitnn, op)(a, b)
    want = binary_reference(op, a, b)
    assert got.layout == layouts.plain_tag(want.ndim)
    assert_close(got.numpy(), want)


def test_plain_broadcast_split():
    """Which plain operands run as per-channel lanes of an (outer, run, inner) view."""
    from jitnn.ops.eltwise import _varying_run
    assert _varying_run((6, 1, 1), (2, 6, 24, 24)) == (2, 6, 576)
    assert _varying_run((2, 6, 1, 1), (2, 6, 24, 24)) == (1, 12, 576)
    assert _varying_run((1, 3, 4, 1), (2, 3, 4, 600)) == (2, 12, 600)
    assert _varying_run((300,), (4, 300)) == (4, 300, 1)
    assert _varying_run((2, 1, 4, 1), (2, 3, 4, 5)) is None       # two runs: materialized
    assert _varying_run((1, 1), (3, 4)) is None


def test_binary_large_parallel():
    x, y = random((2, 17, 33, 35), 10), random((17, 1, 1), 11)
    for kind in ("plain", "nChw8c"):
        assert_close(jitnn.add(make(x, kind), y).numpy(), binary_reference("add", x, y))
        assert_close(jitnn.maximum(make(x, kind), make(x[::-1].copy(), kind)).numpy(),
                     np.maximum(x, x[::-1]))


def test_nhwc_blocked_broadcasts_along_its_channel_axis():
    x = random((2, 5, 7, 9), 12)                      # (N, H, W, C)
    t = make(x, "nChw8c", axes="nhwc")
    for shape in [(9,), (1, 1, 1, 9), (2, 1, 1, 9), (5, 7, 1), (2, 5, 7, 9)]:
        y = _operand_value(shape, 13)
        got = jitnn.div(t, y)
        assert got.layout == "nChw8c" and got._axes == "nhwc"
        assert_close(got.numpy(), binary_reference("div", x, y))
        assert_padding_lanes_zero(got)


def test_padding_lanes_stay_zero_when_ops_make_them_nonzero():
    x = random((2, 7, 3, 3), 14)
    t = make(x, "nChw8c")
    bias = np.arange(1, 8, dtype=np.float32).reshape(1, 7, 1, 1)
    for got in (jitnn.add(t, bias), jitnn.sub(1.0, t), jitnn.div(t, jitnn.mul(t, 0.0)),
                jitnn.maximum(t, 2.0), jitnn.add(t, np.full((1, 1, 3, 3), 5, np.float32))):
        assert got.layout == "nChw8c"
        assert_padding_lanes_zero(got)
    zero = jitnn.div(jitnn.mul(t, 0.0), jitnn.mul(t, 0.0)).numpy()
    assert np.isnan(zero).all()                        # 0 / 0 in the real lanes


def test_reorders_counted_and_done_once():
    ctx = jitnn.Context(block=8)
    x, y = random((2, 9, 4, 4), 15), random((2, 9, 4, 4), 16)
    t = jitnn.reorder(ctx.tensor(x), "nChw8c")
    plain_y = ctx.tensor(y)
    blocked_y = jitnn.reorder(ctx.tensor(y), "nChw8c")
    t._materialize(), blocked_y._materialize()
    with assert_schedule(ctx, kernels=3, reorders=0):
        jitnn.add(t, blocked_y)._materialize()             # same layout: no reorder
        jitnn.add(t, y[:1, :, :1, :1])._materialize()      # per-(n, c) from plain: no reorder
        jitnn.add(t, 2.0)._materialize()
    with assert_schedule(ctx, kernels=0, reorders=0):      # pending: nothing runs yet
        first = jitnn.add(t, plain_y)
        second = jitnn.sub(plain_y, t)
    before = ctx.stats.reorder_bytes
    with assert_schedule(ctx, reorders=1):                 # plain_y reordered once, then reused
        first._materialize(), second._materialize()
    assert ctx.stats.reorder_bytes - before == 2 * 2 * 4 * 4 * 8 * 4
    assert_close(second.numpy(), y - x)
    with assert_schedule(ctx, reorders=0):                 # plain + plain: plain, no reorder
        jitnn.add(ctx.tensor(x), ctx.tensor(y))._materialize()


def test_binary_errors_raise_before_anything_runs():
    ctx = jitnn.Context()
    x = jitnn.reorder(ctx.tensor(random((2, 3, 4, 5))), "nChw8c")
    x._materialize()
    with assert_schedule(ctx, kernels=0, reorders=0):
        with pytest.raises(jitnn.JitnnValueError, match=r"add: the shapes do not broadcast "
                           r".* a \(2, 3, 4, 5\), b \(2, 4, 4, 5\)"):
            jitnn.add(x, np.ones((2, 4, 4, 5), np.float32))
        with pytest.raises(ValueError, match=r"minimum: the shapes do not broadcast .* b \(3,\)"):
            jitnn.minimum(x, np.ones(3, np.float32))
        with pytest.raises(jitnn.JitnnTypeError, match=r"mul: b"):
            jitnn.mul(x, "two")
        with pytest.raises(jitnn.JitnnTypeError, match=r"div: a"):
            jitnn.div([[1, 2], [3]], 2.0)
        with pytest.raises(jitnn.JitnnValueError,
                           match=r"sub: the tensors belong to different contexts"):
            jitnn.sub(x, jitnn.Context().tensor(np.ones(1)))


def test_scalars_and_numpy_numbers():
    got = jitnn.add(2, np.float32(0.5))
    assert got.shape == () and got.numpy() == 2.5
    assert_close(jitnn.maximum(np.float64(0.25), jitnn.tensor([0.0, 1.0])).numpy(),
                 np.array([0.25, 1.0]))


# --- batch normalization ----------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 8, 9, 17, 64])
def test_batch_normalization(kind, channels):
    x = random((2, channels, 5, 3), 20)
    mean, scale, bias = random((channels,), 21), random((channels,), 22), random((channels,), 23)
    variance = np.abs(random((channels,), 24)) + 0.1
    t = make(x, kind)
    for options in ({}, {"scale": scale}, {"scale": scale, "bias": bias, "epsilon": 1e-3},
                    {"bias": bias, "activation": "relu"},
                    {"scale": scale, "bias": bias, "activation": ("clamp", 0.1, 0.6)}):
        got = jitnn.batch_normalization(t, mean, variance, **options)
        assert got.pending and got.layout == t.layout
        want = batch_normalization_reference(x, mean, variance, **options)
        assert_close(got.numpy(), want, rtol=1e-5, atol=1e-5)
        if kind != "plain":
            assert_padding_lanes_zero(got)             # the folded bias is not 0 there


def test_batch_normalization_axes_and_ranks():
    rng = np.random.default_rng(25)
    for shape, axis, kind, layout in [((2, 5, 7, 9), 3, "nhwc", "nChw8c"),
                                      ((2, 9, 5, 7), 2, "nchw", "nchw"),   # blocked, not channels
                                      ((4, 11), 1, "plain", "nc"), ((4, 11), -1, "plain", "nc"),
                                      ((3, 6, 10), 1, "plain", "ncw"), ((6,), 0, "plain", "x"),
                                      # BatchNorm1d of tokens (numpy's broadcast), and a
                                      # plain image with planes of 289 (the kernel's)
                                      ((197, 17), 1, "plain", "nc"),
                                      ((2, 3, 17, 17), 1, "plain", "nchw")]:
        x = rng.standard_normal(shape).astype(np.float32)
        c = shape[axis]
        mean, var = rng.standard_normal(c), rng.random(c) + 0.5
        scale, bias = rng.standard_normal(c), rng.standard_normal(c)
        t = jitnn.tensor(x) if kind == "plain" else make(x, "nChw8c", axes=kind)
        got = jitnn.batch_normalization(t, mean, var, scale, bias, axis=axis, activation="sigmoid")
        assert got.layout == layout
        want = batch_normalization_reference(x, mean, var, scale, bias, axis=axis,
                                             activation="sigmoid")
        assert_close(got.numpy(), want, rtol=1e-5, atol=1e-6)


def test_batch_normalization_errors():
    x = jitnn.tensor(random((2, 3, 4, 4)))
    ones = np.ones(3, np.float32)
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"batch_normalization: variance must have shape \(3,\) .* got \(4,\)"):
        jitnn.batch_normalization(x, ones, np.ones(4))
    with pytest.raises(jitnn.JitnnValueError, match=r"batch_normalization: scale must have shape"):
        jitnn.batch_normalization(x, ones, ones, np.ones((3, 1)))
    with pytest.raises(jitnn.JitnnValueError, match=r"axis must be in \[-4, 3\] .* got 4"):
        jitnn.batch_normalization(x, ones, ones, axis=4)
    with pytest.raises(jitnn.JitnnTypeError, match=r"axis must be an int"):
        jitnn.batch_normalization(x, ones, ones, axis=1.0)
    with pytest.raises(jitnn.JitnnValueError, match=r"epsilon must be a number >= 0"):
        jitnn.batch_normalization(x, ones, ones, epsilon=-1)
    with pytest.raises(jitnn.JitnnValueError, match=r"batch_normalization: activation"):
        jitnn.batch_normalization(x, ones, ones, activation="swish")
    with pytest.raises(jitnn.JitnnValueError, match=r"rank >= 1"):
        jitnn.batch_normalization(np.float32(1), ones[:1], ones[:1])


# --- integer types ----------------------------------------------------------------------

INTEGER_DTYPES = [np.int8, np.int32, np.int64, np.uint8, np.uint32]


def _integers(dtype, shape, seed, nonzero=False):
    """Values across the type's range, its ends included."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    values = rng.integers(max(info.min, -1000), min(info.max, 1000), shape, endpoint=True)
    values = values.astype(dtype)
    values.reshape(-1)[:2] = [info.min, info.max]
    if nonzero:
        values[values == 0] = 1
    return values


@pytest.mark.parametrize("dtype", INTEGER_DTYPES)
@pytest.mark.parametrize("op", BINARY)
def test_integer_binary_ops(op, dtype):
    """In the operands' own type (plain, wrapping on overflow), broadcasting
    both ways, Python ints as that type."""
    a, b = _integers(dtype, (2, 3, 4, 5), 1), _integers(dtype, (2, 3, 4, 5), 2, nonzero=True)
    got = getattr(jitnn, op)(jitnn.tensor(a), jitnn.tensor(b))
    assert got.dtype == dtype and got.layout == "nchw" and got.shape == a.shape
    want = binary_reference(op, a, b)
    assert want.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), want)
    column, row = a[0, :, :1, 0], b[0, 0, 0]                  # (3, 1) and (5,)
    np.testing.assert_array_equal(getattr(jitnn, op)(column, jitnn.tensor(row)).numpy(),
                                  binary_reference(op, column, row))
    np.testing.assert_array_equal(getattr(jitnn, op)(jitnn.tensor(a), 3).numpy(),
                                  binary_reference(op, a, np.array(3, dtype)))


def test_integer_semantics_by_example():
    """WebNN's integer div truncates toward zero; x / 0 is 0 (WebNN leaves it
    undefined); sums wrap around (WebNN's int8 and uint8 vectors)."""
    i32 = jitnn.tensor(np.int32([7, -7, 7, -7, 5, 0, -2**31, 9]))
    got = jitnn.div(i32, jitnn.tensor(np.int32([2, 2, -2, -2, 0, 0, -1, 3]))).numpy()
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 0, 0, -2**31, 3])
    np.testing.assert_array_equal(jitnn.div(jitnn.tensor(np.uint8([200, 7])), 3).numpy(),
                                  [66, 2])
    np.testing.assert_array_equal(
        jitnn.sub(jitnn.tensor(np.uint8([1, 10, 100, 255])),
                  jitnn.tensor(np.uint8([1, 8, 88, 254]))).numpy(), [0, 2, 12, 1])
    np.testing.assert_array_equal(jitnn.sub(jitnn.tensor(np.uint8([0])), 1).numpy(), [255])
    np.testing.assert_array_equal(
        jitnn.add(jitnn.tensor(np.int8([127, -52])), jitnn.tensor(np.int8([1, -76]))).numpy(),
        [-128, -128])
    np.testing.assert_array_equal(
        jitnn.mul(jitnn.tensor(np.int64([2**62])), 4).numpy(), [0])


def test_host_data_takes_the_tensor_s_type():
    """With a tensor operand, host data converts to its type (integers must
    be integers of its range); without one, integer arrays of one type keep
    it and the rest is float32."""
    i8 = jitnn.tensor(np.int8([1, 2, 3]))
    assert jitnn.add(i8, [1, 2, 3]).dtype == np.int8
    assert jitnn.add(i8, 2.0).numpy().tolist() == [3, 4, 5]
    assert jitnn.maximum([1, 2, 3], i8).dtype == np.int8
    with pytest.raises(jitnn.JitnnTypeError, match=r"add: b must hold integers of int8's range"):
        jitnn.add(i8, 300)
    with pytest.raises(jitnn.JitnnTypeError, match=r"sub: b must hold integers of int8's range"):
        jitnn.sub(i8, [0.5, 1, 2])
    f32 = jitnn.tensor(np.float32([1, 2, 3]))
    assert jitnn.add(f32, np.int64([1, 2, 3])).dtype == np.float32
    assert jitnn.add(np.int32([1, 2]), np.int32([3, 4])).dtype == np.int32
    assert jitnn.add(np.int32([1, 2]), 1).dtype == np.int32
    assert jitnn.add(np.int32([1, 2]), 0.5).dtype == np.float32
    assert jitnn.add(np.int32([1, 2]), np.int64([3, 4])).dtype == np.float32
    assert jitnn.add(2, 3).dtype == np.float32
    host = np.int8([1, 1, 1])
    pending = jitnn.mul(i8, host)
    host[:] = 7                                    # copied at the call, as jitnn.tensor does
    assert pending.numpy().tolist() == [1, 2, 3]


def test_mixed_types_are_refused_at_the_call():
    ctx = jitnn.Context()
    f32 = ctx.tensor(np.ones((2, 3), np.float32))
    i32 = ctx.tensor(np.ones((2, 3), np.int32))
    with assert_schedule(ctx, kernels=0, reorders=0):
        for op in BINARY:
            with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: a and b must have the same "
                               r"dtype, got float32 and int32 \(convert one with jitnn.cast\)"):
                getattr(jitnn, op)(f32, i32)
        with pytest.raises(jitnn.JitnnValueError, match=r"add: the shapes do not broadcast .*"
                           r"\(2, 3\), \(4,\)"):
            jitnn.add(i32, ctx.tensor(np.ones(4, np.int32)))
    b = jitnn.GraphBuilder(ctx)
    with pytest.raises(jitnn.JitnnTypeError, match=r"mul: a and b must have the same dtype"):
        b.mul(b.input("a", (2,), dtype="int64"), b.input("b", (2,), dtype="int32"))


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_relu_and_clamp(dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, -4, -2, 0, 1, 2, 4, info.max], dtype)
    relu = jitnn.relu(jitnn.tensor(x))
    assert relu.dtype == dtype
    np.testing.assert_array_equal(relu.numpy(), np.maximum(x, 0))
    clamped = jitnn.clamp(jitnn.tensor(x), min_value=-2.5, max_value=4.7)   # -2 .. 4
    np.testing.assert_array_equal(clamped.numpy(), [-2, -2, -2, 0, 1, 2, 4, 4])
    np.testing.assert_array_equal(clamped.numpy(), unary_reference(
        "clamp", x, min_value=-2.5, max_value=4.7))
    np.testing.assert_array_equal(jitnn.clamp(jitnn.tensor(x)).numpy(), x)  # -inf, inf


def test_integer_clamp_bounds_exact_and_refused():
    big = np.int64([2**53 + 1, 2**53 + 3, -5])
    np.testing.assert_array_equal(jitnn.clamp(big, max_value=2**53 + 2).numpy(),
                                  [2**53 + 1, 2**53 + 2, -5])                # an int taken exactly
    np.testing.assert_array_equal(jitnn.clamp(np.uint8([255, 127, 5, 0]), 5, 200).numpy(),
                                  [200, 127, 5, 5])
    np.testing.assert_array_equal(jitnn.clamp(np.uint32([7, 0]), -3, 2**40).numpy(), [7, 0])
    with pytest.raises(jitnn.JitnnValueError, match=r"clamp: no int32 value lies between"):
        jitnn.clamp(np.int32([1, 2]), 2.2, 2.8)
    with pytest.raises(jitnn.JitnnTypeError, match=r"relu: x must have dtype float32, int8, "
                       r"int32 or int64, got a uint8 tensor"):
        jitnn.relu(jitnn.tensor(np.uint8([1])))


@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
def test_clamp_nan_bound_is_no_bound(kind):
    """IEEE's maxNum and minNum ignore a NaN operand; WebNN's vectors expect
    a NaN bound to clamp nothing."""
    x = _with_specials(random((2, 9, 3, 5), 30, scale=3.0))
    t = make(x, kind)
    assert_close(jitnn.clamp(t, float("nan"), 1.0).numpy(), unary_reference(
        "clamp", x, max_value=1.0))
    assert_close(jitnn.clamp(t, -1.0, float("nan")).numpy(), unary_reference(
        "clamp", x, min_value=-1.0))
    assert_close(jitnn.clamp(t, np.nan, np.nan).numpy(), x)


@pytest.mark.parametrize("op", ["sub", "div", "mul"])
def test_plain_chain_merges_into_a_binary_op_that_reads_it_second(op):
    """``u op chain`` with ``u`` the op's main input (kept, so it does not merge
    itself): the chain merges through the op's second input, the op's operands
    swapped and its reverse flag flipped (Llama's ``silu(gate) * up``)."""
    ctx = jitnn.Context()
    x_np, y_np = random((5, 7), 45), random((5, 7), 46)
    u = jitnn.relu(ctx.tensor(y_np))                    # kept by the caller
    # the chain is not held (a handle would keep its value)
    out = getattr(jitnn, op)(u, jitnn.add(jitnn.sigmoid(jitnn.relu(ctx.tensor(x_np))), 0.5))
    assert "relu + sigmoid + add + " + op in jitnn.explain(out)
    with assert_schedule(ctx, kernels=2, fused=3):
        got, got_u = jitnn.read_all([out, u])
    want_u = np.maximum(y_np.astype(np.float64), 0.0)
    want_chain = 1.0 / (1.0 + np.exp(-np.maximum(x_np.astype(np.float64), 0.0))) + 0.5
    want = {"sub": np.subtract, "div": np.divide, "mul": np.multiply}[op](want_u, want_chain)
    assert np.array_equal(got_u, want_u.astype(np.float32))
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


@pytest.mark.parametrize("x_first", [True, False])
def test_plain_sigmoid_times_its_input_is_one_silu_step(x_first):
    """``x * sigmoid(x) * up`` on plain data (SiLU as exported, Llama's gated
    MLP): one pass whose first step is SiLU, reading x once, with the float64
    reference's numbers (large |x| too, where the sigmoid underflows)."""
    from jitnn.kernels import epilogue
    from jitnn.scheduler import schedule
    ctx = jitnn.Context()
    x_np, up_np = random((6, 11), 47, 40.0), random((6, 11), 48)
    x, up = ctx.tensor(x_np), ctx.tensor(up_np)
    gate = jitnn.sigmoid(x)
    out = jitnn.mul(jitnn.mul(x, gate) if x_first else jitnn.mul(gate, x), up)
    del gate
    steps = [s for s in schedule(ctx, [out._v]).steps if s.kind == "op"]
    assert len(steps) == 1 and steps[0].node.attrs["steps"][0][:2] == ("activation",
                                                                        epilogue.SILU)
    assert sum(1 for t in steps[0].node.inputs if t is x._v) == 1
    want = x_np.astype(np.float64) / (1.0 + np.exp(-x_np.astype(np.float64))) * up_np
    got = out.numpy()
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()


def test_replayed_plain_chains_are_bound_calls():
    """A plain element-wise chain on values the plan computes (two products
    multiplied, plus one, ReLU), computed again on new inputs, runs as one
    bound call with the reference's numbers at every run; so does one that
    reads a graph input as its main operand and as its second one (the
    caller's array, another one at each run, put in both places)."""
    ctx = jitnn.Context(num_threads=1)
    w1, w2 = random((72, 100), 90, 0.1), random((72, 100), 91, 0.1)   # packed products
    b = jitnn.GraphBuilder(ctx)
    x_in = b.input("x", (48, 72))
    fused = b.relu(b.add(b.mul(b.matmul(x_in, b.constant(w1)), b.matmul(x_in, b.constant(w2))),
                         1.0))
    graph = b.build({"fused": fused, "own": b.add(b.mul(x_in, 2.0), x_in)})
    outs = {"fused": np.empty((48, 100), np.float32), "own": np.empty((48, 72), np.float32)}
    for seed in range(3):
        x = random((48, 72), 92 + seed)
        ctx.compute(graph, {"x": x}, outs)
        x64 = x.astype(np.float64)
        assert_close(outs["fused"], np.maximum((x64 @ w1) * (x64 @ w2) + 1.0, 0.0), tol=1e-5)
        assert_close(outs["own"], 3.0 * x64, tol=1e-6)
    (program,) = graph._programs
    bound = [(c_.step.label, bool(binding)) for c_, binding in
             zip(program.steps, program.bindings.steps)
             if c_.step.kind == "op" and c_.node.kind == "eltwise_plain"]
    assert sorted(bound) == [("mul + add", True), ("mul + add + relu", True)], bound


def test_a_plain_batch_normalization_is_one_bound_call_in_a_replay():
    """BatchNorm1d of tokens (LeViT's, after each linear layer), statistics
    as constants: the row kernel writes into the plan's buffer and a replay
    binds it; every run's numbers are the float64 reference's."""
    rng = np.random.default_rng(30)
    c = 17
    stats = [rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32),
             rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)]
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (49, c))
    y = b.batch_normalization(b.relu(x), *(b.constant(s) for s in stats),
                              activation="hard_swish")
    graph = b.build({"y": y})
    for seed in range(3):
        xs = random((49, c), seed)
        outs = {"y": np.full((49, c), np.nan, np.float32)}
        ctx.compute(graph, {"x": xs}, outs)
        want = batch_normalization_reference(np.maximum(xs, 0), *stats, activation="hard_swish")
        assert_close(outs["y"], want, rtol=1e-5, atol=1e-6)
    (program,) = graph._programs
    assert [bool(bound) for c_, bound in zip(program.steps, program.bindings.steps)
            if c_.step.label == "batch_normalization"] == [True]


def test_a_step_reading_a_reshaped_buffer_is_bound():
    """LeViT's linear layer: a product, a flatten of it (a view of the plan's
    buffer, the same view object at every run), a batch normalization of the
    view and a reshape back: the batch normalization reads the view and is
    bound; new inputs at every run give the reference's numbers."""
    rng = np.random.default_rng(31)
    w = (rng.standard_normal((32, 24)) * 0.2).astype(np.float32)
    stats = [rng.standard_normal(24).astype(np.float32), (rng.random(24) + 0.5).astype(np.float32)]
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 49, 32))
    # (as the ONNX frontend converts a linear layer of 3-D tokens: a 2-D product)
    product = b.reshape(b.matmul(b.reshape(x, (98, 32)), b.constant(w)), (2, 49, 24))
    h = b.flatten(product, 2)
    y = b.reshape(b.batch_normalization(h, *(b.constant(s) for s in stats)), (2, 49, 24))
    graph = b.build({"y": b.relu(y)})
    for seed in range(4):
        xs = random((2, 49, 32), seed)
        outs = {"y": np.full((2, 49, 24), np.nan, np.float32)}
        ctx.compute(graph, {"x": xs}, outs)
        product = (xs.astype(np.float64) @ w).reshape(98, 24)
        want = batch_normalization_reference(product, *stats).reshape(2, 49, 24)
        assert_close(outs["y"], np.maximum(want, 0), rtol=1e-5, atol=1e-5)
    (program,) = graph._programs
    bound = {c.step.label: bool(binding) for c, binding in
             zip(program.steps, program.bindings.steps)}
    assert bound["batch_normalization"]
    # one view kept per step, the same ones run after run (nothing accumulates)
    kept = len(program.bindings.stable)
    ctx.compute(graph, {"x": random((2, 49, 32), 9)}, outs)
    assert len(program.bindings.stable) == kept
    views = [v for v in program.bindings.step_views if v is not None]
    assert all(program.bindings.stable[id(v)] is v for v in views)
