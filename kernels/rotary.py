"""Rotary position embedding (RoPE) in the "rotate half" form that Llama,
Mistral, Qwen, Gemma and GPT-NeoX export: ``out = x * cos + rotate_half(x)
* sin`` with ``rotate_half(x) = concat(-x[..., h:], x[..., :h])``, ``h = D / 2``.

Buffers (float32, C-contiguous):

* :func:`rotary_rows`: ``x, out: (M, D)``, ``D`` even; ``cos, sin: (R, D)``
  with ``M % R == 0``: row ``m`` of ``out`` takes row ``m % R`` of the tables
  (a ``(B, H, S, D)`` query with ``(S, D)`` tables is ``M = B * H * S``,
  ``R = S``). With ``heads = H > 0`` and ``seq = S``, ``x`` holds the rows
  in ``(B, S, H)`` order (the head split before the exporters'
  ``Transpose(0, 2, 1, 3)``) and ``out`` in ``(B, H, S)`` order: the
  transpose is done by the row index, not by a copy.

Each output element is ``x[d] * cos[d] - x[d + h] * sin[d]`` (first half) or
``x[d] * cos[d] + x[d - h] * sin[d]`` (second half): the exported chain's
two products and sum (its ``Neg`` is exact), one pass over the row instead
of seven ops (two slices, a negation, a concatenation, two products and the
sum), each a launch and a pass over the data. Parallel over rows in
contiguous ranges, one per thread; small inputs run serially.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._config import jit, numba_threads

#: below this many elements run serially (a parallel region costs more than the pass)
_PARALLEL_MIN = 32768


@jit(standalone=True)
def _rows(xf, cf, sf, outf, R, D, heads, seq, first, last):
    h = D // 2
    for row in range(first, last):
        base = row * D
        source = base
        if heads > 0:               # out row (b, hd, s) reads x row (b, s, hd)
            s = row % seq
            hd = (row // seq) % heads
            source = ((row // (seq * heads) * seq + s) * heads + hd) * D
        table = (row % R) * D
        for d in range(h):
            a = xf[np.uint64(source + d)]
            b = xf[np.uint64(source + h + d)]
            outf[np.uint64(base + d)] = a * cf[np.uint64(table + d)] \
                - b * sf[np.uint64(table + d)]
            outf[np.uint64(base + h + d)] = b * cf[np.uint64(table + h + d)] \
                + a * sf[np.uint64(table + h + d)]


@jit(parallel=True)
def _rows_parallel(xf, cf, sf, outf, R, D, heads, seq, rows, groups):
    for g in prange(groups):
        first, last = np.int64(g) * rows // groups, (np.int64(g) + 1) * rows // groups
        _rows(xf, cf, sf, outf, R, D, heads, seq, first, last)


def _check(what: str, a, ndim: int) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"rotary: {what} must be a float32 numpy array, got "
                         f"{getattr(a, 'dtype', type(a))}")
    if a.ndim != ndim or not a.flags.c_contiguous:
        raise ValueError(f"rotary: {what} must be a C-contiguous {ndim}-D array, got shape "
                         f"{a.shape}")


def rotary_rows(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray,
                heads: int = 0, seq: int = 0) -> np.ndarray:
    """``out = x * cos + rotate_half(x) * sin`` row by row (see the module
    docstring; ``heads``, ``seq``: ``x``'s rows in ``(B, S, H)`` order).
    ``out`` must not overlap ``x`` (each element reads its partner in the
    other half). Returns ``out``."""
    for what, a in (("x", x), ("out", out), ("cos", cos), ("sin", sin)):
        _check(what, a, 2)
    M, D = x.shape
    R = cos.shape[0]
    if out.shape != x.shape or sin.shape != cos.shape or cos.shape[1] != D or D % 2:
        raise ValueError(f"rotary: x {x.shape}, out {out.shape}, cos {cos.shape}, sin "
                         f"{sin.shape}: expected out as x, tables (R, D) and D even")
    if x.size == 0:
        return out
    if R == 0 or M % R:
        raise ValueError(f"rotary: {M} rows are not a multiple of the tables' {R}")
    if np.may_share_memory(x, out):
        raise ValueError("rotary: out must not overlap x")
    heads, seq = int(heads), int(seq)
    if heads < 0 or (heads > 0 and (seq < 1 or M % (heads * seq))):
        raise ValueError(f"rotary: {M} rows are not (B, {seq}, {heads}) rows")
    threads = numba_threads()
    groups = 1 if x.size < _PARALLEL_MIN or threads == 1 or M < 2 else min(M, threads)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if groups == 1:
        _rows(xf, cos.reshape(-1), sin.reshape(-1), outf, R, D, heads, seq, 0, M)
    else:
        _rows_parallel(xf, cos.reshape(-1), sin.reshape(-1), outf, R, D, heads, seq, M, groups)
    return out
