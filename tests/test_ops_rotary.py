"""rotary_embedding (jitnn/ops/rotary.py, kernels/rotary.py) against its
float64 reference: table broadcasts the kernel indexes as repeating rows and
those it expands, odd row counts, batches, 1 and 2 threads, bad calls; and
the ONNX pattern (jitnn/onnx/_rotary_patterns.py), written with onnx.helper
as ``torch.onnx.export`` writes Llama's ``apply_rotary_pos_emb``, against a
float64 run of the same model: fused into one op, or, when its slices or
reads are not the pattern's, converted node by node with the same numbers."""

from __future__ import annotations

import numpy as np
import pytest

import jitnn
from jitnn.errors import JitnnValueError
from jitnn.kernels import rotary as rotary_kernels
from jitnn.ops.rotary import rotary_embedding_reference, table_rows

onnx = pytest.importorskip("onnx", reason="the ONNX cases need onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn.onnx  # noqa: E402


def _tables(rng, shape):
    angle = rng.uniform(-3, 3, shape)
    return np.cos(angle).astype(np.float32), np.sin(angle).astype(np.float32)


@pytest.mark.parametrize("x_shape, table_shape, rows", [
    ((2, 8, 16, 64), (1, 1, 16, 64), 16),     # Llama's query: (B, H, S, D), an (S, D) table
    ((1, 3, 7, 6), (7, 6), 7),                # odd rows, a table of lower rank
    ((3, 5, 10), (3, 5, 10), 15),             # a table per row
    ((2, 4, 5, 2), (1, 4, 1, 2), None),       # a broadcast in the middle: expanded
    ((2, 3, 5, 6), (2, 1, 5, 6), None),       # per batch, shared by heads: expanded
    ((5, 4), (1, 4), 1),                      # one row for every row
    ((0, 3, 4), (3, 4), 3),                   # empty
])
@pytest.mark.parametrize("threads", [1, 2])
def test_rotary_embedding_matches_the_reference(x_shape, table_shape, rows, threads):
    rng = np.random.default_rng(len(x_shape) * 7 + threads)
    x = rng.standard_normal(x_shape).astype(np.float32)
    cos, sin = _tables(rng, table_shape)
    assert table_rows(x_shape, table_shape) == rows
    ctx = jitnn.Context(num_threads=threads)
    got = ctx.tensor(x)
    got = jitnn.rotary_embedding(got, ctx.tensor(cos), ctx.tensor(sin)).numpy()
    want = rotary_embedding_reference(x, cos, sin)
    assert got.shape == want.shape and got.dtype == np.float32
    if want.size:
        assert np.abs(got - want).max() <= 1e-6 * max(1.0, np.abs(want).max())


def test_rotary_embedding_is_the_exported_chain():
    """The same float32 products and sums as the seven ops (the Neg is exact)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 9, 8)).astype(np.float32)
    cos, sin = _tables(rng, (1, 1, 9, 8))
    rotated = np.concatenate([-x[..., 4:], x[..., :4]], axis=-1)
    chain = x * cos + rotated * sin
    got = jitnn.rotary_embedding(x, cos, sin).numpy()
    assert np.abs(got - chain).max() <= 2e-7 * np.abs(chain).max()


@pytest.mark.parametrize("x_shape, table_shape", [
    ((2, 16, 8, 64), (1, 1, 16, 64)),     # Llama: (B, S, H, D) in, (B, H, S, D) out
    ((1, 7, 3, 6), (7, 6)),
    ((3, 5, 2, 4), (3, 2, 5, 4)),         # a table per output row
    ((2, 5, 3, 4), (1, 3, 1, 4)),         # per head: expanded
])
@pytest.mark.parametrize("threads", [1, 2])
def test_rotary_embedding_reads_the_head_split_in_place(x_shape, table_shape, threads):
    rng = np.random.default_rng(sum(x_shape) + threads)
    x = rng.standard_normal(x_shape).astype(np.float32)
    cos, sin = _tables(rng, table_shape)
    ctx = jitnn.Context(num_threads=threads)
    got = jitnn.rotary_embedding(ctx.tensor(x), ctx.tensor(cos), ctx.tensor(sin),
                                 layout="bshd").numpy()
    want = rotary_embedding_reference(x, cos, sin, layout="bshd")
    assert got.shape == (x_shape[0], x_shape[2], x_shape[1], x_shape[3]) == want.shape
    assert np.abs(got - want).max() <= 1e-6 * np.abs(want).max()
    # the same as the embedding of the transposed copy
    plain = jitnn.rotary_embedding(np.ascontiguousarray(x.transpose(0, 2, 1, 3)), cos,
                                   sin).numpy()
    assert np.array_equal(got, plain)


def test_rotary_embedding_layouts_refused():
    x = np.zeros((2, 3, 4, 6), np.float32)
    table = np.zeros((4, 6), np.float32)
    for layout, data in (("bsdh", x), ("bshd", x[0])):
        with pytest.raises(JitnnValueError, match="layout"):
            jitnn.rotary_embedding(data, table, table, layout=layout)
    with pytest.raises(ValueError, match="rows"):
        rotary_kernels.rotary_rows(np.zeros((10, 4), np.float32), np.zeros((1, 4), np.float32),
                                   np.zeros((1, 4), np.float32), np.zeros((10, 4), np.float32),
                                   heads=3, seq=2)


@pytest.mark.parametrize("x_shape, table_shape", [
    ((2, 5), (2, 5)),           # odd last axis
    ((2, 4), (2, 6)),           # the tables' last axis is not x's
    ((2, 4), (3, 4)),           # does not broadcast
    ((4,), (2, 4)),             # tables of higher rank
])
def test_rotary_embedding_refuses_bad_shapes(x_shape, table_shape):
    x = np.zeros(x_shape, np.float32)
    table = np.zeros(table_shape, np.float32)
    with pytest.raises(JitnnValueError, match="rotary_embedding"):
        jitnn.rotary_embedding(x, table, table)
    with pytest.raises(JitnnValueError, match="rotary_embedding"):
        jitnn.rotary_embedding(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32),
                               np.zeros((1, 4), np.float32))


def test_the_kernel_refuses_rows_that_do_not_repeat_and_overlap():
    x = np.zeros((6, 4), np.float32)
    with pytest.raises(ValueError, match="multiple"):
        rotary_kernels.rotary_rows(x, np.zeros((4, 4), np.float32),
                                   np.zeros((4, 4), np.float32), np.zeros_like(x))
    with pytest.raises(ValueError, match="overlap"):
        rotary_kernels.rotary_rows(x, np.zeros((3, 4), np.float32),
                                   np.zeros((3, 4), np.float32), x)


# --- the ONNX pattern --------------------------------------------------------------------

def _rotary_model(b: int, h: int, s: int, d: int, *, swap: bool = False, negative: bool = False,
                  half: int | None = None, read_twice: bool = False, tables_input=False,
                  heads_out: bool = False):
    """``x (B, S, H*D)`` -> heads ``(B, H, S, D)`` -> ``x * cos + rotate_half(x) * sin``
    (Llama's exported form; ``swap``: every Mul and the Add with their inputs
    the other way round; ``negative``: the bounds as -D/2 and -1-based ends;
    ``half``: slices at another point; ``read_twice``: the Neg also an output)."""
    rng = np.random.default_rng(b * 100 + s)
    inits, nodes, count = [], [], [0]

    def const(array, dtype=np.float32):
        count[0] += 1
        name = f"c{count[0]}"
        inits.append(numpy_helper.from_array(np.asarray(array, dtype), name))
        return name

    def node(op, *inputs, **attrs):
        count[0] += 1
        name = f"{op.lower()}{count[0]}"
        nodes.append(helper.make_node(op, list(inputs), [name], name=name, **attrs))
        return name

    half = d // 2 if half is None else half
    cos, sin = _tables(rng, (1, 1, s, d))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, h * d])]
    feed = {"x": rng.standard_normal((b, s, h * d)).astype(np.float32)}
    if tables_input:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 1, s, d])
                   for n in ("cos", "sin")]
        feed.update(cos=cos, sin=sin)
        cos_name, sin_name = "cos", "sin"
    else:
        cos_name, sin_name = const(cos), const(sin)
    heads = node("Transpose", node("Reshape", "x", const([b, s, h, d], np.int64)),
                 perm=[0, 2, 1, 3])
    axis = const([-1] if negative else [3], np.int64)
    one = const([1], np.int64)
    low = node("Slice", heads, const([0], np.int64),
               const([half - d] if negative else [half], np.int64), axis, one)
    high = node("Slice", heads, const([half - d] if negative else [half], np.int64),
                const([np.iinfo(np.int64).max], np.int64), axis, one)
    neg = node("Neg", high)
    rotated = node("Concat", neg, low, axis=-1)

    def mul(a, c):
        return node("Mul", c, a) if swap else node("Mul", a, c)
    first, second = mul(heads, cos_name), mul(rotated, sin_name)
    out = node("Add", second, first) if swap else node("Add", first, second)
    outputs = [out] + ([neg] if read_twice else []) + ([heads] if heads_out else [])
    graph = helper.make_graph(nodes, "rotary", inputs, [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # the float64 reference of what the nodes compute
    x = feed["x"].astype(np.float64).reshape(b, s, h, d).transpose(0, 2, 1, 3)
    negated = -x[..., half:]
    rotated = np.concatenate([negated, x[..., :half]], axis=-1)
    want = [x * cos + rotated * sin] + ([negated] if read_twice else []) + \
        ([x] if heads_out else [])
    return model, feed, dict(zip(outputs, want))


def _run(model, feed, want, threads=1):
    ctx = jitnn.Context(num_threads=threads)
    converted = jitnn.onnx.prepare(model, ctx, input_shapes={k: v.shape for k, v in feed.items()})
    pending = converted.dispatch(feed)
    plan = jitnn.explain(pending[next(iter(want))])
    got = converted.run(feed)
    for name in want:
        err = np.abs(got[name] - want[name]).max() / np.abs(want[name]).max()
        assert err < 1e-6, f"{name}: {err:.2e}"
    return plan


@pytest.mark.parametrize("b, h, s, d, options", [
    (1, 4, 16, 8, {}),
    (2, 3, 7, 6, {"swap": True}),
    (2, 2, 5, 10, {"negative": True}),
    (1, 2, 9, 4, {"tables_input": True}),
])
@pytest.mark.parametrize("threads", [1, 2])
def test_exported_rotary_embedding_is_one_op(b, h, s, d, options, threads):
    model, feed, want = _rotary_model(b, h, s, d, **options)
    plan = _run(model, feed, want, threads)
    assert "rotary_embedding" in plan, plan
    # the head split's transpose is read in place too
    for op in ("neg", "concat", "slice", " mul ", " add ", "transpose"):
        assert op not in plan, plan


@pytest.mark.parametrize("options", [{"half": 3}, {"read_twice": True}])
def test_other_slices_or_a_shared_value_convert_node_by_node(options):
    model, feed, want = _rotary_model(1, 2, 6, 8, **options)
    plan = _run(model, feed, want)
    assert "rotary_embedding" not in plan, plan


def test_a_transpose_read_elsewhere_is_kept():
    """The heads are a graph output too: the embedding is one op, the transpose stays."""
    model, feed, want = _rotary_model(2, 3, 5, 8, heads_out=True)
    plan = _run(model, feed, want)
    assert "rotary_embedding" in plan and "neg" not in plan, plan
