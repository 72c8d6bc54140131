"""Layout conversions of activations (reorders) between plain and blocked
tensors; the public face of the layout kernels.

Buffers (``cb`` is the channel block, any of 1, 4, 8, 16, 32;
``C_phys = ceil(C / cb) * cb``; lanes past ``C`` are padding and are zero):

* ``nchw``:      ``x: (N, C, H, W)``
* ``nhwc``:      ``x: (N, H, W, C)``
* ``nChw{cb}c``: ``x: (N, C_phys // cb, H, W, cb)``; element ``(n, c, h, w)``
  sits at ``[n, c // cb, h, w, c % cb]``
* filters: see :mod:`.filter_packing` (``pack_filter``,
  ``group_input_block_ranges``, re-exported here)

Modules: this one holds nchw <-> nChw{cb}c; :mod:`.layout_nhwc` holds nhwc
<-> nChw{cb}c (re-exported here); :mod:`.layout_simd` the register
intrinsics for partial blocks; :mod:`.layout_tuning` the task and tile sizes
they share.

Every kernel writes every element of its output, padding lanes included, so
outputs can come from ``np.empty``.

How they run. ``H`` and ``W`` never matter to a reorder: a channel plane is
``H * W`` contiguous pixels in both nchw and nChw{cb}c, so the kernels walk
flat pixel ranges (no short-row overhead at small W). Tasks are fixed chunks
of ``_CHUNK`` pixels, so a thread gets long runs and few tasks. The planar
kernels move 8 (or 4) pixels x 8 (or 4) channels per register transpose; the
nhwc kernels move one pixel's block as one vector, a group of 8 pixels (cb = 8)
or a tile of pixels per block at a time so each output line is written whole
before moving on (the planes
are a power-of-two apart at the benchmark sizes and would otherwise fight over
the same L1 sets). Partial blocks (C = 3) go through the same vector code with
zero rows or masked lanes instead of element loops. Past the caches, three
of them (to nChw8c, and nChw8c -> nhwc) store with non-temporal hints, which
write whole lines without reading them first: that is why those three are
thin Python wrappers that pass numba's thread count to the kernel. Every
reorder and ``pack_filter`` also has a serial compile that runs on one thread
(``_config.parallel_kernel``: 4-9 % faster there than the parallel one).
"""

import numpy as np
from numba import prange

from ._config import jit, numba_threads, parallel_kernel
from .filter_packing import group_input_block_ranges, pack_filter
from .layout_nhwc import blocked_to_nhwc, nhwc_to_blocked
from .layout_simd import (transpose4_cropped, transpose4_padded, transpose8_cropped,
                          transpose8_padded, transpose8_padded4, transpose8_pair,
                          transpose8_pair_cropped, transpose16_low4_cropped)
from .layout_tuning import _CHUNK, _PLANAR_TILE, _STREAM_BYTES, _stores_stream
from .simd import (stream_fence, transpose4, transpose8, transpose8_split,
                   transpose8_split_streaming)

__all__ = ["blocked_to_nchw", "blocked_to_nhwc", "group_input_block_ranges",
           "nchw_to_blocked", "nhwc_to_blocked", "pack_filter"]


# --- nchw <-> nChw{cb}c ------------------------------------------------------

def nchw_to_blocked(x, out) -> None:
    """``x: (N, C, H, W)`` -> ``out: (N, C_phys // cb, H, W, cb)``.

    One task per ``_CHUNK`` pixels of one (image, block) plane: the source is
    ``cb`` planes of ``H * W`` pixels, the target one contiguous run. Each step
    is a register transpose of 8 pixels x 8 channels (4 x 4 for cb = 4; cb 16
    and 32 do 2 or 4 of them); a partial block's missing channels are zero
    rows of the transpose. Pixels past the last multiple of 8 are copied one by one.
    Past the caches, full blocks of 8 go out with non-temporal stores when
    ``out`` is 32-byte aligned (as the runtime allocates it).
    """
    threads = numba_threads()
    _nchw_to_blocked.on_threads(threads)(x, out, threads)


@parallel_kernel
def _nchw_to_blocked(x, out, threads):
    """:func:`nchw_to_blocked` on ``threads`` threads (numba's count in the
    caller): as many contiguous ranges of tasks, numba's static schedule,
    each run by :func:`_nchw_to_blocked_tasks` (standalone: the serial and
    the parallel compile share it, kernels/_linking.py)."""
    tasks = x.shape[0] * out.shape[1] * ((x.shape[2] * x.shape[3] + _CHUNK - 1) // _CHUNK)
    groups = max(1, min(tasks, threads))
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _nchw_to_blocked_tasks(x, out, threads, first, last)


@jit(standalone=True)
def _nchw_to_blocked_tasks(x, out, threads, first, last):
    """Tasks ``[first, last)`` of :func:`nchw_to_blocked`."""
    batch, channels, height, width = x.shape
    channel_blocks, cb = out.shape[1], out.shape[4]
    plane = height * width
    src = x.reshape(x.size)
    dst = out.reshape(out.size)
    chunks = (plane + _CHUNK - 1) // _CHUNK
    step = 4 if cb == 4 else 8
    # non-temporal stores past the caches (every store is 32 bytes at a
    # multiple of 8 floats from the start: aligned when ``out`` is)
    stream_stores = (_stores_stream(out.size * 4, threads) and cb == 8
                     and out.ctypes.data % 32 == 0)
    for task in range(first, last):
        image_block = task // chunks
        p0 = (task % chunks) * _CHUNK
        p1 = min(p0 + _CHUNK, plane)
        n = image_block // channel_blocks
        c0 = (image_block % channel_blocks) * cb
        valid = min(cb, channels - c0)
        src_start = (n * channels + c0) * plane
        dst_start = image_block * plane * cb
        vector_end = p0 + (p1 - p0) // step * step
        if cb == 1:
            vector_end = p0  # nchw and nChw1c are the same bytes: the copy below
        elif cb == 4:
            if valid == 4:
                for p in range(p0, vector_end, 4):
                    transpose4(x, src_start + p, plane, out, dst_start + p * 4, 4)
            else:
                for p in range(p0, vector_end, 4):
                    transpose4_padded(x, src_start + p, plane, valid, out, dst_start + p * 4, 4)
        elif valid == 8 and cb == 8 and stream_stores:
            for p in range(p0, vector_end, 8):
                transpose8_split_streaming(x, src_start + p, plane, out, dst_start + p * 8, 8)
            stream_fence()
        elif valid == 8 and cb == 8:
            # the common case on its own: a constant target stride and no
            # inner loop (2-6 % faster in cache than the general loop below)
            for p in range(p0, vector_end, 8):
                transpose8_split(x, src_start + p, plane, out, dst_start + p * 8, 8)
        elif valid == cb:
            for p in range(p0, vector_end, 8):
                for g in range(cb // 8):
                    transpose8_split(x, src_start + g * 8 * plane + p, plane,
                                     out, dst_start + p * cb + g * 8, cb)
        elif cb == 8 and valid <= 4:
            for p in range(p0, vector_end, 8):
                transpose8_padded4(x, src_start + p, plane, valid, out, dst_start + p * 8, 8)
        else:
            for p in range(p0, vector_end, 8):
                for g in range(cb // 8):
                    # rows <= 0: all zero, and the (clamped) source is never read
                    rows = max(min(8, valid - g * 8), 0)
                    transpose8_padded(x, src_start + min(g * 8, valid - 1) * plane + p, plane,
                                      rows, out, dst_start + p * cb + g * 8, cb)
        for p in range(vector_end, p1):
            for lane in range(cb):
                value = np.float32(0.0)
                if lane < valid:
                    value = src[src_start + lane * plane + p]
                dst[dst_start + p * cb + lane] = value


def blocked_to_nchw(x, out) -> None:
    """``x: (N, C_phys // cb, H, W, cb)`` -> ``out: (N, C, H, W)``, padding dropped.

    The inverse of :func:`nchw_to_blocked`, same tasks; a partial block's
    transpose stores only its valid rows. Mostly 16 pixels of all cb channels
    at a time (pairs of 8 x 8 transposes). With cb = 8 in cache, where the
    planes are a multiple of 4 KiB apart or a block is partial, a tile of
    ``_PLANAR_TILE`` pixels goes out in two passes of 4 channels instead, 16
    pixels x 4 channels per step. ``out`` may be the caller's array (one
    copy, no temp).
    """
    threads = numba_threads()
    _blocked_to_nchw.on_threads(threads)(x, out, threads)


@parallel_kernel
def _blocked_to_nchw(x, out, threads):
    """:func:`blocked_to_nchw` on ``threads`` threads (numba's count in the
    caller), in ranges of tasks as :func:`_nchw_to_blocked`."""
    tasks = out.shape[0] * x.shape[1] * ((out.shape[2] * out.shape[3] + _CHUNK - 1) // _CHUNK)
    groups = max(1, min(tasks, threads))
    for g in prange(groups):
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _blocked_to_nchw_tasks(x, out, first, last)


@jit(standalone=True)
def _blocked_to_nchw_tasks(x, out, first, last):
    """Tasks ``[first, last)`` of :func:`blocked_to_nchw`."""
    batch, channels, height, width = out.shape
    channel_blocks, cb = x.shape[1], x.shape[4]
    plane = height * width
    src = x.reshape(x.size)
    dst = out.reshape(out.size)
    chunks = (plane + _CHUNK - 1) // _CHUNK
    step = 4 if cb == 4 else 8
    streaming = x.size * 4 >= _STREAM_BYTES
    out_floats = out.ctypes.data // 4      # the target's address, in floats
    for task in range(first, last):
        image_block = task // chunks
        p0 = (task % chunks) * _CHUNK
        p1 = min(p0 + _CHUNK, plane)
        n = image_block // channel_blocks
        c0 = (image_block % channel_blocks) * cb
        valid = min(cb, channels - c0)
        src_start = image_block * plane * cb
        dst_start = (n * channels + c0) * plane
        vector_end = p0 + (p1 - p0) // step * step
        if cb == 1:
            vector_end = p0
        elif cb == 4:
            if valid == 4:
                for p in range(p0, vector_end, 4):
                    transpose4(x, src_start + p * 4, 4, out, dst_start + p, plane)
            else:
                for p in range(p0, vector_end, 4):
                    transpose4_cropped(x, src_start + p * 4, 4, out, dst_start + p, plane, valid)
        else:
            pair_end = p0 + (p1 - p0) // 16 * 16
            if cb == 8 and valid == 8 and not streaming and plane % 1024 != 0:
                # In cache, with the planes not a multiple of 4 KiB apart: 16
                # pixels of all 8 channels per step, each channel's 64 bytes
                # stored wherever they fall. Against the four-channel passes
                # below (this kernel before), both in one process, 1 thread:
                # 1.12x faster at 1x64x56x56 (0.89 -> 1.00x np.copyto), 1.18x
                # at 1x256x56x56, 1.06x at 1x512x28x28, 1.05x at 1x128x60x60;
                # 2 threads 1.07-1.14x. Starting the steps where the target
                # lines begin (as the streaming case does) lost 0.06-0.1 of
                # np.copyto. With planes 4 KiB apart the 8 target lines share
                # an L1 set (1x64x64x64 0.76x, 1x64x128x128 0.66x), so those
                # keep the passes.
                _pairs_to_nchw8(x, out, src_start, dst_start, plane, p0, pair_end, vector_end)
            elif cb == 8 and (valid <= 4 or not streaming):
                # Four channels at a time, over a tile of pixels: 4 target
                # planes written in lockstep instead of 8, and the second pass
                # rereads the tile's source from L1. In cache, 1 thread, against
                # the 8-plane pair transposes below (starting where the target
                # lines do): 0.61-0.94x np.copyto -> 0.68-0.96x over 11 shapes
                # (a plain copy with the pairs' 8 interleaved 64-byte target
                # streams runs at 0.61-0.89x, with 4 at 0.78-0.93x). Since
                # then the unaligned pairs above have taken the full blocks
                # whose planes are not 4 KiB apart.
                # From memory the pairs are faster (16 MB: 1.28x against 1.10x).
                # The chunks are shifted by ``aligned_at`` pixels, where the
                # target planes (all alike when the plane is a multiple of 16
                # pixels) reach a 64-byte boundary: every 16-pixel step but
                # the first and last of a plane then writes whole lines.
                aligned_at = (-(out_floats + dst_start)) % 16 if plane % 16 == 0 else 0
                k = task % chunks
                q0 = 0 if k == 0 else min(k * _CHUNK + aligned_at, plane)
                q1 = plane if k == chunks - 1 else min((k + 1) * _CHUNK + aligned_at, plane)
                _low4_passes_to_nchw8(x, out, src_start, dst_start, plane, q0, q1, valid,
                                      aligned_at)
                vector_end = p1  # done: nothing for the pixel loop below
            elif valid == cb:
                # 16 pixels per step, each channel's 64 bytes stored back to
                # back: the 8 target planes are written in lockstep, and when
                # they are a multiple of 4 KiB apart (64 x 64) their lines share
                # L1 sets; half-written lines got evicted (0.45x np.copyto;
                # 60 x 60: 0.9x). This recovers part of it (0.6-0.7x). A stack
                # staging buffer (one plane's burst of 64-256 pixels at a time:
                # 0.6-0.67x) and prefetchw did not help.
                # Start the pairs where the target is 64-byte aligned (numpy's
                # large arrays start 16 bytes into a page), so each pair writes
                # whole lines; the few pixels before go one by one.
                head = (-(out_floats + dst_start + p0)) % 16
                if plane % 16 != 0 or head > p1 - p0:
                    head = 0  # the planes' alignments differ: no common start
                for p in range(p0, p0 + head):
                    for lane in range(cb):
                        dst[dst_start + lane * plane + p] = src[src_start + p * cb + lane]
                a0 = p0 + head
                pair_end = a0 + (p1 - a0) // 16 * 16
                vector_end = a0 + (p1 - a0) // 8 * 8
                for p in range(a0, pair_end, 16):
                    for g in range(cb // 8):
                        transpose8_pair(x, src_start + p * cb + g * 8, cb,
                                        out, dst_start + g * 8 * plane + p, plane, 8)
                for p in range(pair_end, vector_end, 8):
                    for g in range(cb // 8):
                        transpose8(x, src_start + p * cb + g * 8, cb,
                                   out, dst_start + g * 8 * plane + p, plane)
            else:
                for p in range(p0, pair_end, 16):
                    for g in range(cb // 8):
                        rows = min(valid - g * 8, 8)
                        if rows > 0:
                            transpose8_pair_cropped(x, src_start + p * cb + g * 8, cb,
                                                    out, dst_start + g * 8 * plane + p, plane,
                                                    rows)
                for p in range(pair_end, vector_end, 8):
                    for g in range(cb // 8):
                        rows = min(valid - g * 8, 8)
                        if rows > 0:
                            transpose8_cropped(x, src_start + p * cb + g * 8, cb,
                                               out, dst_start + g * 8 * plane + p, plane, rows)
        for p in range(vector_end, p1):
            for lane in range(valid):
                dst[dst_start + lane * plane + p] = src[src_start + p * cb + lane]


@jit()
def _pairs_to_nchw8(x, out, src_start, dst_start, plane, p0, pair_end, vector_end):
    """Pixels ``[p0, vector_end)`` of one full nChw8c block to its 8 nchw
    planes: 16 pixels per step up to ``pair_end``, then 8."""
    for p in range(p0, pair_end, 16):
        transpose8_pair(x, src_start + p * 8, 8, out, dst_start + p, plane, 8)
    for p in range(pair_end, vector_end, 8):
        transpose8(x, src_start + p * 8, 8, out, dst_start + p, plane)


@jit()
def _low4_passes_to_nchw8(x, out, src_start, dst_start, plane, q0, q1, valid, aligned_at):
    """Pixels ``[q0, q1)`` of one nChw8c block (``src_start``) to its ``valid``
    nchw planes (``dst_start``, ``plane`` floats apart), 16 pixels x 4
    channels per step (:func:`transpose16_low4_cropped`), tile by tile of
    ``_PLANAR_TILE`` pixels, two passes of 4 channels per tile.

    The steps start at the first pixel ``= aligned_at (mod 16)``, where each
    step writes whole 64-byte target lines; the pixels before and after that
    run take one unaligned step each, overlapping it (they store the same
    values twice), so no pixel goes one by one unless the range is shorter
    than 16. Against the same steps on unshifted chunks, in one process (1
    thread, 40-80 paired rounds against np.copyto), with the target 16 or 48
    mod 64 bytes (numpy's large arrays start 16 bytes into a page):
    1x64x64x64 and 1x64x128x128 +0.04 to +0.05, 1x256x56x56 and 1x512x28x28
    -0.01 to +0.03; with a 64-byte aligned target (the same chunks as
    before) -0.02 to -0.03, which the code does not explain: the same code
    written inline in the kernel measured the same.
    """
    if q1 - q0 < 16:
        src = x.reshape(x.size)
        dst = out.reshape(out.size)
        for p in range(q0, q1):
            for lane in range(valid):
                dst[dst_start + lane * plane + p] = src[src_start + p * 8 + lane]
        return
    a0 = q0 + (aligned_at - q0) % 16
    a1 = a0 + (q1 - a0) // 16 * 16
    if a0 > q0:
        for c in range(0, valid, 4):
            transpose16_low4_cropped(x, src_start + q0 * 8 + c, out, dst_start + c * plane + q0,
                                     plane, min(4, valid - c))
    for t0 in range(a0, a1, _PLANAR_TILE):
        t1 = min(t0 + _PLANAR_TILE, a1)
        if valid == 8:  # a literal row count: no crop code
            for c in range(0, 8, 4):
                for p in range(t0, t1, 16):
                    transpose16_low4_cropped(x, src_start + p * 8 + c, out,
                                             dst_start + c * plane + p, plane, 4)
            continue
        for c in range(0, valid, 4):
            rows = min(4, valid - c)
            for p in range(t0, t1, 16):
                transpose16_low4_cropped(x, src_start + p * 8 + c, out,
                                         dst_start + c * plane + p, plane, rows)
    if a1 < q1:
        last = q1 - 16
        for c in range(0, valid, 4):
            transpose16_low4_cropped(x, src_start + last * 8 + c, out,
                                     dst_start + c * plane + last, plane, min(4, valid - c))
