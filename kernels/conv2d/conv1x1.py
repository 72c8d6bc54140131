"""1x1 convolutions without padding or groups: a GEMM over pixels.

Buffers (float32, flat views of C-contiguous arrays):

* input ``x: (N, CB, H, W, cb)``; output ``y`` and residual
  ``(N, OB, OH, OW, cb)``; bias ``(OB * cb,)``
* packed filter ``w: (OB, CB, 1, 1, cb, cb)`` (``OIhw{cb}i{cb}o``, the direct
  path's packing)
* strided input, per task: ``buf: (kcb, chunk, cb)``, the task's chunk of
  input pixels for one K-block, made contiguous (zeros past its end)

A 1x1 convolution without padding and groups is a GEMM: (pixels x C) times
(C x O). Pixel k of an output image (row-major, k = oh * OW + ow) is at
``y[n, ob, k, :]``; with stride 1 it reads input pixel k, so a tile of P
consecutive pixels reads P adjacent input pixels at constant offsets from
one base register (no per-pixel pointers, and tiles cross row ends). Strided
inputs are first copied, per task and K-block, into a contiguous buffer
(oneDNN's "reduce to unit stride"), then read the same way.

Blocking as in a GEMM (:func:`.plan._gemm_blocking`): a task owns a chunk of
pixels (its input K-block stays in L2) and runs, per K-block of ``kcb``
input blocks, every output-block group over every tile of the chunk: the
group's weights for the K-block (kcb x cb x B*cb, at most 16 KiB) stay in L1
while the chunk's pixels stream past. Partial sums go to the output between
K-blocks; the first K-block starts from bias (+ residual), the last one
applies the epilogue.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import literally, prange

from .._config import jit, parallel_kernel
from .._linking import made_by
from ..epilogue import activate_pixels
from ..stack import atomic_add, prefetch, stack_empty
from .geometry import _TILE_ELEMENTS, _ZERO, ConvGeometry, Epilogue, conv_tile_shape
from .register_tile import fma_tile


@jit()
def _fma_short_tile(pixels, P, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px,
                    i_ob, resf, use_res, yf, yo, y_ob, clamp, lo, hi):
    """``fma_tile`` over ``pixels`` (1 to P - 1, P <= 12) consecutive pixels:
    the tile's pixel count must be a constant, so one call per count (only
    the counts below ``P``: a tile of more would not fit the registers)."""
    literally(P)
    literally(B)
    literally(cb)
    if pixels == 1:
        fma_tile(1, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif pixels == 2:
        fma_tile(2, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 3 and pixels == 3:
        fma_tile(3, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 4 and pixels == 4:
        fma_tile(4, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 5 and pixels == 5:
        fma_tile(5, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 6 and pixels == 6:
        fma_tile(6, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 7 and pixels == 7:
        fma_tile(7, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 8 and pixels == 8:
        fma_tile(8, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 9 and pixels == 9:
        fma_tile(9, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 10 and pixels == 10:
        fma_tile(10, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)
    elif P > 11 and pixels == 11:
        fma_tile(11, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob, resf,
                 use_res, yf, yo, y_ob, 0, clamp, lo, hi)


#: tiles whose outputs get their activation at once (see :func:`_activate_tiles`)
_ACTIVATION_TILES = 8


@jit()
def _activate_tiles(yf, y_image, ob0, last, y_ob, O, k_start, k_end, tile, ntiles, cb, P,
                    act, p0, p1):
    """After tile ``tile`` of a chunk's last K-block: the activation of the
    pixels of the last :data:`_ACTIVATION_TILES` tiles (every
    :data:`_ACTIVATION_TILES`-th tile and the last one), output blocks ``ob0
    .. ob0+last``, while they are in L1. Per tile it was a span of 6 pixels x
    8 lanes, too short for the 16-wide vector loop of an exp: its scalar
    remainder made SiLU cost more than the convolution (16 -> 96 channels at
    112 x 112, 1 thread: 420 us without, 1250 us with). The tiles of a
    chunk store its pixels in order, each once, so the pixels from the
    group's first tile to ``k_end`` are final."""
    if tile % _ACTIVATION_TILES != _ACTIVATION_TILES - 1 and tile != ntiles - 1:
        return
    a0 = k_start + (tile - tile % _ACTIVATION_TILES) * P
    a1 = min(k_end, k_start + (tile + 1) * P)
    for b in range(last + 1):
        lanes = min(cb, O - (ob0 + b) * cb)
        activate_pixels(yf, (y_image + a0) * cb + (ob0 + b) * y_ob, a1 - a0, cb, lanes, act,
                        p0, p1)


#: Tasks whose chunk has at most this many tiles fetch each output-block
#: group's weights while the group before runs (``ahead``). In a network the
#: weights come cold from L3 or memory (megabytes in all), and at 7 x 7 a
#: group has 9 tiles to hide its first tile's misses behind (960 -> 160
#: channels, 1 thread: 151 us alone, 226 us inside MobileNetV2). Longer
#: chunks amortize those misses, and their code is left as it was: with the
#: prefetch loop compiled in, unexecuted, 24 -> 144 channels at 56 x 56 ran
#: 5-9 % slower.
_PREFETCH_TILES = 40


@jit(standalone=True)
def _conv1x1_tiles(xf, wf, bias, resf, yf, buf, geom, n, og0, og1, k_start, k_end,
                   kb0, kb1, copy_input, epilogue, cb, P, B, ahead):
    """Pixels ``k_start .. k_end-1`` of image ``n``, output-block groups
    ``og0 .. og1-1``, input blocks ``kb0 .. kb1-1`` (one K-block; the first
    when ``kb0 == 0``, the last when ``kb1 == CB``). ``geom``: a
    :class:`.geometry.ConvGeometry`; ``epilogue``: an :class:`.geometry.Epilogue`.

    ``copy_input`` (strided input, or a chunk shorter than a tile): the
    chunk's input pixels are first copied into ``buf`` (``(kb1-kb0) x chunk``
    pixels, zeros past ``k_end``) and the tiles read ``buf``. Otherwise they
    read ``x`` in place, and a partial last tile is a register tile of just
    its pixels (:func:`_fma_short_tile`); with a partial output block it is
    moved back to end at ``k_end`` (it recomputes pixels of the tile before it
    but stores only its own). Neither reads past the chunk. The source array
    is chosen once per call: an array variable assigned per tile costs
    reference-count calls per tile (atomic, shared between threads), 10 % of
    a short-K 1x1 conv. ``ahead`` (a constant): each group's tiles prefetch
    the next group's weights (see :data:`_PREFETCH_TILES`)."""
    literally(cb)
    literally(P)
    literally(B)
    literally(ahead)
    CB, OB, OH, OW, sh, sw, O = geom.CB, geom.OB, geom.OH, geom.OW, geom.sh, geom.sw, geom.O
    x_n, x_ib, x_row = geom.x_n, geom.x_ib, geom.x_row
    has_res, clamp, lo, hi = epilogue.has_res, epilogue.clamp, epilogue.lo, epilogue.hi
    post, act, p0, p1 = epilogue.post, epilogue.act, epilogue.p0, epilogue.p1
    acc = numba.carray(stack_empty(_TILE_ELEMENTS, np.float32), _TILE_ELEMENTS)
    HW = OH * OW
    y_ob = HW * cb
    w_ib = cb * cb                       # packed weights: (OB, CB, 1, 1, cb, cb)
    w_ob = CB * w_ib
    first = kb0 == 0
    last_k = kb1 == CB
    nkb = kb1 - kb0
    chunk = (k_end - k_start + P - 1) // P * P
    if copy_input:
        # the chunk's input pixels, block by block, made contiguous
        for kb in range(nkb):
            xbase = n * x_n + (kb0 + kb) * x_ib
            for k in range(k_start, k_start + chunk):
                d = (kb * chunk + k - k_start) * cb
                if k < k_end:
                    oh = k // OW
                    ow = k - oh * OW
                    s = xbase + oh * sh * x_row + ow * sw * cb
                    for i in range(cb):
                        buf[np.uint64(d + i)] = xf[np.uint64(s + i)]
                else:
                    for i in range(cb):
                        buf[np.uint64(d + i)] = _ZERO
        src = buf
        s_ib = chunk * cb
    else:
        src = xf
        s_ib = x_ib
    ntiles = chunk // P
    # a whole tile starts from the bias (first K-block) or from the partial
    # sums in the output (chosen once per call: see the docstring)
    init = bias if first else yf
    for og in range(og0, og1):
        ob0 = og * B
        last = min(B, OB - ob0) - 1      # blocks past the last one re-read it
        # the weights this call or the next one runs after this group: the
        # next group's for this K-block, else the first group's for the next
        # K-block (nkb input blocks from kb1, fewer at the end: the lines
        # past it belong to the following output block, harmless to fetch)
        if og + 1 < og1:
            pf_ob, pf_kb = ob0 + B, kb0
        else:
            pf_ob, pf_kb = og0 * B, kb1
        pf_blocks = min(B, OB - pf_ob) if pf_kb < CB else 0
        pf_lines = nkb * cb * cb // 16   # 64-byte lines of one block's K-block sliver
        pf_step = (pf_lines + ntiles - 1) // ntiles      # lines per tile
        # register tiles need whole output blocks: B of them, or a group of
        # one at the end (O = 24 at cb 8 is a group of 2 and one of 1)
        whole_blocks = last == B - 1 and O >= (ob0 + B) * cb
        single_block = last == 0 and O >= (ob0 + 1) * cb
        for tile in range(ntiles):
            if ahead:
                # a share of those weights per tile (all at once, at the
                # group's start, gained nothing: the fetches queued up)
                pf_first = tile * pf_step
                pf_end = min(pf_lines, pf_first + pf_step)
                for b in range(pf_blocks):
                    pf_base = (pf_ob + b) * w_ob + pf_kb * w_ib
                    for line in range(pf_first, pf_end):
                        prefetch(wf, (np.uint64(pf_base + line * 16),))
            # the tile's pixels k0 .. k0+P-1; it stores pixels p_lo .. p_hi-1
            k0 = k_start + tile * P
            p_lo = 0
            p_hi = min(P, k_end - k0)
            if copy_input:
                xo = tile * P * cb
            else:
                xo = n * x_n + kb0 * x_ib + k0 * cb
            ybase = (n * OB * HW + k0) * cb
            if (whole_blocks or single_block) and (p_hi == P or not copy_input):
                # the common case, accumulators in registers throughout; a
                # partial last tile in place is a tile of just its pixels (a
                # whole tile moved back to end at k_end recomputed up to
                # P - 1 pixels: 5 of 54 at 7 x 7)
                yo = ybase + ob0 * y_ob
                if first:
                    io, i_px, i_ob = ob0 * cb, 0, cb
                else:
                    io, i_px, i_ob = yo, cb, y_ob
                wo = ob0 * w_ob + kb0 * w_ib
                use_res = first and has_res
                clamp_now = last_k and clamp
                if p_hi == P and whole_blocks:
                    fma_tile(P, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob,
                             resf, use_res, yf, yo, y_ob, 0, clamp_now, lo, hi)
                elif p_hi == P:
                    fma_tile(P, 1, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io, i_px, i_ob,
                             resf, use_res, yf, yo, y_ob, 0, clamp_now, lo, hi)
                elif whole_blocks:
                    _fma_short_tile(p_hi, P, B, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io,
                                    i_px, i_ob, resf, use_res, yf, yo, y_ob, clamp_now, lo, hi)
                else:
                    _fma_short_tile(p_hi, P, 1, cb, src, xo, s_ib, nkb, wf, wo, w_ob, init, io,
                                    i_px, i_ob, resf, use_res, yf, yo, y_ob, clamp_now, lo, hi)
                if post and last_k:
                    _activate_tiles(yf, n * OB * HW, ob0, last, y_ob, O, k_start, k_end, tile,
                                    ntiles, cb, P, act, p0, p1)
                continue
            if not copy_input and p_hi < P:
                # a partial output block (O not a multiple of cb): the numba
                # steps below, on the tile moved back to end at k_end,
                # storing only its own pixels
                p_lo = P - p_hi
                p_hi = P
                k0 = k_end - P
                xo = n * x_n + kb0 * x_ib + k0 * cb
                ybase = (n * OB * HW + k0) * cb
            # partial tiles: the same steps in numba, accumulators on the stack
            # accumulators: bias (+ residual) in the first K-block, else the
            # partial sums stored by the previous one (the rows of a copied
            # tile past k_end re-read its last pixel, inside the output)
            for p in range(P):
                for b in range(B):
                    bo = (ob0 + min(b, last)) * cb
                    for o in range(cb):
                        acc[(p * B + b) * cb + o] = bias[np.uint64(bo + o)] if first else _ZERO
            # (two loops, not one over a chosen array: see the docstring)
            if first and has_res:
                for p in range(P):
                    for b in range(B):
                        yo = ybase + min(p, p_hi - 1) * cb + (ob0 + min(b, last)) * y_ob
                        for o in range(cb):
                            acc[(p * B + b) * cb + o] += resf[np.uint64(yo + o)]
            elif not first:
                for p in range(P):
                    for b in range(B):
                        yo = ybase + min(p, p_hi - 1) * cb + (ob0 + min(b, last)) * y_ob
                        for o in range(cb):
                            acc[(p * B + b) * cb + o] += yf[np.uint64(yo + o)]
            # the hot loop: per input lane, B weight vectors and P broadcasts
            # at constant offsets from one input pointer
            wo = ob0 * w_ob + kb0 * w_ib
            for kb in range(nkb):
                # the input of the tile after next, from memory on a first pass
                for q in range((P * cb + 15) // 16):
                    prefetch(src, (np.uint64(xo + 2 * P * cb + q * 16),))
                for i in range(cb):
                    wi = wo + i * cb
                    for p in range(P):
                        xv = src[np.uint64(xo + p * cb + i)]
                        for b in range(B):
                            wb = wi + min(b, last) * w_ob
                            for o in range(cb):
                                acc[(p * B + b) * cb + o] += xv * wf[np.uint64(wb + o)]
                wo += w_ib
                xo += s_ib
            if p_lo == 0 and p_hi == P and last == B - 1 and O >= (ob0 + B) * cb:
                # Never taken now: such tiles run the register tile above.
                # Kept because removing it changed the code layout of this
                # function and made the register-tile path ~13 % slower at
                # K = 16 (57 -> 50 GFLOP/s, reproducible).
                for p in range(P):
                    for b in range(B):
                        yo = ybase + p * cb + (ob0 + b) * y_ob
                        for o in range(cb):
                            v = acc[(p * B + b) * cb + o]
                            if last_k and clamp:
                                v = min(max(v, lo), hi)
                            yf[np.uint64(yo + o)] = v
            else:
                for p in range(P):
                    if p_lo <= p < p_hi:
                        for b in range(B):
                            if b <= last:
                                lim = O - (ob0 + b) * cb
                                yo = ybase + p * cb + (ob0 + b) * y_ob
                                for o in range(cb):
                                    v = acc[(p * B + b) * cb + o]
                                    if last_k:
                                        if clamp:
                                            v = min(max(v, lo), hi)
                                        v = v if o < lim else _ZERO
                                    yf[np.uint64(yo + o)] = v
            if post and last_k:
                _activate_tiles(yf, n * OB * HW, ob0, last, y_ob, O, k_start, k_end, tile,
                                ntiles, cb, P, act, p0, p1)


#: int64 counters per worker in :func:`claim_task`'s array: one 64-byte
#: cache line each, so that two workers' claims do not share a line
COUNTER_STRIDE = 8


@jit()
def claim_task(counters, worker, workers, tasks):
    """The next task for ``worker`` (-1 when none is left): first from its own
    share, tasks ``[worker * tasks // workers, (worker + 1) * tasks //
    workers)`` in order, then from the other workers' shares (work stealing,
    each claim an atomic increment of the share's counter, so every task runs
    once). ``counters``: ``workers * COUNTER_STRIDE`` zeros at the launch.

    Shares are what numba's static schedule gives the depthwise driver (a
    band of rows per thread, :mod:`.depthwise`): an image's pixels split in
    contiguous bands, so in an expand 1x1 -> depthwise -> project 1x1 chain
    each thread reads the rows it wrote, from its own core's L2, where one
    shared counter dealt the chunks alternately to the threads."""
    for k in range(workers):
        share = worker + k
        if share >= workers:
            share -= workers
        start = share * tasks // workers
        end = (share + 1) * tasks // workers
        if start + counters[share * COUNTER_STRIDE] >= end:
            continue                 # drained (a plain read: a stale one only retries)
        task = start + atomic_add(counters, share * COUNTER_STRIDE, 1)
        if task < end:
            return task
    return -1


def _make_conv1x1_driver(cb: int, P: int, B: int):
    """The parallel 1x1 driver for block ``cb`` and tiles of P pixels x B
    output blocks (no padding, no groups). ``threads`` workers claim tasks
    with :func:`claim_task`: a contiguous share each, then any task left
    (dynamic scheduling, like the GEMM driver): with numba's static shares, a
    thread whose core is busy with something else holds up every launch
    (MobileNetV2, batch 1, 2 threads: the same median, the slowest tenth of
    runs 6.5 -> 6.1 ms and 7.6 -> 6.5 ms)."""

    def conv1x1_driver(xf, wf, bias, resf, yf, geometry, chunk, kcb, gsets, threads, has_res,
                       clamp, lo, hi, post, act, p0, p1):
        geom = ConvGeometry(*geometry)
        N, CB, OB, OH, OW, sh, sw = geom.N, geom.CB, geom.OB, geom.OH, geom.OW, geom.sh, geom.sw
        OG = (OB + B - 1) // B
        nchunks = (OH * OW + chunk - 1) // chunk
        per_set = (OG + gsets - 1) // gsets
        strided = sh != 1 or sw != 1
        tasks = N * nchunks * gsets
        workers = max(1, min(threads, tasks))
        # one counter per worker, a cache line apart (see claim_task)
        counters = np.zeros(workers * COUNTER_STRIDE, np.int64)
        for worker in prange(workers):
            while True:
                # a task: one chunk of pixels of one image, for one set of
                # output-block groups, every K-block
                task = claim_task(counters, worker, workers, tasks)
                if task < 0:
                    break
                n = task // (nchunks * gsets)
                c = (task // gsets) % nchunks
                og0 = (task % gsets) * per_set
                og1 = min(OG, og0 + per_set)
                k_start = c * chunk
                k_end = min(OH * OW, k_start + chunk)
                copy_input = strided or k_end - k_start < P
                buf = np.empty(kcb * chunk * cb if copy_input else 0, np.float32)
                ahead = chunk <= _PREFETCH_TILES * P
                for kb0 in range(0, CB, kcb):
                    # (one call per case: ``ahead`` selects a compile)
                    if ahead:
                        _conv1x1_tiles(xf, wf, bias, resf, yf, buf, geom, n, og0, og1,
                                       k_start, k_end, kb0, min(CB, kb0 + kcb), copy_input,
                                       Epilogue(has_res, clamp, lo, hi, post, act, p0, p1),
                                       cb, P, B, True)
                    else:
                        _conv1x1_tiles(xf, wf, bias, resf, yf, buf, geom, n, og0, og1,
                                       k_start, k_end, kb0, min(CB, kb0 + kcb), copy_input,
                                       Epilogue(has_res, clamp, lo, hi, post, act, p0, p1),
                                       cb, P, B, False)

    conv1x1_driver.__qualname__ = f"conv1x1_driver_cb{cb}_{P}x{B}"
    return parallel_kernel(conv1x1_driver)


_conv1x1_drivers: dict = {}


def conv1x1_driver(cb: int, P: int | None = None, B: int | None = None):
    """The compiled 1x1 (GEMM) driver for block ``cb`` and tile ``P x B``
    (default: the direct tile's; made once)."""
    if P is None or B is None:
        P, B = conv_tile_shape(cb)
    key = (cb, P, B)
    driver = _conv1x1_drivers.get(key)
    if driver is None:
        driver = _conv1x1_drivers.setdefault(
            key, made_by(conv1x1_driver, key, _make_conv1x1_driver(cb, P, B)))
    return driver
