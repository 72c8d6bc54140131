"""The matrix products' drivers: :func:`gemm_serial`, :func:`gemm_parallel`
(dynamic scheduling over shared atomic counters) and :func:`matmul_small`,
and the task each runs.

Buffers as in the package docstring: ``a: (BA, M, K)`` (or ``(BA, K, M)``),
``b: (BB, K, N)`` (or ``(BB, N, K)``), ``out: (G, M, N)``, ``a_index``,
``b_index: (G,)``, ``c``/``residual: (Gc, Mc, Nc)``, ``bias: (N,)``, packed B
``(BB, K * N_pad)`` or ``(0, 0)``.
"""

import numpy as np
from numba import prange

from .._config import jit
from ..stack import atomic_add
from .blocking import MR, NR, _span1
from .packing import _pack_a_panel, _pack_b_task, _pack_b_tasks
from .tiles import _direct_columns, _epilogue_rows, _has_epilogue, _macro_kernel, _row_kernel


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
