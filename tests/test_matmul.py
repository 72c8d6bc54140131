"""The public matmul and gemm ops: numpy/WebNN semantics, validation, oracles.

The kernels are tested exhaustively in test_matmul_kernels.py; this file tests
the ops around them against float64 numpy.
"""

import importlib
import math

import numpy as np
import pytest

import jitnn
from jitnn.ops.matmul import gemm_reference, matmul_reference
from tests.helpers import assert_schedule, random
from tests.wpt import arguments, float32_cases


def _close(got, want, k):
    tol = 2e-6 * max(1, k)
    np.testing.assert_allclose(got, want, rtol=max(tol, 1e-5), atol=max(tol, 1e-5))


@pytest.mark.parametrize("case", float32_cases("wpt_matmul.json"), ids=lambda c: c[0])
def test_webnn_conformance(case):
    _, arrays, operator, want = case
    (a, b), options = arguments(operator, arrays)
    got = jitnn.matmul(a, b, **options).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 7), (7, 3)), ((1, 1), (1, 1)), ((17, 16), (16, 15)),
    ((12, 1, 33, 20), (3, 20, 17)), ((2, 3, 4), (4, 5)), ((4, 5), (2, 5, 6)),
    ((12, 128, 64), (12, 64, 128)), ((1, 2048), (2048, 1000)), ((8, 2048), (2048, 1000)),
    ((7,), (7, 4)), ((3, 7), (7,)), ((7,), (7,)), ((2, 3, 7), (7,)), ((7,), (2, 7, 3)),
    ((0, 4), (4, 3)), ((3, 0), (0, 2)),
])
def test_matmul_matches_numpy(a_shape, b_shape):
    a, b = random(a_shape, 1), random(b_shape, 2)
    got = jitnn.matmul(a, b).numpy()
    want = matmul_reference(a, b)
    assert got.shape == want.shape
    _close(got, want, a_shape[-1])


@pytest.mark.parametrize("activation", ["relu", ("clamp", -0.5, 0.5), "sigmoid", "gelu"])
def test_matmul_fused_activation(activation):
    from jitnn.kernels.epilogue import activation_reference
    from jitnn.ops._common import parse_activation
    a, b = random((33, 40), 3), random((40, 29), 4)
    got = jitnn.matmul(a, b, activation=activation).numpy()
    want = activation_reference(matmul_reference(a, b), *parse_activation("t", activation))
    _close(got, want, 40)


@pytest.mark.parametrize("c_shape", [None, (), (1,), (23,), (31, 1), (1, 23), (31, 23)])
@pytest.mark.parametrize("a_transpose,b_transpose", [(False, False), (True, False),
                                                     (False, True), (True, True)])
def test_gemm_options(c_shape, a_transpose, b_transpose):
    m, k, n = 31, 19, 23
    a = random((k, m) if a_transpose else (m, k), 5)
    b = random((n, k) if b_transpose else (k, n), 6)
    c = None if c_shape is None else random(c_shape, 7)
    kwargs = dict(alpha=0.75, beta=-1.5, a_transpose=a_transpose, b_transpose=b_transpose)
    got = jitnn.gemm(a, b, c, **kwargs).numpy()
    _close(got, gemm_reference(a, b, c, **kwargs), k)


def test_gemm_large_uses_packed_weights_once():
    ctx = jitnn.Context()
    w = ctx.tensor(random((300, 200), 8))
    ctx.reset_stats()
    for seed in range(3):
        x = random((64, 300), seed)
        _close(jitnn.gemm(ctx.tensor(x), w, b_transpose=False).numpy(),
               gemm_reference(x, np.asarray(w)), 300)
    assert ctx.stats.filter_packs == 1


def test_matmul_chain_stays_lazy_until_read():
    ctx = jitnn.Context()
    a, b, c = (ctx.tensor(random((16, 16), s)) for s in range(3))
    with assert_schedule(ctx, kernels=0):
        y = jitnn.matmul(jitnn.matmul(a, b), c)
    assert y.pending
    _close(y.numpy(), matmul_reference(matmul_reference(np.asarray(a), np.asarray(b)),
                                       np.asarray(c)), 256)


def test_matmul_intermediates_go_into_the_plan_buffers(monkeypatch):
    """A product nobody holds is written into its plan buffer: the three
    intermediate products share the plan's arena (two of them alive at once:
    room for two), so a flush makes one output array, the kept product's."""
    ops_matmul = importlib.import_module("jitnn.ops.matmul")  # jitnn.ops.matmul is the op
    ctx = jitnn.Context(num_threads=1)   # (2+: slots rest, passes.SETTLE_STEPS)
    x = ctx.tensor(random((32, 48), 0))
    ws = [ctx.tensor(0.2 * random((48, 48), s)) for s in range(1, 5)]

    def chain():
        h = x
        for w in ws:
            h = jitnn.matmul(h, w, activation="relu")
        return h

    want = np.asarray(x).astype(np.float64)
    for w in ws:
        want = np.maximum(want @ np.asarray(w).astype(np.float64), 0)
    made = []
    real = ops_matmul.aligned_empty
    monkeypatch.setattr(ops_matmul, "aligned_empty",
                        lambda shape, *args: made.append(shape) or real(shape, *args))
    for _ in range(2):                # planned, then the plan reused
        made.clear()
        h = chain()
        _close(h.numpy(), want, 48 * 4)
        assert made == [(32, 48)]
        assert "3 intermediate buffer(s), 3 sharing an arena of" in jitnn.explain(h)
        assert h._v._plan.arena_bytes == 2 * 32 * 48 * 4


@pytest.mark.parametrize("call,error,message", [
    (lambda: jitnn.matmul(np.ones((2, 3)), np.ones((4, 5))), ValueError,
     r"matmul: inner dimensions differ: a \(2, 3\) has 3 columns, b \(4, 5\) has 4 rows"),
    (lambda: jitnn.matmul(np.ones((2, 2, 3)), np.ones((3, 3, 4))), ValueError,
     r"batch dimensions \(2,\) of a \(2, 2, 3\) and \(3,\) of b \(3, 3, 4\) do not broadcast"),
    (lambda: jitnn.matmul(np.float32(2.0), np.ones((2, 2))), ValueError, "rank >= 1"),
    (lambda: jitnn.gemm(np.ones((2, 3)), np.ones((4, 5))), ValueError,
     r"gemm: inner dimensions differ: A is \(2, 3\) and B is \(4, 5\) \(a \(2, 3\); b \(4, 5\)\)"),
    (lambda: jitnn.gemm(np.ones((3, 2)), np.ones((4, 5)), a_transpose=True), ValueError,
     r"A is \(2, 3\) and B is \(4, 5\) \(a \(3, 2\), transposed; b \(4, 5\)\)"),
    (lambda: jitnn.gemm(np.ones((2, 3, 1)), np.ones((3, 5))), ValueError, "a must have rank 2"),
    (lambda: jitnn.gemm(np.ones((2, 3)), np.ones((3, 5)), np.ones((3, 5))), ValueError,
     r"c \(3, 5\) does not broadcast to the output shape \(2, 5\)"),
    (lambda: jitnn.gemm(np.ones((2, 3)), np.ones((3, 5)), alpha="2"), ValueError,
     "alpha must be a number"),
    (lambda: jitnn.gemm(np.ones((2, 3)), np.ones((3, 5)), a_transpose="yes"), TypeError,
     "gemm: a_transpose must be a bool, got 'yes'"),
    (lambda: jitnn.matmul(np.ones((2, 3), complex), np.ones((3, 5))), TypeError,
     "matmul: a: expected real numbers"),
])
def test_errors(call, error, message):
    with pytest.raises(error, match=message) as info:
        call()
    assert isinstance(info.value, jitnn.JitnnError)


# --- ONNX's oracles ----------------------------------------------------------------

def _node_cases(op_type):
    pytest.importorskip("onnx", reason="onnx provides its node test cases (test extra)")
    from tests.onnx_cases import node_cases
    return node_cases(op_type)


@pytest.mark.parametrize("case", _node_cases("Gemm"), ids=lambda c: c[0])
def test_onnx_gemm_node_cases(case):
    from tests.onnx_cases import attributes
    _, node, inputs, (want,) = case
    attrs = attributes(node)
    c = inputs[2] if len(inputs) > 2 else None
    got = jitnn.gemm(inputs[0], inputs[1], c, alpha=attrs.get("alpha", 1.0),
                     beta=attrs.get("beta", 1.0), a_transpose=bool(attrs.get("transA", 0)),
                     b_transpose=bool(attrs.get("transB", 0))).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", _node_cases("MatMul"), ids=lambda c: c[0])
def test_onnx_matmul_node_cases(case):
    _, _, (a, b), (want,) = case
    got = jitnn.matmul(a, b).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _linear_cases():
    pytest.importorskip("onnx", reason="onnx provides the PyTorch-generated cases (test extra)")
    from tests.onnx_cases import pytorch_converted
    return pytorch_converted("test_Linear")


@pytest.mark.parametrize("case", _linear_cases(), ids=lambda c: c[0])
def test_pytorch_generated_linear_cases_from_onnx(case):
    from tests.onnx_cases import attributes, initializers
    _, model, inputs, (want,) = case
    values = {**initializers(model), **dict(zip([i.name for i in model.graph.input], inputs))}
    for node in model.graph.node:  # Gemm, or Transpose + MatMul
        attrs = attributes(node)
        args = [values[name] for name in node.input]
        if node.op_type == "Gemm":
            result = jitnn.gemm(*args[:2], args[2] if len(args) > 2 else None,
                                alpha=attrs.get("alpha", 1.0), beta=attrs.get("beta", 1.0),
                                a_transpose=bool(attrs.get("transA", 0)),
                                b_transpose=bool(attrs.get("transB", 0)))
        elif node.op_type == "Transpose":
            result = np.transpose(args[0], attrs.get("perm"))
        else:
            assert node.op_type == "MatMul"
            result = jitnn.matmul(*args)
        values[node.output[0]] = np.asarray(result)
    np.testing.assert_allclose(values[model.graph.output[0].name], want, rtol=1e-5, atol=1e-5)


def test_replayed_linear_layers_are_bound_calls_with_their_epilogues(threads):
    """A transformer's MLP, ``x + (gelu(x @ w1 + b1) @ w2 + b2)``, computed again
    on new inputs: both products take the packed path (more rows than the
    direct path's, weights worth packing; M and N not multiples of the
    register tile) and, replayed, run as bound calls that read the step
    before's buffer and the residual in place, with float64's numbers at
    every run (a bound call holding a stale copy would give the first run's)."""
    from jitnn.ops.matmul import run_gemm
    ctx = jitnn.Context(num_threads=threads)
    rows, d, hidden = 45, 96, 130
    w1, b1 = random((d, hidden), 1, 0.1), random((hidden,), 2)
    w2, b2 = random((hidden, d), 3, 0.1), random((d,), 4)
    b = jitnn.GraphBuilder(ctx)
    x = b.relu(b.input("x", (rows, d)))        # (a graph input is a new array every run)
    h = b.gelu(b.add(b.matmul(x, b.constant(w1)), b.constant(b1)))
    y = b.add(x, b.add(b.matmul(h, b.constant(w2)), b.constant(b2)))
    graph = b.build({"y": b.relu(y)})             # y: an intermediate of the plan
    out = np.empty((rows, d), np.float32)
    for seed in range(4):
        data = random((rows, d), 10 + seed)
        ctx.compute(graph, {"x": data}, {"y": out})
        x64 = np.maximum(data.astype(np.float64), 0)
        pre = x64 @ w1 + b1
        hidden64 = 0.5 * pre * (1 + np.vectorize(math.erf)(pre / math.sqrt(2)))
        want = np.maximum(x64 + hidden64 @ w2 + b2, 0)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    bound = [bool(binding) for c, binding in zip(program.steps, program.bindings.steps)
             if c.step.kind == "op" and c.node.run is run_gemm]
    assert bound == [True, True], [c.step.label for c in program.steps]


def test_replayed_small_products_on_the_direct_path_are_bound_calls(threads):
    """Products too small to pack B (the kernel's direct path reads it as it
    is): a linear layer with its bias, GELU and residual in the epilogue, and
    a product of two computed values (B a plan buffer, as attention's
    ``q @ k.T``). Replayed on new inputs, each is one bound call reading A,
    B and the residual in place, with float64's numbers at every run."""
    from jitnn.ops.matmul import run_gemm
    ctx = jitnn.Context(num_threads=threads)
    rows, d, hidden = 6, 10, 13
    w, bias = random((d, hidden), 1, 0.3), random((hidden,), 2)
    b = jitnn.GraphBuilder(ctx)
    x = b.relu(b.input("x", (rows, d)))
    right = b.relu(b.input("r", (hidden, d)))
    h = b.gelu(b.add(b.matmul(x, b.constant(w)), b.constant(bias)))
    y = b.add(b.matmul(h, right), x)                 # (rows, d) + the residual x
    graph = b.build({"y": b.relu(y)})
    out = np.empty((rows, d), np.float32)
    for seed in range(4):
        data, other = random((rows, d), 30 + seed), random((hidden, d), 40 + seed)
        ctx.compute(graph, {"x": data, "r": other}, {"y": out})
        x64 = np.maximum(data.astype(np.float64), 0)
        pre = x64 @ w + bias
        hidden64 = 0.5 * pre * (1 + np.vectorize(math.erf)(pre / math.sqrt(2)))
        want = np.maximum(hidden64 @ np.maximum(other.astype(np.float64), 0) + x64, 0)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    bound = [bool(binding) for c, binding in zip(program.steps, program.bindings.steps)
             if c.step.kind == "op" and c.node.run is run_gemm]
    assert bound == [True, True], [c.step.label for c in program.steps]


def test_a_product_reads_through_reshapes_of_a_plain_value_and_is_bound():
    """``(1, S, D)`` activations reshaped to ``(S, D)`` (twice, as exporters
    write a transformer's attention output) before a linear layer: the
    product reads the buffer behind the reshapes in place, so no reshape runs
    as a step and, replayed, the product is a bound call; float64's numbers
    at every run."""
    from jitnn.ops.matmul import run_gemm
    ctx = jitnn.Context(num_threads=1)
    rows, d, n = 45, 96, 130
    w, bias = random((d, n), 1, 0.1), random((n,), 2)
    b = jitnn.GraphBuilder(ctx)
    h = b.relu(b.input("x", (1, 3, rows, d // 3)))
    flat = b.reshape(b.reshape(h, (1, rows, d)), (rows, d))
    graph = b.build({"y": b.relu(b.add(b.matmul(flat, b.constant(w)), b.constant(bias)))})
    out = np.empty((rows, n), np.float32)
    for seed in range(3):
        data = random((1, 3, rows, d // 3), 20 + seed)
        ctx.compute(graph, {"x": data}, {"y": out})
        x64 = np.maximum(data.astype(np.float64), 0).reshape(rows, d)
        np.testing.assert_allclose(out, np.maximum(x64 @ w + bias, 0), rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    labels = [c.step.label for c in program.steps]
    assert not any("reshape" in label for label in labels), labels
    bound = [bool(binding) for c, binding in zip(program.steps, program.bindings.steps)
             if c.step.kind == "op" and c.node.run is run_gemm]
    assert bound == [True], labels


def test_read_only_batch_indices_compile_nothing_more():
    """A batch broadcast to itself makes read-only index arrays (what
    jitnn.matmul's raveled broadcasts give); they are copied, so the drivers
    keep one signature instead of compiling again for read-only indices."""
    from numba.core import types

    from jitnn.kernels.matmul import batched_matmul
    from jitnn.kernels.matmul.drivers import gemm_driver
    a, b = random((3, 4, 5), 1), random((3, 5, 6), 2)
    read_only = np.broadcast_to(np.arange(3), (3,))
    assert not read_only.flags.writeable and read_only.flags.c_contiguous
    out = np.empty((3, 4, 6), np.float32)
    batched_matmul(a, b, out, read_only, read_only[::-1].copy(), threads=1)
    np.testing.assert_allclose(out, a @ b[::-1], rtol=1e-5, atol=1e-5)
    indices = {arg.mutable for sig in gemm_driver("direct").serial.signatures for arg in sig
               if isinstance(arg, types.Array) and arg.dtype == types.int64}
    assert indices == {True}, gemm_driver("direct").serial.signatures


@pytest.mark.parametrize("a_shape, b_shape", [((2, 8, 16, 17), (2, 8, 17, 9)),
                                              ((1, 3, 49, 16), (1, 1, 16, 17)),
                                              ((5, 7, 3), (3, 1))])
def test_a_batched_product_of_computed_operands_is_bound_in_a_replay(a_shape, b_shape):
    """Linear attention's products (both operands computed at every run,
    broadcast batches, odd sizes): into the plan's buffer and one bound call
    from the second run on; every run's numbers are the reference's."""
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    x, y = b.input("x", a_shape), b.input("y", b_shape)
    graph = b.build({"z": b.relu(b.matmul(b.relu(x), b.abs(y)))})
    for seed in range(3):
        xs, ys = random(a_shape, seed), random(b_shape, seed + 10)
        want = np.maximum(matmul_reference(np.maximum(xs, 0), np.abs(ys)), 0)
        outs = {"z": np.full(want.shape, np.nan, np.float32)}
        ctx.compute(graph, {"x": xs, "y": ys}, outs)
        np.testing.assert_allclose(outs["z"], want, rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    assert [bool(bound) for c, bound in zip(program.steps, program.bindings.steps)
            if c.step.label == "matmul"] == [True]
