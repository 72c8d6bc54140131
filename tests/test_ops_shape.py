"""reshape, flatten, transpose, softmax and concat: values against the
references, plain results (blocked inputs read back once, counted; free when
the blocked buffer already is the plain array), concat staying blocked along
channels, errors; and a CNN chain against the composed references."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.conv2d import conv2d_reference
from jitnn.ops.eltwise import binary_reference, unary_reference
from jitnn.ops.matmul import gemm_reference
from jitnn.ops.normalization import batch_normalization_reference, softmax_reference
from jitnn.ops.pool import global_average_pool2d_reference, max_pool2d_reference
from jitnn.ops.shape import (concat_reference, flatten_reference, reshape_reference,
                             transpose_reference)
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, random)


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
                  jitnn.softmax(odd, 1)):
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
                       match=r"concat: tensors\[1\] has shape \(2, 3, 5, 4\) but tensors\[0\] has \(2, 3, 4, 4\)"):
        jitnn.concat([x, random((2, 3, 5, 4))], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: tensors\[1\] has shape \(3, 4, 4\)"):
        jitnn.concat([x, random((3, 4, 4))], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: needs at least one tensor"):
        jitnn.concat([], 0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"concat: tensors must be a list or tuple"):
        jitnn.concat(x, 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: axis must be in \[-4, 3\]"):
        jitnn.concat([x, x], 4)
    with pytest.raises(jitnn.JitnnTypeError, match=r"concat: axis must be an int"):
        jitnn.concat([x, x], None)
    with pytest.raises(jitnn.JitnnValueError, match=r"concat: the tensors belong to different"):
        jitnn.concat([x, jitnn.Context().tensor(random((2, 3, 4, 4)))], 1)


# --- a CNN chain ------------------------------------------------------------------------------

@pytest.mark.parametrize("block", [4, 8, 16])
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
