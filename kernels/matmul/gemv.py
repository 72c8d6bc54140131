"""Products of a few rows (``M <= 4``) and a constant weight packed once for
them: a classifier at batch 1, a transformer's decode step.

At one row the product is a matrix-vector product bound by reading the
weight (MobileNetV2's classifier: 1280 x 1000, 5 MB, read once per inference
and no reuse at all): packing A for a register tile, or cutting K into
blocks whose partial sums go back to memory, is wasted work. Here the weight
is laid out so that each thread reads one long contiguous stream and every
float of it is used ``M`` times straight from the register it was loaded
into.

Buffers (float32, C-contiguous):

* ``a: (M, K)``, ``M`` in ``1 .. MAX_ROWS`` (a transposed ``a`` is copied by
  the wrapper: at most four rows)
* packed weight ``w: (P, K * NB)`` with ``P = ceil(N / NB)``: panel ``p``
  holds columns ``p * NB .. p * NB + NB`` of ``B`` for every ``k``, row by
  row: ``w[p, k * NB + j] = B[k, p * NB + j]`` (zero past ``N``).
  :class:`PackedGemvB` holds one, made by :func:`pack_gemv_b`.
* ``out: (M, N)``; ``c``, ``residual: (1, Mc, Nc)`` broadcasting to
  ``(M, N)`` or ``(1, 0, 0)`` for none; ``bias: (N,)`` or ``(0,)``.

Each thread takes an equal run of whole panels (``NB = 4 * VEC`` columns:
four vector registers per row of A), so the threads split N and each
streams its part of the weight once from start to end. One row keeps two
sets of sums (even and odd k: eight independent FMA chains, enough to hide
their latency); two to four rows have eight to sixteen chains in one set.
The epilogue (``alpha``, ``beta * c``, bias, residual, activation) runs on
each panel's outputs right after they are stored, while they are in L1.
"""

import numba
import numpy as np
from numba import prange

from .._config import jit, parallel_kernel
from .._linking import kernel_factory
from ..epilogue import ACTIVATIONS, LAST_ACTIVATION, NONE
from ..stack import stack_empty
from .blocking import VEC, _ZERO, _span, _span1
from .tiles import _epilogue_rows, _has_epilogue

#: columns per panel of the packed weight: four vector registers
NB = 4 * VEC
#: the most rows of A a product here takes
MAX_ROWS = 4
#: the sums of one panel: two sets of one row, or one set of up to four rows
_ACC = 2 * MAX_ROWS * NB
#: products with fewer multiply-adds run on one thread (as the GEMM's
#: PARALLEL_MIN_MACS: a parallel region costs several microseconds)
PARALLEL_MIN_MACS = 1 << 20

_F32 = np.dtype(np.float32)
_NO_ADDEND = np.zeros((1, 0, 0), np.float32)
_NO_BIAS = np.zeros(0, np.float32)


class PackedGemvB:
    """A constant right operand packed once by :func:`pack_gemv_b`:
    ``data: (P, K * NB)`` float32 (see the module docstring), ``k``, ``n``: the
    logical ``(K, N)`` of ``B``. A snapshot of the array it was packed from."""

    __slots__ = ("data", "k", "n")

    def __init__(self, data: np.ndarray, k: int, n: int):
        self.data, self.k, self.n = data, k, n

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    def unpacked(self) -> np.ndarray:
        """The ``(K, N)`` matrix that was packed."""
        count = self.data.shape[0]
        panels = self.data.reshape(count, self.k, NB)
        return np.ascontiguousarray(
            panels.transpose(1, 0, 2).reshape(self.k, count * NB)[:, :self.n])

    def __repr__(self) -> str:
        return f"PackedGemvB(k={self.k}, n={self.n})"


def pack_gemv_b(b: np.ndarray, b_transpose: bool = False) -> PackedGemvB:
    """Pack ``b: (K, N)`` (``(N, K)`` with ``b_transpose``) for :func:`gemv`.
    Once per weight, in numpy (MobileNetV2's 1280 x 1000: a few ms)."""
    b = np.asarray(b)
    if b.ndim != 2 or b.dtype != _F32:
        raise ValueError(f"pack_gemv_b: b must be a 2-D float32 array, got "
                         f"{b.dtype} {b.shape}")
    matrix = b.T if b_transpose else b
    K, N = matrix.shape
    panels = -(-N // NB)
    data = np.zeros((panels, K, NB), np.float32)
    if N:
        padded = np.zeros((K, panels * NB), np.float32)
        padded[:, :N] = matrix
        data[...] = padded.reshape(K, panels, NB).transpose(1, 0, 2)
    return PackedGemvB(data.reshape(panels, K * NB), K, N)


@jit()
def _panel(a, w, out, p, rows, alpha, beta, c, bias, residual, act, param0, param1,
           epilogue):
    """Panel ``p``: ``out[:rows, p * NB:(p + 1) * NB]`` (clipped at N) = ``a @ B``'s
    columns, through all of K with the sums in registers, then the epilogue.
    ``rows`` is a compile-time constant of the caller (constant trip counts)."""
    K = a.shape[1]
    N = out.shape[1]
    panel = _span(w, p, 0, K * NB)
    acc = numba.carray(stack_empty(_ACC, np.float32), (2, MAX_ROWS, NB))
    for s in range(2):
        for r in range(rows):
            for j in range(NB):
                acc[s, r, j] = _ZERO
    if rows == 1:
        x = _span(a, 0, 0, K)
        k2 = K // 2 * 2
        for k in range(0, k2, 2):
            x0 = x[k]
            x1 = x[k + 1]
            w0 = _span1(panel, k * NB, NB)
            w1 = _span1(panel, k * NB + NB, NB)
            for j in range(NB):
                acc[0, 0, j] += x0 * w0[j]
                acc[1, 0, j] += x1 * w1[j]
        if k2 < K:
            x0 = x[k2]
            w0 = _span1(panel, k2 * NB, NB)
            for j in range(NB):
                acc[0, 0, j] += x0 * w0[j]
        for j in range(NB):
            acc[0, 0, j] += acc[1, 0, j]
    else:
        for k in range(K):
            wk = _span1(panel, k * NB, NB)
            for r in range(rows):
                xr = a[r, k]
                for j in range(NB):
                    acc[0, r, j] += xr * wk[j]
    j0 = p * NB
    n = min(NB, N - j0)
    for r in range(rows):
        o = _span(out, r, j0, n)
        if n == NB:
            for j in range(NB):
                o[j] = acc[0, r, j]
        else:
            for j in range(n):
                o[j] = acc[0, r, j]
    if epilogue:
        _epilogue_rows(out, np.int64(0), j0, rows, n, alpha, beta, c, bias, residual,
                       act, param0, param1)


@kernel_factory
def gemv_driver(rows: int):
    """The driver for ``rows`` rows of A (1 .. MAX_ROWS, a constant of its code):
    ``.serial`` and ``.parallel`` compiles, made once per row count."""
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"gemv: rows must be in 1..{MAX_ROWS}, got {rows}")

    def gemv(a, w, out, alpha, beta, c, bias, residual, act, param0, param1, threads):
        panels = w.shape[0]
        alpha32 = np.float32(alpha)
        beta32 = np.float32(beta)
        p0 = np.float32(param0)
        p1 = np.float32(param1)
        c2 = c[0]
        r2 = residual[0]
        epilogue = _has_epilogue(alpha32, beta32, c2, bias, r2, act)
        workers = max(1, min(threads, panels))
        for worker in prange(workers):
            # whole panels, an even share each: one contiguous stream per thread
            for p in range(worker * panels // workers, (worker + 1) * panels // workers):
                _panel(a, w, out, p, rows, alpha32, beta32, c2, bias, r2, act, p0, p1,
                       epilogue)

    gemv.__name__ = gemv.__qualname__ = f"gemv_rows{rows}"
    gemv.__doc__ = f"""``out = act(alpha * a @ B + beta * c + bias + residual)`` for a
    ``({rows}, K)`` ``a`` and a packed ``w: (P, K * NB)`` (module docstring), the
    panels shared out among ``threads`` workers. Unchecked: see :func:`gemv`."""
    return parallel_kernel(gemv)


def as_addend(name: str, x, M: int, N: int) -> np.ndarray:
    """``c`` or ``residual`` as the kernel's ``(1, Mc, Nc)`` float32 array that
    broadcasts to ``(M, N)`` (a scalar, a row, a column, a matrix; a
    ``(1, Mc, Nc)`` array is taken as it is), or the "none" array for None."""
    if x is None:
        return _NO_ADDEND
    x = np.asarray(x, dtype=np.float32)
    if x.ndim == 3 and x.shape[0] == 1:
        x = x[0]
    shape = (1,) * (2 - x.ndim) + x.shape if x.ndim <= 2 else x.shape
    if x.ndim > 2 or any(got not in (1, want) for got, want in zip(shape, (M, N))):
        raise ValueError(f"gemv: {name} of shape {x.shape} does not broadcast to ({M}, {N})")
    return np.ascontiguousarray(x.reshape((1,) + shape))


def _is_addend(x) -> bool:
    """Already the kernel's form (as_addend's result: the same array, so a
    bound call's arguments keep it)."""
    return type(x) is np.ndarray and x.dtype == _F32 and x.ndim == 3 and x.shape[0] == 1 \
        and x.flags.c_contiguous


def gemv_call(a, w: PackedGemvB, out, *, alpha: float = 1.0, beta: float = 1.0, c=None,
              bias=None, residual=None, activation=NONE, param0: float = 0.0,
              param1: float = 0.0, a_transpose: bool = False, threads: int | None = None):
    """The checked arguments of a :func:`gemv` call: ``(kernel, args)`` with
    ``kernel(*args)`` computing it (a replayed plan keeps the pair)."""
    if type(w) is not PackedGemvB:
        raise ValueError(f"gemv: w must be a PackedGemvB, got {type(w).__name__}")
    if type(a) is not np.ndarray or a.dtype != _F32 or a.ndim != 2:
        raise ValueError(f"gemv: a must be a 2-D float32 array, got "
                         f"{getattr(a, 'dtype', type(a).__name__)} {getattr(a, 'shape', '')}")
    if a_transpose:
        a = a.T
    if not a.flags.c_contiguous:
        a = np.ascontiguousarray(a)          # at most MAX_ROWS rows
    M, K = a.shape
    if not 1 <= M <= MAX_ROWS:
        raise ValueError(f"gemv: a has {M} rows; this path takes 1 to {MAX_ROWS}")
    if K != w.k:
        raise ValueError(f"gemv: inner dimensions differ: a is ({M}, {K}), B is "
                         f"({w.k}, {w.n})")
    N = w.n
    if type(out) is not np.ndarray or out.dtype != _F32 or out.shape != (M, N) \
            or not out.flags.c_contiguous or not out.flags.writeable:
        raise ValueError(f"gemv: out must be a writeable C-contiguous float32 array of "
                         f"shape ({M}, {N})")
    if isinstance(activation, str):
        if activation not in ACTIVATIONS:
            raise ValueError(f"gemv: unknown activation {activation!r}")
        activation = ACTIVATIONS[activation]
    activation = int(activation)
    if not NONE <= activation <= LAST_ACTIVATION:
        raise ValueError(f"gemv: unknown activation code {activation}")
    if bias is None:
        bias = _NO_BIAS
    else:
        bias = np.ascontiguousarray(bias, dtype=np.float32)
        if bias.shape != (N,):
            raise ValueError(f"gemv: bias must have shape ({N},), got {bias.shape}")
    c3 = c if _is_addend(c) else as_addend("c", c, M, N)
    r3 = residual if _is_addend(residual) else as_addend("residual", residual, M, N)
    for name, x in (("c", c3), ("residual", r3)):
        if x.size and any(got not in (1, want) for got, want in zip(x.shape[1:], (M, N))):
            raise ValueError(f"gemv: {name} of shape {x.shape} does not broadcast to "
                             f"({M}, {N})")
    for x in (a, w.data, c3, bias, r3):
        if np.may_share_memory(out, x):
            raise ValueError("gemv: out overlaps an input; pass a separate output array")
    if threads is None:
        threads = numba.get_num_threads()
    if M * N * K < PARALLEL_MIN_MACS:
        threads = 1
    kernel = gemv_driver(M).on_threads(threads)
    return kernel, (a, w.data, out, float(alpha), float(beta), c3, bias, r3, activation,
                    float(param0), float(param1), int(threads))


def gemv(a, w: PackedGemvB, out, **options) -> np.ndarray:
    """``out = act(alpha * A @ B + beta * c + bias + residual)`` for ``a: (M, K)``
    (``(K, M)`` with ``a_transpose``), ``M <= MAX_ROWS``, and a weight packed by
    :func:`pack_gemv_b`; options as ``matmul.gemm``'s (``threads``: None asks
    numba). Returns ``out``."""
    kernel, args = gemv_call(a, w, out, **options)
    kernel(*args)                           # (K == 0: zeros, then the epilogue)
    return out
