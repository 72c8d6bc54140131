"""The matrix products' drivers, one per path (:func:`gemm_driver`), and the
task each runs; and :func:`matmul_small`.

Paths, chosen by ``matmul._run`` from the shape of the product: ``"gemv"``
(one row, B read in place), ``"direct"`` (few rows or a tiny product, B
read in place), ``"row"`` (one row, B packed) and ``"packed"`` (B packed,
here or beforehand). Each path's driver compiles on its own first use, so a
model compiles only the paths it runs (ResNet-50's classifier, a one-row
product on a packed B, compiled every path's code: 11 of its 43 CPU seconds
of compiling on 1 thread). A driver's threads take their tasks from shared
atomic counters (dynamic scheduling); its serial compile runs the same loop
on one thread. The tasks are standalone kernels (kernels/_linking.py), so
the serial and parallel drivers share their code.

Buffers as in the package docstring: ``a: (BA, M, K)`` (or ``(BA, K, M)``),
``b: (BB, K, N)`` (or ``(BB, N, K)``), ``out: (G, M, N)``, ``a_index``,
``b_index: (G,)``, ``c``/``residual: (Gc, Mc, Nc)``, ``bias: (N,)``, packed B
``(BB, K * N_pad)`` or ``(0, 0)``.
"""

import numpy as np
from numba import prange

from .._config import jit, parallel_kernel
from .._linking import made_by
from ..stack import atomic_add
from .blocking import MR, NR, _span1
from .packing import _pack_a_panel, _pack_b_task, _pack_b_tasks
from .tiles import (_direct_columns, _epilogue_rows, _gemv_columns, _has_epilogue,
                    _macro_kernel, _row_kernel, _tile_columns)

#: the paths of :func:`gemm_driver`
PATHS = ("gemv", "direct", "row", "packed")


@jit()
def _addends(g, c, residual):
    """Product ``g``'s C and residual (shared ones have one matrix; "none"
    is a (1, 0, 0) array, so ``c[0]`` is an empty (0, 0) matrix)."""
    return c[g if c.shape[0] > 1 else 0], residual[g if residual.shape[0] > 1 else 0]


#: "A is packed": the macro kernel's empty ``a_rows``
_NO_ROWS = np.zeros((0, 0), np.float32)


@jit(standalone=True)
def _compute_task(task, a, a_t, a_index, b_index, packed_b, out, kc_max,
                  m_blocks, n_blocks, in_place, rows_outer, alpha, beta, c, bias, residual,
                  act, param0, param1):
    """Compute one ``(product, column block, row block)`` block of ``out``
    through all of K, then run the epilogue on each of its tiles.

    Row panels are shared out evenly: row block ``ib`` of ``m_blocks`` holds
    panels ``[ib * m_panels // m_blocks, (ib + 1) * m_panels // m_blocks)``
    (the same for columns), so blocks differ by one panel at most.
    For each K-block the task packs its rows of A into a buffer that stays in
    this core's L2 while every B panel of the block streams past (Goto's loop
    order). (One-row products take :func:`_row_task`.)
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

    out_g = out[g]
    a_g = a[a_index[g]]
    pb = packed_b[b_index[g]]
    c_g, r_g = _addends(g, c, residual)
    epilogue = _has_epilogue(alpha, beta, c_g, bias, r_g, act)
    a_rows = a_g if in_place else _NO_ROWS
    a_block = np.empty((ip_end - ip_begin) * MR * min(kc_max, K), np.float32)
    n_pad = n_panels * NR
    for k0 in range(0, K, kc_max):
        kc = min(kc_max, K - k0)
        first = k0 == 0
        last = k0 + kc >= K
        for ip in range(ip_begin, ip_end):
            i0 = ip * MR
            if in_place and i0 + MR <= M:
                continue                        # read in place by the macro kernel
            start = (ip - ip_begin) * kc * MR
            _pack_a_panel(a_g, a_t, i0, min(MR, M - i0), k0, kc,
                          _span1(a_block, start, kc * MR))
        b_block = _span1(pb, k0 * n_pad, kc * n_pad)
        _macro_kernel(kc, a_block, b_block, out_g, ip_begin, ip_end, jp_begin, jp_end,
                      not first, last and epilogue, alpha, beta, c_g, bias, r_g, act,
                      param0, param1, a_rows, k0, rows_outer)


@jit(standalone=True)
def _row_task(task, a, a_t, a_index, b_index, packed_b, out, kc_max,
              m_blocks, n_blocks, alpha, beta, c, bias, residual,
              act, param0, param1):
    """:func:`_compute_task` of a one-row product: A is read in place and each
    group of panels runs through all of K at once (no packing of A, one store
    per output)."""
    G, M, N = out.shape
    K = a.shape[1] if a_t else a.shape[2]
    n_panels = (N + NR - 1) // NR
    g = task // (m_blocks * n_blocks)
    jb = (task // m_blocks) % n_blocks
    jp_begin = jb * n_panels // n_blocks
    jp_end = (jb + 1) * n_panels // n_blocks
    out_g = out[g]
    pb = packed_b[b_index[g]]
    c_g, r_g = _addends(g, c, residual)
    epilogue = _has_epilogue(alpha, beta, c_g, bias, r_g, act)
    a_row = a[a_index[g]].reshape(K)
    for jp in range(jp_begin, jp_end, 4):
        count = min(4, jp_end - jp)
        _row_kernel(a_row, pb, K, kc_max, n_panels * NR, jp, count, out_g, jp * NR)
        if epilogue:
            j0 = jp * NR
            _epilogue_rows(out_g, 0, j0, 1, min((jp + count) * NR, N) - j0, alpha, beta,
                           c_g, bias, r_g, act, param0, param1)


@jit(standalone=True)
def _direct_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks, alpha,
                 beta, c, bias, residual, act, param0, param1):
    """One ``(product, column block)`` of the direct path, then its epilogue."""
    g, jp_begin, jp_end = _column_block(task, n_blocks, out.shape[2])
    _tile_columns(a[a_index[g]], a_t, b[b_index[g]], b_t, out[g], jp_begin, jp_end)
    _direct_epilogue(out[g], g, jp_begin, jp_end, alpha, beta, c, bias, residual, act,
                     param0, param1)


@jit(standalone=True)
def _gemv_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks, alpha,
               beta, c, bias, residual, act, param0, param1):
    """:func:`_direct_task` of a one-row product (``K > 0``): a matrix-vector
    product."""
    g, jp_begin, jp_end = _column_block(task, n_blocks, out.shape[2])
    _gemv_columns(a[a_index[g]], a_t, b[b_index[g]], b_t, out[g], jp_begin, jp_end)
    _direct_epilogue(out[g], g, jp_begin, jp_end, alpha, beta, c, bias, residual, act,
                     param0, param1)


@jit()
def _column_block(task, n_blocks, N):
    """``(product, first panel, end panel)`` of a direct task: product
    ``task // n_blocks``, its column block ``task % n_blocks`` of
    ``n_blocks`` (panels shared out evenly)."""
    n_panels = (N + NR - 1) // NR
    jb = task % n_blocks
    return task // n_blocks, jb * n_panels // n_blocks, (jb + 1) * n_panels // n_blocks


@jit()
def _direct_epilogue(out_g, g, jp_begin, jp_end, alpha, beta, c, bias, residual, act,
                     param0, param1):
    """The epilogue of a direct task's columns (when there is one)."""
    M, N = out_g.shape
    c_g, r_g = _addends(g, c, residual)
    if jp_end > jp_begin and _has_epilogue(alpha, beta, c_g, bias, r_g, act):
        j0 = jp_begin * NR
        _epilogue_rows(out_g, np.int64(0), j0, M, min(jp_end * NR, N) - j0, alpha,
                       beta, c_g, bias, r_g, act, param0, param1)


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


def _make_gemm_driver(path: str):
    """The driver of ``path`` (one of :data:`PATHS`): a closure constant, so
    numba compiles that path's branch only."""
    packs = path in ("row", "packed")

    def gemm(a, a_t, b, b_t, packed_b, a_index, b_index, out, kc_max, m_blocks, n_blocks,
             in_place, rows_outer,
             alpha, beta, c, bias, residual, act, param0, param1, threads):
        if _overlaps_any(out, a, b, c, bias, residual):
            raise ValueError(_OVERLAP)
        G, M, N = out.shape
        K = a.shape[1] if a_t else a.shape[2]
        alpha32 = np.float32(alpha)
        beta32 = np.float32(beta)
        p0 = np.float32(param0)
        p1 = np.float32(param1)
        tasks = G * m_blocks * n_blocks if packs else G * n_blocks
        pack_tasks = 0
        pb = packed_b
        if packs and packed_b.shape[0] == 0:
            pb = np.empty((b.shape[0], K * ((N + NR - 1) // NR) * NR), np.float32)
            pack_tasks = _pack_b_tasks(b, b_t, N, K, kc_max)
        # One parallel region, dynamically scheduled: workers take packing
        # tasks from a shared counter, wait until every packing task is done,
        # then take product tasks. counters: [next pack task, packs done, next
        # task]. No deadlock: a worker waits only for tasks that others have
        # taken and are running, and one worker alone can do every task.
        counters = np.zeros(3, np.int64)
        workers = max(1, min(threads, max(tasks, pack_tasks)))
        for worker in prange(workers):
            if packs:
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
                if path == "gemv":
                    _gemv_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks,
                               alpha32, beta32, c, bias, residual, act, p0, p1)
                elif path == "direct":
                    _direct_task(task, a, a_t, b, b_t, a_index, b_index, out, n_blocks,
                                 alpha32, beta32, c, bias, residual, act, p0, p1)
                elif path == "row":
                    _row_task(task, a, a_t, a_index, b_index, pb, out, kc_max,
                              m_blocks, n_blocks, alpha32, beta32, c, bias,
                              residual, act, p0, p1)
                else:
                    _compute_task(task, a, a_t, a_index, b_index, pb, out, kc_max,
                                  m_blocks, n_blocks, in_place, rows_outer, alpha32, beta32,
                                  c, bias, residual, act, p0, p1)

    gemm.__qualname__ = gemm.__name__ = f"gemm_{path}"
    gemm.__doc__ = f"""GEMM on the {path} path, on ``threads`` threads (its serial
    compile on one).

    ``a``, ``b``, ``out``, ``c``, ``bias``, ``residual``, ``a_index``,
    ``b_index`` as in the module docstring; ``a_t``/``b_t`` the transpose
    flags. The gemv and direct paths run ``n_blocks`` column blocks per
    product; the row and packed paths read ``packed_b: (BB, K * N_pad)``
    packed with the same ``kc_max`` (then ``b`` is not read), or ``(0, 0)``
    to pack ``b`` here, and cut each product into ``m_blocks x n_blocks``
    blocks, one task each; the packed path's tasks read A's full row
    panels in place with ``in_place`` and run their tiles row panel by row
    panel with ``rows_outer`` (``matmul.a_in_place``, ``matmul.rows_outer``).
    ``alpha``, ``beta``, ``param0``, ``param1`` are
    float64, applied as float32; ``act`` is an activation code.
    ``threads``: how many workers take tasks (numba's thread count; passed
    in because asking numba from compiled code would make the function
    uncacheable). Raises ValueError if ``out`` overlaps an input."""
    return parallel_kernel(gemm)


_gemm_drivers: dict = {}


def gemm_driver(path: str):
    """The compiled driver of ``path`` (made once): ``.serial`` and
    ``.parallel`` compiles (kernels/_config.py, ``parallel_kernel``)."""
    driver = _gemm_drivers.get(path)
    if driver is None:
        if path not in PATHS:
            raise ValueError(f"matmul: unknown path {path!r}; known: {PATHS}")
        driver = _gemm_drivers.setdefault(
            path, made_by(gemm_driver, (path,), _make_gemm_driver(path)))
    return driver
