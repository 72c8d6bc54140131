"""A per-channel constant after a conv (a layer scale: ``gamma * conv(x)``,
PoolFormer's and ConvNeXt's; a shift ``+ beta`` left over from an exported
affine) folds into the conv's filter and bias (the scheduler's
``fold_batch_norms`` pass), so that the residual add after it fuses into the
conv's epilogue: one launch. Against float64 numpy on channel counts that do
not fill a block, odd sizes, N > 1, with and without bias, grouped and
depthwise; and the cases that must not fold: a constant along another axis or
per (n, c), a scale computed in the same plan or given as a graph input, a conv
output read twice or held by the caller."""

from __future__ import annotations

import re

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from jitnn.ops.normalization import batch_normalization_reference
from tests.helpers import assert_schedule, random

RTOL, ATOL = 2e-4, 5e-4


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _folds(text: str) -> int:
    """The per-channel constants (mul, add, sub) the plan folded into a conv:
    explain's pass line, ``fold_batch_norms: 3 folded into a conv2d (1
    batch_normalization, 2 mul)``."""
    found = re.search(r"fold_batch_norms: (\d+) folded into a conv2d(?: \((.*)\))?\n", text)
    assert found, text
    ops = dict((op, int(n)) for n, op in re.findall(r"(\d+) (\w+)", found.group(2) or ""))
    assert sum(ops.values()) == int(found.group(1)), text
    return sum(n for op, n in ops.items() if op in ("mul", "add", "sub"))


def _conv_case(c: int, groups: int, kernel: int, seed: int):
    """x (2, c, 9, 7), a filter of c outputs in ``groups`` and a bias."""
    x = random((2, c, 9, 7), seed)
    w = random((c, c // groups, kernel, kernel), seed + 1, 0.3)
    b = random((c,), seed + 2)
    return x, w, b


# (channels, groups, kernel): a first-layer conv (3 < any block), 1x1, grouped,
# depthwise, a direct 3x3 past one block
CASES = [(3, 1, 3), (7, 7, 3), (9, 3, 3), (17, 1, 1), (17, 17, 5)]


@pytest.mark.parametrize("c, groups, kernel", CASES)
# (without a bias: the same fold and kernels, in the slow run)
@pytest.mark.parametrize("with_bias", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_scale_then_residual_is_one_launch(c, groups, kernel, with_bias):
    ctx = jitnn.Context()
    x_np, w_np, b_np = _conv_case(c, groups, kernel, c + groups)
    gamma_np = random((c, 1, 1), 40 + c)
    x, gamma = ctx.tensor(x_np), ctx.tensor(gamma_np)
    # the scale first (a product in either order folds)
    y = jitnn.add(jitnn.mul(gamma, jitnn.conv2d(x, w_np, b_np if with_bias else None,
                                                padding=kernel // 2, groups=groups)), x)
    text = jitnn.explain(y)
    assert _folds(text) == 1 and "conv2d + mul + add" in text, text
    with assert_schedule(ctx, kernels=1, fused=2):
        got = y.numpy()
    want = conv2d_reference(x_np, w_np, b_np if with_bias else None, padding=kernel // 2,
                            groups=groups)
    _close(got, want * gamma_np + x_np)


@pytest.mark.parametrize("shape", [(1, 9, 1, 1), (9, 1, 1), (1,), ()])
def test_scale_shapes_and_a_shift_fold(shape):
    """A (1, C, 1, 1), (C, 1, 1) or size-1 tensor scale, or a number, after
    the conv; then a per-channel shift added (a constant, so also folded),
    then the residual: one launch, the bias made where the conv had none."""
    ctx = jitnn.Context()
    x_np, w_np, _ = _conv_case(9, 1, 3, 3)
    gamma_np = random(shape, 5) if shape else np.float32(-0.75)
    beta_np = random((9, 1, 1), 6)
    x = ctx.tensor(x_np)
    gamma = ctx.tensor(gamma_np) if shape else float(gamma_np)
    beta = ctx.tensor(beta_np)
    y = jitnn.add(jitnn.add(jitnn.mul(jitnn.conv2d(x, w_np, padding=1), gamma), beta), x)
    text = jitnn.explain(y)
    assert _folds(text) == 2 and "conv2d + mul + add + add" in text, text
    with assert_schedule(ctx, kernels=1, fused=3):
        got = y.numpy()
    want = conv2d_reference(x_np, w_np, padding=1)
    _close(got, (want * np.asarray(gamma_np, np.float64).reshape(
        (1,) * (4 - len(shape)) + shape)) + beta_np + x_np)


def test_a_channels_last_conv_folds_a_scale_on_its_last_axis():
    ctx = jitnn.Context()
    x_np = random((2, 7, 9, 17), 15)                     # NHWC, 17 channels
    w_np = random((17, 17, 3, 3), 16, 0.3)
    s_np = random((17,), 17)
    x, s = ctx.tensor(x_np), ctx.tensor(s_np)
    y = jitnn.mul(jitnn.conv2d(x, w_np, padding=1, input_layout="nhwc"), s)
    text = jitnn.explain(y)
    assert _folds(text) == 1 and "conv2d + mul" in text, text
    _close(y.numpy(), conv2d_reference(x_np, w_np, padding=1, input_layout="nhwc") * s_np)


def test_batch_norm_then_scale_and_shift_fold_together():
    """conv -> batch_normalization -> (x - t) * s: all three in the filter and
    bias, composed in float64, then the residual and ReLU in the epilogue."""
    ctx = jitnn.Context()
    x_np, w_np, b_np = _conv_case(17, 1, 3, 11)
    rng = np.random.default_rng(12)
    bn = (rng.standard_normal(17).astype(np.float32) * 0.1,
          (rng.random(17) + 0.5).astype(np.float32),
          (rng.random(17) + 0.5).astype(np.float32),
          rng.standard_normal(17).astype(np.float32) * 0.1)
    t_np, s_np = random((17, 1, 1), 13), random((1, 17, 1, 1), 14)
    x, t, s = ctx.tensor(x_np), ctx.tensor(t_np), ctx.tensor(s_np)
    y = jitnn.relu(jitnn.add(jitnn.mul(jitnn.sub(
        jitnn.batch_normalization(jitnn.conv2d(x, w_np, b_np, padding=1),
                                  *[ctx.tensor(p) for p in bn]), t), s), x))
    text = jitnn.explain(y)
    assert "fold_batch_norms: 3 folded into a conv2d (1 batch_normalization, 1 mul, 1 sub)" \
        in text, text
    with assert_schedule(ctx, kernels=1, fused=5):
        got = y.numpy()
    want = batch_normalization_reference(conv2d_reference(x_np, w_np, b_np, padding=1), *bn)
    _close(got, np.maximum((want - t_np) * s_np + x_np, 0))


def _unfolded(y, ctx, want, kernels: int) -> None:
    text = jitnn.explain(y)
    assert _folds(text) == 0, text
    with assert_schedule(ctx, kernels=kernels):
        got = y.numpy()
    _close(got, want)


@pytest.mark.parametrize("shape", [(1, 1, 9, 1), (2, 9, 1, 1)])
def test_a_constant_along_another_axis_or_per_sample_does_not_fold(shape):
    ctx = jitnn.Context()
    x_np, w_np, b_np = _conv_case(9, 1, 3, 21)
    s_np = random(shape, 22)
    x = ctx.tensor(x_np)
    y = jitnn.add(jitnn.mul(jitnn.conv2d(x, w_np, b_np, padding=1), ctx.tensor(s_np)), x)
    want = conv2d_reference(x_np, w_np, b_np, padding=1) * s_np + x_np
    _unfolded(y, ctx, want, kernels=2)         # the conv, then mul + add as one pass


@pytest.mark.parametrize("odd", [np.inf, -0.0])
def test_a_scale_that_is_not_finite_or_zero_does_not_fold(odd):
    """conv * inf is +-inf (NaN at an exact 0), a filter times inf NaN
    wherever a weight is 0; conv * -0.0 gives each zero the sign of -conv, a
    filter times it a sum of zeros: such a scale stays a pass of its own."""
    ctx = jitnn.Context()
    x_np, w_np, b_np = _conv_case(9, 1, 3, 29)
    s_np = random((9, 1, 1), 30)
    s_np[4] = odd
    w_np[4, :, 1] = 0
    x = ctx.tensor(x_np)
    y = jitnn.mul(jitnn.conv2d(x, w_np, b_np, padding=1), ctx.tensor(s_np))
    with np.errstate(invalid="ignore"):
        want = conv2d_reference(x_np, w_np, b_np, padding=1) * s_np
    _unfolded(y, ctx, want, kernels=2)
    np.testing.assert_array_equal(np.signbit(y.numpy()), np.signbit(want))


def test_a_scale_computed_in_the_plan_does_not_fold():
    ctx = jitnn.Context()
    x_np, w_np, b_np = _conv_case(9, 1, 3, 23)
    s_np = random((9, 1, 1), 24)
    x = ctx.tensor(x_np)
    scale = jitnn.relu(ctx.tensor(s_np))                 # pending: computed with the conv
    y = jitnn.add(jitnn.mul(jitnn.conv2d(x, w_np, b_np, padding=1), scale), x)
    want = conv2d_reference(x_np, w_np, b_np, padding=1) * np.maximum(s_np, 0) + x_np
    _unfolded(y, ctx, want, kernels=3)


def test_a_conv_output_read_twice_or_held_does_not_fold():
    ctx = jitnn.Context()
    x_np, w_np, b_np = _conv_case(9, 1, 3, 25)
    s_np = random((9, 1, 1), 26)
    x, s = ctx.tensor(x_np), ctx.tensor(s_np)
    conv = jitnn.conv2d(x, w_np, b_np, padding=1)
    conv64 = conv2d_reference(x_np, w_np, b_np, padding=1)
    y = jitnn.add(jitnn.mul(conv, s), conv)              # the conv's output read twice
    _unfolded(y, ctx, conv64 * s_np + conv64, kernels=2)
    conv = jitnn.conv2d(x, w_np, b_np, padding=1)       # held by the caller
    y = jitnn.mul(conv, s)
    _unfolded(y, ctx, conv64 * s_np, kernels=2)
    _close(conv.numpy(), conv64)


def _scaled_graph(ctx, x_shape, w: np.ndarray, constant: np.ndarray | None):
    """relu(conv(x)), then a block scaled by ``constant`` (None: by a graph
    input ``s``) with its residual."""
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", x_shape)
    scale = b.input("s", (w.shape[0], 1, 1)) if constant is None else b.constant(constant)
    h = b.relu(b.conv2d(x, b.constant(w), padding=1))
    return b.build({"y": b.add(b.mul(b.conv2d(h, b.constant(w), padding=1), scale), h)})


def test_graph_constant_folds_and_graph_input_does_not():
    """In one context, two graphs of one shape: the layer scale a constant
    (folded, bound in the replay, the same numbers run after run), or a graph
    input (not folded, its new numbers used at every run)."""
    ctx = jitnn.Context()
    x_np, w_np, _ = _conv_case(9, 1, 3, 27)
    s_np = random((9, 1, 1), 28)
    constant = _scaled_graph(ctx, x_np.shape, w_np, s_np)
    given = _scaled_graph(ctx, x_np.shape, w_np, None)
    assert _folds(jitnn.explain(ctx.dispatch(constant, {"x": x_np})["y"])) == 1
    assert _folds(jitnn.explain(ctx.dispatch(given, {"x": x_np, "s": s_np})["y"])) == 0
    out = {"y": np.empty(x_np.shape, np.float32)}
    for run in range(3):
        x_run = x_np * (run + 1)
        h64 = np.maximum(conv2d_reference(x_run, w_np, padding=1), 0)
        ctx.compute(constant, {"x": x_run}, out)
        _close(out["y"], conv2d_reference(h64, w_np, padding=1) * s_np + h64)
        s_run = s_np * (run - 1)
        ctx.compute(given, {"x": x_run, "s": s_run}, out)
        _close(out["y"], conv2d_reference(h64, w_np, padding=1) * s_run + h64)
    program = constant._programs[0]
    labels = [s.step.label for s in program.steps]
    assert labels[-1] == "conv2d + mul + add" and len(labels) == 3, labels
    assert program.bindings.steps[-1]                    # the folded conv ran bound


def test_onnx_conv_mul_add_converts_and_folds():
    """Conv -> Mul(constant (C, 1, 1)) -> Add(residual), and a Conv without
    bias -> Mul(scalar constant) -> Add(constant shift) -> Add(residual), built
    with onnx.helper: each one conv launch, against float64."""
    pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")
    import jitnn.onnx
    from tests.onnx_nets import Net
    net = Net(31)
    c, shape = 7, (2, 7, 11, 9)
    w, bias = random((c, c, 3, 3), 32, 0.3), random((c,), 33)
    gamma, beta, scalar = random((c, 1, 1), 34), random((1, c, 1, 1), 35), np.float32(0.3)
    x = net.input("x", shape)
    h = net("Conv", x, net.const(w), net.const(bias), pads=[1, 1, 1, 1])
    y1 = net("Add", net("Mul", h, net.const(gamma)), x)
    h = net("Conv", y1, net.const(w), pads=[1, 1, 1, 1])
    y2 = net("Add", x, net("Add", net("Mul", net.const(scalar), h), net.const(beta)))
    ctx = jitnn.Context()
    model = jitnn.onnx.prepare(net.model([y2]), ctx)
    feed = {"x": random(shape, 36)}
    text = jitnn.explain(model.dispatch(feed)[y2])
    assert _folds(text) == 3 and text.count("conv2d + mul + add") == 2, text
    got = model.run(feed)[y2]
    x64 = feed["x"].astype(np.float64)
    want1 = conv2d_reference(x64, w, bias, padding=1) * gamma + x64
    want = x64 + conv2d_reference(want1, w, padding=1) * float(scalar) + beta
    _close(got, want)
