"""gather, gather_elements, gather_nd, scatter_elements, scatter_nd: values
against the references on every data type, host indices (validated at the
call: negative ones from the end, boundaries, out of range refused) and
index tensors (int32, uint32, int64; read when the op runs, out-of-range
values clamped), run-time index inputs of a graph computed twice with other
ids, blocked inputs read back once, an embedding lookup, and errors."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.gather import gather_elements_reference, gather_nd_reference, gather_reference
from jitnn.ops.scatter import scatter_elements_reference, scatter_nd_reference
from tests.helpers import KINDS, assert_schedule, make, random, typed_data

INDEX_TYPES = [np.int32, np.uint32, np.int64]




def indices(shape, size, seed=0, *, wild=False) -> np.ndarray:
    """int64 indices into an axis of ``size``: in ``[-size, size)`` with both
    ends present, or (``wild``) far outside it too."""
    rng = np.random.default_rng(seed)
    span = 5 * size if wild else size
    values = rng.integers(-span, span, shape)
    flat = values.reshape(-1)
    flat[:4] = [-size, size - 1, 0, -1][:flat.size]
    if wild and flat.size > 5:
        flat[4:6] = [size, -size - 1]
    return values


# --- gather ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", jitnn.DTYPES, ids=str)
def test_gather_host_indices_every_dtype(dtype):
    x = typed_data((4, 5, 6), dtype, 1)
    t = jitnn.tensor(x)
    for axis in (0, 1, 2, -1):
        size = x.shape[axis]
        for shape in [(), (7,), (2, 3)]:
            index = indices(shape, size, axis % 3 + 3 * len(shape))
            got = jitnn.gather(t, index, axis)
            want = gather_reference(x, index, axis % 3)
            assert got.dtype == dtype and got.shape == want.shape
            np.testing.assert_array_equal(got.numpy(), want)
    # the host rule: negative from the end, not clamped
    np.testing.assert_array_equal(jitnn.gather(t, [-1, -4], 0).numpy(), x[[3, 0]])


@pytest.mark.parametrize("index_type", INDEX_TYPES, ids=lambda t: np.dtype(t).name)
def test_gather_index_tensors_clamp_out_of_range(index_type):
    x = random((3, 7, 2), 2)
    signed = np.dtype(index_type).kind == "i"
    raw = indices((4, 5), 7, 3, wild=True)
    ids = (raw if signed else np.abs(raw)).astype(index_type)
    got = jitnn.gather(x, jitnn.tensor(ids), axis=1)
    assert got.shape == (3, 4, 5, 2)
    np.testing.assert_array_equal(got.numpy(), gather_reference(x, ids, 1))
    # the rule spelled out: from the end if negative, then clamped into [0, 6]
    rule = np.clip(np.where(ids.astype(np.int64) < 0, ids.astype(np.int64) + 7, ids), 0, 6)
    np.testing.assert_array_equal(got.numpy(), x[:, rule])
    if signed:
        edge = jitnn.gather(x, jitnn.tensor(np.array([-8, -7, 7, 2**31 - 1], index_type)), 1)
        np.testing.assert_array_equal(edge.numpy(), x[:, [0, 0, 6, 6]])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 9, 17])
def test_gather_from_blocked_input(kind, channels):
    x = random((2, channels, 5, 3), channels)
    t = make(x, kind)
    t._materialize()
    picks = [0, channels - 1, -1, channels // 2]
    # blocked: read back once for the plain gathers, and the channel gather's
    # result (blocked, jitnn/ops/gather.py) read out
    with assert_schedule(t.context, reorders=0 if kind == "plain" else 2):
        got = [jitnn.gather(t, picks, 1),
               jitnn.gather(t, t.context.tensor(np.array([4, -1, 9])), 2),
               jitnn.gather_elements(t, np.zeros((2, channels, 2, 3), np.int32), 2)]
        values = [g.numpy() for g in got]
    np.testing.assert_array_equal(values[0], gather_reference(x, picks, 1))
    np.testing.assert_array_equal(values[1], gather_reference(x, [4, -1, 9], 2))
    np.testing.assert_array_equal(values[2], np.broadcast_to(x[:, :, :1], (2, channels, 2, 3)))


def _embedding_graph(ctx, table, seq):
    b = jitnn.GraphBuilder(ctx)
    ids = b.input("ids", (1, seq), dtype="int64")
    hidden = b.gather(b.constant(table), ids)            # (1, seq, dim)
    return b.build({"hidden": hidden, "ids32": b.cast(ids, "int32")})


@pytest.mark.parametrize("vocab,dim,seq", [(50, 8, 6), (30522, 768, 128)], ids=["small", "bert"])
def test_embedding_lookup_with_run_time_ids(vocab, dim, seq):
    """The ids are a graph input: each compute and dispatch reads its own."""
    ctx = jitnn.Context()
    table = np.random.default_rng(4).random((vocab, dim), np.float32)
    graph = _embedding_graph(ctx, table, seq)
    rng = np.random.default_rng(5)
    first = rng.integers(0, vocab, (1, seq))
    first[0, :3] = [0, vocab - 1, vocab // 2]
    second = rng.integers(-vocab, vocab, (1, seq))
    second[0, :4] = [-1, vocab, -vocab - 7, 10**12]                 # clamped
    for ids in (first, second, first):
        out = np.empty((1, seq, dim), np.float32)
        ids32 = np.empty((1, seq), np.int32)
        ctx.compute(graph, {"ids": ids}, {"hidden": out, "ids32": ids32})
        np.testing.assert_array_equal(out, gather_reference(table, ids))
        np.testing.assert_array_equal(ids32, ids.astype(np.int32))
        lazy = ctx.dispatch(graph, {"ids": ids})
        np.testing.assert_array_equal(lazy["hidden"].numpy(), gather_reference(table, ids))
    np.testing.assert_array_equal(out[0, 1], table[-1])      # second's ids: clamped rows
    eager = jitnn.gather(ctx.tensor(table), first)
    np.testing.assert_array_equal(eager.numpy(), table[first])


# --- gather_elements and gather_nd ---------------------------------------------------------------

@pytest.mark.parametrize("dtype", jitnn.DTYPES, ids=str)
def test_gather_elements_and_nd_every_dtype(dtype):
    x = typed_data((3, 4, 5), dtype, 6)
    t = jitnn.tensor(x)
    for axis in (0, 1, 2):
        shape = list(x.shape)
        shape[axis] = 6                          # indices may be longer than the axis
        index = indices(tuple(shape), x.shape[axis], axis)
        got = jitnn.gather_elements(t, index, axis=axis)
        want = gather_elements_reference(x, index, axis)
        assert got.dtype == dtype and got.shape == tuple(shape)
        np.testing.assert_array_equal(got.numpy(), want)
        wild = indices(tuple(shape), x.shape[axis], axis, wild=True).astype(np.int32)
        np.testing.assert_array_equal(
            jitnn.gather_elements(t, jitnn.tensor(wild), axis).numpy(),
            gather_elements_reference(x, wild, axis))
    for k, lead in [(1, (4,)), (2, (2, 3)), (3, (5,)), (0, (2,))]:
        index = np.stack([indices(lead, x.shape[j], j + 10) for j in range(k)], -1) \
            if k else np.zeros(lead + (0,), np.int64)
        got = jitnn.gather_nd(t, index)
        want = gather_nd_reference(x, index)
        assert got.dtype == dtype and got.shape == lead + x.shape[k:] == want.shape
        np.testing.assert_array_equal(got.numpy(), want)
    wild = np.array([[9, -9], [3, 4], [-1, -5]], np.int64)
    np.testing.assert_array_equal(jitnn.gather_nd(t, jitnn.tensor(wild)).numpy(),
                                  x[[2, 2, 2], [0, 3, 0]])


def test_gather_elements_webnn_example():
    x = np.array([[-66.06, -68.92, -77.02], [-26.16, 89.03, -45.90], [43.85, 48.82, 51.80]],
                 np.float32)
    ids = np.array([[1, 0], [2, 2], [1, 0]], np.uint32)
    got = jitnn.gather_elements(x, jitnn.tensor(ids), axis=1).numpy()
    np.testing.assert_array_equal(got, np.array([[-68.92, -66.06], [-45.90, -45.90],
                                                  [48.82, 43.85]], np.float32))


# --- scatter -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", jitnn.DTYPES, ids=str)
def test_scatter_every_dtype(dtype):
    x = typed_data((4, 5, 3), dtype, 7)
    t = jitnn.tensor(x)
    for axis in (0, 1, 2):
        shape = list(x.shape)
        shape[axis] = 2
        index = indices(tuple(shape), x.shape[axis], axis + 20)
        updates = typed_data(tuple(shape), dtype, axis)
        got = jitnn.scatter_elements(t, index, updates, axis=axis)
        assert got.dtype == dtype and got.shape == x.shape
        np.testing.assert_array_equal(got.numpy(),
                                      scatter_elements_reference(x, index, updates, axis))
        tensor_index = jitnn.tensor((index * 3).astype(np.int64))              # clamped
        np.testing.assert_array_equal(
            jitnn.scatter_elements(t, tensor_index, jitnn.tensor(updates), axis).numpy(),
            scatter_elements_reference(x, index * 3, updates, axis))
    for k, lead in [(1, (3,)), (2, (2, 2)), (3, (4,))]:
        index = np.stack([indices(lead, x.shape[j], j + 30) for j in range(k)], -1)
        updates = typed_data(lead + x.shape[k:], dtype, k)
        got = jitnn.scatter_nd(t, index, updates)
        np.testing.assert_array_equal(got.numpy(), scatter_nd_reference(x, index, updates))
        wild = jitnn.tensor((index * 4).astype(np.int32))
        np.testing.assert_array_equal(jitnn.scatter_nd(t, wild, updates).numpy(),
                                      scatter_nd_reference(x, index * 4, updates))
    np.testing.assert_array_equal(t.numpy(), x)           # x itself is unchanged


def test_scatter_repeated_index_lands_one_update():
    x = np.zeros(4, np.float32)
    got = jitnn.scatter_nd(x, np.array([[1], [1], [3]]), np.array([5.0, 6.0, 7.0])).numpy()
    assert got[1] in (5.0, 6.0) and got[3] == 7.0 and got[0] == got[2] == 0
    np.testing.assert_array_equal(got, scatter_nd_reference(x, [[1], [1], [3]], [5.0, 6.0, 7.0]))


@pytest.mark.parametrize("kind", KINDS)
def test_scatter_into_blocked_input(kind):
    x = random((2, 9, 3, 4), 8)
    t = make(x, kind)
    index = np.array([[[[2, 0, 1, 2]]] * 9] * 2)                # (2, 9, 1, 4) along axis 2
    updates = random(index.shape, 9)
    got = jitnn.scatter_elements(t, index, updates, axis=2)
    assert jitnn.layouts.block_of(got.layout) is None
    np.testing.assert_array_equal(got.numpy(), scatter_elements_reference(x, index, updates, 2))


def test_run_time_indices_of_every_op_in_a_graph():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 4))
    rows = b.input("rows", (2, 2), dtype="int32")          # (i, j) pairs: x[i, j] is (4,)
    cells = b.input("cells", (2, 3, 2), dtype="uint32")
    updates = b.input("updates", (2, 3, 4))
    graph = b.build({
        "nd": b.gather_nd(x, rows),
        "el": b.gather_elements(x, cells, axis=2),
        "snd": b.scatter_nd(x, rows, b.reshape(b.slice(updates, [0, 0, 0], [2, 1, 4]), (2, 4))),
        "sel": b.scatter_elements(x, cells, b.slice(updates, [0, 0, 0], [2, 3, 2]), axis=2)})
    for seed in (1, 2, 3):                  # the second and third replay the first's plan
        rng = np.random.default_rng(seed)
        feed = {"x": random((2, 3, 4), seed), "updates": random((2, 3, 4), seed + 9),
                "rows": rng.integers(-4, 4, (2, 2)).astype(np.int32),
                "cells": rng.integers(0, 6, (2, 3, 2)).astype(np.uint32)}
        want = {"nd": gather_nd_reference(feed["x"], feed["rows"]),
                "el": gather_elements_reference(feed["x"], feed["cells"], 2),
                "snd": scatter_nd_reference(feed["x"], feed["rows"], feed["updates"][:, 0]),
                "sel": scatter_elements_reference(feed["x"], feed["cells"],
                                                  feed["updates"][:, :, :2], 2)}
        outs = {name: np.empty(w.shape, np.float32) for name, w in want.items()}
        ctx.compute(graph, feed, outs)
        for name, w in want.items():
            np.testing.assert_array_equal(outs[name], w, err_msg=name)


# --- errors --------------------------------------------------------------------------------

def test_errors_are_raised_at_the_call():
    x = jitnn.tensor(random((2, 3, 4)))
    ids = jitnn.tensor(np.array([0, 1], np.int64))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"gather: indices must be in \[-size, size\) for axis 1 of x "
                             r"\(2, 3, 4\), got 3"):
        jitnn.gather(x, [0, 3], 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"gather: .* got -5"):
        jitnn.gather(x, [[-5]], 2)
    with pytest.raises(jitnn.JitnnTypeError, match=r"gather: indices must be integers .* float64"):
        jitnn.gather(x, [0.0, 1.0])
    with pytest.raises(jitnn.JitnnTypeError,
                       match=r"gather: indices must be an int32, uint32 or int64 tensor, got a "
                             r"float32 tensor"):
        jitnn.gather(x, jitnn.tensor([0.0, 1.0]))
    with pytest.raises(jitnn.JitnnTypeError, match=r"gather: indices must be an int32, .* int8"):
        jitnn.gather(x, jitnn.tensor(np.array([0], np.int8)))
    with pytest.raises(jitnn.JitnnValueError, match=r"gather: axis must be in \[-3, 2\]"):
        jitnn.gather(x, ids, 3)
    with pytest.raises(jitnn.JitnnValueError, match=r"gather: x must have rank >= 1"):
        jitnn.gather(np.float32(1), [0])
    with pytest.raises(jitnn.JitnnValueError, match=r"gather: axis 0 of x \(0, 3\) has size 0"):
        jitnn.gather(np.zeros((0, 3), np.float32), ids)
    assert jitnn.gather(np.zeros((0, 3), np.float32), np.zeros(0, np.int64)).shape == (0, 3)
    with pytest.raises(jitnn.JitnnValueError, match=r"gather: the tensors belong to different"):
        jitnn.gather(x, jitnn.Context().tensor(np.array([0])))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"gather_elements: indices \(2, 2, 4\) must have the rank of x "
                             r"\(2, 3, 4\) and its sizes on every axis but axis 2"):
        jitnn.gather_elements(x, np.zeros((2, 2, 4), np.int64), axis=2)
    with pytest.raises(jitnn.JitnnValueError, match=r"gather_elements: indices \(2, 3\)"):
        jitnn.gather_elements(x, np.zeros((2, 3), np.int64))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"gather_nd: indices \(1, 4\) pick 4 coordinates, more than x"):
        jitnn.gather_nd(x, np.zeros((1, 4), np.int64))
    with pytest.raises(jitnn.JitnnValueError, match=r"gather_nd: indices must have rank >= 1"):
        jitnn.gather_nd(x, np.int64(0))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"gather_nd: indices must be in \[-size, size\) for the first 2 axes "
                             r"of x \(2, 3, 4\), got 3"):
        jitnn.gather_nd(x, [[1, 3]])
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"scatter_elements: updates \(2, 3, 1\) must have the shape of "
                             r"indices \(2, 3, 2\)"):
        jitnn.scatter_elements(x, np.zeros((2, 3, 2), np.int64), random((2, 3, 1)), axis=2)
    with pytest.raises(jitnn.JitnnTypeError,
                       match=r"scatter_elements: updates must have the dtype of the first "
                             r"operand \(float32\), got a int32 tensor"):
        jitnn.scatter_elements(x, np.zeros((2, 3, 2), np.int64),
                               jitnn.tensor(np.zeros((2, 3, 2), np.int32)), axis=2)
    with pytest.raises(jitnn.JitnnTypeError, match=r"scatter_nd: updates must be int64 data"):
        jitnn.scatter_nd(np.zeros(3, np.int64), [[0]], [0.5])
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"scatter_nd: updates \(2, 4\) must have the shape "
                             r"indices.shape\[:-1\] \+ x.shape\[1:\] = \(2, 3, 4\)"):
        jitnn.scatter_nd(x, np.zeros((2, 1), np.int64), random((2, 4)))
    with pytest.raises(jitnn.JitnnValueError, match=r"scatter_nd: indices must be in"):
        jitnn.scatter_nd(x, [[2]], random((1, 3, 4)))
    b = jitnn.GraphBuilder()
    with pytest.raises(jitnn.JitnnTypeError, match=r"gather: indices must be an int32"):
        b.gather(b.input("x", (3, 4)), b.input("i", (2,)))
