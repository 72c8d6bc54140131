"""Group normalization (PyTorch's GroupNorm, ONNX's GroupNormalization): the
channels of each image split into ``groups`` groups of ``C / groups``
consecutive channels; each ``(n, group)`` is normalized over its channels
and every spatial position, statistics in float64, then
``y = (x - mean) * rstd * scale[c] + bias[c]`` in float32.

Buffers (float32 unless said, C-contiguous):

* ``x, out: (N, K, P, L)``; channel ``c`` is ``(k, l) = (c // L, c % L)``
  and the first ``channels`` count, the others are padding lanes (zero in,
  zero out). A blocked tensor ``(N, C_phys // cb, H, W, cb)`` is ``(N,
  C_phys // cb, H * W, cb)``; a plain ``(N, C, D1, ..., Dk)`` is ``(N, C,
  D1 * ... * Dk, 1)``. ``L`` divides 32 (every block size does).
* ``scale, bias: (K * L,)``, zero past ``channels``.
* ``partial: (2, N * K, S, L)`` float64: the sums and the sums of squares of
  each plane ``(n, k)``'s lanes over its ``S`` pixel chunks (one task each).
* ``shift, factor, offset: (N, K * L)``: each ``(n, c)``'s mean, ``rstd *
  scale[c]`` and ``bias[c]`` (zero for padding lanes), so that ``y = (x -
  shift) * factor + offset``.

Three phases. Statistics: one pass per task (a plane's pixel chunk, a
contiguous run of floats) for the sum and the sum of squares, in 32 float64
accumulators whose lane is ``j % L`` (a run starts at lane 0 and ``L``
divides 32), so any block size runs the same vectorized loop and a plain
row (``L = 1``) is a plain sum. Combine: each group's sums over its channels
and chunks, ``var = E[x^2] - mean^2`` (float64 keeps ~29 more bits than the
data: the cancellation matters only for a mean ~10^7 times the deviation),
and the per-channel ``shift, factor, offset``. Normalize: per task, the
three as 64-float lane patterns, then ``(x - shift) * factor + offset`` in
64-float steps (four 16-float vectors). Threads split the tasks of either
pass (planes times pixel chunks, so GroupNorm(1, C) of one image splits
too); the combine is serial and small (``N * K * S * L`` values).
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ._config import jit
from .stack import stack_empty

#: float64 accumulators of the statistics pass (a multiple of every block size)
_SUMS = 32
#: floats per step of the normalizing pass
_STEP = 64
#: below this many elements run on one thread
_PARALLEL_MIN = 32768
#: floats a pixel chunk holds at least (smaller chunks: more combine than work)
_CHUNK_MIN = 4096


@jit()
def _run_sums(xf, base, count, L, partial, at_sum, at_square):
    """``partial[at_sum + l]`` and ``partial[at_square + l]``: the sum and the
    sum of squares of lane ``l`` over ``count`` floats from ``base`` (a whole
    number of pixels of ``L`` lanes)."""
    s = numba.carray(stack_empty(_SUMS, np.float64), _SUMS)
    q = numba.carray(stack_empty(_SUMS, np.float64), _SUMS)
    for j in range(_SUMS):
        s[j] = 0.0
        q[j] = 0.0
    steps = count // _SUMS
    for i in range(steps):
        p = base + i * _SUMS
        for j in range(_SUMS):
            v = np.float64(xf[np.uint64(p + j)])
            s[j] += v
            q[j] += v * v
    for i in range(steps * _SUMS, count):        # the tail: lane i % L
        v = np.float64(xf[np.uint64(base + i)])
        s[i % _SUMS] += v
        q[i % _SUMS] += v * v
    for l in range(L):
        total, squares = 0.0, 0.0
        for j in range(l, _SUMS, L):
            total += s[j]
            squares += q[j]
        partial[at_sum + l] = total
        partial[at_square + l] = squares


@jit(standalone=True)
def _statistics(xf, P, L, partial, planes, S, first, last):
    """Tasks ``[first, last)``: task ``t`` sums plane ``t // S``'s pixel chunk ``t % S``."""
    for t in range(first, last):
        plane, j = t // S, t % S
        p0, p1 = j * P // S, (j + 1) * P // S
        at = (plane * S + j) * L
        _run_sums(xf, (plane * P + p0) * L, (p1 - p0) * L, L, partial, at,
                  planes * S * L + at)


@jit(standalone=True)
def _combine(partial, N, K, P, L, S, channels, groups, scale, bias, eps, shift, factor,
             offset):
    """Each group's mean and ``rstd`` from ``partial``, then ``shift``,
    ``factor`` and ``offset`` of every ``(n, c)`` (zero for padding lanes)."""
    planes = N * K
    per_group = channels // groups
    count = per_group * P
    for n in range(N):
        for c in range(channels, K * L):
            shift[n, c] = 0.0
            factor[n, c] = 0.0
            offset[n, c] = 0.0
        for g in range(groups):
            total, squares = 0.0, 0.0
            for c in range(g * per_group, (g + 1) * per_group):
                at = ((n * K + c // L) * S) * L + c % L
                for j in range(S):
                    total += partial[at + j * L]
                    squares += partial[planes * S * L + at + j * L]
            mean = total / count
            rstd = 1.0 / math.sqrt(max(squares / count - mean * mean, 0.0) + eps)
            for c in range(g * per_group, (g + 1) * per_group):
                shift[n, c] = np.float32(mean)
                factor[n, c] = np.float32(rstd * scale[c])
                offset[n, c] = bias[c]


@jit(standalone=True)
def _normalize(xf, outf, P, L, K, shift, factor, offset, S, first, last):
    """Tasks ``[first, last)``: task ``t`` normalizes plane ``t // S``'s pixel chunk ``t % S``."""
    m = numba.carray(stack_empty(_STEP, np.float32), _STEP)
    a = numba.carray(stack_empty(_STEP, np.float32), _STEP)
    b = numba.carray(stack_empty(_STEP, np.float32), _STEP)
    current = -1
    for t in range(first, last):
        plane, j = t // S, t % S
        if plane != current:                       # the plane's lane patterns
            current = plane
            n, k = plane // K, plane % K
            for i in range(_STEP):
                c = k * L + i % L
                m[i] = shift[n, c]
                a[i] = factor[n, c]
                b[i] = offset[n, c]
        p0, p1 = j * P // S, (j + 1) * P // S
        base = (plane * P + p0) * L
        count = (p1 - p0) * L
        steps = count // _STEP
        for i in range(steps):
            p = base + i * _STEP
            for e in range(_STEP):
                outf[np.uint64(p + e)] = (xf[np.uint64(p + e)] - m[e]) * a[e] + b[e]
        for i in range(steps * _STEP, count):
            e = i % _STEP
            outf[np.uint64(base + i)] = (xf[np.uint64(base + i)] - m[e]) * a[e] + b[e]


@jit(standalone=True)
def _group_norm(xf, outf, N, K, P, L, channels, groups, scale, bias, eps, S, partial, shift,
                factor, offset):
    """The three phases on one thread."""
    tasks = N * K * S
    _statistics(xf, P, L, partial, N * K, S, 0, tasks)
    _combine(partial, N, K, P, L, S, channels, groups, scale, bias, eps, shift, factor, offset)
    _normalize(xf, outf, P, L, K, shift, factor, offset, S, 0, tasks)


@jit(parallel=True)
def _group_norm_parallel(xf, outf, N, K, P, L, channels, groups, scale, bias, eps, S, partial,
                         shift, factor, offset, workers):
    """The three phases, each pass's tasks split in ``workers`` contiguous ranges."""
    tasks = N * K * S
    for w in prange(workers):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(w) * tasks // workers, (np.int64(w) + 1) * tasks // workers
        _statistics(xf, P, L, partial, N * K, S, first, last)
    _combine(partial, N, K, P, L, S, channels, groups, scale, bias, eps, shift, factor, offset)
    for w in prange(workers):
        first, last = np.int64(w) * tasks // workers, (np.int64(w) + 1) * tasks // workers
        _normalize(xf, outf, P, L, K, shift, factor, offset, S, first, last)


# --- checked wrappers ------------------------------------------------------------

def _check(what: str, a, ndim: int) -> None:
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"group_norm: {what} must be a float32 numpy array, got "
                         f"{getattr(a, 'dtype', type(a))}")
    if a.ndim != ndim or not a.flags.c_contiguous:
        raise ValueError(f"group_norm: {what} must be a C-contiguous {ndim}-D array, got "
                         f"shape {a.shape}")


def _chunks(planes: int, P: int, L: int, threads: int) -> int:
    """Pixel chunks per plane: one on one thread; else enough for about four
    tasks per thread, none under ``_CHUNK_MIN`` floats."""
    if threads == 1 or planes >= 4 * threads:
        return 1
    wanted = -(-4 * threads // planes)
    return max(1, min(wanted, P * L // _CHUNK_MIN))


def bind_group_norm(x, scale, bias, groups: int, epsilon: float, channels: int, out,
                    threads: int):
    """``(kernel, args)``: ``kernel(*args)`` computes :func:`group_norm` on
    these arrays (checked here once, scratch arrays made here) on
    ``threads`` numba threads; None for an empty ``x``. For a replayed plan's
    bound step."""
    _check("x", x, 4)
    _check("out", out, 4)
    if out.shape != x.shape:
        raise ValueError(f"group_norm: out has shape {out.shape}, expected {x.shape}")
    if np.may_share_memory(x, out) and x.ctypes.data != out.ctypes.data:
        raise ValueError("group_norm: out must be x itself or not overlap it")
    N, K, P, L = x.shape
    if L < 1 or _SUMS % L:
        raise ValueError(f"group_norm: the lane count must divide {_SUMS}, got {L}")
    for name, v in (("scale", scale), ("bias", bias)):
        _check(name, v, 1)
        if v.shape != (K * L,):
            raise ValueError(f"group_norm: {name} must have shape ({K * L},), got {v.shape}")
    if not 0 < channels <= K * L or (K - 1) * L >= channels:
        raise ValueError(f"group_norm: channels must be in ({(K - 1) * L}, {K * L}] for x "
                         f"{x.shape}, got {channels}")
    if groups < 1 or channels % groups:
        raise ValueError(f"group_norm: groups must divide the {channels} channels, got "
                         f"{groups}")
    eps = float(epsilon)
    if not eps >= 0 or math.isinf(eps):
        raise ValueError(f"group_norm: epsilon must be finite and >= 0, got {epsilon}")
    if x.size == 0:
        return None
    threads = 1 if x.size < _PARALLEL_MIN else threads
    S = _chunks(N * K, P, L, threads)
    partial = np.empty(2 * N * K * S * L, np.float64)
    shift, factor, offset = (np.empty((N, K * L), np.float32) for _ in range(3))
    xf, outf = x.reshape(-1), out.reshape(-1)
    args = (xf, outf, N, K, P, L, channels, groups, scale, bias, eps, S, partial, shift,
            factor, offset)
    if threads == 1:
        return _group_norm, args
    return _group_norm_parallel, args + (min(N * K * S, threads),)


def group_norm(x, scale, bias, groups: int, epsilon: float, channels: int, out, threads: int = 1):
    """``out``: ``x`` (``(N, K, P, L)``, channel ``k * L + l``, the first
    ``channels`` real) normalized over each group of ``channels / groups``
    consecutive channels and all ``P`` pixels, times ``scale`` plus ``bias``
    (``(K * L,)``, zero past ``channels``). ``out`` may be ``x`` (in place).
    Returns ``out``."""
    call = bind_group_norm(x, scale, bias, groups, epsilon, channels, out, threads)
    if call is not None:
        call[0](*call[1])
    return out
