"""Layout conversions between ``nhwc`` and blocked ``nChw{cb}c`` activations
(re-exported by :mod:`.layout`, with the buffer shapes there):

* ``nhwc``:      ``x: (N, H, W, C)``
* ``nChw{cb}c``: ``x: (N, C_phys // cb, H, W, cb)``, lanes past C zero

Each pixel's channels are split into runs of ``cb`` floats, one vector move
each. Block-major within a group of 8 pixels (cb = 8) or a tile of pixels
(:data:`.layout_tuning._TILE`, fewer for deep tensors), so each output line
is written whole before moving on; past :data:`.layout_tuning._STREAM_BYTES`
groups of 4 pixels, so every block plane is written continuously. A partial
last block moves with masked lanes (:mod:`.layout_simd`).
"""

import numpy as np
from numba import prange

from ._config import jit, numba_threads, parallel_kernel
from .layout_simd import (move4_cropped, move4_padded, move4_padded_masked, move8_cropped,
                          move8_padded, move8_padded_masked)
from .layout_tuning import _CHUNK, _STREAM_BYTES, _TILE, _TILE_FLOATS, _stores_stream
from .simd import (move4, move8, move8_straddle, move8_straddle_streaming, move8_streaming,
                   stream_fence)


@jit()
def _move_block(x, s, out, d, cb):
    """One pixel's block: ``cb`` floats from ``x[s:]`` to ``out[d:]`` (cb 4 to
    32). Written out for cb = 8, 16, 32, not as a loop over lane groups: LLVM
    turns such a loop of contiguous moves into a memcpy call per pixel
    (measured: 0.3x np.copyto)."""
    if cb == 4:
        move4(x, s, out, d)
    else:
        move8(x, s, out, d)
        if cb >= 16:
            move8(x, s + 8, out, d + 8)
        if cb == 32:
            move8(x, s + 16, out, d + 16)
            move8(x, s + 24, out, d + 24)


@jit()
def _nhwc_chunk_and_tile(channels):
    """Pixels per task and per tile of the nhwc kernels. A task holds as many
    floats as ``_CHUNK`` pixels of 64 channels (fewer pixels from C = 128 up,
    so a deep 14 x 14 or 7 x 7 tensor still splits between threads); a tile
    is ``_TILE`` pixels, fewer when its nhwc side (pixels x C floats) would
    pass ``_TILE_FLOATS``, at least 4."""
    chunk = max(16, min(_CHUNK, _CHUNK * 64 // channels))
    tile = max(4, min(_TILE, _TILE_FLOATS // channels // 4 * 4))
    return chunk, tile


def nhwc_to_blocked(x, out) -> None:
    """``x: (N, H, W, C)`` -> ``out: (N, C_phys // cb, H, W, cb)``.

    One task per ``_CHUNK`` pixels of an image; each pixel's channels are split
    into runs of cb floats, one vector move each. Block-major within a group of
    8 pixels at cb = 8 (:func:`_groups_to_blocked8`), within a tile of
    ``_TILE`` pixels at other blocks (4 for tensors past the caches), so each
    output line is written whole. The partial block
    (C = 3) loads 8 floats and zeroes the lanes past C (they belong to the next
    pixel); the last pixels of the array use a masked load instead, which
    reads nothing past C. Past the caches, from C = 128, groups of 16 pixels
    with non-temporal stores when ``out`` is 32-byte aligned
    (:func:`_groups_to_blocked8_streaming`).
    """
    threads = numba_threads()
    _nhwc_to_blocked.on_threads(threads)(x, out, threads)


@parallel_kernel
def _nhwc_to_blocked(x, out, threads):
    """:func:`nhwc_to_blocked` on ``threads`` threads (numba's count in the
    caller): as many contiguous ranges of tasks, numba's static schedule,
    each run by :func:`_nhwc_to_blocked_tasks` (standalone: the serial and the
    parallel compile share it, kernels/_linking.py)."""
    batch, height, width, channels = x.shape
    chunk, _ = _nhwc_chunk_and_tile(channels)
    tasks = batch * ((height * width + chunk - 1) // chunk)
    groups = max(1, min(tasks, threads))
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _nhwc_to_blocked_tasks(x, out, threads, first, last)


@jit(standalone=True)
def _nhwc_to_blocked_tasks(x, out, threads, first, last):
    """Tasks ``[first, last)`` of :func:`nhwc_to_blocked`."""
    batch, height, width, channels = x.shape
    channel_blocks, cb = out.shape[1], out.shape[4]
    pixels = height * width
    full_blocks = channels // cb
    src = x.reshape(x.size)
    dst = out.reshape(out.size)
    chunk, tile = _nhwc_chunk_and_tile(channels)
    chunks = (pixels + chunk - 1) // chunk
    streaming = x.size * 4 >= _STREAM_BYTES
    # the source's pixels 16 bytes past a 32-byte boundary (see blocked_to_nhwc)
    shifted = cb == 8 and channels % 8 == 0 and x.ctypes.data % 32 == 16 and not streaming
    # non-temporal stores from C = 128 (every full block's store is aligned
    # when ``out`` is); at C = 64 they measured no faster than the groups of 4
    stream_stores = (_stores_stream(out.size * 4, threads) and cb == 8 and channels >= 128
                     and out.ctypes.data % 32 == 0)
    for task in range(first, last):
        n = task // chunks
        p0 = (task % chunks) * chunk
        p1 = min(p0 + chunk, pixels)
        # pixels below this may load a whole vector at the partial block (one
        # division per task, not per tile: a 64-bit idiv per 16 pixels showed)
        safe_pixels = (x.size - full_blocks * cb - cb) // channels + 1 - n * pixels
        tiles_start = p0
        if cb == 8:
            # groups of 8 pixels in cache up to C = 512 (the group's nhwc side,
            # 8 x C floats, stays in L1), of 4 past it and from memory
            group = 4 if streaming or channels > 512 else 8
            if stream_stores:
                _groups_to_blocked8_streaming(x, out, n, pixels, channels, channel_blocks,
                                              full_blocks, p0, p1)
            elif shifted and group == 8:
                _groups_to_blocked8_shifted(x, out, n, pixels, channels, channel_blocks,
                                            full_blocks, p0, p1, n == batch - 1)
            else:
                _groups_to_blocked8(x, out, n, pixels, channels, channel_blocks, full_blocks,
                                    p0, p1, group)
            tiles_start = p1
        elif streaming and cb > 1:
            # groups of 4 pixels (a constant count, unrolled), block-major inside
            tiles_start = p0 + (p1 - p0) // 4 * 4
            for q in range(p0, tiles_start, 4):
                for block in range(full_blocks):
                    s0 = (n * pixels + q) * channels + block * cb
                    d0 = ((n * channel_blocks + block) * pixels + q) * cb
                    for g in range(4):
                        s = s0 + g * channels
                        d = d0 + g * cb
                        _move_block(x, s, out, d, cb)
        for t0 in range(tiles_start, p1 if full_blocks > 0 else p0, tile):
            t1 = min(t0 + tile, p1)
            if cb == 1:
                for block in range(channel_blocks):
                    dst_block = (n * channel_blocks + block) * pixels
                    for p in range(t0, t1):
                        dst[dst_block + p] = src[(n * pixels + p) * channels + block]
                continue
            for block in range(full_blocks):
                c0 = block * cb
                dst_block = (n * channel_blocks + block) * pixels * cb
                for p in range(t0, t1):
                    s = (n * pixels + p) * channels + c0
                    d = dst_block + p * cb
                    _move_block(x, s, out, d, cb)
        # the partial block: a pass of its own over the chunk (its plane is
        # written in order; inside the tile loop it cost ~40 % at C = 3)
        if full_blocks < channel_blocks:
            c0 = full_blocks * cb
            valid = channels - c0
            dst_block = (n * channel_blocks + full_blocks) * pixels * cb
            # Pixels before safe_end load whole vectors (lanes past C read the
            # next pixel, then are zeroed); the last few of the array use a
            # masked load. Two loops, not a branch per pixel: LLVM merged the
            # branch into one masked load per pixel (vmaskmovps, 3 cycles).
            safe_end = max(min(p1, safe_pixels), p0)
            if cb == 4:
                for p in range(p0, safe_end):
                    move4_padded(x, (n * pixels + p) * channels + c0, valid,
                                 out, dst_block + p * 4)
                for p in range(safe_end, p1):
                    move4_padded_masked(x, (n * pixels + p) * channels + c0, valid,
                                        out, dst_block + p * 4)
            elif cb == 8:
                for p in range(p0, safe_end):
                    move8_padded(x, (n * pixels + p) * channels + c0, valid,
                                 out, dst_block + p * 8)
                for p in range(safe_end, p1):
                    move8_padded_masked(x, (n * pixels + p) * channels + c0, valid,
                                        out, dst_block + p * 8)
            else:
                for p in range(p0, p1):
                    s = (n * pixels + p) * channels + c0
                    d = dst_block + p * cb
                    for g in range(cb // 8):
                        if p < safe_end:
                            move8_padded(x, s + g * 8, valid - g * 8, out, d + g * 8)
                        else:
                            move8_padded_masked(x, s + g * 8, valid - g * 8, out, d + g * 8)


@jit()
def _groups_to_blocked8(x, out, n, pixels, channels, channel_blocks, full_blocks, p0, p1,
                        group):
    """Pixels ``[p0, p1)`` of image ``n``, full blocks of 8, in groups of
    ``group`` (8 or 4) pixels, block-major inside: each block's run of a group
    is written whole (8 pixels: four 64-byte lines) while the group's nhwc
    side stays in L1 across its blocks. Constant strides, compiled apart from
    the kernel's other paths. Against the 64-pixel tiles and generic groups of 4 it
    replaced, in one process (paired rounds against np.copyto, nhwc source as
    numpy allocates it, 1 thread): 1x64x64x64 0.78 -> 0.82-0.85x, 1x64x128x128
    0.80-0.85 -> 0.92-0.97x, 1x128x56x56 0.75-0.79 -> 0.87-0.89x, 16.8 and
    67 MB 1.04-1.13 -> 1.18-1.33x; C = 16, 17, 256, 512 within +-0.03.
    """
    groups_end = p0 + (p1 - p0) // group * group
    image = n * pixels * channels
    # one loop per group size: a literal count, so the inner loop unrolls
    if group == 8:
        for q in range(p0, groups_end, 8):
            for block in range(full_blocks):
                s = image + q * channels + block * 8
                d = ((n * channel_blocks + block) * pixels + q) * 8
                for g in range(8):
                    move8(x, s + g * channels, out, d + g * 8)
    else:
        for q in range(p0, groups_end, 4):
            for block in range(full_blocks):
                s = image + q * channels + block * 8
                d = ((n * channel_blocks + block) * pixels + q) * 8
                for g in range(4):
                    move8(x, s + g * channels, out, d + g * 8)
    for block in range(full_blocks):  # the last pixels of the task
        d = (n * channel_blocks + block) * pixels * 8
        for p in range(groups_end, p1):
            move8(x, image + p * channels + block * 8, out, d + p * 8)


@jit()
def _groups_to_blocked8_streaming(x, out, n, pixels, channels, channel_blocks, full_blocks, p0,
                                  p1):
    """:func:`_groups_to_blocked8` past the caches, with non-temporal stores
    (``out`` 32-byte aligned): groups of 16 pixels (8 past C = 512, so the
    group's nhwc side stays in L1), each block's run of a group eight whole
    lines. The source streams in order; the stores go out whole lines at a
    time without reading the target first."""
    image = n * pixels * channels
    # one loop per group size: a literal count, so the inner loop unrolls
    if channels <= 512:
        groups_end = p0 + (p1 - p0) // 16 * 16
        for q in range(p0, groups_end, 16):
            for block in range(full_blocks):
                s = image + q * channels + block * 8
                d = ((n * channel_blocks + block) * pixels + q) * 8
                for g in range(16):
                    move8_streaming(x, s + g * channels, out, d + g * 8)
    else:
        groups_end = p0 + (p1 - p0) // 8 * 8
        for q in range(p0, groups_end, 8):
            for block in range(full_blocks):
                s = image + q * channels + block * 8
                d = ((n * channel_blocks + block) * pixels + q) * 8
                for g in range(8):
                    move8_streaming(x, s + g * channels, out, d + g * 8)
    stream_fence()
    for block in range(full_blocks):  # the last pixels of the task
        d = (n * channel_blocks + block) * pixels * 8
        for p in range(groups_end, p1):
            move8(x, image + p * channels + block * 8, out, d + p * 8)


@jit()
def _groups_to_blocked8_shifted(x, out, n, pixels, channels, channel_blocks, full_blocks, p0,
                                p1, last_image):
    """:func:`_groups_to_blocked8` (groups of 8) for a source whose pixels
    start 16 bytes past a 32-byte boundary (C = 8k): each block is read as the
    upper half of the aligned vector before it and the lower half of the one
    after (:func:`move8_straddle`), so no load splits a line. Those vectors
    reach 16 bytes into the pixels on either side, so the array's first and
    last pixel take whole unaligned loads instead. Against the unaligned
    loads, in one process (paired rounds against np.copyto, source 16 or 48
    mod 64): 1 thread +0.05 to +0.07 at C = 128 and 256, within 0.01 at
    C = 64 and 512; 2 threads -0.03 to +0.08. (Groups of 4, C > 512: -0.05 on
    2 threads, so not there.)"""
    image = n * pixels * channels
    g0 = p0 + 1 if n == 0 and p0 == 0 else p0                # nothing before pixel 0
    g1 = p1 - 1 if last_image and p1 == pixels else p1       # nor after the last
    groups_end = g0 + max(g1 - g0, 0) // 8 * 8
    for q in range(g0, groups_end, 8):
        for block in range(full_blocks):
            s = image + q * channels + block * 8
            d = ((n * channel_blocks + block) * pixels + q) * 8
            for g in range(8):
                move8_straddle(x, s + g * channels - 4, s + g * channels + 4, out, d + g * 8)
    for block in range(full_blocks):  # the pixels around the groups
        d = (n * channel_blocks + block) * pixels * 8
        for p in range(p0, g0):
            move8(x, image + p * channels + block * 8, out, d + p * 8)
        for p in range(groups_end, p1):
            move8(x, image + p * channels + block * 8, out, d + p * 8)


def blocked_to_nhwc(x, out) -> None:
    """``x: (N, C_phys // cb, H, W, cb)`` -> ``out: (N, H, W, C)``, padding dropped.

    The inverse of :func:`nhwc_to_blocked`, same tasks, groups and tiles. The partial
    block goes first, pixel by pixel, as whole-vector stores: lanes past C land
    on the next pixels' channels, which this thread writes afterwards. Only a
    store that would reach past the task's end is a masked store (slow on Zen 3:
    microcoded). Past the caches, at C = 8k, pixel by pixel with non-temporal
    stores when ``out`` is 16-byte aligned (:func:`_pixels_to_nhwc8_streaming`).
    """
    threads = numba_threads()
    _blocked_to_nhwc.on_threads(threads)(x, out, threads)


@parallel_kernel
def _blocked_to_nhwc(x, out, threads):
    """:func:`blocked_to_nhwc` on ``threads`` threads (numba's count in the
    caller): as many contiguous ranges of tasks, numba's static schedule,
    each run by :func:`_blocked_to_nhwc_tasks` (standalone: the serial and the
    parallel compile share it, kernels/_linking.py)."""
    batch, height, width, channels = out.shape
    chunk, _ = _nhwc_chunk_and_tile(channels)
    tasks = batch * ((height * width + chunk - 1) // chunk)
    groups = max(1, min(tasks, threads))
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _blocked_to_nhwc_tasks(x, out, threads, first, last)


@jit(standalone=True)
def _blocked_to_nhwc_tasks(x, out, threads, first, last):
    """Tasks ``[first, last)`` of :func:`blocked_to_nhwc`."""
    batch, height, width, channels = out.shape
    channel_blocks, cb = x.shape[1], x.shape[4]
    pixels = height * width
    full_blocks = channels // cb
    src = x.reshape(x.size)
    dst = out.reshape(out.size)
    chunk, tile = _nhwc_chunk_and_tile(channels)
    chunks = (pixels + chunk - 1) // chunk
    streaming = out.size * 4 >= _STREAM_BYTES
    # With 4 to 8 blocks (C = 32-71 at cb = 8) each pixel goes out whole, its
    # blocks read from the planes in lockstep; a tile written in one strided
    # pass per block kept partial lines in L1 between passes. In cache, 1
    # thread, against np.copyto: C = 32-67 0.69-0.86x -> 0.79-0.97x. Past 8
    # planes the reads fight over L1 sets (C = 96-192: 0.50-0.90x against
    # 0.60-0.69x), and with 2 or 3 the loop over blocks costs more than it
    # saves (C = 16: 0.84x -> 0.66x). Other C at cb = 8: _groups_to_nhwc8.
    pixel_major = 4 <= full_blocks <= 8 and cb == 8
    # Numpy's large arrays start 16 bytes into a page, so at C = 8k every
    # pixel's vectors sit 16 bytes past a 32-byte boundary and half of their
    # stores split a line. Shifted by half a vector (move8_straddle) they are
    # all aligned, in cache; see _groups_to_nhwc8_shifted. (From memory it
    # measured slower: 1x64x256x256 0.98-0.99x np.copyto -> 0.85-0.93x.)
    shifted = cb == 8 and channels % 8 == 0 and out.ctypes.data % 32 == 16 and not streaming
    # Past the caches, at C = 8k, pixel by pixel with non-temporal stores
    # (shifted by half a vector when the target is 16 mod 32 bytes): the
    # target goes out in order, whole lines, never read. Against the groups
    # of 8 below (1 thread, paired rounds against np.copyto): see RESULTS.md.
    stream_stores = (_stores_stream(out.size * 4, threads) and cb == 8 and channels % 8 == 0
                     and channels >= 8 and out.ctypes.data % 16 == 0)
    for task in range(first, last):
        n = task // chunks
        p0 = (task % chunks) * chunk
        p1 = min(p0 + chunk, pixels)
        task_end = (n * pixels + p1) * channels  # first element of the next task
        valid_last = channels - full_blocks * cb
        # pixels below this may store a whole vector at the partial block
        # (4 floats wide when at most 4 channels are valid, see below)
        reach = full_blocks * cb + (((valid_last + 7) // 8) * 8 if valid_last > 4 else 4)
        safe_pixels = (task_end - reach) // channels + 1 - n * pixels
        if full_blocks < channel_blocks:
            c0 = full_blocks * cb
            valid = channels - c0
            src_block = (n * channel_blocks + full_blocks) * pixels * cb
            groups = (valid + 7) // 8
            safe_end = max(min(p1, safe_pixels), p0)
            if cb == 4 or valid <= 4:
                # 16-byte moves: with C = 3 an 8-float store at a 12-byte
                # stride splits across two lines about every other pixel; a
                # 4-float one 3 times in 16 (measured 8x3x224x224, 1 thread:
                # 14-24 % faster than the 8-float stores)
                for p in range(p0, safe_end):
                    move4(x, src_block + p * cb, out, (n * pixels + p) * channels + c0)
                for p in range(safe_end, p1):
                    move4_cropped(x, src_block + p * cb,
                                  out, (n * pixels + p) * channels + c0, valid)
            elif cb == 8:
                for p in range(p0, safe_end):
                    move8(x, src_block + p * 8, out, (n * pixels + p) * channels + c0)
                for p in range(safe_end, p1):
                    move8_cropped(x, src_block + p * 8,
                                  out, (n * pixels + p) * channels + c0, valid)
            else:
                for p in range(p0, p1):
                    s = src_block + p * cb
                    d = (n * pixels + p) * channels + c0
                    for g in range(groups):
                        if p < safe_end:
                            move8(x, s + g * 8, out, d + g * 8)
                        else:
                            move8_cropped(x, s + g * 8, out, d + g * 8, valid - g * 8)
        tiles_start = p0
        if stream_stores:
            if out.ctypes.data % 32 == 0:
                _pixels_to_nhwc8_streaming(x, out, n, pixels, channels, channel_blocks,
                                           full_blocks, p0, p1)
            else:
                _pixels_to_nhwc8_shifted_streaming(x, out, n, pixels, channels, channel_blocks,
                                                   full_blocks, p0, p1)
            tiles_start = p1
        elif cb == 8 and full_blocks > 0 and (streaming or not pixel_major):
            # groups of 8 pixels in cache up to C = 512 (4 past it); from
            # memory, of 8 from C = 256 (4 below): with 32 or more planes read
            # at once, each read 4 lines at a time kept up better
            group = 8 if channels <= 512 else 4
            if streaming:
                group = 8 if channels >= 256 else 4
            if shifted:
                _groups_to_nhwc8_shifted(x, out, n, pixels, channels, channel_blocks,
                                         full_blocks, p0, p1, group)
            else:
                _groups_to_nhwc8(x, out, n, pixels, channels, channel_blocks, full_blocks,
                                 p0, p1, group)
            tiles_start = p1
        elif shifted and pixel_major:
            _pixels_to_nhwc8_shifted(x, out, n, pixels, channels, channel_blocks, full_blocks,
                                     p0, p1)
            tiles_start = p1
        elif streaming and cb > 1:
            # groups of 4 pixels (a constant count, unrolled), block-major inside
            tiles_start = p0 + (p1 - p0) // 4 * 4
            for q in range(p0, tiles_start, 4):
                for block in range(full_blocks):
                    s0 = ((n * channel_blocks + block) * pixels + q) * cb
                    d0 = (n * pixels + q) * channels + block * cb
                    for g in range(4):
                        s = s0 + g * cb
                        d = d0 + g * channels
                        _move_block(x, s, out, d, cb)
        for t0 in range(tiles_start, p1 if full_blocks > 0 else p0, tile):
            t1 = min(t0 + tile, p1)
            if cb == 1:
                for block in range(channel_blocks):
                    src_block = (n * channel_blocks + block) * pixels
                    for p in range(t0, t1):
                        dst[(n * pixels + p) * channels + block] = src[src_block + p]
                continue
            if pixel_major:
                for p in range(t0, t1):
                    d = (n * pixels + p) * channels
                    for block in range(full_blocks):
                        move8(x, ((n * channel_blocks + block) * pixels + p) * 8,
                              out, d + block * 8)
                continue
            for block in range(full_blocks):
                c0 = block * cb
                src_block = (n * channel_blocks + block) * pixels * cb
                for p in range(t0, t1):
                    s = src_block + p * cb
                    d = (n * pixels + p) * channels + c0
                    _move_block(x, s, out, d, cb)


@jit()
def _groups_to_nhwc8(x, out, n, pixels, channels, channel_blocks, full_blocks, p0, p1, group):
    """Pixels ``[p0, p1)`` of image ``n``, full blocks of 8, in groups of
    ``group`` (8 or 4) pixels, block-major inside: the inverse of
    :func:`_groups_to_blocked8`. Each block's run of a group is read whole
    (8 pixels: four 64-byte lines) while the group's nhwc side stays in L1
    across its blocks. Against the 64-pixel tiles it replaced, in one process
    (paired rounds against np.copyto, 1 thread): 1x128x56x56 0.82-0.85 ->
    0.93-0.95x, 1x256x56x56 0.81-0.93 -> 0.91-0.99x, 1x512x28x28 0.86-0.93 ->
    0.93-0.95x, C = 16, 17, 1024, 2048 +0.03 to +0.07. C = 32-71 keep their
    pixel-major loop in cache (as fast at C = 64). From memory, against the
    generic groups of 4: 1x256x112x112 0.47-0.50 -> 0.67-0.79x, 1x1024x56x56
    0.46-0.56 -> 0.63-0.87x, C = 64 and 72 +0.01 to +0.19."""
    groups_end = p0 + (p1 - p0) // group * group
    image = n * pixels * channels
    # one loop per group size: a literal count, so the inner loop unrolls
    if group == 8:
        for q in range(p0, groups_end, 8):
            for block in range(full_blocks):
                s = ((n * channel_blocks + block) * pixels + q) * 8
                d = image + q * channels + block * 8
                for g in range(8):
                    move8(x, s + g * 8, out, d + g * channels)
    else:
        for q in range(p0, groups_end, 4):
            for block in range(full_blocks):
                s = ((n * channel_blocks + block) * pixels + q) * 8
                d = image + q * channels + block * 8
                for g in range(4):
                    move8(x, s + g * 8, out, d + g * channels)
    for block in range(full_blocks):  # the last pixels of the task
        s = (n * channel_blocks + block) * pixels * 8
        for p in range(groups_end, p1):
            move8(x, s + p * 8, out, image + p * channels + block * 8)


@jit()
def _groups_to_nhwc8_shifted(x, out, n, pixels, channels, channel_blocks, full_blocks, p0,
                             p1, group):
    """:func:`_groups_to_nhwc8` for a target whose pixels start 16 bytes past a
    32-byte boundary (C = 8k, no partial block): each store takes the upper
    half of one block and the lower half of the next (:func:`move8_straddle`)
    and lands aligned. Per group of pixels: the first pixel's lower half of
    block 0, then for each block b >= 1 the vectors (b - 1 | b) of every pixel,
    then each pixel's (last block | next pixel's block 0) and the last pixel's
    upper half of its last block. So no store reaches outside the group's
    pixels. Against the unaligned stores, in one process (paired rounds
    against np.copyto, target 16 or 48 mod 64), 1 thread: C = 128-512 and
    2048 +0.02 to +0.06, C = 64 and 1024 +0.00 to +0.04 (with the pixel-major
    loop); 2 threads -0.02 to +0.08."""
    groups_end = p0 + (p1 - p0) // group * group
    image = n * pixels * channels
    plane = pixels * 8
    # one loop per group size: a literal count, so the inner loop unrolls
    if group == 8:
        for q in range(p0, groups_end, 8):
            s0 = (n * channel_blocks * pixels + q) * 8   # block 0 of pixel q
            d0 = image + q * channels
            move4(x, s0, out, d0)
            for block in range(1, full_blocks):
                s = s0 + block * plane
                d = d0 + block * 8 - 4
                for g in range(8):
                    move8_straddle(x, s - plane + g * 8, s + g * 8, out, d + g * channels)
            last = s0 + (full_blocks - 1) * plane
            for g in range(7):
                move8_straddle(x, last + g * 8, s0 + g * 8 + 8, out, d0 + (g + 1) * channels - 4)
            move4(x, last + 7 * 8 + 4, out, d0 + 8 * channels - 4)
    else:
        for q in range(p0, groups_end, 4):
            s0 = (n * channel_blocks * pixels + q) * 8
            d0 = image + q * channels
            move4(x, s0, out, d0)
            for block in range(1, full_blocks):
                s = s0 + block * plane
                d = d0 + block * 8 - 4
                for g in range(4):
                    move8_straddle(x, s - plane + g * 8, s + g * 8, out, d + g * channels)
            last = s0 + (full_blocks - 1) * plane
            for g in range(3):
                move8_straddle(x, last + g * 8, s0 + g * 8 + 8, out, d0 + (g + 1) * channels - 4)
            move4(x, last + 3 * 8 + 4, out, d0 + 4 * channels - 4)
    for block in range(full_blocks):  # the last pixels of the task
        s = (n * channel_blocks + block) * pixels * 8
        for p in range(groups_end, p1):
            move8(x, s + p * 8, out, image + p * channels + block * 8)


def _make_pixels_to_nhwc8_shifted(streaming: bool):
    """``pixels_to_nhwc8_shifted(x, out, n, pixels, channels, channel_blocks,
    full_blocks, p0, p1)``: the pixel-major loop of :func:`blocked_to_nhwc`
    (4 to 8 full blocks in cache; any number past the caches) for a target
    whose pixels start 16 bytes past a 32-byte boundary, every store aligned
    as in :func:`_groups_to_nhwc8_shifted`: a pixel's last block goes out
    with the next pixel's block 0, so the task's pixels take one store per
    block, plus one 16-byte store at each end. ``streaming`` (a constant of
    the compiled code): non-temporal stores."""

    @jit()
    def pixels_to_nhwc8_shifted(x, out, n, pixels, channels, channel_blocks, full_blocks, p0,
                                p1):
        plane = pixels * 8
        s0 = (n * channel_blocks * pixels + p0) * 8
        d0 = (n * pixels + p0) * channels
        move4(x, s0, out, d0)
        for p in range(p1 - p0):
            s = s0 + p * 8
            d = d0 + p * channels - 4
            for block in range(1, full_blocks):
                if streaming:
                    move8_straddle_streaming(x, s + (block - 1) * plane, s + block * plane,
                                             out, d + block * 8)
                else:
                    move8_straddle(x, s + (block - 1) * plane, s + block * plane,
                                   out, d + block * 8)
            if p == p1 - p0 - 1:
                move4(x, s + (full_blocks - 1) * plane + 4, out, d + channels)
            elif streaming:
                move8_straddle_streaming(x, s + (full_blocks - 1) * plane, s + 8, out,
                                         d + channels)
            else:
                move8_straddle(x, s + (full_blocks - 1) * plane, s + 8, out, d + channels)
        if streaming:
            stream_fence()

    return pixels_to_nhwc8_shifted


_pixels_to_nhwc8_shifted = _make_pixels_to_nhwc8_shifted(False)
_pixels_to_nhwc8_shifted_streaming = _make_pixels_to_nhwc8_shifted(True)


@jit()
def _pixels_to_nhwc8_streaming(x, out, n, pixels, channels, channel_blocks, full_blocks, p0,
                               p1):
    """Pixels ``[p0, p1)`` of image ``n`` (C = 8k), pixel by pixel, each
    pixel's blocks read from the planes in lockstep and stored with
    non-temporal hints to a 32-byte aligned ``out``: the target is written
    in order, whole lines, without being read first."""
    plane = pixels * 8
    for p in range(p0, p1):
        s = (n * channel_blocks * pixels + p) * 8
        d = (n * pixels + p) * channels
        for block in range(full_blocks):
            move8_streaming(x, s + block * plane, out, d + block * 8)
    stream_fence()
