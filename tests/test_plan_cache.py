"""Reused plans (jitnn/plan_cache.py): a flush whose pending DAG has the shape of
an earlier one gets that plan with its own values, and the answer never changes."""

import gc
import threading
import weakref

import numpy as np
import pytest

import jitnn
from jitnn import plan_cache
from jitnn.ops.conv2d import conv2d_reference


def _random(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


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
    return [ctx.tensor(_random((channels, channels, 3, 3), seed + i, 0.2)) for i in range(3)]


@pytest.mark.parametrize("channels", [3, 9, 16])
def test_a_repeated_chain_reuses_its_plan_with_new_inputs(channels):
    ctx = jitnn.Context()
    ws = _filters(ctx, channels)
    for call in range(4):
        x = _random((2, channels, 7, 9), call)
        ctx.reset_stats()
        h = _chain(ctx.tensor(x), ws)
        out = h.numpy()
        _close(out, _chain_reference(x, ws))
        stats = ctx.stats
        assert (stats.launches, stats.fused_ops, stats.flushes) == (3, 3, 1)
        assert stats.plans_reused == (call > 0)
    assert (ctx._plans.misses, ctx._plans.hits) == (1, 3)


def test_new_filters_of_the_same_shapes_are_used():
    ctx = jitnn.Context()
    x = _random((1, 16, 8, 8), 1)
    for seed in (10, 20, 30):
        ws = _filters(ctx, 16, seed)
        _close(_chain(ctx.tensor(x), ws).numpy(), _chain_reference(x, ws))
    assert ctx._plans.hits == 2


def test_the_reused_plan_says_so_in_explain():
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    _chain(ctx.tensor(_random((1, 8, 5, 5), 1)), ws).numpy()
    h = _chain(ctx.tensor(_random((1, 8, 5, 5), 2)), ws)
    before = jitnn.explain(h)
    assert "plan_cache: reused" in before and "not run yet" in before
    h.numpy()
    after = jitnn.explain(h)
    assert "plan_cache: reused" in after and "ran in" in after
    assert after.count("conv2d + relu") == 3


def test_a_held_intermediate_changes_the_plan():
    ctx = jitnn.Context()
    ws = _filters(ctx, 16)
    x = _random((1, 16, 6, 6), 1)
    _chain(ctx.tensor(x), ws).numpy()                   # planned: nothing held
    a = ctx.tensor(x)
    c = jitnn.relu(jitnn.conv2d(a, ws[0], padding=1))   # held this time
    h = jitnn.relu(jitnn.conv2d(jitnn.relu(jitnn.conv2d(c, ws[1], padding=1)), ws[2],
                                padding=1))
    ctx.reset_stats()
    _close(h.numpy(), _chain_reference(x, ws))
    assert ctx._plans.hits == 0 and ctx._plans.misses == 2
    assert ctx.stats.reorders == 2                      # in, and h out
    _close(c.numpy(), _chain_reference(x, ws[:1]))       # kept, and correct
    assert ctx.stats.reorders == 3


def test_an_input_that_already_has_its_blocked_copy_is_not_reordered_again():
    ctx = jitnn.Context()
    ws = _filters(ctx, 16)
    a = ctx.tensor(_random((1, 16, 6, 6), 1))
    want = _chain_reference(a.numpy(), ws)
    ctx.reset_stats()
    _close(_chain(a, ws).numpy(), want)
    assert ctx.stats.reorders == 2
    ctx.reset_stats()
    _close(_chain(a, ws).numpy(), want)                 # a's blocked copy is kept on a
    assert ctx.stats.reorders == 1
    b = ctx.tensor(_random((1, 16, 6, 6), 2))            # a new input needs its reorder
    ctx.reset_stats()
    _close(_chain(b, ws).numpy(), _chain_reference(b.numpy(), ws))
    assert ctx.stats.reorders == 2
    assert ctx._plans.hits == 1                          # b's flush reused a's first plan


@pytest.mark.parametrize("first, second", [
    (("leaky_relu", 0.1), ("leaky_relu", 0.3)),
    (("clamp", 0.0, 1.0), ("clamp", -0.0, 1.0)),
    (("relu",), ("sigmoid",)),
])
def test_activations_with_other_parameters_get_their_own_plans(first, second):
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    x = _random((1, 8, 5, 5), 1)
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
    assert ctx._plans.hits == 0 and ctx._plans.misses == 2


def test_a_dag_with_an_operand_closure_is_planned_every_time():
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    for call in range(2):
        x = _random((1, 8, 5, 5), call)
        a = ctx.tensor(x)
        h = jitnn.add(jitnn.conv2d(a, ws[0], padding=1), 0.5 + call)
        _close(h.numpy(), conv2d_reference(x, np.asarray(ws[0]), padding=1) + 0.5 + call)
    assert ctx._plans.hits == 0 and len(ctx._plans.plans) == 0


def test_a_plan_keeps_no_value_alive():
    ctx = jitnn.Context()
    ws = _filters(ctx, 8)
    a = ctx.tensor(_random((1, 8, 5, 5), 1))
    h = _chain(a, ws)
    refs = [weakref.ref(a._v), weakref.ref(h._v)]
    h.numpy()
    del a, h
    gc.collect()
    assert all(r() is None for r in refs)
    assert len(ctx._plans.plans) == 1


def test_the_cache_is_bounded():
    ctx = jitnn.Context()
    w = ctx.tensor(_random((8, 8, 3, 3), 1))
    for side in range(3, 3 + plan_cache.MAX_PLANS + 5):
        x = _random((1, 8, side, 4), side)
        h = jitnn.relu(jitnn.relu(jitnn.conv2d(ctx.tensor(x), w, padding=1)))
        _close(h.numpy(), np.maximum(conv2d_reference(x, np.asarray(w), padding=1), 0))
    assert len(ctx._plans.plans) == plan_cache.MAX_PLANS


def test_two_threads_repeat_one_chain_on_one_context():
    ctx = jitnn.Context()
    ws = _filters(ctx, 16)
    inputs = [_random((1, 16, 9, 7), seed) for seed in range(12)]
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
    assert ctx._plans.hits >= 10
