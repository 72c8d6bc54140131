"""Layer, RMS and instance normalization: statistics in float64, then
``y = (x - mean) / sqrt(var + epsilon) * scale + bias`` (RMS: ``y = x /
sqrt(mean(x^2) + epsilon) * scale``) in float32.

Buffers (float32, C-contiguous):

* :func:`layer_norm_rows`: ``x, out: (M, D)``, each row normalized over its
  ``D`` values (a transformer's ``(N, S, D)`` over D is ``(N * S, D)``);
  ``scale, bias: (D,)``. :func:`bind_layer_norm_rows` checks the same once and
  returns the kernel call, for a replayed plan's bound step.
* :func:`rms_norm_rows`: ``x, out: (M, D)``, each row scaled by the inverse
  root mean square of its ``D`` values (Llama's RMSNorm); ``scale: (D,)``;
  :func:`bind_rms_norm_rows` binds it as :func:`bind_layer_norm_rows` does.
* :func:`layer_norm_groups`: ``x, out: (A, K, P, L)``, normalized for each
  ``(a, p)`` over its ``K * L`` values ``x[a, :, p, :]``, of which the first
  ``channels`` count (the others are padding lanes, zero); ``scale, bias:
  (K * L,)``, indexed ``k * L + l``, zero past ``channels``. A blocked tensor
  ``(N, C_phys // cb, H, W, cb)`` normalized over its channels per pixel
  (ConvNeXt's LayerNorm) is ``(N, C_phys // cb, H * W, cb)`` with
  ``channels = C``; a plain ``(before, run, after)`` normalized over the run
  is ``(before, run, after, 1)``.
* :func:`instance_normalization`: ``x, out: (O, R, L)``, normalized for each
  ``(o, l)`` over ``x[o, :, l]``; ``scale, bias: (G, L)``, row ``o % G``. A
  blocked tensor is ``(N * C_phys // cb, H * W, cb)`` with ``G = C_phys // cb``
  (padding lanes: scale and bias zero); plain NCHW ``(N * C, H * W, 1)`` with
  ``G = C``; plain NHWC ``(N, H * W, C)`` with ``G = 1``.

Padding lanes come out zero because their scale and bias are zero:
``(0 - mean) * rstd * 0 + 0``.

Statistics in float64. Rows and instance planes: two passes, the mean,
then the sum of ``(x - mean)^2`` (exact up to rounding whatever the mean),
the second pass reading the row or plane from cache. A one-pass sum and sum
of squares was tried first: numba's SLP vectorizer pairs each lane's two
accumulators instead of packing 4 lanes of either, and the loop stayed
scalar (0 packed adds against 27 for the two single-chain loops, LLVM 22 on
Zen 4); the second pass over a row in L1 costs less than that. Groups: one
pass over the tile's ``k`` blocks for the sum and the sum of squares
(``var = E[x^2] - mean^2``; float64 keeps ~29 more bits than the data, so
the cancellation matters only for a mean ~10^7 times the deviation), since
the ``k`` blocks of a tile lie far apart.

How it is fast. Rows: 16 float64 partial sums in a stack array (two add
chains, 2 zmm or 4 ymm registers; RMS: one pass for the sum of squares), then
the epilogue, a vectorized loop of a subtract, a multiply and an FMA per
element. Groups: pixels in tiles of ``T`` (``T * L`` about
1024 floats, contiguous for each ``k``), the per-(pixel, lane) sums of a tile
accumulated in a scratch array over ``k`` (a lane loop with no carried
dependency: the loop vectorizer takes it), then summed over lanes; the tile
is normalized while it is in L1. Instance: per plane, the statistics, then
``(x - mean) * a + bias`` over the plane while it is still in L2. Parallel
over rows, ``(a, tile)`` tasks or planes, in contiguous ranges, one per
thread; small inputs run serially.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ._config import jit, numba_threads
from ._linking import kernel_factory
from .stack import stack_empty

#: below this many elements run serially
_PARALLEL_MIN = 32768
#: floats per tile of :func:`layer_norm_groups` (for each k). 1024, not 256:
#: longer lane loops and a quarter of the tasks; the tile's K blocks (128 KB
#: at K = 32) still stay in L2 for the normalizing pass. Kernel alone, 1
#: thread, 1x256x56x56 blocked by 8: 543 -> 414 us; 1x512x28x28 241 -> 205 us
_TILE_FLOATS = 1024


@jit()
def _rstd(m2, count, eps):
    """``1 / sqrt(var + eps)`` from the centered sum of squares ``m2``."""
    return 1.0 / math.sqrt(m2 / count + eps)


@jit()
def _row_mean(xf, base, count):
    """The mean of a contiguous row, in 16 partial float64 sums (a stack array:
    registers; a heap array passed in kept the loop scalar) and the tail:
    two vector add chains (2 zmm, 4 ymm); 8 sums, one chain, wait on the
    add's latency, 32 or 64 spill."""
    s = numba.carray(stack_empty(16, np.float64), 16)
    chunks = count // 16
    for l in range(16):
        s[l] = 0.0
    for c in range(chunks):
        p = base + c * 16
        for l in range(16):
            s[l] += np.float64(xf[np.uint64(p + l)])
    total = 0.0
    for l in range(16):
        total += s[l]
    for i in range(chunks * 16, count):
        total += np.float64(xf[np.uint64(base + i)])
    return total / count


@jit()
def _row_m2(xf, base, count, mean):
    """The sum of ``(x - mean)^2`` over a contiguous row (as :func:`_row_mean`)."""
    s = numba.carray(stack_empty(16, np.float64), 16)
    chunks = count // 16
    for l in range(16):
        s[l] = 0.0
    for c in range(chunks):
        p = base + c * 16
        for l in range(16):
            d = np.float64(xf[np.uint64(p + l)]) - mean
            s[l] += d * d
    total = 0.0
    for l in range(16):
        total += s[l]
    for i in range(chunks * 16, count):
        d = np.float64(xf[np.uint64(base + i)]) - mean
        total += d * d
    return total


# --- rows ------------------------------------------------------------------------

@jit(standalone=True)
def _rows(xf, outf, D, scale, bias, eps, first, last):
    for row in range(first, last):
        base = row * D
        mean = _row_mean(xf, base, D)
        r = np.float32(_rstd(_row_m2(xf, base, D, mean), D, eps))
        m = np.float32(mean)
        for d in range(D):
            outf[np.uint64(base + d)] = (xf[np.uint64(base + d)] - m) * r * scale[d] + bias[d]


@jit(parallel=True)
def _rows_parallel(xf, outf, D, scale, bias, eps, rows, groups):
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * rows // groups, (np.int64(g) + 1) * rows // groups
        _rows(xf, outf, D, scale, bias, eps, first, last)


@jit()
def _row_sumsq(xf, base, count):
    """The sum of ``x^2`` over a contiguous row in 16 partial float64 sums
    (as :func:`_row_mean`; 8 sums, one zmm chain waiting on the add's
    latency: 128 rows of 512, 1 thread, Zen 4, 7.2 -> 5.3 us; 32 or 64 sums
    spill: 6.5, 9.8 us). Not :func:`_row_m2` about 0: its subtract stays
    (12.2 against 11.2 us for the whole RMS norm of those rows)."""
    s = numba.carray(stack_empty(16, np.float64), 16)
    chunks = count // 16
    for l in range(16):
        s[l] = 0.0
    for c in range(chunks):
        p = base + c * 16
        for l in range(16):
            v = np.float64(xf[np.uint64(p + l)])
            s[l] += v * v
    total = 0.0
    for l in range(16):
        total += s[l]
    for i in range(chunks * 16, count):
        v = np.float64(xf[np.uint64(base + i)])
        total += v * v
    return total


@jit(standalone=True)
def _rms_rows(xf, outf, D, scale, eps, first, last):
    # one read of the row for the statistic, one for the scaling, while the
    # row is in L1
    for row in range(first, last):
        base = row * D
        r = np.float32(_rstd(_row_sumsq(xf, base, D), D, eps))
        for d in range(D):
            outf[np.uint64(base + d)] = xf[np.uint64(base + d)] * r * scale[d]


@jit(parallel=True)
def _rms_rows_parallel(xf, outf, D, scale, eps, rows, groups):
    for g in prange(groups):
        first, last = np.int64(g) * rows // groups, (np.int64(g) + 1) * rows // groups
        _rms_rows(xf, outf, D, scale, eps, first, last)


# --- groups (channels of a blocked tensor per pixel) -----------------------------

@kernel_factory
def normalize_pixels(L: int):
    """The kernel normalizing block ``k``'s ``L`` lanes of ``pixels`` pixels
    from ``base``. ``L`` (8 or 16) is a compile-time constant: the lane loop
    unrolls into one vector per pixel; a runtime ``L`` left a short vectorized
    loop with its checks per pixel (the normalizing pass ~10 % slower).
    Captures only the int ``L``, so numba's cache keeps it."""

    def normalize_pixels(xf, outf, base, pixels, means, rstds, scale, bias, k):
        sk = numba.carray(stack_empty(L, np.float32), L)
        bk = numba.carray(stack_empty(L, np.float32), L)
        for l in range(L):
            sk[l] = scale[k * L + l]
            bk[l] = bias[k * L + l]
        for i in range(pixels):
            m, r = means[i], rstds[i]
            o = base + i * L
            for l in range(L):
                outf[np.uint64(o + l)] = (xf[np.uint64(o + l)] - m) * r * sk[l] + bk[l]

    return jit()(normalize_pixels)


_normalize_pixels8 = normalize_pixels(8)
_normalize_pixels16 = normalize_pixels(16)


@jit(standalone=True)
def _groups(xf, outf, K, P, L, channels, scale, bias, eps, tile, first, last):
    """Tasks ``[first, last)``: task ``t`` is ``a = t // tiles`` and pixels
    ``[j * tile, ...)`` of its tile ``j = t % tiles``."""
    tiles = (P + tile - 1) // tile
    s = np.empty(tile * L, np.float64)
    q = np.empty(tile * L, np.float64)
    means = np.empty(tile, np.float32)
    rstds = np.empty(tile, np.float32)
    for t in range(first, last):
        a = t // tiles
        p0 = (t % tiles) * tile
        n = min(tile, P - p0) * L                    # floats of the tile for each k
        for j in range(n):
            s[j] = 0.0
            q[j] = 0.0
        for k in range(K):
            base = ((a * K + k) * P + p0) * L
            for j in range(n):
                v = np.float64(xf[np.uint64(base + j)])
                s[j] += v
                q[j] += v * v
        for i in range(n // L):
            total, squares = 0.0, 0.0
            for l in range(L):
                total += s[i * L + l]
                squares += q[i * L + l]
            mean = total / channels
            means[i] = np.float32(mean)
            # E[x^2] - mean^2 here (one pass over the tile's k blocks)
            rstds[i] = np.float32(_rstd(max(squares - total * mean, 0.0), channels, eps))
        for k in range(K):
            base = ((a * K + k) * P + p0) * L
            if L == 1:
                sk, bk = scale[k], bias[k]
                for i in range(n):
                    outf[np.uint64(base + i)] = \
                        (xf[np.uint64(base + i)] - means[i]) * rstds[i] * sk + bk
            elif L == 8:
                _normalize_pixels8(xf, outf, base, n // 8, means, rstds, scale, bias, k)
            elif L == 16:
                _normalize_pixels16(xf, outf, base, n // 16, means, rstds, scale, bias, k)
            else:
                for i in range(n // L):
                    m, r = means[i], rstds[i]
                    o = base + i * L
                    for l in range(L):
                        outf[np.uint64(o + l)] = ((xf[np.uint64(o + l)] - m) * r
                                                  * scale[k * L + l] + bias[k * L + l])


@jit(parallel=True)
def _groups_parallel(xf, outf, K, P, L, channels, scale, bias, eps, tile, tasks, groups):
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _groups(xf, outf, K, P, L, channels, scale, bias, eps, tile,
                first, last)


# --- instance normalization ------------------------------------------------------

@jit()
def _plane_stats(xf, base, R, L, means, m2):
    """``means[l]``, ``m2[l]`` (float64): the mean and the centered sum of
    squares of ``xf[base + i * L + l]`` over ``i < R``, in two passes (the
    plane is in cache for the second). ``L`` is a runtime lane count, so the
    lane loops are vectorized as loops; a single lane is a contiguous row."""
    if L == 1:
        means[0] = _row_mean(xf, base, R)
        m2[0] = _row_m2(xf, base, R, means[0])
        return
    for l in range(L):
        means[l] = 0.0
        m2[l] = 0.0
    for i in range(R):
        p = base + i * L
        for l in range(L):
            means[l] += np.float64(xf[np.uint64(p + l)])
    for l in range(L):
        means[l] /= R
    for i in range(R):
        p = base + i * L
        for l in range(L):
            d = np.float64(xf[np.uint64(p + l)]) - means[l]
            m2[l] += d * d


@jit(standalone=True)
def _instance(xf, outf, R, L, scale, bias, eps, first, last):
    G = scale.shape[0]
    means = np.empty(L, np.float64)
    m2 = np.empty(L, np.float64)
    m = np.empty(L, np.float32)
    a = np.empty(L, np.float32)
    for o in range(first, last):
        base = o * R * L
        _plane_stats(xf, base, R, L, means, m2)
        g = o % G
        for l in range(L):
            m[l] = np.float32(means[l])
            a[l] = np.float32(_rstd(m2[l], R, eps) * scale[g, l])
        if L == 1:
            m0, a0, b0 = m[0], a[0], bias[g, 0]
            for i in range(R):
                outf[np.uint64(base + i)] = (xf[np.uint64(base + i)] - m0) * a0 + b0
        else:
            for i in range(R):
                p = base + i * L
                for l in range(L):
                    outf[np.uint64(p + l)] = (xf[np.uint64(p + l)] - m[l]) * a[l] + bias[g, l]


@jit(parallel=True)
def _instance_parallel(xf, outf, R, L, scale, bias, eps, planes, groups):
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * planes // groups, (np.int64(g) + 1) * planes // groups
        _instance(xf, outf, R, L, scale, bias, eps, first, last)


# --- checked wrappers ------------------------------------------------------------

def _check(what, a, ndim, dtype=np.float32):
    if not isinstance(a, np.ndarray) or a.dtype != dtype:
        raise ValueError(f"normalization: {what} must be a {np.dtype(dtype).name} numpy "
                         f"array, got {getattr(a, 'dtype', type(a))}")
    if a.ndim != ndim or not a.flags.c_contiguous:
        raise ValueError(f"normalization: {what} must be a C-contiguous {ndim}-D array, got "
                         f"shape {a.shape}")


def _check_io(x, out, ndim):
    _check("x", x, ndim)
    _check("out", out, ndim)
    if out.shape != x.shape:
        raise ValueError(f"normalization: out has shape {out.shape}, expected {x.shape}")
    if np.may_share_memory(x, out) and not (x.ctypes.data == out.ctypes.data):
        raise ValueError("normalization: out must be x itself or not overlap it")


def _epsilon(epsilon) -> float:
    epsilon = float(epsilon)
    if not epsilon >= 0 or math.isinf(epsilon):
        raise ValueError(f"normalization: epsilon must be finite and >= 0, got {epsilon}")
    return epsilon


def _groups_of(tasks: int, elements: int) -> int:
    threads = numba_threads()
    if elements < _PARALLEL_MIN or tasks < 2 or threads == 1:
        return 1
    return min(tasks, threads)


def layer_norm_rows(x, scale, bias, epsilon, out):
    """``out[m] = (x[m] - mean) / sqrt(var + epsilon) * scale + bias`` with the
    mean and variance of row ``x[m]``. ``x, out: (M, D)``; ``scale, bias: (D,)``
    float32. ``out`` may be ``x`` (in place). Returns ``out``."""
    call = bind_layer_norm_rows(x, scale, bias, epsilon, out, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


def _check_rows(x, out, epsilon, params: dict) -> float:
    """Checks ``x, out: (M, D)`` and each of ``params`` ``(D,)``; the epsilon."""
    _check_io(x, out, 2)
    D = x.shape[1]
    for name, v in params.items():
        _check(name, v, 1)
        if v.shape != (D,):
            raise ValueError(f"normalization: {name} must have shape ({D},), got {v.shape}")
    return _epsilon(epsilon)


def _row_groups(x, threads: int) -> int:
    M = x.shape[0]
    return 1 if x.size < _PARALLEL_MIN or M < 2 or threads == 1 else min(M, threads)


def bind_layer_norm_rows(x, scale, bias, epsilon, out, threads: int):
    """``(kernel, args)``: ``kernel(*args)`` computes :func:`layer_norm_rows` on
    these arrays (checked here once) on ``threads`` numba threads; None for an
    empty ``x``. For a replayed plan's bound step (as
    :func:`bind_layer_norm_groups`)."""
    eps = _check_rows(x, out, epsilon, {"scale": scale, "bias": bias})
    if x.size == 0:
        return None
    M, D = x.shape
    groups = _row_groups(x, threads)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if groups == 1:
        return _rows, (xf, outf, D, scale, bias, eps, 0, M)
    return _rows_parallel, (xf, outf, D, scale, bias, eps, M, groups)


def rms_norm_rows(x, scale, epsilon, out):
    """``out[m] = x[m] / sqrt(mean(x[m]^2) + epsilon) * scale``, the mean over
    row ``x[m]``. ``x, out: (M, D)``; ``scale: (D,)`` float32. ``out`` may be
    ``x`` (in place). Returns ``out``."""
    call = bind_rms_norm_rows(x, scale, epsilon, out, numba_threads())
    if call is not None:
        call[0](*call[1])
    return out


def bind_rms_norm_rows(x, scale, epsilon, out, threads: int):
    """``(kernel, args)`` of :func:`rms_norm_rows` on these arrays, checked
    once, for a replayed plan's bound step (as :func:`bind_layer_norm_rows`)."""
    eps = _check_rows(x, out, epsilon, {"scale": scale})
    if x.size == 0:
        return None
    M, D = x.shape
    groups = _row_groups(x, threads)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if groups == 1:
        return _rms_rows, (xf, outf, D, scale, eps, 0, M)
    return _rms_rows_parallel, (xf, outf, D, scale, eps, M, groups)


def layer_norm_groups(x, scale, bias, epsilon, channels, out):
    """``out[a, :, p, :]`` = ``x[a, :, p, :]`` normalized over its first
    ``channels`` values (in ``k * L + l`` order; the rest are zero padding
    lanes), times ``scale`` plus ``bias``. ``x, out: (A, K, P, L)``; ``scale,
    bias: (K * L,)`` float32, zero past ``channels``. ``out`` must not be ``x``.
    Returns ``out``."""
    call = bind_layer_norm_groups(x, scale, bias, epsilon, channels, out, numba_threads())
    if call is not None:
        kernel, args = call
        kernel(*args)
    return out


def bind_layer_norm_groups(x, scale, bias, epsilon, channels, out, threads: int):
    """``(kernel, args)``: ``kernel(*args)`` computes :func:`layer_norm_groups`
    on these arrays (checked here once) on ``threads`` numba threads; None
    for an empty ``x`` (nothing to do). For a caller that runs the norm on
    the same arrays again and again (a replayed plan's bound step)."""
    _check_io(x, out, 4)
    if np.may_share_memory(x, out):
        raise ValueError("normalization: out must not overlap x")
    A, K, P, L = x.shape
    for name, v in (("scale", scale), ("bias", bias)):
        _check(name, v, 1)
        if v.shape != (K * L,):
            raise ValueError(f"normalization: {name} must have shape ({K * L},), got {v.shape}")
    if not 0 < channels <= K * L or (K - 1) * L >= channels:
        raise ValueError(f"normalization: channels must be in ({(K - 1) * L}, {K * L}] for x "
                         f"{x.shape}, got {channels}")
    eps = _epsilon(epsilon)
    if x.size == 0:
        return None
    tile = max(1, min(P, _TILE_FLOATS // L))
    tasks = A * ((P + tile - 1) // tile)
    groups = 1 if x.size < _PARALLEL_MIN or tasks < 2 or threads == 1 else min(tasks, threads)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if groups == 1:
        return _groups, (xf, outf, K, P, L, channels, scale, bias, eps, tile, 0, tasks)
    return _groups_parallel, (xf, outf, K, P, L, channels, scale, bias, eps, tile, tasks,
                              groups)


def instance_normalization(x, scale, bias, epsilon, out):
    """``out[o, :, l]`` = ``x[o, :, l]`` normalized over its ``R`` values,
    times ``scale[o % G, l]`` plus ``bias[o % G, l]``. ``x, out: (O, R, L)``
    float32; ``scale, bias: (G, L)`` float32 (G divides O). ``out``
    may be ``x`` (in place). Returns ``out``."""
    _check_io(x, out, 3)
    O, R, L = x.shape
    _check("scale", scale, 2)
    _check("bias", bias, 2)
    if scale.ndim != 2 or scale.shape != bias.shape or scale.shape[1] != L \
            or scale.shape[0] < 1 or O % scale.shape[0]:
        raise ValueError(f"normalization: scale and bias must have shape (G, {L}) with G "
                         f"dividing {O}, got {scale.shape} and {bias.shape}")
    eps = _epsilon(epsilon)
    if x.size == 0:
        return out
    groups = _groups_of(O, x.size)
    xf, outf = x.reshape(-1), out.reshape(-1)
    if groups == 1:
        _instance(xf, outf, R, L, scale, bias, eps, 0, O)
    else:
        _instance_parallel(xf, outf, R, L, scale, bias, eps, O, groups)
    return out
