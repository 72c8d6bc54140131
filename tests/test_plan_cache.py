"""Reused plans (jitnn/plan_cache.py): a flush whose pending DAG has the shape of
an earlier one gets that plan with its own values, and the answer never changes."""

import gc
import threading
import weakref

import numpy as np
import pytest

import jitnn
from jitnn import plan_cache
from jitnn.bench.chain import jitnn_forward
from jitnn.ops.conv2d import conv2d_reference
from jitnn.ops.conv_transpose2d import conv_transpose2d_reference
from jitnn.ops.normalization import batch_normalization_reference
from tests.helpers import assert_schedule, random


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def _chain(x, ws, activation=jitnn.relu):
    h = x
    for w in ws:
        h = activation(jitnn.conv2d(h, w, padding=1))
    return h


def _chain_reference(x, ws, activation=lambda t: np.maximum(t, 0)):
    h = np.asarray(x, np.float64)
    for w in ws:
        h = activation(conv2d_reference(h, np.asarray(w), padding=1))
    return h


def _filters(ctx, channels, seed=10):
    return [ctx.tensor(random((channels, channels, 3, 3), seed + i, 0.2)) for i in range(3)]


@pytest.mark.parametrize("channels", [3, 9, 16])
def test_a_repeated_chain_reuses_its_plan_with_new_inputs(channels):
    ctx = jitnn.Context()
    ws = _filters(ctx, channels)
    for call in range(4):
        x = random((2, channels, 7, 9), call)
        ctx.reset_stats()
        h = _chain(ctx.tensor(x), ws)
        with assert_schedule(ctx, kernels=3, fused=3):
            out = h.numpy()
        _close(out, _chain_reference(x, ws))
        assert ctx.stats.flushes == 1 and ctx.stats.plans_reused == (call > 0)
    assert (ctx.plans.misses, ctx.plans.hits) == (1, 3)


def test_new_filters_of_the_same_shapes_are_used():
    ctx = jitnn.Context()
    x = random((1, 16, 8, 8), 1)
    for seed in (10, 20, 30):
        ws = _filters(ctx, 16, seed)
        _close(_chain(ctx.tensor(x), ws).numpy(), _chain_reference(x, ws))
    assert ctx.plans.hits == 2


def test_the_reused_plan_says_so_in_explain():
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    _chain(ctx.tensor(random((1, 8, 5, 5), 1)), ws).numpy()
    h = _chain(ctx.tensor(random((1, 8, 5, 5), 2)), ws)
    before = jitnn.explain(h)
    assert "plan_cache: reused" in before and "not run yet" in before
    h.numpy()
    after = jitnn.explain(h)
    assert "plan_cache: reused" in after and "ran in" in after
    assert after.count("conv2d + relu") == 3


def test_a_held_intermediate_changes_the_plan():
    ctx = jitnn.Context()
    ws = _filters(ctx, 16)
    x = random((1, 16, 6, 6), 1)
    _chain(ctx.tensor(x), ws).numpy()                   # planned: nothing held
    a = ctx.tensor(x)
    c = jitnn.relu(jitnn.conv2d(a, ws[0], padding=1))   # held this time
    h = jitnn.relu(jitnn.conv2d(jitnn.relu(jitnn.conv2d(c, ws[1], padding=1)), ws[2],
                                padding=1))
    with assert_schedule(ctx, reorders=2):              # in, and h out
        _close(h.numpy(), _chain_reference(x, ws))
    assert ctx.plans.hits == 0 and ctx.plans.misses == 2
    with assert_schedule(ctx, kernels=0, reorders=1):   # kept
        _close(c.numpy(), _chain_reference(x, ws[:1]))   # and correct


def test_an_input_that_already_has_its_blocked_copy_is_not_reordered_again():
    ctx = jitnn.Context()
    ws = _filters(ctx, 16)
    a = ctx.tensor(random((1, 16, 6, 6), 1))
    want = _chain_reference(a.numpy(), ws)
    with assert_schedule(ctx, reorders=2):
        _close(_chain(a, ws).numpy(), want)
    with assert_schedule(ctx, reorders=1):              # a's blocked copy is kept on a
        _close(_chain(a, ws).numpy(), want)
    b = ctx.tensor(random((1, 16, 6, 6), 2))            # a new input needs its reorder
    want_b = _chain_reference(b.numpy(), ws)
    with assert_schedule(ctx, reorders=2):
        _close(_chain(b, ws).numpy(), want_b)
    assert ctx.plans.hits == 1                          # b's flush reused a's first plan


@pytest.mark.parametrize("first, second", [
    (("leaky_relu", 0.1), ("leaky_relu", 0.3)),
    (("clamp", 0.0, 1.0), ("clamp", -0.0, 1.0)),
    (("relu",), ("sigmoid",)),
])
def test_activations_with_other_parameters_get_their_own_plans(first, second):
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    x = random((1, 8, 5, 5), 1)
    references = {
        "leaky_relu": lambda t, alpha: np.where(t >= 0, t, alpha * t),
        "clamp": lambda t, lo, hi: np.clip(t, lo, hi),
        "relu": lambda t: np.maximum(t, 0),
        "sigmoid": lambda t: 1 / (1 + np.exp(-t)),
    }
    for name, *params in (first, second):
        op = getattr(jitnn, name)
        got = _chain(ctx.tensor(x), ws, lambda t: op(t, *params)).numpy()
        _close(got, _chain_reference(x, ws, lambda t: references[name](t, *params)))
    assert ctx.plans.hits == 0 and ctx.plans.misses == 2


def _bn_stats(channels, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(channels).astype(np.float32) * 0.1,
            (rng.random(channels) + 0.5).astype(np.float32),
            (rng.random(channels) + 0.5).astype(np.float32),
            rng.standard_normal(channels).astype(np.float32) * 0.1)


def _bottleneck_reference(x, layers):
    h = np.asarray(x, np.float64)
    for i, (w, stats, pad) in enumerate(layers):
        h = batch_normalization_reference(conv2d_reference(h, np.asarray(w), padding=pad),
                                          *(np.asarray(s) for s in stats))
        if i < 2:
            h = np.maximum(h, 0)
    return np.maximum(h + x, 0)


@pytest.mark.parametrize("channels, mid", [(9, 5), (16, 8)])
def test_a_bottleneck_block_with_batch_norms_and_a_residual_reuses_its_plan(channels, mid):
    ctx = jitnn.Context()
    specs = [(mid, channels, 1, 0), (mid, mid, 3, 1), (channels, mid, 1, 0)]
    layers = [(ctx.tensor(random((o, c, k, k), 20 + i, 0.3)),
               [ctx.tensor(a) for a in _bn_stats(o, 30 + i)], pad)
              for i, (o, c, k, pad) in enumerate(specs)]
    for call in range(3):
        x = random((2, channels, 7, 9), call)
        ctx.reset_stats()
        # 3 convs, each with its batch norm folded; relu, relu, add + relu fused
        with assert_schedule(ctx, kernels=3, fused=7):
            got = jitnn_forward(jitnn, "bottleneck", ctx.tensor(x), layers).numpy()
        _close(got, _bottleneck_reference(x, layers))
        assert ctx.stats.flushes == 1 and ctx.stats.plans_reused == (call > 0)
    assert (ctx.plans.misses, ctx.plans.hits) == (1, 2)


def test_batch_norm_statistics_given_as_arrays_each_call_are_used():
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 1, 0.3))
    x = random((1, 8, 5, 5), 2)
    for seed in (3, 4, 5):
        stats = _bn_stats(8, seed)
        h = jitnn.relu(jitnn.batch_normalization(jitnn.conv2d(ctx.tensor(x), w, padding=1),
                                                 *stats, epsilon=1e-3))
        want = np.maximum(batch_normalization_reference(
            conv2d_reference(x, np.asarray(w), padding=1), *stats, epsilon=1e-3), 0)
        _close(h.numpy(), want)
    assert ctx.plans.hits == 2


def test_a_folded_batch_norm_is_computed_once_and_its_numbers_key_the_fold(monkeypatch):
    """A reused plan's conv finds its folded filter and bias through its memo
    while the statistics are the same tensors; new tensors with the same
    numbers (arrays passed at every call) reuse the packed filter; changing
    numbers give right answers and keep a bounded number of folds."""
    import importlib
    conv_op = importlib.import_module("jitnn.ops.conv2d")
    folds = []
    original = conv_op.batch_norm_scale_shift
    monkeypatch.setattr(conv_op, "batch_norm_scale_shift",
                        lambda bn: folds.append(1) or original(bn))
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 1, 0.3))
    x = random((1, 8, 5, 5), 2)
    conv = conv2d_reference(x, np.asarray(w), padding=1)
    held = [ctx.tensor(a) for a in _bn_stats(8, 3)]
    for call in range(3):
        got = jitnn.batch_normalization(jitnn.conv2d(ctx.tensor(x), w, padding=1), *held)
        _close(got.numpy(), batch_normalization_reference(conv, *_bn_stats(8, 3)))
    assert len(folds) == 1 and ctx.stats.filter_packs == 1
    for call in range(3):                     # the same numbers, new tensors every call
        got = jitnn.batch_normalization(jitnn.conv2d(ctx.tensor(x), w, padding=1),
                                        *_bn_stats(8, 3))
        _close(got.numpy(), batch_normalization_reference(conv, *_bn_stats(8, 3)))
    assert len(folds) == 4 and ctx.stats.filter_packs == 1
    for seed in range(4, 4 + 2 * conv_op.MAX_BN_FOLDS):   # other numbers every call
        stats = _bn_stats(8, seed)
        got = jitnn.batch_normalization(jitnn.conv2d(ctx.tensor(x), w, padding=1), *stats)
        _close(got.numpy(), batch_normalization_reference(conv, *stats))
        kinds = [k[0] for k in w._v._derived]
        assert kinds.count("conv2d_filter_bn") <= conv_op.MAX_BN_FOLDS
        assert kinds.count("conv2d_bn_bias") <= conv_op.MAX_BN_FOLDS
    assert ctx.stats.filter_packs == 1 + 2 * conv_op.MAX_BN_FOLDS


def test_batch_norms_with_other_options_get_their_own_plans():
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 1, 0.3))
    x = random((1, 8, 5, 5), 2)
    mean, variance, scale, bias = _bn_stats(8, 3)
    conv = conv2d_reference(x, np.asarray(w), padding=1)
    cases = [({"epsilon": 1e-3}, (mean, variance, scale, bias)),
             ({"epsilon": 1e-2}, (mean, variance, scale, bias)),
             ({"epsilon": 1e-2}, (mean, variance, None, bias)),
             ({"epsilon": 1e-2}, (mean, variance, scale, None)),
             ({"epsilon": 1e-2, "activation": "relu"}, (mean, variance, scale, bias))]
    for options, stats in cases:
        h = jitnn.batch_normalization(jitnn.conv2d(ctx.tensor(x), w, padding=1), *stats,
                                      **options)
        _close(h.numpy(), batch_normalization_reference(conv, *stats, **options))
    assert ctx.plans.hits == 0 and ctx.plans.misses == len(cases)


@pytest.mark.parametrize("number, other", [(0.5, 1.5), (0.0, -0.0)])
def test_a_number_operand_is_part_of_the_plan(number, other):
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 1, 0.3))
    conv = np.asarray(jitnn.conv2d(ctx.tensor(random((1, 8, 5, 5), 2)), w, padding=1))
    for value in (number, number, other):
        x = random((1, 8, 5, 5), 2)
        # (a division: a product by a number would fold into the conv's filter)
        got = jitnn.div(1.0, jitnn.div(jitnn.conv2d(ctx.tensor(x), w, padding=1), value))
        with np.errstate(divide="ignore", invalid="ignore"):
            want = 1.0 / (conv.astype(np.float64) / value)
        np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(want))
        _close(got.numpy(), want)
    assert (ctx.plans.misses, ctx.plans.hits) == (2, 1)


# every way a blocked binary op takes its other operand (ops/eltwise.py), as
# (shape of the operand, made by): a new operand of the same shape each call
_OPERANDS = {
    "number": None,
    "size-1 tensor": (1, 1, 1, 1),
    "same-shape tensor": (2, 9, 5, 7),
    "per-channel vector": (9, 1, 1),
    "per-(n, c) block": (2, 9, 1, 1),
    "rows of a blocked pool": "pool",
    "broadcast plane": (1, 1, 5, 7),
}


@pytest.mark.parametrize("kind", list(_OPERANDS))
def test_each_kind_of_binary_operand_is_resolved_for_the_reusing_flush(kind):
    ctx = jitnn.Context()
    w = ctx.tensor(random((9, 9, 3, 3), 1, 0.3))
    for call in range(3):
        x = random((2, 9, 5, 7), 10 + call)
        a = ctx.tensor(x)
        conv = conv2d_reference(x, np.asarray(w), padding=1)
        spec = _OPERANDS[kind]
        if spec is None:
            operand = want_operand = 0.25 * (call % 2)    # 0, 0.25, 0: the first plan again
        elif spec == "pool":
            want_operand = x.mean(axis=(2, 3), keepdims=True)
            operand = jitnn.global_average_pool2d(a)
        else:
            operand = want_operand = random(spec, 20 + call)
        h = jitnn.relu(jitnn.sub(jitnn.mul(jitnn.conv2d(a, w, padding=1), operand), x))
        _close(h.numpy(), np.maximum(conv * want_operand - x, 0))
    # a number is part of the plan (0, then 0.25, then 0 again: one hit)
    assert ctx.plans.hits == (1 if spec is None else 2)


def test_a_merged_plain_chain_reuses_its_plan():
    ctx = jitnn.Context()
    for call in range(3):
        x, y = random((6, 10), call), random((6, 10), 10 + call)
        h = jitnn.relu(jitnn.add(jitnn.mul(jitnn.sigmoid(ctx.tensor(x)), ctx.tensor(y)), 0.5))
        ctx.reset_stats()
        with assert_schedule(ctx, kernels=1):
            _close(h.numpy(), np.maximum(1 / (1 + np.exp(-x)) * y + 0.5, 0))
        assert ctx.stats.plans_reused == (call > 0)


def test_opaque_and_broadcast_nodes_reuse_their_plans():
    ctx = jitnn.Context()
    for call in range(3):
        x, y = random((2, 1, 5, 5), call), random((1, 3, 1, 1), 5 + call)
        # neither operand has the output's shape (broadcast first, plain), then
        # a pooling (an opaque node: a closure of its own flush)
        h = jitnn.max_pool2d(jitnn.relu(jitnn.add(ctx.tensor(x), ctx.tensor(y))), 2, strides=2)
        want = np.maximum(x + y, 0)[:, :, :4, :4].reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5))
        _close(h.numpy(), want)
    assert (ctx.plans.misses, ctx.plans.hits) == (1, 2)


def test_a_matmul_with_its_fused_bias_and_activation_reuses_its_plan():
    ctx = jitnn.Context()
    w1, bias, w2 = random((12, 7), 1), random((7,), 2), random((7, 3), 3)
    for call in range(3):
        a = random((5, 12), call)
        h = jitnn.matmul(jitnn.relu(jitnn.add(jitnn.matmul(ctx.tensor(a), w1), bias)), w2)
        ctx.reset_stats()
        with assert_schedule(ctx, kernels=2, fused=2):
            _close(h.numpy(), np.maximum(a @ w1 + bias, 0) @ w2)
        assert ctx.stats.plans_reused == (call > 0)


def test_gemm_options_get_their_own_plans():
    ctx = jitnn.Context()
    a, b, c = random((4, 6), 1), random((6, 5), 2), random((4, 5), 3)
    for alpha, beta in ((1.0, 1.0), (2.0, 1.0), (2.0, 0.5), (2.0, 0.5)):
        h = jitnn.relu(jitnn.gemm(ctx.tensor(a), b, c, alpha=alpha, beta=beta))
        _close(h.numpy(), np.maximum(alpha * a @ b + beta * c, 0))
    assert (ctx.plans.misses, ctx.plans.hits) == (3, 1)


def test_a_transposed_convolution_in_a_chain_reuses_its_plan():
    ctx = jitnn.Context()
    w, up = ctx.tensor(random((9, 9, 3, 3), 1, 0.3)), random((9, 5, 2, 2), 2, 0.3)
    for call in range(3):
        x = random((2, 9, 5, 7), call)
        h = jitnn.relu(jitnn.conv_transpose2d(jitnn.conv2d(ctx.tensor(x), w, padding=1), up,
                                              strides=2))
        want = np.maximum(conv_transpose2d_reference(
            conv2d_reference(x, np.asarray(w), padding=1), up, strides=2), 0)
        _close(h.numpy(), want)
    assert (ctx.plans.misses, ctx.plans.hits) == (1, 2)


def test_a_dag_with_a_node_without_sig_is_planned_every_time():
    ctx = jitnn.Context()
    for call in range(2):
        x = random((1, 8, 5, 5), call)
        h = jitnn.relu(ctx.tensor(x))
        h._v._node.sig = None           # an op that does not describe its node
        _close(jitnn.relu(h).numpy(), np.maximum(x, 0))
    assert ctx.plans.hits == 0 and len(ctx.plans.plans) == 0


def test_a_plan_keeps_no_value_alive():
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    a = ctx.tensor(random((1, 8, 5, 5), 1))
    h = _chain(a, ws)
    refs = [weakref.ref(a._v), weakref.ref(h._v)]
    h.numpy()
    del a, h
    gc.collect()
    assert all(r() is None for r in refs)
    assert len(ctx.plans.plans) == 1


def test_the_cache_is_bounded():
    ctx = jitnn.Context()
    w = ctx.tensor(random((8, 8, 3, 3), 1))
    for side in range(3, 3 + plan_cache.MAX_PLANS + 5):
        x = random((1, 8, side, 4), side)
        h = jitnn.relu(jitnn.relu(jitnn.conv2d(ctx.tensor(x), w, padding=1)))
        _close(h.numpy(), np.maximum(conv2d_reference(x, np.asarray(w), padding=1), 0))
    assert len(ctx.plans.plans) == plan_cache.MAX_PLANS


def test_two_threads_repeat_one_chain_on_one_context():
    ctx = jitnn.Context()
    ws = _filters(ctx, 16)
    inputs = [random((1, 16, 9, 7), seed) for seed in range(12)]
    wants = [_chain_reference(x, ws) for x in inputs]
    errors = []

    def work(indices):
        try:
            for i in indices:
                _close(_chain(ctx.tensor(inputs[i]), ws).numpy(), wants[i])
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work, args=(range(k, 12, 2),)) for k in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert ctx.plans.hits >= 10


@pytest.mark.parametrize("policy", ["eager", "plain", "blocked"])
def test_a_single_op_conv_finds_its_launch_again(monkeypatch, policy):
    """Each eager call makes a new node; its signature keeps the memo of the
    last single-op run, so the same conv on the same filter plans its launch
    once. Another filter of the same shape, bias, or thread count plans
    again (the memo is checked), and every result is right."""
    import importlib
    conv_op = importlib.import_module("jitnn.ops.conv2d")
    plans = []
    original = conv_op._plan_run
    monkeypatch.setattr(conv_op, "_plan_run", lambda *a: plans.append(1) or original(*a))
    ctx = jitnn.Context(policy=policy)
    w1, w2 = (ctx.tensor(random((9, 5, 3, 3), seed, 0.3)) for seed in (1, 2))
    b1, b2 = (ctx.tensor(random((9,), seed)) for seed in (3, 4))
    for call in range(3):
        x = random((2, 5, 6, 7), 10 + call)
        got = jitnn.conv2d(ctx.tensor(x), w1, b1, padding=1, activation="relu").numpy()
        _close(got, np.maximum(conv2d_reference(x, np.asarray(w1), np.asarray(b1), padding=1),
                               0))
    assert len(plans) == 1
    for call, (w, b) in enumerate([(w2, b1), (w2, b1), (w1, b2), (w2, b2), (w1, b1)]):
        x = random((2, 5, 6, 7), 20 + call)
        got = jitnn.conv2d(ctx.tensor(x), w, b, padding=1, activation="relu").numpy()
        _close(got, np.maximum(conv2d_reference(x, np.asarray(w), np.asarray(b), padding=1),
                               0))
    assert len(plans) == 5                   # (w2, b1) the second time found it
