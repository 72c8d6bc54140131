"""Padding of blocked tensors along H and W: constant, edge and reflection.

Buffers (float32, C-contiguous; ``cb`` is the channel block, any size >= 1:
1 for plain NCHW seen as ``nChw1c``, C for plain NHWC seen as one block;
``C_phys = ceil(C / cb) * cb``; lanes past ``C`` are padding):

* input:  ``x: (N, C_phys // cb, H, W, cb)``; padding lanes zero
* output: ``out: (N, C_phys // cb, top + H + bottom, left + W + right, cb)``,
  every element written (``out`` may come from ``np.empty``). Padding lanes
  stay zero: edge and reflection copy input lanes, and the constant goes to
  the real lanes only (``fill``, one vector per channel block).

Output row ``oh`` reads input row ``oh - top`` when it lies in ``[0, H)``;
outside it (columns alike), by ``mode``:

* ``CONSTANT``: the constant ``value``;
* ``EDGE``: the nearest input row (the index clamped to ``[0, H - 1]``);
* ``REFLECTION``: the row mirrored about the first or last one, which is
  not repeated (``-1 -> 1``, ``H -> H - 2``); needs padding < H (checked).

Each output row ``(n, channel block, oh)`` is one task: a fill row, or the
left border columns (one ``cb`` vector each), the input row's ``W * cb``
floats in one contiguous copy, and the right border columns. Parallel over
contiguous ranges of those rows, one range per thread; memory-bound, so
small outputs run on one thread.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._config import jit, numba_threads

#: the padding modes (WebNN's ``"constant"``, ``"edge"``, ``"reflection"``)
CONSTANT, EDGE, REFLECTION = 0, 1, 2
#: below this many output elements run serially
_PARALLEL_MIN = 32768


@jit()
def _source(i, size, mode):
    """The input index that position ``i`` of a padded axis reads (``i``
    relative to the input's start), or -1 for the constant."""
    if 0 <= i < size:
        return i
    if mode == CONSTANT:
        return -1
    if mode == EDGE:
        return 0 if i < 0 else size - 1
    return -i if i < 0 else 2 * (size - 1) - i       # REFLECTION (padding < size)


@jit()
def _border(xf, outf, fill, o, row, iw, cb, blk):
    """One border column: the ``cb`` lanes of input column ``iw`` of the
    input row starting at ``row``, or the block's fill vector (``iw < 0``)."""
    if iw < 0:
        for lane in range(cb):
            outf[np.uint64(o + lane)] = fill[blk, lane]
    else:
        src = row + iw * cb
        for lane in range(cb):
            outf[np.uint64(o + lane)] = xf[np.uint64(src + lane)]


@jit(standalone=True)
def _pad_rows(xf, outf, geom, fill, first, last):
    """Output rows ``[first, last)`` (task = (n * CB + block) * OH + oh)."""
    CB, H, W, cb, OH, OW, top, left, mode = geom
    for task in range(first, last):
        oh = task % OH
        plane = task // OH                   # n * CB + channel block
        blk = plane % CB
        o = task * OW * cb
        ih = _source(oh - top, H, mode)
        if ih < 0:                           # a row of the constant
            for ow in range(OW):
                for lane in range(cb):
                    outf[np.uint64(o + ow * cb + lane)] = fill[blk, lane]
            continue
        row = (plane * H + ih) * W * cb
        for ow in range(left):
            _border(xf, outf, fill, o + ow * cb, row, _source(ow - left, W, mode), cb, blk)
        middle = o + left * cb
        for k in range(W * cb):
            outf[np.uint64(middle + k)] = xf[np.uint64(row + k)]
        for ow in range(left + W, OW):
            _border(xf, outf, fill, o + ow * cb, row, _source(ow - left, W, mode), cb, blk)


@jit(parallel=True)
def _pad_parallel(xf, outf, geom, fill, tasks, groups):
    """``groups`` contiguous ranges of the ``tasks`` output rows, in parallel."""
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _pad_rows(xf, outf, geom, fill, first, last)


def _check_array(what, a):
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"pad: {what} must be a float32 numpy array, "
                         f"got {getattr(a, 'dtype', type(a))}")
    if a.ndim != 5:
        raise ValueError(f"pad: {what} must be blocked (N, C_phys // cb, H, W, cb), "
                         f"got shape {a.shape}")
    if not a.flags.c_contiguous:
        raise ValueError(f"pad: {what} must be C-contiguous")


def pad2d(x, out, padding, mode=CONSTANT, value=0.0, channels=None):
    """Pad the H and W axes of blocked ``x`` into ``out``.

    ``padding``: ``(top, bottom, left, right)``, each >= 0 (for
    ``REFLECTION`` below the size of its axis); ``mode``: ``CONSTANT``,
    ``EDGE`` or ``REFLECTION``; ``value``: the constant (``CONSTANT``);
    ``channels``: the real channel count C (default: every lane is real),
    whose lanes alone get the constant. Returns ``out``."""
    _check_array("x", x)
    _check_array("out", out)
    N, CB, H, W, cb = x.shape
    top, bottom, left, right = (int(p) for p in padding)
    if min(top, bottom, left, right) < 0:
        raise ValueError(f"pad: padding must be >= 0, got {tuple(padding)}")
    if mode not in (CONSTANT, EDGE, REFLECTION):
        raise ValueError(f"pad: mode must be CONSTANT, EDGE or REFLECTION, got {mode!r}")
    channels = CB * cb if channels is None else int(channels)
    if not (CB - 1) * cb < channels <= CB * cb and not (CB == 0 and channels == 0):
        raise ValueError(f"pad: {channels} channels do not fill the last of {CB} blocks "
                         f"of {cb}")
    expected = (N, CB, top + H + bottom, left + W + right, cb)
    if out.shape != expected:
        raise ValueError(f"pad: out has shape {out.shape}, expected {expected} for x "
                         f"{x.shape} and padding {(top, bottom, left, right)}")
    if mode != CONSTANT:
        for name, size, pads in (("H", H, (top, bottom)), ("W", W, (left, right))):
            limit = size if mode == REFLECTION else 1 if size == 0 else None
            if limit is not None and max(pads) >= limit and max(pads) > 0:
                rule = (f"padding < {name} = {size}" if mode == REFLECTION
                        else f"a non-empty {name} axis")
                raise ValueError(f"pad: {'reflection' if mode == REFLECTION else 'edge'} "
                                 f"padding needs {rule}, got {pads}")
    if np.may_share_memory(x, out):
        raise ValueError("pad: out must not overlap x")
    if out.size == 0:
        return out
    fill = np.zeros((CB, cb), np.float32)
    fill.reshape(-1)[:channels] = np.float32(value)
    OH, OW = expected[2], expected[3]
    geom = (CB, H, W, cb, OH, OW, top, left, mode)
    xf, outf = x.reshape(-1), out.reshape(-1)
    tasks = N * CB * OH
    threads = numba_threads()
    if out.size < _PARALLEL_MIN or tasks == 1 or threads == 1:
        _pad_rows(xf, outf, geom, fill, 0, tasks)
    else:
        _pad_parallel(xf, outf, geom, fill, tasks, min(tasks, threads))
    return out
