"""The direct convolution: any kernel, strides, dilations, padding and
groups, on a blocked input or (the first layer) a plain one.

Buffers (float32, flat views of C-contiguous arrays; ``ci`` input lanes per
block: ``cb`` blocked, ``C`` plain, whose register tile reads them ``ci`` (3
or 1) at a step):

* input, blocked: ``x: (N, CB, H, W, cb)``; plain: ``x: (N, C, H, W)``
* packed filter: ``w: (OB, R, KH, KW, ci, cb)`` (``OIhw{ci}i{cb}o``; a plain
  input's is ``(OB, 1, KH, KW, C, cb)``); output block ``ob`` reads input
  blocks ``[ib_begin[ob], ib_end[ob])`` (groups: the blocks of its groups),
  whose weights are at ``w[ob, ib - min(ib_begin[ob], CB - R)]`` (``R = CB``
  without groups; grouped filters keep only each block's window,
  ``filter_packing.packed_window_begins``)
* bias ``(OB * cb,)``; output ``y`` and residual: ``(N, OB, OH, OW, cb)``
* border patch, per task: ``buf: (CB, KH, KW, P, ci)`` (plain: ``(1, KH,
  KW, P, C)``), tap ``(kh, kw)`` of tile pixel ``p``, zero where the tap
  falls in the padding; with edge masks (below), ``buf: ((P - 1) * sw + 1,
  cb)`` zeros instead
* regions ``(R, 8)`` int64: output rows ``[r0, r1)``, columns ``[c0, c1)``
  and the taps ``[kh0, kh1) x [kw0, kw1)`` its pixels run; chunks
  ``(nchunks, 3)`` int64: a region (-1: border pixels), first and end pixel;
  passes ``(npasses, 3)`` int64: chunks ``[first, end)`` and what the pass
  does (``geometry.PASS_*``); several (tap by tap) run one after the other
  in each output-block group's task

A tile is P output pixels x B output blocks (:func:`.geometry.direct_tile_shape`).
A plain input with a small window (the first layer's 3x3 over 3 channels:
27 lanes a tile) runs a task per interior row and its tiles in runs along
it, one register-tile call per run (setting each tile up in numba cost as
much as its FMAs).
Output pixels are split into regions that read the input in place and
border pixels. A region is a rectangle of output pixels and the rectangle
of taps they run; its pixels are numbered row-major over it, and a tile
takes P consecutive ones (it may wrap to the next row, so no work is lost
on row ends). Usually there is one region, the interior (rows [r0, r1),
columns [c0, c1) of :class:`.geometry.ConvGeometry`, whose pixels see every
kernel tap inside the input), with every tap; border pixels (the rest: rows
above and below, then columns left and right) go through the same loop on a
zero-padded copy of their taps. When many taps read only padding (a dilated
conv with padding about its dilation on a small map: DeepLab's ASPP at
dilation 12 on 16 x 16, three quarters of its taps), the output is instead
cut into regions in which every pixel's in-input taps are the same
rectangle (:func:`.geometry.tap_regions`), each running only those taps,
and there are no border pixels. When one output-block group's weights are
past L2 besides, the regions run tap by tap instead
(:func:`.geometry.tap_passes`): a pass per tap adds it over the pixels it
reads the input for, so each tap's weights are read once per group.

That per-tile copy holds every input block's taps (for 512 channels and
3x3, 110 KiB per tile: more than L1), so when borders are a large share of
the output (small images: 26 % of 14x14, 49 % of 7x7) the wrapper instead
pads the whole input once (:func:`.padding.pad_blocked`, a few hundred KiB)
and every pixel becomes interior: 3x3 on 256 channels at 14x14 went from 67
to 84 GFLOP/s, 512 channels at 7x7 from 55 to 75.

A grouped conv's tile reads only its group's input blocks, so it needs
neither: every output pixel runs in row tiles as wide as the output, on the
input in place, every tap, the taps in the padding masked (``edges``:
:func:`.register_tile.conv_tile` reads zeros for a tap whose input row is
outside the input, and for the tile's end pixels' taps outside its
columns). RegNetX-400MF's grouped 3x3 convs, 1 thread, against the padded
copy: 0.81-0.98x the time.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import literally, prange

from .._config import jit, parallel_kernel
from .._linking import made_by
from ..epilogue import activate_pixels
from ..stack import stack_empty
from .geometry import (_MAX_TILE_PIXELS, _TILE_ELEMENTS, _ZERO, PASS_INIT, PASS_LAST,
                       ConvGeometry, Epilogue, _border_pixel, direct_tile_shape)
from .register_tile import conv_tile


@jit()
def _fill_patch(buf, xf, geom, n, ib0, ib1, ihs, iws, ci, P, lanes):
    """Copy what a border tile reads from input blocks ``ib0 .. ib1-1`` into
    ``buf``: ``buf[((((ib - ib0) * KH + kh) * KW + kw) * P + p) * lanes + i]``
    is lane ``i`` of tap ``(kh, kw)`` of pixel ``p`` (input row ``ihs[p] +
    kh*dh``, column ``iws[p] + kw*dw``), zero where the tap falls in the
    padding. ``lanes``: ``ci`` (blocked), or a plain input's C channels."""
    literally(ci)
    literally(P)
    H, W, KH, KW, dh, dw = geom.H, geom.W, geom.KH, geom.KW, geom.dh, geom.dw
    x_n, x_ib, x_row, x_px, x_lane = geom.x_n, geom.x_ib, geom.x_row, geom.x_px, geom.x_lane
    for ib in range(ib0, ib1):
        xbase = n * x_n + ib * x_ib
        for kh in range(KH):
            for p in range(P):
                ih = ihs[p] + kh * dh
                row_ok = ih >= 0 and ih < H
                for kw in range(KW):
                    iw = iws[p] + kw * dw
                    d = ((((ib - ib0) * KH + kh) * KW + kw) * P + p) * lanes
                    if row_ok and iw >= 0 and iw < W:
                        s = xbase + ih * x_row + iw * x_px
                        if x_lane == 1 and lanes == ci:  # blocked: one vector move
                            for i in range(ci):
                                buf[np.uint64(d + i)] = xf[np.uint64(s + i)]
                        else:
                            for i in range(lanes):
                                buf[np.uint64(d + i)] = xf[np.uint64(s + i * x_lane)]
                    else:
                        for i in range(lanes):
                            buf[np.uint64(d + i)] = _ZERO


@jit()
def _input_lanes(wf, OB, KH, KW, cb, ci, plain):
    """The input lanes a tap reads: ``ci`` for a blocked input; a plain
    input's C channels (its packed filter is ``(OB, 1, KH, KW, C, cb)``),
    which the register tile runs ``ci`` at a step."""
    if plain:
        return wf.shape[0] // (OB * KH * KW * cb)
    return ci


@jit(standalone=True)
def _conv_tiles(xf, wf, bias, resf, yf, buf, geom, region, ib_begin, ib_end, n, og0, og1,
                k_start, k_end, interior, groups_outside, epilogue, cb, ci, P, B, plain,
                row_step, edges):
    """Output pixels ``k_start .. k_end-1`` of image ``n``, of ``region``
    (``interior``: a tuple ``(r0, r1, c0, c1, kh0, kh1, kw0, kw1)``, a row of
    the regions in the module docstring) or of the border pixels, for
    output-block groups ``og0 .. og1-1`` (group ``og`` is blocks
    ``og*B .. og*B+B-1``), tile by tile: P pixels x B blocks. ``geom``: a
    :class:`.geometry.ConvGeometry`; ``epilogue``: an
    :class:`.geometry.Epilogue`; ``buf``: the border patch (module docstring).

    ``plain``: the input is plain nchw, its C channels a plane apart
    (blocked: ``ci = cb`` adjacent lanes), so each (tap, channel) pair gets
    its own input offset; the register tile takes ``ci`` of them a step (3
    or 1, :func:`plain_step_lanes`), so one compile serves every C that
    ``ci`` divides.

    ``groups_outside``: every tile of one group, then the next group (the
    group's weights stay in L1 when they fit); otherwise every group of one
    tile, then the next tile (the tile's input stays in L1).

    ``row_step``: 0, or the input stride between horizontally adjacent
    output pixels (``sw * cb``): a whole interior tile whose pixels lie in
    one output row then runs the register tile with constant pixel offsets
    (``register_tile.conv_tile``'s ``pixel_step``); the others read the
    offset tables.

    ``edges``: 0, or (a region of whole output rows and every tap, on the
    input in place of a padded copy) a tile's taps whose input row is
    outside the input read zeros (``buf``), and so do the first and last
    ``edges`` pixels' taps outside its columns (``register_tile.conv_tile``'s
    ``edges``); the plan has every tile whole, in one row, of whole output
    blocks (:func:`.plan.edge_pixels`).

    One call runs many tiles: every call of a numba function with array
    arguments costs atomic reference-count updates, shared between threads.
    """
    literally(cb)
    literally(ci)
    literally(P)
    literally(B)
    literally(plain)
    literally(row_step)
    literally(edges)
    CB, OB, OH, OW, O = geom.CB, geom.OB, geom.OH, geom.OW, geom.O
    KH, KW, sh, sw, dh, dw, pt, pl = (geom.KH, geom.KW, geom.sh, geom.sw, geom.dh, geom.dw,
                                      geom.pt, geom.pl)
    x_n, x_ib, x_row, x_px, x_lane = geom.x_n, geom.x_ib, geom.x_row, geom.x_px, geom.x_lane
    r0, r1, c0, c1 = geom.r0, geom.r1, geom.c0, geom.c1
    # the pixels and taps this call runs (border pixels: every tap, on the patch)
    kh0, kw0 = 0, 0
    kh1, kw1 = KH, KW
    if interior:
        r0, r1, c0, c1, kh0, kh1, kw0, kw1 = region
    has_res, clamp, lo, hi = epilogue.has_res, epilogue.clamp, epilogue.lo, epilogue.hi
    post, act, p0, p1 = epilogue.post, epilogue.act, epilogue.p0, epilogue.p1
    # per pixel of a tile: output offset (block 0), kernel window origin, and
    # the input offset it reads from (xb, kept in registers)
    yos = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    ihs = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    iws = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    xb = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    acc = numba.carray(stack_empty(_TILE_ELEMENTS, np.float32), _TILE_ELEMENTS)

    y_ob = OH * OW * cb                  # between output blocks
    # the lanes a tap reads: ci, or a plain input's C channels, ci at a step
    lanes = _input_lanes(wf, OB, KH, KW, cb, ci, plain)
    # packed weight strides: (OB, R, KH, KW, lanes, cb), R input blocks a
    # window (CB dense, fewer grouped; 1 plain); a tile's blocks share one
    # range, so one window start (filter_packing.packed_window_begins)
    w_ib = KH * KW * lanes * cb
    window = wf.shape[0] // (OB * w_ib)
    w_ob = window * w_ib
    # input blocks any group of this call reads (ranges grow with ob)
    u0 = ib_begin[og0 * B]
    u1 = ib_end[min(og1 * B, OB) - 1]
    if interior:
        src = xf
        s_ib, s_kh, s_kw, s_lane = x_ib, dh * x_row, dw * x_px, x_lane
    else:
        src = buf                        # patch of blocks u0 .. u1-1
        s_ib, s_kh, s_kw, s_lane = KH * KW * P * lanes, KW * P * lanes, P * lanes, 1
    # per tap (kh, kw) this call runs, t = (kh - kh0) * (kw1 - kw0) + kw - kw0:
    # blocked, the pair (its input offset from tap (kh0, kw0) of an input
    # block, its weights' offset in an input block's packed weights); plain,
    # the input offset of each input channel i (entry t * lanes + i; the
    # weights walk on, every tap running)
    taps = (kh1 - kh0) * (kw1 - kw0)
    entries = lanes if plain else 2
    tap_x = np.empty(taps * entries, np.int64)
    # edges: each tap's input column and row past tap (kh0, kw0)'s (a tap in
    # the padding reads the zeros of buf instead)
    tap_rc = np.empty(2 * taps, np.int64)
    for kh in range(kh0, kh1):
        for kw in range(kw0, kw1):
            t = (kh - kh0) * (kw1 - kw0) + kw - kw0
            tap_rc[2 * t] = (kw - kw0) * dw
            tap_rc[2 * t + 1] = (kh - kh0) * dh
            if plain:
                for i in range(lanes):
                    tap_x[t * lanes + i] = kh * s_kh + kw * s_kw + i * s_lane
            else:
                tap_x[2 * t] = (kh - kh0) * s_kh + (kw - kw0) * s_kw
                tap_x[2 * t + 1] = (kh * KW + kw) * ci * cb

    ntiles = (k_end - k_start + P - 1) // P
    ngroups = og1 - og0
    current = -1
    nvalid = 0
    p_lo = 0
    in_row = False
    run = 1
    # a plain input's row tiles run in runs along the row (one conv_tile call
    # each: register_tile's ``tiles``) when every group has whole blocks
    runs = plain and row_step > 0 and og1 * B <= OB and O >= og1 * B * cb
    at = 0
    while at < ntiles * ngroups:
        if groups_outside:
            tile = at % ntiles
            og = og0 + at // ntiles
        else:
            tile = at // ngroups
            og = og0 + at % ngroups
        if tile != current:
            current = tile
            k0 = k_start + tile * P
            nvalid = min(P, k_end - k0)
            p_lo = 0
            if interior and nvalid < P and k_end >= P:
                # the partial last tile moved back to end at k_end (49 pixels
                # of a 7x7 image: 8 tiles and one of a single pixel): it
                # recomputes pixels before it, maybe another task's, and
                # stores only its own (what it reads there is never used)
                p_lo = P - nvalid
                nvalid = P
                k0 = k_end - P
            # the tile's pixels; those past nvalid repeat the last one
            if interior:
                width = c1 - c0
                row = k0 // width
                oh = r0 + row
                ow = c0 + k0 - row * width
                in_row = row_step > 0 and ow + P <= c1
                run = 1
                if runs and in_row and p_lo == 0:
                    # whole tiles from here to the row's end (or the chunk's)
                    run = max(1, min((c1 - ow) // P, (k_end - k0) // P))
            for p in range(P):
                if not interior:
                    oh, ow = _border_pixel(k0 + min(p, nvalid - 1), OH, OW, r0, r1, c0, c1)
                ihs[p] = oh * sh - pt
                iws[p] = ow * sw - pl
                yos[p] = ((n * OB * OH + oh) * OW + ow) * cb
                if interior and p + 1 < nvalid:
                    ow += 1
                    if ow == c1:
                        ow = c0
                        oh += 1
            if interior:
                for p in range(P):
                    # the pixel's tap (kh0, kw0), inside the input
                    xb[p] = n * x_n + (ihs[p] + kh0 * dh) * x_row + (iws[p] + kw0 * dw) * x_px
            else:
                _fill_patch(buf, xf, geom, n, u0, u1, ihs, iws, ci, P, lanes)
                for p in range(P):
                    xb[p] = p * lanes - u0 * s_ib

        ob0 = og * B
        last = min(B, OB - ob0) - 1  # blocks past the last one re-read it
        if nvalid == P and O >= (ob0 + last + 1) * cb and (
                last == B - 1 or (last == 0 and not plain)):
            # the common case: whole output blocks (B, or a group of one at
            # the end), accumulators in registers throughout (a plain input's
            # tile of one block: LLVM loads all its 3 x 6 broadcasts first
            # and spills them; it runs below)
            ib = ib_begin[ob0]
            # (a plain input: one block, lanes // ci steps a tap)
            steps = (ib_end[ob0 + last] - ib) * taps * (lanes // ci)
            w0 = ob0 * w_ob + (ib - min(ib, CB - window)) * w_ib
            if last == B - 1 and in_row:
                conv_tile(P, B, cb, ci, plain, row_step, src, xb, tap_x, taps, steps,
                          ib * s_ib, s_ib, wf, w0, w_ib, w_ob, bias,
                          ob0 * cb, resf, has_res, yf, ob0 * y_ob, yos, y_ob, p_lo, clamp, lo,
                          hi, run, edges, ihs[0] + kh0 * dh, geom.H, iws[0] + kw0 * dw,
                          geom.W, tap_rc, buf)
            elif edges:
                raise ValueError("conv2d: an edge-masked tile off its row")
            elif last == B - 1:
                conv_tile(P, B, cb, ci, plain, 0, src, xb, tap_x, taps, steps, ib * s_ib,
                          s_ib, wf, w0, w_ib, w_ob, bias, ob0 * cb, resf,
                          has_res, yf, ob0 * y_ob, yos, y_ob, p_lo, clamp, lo, hi, 1, 0, 0, 0,
                          0, 0, tap_rc, buf)
            elif not plain:
                conv_tile(P, 1, cb, ci, plain, 0, src, xb, tap_x, taps, steps, ib * s_ib,
                          s_ib, wf, w0, w_ib, w_ob, bias, ob0 * cb, resf,
                          has_res, yf, ob0 * y_ob, yos, y_ob, p_lo, clamp, lo, hi, 1, 0, 0, 0,
                          0, 0, tap_rc, buf)
            if post and not interior:
                for p in range(p_lo, P):
                    for b in range(last + 1):
                        activate_pixels(yf, yos[p] + (ob0 + b) * y_ob, 1, cb, cb, act, p0, p1)
            # past the run's tiles: this group's (groups outside), or, after
            # the tile's last group, every group's
            if groups_outside:
                at += run
            elif og == og1 - 1:
                at += 1 + (run - 1) * ngroups
            else:
                at += 1
            continue
        # partial tiles: the same steps in numba, accumulators on the stack
        # accumulators start from bias (+ residual)
        if edges:
            raise ValueError("conv2d: a partial edge-masked tile")
        for p in range(P):
            for b in range(B):
                bo = (ob0 + min(b, last)) * cb
                yo = yos[p] + (ob0 + min(b, last)) * y_ob
                for o in range(cb):
                    v = bias[np.uint64(bo + o)]
                    r = resf[np.uint64(yo + o)]     # resf is yf without a residual
                    if has_res:
                        v += r
                    acc[(p * B + b) * cb + o] = v

        # The partial-tile loop (the full tiles run register_tile.conv_tile):
        # per input lane, B weight vectors and P broadcasts.
        if not plain:
            # blocked input: one flat loop over (input block, tap), the order
            # of the packed weights; a single loop level keeps LLVM from
            # spilling the pixel pointers around inner loops (40 % on 1x1)
            ib = ib_begin[ob0]
            wib = ob0 * w_ob + (ib - min(ib, CB - window)) * w_ib
            xib = ib * s_ib
            t = 0
            for step in range((ib_end[ob0 + last] - ib) * taps):
                xd = xib + tap_x[np.uint64(2 * t)]
                wo = wib + tap_x[np.uint64(2 * t + 1)]
                for i in range(ci):
                    xi = xd + i              # blocked: lanes are adjacent
                    wi = wo + i * cb
                    for p in range(P):
                        xv = src[np.uint64(xb[p] + xi)]
                        for b in range(B):
                            wb = wi + min(b, last) * w_ob
                            for o in range(cb):
                                acc[(p * B + b) * cb + o] += xv * wf[np.uint64(wb + o)]
                t += 1
                if t == taps:
                    t = 0
                    xib += s_ib
                    wib += w_ib
        else:
            # plain input, few lanes (its C channels): the flat loop lets
            # LLVM keep the accumulators in memory; nest it (and compute the
            # offsets: loading them from tap_x does too)
            for kh in range(KH):
                for kw in range(KW):
                    toff = kh * s_kh + kw * s_kw
                    wo = ob0 * w_ob + (kh * KW + kw) * lanes * cb
                    for i in range(lanes):
                        xi = toff + i * s_lane
                        wi = wo + i * cb
                        for p in range(P):
                            xv = src[np.uint64(xb[p] + xi)]
                            for b in range(B):
                                wb = wi + min(b, last) * w_ob
                                for o in range(cb):
                                    acc[(p * B + b) * cb + o] += xv * wf[np.uint64(wb + o)]

        # the store: relu/clamp in registers, padding lanes zero
        if p_lo == 0 and nvalid == P and last == B - 1 and O >= (ob0 + B) * cb:
            # a whole tile of real lanes: stores without per-lane masks
            # (the masked form below stores lane by lane: 25 % slower on 1x1)
            for p in range(P):
                for b in range(B):
                    yo = yos[p] + (ob0 + b) * y_ob
                    for o in range(cb):
                        v = acc[(p * B + b) * cb + o]
                        if clamp:
                            v = min(max(v, lo), hi)
                        yf[np.uint64(yo + o)] = v
        else:
            for p in range(P):
                if p_lo <= p < nvalid:
                    for b in range(B):
                        if b <= last:
                            lim = O - (ob0 + b) * cb
                            yo = yos[p] + (ob0 + b) * y_ob
                            for o in range(cb):
                                v = acc[(p * B + b) * cb + o]
                                if clamp:
                                    v = min(max(v, lo), hi)
                                yf[np.uint64(yo + o)] = v if o < lim else _ZERO
        if post and not interior:
            for p in range(p_lo, nvalid):
                for b in range(last + 1):
                    live = min(cb, O - (ob0 + b) * cb)
                    activate_pixels(yf, yos[p] + (ob0 + b) * y_ob, 1, cb, live,
                                     act, p0, p1)
        at += 1
    if post and interior:
        # A region's pixels get their activation once all are stored, a
        # row's run of them (contiguous) per block: per pixel it was a span
        # of 8 floats, run one float at a time by a 16-wide loop (a first
        # layer, 3 -> 32 channels 3x3/2 at 224 x 224, 1 thread: 323 us
        # without SiLU, 1096 us with). Only this call's own pixels: a tile
        # moved back stored only its own.
        width = c1 - c0
        k = k_start
        while k < k_end:
            row = k // width
            end = min(k_end, (row + 1) * width)
            yo = ((n * OB * OH + r0 + row) * OW + c0 + k - row * width) * cb
            for ob in range(og0 * B, min(og1 * B, OB)):
                activate_pixels(yf, yo + ob * y_ob, end - k, cb, min(cb, O - ob * cb), act,
                                p0, p1)
            k = end


@jit(standalone=True)
def _run_chunk(xf, wf, bias, resf, yf, geom, regions, chunks, c, ib_begin, ib_end, n, og0,
               og1, group_fits_l1, epilogue, cb, ci, P, B, plain, row_step, edges):
    """Chunk ``c`` (a row of ``chunks``: a region's or the border's pixels) of
    image ``n`` for output-block groups ``og0 .. og1-1``: :func:`_conv_tiles`."""
    literally(cb)
    literally(ci)
    literally(P)
    literally(B)
    literally(plain)
    literally(row_step)
    literally(edges)
    KH, KW = geom.KH, geom.KW
    r = chunks[c, 0]
    interior = r >= 0
    region = (geom.r0, geom.r1, geom.c0, geom.c1, 0, KH, 0, KW)     # border pixels
    if interior:
        region = (regions[r, 0], regions[r, 1], regions[r, 2], regions[r, 3],
                  regions[r, 4], regions[r, 5], regions[r, 6], regions[r, 7])
    # (edges: zeros as long as a tile's input row, for the taps in the
    # padding, in an array of the caller's: zeros LLVM could see became
    # selects of the loaded values lane by lane instead of a pointer per tap,
    # 1.3-1.7x slower)
    zeros = (P - 1) * row_step + cb if edges else 0
    lanes = _input_lanes(wf, geom.OB, KH, KW, cb, ci, plain)
    buf = np.empty(zeros if interior else geom.CB * KH * KW * P * lanes, np.float32)
    for i in range(zeros):
        buf[i] = _ZERO
    # border tiles fill a patch per tile: keep them tile-major
    _conv_tiles(xf, wf, bias, resf, yf, buf, geom, region, ib_begin, ib_end, n, og0, og1,
                chunks[c, 1], chunks[c, 2], interior, interior and group_fits_l1, epilogue,
                cb, ci, P, B, plain, row_step, edges)


def _make_conv_driver(cb: int, ci: int, plain: bool, P: int, B: int, row_step: int = 0,
                      edges: int = 0):
    """The parallel driver for block ``cb`` reading ``ci`` lanes per input
    block (cb; a ``plain`` input's C channels ``ci`` at a step:
    :func:`plain_step_lanes`), tiles of P pixels x B blocks,
    ``row_step`` and ``edges`` as in :func:`_conv_tiles`. All are
    compile-time constants captured in the closure, so the numba cache keeps
    one entry per (cb, ci, plain, P, B, row_step, edges)."""

    def conv_driver(xf, wf, bias, resf, yf, geometry, ib_begin, ib_end, regions, chunks,
                    passes, og_inner, group_fits_l1, has_res, clamp, lo, hi, post, act, p0,
                    p1):
        geom = ConvGeometry(*geometry)
        N, OB = geom.N, geom.OB
        OG = (OB + B - 1) // B
        # og_inner (all weights fit in L2): a task takes a chunk of pixels for
        # every output-block group, tile by tile, so the tile's input stays in
        # L1 across the groups; otherwise a task takes one group's chunk and
        # consecutive tasks share that group's weights.
        per_task = OG if og_inner else 1
        if passes.shape[0] == 1:         # one pass: every chunk of every group
            tasks_per_image = (OG // per_task) * chunks.shape[0]
            for task in prange(N * tasks_per_image):
                n = task // tasks_per_image
                c = task % chunks.shape[0]
                og0 = ((task // chunks.shape[0]) % (OG // per_task)) * per_task
                _run_chunk(xf, wf, bias, resf, yf, geom, regions, chunks, c, ib_begin, ib_end,
                           n, og0, og0 + per_task, group_fits_l1,
                           Epilogue(has_res, clamp, lo, hi, post, act, p0, p1), cb, ci, P, B,
                           plain, row_step, edges)
        else:
            # tap by tap: a group's passes one after the other in its task (the
            # groups write apart: no barrier between the passes)
            zeros = np.zeros(bias.shape[0], np.float32)
            for task in prange(N * OG):
                n = task // OG
                og0 = task % OG
                for ps in range(passes.shape[0]):
                    mode = passes[ps, 2]
                    starts = mode == PASS_INIT
                    ends = mode == PASS_LAST
                    epilogue = Epilogue(has_res or not starts, clamp and ends, lo, hi,
                                        post and ends, act, p0, p1)
                    for c in range(passes[ps, 0], passes[ps, 1]):
                        # later passes add to the sums so far (an in-place residual)
                        _run_chunk(xf, wf, bias if starts else zeros, resf if starts else yf, yf,
                                   geom, regions, chunks, c, ib_begin, ib_end, n, og0, og0 + 1,
                                   group_fits_l1, epilogue, cb, ci, P, B, plain, row_step,
                                   edges)

    conv_driver.__qualname__ = (f"conv_driver_cb{cb}_ci{ci}{'_plain' if plain else ''}"
                                + ("" if (P, B) == direct_tile_shape(cb, plain) else
                                   f"_{P}x{B}") + (f"_row{row_step}" if row_step else "")
                                + (f"_edges{edges}" if edges else ""))
    return parallel_kernel(conv_driver)


_conv_drivers: dict = {}


def plain_step_lanes(C: int) -> int:
    """The lanes a plain input's register-tile step reads (the driver's
    ``ci``): 3 for RGB images (and any C that 3 divides), unrolled; 1 for the
    rest, one channel a step. A lane a step is as many FMAs per step (B x P)
    as a vector's worth, and one compile serves every C instead of one per C
    (the suite's C = 1 ... 9 and 17 compiled eight drivers a tile shape, 7-33
    s each, cold)."""
    return 3 if C % 3 == 0 else 1


def conv_driver(cb: int, ci: int, plain: bool = False, P: int | None = None,
                B: int | None = None, row_step: int = 0, edges: int = 0):
    """The compiled direct driver for block ``cb`` and ``ci`` lanes per input
    block, of a blocked or ``plain`` input, tiles of P x B (default:
    :func:`.geometry.direct_tile_shape`'s; made once), ``row_step`` and
    ``edges`` as in :func:`_conv_tiles`. It also runs the 1x1 convolutions that
    :mod:`.conv1x1` does not (padding, groups)."""
    if P is None or B is None:
        P, B = direct_tile_shape(cb, plain)
    key = (cb, ci, plain, P, B, row_step, edges)
    driver = _conv_drivers.get(key)
    if driver is None:
        driver = _conv_drivers.setdefault(
            key, made_by(conv_driver, key,
                         _make_conv_driver(cb, ci, plain, P, B, row_step, edges)))
    return driver
