"""Pooling on blocked tensors: max_pool2d, average_pool2d, l2_pool2d,
global_average_pool2d.

Buffers (float32, C-contiguous; ``cb`` is the channel block, one of 1, 4, 8,
16, 32; ``C_phys = ceil(C / cb) * cb``; lanes past ``C`` are padding):

* input:  ``x: (N, C_phys // cb, H, W, cb)``; padding lanes zero
* output: ``out: (N, C_phys // cb, OH, OW, cb)``, every element written (``out``
  may come from ``np.empty``); padding lanes come out zero because the max,
  the average and the L2 norm of zeros are zero
* global average pooling: ``out: (N, C_phys // cb, 1, 1, cb)``, any ``cb`` (nhwc
  data comes as one block of all C channels) (its memory is
  also ``(N, C_phys)``, the per-(n, c) operand of ``eltwise``)

Geometry follows WebNN and ONNX: window ``(KH, KW)``, strides ``(sh, sw)``,
dilations ``(dh, dw)``, padding ``[top, bottom, left, right]``. Tap ``kh`` of
output row ``oh`` reads input row ``oh * sh - top + kh * dh`` (columns alike).
The caller gives the output size, so it may use ceil rounding
(:func:`pool_output_size` computes both roundings); then the last window can
reach past the explicit padding. No padded copy of the input is made: each
window is clipped to the input. For max and average, every window must hold
at least one tap inside the input (else ValueError): a window of padding
alone has no max and no average, and writing some value there would invent
data. The L2 norm of such a window is that of nothing, 0.

* max: the maximum over the taps inside the input (padding never wins, as if
  it were -inf).
* average: the sum over the taps inside the input, divided by the number of
  taps inside the input (``count_include_pad=False``), or by the number of taps
  inside the explicitly padded input ``[-top, H + bottom) x [-left, W + right)``
  (``count_include_pad=True``); taps past the explicit padding (ceil rounding)
  never count, as in ONNX and PyTorch.
* l2: ``sqrt`` of the sum of the squares of the taps inside the input
  (padding adds nothing; squares summed in float32). It runs as the average
  kernel with every divisor 1 over ``x * x`` (one numpy pass into a
  temporary), then a square root in place: the row kernel stays the max
  and average one (a third accumulation in it cost the other two their
  8-wide vectors).

How it is fast. The tap ranges and divisors of every output row and column
are computed once per call (``rows``, ``cols`` tables), so the kernel never
divides integers or tests borders per tap. The channel block is the vector:
lanes are processed in groups of ``G`` (8 = one AVX2 register, or 4, or 1 for
cb 1), accumulators live in a fixed-size stack array (registers), indexed
only by constant-trip loops. Interior output pixels (whose windows span the
whole kernel width) go 4 at a time through one flat list of tap offsets, so
4 independent max/add chains hide the instruction latency; border pixels
loop over their clipped window one at a time. One compiled kernel serves
every block size (the group width picks one of three compiled variants at
run time). Parallel over contiguous ranges of output rows
``(n, channel block, oh)``, one range per thread.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._config import jit, numba_threads, parallel_kernel
from ._linking import kernel_factory
from .epilogue import nan_maximum
from .stack import stack_empty

_NEG_INF = np.float32(-np.inf)
_ZERO = np.float32(0.0)
#: below this many output elements run serially
_PARALLEL_MIN = 16384
#: the widest channel block (the global average's stack accumulators)
_MAX_LANES = 32
#: what :func:`_pool2d` computes
AVERAGE, MAX, L2 = 0, 1, 2


# --- the row kernels --------------------------------------------------------
#
# rows: int64 (3, OH) = [first kh, end kh, divisor rows] per output row,
# cols: int64 (3, OW) = [first kw, end kw, divisor columns] per output column;
# geom: (CB, H, W, cb, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, is_max, c0, c1),
# where output columns [c0, c1) see the whole window width ("interior").

#: output pixels per interior tile: 4 independent accumulators hide the
#: latency of vmaxps/vaddps (a single chain would wait ~3 cycles per tap)
_TILE = 4


@kernel_factory
def pool_rows(G: int):
    """The kernel for output rows ``[first, last)`` with ``G`` lanes per vector
    (a compile-time constant: the ``range(G)`` loops unroll into one vector
    operation): the widest that divides cb (:func:`lane_group`). Captures
    only the int ``G``, so numba's cache keeps it. Standalone
    (kernels/_linking.py): the serial run calls it, and so does each thread of
    :func:`pool_parallel`'s."""

    def pool_rows(xf, outf, geom, rows, cols, first, last):
        CB, H, W, cb, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, is_max, c0, c1 = geom
        acc = numba.carray(stack_empty(32, np.float32), (_TILE, 8))
        offsets = np.empty(KH * KW, np.int64)
        for task in range(first, last):
            oh = task % OH
            plane = task // OH                 # n * CB + channel block
            kh0, kh1 = rows[0, oh], rows[1, oh]
            ih0 = oh * sh - pt
            # flat offsets of the window's taps inside the input rows, for an
            # interior output pixel (relative to tap (0, 0) of its window)
            taps = 0
            for kh in range(kh0, kh1):
                for kw in range(KW):
                    offsets[taps] = (kh * dh * W + kw * dw) * cb
                    taps += 1
            ow = 0
            while ow < OW:
                o = (task * OW + ow) * cb      # task * OW == (plane * OH + oh) * OW
                origin = ((plane * H + ih0) * W + ow * sw - pl) * cb
                if c0 <= ow and ow + _TILE <= c1 and taps > 0:
                    # _TILE interior pixels: one pass over the taps
                    for g in range(0, cb, G):
                        for t in range(_TILE):
                            for lane in range(G):
                                acc[t, lane] = _NEG_INF if is_max else _ZERO
                        for k in range(taps):
                            p = origin + offsets[k] + g
                            if is_max:
                                for t in range(_TILE):
                                    for lane in range(G):
                                        acc[t, lane] = nan_maximum(
                                            xf[np.uint64(p + t * sw * cb + lane)], acc[t, lane])
                            else:
                                for t in range(_TILE):
                                    for lane in range(G):
                                        acc[t, lane] += xf[np.uint64(p + t * sw * cb + lane)]
                        for t in range(_TILE):
                            divisor = np.float32(1.0 if is_max
                                                 else rows[2, oh] * cols[2, ow + t])
                            for lane in range(G):
                                outf[np.uint64(o + t * cb + g + lane)] = acc[t, lane] / divisor
                    ow += _TILE
                    continue
                # one pixel, its window clipped to the input (border, tail)
                kw0, kw1 = cols[0, ow], cols[1, ow]     # empty for l2 only: _pool2d checks
                divisor = np.float32(1.0 if is_max else rows[2, oh] * cols[2, ow])
                for g in range(0, cb, G):
                    for lane in range(G):
                        acc[0, lane] = _NEG_INF if is_max else _ZERO
                    for kh in range(kh0, kh1):
                        row = origin + kh * dh * W * cb + g
                        for kw in range(kw0, kw1):
                            p = row + kw * dw * cb
                            if is_max:
                                for lane in range(G):
                                    acc[0, lane] = nan_maximum(xf[np.uint64(p + lane)],
                                                               acc[0, lane])
                            else:
                                for lane in range(G):
                                    acc[0, lane] += xf[np.uint64(p + lane)]
                    for lane in range(G):
                        outf[np.uint64(o + g + lane)] = acc[0, lane] / divisor
                ow += 1

    pool_rows.__name__ = pool_rows.__qualname__ = f"pool_rows_g{G}"
    return jit(standalone=True)(pool_rows)


def lane_group(cb: int) -> int:
    """Lanes per vector of the pooling kernels for block ``cb``: 8, 4 or 1."""
    return 8 if cb % 8 == 0 else 4 if cb % 4 == 0 else 1


_pool_rows_g8, _pool_rows_g4, _pool_rows_g1 = pool_rows(8), pool_rows(4), pool_rows(1)


@kernel_factory
def pool_parallel(G: int):
    """``groups`` contiguous ranges of the ``tasks`` output rows, in
    parallel, each by ``pool_rows(G)``. (It captures only ``G``: a captured
    dispatcher would make numba's cache key differ in every process.)"""

    def pool_parallel(xf, outf, geom, rows, cols, tasks, groups):
        for g in prange(groups):
            first = np.int64(g) * tasks // groups
            last = (np.int64(g) + 1) * tasks // groups
            if G == 8:
                _pool_rows_g8(xf, outf, geom, rows, cols, first, last)
            elif G == 4:
                _pool_rows_g4(xf, outf, geom, rows, cols, first, last)
            else:
                _pool_rows_g1(xf, outf, geom, rows, cols, first, last)

    pool_parallel.__name__ = pool_parallel.__qualname__ = f"pool_parallel_g{G}"
    return jit(parallel=True)(pool_parallel)


# --- geometry (Python) --------------------------------------------------------

def pool_output_size(size, kernel, stride=1, dilation=1, pad_begin=0, pad_end=0,
                     rounding="floor", ceil_drops_window_in_padding=True):
    """Output length of a pooling window along one axis (WebNN and ONNX).

    ``floor((size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)) / stride) + 1``,
    or with ``ceil`` instead of ``floor`` for ``rounding="ceil"``. With ceil
    rounding, ONNX and PyTorch drop a last window that would start inside the
    end padding (``(out - 1) * stride >= size + pad_begin``);
    ``ceil_drops_window_in_padding=False`` keeps it (the plain ceil formula:
    that window holds no input element, and the kernels refuse it).
    May return a value < 1 for impossible geometry: the caller reports it.
    """
    if rounding not in ("floor", "ceil"):
        raise ValueError(f"pool: rounding must be 'floor' or 'ceil', got {rounding!r}")
    span = size + pad_begin + pad_end - ((kernel - 1) * dilation + 1)
    if span < 0:
        return span // stride + 1                 # < 1: the window does not fit
    if rounding == "floor":
        return span // stride + 1
    out = -(-span // stride) + 1
    if ceil_drops_window_in_padding and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


@jit()
def _tap_table(out_size, size, kernel, stride, dilation, pad_begin, pad_end,
               count_include_pad):
    """int64 ``(3, out_size)``: the first and end tap inside the input for each
    output position, and the number of taps the average divides by. (Jitted:
    the same loops in numpy calls would cost tens of microseconds per op.)"""
    table = np.zeros((3, out_size), np.int64)
    for o in range(out_size):
        start = o * stride - pad_begin              # input index of tap 0
        first, end, padded = kernel, kernel, 0
        for k in range(kernel):
            i = start + k * dilation
            if 0 <= i < size:
                first = min(first, k)
                end = k + 1                         # inside taps are contiguous
            if -pad_begin <= i < size + pad_end:
                padded += 1
        if first == kernel:                         # no tap inside: an empty range
            first = end = 0
        table[0, o] = first
        table[1, o] = end
        table[2, o] = padded if count_include_pad else end - first
    return table


@jit()
def _first_empty(table):
    """The first output position of a :func:`_tap_table` whose window has no
    tap inside the input (an empty tap range), or -1."""
    for o in range(table.shape[1]):
        if table[0, o] == table[1, o]:
            return o
    return -1


def _pair(value, name):
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"pool: {name} must be an int or a pair, got {value}")
    return value


def _padding(padding):
    if isinstance(padding, (int, np.integer)):
        return (int(padding),) * 4
    padding = tuple(int(p) for p in padding)
    if len(padding) == 2:                       # (h, w)
        return padding[0], padding[0], padding[1], padding[1]
    if len(padding) != 4:
        raise ValueError(f"pool: padding must be an int, (h, w) or [top, bottom, left, "
                         f"right], got {padding}")
    return padding


def _check_array(what, a, ndim=5):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"pool: {what} must be a float32 numpy array, "
                         f"got {getattr(a, 'dtype', type(a))}")
    if a.ndim != ndim:
        raise ValueError(f"pool: {what} must be blocked (N, C_phys // cb, H, W, cb), "
                         f"got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"pool: {what} must be C-contiguous")


def _pool2d(x, out, kernel, strides, dilations, padding, kind, count_include_pad):
    _check_array("x", x)
    _check_array("out", out)
    N, CB, H, W, cb = x.shape
    KH, KW = _pair(kernel, "kernel")
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    pt, pb, pl, pr = _padding(padding)
    if min(KH, KW, sh, sw, dh, dw) < 1 or min(pt, pb, pl, pr) < 0:
        raise ValueError(f"pool: kernel {(KH, KW)}, strides {(sh, sw)} and dilations "
                         f"{(dh, dw)} must be >= 1 and padding {(pt, pb, pl, pr)} >= 0")
    if out.shape[:2] != (N, CB) or out.shape[4] != cb or min(out.shape[2:4]) < 1:
        raise ValueError(f"pool: out has shape {out.shape}, expected "
                         f"({N}, {CB}, OH, OW, {cb}) with OH, OW >= 1 for x {x.shape}")
    if np.may_share_memory(x, out):
        raise ValueError("pool: out must not overlap x")
    OH, OW = out.shape[2], out.shape[3]
    rows = _tap_table(OH, H, KH, sh, dh, pt, pb, count_include_pad)
    cols = _tap_table(OW, W, KW, sw, dw, pl, pr, count_include_pad)
    for axis, table in (("row", rows), ("column", cols)):
        empty = -1 if kind == L2 else _first_empty(table)
        if empty >= 0:
            raise ValueError(f"pool: every window must hold an input element, but the window "
                             f"of output {axis} {empty} lies wholly in the padding or past it "
                             f"(x {x.shape}, out {out.shape}, kernel {(KH, KW)}, strides "
                             f"{(sh, sw)}, dilations {(dh, dw)}, padding {(pt, pb, pl, pr)})")
    interior = np.flatnonzero((cols[0] == 0) & (cols[1] == KW))   # a contiguous range
    c0, c1 = (int(interior[0]), int(interior[-1]) + 1) if interior.size else (0, 0)
    if kind == L2:
        # the sum of the squares: an average with divisor 1 over x * x (an
        # empty window sums nothing: 0)
        rows[2], cols[2] = 1, 1
        x = np.square(x)
    geom = (CB, H, W, cb, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, int(kind == MAX), c0, c1)
    xf, outf = x.reshape(-1), out.reshape(-1)
    tasks = N * CB * OH
    threads = numba_threads()
    G = lane_group(cb)
    if out.size < _PARALLEL_MIN or tasks == 1 or threads == 1:
        # one thread: the same rows in a plain call (no OpenMP region)
        pool_rows(G)(xf, outf, geom, rows, cols, 0, tasks)
    else:
        pool_parallel(G)(xf, outf, geom, rows, cols, tasks, min(tasks, threads))
    if kind == L2:
        np.sqrt(out, out=out)
    return out


def max_pool2d(x, out, kernel, strides=1, dilations=1, padding=0):
    """Max pooling: ``out[n, c, oh, ow]`` = the max of the window's taps inside
    the input. ``x: (N, C_phys // cb, H, W, cb)``, ``out: (N, C_phys // cb, OH,
    OW, cb)`` with the caller's OH, OW (see :func:`pool_output_size`).
    ``kernel``, ``strides``, ``dilations``: an int or ``(h, w)``; ``padding``:
    an int, ``(h, w)`` or ``[top, bottom, left, right]``. Returns ``out``."""
    return _pool2d(x, out, kernel, strides, dilations, padding, MAX, False)


def average_pool2d(x, out, kernel, strides=1, dilations=1, padding=0,
                   count_include_pad=False):
    """Average pooling (arguments as :func:`max_pool2d`). The divisor counts
    the taps inside the input, or with ``count_include_pad`` the taps inside
    the explicitly padded input (never those past it). Returns ``out``."""
    return _pool2d(x, out, kernel, strides, dilations, padding, AVERAGE, count_include_pad)


def l2_pool2d(x, out, kernel, strides=1, dilations=1, padding=0):
    """L2 pooling (arguments as :func:`max_pool2d`): ``sqrt`` of the sum of
    the squares of the window's taps inside the input (a window wholly in the
    padding or past the input gives 0). Returns ``out``."""
    return _pool2d(x, out, kernel, strides, dilations, padding, L2, False)


def global_average_pool2d(x, out):
    """``out: (N, C_phys // cb, 1, 1, cb)`` = the mean over H, W of
    ``x: (N, C_phys // cb, H, W, cb)``.

    Its own kernel, not the average pool with the whole plane as window: that
    one built tap tables for a single huge window (0.1 ms for MobileNetV2's
    1280 x 7 x 7, against 12 us in ONNX Runtime)."""
    kernel, args = global_average_pool2d_call(x, out)
    kernel(*args)
    return out


def global_average_pool2d_call(x, out):
    """:func:`global_average_pool2d`'s checks, then its kernel call as
    ``(kernel, args)``: a replayed plan keeps the pair and calls the
    compiled kernel itself (MobileNetV2's pool step, 1 x 1280 x 7 x 7 after
    a conv that leaves the interpreter out of the caches: 73 us through this
    function against 14-18 us in the kernel)."""
    _check_array("x", x)
    _check_array("out", out)
    N, CB, H, W, cb = x.shape
    if out.shape != (N, CB, 1, 1, cb):
        raise ValueError(f"pool: out has shape {out.shape}, expected ({N}, {CB}, 1, 1, {cb}) "
                         f"for x {x.shape}")
    if np.may_share_memory(x, out):
        raise ValueError("pool: out must not overlap x")
    return plane_means(cb if cb in _BLOCKS else 0), (x.reshape(-1), out.reshape(-1),
                                                     N * CB, H * W, cb)


@jit(standalone=True)
def _plane_means(xf, outf, first, end, pixels, cb):
    """Planes ``first .. end-1`` (each ``pixels`` x ``cb`` floats): the mean
    of each lane, summed in a stack array that stays in registers (``cb`` a
    compile-time constant, so the lane loops have constant trip counts)."""
    numba.literally(cb)
    acc = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    scale = np.float32(1.0) / np.float32(pixels)
    for plane in range(first, end):
        base = plane * pixels * cb
        for lane in range(cb):
            acc[lane] = np.float32(0.0)
        for p in range(pixels):
            for lane in range(cb):
                acc[lane] += xf[np.uint64(base + p * cb + lane)]
        for lane in range(cb):
            outf[np.uint64(plane * cb + lane)] = acc[lane] * scale


#: the block sizes :func:`plane_means` has a kernel of its own for
_BLOCKS = (1, 4, 8, 16, 32)


@kernel_factory
def plane_means(cb: int):
    """The plane means of ``lanes``-lane blocks, tasks of 16 planes: ``cb`` one
    of :data:`_BLOCKS` (a constant of the kernel: one per block size, each
    compiled at its first use; from Python, a literal argument would be
    dispatched anew at every call), or 0 for any other lane count (nhwc data
    seen as one block of all C channels, ``(N, 1, H, W, C)``)."""

    def plane_means(xf, outf, planes, pixels, lanes):
        chunks = (planes + 15) // 16
        for chunk in prange(chunks):
            first, end = np.int64(chunk) * 16, min(planes, np.int64(chunk) * 16 + 16)
            if cb:
                _plane_means(xf, outf, first, end, pixels, cb)
            else:
                _plane_means_any(xf, outf, first, end, pixels, lanes)

    plane_means.__name__ = plane_means.__qualname__ = f"plane_means_cb{cb}"
    return parallel_kernel(plane_means)


@jit(standalone=True)
def _plane_means_any(xf, outf, first, end, pixels, lanes):
    """:func:`_plane_means` for any lane count, summing in ``outf``."""
    scale = np.float32(1.0) / np.float32(pixels)
    for plane in range(first, end):
        base = plane * pixels * lanes
        o = plane * lanes
        for lane in range(lanes):
            outf[np.uint64(o + lane)] = np.float32(0.0)
        for p in range(pixels):
            for lane in range(lanes):
                outf[np.uint64(o + lane)] += xf[np.uint64(base + p * lanes + lane)]
        for lane in range(lanes):
            outf[np.uint64(o + lane)] *= scale
