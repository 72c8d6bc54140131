"""The gated linear unit of Llama-style MLPs (SwiGLU): ``out = silu(gate) *
up`` where ``gate`` and ``up`` are the two halves of one GEMM's output (the
``gate_proj`` and ``up_proj`` weights packed side by side at load time, so
the two projections of one input run as one product).

Buffers (float32, C-contiguous):

* :func:`swiglu_rows`: ``y: (M, 2 N)``, row ``m`` holding ``gate`` in its
  first ``N`` columns and ``up`` in its last ``N``; ``out: (M, N)``.

``silu`` is the epilogue's vectorized ``x * sigmoid(x)`` (one
``epilogue.vector_exp`` per element), the value the exported ``Mul(g,
Sigmoid(g))`` gives to float32 rounding; it and the product run in one pass
over the row where the export takes a sigmoid and two products (three
launches and passes). Parallel over rows in contiguous ranges, one per
thread; small inputs run serially.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._config import jit, numba_threads
from .epilogue import SILU, activate

#: below this many output elements run serially (a parallel region costs more than the pass)
_PARALLEL_MIN = 32768


@jit(standalone=True)
def _rows(yf, outf, N, first, last):
    n = np.uint64(N)
    zero = np.float32(0.0)
    for row in range(first, last):
        src = np.uint64(row) * (n + n)
        dst = np.uint64(row) * n
        for j in range(n):
            outf[dst + j] = activate(yf[src + j], SILU, zero, zero) * yf[src + n + j]


@jit(parallel=True)
def _rows_parallel(yf, outf, N, rows, groups):
    for g in prange(groups):
        first, last = np.int64(g) * rows // groups, (np.int64(g) + 1) * rows // groups
        _rows(yf, outf, N, first, last)


def swiglu_rows(y: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``out = silu(y[:, :N]) * y[:, N:]`` (see the module docstring). Returns ``out``."""
    call = bind_swiglu_rows(y, out, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


def bind_swiglu_rows(y: np.ndarray, out: np.ndarray, threads: int):
    """``(kernel, args)`` of :func:`swiglu_rows` on these arrays, checked once
    (a replayed plan's bound step), or None when there is nothing to do."""
    for what, a in (("y", y), ("out", out)):
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.ndim != 2 \
                or not a.flags.c_contiguous:
            raise ValueError(f"swiglu: {what} must be a C-contiguous 2-D float32 numpy "
                             f"array, got {getattr(a, 'dtype', type(a))} "
                             f"{getattr(a, 'shape', '')}")
    M, N = out.shape
    if y.shape != (M, 2 * N):
        raise ValueError(f"swiglu: y {y.shape} must be out's rows {M} by twice its {N} columns")
    if out.size == 0:
        return None
    if np.may_share_memory(y, out):
        raise ValueError("swiglu: out must not overlap y")
    groups = 1 if out.size < _PARALLEL_MIN or threads == 1 or M < 2 else min(M, threads)
    if groups == 1:
        return _rows, (y.reshape(-1), out.reshape(-1), N, 0, M)
    return _rows_parallel, (y.reshape(-1), out.reshape(-1), N, M, groups)
