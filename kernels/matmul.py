"""Matrix products: packed float32 GEMM (Goto/BLIS style) with a fused epilogue.

What the kernels compute, for every product ``g`` of a batch::

    out[g] = act(alpha * A_g @ B_g + beta * C[g] + bias + residual[g])
    A_g = a[a_index[g]]   (or its transpose)     shape (M, K)
    B_g = b[b_index[g]]   (or its transpose)     shape (K, N)

:func:`gemm` is the batch of one product; :func:`batched_matmul` takes a
batch, with index maps so that the runtime can broadcast batch dimensions
without copying (``a_index = [0, 0, 0]`` reuses one matrix for three products).

Buffers (float32, C-contiguous; the Python wrappers check this):

* ``a: (BA, M, K)``, or ``(BA, K, M)`` with ``a_transpose``
* ``b: (BB, K, N)``, or ``(BB, N, K)`` with ``b_transpose``; or a :class:`PackedB`
* ``a_index, b_index: (G,)`` int64: which ``a`` and ``b`` each product reads
* ``out: (G, M, N)``
* ``c: (Gc, Mc, Nc)`` with ``Gc in (1, G)``, ``Mc in (1, M)``, ``Nc in (1, N)``
  (scalar, row, column or full C, shared by the batch or per product);
  ``residual``: the same shapes, added with weight 1; ``(1, 0, 0)`` means none
* ``bias: (N,)``; ``(0,)`` means none
* activation: ``(code, param0, param1)`` from :mod:`.epilogue`

**Register tile.** The packed path computes ``out`` in ``MR x NR`` tiles
(6 x 16 on AVX2: 12 accumulator registers + 2 for a row of B + 1 broadcast of
A = 15 of the 16 ymm registers), each a sum of ``kc`` outer products of a
column of A and a row of B. So that both come from contiguous memory, A and B
are first copied ("packed") into panels::

    A panel (rows i0 .. i0+MR, K-block k0 .. k0+kc):  apanel[p * MR + r] = A[i0 + r, k0 + p]
    B panel (cols j0 .. j0+NR, K-block k0 .. k0+kc):  bpanel[p * NR + c] = B[k0 + p, j0 + c]

Rows past M and columns past N are zero in the panels, so edge tiles run the
same loop and only their store is clipped. A whole packed B is one row of
``packed_b: (BB, K * N_pad)`` with ``N_pad = ceil(N / NR) * NR``: K-block
``[k0, k0 + kc)`` starts at ``k0 * N_pad`` and holds its column panels one
after another, panel ``jp`` at ``k0 * N_pad + jp * kc * NR``
(:class:`PackedB` keeps one, made once by :func:`pack_b`). A is packed the
same way, one row block at a time, into a per-task buffer:
``a_block[(ip - ip_begin) * kc * MR + p * MR + r]``. Transposed operands only
change the order in which packing reads them; nothing is transposed in memory.

**Cache blocking** (:data:`KC`, :data:`MC`, :data:`NC`, derived from the L1d
and L2 sizes; 512, 168, 4080 here): a task owns a block of at most ``MC``
rows and ``NC`` columns of ``out`` and walks K in blocks of ``KC``. For each
K-block it packs its rows of A (``MC x KC`` floats, 336 KiB: stays in L2),
then for each B panel (``KC x NR``, 32 KiB: stays in L1) runs the register
tile down the A panels (:func:`_macro_kernel`). The first K-block stores the
tiles, later ones add to them, and the last one applies the epilogue in the
registers before its store.

**Paths**, chosen by :func:`_run` from the shape of the product:

* direct (:func:`_direct_columns`): tiny products, products with at most
  ``DIRECT_MAX_ROWS`` rows, and ``K == 0``. No packing of A and no heap
  allocation: B is copied ``SMALL_K`` rows x ``_DIRECT_W`` columns at a time
  into a block on the stack (``block[p * _DIRECT_W + c] = B[k0 + p, j0 + c]``,
  one contiguous run per row of B) and every ``MR x NR`` tile reads A in
  place (:func:`_small_tile`). One-row products are matrix-vector products
  instead (:func:`_gemv_columns`), reading B once, in place.
  :func:`matmul_small` is this path for one plain 2-D product, with the
  fewest arguments (per-call overhead is what matters there).
* packed: everything else, and every product with a :class:`PackedB`.
  One-row products use a one-row kernel on the packed panels that reads A
  in place and keeps its sums in registers through all of K
  (:func:`_row_kernel`).

Both run in :func:`gemm_serial` (one thread, or too little work to pay for
waking the others) or :func:`gemm_parallel`, one parallel region in which the
threads take tasks from shared atomic counters: first groups of B panels to
pack, then (product x column block x row block) blocks of ``out`` (direct
path: product x column block). Numba's own ``prange`` schedule is static, so
a thread that shares its core with another process would hold up the
others; with the counters the other threads take over its work.
"""

import os

import numba
import numpy as np
from numba import prange

from ._config import HOST_AVX512, jit
from .epilogue import ACTIVATIONS, CLAMP, GELU, LEAKY_RELU, NONE, RELU, activate
from .stack import atomic_add, element_pointer, prefetch_write, stack_empty

# --- register tile and cache blocks ---------------------------------------

#: float32 lanes in one SIMD register (8 on AVX2, 16 on AVX-512)
VEC = 16 if HOST_AVX512 else 8
#: vector registers the ISA has (ymm0-15 on AVX2, zmm0-31 on AVX-512)
_REGISTERS = 32 if HOST_AVX512 else 16
#: micro-tile columns: two vectors per row, so each A broadcast feeds two FMAs
NR = 2 * VEC
_NR_VECTORS = NR // VEC
#: micro-tile rows: as many as fit beside the B row and one A broadcast
#: (AVX2: (16 - 2 - 1) // 2 = 6; AVX-512: (32 - 2 - 1) // 2 = 14)
MR = (_REGISTERS - _NR_VECTORS - 1) // _NR_VECTORS
_TILE = MR * NR  # size of the stack accumulator (a literal for stack_empty)


def _cache_size(name, default):
    try:
        size = os.sysconf(name)
    except (ValueError, OSError):
        size = 0
    return size if size and size > 0 else default


_L1D = _cache_size("SC_LEVEL1_DCACHE_SIZE", 32 * 1024)
_L2 = _cache_size("SC_LEVEL2_CACHE_SIZE", 512 * 1024)

#: K-block depth: one packed B panel (KC x NR floats) fills L1d; the A panel
#: (MR x KC) streams past it from L2. 32 KiB L1d, NR = 16: KC = 512. Measured
#: on 1024^3, 1 thread: KC = 256 (half of L1) 0.90x OpenBLAS, 512 0.93-0.95x,
#: 768 no better: a deeper K-block halves the passes over the output tiles.
KC = max(16, _L1D // (NR * 4))
#: rows per task at most: the packed A block (MC x KC) takes two thirds of L2,
#: leaving room for the B panel and output tiles passing through.
#: 512 KiB L2, KC = 512: MC = 168 (336 KiB); 96 and 240 measured the same.
MC = max(MR, ((_L2 * 2 // 3) // (KC * 4)) // MR * MR)
#: columns per task at most: a B block (KC x NC, 8 MiB) stays in the L3 while
#: the row blocks that share it run. 4080 is BLIS's value (a multiple of NR).
NC = max(NR, 4080 // NR * NR)

#: products with M * N * K up to this many multiply-adds take the direct path
DIRECT_MAX_MACS = 64 ** 3
#: products with at most this many rows take the direct path at any size
#: (packing all of B would cost more than the product), in parallel
DIRECT_MAX_ROWS = 2 * MR
#: K-block depth of the direct path: its block of B (SMALL_K x _DIRECT_W
#: floats, 64 KiB) lives on the stack, so it must stay small
SMALL_K = 256
#: columns of the direct path's row block of B (a run of 256 bytes per row of
#: B on AVX2: runs of one cache line per row leave the prefetchers idle), and
#: the block's size in floats
_DIRECT_W = 4 * NR
_DIRECT_BLOCK = SMALL_K * _DIRECT_W
_GEMV_TILE = 4 * VEC  # partial sums of the transposed one-row product
_ROW_TILE = 4 * NR  # accumulators of the one-row kernel on packed B
#: below this many multiply-adds one thread is faster than waking the others
#: (measured crossover on 2 cores: between 96^3 and 128^3; a parallel region
#: costs several microseconds, more when the cores are shared)
PARALLEL_MIN_MACS = 1 << 20
#: tasks per thread the parallel driver aims for, so that dynamic scheduling
#: can even out threads that run at different speeds. Not more: each task
#: streams all of its columns of packed B past its rows of A, so smaller row
#: blocks read B more often (256^3 on 2 threads: 2 tasks per thread 150
#: GFLOP/s, 4 per thread 143; 512^3 and 1024^3 the same either way)
_TASKS_PER_THREAD = 2

_ONE = np.float32(1.0)
_ZERO = np.float32(0.0)


# --- views ------------------------------------------------------------------

if not numba.config.BOUNDSCHECK:
    @jit()
    def _span(x, i, j, n):
        """``x[i, j:j + n]`` as a zero-based view that numba does not
        reference-count. A slice would do, but numba increments and decrements
        the array's reference count around each one (two atomic operations)
        where it cannot prove them redundant, which in a loop over tiles or
        rows costs more than the work. No bounds check: callers index inside
        ``x``."""
        return numba.carray(element_pointer(x, (i, j)), n)

    @jit()
    def _span1(x, j, n):
        """``x[j:j + n]`` for a 1-D ``x``, as :func:`_span`."""
        return numba.carray(element_pointer(x, (j,)), n)
else:
    # Test runs with NUMBA_BOUNDSCHECK=1 check every view against its array
    # (a raw-pointer view would only be checked against its own length).
    @jit()
    def _span(x, i, j, n):
        if i < 0 or i >= x.shape[0] or j < 0 or n < 0 or j + n > x.shape[1]:
            raise IndexError("_span: view outside the array")
        return x[i, j:j + n]

    @jit()
    def _span1(x, j, n):
        if j < 0 or n < 0 or j + n > x.shape[0]:
            raise IndexError("_span1: view outside the array")
        return x[j:j + n]


# --- the epilogue -------------------------------------------------------------

@jit()
def _epilogue_rows(out, i0, j0, m, n, alpha, beta, c, bias, residual,
                   act, param0, param1):
    """``out[i, j] = act(alpha * out[i, j] + beta * c[i, j] + bias[j] +
    residual[i, j])`` on rows ``i0 .. i0+m``, columns ``j0 .. j0+n`` of one
    product, NR columns at a time. ``c`` and ``residual`` are 2-D with
    broadcastable shapes (1 or M rows, 1 or N columns) or ``(0, 0)`` when
    absent; ``bias`` is ``(N,)`` or ``(0,)``. ``beta == 0`` ignores ``c``
    (the BLAS rule: C is then not read, so a NaN in C does not leak).

    Each chunk is computed in a stack buffer ``t`` that nothing else can point
    to, so its loops vectorize without alias checks (working on ``out``
    directly, every store could alias the next load of ``c`` or ``bias``).
    Everything is inline: a call per chunk, with numba's reference counting
    of the array views it passes, cost more than the arithmetic.
    """
    t = numba.carray(stack_empty(NR, np.float32), (NR,))
    use_c = c.shape[0] > 0 and beta != _ZERO
    c_row_step = 1 if c.shape[0] > 1 else 0
    c_cols = c.shape[1] > 1
    r_row_step = 1 if residual.shape[0] > 1 else 0
    r_cols = residual.shape[1] > 1
    use_r = residual.shape[0] > 0
    use_bias = bias.shape[0] > 0
    for i in range(i0, i0 + m):
        for q in range(j0, j0 + n, NR):
            w = min(NR, j0 + n - q)
            row = _span(out, i, q, w)
            for j in range(w):
                t[j] = alpha * row[j]
            if use_c:
                if c_cols:
                    part = _span(c, i * c_row_step, q, w)
                    for j in range(w):
                        t[j] += beta * part[j]
                else:
                    value = beta * c[i * c_row_step, 0]
                    for j in range(w):
                        t[j] += value
            if use_bias:
                part = _span1(bias, q, w)
                for j in range(w):
                    t[j] += part[j]
            if use_r:
                if r_cols:
                    part = _span(residual, i * r_row_step, q, w)
                    for j in range(w):
                        t[j] += part[j]
                else:
                    value = residual[i * r_row_step, 0]
                    for j in range(w):
                        t[j] += value
            if act == RELU:
                for j in range(w):
                    t[j] = max(t[j], _ZERO)
            elif act == CLAMP:
                for j in range(w):
                    t[j] = min(max(t[j], param0), param1)
            elif act == LEAKY_RELU:
                for j in range(w):
                    x = t[j]
                    t[j] = x if x >= _ZERO else param0 * x
            elif act != NONE:
                for j in range(w):
                    t[j] = activate(t[j], act, param0, param1)
            for j in range(w):
                row[j] = t[j]


@jit()
def _has_epilogue(alpha, beta, c, bias, residual, act):
    """Whether the epilogue changes anything (``c``, ``residual``: 2-D)."""
    return (alpha != _ONE or (c.shape[0] > 0 and beta != _ZERO)
            or bias.shape[0] > 0 or residual.shape[0] > 0 or act != NONE)


# --- packing ----------------------------------------------------------------

@jit()
def _pack_b_panels(b, b_t, jp_begin, jp_end, N, k0, kc, dst):
    """Pack column panels ``jp_begin .. jp_end`` of B, K-block ``k0 .. k0+kc``.

    ``dst`` is the packed K-block (zero-based, ``kc * N_pad`` floats); panel
    ``jp`` goes to ``dst[jp * kc * NR:]`` as ``[p * NR + c] = B[k0 + p, jp * NR + c]``,
    zero for columns past ``N``. ``b`` is ``(K, N)``, or ``(N, K)`` when ``b_t``.
    """
    full_end = min(jp_end, N // NR)  # panels with all NR columns inside B
    if not b_t:
        # Row by row across a run of _PACK_RUN panels: one contiguous read of
        # _PACK_RUN * NR floats per row p (column-panel order would touch a
        # new page of B for every row). Not the whole group at once: its
        # panels lie kc * NR * 4 bytes apart (a multiple of 4 KiB), so the
        # stores of a row all fall in one L1 set, and 8 streams there (plus
        # the read) thrash it; runs of 4 packed 256^2 in 8 us instead of 12
        # and 1024^2 in 170 us instead of 225 (runs of 1: 320 us).
        # Copied through a stack buffer: the source and destination could
        # alias as far as LLVM knows, which kept a direct copy scalar.
        t = numba.carray(stack_empty(NR, np.float32), (NR,))
        for js in range(jp_begin, full_end, _PACK_RUN):
            js_end = min(js + _PACK_RUN, full_end)
            for p in range(kc):
                src = _span(b, k0 + p, 0, b.shape[1])
                for jp in range(js, js_end):
                    part = _span1(src, jp * NR, NR)
                    for c in range(NR):
                        t[c] = part[c]
                    row = _span1(dst, jp * kc * NR + p * NR, NR)
                    for c in range(NR):
                        row[c] = t[c]
    for jp in range(max(jp_begin, full_end) if not b_t else jp_begin, jp_end):
        panel = _span1(dst, jp * kc * NR, kc * NR)
        j0 = jp * NR
        n = min(NR, N - j0)
        if b_t:
            for c in range(n):
                src = _span(b, j0 + c, k0, kc)
                for p in range(kc):
                    panel[p * NR + c] = src[p]
        else:
            for p in range(kc):
                src = _span(b, k0 + p, j0, n)
                for c in range(n):
                    panel[p * NR + c] = src[c]
        for c in range(n, NR):
            for p in range(kc):
                panel[p * NR + c] = _ZERO


@jit()
def _pack_a_panel(a, a_t, i0, m, k0, kc, dst):
    """Pack rows ``i0 .. i0+m`` of A, K-block ``k0 .. k0+kc``, into ``dst``
    (``kc * MR`` floats, zero-based): ``dst[p * MR + r] = A[i0 + r, k0 + p]``,
    zero for ``r >= m``. ``a`` is ``(M, K)``, or ``(K, M)`` when ``a_t``."""
    if a_t:
        for p in range(kc):
            src = _span(a, k0 + p, i0, m)
            for r in range(m):
                dst[p * MR + r] = src[r]
            for r in range(m, MR):
                dst[p * MR + r] = _ZERO
    else:
        for r in range(m):
            src = _span(a, i0 + r, k0, kc)
            for p in range(kc):
                dst[p * MR + r] = src[p]
        for r in range(m, MR):
            for p in range(kc):
                dst[p * MR + r] = _ZERO


#: column panels packed by one task of the B-packing drivers
_PACK_GROUP = 8
#: column panels that :func:`_pack_b_panels` copies row by row together
_PACK_RUN = 4


@jit()
def _pack_b_task(task, b, b_t, N, K, kc_max, packed_b):
    """Pack one (matrix, K-block, group of column panels) of ``b``."""
    n_panels = (N + NR - 1) // NR
    groups = (n_panels + _PACK_GROUP - 1) // _PACK_GROUP
    k_blocks = (K + kc_max - 1) // kc_max
    n_pad = n_panels * NR
    g = task // (k_blocks * groups)
    kb = (task // groups) % k_blocks
    jg = task % groups
    k0 = kb * kc_max
    kc = min(kc_max, K - k0)
    _pack_b_panels(b[g], b_t, jg * _PACK_GROUP, min((jg + 1) * _PACK_GROUP, n_panels),
                   N, k0, kc, packed_b[g, k0 * n_pad:(k0 + kc) * n_pad])


@jit()
def _pack_b_tasks(b, b_t, N, K, kc_max):
    n_panels = (N + NR - 1) // NR
    groups = (n_panels + _PACK_GROUP - 1) // _PACK_GROUP
    return b.shape[0] * ((K + kc_max - 1) // kc_max) * groups


@jit()
def pack_b_serial(b, b_t, kc_max, packed_b):
    """Pack every matrix of ``b: (BB, K, N)`` (or ``(BB, N, K)`` when ``b_t``)
    into ``packed_b: (BB, K * N_pad)``, one thread."""
    K = b.shape[2] if b_t else b.shape[1]
    N = b.shape[1] if b_t else b.shape[2]
    for task in range(_pack_b_tasks(b, b_t, N, K, kc_max)):
        _pack_b_task(task, b, b_t, N, K, kc_max, packed_b)


@jit(parallel=True)
def pack_b_parallel(b, b_t, kc_max, packed_b):
    """:func:`pack_b_serial` with the panels spread over threads."""
    K = b.shape[2] if b_t else b.shape[1]
    N = b.shape[1] if b_t else b.shape[2]
    for task in prange(_pack_b_tasks(b, b_t, N, K, kc_max)):
        # np.int64: a prange index is unsigned, which would compile a second
        # version of _pack_b_task
        _pack_b_task(np.int64(task), b, b_t, N, K, kc_max, packed_b)


# --- the packed path ------------------------------------------------------------

@jit()
def _macro_kernel(kc, a_block, b_block, out, ip_begin, ip_end, jp_begin, jp_end,
                  accumulate, finish, alpha, beta, c, bias, residual, act, param0,
                  param1):
    """One K-block of a task: every ``MR x NR`` tile of ``out`` in row panels
    ``ip_begin .. ip_end`` and column panels ``jp_begin .. jp_end``.

    ``a_block`` holds the task's packed A panels (panel ``ip`` at
    ``(ip - ip_begin) * kc * MR``), ``b_block`` the packed B K-block (panel
    ``jp`` at ``jp * kc * NR``). A tile is ``kc`` outer products of a column of
    its A panel and a row of its B panel, summed in a stack array indexed only
    by constant-trip loops, so it lives in 12 ymm registers; then it is stored
    once (``accumulate``: added to ``out``). With ``finish`` (the last
    K-block) the epilogue is applied to the registers before that store:
    ``act(alpha * (sum + out) + beta * c + bias + residual)``, arguments as in
    :func:`_epilogue_rows`. Edge tiles run the same code on zero-padded
    panels and store only their valid part.

    All the tile loops live in this one function: a call per tile, with its
    arguments and numba's reference counting, cost ~10 % at kc = 256.
    """
    M, N = out.shape
    acc = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
    edge = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
    use_c = c.shape[0] > 0 and beta != _ZERO
    for jp in range(jp_begin, jp_end):
        bpanel = _span1(b_block, jp * kc * NR, kc * NR)
        j0 = jp * NR
        n = min(NR, N - j0)
        for ip in range(ip_begin, ip_end):
            apanel = _span1(a_block, (ip - ip_begin) * kc * MR, kc * MR)
            i0 = ip * MR
            m = min(MR, M - i0)
            for i in range(MR):
                for j in range(NR):
                    acc[i, j] = _ZERO
            # start loading the output tile now, so it is in L1 when the sum
            # is done (a prefetch never faults, even past the end of out)
            for i in range(MR):
                prefetch_write(out, (i0 + i, j0))
                prefetch_write(out, (i0 + i, j0 + NR - 1))
            for p in range(kc):
                for i in range(MR):
                    a_ip = apanel[p * MR + i]
                    for j in range(NR):
                        acc[i, j] += a_ip * bpanel[p * NR + j]
            if m < MR or n < NR:
                # edge tile: through a second stack tile, so that acc is only
                # ever indexed by constants (any runtime index would keep all
                # of acc in memory)
                for i in range(MR):
                    for j in range(NR):
                        edge[i, j] = acc[i, j]
                for i in range(m):
                    dst = _span(out, i0 + i, j0, n)
                    for j in range(n):
                        if accumulate:
                            dst[j] += edge[i, j]
                        else:
                            dst[j] = edge[i, j]
                if finish:
                    _epilogue_rows(out, i0, j0, m, n, alpha, beta, c, bias, residual,
                                   act, param0, param1)
                continue
            # Store through zero-based views of the rows: out[i0 + i, j0 + j]
            # would check j0 + j for negative wraparound on every element and
            # stay scalar.
            if not finish:
                for i in range(MR):
                    row = _span(out, i0 + i, j0, NR)
                    if accumulate:
                        for j in range(NR):
                            row[j] += acc[i, j]
                    else:
                        for j in range(NR):
                            row[j] = acc[i, j]
                continue
            for i in range(MR):
                row = _span(out, i0 + i, j0, NR)
                if accumulate:
                    for j in range(NR):
                        acc[i, j] += row[j]
                for j in range(NR):
                    acc[i, j] *= alpha
                if use_c:
                    c_i = min(i0 + i, c.shape[0] - 1)
                    if c.shape[1] > 1:
                        part = _span(c, c_i, j0, NR)
                        for j in range(NR):
                            acc[i, j] += beta * part[j]
                    else:
                        value = beta * c[c_i, 0]
                        for j in range(NR):
                            acc[i, j] += value
                if bias.shape[0] > 0:
                    part = _span1(bias, j0, NR)
                    for j in range(NR):
                        acc[i, j] += part[j]
                if residual.shape[0] > 0:
                    r_i = min(i0 + i, residual.shape[0] - 1)
                    if residual.shape[1] > 1:
                        part = _span(residual, r_i, j0, NR)
                        for j in range(NR):
                            acc[i, j] += part[j]
                    else:
                        value = residual[r_i, 0]
                        for j in range(NR):
                            acc[i, j] += value
                if act == RELU:
                    for j in range(NR):
                        acc[i, j] = max(acc[i, j], _ZERO)
                elif act == CLAMP:
                    for j in range(NR):
                        acc[i, j] = min(max(acc[i, j], param0), param1)
                elif act == LEAKY_RELU:
                    for j in range(NR):
                        x = acc[i, j]
                        acc[i, j] = x if x >= _ZERO else param0 * x
                elif act != NONE:
                    for j in range(NR):
                        acc[i, j] = activate(acc[i, j], act, param0, param1)
                for j in range(NR):
                    row[j] = acc[i, j]


@jit()
def _row_kernel(a_row, packed, K, kc_max, n_pad, jp, count, out, j0):
    """One-row products on a whole packed B: ``out[0, j0:j0 + count * NR] =
    a_row @ panels jp .. jp + count`` (``count <= 4``) through all of K.

    ``a_row``: the ``K`` values of the row of A, read in place (one row
    needs no packing). ``packed``: one packed B (``K * n_pad`` floats, see the
    module docstring): in K-block ``k0``, panel ``jp`` starts at ``k0 *
    n_pad + jp * kc * NR``. The sums stay in registers across the K-blocks
    and ``out`` is written once. Four panels at once give 4 * NR / VEC
    independent accumulators (8 on AVX2) where one 6 x 16 tile would waste
    five of its six rows."""
    N = out.shape[1]
    last = jp + count - 1  # missing panels repeat the last one (results dropped)
    acc = numba.carray(stack_empty(_ROW_TILE, np.float32), (4, NR))
    for q in range(4):
        for j in range(NR):
            acc[q, j] = _ZERO
    for k0 in range(0, K, kc_max):
        kc = min(kc_max, K - k0)
        size = kc * NR
        base = k0 * n_pad
        q0 = _span1(packed, base + jp * size, size)
        q1 = _span1(packed, base + min(jp + 1, last) * size, size)
        q2 = _span1(packed, base + min(jp + 2, last) * size, size)
        q3 = _span1(packed, base + min(jp + 3, last) * size, size)
        a_k = _span1(a_row, k0, kc)
        for p in range(kc):
            a_p = a_k[p]
            for j in range(NR):
                acc[0, j] += a_p * q0[p * NR + j]
                acc[1, j] += a_p * q1[p * NR + j]
                acc[2, j] += a_p * q2[p * NR + j]
                acc[3, j] += a_p * q3[p * NR + j]
    for q in range(4):
        if q < count:
            start = j0 + q * NR
            n = min(NR, N - start)
            row = _span(out, 0, start, n)
            if n == NR:
                for j in range(NR):
                    row[j] = acc[q, j]
            else:
                for j in range(NR):
                    if j < n:
                        row[j] = acc[q, j]


@jit()
def _compute_task(task, a, a_t, a_index, b_index, packed_b, out, kc_max,
                  m_blocks, n_blocks, alpha, beta, c, bias, residual,
                  act, param0, param1):
    """Compute one ``(product, column block, row block)`` block of ``out``
    through all of K, then run the epilogue on each of its tiles.

    Row panels are shared out evenly: row block ``ib`` of ``m_blocks`` holds
    panels ``[ib * m_panels // m_blocks, (ib + 1) * m_panels // m_blocks)``
    (the same for columns), so blocks differ by one panel at most.
    For each K-block the task packs its rows of A into a buffer that stays in
    this core's L2 while every B panel of the block streams past (Goto's loop
    order). A one-row product skips all that (:func:`_row_kernel`).
    """
    G, M, N = out.shape
    K = a.shape[1] if a_t else a.shape[2]
    m_panels = (M + MR - 1) // MR
    n_panels = (N + NR - 1) // NR
    g = task // (m_blocks * n_blocks)
    jb = (task // m_blocks) % n_blocks
    ib = task % m_blocks
    ip_begin = ib * m_panels // m_blocks
    ip_end = (ib + 1) * m_panels // m_blocks
    jp_begin = jb * n_panels // n_blocks
    jp_end = (jb + 1) * n_panels // n_blocks
    n_pad = n_panels * NR

    out_g = out[g]
    a_g = a[a_index[g]]
    pb = packed_b[b_index[g]]
    # "none" is a (1, 0, 0) array, so c[0] is an empty (0, 0) matrix
    c_g = c[g if c.shape[0] > 1 else 0]
    r_g = residual[g if residual.shape[0] > 1 else 0]
    epilogue = _has_epilogue(alpha, beta, c_g, bias, r_g, act)
    if M == 1:
        # one row: A is read in place and each group of panels runs through
        # all of K at once (no packing of A, one store per output)
        a_row = a_g.reshape(K)
        for jp in range(jp_begin, jp_end, 4):
            count = min(4, jp_end - jp)
            _row_kernel(a_row, pb, K, kc_max, n_pad, jp, count, out_g, jp * NR)
            if epilogue:
                j0 = jp * NR
                _epilogue_rows(out_g, 0, j0, 1, min((jp + count) * NR, N) - j0, alpha, beta,
                               c_g, bias, r_g, act, param0, param1)
        return
    a_block = np.empty((ip_end - ip_begin) * MR * min(kc_max, K), np.float32)

    for k0 in range(0, K, kc_max):
        kc = min(kc_max, K - k0)
        first = k0 == 0
        last = k0 + kc >= K
        for ip in range(ip_begin, ip_end):
            i0 = ip * MR
            start = (ip - ip_begin) * kc * MR
            _pack_a_panel(a_g, a_t, i0, min(MR, M - i0), k0, kc,
                          _span1(a_block, start, kc * MR))
        b_block = _span1(pb, k0 * n_pad, kc * n_pad)
        _macro_kernel(kc, a_block, b_block, out_g, ip_begin, ip_end, jp_begin, jp_end,
                      not first, last and epilogue, alpha, beta, c_g, bias, r_g, act,
                      param0, param1)


# --- the direct path ------------------------------------------------------------

@jit()
def _small_tile(a, a_t, i0, M, k0, kc, bview, out, j0, n, accumulate):
    """One ``MR x NR`` tile of the direct path, reading A in place:
    ``out[i0:i0+MR, j0:j0+n] (+)= A[i0:i0+MR, k0:k0+kc] @ B-rows``.

    ``bview[p * _DIRECT_W + j]`` is ``B[k0 + p, j0 + j]`` (a zero-based view
    into the row block of :func:`_direct_columns`). Tile rows past ``M`` read
    row ``M - 1`` instead (their results are dropped), so the loops keep
    constant trip counts and the accumulator stays in registers.
    """
    acc = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
    for i in range(MR):
        for j in range(NR):
            acc[i, j] = _ZERO
    if a_t:
        for p in range(kc):
            a_col = _span(a, k0 + p, 0, M)
            for i in range(MR):
                a_ip = a_col[min(i0 + i, M - 1)]
                for j in range(NR):
                    acc[i, j] += a_ip * bview[p * _DIRECT_W + j]
    else:
        for p in range(kc):
            for i in range(MR):
                a_ip = a[min(i0 + i, M - 1), k0 + p]
                for j in range(NR):
                    acc[i, j] += a_ip * bview[p * _DIRECT_W + j]
    for i in range(MR):
        if i0 + i < M:
            row = _span(out, i0 + i, j0, n)
            if n == NR:
                if accumulate:
                    for j in range(NR):
                        row[j] += acc[i, j]
                else:
                    for j in range(NR):
                        row[j] = acc[i, j]
            else:
                for j in range(NR):
                    if j < n:
                        if accumulate:
                            row[j] += acc[i, j]
                        else:
                            row[j] = acc[i, j]


@jit()
def _direct_columns(a, a_t, b, b_t, out, jp_begin, jp_end):
    """``out[:, cols] = A @ B[:, cols]`` for column panels ``jp_begin .. jp_end``
    (``cols = jp_begin * NR .. jp_end * NR``), reading A in place and B once.

    No heap allocation: B is copied, ``SMALL_K`` rows by ``_DIRECT_W`` columns
    at a time, into a row block on the stack (``block[p * _DIRECT_W + c] =
    B[k0 + p, j0 + c]``, zero past N; 64 KiB, in L2), reading each row of B
    in a contiguous run of ``_DIRECT_W`` columns; every row tile then uses it
    at once. (One-row products take :func:`_gemv_columns` instead.) Right for
    tiny products and for few rows (a batch-1 fully connected layer), where
    packing all of B would cost more than the product.
    """
    M, N = out.shape
    K = a.shape[0] if a_t else a.shape[1]
    if M == 1 and K > 0:
        _gemv_columns(a, a_t, b, b_t, out, jp_begin, jp_end)
        return
    col_begin = jp_begin * NR
    col_end = min(jp_end * NR, N)
    if K == 0:
        for i in range(M):
            row = _span(out, i, col_begin, col_end - col_begin)
            for j in range(col_end - col_begin):
                row[j] = _ZERO
        return
    block = numba.carray(stack_empty(_DIRECT_BLOCK, np.float32), (_DIRECT_BLOCK,))
    for k0 in range(0, K, SMALL_K):
        kc = min(SMALL_K, K - k0)
        for j0 in range(col_begin, col_end, _DIRECT_W):
            width = min(_DIRECT_W, col_end - j0)
            for p in range(kc):
                row = _span1(block, p * _DIRECT_W, _DIRECT_W)
                if b_t:
                    for c in range(width):
                        row[c] = b[j0 + c, k0 + p]
                else:
                    src = _span(b, k0 + p, j0, width)
                    for c in range(width):
                        row[c] = src[c]
                for c in range(width, _DIRECT_W):
                    row[c] = _ZERO
            for q in range(0, width, NR):
                bview = _span1(block, q, _DIRECT_BLOCK - q)
                for i0 in range(0, M, MR):
                    _small_tile(a, a_t, i0, M, k0, kc, bview, out, j0 + q,
                                min(NR, width - q), k0 > 0)


@jit()
def _gemv_columns(a, a_t, b, b_t, out, jp_begin, jp_end):
    """``out[0, cols] = A[0] @ B[:, cols]`` for a one-row product (columns of
    panels ``jp_begin .. jp_end``): a matrix-vector product, bound by reading
    B once, in place. A register tile would waste MR - 1 of its rows here.

    B not transposed: ``out_row += a[k] * B[k]`` four rows of B at a time
    (contiguous streams, four FMAs per load and store of ``out_row``).
    B transposed (``b: (N, K)``): each output is a dot product along a row
    of ``b``, four rows at a time with VEC partial sums each, so the sums
    vectorize without letting LLVM reorder additions.
    """
    N = out.shape[1]
    K = a.shape[0] if a_t else a.shape[1]
    col_begin = jp_begin * NR
    col_end = min(jp_end * NR, N)
    n = col_end - col_begin
    o = _span(out, 0, col_begin, n)
    if not b_t:
        for j in range(n):
            o[j] = _ZERO
        k4 = K // 4 * 4
        for k in range(0, k4, 4):
            a0 = a[k, 0] if a_t else a[0, k]
            a1 = a[k + 1, 0] if a_t else a[0, k + 1]
            a2 = a[k + 2, 0] if a_t else a[0, k + 2]
            a3 = a[k + 3, 0] if a_t else a[0, k + 3]
            b0 = _span(b, k, col_begin, n)
            b1 = _span(b, k + 1, col_begin, n)
            b2 = _span(b, k + 2, col_begin, n)
            b3 = _span(b, k + 3, col_begin, n)
            for j in range(n):
                o[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j]
        for k in range(k4, K):
            a0 = a[k, 0] if a_t else a[0, k]
            b0 = _span(b, k, col_begin, n)
            for j in range(n):
                o[j] += a0 * b0[j]
        return
    acc = numba.carray(stack_empty(_GEMV_TILE, np.float32), (4, VEC))
    k_vec = K // VEC
    for j0 in range(0, n, 4):
        last = n - 1
        r0 = _span(b, col_begin + j0, 0, K)
        r1 = _span(b, col_begin + min(j0 + 1, last), 0, K)
        r2 = _span(b, col_begin + min(j0 + 2, last), 0, K)
        r3 = _span(b, col_begin + min(j0 + 3, last), 0, K)
        for q in range(4):
            for lane in range(VEC):
                acc[q, lane] = _ZERO
        for kb in range(k_vec):
            k = kb * VEC
            for lane in range(VEC):
                a_k = a[k + lane, 0] if a_t else a[0, k + lane]
                acc[0, lane] += a_k * r0[k + lane]
                acc[1, lane] += a_k * r1[k + lane]
                acc[2, lane] += a_k * r2[k + lane]
                acc[3, lane] += a_k * r3[k + lane]
        for q in range(4):
            if j0 + q < n:
                row = _span(b, col_begin + j0 + q, 0, K)
                total = _ZERO
                for lane in range(VEC):
                    total += acc[q, lane]
                for k in range(k_vec * VEC, K):
                    total += (a[k, 0] if a_t else a[0, k]) * row[k]
                o[j0 + q] = total


# --- drivers ---------------------------------------------------------------------

@jit()
def _overlaps(x, y):
    """Whether two C-contiguous arrays share memory (their extents meet)."""
    if x.size == 0 or y.size == 0:
        return False
    x0 = x.ctypes.data
    y0 = y.ctypes.data
    return x0 < y0 + y.size * y.itemsize and y0 < x0 + x.size * x.itemsize


@jit()
def _overlaps_any(out, a, b, c, bias, residual):
    return (_overlaps(out, a) or _overlaps(out, b) or _overlaps(out, c)
            or _overlaps(out, bias) or _overlaps(out, residual))


_OVERLAP = "out overlaps an input (a, b, c, bias or residual); pass a separate output array"


@jit()
def matmul_small(a, a_t, b, b_t, out):
    """``out = A @ B`` for one tiny 2-D product with no epilogue: the
    cheapest call there is (five arguments, so numba's dispatch is short, and
    the overlap check is done here, where it costs nothing).
    ``a: (M, K)`` or ``(K, M)`` with ``a_t``; ``b: (K, N)`` or ``(N, K)`` with
    ``b_t``; ``out: (M, N)``. Raises ValueError if ``out`` overlaps ``a`` or ``b``."""
    if _overlaps(out, a) or _overlaps(out, b):
        raise ValueError(_OVERLAP)
    # np.int64(0), not 0: numba compiles a separate version for a literal
    _direct_columns(a, a_t, b, b_t, out, np.int64(0), (out.shape[1] + NR - 1) // NR)


@jit()
def _direct_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks, alpha,
                 beta, c, bias, residual, act, param0, param1):
    """One ``(product, column block)`` of the direct path, then its epilogue."""
    G, M, N = out.shape
    n_panels = (N + NR - 1) // NR
    g = task // n_blocks
    jb = task % n_blocks
    jp_begin = jb * n_panels // n_blocks
    jp_end = (jb + 1) * n_panels // n_blocks
    out_g = out[g]
    _direct_columns(a[a_index[g]], a_t, b[b_index[g]], b_t, out_g, jp_begin, jp_end)
    c_g = c[g if c.shape[0] > 1 else 0]
    r_g = residual[g if residual.shape[0] > 1 else 0]
    if jp_end > jp_begin and _has_epilogue(alpha, beta, c_g, bias, r_g, act):
        j0 = jp_begin * NR
        _epilogue_rows(out_g, np.int64(0), j0, M, min(jp_end * NR, N) - j0, alpha,
                       beta, c_g, bias, r_g, act, param0, param1)


@jit()
def gemm_serial(a, a_t, b, b_t, packed_b, a_index, b_index, out, direct, kc_max,
                m_blocks, n_blocks, alpha, beta, c, bias, residual,
                act, param0, param1):
    """GEMM on one thread. Arguments as in :func:`gemm_parallel`."""
    if _overlaps_any(out, a, b, c, bias, residual):
        raise ValueError(_OVERLAP)
    G, M, N = out.shape
    K = a.shape[1] if a_t else a.shape[2]
    alpha32 = np.float32(alpha)
    beta32 = np.float32(beta)
    p0 = np.float32(param0)
    p1 = np.float32(param1)
    if direct:
        for task in range(G * n_blocks):
            _direct_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks,
                         alpha32, beta32, c, bias, residual, act, p0, p1)
        return
    if packed_b.shape[0] == 0:
        pb = np.empty((b.shape[0], K * ((N + NR - 1) // NR) * NR), np.float32)
        for task in range(_pack_b_tasks(b, b_t, N, K, kc_max)):
            _pack_b_task(task, b, b_t, N, K, kc_max, pb)
    else:
        pb = packed_b
    for task in range(G * m_blocks * n_blocks):
        _compute_task(task, a, a_t, a_index, b_index, pb, out, kc_max,
                      m_blocks, n_blocks, alpha32, beta32, c, bias, residual,
                      act, p0, p1)


@jit(parallel=True)
def gemm_parallel(a, a_t, b, b_t, packed_b, a_index, b_index, out, direct, kc_max,
                  m_blocks, n_blocks, alpha, beta, c, bias, residual,
                  act, param0, param1, threads):
    """GEMM on ``threads`` threads.

    ``a``, ``b``, ``out``, ``c``, ``bias``, ``residual``, ``a_index``,
    ``b_index`` as in the module docstring; ``a_t``/``b_t`` the transpose
    flags. ``direct``: run the direct path (no packing) over ``n_blocks``
    column blocks per product, for products with few rows. Otherwise the
    packed path: ``packed_b: (BB, K * N_pad)`` packed with the same ``kc_max``
    (then ``b`` is not read), or ``(0, 0)`` to pack ``b`` here, and each
    product is cut into ``m_blocks x n_blocks`` blocks, one task each.
    ``alpha``, ``beta``, ``param0``, ``param1`` are float64, applied as
    float32; ``act`` is an activation code. ``threads``: how many workers take
    tasks (numba's thread count; passed in because asking numba from compiled
    code would make the function uncacheable).
    Raises ValueError if ``out`` overlaps an input.
    """
    if _overlaps_any(out, a, b, c, bias, residual):
        raise ValueError(_OVERLAP)
    G, M, N = out.shape
    K = a.shape[1] if a_t else a.shape[2]
    alpha32 = np.float32(alpha)
    beta32 = np.float32(beta)
    p0 = np.float32(param0)
    p1 = np.float32(param1)
    tasks = G * n_blocks if direct else G * m_blocks * n_blocks
    pack_tasks = 0
    if packed_b.shape[0] == 0 and not direct:
        pb = np.empty((b.shape[0], K * ((N + NR - 1) // NR) * NR), np.float32)
        pack_tasks = _pack_b_tasks(b, b_t, N, K, kc_max)
    else:
        pb = packed_b
    # One parallel region, dynamically scheduled: workers take packing tasks
    # from a shared counter, wait until every packing task is done, then take
    # product tasks. counters: [next pack task, packs done, next task].
    # No deadlock: a worker waits only for tasks that others have taken and
    # are running, and one worker alone can do every task.
    counters = np.zeros(3, np.int64)
    workers = max(1, min(threads, max(tasks, pack_tasks)))
    for worker in prange(workers):
        while True:
            task = atomic_add(counters, 0, 1)
            if task >= pack_tasks:
                break
            _pack_b_task(task, b, b_t, N, K, kc_max, pb)
            atomic_add(counters, 1, 1)
        while atomic_add(counters, 1, 0) < pack_tasks:
            pass
        while True:
            task = atomic_add(counters, 2, 1)
            if task >= tasks:
                break
            if direct:
                _direct_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks,
                             alpha32, beta32, c, bias, residual, act, p0, p1)
            else:
                _compute_task(task, a, a_t, a_index, b_index, pb, out, kc_max,
                              m_blocks, n_blocks, alpha32, beta32, c, bias,
                              residual, act, p0, p1)


# --- the Python API ---------------------------------------------------------
#
# Thin checked wrappers: kernels run without bounds checks, so everything a
# kernel indexes is checked here, cheaply, and a mismatch raises ValueError.
# They also pin the argument types (float64 scalars, bool flags, the same
# array kinds) so that each driver compiles exactly once.

_NO_ADDEND = np.zeros((1, 0, 0), np.float32)  # "no C" / "no residual"
_NO_BIAS = np.zeros(0, np.float32)
_NOT_PACKED = np.zeros((0, 0), np.float32)
_FIRST = np.zeros(1, np.int64)  # index map of a batch of one
_NO_B = np.zeros((1, 0, 0), np.float32)  # b when B comes packed
_F32 = np.dtype(np.float32)


class PackedB:
    """A constant right operand, packed once by :func:`pack_b` and reused by
    every product that reads it (weights of a fully connected layer).

    ``data: (BB, K * N_pad)`` float32 in the panel layout of the module
    docstring, cut into K-blocks of ``kc``; ``k``, ``n``: each packed matrix is
    the logical ``(K, N)`` B. It is a snapshot: changing the array it was packed
    from does not change it.
    """

    __slots__ = ("data", "k", "n", "kc")

    def __init__(self, data, k, n, kc):
        self.data, self.k, self.n, self.kc = data, k, n, kc

    @property
    def batch(self):
        """BB, the number of packed matrices."""
        return self.data.shape[0]

    @property
    def shape(self):
        """``(BB, K, N)``: the logical shape of what was packed."""
        return (self.data.shape[0], self.k, self.n)

    @property
    def nbytes(self):
        return self.data.nbytes

    def __repr__(self):
        return f"PackedB(batch={self.batch}, k={self.k}, n={self.n}, kc={self.kc})"


def _fail(op, message):
    raise ValueError(f"{op}: {message}")


def _operand(op, name, x, transpose, ndim):
    """``x`` as a C-contiguous float32 array of rank 3 and its transpose flag.

    A Fortran-ordered matrix (``y.T`` of a C-ordered ``y``) is read as the
    transpose of ``y``, with no copy."""
    if type(x) is not np.ndarray or x.dtype != _F32:
        _fail(op, f"{name} must be a float32 numpy array, got "
                  f"{getattr(x, 'dtype', type(x).__name__)}")
    if x.ndim != ndim:
        _fail(op, f"{name} must have rank {ndim}, got shape {x.shape}")
    transpose = bool(transpose)
    if not x.flags.c_contiguous:
        flipped = x.T if ndim == 2 else x.transpose(0, 2, 1)
        if not flipped.flags.c_contiguous:
            _fail(op, f"{name} must be C-contiguous (or the transpose of a "
                      f"C-contiguous array), got strides {x.strides}")
        x, transpose = flipped, not transpose
    if ndim == 2:
        x = x[None]
    return x, transpose


def _addend(op, name, x, G, M, N):
    """``c`` or ``residual`` as a C-contiguous ``(Gc, Mc, Nc)`` float32 array
    that broadcasts to ``(G, M, N)`` (scalars, rows, columns, matrices)."""
    if x is None:
        return _NO_ADDEND
    x = np.asarray(x, dtype=np.float32)
    if x.ndim > 3:
        _fail(op, f"{name} has shape {x.shape}, which has more than 3 dimensions")
    shape = (1,) * (3 - x.ndim) + x.shape
    target = (G, M, N)
    if any(got not in (1, want) for got, want in zip(shape, target)):
        want = target[1:] if G == 1 else target
        _fail(op, f"{name} of shape {x.shape} does not broadcast to the output {want}")
    return np.ascontiguousarray(x.reshape(shape))


def _bias(op, bias, N):
    if bias is None:
        return _NO_BIAS
    bias = np.ascontiguousarray(bias, dtype=np.float32)
    if bias.shape != (N,):
        _fail(op, f"bias must have shape ({N},), got {bias.shape}")
    return bias


def _activation(op, activation):
    if activation is NONE:
        return NONE
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            _fail(op, f"unknown activation {activation!r}; known: {sorted(ACTIVATIONS)}")
        return ACTIVATIONS[activation]
    code = int(activation)
    if not NONE <= code <= GELU:
        _fail(op, f"unknown activation code {code}")
    return code


#: plan_blocks results by (G, M, N, threads): computing one costs about a
#: microsecond, a few percent of a 2-thread 256^3 product's time
_PLANS = {}


def plan_blocks(G, M, N, threads):
    """Row and column blocks per product: ``(m_blocks, n_blocks)``.

    Blocks are at most ``MC`` rows and ``NC`` columns. With several threads,
    products are cut further (rows first: each row block packs its own A;
    then columns) until there are about ``_TASKS_PER_THREAD`` tasks per thread.
    """
    m_panels = -(-M // MR)
    n_panels = -(-N // NR)
    m_blocks = -(-m_panels // (MC // MR))
    n_blocks = -(-n_panels // (NC // NR))
    if threads > 1:
        want = threads * _TASKS_PER_THREAD
        if G * m_blocks * n_blocks < want:
            m_blocks = min(m_panels, max(m_blocks, -(-want // (G * n_blocks))))
            if G * m_blocks * n_blocks < want:
                n_blocks = min(n_panels, max(n_blocks, -(-want // (G * m_blocks))))
        # With few tasks, a count that the threads divide evenly: 13 equal
        # tasks on 2 threads take 7 rounds, 14 smaller ones take 7 shorter ones.
        while (G * m_blocks * n_blocks) % threads and G * m_blocks * n_blocks < 16 * threads:
            if m_blocks < m_panels:
                m_blocks += 1
            elif n_blocks < n_panels:
                n_blocks += 1
            else:
                break
    return m_blocks, n_blocks


def _run(op, a, a_t, b, b_t, a_index, b_index, out, alpha, beta, c, bias,
         residual, activation, param0, param1, threads):
    """Pick the path and call its kernel (operands already checked)."""
    G, M, N = out.shape
    K = a.shape[1] if a_t else a.shape[2]
    if G == 0 or M == 0 or N == 0:
        return
    act = _activation(op, activation)
    alpha, beta, param0, param1 = float(alpha), float(beta), float(param0), float(param1)
    macs = M * N * K
    packed = type(b) is PackedB
    if packed:
        if K == 0:  # nothing to multiply: the direct path writes the epilogue
            b, b_t, packed, b_index = _NO_B, False, False, np.zeros(G, np.int64)
        else:
            kc, b_data, b = b.kc, b.data, _NO_B
    if not packed:
        kc, b_data = KC, _NOT_PACKED
    # the direct path reads B once, in place: for tiny products and few rows
    direct = not packed and (macs <= DIRECT_MAX_MACS or M <= DIRECT_MAX_ROWS or K == 0)
    try:  # the drivers raise ValueError when out overlaps an input
        if macs * G < PARALLEL_MIN_MACS:
            threads = 1
        elif threads is None:
            threads = numba.get_num_threads()
        key = (G, 1 if direct else M, N, threads)
        plan = _PLANS.get(key)
        if plan is None:
            if len(_PLANS) >= 4096:
                _PLANS.clear()
            plan = _PLANS[key] = plan_blocks(*key)
        m_blocks, n_blocks = plan
        if direct and M == 1:
            # a matrix-vector product streams rows of B: cut it into as few
            # column blocks as there are threads, for long contiguous runs
            n_blocks = min(n_blocks, max(1, -(-threads // G)))
        if threads > 1:
            gemm_parallel(a, a_t, b, b_t, b_data, a_index, b_index, out, direct, kc,
                          m_blocks, n_blocks, alpha, beta, c, bias, residual, act,
                          param0, param1, threads)
        else:
            gemm_serial(a, a_t, b, b_t, b_data, a_index, b_index, out, direct, kc,
                        m_blocks, n_blocks, alpha, beta, c, bias, residual, act,
                        param0, param1)
    except ValueError as error:
        _fail(op, str(error))


def _check_out(op, out, shape):
    if type(out) is not np.ndarray or out.dtype != _F32:
        _fail(op, "out must be a float32 numpy array")
    if out.shape != shape:
        _fail(op, f"out has shape {out.shape}, expected {shape}")
    flags = out.flags
    if not flags.c_contiguous or not flags.writeable:
        _fail(op, "out must be C-contiguous and writeable")


def _matrix(op, name, x, transpose):
    """A 2-D operand as a C-contiguous float32 matrix and its transpose flag
    (the fast common case of :func:`_operand`)."""
    if (type(x) is np.ndarray and x.dtype is _F32 and x.ndim == 2
            and x.flags.c_contiguous):
        return x, bool(transpose)
    x, transpose = _operand(op, name, x, transpose, 2)
    return x[0], transpose


def gemm(a, b, out, *, alpha=1.0, beta=1.0, c=None, bias=None, residual=None,
         activation=NONE, param0=0.0, param1=0.0, a_transpose=False,
         b_transpose=False, threads=None):
    """``out = act(alpha * A @ B + beta * c + bias + residual)``, float32.

    * ``a``: ``(M, K)``, or ``(K, M)`` with ``a_transpose`` (A = a.T)
    * ``b``: ``(K, N)``, or ``(N, K)`` with ``b_transpose``; or a :class:`PackedB`
      of one matrix (its transpose was settled when it was packed)
    * ``out``: ``(M, N)``, C-contiguous, not overlapping any input
    * ``c``, ``residual``: anything that broadcasts to ``(M, N)`` (scalar, ``(N,)``,
      ``(M, 1)``, ``(M, N)``; converted to float32); ``bias``: ``(N,)``
    * ``activation``: a code (or name) from :mod:`.epilogue`, with ``param0``,
      ``param1``
    * ``threads``: threads to use; None asks numba (``numba.get_num_threads()``)

    ``a``, ``b`` must be float32 and C-contiguous or the transpose of a
    C-contiguous array (read through the flag, no copy). Returns ``out``.
    """
    op = "gemm"
    a2, a_t = _matrix(op, "a", a, a_transpose)
    M, K = (a2.shape[1], a2.shape[0]) if a_t else a2.shape
    packed = type(b) is PackedB
    if packed:
        if b.batch != 1:
            _fail(op, f"a packed B of {b.batch} matrices needs batched_matmul")
        if b_transpose:
            _fail(op, "b_transpose must be False with a PackedB (pack_b applied it)")
        b2, b_t, Kb, N = b, False, b.k, b.n
    else:
        b2, b_t = _matrix(op, "b", b, b_transpose)
        Kb, N = (b2.shape[1], b2.shape[0]) if b_t else b2.shape
    if Kb != K:
        _fail(op, f"inner dimensions differ: A is ({M}, {K}), B is ({Kb}, {N}) "
                  f"(a {a.shape}{' transposed' if a_transpose else ''}, "
                  f"b {b.shape}{' transposed' if b_transpose else ''})")
    _check_out(op, out, (M, N))
    if (M * N * K <= DIRECT_MAX_MACS and not packed and c is None
            and bias is None and residual is None and activation == NONE
            and alpha == 1.0):
        # tiny and plain: the shortest way through (see matmul_small)
        try:
            matmul_small(a2, a_t, b2, b_t, out)
        except ValueError as error:  # the overlap check
            _fail(op, str(error))
        return out
    c3 = _addend(op, "c", c, 1, M, N)
    r3 = _addend(op, "residual", residual, 1, M, N)
    _run(op, a2[None], a_t, b2 if packed else b2[None], b_t, _FIRST, _FIRST,
         out[None], alpha, beta, c3, _bias(op, bias, N), r3, activation, param0,
         param1, threads)
    return out


def _index(op, name, index, count, G):
    if index is None:
        if count == G:
            return np.arange(G, dtype=np.int64)
        if count == 1:
            return np.zeros(G, np.int64)
        _fail(op, f"{name} is needed: {count} matrices for {G} products")
    index = np.ascontiguousarray(index, dtype=np.int64)
    if index.shape != (G,):
        _fail(op, f"{name} must have shape ({G},), got {index.shape}")
    if G and (index.min() < 0 or index.max() >= count):
        _fail(op, f"{name} has values outside [0, {count})")
    return index


def batched_matmul(a, b, out, a_index=None, b_index=None, *, alpha=1.0, beta=1.0,
                   c=None, bias=None, residual=None, activation=NONE, param0=0.0,
                   param1=0.0, a_transpose=False, b_transpose=False, threads=None):
    """``out[g] = act(alpha * A[a_index[g]] @ B[b_index[g]] + beta * c[g] + bias +
    residual[g])`` for every ``g`` of ``out: (G, M, N)``.

    * ``a``: ``(BA, M, K)``, or ``(BA, K, M)`` with ``a_transpose``
    * ``b``: ``(BB, K, N)``, or ``(BB, N, K)`` with ``b_transpose``; or a
      :class:`PackedB` of BB matrices
    * ``a_index``, ``b_index``: ``(G,)`` ints in ``[0, BA)``, ``[0, BB)``; None means
      ``arange(G)`` when there are G matrices, zeros when there is one
    * ``c``, ``residual``: broadcast to ``(G, M, N)``; ``bias``: ``(N,)``

    This is how the runtime broadcasts batch dimensions: flatten each
    operand's batch dimensions and map every output product to the matrices it
    reads. The products run in parallel (product x row block x column block).
    Returns ``out``.
    """
    op = "batched_matmul"
    a3, a_t = _operand(op, "a", a, a_transpose, 3)
    M, K = (a3.shape[2], a3.shape[1]) if a_t else (a3.shape[1], a3.shape[2])
    if type(b) is PackedB:
        if b_transpose:
            _fail(op, "b_transpose must be False with a PackedB (pack_b applied it)")
        b3, b_t, BB, Kb, N = b, False, b.batch, b.k, b.n
    else:
        b3, b_t = _operand(op, "b", b, b_transpose, 3)
        BB = b3.shape[0]
        Kb, N = (b3.shape[2], b3.shape[1]) if b_t else (b3.shape[1], b3.shape[2])
    if Kb != K:
        _fail(op, f"inner dimensions differ: A is (.., {M}, {K}), B is (.., {Kb}, {N}) "
                  f"(a {a.shape}, b {b.shape})")
    if type(out) is not np.ndarray or out.ndim != 3:
        _fail(op, "out must be a float32 array of rank 3 (G, M, N)")
    G = out.shape[0]
    _check_out(op, out, (G, M, N))
    a_index = _index(op, "a_index", a_index, a3.shape[0], G)
    b_index = _index(op, "b_index", b_index, BB, G)
    c3 = _addend(op, "c", c, G, M, N)
    r3 = _addend(op, "residual", residual, G, M, N)
    _run(op, a3, a_t, b3, b_t, a_index, b_index, out, alpha, beta, c3,
         _bias(op, bias, N), r3, activation, param0, param1, threads)
    return out


def pack_b(b, b_transpose=False, threads=None):
    """Pack a constant right operand once: ``b: (K, N)`` or a batch
    ``(BB, K, N)`` (``(N, K)`` / ``(BB, N, K)`` with ``b_transpose``).
    Returns a :class:`PackedB` for :func:`gemm` / :func:`batched_matmul`."""
    op = "pack_b"
    if type(b) is not np.ndarray:
        _fail(op, f"b must be a float32 numpy array, got {type(b).__name__}")
    if b.ndim not in (2, 3):
        _fail(op, f"b must have rank 2 or 3, got shape {b.shape}")
    b3, b_t = _operand(op, "b", b, b_transpose, b.ndim)
    K, N = (b3.shape[2], b3.shape[1]) if b_t else (b3.shape[1], b3.shape[2])
    data = np.empty((b3.shape[0], K * (-(-N // NR)) * NR), np.float32)
    if data.size:
        if threads is None:
            threads = numba.get_num_threads() if data.size >= (1 << 18) else 1
        (pack_b_parallel if threads > 1 else pack_b_serial)(b3, b_t, KC, data)
    return PackedB(data, K, N, KC)
