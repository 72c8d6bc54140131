"""layer_normalization, rms_normalization, instance_normalization, and WebNN's options of
batch_normalization and softmax: values against the float64 references on
plain and blocked inputs (blocks 4, 8, 16; C = 1, 3, 7, 9, 17; odd H, W;
N > 1), every axes case of layer normalization (last axes, a middle run, a
transposed set, an unsorted list with its scale in that order, none, ranks
0 to 5), blocked results with zero padding lanes and no reorder around a
conv, the transformer and ConvNeXt shapes, operands from graph inputs, the
kernels' serial and parallel runs, and the errors. (batch_normalization's
blocked folding and activations: tests/test_ops_eltwise.py; softmax's
basics: tests/test_ops_shape.py.)"""

import itertools

import numpy as np
import pytest

import jitnn
from jitnn.kernels import normalization as norm_kernels
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, per_block_and_threads, random, reference,
                           thread_counts)

EPS32 = float(np.finfo(np.float32).eps)


def _affine(shape, seed):
    return random(shape, seed), random(shape, seed + 1)


# --- layer_normalization -------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
def test_layer_norm_over_channels_stays_blocked(kind, channels):
    """ConvNeXt's LayerNorm: over C per pixel, blocked in and out."""
    x = random((2, channels, 5, 7), channels) * 3 + 1
    scale, bias = _affine((channels,), 40)
    t = make(x, kind)
    for options in ({}, {"scale": scale}, {"bias": bias},
                    {"scale": scale, "bias": bias, "epsilon": 1e-3}):
        got = jitnn.layer_normalization(t, axes=[1], **options)
        assert got.layout == expected_layout(kind)
        if kind != "plain":
            assert_padding_lanes_zero(got)             # bias is not 0, its padding lanes are
        want = reference("layer_normalization")(x, axes=[1], **options)
        assert_close(got.numpy(), want, tol=2e-6)


@pytest.mark.parametrize("kind", KINDS)
def test_layer_norm_over_channels_of_many_tiles(kind):
    """Pixel counts past one tile of the groups kernel (1024 floats per
    block), with a partial last tile, for every block width."""
    x = random((2, 19, 37, 41), 45) * 2 - 1
    scale, bias = _affine((19,), 46)
    got = jitnn.layer_normalization(make(x, kind), scale, bias, axes=[1])
    assert got.layout == expected_layout(kind)
    assert_close(got.numpy(), reference("layer_normalization")(x, scale, bias, axes=[1]),
                 tol=2e-6)


@pytest.mark.parametrize("kind", ["nChw8c", "block16"])
def test_layer_norm_over_channels_with_nhwc_axes(kind):
    nhwc = random((2, 5, 3, 9), 41)
    scale, bias = _affine((9,), 42)
    t = make(nhwc, kind, axes="nhwc")
    got = jitnn.layer_normalization(t, scale, bias, axes=[3])
    assert got.layout == expected_layout(kind)
    assert_padding_lanes_zero(got)
    assert_close(got.numpy(), reference("layer_normalization")(nhwc, scale, bias, axes=[3]),
                 tol=2e-6)


#: (shape, axes): the last axes (rows), a middle run, a transposed set, an
#: unsorted list, WebNN's default and none
AXES_CASES = [((2, 5, 6), [2]), ((2, 5, 6), [-1]), ((2, 5, 6), [1, 2]), ((2, 5, 6), None),
              ((2, 7, 3, 5), [1]), ((2, 7, 3, 5), [1, 2]), ((2, 7, 3, 5), [0, 2]),
              ((2, 7, 3, 5), [3, 1]), ((2, 7, 3, 5), [0, 3, 1]), ((2, 7, 3, 5), [2, 0]),
              ((2, 7, 3, 5), []), ((2, 1, 4, 3), [0, 2]), ((3, 2, 1, 4, 5), [4, 2, 3])]


@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
@pytest.mark.parametrize("shape,axes", AXES_CASES)
def test_layer_norm_axes(shape, axes, kind):
    x = random(shape, 43) * 2 - 1
    t = make(x, kind) if len(shape) == 4 else jitnn.tensor(x)
    dims = tuple(shape[a] for a in (range(1, len(shape)) if axes is None else axes))
    scale, bias = _affine(dims, 44)
    for options in ({}, {"scale": scale, "bias": bias}, {"bias": bias, "epsilon": 0.1}):
        got = jitnn.layer_normalization(t, axes=axes, **options)
        want = reference("layer_normalization")(x, axes=axes, **options)
        assert got.shape == x.shape
        assert_close(got.numpy(), want, tol=2e-6)


def test_layer_norm_ranks_0_to_5():
    for rank in range(6):
        x = random((2, 3, 4, 1, 5)[:rank], rank)
        got = jitnn.layer_normalization(x)
        assert_close(got.numpy(), reference("layer_normalization")(x), tol=2e-6)


def test_layer_norm_scale_follows_the_axes_order():
    """WebNN: scale's shape lists the sizes of axes in axes' order ([3, 1]
    of (2, 7, 3, 5) is a (5, 7) scale), not in the input's axis order."""
    x = random((2, 7, 3, 5), 45)
    scale = random((5, 7), 46)
    got = jitnn.layer_normalization(x, scale, axes=[3, 1]).numpy()
    normalized = reference("layer_normalization")(x, axes=[1, 3])
    assert_close(got, normalized * scale.T[None, :, None, :], tol=2e-6)


def test_layer_norm_empty_axes_gives_the_bias():
    x = random((4, 6), 47)
    assert_close(jitnn.layer_normalization(x, axes=[]).numpy(), np.zeros((4, 6)))
    bias = np.float32(0.75)
    got = jitnn.layer_normalization(x, None, jitnn.tensor(bias), axes=[]).numpy()
    assert_close(got, np.full((4, 6), 0.75))


def test_layer_norm_transformer_shape():
    """(1, 197, 768) over the last axis: ViT-B's LayerNorm, the rows kernel."""
    x = random((1, 197, 768), 48) * 4 + 2
    scale, bias = _affine((768,), 49)
    got = jitnn.layer_normalization(x, scale, bias, axes=[-1], epsilon=1e-6)
    assert got.layout == "ncw"
    want = reference("layer_normalization")(x, scale, bias, axes=[-1], epsilon=1e-6)
    # one float64 pass: the float32 rounding of x - mean and two products
    assert_close(got.numpy(), want, tol=8 * EPS32)


def test_layer_norm_large_mean_small_spread():
    """Two passes (mean, then squares about it): a mean 10^4 times the spread
    loses nothing."""
    x = np.float32(1e4) + random((3, 300), 50)
    got = jitnn.layer_normalization(x, axes=[1]).numpy()
    assert_close(got, reference("layer_normalization")(x, axes=[1]), tol=2e-3)
    assert_close(got.std(axis=1), np.ones(3), tol=1e-3)


def test_convnext_block_needs_no_reorder():
    """conv -> LayerNorm over C -> conv 1x1, on one context: one reorder in,
    one out, and the same numbers as the composition."""
    ctx = jitnn.Context()
    x = random((1, 24, 9, 7), 51)
    w1, w2 = random((24, 24, 3, 3), 52, 0.1), random((48, 24, 1, 1), 53, 0.2)
    scale, bias = _affine((24,), 54)
    with assert_schedule(ctx, reorders=2):
        y = jitnn.conv2d(ctx.tensor(x), ctx.tensor(w1), padding=1)
        y = jitnn.layer_normalization(y, ctx.tensor(scale), ctx.tensor(bias), axes=[1])
        got = jitnn.conv2d(y, ctx.tensor(w2)).numpy()
    conv = reference("conv2d")
    want = conv(reference("layer_normalization")(conv(x, w1, padding=1), scale, bias,
                                                 axes=[1]), w2)
    assert_close(got, want, tol=1e-5)


@pytest.mark.parametrize("block, threads", per_block_and_threads())
def test_replayed_channel_layer_norm_is_a_bound_call_into_the_plan_buffer(threads, block):
    """conv -> LayerNorm over C -> conv, computed again and again on new
    inputs: the norm runs as one bound kernel call writing the plan's buffer
    (no new array per run), with the reference's numbers at every run; a
    scale that is a graph input changes every run and is never bound."""
    ctx = jitnn.Context(num_threads=threads, block=block)
    c = 17
    w1, w2 = random((c, 5, 3, 3), 60, 0.2), random((9, c, 1, 1), 61, 0.2)
    scale, bias = _affine((c,), 62)
    conv, norm = reference("conv2d"), reference("layer_normalization")
    for given_scale in (False, True):
        b = jitnn.GraphBuilder(ctx)
        s = b.input("s", (c,)) if given_scale else b.constant(scale)
        y = b.conv2d(b.input("x", (2, 5, 7, 9)), b.constant(w1), padding=1)
        y = b.layer_normalization(y, s, b.constant(bias), axes=[1], epsilon=1e-4)
        graph = b.build({"y": b.conv2d(y, b.constant(w2))})
        out = np.empty((2, 9, 7, 9), np.float32)
        for seed in range(3):
            x = random((2, 5, 7, 9), 63 + seed)
            sc = scale * (1 + seed) if given_scale else scale
            feed = {"x": x, "s": sc} if given_scale else {"x": x}
            ctx.compute(graph, feed, {"y": out})
            want = conv(norm(conv(x, w1, padding=1), sc, bias, axes=[1], epsilon=1e-4), w2)
            assert_close(out, want, tol=2e-5)
        (program,) = graph._programs
        kinds = [(c_.node.kind, bool(bound)) for c_, bound in
                 zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
        assert ("layer_norm_blocked", not given_scale) in kinds, kinds
        step = next(c_ for c_ in program.steps if c_.node is not None
                    and c_.node.kind == "layer_norm_blocked")
        assert step.step.buffer, "the norm writes a buffer of the plan"


@pytest.mark.parametrize("threads", thread_counts())
def test_replayed_elementwise_chains_are_bound_calls(threads):
    """conv -> relu -> batch norm + relu -> conv (DenseNet's norm before its
    conv, which cannot fold into the conv before it), and a channel gate
    computed from the run's own data (mean over H and W, sigmoid, times x),
    computed again on new inputs: the batch norm runs as one bound call, with
    the reference's numbers at every run; statistics given as graph inputs
    change every run and are never bound, nor is the gate, whose values come
    from the run."""
    ctx = jitnn.Context(num_threads=threads)
    c = 17
    w1, w2 = random((c, 5, 3, 3), 70, 0.2), random((9, c, 1, 1), 71, 0.2)
    mean, variance = random((c,), 72, 0.3), np.abs(random((c,), 73)) + 0.5
    scale, bias = _affine((c,), 74)
    conv, bn = reference("conv2d"), reference("batch_normalization")
    for given_stats in (False, True):
        b = jitnn.GraphBuilder(ctx)
        m = b.input("m", (c,)) if given_stats else b.constant(mean)
        y = b.relu(b.conv2d(b.input("x", (2, 5, 7, 9)), b.constant(w1), padding=1))
        y = b.batch_normalization(y, m, b.constant(variance), b.constant(scale),
                                  b.constant(bias), epsilon=1e-4, activation="relu")
        gate = b.sigmoid(b.reduce_mean(y, axes=[2, 3], keep_dimensions=True))
        graph = b.build({"y": b.conv2d(b.mul(y, gate), b.constant(w2))})
        out = np.empty((2, 9, 7, 9), np.float32)
        for seed in range(3):
            x = random((2, 5, 7, 9), 75 + seed)
            mn = mean * (1 + seed) if given_stats else mean
            ctx.compute(graph, {"x": x, "m": mn} if given_stats else {"x": x}, {"y": out})
            h = np.maximum(bn(np.maximum(conv(x, w1, padding=1), 0), mn, variance, scale, bias,
                              epsilon=1e-4), 0)
            h = h / (1 + np.exp(-h.mean(axis=(2, 3), keepdims=True)))
            assert_close(out, conv(h, w2), tol=2e-5)
        (program,) = graph._programs
        bound = [bool(binding) for c_, binding in zip(program.steps, program.bindings.steps)
                 if c_.step.kind == "op" and c_.node.op == "batch_normalization"]
        assert bound == [not given_stats], bound


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("axes, affine", [([2], True), ([1, 2], True), ([2], False)])
def test_replayed_row_layer_norm_is_a_bound_call_into_the_plan_buffer(threads, axes, affine):
    """A transformer's matmul + bias -> LayerNorm over the last axes, computed
    again on new inputs: the norm is a node of its own kind that writes the
    plan's buffer and, replayed, runs as one bound call reading the GEMM's
    buffer, with the reference's numbers at every run (rows longer than a
    vector and not a multiple of it; no scale and bias too)."""
    ctx = jitnn.Context(num_threads=threads)
    rows, d = (3, 70), 45
    w = random((33, d), 64, 0.3)
    shape = tuple((rows + (d,))[a] for a in axes)
    scale, bias = _affine(shape, 65) if affine else (None, None)
    norm = reference("layer_normalization")
    b = jitnn.GraphBuilder(ctx)
    y = b.reshape(b.matmul(b.reshape(b.input("x", rows + (33,)), (rows[0] * rows[1], 33)),
                           b.constant(w)), rows + (d,))
    y = b.layer_normalization(y, None if scale is None else b.constant(scale),
                              None if bias is None else b.constant(bias), axes=axes,
                              epsilon=1e-4)
    graph = b.build({"y": b.relu(y)})         # (the norm's output: a buffer of the plan)
    out = np.empty(rows + (d,), np.float32)
    for seed in range(3):
        x = random(rows + (33,), 66 + seed)
        ctx.compute(graph, {"x": x}, {"y": out})
        want = norm(x.astype(np.float64) @ w, scale, bias, axes=axes, epsilon=1e-4)
        assert_close(out, np.maximum(want, 0.0), tol=2e-5)
    (program,) = graph._programs
    kinds = [(c_.node.kind, bool(bound)) for c_, bound in
             zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
    assert ("layer_norm_rows", True) in kinds, kinds


def test_layer_norm_graph_operands():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 5, 8))
    s = b.input("s", (8,))
    y = b.layer_normalization(x, scale=s, bias=b.constant(np.full(8, 0.5, np.float32)),
                              axes=[2])
    graph = b.build({"y": y})
    data, scale = random((2, 5, 8), 55), random((8,), 56)
    out = np.zeros((2, 5, 8), np.float32)
    ctx.compute(graph, {"x": data, "s": scale}, {"y": out})
    want = reference("layer_normalization")(data, scale, np.full(8, 0.5), axes=[2])
    assert_close(out, want, tol=2e-6)


def test_layer_norm_errors():
    x = jitnn.tensor(random((2, 3, 4), 57))
    op = "layer_normalization"
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: axes must be in \[-3, 2\]"):
        jitnn.layer_normalization(x, axes=[3])
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: axes must not repeat"):
        jitnn.layer_normalization(x, axes=[2, -1])
    with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: axes must be a list of ints"):
        jitnn.layer_normalization(x, axes="2")
    with pytest.raises(jitnn.JitnnValueError,
                       match=rf"{op}: scale must have shape \(3, 4\) .*got \(4, 3\)"):
        jitnn.layer_normalization(x, np.ones((4, 3)))
    with pytest.raises(jitnn.JitnnValueError,
                       match=rf"{op}: bias must have shape \(4, 3\) .*axes \[2, 1\].*got \(3, 4\)"):
        jitnn.layer_normalization(x, bias=np.ones((3, 4)), axes=[2, 1])
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: epsilon must be a number >= 0"):
        jitnn.layer_normalization(x, epsilon=-1e-5)
    with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: input must have dtype float32"):
        jitnn.layer_normalization(jitnn.tensor(np.ones((2, 3), np.int32)))
    with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: scale must have dtype float32"):
        jitnn.layer_normalization(x, jitnn.tensor(np.ones((3, 4), np.int64)))


# --- rms_normalization ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
@pytest.mark.parametrize("shape,axes", AXES_CASES)
def test_rms_norm_axes(shape, axes, kind):
    x = random(shape, 74) * 2 - 0.5
    t = make(x, kind) if len(shape) == 4 else jitnn.tensor(x)
    dims = tuple(shape[a] for a in (range(1, len(shape)) if axes is None else axes))
    scale = random(dims, 75) + 0.5
    for options in ({}, {"scale": scale}, {"scale": scale, "epsilon": 0.1}):
        got = jitnn.rms_normalization(t, axes=axes, **options)
        want = reference("rms_normalization")(x, axes=axes, **options)
        assert got.shape == x.shape
        assert_close(got.numpy(), want, tol=2e-6)


@pytest.mark.parametrize("shape", [(1, 128, 512), (2, 7, 13), (3, 1, 1), (0, 4, 8)])
def test_rms_norm_rows_of_a_transformer(shape):
    """Llama's RMSNorm over the last axis (rows of odd lengths too, one
    element, none): one pass of the rows kernel, scale in the order of the axes."""
    x = random(shape, 76) * 3 + 1
    scale = random(shape[-1:], 77) + 0.5
    got = jitnn.rms_normalization(x, scale, axes=[-1], epsilon=1e-6)
    assert got.layout == "ncw"
    want = reference("rms_normalization")(x, scale, axes=[-1], epsilon=1e-6)
    assert_close(got.numpy(), want, tol=4 * EPS32)
    if x.size:
        np.testing.assert_allclose(want / scale, x / np.sqrt(
            (x.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-6), rtol=1e-12)


@pytest.mark.parametrize("threads", [1, 2])
def test_rms_norm_after_an_embedding_lookup_is_bound(threads):
    """Llama's first RMS norm reads the token-embedding gather: the gather
    writes the plan's buffer (a node of its own kind), so the replayed norm
    stays one bound call, and so is the gather (its ids, a graph input, read
    in place), with the reference's numbers for new ids at every run
    (negative and out-of-range ids as the gather's rule: from the end, then
    clamped)."""
    ctx = jitnn.Context(num_threads=threads)
    table = random((50, 24), 80)
    scale = random((24,), 81) + 0.5
    b = jitnn.GraphBuilder(ctx)
    ids = b.input("ids", (2, 9), dtype="int64")
    y = b.rms_normalization(b.gather(b.constant(table), ids, axis=0), b.constant(scale),
                            axes=[-1], epsilon=1e-5)
    graph = b.build({"y": b.relu(y)})
    out = np.empty((2, 9, 24), np.float32)
    rng = np.random.default_rng(82)
    for _ in range(3):
        given = rng.integers(-60, 60, (2, 9))
        ctx.compute(graph, {"ids": given}, {"y": out})
        rows = reference("gather")(table, given, axis=0)
        want = reference("rms_normalization")(rows, scale, axes=[-1], epsilon=1e-5)
        assert_close(out, np.maximum(want, 0.0), tol=4 * EPS32)
    (program,) = graph._programs
    kinds = [(c_.node.kind, bool(bound)) for c_, bound in
             zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
    assert ("gather_rows", True) in kinds and ("rms_norm_rows", True) in kinds, kinds


def test_rms_norm_graph_operands_and_errors():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 5, 8))
    y = b.rms_normalization(x, scale=b.input("s", (8,)), axes=[2], epsilon=1e-3)
    graph = b.build({"y": y})
    data, scale = random((2, 5, 8), 78), random((8,), 79)
    out = np.zeros((2, 5, 8), np.float32)
    ctx.compute(graph, {"x": data, "s": scale}, {"y": out})
    want = reference("rms_normalization")(data, scale, axes=[2], epsilon=1e-3)
    assert_close(out, want, tol=2e-6)
    t = jitnn.tensor(data)
    op = "rms_normalization"
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: scale must have shape \(5, 8\)"):
        jitnn.rms_normalization(t, np.ones(8, np.float32))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: epsilon must be a number >= 0"):
        jitnn.rms_normalization(t, epsilon=-1.0)
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: axes must be in"):
        jitnn.rms_normalization(t, axes=[3])



@pytest.mark.parametrize("rows", [1, 3, 128])
@pytest.mark.parametrize("d", [1, 7, 9, 17, 512, 4096])
def test_replayed_rms_norm_is_a_bound_call_into_the_plan_buffer(d, rows):
    """Llama's residual add -> RMSNorm over the last axis, computed again on
    new inputs (batch 2): the norm is a node of its own kind that writes the
    plan's buffer and, replayed, runs as one bound call reading the add's
    buffer, with the float64 reference's numbers at every run (rows shorter
    than, not a multiple of and many times the kernel's 16 partial sums;
    2 threads on the large ones; no scale too). (x + x is exact, so the
    reference sees the norm's very input.)"""
    ctx = jitnn.Context(num_threads=2 if rows * d >= 32768 else 1)
    shape = (2, rows, d)
    for scale in (random((d,), 81) + 0.5, None):
        b = jitnn.GraphBuilder(ctx)
        x_in = b.input("x", shape)
        y = b.rms_normalization(b.add(x_in, x_in), None if scale is None else
                                b.constant(scale), axes=[2], epsilon=1e-5)
        graph = b.build({"y": b.relu(y)})       # (the norm's output: a buffer of the plan)
        out = np.empty(shape, np.float32)
        for seed in range(3):
            x = random(shape, 82 + seed) * 2 - 1
            ctx.compute(graph, {"x": x}, {"y": out})
            want = reference("rms_normalization")(2 * x.astype(np.float64), scale, axes=[2],
                                                  epsilon=1e-5)
            assert_close(out, np.maximum(want, 0.0), tol=4 * EPS32)
        (program,) = graph._programs
        kinds = [(c_.node.kind, bool(bound)) for c_, bound in
                 zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
        assert ("rms_norm_rows", True) in kinds, kinds

# --- instance_normalization ----------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
def test_instance_norm(kind, channels):
    x = random((2, channels, 5, 7), channels + 60) * 2 + 3
    scale, bias = _affine((channels,), 61)
    t = make(x, kind)
    for options in ({}, {"scale": scale}, {"bias": bias},
                    {"scale": scale, "bias": bias, "epsilon": 1e-2}):
        got = jitnn.instance_normalization(t, **options)
        assert got.layout == expected_layout(kind)
        if kind != "plain":
            assert_padding_lanes_zero(got)
        want = reference("instance_normalization")(x, **options)
        assert_close(got.numpy(), want, tol=2e-6)


@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block16"])
def test_instance_norm_nhwc(kind):
    nhwc = random((2, 5, 3, 11), 62)
    scale, bias = _affine((11,), 63)
    t = jitnn.tensor(nhwc) if kind == "plain" else make(nhwc, kind, axes="nhwc")
    got = jitnn.instance_normalization(t, scale, bias, layout="nhwc")
    assert got.layout == ("nhwc" if kind == "plain" else expected_layout(kind))
    want = reference("instance_normalization")(nhwc, scale, bias, layout="nhwc")
    assert_close(got.numpy(), want, tol=2e-6)


def test_instance_norm_of_a_blocked_input_with_the_other_axes():
    x = random((2, 6, 5, 9), 64)
    got = jitnn.instance_normalization(make(x, "nChw8c"), layout="nhwc")   # (N, H, W, C) = x
    assert got.layout == "nhwc"
    assert_close(got.numpy(), reference("instance_normalization")(x, layout="nhwc"), tol=2e-6)


def test_instance_norm_network_shape():
    """A style-transfer layer: 1x64x112x112 (12544 values per plane), blocked."""
    x = random((1, 64, 112, 112), 65)
    scale, bias = _affine((64,), 66)
    got = jitnn.instance_normalization(make(x, "nChw8c"), scale, bias)
    assert_close(got.numpy(), reference("instance_normalization")(x, scale, bias), tol=8 * EPS32)


def test_instance_norm_errors():
    op = "instance_normalization"
    x = jitnn.tensor(random((2, 3, 4, 5), 67))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: input must be 4-D"):
        jitnn.instance_normalization(random((2, 3, 4), 67))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: layout must be 'nchw' or 'nhwc'"):
        jitnn.instance_normalization(x, layout="chwn")
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: scale must have shape \(3,\)"):
        jitnn.instance_normalization(x, np.ones(5))
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: bias must have shape \(5,\) "
                                                    r"\(the 5 channels of nhwc"):
        jitnn.instance_normalization(x, bias=np.ones(3), layout="nhwc")
    with pytest.raises(jitnn.JitnnValueError, match=rf"{op}: epsilon must be a number >= 0"):
        jitnn.instance_normalization(x, epsilon=float("nan"))
    with pytest.raises(jitnn.JitnnTypeError, match=rf"{op}: input must have dtype float32"):
        jitnn.instance_normalization(jitnn.tensor(np.ones((1, 2, 2, 2), np.int32)))


# --- the kernels on 1 and 2 threads ---------------------------------------------------

def test_kernels_serial_and_parallel_runs_agree(threads):
    """Each row, tile or plane is one task: the threads' split changes no bit."""
    x = random((96, 512), 68)
    s, b = _affine((512,), 69)
    out, single = np.empty_like(x), np.empty_like(x)
    norm_kernels.layer_norm_rows(x, s, b, 1e-5, out)
    norm_kernels._rows(x.reshape(-1), single.reshape(-1), 512, s, b, 1e-5, 0, 96)
    np.testing.assert_array_equal(out, single)
    norm_kernels.rms_norm_rows(x, s, 1e-5, out)
    norm_kernels._rms_rows(x.reshape(-1), single.reshape(-1), 512, s, 1e-5, 0, 96)
    np.testing.assert_array_equal(out, single)
    assert_close(out, reference("rms_normalization")(x, s, axes=[1]), tol=4 * EPS32)

    g = random((2, 3, 3000, 8), 70)
    gs, gb = _affine((24,), 71)
    out, single = np.empty_like(g), np.empty_like(g)
    norm_kernels.layer_norm_groups(g, gs, gb, 1e-5, 24, out)
    tile = norm_kernels._TILE_FLOATS // 8
    norm_kernels._groups(g.reshape(-1), single.reshape(-1), 3, 3000, 8, 24, gs, gb, 1e-5, tile,
                         0, 2 * -(-3000 // tile))
    np.testing.assert_array_equal(out, single)

    p = random((12, 4000, 1), 72)
    ps, pb = _affine((3, 1), 73)
    out, single = np.empty_like(p), np.empty_like(p)
    norm_kernels.instance_normalization(p, ps, pb, 1e-5, out)
    norm_kernels._instance(p.reshape(-1), single.reshape(-1), 4000, 1, ps, pb, 1e-5, 0, 12)
    np.testing.assert_array_equal(out, single)
    want = reference("instance_normalization")(p.reshape(4, 3, 4000, 1), ps[:, 0], pb[:, 0])
    assert_close(out.reshape(4, 3, 4000, 1), want, tol=8 * EPS32)


def test_kernel_checks():
    x = np.zeros((2, 8), np.float32)
    with pytest.raises(ValueError, match=r"scale must have shape \(8,\)"):
        norm_kernels.layer_norm_rows(x, np.ones(7, np.float32), np.ones(8, np.float32), 1e-5,
                                     np.empty_like(x))
    with pytest.raises(ValueError, match=r"scale must have shape \(8,\)"):
        norm_kernels.rms_norm_rows(x, np.ones(9, np.float32), 1e-5, np.empty_like(x))
    with pytest.raises(ValueError, match=r"channels must be in \(8, 16\]"):
        norm_kernels.layer_norm_groups(np.zeros((1, 2, 3, 8), np.float32),
                                       np.ones(16, np.float32), np.ones(16, np.float32), 1e-5,
                                       5, np.empty((1, 2, 3, 8), np.float32))
    with pytest.raises(ValueError, match=r"x must be a float32"):
        norm_kernels.instance_normalization(x.astype(np.float64).reshape(2, 8, 1),
                                            np.ones((1, 1), np.float32),
                                            np.ones((1, 1), np.float32), 1e-5,
                                            np.empty((2, 8, 1), np.float32))


# --- batch_normalization: WebNN's options ---------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "nChw8c", pytest.param(
    "block16", marks=pytest.mark.slow if jitnn.host_block() != 16 else ())])
def test_batch_norm_statistics_from_graph_inputs(kind):
    """mean, variance, scale and bias as graph inputs (WebNN MLOperands, not
    constants), after a conv (blocked) or on the input (plain)."""
    ctx = jitnn.Context(block=16) if kind == "block16" else jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 9, 5, 7))
    stats = {name: b.input(name, (9,)) for name in ("mean", "variance", "scale", "bias")}
    source = x if kind == "plain" else b.conv2d(x, b.constant(random((9, 9, 1, 1), 80)))
    y = b.batch_normalization(source, stats["mean"], stats["variance"], scale=stats["scale"],
                              bias=stats["bias"], epsilon=1e-3)
    graph = b.build({"y": y})
    data = random((2, 9, 5, 7), 81)
    values = {"mean": random((9,), 82), "variance": np.abs(random((9,), 83)) + 0.5,
              "scale": random((9,), 84), "bias": random((9,), 85)}
    out = np.zeros((2, 9, 5, 7), np.float32)
    ctx.compute(graph, {"x": data, **values}, {"y": out})
    before = data if kind == "plain" else reference("conv2d")(data, random((9, 9, 1, 1), 80))
    want = reference("batch_normalization")(before, values["mean"], values["variance"],
                                            values["scale"], values["bias"], epsilon=1e-3)
    assert_close(out, want, tol=1e-5)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_batch_norm_any_axis(axis):
    x = random((3, 5, 4, 6), 86)
    c = x.shape[axis]
    mean, scale, bias = random((c,), 87), random((c,), 88), random((c,), 89)
    variance = np.abs(random((c,), 90)) + 0.2
    for t in (jitnn.tensor(x), make(x, "nChw8c")):
        got = jitnn.batch_normalization(t, mean, variance, scale=scale, bias=bias, axis=axis)
        want = reference("batch_normalization")(x, mean, variance, scale, bias, axis=axis)
        assert_close(got.numpy(), want, tol=4 * EPS32)


def test_batch_norm_refuses_integers():
    with pytest.raises(jitnn.JitnnTypeError, match=r"batch_normalization: x must have dtype"):
        jitnn.batch_normalization(jitnn.tensor(np.ones((1, 2, 2, 2), np.int32)), np.zeros(2),
                                  np.ones(2))


# --- softmax: any axis, as WebNN calls it ------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
def test_softmax_every_axis(kind):
    for rank in range(1, 6):
        x = random((3, 4, 2, 5, 3)[:rank], rank) * 4
        t = make(x, kind) if rank == 4 else jitnn.tensor(x)
        for axis in itertools.chain(range(rank), (-1,)):
            got = jitnn.softmax(t, axis)
            assert_close(got.numpy(), reference("softmax")(x, axis), tol=8 * EPS32)


def test_softmax_as_webnn_calls_it():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (4, 6))
    graph = b.build({"y": b.softmax(x, 1), "z": b.softmax(x, axis=0)})
    data = random((4, 6), 91) * 10
    out = {"y": np.zeros((4, 6), np.float32), "z": np.zeros((4, 6), np.float32)}
    ctx.compute(graph, {"x": data}, out)
    assert_close(out["y"], reference("softmax")(data, 1), tol=8 * EPS32)
    assert_close(out["z"], reference("softmax")(data, 0), tol=8 * EPS32)
    assert_close(jitnn.softmax(data).numpy(), reference("softmax")(data, -1), tol=8 * EPS32)


def test_softmax_of_a_fully_masked_row_is_nan_without_a_warning():
    import warnings
    rows = np.array([[-np.inf] * 4, [0.0, 1.0, -np.inf, 2.0]], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = jitnn.softmax(jitnn.tensor(rows)).numpy()
    assert np.isnan(got[0]).all()
    want = np.exp([0.0, 1.0, 0.0, 2.0]) * [1, 1, 0, 1]
    np.testing.assert_allclose(got[1], want / want.sum(), rtol=1e-6)
