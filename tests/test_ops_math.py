"""The element-wise math ops (jitnn/ops/math.py): every unary function and
activation, pow and prelu, against their float64 references on plain and
blocked inputs (blocks 4, 8, 16; C not a block multiple; N > 1), the
specials (NaN, +-inf, +-0, denormals), broadcasting, integer types where
WebNN takes them, fusion into the blocked element-wise chain, graphs, and
the errors raised at the call."""

import numpy as np
import pytest

import jitnn
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, other_blocks_slow, random, reference)

#: (op, options): every unary op, and the options it claims
UNARY = [("abs", {}), ("ceil", {}), ("floor", {}), ("round_even", {}), ("exp", {}),
         ("log", {}), ("neg", {}), ("sqrt", {}), ("erf", {}), ("reciprocal", {}),
         ("sin", {}), ("cos", {}), ("tan", {}), ("sign", {}), ("identity", {}),
         ("elu", {}), ("elu", {"alpha": 0.3}), ("softplus", {}), ("softsign", {}),
         ("hard_sigmoid", {}), ("hard_sigmoid", {"alpha": 0.5, "beta": -0.25}),
         ("linear", {}), ("linear", {"alpha": -2.0, "beta": 0.75})]

#: float32 in the last place: what each op may be off from the reference by
_RTOL = 4e-7


def _data(op, shape, seed):
    """Inputs in the op's domain where that matters (log and sqrt of
    positives: the NaNs are checked with the specials), halves included for
    the rounding ops."""
    x = random(shape, seed, scale=3.0)
    if op in ("log", "sqrt"):
        return np.abs(x) + np.float32(1e-3)
    if op in ("ceil", "floor", "round_even"):
        x.reshape(-1)[::5] = np.float32(np.round(x.reshape(-1)[::5]) + 0.5)
    return x


def _check(got, want):
    assert_close(got, want, rtol=_RTOL, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
@pytest.mark.parametrize("op,options", UNARY, ids=lambda v: str(v))
def test_unary_against_reference(op, options, channels, kind):
    x = _data(op, (2, channels, 5, 3), channels)
    t = make(x, kind)
    y = getattr(jitnn, op)(t, **options)
    assert y.pending and y.shape == x.shape and y.layout == t.layout
    assert y.layout == expected_layout(kind) and y.dtype == np.float32
    _check(y.numpy(), reference(op)(x, **options))
    if kind != "plain":
        assert_padding_lanes_zero(y)     # cos(0) = exp(0) = 1, log(0) = -inf, 1 / 0...


def _specials(shape, seed):
    """Random data with NaN, +-inf, +-0, denormals, huge and tiny values, and
    halves in every channel."""
    x = random(shape, seed, scale=4.0)
    flat = x.reshape(x.shape[0], x.shape[1], -1)
    specials = np.float32([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38,
                           1e-30, 2.5, -0.5, 1e7, -88.5, 89.0])
    flat[:, :, :specials.size] = specials
    return x


@pytest.mark.parametrize("policy", ["blocked", "plain", "eager"])
@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
@pytest.mark.parametrize("op,options", UNARY, ids=lambda v: str(v))
def test_unary_specials_as_the_reference(op, options, kind, policy):
    """NaN where the reference is NaN (NaN in gives NaN out; log and sqrt of
    negatives), the same infinities, and the other values within a few ulp."""
    x = _specials((2, 9, 4, 5), 7)
    ctx = jitnn.Context(policy=policy)
    t = ctx.tensor(x) if kind == "plain" else jitnn.reorder(ctx.tensor(x), "nChw8c")
    got = getattr(jitnn, op)(t, **options).numpy()
    want = reference(op)(x, **options)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    with np.errstate(over="ignore"):
        rounded = want.astype(np.float32)
    np.testing.assert_array_equal(got[np.isinf(rounded)], rounded[np.isinf(rounded)])
    finite = np.isfinite(rounded)
    assert_close(got[finite], want[finite], rtol=2e-6, atol=1e-30)


def test_unary_exact_values():
    """Values the definitions fix exactly: rounding halves to even, sign of 0,
    softsign at the infinities, the clamps of hard_sigmoid, elu's alpha."""
    x = np.float32([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0, np.inf, -np.inf])
    np.testing.assert_array_equal(jitnn.round_even(x).numpy(),
                                  [-2, -2, -0.0, 0, 2, 2, -0.0, 0, np.inf, -np.inf])
    np.testing.assert_array_equal(jitnn.ceil(x).numpy()[:6], [-2, -1, -0.0, 1, 2, 3])
    np.testing.assert_array_equal(jitnn.floor(x).numpy()[:6], [-3, -2, -1, 0, 1, 2])
    np.testing.assert_array_equal(jitnn.sign(x).numpy(), [-1, -1, -1, 1, 1, 1, 0, 0, 1, -1])
    np.testing.assert_array_equal(jitnn.softsign(x).numpy()[-2:], [1, -1])
    np.testing.assert_array_equal(jitnn.hard_sigmoid(x).numpy()[-2:], [1, 0])
    np.testing.assert_array_equal(jitnn.elu(x, alpha=2.0).numpy()[-2:], [np.inf, -2])
    np.testing.assert_array_equal(jitnn.exp(x).numpy()[-2:], [np.inf, 0])
    np.testing.assert_array_equal(jitnn.log(np.float32([0, -1, np.inf, 1])).numpy(),
                                  [-np.inf, np.nan, np.inf, 0])


@pytest.mark.parametrize("shape", [(), (5,), (3, 4), (2, 3, 4), (2, 3, 4, 5, 2), (0, 3)])
def test_unary_plain_any_rank(shape):
    x = random(shape, 1, scale=2.0)
    for op in ("erf", "softplus", "tan"):
        y = getattr(jitnn, op)(x)
        assert y.shape == shape
        _check(y.numpy(), reference(op)(x))


def test_large_parallel_blocked_and_nhwc():
    x = random((2, 17, 33, 35), 2, scale=2.0)
    _check(jitnn.sin(make(x, "nChw8c")).numpy(), reference("sin")(x))
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    y = jitnn.softplus(make(nhwc, "block16", axes="nhwc"))
    assert y.layout == "nChw16c" and y._axes == "nhwc"
    _check(y.numpy(), reference("softplus")(nhwc))
    assert_padding_lanes_zero(y)


# --- integer types -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
@pytest.mark.parametrize("op", ["abs", "neg", "sign", "identity"])
def test_signed_integer_ops(op, dtype):
    info = np.iinfo(dtype)
    x = np.array([info.min, info.min + 1, -7, -1, 0, 1, 7, info.max], dtype)
    got = getattr(jitnn, op)(jitnn.tensor(x))
    assert got.dtype == dtype and got.layout == "x"
    want = {"abs": np.abs(x), "neg": -x, "sign": np.sign(x), "identity": x}[op]
    np.testing.assert_array_equal(got.numpy(), want)               # abs(min) wraps to min
    np.testing.assert_array_equal(got.numpy(), reference(op)(x))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint32, np.int64])
def test_identity_keeps_every_type(dtype):
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    got = jitnn.identity(x)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), x)


def test_integer_tensors_are_refused_by_float_only_ops():
    ints = jitnn.tensor(np.arange(6, dtype=np.int32))
    for op in ("exp", "log", "sqrt", "erf", "sin", "ceil", "elu", "softplus", "hard_sigmoid"):
        with pytest.raises(jitnn.JitnnTypeError,
                           match=rf"{op}: x must have dtype float32, got a int32 tensor"):
            getattr(jitnn, op)(ints)
    for op in ("abs", "neg", "sign"):
        with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: x must have dtype float32, "
                           r"int8, int32 or int64, got a uint8 tensor"):
            getattr(jitnn, op)(jitnn.tensor(np.arange(3, dtype=np.uint8)))


# --- pow -------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0, -0.5, 0.0, 1.0, 4.0, -2.0, 1.75, -3.0])
def test_pow_by_a_number(exponent, kind):
    """A math step (exact products and sqrt, else libm) on every layout kind."""
    x = np.abs(random((2, 9, 4, 5), 3, scale=2.0)) + np.float32(0.05)
    x[0, 0, 0, :3] = [0.0, np.inf, np.nan]
    x[1] = -x[1]                                       # negative bases: NaN for 1.75
    t = make(x, kind)
    y = jitnn.pow(t, exponent)
    assert y.layout == t.layout
    with np.errstate(all="ignore"):
        want = reference("pow")(x, exponent)
    np.testing.assert_array_equal(np.isnan(y.numpy()), np.isnan(want))
    assert_close(y.numpy(), want, rtol=1e-6, atol=0)
    if kind != "plain":
        assert_padding_lanes_zero(y)                   # 0 ** 0 = 1, 0 ** -1 = inf


@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
def test_pow_by_tensors_with_broadcasting(kind):
    n, c, h, w = 2, 9, 3, 5
    x = np.abs(random((n, c, h, w), 4)) + np.float32(0.1)
    t = make(x, kind)
    for shape in [(n, c, h, w), (c, 1, 1), (1, c, 1, 1), (n, c, 1, 1), (w,), (1, 1, h, 1)]:
        e = random(shape, 5)
        got = jitnn.pow(t, e)
        assert got.layout == t.layout
        assert_close(got.numpy(), reference("pow")(x, e), rtol=1e-6)
        got = jitnn.pow(np.abs(e) + np.float32(0.5), t)       # the tensor as the exponent
        assert_close(got.numpy(), reference("pow")(np.abs(e) + np.float32(0.5), x), rtol=1e-6)
    both = jitnn.pow(np.float32([[2.0], [3.0]]), np.float32([1.0, 2.0, 0.5]))   # (2, 1), (3,)
    assert_close(both.numpy(), [[2, 4, np.sqrt(2)], [3, 9, np.sqrt(3)]], rtol=1e-6)


def test_pow_by_a_constant_is_one_step_and_by_an_input_reads_it():
    """A graph's constant exponent is a number when the graph is built (a
    math step, fused with its neighbours); an input exponent is read when
    the graph runs."""
    ctx = jitnn.Context()
    x = random((2, 9, 5, 5), 6)
    w = random((9, 9, 1, 1), 7, scale=0.3)
    b = jitnn.GraphBuilder(ctx)
    xi, e = b.input("x", x.shape), b.input("e", (1,))
    h = b.conv2d(xi, b.constant(w))
    y = b.sqrt(b.add(b.pow(h, b.constant(np.float32([2.0]))), 1e-3))
    g = b.build({"y": y, "z": b.pow(b.abs(h), e)})
    outputs = {"y": np.empty(x.shape, np.float32), "z": np.empty(x.shape, np.float32)}
    h_ref = reference("conv2d")(x, w)
    for exponent in (2.0, 0.5):
        ctx.compute(g, {"x": x, "e": np.float32([exponent])}, outputs)
        assert_close(outputs["y"], np.sqrt(h_ref ** 2 + 1e-3), rtol=1e-5, atol=1e-6)
        assert_close(outputs["z"], np.abs(h_ref) ** exponent, rtol=1e-5, atol=1e-6)
    plan = jitnn.explain(jitnn.pow(jitnn.conv2d(ctx.tensor(x), ctx.tensor(w)),
                                   ctx.tensor(np.float32([2.0]))))
    assert "conv2d" in plan and "pow" in plan


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint32])
def test_integer_pow(dtype):
    signed = np.dtype(dtype).kind == "i"
    a = np.array([2, 3, 0, 1, 5, 7] + ([-1, -1, -2, 2] if signed else [4, 2, 1, 3]), dtype)
    b = np.array([3, 2, 0, 5, 0, 1] + ([-3, -2, 2, -1] if signed else [2, 3, 0, 1]), dtype)
    got = jitnn.pow(jitnn.tensor(a), jitnn.tensor(b))
    assert got.dtype == dtype
    want = [8, 9, 1, 1, 1, 7] + ([-1, 1, 4, 0] if signed else [16, 8, 1, 3])
    np.testing.assert_array_equal(got.numpy(), np.array(want, dtype))
    np.testing.assert_array_equal(got.numpy(), reference("pow")(a, b))
    np.testing.assert_array_equal(jitnn.pow(jitnn.tensor(a), 2).numpy(), a * a)


# --- prelu -----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 9, 17])
def test_prelu_slopes(channels, kind):
    n, h, w = 2, 4, 5
    x = random((n, channels, h, w), channels)
    t = make(x, kind)
    for shape in [(channels, 1, 1), (1, channels, 1, 1), (), (1,), (n, channels, h, w), (w,),
                  (n, 1, 1, 1)]:
        slope = random(shape, 9)
        got = jitnn.prelu(t, slope)
        assert got.layout == t.layout and got.shape == x.shape
        assert_close(got.numpy(), reference("prelu")(x, slope))
        if kind != "plain":
            assert_padding_lanes_zero(got)


def test_prelu_broadcasts_both_ways():
    """WebNN broadcasts input and slope with each other: the result may be
    larger than the input."""
    x, slope = random((2, 1, 4, 5), 10), random((1, 6, 1, 1), 11)
    got = jitnn.prelu(x, slope)
    assert got.shape == (2, 6, 4, 5)
    assert_close(got.numpy(), reference("prelu")(x, slope))
    assert_close(jitnn.prelu(np.float32([-2.0, 3.0]), np.float32([[0.5], [-1.0]])).numpy(),
                 [[-1, 3], [2, 3]])
    assert_close(jitnn.prelu(np.float32([np.nan, -np.inf, np.inf, -0.0]), 0.25).numpy(),
                 [np.nan, -np.inf, np.inf, 0])


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64])
def test_integer_prelu(dtype):
    x = np.array([-5, -1, 0, 3, 100], dtype)
    slope = np.array([2, 3, 4, 5, -1], dtype)
    got = jitnn.prelu(jitnn.tensor(x), jitnn.tensor(slope))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), np.array([-10, -3, 0, 3, 100], dtype))
    np.testing.assert_array_equal(got.numpy(), reference("prelu")(x, slope))


# --- fusion --------------------------------------------------------------------------------

@pytest.mark.parametrize("block", other_blocks_slow((8, 16)))
def test_conv_then_math_chain_is_one_pass(block):
    """conv -> abs -> sqrt -> mul -> erf -> add(conv) -> pow 2 runs as the conv
    and one element-wise pass, blocked throughout (no reorder to plain)."""
    ctx = jitnn.Context(block=block)
    x, w = random((2, 9, 7, 5), 12), random((9, 9, 3, 3), 13, scale=0.2)
    xt = jitnn.reorder(ctx.tensor(x), f"nChw{block}c")
    xt._materialize()
    h = jitnn.conv2d(xt, ctx.tensor(w), padding=1)
    y = jitnn.pow(jitnn.add(jitnn.erf(jitnn.mul(jitnn.sqrt(jitnn.abs(h)), 0.7)), h), 2.0)
    del h
    with assert_schedule(ctx, kernels=2, reorders=0, fused=5):
        y._materialize()
    assert y.layout == f"nChw{block}c"
    h_ref = reference("conv2d")(x, w, padding=1)
    want = (reference("erf")(np.sqrt(np.abs(h_ref)) * 0.7) + h_ref) ** 2
    assert_close(y.numpy(), want, rtol=2e-5, atol=1e-5)
    assert_padding_lanes_zero(y)


def test_decomposed_layer_norm_and_gelu_graph_keep_their_chains():
    """A decomposed GELU (x * 0.5 * (1 + erf(x / sqrt 2))) and a normalization
    tail (x * (v + eps) ** -0.5) after a conv, as an exporter writes them,
    with constant operands: each a run of element-wise steps in one pass."""
    ctx = jitnn.Context()
    x, w = random((1, 9, 6, 6), 14), random((9, 9, 1, 1), 15, scale=0.3)
    b = jitnn.GraphBuilder(ctx)
    xi = b.input("x", x.shape)
    h = b.conv2d(xi, b.constant(w))
    gelu = b.mul(b.mul(b.add(b.erf(b.div(h, b.constant(np.float32([1.4142135])))), 1.0),
                       0.5), h)
    norm = b.mul(b.pow(b.add(b.mul(gelu, gelu), b.constant(np.float32([1e-5]))),
                       b.constant(np.float32([-0.5]))), gelu)
    g = b.build({"y": norm})
    out = np.empty(x.shape, np.float32)
    ctx.compute(g, {"x": x}, {"y": out})
    with assert_schedule(ctx, kernels=3):       # conv, the gelu pass, the norm pass
        ctx.compute(g, {"x": x}, {"y": out})
    h_ref = reference("conv2d")(x, w)
    gelu_ref = reference("gelu")(h_ref)
    assert_close(out, gelu_ref / np.sqrt(gelu_ref ** 2 + 1e-5), rtol=2e-5, atol=1e-5)


# --- graphs and errors --------------------------------------------------------------------------

def test_builder_methods_compute_twice():
    ctx = jitnn.Context()
    x = random((2, 3, 4, 5), 16)
    b = jitnn.GraphBuilder(ctx)
    xi = b.input("x", x.shape)
    g = b.build({"a": b.softsign(b.tan(xi)), "b": b.hard_sigmoid(xi, alpha=0.3, beta=0.1),
                 "c": b.prelu(xi, b.constant(np.float32([0.1, 0.2, 0.3]).reshape(3, 1, 1)))})
    for _ in range(2):
        out = {k: np.empty(x.shape, np.float32) for k in "abc"}
        ctx.compute(g, {"x": x}, out)
        _check(out["a"], reference("softsign")(reference("tan")(x)))
        _check(out["b"], reference("hard_sigmoid")(x, alpha=0.3, beta=0.1))
        _check(out["c"], reference("prelu")(x, np.float32([0.1, 0.2, 0.3]).reshape(3, 1, 1)))


def test_errors_raise_at_the_call():
    ctx = jitnn.Context()
    x = jitnn.reorder(ctx.tensor(random((2, 3, 4, 5), 17)), "nChw8c")
    x._materialize()
    ints = ctx.tensor(np.arange(4, dtype=np.int32))
    with assert_schedule(ctx, kernels=0, reorders=0):
        with pytest.raises(jitnn.JitnnValueError, match=r"elu: alpha must be finite, got nan"):
            jitnn.elu(x, alpha=float("nan"))
        with pytest.raises(jitnn.JitnnValueError, match=r"linear: beta must be finite"):
            jitnn.linear(x, beta=np.inf)
        with pytest.raises(jitnn.JitnnTypeError, match=r"hard_sigmoid: alpha must be a number"):
            jitnn.hard_sigmoid(x, alpha="0.2")
        with pytest.raises(jitnn.JitnnTypeError, match=r"pow: a and b must have the same "
                           r"dtype, got float32 and int32"):
            jitnn.pow(x, ctx.tensor(np.ones((2, 3, 4, 5), np.int32)))
        with pytest.raises(jitnn.JitnnValueError, match=r"pow: the shapes do not broadcast"
                           r".* a \(2, 3, 4, 5\), b \(4,\)"):
            jitnn.pow(x, np.ones(4, np.float32))
        with pytest.raises(jitnn.JitnnValueError, match=r"prelu: the shapes do not broadcast"
                           r".* x \(2, 3, 4, 5\), slope \(2,\)"):
            jitnn.prelu(x, np.ones(2, np.float32))
        with pytest.raises(jitnn.JitnnTypeError, match=r"prelu: x and slope must have the same"):
            jitnn.prelu(ints, ctx.tensor(np.ones(4, np.float32)))
        with pytest.raises(jitnn.JitnnTypeError, match=r"prelu: x must have dtype float32, "
                           r"int8, int32 or int64, got a uint32 tensor"):
            jitnn.prelu(ctx.tensor(np.ones(3, np.uint32)), ctx.tensor(np.ones(3, np.uint32)))
        with pytest.raises(jitnn.JitnnTypeError, match=r"pow: b must hold integers of int32"):
            jitnn.pow(ints, 0.5)
        with pytest.raises(jitnn.JitnnTypeError, match=r"sqrt: x"):
            jitnn.sqrt("four")
        with pytest.raises(jitnn.JitnnValueError, match=r"different contexts"):
            jitnn.pow(x, jitnn.Context().tensor(np.float32([2.0])))
