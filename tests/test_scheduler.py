"""The lazy scheduler: fusion, layouts, reorders, buffers, policies, explain, bounds."""

import gc
import threading

import numpy as np
import pytest

import jitnn
from jitnn import passes
from jitnn.ops.conv2d import conv2d_reference
from jitnn.ops.lrn import lrn_reference
from jitnn.ops.normalization import batch_normalization_reference
from tests.helpers import assert_schedule, portable_block_slow, random

RTOL = 2e-4


def _close(got, want, atol=2e-4):
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=atol)


def _relu(x):
    return np.maximum(x, 0)


# --- the seed scenario ------------------------------------------------------------------

def _seed_chain(ctx, a, ws):
    c = jitnn.relu(jitnn.conv2d(a, ws[0], padding=1))
    e = jitnn.relu(jitnn.conv2d(c, ws[1], padding=1))
    return jitnn.relu(jitnn.conv2d(e, ws[2], padding=1)), (c, e)


@pytest.fixture
def seed():
    ctx = jitnn.Context()
    a = ctx.tensor(random((1, 16, 11, 13), 1))
    ws = [ctx.tensor(random((16, 16, 3, 3), 2 + i, 0.2)) for i in range(3)]
    want = np.asarray(a, np.float64)
    for w in ws:
        want = _relu(conv2d_reference(want, np.asarray(w), padding=1))
    return ctx, a, ws, want


def test_seed_chain_does_two_reorders_and_three_launches(seed):
    ctx, a, ws, want = seed
    ctx.reset_stats()
    h, _ = _seed_chain(ctx, a, ws)
    assert h.pending and ctx.stats == jitnn.Stats()     # nothing ran at the calls
    with assert_schedule(ctx, kernels=3, reorders=2, fused=3):   # each relu into its conv
        _close(h.numpy(), want)
    assert ctx.stats.flushes == 1 and ctx.stats.reorder_bytes == 2 * 16 * 11 * 13 * 4


def test_seed_chain_with_activation_option_is_the_same_plan(seed):
    ctx, a, ws, want = seed
    h = a
    for w in ws:
        h = jitnn.conv2d(h, w, padding=1, activation="relu")
    with assert_schedule(ctx, kernels=3, reorders=2, fused=0):
        _close(h.numpy(), want)


def test_held_intermediate_is_materialized_and_its_read_adds_one_reorder(seed):
    ctx, a, ws, want = seed
    h, (c, e) = _seed_chain(ctx, a, ws)       # the caller holds c and e
    h.numpy()
    assert not c.pending and not e.pending    # kept (blocked), computed once
    assert c.layout == e.layout == f"nChw{ctx.block}c"
    with assert_schedule(ctx, kernels=0, reorders=1):
        c_values = c.numpy()
    _close(c_values, _relu(conv2d_reference(np.asarray(a, np.float64), np.asarray(ws[0]),
                                            padding=1)))


def test_intermediates_nobody_holds_are_never_materialized(seed):
    ctx, a, ws, want = seed
    h, held = _seed_chain(ctx, a, ws)
    del held
    gc.collect()
    text = jitnn.explain(h)
    assert "6 op(s) recorded -> 3 kernel launch(es), 3 fused away" in text
    with assert_schedule(ctx, kernels=3):
        _close(h.numpy(), want)
    # the held conv output without relu is kept: relu cannot be fused into it
    conv_out = jitnn.conv2d(a, ws[0], padding=1)
    y = jitnn.relu(conv_out)
    with assert_schedule(ctx, kernels=2, fused=0):
        y.numpy()
    assert not conv_out.pending


def test_intermediate_read_by_a_later_pending_op_is_kept():
    ctx = jitnn.Context()
    x = ctx.tensor(random((1, 8, 6, 6), 3))
    w = ctx.tensor(random((8, 8, 1, 1), 4))
    branch = jitnn.sigmoid(jitnn.conv2d(x, w))     # conv output read by relu and sigmoid
    conv = jitnn.conv2d(x, w)
    first = jitnn.relu(conv)
    second = jitnn.sigmoid(conv)
    del conv
    gc.collect()
    want = conv2d_reference(np.asarray(x), np.asarray(w))
    _close(first.numpy(), _relu(want))
    _close(second.numpy(), 1 / (1 + np.exp(-want)))   # conv was kept for it
    _close(branch.numpy(), 1 / (1 + np.exp(-want)))


# --- fusion ----------------------------------------------------------------------------

def _bn_params(c, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(c).astype(np.float32) * 0.1,            # mean
            (rng.random(c) + 0.5).astype(np.float32),                    # variance
            (rng.random(c) + 0.5).astype(np.float32),                    # scale
            rng.standard_normal(c).astype(np.float32) * 0.1)             # bias


def test_batch_norm_folds_into_conv_and_residual_relu_fuse():
    ctx = jitnn.Context()
    x_np = random((2, 9, 7, 5), 5)
    w_np = random((9, 9, 3, 3), 6, 0.3)
    b_np = random((9,), 7)
    bn = _bn_params(9, 8)
    x = ctx.tensor(x_np)
    y = jitnn.relu(jitnn.add(
        jitnn.batch_normalization(jitnn.conv2d(x, w_np, b_np, padding=1),
                                  *[ctx.tensor(p) for p in bn]), x))
    text = jitnn.explain(y)
    assert "conv2d + batch_normalization + add + relu" in text
    # x reordered once for the conv, reused as the residual; one conv launch
    with assert_schedule(ctx, kernels=1, reorders=2, fused=3):
        got = y.numpy()
    want = conv2d_reference(x_np, w_np, b_np, padding=1)
    want = _relu(batch_normalization_reference(want, *bn) + x_np)
    _close(got, want, atol=5e-4)


def test_elementwise_chain_after_conv_is_one_pass():
    ctx = jitnn.Context()
    x_np = random((1, 17, 6, 7), 9)
    w_np = random((17, 17, 1, 1), 10, 0.3)
    x = ctx.tensor(x_np)
    conv = jitnn.relu(jitnn.conv2d(x, w_np))           # relu fuses into the conv
    y = jitnn.tanh(jitnn.mul(jitnn.sigmoid(jitnn.add(conv, 0.5)), 2.0))
    del conv
    with assert_schedule(ctx, kernels=2, fused=4):     # conv + relu; add, sigmoid, mul, tanh
        got = y.numpy()                                # in one pass
    want = np.tanh(2.0 / (1 + np.exp(-(_relu(conv2d_reference(x_np, w_np)) + 0.5))))
    _close(got, want)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 9, 5), (1, 17, 1, 1)])
def test_elementwise_chain_on_plain_data_is_one_pass(shape):
    # activations and binary ops with a scalar or a same-shape operand, either
    # side; no conv before them, so the data stays plain (any rank)
    ctx = jitnn.Context()
    x_np, y_np = random(shape, 40), random(shape, 41)
    x, y = ctx.tensor(x_np), ctx.tensor(y_np)
    t = jitnn.sub(2.0, jitnn.mul(y, jitnn.sigmoid(jitnn.add(x, 0.5))))
    out = jitnn.maximum(jitnn.leaky_relu(jitnn.tanh(t), alpha=0.2), y)
    del t                                   # held, it would be kept (its own pass)
    with assert_schedule(ctx, kernels=1, reorders=0, fused=6):
        got = out.numpy()
    inner = np.tanh(2.0 - y_np * _sigmoid(x_np + 0.5))
    want = np.maximum(np.where(inner >= 0, inner, 0.2 * inner), y_np)
    _close(got, want)
    assert out.layout == x.layout
    assert "add + sigmoid + mul + sub + tanh + leaky_relu + maximum" in jitnn.explain(out)


def test_plain_chain_keeps_what_is_held_and_stops_at_broadcasts():
    ctx = jitnn.Context()
    x_np, row_np = random((4, 6), 42), random((6,), 43)
    x = ctx.tensor(x_np)
    held = jitnn.relu(jitnn.add(x, 1.0))               # the caller keeps it
    shifted = jitnn.add(held, row_np)                  # a broadcast row: its own pass
    out = jitnn.sigmoid(jitnn.mul(shifted, 3.0))       # mul + sigmoid: one pass
    with assert_schedule(ctx, kernels=3, fused=2):
        got_out, got_held = jitnn.read_all([out, held])
    want_held = _relu(x_np + 1.0)
    _close(got_held, want_held)
    _close(got_out, _sigmoid((want_held + row_np) * 3.0))


@pytest.mark.parametrize("policy", ["plain", "eager"])
def test_plain_chain_fuses_only_under_the_blocked_policy(policy):
    ctx = jitnn.Context(policy=policy)
    x_np = random((3, 5), 44)
    x = ctx.tensor(x_np)
    with assert_schedule(ctx, kernels=3, fused=0):
        got = jitnn.sigmoid(jitnn.mul(jitnn.relu(x), 2.0)).numpy()
    _close(got, _sigmoid(_relu(x_np) * 2.0))


def test_plain_chain_runs_in_place_over_a_dead_intermediate():
    ctx = jitnn.Context()
    x_np = random((5, 9), 45)
    x = ctx.tensor(x_np)
    a = jitnn.add(x, 1.0)                  # read twice below: its own pass, into b0
    b = jitnn.sigmoid(jitnn.sub(jitnn.relu(jitnn.mul(a, a)), 1.0))
    del a
    text = jitnn.explain(b)
    assert "1 intermediate buffer(s)" in text and "kept (b0)" in text
    assert "mul + relu + sub + sigmoid" in text
    _close(b.numpy(), _sigmoid(_relu((x_np + 1.0) ** 2) - 1.0))


def test_relu_before_add_is_not_fused_as_residual():
    # act(conv + residual) is the epilogue's order; relu(conv) + r must not become it
    ctx = jitnn.Context()
    x_np, r_np = random((1, 8, 5, 5), 11), random((1, 8, 5, 5), 12)
    w_np = random((8, 8, 3, 3), 13, 0.3)
    y = jitnn.add(jitnn.relu(jitnn.conv2d(ctx.tensor(x_np), w_np, padding=1)), r_np)
    _close(y.numpy(), _relu(conv2d_reference(x_np, w_np, padding=1)) + r_np)


def _six_convs(threads: int):
    """Six 16 -> 16 channel 3x3 convs on 8 x 8 (5 intermediates of 4 KiB),
    pending on a context of ``threads``, and their float64 reference."""
    ctx = jitnn.Context(num_threads=threads)
    x = ctx.tensor(random((1, 16, 8, 8), 14))
    w = ctx.tensor(random((16, 16, 3, 3), 15, 0.2))
    h, want = x, np.asarray(x, np.float64)
    for _ in range(6):
        h = jitnn.conv2d(h, w, padding=1, activation="relu")
        want = _relu(conv2d_reference(want, np.asarray(w), padding=1))
    return h, want


def test_buffers_of_dead_intermediates_are_reused():
    h, want = _six_convs(threads=1)
    text = jitnn.explain(h)
    # 5 intermediates sharing an arena of two (ping-pong), each 16 x 8 x 8 floats
    assert "5 intermediate buffer(s), 5 sharing an arena of 8.0 KiB" in text
    _close(h.numpy(), want, atol=1e-3)
    assert h._v._plan.arena_bytes == 2 * 16 * 8 * 8 * 4


def test_on_several_threads_a_small_slot_rests_before_reuse():
    # another core may hold the lines it just read: their place is not
    # written again for SETTLE_STEPS steps (jitnn/passes.py)
    import numba

    from jitnn import passes
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has fewer than 2 threads")
    h, want = _six_convs(threads=2)
    # slot k is written at step k and read last at k + 1: with the rest, the
    # slots of min(5, SETTLE_STEPS + 2) consecutive steps are apart
    slots = min(5, passes.SETTLE_STEPS + 2)
    assert f"5 sharing an arena of {slots * 4}.0 KiB" in jitnn.explain(h)
    _close(h.numpy(), want, atol=1e-3)
    assert h._v._plan.arena_bytes == slots * 16 * 8 * 8 * 4


def test_intermediates_share_an_arena_the_size_of_their_largest_live_pair():
    """Channels 32 -> 8 -> 16 -> 8 -> 24: the four intermediates share an
    arena the size of the largest two alive at once (32 and 8 channels),
    at the first run and when the graph is computed again on new inputs (a
    replay, with bound kernel calls)."""
    ctx = jitnn.Context(num_threads=1)   # (2+: slots rest, passes.SETTLE_STEPS)
    channels = (8, 32, 8, 16, 8, 24)
    weights = [random((o, i, 3, 3), 80 + n, 0.2)
               for n, (i, o) in enumerate(zip(channels, channels[1:]))]

    def reference(x):
        for w in weights:
            x = _relu(conv2d_reference(x, w, padding=1))
        return x

    h = ctx.tensor(random((2, 8, 9, 7), 86))
    x_np = np.asarray(h)
    for w in weights:
        h = jitnn.conv2d(h, w, padding=1, activation="relu")
    pixels = 2 * 9 * 7 * 4
    _close(h.numpy(), reference(x_np), atol=1e-3)
    # 32 channels alive with 8, then 8 with 16, then 16 with 8: 32 + 8 at most
    assert h._v._plan.arena_bytes == (32 + 8) * pixels

    b = jitnn.GraphBuilder(ctx)
    t = b.input("x", (2, 8, 9, 7))
    for w in weights:
        t = b.conv2d(t, b.constant(w), padding=1, activation="relu")
    graph = b.build({"y": t})
    for seed in range(3):
        x_np = random((2, 8, 9, 7), 90 + seed)
        out = {"y": np.full((2, 24, 9, 7), np.nan, np.float32)}
        ctx.compute(graph, {"x": x_np}, out)
        _close(out["y"], reference(x_np), atol=1e-3)
    assert graph._programs[0].plan.arena_bytes == (32 + 8) * pixels


def test_in_place_elementwise_reuses_the_input_buffer():
    ctx = jitnn.Context()
    x = jitnn.reorder(ctx.tensor(random((1, 8, 4, 4), 16)), "nChw8c")
    w = ctx.tensor(random((8, 8, 1, 1), 17))
    conv = jitnn.conv2d(jitnn.conv2d(x, w), w)
    y = jitnn.sigmoid(jitnn.maximum(conv, 1.0))       # (an add of 1 folds into the bias)
    del conv
    text = jitnn.explain(y)
    # conv -> b0, conv -> b1, then maximum + sigmoid in place over b1 (y keeps it)
    assert "2 intermediate buffer(s)" in text and "kept (b1)" in text
    want = conv2d_reference(conv2d_reference(np.asarray(x), np.asarray(w)), np.asarray(w))
    _close(y.numpy(), 1 / (1 + np.exp(-np.maximum(want, 1.0))))


# --- policies -----------------------------------------------------------------------------

def _bottleneck(ctx, x, params):
    (w1, bn1), (w2, bn2), (w3, bn3) = params
    y = jitnn.relu(jitnn.batch_normalization(jitnn.conv2d(x, w1), *bn1))
    y = jitnn.relu(jitnn.batch_normalization(jitnn.conv2d(y, w2, padding=1), *bn2))
    y = jitnn.batch_normalization(jitnn.conv2d(y, w3), *bn3)
    return jitnn.relu(jitnn.add(y, x))


def _bottleneck_params(c, mid, seed):
    shapes = [(mid, c, 1, 1), (mid, mid, 3, 3), (c, mid, 1, 1)]
    return [(random(s, seed + i, 1 / np.sqrt(np.prod(s[1:]))), _bn_params(s[0], seed + 10 + i))
            for i, s in enumerate(shapes)]


def _inception(ctx, x, ws):
    a = jitnn.conv2d(x, ws[0], activation="relu")
    b = jitnn.relu(jitnn.conv2d(jitnn.relu(jitnn.conv2d(x, ws[1])), ws[2], padding=1))
    c = jitnn.conv2d(jitnn.max_pool2d(x, 3, strides=1, padding=1), ws[3], activation="relu")
    return jitnn.global_average_pool2d(jitnn.concat([a, b, c], 1))


@pytest.mark.parametrize("block", portable_block_slow((4, 8)))
def test_the_three_policies_agree_on_a_bottleneck_and_an_inception_block(block):
    x_np = random((2, 20, 9, 7), 20)
    params = _bottleneck_params(20, 6, 21)
    inception_ws = [random(s, 30 + i, 0.3) for i, s in enumerate(
        [(5, 20, 1, 1), (4, 20, 1, 1), (7, 4, 3, 3), (3, 20, 1, 1)])]
    results, stats = {}, {}
    for policy in jitnn.POLICIES:
        ctx = jitnn.Context(block=block, policy=policy)
        x = ctx.tensor(x_np)
        bottleneck = _bottleneck(ctx, x, params)
        inception = _inception(ctx, x, inception_ws)
        results[policy] = jitnn.read_all([bottleneck, inception])
        stats[policy] = ctx.stats
    for policy in ("eager", "plain"):
        for got, want in zip(results[policy], results["blocked"]):
            _close(got, want, atol=5e-4)
    want = np.asarray(x_np, np.float64)
    y = want
    for i, (w, bn) in enumerate(params):
        y = batch_normalization_reference(conv2d_reference(y, w, padding=int(i == 1)), *bn)
        y = _relu(y) if i < 2 else _relu(y + want)
    _close(results["blocked"][0], y, atol=5e-4)
    # the costs differ: fusion only under blocked, reorders around every conv under plain
    assert stats["blocked"].launches < stats["eager"].launches
    assert stats["plain"].reorders > stats["eager"].reorders >= stats["blocked"].reorders
    assert stats["blocked"].fused_ops > 0 and stats["eager"].fused_ops == 0


def test_eager_and_plain_policies_run_at_the_call(seed):
    _, a_np, ws, want = seed
    for policy, layout, reorders in (("eager", "nChw8c", 2), ("plain", "nchw", 6)):
        ctx = jitnn.Context(block=8, policy=policy)
        a = ctx.tensor(np.asarray(a_np))
        wts = [ctx.tensor(np.asarray(w)) for w in ws]
        with assert_schedule(ctx, kernels=6, reorders=reorders):
            h, _ = _seed_chain(ctx, a, wts)
            assert not h.pending and h.layout == layout
            _close(h.numpy(), want)


def test_the_conv_algorithm_shows_in_explain_and_agrees(seed):
    """3x3 stride-1 convs with 8+ channels run Winograd under "auto" (the
    filter read as 36 transformed OI8i8o matrices); "direct" keeps the direct
    kernel. Same numbers within Winograd's rounding."""
    _, a, ws, want = seed
    results = {}
    b = jitnn.Context().block                # the host's: 8 on AVX2, 16 on AVX-512
    for algorithm, filter_layout in (("auto", f"winograd:36OI{b}i{b}o"),
                                     ("direct", f"OIhw{b}i{b}o"),
                                     ("winograd", f"winograd:36OI{b}i{b}o")):
        ctx = jitnn.Context(conv_algorithm=algorithm)
        h, _ = _seed_chain(ctx, ctx.tensor(np.asarray(a)), [ctx.tensor(np.asarray(w)) for w in ws])
        text = jitnn.explain(h)
        assert f"nChw{b}c,{filter_layout} -> nChw{b}c" in text, text
        results[algorithm] = h.numpy()
        _close(results[algorithm], want)
    np.testing.assert_array_equal(results["auto"], results["winograd"])
    assert repr(jitnn.Context(conv_algorithm="direct")).endswith("conv_algorithm='direct')")
    with pytest.raises(jitnn.JitnnValueError, match="conv_algorithm must be one of"):
        jitnn.Context(conv_algorithm="fft")


def test_bad_policy():
    with pytest.raises(jitnn.JitnnValueError, match="policy must be one of"):
        jitnn.Context(policy="lazy")


# --- explain and stats ----------------------------------------------------------------

def test_explain_before_and_after_the_run(seed):
    ctx, a, ws, want = seed
    h, _ = _seed_chain(ctx, a, ws)
    before = jitnn.explain(h)
    assert h.pending                         # explaining never runs anything
    b = ctx.block
    for expected in ("policy blocked", f"reorder nchw -> nChw{b}c", "conv2d + relu",
                     f"winograd:36OI{b}i{b}o", "peak memory", "not run yet",
                     f"read: reorder nChw{b}c -> nchw"):
        assert expected in before, expected
    h.numpy()
    after = jitnn.explain(h)
    assert "reorder tax" in after and " ms" in after
    assert "pass fuse_epilogues: 3 op(s)" in after
    # the plan's time, and the part of it in kernels (the reorder and the convs)
    plan = h._v._plan
    assert 0 < plan.kernel_seconds <= plan.seconds
    assert f"({plan.kernel_seconds * 1e3:.3f} ms in kernels)" in after
    plain = ctx.tensor(np.ones((2, 2)))
    assert "no plan" in jitnn.explain(plain)
    with pytest.raises(jitnn.JitnnTypeError, match="explain: expected a jitnn.Tensor"):
        jitnn.explain(np.ones(3))


# --- bounds and threads -----------------------------------------------------------------

def test_pending_work_is_bounded():
    ctx = jitnn.Context(max_pending_ops=5)
    x = jitnn.reorder(ctx.tensor(random((1, 8, 4, 4), 40)), "nChw8c")
    held = []
    y = x
    for i in range(12):
        y = jitnn.add(y, 1.0)
        held.append(y)
    # at most 5 pending ops at any time: the bound flushed twice
    assert sum(t.pending for t in held) <= 5
    assert ctx.stats.flushes >= 2
    _close(held[-1].numpy(), np.asarray(x) + 12.0)
    byte_bound = jitnn.Context(max_pending_bytes=3 * 8 * 16 * 4)
    z = jitnn.reorder(byte_bound.tensor(random((1, 8, 4, 4), 41)), "nChw8c")
    outs = [jitnn.relu(z) for _ in range(8)]
    assert sum(t.pending for t in outs) <= 3
    with pytest.raises(jitnn.JitnnValueError, match="max_pending_ops"):
        jitnn.Context(max_pending_ops=0)


def test_two_threads_dispatch_and_read_on_one_context():
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 50, 0.3))
    inputs = [random((1, 8, 6, 6), 51 + i) for i in range(2)]
    results, errors = {}, []

    def work(i):
        try:
            for _ in range(5):
                h = jitnn.tensor(inputs[i], ctx)
                for _ in range(3):
                    h = jitnn.relu(jitnn.conv2d(h, w, padding=1))
                results[i] = h.numpy()
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i in range(2):
        want = np.asarray(inputs[i], np.float64)
        for _ in range(3):
            want = _relu(conv2d_reference(want, np.asarray(w), padding=1))
        _close(results[i], want)


def test_matmul_bias_and_activation_fuse_into_one_gemm():
    ctx = jitnn.Context()
    a_np, w_np = random((9, 33), 60), random((33, 17), 61, 0.3)
    bias_np, res_np = random((17,), 62), random((9, 17), 63)
    w = ctx.tensor(w_np)
    y = jitnn.relu(jitnn.add(jitnn.matmul(a_np, w), bias_np))     # a fully connected layer
    assert "matmul + add + relu" in jitnn.explain(y)
    with assert_schedule(ctx, kernels=1, fused=2):
        _close(y.numpy(), _relu(a_np.astype(np.float64) @ w_np + bias_np), atol=1e-4)
    # residual (same shape, operand order swapped) + sigmoid; gemm with alpha keeps alpha
    z = jitnn.sigmoid(jitnn.add(res_np, jitnn.gemm(a_np, w, alpha=0.5)))
    want = 1 / (1 + np.exp(-(0.5 * (a_np.astype(np.float64) @ w_np) + res_np)))
    _close(z.numpy(), want, atol=1e-5)
    # an activation before the add is not an epilogue in that order: no fusion of the add
    u = jitnn.add(jitnn.relu(jitnn.matmul(a_np, w)), bias_np)
    _close(u.numpy(), _relu(a_np.astype(np.float64) @ w_np) + bias_np, atol=1e-4)
    # a held matmul result is not fused away
    held = jitnn.matmul(a_np, w)
    v = jitnn.relu(held)
    _close(v.numpy(), _relu(a_np.astype(np.float64) @ w_np), atol=1e-4)
    assert not held.pending


@pytest.mark.parametrize("rows, k, n", [((1, 13), 33, 17), ((3, 7), 40, 70), ((2, 1, 5), 9, 33),
                                        ((2, 37), 70, 100)])
def test_matmul_reshape_bias_and_residual_fuse_into_one_gemm(rows, k, n):
    """A linear layer on 3-D activations as exporters write it: the 2-D GEMM,
    its bias, a reshape back, then the residual add: one launch, the reshape
    taken in and the residual the kernel's second addend (odd sizes, K and N
    not multiples of the tile)."""
    ctx = jitnn.Context(num_threads=1)
    m = int(np.prod(rows))
    x_np, w_np = random(rows + (k,), 70), random((k, n), 71, 0.3)
    bias_np, res_np = random((n,), 72), random(rows + (n,), 73)
    w = ctx.tensor(w_np)
    flat = jitnn.reshape(ctx.tensor(x_np), (m, k))
    y = jitnn.add(jitnn.reshape(jitnn.add(jitnn.matmul(flat, w), bias_np), rows + (n,)), res_np)
    assert "matmul + add + add" in jitnn.explain(y) and "reshape\n" not in jitnn.explain(y)
    want = (x_np.astype(np.float64).reshape(m, k) @ w_np + bias_np).reshape(rows + (n,)) + res_np
    with assert_schedule(ctx, kernels=1, fused=2):
        _close(y.numpy(), want, atol=1e-4)
    # a row broadcast over the reshaped output is an addend too; a column is not
    # (it stays its own add) and an activation after the reshape is the epilogue's
    col_np = random(rows[:-1] + (rows[-1], 1), 74)
    z = jitnn.relu(jitnn.add(jitnn.reshape(jitnn.matmul(flat, w), rows + (n,)),
                             bias_np.reshape((1,) * len(rows) + (n,))))
    assert "matmul + add + relu" in jitnn.explain(z)
    _close(z.numpy(), _relu((x_np.astype(np.float64).reshape(m, k) @ w_np)
                            .reshape(rows + (n,)) + bias_np))
    u = jitnn.add(jitnn.reshape(jitnn.matmul(flat, w), rows + (n,)), col_np)
    assert "matmul + add" not in jitnn.explain(u)
    _close(u.numpy(), (x_np.astype(np.float64).reshape(m, k) @ w_np).reshape(rows + (n,))
           + col_np)
    # GELU after the reshape stays its own pass (faster than the epilogue's)
    g = jitnn.gelu(jitnn.reshape(jitnn.add(jitnn.matmul(flat, w), bias_np), rows + (n,)))
    assert "matmul + add + gelu" not in jitnn.explain(g)


_M = random((49, 5), 78)
_STATS = [np.abs(random((7,), 79 + i)) + 0.5 for i in range(4)]
# plain-layout ops on a conv result: (op, numpy reference)
PLAIN_OPS = {
    "flatten": (lambda h: jitnn.flatten(h), lambda h: h.reshape(1, -1)),
    "reshape": (lambda h: jitnn.reshape(h, (16, 49)), lambda h: h.reshape(16, 49)),
    "transpose": (lambda h: jitnn.transpose(h, (0, 2, 3, 1)), lambda h: h.transpose(0, 2, 3, 1)),
    "slice": (lambda h: jitnn.slice(h, (0, 2, 1, 0), (1, 9, 5, 7)), lambda h: h[:, 2:11, 1:6]),
    "gather": (lambda h: jitnn.gather(h, np.array([3, 0, 3]), axis=1), lambda h: h[:, [3, 0, 3]]),
    "softmax": (lambda h: jitnn.softmax(h, axis=3),
                lambda h: np.exp(h - h.max(3, keepdims=True)) /
                np.exp(h - h.max(3, keepdims=True)).sum(3, keepdims=True)),
    "batch_normalization": (
        lambda h: jitnn.batch_normalization(h, *_STATS, axis=2),
        lambda h: (h - _STATS[0][:, None]) / np.sqrt(_STATS[1][:, None] + 1e-5)
        * _STATS[2][:, None] + _STATS[3][:, None]),
    "lrn": (lambda h: jitnn.lrn(h, 3), lambda h: lrn_reference(h, 3)),
    # matmul reads plain tensors: the reshaped conv result, nobody holds either
    "matmul": (lambda h: jitnn.matmul(jitnn.reshape(h, (16, 49)), _M),
               lambda h: h.reshape(16, 49) @ _M),
}


@pytest.mark.parametrize("op", PLAIN_OPS)
def test_a_conv_result_nobody_holds_read_by_a_plain_op_gets_a_reused_buffer(op):
    """The plain-layout ops read their input's Value, not the caller's handle
    (as pooling and concat): a conv result they read is an intermediate."""
    run, reference = PLAIN_OPS[op]
    ctx = jitnn.Context()
    x_np = random((1, 9, 7, 7), 75)
    w1, w2 = random((16, 9, 1, 1), 76), random((16, 16, 1, 1), 77)
    h = jitnn.relu(jitnn.conv2d(jitnn.conv2d(ctx.tensor(x_np), w1), w2))
    y = run(h)
    del h
    text = jitnn.explain(y)
    for step in ("conv2d + relu", "reshape") if op == "matmul" else ("conv2d + relu",):
        assert "kept" not in next(line for line in text.splitlines() if step in line)
    h_want = _relu(conv2d_reference(conv2d_reference(x_np, w1), w2))
    _close(y.numpy(), reference(h_want), atol=1e-3)


@pytest.mark.parametrize("conv_first", [True, False])
def test_residual_add_fuses_whichever_operand_the_conv_is(conv_first):
    ctx = jitnn.Context()
    x_np, w_np = random((1, 16, 8, 8), 70), random((16, 16, 1, 1), 71, 0.3)
    h = jitnn.relu(jitnn.conv2d(ctx.tensor(x_np), w_np))
    conv = jitnn.conv2d(h, w_np)
    y = jitnn.relu(jitnn.add(conv, h) if conv_first else jitnn.add(h, conv))
    del conv
    assert "conv2d + add + relu" in jitnn.explain(y)
    h_want = _relu(conv2d_reference(x_np, w_np))
    _close(y.numpy(), _relu(conv2d_reference(h_want, w_np) + h_want))


@pytest.mark.parametrize("pool", ["global_average_pool2d", "max_pool2d", "concat"])
def test_a_pooled_conv_result_nobody_holds_gets_a_reused_buffer(pool):
    """Pooling and concat read their inputs' Values, not the caller's
    handles: the conv result they read is an intermediate (a plan buffer),
    not kept."""
    ctx = jitnn.Context()
    x_np = random((1, 9, 7, 7), 75)
    w1, w2 = random((16, 9, 1, 1), 76), random((16, 16, 1, 1), 77)
    h = jitnn.relu(jitnn.conv2d(jitnn.conv2d(ctx.tensor(x_np), w1), w2))
    if pool == "concat":
        y = jitnn.relu(jitnn.concat([h, ctx.tensor(x_np)], 1))
    else:
        y = getattr(jitnn, pool)(h) if pool == "global_average_pool2d" else \
            jitnn.max_pool2d(h, (3, 3))
    del h
    text = jitnn.explain(y)
    assert "kept" not in next(line for line in text.splitlines() if "conv2d + relu" in line)
    h_want = _relu(conv2d_reference(conv2d_reference(x_np, w1), w2))
    if pool == "concat":
        want = _relu(np.concatenate([h_want, x_np], 1))
    else:
        want = h_want.mean(axis=(2, 3), keepdims=True) if pool == "global_average_pool2d" \
            else np.lib.stride_tricks.sliding_window_view(h_want, (3, 3), axis=(2, 3)).max(
                axis=(4, 5))
    _close(y.numpy(), want)


@pytest.mark.parametrize("kernel", [1, 3])
def test_a_residual_that_is_the_convs_own_input_is_not_overwritten(kernel):
    """conv2d(h) + h with h held by nobody: the add fuses, but the result
    must not go in place into h's buffer, which the conv is still reading."""
    ctx = jitnn.Context()
    x_np = random((2, 9, 7, 5), 72)
    w1, w2 = random((16, 9, 3, 3), 73, 0.3), random((16, 16, kernel, kernel), 74, 0.3)
    h = jitnn.relu(jitnn.conv2d(ctx.tensor(x_np), w1, padding=1))
    y = jitnn.conv2d(jitnn.add(jitnn.conv2d(h, w2, padding=kernel // 2), h), w2,
                     padding=kernel // 2)
    del h
    assert "conv2d + add" in jitnn.explain(y)
    h_want = _relu(conv2d_reference(x_np, w1, padding=1))
    mid = conv2d_reference(h_want, w2, padding=kernel // 2) + h_want
    _close(y.numpy(), conv2d_reference(mid, w2, padding=kernel // 2), atol=1e-3)


# --- operands computed in a blocked layout -----------------------------------------------

def _finishes(call, seconds=120):
    """``call()``'s result, failing (not hanging the suite) if it deadlocks."""
    result, errors = [], []

    def run():
        try:
            result.append(call())
        except BaseException as error:  # noqa: BLE001 - re-raised below
            errors.append(error)
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"did not finish in {seconds} s (deadlock?)"
    if errors:
        raise errors[0]
    return result[0]


@pytest.mark.parametrize("policy", ["blocked", "plain", "eager"])
@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d"])
def test_a_filter_or_bias_computed_in_a_blocked_layout(policy, op):
    """A conv whose filter is another op's blocked output: packing reads the
    filter back to plain first (once deadlocked on the filter's own lock)."""
    ctx = jitnn.Context(policy=policy)
    x_np, w_np = random((2, 9, 6, 5), 80), random((9, 9, 3, 3), 81, 0.3)
    eye = np.eye(9, dtype=np.float32).reshape(9, 9, 1, 1)
    x = ctx.tensor(x_np)
    computed = [jitnn.reorder(ctx.tensor(w_np), "nChw8c"),      # blocked in every policy
                jitnn.conv2d(ctx.tensor(w_np), eye)]            # blocked unless plain
    bias = jitnn.reshape(jitnn.global_average_pool2d(jitnn.conv2d(ctx.tensor(x_np[:1]), eye)),
                         (9,))
    for w in computed:
        if op == "conv2d":
            y = getattr(jitnn, op)(x, w, bias, padding=1)
            want = conv2d_reference(x_np, w_np, x_np[0].mean(axis=(1, 2)), padding=1)
        else:
            y = getattr(jitnn, op)(x, w)
            want = jitnn.conv_transpose2d(x, w_np).numpy()
        _close(_finishes(y.numpy), want, atol=1e-3)


@pytest.mark.parametrize("policy", ["blocked", "plain", "eager"])
def test_matmul_reads_a_conv_output_whatever_the_policy(policy):
    """matmul needs plain operands: a conv output that stays blocked is read
    back (one reorder), not refused."""
    ctx = jitnn.Context(policy=policy)
    x_np, w_np = random((2, 9, 5, 4), 82), random((9, 9, 1, 1), 83)
    b_np = random((4, 3), 84)
    c = jitnn.conv2d(ctx.tensor(x_np), w_np)
    conv = conv2d_reference(x_np, w_np)
    _close(jitnn.matmul(c, b_np).numpy(), conv @ b_np, atol=1e-3)
    left = random((3, 5), 85)
    _close(jitnn.matmul(left, c).numpy(), left @ conv, atol=1e-3)
    # with a graph as well
    builder = jitnn.GraphBuilder(ctx)
    xin = builder.input("x", x_np.shape)
    graph = builder.build({"y": builder.matmul(builder.conv2d(xin, builder.constant(w_np)),
                                               builder.constant(b_np))})
    out = np.empty((2, 9, 5, 3), np.float32)
    ctx.compute(graph, {"x": x_np}, {"y": out})
    _close(out, conv @ b_np, atol=1e-3)


# --- SiLU and hard-sigmoid gates in the anchor's epilogue --------------------------------

def _silu(x):
    return x / (1 + np.exp(-x))


@pytest.mark.parametrize("channels,out_channels,size,kernel", [
    (3, 7, 9, 3),            # first layer (plain input), a partial output block
    (9, 17, 11, 1),          # 1x1, partial blocks
    (16, 16, 13, 3),         # depthwise below
])
@pytest.mark.parametrize("gate_first", [False, True])
def test_conv_then_x_times_sigmoid_x_is_one_launch(channels, out_channels, size, kernel,
                                                   gate_first):
    ctx = jitnn.Context()
    x_np = random((2, channels, size, size), 90)
    groups = channels if channels == out_channels else 1
    w_np = random((out_channels, channels // groups, kernel, kernel), 91, 0.3)
    b_np = random((out_channels,), 92)
    y = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w_np), b_np, padding=kernel // 2,
                     groups=groups)
    s = jitnn.sigmoid(y)
    z = jitnn.mul(s, y) if gate_first else jitnn.mul(y, s)
    del y, s
    assert "conv2d + sigmoid + mul" in jitnn.explain(z)
    with assert_schedule(ctx, kernels=1, fused=2):
        got = z.numpy()
    want = conv2d_reference(x_np.astype(np.float64), w_np, b_np, padding=kernel // 2,
                            groups=groups)
    _close(got, _silu(want), atol=1e-4)


def test_x_times_sigmoid_x_stays_apart_when_x_is_read_elsewhere():
    ctx = jitnn.Context()
    x_np, w_np = random((1, 8, 7, 7), 93), random((8, 8, 3, 3), 94, 0.3)
    y = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w_np), padding=1)
    z = jitnn.add(jitnn.mul(y, jitnn.sigmoid(y)), y)     # y read a third time
    del y
    want = conv2d_reference(x_np.astype(np.float64), w_np, padding=1)
    _close(z.numpy(), _silu(want) + want, atol=1e-4)
    assert "sigmoid + mul" not in jitnn.explain(z).split("conv2d", 1)[1].splitlines()[0]
    # a sigmoid of one value times another is no SiLU
    y = jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w_np), padding=1)
    other = ctx.tensor(random((1, 8, 7, 7), 95))
    u = jitnn.mul(jitnn.sigmoid(y), other)
    del y
    _close(u.numpy(), 1 / (1 + np.exp(-want)) * np.asarray(other), atol=1e-4)


def test_conv_then_hard_sigmoid_is_one_launch():
    ctx = jitnn.Context()
    x_np, w_np = random((2, 7, 5, 5), 96), random((9, 7, 1, 1), 97, 0.5)
    z = jitnn.hard_sigmoid(jitnn.conv2d(ctx.tensor(x_np), ctx.tensor(w_np)), alpha=0.3, beta=0.4)
    assert "conv2d + hard_sigmoid" in jitnn.explain(z)
    with assert_schedule(ctx, kernels=1, fused=1):
        got = z.numpy()
    want = conv2d_reference(x_np.astype(np.float64), w_np)
    _close(got, np.clip(0.3 * want + 0.4, 0, 1), atol=1e-5)


def test_matmul_then_x_times_sigmoid_x_is_one_gemm():
    ctx = jitnn.Context()
    a_np, w_np = random((9, 33), 98), random((33, 17), 99, 0.3)
    y = jitnn.matmul(a_np, ctx.tensor(w_np))
    z = jitnn.mul(y, jitnn.sigmoid(y))
    del y
    assert "matmul + sigmoid + mul" in jitnn.explain(z)
    with assert_schedule(ctx, kernels=1, fused=2):
        got = z.numpy()
    _close(got, _silu(a_np.astype(np.float64) @ w_np), atol=1e-5)


@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_a_sum_merges_through_its_second_operand(op):
    """MobileOne's block: branch convs summed by their residual epilogues, then
    ``+ batch_norm(x)`` (the sum's other operand) and ReLU: the batch norm,
    the add and the ReLU are one element-wise pass (the add's operands
    swapped), and the numbers are the float64 reference's."""
    from jitnn.ops.normalization import batch_normalization_reference
    rng = np.random.default_rng(5)
    c = 17
    ws = [(rng.standard_normal((c, c, 1, 1)) * 0.3).astype(np.float32) for _ in range(3)]
    stats = [rng.standard_normal(c).astype(np.float32), (rng.random(c) + 0.5).astype(np.float32)]
    ctx = jitnn.Context(block=8)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, c, 9, 11))
    h = b.relu(b.conv2d(x, b.constant(ws[0])))
    branches = b.add(b.conv2d(h, b.constant(ws[1])), b.conv2d(h, b.constant(ws[2])))
    y = b.relu(getattr(b, op)(branches,
                              b.batch_normalization(h, *(b.constant(s) for s in stats))))
    graph = b.build({"y": y})
    xs = random((1, c, 9, 11), 3)
    outs = {"y": np.empty((1, c, 9, 11), np.float32)}
    ctx.compute(graph, {"x": xs}, outs)
    h64 = np.maximum(conv2d_reference(xs.astype(np.float64), ws[0]), 0)
    total = conv2d_reference(h64, ws[1]) + conv2d_reference(h64, ws[2])
    norm = batch_normalization_reference(h64, *stats)
    want = np.maximum({"add": total + norm, "sub": total - norm, "mul": total * norm}[op], 0)
    np.testing.assert_allclose(outs["y"], want, rtol=1e-4, atol=1e-4)
    labels = [c_.step.label for c_ in graph._programs[0].steps]
    assert f"batch_normalization + {op} + relu" in labels, labels


@pytest.mark.parametrize("seed", range(20))
def test_arena_slots_alive_at_once_never_overlap(seed):
    """passes.arena_offsets on random sizes and spans of steps: two slots
    whose spans meet (a step in both) get disjoint aligned byte ranges, the
    arena holds every slot and is at most their sum, and at least the bytes
    alive at the busiest step."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 40))
    sizes, spans = {}, {}
    for n in range(count):
        first = int(rng.integers(0, 30))
        sizes[f"b{n}"] = int(rng.integers(1, 5000)) * int(rng.choice([1, 4, 64]))
        spans[f"b{n}"] = [first, first + int(rng.integers(0, 8))]
    layout, arena = passes.arena_offsets(sizes, spans)
    assert set(layout) == set(sizes)
    for name, (offset, size) in layout.items():
        assert offset % passes.ARENA_ALIGNMENT == 0 and size == sizes[name]
        assert offset + size <= arena
    names = sorted(sizes)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            (oa, sa), (ob, sb) = layout[a], layout[b]
            meet = spans[a][0] <= spans[b][1] and spans[b][0] <= spans[a][1]
            assert not meet or oa + sa <= ob or ob + sb <= oa, (a, b)
    aligned = {n: -(-s // 64) * 64 for n, s in sizes.items()}
    busiest = max(sum(aligned[n] for n in names if spans[n][0] <= step <= spans[n][1])
                  for step in range(40))
    assert busiest <= arena <= sum(aligned.values())
