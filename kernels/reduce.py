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

How it is fast. Every accumulation is a loop over ``R`` rows of ``lanes``
contiguous floats, adding into ``lanes`` float64 accumulators: the lane loop
has no dependency between iterations, so LLVM's loop vectorizer turns it into
AVX2 code without reassociating any sum (jitnn compiles without ``reassoc``).
A narrow ``inner`` (1: a contiguous row, e.g. a plain NCHW tensor over H and
W; ``cb``: a blocked tensor) is read as rows of 64 contiguous lanes, 64 // inner
pixels each, whose partial results and the tail are combined at the end;
such rows (every op but log-sum-exp) run a lean body of their own,
:func:`_narrow_tasks`, with max and min accumulated in float32 (exact),
on rows as wide as the run allows (:func:`narrow_lanes`).
Parallel over the ``outer`` rows (and over chunks of ``inner`` when it is
wide), in contiguous ranges, one per thread; small inputs run serially.
"""

from __future__ import annotations

import math

import numpy as np
from numba import prange

from ._config import jit, numba_threads
from .epilogue import nan_maximum, nan_minimum

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
    """Whether :func:`reduce` runs ``(outer, R, inner)`` with
    :func:`_narrow_tasks` (a narrow ``inner``, any op but log-sum-exp)."""
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


def reduce(x, out, op):
    """``out[o, i]`` = reduction ``op`` (a name of :data:`OPS` or its code)
    of ``x[o, :, i]``. ``x: (outer, R, inner)``, ``out: (outer, inner)``,
    both float32. Returns ``out``."""
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
        return out
    xf, outf = x.reshape(-1), out.reshape(-1)
    if is_narrow(inner, code):
        groups = _groups(outer, x.size)
        lanes = narrow_lanes(R, inner, code)
        if groups == 1:
            _narrow_tasks(xf, outf, R, inner, code, lanes, 0, outer)
        else:
            _narrow_parallel(xf, outf, R, inner, code, lanes, outer, groups)
        return out
    tasks = outer * ((inner + _LANE_CHUNK - 1) // _LANE_CHUNK)
    groups = _groups(tasks, x.size)
    if groups == 1:
        _reduce_tasks(xf, outf, R, inner, code, _ROW_LANES, 0, tasks)
    else:
        _reduce_parallel(xf, outf, R, inner, code, _ROW_LANES, tasks, groups)
    return out
