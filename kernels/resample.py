"""2-D resampling of blocked tensors along H and W: nearest neighbour and
bilinear, WebNN's resample2d.

Buffers (float32, C-contiguous; ``cb`` is the channel block, any size >= 1:
1 for plain NCHW seen as ``nChw1c``, C for plain NHWC seen as one block;
``C_phys = ceil(C / cb) * cb``; lanes past ``C`` are padding):

* input:  ``x: (N, C_phys // cb, H, W, cb)``; padding lanes zero
* output: ``out: (N, C_phys // cb, OH, OW, cb)``, every element written
  (``out`` may come from ``np.empty``); padding lanes stay zero (every
  output lane is a weighted sum of the same lane of the input)

Sampling (WebNN, as ONNX Resize with ``coordinate_transformation_mode =
half_pixel``): output index ``o`` of an axis of input size ``n`` and output
size ``m`` maps to the input coordinate ``x = (o + 0.5) * n / m - 0.5``,
clamped to ``[0, n - 1]`` (the scale is ``m / n``, the ratio of the sizes).

* nearest neighbour: index ``ceil(x - 0.5)`` (``round_prefer_floor``: a tie
  takes the smaller index), computed exactly in integers;
* linear: ``(1 - f) * x[i] + f * x[i + 1]`` with ``i = floor(x)``, ``f = x -
  i`` (``i + 1`` clamped to ``n - 1``), along W and then H.

:func:`sample_table` computes the indices and weights of every output row
and column once per call; the kernel never divides. Each output row
``(n, channel block, oh)`` is one task, its lanes the vector: parallel over
contiguous ranges of those rows, one range per thread; small outputs run on
one thread. One compiled kernel serves both modes and every block size.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._config import jit, numba_threads

#: below this many output elements run serially
_PARALLEL_MIN = 32768


def sample_table(out_size: int, in_size: int, linear: bool):
    """``(index, weight)`` of one axis: ``index`` int64 ``(2, out_size)`` the
    two input indices each output reads, ``weight`` float32 ``(2, out_size)``
    their weights (nearest: the index twice, weights 1 and 0)."""
    if out_size < 1 or in_size < 1:
        raise ValueError(f"resample: sizes must be >= 1, got {in_size} -> {out_size}")
    o = np.arange(out_size, dtype=np.int64)
    index = np.empty((2, out_size), np.int64)
    weight = np.zeros((2, out_size), np.float32)
    if not linear:
        # ceil(x - 0.5) = ceil(((2o + 1) n - 2m) / 2m), exactly
        p, q = (2 * o + 1) * in_size - 2 * out_size, 2 * out_size
        index[0] = index[1] = np.clip(-((-p) // q), 0, in_size - 1)
        weight[0] = 1.0
        return index, weight
    x = np.clip(((2 * o + 1) * in_size - out_size) / (2.0 * out_size), 0.0, in_size - 1)
    first = np.minimum(np.floor(x).astype(np.int64), in_size - 1)
    index[0], index[1] = first, np.minimum(first + 1, in_size - 1)
    fraction = x - first
    weight[0], weight[1] = 1.0 - fraction, fraction
    return index, weight


@jit(standalone=True)
def _resample_rows(xf, outf, geom, rows, row_w, cols, col_w, first, last):
    """Output rows ``[first, last)`` (task = (n * CB + block) * OH + oh)."""
    H, W, cb, OH, OW, linear = geom
    for task in range(first, last):
        oh = task % OH
        plane = task // OH                   # n * CB + channel block
        o = task * OW * cb
        r0 = (plane * H + rows[0, oh]) * W * cb
        if not linear:
            for ow in range(OW):
                src = r0 + cols[0, ow] * cb
                dst = o + ow * cb
                for lane in range(cb):
                    outf[np.uint64(dst + lane)] = xf[np.uint64(src + lane)]
            continue
        r1 = (plane * H + rows[1, oh]) * W * cb
        wy0, wy1 = row_w[0, oh], row_w[1, oh]
        for ow in range(OW):
            a, b = cols[0, ow] * cb, cols[1, ow] * cb
            wx0, wx1 = col_w[0, ow], col_w[1, ow]
            dst = o + ow * cb
            for lane in range(cb):
                top = xf[np.uint64(r0 + a + lane)] * wx0 + xf[np.uint64(r0 + b + lane)] * wx1
                bottom = xf[np.uint64(r1 + a + lane)] * wx0 + xf[np.uint64(r1 + b + lane)] * wx1
                outf[np.uint64(dst + lane)] = top * wy0 + bottom * wy1


@jit(parallel=True)
def _resample_parallel(xf, outf, geom, rows, row_w, cols, col_w, tasks, groups):
    """``groups`` contiguous ranges of the ``tasks`` output rows, in parallel."""
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _resample_rows(xf, outf, geom, rows, row_w, cols, col_w,
                       first, last)


def _check_array(what, a):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"resample: {what} must be a float32 numpy array, "
                         f"got {getattr(a, 'dtype', type(a))}")
    if a.ndim != 5:
        raise ValueError(f"resample: {what} must be blocked (N, C_phys // cb, H, W, cb), "
                         f"got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"resample: {what} must be C-contiguous")


def resample2d(x, out, linear=False):
    """Resample the H and W axes of blocked ``x`` to ``out``'s ``(OH, OW)``,
    bilinear if ``linear`` else nearest neighbour (see the module docstring).
    Returns ``out``."""
    _check_array("x", x)
    _check_array("out", out)
    N, CB, H, W, cb = x.shape
    if out.shape[:2] != (N, CB) or out.shape[4] != cb:
        raise ValueError(f"resample: out has shape {out.shape}, expected ({N}, {CB}, OH, OW, "
                         f"{cb}) for x {x.shape}")
    OH, OW = out.shape[2], out.shape[3]
    if min(H, W, OH, OW) < 1:
        raise ValueError(f"resample: H, W and OH, OW must be >= 1, got x {x.shape} -> "
                         f"out {out.shape}")
    if np.may_share_memory(x, out):
        raise ValueError("resample: out must not overlap x")
    if out.size == 0:
        return out
    rows, row_w = sample_table(OH, H, linear)
    cols, col_w = sample_table(OW, W, linear)
    geom = (H, W, cb, OH, OW, int(bool(linear)))
    xf, outf = x.reshape(-1), out.reshape(-1)
    tasks = N * CB * OH
    threads = numba_threads()
    if out.size < _PARALLEL_MIN or tasks == 1 or threads == 1:
        _resample_rows(xf, outf, geom, rows, row_w, cols, col_w, 0, tasks)
    else:
        _resample_parallel(xf, outf, geom, rows, row_w, cols, col_w, tasks,
                           min(tasks, threads))
    return out
