"""The graph API: GraphBuilder, build once, dispatch (lazy, validated now), compute."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference


def _random(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


def _close(got, want, atol=2e-4):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=atol)


@pytest.fixture
def conv_graph():
    ctx = jitnn.Context()
    w = _random((8, 5, 3, 3), 1, 0.3)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 5, 7, 6))
    y = b.relu(b.conv2d(x, b.constant(w), padding=(1, 1, 1, 1)))
    pooled = b.global_average_pool2d(y)
    graph = b.build({"y": y, "pooled": pooled})
    return ctx, graph, w


def _want(x, w):
    y = np.maximum(conv2d_reference(x, w, padding=1), 0)
    return y, y.mean(axis=(2, 3), keepdims=True)


def test_builder_infers_shapes_and_the_graph_lists_its_io(conv_graph):
    ctx, graph, _ = conv_graph
    assert graph.inputs == {"x": (2, 5, 7, 6)}
    assert graph.outputs == {"y": (2, 8, 7, 6), "pooled": (2, 8, 1, 1)}
    assert "conv2d" in repr(graph)


def test_dispatch_is_lazy_and_reading_twice_gives_the_same_values(conv_graph):
    ctx, graph, w = conv_graph
    x = _random((2, 5, 7, 6), 2)
    ctx.reset_stats()
    outs = ctx.dispatch(graph, {"x": ctx.tensor(x)})
    assert set(outs) == {"y", "pooled"} and all(t.pending for t in outs.values())
    assert ctx.stats.launches == 0
    want_y, want_pooled = _want(x, w)
    first = outs["y"].numpy()
    _close(first, want_y)
    _close(outs["y"].numpy(), first)             # twice: same values, no recomputation
    _close(outs["pooled"].numpy(), want_pooled)
    assert ctx.stats.launches == 2 and ctx.stats.fused_ops == 1   # conv+relu, pool


def test_dispatch_many_times_reuses_the_packed_constants(conv_graph):
    ctx, graph, w = conv_graph
    ctx.reset_stats()
    for seed in range(3):
        x = _random((2, 5, 7, 6), 10 + seed)
        _close(ctx.dispatch(graph, {"x": x})["y"].numpy(), _want(x, w)[0])
    assert ctx.stats.filter_packs == 1


def test_compute_writes_into_the_callers_arrays(conv_graph):
    ctx, graph, w = conv_graph
    x = _random((2, 5, 7, 6), 3)
    y_out = np.full((2, 8, 7, 6), np.nan, np.float32)
    pooled_out = np.empty((2, 8, 1, 1), np.float32)
    result = ctx.compute(graph, {"x": x}, {"y": y_out, "pooled": pooled_out})
    assert result["y"] is y_out and result["pooled"] is pooled_out
    want_y, want_pooled = _want(x, w)
    _close(y_out, want_y)
    _close(pooled_out, want_pooled)


@pytest.mark.parametrize("inputs,message", [
    ({}, "missing input 'x'"),
    ({"x": np.zeros((2, 5, 7, 6), np.float32), "z": np.zeros(1)}, "unknown input 'z'"),
    ({"x": np.zeros((2, 5, 7, 7), np.float32)}, r"input 'x' has shape \(2, 5, 7, 7\), expected"),
    ({"x": np.zeros((2, 5, 7, 6), np.float64)}, "input 'x' has dtype float64, expected float32"),
])
def test_dispatch_validates_at_once(conv_graph, inputs, message):
    ctx, graph, _ = conv_graph
    with pytest.raises(TypeError, match=message):
        ctx.dispatch(graph, inputs)


def test_compute_validates_outputs(conv_graph):
    ctx, graph, _ = conv_graph
    x = np.zeros((2, 5, 7, 6), np.float32)
    good = {"y": np.empty((2, 8, 7, 6), np.float32), "pooled": np.empty((2, 8, 1, 1), np.float32)}
    with pytest.raises(TypeError, match="missing 'pooled'"):
        ctx.compute(graph, {"x": x}, {"y": good["y"]})
    with pytest.raises(TypeError, match="output 'y' must be a writeable C-contiguous float32"):
        ctx.compute(graph, {"x": x}, {**good, "y": np.empty((2, 8, 7, 6), np.float64)})


def test_a_builder_builds_once_and_errors_name_the_op():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 3, 8, 8))
    with pytest.raises(jitnn.JitnnValueError, match="conv2d: input has 3 channels but the filter expects 4"):
        b.conv2d(x, b.constant(np.zeros((4, 4, 3, 3), np.float32)))
    with pytest.raises(jitnn.JitnnValueError, match="exists already"):
        b.input("x", (1, 3, 8, 8))
    with pytest.raises(TypeError, match="float32"):
        b.input("y", (1, 3), dtype="int32")
    g = b.build({"out": b.relu(x)})
    with pytest.raises(jitnn.JitnnValueError, match="already built its graph"):
        b.relu(x)
    with pytest.raises(jitnn.JitnnValueError, match="already built its graph"):
        b.build({"out": x})
    with pytest.raises(jitnn.JitnnValueError, match="another context"):
        jitnn.Context().dispatch(g, {"x": np.zeros((1, 3, 8, 8), np.float32)})
    other = jitnn.GraphBuilder(ctx)
    with pytest.raises(jitnn.JitnnValueError, match="another builder"):
        other.relu(x)


def test_graph_of_a_bottleneck_fuses_like_eager_ops():
    ctx = jitnn.Context()
    rng = np.random.default_rng(5)
    c, mid = 16, 8
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, c, 9, 9))
    params = []
    y = x
    for i, (o, i_c, k) in enumerate([(mid, c, 1), (mid, mid, 3), (c, mid, 1)]):
        w = (rng.standard_normal((o, i_c, k, k)) / np.sqrt(i_c * k * k)).astype(np.float32)
        mean, var = rng.standard_normal(o).astype(np.float32), (rng.random(o) + .5).astype(np.float32)
        params.append((w, mean, var))
        y = b.batch_normalization(b.conv2d(y, b.constant(w), padding=k // 2),
                                  b.constant(mean), b.constant(var))
        if i < 2:
            y = b.relu(y)
    graph = b.build({"out": b.relu(b.add(y, x))})
    x_np = _random((1, c, 9, 9), 6)
    ctx.reset_stats()
    got = ctx.dispatch(graph, {"x": x_np})["out"].numpy()
    assert ctx.stats.launches == 3 and ctx.stats.reorders == 2
    want = x_np.astype(np.float64)
    for i, (w, mean, var) in enumerate(params):
        want = (conv2d_reference(want, w, padding=w.shape[2] // 2) - mean[:, None, None]) \
            / np.sqrt(var[:, None, None] + 1e-5)
        want = np.maximum(want, 0) if i < 2 else np.maximum(want + x_np, 0)
    _close(got, want, atol=5e-4)
