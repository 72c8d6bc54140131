"""Replayed small plain steps run as bound calls (jitnn/executor.py
``Bindings``): a transformer's embedding lookup by run-time ids, its
position-id arithmetic (cumulative sum, integer products, casts) and its
padding mask (comparisons, reshapes, logical ops, where, a broadcast add)
write into the plan's buffers, and from the second compute on each is one
call on the same arrays. Every run gets new ids and masks (graph inputs the
steps read in place: ``InputFedBinding``); each run's answers match numpy's,
and every op step is bound after the first run."""

import numpy as np
import pytest

import jitnn
from jitnn.executor import InputFedBinding
from tests.helpers import random

BATCH, SEQ, DIM, VOCAB, HEADS = 2, 7, 9, 23, 3


def _op_bindings(graph) -> dict[str, list]:
    (program,) = graph._programs
    found: dict[str, list] = {}
    for captured, binding in zip(program.steps, program.bindings.steps):
        if captured.step.kind == "op":
            found.setdefault(captured.step.label, []).append(binding)
    return found


def _embedding_graph(ctx):
    """ids -> word + position + token-type embeddings; mask -> an additive
    (BATCH, HEADS, SEQ, SEQ) attention bias, as an exported BERT builds them."""
    table = random((VOCAB, DIM), 1)
    position = random((1, SEQ, DIM), 2)                # broadcast over the batch
    token_type = random((BATCH, SEQ, DIM), 3)          # same shape: read in place
    scores = random((BATCH, HEADS, SEQ, SEQ), 4)
    b = jitnn.GraphBuilder(ctx)
    ids = b.input("ids", (BATCH, SEQ), "int64")
    mask = b.input("mask", (BATCH, SEQ), "int64")
    words = b.gather(b.constant(table), ids)
    h = b.add(b.add(words, b.constant(position)), b.constant(token_type))
    keep = b.not_equal(mask, b.constant(np.array(0, np.int64)))
    rows = b.reshape(b.flatten(keep, 1), (BATCH, 1, SEQ, 1))
    columns = b.not_equal(b.reshape(keep, (BATCH, 1, 1, SEQ)),
                          b.constant(np.array(0, np.uint8)))
    pairs = b.logical_and(rows, columns)
    bias = b.where(pairs, b.constant(np.zeros(1, np.float32)),
                   b.constant(np.full(1, -1e4, np.float32)))
    graph = b.build({"h": b.relu(h), "scores": b.add(b.constant(scores), bias),
                     "pairs": pairs})
    return graph, (table, position, token_type, scores)


def _embedding_want(ids, mask, constants):
    table, position, token_type, scores = (c.astype(np.float64) for c in constants)
    index = np.where(ids < 0, ids + VOCAB, ids).clip(0, VOCAB - 1)
    h = np.maximum(table[index] + position + token_type, 0)
    keep = mask != 0
    pairs = keep[:, None, :, None] & keep[:, None, None, :]
    return h, scores + np.where(pairs, 0.0, -1e4), pairs.astype(np.uint8)


@pytest.mark.parametrize("threads", [1, 2])
def test_embeddings_and_padding_mask_are_bound_and_right_at_every_run(threads):
    ctx = jitnn.Context(num_threads=threads)
    graph, constants = _embedding_graph(ctx)
    rng = np.random.default_rng(5)
    same_ids = np.zeros((BATCH, SEQ), np.int64)        # one array, new contents
    launches = []
    for run in range(6):
        ids = rng.integers(-VOCAB, VOCAB, (BATCH, SEQ))   # negative: from the end
        if run == 2:
            ids[0, :3] = (VOCAB + 5, -VOCAB - 4, 10 ** 12)  # out of range: clamped
        if run in (3, 4):
            same_ids[...] = ids
            ids = same_ids
        mask = (rng.random((BATCH, SEQ)) < 0.7).astype(np.int64) * rng.integers(1, 4)
        mask[:, 0] = 1
        outputs = {"h": np.full((BATCH, SEQ, DIM), np.nan, np.float32),
                   "scores": np.full((BATCH, HEADS, SEQ, SEQ), np.nan, np.float32),
                   "pairs": np.full((BATCH, 1, SEQ, SEQ), 7, np.uint8)}
        before = ctx.stats.launches
        ctx.compute(graph, {"ids": ids, "mask": mask}, outputs)
        launches.append(ctx.stats.launches - before)
        h, scores, pairs = _embedding_want(ids, mask, constants)
        np.testing.assert_allclose(outputs["h"], h, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(outputs["scores"], scores, rtol=1e-6, atol=1e-3)
        np.testing.assert_array_equal(outputs["pairs"], pairs)
    # a bound call counts as the launch its op makes (ctx.stats as the normal path's)
    assert len(set(launches)) == 1, launches
    bindings = _op_bindings(graph)
    assert all(all(found) for found in bindings.values()), bindings
    # the steps that read a graph input take that run's array (none kept)
    (gather,) = bindings["gather"]
    assert isinstance(gather, InputFedBinding) and gather.args is None
    assert any(isinstance(b, InputFedBinding) for b in bindings["not_equal"])
    assert {"reshape", "flatten", "logical_and", "where"} <= set(bindings)


def test_position_ids_from_a_mask_are_bound_and_right_at_every_run():
    """RoBERTa's position ids, ``cumsum(mask) * mask + 1``, in int32, cast to
    int64 and looked up: integer steps written into the plan's buffers."""
    ctx = jitnn.Context(num_threads=1)
    table = random((SEQ + 2, DIM), 6)
    b = jitnn.GraphBuilder(ctx)
    mask = b.input("mask", (BATCH, SEQ), "int32")
    running = b.cumulative_sum(mask, 1)
    positions = b.add(b.mul(running, mask), b.constant(np.array([1], np.int32)))
    ids = b.cast(positions, "int64")
    y = b.gather(b.constant(table), ids)
    graph = b.build({"y": b.relu(y), "ids": ids})
    rng = np.random.default_rng(9)
    for _ in range(5):
        data = (rng.random((BATCH, SEQ)) < 0.6).astype(np.int32)
        outputs = {"y": np.empty((BATCH, SEQ, DIM), np.float32),
                   "ids": np.empty((BATCH, SEQ), np.int64)}
        ctx.compute(graph, {"mask": data}, outputs)
        want_ids = np.cumsum(data, 1) * data + 1
        np.testing.assert_array_equal(outputs["ids"], want_ids)
        np.testing.assert_allclose(outputs["y"], np.maximum(table[want_ids], 0), rtol=1e-6)
    bindings = _op_bindings(graph)
    assert all(all(found) for found in bindings.values()), bindings
    assert {"cumulative_sum", "cast", "gather"} <= set(bindings)


def test_a_broadcast_add_of_a_computed_operand_is_bound_and_right():
    """``(N, 1, H, W) + (1, C, 1, 1)``: neither operand has the output's shape
    (the first is broadcast), both computed at every run: one bound numpy call
    on the plan's buffers; a division by the same is bound too, IEEE's
    infinities without a warning."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x = b.relu(b.input("x", (2, 1, 5, 3)))
    c = b.relu(b.input("c", (1, 4, 1, 1)))
    total = b.add(x, c)
    ratio = b.div(b.constant(random((2, 4, 5, 3), 8)), c)
    graph = b.build({"y": b.relu(b.add(total, ratio))})
    for seed in range(4):
        xs, cs = random((2, 1, 5, 3), 10 + seed), random((1, 4, 1, 1), 20 + seed)
        if seed == 2:
            cs[0, 1, 0, 0] = 0.0                      # x / 0: +-inf after the relu
        y = np.empty((2, 4, 5, 3), np.float32)
        with np.errstate(all="raise"):
            ctx.compute(graph, {"x": xs, "c": cs}, {"y": y})
        x64, c64 = np.maximum(xs, 0).astype(np.float64), np.maximum(cs, 0).astype(np.float64)
        with np.errstate(divide="ignore"):
            want = np.maximum(x64 + c64 + random((2, 4, 5, 3), 8) / c64, 0)
        np.testing.assert_allclose(y, want, rtol=1e-5, atol=1e-6)
    bindings = _op_bindings(graph)
    assert all(bindings["add"]) and all(bindings["div"]), bindings


def test_slices_and_a_plain_pad_write_into_the_plans_buffers_and_are_bound():
    """A linear attention's pieces (EfficientViT): the values padded with a
    column of ones (a plain constant pad), a window across rows (copied into
    the plan's buffer), a window that is one range (a view) and products of
    them. Every step bound after the first run, right at every run."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    q = b.relu(b.input("q", (1, 3, 9, 7)))
    v = b.relu(b.input("v", (1, 3, 9, 7)))
    padded = b.pad(v, [0, 0, 0, 0], [0, 0, 0, 1], value=1.0)            # (1, 3, 9, 8)
    kv = b.matmul(b.transpose(q, (0, 1, 3, 2)), padded)                 # (1, 3, 7, 8)
    out = b.matmul(q, kv)                                               # (1, 3, 9, 8)
    numerator = b.slice(out, [0, 0, 0, 0], [1, 3, 9, 7])                # across rows: a copy
    denominator = b.slice(out, [0, 0, 0, 7], [1, 3, 9, 1])
    head = b.slice(out, [0, 1, 0, 0], [1, 1, 9, 8])                     # one range: a view
    graph = b.build({"y": b.div(numerator, b.add(denominator, b.constant(
        np.full(1, 1e-3, np.float32)))), "head": b.relu(head)})
    for seed in range(3):
        qs, vs = random((1, 3, 9, 7), 30 + seed), random((1, 3, 9, 7), 40 + seed)
        y, head_out = np.empty((1, 3, 9, 7), np.float32), np.empty((1, 1, 9, 8), np.float32)
        ctx.compute(graph, {"q": qs, "v": vs}, {"y": y, "head": head_out})
        q64, v64 = np.maximum(qs, 0).astype(np.float64), np.maximum(vs, 0).astype(np.float64)
        padded64 = np.concatenate([v64, np.ones((1, 3, 9, 1))], axis=3)
        o = q64 @ (q64.transpose(0, 1, 3, 2) @ padded64)
        np.testing.assert_allclose(y, o[..., :7] / (o[..., 7:] + 1e-3), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(head_out, np.maximum(o[:, 1:2], 0), rtol=1e-5, atol=1e-6)
    bindings = _op_bindings(graph)
    for label in ("pad", "matmul", "div", "relu"):    # the relu of the view too
        assert all(bindings[label]), (label, bindings)
    # the two copied windows are bound calls; the view is bound as a view (no call)
    assert all(bindings["slice"]), bindings
    assert sorted(type(binding).__name__ for binding in bindings["slice"]) == \
        ["Binding", "Binding", "ViewBinding"], bindings


def test_a_general_transpose_and_a_plain_concat_are_bound_and_right():
    """A permutation the tiled kernel does not take (numpy's strided copy)
    and a concat of plain tensors along a later axis write into the plan's
    buffers: bound after the first run, right at every run."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x = b.relu(b.input("x", (2, 3, 5, 7)))
    moved = b.transpose(x, (2, 0, 3, 1))                                # (5, 2, 7, 3)
    joined = b.concat([moved, b.relu(moved)], 3)                        # (5, 2, 7, 6)
    graph = b.build({"y": b.relu(b.add(joined, b.constant(random((7, 6), 5))))})
    for seed in range(3):
        xs = random((2, 3, 5, 7), 50 + seed)
        y = np.empty((5, 2, 7, 6), np.float32)
        ctx.compute(graph, {"x": xs}, {"y": y})
        m = np.maximum(xs, 0).astype(np.float64).transpose(2, 0, 3, 1)
        want = np.maximum(np.concatenate([m, m], axis=3) + random((7, 6), 5), 0)
        np.testing.assert_allclose(y, want, rtol=1e-6, atol=1e-6)
    bindings = _op_bindings(graph)
    for label in ("transpose", "concat", "add"):
        assert all(bindings[label]), (label, bindings)


def test_views_of_the_plans_buffers_are_bound_and_trusted():
    """A reshape of a product (a view of the plan's buffer) is bound as a
    view; from the run after a bound one, it and the product reading it are
    trusted (each its call alone: executor.Bindings.trust), and the answers
    stay right on new inputs."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 7, 9))
    w1, w2 = random((9, 12), 1, 0.3), random((3, 5), 2, 0.3)
    h = b.relu(b.matmul(x, b.constant(w1)))                      # (2, 7, 12)
    y = b.matmul(b.reshape(h, (2, 28, 3)), b.constant(w2))        # a view, then a product
    graph = b.build({"y": y})
    for seed in range(5):
        xs = random((2, 7, 9), 10 + seed)
        out = np.empty((2, 28, 5), np.float32)
        ctx.compute(graph, {"x": xs}, {"y": out})
        want = (np.maximum(xs.astype(np.float64) @ w1, 0).reshape(2, 28, 3)) @ w2
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    (program,) = graph._programs
    labels = [c.step.label for c in program.steps]
    reshape = labels.index("reshape")
    assert type(program.bindings.steps[reshape]).__name__ == "ViewBinding"
    assert program.bindings.trusted[reshape] and program.bindings.trusted[-1], labels


def test_a_plain_softmax_and_an_expand_write_into_the_plans_buffers_and_are_bound():
    """EdgeNeXt's cross-covariance attention: the normalizer expanded to the
    keys' shape, a softmax of the small (heads, d, d) scores, the product
    after it; each a bound call from the third run on, right at every run
    (a row of -inf gives NaN, without a warning)."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, 3, 5, 7))
    norm = b.input("n", (1, 3, 5, 1))
    scores = b.softmax(b.div(x, b.expand(norm, (1, 3, 5, 7))), axis=-1)
    y = b.matmul(scores, b.constant(random((7, 4), 3)))
    graph = b.build({"y": y, "s": scores})
    for seed in range(4):
        xs, ns = random((1, 3, 5, 7), 50 + seed), 1.5 + random((1, 3, 5, 1), 60 + seed) ** 2
        if seed == 3:
            xs[0, 1, 2] = -np.inf
        y_out, s_out = np.empty((1, 3, 5, 4), np.float32), np.empty((1, 3, 5, 7), np.float32)
        with np.errstate(all="raise"):
            ctx.compute(graph, {"x": xs, "n": ns}, {"y": y_out, "s": s_out})
        z = xs.astype(np.float64) / ns
        with np.errstate(invalid="ignore"):
            e = np.exp(z - z.max(axis=-1, keepdims=True))
            want = e / e.sum(axis=-1, keepdims=True)
        np.testing.assert_allclose(s_out, want, rtol=1e-5, atol=1e-6)
        assert np.isnan(s_out[0, 1, 2]).all() == (seed == 3)
    bindings = _op_bindings(graph)
    assert all(bindings["expand"]) and all(bindings["softmax"]), bindings
