"""Regression tests of defects that hostile testing found: each case failed
before its fix (a valid op failing when read, graph replay, buffer planning,
builder operands as options), and a failure at flush must name its op and
not surface from an innocent call."""

import functools

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from jitnn.ops.matmul import matmul_reference

from .helpers import assert_close, random as _random
from .onnx_models import csp_block_net, efficientnet_b0, evaluate

ONNX_MISSING = 'the ONNX model tests need onnx (in the test extra: pip install -e ".[test]")'

#: float32 results of long sums, against float64 references
_close = functools.partial(assert_close, tol=1e-4)


# --- matmul: packed right operands of any rank -----------------------------

@pytest.mark.parametrize("a_shape,b_shape", [
    ((1, 1, 64, 65), (1, 1, 65, 64)),       # ONNX attention at batch 1
    ((1, 1, 64, 65), (1, 65, 64)),
    ((2, 3, 64, 65), (1, 1, 65, 64)),       # b's batch dims all 1: packed once
    ((2, 64, 512), (512,)),                 # a 1-D right operand, packed
    ((300000,), (300000,)),                 # two vectors: one dot product, packed
    ((1, 300000), (300000,)),
    ((2, 80, 4096), (4096,)),
    ((3, 1, 9, 65), (1, 7, 65, 17)),        # broadcast both ways (not packed)
])
def test_matmul_right_operand_of_any_rank(a_shape, b_shape):
    a, b = _random(a_shape, 1), _random(b_shape, 2)
    got = jitnn.matmul(a, b).numpy()
    want = matmul_reference(a, b)
    assert got.shape == want.shape
    _close(got, want)
    # the same weight tensor again: its packing is reused
    b_tensor = jitnn.tensor(b)
    first = jitnn.matmul(a, b_tensor).numpy()
    np.testing.assert_array_equal(jitnn.matmul(a, b_tensor).numpy(), first)


def test_graph_attention_scores_at_batch_1():
    ctx = jitnn.Context()
    builder = jitnn.GraphBuilder(ctx)
    q = builder.input("q", (1, 2, 64, 65))
    k = builder.constant(_random((1, 1, 65, 64), 3))
    graph = builder.build({"s": builder.matmul(q, k)})
    q_values = _random((1, 2, 64, 65), 4)
    out = np.empty((1, 2, 64, 64), np.float32)
    for _ in range(2):
        ctx.compute(graph, {"q": q_values}, {"s": out})
        _close(out, matmul_reference(q_values, _random((1, 1, 65, 64), 3)))


# --- a failure at flush ------------------------------------------------------

def _broken_matmul(monkeypatch):
    """Make every batched matmul kernel fail, as a bug in a kernel would."""
    from jitnn.kernels import matmul as mm

    def broken(*args, **kwargs):
        raise ValueError("pack_b: b must have rank 2 or 3")
    monkeypatch.setattr(mm, "batched_matmul", broken)


def test_a_failed_op_is_named_when_read(monkeypatch):
    _broken_matmul(monkeypatch)
    ctx = jitnn.Context()
    a = ctx.tensor(_random((2, 8, 5)))
    y = jitnn.relu(jitnn.matmul(a, _random((2, 5, 3))))
    with pytest.raises(jitnn.JitnnExecutionError, match=r"^matmul: failed when run") as info:
        y.numpy()
    assert isinstance(info.value.__cause__, ValueError)
    # nothing is corrupted: once the kernel works, the same tensor reads right
    monkeypatch.undo()
    _close(y.numpy(), np.maximum(matmul_reference(a.numpy(), _random((2, 5, 3))), 0))


def test_an_auto_flush_does_not_raise_from_an_innocent_call(monkeypatch):
    _broken_matmul(monkeypatch)
    ctx = jitnn.Context(max_pending_ops=3)
    x = _random((2, 8, 5))
    bad = jitnn.matmul(ctx.tensor(x), _random((2, 5, 3)))
    good, want = ctx.tensor(_random((4, 4))), _random((4, 4))
    for _ in range(6):          # past the bound: auto-flushes run the bad matmul
        good, want = jitnn.relu(jitnn.add(good, 1.0)), np.maximum(want + 1, 0)
    _close(good.numpy(), want)
    with pytest.raises(jitnn.JitnnExecutionError, match="^matmul"):
        bad.numpy()
    monkeypatch.undo()
    _close(bad.numpy(), matmul_reference(x, _random((2, 5, 3))))


# --- graph replay: a conv whose residual is its own plain input --------------

@pytest.mark.parametrize("channels", [1, 3, 7])
def test_replayed_first_layer_conv_with_its_input_as_residual(channels):
    ctx = jitnn.Context()
    builder = jitnn.GraphBuilder(ctx)
    x = builder.input("x", (2, channels, 9, 11))
    w_values = _random((channels, channels, 3, 3), 5)
    y = builder.add(builder.conv2d(x, builder.constant(w_values), padding=1), x)
    graph = builder.build({"y": y})
    out = np.empty((2, channels, 9, 11), np.float32)
    for seed in range(3):                        # the second compute replays
        x_values = _random((2, channels, 9, 11), 10 + seed)
        ctx.compute(graph, {"x": x_values}, {"y": out})
        _close(out, conv2d_reference(x_values, w_values, padding=1) + x_values)


# --- buffer planning: x * sigmoid(x) frees its input once --------------------

def _compare_with_reference(model, batch_seed=1, computes=2):
    shape = tuple(d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim)
    x = np.random.default_rng(batch_seed).standard_normal(shape).astype(np.float32)
    want = next(iter(evaluate(model, {"input": x}).values()))
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx)
    name = next(iter(graph.outputs))
    _close(ctx.dispatch(graph, {"input": x})[name].numpy(), want)
    out = np.empty(graph.outputs[name], np.float32)
    for _ in range(computes):
        ctx.compute(graph, {"input": x}, {name: out})
        _close(out, want)


def test_efficientnet_b0_matches_its_reference():
    pytest.importorskip("onnx", reason=ONNX_MISSING)
    import jitnn.onnx  # noqa: F401
    # half width: the SE steps' buffers still collide on the old planner
    _compare_with_reference(efficientnet_b0(width=0.5, size=64, batch=1))


@pytest.mark.slow
@pytest.mark.parametrize("batch", [1, 2])
def test_full_efficientnet_b0_matches_its_reference(batch):
    pytest.importorskip("onnx", reason=ONNX_MISSING)
    import jitnn.onnx  # noqa: F401
    _compare_with_reference(efficientnet_b0(size=224, batch=batch), computes=1)


def test_csp_stage_matches_its_reference():
    pytest.importorskip("onnx", reason=ONNX_MISSING)
    import jitnn.onnx  # noqa: F401
    _compare_with_reference(csp_block_net())


def test_a_value_read_twice_by_one_op_frees_its_buffer_once():
    # h lands in a larger dead buffer, so x * sigmoid(x) cannot run in place
    # and frees h's buffer; freed twice (h is read twice), the buffer went to
    # the pool's result and to the conv that reads it
    x = _random((1, 24, 5, 5))
    w1, w2, w3, w4 = (_random(shape, seed) for seed, shape in enumerate(
        [(48, 24, 1, 1), (48, 48, 1, 1), (24, 48, 1, 1), (8, 24, 1, 1)]))
    a = jitnn.conv2d(jitnn.tensor(x), w1)
    h = jitnn.conv2d(jitnn.conv2d(a, w2), w3)
    s = jitnn.mul(h, jitnn.sigmoid(h))
    y = jitnn.conv2d(jitnn.global_average_pool2d(s), w4)
    del a, h, s
    h_want = conv2d_reference(conv2d_reference(conv2d_reference(x, w1), w2), w3)
    s_want = h_want * 0.5 * (1 + np.tanh(h_want / 2))       # x * sigmoid(x)
    _close(y.numpy(), conv2d_reference(s_want.mean(axis=(2, 3), keepdims=True), w4))


# --- builder operands as options -----------------------------------------------

def test_builder_operands_in_options():
    ctx = jitnn.Context()
    builder = jitnn.GraphBuilder(ctx)
    x = builder.input("x", (2, 3, 7, 9))
    w, bias = _random((5, 3, 3, 3), 1), _random(5, 2)
    mean, var, scale, shift = _random(5, 3), np.abs(_random(5, 4)) + 0.5, _random(5, 5), \
        _random(5, 6)
    conv = builder.conv2d(x, builder.constant(w), bias=builder.constant(bias), padding=1)
    y = builder.batch_normalization(conv, builder.constant(mean), builder.constant(var),
                                    scale=builder.constant(scale), bias=builder.constant(shift))
    a = builder.input("a", (4, 6))
    c = builder.constant(_random(5, 7))
    z = builder.gemm(a, builder.constant(_random((6, 5), 8)), c=c, beta=0.5)
    graph = builder.build({"y": y, "z": z})
    x_values, a_values = _random((2, 3, 7, 9), 9), _random((4, 6), 10)
    outs = ctx.dispatch(graph, {"x": x_values, "a": a_values})
    conv_want = conv2d_reference(x_values, w, bias, padding=1)
    r = lambda v: v.reshape(1, -1, 1, 1)  # noqa: E731
    _close(outs["y"].numpy(),
           (conv_want - r(mean)) / np.sqrt(r(var) + 1e-5) * r(scale) + r(shift))
    _close(outs["z"].numpy(), a_values.astype(np.float64) @ _random((6, 5), 8)
           + 0.5 * _random(5, 7))
