"""Packing A and B into the panels the register tile reads.

Buffers (float32; ``b: (K, N)`` or ``(N, K)`` when transposed, per matrix):

* a B panel (columns ``j0 .. j0+NR``, K-block ``k0 .. k0+kc``):
  ``bpanel[p * NR + c] = B[k0 + p, j0 + c]``, zero past N
* packed B: ``packed_b: (BB, K * N_pad)``; K-block ``[k0, k0 + kc)`` starts at
  ``k0 * N_pad`` and holds its column panels one after another, panel ``jp``
  at ``k0 * N_pad + jp * kc * NR``
* an A panel (rows ``i0 .. i0+MR``): ``apanel[p * MR + r] = A[i0 + r, k0 + p]``,
  zero past M; packed through a stack tile ``t: (MR, _PACK_A_COLS)``,
  ``t[r, j] = A[i0 + r, k0 + p0 + j]``

Transposed operands only change the order in which packing reads them.
"""

import numba
import numpy as np
from numba import prange

from .._config import jit
from ..stack import stack_empty
from .blocking import MR, NR, _ZERO, _span, _span1


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
        if b_t and n == NR:
            # a full panel through a stack tile of _PACK_BT_COLS columns of
            # each of its NR rows of b (as A's panels: see _pack_a_panel)
            t = numba.carray(stack_empty(_BT_TILE, np.float32), (NR, _PACK_BT_COLS))
            k_tiles = kc // _PACK_BT_COLS * _PACK_BT_COLS
            for p0 in range(0, k_tiles, _PACK_BT_COLS):
                for c in range(NR):
                    src = _span(b, j0 + c, k0 + p0, _PACK_BT_COLS)
                    for j in range(_PACK_BT_COLS):
                        t[c, j] = src[j]
                out = _span1(panel, p0 * NR, _PACK_BT_COLS * NR)
                for j in range(_PACK_BT_COLS):
                    for c in range(NR):
                        out[j * NR + c] = t[c, j]
            for p in range(k_tiles, kc):
                for c in range(NR):
                    panel[p * NR + c] = b[j0 + c, k0 + p]
        elif b_t:
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


#: columns of A that :func:`_pack_a_panel` copies through its stack tile at
#: once: 8 for panels of 14 rows (AVX-512, NEON), 32 for 6 (AVX2, SSE). All
#: panels of a 256^2 A, 1 thread, best of 300 (Zen 4): 14 rows, 8 / 16 / 32
#: columns 21 / 23 / 23 us (1024^2: 393 / 428 / 427); 6 rows 31 / 33 / 12 us
#: (row by row, before: 19)
_PACK_A_COLS = 8 if MR >= 8 else 32
_A_TILE = MR * _PACK_A_COLS  # the tile's size (a literal for stack_empty)


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
    elif m == MR:
        # A full panel, _PACK_A_COLS columns at a time: one contiguous run of
        # each row into a stack tile, then the tile's columns out as
        # contiguous runs of MR floats. Row by row (a store every 4 * MR
        # bytes) took twice as long; column by column (MR loads from rows
        # that, with a row length of 4 KiB, all fall in one L1 set) slowed
        # down at 1024 columns. All panels of A, KC = 256, AVX-512 (MR = 14),
        # 1 thread, best of 200: 256^2 41 -> 21 us, 512^2 154 -> 82 us,
        # 1024^2 608 -> 393 us; that is 12 % of a 256^3 product's time before.
        # AVX2 (MR = 6, 32 columns), KC = 512: 256^2 19 -> 12 us.
        t = numba.carray(stack_empty(_A_TILE, np.float32), (MR, _PACK_A_COLS))
        k_tiles = kc // _PACK_A_COLS * _PACK_A_COLS
        for p0 in range(0, k_tiles, _PACK_A_COLS):
            for r in range(MR):
                src = _span(a, i0 + r, k0 + p0, _PACK_A_COLS)
                for j in range(_PACK_A_COLS):
                    t[r, j] = src[j]
            out = _span1(dst, p0 * MR, _PACK_A_COLS * MR)
            for j in range(_PACK_A_COLS):
                for r in range(MR):
                    out[j * MR + r] = t[r, j]
        for p in range(k_tiles, kc):
            for r in range(MR):
                dst[p * MR + r] = a[i0 + r, k0 + p]
    else:
        for r in range(m):
            src = _span(a, i0 + r, k0, kc)
            for p in range(kc):
                dst[p * MR + r] = src[p]
        for r in range(m, MR):
            for p in range(kc):
                dst[p * MR + r] = _ZERO


#: columns of a transposed B (its rows' elements) that :func:`_pack_b_panels`
#: copies through its stack tile at once. pack_b of an n x n transposed B,
#: 1 thread, best of 200 (Zen 4), column by column before -> tiles of 4 / 8 /
#: 16: AVX-512 (NR = 32) 256: 39 -> 21 / 27 / 25 us, 512: 180 -> 115 / 131 /
#: 111 us, 1024: 726 -> 694 / 744 / 603 us; AVX2 (NR = 16), 16 columns:
#: 256 22 -> 24 us, 512 114 -> 87 us, 1024 427 -> 408 us (32: the same)
_PACK_BT_COLS = 16
_BT_TILE = NR * _PACK_BT_COLS  # the tile's size (a literal for stack_empty)

#: column panels packed by one task of the B-packing drivers: 4, so that a
#: 256-column B (8 panels of 32, AVX-512) is two tasks and both threads pack
#: (with 8, one packed while the other waited)
_PACK_GROUP = 4
#: column panels that :func:`_pack_b_panels` copies row by row together
_PACK_RUN = 4


@jit(standalone=True)
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
