"""Elementwise kernels (kernels/eltwise.py, kernels/vmath.py) against the
ops' float64 references (looked up by name; a fused chain against their
composition), and the vector math's accuracy in ulp over wide sweeps.

Inputs are blocked with zero padding lanes; outputs start as NaN so an
element the kernel forgets to write fails the test, and every output's
padding lanes must be exactly zero (also where the op makes 0 into something
else: sigmoid, clamp with min > 0, a bias, 0 / 0).
"""

import re

import numba
import numpy as np
import pytest

from jitnn import layouts
from jitnn.kernels import _config
from jitnn.kernels import eltwise as E
from jitnn.kernels._config import jit
from jitnn.kernels.epilogue import ACTIVATIONS, SILU, activate_span, vector_exp
from jitnn.kernels.vmath import MATH_OPS
from tests.assembly import needs_packed_fma
from tests.helpers import apply_activation, reference, uniform

BLOCKS = (4, 8, 16)
CHANNELS = (1, 3, 7, 8, 9, 17, 64)
OPS = tuple(E.BINARY_OPS)
# activation name -> (param0, param1); clamp with min > 0 makes padding non-zero
ACTIVATION_PARAMS = {"none": (0, 0), "relu": (0, 0), "clamp": (0.25, 1.5),
                     "leaky_relu": (0.1, 0), "sigmoid": (0, 0), "tanh": (0, 0),
                     "hard_swish": (0, 0), "gelu": (0, 0)}
assert set(ACTIVATION_PARAMS) == set(ACTIVATIONS)


def _divisor(shape, seed):
    """Values away from zero (|v| in [0.5, 2]) with random signs."""
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1, 1], shape)).astype(np.float32)


def _blocked(x, cb):
    return layouts.reference_nchw_to_blocked(x, cb)


def _nan_like(x):
    return np.full(x.shape, np.nan, np.float32)


def _check(out, expected, channels, rtol=1e-5, atol=1e-5):
    """``out`` (blocked) equals ``expected`` (NCHW) and its padding lanes are 0."""
    assert not np.isnan(out).any(), "NaN in the output (unwritten element or padding lane)"
    n, blocks, h, w, cb = out.shape
    full = out.transpose(0, 1, 4, 2, 3).reshape(n, blocks * cb, h, w)
    assert np.all(full[:, channels:] == 0), "padding lanes are not zero"
    np.testing.assert_allclose(full[:, :channels], expected, rtol=rtol, atol=atol)


# --- unary activations ----------------------------------------------------------

@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_unary_blocked(activation, channels, cb):
    x = uniform((2, channels, 5, 7), seed=channels)
    p0, p1 = ACTIVATION_PARAMS[activation]
    out = _nan_like(_blocked(x, cb))
    E.eltwise_unary(_blocked(x, cb), out, channels, activation, p0, p1)
    _check(out, apply_activation(x, activation, p0, p1), channels)


def test_unary_in_place_and_sigmoid_padding():
    x = uniform((3, 5, 9, 11), seed=1)
    xb = _blocked(x, 8)
    E.eltwise_unary(xb, xb, 5, "sigmoid")          # sigmoid(0) = 0.5 must not reach padding
    _check(xb, apply_activation(x, "sigmoid"), 5)


@pytest.mark.parametrize("activation", ["relu", "clamp", "gelu"])
@pytest.mark.parametrize("shape", [(7,), (3, 5, 1000), (2, 3, 40, 41)])
def test_unary_plain(activation, shape):
    x = uniform(shape, seed=len(shape))
    p0, p1 = ACTIVATION_PARAMS[activation]
    out = _nan_like(x)
    E.eltwise_unary_plain(x, out, activation, p0, p1)
    np.testing.assert_allclose(out, apply_activation(x, activation, p0, p1),
                               rtol=1e-5, atol=1e-6)


# --- binary ops -------------------------------------------------------------------

def _operands(kind, x, cb, seed, divisor):
    """(blocked operand for the kernel, plain operand for the reference)."""
    n, c, h, w = x.shape
    make = _divisor if divisor else uniform
    c_phys = layouts.padded_channels(c, cb)
    if kind == "tensor":
        y = make(x.shape, seed)
        return _blocked(y, cb), y
    if kind in ("channel", "channel_phys"):
        v = make((c,), seed)
        if kind == "channel_phys":
            return np.concatenate([v, np.zeros(c_phys - c, np.float32)]), v
        return v, v
    if kind in ("nc", "nc_phys", "nc_pooled"):
        v = make((n, c), seed)
        if kind == "nc":
            return v, v
        pooled = _blocked(v.reshape(n, c, 1, 1), cb)         # (N, C_phys//cb, 1, 1, cb)
        return (pooled if kind == "nc_pooled" else pooled.reshape(n, c_phys)), v
    value = float(make((), seed))
    return value, value


KINDS = ("tensor", "channel", "channel_phys", "nc", "nc_phys", "nc_pooled", "scalar")


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", (3, 8, 17))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("op", OPS)
def test_binary_blocked(op, kind, channels, cb):
    x = uniform((2, channels, 5, 7), seed=channels)
    y, y_plain = _operands(kind, x, cb, seed=channels + 1, divisor=op in ("div", "pow"))
    if op == "pow":                                  # positive bases: no NaN
        x = np.abs(x) + np.float32(0.25)
        y, y_plain = np.abs(y), np.abs(y_plain)
    for reverse in (False, True):
        if reverse and op == "div":
            x = _divisor(x.shape, seed=channels)
        out = _nan_like(_blocked(x, cb))
        E.eltwise_binary(_blocked(x, cb), y, out, channels, op, reverse=reverse)
        y_ref = np.asarray(y_plain)                  # broadcastable against NCHW
        if kind.startswith("channel"):
            y_ref = y_ref.reshape(1, -1, 1, 1)
        elif kind.startswith("nc"):
            y_ref = y_ref.reshape(*y_ref.shape, 1, 1)
        expected = (reference(op)(y_ref, x) if reverse
                    else reference(op)(x, y_ref))
        _check(out, expected, channels)


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
def test_binary_with_fused_activation(activation):
    channels, cb = 9, 8
    x = uniform((2, channels, 6, 5), seed=3)
    v = uniform((channels,), seed=4)
    p0, p1 = ACTIVATION_PARAMS[activation]
    out = _nan_like(_blocked(x, cb))
    E.eltwise_binary(_blocked(x, cb), v, out, channels, "add", activation, p0, p1)
    expected = apply_activation(x + v.reshape(1, -1, 1, 1).astype(np.float64), activation,
                                 p0, p1)
    _check(out, expected, channels)


@pytest.mark.parametrize("kind", ["tensor", "channel", "scalar"])
def test_division_leaves_no_nan_in_padding(kind):
    """0 / 0 in the padding lanes (x and a zero-padded divisor) must store 0."""
    x = uniform((2, 3, 4, 5), seed=5)
    y, y_plain = _operands(kind, x, 8, seed=6, divisor=True)
    for reverse in (False, True):
        out = _nan_like(_blocked(x, 8))
        operand = 0.0 if kind == "scalar" else y     # x / 0 everywhere for the scalar
        E.eltwise_binary(_blocked(x, 8), operand, out, 3, "div", reverse=reverse)
        full = out.transpose(0, 1, 4, 2, 3).reshape(2, 8, 4, 5)
        assert np.all(full[:, 3:] == 0)


def test_binary_same_shape_operand_is_out():
    x, y = uniform((2, 5, 3, 4), 7), uniform((2, 5, 3, 4), 8)
    xb, yb = _blocked(x, 4), _blocked(y, 4)
    E.eltwise_binary(xb, yb, yb, 5, "sub", "relu")       # residual-style, in place into y
    _check(yb, np.maximum(x.astype(np.float64) - y, 0), 5)


@pytest.mark.parametrize("shape", [(5,), (3, 7, 11), (2, 3, 40, 41)])
def test_binary_plain(shape):
    x, y = uniform(shape, 9), _divisor(shape, 10)
    for op in OPS:
        out = _nan_like(x)
        E.eltwise_binary_plain(x, y, out, op, "leaky_relu", 0.2)
        expected = apply_activation(reference(op)(x, y), "leaky_relu", 0.2)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
    out = _nan_like(x)
    E.eltwise_binary_plain(x, 2.5, out, "sub", reverse=True)
    np.testing.assert_allclose(out, 2.5 - x.astype(np.float64), rtol=1e-6, atol=1e-6)


def test_plain_nchw_per_channel_as_block_one():
    """A plain NCHW tensor is blocked with cb = 1: per-channel broadcast on it."""
    x, v = uniform((2, 5, 6, 7), 11), uniform((5,), 12)
    out = _nan_like(x)
    E.eltwise_binary(x[..., None], v, out[..., None], 5, "mul")
    np.testing.assert_allclose(out, x.astype(np.float64) * v.reshape(1, -1, 1, 1), rtol=1e-6)


# --- batch normalization -----------------------------------------------------------

@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", CHANNELS)
def test_batch_normalization(channels, cb):
    rng = np.random.default_rng(channels)
    x = uniform((2, channels, 5, 7), seed=channels)
    mean, scale, bias = (rng.standard_normal(channels).astype(np.float32) for _ in range(3))
    variance = rng.uniform(0.1, 2.0, channels).astype(np.float32)
    a, b = E.batch_norm_fold(mean, variance, scale, bias, epsilon=1e-3)
    assert a.dtype == b.dtype == np.float32 and a.shape == b.shape == (channels,)
    normalized = reference("batch_normalization")(x, mean, variance, scale, bias, epsilon=1e-3)
    for activation, (p0, p1) in [("none", (0, 0)), ("relu", (0, 0)), ("clamp", (0.5, 6))]:
        out = _nan_like(_blocked(x, cb))
        E.batch_normalization(_blocked(x, cb), a, b, out, channels, activation, p0, p1)
        _check(out, apply_activation(normalized, activation, p0, p1), channels,
               rtol=1e-5, atol=1e-5)


def test_batch_norm_fold_defaults_and_conv_folding():
    """The fold is exact algebra: x * a + b, with scale 1 and bias 0 by default,
    and folding into a 1x1 conv (w' = w * a, bias' = bias * a + b) agrees."""
    rng = np.random.default_rng(0)
    mean, variance = rng.standard_normal(4), rng.uniform(0.5, 2.0, 4)
    a, b = E.batch_norm_fold(mean, variance)
    x = rng.standard_normal((1, 4, 3, 3))
    np.testing.assert_allclose(x * a.reshape(1, 4, 1, 1) + b.reshape(1, 4, 1, 1),
                               reference("batch_normalization")(x, mean, variance), rtol=1e-5,
                               atol=1e-6)
    w, conv_bias = rng.standard_normal((4, 4)), rng.standard_normal(4)   # 1x1 conv
    conv = np.einsum("oc,nchw->nohw", w, x) + conv_bias.reshape(1, 4, 1, 1)
    folded = (np.einsum("oc,nchw->nohw", w * a[:, None], x)
              + (conv_bias * a + b).reshape(1, 4, 1, 1))
    np.testing.assert_allclose(folded, reference("batch_normalization")(conv, mean, variance),
                               rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="one length"):
        E.batch_norm_fold(mean, variance[:3])


# --- fused chains ---------------------------------------------------------------------

_BINARY_NAMES = {code: name for name, code in E.BINARY_OPS.items()}


def _plain_operand(v, x):
    """A chain operand in plain form, shaped to broadcast against NCHW ``x``."""
    v = np.asarray(v, np.float64)
    if v.ndim == 1 and x.ndim >= 2:          # per-channel
        return v.reshape((1, -1) + (1,) * (x.ndim - 2))
    if v.ndim == 2 and x.ndim > 2:           # per-(n, c)
        return v.reshape(v.shape + (1,) * (x.ndim - 2))
    return v                                 # same shape, or a scalar


def _steps_reference(x, steps):
    """The steps of ``E.eltwise_chain`` composed from the ops' references, on
    plain NCHW ``x`` with plain operands (NCHW tensor, ``(C,)``, ``(N, C)``, scalar)."""
    t = np.asarray(x, np.float64)
    for step in steps:
        if step[0] == "activation":
            t = apply_activation(t, *step[1:])
        elif step[0] == "binary":
            _, code, operand, reverse = step
            y = _plain_operand(operand, t)
            binary = reference(_BINARY_NAMES[code])
            t = binary(y, t) if reverse else binary(t, y)
        else:                                # affine: t * scale[c] + bias[c]
            t = t * _plain_operand(step[1], t) + _plain_operand(step[2], t)
    return t


def _chain_case(rng, x, cb, seed):
    """A random chain: (its kernel steps, the same steps with plain operands)."""
    n, c, h, w = x.shape
    steps, plain_steps = [], []
    for i in range(rng.integers(2, 7)):
        choice = rng.integers(0, 4)
        if choice == 0:
            name = rng.choice(sorted(ACTIVATIONS))
            p0, p1 = ACTIVATION_PARAMS[name]
            steps.append(E.activation_step(name, p0, p1))
            plain_steps.append(E.activation_step(name, p0, p1))
        elif choice == 1:
            kind = rng.choice(KINDS)
            op = rng.choice(["add", "sub", "mul", "maximum", "minimum"])
            y, y_plain = _operands(kind, x, cb, seed=seed + i, divisor=False)
            reverse = bool(rng.integers(0, 2))
            steps.append(E.binary_step(op, y, reverse))
            plain_steps.append(E.binary_step(op, y_plain, reverse))
        elif choice == 2:
            y, y_plain = _operands("channel", x, cb, seed=seed + i, divisor=True)
            steps.append(E.binary_step("div", y))
            plain_steps.append(E.binary_step("div", y_plain))
        else:
            scale, bias = uniform((c,), seed + i), uniform((c,), seed + 100 + i)
            steps.append(E.affine_step(scale, bias))
            plain_steps.append(E.affine_step(scale, bias))
    return steps, plain_steps


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", (1, 7, 17, 64))
def test_chain_against_composed_references(channels, cb):
    rng = np.random.default_rng(channels * 10 + cb)
    for trial in range(4):
        x = uniform((2, channels, 5, 3), seed=trial)
        steps, plain_steps = _chain_case(rng, x, cb, seed=trial * 50)
        out = _nan_like(_blocked(x, cb))
        E.eltwise_chain(_blocked(x, cb), steps, out, channels)
        _check(out, _steps_reference(x, plain_steps), channels, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cb", (1, 32))
def test_chain_other_block_sizes(cb):
    """Block sizes 1 (plain NCHW as nChw1c) and 32 run the same engine."""
    rng = np.random.default_rng(cb)
    for channels in (3, 33):
        x = uniform((2, channels, 5, 3), seed=channels)
        steps, plain_steps = _chain_case(rng, x, cb, seed=channels)
        out = _nan_like(_blocked(x, cb))
        E.eltwise_chain(_blocked(x, cb), steps, out, channels)
        _check(out, _steps_reference(x, plain_steps), channels, rtol=1e-4, atol=1e-4)


def test_chain_bottleneck_tail_in_place():
    """bn -> add residual -> relu, in place into the residual, one pass."""
    channels, cb = 17, 8
    x, res = uniform((2, channels, 9, 7), 1), uniform((2, channels, 9, 7), 2)
    a, b = uniform((channels,), 3), uniform((channels,), 4)
    resb = _blocked(res, cb)
    steps = [E.affine_step(a, b), E.binary_step("add", resb), E.activation_step("relu")]
    E.eltwise_chain(_blocked(x, cb), steps, resb, channels)
    plain_steps = [E.affine_step(a, b), E.binary_step("add", res), E.activation_step("relu")]
    _check(resb, _steps_reference(x, plain_steps), channels)


def test_chain_four_tensor_operands_and_empty_chain():
    channels, cb = 9, 16
    x = uniform((1, channels, 4, 6), 0)
    ys = [uniform(x.shape, i + 1) for i in range(4)]
    steps = [E.binary_step(op, _blocked(y, cb)) for op, y in zip(OPS, ys)]
    out = _nan_like(_blocked(x, cb))
    E.eltwise_chain(_blocked(x, cb), steps, out, channels)
    plain_steps = [E.binary_step(op, y) for op, y in zip(OPS, ys)]
    _check(out, _steps_reference(x, plain_steps), channels)
    out = _nan_like(_blocked(x, cb))
    E.eltwise_chain(_blocked(x, cb), [], out, channels)          # a copy
    _check(out, x, channels, rtol=0, atol=0)


@pytest.mark.parametrize("cb", (8, 16))
def test_parallel_path_and_plane_chunks(cb, threads, record_calls):
    """Large enough for the parallel driver (2 threads; on 1 the same tasks in
    one plain call); planes longer than a task's chunk and not a multiple of
    the span."""
    calls = record_calls(E, "_chain_parallel")
    channels = 17
    x = uniform((2, channels, 43, 41), 0)
    v = uniform((channels,), 1)
    y = uniform(x.shape, 2)
    steps = [E.binary_step("mul", v), E.binary_step("add", _blocked(y, cb)),
             E.activation_step("sigmoid")]
    out = _nan_like(_blocked(x, cb))
    E.eltwise_chain(_blocked(x, cb), steps, out, channels)
    assert len(calls) == (0 if threads == 1 else 1)
    plain_steps = [E.binary_step("mul", v), E.binary_step("add", y), E.activation_step("sigmoid")]
    _check(out, _steps_reference(x, plain_steps), channels)


# --- validation ------------------------------------------------------------------------

def test_errors():
    x = _blocked(uniform((1, 5, 3, 3), 0), 4)
    out = np.empty_like(x)
    with pytest.raises(ValueError, match="channels do not fit"):
        E.eltwise_unary(x, out, 9, "relu")
    with pytest.raises(ValueError, match="unknown activation"):
        E.eltwise_unary(x, out, 5, "swish")
    with pytest.raises(ValueError, match="unknown binary op"):
        E.eltwise_binary(x, 1.0, out, 5, "atan2")
    with pytest.raises(ValueError, match="unknown math function"):
        E.eltwise_chain(x, [E.math_step("cbrt")], out, 5)
    with pytest.raises(ValueError, match=r"has shape \(6,\)"):
        E.eltwise_binary(x, np.ones(6, np.float32), out, 5, "add")
    with pytest.raises(ValueError, match="float32"):
        E.eltwise_binary(x, x.astype(np.float64), out, 5, "add")
    with pytest.raises(ValueError, match="partially overlaps"):
        shared = np.zeros(x.size + 1, np.float32)       # out is x shifted by one float
        E.eltwise_unary(shared[1:].reshape(x.shape), shared[:-1].reshape(x.shape), 5, "relu")
    with pytest.raises(ValueError, match="at most"):
        E.eltwise_chain(x, [E.activation_step("relu")] * (E.MAX_STEPS + 1), out, 5)
    with pytest.raises(ValueError, match="C-contiguous"):
        E.eltwise_unary(x, np.empty(x.shape[::-1], np.float32).T, 5, "relu")


# --- accuracy of the written-out exp, sigmoid and tanh -----------------------------

#: a dense sweep over every range the formulas split (tanh at 0.625, exp's
#: overflow near 88.72 and its denormals below -87.3), and the specials
_SWEEP = np.concatenate([np.linspace(-106, 96, 400_001, dtype=np.float32),
                         np.linspace(-1, 1, 100_001, dtype=np.float32),
                         np.float32([0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 88.72, -103.9])])


def _ulp_error(got, want):
    """|got - want| in units of the float32 spacing at ``want`` (the
    smallest denormal below it): 0.5 is a correctly rounded result."""
    spacing = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    spacing = np.maximum(spacing, float(np.spacing(np.float32(0))))
    return np.abs(got.astype(np.float64) - want) / spacing


@numba.njit
def _exp_all(x, out):
    for i in range(x.size):
        out[i] = vector_exp(x[i])


def test_vector_exp_within_2_ulp_with_overflow_denormals_and_specials():
    out = np.empty_like(_SWEEP)
    _exp_all(_SWEEP, out)
    with np.errstate(over="ignore"):
        want = np.exp(_SWEEP.astype(np.float64))
    finite = want < np.finfo(np.float32).max
    assert _ulp_error(out[finite], want[finite]).max() <= 2
    assert np.all(np.isposinf(out[~finite]))
    specials = np.float32([np.inf, -np.inf, np.nan, -200.0])
    got = np.empty_like(specials)
    _exp_all(specials, got)
    assert got[0] == np.inf and got[1] == 0 and np.isnan(got[2]) and got[3] == 0


@pytest.mark.parametrize("activation, exact, max_ulp", [
    ("sigmoid", lambda x: np.exp(np.minimum(x, 0)) / (1 + np.exp(-np.abs(x))), 3),
    ("tanh", np.tanh, 2)])
def test_sigmoid_and_tanh_within_a_few_ulp(activation, exact, max_ulp):
    out = _nan_like(_SWEEP)
    E.eltwise_unary_plain(_SWEEP, out, activation)
    want = exact(_SWEEP.astype(np.float64))
    # sigmoid far below 0 is a denormal or 0 in float32: within one denormal step
    assert _ulp_error(out, want).max() <= max_ulp
    if activation == "tanh":
        assert np.signbit(out[_SWEEP == 0]).tolist() == np.signbit(_SWEEP[_SWEEP == 0]).tolist()


def test_silu_epilogue_within_3_ulp_and_zero_far_below():
    # SiLU is a fused epilogue only (kernels/epilogue.py's _silu): its exp
    # serves arguments down to -87, below which x * sigmoid(x) is ~0
    out = _SWEEP.copy()
    activate_span(out, 0, out.size, SILU, np.float32(0), np.float32(0))
    x = _SWEEP.astype(np.float64)
    want = x * np.exp(np.minimum(x, 0)) / (1 + np.exp(-np.abs(x)))
    normal = _SWEEP >= -87
    assert _ulp_error(out[normal], want[normal]).max() <= 3
    assert np.abs(out[~normal]).max() <= 1e-35
    specials = np.float32([np.nan, np.inf, -np.inf, -0.0, -3e38])
    activate_span(specials, 0, 5, SILU, np.float32(0), np.float32(0))
    assert np.isnan(specials[0]) and specials[1] == np.inf and np.isnan(specials[2])
    assert specials[3] == 0 and np.signbit(specials[3]) and specials[4] == 0


# --- math steps (kernels/vmath.py) ---------------------------------------------------

#: math function -> (param0, param1) the tests use
MATH_PARAMS = {"elu": (0.5, 0.0), "hard_sigmoid": (0.2, 0.5), "linear": (-1.5, 0.25),
               "pow": (3.0, 0.0)}


def apply_math(x, name, p0=0.0, p1=0.0):
    """Math step ``name`` with the kernel's parameters as the op's reference."""
    if name == "pow":
        return reference("pow")(x, p0)
    if name == "gelu_tanh":
        return reference("gelu")(x, approximate="tanh")
    options = {"elu": {"alpha": p0}, "hard_sigmoid": {"alpha": p0, "beta": p1},
               "linear": {"alpha": p0, "beta": p1}}.get(name, {})
    with np.errstate(all="ignore"):
        return reference(name)(x, **options)


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", (1, 3, 9, 17))
@pytest.mark.parametrize("name", sorted(MATH_OPS))
def test_math_blocked(name, channels, cb):
    """Every math function on blocked data: the values, and padding lanes 0
    where f(0) is not (cos, exp, log, reciprocal, softplus, hard_sigmoid...)."""
    x = uniform((2, channels, 5, 7), seed=channels, low=-4.0, high=4.0)
    if name in ("log", "sqrt"):
        x = np.abs(x) + np.float32(1e-3)                 # NaN checked elsewhere
    if name in ("tan", "reciprocal", "pow"):
        x = np.where(np.abs(x) < 0.05, np.float32(0.5), x)
    p0, p1 = MATH_PARAMS.get(name, (0.0, 0.0))
    out = _nan_like(_blocked(x, cb))
    E.eltwise_chain(_blocked(x, cb), [E.math_step(name, p0, p1)], out, channels)
    _check(out, apply_math(x, name, p0, p1), channels, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(7,), (3, 5, 1000)])
def test_math_plain_and_in_place(shape):
    x = uniform(shape, seed=2)
    out = _nan_like(x)
    E.eltwise_chain_plain(x, [E.math_step("erf"), E.math_step("linear", 2.0, -0.5)], out)
    np.testing.assert_allclose(out, 2.0 * reference("erf")(x) - 0.5, rtol=2e-6, atol=1e-6)
    y = x.copy()
    E.eltwise_chain_plain(y, [E.math_step("sin")], y)                # in place
    np.testing.assert_allclose(y, np.sin(x.astype(np.float64)), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op", ["pow", "prelu"])
def test_pow_and_prelu_binary_steps(op):
    """pow by a tensor (libm per element) and prelu (the slope as y, or as x
    with reverse: the slope is the main operand)."""
    channels = 9
    x = uniform((2, channels, 4, 5), seed=3)
    if op == "pow":
        x = np.abs(x) + np.float32(0.1)
    slope = uniform((channels,), seed=4, low=-2.0, high=2.0)
    out = _nan_like(_blocked(x, 8))
    E.eltwise_binary(_blocked(x, 8), slope, out, channels, op)
    _check(out, reference(op)(x, slope.reshape(1, -1, 1, 1)), channels, rtol=2e-6)
    full = uniform(x.shape, seed=5)
    out = _nan_like(x)
    E.eltwise_binary_plain(full, x, out, op, reverse=True)          # x op full
    np.testing.assert_allclose(out, reference(op)(x, full), rtol=2e-6, atol=1e-6)


def test_math_steps_in_chains():
    """A decomposed LayerNorm tail and GELU as one program: x - mean, **2,
    + eps, sqrt, reciprocal, * ...; 0.5 x (1 + erf(x / sqrt 2))."""
    channels, cb = 17, 8
    x = uniform((2, channels, 5, 3), seed=6)
    mean = uniform((channels,), seed=7)
    steps = [E.binary_step("sub", mean), E.math_step("pow", 2.0), E.binary_step("add", 1e-5),
             E.math_step("pow", 0.5), E.math_step("reciprocal"), E.binary_step("mul", 0.7071),
             E.math_step("erf"), E.binary_step("add", 1.0), E.binary_step("mul", 0.5),
             E.math_step("pow", -2.0), E.math_step("log"), E.math_step("neg")]
    out = _nan_like(_blocked(x, cb))
    E.eltwise_chain(_blocked(x, cb), steps, out, channels)
    t = x.astype(np.float64) - mean.reshape(1, -1, 1, 1)
    t = 1.0 / np.sqrt(t ** 2 + 1e-5)
    t = -np.log((0.5 * (reference("erf")(t * 0.7071) + 1.0)) ** -2.0)
    _check(out, t, channels, rtol=1e-5, atol=1e-5)


# --- accuracy of the vector math over wide sweeps -----------------------------------------

def _wide_sweep(top=38.5):
    """Both signs of magnitudes from the denormals to ``10**top``, a dense
    run around the functions' splits, and the specials."""
    magnitudes = np.float32(10.0) ** np.linspace(-45, top, 150_001, dtype=np.float64)
    dense = np.linspace(-12, 12, 120_001, dtype=np.float32)
    specials = np.float32([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17549435e-38,
                           3.4028235e38, -3.4028235e38, 1.0, -1.0, 0.5, -0.5, 1e6, -1e6])
    return np.concatenate([magnitudes.astype(np.float32), -magnitudes.astype(np.float32),
                           dense, specials])


def _run_math(x, name, p0=0.0):
    out = _nan_like(x)
    with np.errstate(all="ignore"):
        E.eltwise_chain_plain(x, [E.math_step(name, p0)], out)
    return out


def _assert_ulp(got, want, max_ulp):
    """Within ``max_ulp`` of the float64 ``want`` where it is a finite float32,
    the same infinity where it is one, NaN exactly where it is NaN."""
    want = np.asarray(want, np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    with np.errstate(over="ignore"):
        rounded = want.astype(np.float32)
    infinite = np.isinf(rounded)
    np.testing.assert_array_equal(got[infinite], rounded[infinite])
    finite = ~infinite & ~np.isnan(want)
    with np.errstate(over="ignore"):                  # the spacing at float32's top
        error = _ulp_error(got[finite], want[finite])
    assert error.max() <= max_ulp, (error.max(), got[finite][error.argmax()],
                                    want[finite][error.argmax()])


@pytest.mark.parametrize("name, exact, max_ulp", [
    ("log", np.log, 1.0), ("exp", np.exp, 2.0), ("erf", None, 1.5),
    ("sin", np.sin, 0.51), ("cos", np.cos, 0.51), ("tan", np.tan, 0.51),
    ("softplus", lambda x: np.logaddexp(0.0, x), 3.0), ("elu", np.expm1, 2.0),
    ("sqrt", np.sqrt, 0.5), ("reciprocal", lambda x: 1.0 / x, 0.5),
    ("softsign", None, 2.0)])
def test_math_within_a_few_ulp_from_denormals_to_overflow(name, exact, max_ulp):
    """Over both signs, magnitudes from the denormals to float32's top (sin,
    cos and tan past their reduction's limit, 1e6, too), the specials: NaN
    where the float64 value is NaN, infinities where it overflows."""
    x = _wide_sweep()
    got = _run_math(x, name, 1.0)
    with np.errstate(all="ignore"):
        want = apply_math(x, name, 1.0) if exact is None else exact(x.astype(np.float64))
    if name == "elu":
        want = np.where(x > 0, x, want)
    _assert_ulp(got, want, max_ulp)
    zeros = x == 0
    if name in ("sin", "tan", "erf", "sqrt", "softsign"):    # odd at 0: the sign of -0 kept
        assert np.signbit(got[zeros]).tolist() == np.signbit(x[zeros]).tolist()


@pytest.mark.parametrize("exponent, max_ulp", [
    (2.0, 0.5), (3.0, 2.0), (4.0, 2.5), (0.5, 0.5), (-0.5, 1.5), (-1.0, 0.5), (-2.0, 2.0),
    (0.0, 0.0), (1.0, 0.0), (1.7, 0.51), (-3.0, 0.51), (0.25, 0.51)])
def test_pow_by_a_number_as_c_pow(exponent, max_ulp):
    """The fast paths (products, sqrt) and libm's for the others agree with
    numpy's pow in float64 (C's, but sqrt for 0.5): pow(-0, -0.5) = inf,
    pow(NaN, 0) = 1, pow(-2, 1.7) = NaN, overflow to inf, underflow to 0
    (x ** -2 of a large x a denormal, not 0)."""
    x = _wide_sweep(top=20.0)
    got = _run_math(x, "pow", exponent)
    with np.errstate(all="ignore"):                  # the kernel's exponent is a float32
        want = np.power(x.astype(np.float64), np.float64(np.float32(exponent)))
    _assert_ulp(got, want, max_ulp)


def test_gelu_of_the_chain_within_a_few_ulp():
    """The chain's gelu (one erfc polynomial for every x; erfc itself for x /
    sqrt 2 < 0, no cancelling 1 + erf) against the float64 reference: within
    4.5 ulp (WebNN allows 18; 5 where the target has no FMA, x86's baseline:
    4.51 measured) from x = -5.6 up, over a dense sweep and the magnitudes from
    the denormals to the largest float; below, 0 from x / sqrt 2 = -4 on
    (|gelu| < 4.4e-8 there); NaN, infinities and -0 as the reference."""
    wide = _wide_sweep()
    x = np.concatenate([np.linspace(-5.6, 10, 400_001, dtype=np.float32),
                        wide[~(wide < -5.6)], np.float32([np.nan, np.inf, -0.0, 1e-40])])
    got = _nan_like(x)
    E.eltwise_unary_plain(x, got, "gelu")
    with np.errstate(invalid="ignore"):
        want = apply_activation(x, "gelu")
    fused_multiply_add = _config.TARGET_AVX2 or _config.TARGET_AVX512 or not _config.TARGET_X86
    _assert_ulp(got, want, 4.5 if fused_multiply_add else 5.0)
    assert np.signbit(got[x == 0]).tolist() == np.signbit(x[x == 0]).tolist()
    far = np.concatenate([np.linspace(-30, -5.7, 1001, dtype=np.float32),
                          wide[wide < -5.6], np.float32([-np.inf])])
    tail = _nan_like(far)
    E.eltwise_unary_plain(far, tail, "gelu")
    with np.errstate(invalid="ignore"):
        want = apply_activation(far, "gelu")
    np.testing.assert_array_equal(np.isnan(tail), np.isnan(want))          # -inf: NaN
    finite = ~np.isnan(want)
    np.testing.assert_allclose(tail[finite], want[finite], rtol=0, atol=4.4e-8)


def test_tanh_gelu_of_the_chain_within_a_few_ulp():
    """The tanh GELU (``x / (1 + e^-2u)``, 2u in float64) against the float64
    reference: within 3.5 ulp down to 1e-36 in magnitude, through the negative
    tail where ``1 + tanh(u)`` cancels in float32 (and in float64 below x =
    -7; below 1e-36 ``e^-2u`` overflows and the result is 0); NaN and the
    infinities as the formula gives them."""
    x = np.concatenate([np.linspace(-13, 13, 200_001, dtype=np.float32),
                        np.float32([np.nan, np.inf, -np.inf, 0.0, 1e-40, 3e4, 3e38])])
    got = _nan_like(x)
    E.eltwise_chain_plain(x, [E.math_step("gelu_tanh")], got)
    want = apply_math(x, "gelu_tanh")
    kept = np.isnan(want) | (np.abs(want) >= 1e-36)
    _assert_ulp(got[kept], want[kept], 3.5)
    np.testing.assert_allclose(got[~kept], want[~kept], rtol=0, atol=1e-36)
    assert np.isnan(got[x == -np.inf]).all() and got[np.isinf(x) & (x > 0)][0] == np.inf


@pytest.mark.slow
@needs_packed_fma
def test_math_loops_vectorize():
    """The math loops compile to packed instructions (no libm calls in them
    but pow's and the trig fallback's): one fresh compile of math_span."""
    from jitnn.kernels import vmath
    fresh = jit(cache=False)(vmath.math_span.py_func)
    x = uniform((E.SPAN,), seed=0)
    out = np.empty_like(x)
    for code in range(len(MATH_OPS)):
        fresh(x, out, x.size, code, np.float32(0.5), np.float32(0.25))
    asm = "\n".join(fresh.inspect_asm().values())
    packed_fma = len(re.findall(r"vfmadd\w+p[sd]\s.*%[yz]mm", asm))
    assert packed_fma >= 60, packed_fma
    called = {name for name in re.findall(r"movabsq\s+\$([A-Za-z_]\w*),", asm)
              if not name.startswith(("numba", "Py", "_Py", "NRT", "_ZN"))}
    assert called <= {"pow", "sin", "cos", "tan"}, called       # no erff, expf, logf...


@pytest.mark.parametrize("outer, channels, inner", [(197, 17, 1), (3, 7, 9), (2, 1, 5), (5, 256, 1)])
def test_channel_affine(outer, channels, inner):
    """``x * a[c] + b[c]`` with one rounding on plain (outer, C, inner) rows (a
    BatchNorm1d's), in place too; arrays that do not fit are refused."""
    rng = np.random.default_rng(outer + channels)
    x = rng.standard_normal((outer, channels, inner)).astype(np.float32)
    a, b = (rng.standard_normal(channels).astype(np.float32) for _ in range(2))
    out = np.empty_like(x)
    E.channel_affine(x, a, b, out, channels, inner)
    want = (x.astype(np.float64) * a[:, None] + b[:, None]).astype(np.float32)
    np.testing.assert_array_equal(out, want)              # one rounding: float64 then float32
    E.channel_affine(x, a, b, x, channels, inner)
    np.testing.assert_array_equal(x, want)
    with pytest.raises(ValueError, match="do not fit"):
        E.channel_affine(x, a[:channels - 1], b, out, channels, inner)
    with pytest.raises(ValueError, match="float32"):
        E.channel_affine(x.astype(np.float64), a, b, out, channels, inner)


def test_a_channel_block_must_divide_a_span():
    """A block of another width than the spans' divisors would write past the
    lane patterns: refused, not run."""
    x = np.zeros((1, 1, 4, 1, 192), np.float32)
    with pytest.raises(ValueError, match="must divide 512"):
        E.eltwise_unary(x, np.empty_like(x), 192, "relu")
