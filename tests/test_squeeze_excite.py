"""Squeeze-and-excitation blocks: found in a plan and run as one launch
(jitnn/ops/squeeze_excite.py, kernels/squeeze_excite.py)."""

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from jitnn.kernels import epilogue
from jitnn.kernels.squeeze_excite import squeeze_excite
from jitnn.ops.conv2d import conv2d_reference
from tests.helpers import assert_schedule, random


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _gate_reference(x, w1, b1, w2, b2, inner, gate):
    """The block's gate in float64: mean, 1x1 conv + inner, 1x1 conv + gate."""
    pooled = x.astype(np.float64).mean((2, 3), keepdims=True)
    return gate(conv2d_reference(inner(conv2d_reference(pooled, w1, b1)), w2, b2))


def _reference(x, *weights_and_activations):
    return x * _gate_reference(x, *weights_and_activations)


INNER = {"relu": (jitnn.relu, lambda h: np.maximum(h, 0)),
         "silu": (lambda h: jitnn.mul(h, jitnn.sigmoid(h)), lambda h: h * _sigmoid(h))}
GATE = {"sigmoid": (jitnn.sigmoid, _sigmoid),
        "hard_sigmoid": (jitnn.hard_sigmoid, lambda g: np.clip(g / 6 + 0.5, 0, 1))}


@pytest.mark.parametrize("batch,channels,reduced,size", [
    (1, 7, 3, 5), (2, 17, 5, 9), (2, 24, 8, 1), (1, 64, 16, 7)])
@pytest.mark.parametrize("inner", INNER)
@pytest.mark.parametrize("gate", GATE)
@pytest.mark.parametrize("gate_first", [False, True])
def test_a_squeeze_excitation_block_is_one_launch(batch, channels, reduced, size, inner, gate,
                                                  gate_first):
    ctx = jitnn.Context()
    x_np = random((batch, 5, size, size), 1)
    w0 = random((channels, 5, 3, 3), 2, 0.3)
    w1, b1 = random((reduced, channels, 1, 1), 3, 0.5), random((reduced,), 4)
    w2, b2 = random((channels, reduced, 1, 1), 5, 0.5), random((channels,), 6)
    alpha = 1 / 6 if gate == "hard_sigmoid" else None
    x = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w0), padding=1)
    hidden = INNER[inner][0](jitnn.conv2d(jitnn.global_average_pool2d(x), ctx.tensor(w1),
                                          ctx.tensor(b1)))
    excite = jitnn.conv2d(hidden, ctx.tensor(w2), ctx.tensor(b2))
    g = GATE[gate][0](excite, alpha, 0.5) if alpha else GATE[gate][0](excite)
    y = jitnn.mul(g, x) if gate_first else jitnn.mul(x, g)
    del x, hidden, excite, g
    assert "squeeze_excite" in jitnn.explain(y)
    with assert_schedule(ctx, kernels=2):           # the first conv, then the block
        got = y.numpy()
    x_ref = conv2d_reference(x_np.astype(np.float64), w0, padding=1)
    want = _reference(x_ref, w1, b1, w2, b2, INNER[inner][1], GATE[gate][1])
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("batch,channels,reduced,size", [(1, 7, 3, 5), (2, 17, 5, 9)])
@pytest.mark.parametrize("gate", GATE)
def test_a_block_squeezing_with_reduce_mean_is_one_launch(batch, channels, reduced, size, gate):
    """timm's SE modules (RegNetY's) pool with x.mean((2, 3), keepdim=True)."""
    ctx = jitnn.Context()
    x_np = random((batch, 5, size, size), 21)
    w0 = random((channels, 5, 3, 3), 22, 0.3)
    w1, b1 = random((reduced, channels, 1, 1), 23, 0.5), random((reduced,), 24)
    w2, b2 = random((channels, reduced, 1, 1), 25, 0.5), random((channels,), 26)
    x = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w0), padding=1)
    pooled = jitnn.reduce_mean(x, axes=[2, 3], keep_dimensions=True)
    excite = jitnn.conv2d(jitnn.relu(jitnn.conv2d(pooled, ctx.tensor(w1), ctx.tensor(b1))),
                          ctx.tensor(w2), ctx.tensor(b2))
    g = GATE[gate][0](excite, 1 / 6, 0.5) if gate == "hard_sigmoid" else GATE[gate][0](excite)
    y = jitnn.mul(x, g)
    del x, pooled, excite, g
    assert "squeeze_excite" in jitnn.explain(y)
    with assert_schedule(ctx, kernels=2):           # the first conv, then the block
        got = y.numpy()
    x_ref = conv2d_reference(x_np.astype(np.float64), w0, padding=1)
    want = _reference(x_ref, w1, b1, w2, b2, INNER["relu"][1], GATE[gate][1])
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)


def test_a_mean_over_rows_only_is_no_squeeze():
    """A mean over H alone (W > 1 left) is not the planes' means: no block."""
    ctx = jitnn.Context()
    x_np = random((1, 9, 5, 1), 27)
    w0, w1, w2 = random((9, 9, 1, 1), 28), random((4, 9, 1, 1), 29), random((9, 4, 1, 1), 30)
    x_ref = conv2d_reference(x_np.astype(np.float64), w0)
    # W = 1: the mean over H is the plane's mean, and fuses
    x = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w0))
    g = jitnn.sigmoid(jitnn.conv2d(jitnn.relu(jitnn.conv2d(
        jitnn.reduce_mean(x, axes=[2], keep_dimensions=True), ctx.tensor(w1))), ctx.tensor(w2)))
    y = jitnn.mul(x, g)
    del x, g
    assert "squeeze_excite" in jitnn.explain(y)
    want = _reference(x_ref, w1, None, w2, None, lambda h: np.maximum(h, 0), _sigmoid)
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-4, atol=2e-5)
    # W = 3: rows' means, (1, 9, 1, 3); the gate broadcasts over H
    x_np = random((1, 9, 5, 3), 31)
    x = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w0))
    g = jitnn.sigmoid(jitnn.conv2d(jitnn.relu(jitnn.conv2d(
        jitnn.reduce_mean(x, axes=[2], keep_dimensions=True), ctx.tensor(w1))), ctx.tensor(w2)))
    y = jitnn.mul(x, g)
    del x, g
    assert "squeeze_excite" not in jitnn.explain(y)
    x_ref = conv2d_reference(x_np.astype(np.float64), w0)
    rows = x_ref.mean(2, keepdims=True)
    gate_ref = _sigmoid(conv2d_reference(np.maximum(conv2d_reference(rows, w1), 0), w2))
    np.testing.assert_allclose(y.numpy(), x_ref * gate_ref, rtol=2e-4, atol=2e-5)


def test_the_block_stays_apart_where_its_inner_values_are_read():
    ctx = jitnn.Context()
    x_np = random((1, 9, 5, 5), 7)
    w0, w1, w2 = random((9, 9, 1, 1), 8), random((4, 9, 1, 1), 9), random((9, 4, 1, 1), 10)
    x_ref = np.maximum(conv2d_reference(x_np.astype(np.float64), w0), 0)
    gate_ref = _gate_reference(x_ref, w1, None, w2, None, lambda h: np.maximum(h, 0), _sigmoid)
    want = _reference(x_ref, w1, None, w2, None, lambda h: np.maximum(h, 0), _sigmoid)

    def block(pooled_of=jitnn.global_average_pool2d):
        x = jitnn.relu(jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w0)))
        pooled = pooled_of(x)
        gate = jitnn.sigmoid(jitnn.conv2d(jitnn.relu(jitnn.conv2d(pooled, ctx.tensor(w1))),
                                          ctx.tensor(w2)))
        return x, pooled, gate

    x, pooled, gate = block()
    y = jitnn.mul(x, gate)
    del x, gate                                         # pooled is held: no fusion
    np.testing.assert_allclose(y.numpy(), want, rtol=2e-4, atol=2e-5)
    assert "squeeze_excite" not in jitnn.explain(y)
    np.testing.assert_allclose(pooled.numpy(), x_ref.mean((2, 3), keepdims=True), rtol=1e-5)
    # a gate multiplying another tensor is no squeeze-and-excitation
    other = random((1, 9, 5, 5), 11)
    x, pooled, gate = block()
    z = jitnn.mul(ctx.tensor(other), gate)
    del x, pooled, gate
    np.testing.assert_allclose(z.numpy(), gate_ref * other, rtol=2e-4, atol=2e-5)
    assert "squeeze_excite" not in jitnn.explain(z)


@pytest.mark.parametrize("block", [4, 8, 16, 2])        # 2: no literal-block path
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("n, c, r, h, w", [(2, 11, 3, 3, 5), (1, 1, 1, 1, 1), (1, 17, 5, 7, 9),
                                           (3, 9, 4, 2, 3), (1, 3, 2, 4, 4)])
def test_kernel_matches_numpy(block, in_place, n, c, r, h, w):
    x = random((n, c, h, w), 13)
    w1, b1 = random((r, c), 14), random((r,), 15)
    w2, b2 = random((c, r), 16), random((c,), 17)
    lanes = layouts.padded_channels(c, block)
    excite = np.zeros((r, lanes), np.float32)
    excite[:, :c] = w2.T
    bias2 = np.zeros(lanes, np.float32)
    bias2[:c] = b2
    xb = layouts.reference_nchw_to_blocked(x, block)
    out = xb if in_place else np.full_like(xb, np.nan)
    squeeze_excite(xb, np.ascontiguousarray(w1.T), b1, (epilogue.LEAKY_RELU, 0.1, 0.0), excite,
                   bias2, (epilogue.HARD_SIGMOID, 0.2, 0.5), c, out)
    mean = x.astype(np.float64).mean((2, 3))
    hidden = mean @ w1.T + b1
    hidden = np.where(hidden >= 0, hidden, 0.1 * hidden)
    gate = np.clip(0.2 * (hidden @ w2.T + b2) + 0.5, 0, 1)
    full = out.transpose(0, 1, 4, 2, 3).reshape(n, lanes, h, w)
    np.testing.assert_allclose(full[:, :c], x * gate[:, :, None, None], rtol=1e-5, atol=1e-6)
    assert np.all(full[:, c:] == 0), "padding lanes are not zero"


@pytest.mark.parametrize("block", [8, 16])
def test_kernel_gates_with_sigmoid_after_silu(block):
    # the activations run as spans of the hidden and gate vectors
    n, c, r, h, w = 2, 37, 19, 6, 7
    x = random((n, c, h, w), 21)
    w1, b1 = random((r, c), 22), random((r,), 23)
    w2, b2 = random((c, r), 24), random((c,), 25)
    lanes = layouts.padded_channels(c, block)
    excite = np.zeros((r, lanes), np.float32)
    excite[:, :c] = w2.T
    bias2 = np.zeros(lanes, np.float32)
    bias2[:c] = b2
    xb = layouts.reference_nchw_to_blocked(x, block)
    out = np.full_like(xb, np.nan)
    squeeze_excite(xb, np.ascontiguousarray(w1.T), b1, (epilogue.SILU, 0.0, 0.0), excite,
                   bias2, (epilogue.SIGMOID, 0.0, 0.0), c, out)
    hidden = x.astype(np.float64).mean((2, 3)) @ w1.T + b1
    gate = _sigmoid((hidden * _sigmoid(hidden)) @ w2.T + b2)
    full = out.transpose(0, 1, 4, 2, 3).reshape(n, lanes, h, w)
    np.testing.assert_allclose(full[:, :c], x * gate[:, :, None, None], rtol=1e-5, atol=1e-6)
    assert np.all(full[:, c:] == 0), "padding lanes are not zero"


def test_a_replayed_block_is_one_bound_call():
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    c, r = 19, 5
    w0 = random((c, 4, 1, 1), 31)
    w1, b1 = random((r, c, 1, 1), 32, 0.5), random((r,), 33)
    w2 = random((c, r, 1, 1), 34, 0.5)
    x = b.relu(b.conv2d(b.input("x", (2, 4, 5, 6)), b.constant(w0)))
    hidden = b.relu(b.conv2d(b.global_average_pool2d(x), b.constant(w1), b.constant(b1)))
    gate = b.sigmoid(b.conv2d(hidden, b.constant(w2)))
    graph = b.build({"y": b.relu(b.mul(x, gate))})
    y = np.empty((2, c, 5, 6), np.float32)
    for seed in range(4):
        x_np = random((2, 4, 5, 6), 40 + seed)
        ctx.compute(graph, {"x": x_np}, {"y": y})
        x_ref = np.maximum(conv2d_reference(x_np.astype(np.float64), w0), 0)
        want = _reference(x_ref, w1, b1, w2, None, lambda h: np.maximum(h, 0), _sigmoid)
        np.testing.assert_allclose(y, np.maximum(want, 0), rtol=2e-4, atol=2e-5)
    (program,) = graph._programs
    kinds = [(c.node.kind, bool(bound)) for c, bound in
             zip(program.steps, program.bindings.steps) if c.step.kind == "op"]
    assert ("squeeze_excite", True) in kinds
    # the block's filters are kept in its kernel's form only; a reader gets them back exactly
    filters = {t.shape: t for t in graph._constants.values() if t.shape in (w1.shape, w2.shape)}
    for w in (w1, w2):
        assert filters[w.shape]._v._remake is not None
        np.testing.assert_array_equal(filters[w.shape].numpy(), w)


def test_kernel_refuses_bad_buffers():
    xb = np.zeros((1, 2, 3, 3, 8), np.float32)
    good = dict(squeeze=np.zeros((9, 2), np.float32), b1=np.zeros(2, np.float32),
                excite=np.zeros((2, 16), np.float32), b2=np.zeros(16, np.float32))

    def call(**changes):
        a = {**good, **changes}
        squeeze_excite(changes.get("x", xb), a["squeeze"], a["b1"], (0, 0, 0), a["excite"],
                       a["b2"], (0, 0, 0), changes.get("channels", 9),
                       changes.get("out", np.zeros_like(xb)))
    call()
    for changes, message in ((dict(channels=17), "channels"), (dict(channels=8), "channels"),
                             (dict(squeeze=np.zeros((9, 3), np.float32)), "squeeze"),
                             (dict(b2=np.zeros(9, np.float32)), "b2"),
                             (dict(out=xb[:, :, :2]), "out"),
                             (dict(x=xb.astype(np.float64)), "x must")):
        with pytest.raises(ValueError, match=message):
            call(**changes)
    shifted = np.zeros(xb.size + 8, np.float32)
    with pytest.raises(ValueError, match="overlap"):
        squeeze_excite(shifted[:-8].reshape(xb.shape), good["squeeze"], good["b1"], (0, 0, 0),
                       good["excite"], good["b2"], (0, 0, 0), 9, shifted[8:].reshape(xb.shape))
