"""Products of 1 to 4 rows on a weight packed once for them
(kernels/matmul/gemv.py) against float64, and their use by gemm/matmul
nodes: a classifier after a global pool reads the pooled blocked vector in
place (no flatten step), and a replayed program runs it as one bound call.

The error bound is the GEMM kernels' (tests/helpers.py,
``gemm_reference_with_bound``): ``(2K + 8) eps sum_k |a| |b|`` plus the
epilogue's roundings."""

import numpy as np
import pytest

import jitnn
from jitnn.kernels.matmul import gemv as gv
from jitnn.kernels.epilogue import CLAMP, GELU, NONE, RELU
from tests.helpers import (assert_within_bound as _check, gemm_reference_with_bound as _reference,
                           random)

SMALL = (1, 7, 9, 17)


def _run(M, K, N, threads, *, bias=False, b_t=False, c=None, residual=None, act=NONE,
         p0=0.0, p1=0.0, alpha=1.0, beta=1.0, seed=0):
    a = random((M, K), seed)
    b = random((N, K) if b_t else (K, N), seed + 1)
    bias_v = random((N,), seed + 2) if bias else None
    packed = gv.pack_gemv_b(b, b_transpose=b_t)
    # the packing round-trips (the runtime drops the plain weight and remakes it)
    assert np.array_equal(packed.unpacked(), b.T if b_t else b)
    out = np.full((M, N), np.nan, np.float32)
    gv.gemv(a, packed, out, alpha=alpha, beta=beta, c=c, bias=bias_v, residual=residual,
            activation=act, param0=p0, param1=p1, threads=threads)
    want, bound = _reference(a, b, b_t=b_t, alpha=alpha, beta=beta, c=c, bias=bias_v,
                             residual=residual, act=act, p0=p0, p1=p1)
    _check(out, want, bound, f"gemv M={M} K={K} N={N} bias={bias} b_t={b_t} act={act}")


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("b_t", [False, True])
def test_gemv_small_sizes(M, bias, b_t, threads):
    for K in SMALL:
        for N in SMALL:
            _run(M, K, N, threads, bias=bias, b_t=b_t, seed=K * 100 + N)


@pytest.mark.parametrize("M", [1, 2, 3, 4])
@pytest.mark.parametrize("K, N", [(1280, 1000), (1000, 1280), (4096, 17), (17, 4096),
                                  (1, 1000), (4096, 9), (9, 1280)])
def test_gemv_large_sizes(M, K, N, threads):
    # with and without bias and transposed weight, alternating over the sizes
    _run(M, K, N, threads, bias=(K + N + M) % 2 == 0, b_t=M % 2 == 0, seed=M)


@pytest.mark.parametrize("act, p0, p1", [(RELU, 0.0, 0.0), (CLAMP, -0.5, 0.7),
                                         (GELU, 0.0, 0.0)])
def test_gemv_epilogue(act, p0, p1, threads):
    M, K, N = 3, 33, 70
    c = random((N,), 5)
    residual = random((M, N), 6)
    _run(M, K, N, threads, bias=True, c=c, residual=residual, act=act, p0=p0, p1=p1,
         alpha=0.5, beta=2.0)
    _run(1, K, N, threads, c=random((1, 1), 7), act=act, p0=p0, p1=p1)


def test_gemv_k_zero_gives_the_epilogue():
    packed = gv.pack_gemv_b(np.zeros((0, 5), np.float32))
    out = np.full((2, 5), np.nan, np.float32)
    bias = random((5,), 1)
    gv.gemv(np.zeros((2, 0), np.float32), packed, out, bias=bias, activation=RELU)
    np.testing.assert_array_equal(out, np.maximum(np.broadcast_to(bias, (2, 5)), 0))


def test_gemv_checks_its_arguments():
    packed = gv.pack_gemv_b(random((8, 5), 0))
    out = np.empty((1, 5), np.float32)
    with pytest.raises(ValueError, match="inner dimensions"):
        gv.gemv(random((1, 7), 1), packed, out)
    with pytest.raises(ValueError, match="rows"):
        gv.gemv(random((5, 8), 1), packed, np.empty((5, 5), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        gv.gemv(random((1, 8), 1), packed, np.empty((1, 6), np.float32))
    with pytest.raises(ValueError, match="broadcast"):
        gv.gemv(random((1, 8), 1), packed, out, c=random((3,), 2))


@pytest.mark.parametrize("m", [1, 2, 4])
@pytest.mark.parametrize("b_transpose", [False, True])
def test_gemm_op_takes_the_gemv_path(m, b_transpose, threads):
    """jitnn.gemm with a few rows and a weight worth packing: the weight is
    packed for gemv once, and the answers match float64."""
    K, N = 640, 500
    ctx = jitnn.Context(num_threads=threads)
    a = random((m, K), 1)
    w = random((N, K) if b_transpose else (K, N), 2)
    bias = random((N,), 3)
    weight = ctx.tensor(w)
    for seed in range(2):
        a = random((m, K), seed)
        got = jitnn.gemm(ctx.tensor(a), weight, ctx.tensor(bias), b_transpose=b_transpose,
                         activation="relu").numpy()
        want, bound = _reference(a, w, b_t=b_transpose, c=bias, act=RELU)
        _check(got, want, bound, "gemm op")
    assert ("gemv_b", b_transpose) in weight._v._derived
    assert ctx.stats.filter_packs == 1


def test_classifier_reads_the_pooled_vector_and_runs_bound(threads):
    """global pool -> flatten -> gemm (+ bias): the gemm reads the pool's
    blocked output in place (no flatten step), and from the third compute on
    the classifier, whose output is the graph's, runs as one bound call
    into the array it wrote before; answers stay right on new inputs."""
    from jitnn.ops.matmul import gemm_reference
    C, N = 256, 1100          # worth packing: C * N > 64 ** 3
    ctx = jitnn.Context(num_threads=threads)
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (1, C, 5, 5))
    w1 = random((C, C, 1, 1), 1, 0.2)
    wc, bias = random((N, C), 2, 0.1), random((N,), 3)
    h = b.relu(b.conv2d(x, b.constant(w1)))
    y = b.gemm(b.flatten(b.global_average_pool2d(h)), b.constant(wc), b.constant(bias),
               b_transpose=True)
    graph = b.build({"y": y})
    for seed in range(4):
        inputs = {"x": random((1, C, 5, 5), 10 + seed)}
        outs = {"y": np.full((1, N), np.nan, np.float32)}
        ctx.compute(graph, inputs, outs)
        pooled = np.maximum(jitnn.registry.reference("conv2d")(inputs["x"], w1), 0)
        pooled = pooled.mean(axis=(2, 3))
        want = gemm_reference(pooled, wc, bias, b_transpose=True)
        np.testing.assert_allclose(outs["y"], want, rtol=1e-4, atol=1e-4)
    (program,) = graph._programs
    labels = [c.step.label for c in program.steps]
    assert not any("flatten" in label for label in labels), labels
    gemm_index = next(i for i, label in enumerate(labels) if label.startswith("gemm"))
    assert program.bindings.steps[gemm_index]
    # the pool's bound call is its compiled kernel, not the checking wrapper
    from jitnn.kernels import pool as pool_kernels
    pool_binding = program.bindings.steps[labels.index("global_average_pool2d")]
    assert pool_binding and pool_binding.kernel is not pool_kernels.global_average_pool2d
    assert type(pool_binding.kernel).__name__ == "builtin_function_or_method"


@pytest.mark.parametrize("a_shape, b_shape", [((1, 1, 700), (700, 600)),
                                              ((2, 1, 700), (1, 700, 600)),
                                              ((2, 2, 1, 700), (700, 600))])
def test_batched_matmul_of_a_few_rows_takes_the_gemv_path(a_shape, b_shape, threads):
    """A decode step's ``(B, 1, K) @ (K, N)``: one weight, at most four rows in
    all, is one product on the gemv path (with the matmul's fused add)."""
    ctx = jitnn.Context(num_threads=threads)
    w = random(b_shape, 1)
    bias = random((b_shape[-1],), 2)
    weight = ctx.tensor(w)
    a = random(a_shape, 3)
    got = jitnn.add(jitnn.matmul(ctx.tensor(a), weight), ctx.tensor(bias)).numpy()
    w2 = w.reshape(w.shape[-2:])
    rows = a.reshape(-1, a_shape[-1])
    want, bound = _reference(rows, w2, bias=bias)
    _check(got.reshape(rows.shape[0], -1), want, bound, "batched matmul")
    assert got.shape == np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + a_shape[-2:-1] \
        + b_shape[-1:]
    assert ("gemv_b", False) in weight._v._derived
