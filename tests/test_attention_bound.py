"""A replayed attention step runs as one bound kernel call
(jitnn/ops/attention.py ``bind_attention``): Q, K, V and a computed mask
read in place from the plan's buffers, a constant mask's kernel form held,
a computed per-row mask (a RowMask) converted again at every call. Checked
against float64 over new inputs at every compute, and for the same bits as
the op's own path (the first computes run through the op)."""

import math

import numpy as np
import pytest

import jitnn
from jitnn.ops._common import Binding
from jitnn.ops.attention import scaled_dot_product_attention_reference as reference
from tests.helpers import random, thread_counts

TOL = 2e-5


def _attention_bindings(graph) -> list:
    (program,) = graph._programs
    return [program.bindings.steps[i] for i, c in enumerate(program.steps)
            if c.step.kind == "op" and c.node.kind == "attention"]


def _run(ctx, graph, feeds: list[dict], out_shapes: dict, want) -> list[dict]:
    """Compute every feed in turn; check each against float64; return the outputs."""
    results = []
    for feed in feeds:
        outs = {name: np.full(shape, np.nan, np.float32) for name, shape in out_shapes.items()}
        ctx.compute(graph, feed, outs)
        for name, expected in want(feed).items():
            scale = max(1.0, float(np.abs(expected).max()))
            np.testing.assert_allclose(outs[name], expected, rtol=0, atol=TOL * scale)
        results.append(outs)
    return results


def _times(x, w, shape):
    return (x.astype(np.float64) @ w).reshape(shape)


CASES = [
    # (B, H, Hk, Sq, Sk, D, Dv, mask kind, causal)
    (1, 3, 3, 1, 1, 16, 16, None, False),
    (2, 5, 5, 17, 17, 24, 24, "key", False),
    (1, 4, 2, 49, 49, 32, 32, "bool", True),          # grouped-query, causal
    (2, 3, 3, 50, 50, 32, 16, "head", False),
    (3, 2, 1, 13, 31, 8, 8, "causal_values", True),
    (4, 3, 3, 49, 49, 32, 32, "row_const", False),
]


@pytest.mark.parametrize("threads", thread_counts())
@pytest.mark.parametrize("B, H, Hk, Sq, Sk, D, Dv, kind, causal", CASES)
def test_bound_attention_matches_float64_and_the_op(threads, B, H, Hk, Sq, Sk, D, Dv, kind,
                                                   causal):
    ctx = jitnn.Context(num_threads=threads)
    b = jitnn.GraphBuilder(ctx)
    cq, ck, cv = random((D, D), 1, 0.3), random((D, D), 2, 0.3), random((Dv, Dv), 3, 0.3)
    # computed operands (projections): the kernel reads the plan's buffers
    q, k, v = (b.reshape(b.gemm(b.input(name, (math.prod(shape[:3]), shape[3])),
                                b.constant(w)), shape)
               for name, shape, w in (("q", (B, H, Sq, D), cq), ("k", (B, Hk, Sk, D), ck),
                                      ("v", (B, Hk, Sk, Dv), cv)))
    shapes = {"key": (B, 1, 1, Sk), "head": (1, H, Sq, Sk), "causal_values": (Sq, Sk),
              "bool": (B, 1, Sq, Sk)}
    fixed = random((B, H, Sq, Sk), 9, scale=2.0)
    mask = None
    if kind == "row_const":
        mask = b.constant(fixed)
    elif kind == "bool":
        mask = b.input("m", shapes[kind], dtype="uint8")
    elif kind is not None:               # computed at every run from an input
        mask = b.add(b.input("m", shapes[kind]), b.constant(np.zeros(shapes[kind][-1:],
                                                                      np.float32)))
    y = b.scaled_dot_product_attention(q, k, v, mask, is_causal=causal, groups=H // Hk)
    graph = b.build({"y": y})

    def feed(seed):
        rng = np.random.default_rng(seed)
        f = {"q": random((B * H * Sq, D), rng), "k": random((B * Hk * Sk, D), rng),
             "v": random((B * Hk * Sk, Dv), rng)}
        if kind == "bool":
            f["m"] = (rng.random(shapes[kind]) > 0.3).astype(np.uint8)
        elif kind == "causal_values":
            f["m"] = np.where(np.tri(Sq, Sk, dtype=bool), 0.0, -1e9).astype(np.float32)
            f["m"] += random((Sq, Sk), rng, 0.5)
        elif kind is not None and kind != "row_const":
            f["m"] = random(shapes[kind], rng, 2.0)
        return f

    def want(f):
        m = fixed if kind == "row_const" else f.get("m")
        return {"y": reference(_times(f["q"], cq, (B, H, Sq, D)), _times(f["k"], ck, (B, Hk, Sk, D)),
                               _times(f["v"], cv, (B, Hk, Sk, Dv)), m,
                               is_causal=causal, groups=H // Hk)}

    feeds = [feed(s) for s in (1, 2, 3, 4, 1)]
    results = _run(ctx, graph, feeds, {"y": (B, H, Sq, Dv)}, want)
    (bound,) = _attention_bindings(graph)
    assert isinstance(bound, Binding)
    # run 0 went through the op, run 4 (the same inputs) through the bound call
    np.testing.assert_array_equal(results[4]["y"], results[0]["y"])


@pytest.mark.parametrize("threads", thread_counts())
def test_computed_row_mask_with_a_window_map_is_converted_at_every_call(threads):
    """Swin's shifted windows: a per-row mask computed at every run whose
    windows repeat (a RowMask with a (B,) map); new values at every run, and
    a run whose distinct windows differ (its layout changes: through the op)."""
    B, H, S, D = 8, 3, 49, 32
    ctx = jitnn.Context(num_threads=threads)
    b = jitnn.GraphBuilder(ctx)
    bias = random((1, H, S, S), 5)
    w = random((3 * H * D, 3 * H * D), 6, 0.1)
    qkv = b.reshape(b.gemm(b.input("x", (B * S, 3 * H * D)), b.constant(w)),
                    (B, S, 3 * H * D))
    mask = b.add(b.input("m", (B, 1, S, S)), b.constant(bias))
    views = tuple((i * H * D, H, D) for i in range(3))
    y = b.scaled_dot_product_attention(qkv, qkv, qkv, mask, layout="bshd", views=views)
    graph = b.build({"y": y})

    def feed(seed, windows):
        rng = np.random.default_rng(seed)
        distinct = random((windows, 1, S, S), rng, 3.0)
        return {"x": random((B * S, 3 * H * D), rng), "m": distinct[np.arange(B) % windows]}

    def want(f):
        x = (f["x"].astype(np.float64) @ w).reshape(B, S, 3 * H * D)
        return {"y": reference(x, x, x, f["m"] + bias.astype(np.float64), layout="bshd",
                               views=views)}

    feeds = [feed(1, 4), feed(2, 4), feed(3, 4), feed(4, 2), feed(5, 4), feed(1, 4)]
    results = _run(ctx, graph, feeds, {"y": (B, S, H, D)}, want)
    (bound,) = _attention_bindings(graph)
    assert type(bound).__name__ == "_MaskFedBinding"
    np.testing.assert_array_equal(results[5]["y"], results[0]["y"])


def test_graph_input_operands_with_a_computed_mask():
    """Q, K and V the caller's arrays (read in place, put in the call at every
    run) and a mask computed at every run: the mask's refill is the binding's
    own work, so such a step is not bound through the input-fed wrapper (which
    would skip it): it runs through its op, always on this run's mask."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    q = b.input("q", (2, 3, 17, 8))
    mask = b.add(b.input("m", (2, 1, 1, 17)), b.constant(np.zeros(17, np.float32)))
    graph = b.build({"y": b.scaled_dot_product_attention(q, q, q, mask)})

    def feed(seed):
        rng = np.random.default_rng(seed)
        return {"q": random((2, 3, 17, 8), rng), "m": random((2, 1, 1, 17), rng, 3.0)}

    _run(ctx, graph, [feed(s) for s in range(5)], {"y": (2, 3, 17, 8)},
         lambda f: {"y": reference(f["q"], f["q"], f["q"], f["m"])})
