"""The matmul kernels (kernels/matmul/) against a float64 numpy reference.

Every path is forced in turn (direct, serial packed, parallel packed) by
lowering the size thresholds, so small shapes exercise the edge handling of
each. Every call goes through the checked wrappers, which pin the argument
types: the whole file compiles only a handful of kernels.

Tolerance: a K-term float32 dot product has an error below about
``K * eps * sum_k |a_ik| |b_kj|`` (recursive summation; FMA only helps), so
each element is checked against that bound (times a small factor, plus the
epilogue's few roundings), computed from the operands' magnitudes. An
indexing bug gives errors of the order of the values themselves, far above it.
"""

import os
import re

import numba
import numpy as np
import pytest

from jitnn.kernels import matmul as mm
from jitnn.kernels import vmath
from jitnn.kernels.matmul import blocking, drivers as matmul_drivers, packing, tiles as matmul_tiles
from jitnn.kernels._config import jit
from jitnn.kernels.epilogue import (CLAMP, GELU, HARD_SWISH, LEAKY_RELU, NONE, RELU,
                                    SIGMOID, TANH)
from tests.assembly import needs_packed_fma
from tests.helpers import (assert_within_bound as _check, gemm_reference_with_bound as _reference,
                           random)

ACTIVATIONS = [(NONE, 0.0, 0.0), (RELU, 0.0, 0.0), (CLAMP, -0.5, 0.7),
               (LEAKY_RELU, 0.1, 0.0), (SIGMOID, 0.0, 0.0), (TANH, 0.0, 0.0),
               (HARD_SWISH, 0.0, 0.0), (GELU, 0.0, 0.0)]


@pytest.fixture(params=["direct", "serial", "parallel"])
def path(request, monkeypatch):
    """Force one path for every size: returns the ``threads`` to pass."""
    if request.param == "direct":
        monkeypatch.setattr(mm, "DIRECT_MAX_MACS", 1 << 62)
        return 1
    monkeypatch.setattr(mm, "DIRECT_MAX_MACS", 0)
    monkeypatch.setattr(mm, "DIRECT_MAX_ROWS", 0)
    if request.param == "serial":
        return 1
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    return 2


# --- shapes -------------------------------------------------------------------

def test_every_shape_up_to_17(path):
    """Every M, N, K in 1..17 (and K = 0), all four transpose combinations:
    edge tiles of every size, in rows and columns, on each path."""
    rng = np.random.default_rng(17)
    for a_t in (False, True):
        for b_t in (False, True):
            for M in range(1, 18):
                for N in range(1, 18):
                    for K in range(0, 18):
                        a = random((K, M) if a_t else (M, K), rng)
                        b = random((N, K) if b_t else (K, N), rng)
                        out = np.full((M, N), np.nan, np.float32)
                        mm.gemm(a, b, out, a_transpose=a_t, b_transpose=b_t,
                                threads=path)
                        want, bound = _reference(a, b, a_t, b_t)
                        _check(out, want, bound, f"{M}x{N}x{K} a_t={a_t} b_t={b_t}")


@pytest.mark.parametrize("a_t,b_t", [(False, False), (True, True)])
@pytest.mark.parametrize("threads", [1, 2])
def test_irregular_large(a_t, b_t, threads):
    """1823 x 781 x 517 (M x K x N): several row and K-blocks, edges everywhere."""
    rng = np.random.default_rng(1)
    M, K, N = 1823, 781, 517
    a = random((K, M) if a_t else (M, K), rng)
    b = random((N, K) if b_t else (K, N), rng)
    out = np.full((M, N), np.nan, np.float32)
    mm.gemm(a, b, out, a_transpose=a_t, b_transpose=b_t, threads=threads)
    _check(out, *_reference(a, b, a_t, b_t))


def test_plan_blocks_cuts_short_wide_products_along_n():
    """With several threads a product with few rows and many columns is cut
    into column blocks (each streams its part of B once), one with as many
    rows as columns into row blocks, as before; column blocks keep at least
    _MIN_SPLIT_PANELS panels; every thread has work; and the blocks still
    compute the product (against float64)."""
    nr, mr, least = mm.NR, mm.MR, mm._MIN_SPLIT_PANELS
    M, N = 9 * mr + 2, 72 * nr                          # BERT's 128 x 2304 on AVX-512
    m_blocks, n_blocks = mm.plan_blocks(1, M, N, 2)
    assert m_blocks == 1 and n_blocks >= 2 * mm._TASKS_PER_THREAD, (m_blocks, n_blocks)
    # square: rows first; only rows where the MC-row blocks already make the tasks
    # (AVX-512: 4 of 140 rows); from one MC block (x86's baseline: 240 rows, MC 336)
    # the cost model takes 2 x 2 over 4 x 1, which moves less data
    m_blocks, n_blocks = mm.plan_blocks(1, 40 * mr, 40 * mr, 2)
    assert m_blocks >= n_blocks and m_blocks * n_blocks >= 2 * mm._TASKS_PER_THREAD, \
        (m_blocks, n_blocks)
    if -(-40 * mr // mm.MC) >= 2 * mm._TASKS_PER_THREAD:
        assert n_blocks == 1, (m_blocks, n_blocks)
    m_blocks, n_blocks = mm.plan_blocks(1, M, (2 * least - 1) * nr, 2)   # narrow
    assert -(-(2 * least - 1) // n_blocks) >= least or n_blocks == 1, (m_blocks, n_blocks)
    assert m_blocks * n_blocks >= 2, (m_blocks, n_blocks)
    rng = np.random.default_rng(3)
    K = 40
    for M, N in ((M, 8 * least * nr + 5), (M, (2 * least - 1) * nr)):
        a, b = random((M, K), rng), random((K, N), rng)
        bias = random((N,), rng)
        out = np.full((M, N), np.nan, np.float32)
        mm.gemm(a, mm.pack_b(b), out, bias=bias, threads=2)
        _check(out, *_reference(a, b, bias=bias), f"M = {M}, N = {N}")


@pytest.mark.parametrize("threads", [1, 2])
def test_last_row_panel_of_every_height(threads):
    """Products whose last row panel has 1 .. MR - 1 rows (the short tiles of
    its few rows) or MR, packed B, several K-blocks and column panels with an
    edge, batch > 1, an epilogue: against float64."""
    rng = np.random.default_rng(7)
    K, N = blocking.KC + 37, 3 * blocking.NR + 5
    b = random((K, N), rng)
    packed = mm.pack_b(b)
    bias = random((N,), rng)
    for rows in range(1, blocking.MR + 1):
        M = 2 * blocking.MR + rows
        a = random((2, M, K), rng)
        out = np.full((2, M, N), np.nan, np.float32)
        mm.batched_matmul(a, packed, out, bias=bias, activation=RELU, threads=threads)
        for g in range(2):
            _check(out[g], *_reference(a[g], b, bias=bias, act=RELU), f"M = {M}, product {g}")


@pytest.mark.parametrize("threads", [1, 2])
def test_a_read_in_place_or_packed(threads, monkeypatch):
    """Full row panels read A in place unless A is transposed or its row
    stride is a multiple of an L1 way (K = 1024, 2048: packed); the last,
    partial panel is packed either way. A short K runs the tiles row panel by
    row panel, a long one in Goto's order. One K-block and two, batch 2 with
    A shared through its index map, an epilogue: against float64."""
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    assert mm.a_in_place(False, 96) and mm.a_in_place(False, 1000)
    assert not mm.a_in_place(True, 96)
    assert not mm.a_in_place(False, 1024)
    assert not mm.a_in_place(False, 2048)
    # a K-block whose A panel would fill L1 runs in Goto's order
    assert mm.rows_outer(96, 3) and not mm.rows_outer(blocking._L1D // (4 * mm.MR), 3)
    rng = np.random.default_rng(13)
    M, N = 3 * mm.MR + 5, 3 * mm.NR + 3
    for K in (96, 1024, mm.KC + 100):
        for a_t in (False, True):
            a = random((K, M) if a_t else (M, K), rng)
            b = random((K, N), rng)
            bias = random((N,), rng)
            residual = random((M, N), rng)
            want, bound = _reference(a, b, a_t, bias=bias, residual=residual, act=GELU)
            out = np.full((2, M, N), np.nan, np.float32)
            mm.batched_matmul(a[None], mm.pack_b(b), out, a_index=np.zeros(2, np.int64),
                              a_transpose=a_t, bias=bias, residual=residual, activation=GELU,
                              threads=threads)
            for g in range(2):
                _check(out[g], want, bound, f"K = {K}, a_t = {a_t}, product {g}")


@pytest.mark.parametrize("threads", [1, 2])
def test_packing_runs_and_thread_splits(threads, monkeypatch):
    """Column counts whose panels fill no, part of, or several whole packing
    runs (``_PACK_RUN``) and groups (``_PACK_GROUP``), with K over two
    K-blocks, row counts that the threads do not split evenly, M < MR and
    N < NR; the thread count set through numba as well as passed in."""
    monkeypatch.setattr(mm, "DIRECT_MAX_MACS", 0)
    monkeypatch.setattr(mm, "DIRECT_MAX_ROWS", 0)
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    rng = np.random.default_rng(11)
    K = mm.KC + 37
    shapes = [(3, 5), (mm.MR - 1, 3 * mm.NR + 1), (13, mm.NR * packing._PACK_RUN),
              (mm.MR * 7 + 1, mm.NR * (packing._PACK_RUN + 1) + 3),
              (61, mm.NR * (packing._PACK_GROUP + packing._PACK_RUN - 1) + 9),
              (1, mm.NR * (2 * packing._PACK_GROUP + 1))]
    previous = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        for M, N in shapes:
            for b_t in (False, True):
                a = random((M, K), rng)
                b = random((N, K) if b_t else (K, N), rng)
                want, bound = _reference(a, b, False, b_t)
                out = np.full((M, N), np.nan, np.float32)
                mm.gemm(a, b, out, b_transpose=b_t)
                _check(out, want, bound, f"M={M} N={N} b_t={b_t}")
                out[:] = np.nan
                mm.gemm(a, mm.pack_b(b, b_transpose=b_t, threads=threads), out,
                        threads=threads)
                _check(out, want, bound, f"pre-packed M={M} N={N} b_t={b_t}")
    finally:
        numba.set_num_threads(previous)


def test_pack_a_panel_layout():
    """``_pack_a_panel`` against its definition, ``dst[p * MR + r] = A[i0 + r,
    k0 + p]`` and zero past the panel's rows: full panels (the stack tile of
    ``_PACK_A_COLS`` columns) and short ones, K-block depths that leave no,
    some or all columns to the tail loop, offsets in both directions, both
    orientations of A."""
    rng = np.random.default_rng(5)
    MR, cols = mm.MR, packing._PACK_A_COLS
    a = random((2 * MR + 3, 3 * cols + 11), rng)
    for a_t in (False, True):
        src = np.ascontiguousarray(a.T) if a_t else a
        for i0, m in ((0, MR), (MR, MR), (2 * MR, 3), (MR + 1, MR - 1)):
            for k0 in (0, 5):
                for kc in (0, 1, cols - 1, cols, cols + 3, 2 * cols, 3 * cols + 6):
                    dst = np.full(kc * MR, np.nan, np.float32)
                    packing._pack_a_panel(src, a_t, i0, m, k0, kc, dst)
                    want = np.zeros((kc, MR), np.float32)
                    want[:, :m] = a[i0:i0 + m, k0:k0 + kc].T
                    assert np.array_equal(dst.reshape(kc, MR), want), (a_t, i0, m, k0, kc)


@pytest.mark.parametrize("M", [1, 8])
@pytest.mark.parametrize("b_t", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_skinny(M, b_t, threads):
    """A fully connected layer: M x 2048 @ 2048 x 1000, B as given (the direct
    path: one-row product, or few rows) and pre-packed (the packed path)."""
    rng = np.random.default_rng(M)
    a = random((M, 2048), rng)
    b = random((1000, 2048) if b_t else (2048, 1000), rng)
    want, bound = _reference(a, b, False, b_t)
    out = np.full((M, 1000), np.nan, np.float32)
    mm.gemm(a, b, out, b_transpose=b_t, threads=threads)
    _check(out, want, bound, "as given")
    packed = mm.pack_b(b, b_transpose=b_t, threads=threads)
    out[:] = np.nan
    mm.gemm(a, packed, out, threads=threads)
    _check(out, want, bound, "pre-packed")


def test_fortran_ordered_operands_are_read_as_transposes():
    rng = np.random.default_rng(2)
    a, b = random((40, 30), rng), random((50, 40), rng)
    out = np.empty((30, 50), np.float32)
    mm.gemm(a.T, b.T, out)  # F-contiguous views: read through the flags, no copy
    _check(out, *_reference(a, b, True, True))
    mm.gemm(a, b, out, a_transpose=True, b_transpose=True)
    _check(out, *_reference(a, b, True, True))


# --- the epilogue ---------------------------------------------------------------

C_SHAPES = [None, (), (1,), "N", (1, "N"), ("M", 1), ("M", "N")]


@pytest.mark.parametrize("shape", [(5, 7, 9), (37, 45, 300)], ids=["tiny", "two-K-blocks"])
def test_alpha_beta_c_broadcasts(path, shape):
    """Every broadcast form of C, with alpha and beta; plus bias and residual."""
    M, N, K = shape
    rng = np.random.default_rng(3)
    a, b = random((M, K), rng), random((K, N), rng)
    for c_shape in C_SHAPES:
        for alpha, beta in ((1.0, 1.0), (2.5, -0.5), (-1.0, 0.0)):
            c = None
            if c_shape is not None:
                dims = tuple({"M": M, "N": N}.get(d, d) for d in c_shape)
                c = random(dims, rng) if dims else np.float32(rng.standard_normal())
            out = np.full((M, N), np.nan, np.float32)
            mm.gemm(a, b, out, alpha=alpha, beta=beta, c=c, threads=path)
            _check(out, *_reference(a, b, alpha=alpha, beta=beta, c=c),
                   f"c {c_shape} alpha {alpha} beta {beta}")
    bias, residual, c = random((N,), rng), random((M, N), rng), random((M, 1), rng)
    out = np.full((M, N), np.nan, np.float32)
    mm.gemm(a, b, out, alpha=0.5, beta=2.0, c=c, bias=bias, residual=residual,
            threads=path)
    _check(out, *_reference(a, b, alpha=0.5, beta=2.0, c=c, bias=bias,
                            residual=residual), "c + bias + residual")


@pytest.mark.parametrize("act,p0,p1", ACTIVATIONS)
def test_every_activation(path, act, p0, p1):
    rng = np.random.default_rng(4)
    for M, N, K in ((5, 7, 9), (1, 70, 300), (37, 45, 300)):
        a, b = random((M, K), rng), random((K, N), rng)
        bias = random((N,), rng)
        out = np.full((M, N), np.nan, np.float32)
        mm.gemm(a, b, out, bias=bias, activation=act, param0=p0, param1=p1,
                threads=path)
        _check(out, *_reference(a, b, bias=bias, act=act, p0=p0, p1=p1),
               f"{M}x{N}x{K} activation {act}")


def test_gelu_epilogue_is_the_elementwise_gelu(path):
    """The GEMM's GELU is the element-wise pass's (vmath.gelu): a fused GELU
    gives the bits of the GEMM followed by the separate pass, in full tiles,
    edge tiles (rows and columns past a tile, K past a K-block) and the
    one-row kernel, batch > 1 too."""
    rng = np.random.default_rng(6)
    for G, M, N, K in ((1, 1, 70, 300), (1, 37, 45, 300), (2, 30, 97, 600), (3, 5, 7, 9)):
        a, b = random((G, M, K), rng) * 2, random((K, N), rng)
        bias = random((N,), rng)
        fused, plain = (np.empty((G, M, N), np.float32) for _ in range(2))
        mm.batched_matmul(a, b[None], fused, bias=bias, activation=GELU, threads=path)
        mm.batched_matmul(a, b[None], plain, bias=bias, threads=path)
        np.testing.assert_array_equal(fused, _vmath_gelu(plain), f"{G}x{M}x{N}x{K}")


@jit()
def _vmath_gelu_kernel(x, out):
    for i in range(x.size):
        out[i] = vmath.gelu(x[i])


def _vmath_gelu(x):
    out = np.empty_like(x)
    _vmath_gelu_kernel(x.reshape(-1), out.reshape(-1))
    return out


def test_activation_by_name():
    rng = np.random.default_rng(5)
    a, b = random((9, 11), rng), random((11, 13), rng)
    out = np.empty((9, 13), np.float32)
    mm.gemm(a, b, out, activation="relu")
    _check(out, *_reference(a, b, act=RELU))


def test_k_zero_gives_the_epilogue_of_zero():
    rng = np.random.default_rng(6)
    a, b = np.empty((4, 0), np.float32), np.empty((0, 5), np.float32)
    c, bias = random((4, 5), rng), random((5,), rng)
    out = np.full((4, 5), np.nan, np.float32)
    mm.gemm(a, b, out, beta=0.5, c=c, bias=bias, activation=RELU)
    np.testing.assert_allclose(out, np.maximum(0.5 * c + bias, 0), rtol=1e-6)
    out[:] = np.nan
    mm.gemm(a, mm.pack_b(b), out)
    assert np.all(out == 0)


# --- pre-packed B ---------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
def test_packed_b_is_reused(threads, monkeypatch):
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    rng = np.random.default_rng(7)
    w = random((300, 70), rng)  # (N, K): a weight matrix, used transposed
    packed = mm.pack_b(w, b_transpose=True, threads=threads)
    assert packed.shape == (1, 70, 300)
    w_then = w.copy()
    w[:] = 0  # a PackedB is a snapshot
    for M in (1, 3, 13, 50):
        a = random((M, 70), rng)
        out = np.full((M, 300), np.nan, np.float32)
        mm.gemm(a, packed, out, bias=np.ones(300, np.float32), threads=threads)
        _check(out, *_reference(a, w_then, b_t=True, bias=np.ones(300)), f"M={M}")


def test_k_blocks_are_even():
    """K is cut into the fewest blocks of at most KC, all of one depth but
    the last, which is shorter by fewer k-steps than there are blocks."""
    for K in (1, 7, blocking.KC - 1, blocking.KC, blocking.KC + 1, blocking.KC + 37,
              3 * blocking.KC // 2, 3 * blocking.KC, 3 * blocking.KC + 5):
        kc = mm.k_block(K)
        blocks = -(-K // kc)
        assert kc <= blocking.KC and blocks == -(-K // blocking.KC), (K, kc)
        assert 0 <= kc * blocks - K < blocks, (K, kc)
    assert mm.pack_b(np.zeros((3 * blocking.KC // 2, 5), np.float32)).kc == 3 * blocking.KC // 4


@pytest.mark.parametrize("threads", [1, 2])
def test_k_blocks_of_an_uneven_split(threads, monkeypatch):
    """K = 2 KC + 2 (three blocks, the last one shorter), packed
    beforehand and in the driver, with an epilogue reading bias, residual and
    GELU on the last block, against float64; and the packed weights read back
    (jitnn.ops.matmul.unpacked_b) as they were."""
    from jitnn.ops.matmul import unpacked_b
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    rng = np.random.default_rng(5)
    M, N, K = 2 * mm.MR + 3, 2 * mm.NR + 7, 2 * blocking.KC + 2
    a = random((M, K), rng)
    b = random((K, N), rng)
    bias = random((N,), rng)
    residual = random((M, N), rng)
    want, bound = _reference(a, b, bias=bias, residual=residual, act=GELU)
    packed = mm.pack_b(b, threads=threads)
    assert packed.kc == mm.k_block(K) == -(-K // 3) and 2 * packed.kc < K
    assert np.array_equal(unpacked_b(packed, False), b)
    for operand in (packed, b):
        out = np.full((M, N), np.nan, np.float32)
        mm.gemm(a, operand, out, bias=bias, residual=residual, activation=GELU,
                threads=threads)
        _check(out, want, bound, f"packed={operand is packed}")



@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("K", [300, 2 * blocking.KC + 2], ids=["one-K-block", "three-K-blocks"])
def test_packed_epilogue_of_every_form(K, threads, monkeypatch):
    """The packed path's epilogue on full and edge tiles (M, N past whole
    tiles), after one K-block and after three (the tile adds the stored sum
    first): alpha, a C matrix or column with beta, bias, a residual matrix or
    column, and every activation, against float64."""
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    rng = np.random.default_rng(7)
    M, N = 2 * mm.MR + 3, 2 * mm.NR + 7
    a, b = random((M, K), rng), random((K, N), rng)
    packed = mm.pack_b(b, threads=threads)
    bias = random((N,), rng)
    for c, residual in (((M, N), (M, 1)), ((M, 1), (M, N)), (None, (M, N))):
        c = None if c is None else random(c, rng)
        residual = random(residual, rng)
        for act, p0, p1 in ACTIVATIONS:
            out = np.full((M, N), np.nan, np.float32)
            mm.gemm(a, packed, out, alpha=0.5, beta=2.0, c=c, bias=bias, residual=residual,
                    activation=act, param0=p0, param1=p1, threads=threads)
            _check(out, *_reference(a, b, alpha=0.5, beta=2.0, c=c, bias=bias,
                                    residual=residual, act=act, p0=p0, p1=p1),
                   f"c {None if c is None else c.shape} residual {residual.shape} act {act}")


# --- batches ----------------------------------------------------------------------

@pytest.mark.parametrize("threads", [1, 2])
def test_batched_attention_shapes(threads):
    """12 x 128 x 64 @ 12 x 64 x 128, then scores @ values with B transposed."""
    rng = np.random.default_rng(8)
    q, k = random((12, 128, 64), rng), random((12, 64, 128), rng)
    out = np.full((12, 128, 128), np.nan, np.float32)
    mm.batched_matmul(q, k, out, threads=threads)
    for g in range(12):
        _check(out[g], *_reference(q[g], k[g]), f"product {g}")
    v = random((12, 64, 128), rng)  # (G, N, K): B = v[g].T
    out2 = np.full((12, 128, 64), np.nan, np.float32)
    mm.batched_matmul(out, v, out2, b_transpose=True, alpha=0.125, threads=threads)
    for g in range(12):
        _check(out2[g], *_reference(out[g], v[g], b_t=True, alpha=0.125), f"product {g}")


@pytest.mark.parametrize("threads", [1, 2])
def test_batched_broadcast_by_index_maps(threads, monkeypatch):
    """(2, 1) x (1, 3) batch dims broadcast to 6 products through index maps;
    C per product, residual shared, bias, activation, A transposed."""
    monkeypatch.setattr(mm, "PARALLEL_MIN_MACS", 0)
    rng = np.random.default_rng(9)
    M, K, N = 19, 23, 35
    a = random((2, K, M), rng)
    b = random((3, K, N), rng)
    a_index = np.repeat(np.arange(2), 3)
    b_index = np.tile(np.arange(3), 2)
    c, residual, bias = random((6, M, 1), rng), random((M, N), rng), random((N,), rng)
    out = np.full((6, M, N), np.nan, np.float32)
    mm.batched_matmul(a, b, out, a_index, b_index, c=c, beta=-1.0, residual=residual,
                      bias=bias, activation=TANH, a_transpose=True, threads=threads)
    for g in range(6):
        want, bound = _reference(a[a_index[g]], b[b_index[g]], a_t=True, beta=-1.0,
                                 c=c[g], bias=bias, residual=residual, act=TANH)
        _check(out[g], want, bound, f"product {g}")
    packed = mm.pack_b(b)  # a batch of packed matrices
    out[:] = np.nan
    mm.batched_matmul(a, packed, out, a_index, b_index, a_transpose=True,
                      threads=threads)
    for g in range(6):
        _check(out[g], *_reference(a[a_index[g]], b[b_index[g]], a_t=True),
               f"packed product {g}")


def test_batched_default_index_maps():
    rng = np.random.default_rng(10)
    a, b = random((1, 6, 5), rng), random((4, 5, 7), rng)
    out = np.full((4, 6, 7), np.nan, np.float32)
    mm.batched_matmul(a, b, out)  # one A for four Bs
    for g in range(4):
        _check(out[g], *_reference(a[0], b[g]))


# --- checks in the wrappers ---------------------------------------------------------

def test_errors_name_what_was_expected():
    a, b = np.zeros((3, 4), np.float32), np.zeros((5, 6), np.float32)
    out = np.zeros((3, 6), np.float32)
    with pytest.raises(ValueError, match=r"inner dimensions differ: A is \(3, 4\), B is \(5, 6\)"):
        mm.gemm(a, b, out)
    b = np.zeros((4, 6), np.float32)
    with pytest.raises(ValueError, match="float32"):
        mm.gemm(a.astype(np.float64), b, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        mm.gemm(np.zeros((3, 8), np.float32)[:, ::2], b, out)
    with pytest.raises(ValueError, match=r"out has shape \(3, 5\), expected \(3, 6\)"):
        mm.gemm(a, b, np.zeros((3, 5), np.float32))
    with pytest.raises(ValueError, match="does not broadcast"):
        mm.gemm(a, b, out, c=np.zeros((2, 6), np.float32))
    with pytest.raises(ValueError, match=r"bias must have shape \(6,\)"):
        mm.gemm(a, b, out, bias=np.zeros(5, np.float32))
    with pytest.raises(ValueError, match="unknown activation"):
        mm.gemm(a, b, out, activation=99)
    with pytest.raises(ValueError, match="a_index has values outside"):
        mm.batched_matmul(a[None], b[None], out[None], a_index=np.array([1]))
    with pytest.raises(ValueError, match="needs batched_matmul"):
        mm.gemm(a, mm.pack_b(np.zeros((2, 4, 6), np.float32)), out)
    with pytest.raises(ValueError, match="b_transpose must be False"):
        mm.gemm(a, mm.pack_b(b), out, b_transpose=True)


@pytest.mark.parametrize("size", [4, 100])  # the direct path and the packed path
def test_out_must_not_overlap_an_input(size):
    buffer = np.ones((size, 2 * size), np.float32)
    a, out = buffer[:, :size], buffer[:, size:]
    a = np.ascontiguousarray(a)
    square = np.ones((size, size), np.float32)
    with pytest.raises(ValueError, match="overlaps"):
        mm.gemm(square, square, square)
    with pytest.raises(ValueError, match="overlaps"):
        mm.gemm(a, square, out := np.zeros((size, size), np.float32), residual=out)
    with pytest.raises(ValueError, match="overlaps"):
        mm.batched_matmul(square[None], square[None], square[None])


def test_cache_blocks_follow_the_cache_sizes():
    """The cache sizes are read (sysfs on Linux: CPython's os.sysconf often
    lacks their names) and the blocks follow them: KC k-steps of one L1d line
    each, at most 512, times the cache lines of a B panel row (2 on AVX-512),
    with the B panel at most an eighth of L2; MC rows of A whose block takes
    two thirds of L2."""
    l1 = blocking._cache_size(1, -1)
    l2 = blocking._cache_size(2, -1)
    if os.path.isdir("/sys/devices/system/cpu/cpu0/cache"):
        assert 4096 <= l1 < l2, (l1, l2)
    lines = max(1, mm.NR * 4 // 64)
    assert blocking.KC == max(16, min(512 * lines, blocking._L1D // 64 * lines,
                                      blocking._L2 // 8 // (mm.NR * 4)))
    assert blocking.MC % mm.MR == 0 and blocking.MC * blocking.KC * 4 <= blocking._L2 * 2 // 3 \
        or blocking.MC == mm.MR


def test_plan_blocks_gives_every_thread_work():
    row_panels = -(-1024 // mm.MR)                # 171 on AVX2 (MR 6), 74 on AVX-512
    assert mm.plan_blocks(1, 1024, 1024, 1) == (-(-row_panels // (mm.MC // mm.MR)), 1)
    m_blocks, n_blocks = mm.plan_blocks(1, 256, 256, 2)
    assert m_blocks * n_blocks >= 2 * mm._TASKS_PER_THREAD or m_blocks == -(-256 // mm.MR)
    assert mm.plan_blocks(1, 1, 1000, 2)[0] == 1  # one row: split the columns


# --- generated code -------------------------------------------------------------------

def _fma_loops(asm):
    """(packed FMAs on vector registers, scalar FMAs) of each innermost loop
    in ``asm``: the code from a label to the last jump back to it (a loop whose
    body branches, as a k-loop that prefetches only in some tiles, spans
    several labels) that holds no other such loop."""
    reg = "zmm" if mm.VEC == 16 else "ymm"
    lines = asm.splitlines()
    starts = {}
    for index, line in enumerate(lines):
        match = re.match(r"^(\.?L\w+):", line)
        if match:
            starts[match.group(1)] = index
    ends = {}
    for index, line in enumerate(lines):
        if re.match(r"\s+j\w+\s", line):
            target = line.split()[-1]
            if target in starts and starts[target] < index:
                ends[target] = index
    ranges = [(starts[label], end) for label, end in ends.items()]
    loops = []
    for begin, end in ranges:
        if any(begin <= b and e <= end and (b, e) != (begin, end) for b, e in ranges):
            continue                    # an outer loop: its inner ones are counted
        text = "\n".join(lines[begin:end + 1])
        loops.append((len(re.findall(rf"vfmadd\d+ps\s[^\n]*%{reg}", text)),
                      len(re.findall(r"vfmadd\d+ss", text))))
    return loops


def _fresh_asm(kernel, *args):
    """Assembly of ``kernel`` compiled now (numba disables inspection of
    code loaded from the cache)."""
    fresh = jit(cache=False)(kernel.py_func)
    fresh(*args)
    return fresh.inspect_asm(fresh.signatures[0])


@needs_packed_fma
def test_micro_kernels_use_packed_fma():
    """Each register tile's inner loop: MR x NR / VEC packed FMAs on vector
    registers (12 ymm on AVX2) and no scalar FMA."""
    kc = 64
    out = np.zeros((2 * mm.MR, 2 * mm.NR), np.float32)
    tiles = mm.MR * mm.NR // mm.VEC
    f32 = np.float32
    asm = _fresh_asm(matmul_tiles._macro_kernel, kc, np.ones(2 * kc * mm.MR, f32),
                     np.ones(2 * kc * mm.NR, f32), out, 0, 2, 0, 2, True, True, f32(1),
                     f32(1), np.ones((1, 1), f32), np.ones(2 * mm.NR, f32),
                     np.zeros((0, 0), f32), RELU, f32(0), f32(0), np.zeros((0, 0), f32), 0,
                     False)
    block = np.ones(kc * blocking._DIRECT_W, np.float32)
    direct = _fresh_asm(matmul_tiles._small_tile, np.ones((7, kc), np.float32), False, 0, 7, 0, kc,
                        block, out, 0, mm.NR, False, mm.MR)
    half = matmul_tiles._HALF_MR
    direct_half = _fresh_asm(matmul_tiles._small_tile, np.ones((7, kc), np.float32), False, 0,
                             7, 0, kc, block, out, 0, mm.NR, False, half)
    row = _fresh_asm(matmul_tiles._row_kernel, np.ones(kc, np.float32),
                     np.ones(4 * kc * mm.NR, np.float32), kc, kc, 4 * mm.NR, 0, 4, out[:1], 0)
    for name, asm, want in (("packed", asm, tiles), ("direct", direct, tiles),
                            ("direct, half a tile", direct_half, half * mm.NR // mm.VEC),
                            ("one-row", row, 4 * mm.NR // mm.VEC)):
        loops = _fma_loops(asm)
        hot = [loop for loop in loops if loop[0] >= want]
        assert hot, f"{name} tile: no loop with {want} packed FMAs; loops: {loops}"
        assert all(scalar == 0 for _, scalar in hot), f"{name} tile: scalar FMA in {hot}"


@pytest.mark.slow
@needs_packed_fma
def test_tasks_keep_the_tile_vectorized():
    """The same check on the packed path's task, where the tiles are inlined
    (LLVM's choices depend on context): a standalone kernel
    (kernels/_linking.py), whose own code is what every driver calls."""
    a = np.ones((1, 20, 20), np.float32)
    out = np.empty((1, 20, 20), np.float32)
    packed = np.ones((1, 20 * mm.NR * 2), np.float32)
    f32 = np.float32
    args = (0, a, False, mm._FIRST, mm._FIRST, packed, out, mm.KC, 1, 1, True, False,
            f32(1), f32(1), mm._NO_ADDEND, mm._NO_BIAS, mm._NO_ADDEND, 0, f32(0), f32(0))
    tiles = mm.MR * mm.NR // mm.VEC
    loops = _fma_loops(_fresh_asm(matmul_drivers._compute_task, *args))
    assert any(packed >= tiles and scalar == 0 for packed, scalar in loops), loops


def test_stack_intrinsics():
    """kernels/stack.py on its own: a stack tile, prefetches (no effect on
    values), the atomic counter and a view through element_pointer."""
    from jitnn.kernels.stack import (atomic_add, element_pointer, prefetch,
                                     prefetch_write, stack_empty)

    def body(x, counter):
        tile = numba.carray(stack_empty(8, np.float32), (2, 4))
        for i in range(2):
            for j in range(4):
                tile[i, j] = x[i, j] * 2
        prefetch(x, (1, 3))
        prefetch_write(x, (0, 0))
        first = atomic_add(counter, 0, 5)
        second = atomic_add(counter, 0, 1)
        view = numba.carray(element_pointer(x, (1, 1)), 3)
        view[0] = tile[1, 3]
        return first, second

    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    counter = np.zeros(1, np.int64)
    assert jit(cache=False)(body)(x, counter) == (0, 5)
    assert counter[0] == 6
    assert x[1, 1] == 14.0 and x[1, 2] == 6.0


def test_the_direct_path_is_right_for_every_row_count():
    """Every tile height the direct path runs (full tiles, half a tile for the
    last few rows, and the rows past M it drops): 1 to 3 MR + 1 rows, a few
    column counts, A as given and transposed, against float64."""
    rng = np.random.default_rng(77)
    for m in range(1, 3 * mm.MR + 2):
        for n in (1, 17, mm.NR + 3):
            a = rng.standard_normal((m, 19)).astype(np.float32)
            b = rng.standard_normal((19, n)).astype(np.float32)
            for a_t in (False, True):
                operand = np.ascontiguousarray(a.T) if a_t else a
                out = np.empty((m, n), np.float32)
                mm.gemm(operand, b, out, a_transpose=a_t)
                np.testing.assert_allclose(out, a.astype(np.float64) @ b, rtol=1e-5,
                                           atol=1e-5, err_msg=f"{m} x 19 x {n}")


def test_the_direct_path_over_two_k_blocks_and_wide_rows_of_b():
    """Products the direct path runs in two K-blocks (its last tile adding
    to the first block's sums), with B's rows copied a whole panel at a time
    (reading on into the next row) except at the end of B, batched, A and B
    as given and transposed, against float64."""
    rng = np.random.default_rng(78)
    K = blocking.SMALL_K + 5
    for m in (1, 2, mm.MR - 1, mm.MR + 2, 2 * mm.MR):
        for n in (3, 17, mm.NR, 4 * mm.NR + 5):
            a = rng.standard_normal((3, m, K)).astype(np.float32)
            b = rng.standard_normal((3, K, n)).astype(np.float32)
            want = a.astype(np.float64) @ b
            for a_t in (False, True):
                for b_t in (False, True):
                    a_op = np.ascontiguousarray(a.transpose(0, 2, 1)) if a_t else a
                    b_op = np.ascontiguousarray(b.transpose(0, 2, 1)) if b_t else b
                    out = np.empty((3, m, n), np.float32)
                    mm.batched_matmul(a_op, b_op, out, a_transpose=a_t, b_transpose=b_t,
                                      threads=1)
                    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4,
                                               err_msg=f"{m} x {K} x {n} a_t={a_t} b_t={b_t}")
