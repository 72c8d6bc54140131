"""Depthwise convolution (``groups == C``, multiplier ``m`` output channels
per input channel), vectorized over the channel block: each lane is its own
channel, so there is no reduction over lanes and no broadcast.

Buffers (float32, flat views of C-contiguous arrays):

* input ``x: (N, CB, H, W, cb)``; output ``y`` and residual
  ``(N, OB, OH, OW, cb)``; bias ``(OB * cb,)``
* packed filter ``w: (OB, KH, KW, cb)``: ``[ob, kh, kw, o]`` is the weight of
  output channel ``ob*cb + o``
* zero-padded input rows of one block, on a task's stack:
  ``patch: (rows_in, Wp, cb)`` (at most :data:`_DW_PATCH_ELEMENTS` floats)
* multiplier > 1, per task: ``buf: (KH, span, cb)``, the input a tile's lanes
  read (each lane from its own input channel: ``lane_off``), zero-padded

Tiles run along one output row, so the P pixels of a tile have affine input
addresses (one base register serves them all). The common 3x3 and 5x5 at
stride 1 and 2 (:func:`edge_tiles`) run every column in tiles, those over the
left or right border with masked loads. Otherwise border columns run one pixel
at a time with clipped taps, unless the interior of a row is narrower than a
tile: then the input is padded (:mod:`.plan` decides how).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import literally, prange

from .._config import VECTOR_REGISTERS, jit, parallel_kernel
from .._linking import made_by
from ..epilogue import activate_pixels
from ..stack import prefetch, stack_empty
from .conv1x1 import COUNTER_STRIDE, claim_task
from .geometry import (_MAX_LANES, _TILE_ELEMENTS, _ZERO, DepthwiseGeometry, Epilogue,
                       _clip_range, depthwise_tile_pixels)
from .register_tile import depthwise_edge_tile, depthwise_tile

#: Plain-mode tiles of an input over this many bytes prefetch the input rows
#: :data:`_DW_AHEAD_ROWS` output rows ahead. MobileNetV2, 1 thread, in the
#: network (its maps come from L3): 96 channels 112 -> 56 at stride 2 205 ->
#: 168 us at batch 1; at batch 8 the stride-2 convs to 28 x 28 1761 -> 1467
#: us and to 14 x 14 400 -> 256 us. Inputs in L2 ran slower with it (the
#: kernel alone, warm: 112 -> 56, 129 -> 151 us).
_DW_AHEAD_BYTES = 2 << 20
_DW_AHEAD_ROWS = 2

#: Rows with an interior of at least 2P pixels run tiles of 2P (14 for
#: blocks of 8) where the target has 32 vector registers: 14 accumulators,
#: the 3 or 5 weights of a kernel row and the loaded column fit without a
#: spill (16 registers would not). Zen 4, 1 thread, block 8, the kernel
#: alone, alternated, medians: 32 ch at 112 x 112, 3x3: 136 -> 106 us; 144 ch
#: 56 -> 28, 5x5 stride 2: 131 -> 97 us; 144 ch 56 x 56 (padded rows): 168
#: -> 145 us.
_DW_WIDE = VECTOR_REGISTERS >= 32

#: Floats of a depthwise task's zero-padded input rows on its stack (16 KiB:
#: a 14 x 14 plane of 8 lanes with its border takes 8 KiB).
_DW_PATCH_ELEMENTS = 4096


@jit()
def _dw_fill_patch(buf, xf, geom, lane_off, n, ob, ih0, kh0, kh1, iw0, span, cb):
    """Gather input rows ``ih0 + kh*dh`` (kh in [kh0, kh1)), columns
    ``iw0 .. iw0+span-1`` into ``buf[(kh * span + s) * cb + o]``, zero outside
    the input: lane ``o`` is the input channel at offset ``lane_off[o]`` (the
    one output lane ``o`` of block ``ob`` reads, for a multiplier > 1).
    ``geom``: a :class:`.geometry.DepthwiseGeometry`."""
    literally(cb)
    CB, H, W, dh = geom.CB, geom.H, geom.W, geom.dh
    xn = n * CB * H * W * cb
    for kh in range(kh0, kh1):
        row = xn + (ih0 + kh * dh) * W * cb
        for s in range(span):
            iw = iw0 + s
            d = (kh * span + s) * cb
            if iw >= 0 and iw < W:
                px = row + iw * cb
                for o in range(cb):
                    buf[np.uint64(d + o)] = xf[np.uint64(px + lane_off[o])]
            else:
                for o in range(cb):
                    buf[np.uint64(d + o)] = _ZERO


@jit()
def _dw_pad_rows(xf, x_plane, H, W, cb, pt, pl, row0, rows, Wp, patch):
    """``patch[(r * Wp + j) * cb + o]`` = the block's input at row
    ``row0 + r - pt``, column ``j - pl``, lane ``o``; zero outside the input."""
    row_out = Wp * cb
    left = min(pl, Wp) * cb
    inside = max(min(W + pl, Wp) * cb - left, 0)
    for r in range(rows):
        ih = row0 + r - pt
        d = r * row_out
        if ih < 0 or ih >= H:
            for i in range(row_out):
                patch[np.uint64(d + i)] = _ZERO
            continue
        s = x_plane + ih * W * cb
        for i in range(left):
            patch[np.uint64(d + i)] = _ZERO
        for i in range(inside):
            patch[np.uint64(d + left + i)] = xf[np.uint64(s + i)]
        for i in range(left + inside, row_out):
            patch[np.uint64(d + i)] = _ZERO


@jit(standalone=True)
def _dw_rows(xf, x_plane, wf, bias, resf, yf, buf, lane_off, geometry, n, ob, oh_start,
             oh_end, owa, owb, epilogue, cb, cb2, P, P2, ahead):
    """Depthwise output rows ``oh_start .. oh_end-1`` of block ``ob`` of
    image ``n``, vectorized over the block's lanes (``geometry``: the fields
    of a :class:`.geometry.DepthwiseGeometry` as a plain tuple, see the
    driver; ``epilogue``: an :class:`.geometry.Epilogue`). With multiplier
    1, input row ``ih`` of the block starts at ``xf[x_plane + ih * W * cb]``
    (``xf`` may be the block's zero-padded rows on the task's stack).

    With multiplier 1, columns ``[owa, owb)`` (all taps inside the input) run
    in tiles of ``P`` pixels that read ``xf`` directly (the last tile of a row
    is moved back to end at ``owb``: it recomputes a few pixels rather than
    run partly empty), and the border columns one pixel at a time with the
    taps clipped. With a multiplier > 1 each lane comes from another input
    channel, so every tile reads a gathered, zero-padded patch instead.
    """
    literally(cb)
    literally(cb2)                      # 2 * cb: the pixel step at stride 2
    literally(P)
    literally(P2)                       # the wide tile (:data:`_DW_WIDE`), or P
    literally(ahead)                    # a constant: the compile without has no prefetch
    geom = DepthwiseGeometry(*geometry)
    H, W, OB, OH, OW = geom.H, geom.W, geom.OB, geom.OH, geom.OW
    KH, KW, sh, sw, dh, dw, pt, pl = (geom.KH, geom.KW, geom.sh, geom.sw, geom.dh, geom.dw,
                                      geom.pt, geom.pl)
    O, m = geom.O, geom.m
    has_res, clamp, lo, hi = epilogue.has_res, epilogue.clamp, epilogue.lo, epilogue.hi
    post, act, p0, p1 = epilogue.post, epilogue.act, epilogue.p0, epilogue.p1
    acc = numba.carray(stack_empty(_TILE_ELEMENTS, np.float32), _TILE_ELEMENTS)
    one = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)  # single pixels
    span = (P - 1) * sw + (KW - 1) * dw + 1
    xps = sw * cb
    s_kw = dw * cb
    bo = ob * cb
    lim = O - bo
    tiled = m == 1 and owb - owa >= P
    # the tiles' source, chosen once: an array variable assigned per tile
    # costs two atomic reference-count calls per tile, more than the FMAs of
    # a 3x3 tile of 7 pixels
    src = xf if m == 1 else buf
    # The common 3x3 and 5x5 at stride 1 and 2: every column in register
    # tiles, those over the left or right border with masked loads (no
    # single pixels, no padded copy); P2-wide tiles where all their input
    # is inside (see _DW_WIDE), P-wide at the borders and in what is left.
    edges = (m == 1 and lim >= cb and dw == 1 and sw <= 2 and (KW == 3 or KW == 5)
             and OW >= P)
    x_kh = dh * W * cb
    for oh in range(oh_start, oh_end):
        kh0, kh1 = _clip_range(oh * sh - pt, dh, KH, H)
        ih0 = oh * sh - pt
        yrow = ((n * OB + ob) * OH + oh) * OW * cb
        xrow = x_plane + ih0 * W * cb
        w0 = (ob * KH + kh0) * KW * cb
        if edges:
            ow0 = 0
            while ow0 < OW:
                p_lo = 0                      # as below: the last tile moved back
                iw0 = ow0 * sw - pl
                wide = (P2 > P and ow0 + P2 <= OW and iw0 >= 0
                        and (ow0 + P2 - 1) * sw + KW <= W + pl)
                if not wide and ow0 + P > OW:
                    p_lo = ow0 + P - OW
                    ow0 = OW - P
                    iw0 = ow0 * sw - pl
                pw = P2 if wide else P
                if ahead:
                    # as below, the tile's columns inside the input
                    pf_row = ih0 + (KH - 1) * dh + (_DW_AHEAD_ROWS - 1) * sh + 1
                    for r in range(pf_row, min(H, pf_row + sh)):
                        pf = x_plane + (r * W + max(iw0, 0)) * cb
                        for q in range(0, pw * sw * cb, 16):
                            prefetch(xf, (np.uint64(pf + q),))
                x0 = xrow + iw0 * cb + kh0 * x_kh
                ypix = yrow + ow0 * cb
                c_lo = max(0, -iw0)              # the tile's input columns inside
                c_hi = min((P - 1) * sw + KW, W - iw0)
                if wide:
                    if sw == 1 and KW == 3:
                        depthwise_tile(P2, cb, cb, xf, x0, x_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, 0, clamp, lo, hi)
                    elif sw == 1:
                        depthwise_tile(P2, cb, cb, xf, x0, x_kh, s_kw, kh1 - kh0, 5, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, 0, clamp, lo, hi)
                    elif KW == 3:
                        depthwise_tile(P2, cb, cb2, xf, x0, x_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, 0, clamp, lo, hi)
                    else:
                        depthwise_tile(P2, cb, cb2, xf, x0, x_kh, s_kw, kh1 - kh0, 5, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, 0, clamp, lo, hi)
                elif c_lo == 0 and c_hi == (P - 1) * sw + KW:
                    # inside: unmasked (masks cost 240 ch 28 -> 14, stride 2, 28 -> 34 us)
                    if sw == 1 and KW == 3:
                        depthwise_tile(P, cb, cb, xf, x0, x_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                    elif sw == 1:
                        depthwise_tile(P, cb, cb, xf, x0, x_kh, s_kw, kh1 - kh0, 5, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                    elif KW == 3:
                        depthwise_tile(P, cb, cb2, xf, x0, x_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                    else:
                        depthwise_tile(P, cb, cb2, xf, x0, x_kh, s_kw, kh1 - kh0, 5, wf, w0,
                                       bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                # the border tiles: masked loads
                elif sw == 1 and KW == 3:
                    depthwise_edge_tile(P, cb, cb, xf, x0, x_kh, kh1 - kh0, 3, wf, w0, bias, bo,
                                        resf, has_res, yf, ypix, p_lo, clamp, lo, hi, c_lo, c_hi)
                elif sw == 1:
                    depthwise_edge_tile(P, cb, cb, xf, x0, x_kh, kh1 - kh0, 5, wf, w0, bias, bo,
                                        resf, has_res, yf, ypix, p_lo, clamp, lo, hi, c_lo, c_hi)
                elif KW == 3:
                    depthwise_edge_tile(P, cb, cb2, xf, x0, x_kh, kh1 - kh0, 3, wf, w0, bias,
                                        bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi, c_lo,
                                        c_hi)
                else:
                    depthwise_edge_tile(P, cb, cb2, xf, x0, x_kh, kh1 - kh0, 5, wf, w0, bias,
                                        bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi, c_lo,
                                        c_hi)
                ow0 += pw
            continue

        # single pixels: the border columns (and a too narrow interior)
        if m == 1:
            ow = 0
            while ow < OW:
                if tiled and ow == owa:
                    ow = owb                  # the tiles below take [owa, owb)
                    continue
                yo = yrow + ow * cb
                for o in range(cb):
                    one[o] = _ZERO
                iw0 = ow * sw - pl
                kw0, kw1 = _clip_range(iw0, dw, KW, W)
                for kh in range(kh0, kh1):
                    for kw in range(kw0, kw1):
                        xo = xrow + kh * dh * W * cb + (iw0 + kw * dw) * cb
                        wo = ((ob * KH + kh) * KW + kw) * cb
                        for o in range(cb):
                            one[o] += xf[np.uint64(xo + o)] * wf[np.uint64(wo + o)]
                for o in range(cb):
                    v = one[o] + bias[np.uint64(bo + o)]
                    r = resf[np.uint64(yo + o)]
                    if has_res:
                        v += r
                    if clamp:
                        v = min(max(v, lo), hi)
                    yf[np.uint64(yo + o)] = v if o < lim else _ZERO
                ow += 1
            if not tiled:
                continue
            first, end = owa, owb
        else:
            first, end = 0, OW

        # tiles of P pixels
        ow0 = first
        while ow0 < end:
            p_lo = 0                          # the tile stores pixels p_lo .. nvalid-1
            if m == 1 and ow0 + P > end:
                # whole tiles only: the last one moved back, storing only its
                # own pixels (an in-place residual must not be added twice)
                p_lo = ow0 + P - end
                ow0 = end - P
            nvalid = min(P, end - ow0)
            iw0 = ow0 * sw - pl
            ypix = yrow + ow0 * cb
            if nvalid == P and lim >= cb:
                # the common case, accumulators in registers throughout
                if m == 1:
                    base, s_kh = xrow + iw0 * cb, dh * W * cb
                else:
                    _dw_fill_patch(buf, xf, geom, lane_off, n, ob, ih0, kh0, kh1, iw0, span, cb)
                    base, s_kh = 0, span * cb
                if ahead:
                    # the input rows that output row oh + _DW_AHEAD_ROWS adds,
                    # this tile's columns: a network's maps come from L3 or
                    # memory, faster fetched ahead than by the hardware
                    pf_row = ih0 + (KH - 1) * dh + (_DW_AHEAD_ROWS - 1) * sh + 1
                    for r in range(pf_row, min(H, pf_row + sh)):
                        pf = x_plane + (r * W + iw0) * cb
                        for q in range(0, P * sw * cb, 16):
                            prefetch(xf, (np.uint64(pf + q),))
                x0 = base + kh0 * s_kh
                w0 = (ob * KH + kh0) * KW * cb
                # one call per case, written out: the literal pixel step and
                # tap count select the tile's specialization at compile time
                if sw == 1 and dw == 1 and KW == 3:
                    # the common 3x3: each input column loaded once per row
                    depthwise_tile(P, cb, cb, src, x0, s_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 1 and dw == 1 and KW == 5:
                    # 5x5 (EfficientNet, MnasNet, MobileNetV3) as well: 11
                    # loads per row of 35 FMAs instead of 40
                    depthwise_tile(P, cb, cb, src, x0, s_kh, s_kw, kh1 - kh0, 5, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 1:
                    depthwise_tile(P, cb, cb, src, x0, s_kh, s_kw, kh1 - kh0, KW, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 2 and dw == 1 and KW == 3:
                    # stride 2: each input column loaded once per row as well
                    depthwise_tile(P, cb, cb2, src, x0, s_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 2 and dw == 1 and KW == 5:
                    depthwise_tile(P, cb, cb2, src, x0, s_kh, s_kw, kh1 - kh0, 5, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 2:
                    depthwise_tile(P, cb, cb2, src, x0, s_kh, s_kw, kh1 - kh0, KW, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                else:
                    depthwise_tile(P, cb, xps, src, x0, s_kh, s_kw, kh1 - kh0, KW, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                ow0 += P
                continue
            # a partial tile (pixels, or lanes of the last block): the same
            # steps in numba, accumulators on the stack
            # (the residual only when there is one: a load of an output line
            # not in cache would stall the tile)
            for p in range(P):
                for o in range(cb):
                    acc[p * cb + o] = bias[np.uint64(bo + o)]
            if has_res:
                for p in range(P):
                    yo = ypix + min(p, nvalid - 1) * cb
                    for o in range(cb):
                        acc[p * cb + o] += resf[np.uint64(yo + o)]
            if m == 1:
                base = xrow + iw0 * cb
                s_kh = dh * W * cb
            else:
                _dw_fill_patch(buf, xf, geom, lane_off, n, ob, ih0, kh0, kh1, iw0, span, cb)
                base = 0
                s_kh = span * cb
            # The hot loop, once per stride 1, 2 and any: with the pixel
            # stride a compile-time constant every load has a fixed offset
            # from one pointer; a runtime stride chains 12 dependent address
            # adds per tap (half speed).
            if sw == 1:
                for kh in range(kh0, kh1):
                    for kw in range(KW):
                        xo = base + kh * s_kh + kw * s_kw
                        wo = ((ob * KH + kh) * KW + kw) * cb
                        for p in range(P):
                            for o in range(cb):
                                acc[p * cb + o] += (src[np.uint64(xo + p * cb + o)]
                                                    * wf[np.uint64(wo + o)])
            elif sw == 2:
                for kh in range(kh0, kh1):
                    for kw in range(KW):
                        xo = base + kh * s_kh + kw * s_kw
                        wo = ((ob * KH + kh) * KW + kw) * cb
                        for p in range(P):
                            for o in range(cb):
                                acc[p * cb + o] += (src[np.uint64(xo + p * 2 * cb + o)]
                                                    * wf[np.uint64(wo + o)])
            else:
                for kh in range(kh0, kh1):
                    for kw in range(KW):
                        xo = base + kh * s_kh + kw * s_kw
                        wo = ((ob * KH + kh) * KW + kw) * cb
                        for p in range(P):
                            for o in range(cb):
                                acc[p * cb + o] += (src[np.uint64(xo + p * xps + o)]
                                                    * wf[np.uint64(wo + o)])
            for p in range(P):
                if p_lo <= p < nvalid:
                    yo = ypix + p * cb
                    for o in range(cb):
                        v = acc[p * cb + o]
                        if clamp:
                            v = min(max(v, lo), hi)
                        yf[np.uint64(yo + o)] = v if o < lim else _ZERO
            ow0 += P
    if post:
        # The activation once over the rows just stored (contiguous: one
        # block's rows), while they are in L1: per tile it was a span of 7
        # pixels x 8 lanes, too short for the 16-wide loop of an exp, whose
        # scalar remainder made SiLU cost more than the convolution (32
        # channels at 112 x 112, 1 thread: 161 us without, 575 us with).
        activate_pixels(yf, ((n * OB + ob) * OH + oh_start) * OW * cb,
                        (oh_end - oh_start) * OW, cb, min(cb, lim), act, p0, p1)


def edge_tiles(cb: int, kernel_w: int, stride_w: int, dilation_w: int, out_w: int) -> bool:
    """Whether :func:`_dw_rows` runs every output column of a row (multiplier
    1, full blocks) in register tiles, masked over the borders: the common
    3x3 and 5x5 at stride 1 or 2 on rows at least a tile wide. Then the
    input needs no padded copy."""
    return (kernel_w in (3, 5) and stride_w <= 2 and dilation_w == 1
            and out_w >= depthwise_tile_pixels(cb))


#: how a depthwise driver reads its input (:func:`depthwise_mode`)
MODES = ("padded", "plain", "multiplier")


def depthwise_mode(pad_rows: int, multiplier: int) -> str:
    """``"padded"``: each task pads its input rows on its stack (``pad_rows >
    0``); ``"plain"``: one input channel per output channel; ``"multiplier"``:
    several output channels per input channel."""
    return "padded" if pad_rows > 0 else "plain" if multiplier == 1 else "multiplier"


def _make_depthwise_driver(cb: int, mode: str):
    """The parallel depthwise driver for block ``cb`` and ``mode`` (one of
    :data:`MODES`): tasks of a few output rows of one block. cb, mode, P and
    cb2 are compile-time constants captured in the closure, so the numba
    cache keeps one entry per (cb, mode), and each compiles the branch of
    its mode only (each mode calls its own specialization of ``_dw_rows``)."""
    P = depthwise_tile_pixels(cb)
    P2 = 2 * P if _DW_WIDE else P
    cb2 = 2 * cb

    def depthwise_driver(xf, wf, bias, resf, yf, geometry, has_res, pad_rows, threads, clamp,
                         lo, hi, post, act, p0, p1):
        geom = DepthwiseGeometry(*geometry)
        N, CB, H, W, OB, OH, OW = geom.N, geom.CB, geom.H, geom.W, geom.OB, geom.OH, geom.OW
        KH, KW, sh, sw, dh, dw, pt, pl = (geom.KH, geom.KW, geom.sh, geom.sw, geom.dh, geom.dw,
                                          geom.pt, geom.pl)
        O, C, m = geom.O, geom.C, geom.m
        # output columns [owa, owb) whose kw taps all land inside the input
        owa, owb = _clip_range(-pl, sw, OW, W - (KW - 1) * dw)
        span = (P - 1) * sw + (KW - 1) * dw + 1
        # a task takes a few output rows of one block
        rows = min(OH, max(1, 2048 // (OW * cb)))
        if pad_rows > 0:
            rows = min(rows, pad_rows)
        row_chunks = (OH + rows - 1) // rows
        # pad_rows > 0: each task copies its block's input rows, zero-padded,
        # into a buffer on its stack (in L1) and runs on that, every column
        # interior; cheaper than padding the whole input in a pass of its own
        # (960 ch at 7 x 7: 52 -> 46 us per call)
        Wp = (OW - 1) * sw + (KW - 1) * dw + 1
        # the padded rows' geometry: DepthwiseGeometry's fields in a plain
        # tuple, where numba types the zero padding as the constant 0, so
        # _dw_rows compiles a version of its own without padding arithmetic
        padded_geometry = (N, CB, (OH - 1) * sh + (KH - 1) * dh + 1, Wp, OB, OH, OW, KH, KW,
                           sh, sw, dh, dw, 0, 0, O, C, m)
        # multiplier 1 needs no patch buffer: no allocation per task (two
        # cost ~0.1 us each, 10-20 % of a 7 x 7 block's task)
        no_buf = np.empty(1, np.float32)
        no_lanes = np.empty(cb, np.int64)
        # inputs far past L2 (read from L3 or memory): fetch rows ahead
        ahead = N * CB * H * W * cb * 4 > _DW_AHEAD_BYTES
        # One band of each image's rows per thread when the threads would
        # otherwise split an image (batch 1): tasks run band by band, every
        # block of a band in turn, and the workers claim them as the 1x1
        # driver does (claim_task: a contiguous share each, then any left).
        # Those shares are the rows the 1x1 driver's shares give each thread,
        # so in an expand 1x1 -> depthwise -> project 1x1 chain each thread
        # reads the rows it wrote, from its own core's L2, and writes the rows
        # it reads next. One band (one thread, or whole images per thread) is
        # the block-by-block order of each image, as before.
        # (``threads``: the caller's numba thread count; numba.get_num_threads
        # in a kernel would keep it from the cache)
        bands = 1 if N % threads == 0 else min(threads, row_chunks)
        per_band = (row_chunks + bands - 1) // bands
        tasks = N * bands * OB * per_band
        workers = max(1, min(threads, tasks))
        counters = np.zeros(workers * COUNTER_STRIDE, np.int64)
        for worker in prange(workers):
            while True:
                task = claim_task(counters, worker, workers, tasks)
                if task < 0:
                    break
                rc = (task // (OB * per_band)) % bands * per_band + task % per_band
                if rc >= row_chunks:
                    continue             # past the last band's rows
                ob = (task // per_band) % OB
                n = task // (bands * OB * per_band)
                oh_start = rc * rows
                oh_end = min(OH, oh_start + rows)
                if mode == "padded":
                    patch = numba.carray(stack_empty(_DW_PATCH_ELEMENTS, np.float32),
                                         _DW_PATCH_ELEMENTS)
                    row0 = oh_start * sh
                    rows_in = (oh_end - 1 - oh_start) * sh + (KH - 1) * dh + 1
                    _dw_pad_rows(xf, (n * CB + ob) * H * W * cb, H, W, cb, pt, pl, row0, rows_in,
                                 Wp, patch)
                    _dw_rows(patch, -row0 * Wp * cb, wf, bias, resf, yf, no_buf, no_lanes,
                             padded_geometry, n, ob, oh_start, oh_end, 0, OW,
                             Epilogue(has_res, clamp, lo, hi, post, act, p0, p1), cb, cb2, P,
                             P2, False)
                elif mode == "plain" and ahead:
                    _dw_rows(xf, (n * CB + ob) * H * W * cb, wf, bias, resf, yf, no_buf, no_lanes,
                             geometry, n, ob, oh_start, oh_end, owa, owb,
                             Epilogue(has_res, clamp, lo, hi, post, act, p0, p1), cb, cb2, P, P2,
                             True)
                elif mode == "plain":
                    _dw_rows(xf, (n * CB + ob) * H * W * cb, wf, bias, resf, yf, no_buf, no_lanes,
                             geometry, n, ob, oh_start, oh_end, owa, owb,
                             Epilogue(has_res, clamp, lo, hi, post, act, p0, p1), cb, cb2, P, P2,
                             False)
                else:
                    buf = np.empty(KH * span * cb, np.float32)
                    lane_off = np.empty(cb, np.int64)
                    for o in range(cb):
                        # input channel of output lane o (padding lanes: any readable one)
                        c = min((ob * cb + o) // m, C - 1)
                        lane_off[o] = (c // cb) * H * W * cb + c % cb
                    _dw_rows(xf, 0, wf, bias, resf, yf, buf, lane_off, geometry, n, ob, oh_start,
                             oh_end, owa, owb, Epilogue(has_res, clamp, lo, hi, post, act, p0, p1),
                             cb, cb2, P, P, False)

    depthwise_driver.__qualname__ = f"depthwise_driver_cb{cb}_{mode}"
    return parallel_kernel(depthwise_driver)


_depthwise_drivers: dict = {}


def depthwise_driver(cb: int, mode: str = "plain"):
    """The compiled depthwise driver for block ``cb`` and ``mode`` (made once)."""
    key = (cb, mode)
    driver = _depthwise_drivers.get(key)
    if driver is None:
        if mode not in MODES:
            raise ValueError(f"depthwise: unknown mode {mode!r}; known: {MODES}")
        driver = _depthwise_drivers.setdefault(
            key, made_by(depthwise_driver, key, _make_depthwise_driver(cb, mode)))
    return driver
