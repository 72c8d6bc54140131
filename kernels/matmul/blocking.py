"""The matrix products' register tile and cache blocks, and the unchecked
views every kernel indexes through.

Buffers, as in the package docstring: ``a: (BA, M, K)``, ``b: (BB, K, N)``,
``out: (G, M, N)``; packed B ``(BB, K * N_pad)``, ``N_pad = ceil(N / NR) * NR``;
a task's packed A block ``(row panels, kc, MR)``; a tile ``(MR, NR)`` on the stack.
"""

import os

import numba
import numpy as np

from .._config import VECTOR_LANES, VECTOR_REGISTERS, jit
from ..stack import element_pointer

#: float32 lanes in one SIMD register of the target (8 on AVX2, 16 on
#: AVX-512, 4 on SSE and NEON)
VEC = VECTOR_LANES
#: vector registers the ISA has (ymm0-15 on AVX2, zmm0-31 on AVX-512, xmm0-15
#: on SSE, v0-31 on AArch64)
_REGISTERS = VECTOR_REGISTERS
#: micro-tile columns: two vectors per row, so each A broadcast feeds two FMAs
NR = 2 * VEC
_NR_VECTORS = NR // VEC
#: micro-tile rows: as many as fit beside the B row and one A broadcast
#: (AVX2, SSE: (16 - 2 - 1) // 2 = 6; AVX-512, NEON: (32 - 2 - 1) // 2 = 14)
MR = (_REGISTERS - _NR_VECTORS - 1) // _NR_VECTORS
_TILE = MR * NR  # size of the stack accumulator (a literal for stack_empty)


def _cache_size(level: int, default: int) -> int:
    """Bytes of the level-``level`` data (or unified) cache of one core:
    from Linux's sysfs, else ``os.sysconf`` (CPython often lacks the
    ``SC_LEVEL*`` names), else ``default``."""
    root = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for index in sorted(os.listdir(root)):
            path = os.path.join(root, index)
            with open(os.path.join(path, "level")) as f:
                found = int(f.read())
            with open(os.path.join(path, "type")) as f:
                kind = f.read().strip()
            if found == level and kind in ("Data", "Unified"):
                with open(os.path.join(path, "size")) as f:
                    text = f.read().strip().upper()
                scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
                size = int(text.rstrip("KMG")) * scale
                if size > 0:
                    return size
    except (OSError, ValueError):
        pass
    try:
        size = os.sysconf(f"SC_LEVEL{level}_{'D' if level == 1 else ''}CACHE_SIZE")
    except (ValueError, OSError):
        size = 0
    return size if size and size > 0 else default


_L1D = _cache_size(1, 32 * 1024)
_L2 = _cache_size(2, 512 * 1024)

#: float32 lanes of a cache line (64 bytes), and the lines a B panel row of NR
#: floats spans: 1 on AVX2, 2 on AVX-512 (at least 1: SSE, NEON)
_LINE_FLOATS = 16
_NR_LINES = max(1, NR // _LINE_FLOATS)
#: K-block depth at most: as many k-steps as L1d has 64-byte lines (512 for
#: 32 KiB), at most 512, times the lines of a B panel row. On AVX2 a row is
#: one line, so the B panel (KC x NR) fills L1d; on AVX-512 it is two, the
#: panel streams from L2 either way, which has the bandwidth for it (128 bytes
#: per 28 FMAs), and a deeper block means fewer passes over the output tiles
#: (each pass loads and stores every tile of the task once) and fewer calls
#: per tile. The panel is kept to an eighth of L2 (128 KiB of 1 MiB).
#: AVX2, 1024^3, 1 thread: KC = 256 0.90x OpenBLAS, 512 0.93-0.95x, 768 no
#: better. AVX-512 at half width (Zen 4, MR x NR = 14 x 32, 1 MiB L2), 1
#: thread, best of rounds alternated with OpenBLAS in one process, KC = 256 ->
#: 512: 512^3 1.00 -> 1.02x, 1024^3 1.00 -> 1.04x, 2048^3 1.02 -> 1.06x; then
#: KC = 512 -> 1024 (MC 336 -> 168), thread CPU time, best of 15 rounds
#: alternated in one process (shared host): 1024^3 99.7 -> 102.6 GFLOP/s,
#: 2048^3 105.1 -> 108.3, 336 x 1024 x 1024 96.4 -> 101.9; at BERT's and
#: ViT's shapes (with a bias) 128 x 2304 x 768 100.1 -> 105.5, 128 x 3072 x
#: 768 97.0 -> 105.7, 197 x 768 x 3072 99.9 -> 101.2, 197 x 2304 x 768
#: 98.2 -> 102.6 (K = 768 was a block of 512 and one of 256).
KC = max(16, min(512 * _NR_LINES, _L1D // 64 * _NR_LINES, _L2 // 8 // (NR * 4)))
#: rows per task at most: the packed A block (MC x KC) takes two thirds of L2,
#: leaving room for the B panel and output tiles passing through.
#: 512 KiB L2, KC = 512: MC = 168 (336 KiB); 96 and 240 measured the same.
#: 1 MiB, KC = 512, MR = 14: MC = 336; 672 measured no better; KC = 1024:
#: MC = 168, 168 and 336 measured the same (1 thread, M = 197 .. 2048).
MC = max(MR, ((_L2 * 2 // 3) // (KC * 4)) // MR * MR)
#: columns per task at most: a B block (KC x NC, 8 MiB) stays in the L3 while
#: the row blocks that share it run. 4080 is BLIS's value (a multiple of NR).
NC = max(NR, 4080 // NR * NR)

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



def k_block(K: int) -> int:
    """The K-block depth of a product with ``K`` k-steps: ``K`` cut into the
    fewest blocks of at most :data:`KC`, all of one depth (the last one
    shorter by fewer k-steps than there are blocks), so that no short last
    block makes a pass over the output tiles for little work: K = 1536 in two
    blocks of 768, not 1024 and 512 (K = 768 with KC = 512: two of 384)."""
    if K <= KC:
        return max(1, K)
    blocks = -(-K // KC)
    return -(-K // blocks)


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
