"""Transposes of plain float32 tensors that swap two groups of axes.

Buffers (float32, C-contiguous, flat views):

* input ``x: (B, I, J, K)``
* output ``out: (B, J, I, K)``, ``out[b, j, i, k] = x[b, i, j, k]``

Most transposes in networks are this one once adjacent axes that stay
adjacent are merged (:func:`swap_dims`): tokens to channels ``(B, N, C) ->
(B, C, N)`` (K = 1), heads ``(B, S, H, D) -> (B, H, S, D)`` (K = D),
NCHW to NHWC ``(B, C, H*W) -> (B, H*W, C)``. With K = 1 the kernel moves
8 x 8 tiles through registers (:func:`.simd.transpose_tile`: eight row
loads, shuffles, eight row stores), the edges element by element; with K >
1 each ``(i, j)`` moves a contiguous row of K floats. numpy's copy of a
transposed view reads one of the two sides with a stride of J floats:
(1, 3136, 32) -> (1, 32, 3136) 171 us there, ~25 us here (1 thread, Zen 4).

Tasks are bands of 8 rows ``i`` of one ``b``, split into contiguous
ranges, one per thread.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._config import jit
from .simd import transpose_tile

#: the register tile (8 x 8 floats: one vector per row on AVX2, half of one on AVX-512)
TILE = 8
#: below this many elements run on one thread
_PARALLEL_MIN = 65536

_transpose8 = transpose_tile(TILE)


@jit(standalone=True)
def _swap_bands(xf, outf, I, J, K, first, last):
    """Bands ``[first, last)`` (band ``t``: rows ``i`` in ``[8 (t % bands), +8)``
    of ``b = t // bands``) of :func:`transpose_swap`."""
    bands = (I + TILE - 1) // TILE
    full_cols = J - J % TILE
    for task in range(first, last):
        b = task // bands
        i0 = (task % bands) * TILE
        rows = min(TILE, I - i0)
        x0 = b * I * J * K
        o0 = b * J * I * K
        if K == 1:
            if rows == TILE:
                for j0 in range(0, full_cols, TILE):
                    _transpose8(xf, x0 + i0 * J + j0, J, outf, o0 + j0 * I + i0, I)
                first_col = full_cols
            else:
                first_col = 0
            for j in range(first_col, J):
                for i in range(i0, i0 + rows):
                    outf[np.uint64(o0 + j * I + i)] = xf[np.uint64(x0 + i * J + j)]
            if rows == TILE:
                continue
        else:
            for i in range(i0, i0 + rows):
                for j in range(J):
                    s = x0 + (i * J + j) * K
                    d = o0 + (j * I + i) * K
                    for k in range(K):
                        outf[np.uint64(d + k)] = xf[np.uint64(s + k)]


@jit(parallel=True)
def _swap_parallel(xf, outf, I, J, K, tasks, groups):
    """``groups`` contiguous ranges of the ``tasks`` bands, in parallel."""
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _swap_bands(xf, outf, I, J, K, first, last)


def swap_dims(shape: tuple, perm: tuple) -> tuple[int, int, int, int] | None:
    """``(B, I, J, K)`` when transposing a C-contiguous array of ``shape`` by
    ``perm`` is :func:`transpose_swap` on it, else None (the identity, or a
    permutation that moves more than two groups of axes)."""
    # drop size-1 axes (they move nothing), then merge runs of axes that stay
    # adjacent and in order
    kept = [a for a in range(len(shape)) if shape[a] != 1]
    position = {a: p for p, a in enumerate(kept)}
    sizes_kept = [int(shape[a]) for a in kept]
    order = [position[a] for a in perm if shape[a] != 1]
    groups: list[list[int]] = []
    for a in order:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    sizes = {g[0]: int(np.prod([sizes_kept[a] for a in g])) for g in groups}
    firsts = sorted(sizes)                       # the groups in input order
    out_order = [firsts.index(g[0]) for g in groups]
    n = len(out_order)
    if n < 2 or not kept:
        return None
    dims = [sizes[f] for f in firsts]
    # input groups (B?, I, J, K?) in output order (B?, J, I, K?)
    for lead in (0, 1):
        for tail in (0, 1):
            if lead + 2 + tail != n:
                continue
            want = list(range(lead)) + [lead + 1, lead] + [lead + 2] * tail
            if out_order == want:
                B = dims[0] if lead else 1
                K = dims[-1] if tail else 1
                return B, dims[lead], dims[lead + 1], K
    return None


def transpose_swap(x: np.ndarray, out: np.ndarray, dims: tuple, threads: int) -> None:
    """``out[b, j, i, k] = x[b, i, j, k]`` for ``dims = (B, I, J, K)`` (see
    :func:`swap_dims`) on float32 C-contiguous ``x`` and ``out`` of ``B * I *
    J * K`` elements each that do not overlap. Raises ValueError otherwise."""
    kernel, args = bind_transpose_swap(x, out, dims, threads)
    kernel(*args)


def bind_transpose_swap(x: np.ndarray, out: np.ndarray, dims: tuple, threads: int):
    """``(kernel, args)``: ``kernel(*args)`` runs :func:`transpose_swap` on these
    arrays (checked here, once) on ``threads`` threads."""
    B, I, J, K = (int(d) for d in dims)
    for name, a in (("x", x), ("out", out)):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous:
            raise ValueError(f"transpose: {name} must be a C-contiguous float32 numpy array, "
                             f"got {getattr(a, 'dtype', type(a).__name__)}")
        if min(B, I, J, K) < 1 or a.size != B * I * J * K:
            raise ValueError(f"transpose: {name} has {a.size} elements, expected "
                             f"{B} x {I} x {J} x {K}")
    if np.may_share_memory(x, out):
        raise ValueError("transpose: out overlaps x")
    tasks = B * ((I + TILE - 1) // TILE)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if threads == 1 or tasks == 1 or x.size < _PARALLEL_MIN:
        return _swap_bands, (xf, outf, I, J, K, 0, tasks)
    return _swap_parallel, (xf, outf, I, J, K, tasks, min(tasks, threads))
