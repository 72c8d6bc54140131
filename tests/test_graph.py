"""The graph API: GraphBuilder, build once, dispatch (lazy, validated now), compute."""

import time

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from tests.helpers import assert_schedule, portable_block_slow, random


def _close(got, want, atol=2e-4):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=atol)


@pytest.fixture
def conv_graph():
    ctx = jitnn.Context()
    w = random((8, 5, 3, 3), 1, 0.3)
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
    x = random((2, 5, 7, 6), 2)
    with assert_schedule(ctx, kernels=0):
        outs = ctx.dispatch(graph, {"x": ctx.tensor(x)})
    assert set(outs) == {"y", "pooled"} and all(t.pending for t in outs.values())
    want_y, want_pooled = _want(x, w)
    with assert_schedule(ctx, kernels=2, fused=1):   # conv+relu, pool
        first = outs["y"].numpy()
        _close(first, want_y)
        _close(outs["y"].numpy(), first)         # twice: same values, no recomputation
        _close(outs["pooled"].numpy(), want_pooled)


def test_dispatch_many_times_reuses_the_packed_constants(conv_graph):
    ctx, graph, w = conv_graph
    ctx.reset_stats()
    for seed in range(3):
        x = random((2, 5, 7, 6), 10 + seed)
        _close(ctx.dispatch(graph, {"x": x})["y"].numpy(), _want(x, w)[0])
    assert ctx.stats.filter_packs == 1


def test_compute_writes_into_the_callers_arrays(conv_graph):
    ctx, graph, w = conv_graph
    x = random((2, 5, 7, 6), 3)
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
    ({"x": np.zeros((2, 5, 7, 6), np.complex64)}, "input 'x': expected real numbers"),
    ({"x": np.zeros((2, 5, 7, 6), "U3")}, "input 'x': expected real numbers"),
])
def test_dispatch_validates_at_once(conv_graph, inputs, message):
    ctx, graph, _ = conv_graph
    with pytest.raises(TypeError, match=message):
        ctx.dispatch(graph, inputs)


@pytest.mark.parametrize("dtype", [np.float64, np.int32, np.int64, np.uint8, np.bool_])
def test_inputs_of_another_dtype_are_converted(conv_graph, dtype):
    # compute and dispatch copy them to float32 by value, as jitnn.tensor does
    ctx, graph, w = conv_graph
    x = (np.arange(2 * 5 * 7 * 6).reshape(2, 5, 7, 6) % 3).astype(dtype)
    want_y, want_pooled = _want(x.astype(np.float32), w)
    outs = {"y": np.empty((2, 8, 7, 6), np.float32), "pooled": np.empty((2, 8, 1, 1), np.float32)}
    ctx.compute(graph, {"x": x}, outs)
    _close(outs["y"], want_y)
    _close(ctx.dispatch(graph, {"x": x})["pooled"].numpy(), want_pooled)


def test_compute_validates_outputs(conv_graph):
    ctx, graph, _ = conv_graph
    x = np.zeros((2, 5, 7, 6), np.float32)
    good = {"y": np.empty((2, 8, 7, 6), np.float32), "pooled": np.empty((2, 8, 1, 1), np.float32)}
    with pytest.raises(TypeError, match="missing 'pooled'"):
        ctx.compute(graph, {"x": x}, {"y": good["y"]})
    with pytest.raises(TypeError, match="output 'y' must be a writeable C-contiguous float32"):
        ctx.compute(graph, {"x": x}, {**good, "y": np.empty((2, 8, 7, 6), np.float64)})
    # errors of compute name compute (they once said "dispatch")
    with pytest.raises(TypeError, match="^compute: missing input 'x'"):
        ctx.compute(graph, {}, good)
    with pytest.raises(jitnn.JitnnValueError, match="^compute: the graph was built for another"):
        jitnn.Context().compute(graph, {"x": x}, good)
    # two outputs in one array: the second would overwrite the first
    shared = np.empty(2 * 8 * 7 * 6 + 2 * 8, np.float32)
    with pytest.raises(jitnn.JitnnValueError, match="outputs 'y' and 'pooled' share memory"):
        ctx.compute(graph, {"x": x}, {"y": shared[:2 * 8 * 7 * 6].reshape(2, 8, 7, 6),
                                      "pooled": shared[-2 * 8 - 1:-1].reshape(2, 8, 1, 1)})


def test_a_tensor_passed_to_a_builder_op_mixes_with_operands():
    """(once "the tensors belong to different contexts": shape inference ran on
    the tensor itself)"""
    ctx = jitnn.Context()
    w, shift = random((8, 5, 3, 3), 3, 0.3), random((1, 8, 1, 1), 4)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 5, 7, 6))
    graph = b.build({"y": b.add(b.conv2d(x, ctx.tensor(w), padding=1), ctx.tensor(shift))})
    x_np = random((2, 5, 7, 6), 5)
    _close(ctx.dispatch(graph, {"x": x_np})["y"].numpy(),
           conv2d_reference(x_np, w, padding=1) + shift)
    with pytest.raises(jitnn.JitnnValueError, match="add: a tensor of another context"):
        jitnn.GraphBuilder(ctx).add(x, jitnn.Context().tensor(shift))


def test_a_builder_builds_once_and_errors_name_the_op():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 3, 8, 8))
    with pytest.raises(jitnn.JitnnValueError, match="conv2d: input has 3 channels but the filter expects 4"):
        b.conv2d(x, b.constant(np.zeros((4, 4, 3, 3), np.float32)))
    with pytest.raises(jitnn.JitnnValueError, match="exists already"):
        b.input("x", (1, 3, 8, 8))
    with pytest.raises(TypeError, match="float16 is not a jitnn data type"):
        b.input("y", (1, 3), dtype="float16")
    ids = b.input("ids", (1, 3), dtype="int32")
    assert ids.dtype == np.int32
    with pytest.raises(TypeError, match="sigmoid: x must have dtype float32, got a int32 tensor"):
        b.sigmoid(ids)
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
    x_np = random((1, c, 9, 9), 6)
    with assert_schedule(ctx, kernels=3, reorders=2):
        got = ctx.dispatch(graph, {"x": x_np})["out"].numpy()
    want = x_np.astype(np.float64)
    for i, (w, mean, var) in enumerate(params):
        want = (conv2d_reference(want, w, padding=w.shape[2] // 2) - mean[:, None, None]) \
            / np.sqrt(var[:, None, None] + 1e-5)
        want = np.maximum(want, 0) if i < 2 else np.maximum(want + x_np, 0)
    _close(got, want, atol=5e-4)


# --- compute replays the scheduled plan -----------------------------------------------

_COUNTED = ("reorders", "reorder_bytes", "launches", "fused_ops", "flushes")


def _counts(ctx):
    stats = ctx.stats
    return {name: getattr(stats, name) for name in _COUNTED}


def _resnet_block_graph(ctx):
    """conv+bn+relu, conv+bn + residual add (a plain input: reordered), two
    pools, a channel concat, global pool, flatten, matmul + bias add, gemm with
    bias, softmax; and a matmul whose right operand is computed from an input
    (packed again every call). ``features`` is also an intermediate of ``probs``."""
    rng = np.random.default_rng(40)
    c = 12                                       # not a multiple of the block: padding lanes
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, c, 10, 10))
    z = b.input("z", (64, 96))

    def const(*shape, scale=0.2):
        return b.constant((rng.standard_normal(shape) * scale).astype(np.float32))

    def bn(t):
        return b.batch_normalization(t, const(c), b.constant((rng.random(c) + .5).astype(np.float32)),
                                     const(c), const(c))
    y = b.relu(bn(b.conv2d(x, const(c, c, 3, 3), padding=1)))
    y = bn(b.conv2d(y, const(c, c, 3, 3), padding=1))
    features = b.relu(b.add(y, x))
    pooled = b.concat([b.max_pool2d(features, 2, strides=2),
                       b.average_pool2d(features, 2, strides=2)], axis=1)
    flat = b.flatten(b.global_average_pool2d(pooled))
    hidden = b.relu(b.add(b.matmul(flat, const(2 * c, 16)), const(16)))
    logits = b.gemm(hidden, const(16, 10), const(10))
    graph = b.build({"probs": b.softmax(logits), "features": features, "pooled": pooled,
                     "gram": b.matmul(z, b.transpose(z))})
    return graph


def _block_inputs(seed):
    return {"x": random((1, 12, 10, 10), seed), "z": random((64, 96), seed + 1000)}


def _nan_outputs(graph):
    return {name: np.full(shape, np.nan, np.float32) for name, shape in graph.outputs.items()}


def _dispatched(ctx, graph, inputs):
    return {name: t.numpy() for name, t in ctx.dispatch(graph, inputs).items()}


# (block 4, unless it is the host's, in the slow run: its own compiles of the
# block's drivers, ~7 s of a cold default run, for the same replay)
@pytest.mark.parametrize("block", portable_block_slow((8, 4)))
def test_compute_replays_the_plan_bit_identically_on_new_inputs(block, monkeypatch):
    ctx = jitnn.Context(block=block)
    graph = _resnet_block_graph(ctx)
    dispatches = []
    run_ops = jitnn.graph.Graph._run_ops
    monkeypatch.setattr(jitnn.graph.Graph, "_run_ops",
                        lambda self, *args: dispatches.append(1) or run_ops(self, *args))
    counts = []
    for seed in range(4):                        # new inputs every call: stale data would show
        inputs = _block_inputs(seed)
        outs = _nan_outputs(graph)
        ctx.reset_stats()
        result = ctx.compute(graph, inputs, outs)
        counts.append(_counts(ctx))
        assert all(result[name] is outs[name] for name in outs)
        want = _dispatched(ctx, graph, inputs)
        for name in outs:
            np.testing.assert_array_equal(outs[name], want[name], err_msg=name)
    assert len(dispatches) == 1 + 4             # compute dispatched once; the 4 dispatches
    assert counts[0]["flushes"] == 1 and counts[0]["reorders"] >= 2
    assert all(c == counts[0] for c in counts[1:]), counts
    # the normal path counts the same: dispatch and read_all
    inputs = _block_inputs(9)
    ctx.reset_stats()
    tensors = ctx.dispatch(graph, inputs)
    ctx.read_all(list(tensors.values()), [np.empty(graph.outputs[n], np.float32) for n in tensors])
    assert _counts(ctx) == counts[0]
    # between calls the program holds no data of any input or result
    (program,) = graph._programs
    assert all(v._data is None and not v._derived for v in program.dynamic)
    # and a replay is right, not only the same (the packed right operand is this call's)
    outs = _nan_outputs(graph)
    ctx.compute(graph, inputs, outs)
    np.testing.assert_allclose(outs["gram"], inputs["z"] @ inputs["z"].T, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(outs["probs"].sum(axis=1), 1, rtol=1e-5)


def test_compute_replays_chained_matmuls_in_their_plan_buffers():
    """Intermediate products sit in the plan's arena (room for 2 of the 3),
    which a replay hands out again: new inputs every call, each result
    against numpy."""
    ctx = jitnn.Context(num_threads=1)   # (2+: slots rest, passes.SETTLE_STEPS)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (16, 40))
    h = x
    weights = [random((40, 40), seed, 0.2) for seed in range(1, 5)]
    for w in weights:
        h = b.matmul(h, b.constant(w), activation="relu")
    graph = b.build({"y": h})
    for seed in range(3):
        x_np = random((16, 40), 10 + seed)
        want = x_np.astype(np.float64)
        for w in weights:
            want = np.maximum(want @ w.astype(np.float64), 0)
        out = np.full((16, 40), np.nan, np.float32)
        ctx.compute(graph, {"x": x_np}, {"y": out})
        _close(out, want)
    (program,) = graph._programs
    assert program.plan.buffer_slots == 3 and program.plan.arena_bytes == 2 * 16 * 40 * 4


def test_compute_keeps_nothing_of_the_callers_inputs_between_calls():
    ctx = jitnn.Context()
    graph = _resnet_block_graph(ctx)
    first, second = _block_inputs(1), _block_inputs(2)
    outs = _nan_outputs(graph)
    ctx.compute(graph, first, outs)
    kept = {name: array.copy() for name, array in outs.items()}
    want_first = _dispatched(ctx, graph, first)
    first["x"] += 1.0                            # the caller's arrays change after the call
    first["z"] *= 2.0
    outs = _nan_outputs(graph)
    ctx.compute(graph, second, outs)             # a replay, on other inputs
    want_second = _dispatched(ctx, graph, second)
    for name in outs:
        np.testing.assert_array_equal(kept[name], want_first[name])
        np.testing.assert_array_equal(outs[name], want_second[name])
    outs = _nan_outputs(graph)
    ctx.compute(graph, first, outs)              # the changed arrays, passed again
    want_changed = _dispatched(ctx, graph, first)
    for name in outs:
        np.testing.assert_array_equal(outs[name], want_changed[name])
    assert not np.array_equal(outs["gram"], want_first["gram"])
    # a wrong input still fails as before, with a program cached
    assert graph._programs
    bad = {**second, "x": np.zeros((1, 12, 10, 11), np.float32)}
    with pytest.raises(TypeError, match=r"input 'x' has shape \(1, 12, 10, 11\), expected"):
        ctx.compute(graph, bad, _nan_outputs(graph))
    with pytest.raises(TypeError, match="input 'z': expected real numbers"):
        ctx.compute(graph, {**second, "z": second["z"].astype(np.complex64)}, _nan_outputs(graph))
    with pytest.raises(TypeError, match="missing input 'z'"):
        ctx.compute(graph, {"x": second["x"]}, _nan_outputs(graph))
    with pytest.raises(jitnn.JitnnValueError, match="another context"):
        jitnn.Context().compute(graph, second, _nan_outputs(graph))
    outs = _nan_outputs(graph)
    ctx.compute(graph, second, outs)             # and the program still works
    for name in outs:
        np.testing.assert_array_equal(outs[name], want_second[name])


def test_compute_reads_float32_inputs_in_place_and_copies_the_others(monkeypatch):
    import jitnn.graph
    copies = []
    copy = jitnn.graph.as_array_copy
    monkeypatch.setattr(jitnn.graph, "as_array_copy",
                        lambda data, op="tensor", dtype=None: copies.append(data)
                        or copy(data, op, dtype))
    ctx = jitnn.Context()
    graph = _resnet_block_graph(ctx)
    inputs = _block_inputs(5)
    before = {name: array.copy() for name, array in inputs.items()}
    want = _dispatched(ctx, graph, inputs)
    copies.clear()
    for run in range(3):                         # records, then replays
        outs = _nan_outputs(graph)
        ctx.reset_stats()
        ctx.compute(graph, inputs, outs)
        assert copies == []
        if run == 0:
            in_place = _counts(ctx)
        assert _counts(ctx) == in_place
        for name in outs:
            np.testing.assert_array_equal(outs[name], want[name])
        for name in inputs:                      # read, never written
            np.testing.assert_array_equal(inputs[name], before[name])
    # copied instead: read-only (numba would compile other kernels for it),
    # strided, or overlapping an output; the same plan and counts
    read_only = inputs["x"].copy()
    read_only.setflags(write=False)
    strided = np.empty((64, 192), np.float32)[:, ::2]
    strided[...] = inputs["z"]
    for changed in ({"x": read_only}, {"z": strided}):
        outs = _nan_outputs(graph)
        ctx.reset_stats()
        ctx.compute(graph, {**inputs, **changed}, outs)
        assert len(copies) == 1 and copies.pop() is next(iter(changed.values()))
        assert _counts(ctx) == in_place
        for name in outs:
            np.testing.assert_array_equal(outs[name], want[name])
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 9, 5, 7))
    relu_graph = b.build({"y": b.relu(b.conv2d(x, b.constant(random((9, 9, 1, 1), 2)))),
                          "x": x})
    a = random((2, 9, 5, 7), 3)
    want = {name: t.numpy() for name, t in ctx.dispatch(relu_graph, {"x": a}).items()}
    copies.clear()                               # the constant's and the dispatch's
    for _ in range(2):
        shared = a.copy()
        ctx.compute(relu_graph, {"x": shared}, {"y": shared, "x": np.empty_like(a)})
        assert len(copies) == 1 and copies.pop() is shared
        np.testing.assert_array_equal(shared, want["y"])
        outs = {"y": np.empty_like(a), "x": np.empty_like(a)}
        ctx.compute(relu_graph, {"x": a}, outs)  # the graph's output "x" is the input
        assert copies == []
        np.testing.assert_array_equal(outs["y"], want["y"])
        np.testing.assert_array_equal(outs["x"], a)


@pytest.mark.parametrize("policy", ["blocked", "eager", "plain"])
def test_compute_never_writes_into_an_input_it_reads_in_place(policy):
    # the ops most likely to reuse a buffer: an elementwise chain and a
    # residual add, both on the inputs (C = 16: no reorder copy in between)
    ctx = jitnn.Context(policy=policy)
    b = jitnn.GraphBuilder(ctx)
    x, r = b.input("x", (2, 16, 5, 5)), b.input("r", (2, 16, 5, 5))
    conv = b.conv2d(x, b.constant(random((16, 16, 3, 3), 4, 0.2)), padding=1)
    graph = b.build({"chain": b.sigmoid(b.relu(b.add(x, x))), "residual": b.relu(b.add(conv, r))})
    inputs = {"x": random((2, 16, 5, 5), 5), "r": random((2, 16, 5, 5), 6)}
    before = {name: array.copy() for name, array in inputs.items()}
    want = _dispatched(ctx, graph, before)
    for _ in range(3):
        outs = _nan_outputs(graph)
        ctx.compute(graph, inputs, outs)
        for name in outs:
            np.testing.assert_array_equal(outs[name], want[name])
        for name in inputs:
            np.testing.assert_array_equal(inputs[name], before[name])


def test_a_constant_is_copied_once_at_the_call(monkeypatch):
    import importlib
    copied = []
    for name in ("jitnn.graph", "jitnn.tensor"):
        module = importlib.import_module(name)
        copy = module.as_array_copy
        monkeypatch.setattr(module, "as_array_copy",
                            lambda data, op="tensor", dtype=None, copy=copy: copied.append(data)
                            or copy(data, op, dtype))
    ctx = jitnn.Context()
    w = random((8, 5, 3, 3), 1, 0.3)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 5, 7, 6))
    graph = b.build({"y": b.conv2d(x, b.constant(w), padding=1)})
    assert len(copied) == 1 and copied[0] is w
    x_values = random((2, 5, 7, 6), 2)
    want = conv2d_reference(x_values, w, padding=1)
    w[...] = 0                                   # never leaks in
    _close(ctx.dispatch(graph, {"x": x_values})["y"].numpy(), want)


def test_compute_of_outputs_that_are_inputs_or_constants():
    ctx = jitnn.Context()
    w = random((8, 3, 3, 3), 1, 0.3)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 7, 6))
    k = b.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
    y = b.relu(b.conv2d(x, b.constant(w), padding=1))
    graph = b.build({"x": x, "k": k, "y": y, "y again": y})
    only = jitnn.GraphBuilder(ctx)
    x_only = only.input("x", (2, 3, 7, 6))
    nothing_to_run = only.build({"x": x_only, "k": only.constant(np.ones((3,), np.float32))})
    for seed in range(3):
        inputs = {"x": random((2, 3, 7, 6), seed)}
        outs = _nan_outputs(graph)
        ctx.reset_stats()
        ctx.compute(graph, inputs, outs)
        # the first-layer conv (C = 3, below any block) reads x as it is; both
        # reads of y convert it
        assert _counts(ctx) == {"reorders": 2, "reorder_bytes": 2 * (2 * 8 * 7 * 6 * 4),
                                "launches": 1, "fused_ops": 1, "flushes": 1}
        counts = _counts(ctx)
        ctx.reset_stats()
        want = _dispatched(ctx, graph, inputs)
        assert _counts(ctx) == counts
        np.testing.assert_array_equal(outs["x"], inputs["x"])
        np.testing.assert_array_equal(outs["k"], np.arange(6, dtype=np.float32).reshape(2, 3))
        np.testing.assert_array_equal(outs["y"], want["y"])
        np.testing.assert_array_equal(outs["y again"], want["y"])
        outs = _nan_outputs(nothing_to_run)
        ctx.reset_stats()
        ctx.compute(nothing_to_run, inputs, outs)
        assert _counts(ctx) == dict.fromkeys(_COUNTED, 0)     # as dispatch + read: no flush
        np.testing.assert_array_equal(outs["x"], inputs["x"])
        np.testing.assert_array_equal(outs["k"], np.ones((3,), np.float32))
        inputs["x"][:] = 0                                    # never leaks into the next call


def test_compute_takes_the_normal_path_for_tensor_inputs_and_other_policies():
    x = random((2, 5, 7, 6), 3)
    for policy in ("eager", "plain"):
        ctx = jitnn.Context(policy=policy)
        w = random((8, 5, 3, 3), 1, 0.3)
        b = jitnn.GraphBuilder(ctx)
        graph = b.build({"y": b.relu(b.conv2d(b.input("x", x.shape), b.constant(w), padding=1))})
        for _ in range(2):
            out = np.full((2, 8, 7, 6), np.nan, np.float32)
            ctx.compute(graph, {"x": x}, {"y": out})
            _close(out, _want(x, w)[0])
        assert not graph._programs
    ctx = jitnn.Context()
    graph = _resnet_block_graph(ctx)
    inputs = _block_inputs(4)
    pending = jitnn.relu(ctx.tensor(inputs["x"] - 1))        # a pending user tensor
    outs = _nan_outputs(graph)
    ctx.compute(graph, {"x": pending, "z": ctx.tensor(inputs["z"])}, outs)
    assert not graph._programs                                 # nothing kept: the caller's tensors
    want = _dispatched(ctx, graph, {"x": np.maximum(inputs["x"] - 1, 0), "z": inputs["z"]})
    for name in outs:
        np.testing.assert_array_equal(outs[name], want[name])


def test_two_threads_compute_one_graph_at_once():
    import threading
    ctx = jitnn.Context()
    graph = _resnet_block_graph(ctx)
    inputs = [_block_inputs(20 + i) for i in range(6)]
    wants = [_dispatched(ctx, graph, i) for i in inputs]
    errors = []

    def worker(offset):
        try:
            for call in range(20):
                i = (offset + call) % len(inputs)
                outs = _nan_outputs(graph)
                ctx.compute(graph, inputs[i], outs)
                for name in outs:
                    np.testing.assert_array_equal(outs[name], wants[i][name])
        except BaseException as error:   # reported by the main thread
            errors.append(error)
    threads = [threading.Thread(target=worker, args=(k,)) for k in (0, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert 1 <= len(graph._programs) <= jitnn.replay.IDLE_PROGRAMS


def test_compute_of_a_graph_holding_a_pending_tensor_records_once_it_is_computed():
    ctx = jitnn.Context()
    lanes = np.arange(8, dtype=np.float32)[:, None, None]
    user = jitnn.relu(ctx.tensor(np.full((1, 8, 4, 4), -2, np.float32) + lanes))  # pending
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 8, 4, 4))
    # an op given a tensor as it is (not an operand): every dispatch reads that tensor
    graph = b.build({"x": x, "y": b.sigmoid(user)})
    want_user = np.maximum(np.full((1, 8, 4, 4), -2, np.float32) + lanes, 0)
    ys = []
    for seed in range(3):
        x_np = random((1, 8, 4, 4), seed)
        outs = _nan_outputs(graph)
        ctx.compute(graph, {"x": x_np}, outs)
        np.testing.assert_array_equal(outs["x"], x_np)
        ys.append(outs["y"])
        # the first call computed the caller's tensor and kept no program; later ones replay
        assert len(graph._programs) == min(seed, 1)
        np.testing.assert_array_equal(user.numpy(), want_user)   # never dropped by a replay
    want_y = _dispatched(ctx, graph, {"x": x_np})["y"]
    _close(want_y, 1 / (1 + np.exp(-want_user)))
    for y in ys:
        np.testing.assert_array_equal(y, want_y)


def test_replayed_convs_keep_their_launch_but_never_a_stale_filter(monkeypatch):
    """A replayed conv finds its launch again on its node (no planning per
    call); a filter or bias that is a graph input is packed anew at every
    call, never taken from the previous one, and the node keeps nothing
    of it alive between calls."""
    import gc

    from jitnn.kernels import conv2d as conv_kernels
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 5, 7, 6))
    w_in = b.input("w", (8, 8, 3, 3))
    bias_in = b.input("bias", (8,))
    fixed = b.conv2d(x, b.constant(random((8, 5, 3, 3), 1, 0.3)), padding=(1, 1, 1, 1))
    dynamic = b.conv2d(fixed, w_in, bias_in, padding=(1, 1, 1, 1))
    graph = b.build({"y": b.relu(dynamic)})
    plans = []
    launch = conv_kernels.conv2d_launch
    monkeypatch.setattr(conv_kernels, "conv2d_launch",
                        lambda *args, **kw: plans.append(1) or launch(*args, **kw))
    for seed in range(3):
        inputs = {"x": random((2, 5, 7, 6), seed), "w": random((8, 8, 3, 3), 10 + seed, 0.3),
                  "bias": random((8,), 20 + seed)}
        outs = {"y": np.full((2, 8, 7, 6), np.nan, np.float32)}
        ctx.compute(graph, inputs, outs)
        hidden = conv2d_reference(inputs["x"], random((8, 5, 3, 3), 1, 0.3), padding=1)
        want = np.maximum(conv2d_reference(hidden, inputs["w"], inputs["bias"], padding=1), 0)
        _close(outs["y"], want)
        if seed == 0:
            first = len(plans)
    # the recording run planned both convs; each replay plans only the conv
    # whose filter is new (the constant's launch is found on its node)
    assert first == 2
    assert len(plans) == first + 2
    (program,) = graph._programs
    gc.collect()
    memos = [c.node.memo for c in program.steps
             if c.step.kind == "op" and getattr(c.node, "memo", None) is not None]
    assert len(memos) == 2
    # the dynamic conv's memo refers to a filter and bias that are gone
    assert sum(m.packed() is None for m in memos) == 1
    assert all(m.bias is None or m.bias() is None for m in memos)


def test_replayed_convs_run_as_bound_kernel_calls(monkeypatch):
    """From the second compute on, a conv whose arrays are the program's own
    buffers runs as one bound kernel call (no checks or planning in Python):
    the output's too, which writes the array it wrote at the run before (the
    output is copied out between runs), and the conv reading the reordered
    input (the reorder step writes the same array at every run). The one
    with a graph-input filter goes through its op every time.
    The answers stay right on new inputs and filters, and the launches
    counted are the same as on the normal path."""
    from jitnn.kernels import conv2d as conv_kernels
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 9, 12, 11))
    w_in = b.input("w", (16, 16, 1, 1))
    w1, w2, w3 = (random(s, i, 0.3) for i, s in
                  enumerate([(16, 9, 3, 3), (16, 16, 1, 1), (16, 16, 3, 3)]))
    bias2 = random((16,), 7)
    h1 = b.relu(b.conv2d(x, b.constant(w1), padding=(1, 1, 1, 1)))
    h2 = b.add(b.conv2d(h1, b.constant(w2), b.constant(bias2)), h1)     # fused residual
    h3 = b.conv2d(h2, w_in)                                             # graph-input filter
    h4 = b.conv2d(h3, b.constant(w3), padding=(2, 2, 2, 2), dilations=(2, 2))  # pads first
    graph = b.build({"y": b.relu(h4)})
    checked = []
    check = conv_kernels._checked_args
    monkeypatch.setattr(conv_kernels, "_checked_args",
                        lambda *args: checked.append(1) or check(*args))
    launches = []
    run_bound = ctx.launcher.run_bound
    calls, durations = [], []

    def run_slowly(*args):                    # every kernel call, bound or not, takes >= 5 ms
        start = time.perf_counter()
        run_bound(*args)
        time.sleep(0.005)
        durations.append(time.perf_counter() - start)
        calls.append(len(args) == 2)          # a replay's bound call passes (kernel, args)
    monkeypatch.setattr(ctx.launcher, "run_bound", run_slowly)
    for seed in range(4):
        inputs = {"x": random((2, 9, 12, 11), seed), "w": random((16, 16, 1, 1), 10 + seed)}
        outs = {"y": np.full((2, 16, 12, 11), np.nan, np.float32)}
        before, before_s = ctx.stats.launches, ctx.stats.launch_s
        checked.clear()
        calls.clear()
        durations.clear()
        start = time.perf_counter()
        ctx.compute(graph, inputs, outs)
        elapsed = time.perf_counter() - start
        launches.append(ctx.stats.launches - before)
        # bound calls are timed as launches too
        assert 0.005 * launches[-1] <= ctx.stats.launch_s - before_s <= elapsed
        r1 = np.maximum(conv2d_reference(inputs["x"], w1, padding=1), 0)
        r2 = conv2d_reference(r1, w2, bias2) + r1
        r3 = conv2d_reference(r2, inputs["w"])
        _close(outs["y"], np.maximum(conv2d_reference(r3, w3, padding=2, dilations=2), 0),
               atol=1e-3)
        if seed == 3:
            # bound since the third call (the second binds; a step that
            # cannot be bound is given up after two tries): only the
            # graph-input-filter conv is checked again
            assert len(checked) == 1
    assert len(set(launches)) == 1
    (program,) = graph._programs
    # the last run's kernel time counts every call of the plan, bound or not:
    # all of them but the output's reorder, which runs after it
    assert calls.count(True) == 3
    assert program.plan.kernel_seconds >= 0.005 * (len(calls) - 1) > 0.005 * (len(calls) - 2)
    # no call counted twice: at most the calls' own time, plus a little
    # Python around each (the upper bound holds under load too: each call's
    # duration is measured, not assumed)
    assert program.plan.kernel_seconds < sum(durations) + 0.001 * len(calls)
    kinds = [(c.node.kind, bool(bound)) for c, bound in
             zip(program.steps, program.bindings.steps) if c.step.kind == "op"]
    assert kinds.count(("conv2d", True)) == 3
    assert kinds.count(("conv2d", False)) == 1


def test_a_bound_conv_call_is_checked_like_a_run():
    from jitnn.kernels import conv2d as conv_kernels
    packed = conv_kernels.pack_conv2d_filter(random((8, 8, 1, 1), 0), 8, 1, 8)
    x = random((1, 1, 4, 4, 8), 1)
    out = np.empty((1, 1, 4, 4, 8), np.float32)
    launch = conv_kernels.conv2d_launch(x, packed, out)
    driver, args = conv_kernels.bind_conv2d_launch(launch, x, out)
    driver(*args)
    want = out.copy()
    conv_kernels.run_conv2d_launch(launch, x, out)
    np.testing.assert_array_equal(out, want)
    with pytest.raises(ValueError, match="overlap"):
        conv_kernels.bind_conv2d_launch(launch, x, x)
    with pytest.raises(ValueError, match="planned for x"):
        conv_kernels.bind_conv2d_launch(launch, np.zeros((1, 1, 4, 5, 8), np.float32),
                                        np.empty((1, 1, 4, 5, 8), np.float32))
    padded = conv_kernels.pack_conv2d_filter(random((8, 8, 3, 3), 0), 8, 1, 8)
    pads = conv_kernels.conv2d_launch(x, padded, out, padding=(1, 1, 1, 1),
                                      algorithm="direct")
    # pads per run, and Winograd needs scratch memory: both this thread's at
    # every run, bound as well, giving the bits of an unbound run
    winograd = conv_kernels.conv2d_launch(x, padded, out, padding=(1, 1, 1, 1))
    assert pads.pad_copy is not None and winograd.path == "winograd"
    for launch in (pads, winograd):
        driver, args = conv_kernels.bind_conv2d_launch(launch, x, out)
        assert isinstance(driver, conv_kernels.BoundScratchRun)
        out[...] = np.nan
        driver(*args)
        want = out.copy()
        out[...] = np.nan
        conv_kernels.run_conv2d_launch(launch, x, out)
        np.testing.assert_array_equal(out, want)
        _close(out[0].transpose(0, 3, 1, 2).reshape(8, 4, 4),
               conv2d_reference(x[0].transpose(0, 3, 1, 2).reshape(1, 8, 4, 4),
                                random((8, 8, 3, 3), 0), padding=1)[0], atol=1e-4)


def test_replayed_convs_that_pad_their_input_or_mask_its_edges_are_bound():
    """On 7 x 7 (a network's last stage) a dense direct 3x3 pads its input
    first, into this thread's scratch buffer, and a grouped 3x3 (RegNet's)
    reads it in place with masked edge taps: replayed, each is one bound
    call, and the answers match the float64 reference on new inputs."""
    from jitnn.kernels import conv2d as conv_kernels
    from jitnn.kernels.conv2d import geometry
    ctx = jitnn.Context(block=8, conv_algorithm="direct")
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 32, 7, 7))
    w1, w2 = random((32, 32, 1, 1), 1, 0.3), random((32, 8, 3, 3), 2, 0.3)
    w3 = random((32, 32, 3, 3), 3, 0.1)
    # (between convs: each reads and writes the program's own buffers)
    h = b.conv2d(x, b.constant(w1))
    h = b.relu(b.conv2d(h, b.constant(w2), padding=(1, 1, 1, 1), groups=4))
    h = b.conv2d(h, b.constant(w3), padding=(1, 1, 1, 1))
    graph = b.build({"y": b.conv2d(h, b.constant(w1))})
    for seed in range(4):
        xs = random((1, 32, 7, 7), seed)
        outs = {"y": np.full((1, 32, 7, 7), np.nan, np.float32)}
        ctx.compute(graph, {"x": xs}, outs)
        grouped = np.maximum(conv2d_reference(conv2d_reference(xs, w1), w2, padding=1,
                                              groups=4), 0)
        want = conv2d_reference(conv2d_reference(grouped, w3, padding=1), w1)
        _close(outs["y"], want, atol=1e-4)
    (program,) = graph._programs
    three = {c.node.attrs.get("groups"): (c.node.memo.launch(), bound) for c, bound in
             zip(program.steps, program.bindings.steps)
             if c.step.kind == "op" and tuple(c.node.attrs["padding"]) == (1, 1, 1, 1)}
    assert sorted(three) == [1, 4]
    launch, bound = three[1]
    assert launch.pad_copy is not None
    assert bound and isinstance(bound.kernel, conv_kernels.BoundScratchRun)
    launch, bound = three[4]
    if geometry.VECTOR_REGISTERS >= 32:
        # edge-masked row tiles read the input in place
        assert launch.pad_copy is None and launch.scratch == 0
        assert bound and not isinstance(bound.kernel, conv_kernels.BoundScratchRun)
    else:
        # 16 vector registers (the generic target) have no row tiles: padded
        assert launch.pad_copy is not None
        assert bound and isinstance(bound.kernel, conv_kernels.BoundScratchRun)


def test_a_conv_launch_rejects_arrays_of_other_shapes():
    from jitnn.kernels import conv2d as conv_kernels
    packed = conv_kernels.pack_conv2d_filter(random((8, 8, 1, 1), 0), 8, 1, 8)
    x = np.zeros((1, 1, 4, 4, 8), np.float32)
    out = np.empty((1, 1, 4, 4, 8), np.float32)
    launch = conv_kernels.conv2d_launch(x, packed, out)
    conv_kernels.run_conv2d_launch(launch, x, out)
    with pytest.raises(ValueError, match="planned for x"):
        conv_kernels.run_conv2d_launch(launch, np.zeros((1, 1, 4, 5, 8), np.float32),
                                       np.empty((1, 1, 4, 5, 8), np.float32))


def test_a_bound_step_calls_the_compiled_kernel_directly():
    from jitnn.executor import compiled_entry
    from jitnn.kernels import layout as layout_kernels
    from jitnn.kernels._config import ThreadCountKernel
    x = np.random.default_rng(0).standard_normal((1, 8, 3, 3)).astype(np.float32)
    out = np.empty((1, 1, 3, 3, 8), np.float32)
    kernels = [k for k in vars(layout_kernels).values() if isinstance(k, ThreadCountKernel)]
    assert kernels
    plain = (lambda a: a)
    assert compiled_entry(plain, (x,), 1) is plain
    # not compiled for these types: the dispatcher of the thread count's compile
    assert compiled_entry(kernels[0], ("no", "such", "types"), 1) is kernels[0].on_threads(1)
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    w = np.random.default_rng(1).standard_normal((8, 8, 1, 1)).astype(np.float32)
    def layer(t):
        return b.relu(b.conv2d(t, b.constant(w)))
    # the middle conv reads and writes the program's own buffers: bound
    g = b.build({"y": layer(layer(layer(b.input("x", x.shape))))})
    y = np.empty(x.shape, np.float32)
    for _ in range(3):
        ctx.compute(g, {"x": x}, {"y": y})
    program = g._programs[0]
    bound = [s for s in program.bindings.steps if s]
    assert bound and all(type(s.kernel).__name__ != "CPUDispatcher" for s in bound)
    want = x.astype(np.float64)
    for _ in range(3):
        want = np.maximum(conv2d_reference(want, w), 0)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_a_weight_only_a_matmul_reads_is_kept_packed_only():
    # once packed, nothing holds the plain copy of w (not the graph, not the
    # builder's placeholder); every reader still gets w's numbers. s, which an add
    # reads too, keeps its buffer.
    import pickle
    import weakref
    ctx = jitnn.Context()
    w, s = random((96, 80), 1), random((96, 96), 2)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (96, 96))
    w_c, s_c = b.constant(w), b.constant(s)
    graph = b.build({"y": b.matmul(b.add(b.matmul(x, s_c), s_c), w_c)})
    kept_w = graph._constants[w_c._index]._v
    kept_s = graph._constants[s_c._index]._v
    plain_w = weakref.ref(kept_w._data)
    x_values = random((96, 96), 3)
    want = ((x_values.astype(np.float64) @ s + s) @ w)
    out = {"y": np.empty((96, 80), np.float32)}
    for _ in range(3):
        ctx.compute(graph, {"x": x_values}, out)
        np.testing.assert_allclose(out["y"], want, rtol=1e-4, atol=1e-3)
    assert plain_w() is None and kept_w._data.strides == (0, 0)
    np.testing.assert_array_equal(kept_w._materialize(), w)          # unpacked, exactly
    assert kept_s._data.strides != (0, 0) and np.array_equal(kept_s._data, s)
    again = pickle.loads(pickle.dumps(graph))                         # reads w unpacked
    got = again.context.dispatch(again, {"x": x_values})["y"].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("groups, first_layer", [(1, False), (1, True), (4, False), (8, False)])
def test_a_filter_only_convs_read_is_kept_packed_only(groups, first_layer):
    # direct, first-layer, grouped and depthwise packings: the plain filter goes once
    # packed, and comes back unpacked, exactly, for a reader (a second conv with
    # another padding packs it again from there)
    import weakref
    ctx = jitnn.Context()
    c = 3 if first_layer else 8
    w = random((8, c // groups, 3, 3), 1, 0.3)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, c, 9, 9))
    w_c = b.constant(w)
    graph = b.build({"y": b.conv2d(x, w_c, padding=1, groups=groups)})
    kept = graph._constants[w_c._index]._v
    plain = weakref.ref(kept._data)
    x_values = random((1, c, 9, 9), 2)
    want = conv2d_reference(x_values, w, padding=1, groups=groups)
    out = {"y": np.empty((1, 8, 9, 9), np.float32)}
    for _ in range(2):
        ctx.compute(graph, {"x": x_values}, out)
        _close(out["y"], want)
    assert plain() is None and kept._data.strides == (0,) * 4
    np.testing.assert_array_equal(kept._materialize(), w)
