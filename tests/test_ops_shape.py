"""reshape, flatten, transpose, softmax, concat, split, expand and tile:
values against the references, every data type (integer tensors stay
integer, values exact), plain results (blocked inputs read back once,
counted; free when the blocked buffer already is the plain array), concat
staying blocked along channels, split's list of outputs in a graph, errors;
and a CNN chain against the composed references."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from jitnn.ops.eltwise import binary_reference, unary_reference
from jitnn.ops.matmul import gemm_reference
from jitnn.ops.normalization import batch_normalization_reference, softmax_reference
from jitnn.ops.pool import global_average_pool2d_reference, max_pool2d_reference
from jitnn.ops.shape import (concat_reference, expand_reference, flatten_reference,
                             reshape_reference, split_reference, tile_reference,
                             transpose_reference)
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, other_blocks_slow, random,
                           typed_data)


# --- reshape, flatten, transpose, softmax ------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 9, 17, 64])
def test_plain_layout_ops(kind, channels):
    x = random((2, channels, 3, 5), channels, scale=4.0)
    t = make(x, kind)
    cases = [
        (jitnn.reshape(t, (2, -1)), reshape_reference(x, (2, -1))),
        (jitnn.reshape(t, (channels, 30)), reshape_reference(x, (channels, 30))),
        (jitnn.flatten(t), flatten_reference(x)),
        (jitnn.flatten(t, 0), flatten_reference(x, 0)),
        (jitnn.flatten(t, 3), flatten_reference(x, 3)),
        (jitnn.flatten(t, -1), flatten_reference(x, -1)),
        (jitnn.flatten(t, 4), flatten_reference(x, 4)),
        (jitnn.transpose(t), transpose_reference(x)),
        (jitnn.transpose(t, (0, 2, 3, 1)), transpose_reference(x, (0, 2, 3, 1))),
        (jitnn.softmax(t), softmax_reference(x)),
        (jitnn.softmax(t, 1), softmax_reference(x, 1)),
        (jitnn.softmax(t, axis=0), softmax_reference(x, 0)),
    ]
    for got, want in cases:
        assert got.pending and got.shape == want.shape
        assert jitnn.layouts.block_of(got.layout) is None and got.layout != "plain"
        assert_close(got.numpy(), want, rtol=1e-5, atol=1e-7)


def test_flatten_is_onnx_style():
    x = random((2, 3, 4, 5), 40)
    assert jitnn.flatten(x).shape == (2, 60)
    assert jitnn.flatten(x, 0).shape == (1, 120)
    assert jitnn.flatten(x, 2).shape == (6, 20)
    assert jitnn.flatten(x, -1).shape == (24, 5)
    assert jitnn.flatten(x, 4).shape == (120, 1)
    assert jitnn.flatten(x, -4).shape == (1, 120)
    assert jitnn.flatten(random((7,), 41)).shape == (7, 1)
    assert jitnn.flatten(random((7,), 41), 0).shape == (1, 7)
    assert jitnn.flatten(np.float32(3), 0).shape == (1, 1)


def test_blocked_input_read_back_once_or_for_free():
    ctx = jitnn.Context(block=8)
    odd = jitnn.reorder(ctx.tensor(random((2, 7, 3, 3), 42)), "nChw8c")
    pooled = jitnn.global_average_pool2d(jitnn.reorder(ctx.tensor(random((2, 64, 3, 3), 43)),
                                                       "nChw8c"))
    odd._materialize(), pooled._materialize()
    with assert_schedule(ctx, reorders=1):             # one plain copy of `odd`, shared
        for t in (jitnn.reshape(odd, (14, 9)), jitnn.flatten(odd), jitnn.transpose(odd),
                  jitnn.softmax(odd, 1), *jitnn.split(odd, [2, 5], 1),
                  jitnn.expand(odd, (3, 1, 1, 1, 1)), jitnn.tile(odd, (1, 2, 1, 1)),
                  jitnn.concat([odd, odd], 2)):
            t._materialize()
    with assert_schedule(ctx, reorders=1):             # pooled.numpy() only: flatten was free
        flat = jitnn.flatten(pooled)
        assert_close(flat.numpy(), pooled.numpy().reshape(2, 64))
    assert np.shares_memory(flat._materialize(), pooled._materialize())


def test_softmax_is_stable_and_sums_to_one():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1e4, 0.0, 1e4]], np.float32)
    got = jitnn.softmax(x).numpy()
    assert np.all(np.isfinite(got))
    assert_close(got, softmax_reference(x))
    assert_close(got.sum(axis=-1), np.ones(2))


def test_shape_op_errors():
    x = jitnn.tensor(random((2, 3, 4, 5)))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"reshape: new_shape \(7, 20\) has 140 elements but x \(2, 3, 4, 5\) has 120"):
        jitnn.reshape(x, (7, 20))
    with pytest.raises(jitnn.JitnnValueError, match=r"reshape: cannot infer the -1"):
        jitnn.reshape(x, (7, -1))
    with pytest.raises(jitnn.JitnnValueError, match=r"at most one -1"):
        jitnn.reshape(x, (-1, -1))
    with pytest.raises(jitnn.JitnnTypeError, match=r"reshape: new_shape must be a sequence of ints"):
        jitnn.reshape(x, 120)
    with pytest.raises(jitnn.JitnnTypeError, match=r"reshape: new_shape must be a sequence of ints"):
        jitnn.reshape(x, (2.0, 60))
    with pytest.raises(jitnn.JitnnValueError, match=r"flatten: start_axis must be in \[-4, 4\] .* got 5"):
        jitnn.flatten(x, 5)
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"transpose: permutation must order the axes 0..3 .* got \(0, 1, 1, 2\)"):
        jitnn.transpose(x, (0, 1, 1, 2))
    with pytest.raises(jitnn.JitnnValueError, match=r"transpose: permutation"):
        jitnn.transpose(x, (1, 0))
    with pytest.raises(jitnn.JitnnTypeError, match=r"transpose: permutation must be a sequence"):
        jitnn.transpose(x, 3)
    with pytest.raises(jitnn.JitnnValueError, match=r"softmax: axis must be in \[-4, 3\]"):
        jitnn.softmax(x, 4)
    with pytest.raises(jitnn.JitnnValueError, match=r"softmax: x must have rank >= 1"):
        jitnn.softmax(np.float32(1.0))


# --- concat -------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [(8, 16), (3, 5, 9), (1, 7, 17), (64, 64), (9,), (4, 12, 4)])
def test_concat_channels(kind, channels):
    xs = [random((2, c, 5, 3), 50 + i) for i, c in enumerate(channels)]
    ts = [make(x, kind) for x in xs]
    got = jitnn.concat(ts, 1)
    assert got.pending and got.layout == expected_layout(kind)
    assert_close(got.numpy(), concat_reference(xs, 1))
    if kind != "plain":
        assert_padding_lanes_zero(got)
    assert_close(jitnn.concat(ts, -3).numpy(), concat_reference(xs, 1))


@pytest.mark.parametrize("kind", KINDS)
def test_concat_other_axes_are_plain(kind):
    xs = [random((2, 7, 3, 3), 60), random((2, 7, 3, 3), 61)]
    ts = [make(x, kind) for x in xs]
    for axis in (0, 2, 3, -1):
        got = jitnn.concat(ts, axis)
        assert got.layout == "nchw"
        assert_close(got.numpy(), concat_reference(xs, axis))


def test_concat_mixed_inputs_and_reorders():
    ctx = jitnn.Context(block=8)
    xs = [random((2, c, 4, 5), 70 + c) for c in (3, 8, 6)]
    blocked8 = jitnn.reorder(ctx.tensor(xs[1]), "nChw8c")
    blocked4 = jitnn.reorder(ctx.tensor(xs[2]), "nChw4c")
    plain = ctx.tensor(xs[0])
    blocked8._materialize(), blocked4._materialize()
    # plain -> nChw8c (1); nChw4c -> plain -> nChw8c (2)
    with assert_schedule(ctx, kernels=1, reorders=3):
        got = jitnn.concat([plain, blocked8, blocked4], 1)
        assert got.layout == "nChw8c"                   # the first blocked input's layout
        got._materialize()
    assert_close(got.numpy(), concat_reference(xs, 1))
    assert_padding_lanes_zero(got)
    with assert_schedule(ctx, kernels=1, reorders=0):
        jitnn.concat([blocked8, blocked8], 1)._materialize()


def test_concat_nhwc_blocked_along_its_channel_axis():
    xs = [random((2, 5, 3, c), 80 + c) for c in (3, 8, 2)]
    ts = [make(x, "block4", axes="nhwc") for x in xs]
    got = jitnn.concat(ts, 3)
    assert got.layout == "nChw4c" and got._axes == "nhwc"
    assert_close(got.numpy(), concat_reference(xs, 3))
    assert_padding_lanes_zero(got)
    got = jitnn.concat(ts[:1] * 2, 1)                   # H of nhwc: plain
    assert got.layout == "nhwc"
    assert_close(got.numpy(), concat_reference(xs[:1] * 2, 1))


def test_concat_plain_any_rank():
    xs = [random((3, 2), 90), random((3, 5), 91)]
    assert_close(jitnn.concat(xs, 1).numpy(), concat_reference(xs, 1))
    assert_close(jitnn.concat((xs[0], xs[0]), 0).numpy(), concat_reference([xs[0]] * 2, 0))
    ys = [random((4,), 92), random((0,), 93)]
    assert_close(jitnn.concat(ys, 0).numpy(), concat_reference(ys, 0))


def test_concat_errors():
    x = jitnn.tensor(random((2, 3, 4, 4)))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"concat: inputs\[1\] has shape \(2, 3, 5, 4\) but inputs\[0\] has \(2, 3, 4, 4\)"):
        jitnn.concat([x, random((2, 3, 5, 4))], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: inputs\[1\] has shape \(3, 4, 4\)"):
        jitnn.concat([x, random((3, 4, 4))], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: needs at least one tensor"):
        jitnn.concat([], 0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"concat: inputs must be a list or tuple"):
        jitnn.concat(x, 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: axis must be in \[-4, 3\]"):
        jitnn.concat([x, x], 4)
    with pytest.raises(jitnn.JitnnTypeError, match=r"concat: axis must be an int"):
        jitnn.concat([x, x], None)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: the tensors belong to different"):
        jitnn.concat([x, jitnn.Context().tensor(random((2, 3, 4, 4)))], 1)


# --- a CNN chain ------------------------------------------------------------------------------

# (the host's block; the others slow: the chain's ops on another block
# compile that block's drivers for its geometry, each covered by the kernel
# tests' per-block cases)
@pytest.mark.parametrize("block", other_blocks_slow())
def test_cnn_chain_against_composed_references(block):
    """conv2d -> batch_normalization -> relu -> max_pool2d -> add (residual)
    -> global_average_pool2d -> flatten -> gemm, blocked until the flatten."""
    ctx = jitnn.Context(block=block)
    rng = np.random.default_rng(block)
    x = rng.standard_normal((2, 3, 15, 13)).astype(np.float32)
    w = (0.3 * rng.standard_normal((9, 3, 3, 3))).astype(np.float32)
    w2 = (0.2 * rng.standard_normal((9, 9, 3, 3))).astype(np.float32)
    mean, var = rng.standard_normal(9), rng.random(9) + 0.5
    scale, bias = rng.standard_normal(9), rng.standard_normal(9)
    fc_w, fc_b = rng.standard_normal((9, 5)).astype(np.float32), rng.standard_normal(5)

    ctx.reset_stats()
    c = jitnn.conv2d(ctx.tensor(x), ctx.tensor(w), padding=1)
    b = jitnn.batch_normalization(c, mean, var, scale, bias)
    r = jitnn.relu(b)
    p = jitnn.max_pool2d(r, 3, strides=2, padding=1)
    s = jitnn.conv2d(p, ctx.tensor(w2), padding=1)          # the residual branch
    a = jitnn.add(s, p)
    g = jitnn.global_average_pool2d(a)
    f = jitnn.flatten(g)
    y = jitnn.gemm(f, fc_w, fc_b)
    for t in (c, b, r, p, s, a, g):
        assert t.layout == f"nChw{block}c"
    assert f.layout == "nc" and y.shape == (2, 5)
    got = y.numpy()
    # 9 channels are never a multiple of the block (> 1): one readback at the flatten
    assert ctx.stats.reorders == 1

    want = conv2d_reference(x, w, padding=1)
    want = batch_normalization_reference(want, mean, var, scale, bias)
    want = unary_reference("relu", want)
    pooled = max_pool2d_reference(want, 3, strides=2, padding=1)
    want = binary_reference("add", conv2d_reference(pooled, w2, padding=1), pooled)
    want = flatten_reference(global_average_pool2d_reference(want))
    want = gemm_reference(want, fc_w, fc_b)
    assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert_padding_lanes_zero(a)


# --- every data type --------------------------------------------------------------------------



@pytest.mark.parametrize("dtype", jitnn.DTYPES, ids=str)
def test_shape_ops_keep_every_dtype(dtype):
    x = typed_data((2, 3, 4, 5), dtype, 1)
    y = typed_data((2, 2, 4, 5), dtype, 2)
    t = jitnn.tensor(x)
    assert t.dtype == dtype
    cases = [
        (jitnn.reshape(t, (6, -1)), reshape_reference(x, (6, -1))),
        (jitnn.flatten(t, 2), flatten_reference(x, 2)),
        (jitnn.transpose(t, (0, 2, 3, 1)), transpose_reference(x, (0, 2, 3, 1))),
        (jitnn.concat([t, y], 1), concat_reference([x, y], 1)),
        (jitnn.concat([t, t], 3), concat_reference([x, x], 3)),
        (jitnn.expand(t, (3, 1, 3, 1, 5)), expand_reference(x, (3, 1, 3, 1, 5))),
        (jitnn.tile(t, (2, 1, 3, 1)), tile_reference(x, (2, 1, 3, 1))),
        *zip(jitnn.split(t, 3, 1), split_reference(x, 3, 1)),
        *zip(jitnn.split(t, [1, 3, 1], axis=-1), split_reference(x, [1, 3, 1], 3)),
    ]
    for got, want in cases:
        assert got.dtype == dtype and got.shape == want.shape
        assert jitnn.layouts.block_of(got.layout) is None
        assert want.dtype == (np.float64 if dtype == np.float32 else dtype)
        np.testing.assert_array_equal(got.numpy(), want)


def test_host_arrays_join_the_first_tensors_dtype():
    ids = jitnn.tensor(np.array([[1, 2]], np.int32))
    got = jitnn.concat([ids, [[3, 4]], np.array([[5, 6]], np.int64)], 0)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got.numpy(), [[1, 2], [3, 4], [5, 6]])
    assert jitnn.concat([np.arange(3), np.arange(2)], 0).dtype == np.int64   # jitnn.tensor's rules
    with pytest.raises(jitnn.JitnnTypeError, match=r"concat: inputs\[1\] must be int32 data"):
        jitnn.concat([ids, [[0.5, 1.0]]], 0)
    with pytest.raises(jitnn.JitnnTypeError,
                       match=r"concat: inputs\[1\] must have the dtype of the first operand "
                             r"\(int32\), got a float32 tensor"):
        jitnn.concat([ids, jitnn.tensor(np.zeros((1, 2), np.float32))], 0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"concat: inputs\[1\] is int64 but inputs\[0\]"):
        jitnn.concat([np.zeros((1, 2), np.float32), np.zeros((1, 2), np.int64)], 0)


def test_typical_transformer_shapes():
    """BERT-base: heads split out of (1, 128, 768) and moved before the
    sequence, (1, 12, 128, 64) -> (1, 128, 12, 64) and back."""
    x = random((1, 128, 768), 5)
    heads = jitnn.transpose(jitnn.reshape(x, (1, 128, 12, 64)), (0, 2, 1, 3))
    assert heads.shape == (1, 12, 128, 64)
    want = transpose_reference(reshape_reference(x, (1, 128, 12, 64)), (0, 2, 1, 3))
    np.testing.assert_array_equal(heads.numpy(), want)
    back = jitnn.reshape(jitnn.transpose(heads, (0, 2, 1, 3)), (1, 128, 768))
    np.testing.assert_array_equal(back.numpy(), x)
    q, k, v = jitnn.split(random((1, 128, 3 * 768), 6), 3, axis=2)      # a fused QKV
    assert q.shape == k.shape == v.shape == (1, 128, 768)
    mask = jitnn.expand(np.ones((1, 1, 1, 128), np.uint8), (1, 12, 128, 128))
    assert mask.dtype == np.uint8 and mask.numpy().all()


# --- split ----------------------------------------------------------------------------------

@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
def test_split_blocked_and_plain(kind, channels):
    x = random((2, channels, 5, 3), channels)
    t = make(x, kind)
    t._materialize()
    sizes = [1] * channels if channels < 4 else [channels - 3, 1, 2]
    with assert_schedule(t.context, reorders=0 if kind == "plain" else 1):
        parts = jitnn.split(t, sizes, 1)                # read back once for every part
        got = [p.numpy() for p in parts]
    for g, w in zip(got, split_reference(x, sizes, 1), strict=True):
        np.testing.assert_array_equal(g, w)
    for axis in (0, 2, -1):
        size = x.shape[axis]
        count = 2 if size % 2 == 0 else size
        for g, w in zip(jitnn.split(t, count, axis), split_reference(x, count, axis),
                        strict=True):
            np.testing.assert_array_equal(g.numpy(), w)


def test_split_in_a_graph_gives_a_list_of_operands():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 6, 3, 5))
    ids = b.input("ids", (4, 6), dtype="int64")
    parts = b.split(x, [1, 2, 3], axis=1)
    halves = b.split(ids, 2, axis=1)
    assert isinstance(parts, list) and [p.shape for p in parts] == [
        (2, 1, 3, 5), (2, 2, 3, 5), (2, 3, 3, 5)]
    assert [h.dtype for h in halves] == [np.int64, np.int64]
    graph = b.build({"a": parts[0], "c": b.relu(parts[2]), "h": halves[1]})
    for seed in (1, 2):                      # the second compute replays the first's plan
        xv, iv = random((2, 6, 3, 5), seed), typed_data((4, 6), np.int64, seed)
        outs = {"a": np.empty((2, 1, 3, 5), np.float32), "c": np.empty((2, 3, 3, 5), np.float32),
                "h": np.empty((4, 3), np.int64)}
        ctx.compute(graph, {"x": xv, "ids": iv}, outs)
        np.testing.assert_array_equal(outs["a"], xv[:, :1])
        np.testing.assert_array_equal(outs["c"], np.maximum(xv[:, 3:], 0))
        np.testing.assert_array_equal(outs["h"], iv[:, 3:])
        lazy = ctx.dispatch(graph, {"x": xv, "ids": iv})
        np.testing.assert_array_equal(lazy["h"].numpy(), iv[:, 3:])


# --- expand and tile ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape,new_shape,result", [
    ((), (2, 3), (2, 3)),
    ((1,), (4, 1, 5), (4, 1, 5)),
    ((3, 1, 5), (3, 4, 5), (3, 4, 5)),
    ((2, 5), (3, 2, 5), (3, 2, 5)),
    ((2, 1), (1, 3), (2, 3)),                      # bidirectional: both grow
    ((2, 3, 1, 1), (1, 1), (2, 3, 1, 1)),          # a new shape smaller than the input's
    ((4, 1), (0, 1, 1), (0, 4, 1)),
])
def test_expand_broadcasts_both_ways(shape, new_shape, result):
    x = random(shape, 7)
    got = jitnn.expand(x, new_shape)
    assert got.shape == result
    np.testing.assert_array_equal(got.numpy(), expand_reference(x, new_shape))


@pytest.mark.parametrize("kind", KINDS)
def test_expand_and_tile_blocked(kind):
    x = random((2, 9, 1, 3), 8)
    t = make(x, kind)
    np.testing.assert_array_equal(jitnn.expand(t, (2, 9, 4, 3)).numpy(),
                                  expand_reference(x, (2, 9, 4, 3)))
    np.testing.assert_array_equal(jitnn.tile(t, (1, 2, 3, 1)).numpy(),
                                  tile_reference(x, (1, 2, 3, 1)))


def test_tile_shapes():
    for shape, reps in [((), ()), ((3,), (4,)), ((2, 3), (1, 1)),
                        ((1, 2, 3, 1, 2), (2, 1, 1, 3, 1)),
                        ((0, 2), (3, 2))]:
        x = random(shape, 9)
        got = jitnn.tile(x, reps)
        want = tile_reference(x, reps)
        assert got.shape == want.shape == tuple(d * r for d, r in zip(shape, reps))
        np.testing.assert_array_equal(got.numpy(), want)
    assert_close(tile_reference(np.arange(3), (2,)), [0, 1, 2, 0, 1, 2])


def test_split_expand_tile_errors():
    x = jitnn.tensor(random((2, 6, 4, 5)))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"split: splits \(2, 3\) must sum to axis 1 of x \(2, 6, 4, 5\) "
                             r"\(size 6\), got 5"):
        jitnn.split(x, [2, 3], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"split: splits=4 must be >= 1 and divide"):
        jitnn.split(x, 4, 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"split: splits=0 must be >= 1"):
        jitnn.split(x, 0)
    with pytest.raises(jitnn.JitnnValueError, match=r"split: splits must be >= 1, got \(6, 0\)"):
        jitnn.split(x, [6, 0], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"split: splits \(\) must sum"):
        jitnn.split(x, [], 1)
    with pytest.raises(jitnn.JitnnTypeError, match=r"split: splits must be an int or a sequence"):
        jitnn.split(x, 2.0)
    with pytest.raises(jitnn.JitnnValueError, match=r"split: axis must be in \[-4, 3\]"):
        jitnn.split(x, 2, 4)
    with pytest.raises(jitnn.JitnnValueError, match=r"split: x must have rank >= 1"):
        jitnn.split(np.float32(1), 1)
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"expand: x \(2, 6, 4, 5\) and new_shape \(3, 5\) do not "
                             r"broadcast"):
        jitnn.expand(x, (3, 5))
    with pytest.raises(jitnn.JitnnValueError, match=r"expand: new_shape must be >= 0"):
        jitnn.expand(x, (-1, 5))
    with pytest.raises(jitnn.JitnnTypeError, match=r"expand: new_shape must be a sequence of ints"):
        jitnn.expand(x, 5)
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"tile: repetitions must have 4 item\(s\)"):
        jitnn.tile(x, (1, 2))
    with pytest.raises(jitnn.JitnnValueError, match=r"tile: repetitions must be >= 1"):
        jitnn.tile(x, (1, 0, 1, 1))
    with pytest.raises(jitnn.JitnnValueError, match=r"tile: the result's shape"):
        jitnn.tile(x, (1, 1, 2**30, 1))
    with pytest.raises(jitnn.JitnnTypeError, match=r"tile: repetitions must be a sequence"):
        jitnn.tile(x, (1, 1, True, 1))


# --- transpose: the swap kernel ---------------------------------------------------------

SWAPS = [((1, 3136, 32), (0, 2, 1)), ((2, 17, 9), (0, 2, 1)), ((9, 7), (1, 0)),
         ((2, 16, 3, 17), (0, 2, 1, 3)), ((1, 3, 5, 7), (0, 2, 3, 1)), ((2, 9, 5, 7), (0, 3, 1, 2)),
         ((3, 4, 5), (2, 0, 1)), ((1, 1, 8, 8), (0, 1, 3, 2)), ((3, 1, 17, 1, 9), (0, 4, 3, 2, 1))]


@pytest.mark.parametrize("shape, perm", SWAPS)
@pytest.mark.parametrize("threads", [1, 2])
def test_transposes_that_swap_two_groups_of_axes_run_the_swap_kernel(shape, perm, threads):
    """Odd sizes (edges of the 8 x 8 tiles), batches, rows of K floats, size-1
    axes: the kernel's (B, I, J, K) is found and gives numpy's values, as
    the op, in a replayed graph on new inputs, bound after its first run."""
    from jitnn.kernels import transpose as T
    dims = T.swap_dims(shape, perm)
    assert dims is not None and np.prod(dims) == np.prod(shape)
    x = random(shape, 3)
    out = np.empty(np.transpose(x, perm).shape, np.float32)
    T.transpose_swap(x, out, dims, threads)
    np.testing.assert_array_equal(out, np.transpose(x, perm))
    ctx = jitnn.Context(num_threads=threads)
    np.testing.assert_array_equal(jitnn.transpose(ctx.tensor(x), perm).numpy(),
                                  np.transpose(x, perm))
    b = jitnn.GraphBuilder(ctx)
    graph = b.build({"y": b.relu(b.transpose(b.relu(b.input("x", shape)), perm))})
    for seed in range(3):
        xs = random(shape, seed)
        outs = {"y": np.full(out.shape, np.nan, np.float32)}
        ctx.compute(graph, {"x": xs}, outs)
        np.testing.assert_array_equal(outs["y"], np.maximum(np.transpose(xs, perm), 0))
    (program,) = graph._programs
    assert [bool(bound) for c, bound in zip(program.steps, program.bindings.steps)
            if c.step.label == "transpose"] == [True]


def test_the_swap_kernel_leaves_other_permutations_to_numpy_and_checks_its_arrays():
    from jitnn.kernels import transpose as T
    # the identity (once size-1 axes are dropped) and a reversal of four axes
    for shape, perm in (((2, 3, 4, 5), (0, 1, 2, 3)), ((2, 3, 4, 5), (3, 2, 1, 0)),
                        ((4, 1, 6), (1, 0, 2))):
        assert T.swap_dims(shape, perm) is None
    x = random((2, 3, 4, 5), 1)
    np.testing.assert_array_equal(jitnn.transpose(jitnn.tensor(x), (3, 2, 1, 0)).numpy(),
                                  x.transpose(3, 2, 1, 0))
    out = np.empty((2, 5, 4, 3), np.float32)
    with pytest.raises(ValueError, match="x has 120 elements, expected 2 x 3 x 4 x 6"):
        T.transpose_swap(x, out, (2, 3, 4, 6), 1)
    with pytest.raises(ValueError, match="overlaps"):
        T.transpose_swap(x, x, (2, 12, 5, 1), 1)
    with pytest.raises(ValueError, match="float32"):
        T.transpose_swap(x.astype(np.float64), out, (2, 12, 5, 1), 1)
    ints = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    np.testing.assert_array_equal(jitnn.transpose(jitnn.tensor(ints), (0, 2, 1)).numpy(),
                                  ints.transpose(0, 2, 1))
