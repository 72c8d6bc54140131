"""The matrix products' tiles: the packed path's macro kernel (the
``MR x NR`` register tile over a task's panels) and one-row kernel, the direct
path (no packing of A) and the epilogue they apply.

Buffers, as in the package docstring (2-D views of one product):
``a: (M, K)`` or ``(K, M)``, ``b: (K, N)`` or ``(N, K)``, ``out: (M, N)``;
``c`` and ``residual``: 1 or M rows, 1 or N columns, or ``(0, 0)`` for none;
``bias: (N,)`` or ``(0,)``; packed panels as in :mod:`.packing`; the direct
path's block of B on the stack: ``block[p * _DIRECT_W + c] = B[k0 + p, j0 + c]``.
"""

import numba
from numba import literally
import numpy as np

from .._config import jit
from ..epilogue import CLAMP, GELU, LEAKY_RELU, NONE, RELU, activate
from ..stack import element_pointer, prefetch, prefetch_write, stack_empty
from ..vmath import gelu as vector_gelu
from .blocking import (MR, NR, SMALL_K, VEC, _DIRECT_BLOCK, _DIRECT_W, _GEMV_TILE, _ONE,
                       _ROW_TILE, _TILE, _ZERO, _span, _span1)


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

    gelu is vmath's (erf as one polynomial, the element-wise pass's own, so
    a fused GELU gives the bits of the separate pass). Each chunk is computed in a
    stack buffer ``t`` that nothing else can point to, so its loops vectorize
    without alias checks (working on ``out``
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
            elif act == GELU:
                for j in range(w):
                    t[j] = vector_gelu(t[j])
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


# --- the packed path ------------------------------------------------------------

#: floats in a cache line (64 bytes)
_LINE = 16
#: rows of the short tiles of a last row panel with few rows (AVX-512: 3 and 7 of 14)
_QUARTER = max(1, MR // 4)
_HALF = max(1, MR // 2)
#: cache lines a row of a B panel (NR floats) spans: 2 on AVX-512, 1 on AVX2
_ROW_LINES = max(1, NR // _LINE)

@jit()
def _macro_kernel(kc, a_block, b_block, out, ip_begin, ip_end, jp_begin, jp_end,
                  accumulate, finish, alpha, beta, c, bias, residual, act, param0,
                  param1, a_rows, k0, rows_outer):
    """One K-block of a task: every ``MR x NR`` tile of ``out`` in row panels
    ``ip_begin .. ip_end`` and column panels ``jp_begin .. jp_end``.

    ``a_block`` holds the task's packed A panels (panel ``ip`` at
    ``(ip - ip_begin) * kc * MR``), ``b_block`` the packed B K-block (panel
    ``jp`` at ``jp * kc * NR``); or, when ``a_rows`` (``(M, K)``, A itself)
    is not empty, a full row panel (``MR`` rows of ``out``) reads its K-block
    ``k0 .. k0+kc`` of A in place and only a last, partial panel comes packed
    (``matmul.a_in_place``). The tiles run column panel by column panel
    (Goto's order: a B panel stays in L1 under the row panels), or row panel
    by row panel with ``rows_outer`` (an A panel stays in L1 under the column
    panels). A tile is ``kc`` outer products of a column of
    its A panel and a row of its B panel, summed in a stack array indexed only
    by constant-trip loops, so it lives in 12 ymm registers; then it is stored
    once (``accumulate``: added to ``out``). With ``finish`` (the last
    K-block) the epilogue is applied to the registers before that store:
    ``act(alpha * (sum + out) + beta * c + bias + residual)``, arguments as in
    :func:`_epilogue_rows`. Edge tiles run the same code on zero-padded
    panels and store only their valid part.

    All the tile loops live in this one function: a call per tile, with its
    arguments and numba's reference counting, cost ~10 % at kc = 256.

    The first tile under a B panel prefetches the next panel of the block,
    a row per k-step: a model's weights are read once per run and come from
    DRAM, and without it each panel's first tile waited for its B (GEMMs on
    16 cold weights, 1 thread: 2-6 % faster; products of 4 to 16 rows, whose
    one short tile per panel did not prefetch, up to 30 %).
    """
    M, N = out.shape
    acc = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
    edge = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
    use_c = c.shape[0] > 0 and beta != _ZERO
    prefetch_r = residual.shape[0] > 1 and residual.shape[1] > 1   # a matrix, not a row
    in_place = a_rows.shape[0] > 0
    n_jp = jp_end - jp_begin
    n_ip = ip_end - ip_begin
    for t in range(n_jp * n_ip):
        if rows_outer:
            # each A panel stays in L1 while the task's B panels stream past
            # from L2 (where they all fit)
            ip = ip_begin + t // n_jp
            jp = jp_begin + t % n_jp
        else:
            # Goto's order: each B panel stays in L1 while the A panels stream past
            jp = jp_begin + t // n_ip
            ip = ip_begin + t % n_ip
        bpanel = _span1(b_block, jp * kc * NR, kc * NR)
        j0 = jp * NR
        n = min(NR, N - j0)
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
        if finish and prefetch_r:
            # and the residual tile that the epilogue adds: its rows were
            # written steps before (a transformer's skip connection) and
            # have left the caches by the time the tile is done; read
            # then, a line per row at a time, BERT's output projection
            # (128 x 768 x 768 + bias + residual) took 1.77 ms instead of
            # 1.52 ms with a bias only
            for i in range(MR):
                r_i = min(i0 + i, residual.shape[0] - 1)
                prefetch(residual, (r_i, j0))
                prefetch(residual, (r_i, j0 + NR - 1))
        # The first tile under a B panel fetches the next panel (every line
        # of it, a row of NR floats per k-step), so that it is in cache when
        # its own tiles run: a model's weights are read once per run and come
        # cold from DRAM. Every tile height does, so that a product of few
        # rows (one short tile per panel) streams its B as well.
        fetch = ip == ip_begin and jp + 1 < jp_end
        ahead = _span1(b_block, (jp + 1 if fetch else jp) * kc * NR, kc * NR)
        if in_place and m == MR:
            # A's rows as they are (one K-block of MR rows, row stride K):
            # the same loads as from a packed panel, without the packing
            rows = numba.carray(element_pointer(a_rows, (i0, k0)), (MR, a_rows.shape[1]))
            for p in range(kc):
                if fetch:
                    for q in range(_ROW_LINES):
                        prefetch(ahead, (p * NR + q * _LINE,))
                for i in range(MR):
                    a_ip = rows[i, p]
                    for j in range(NR):
                        acc[i, j] += a_ip * bpanel[p * NR + j]
        elif m <= _QUARTER:
            # the last row panel of a product whose rows leave a few
            # (M = 128 leaves 2 of 14, 49 leaves 7): a tile of that many
            # rows at most, not MR (the other rows of acc stay zero and
            # are not stored)
            for p in range(kc):
                if fetch:
                    for q in range(_ROW_LINES):
                        prefetch(ahead, (p * NR + q * _LINE,))
                for i in range(_QUARTER):
                    a_ip = apanel[p * MR + i]
                    for j in range(NR):
                        acc[i, j] += a_ip * bpanel[p * NR + j]
        elif m <= _HALF:
            for p in range(kc):
                if fetch:
                    for q in range(_ROW_LINES):
                        prefetch(ahead, (p * NR + q * _LINE,))
                for i in range(_HALF):
                    a_ip = apanel[p * MR + i]
                    for j in range(NR):
                        acc[i, j] += a_ip * bpanel[p * NR + j]
        else:
            for p in range(kc):
                if fetch:
                    for q in range(_ROW_LINES):
                        prefetch(ahead, (p * NR + q * _LINE,))
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
        if finish:
            # The epilogue on acc in the registers, one step at a time
            # over the whole tile: each loop nest has constant trip counts
            # and a small body, so it unrolls and acc stays in registers;
            # the branches are outside the loops. (As one loop over the
            # rows with every step's branch inside, the loop stayed a loop
            # and acc went through memory, each row cut into odd vector
            # pieces: at K = 16, 197 x 768 tiles took 125 ns more with a
            # bias and 190 ns more again with a residual.) The same
            # operations in the same order as before: the same bits.
            if accumulate:
                for i in range(MR):
                    row = _span(out, i0 + i, j0, NR)
                    for j in range(NR):
                        acc[i, j] += row[j]
            if alpha != _ONE:
                for i in range(MR):
                    for j in range(NR):
                        acc[i, j] *= alpha
            if use_c:
                if c.shape[1] > 1:
                    for i in range(MR):
                        part = _span(c, min(i0 + i, c.shape[0] - 1), j0, NR)
                        for j in range(NR):
                            acc[i, j] += beta * part[j]
                else:
                    for i in range(MR):
                        value = beta * c[min(i0 + i, c.shape[0] - 1), 0]
                        for j in range(NR):
                            acc[i, j] += value
            if bias.shape[0] > 0:
                part = _span1(bias, j0, NR)
                for i in range(MR):
                    for j in range(NR):
                        acc[i, j] += part[j]
            if residual.shape[0] > 0:
                if residual.shape[1] > 1:
                    for i in range(MR):
                        part = _span(residual, min(i0 + i, residual.shape[0] - 1), j0, NR)
                        for j in range(NR):
                            acc[i, j] += part[j]
                else:
                    for i in range(MR):
                        value = residual[min(i0 + i, residual.shape[0] - 1), 0]
                        for j in range(NR):
                            acc[i, j] += value
            if act == RELU:
                for i in range(MR):
                    for j in range(NR):
                        acc[i, j] = max(acc[i, j], _ZERO)
            elif act == CLAMP:
                for i in range(MR):
                    for j in range(NR):
                        acc[i, j] = min(max(acc[i, j], param0), param1)
            elif act == LEAKY_RELU:
                for i in range(MR):
                    for j in range(NR):
                        x = acc[i, j]
                        acc[i, j] = x if x >= _ZERO else param0 * x
        # Store through zero-based views of the rows: out[i0 + i, j0 + j]
        # would check j0 + j for negative wraparound on every element and
        # stay scalar.
        for i in range(MR):
            row = _span(out, i0 + i, j0, NR)
            if accumulate and not finish:
                for j in range(NR):
                    row[j] += acc[i, j]
            else:
                for j in range(NR):
                    row[j] = acc[i, j]
        if not finish:
            continue
        if act != NONE and act != GELU and act != RELU and act != CLAMP \
                and act != LEAKY_RELU:
            # the other activations (a call each) over the stored tile,
            # in place, as gelu below: a call per element inside the
            # unrolled tile would keep acc in memory
            for i in range(MR):
                row = _span(out, i0 + i, j0, NR)
                for j in range(np.uint64(n)):
                    row[j] = activate(row[j], act, param0, param1)
        if act == GELU:
            # over the stored tile, in place, row by row: a loop of n (=
            # NR) steps, not a constant trip count (unrolled over the
            # registers, the 32 copies of gelu made the fused 3136 x 96 x
            # 384 take 2.5x the GEMM and the pass), reading and writing
            # one array (from the stack tile into out, row by row as the
            # tile was stored, it cost twice as much: 128 x 3072 x 768
            # with a bias, 1 thread, 0.57 ms over the GEMM's 5.7, now
            # 0.28 ms, where the separate pass takes 0.49 ms)
            for i in range(MR):
                row = _span(out, i0 + i, j0, NR)
                for j in range(np.uint64(n)):
                    row[j] = vector_gelu(row[j])


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


# --- the direct path ------------------------------------------------------------

#: the rows of the direct path's tiles for a product's last few rows
_HALF_MR = max(1, MR // 2)
_QUARTER_MR = max(1, MR // 4)

#: floats of the direct path's stack panel for a last tile's rows of A
_A_PANEL = MR * SMALL_K


@jit()
def _small_tile(a, a_t, i0, M, k0, kc, bview, out, j0, n, accumulate, rows):
    """One ``rows x NR`` tile of the direct path (``rows``: ``MR``, or
    ``_HALF_MR`` for a last tile of few rows), reading A in place:
    ``out[i0:i0+rows, j0:j0+n] (+)= A[i0:i0+rows, k0:k0+kc] @ B-rows``, the
    tile's rows all inside A (:func:`_edge_tile` runs a last tile that is
    not). ``a_t``: ``a`` is ``(K, M)``, a column of the tile one run of
    ``rows`` floats.

    ``bview[p * _DIRECT_W + j]`` is ``B[k0 + p, j0 + j]`` (a zero-based view
    into the row block of :func:`_direct_columns`). The loops keep constant
    trip counts (``rows`` is a compile-time constant) and index the
    accumulator by constants only, so it lives in registers; A is read
    through a view at the tile's first row, so every row is one stride from
    the last (a clamped row index per row, as a tile crossing M needs, took
    a register per row and spilled: 14 x 196 x 32 ran at 40 % of the same
    tile's speed alone).
    """
    literally(rows)
    acc = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
    for i in range(rows):
        for j in range(NR):
            acc[i, j] = _ZERO
    if a_t:
        for p in range(kc):
            a_col = _span(a, k0 + p, i0, rows)
            for i in range(rows):
                a_ip = a_col[i]
                for j in range(NR):
                    acc[i, j] += a_ip * bview[p * _DIRECT_W + j]
    else:
        a_rows = numba.carray(element_pointer(a, (i0, k0)), (rows, a.shape[1]))
        for p in range(kc):
            for i in range(rows):
                a_ip = a_rows[i, p]
                for j in range(NR):
                    acc[i, j] += a_ip * bview[p * _DIRECT_W + j]
    if n == NR:
        for i in range(rows):
            row = _span(out, i0 + i, j0, NR)
            if accumulate:
                for j in range(NR):
                    row[j] += acc[i, j]
            else:
                for j in range(NR):
                    row[j] = acc[i, j]
    else:
        # through a second stack tile: a runtime column count indexing acc
        # would keep all of it in memory
        edge = numba.carray(stack_empty(_TILE, np.float32), (MR, NR))
        for i in range(rows):
            for j in range(NR):
                edge[i, j] = acc[i, j]
        for i in range(rows):
            row = _span(out, i0 + i, j0, n)
            for j in range(n):
                if accumulate:
                    row[j] += edge[i, j]
                else:
                    row[j] = edge[i, j]


@jit()
def _edge_tile(a, a_t, i0, M, k0, kc, bview, out, j0, n, accumulate, rows, panel, stage):
    """:func:`_small_tile` for a last tile whose ``rows`` cross ``M``: its
    ``M - i0`` rows of A copied into ``panel`` (``(rows, kc)``, zeros
    below), the tile run on that into ``stage`` (``(rows, NR)``), and the
    real rows copied out."""
    literally(rows)
    m = M - i0
    a_rows = numba.carray(element_pointer(panel, (0,)), (rows, kc))
    for i in range(rows):
        dst = _span(a_rows, i, 0, kc)
        if i >= m:
            for p in range(kc):
                dst[p] = _ZERO
        elif a_t:
            for p in range(kc):
                dst[p] = a[k0 + p, i0 + i]
        else:
            src = _span(a, i0 + i, k0, kc)
            for p in range(kc):
                dst[p] = src[p]
    tile_out = numba.carray(element_pointer(stage, (0,)), (rows, NR))
    if accumulate:
        for i in range(m):
            src = _span(out, i0 + i, j0, n)
            for j in range(n):
                tile_out[i, j] = src[j]
    _small_tile(a_rows, False, 0, rows, 0, kc, bview, tile_out, 0, NR, accumulate, rows)
    for i in range(m):
        dst = _span(out, i0 + i, j0, n)
        for j in range(n):
            dst[j] = tile_out[i, j]


@jit()
def _copy_panel(dst, src):
    """``dst[:NR] = src[:NR]``: a constant length, so vector moves where a
    row of another length became a call to memmove (256 rows of 17 floats
    took 2.4 us against 0.7 for 32)."""
    for c in range(NR):
        dst[c] = src[c]


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
    M = out.shape[0]
    K = a.shape[0] if a_t else a.shape[1]
    if M == 1 and K > 0:
        _gemv_columns(a, a_t, b, b_t, out, jp_begin, jp_end)
    else:
        _tile_columns(a, a_t, b, b_t, out, jp_begin, jp_end)


@jit()
def _tile_columns(a, a_t, b, b_t, out, jp_begin, jp_end):
    """:func:`_direct_columns` in ``MR x NR`` tiles (any product, ``K == 0``
    included: zeros)."""
    M, N = out.shape
    K = a.shape[0] if a_t else a.shape[1]
    col_begin = jp_begin * NR
    col_end = min(jp_end * NR, N)
    if K == 0:
        for i in range(M):
            row = _span(out, i, col_begin, col_end - col_begin)
            for j in range(col_end - col_begin):
                row[j] = _ZERO
        return
    block = numba.carray(stack_empty(_DIRECT_BLOCK, np.float32), (_DIRECT_BLOCK,))
    panel = numba.carray(stack_empty(_A_PANEL, np.float32), (_A_PANEL,))
    stage = numba.carray(stack_empty(_TILE, np.float32), (_TILE,))
    b_floats = b.shape[0] * b.shape[1]
    full_rows = M // MR * MR
    for k0 in range(0, K, SMALL_K):
        kc = min(SMALL_K, K - k0)
        for j0 in range(col_begin, col_end, _DIRECT_W):
            width = min(_DIRECT_W, col_end - j0)
            panels = (width + NR - 1) // NR
            for p in range(kc):
                row = _span1(block, p * _DIRECT_W, _DIRECT_W)
                if not b_t and (k0 + p) * N + j0 + panels * NR <= b_floats:
                    # whole panels, the last reading on into the next row of
                    # B (those columns are computed but never stored)
                    for q in range(panels):
                        _copy_panel(_span1(row, q * NR, NR),
                                    numba.carray(element_pointer(b, (k0 + p, j0 + q * NR)), NR))
                    continue
                if b_t:
                    for c in range(width):
                        row[c] = b[j0 + c, k0 + p]
                else:
                    src = _span(b, k0 + p, j0, width)
                    for c in range(width):
                        row[c] = src[c]
                # (zeros to the end of the last panel only: the tiles read no further)
                for c in range(width, panels * NR):
                    row[c] = _ZERO
            for q in range(0, width, NR):
                bview = _span1(block, q, _DIRECT_BLOCK - q)
                n = min(NR, width - q)
                for i0 in range(0, full_rows, MR):
                    _small_tile(a, a_t, i0, M, k0, kc, bview, out, j0 + q, n, k0 > 0, MR)
                if full_rows < M:
                    # the last rows: a quarter or half a tile when that holds
                    # them (16 rows: 14 + 2)
                    if M - full_rows <= _QUARTER_MR:
                        _edge_tile(a, a_t, full_rows, M, k0, kc, bview, out, j0 + q, n,
                                   k0 > 0, _QUARTER_MR, panel, stage)
                    elif M - full_rows <= _HALF_MR:
                        _edge_tile(a, a_t, full_rows, M, k0, kc, bview, out, j0 + q, n,
                                   k0 > 0, _HALF_MR, panel, stage)
                    else:
                        _edge_tile(a, a_t, full_rows, M, k0, kc, bview, out, j0 + q, n,
                                   k0 > 0, MR, panel, stage)


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
