"""Reductions over one run of axes: sum, mean, L1, L2, sum of squares,
log-sum, log-sum-exp, max, min and product (WebNN's ten).

Buffers (C-contiguous):

* input:  ``x: (outer, R, inner)`` float32, reduced over its middle axis ``R``
  for each ``(outer, inner)``. A blocked tensor ``(N, C_phys // cb, H, W, cb)``
  reduced over H and W is ``(N * C_phys // cb, H * W, cb)`` (its padding lanes
  are zero in, and come out as ``f(0, ..., 0)``: the caller re-zeroes them for
  the ops where that is not 0, log-sum and log-sum-exp); over H alone it is
  ``(N * C_phys // cb, H, W * cb)``. A plain tensor reduced over a run of
  adjacent axes is ``(prod of the axes before, prod of the run, prod after)``.
* output: ``out: (outer, inner)`` float32, every element written.

Accuracy. Sums and products accumulate in float64 (the float32
results of long float32 sums drift by ~sqrt(R) ulp; here only the final
rounding remains for sums up to millions of terms); max and min are exact and
carry NaN (numpy's ``maximum``). log-sum-exp takes the max first, so large
inputs do not overflow: ``max + log(sum(exp(x - max)))``.

How it is fast. A plain row (``inner`` 1: a plain NCHW tensor over H and W)
or a channel block (``inner`` = cb of 4, 8 or 16: a blocked tensor over H and
W), every op but log-sum-exp, runs :func:`lane_rows`: the row's contiguous
floats as vectors of 8 (or cb) lanes into four accumulator vectors kept in
registers (a stack tile), one compile per width and family of ops (adds; max
and min; the others). Other narrow ``inner`` widths run
:func:`_narrow_tasks`, rows of up to 64 contiguous lanes (:func:`narrow_lanes`)
whose accumulators are arrays; wide ones and log-sum-exp run
:func:`_reduce_tasks`, a loop over ``R`` rows of ``lanes`` contiguous floats
into ``lanes`` float64 accumulators (the lane loop has no dependency between
iterations, so LLVM's loop vectorizer takes it without reassociating any sum:
jitnn compiles without ``reassoc``). Parallel over the ``outer`` rows (and
over chunks of ``inner`` when it is wide), in contiguous ranges, one per
thread; small inputs run serially. :func:`reduce_call` returns the kernel
call, so a replayed plan skips the checks.
"""

from __future__ import annotations

import math

import numba
import numpy as np
from numba import prange

from ._config import jit, numba_threads, parallel_kernel
from ._linking import kernel_factory
from .epilogue import nan_maximum, nan_minimum
from .stack import stack_empty

#: op codes (the ``op`` argument), WebNN's reductions in jitnn's names
SUM, MEAN, L1, L2, SUM_SQUARE, LOG_SUM, LOG_SUM_EXP, MAX, MIN, PRODUCT = range(10)
OPS = {"sum": SUM, "mean": MEAN, "l1": L1, "l2": L2, "sum_square": SUM_SQUARE,
       "log_sum": LOG_SUM, "log_sum_exp": LOG_SUM_EXP, "max": MAX, "min": MIN,
       "product": PRODUCT}

# what is accumulated per element (internal)
_ADD, _ABS, _SQUARE, _MAX, _MIN, _PRODUCT, _EXP = range(7)

#: below this many input elements run serially (a parallel region costs microseconds)
_PARALLEL_MIN = 32768
#: lanes per task when ``inner`` is wide (a plain NHWC tensor over H and W)
_LANE_CHUNK = 1024
#: lanes of a narrow ``inner``'s rows (a contiguous row, or cb lanes of a
#: blocked tensor): 64 float64 partial results
_ROW_LANES = 64


# --- the accumulation loops ------------------------------------------------------

@jit()
def _accumulate(xf, base, rows, stride, lanes, kind, acc, shift):
    """``acc[l] = acc[l] (kind) g(x)`` over ``x = xf[base + i * stride + l]``,
    ``i < rows``, ``l < lanes``; ``shift[l]`` is subtracted before ``exp``.
    One loop per kind, so the lane loop is branch-free and vectorizes."""
    if kind == _ADD:
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                acc[l] += np.float64(xf[np.uint64(p + l)])
    elif kind == _ABS:
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                acc[l] += abs(np.float64(xf[np.uint64(p + l)]))
    elif kind == _SQUARE:
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                v = np.float64(xf[np.uint64(p + l)])
                acc[l] += v * v
    elif kind == _MAX:
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                acc[l] = nan_maximum(acc[l], np.float64(xf[np.uint64(p + l)]))
    elif kind == _MIN:
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                acc[l] = nan_minimum(acc[l], np.float64(xf[np.uint64(p + l)]))
    elif kind == _PRODUCT:
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                acc[l] *= np.float64(xf[np.uint64(p + l)])
    else:                                               # _EXP
        for i in range(rows):
            p = base + i * stride
            for l in range(lanes):
                acc[l] += math.exp(np.float64(xf[np.uint64(p + l)]) - shift[l])


@jit()
def _initial(kind):
    if kind == _MAX:
        return -np.inf
    if kind == _MIN:
        return np.inf
    if kind == _PRODUCT:
        return 1.0
    return 0.0


@jit()
def _combine(kind, a, b):
    """Two partial results of ``kind`` as one."""
    if kind == _MAX:
        return nan_maximum(a, b)
    if kind == _MIN:
        return nan_minimum(a, b)
    if kind == _PRODUCT:
        return a * b
    return a + b


@jit()
def _kind_of(op):
    """What op accumulates (log-sum-exp: the max pass first, then ``_EXP``)."""
    if op == L1:
        return _ABS
    if op == L2 or op == SUM_SQUARE:
        return _SQUARE
    if op == MAX:
        return _MAX
    if op == MIN:
        return _MIN
    if op == PRODUCT:
        return _PRODUCT
    return _ADD                                         # sum, mean, log-sum


@jit()
def _finish(op, value, count, shift):
    """The op's result from its accumulated ``value`` over ``count`` elements."""
    if op == MEAN:
        return value / count
    if op == L2:
        return math.sqrt(value)
    if op == LOG_SUM:
        return math.log(value) if value > 0.0 else (-np.inf if value == 0.0 else np.nan)
    if op == LOG_SUM_EXP:
        if math.isinf(shift):                           # all -inf (-inf), or an inf (inf)
            return shift
        return shift + math.log(value)
    return value


@jit()
def _combine_lanes(op, kind, acc, shift, start, step, count):
    """The partial results of lanes ``start + j * step``, ``j < count``, as
    one: (value, shift)."""
    if op == LOG_SUM_EXP:                               # sum_l exp(m_l - M) * s_l
        m = -np.inf
        for j in range(count):
            m = nan_maximum(m, shift[start + j * step])
        if math.isinf(m) or m != m:
            return 0.0, m                               # _finish gives m itself
        total = 0.0
        for j in range(count):
            l = start + j * step
            if shift[l] != -np.inf:                     # a lane of -inf adds nothing
                total += acc[l] * math.exp(shift[l] - m)
        return total, m
    value = _initial(kind)
    for j in range(count):
        value = _combine(kind, value, acc[start + j * step])
    return value, 0.0


@jit(standalone=True)
def _reduce_tasks(xf, outf, R, inner, op, row_lanes, first, last):
    """Tasks ``[first, last)``: task ``t`` is outer row ``t // chunks``, lanes
    ``[c * _LANE_CHUNK, ...)`` of its chunk ``c = t % chunks``.

    A narrow ``inner`` that divides ``row_lanes`` (a contiguous row, inner 1;
    a blocked tensor over H and W, inner = cb) is read as rows of
    ``row_lanes`` contiguous floats, ``per_row = row_lanes // inner`` pixels
    each, so that every loop runs over many lanes (8-lane loops ran at a
    quarter of the memory's speed); lane ``l`` holds element ``l % inner``,
    the tail pixels are added to the first lanes, and the lanes of each
    element are combined at the end. ``row_lanes`` comes from Python: as a
    runtime value it keeps the lane loops loops, which the loop vectorizer
    takes (a literal unrolled them into scalar code). log-sum-exp makes two
    passes, each lane's max, then its sum of ``exp(x - max)``. Every
    accumulation goes through one call of :func:`_accumulate` (its seven
    loops compiled once: each call site is inlined)."""
    chunks = (inner + _LANE_CHUNK - 1) // _LANE_CHUNK
    width = max(min(inner, _LANE_CHUNK), row_lanes)
    acc = np.empty(width, np.float64)
    shift = np.empty(width, np.float64)
    kind = _kind_of(op)
    passes = 2 if op == LOG_SUM_EXP else 1
    per_row = row_lanes // inner if inner < row_lanes and row_lanes % inner == 0 else 1
    grouped = per_row > 1 and R >= 2 * per_row
    for t in range(first, last):
        o = t // chunks
        l0 = (t % chunks) * _LANE_CHUNK
        base = o * R * inner + l0
        if grouped:
            lanes, rows, stride = row_lanes, R // per_row, row_lanes
            left = (R - rows * per_row) * inner
        else:
            lanes, rows, stride, left = min(inner - l0, _LANE_CHUNK), R, inner, 0
        for p in range(passes):
            k = _MAX if p < passes - 1 else (_EXP if op == LOG_SUM_EXP else kind)
            target = shift if p < passes - 1 else acc
            init = _initial(k)
            for l in range(lanes):
                target[l] = init
            for segment in range(2 if left else 1):     # the rows, then the tail pixels
                if segment == 0:
                    _base, _rows, _stride, _lanes = base, rows, stride, lanes
                else:
                    _base, _rows, _stride, _lanes = base + rows * stride, 1, left, left
                _accumulate(xf, _base, _rows, _stride, _lanes, k, target, shift)
        if grouped:
            for c in range(inner):
                value, m = _combine_lanes(op, kind, acc, shift, c, inner, per_row)
                outf[np.uint64(o * inner + c)] = np.float32(_finish(op, value, R, m))
        else:
            for l in range(lanes):
                outf[np.uint64(o * inner + l0 + l)] = np.float32(
                    _finish(op, acc[l], R, shift[l]))


@jit(standalone=True)
def _narrow_tasks(xf, outf, R, inner, op, lanes, first, last):
    """Outer rows ``[first, last)`` of a narrow ``inner`` that divides
    ``lanes`` (1: a contiguous row; cb: a blocked tensor over H and W), every
    op but log-sum-exp: what :func:`_reduce_tasks` does for such rows, without
    its per-task generality (lane chunks, two passes, the tail as a loop
    segment, tuple-returning lane combines). That machinery cost ~130 ns per
    row, three times the reading of a 49-pixel row of a 2048x7x7 mean.
    Rows of ``lanes`` contiguous floats, ``per = lanes // inner`` pixels each,
    the tail pixels into the first lanes. Max and min keep float32
    accumulators (exact, and twice the lanes per vector); NaN carried as
    numpy's ``maximum``."""
    kind = _kind_of(op)
    acc = np.empty(lanes, np.float64)
    ext = np.empty(lanes, np.float32)
    shift = np.empty(1, np.float64)                     # (unused: no exp pass)
    per = lanes // inner
    rows = R // per
    left = (R - rows * per) * inner                     # tail floats, < lanes
    init = _initial(kind)
    for o in range(first, last):
        base = o * R * inner
        if kind == _MAX or kind == _MIN:
            for l in range(lanes):
                ext[l] = np.float32(init)
            for segment in range(2 if left else 1):     # the rows, then the tail
                p0 = base if segment == 0 else base + rows * lanes
                count = rows if segment == 0 else 1
                width = lanes if segment == 0 else left
                if kind == _MAX:
                    for i in range(count):
                        p = p0 + i * lanes
                        for l in range(width):
                            v = xf[np.uint64(p + l)]
                            e = ext[l]
                            ext[l] = v if (v > e) | (v != v) else e
                else:
                    for i in range(count):
                        p = p0 + i * lanes
                        for l in range(width):
                            v = xf[np.uint64(p + l)]
                            e = ext[l]
                            ext[l] = v if (v < e) | (v != v) else e
            w = lanes                                   # fold halves (as below)
            while w > inner and w > 16:
                w //= 2
                if kind == _MAX:
                    for l in range(w):
                        v, e = ext[l + w], ext[l]
                        ext[l] = v if (v > e) | (v != v) else e
                else:
                    for l in range(w):
                        v, e = ext[l + w], ext[l]
                        ext[l] = v if (v < e) | (v != v) else e
            for c in range(inner):
                value = np.float64(ext[c])
                for j in range(1, w // inner):
                    value = _combine(kind, value, np.float64(ext[j * inner + c]))
                outf[np.uint64(o * inner + c)] = np.float32(value)
            continue
        for l in range(lanes):
            acc[l] = init
        if kind == _ADD:                                # sum, mean, log-sum: inlined here
            for i in range(rows):
                p = base + i * lanes
                for l in range(lanes):
                    acc[l] += np.float64(xf[np.uint64(p + l)])
            p = base + rows * lanes
            for l in range(left):
                acc[l] += np.float64(xf[np.uint64(p + l)])
        else:
            _accumulate(xf, base, rows, lanes, lanes, kind, acc, shift)
            if left:
                _accumulate(xf, base + rows * lanes, 1, left, left, kind, acc, shift)
        # the pixels of a row, folded in halves down to 16 lanes (vector steps,
        # not per - 1 dependent scalar ones per element: 63 for a contiguous
        # row), then the last few lanes in turn (short folds cost more)
        w = lanes
        while w > inner and w > 16:
            w //= 2
            for l in range(w):
                acc[l] = _combine(kind, acc[l], acc[l + w])
        for c in range(inner):
            value = acc[c]
            for j in range(1, w // inner):
                value = _combine(kind, value, acc[j * inner + c])
            outf[np.uint64(o * inner + c)] = np.float32(_finish(op, value, R, 0.0))


@jit(parallel=True)
def _reduce_parallel(xf, outf, R, inner, op, row_lanes, tasks, groups):
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _reduce_tasks(xf, outf, R, inner, op, row_lanes, first, last)



@jit(parallel=True)
def _narrow_parallel(xf, outf, R, inner, op, lanes, tasks, groups):
    for g in prange(groups):
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _narrow_tasks(xf, outf, R, inner, op, lanes, first, last)


# --- register-accumulated rows --------------------------------------------------

#: ``inner`` widths with kernels of their own (:func:`lane_rows`): a plain row
#: (1) and the channel blocks
LANE_INNERS = (1, 4, 8, 16)
#: :func:`lane_rows`' families of ops: adds (sum, mean), max and min, the
#: others (L1, L2, sum of squares, log-sum, product)
ADDS, EXTREMES, OTHERS = range(3)
#: independent accumulator vectors per row (hide the add's latency)
_CHAINS = 4
#: the largest accumulator tile, ``_CHAINS * lanes`` (a stack tile's size
#: must be a constant)
_TILE = _CHAINS * 16


def lane_family(code: int) -> int:
    """The :func:`lane_rows` family of op ``code`` (not log-sum-exp)."""
    if code in (SUM, MEAN):
        return ADDS
    return EXTREMES if code in (MAX, MIN) else OTHERS


@kernel_factory
def lane_rows(inner: int, family: int):
    """The kernel of ``(outer, R, inner)`` for ``inner`` one of
    :data:`LANE_INNERS` and the ops of ``family`` (both constants of the
    kernel: one compile per pair, at its first use): rows ``o`` in ``groups``
    contiguous ranges of the ``tasks`` rows, in parallel (a
    :func:`parallel_kernel`: serial on one thread).

    A row's ``R * inner`` contiguous floats are read as vectors of ``L =
    max(inner, 8)`` lanes (lane ``l`` holds element ``l % inner``) into
    ``_CHAINS`` accumulator vectors, a stack tile indexed only by
    constant-trip loops, so that they stay in registers (the heap
    accumulators of :func:`_narrow_tasks` went through memory at every row:
    a 49-float plain row took ~20 ns). The last whole vectors go into the
    first chain; the chains are combined into a heap copy, which takes the
    tail's pixels (fewer than ``L`` floats), and for ``inner < L`` the lanes
    of each element are combined there (folding them in the tile made
    LLVM's SLP vectorizer split the whole tile into shuffled 4-float pieces:
    3x slower).
    Sums accumulate in float64; max and min in float32 (exact), min as the
    max of ``-x`` (one loop, no branch on the op in it), NaN carried as
    numpy's ``maximum``. The others branch on the op per element (slower);
    log-sum is one of them (its ``log`` call in the row loop cost the adds
    their vectors)."""
    L = max(inner, 8)
    T = _CHAINS
    dtype = np.float32 if family == EXTREMES else np.float64

    def lane_rows(xf, outf, R, op, tasks, groups):
        kind = _kind_of(op)
        width = R * inner
        vectors = width // L
        runs = vectors // T
        tail_pixels = (width - vectors * L) // inner
        sign = np.float32(-1.0 if op == MIN else 1.0)
        init = -np.inf if family == EXTREMES else _initial(kind)
        for g in prange(groups):
            first = np.int64(g) * tasks // groups
            last = (np.int64(g) + 1) * tasks // groups
            acc = numba.carray(stack_empty(_TILE, dtype), (T, L))
            spill = np.empty(L, dtype)
            for o in range(first, last):
                base = o * width
                for t in range(T):
                    for l in range(L):
                        acc[t, l] = init
                if family == ADDS:
                    for r in range(runs):
                        p = base + r * (T * L)
                        for t in range(T):
                            for l in range(L):
                                acc[t, l] += np.float64(xf[np.uint64(p + t * L + l)])
                    for k in range(runs * T, vectors):          # the last whole vectors
                        p = base + k * L
                        for l in range(L):
                            acc[0, l] += np.float64(xf[np.uint64(p + l)])
                    for t in range(1, T):
                        for l in range(L):
                            acc[0, l] += acc[t, l]
                elif family == EXTREMES:
                    for r in range(runs):
                        p = base + r * (T * L)
                        for t in range(T):
                            for l in range(L):
                                v, e = sign * xf[np.uint64(p + t * L + l)], acc[t, l]
                                acc[t, l] = v if (v > e) | (v != v) else e
                    for k in range(runs * T, vectors):
                        p = base + k * L
                        for l in range(L):
                            v, e = sign * xf[np.uint64(p + l)], acc[0, l]
                            acc[0, l] = v if (v > e) | (v != v) else e
                    for t in range(1, T):
                        for l in range(L):
                            v, e = acc[t, l], acc[0, l]
                            acc[0, l] = v if (v > e) | (v != v) else e
                else:
                    for r in range(runs):
                        p = base + r * (T * L)
                        for t in range(T):
                            for l in range(L):
                                acc[t, l] = _step(kind, acc[t, l],
                                                  np.float64(xf[np.uint64(p + t * L + l)]))
                    for k in range(runs * T, vectors):
                        p = base + k * L
                        for l in range(L):
                            acc[0, l] = _step(kind, acc[0, l], np.float64(xf[np.uint64(p + l)]))
                    for t in range(1, T):
                        for l in range(L):
                            acc[0, l] = _combine(kind, acc[0, l], acc[t, l])
                for l in range(L):
                    spill[l] = acc[0, l]
                # the tail's pixels (fewer than L floats) into the copy: in the
                # tile, a loop of a runtime count over its first lanes made
                # LLVM split the tile's vectors (plain max rows 30 % slower)
                p = base + vectors * L
                if family == EXTREMES:
                    # spread over the lanes (lane j holds element j % inner):
                    # stores at a runtime index, so LLVM does not read the
                    # lanes' fold below from the tile, which split its
                    # vectors (plain max rows of 3136: 85 -> 64 us)
                    for j in range(tail_pixels * inner):
                        v, e = sign * xf[np.uint64(p + j)], spill[j]
                        spill[j] = v if (v > e) | (v != v) else e
                else:
                    # (for adds, the spread tail cost short rows: 49 floats
                    # 15 -> 35 us per 2048)
                    for q in range(tail_pixels):
                        for l in range(inner):
                            v = np.float64(xf[np.uint64(p + q * inner + l)])
                            if family == ADDS:
                                spill[l] += v
                            else:
                                spill[l] = _step(kind, spill[l], v)
                for c in range(inner):                          # each element's lanes
                    value = spill[c]
                    for j in range(1, L // inner):
                        v = spill[j * inner + c]
                        if family == ADDS:
                            value += v
                        elif family == EXTREMES:
                            value = v if (v > value) | (v != v) else value
                        else:
                            value = _combine(kind, value, v)
                    if family == EXTREMES:
                        outf[np.uint64(o * inner + c)] = sign * value
                    elif family == ADDS:            # (not _finish: its calls cost the
                        # row loop its vectors, 64 -> 112 us for 256 x 3136 on 1 thread)
                        outf[np.uint64(o * inner + c)] = np.float32(
                            value / R if op == MEAN else value)
                    else:
                        outf[np.uint64(o * inner + c)] = np.float32(
                            _finish(op, np.float64(value), R, 0.0))

    lane_rows.__name__ = lane_rows.__qualname__ = f"lane_rows_{inner}_{family}"
    return parallel_kernel(lane_rows)


@jit()
def _step(kind, a, v):
    """``a`` with ``v`` accumulated (the kinds accumulated in float64)."""
    if kind == _ABS:
        return a + abs(v)
    if kind == _SQUARE:
        return a + v * v
    if kind == _PRODUCT:
        return a * v
    return a + v


# --- checked wrappers ------------------------------------------------------------

def _check(x, what="x", ndim=3, dtype=np.float32):
    if not isinstance(x, np.ndarray) or x.dtype != dtype:
        raise ValueError(f"reduce: {what} must be a {np.dtype(dtype).name} numpy array, "
                         f"got {getattr(x, 'dtype', type(x))}")
    if x.ndim != ndim or not x.flags.c_contiguous:
        raise ValueError(f"reduce: {what} must be a C-contiguous {ndim}-D array, got shape "
                         f"{x.shape}")


def _groups(tasks: int, elements: int) -> int:
    threads = numba_threads()
    if elements < _PARALLEL_MIN or tasks < 2 or threads == 1:
        return 1
    return min(tasks, threads)


def is_narrow(inner: int, code: int) -> bool:
    """Whether ``(outer, R, inner)`` is narrow (any op but log-sum-exp, an
    ``inner`` that divides 64): :func:`reduce` runs it with :func:`lane_rows`
    for an ``inner`` of :data:`LANE_INNERS`, else with :func:`_narrow_tasks`."""
    return inner <= _ROW_LANES and _ROW_LANES % inner == 0 and code != LOG_SUM_EXP


def narrow_lanes(R: int, inner: int, code: int) -> int:
    """The row width :func:`_narrow_tasks` reads ``(outer, R, inner)`` with:
    the widest power of two (at least 16 and ``inner``) of which a reduced
    run of ``R * inner`` floats holds three rows, up to 64 lanes (128 for max
    and min on runs of 1024+ floats: float32 accumulators). Measured, kernel
    alone, 1 thread: a 49-float row (a plain 7x7 mean) 80 -> 41 us per 2048
    rows at 16 lanes against 64; max over 784 pixels of cb = 8, 69 -> 42 us
    per 64 blocks at 128 lanes."""
    width = R * inner
    cap = 128 if code in (MAX, MIN) and width >= 1024 else _ROW_LANES
    lanes = max(16, inner)
    while 2 * lanes <= cap and 6 * lanes <= width:
        lanes *= 2
    return lanes


def _no_op(*args) -> None:
    """The call of an empty reduction (nothing to write)."""


def reduce_call(x, out, op):
    """:func:`reduce`'s checks, then its kernel call as ``(kernel, args)``
    (``kernel(*args)`` writes ``out``): a replayed plan keeps the pair and
    calls the kernel itself, without these checks (~3 us a call)."""
    code = OPS[op] if isinstance(op, str) else int(op)
    if not 0 <= code < len(OPS):
        raise ValueError(f"reduce: unknown op {op!r}")
    _check(x)
    _check(out, "out", 2)
    outer, R, inner = x.shape
    if out.shape != (outer, inner):
        raise ValueError(f"reduce: out has shape {out.shape}, expected {(outer, inner)} "
                         f"for x {x.shape}")
    if np.may_share_memory(x, out):
        raise ValueError("reduce: out must not overlap x")
    if out.size == 0:
        return _no_op, ()
    xf, outf = x.reshape(-1), out.reshape(-1)
    if inner in LANE_INNERS and code != LOG_SUM_EXP:
        kernel = lane_rows(inner, lane_family(code))
        groups = _groups(outer, x.size)
        # (one group: the serial compile, no parallel region)
        return kernel.on_threads(groups), (xf, outf, R, code, outer, groups)
    if is_narrow(inner, code):
        groups = _groups(outer, x.size)
        lanes = narrow_lanes(R, inner, code)
        if groups == 1:
            return _narrow_tasks, (xf, outf, R, inner, code, lanes, 0, outer)
        return _narrow_parallel, (xf, outf, R, inner, code, lanes, outer, groups)
    tasks = outer * ((inner + _LANE_CHUNK - 1) // _LANE_CHUNK)
    groups = _groups(tasks, x.size)
    if groups == 1:
        return _reduce_tasks, (xf, outf, R, inner, code, _ROW_LANES, 0, tasks)
    return _reduce_parallel, (xf, outf, R, inner, code, _ROW_LANES, tasks, groups)


def reduce(x, out, op):
    """``out[o, i]`` = reduction ``op`` (a name of :data:`OPS` or its code)
    of ``x[o, :, i]``. ``x: (outer, R, inner)``, ``out: (outer, inner)``,
    both float32. Returns ``out``."""
    kernel, args = reduce_call(x, out, op)
    kernel(*args)
    return out
