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
  transpose is done by the row index, not by a copy. ``x`` may then also
  be ``(B * S, W)``, the rows of a wider product whose columns ``column``
  to ``column + H * D`` hold the ``(H, D)`` heads (a GEMM's Q and K side by
  side: the rows are read in place, no split copied).

* :func:`head_rows`: ``x: (B * S, W)``, ``out: (B * H * S, D)``: the heads
  of columns ``column`` to ``column + H * D`` of ``x`` in ``(B, H, S)``
  row order, not rotated (the value heads beside the rotated query and key
  of one GEMM: the exporters' head split and ``Transpose(0, 2, 1, 3)`` as one
  copy).

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
def _rows(xf, cf, sf, outf, R, D, heads, seq, width, column, first, last):
    h = D // 2
    for row in range(first, last):
        base = row * D
        source = base
        if heads > 0:               # out row (b, hd, s) reads x row (b, s), head hd
            s = row % seq
            hd = (row // seq) % heads
            source = (row // (seq * heads) * seq + s) * width + column + hd * D
        table = (row % R) * D
        for d in range(h):
            a = xf[np.uint64(source + d)]
            b = xf[np.uint64(source + h + d)]
            outf[np.uint64(base + d)] = a * cf[np.uint64(table + d)] \
                - b * sf[np.uint64(table + d)]
            outf[np.uint64(base + h + d)] = b * cf[np.uint64(table + h + d)] \
                + a * sf[np.uint64(table + h + d)]


@jit(parallel=True)
def _rows_parallel(xf, cf, sf, outf, R, D, heads, seq, width, column, rows, groups):
    for g in prange(groups):
        first, last = np.int64(g) * rows // groups, (np.int64(g) + 1) * rows // groups
        _rows(xf, cf, sf, outf, R, D, heads, seq, width, column, first, last)


def _check(what: str, a, ndim: int) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"rotary: {what} must be a float32 numpy array, got "
                         f"{getattr(a, 'dtype', type(a))}")
    if a.ndim != ndim or not a.flags.c_contiguous:
        raise ValueError(f"rotary: {what} must be a C-contiguous {ndim}-D array, got shape "
                         f"{a.shape}")


def rotary_rows(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray,
                heads: int = 0, seq: int = 0, column: int = 0) -> np.ndarray:
    """``out = x * cos + rotate_half(x) * sin`` row by row (see the module
    docstring; ``heads``, ``seq``: ``x``'s rows in ``(B, S, H)`` order, or
    ``x`` of ``B * S`` rows holding the heads from ``column``). ``out`` must
    not overlap ``x`` (each element reads its partner in the other half).
    Returns ``out``."""
    call = bind_rotary_rows(x, cos, sin, out, heads, seq, column, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


def bind_rotary_rows(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray,
                     heads: int, seq: int, column: int, threads: int):
    """``(kernel, args)`` of :func:`rotary_rows` on these arrays, checked once
    (a replayed plan's bound step), or None when there is nothing to do."""
    for what, a in (("x", x), ("out", out), ("cos", cos), ("sin", sin)):
        _check(what, a, 2)
    M, D = out.shape
    R = cos.shape[0]
    heads, seq, column = int(heads), int(seq), int(column)
    packed = heads > 0 and (x.shape != out.shape or column != 0)
    if not packed and x.shape != out.shape or sin.shape != cos.shape \
            or cos.shape[1] != D or D % 2:
        raise ValueError(f"rotary: x {x.shape}, out {out.shape}, cos {cos.shape}, sin "
                         f"{sin.shape}: expected out as x, tables (R, D) and D even")
    if out.size == 0:
        return None
    if R == 0 or M % R:
        raise ValueError(f"rotary: {M} rows are not a multiple of the tables' {R}")
    if np.may_share_memory(x, out):
        raise ValueError("rotary: out must not overlap x")
    if heads < 0 or (heads > 0 and (seq < 1 or M % (heads * seq))):
        raise ValueError(f"rotary: {M} rows are not (B, {seq}, {heads}) rows")
    width = heads * D
    if packed:
        width = x.shape[1]
        if x.shape[0] * heads != M or column < 0 or column + heads * D > width:
            raise ValueError(f"rotary: x {x.shape} does not hold {M // heads} rows of "
                             f"{heads} heads of {D} from column {column}")
    groups = 1 if out.size < _PARALLEL_MIN or threads == 1 or M < 2 else min(M, threads)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if groups == 1:
        return _rows, (xf, cos.reshape(-1), sin.reshape(-1), outf, R, D, heads, seq, width,
                       column, 0, M)
    return _rows_parallel, (xf, cos.reshape(-1), sin.reshape(-1), outf, R, D, heads, seq,
                            width, column, M, groups)


@jit(standalone=True)
def _head_rows(xf, outf, D, heads, seq, width, column, first, last):
    for row in range(first, last):
        s = row % seq
        hd = (row // seq) % heads
        source = (row // (seq * heads) * seq + s) * width + column + hd * D
        base = row * D
        for d in range(D):
            outf[np.uint64(base + d)] = xf[np.uint64(source + d)]


@jit(parallel=True)
def _head_rows_parallel(xf, outf, D, heads, seq, width, column, rows, groups):
    for g in prange(groups):
        first, last = np.int64(g) * rows // groups, (np.int64(g) + 1) * rows // groups
        _head_rows(xf, outf, D, heads, seq, width, column, first, last)


def head_rows(x: np.ndarray, out: np.ndarray, heads: int, seq: int,
              column: int = 0) -> np.ndarray:
    """``out``'s ``(b, h, s)`` row is head ``h`` of ``x``'s row ``b * seq + s``,
    from ``column`` (see the module docstring). Returns ``out``."""
    call = bind_head_rows(x, out, heads, seq, column, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


def bind_head_rows(x: np.ndarray, out: np.ndarray, heads: int, seq: int, column: int,
                   threads: int):
    """``(kernel, args)`` of :func:`head_rows` on these arrays, checked once, or
    None when there is nothing to do."""
    _check("x", x, 2)
    _check("out", out, 2)
    M, D = out.shape
    heads, seq, column = int(heads), int(seq), int(column)
    if heads < 1 or seq < 1 or M % (heads * seq) or x.shape[0] * heads != M \
            or column < 0 or column + heads * D > x.shape[1]:
        raise ValueError(f"rotary: x {x.shape} does not hold the rows of out {out.shape} "
                         f"as ({seq}, {heads}) heads from column {column}")
    if out.size == 0:
        return None
    if np.may_share_memory(x, out):
        raise ValueError("rotary: out must not overlap x")
    groups = 1 if out.size < _PARALLEL_MIN or threads == 1 or M < 2 else min(M, threads)
    if groups == 1:
        return _head_rows, (x.reshape(-1), out.reshape(-1), D, heads, seq, x.shape[1], column,
                            0, M)
    return _head_rows_parallel, (x.reshape(-1), out.reshape(-1), D, heads, seq, x.shape[1],
                                 column, M, groups)
