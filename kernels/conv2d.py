"""2-D convolution on blocked ``nChw{cb}c`` tensors, with a fused epilogue.

Computes ``y = act(conv(x, w) + bias + residual)`` with WebNN semantics
(padding ``[top, bottom, left, right]``, strides, dilations, groups; output
size ``floor((in - ((k - 1) * d + 1) + pad_begin + pad_end) / s) + 1``).

Buffers (float32, C-contiguous; ``cb`` is the channel block: 1, 4, 8, 16 or
32, and ``ic_bn = oc_bn = cb``; ``C_phys = ceil(C / cb) * cb``, same for O):

* input, blocked:    ``x: (N, C_phys // cb, H, W, cb)``; padding lanes zero
* input, plain (first-layer path only): ``x: (N, C, H, W)``
* output:            ``y: (N, O_phys // cb, OH, OW, cb)``; every element is
  written (so ``y`` may come from ``np.empty``) and its padding lanes are zero
  whatever the activation does to 0
* bias:              ``bias: (O_phys,)``, padding lanes zero
* residual:          ``residual: (N, O_phys // cb, OH, OW, cb)`` like ``y``;
  it may be ``y`` itself (accumulate in place), never a partial overlap
* packed filters, one layout per path (:func:`pack_conv2d_filter` picks):

  ============ ===================================================== =========
  path         packed filter                                         when
  ============ ===================================================== =========
  direct       ``(O_phys//cb, C_phys//cb, KH, KW, cb, cb)``           default
               (``OIhw{cb}i{cb}o``, ``layout.pack_filter``; groups
               packed block-diagonal)
  1x1          same as direct with ``KH = KW = 1``                    1x1
  depthwise    ``(O_phys//cb, KH, KW, cb)``: ``[ob, kh, kw, o]`` is   groups==C>1
               the weight of output channel ``ob*cb + o``
  first_layer  ``(O_phys//cb, 1, KH, KW, C, cb)`` (``OIhw{C}i{cb}o``,  plain
               one input "block" holding all C channels)              input
  ============ ===================================================== =========

Paths: direct (any kernel, strides, dilations, padding, groups), 1x1 (the
same kernel: with one tap it is a GEMM over pixels), first_layer (plain nchw
input read in place: C lanes of stride H*W instead of a blocked input) and
depthwise (its own kernel, vectorized over the channel block). A direct 3x3
filter with stride 1 may instead run Winograd F(4x4, 3x3) (``kernels/winograd.py``,
its filter transformed from the direct packing at the first launch): the
``algorithm`` argument and :func:`conv2d_algorithm` decide.

How it is fast (see the design notes on Numba kernels):

* **Register tile.** A tile computes ``P`` output pixels for ``B`` output
  blocks: ``P x B x cb`` accumulators, 6 x 2 x 8 = 12 ymm registers for
  cb 8 on AVX2, plus 2 weight vectors and 1 broadcast = 15 of 16
  (:func:`conv_tile_shape`). A whole tile (all P pixels, whole output blocks)
  runs one of the intrinsics in ``register_tile.py`` (``conv_tile``,
  ``fma_tile`` for 1x1, ``depthwise_tile``), written in LLVM IR so the
  accumulators stay in registers from the bias load to the store. The same
  steps written in numba, with the accumulators in a fixed-size stack array,
  are the fallback for partial tiles (and a plain input's tile of one output
  block, which LLVM schedules into spills): there LLVM keeps the
  array in memory and every tile stores and reloads it twice (~110 cycles, a
  third of a 1x1 conv over 32 input channels). ``cb`` (and the lanes per
  input block ``ci``) are compile-time constants: one driver per block size,
  built by a factory, whose helpers ask for literals with ``numba.literally``.
* **Moved-back last tile.** When a run of pixels (direct: the interior
  region; depthwise: a row's interior columns) does not end on a whole tile,
  its last tile starts ``P`` pixels before the end instead: it recomputes some
  pixels and stores only its own (storing them again would add an in-place
  residual twice), so it runs as a whole tile. The 1x1 path runs a register
  tile of just the leftover pixels instead (its tiles are cheap to vary: at
  7 x 7 the moved-back tile recomputed 5 of 54 pixels).
* **No wraparound checks.** Flat 1-D buffers are indexed with
  ``np.uint64(offset)``: numba adds ``if i < 0: i += n`` to every signed index
  it cannot prove non-negative, which breaks vectorization.
* **Borders without a padded copy.** Interior output pixels (every tap inside
  the input) are numbered row-major over their rectangle and tiled P at a
  time across row ends; they read the input in place. Border pixels (rows and
  columns where a tap falls in the padding) go through the same loop on a
  small zero-padded copy of just their taps; when border pixels are 10 % of
  the output or more (small images) the wrapper pads the whole input once
  instead and every pixel is interior. Depthwise tiles run along rows; its
  border columns are done one pixel at a time with clipped taps, unless the
  interior of a row is narrower than a tile (then the input is padded).
* **Epilogue in registers.** Accumulators start from bias (+ residual);
  relu/clamp (a min/max) is applied before the single store, which writes
  padding lanes as zero. Other activations (leaky_relu, sigmoid, tanh,
  hard_swish, gelu) run right after the store, on the tile still in L1, on
  the real lanes only.
* **Few calls.** A numba call with array arguments updates reference counts
  atomically (cache-line traffic between threads), so one call runs many tiles.
* **Parallel** over (batch x output-block groups x chunks of about one output
  row of pixels). When all weights fit in L2 a task runs every group for its
  pixels, so a tile's input stays in L1 across groups. Grouped convolutions
  read only the input blocks of their groups
  (``layout.group_input_block_ranges``; a tile's B blocks read the union).
  The 1x1 driver's threads take their tasks from a shared counter; the
  direct and depthwise drivers use numba's static shares of a ``prange``.
  On one thread each driver runs its serial compile (``_config.parallel_kernel``:
  no OpenMP region; 1-2 % faster, and 3-4x quicker to compile).
* **Aligned weights.** Packed filters start on a 64-byte boundary
  (:func:`aligned_empty`); callers should allocate x and y the same way.
* **What runs is the driver's copy.** A driver's object code embeds the
  helpers it calls, optimized a second time with it, and that copy is what
  runs when the driver comes from the cache. A second pass unrolled the lane
  loop by 2 and spilled the pixel pointers (25 % slower) while the lane stride
  was a runtime value; with the literal 1 it does not. The tests check the
  drivers' assembly for this.
"""

from __future__ import annotations

import ctypes
import math
import threading
from dataclasses import dataclass, field

import numba
import numpy as np
from numba import literally, prange

from ._config import AVX512_TUNED, jit, parallel_kernel
from .epilogue import CLAMP, GELU, NONE, RELU, activate_pixels
from .layout import group_input_block_ranges, pack_filter
from .register_tile import conv_tile, depthwise_tile, fma_tile
from . import winograd
from .stack import atomic_add, prefetch, stack_empty

BLOCK_SIZES = (1, 4, 8, 16, 32)
PATHS = ("direct", "1x1", "depthwise", "first_layer")
#: ``algorithm`` choices: Winograd F(4x4, 3x3) where it applies and pays
#: (:func:`conv2d_algorithm`), never, or wherever it applies
ALGORITHMS = ("auto", "direct", "winograd")

_ZERO = np.float32(0.0)
#: stack-array size: the largest tile (P * B * cb) over every block size
#: (12 x 2 x 16 with 512-bit registers)
_TILE_ELEMENTS = 384
#: the depthwise tile's budget (its pixels: :func:`depthwise_tile_pixels`)
_DEPTHWISE_TILE_ELEMENTS = 96
_MAX_LANES = 32
_MAX_TILE_PIXELS = 16


# --- tile shapes -----------------------------------------------------------

def conv_tile_shape(cb: int) -> tuple[int, int]:
    """``(P, B)``: output pixels x output-channel blocks of the direct tile.

    ``P * B * cb / 8`` ymm accumulators must leave room for B weight vectors
    and one broadcast in 16 registers: cb 8 -> 6 x 2 (12 + 2 + 1), cb 16 ->
    6 x 1 (12 + 2 + 1), cb 32 -> 3 x 1 (12 + 4 + 1); cb 4 uses 12 xmm. With
    512-bit registers (:data:`._config.AVX512_TUNED`), cb 16 -> 12 x 2 in
    the 32 zmm (24 + 2 + 1), as :func:`conv1x1_tile_shape`.
    """
    if cb >= 32:
        return 3, 1
    if cb >= 16:
        return (12, 2) if cb == 16 and AVX512_TUNED else (6, 1)
    return 6, 2


def direct_tile_shape(cb: int, plain: bool) -> tuple[int, int]:
    """``(P, B)`` of the direct driver: :func:`conv_tile_shape`, but 6 x 1
    for a plain input (the first layer) on 16-channel blocks. Its tile has
    few steps (a 3x3 or 7x7 window over 3 channels), and with 12 x 2 on
    512-bit registers ResNet-50's 7x7/2 first conv ran at 0.28-0.33x
    PyTorch against 0.41-0.43x (1 thread, /tmp/s32/direct.py). The other
    direct convs gained from 12 x 2: the stride-2 3x3 convs of ResNet-50
    0.44-0.65x -> 0.63-0.82x PyTorch, 3x3 on 512 channels at 7 x 7
    0.52-0.55x -> 0.63-0.80x."""
    if plain and cb == 16:
        return 6, 1
    return conv_tile_shape(cb)


def depthwise_tile_pixels(cb: int) -> int:
    """Output pixels per depthwise tile, along one row: 7 for cb <= 8.

    Depthwise work is load-bound (one input load per FMA), so longer tiles
    gain little, while the widths of real networks (224 / 2**k: 112, 56, 28,
    14, 7) are multiples of 7: tiles of 12 wasted up to 40 % of a 14-wide
    row and could not tile a 7-wide one at all."""
    return max(1, min(7, _DEPTHWISE_TILE_ELEMENTS // cb))


@jit()
def _clip_range(start, step, count, size):
    """``[first, end)`` of ``k`` in ``range(count)`` with ``0 <= start + k*step < size``
    (``step > 0``): the kernel taps that land inside the input."""
    first = 0
    if start < 0:
        first = (-start + step - 1) // step
    last = size - 1 - start
    end = last // step + 1 if last >= 0 else 0
    end = min(end, count)
    if end < first:
        end = first
    return first, end


# --- direct / 1x1 / first-layer ---------------------------------------------
#
# ``geom`` (a tuple of ints) describes the convolution for these kernels:
#   N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
#   x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1
# Input addressing is by element strides so one loop reads both input kinds:
# blocked input has CB blocks of ci = cb lanes (x_lane 1, x_px cb); plain nchw
# input (first layer) is one "block" of ci = C lanes (x_lane H*W, x_px 1).
#
# Output pixels are split in two regions. Interior pixels (rows [r0, r1),
# columns [c0, c1)) see every kernel tap inside the input; they are numbered
# row-major over that rectangle, and a tile takes P consecutive ones (it may
# wrap to the next row, so no work is lost on row ends) and reads the input
# directly. Border pixels (the rest: rows above and below, then columns left
# and right) go through the same loop on a zero-padded copy of their taps.
#
# That per-tile copy holds every input block's taps (for 512 channels and
# 3x3, 110 KiB per tile: more than L1), so when borders are a large share of
# the output (small images: 26 % of 14x14, 49 % of 7x7) the wrapper instead
# pads the whole input once (:func:`pad_blocked`, a few hundred KiB) and every
# pixel becomes interior: 3x3 on 256 channels at 14x14 went from 67 to 84
# GFLOP/s, 512 channels at 7x7 from 55 to 75.


@parallel_kernel
def pad_blocked(xf, xpf, N, CB, H, W, cb, pt, pl, Hp, Wp):
    """``xp[n, ib, pt + h, pl + w, :] = x[n, ib, h, w, :]``, zero elsewhere.

    ``x: (N, CB, H, W, cb)`` and ``xp: (N, CB, Hp, Wp, cb)``, both flat."""
    row_in = W * cb
    row_out = Wp * cb
    left = pl * cb
    right = row_out - left - row_in
    for task in prange(N * CB * Hp):
        plane = task // Hp
        h = task % Hp - pt
        d = task * row_out
        if h < 0 or h >= H:
            for i in range(row_out):
                xpf[np.uint64(d + i)] = _ZERO
        else:
            s = (plane * H + h) * row_in
            for i in range(left):
                xpf[np.uint64(d + i)] = _ZERO
            d += left
            for i in range(row_in):
                xpf[np.uint64(d + i)] = xf[np.uint64(s + i)]
            d += row_in
            for i in range(right):
                xpf[np.uint64(d + i)] = _ZERO


@jit()
def _border_pixel(j, OH, OW, r0, r1, c0, c1):
    """(oh, ow) of border pixel number ``j``: rows [0, r0), rows [r1, OH),
    then columns [0, c0) and [c1, OW) of rows [r0, r1)."""
    top = r0 * OW
    if j < top:
        return j // OW, j % OW
    j -= top
    bottom = (OH - r1) * OW
    if j < bottom:
        return r1 + j // OW, j % OW
    j -= bottom
    left = (r1 - r0) * c0
    if j < left:
        return r0 + j // c0, j % c0
    j -= left
    right = OW - c1
    return r0 + j // right, c1 + j % right


@jit()
def _fill_patch(buf, xf, geom, n, ib0, ib1, ihs, iws, ci, P):
    """Copy what a border tile reads from input blocks ``ib0 .. ib1-1`` into
    ``buf``: ``buf[((((ib - ib0) * KH + kh) * KW + kw) * P + p) * ci + i]`` is
    lane ``i`` of tap ``(kh, kw)`` of pixel ``p`` (input row ``ihs[p] + kh*dh``,
    column ``iws[p] + kw*dw``), zero where the tap falls in the padding."""
    literally(ci)
    literally(P)
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
     x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1) = geom
    for ib in range(ib0, ib1):
        xbase = n * x_n + ib * x_ib
        for kh in range(KH):
            for p in range(P):
                ih = ihs[p] + kh * dh
                row_ok = ih >= 0 and ih < H
                for kw in range(KW):
                    iw = iws[p] + kw * dw
                    d = ((((ib - ib0) * KH + kh) * KW + kw) * P + p) * ci
                    if row_ok and iw >= 0 and iw < W:
                        s = xbase + ih * x_row + iw * x_px
                        if x_lane == 1:              # blocked: one vector move
                            for i in range(ci):
                                buf[np.uint64(d + i)] = xf[np.uint64(s + i)]
                        else:
                            for i in range(ci):
                                buf[np.uint64(d + i)] = xf[np.uint64(s + i * x_lane)]
                    else:
                        for i in range(ci):
                            buf[np.uint64(d + i)] = _ZERO


@jit()
def _conv_tiles(xf, wf, bias, resf, yf, buf, geom, ib_begin, ib_end, n, og0, og1,
                k_start, k_end, interior, groups_outside, has_res, clamp, lo, hi, post, act,
                p0, p1, cb, ci, P, B, plain):
    """Output pixels ``k_start .. k_end-1`` of the interior (``interior``) or
    border region, for output-block groups ``og0 .. og1-1`` (group ``og`` is
    blocks ``og*B .. og*B+B-1``), tile by tile: P pixels x B blocks.

    ``plain``: the input is plain nchw, its ``ci`` channels a plane apart
    (blocked: ``ci = cb`` adjacent lanes), so each (tap, channel) pair gets
    its own input offset.

    ``groups_outside``: every tile of one group, then the next group (the
    group's weights stay in L1 when they fit); otherwise every group of one
    tile, then the next tile (the tile's input stays in L1).

    One call runs many tiles: every call of a numba function with array
    arguments costs atomic reference-count updates, shared between threads.
    """
    literally(cb)
    literally(ci)
    literally(P)
    literally(B)
    literally(plain)
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
     x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1) = geom
    # per pixel of a tile: output offset (block 0), kernel window origin, and
    # the input offset it reads from (xb, kept in registers)
    yos = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    ihs = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    iws = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    xb = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    acc = numba.carray(stack_empty(_TILE_ELEMENTS, np.float32), _TILE_ELEMENTS)

    y_ob = OH * OW * cb                  # between output blocks
    # packed weight strides: (OB, CB, KH, KW, ci, cb)
    w_ib = KH * KW * ci * cb
    w_ob = CB * w_ib
    # input blocks any group of this call reads (ranges grow with ob)
    u0 = ib_begin[og0 * B]
    u1 = ib_end[min(og1 * B, OB) - 1]
    if interior:
        src = xf
        s_ib, s_kh, s_kw, s_lane = x_ib, dh * x_row, dw * x_px, x_lane
    else:
        src = buf                        # patch of blocks u0 .. u1-1
        s_ib, s_kh, s_kw, s_lane = KH * KW * P * ci, KW * P * ci, P * ci, 1
    # input offset of each tap (kh, kw) of an input block; of a plain input,
    # of each of its channels i: entry (kh * KW + kw) * ci + i
    taps = KH * KW
    entries = ci if plain else 1
    tap_x = np.empty(taps * entries, np.int64)
    for kh in range(KH):
        for kw in range(KW):
            for i in range(entries):
                tap_x[(kh * KW + kw) * entries + i] = kh * s_kh + kw * s_kw + i * s_lane

    ntiles = (k_end - k_start + P - 1) // P
    ngroups = og1 - og0
    current = -1
    nvalid = 0
    p_lo = 0
    for step in range(ntiles * ngroups):
        if groups_outside:
            tile = step % ntiles
            og = og0 + step // ntiles
        else:
            tile = step // ngroups
            og = og0 + step % ngroups
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
                    xb[p] = n * x_n + ihs[p] * x_row + iws[p] * x_px
            else:
                _fill_patch(buf, xf, geom, n, u0, u1, ihs, iws, ci, P)
                for p in range(P):
                    xb[p] = p * ci - u0 * s_ib

        ob0 = og * B
        last = min(B, OB - ob0) - 1  # blocks past the last one re-read it
        if nvalid == P and O >= (ob0 + last + 1) * cb and (
                last == B - 1 or (last == 0 and not plain)):
            # the common case: whole output blocks (B, or a group of one at
            # the end), accumulators in registers throughout (a plain input's
            # tile of one block: LLVM loads all its 3 x 6 broadcasts first
            # and spills them; it runs below)
            ib = ib_begin[ob0]
            steps = (ib_end[ob0 + last] - ib) * taps
            if last == B - 1:
                conv_tile(P, B, cb, ci, plain, src, xb, tap_x, taps, steps, ib * s_ib,
                          s_ib, wf, ob0 * w_ob + ib * w_ib, w_ob, bias, ob0 * cb, resf,
                          has_res, yf, ob0 * y_ob, yos, y_ob, p_lo, clamp, lo, hi)
            elif not plain:
                conv_tile(P, 1, cb, ci, plain, src, xb, tap_x, taps, steps, ib * s_ib,
                          s_ib, wf, ob0 * w_ob + ib * w_ib, w_ob, bias, ob0 * cb, resf,
                          has_res, yf, ob0 * y_ob, yos, y_ob, p_lo, clamp, lo, hi)
            if post:
                for p in range(p_lo, P):
                    for b in range(last + 1):
                        activate_pixels(yf, yos[p] + (ob0 + b) * y_ob, 1, cb, cb, act, p0, p1)
            continue
        # partial tiles: the same steps in numba, accumulators on the stack
        # accumulators start from bias (+ residual)
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

        # The hot loop: per input lane, B weight vectors and P broadcasts.
        if not plain:
            # blocked input: one flat loop over (input block, tap), the order
            # of the packed weights; a single loop level keeps LLVM from
            # spilling the pixel pointers around inner loops (40 % on 1x1)
            ib = ib_begin[ob0]
            wo = ob0 * w_ob + ib * w_ib
            xib = ib * s_ib
            t = 0
            for step in range((ib_end[ob0 + last] - ib) * taps):
                xd = xib + tap_x[np.uint64(t)]
                for i in range(ci):
                    xi = xd + i              # blocked: lanes are adjacent
                    wi = wo + i * cb
                    for p in range(P):
                        xv = src[np.uint64(xb[p] + xi)]
                        for b in range(B):
                            wb = wi + min(b, last) * w_ob
                            for o in range(cb):
                                acc[(p * B + b) * cb + o] += xv * wf[np.uint64(wb + o)]
                wo += ci * cb
                t += 1
                if t == taps:
                    t = 0
                    xib += s_ib
        else:
            # plain input, few lanes (ci = C): the flat loop lets LLVM keep
            # the fully unrolled lane loop's accumulators in memory; nest it
            # (and compute the offsets: loading them from tap_x does too)
            for kh in range(KH):
                for kw in range(KW):
                    toff = kh * s_kh + kw * s_kw
                    wo = ob0 * w_ob + (kh * KW + kw) * ci * cb
                    for i in range(ci):
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
        if post:
            for p in range(p_lo, nvalid):
                for b in range(last + 1):
                    lanes = min(cb, O - (ob0 + b) * cb)
                    activate_pixels(yf, yos[p] + (ob0 + b) * y_ob, 1, cb, lanes,
                                     act, p0, p1)


def _make_conv_driver(cb: int, ci: int, plain: bool):
    """The parallel driver for block ``cb`` reading ``ci`` lanes per input
    block (cb, or C for a ``plain`` input). cb, ci, P, B and plain are
    compile-time constants captured in the closure, so the numba cache keeps
    one entry per (cb, ci, plain)."""
    P, B = direct_tile_shape(cb, plain)

    def conv_driver(xf, wf, bias, resf, yf, geom, ib_begin, ib_end, chunk, og_inner,
                    group_fits_l1, has_res, clamp, lo, hi, post, act, p0, p1):
        (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
         x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1) = geom
        OG = (OB + B - 1) // B
        inner = (r1 - r0) * (c1 - c0)
        border = OH * OW - inner
        inner_chunks = (inner + chunk - 1) // chunk
        nchunks = inner_chunks + (border + chunk - 1) // chunk
        # og_inner (all weights fit in L2): a task takes a chunk of pixels for
        # every output-block group, tile by tile, so the tile's input stays in
        # L1 across the groups; otherwise a task takes one group's chunk and
        # consecutive tasks share that group's weights.
        per_task = OG if og_inner else 1
        tasks_per_image = (OG // per_task) * nchunks
        for task in prange(N * tasks_per_image):
            n = task // tasks_per_image
            c = task % nchunks
            og0 = ((task // nchunks) % (OG // per_task)) * per_task
            interior = c < inner_chunks
            if interior:
                start = c * chunk
                end = min(inner, start + chunk)
            else:
                start = (c - inner_chunks) * chunk
                end = min(border, start + chunk)
            buf = np.empty(0 if interior else CB * KH * KW * P * ci, np.float32)
            # border tiles fill a patch per tile: keep them tile-major
            _conv_tiles(xf, wf, bias, resf, yf, buf, geom, ib_begin, ib_end, n, og0,
                        og0 + per_task, start, end, interior, interior and group_fits_l1,
                        has_res, clamp, lo, hi, post, act, p0, p1, cb, ci, P, B, plain)

    conv_driver.__qualname__ = f"conv_driver_cb{cb}_ci{ci}{'_plain' if plain else ''}"
    return parallel_kernel(conv_driver)


# --- 1x1 without padding: a GEMM over pixels ----------------------------------
#
# A 1x1 convolution without padding and groups is a GEMM: (pixels x C) times
# (C x O). Pixel k of an output image (row-major, k = oh * OW + ow) is at
# ``y[n, ob, k, :]``; with stride 1 it reads input pixel k, so a tile of P
# consecutive pixels reads P adjacent input pixels at constant offsets from
# one base register (no per-pixel pointers, and tiles cross row ends). Strided
# inputs are first copied, per task and K-block, into a contiguous buffer
# (oneDNN's "reduce to unit stride"), then read the same way.
#
# Blocking as in a GEMM: a task owns a chunk of pixels (its input K-block
# stays in L2) and runs, per K-block of ``kcb`` input blocks, every
# output-block group over every tile of the chunk: the group's weights for the
# K-block (kcb x cb x B*cb, at most 16 KiB) stay in L1 while the chunk's
# pixels stream past. Partial sums go to the output between K-blocks; the
# first K-block starts from bias (+ residual), the last one applies the
# epilogue.


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


@jit()
def _conv1x1_tiles(xf, wf, bias, resf, yf, buf, geom, n, og0, og1, k_start, k_end,
                   kb0, kb1, copy_input, has_res, clamp, lo, hi, post, act, p0, p1, cb, P, B):
    """Pixels ``k_start .. k_end-1`` of image ``n``, output-block groups
    ``og0 .. og1-1``, input blocks ``kb0 .. kb1-1`` (one K-block; the first
    when ``kb0 == 0``, the last when ``kb1 == CB``).

    ``copy_input`` (strided input, or a chunk shorter than a tile): the
    chunk's input pixels are first copied into ``buf`` (``(kb1-kb0) x chunk``
    pixels, zeros past ``k_end``) and the tiles read ``buf``. Otherwise they
    read ``x`` in place, and a partial last tile is a register tile of just
    its pixels (:func:`_fma_short_tile`); with a partial output block it is
    moved back to end at ``k_end`` (it recomputes pixels of the tile before it
    but stores only its own). Neither reads past the chunk. The source array
    is chosen once per call: an array variable assigned per tile costs
    reference-count calls per tile (atomic, shared between threads), 10 % of
    a short-K 1x1 conv."""
    literally(cb)
    literally(P)
    literally(B)
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
     x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1) = geom
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
        # register tiles need whole output blocks: B of them, or a group of
        # one at the end (O = 24 at cb 8 is a group of 2 and one of 1)
        whole_blocks = last == B - 1 and O >= (ob0 + B) * cb
        single_block = last == 0 and O >= (ob0 + 1) * cb
        for tile in range(ntiles):
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
                    for b in range(last + 1):
                        activate_pixels(yf, yo + b * y_ob, p_hi, cb, cb, act, p0, p1)
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
                for b in range(last + 1):
                    lanes = min(cb, O - (ob0 + b) * cb)
                    activate_pixels(yf, ybase + (p_lo * cb) + (ob0 + b) * y_ob, p_hi - p_lo,
                                     cb, lanes, act, p0, p1)


def _make_conv1x1_driver(cb: int, P: int, B: int):
    """The parallel 1x1 driver for block ``cb`` and tiles of P pixels x B
    output blocks (no padding, no groups). ``threads`` workers take the tasks
    from a shared counter (dynamic scheduling, like the GEMM driver): with
    numba's static shares, a thread whose core is busy with something else
    holds up every launch (MobileNetV2, batch 1, 2 threads: the same median,
    the slowest tenth of runs 6.5 -> 6.1 ms and 7.6 -> 6.5 ms)."""

    def conv1x1_driver(xf, wf, bias, resf, yf, geom, chunk, kcb, gsets, threads, has_res,
                       clamp, lo, hi, post, act, p0, p1):
        (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
         x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1) = geom
        OG = (OB + B - 1) // B
        nchunks = (OH * OW + chunk - 1) // chunk
        per_set = (OG + gsets - 1) // gsets
        strided = sh != 1 or sw != 1
        tasks = N * nchunks * gsets
        next_task = np.zeros(1, np.int64)
        for worker in prange(max(1, min(threads, tasks))):
            while True:
                # a task: one chunk of pixels of one image, for one set of
                # output-block groups, every K-block
                task = atomic_add(next_task, 0, 1)
                if task >= tasks:
                    break
                n = task // (nchunks * gsets)
                c = (task // gsets) % nchunks
                og0 = (task % gsets) * per_set
                og1 = min(OG, og0 + per_set)
                k_start = c * chunk
                k_end = min(OH * OW, k_start + chunk)
                copy_input = strided or k_end - k_start < P
                buf = np.empty(kcb * chunk * cb if copy_input else 0, np.float32)
                for kb0 in range(0, CB, kcb):
                    _conv1x1_tiles(xf, wf, bias, resf, yf, buf, geom, n, og0, og1,
                                   k_start, k_end, kb0, min(CB, kb0 + kcb), copy_input,
                                   has_res, clamp, lo, hi, post, act, p0, p1, cb, P, B)

    conv1x1_driver.__qualname__ = f"conv1x1_driver_cb{cb}_{P}x{B}"
    return parallel_kernel(conv1x1_driver)


# --- depthwise -------------------------------------------------------------
#
# geom: N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O, C, m
# Tiles run along one output row, so the P pixels of a tile have affine input
# addresses (one base register serves them all).


@jit()
def _dw_fill_patch(buf, xf, geom, lane_off, n, ob, ih0, kh0, kh1, iw0, span, cb):
    """Gather input rows ``ih0 + kh*dh`` (kh in [kh0, kh1)), columns
    ``iw0 .. iw0+span-1`` into ``buf[(kh * span + s) * cb + o]``, zero outside
    the input: lane ``o`` is the input channel at offset ``lane_off[o]`` (the
    one output lane ``o`` of block ``ob`` reads, for a multiplier > 1)."""
    literally(cb)
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O, C, m) = geom
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


@jit()
def _dw_rows(xf, x_plane, wf, bias, resf, yf, buf, lane_off, geom, n, ob, oh_start, oh_end,
             owa, owb, has_res, clamp, lo, hi, post, act, p0, p1, cb, cb2, P):
    """Depthwise output rows ``oh_start .. oh_end-1`` of block ``ob``,
    vectorized over the block's lanes. With multiplier 1, input row ``ih`` of
    the block starts at ``xf[x_plane + ih * W * cb]`` (``xf`` may be the
    block's zero-padded rows on the task's stack).

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
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O, C, m) = geom
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
    for oh in range(oh_start, oh_end):
        kh0, kh1 = _clip_range(oh * sh - pt, dh, KH, H)
        ih0 = oh * sh - pt
        yrow = ((n * OB + ob) * OH + oh) * OW * cb
        xrow = x_plane + ih0 * W * cb

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
                if post:
                    activate_pixels(yf, yo, 1, cb, min(cb, lim), act, p0, p1)
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
                x0 = base + kh0 * s_kh
                w0 = (ob * KH + kh0) * KW * cb
                # one call per case, written out: the literal pixel step and
                # tap count select the tile's specialization at compile time
                if sw == 1 and dw == 1 and KW == 3:
                    # the common 3x3: each input column loaded once per row
                    depthwise_tile(P, cb, cb, src, x0, s_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 1:
                    depthwise_tile(P, cb, cb, src, x0, s_kh, s_kw, kh1 - kh0, KW, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 2 and dw == 1 and KW == 3:
                    # stride 2: each input column loaded once per row as well
                    depthwise_tile(P, cb, cb2, src, x0, s_kh, s_kw, kh1 - kh0, 3, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                elif sw == 2:
                    depthwise_tile(P, cb, cb2, src, x0, s_kh, s_kw, kh1 - kh0, KW, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                else:
                    depthwise_tile(P, cb, xps, src, x0, s_kh, s_kw, kh1 - kh0, KW, wf, w0,
                                   bias, bo, resf, has_res, yf, ypix, p_lo, clamp, lo, hi)
                if post:
                    activate_pixels(yf, ypix + p_lo * cb, P - p_lo, cb, cb, act, p0, p1)
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
            if post:
                activate_pixels(yf, ypix + p_lo * cb, nvalid - p_lo, cb, min(cb, lim), act,
                                 p0, p1)
            ow0 += P


def _make_depthwise_driver(cb: int):
    P = depthwise_tile_pixels(cb)
    cb2 = 2 * cb

    def depthwise_driver(xf, wf, bias, resf, yf, geom, has_res, pad_rows, clamp, lo, hi, post,
                         act, p0, p1):
        (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O, C, m) = geom
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
        padded_geom = (N, CB, (OH - 1) * sh + (KH - 1) * dh + 1, Wp, OB, OH, OW, KH, KW,
                       sh, sw, dh, dw, 0, 0, O, C, m)
        # multiplier 1 needs no patch buffer: no allocation per task (two
        # cost ~0.1 us each, 10-20 % of a 7 x 7 block's task)
        no_buf = np.empty(1, np.float32)
        no_lanes = np.empty(cb, np.int64)
        for task in prange(N * OB * row_chunks):
            rc = task % row_chunks
            ob = (task // row_chunks) % OB
            n = task // (OB * row_chunks)
            oh_start = rc * rows
            oh_end = min(OH, oh_start + rows)
            if pad_rows > 0:
                patch = numba.carray(stack_empty(_DW_PATCH_ELEMENTS, np.float32),
                                     _DW_PATCH_ELEMENTS)
                row0 = oh_start * sh
                rows_in = (oh_end - 1 - oh_start) * sh + (KH - 1) * dh + 1
                _dw_pad_rows(xf, (n * CB + ob) * H * W * cb, H, W, cb, pt, pl, row0, rows_in,
                             Wp, patch)
                _dw_rows(patch, -row0 * Wp * cb, wf, bias, resf, yf, no_buf, no_lanes,
                         padded_geom, n, ob, oh_start, oh_end, 0, OW, has_res, clamp, lo, hi,
                         post, act, p0, p1, cb, cb2, P)
            elif m == 1:
                _dw_rows(xf, (n * CB + ob) * H * W * cb, wf, bias, resf, yf, no_buf, no_lanes,
                         geom, n, ob, oh_start, oh_end, owa, owb, has_res, clamp, lo, hi,
                         post, act, p0, p1, cb, cb2, P)
            else:
                buf = np.empty(KH * span * cb, np.float32)
                lane_off = np.empty(cb, np.int64)
                for o in range(cb):
                    # input channel of output lane o (padding lanes: any readable one)
                    c = min((ob * cb + o) // m, C - 1)
                    lane_off[o] = (c // cb) * H * W * cb + c % cb
                _dw_rows(xf, 0, wf, bias, resf, yf, buf, lane_off, geom, n, ob, oh_start,
                         oh_end, owa, owb, has_res, clamp, lo, hi, post, act, p0, p1, cb, cb2, P)

    depthwise_driver.__qualname__ = f"depthwise_driver_cb{cb}"
    return parallel_kernel(depthwise_driver)


_conv_drivers: dict = {}
_depthwise_drivers: dict = {}
_conv1x1_drivers: dict = {}


def conv_driver(cb: int, ci: int, plain: bool = False):
    """The compiled direct/1x1/first-layer driver for block ``cb`` and ``ci``
    lanes per input block, of a blocked or ``plain`` input (made once)."""
    key = (cb, ci, plain)
    driver = _conv_drivers.get(key)
    if driver is None:
        driver = _conv_drivers.setdefault(key, _make_conv_driver(cb, ci, plain))
    return driver


def conv1x1_tile_shape(cb: int, out_blocks: int) -> tuple[int, int]:
    """``(P, B)`` of the 1x1 tile (and of Winograd's products) for
    ``out_blocks`` output blocks: the direct tile's, except

    * 4 x 3 for cb 8 when the blocks come in threes and not in pairs (O = 24:
      2 + 1 blocks ran the single block's tile at 7 loads per 6 FMAs, a third
      of the conv; 4 x 3 is 7 loads per 12 FMAs in all 16 ymm);
    * 12 x 2 for cb 16 on 512-bit registers (24 of the 32 zmm, 2 weight
      vectors and a broadcast). The direct tile's 6 x 1 keeps 6 sums, too few
      to cover the FMA latency on two ports: 1 thread, kernel alone (Xeon,
      Emerald Rapids, ``/tmp/s32/tile.py``, against PyTorch in the same
      rounds), ResNet-50's 1x1 convs 0.74-0.93x -> 0.91-1.25x PyTorch,
      Winograd on 64 channels at 56 x 56 2.33x -> 3.02-3.08x, on 256 at
      14 x 14 1.73-1.75x -> 1.81x (14 x 2 and 6 x 4 measured the same as
      12 x 2, within the host's noise)."""
    if cb == 8 and out_blocks % 2 == 1 and out_blocks % 3 == 0:
        return 4, 3
    return conv_tile_shape(cb)


def conv1x1_driver(cb: int, P: int | None = None, B: int | None = None):
    """The compiled 1x1 (GEMM) driver for block ``cb`` and tile ``P x B``
    (default: the direct tile's; made once)."""
    if P is None or B is None:
        P, B = conv_tile_shape(cb)
    key = (cb, P, B)
    driver = _conv1x1_drivers.get(key)
    if driver is None:
        driver = _conv1x1_drivers.setdefault(key, _make_conv1x1_driver(cb, P, B))
    return driver


def depthwise_driver(cb: int):
    """The compiled depthwise driver for block ``cb`` (made once)."""
    driver = _depthwise_drivers.get(cb)
    if driver is None:
        driver = _depthwise_drivers.setdefault(cb, _make_depthwise_driver(cb))
    return driver


# --- the Python API -------------------------------------------------------

@dataclass(frozen=True)
class PackedConv2dFilter:
    """A filter packed once for one block size, with what the kernels need.

    ``weights`` has the layout of ``path`` (see the module docstring);
    ``ib_begin``/``ib_end`` (direct, 1x1, first_layer) give each output block
    the input blocks ``[begin, end)`` it reads.
    """
    path: str
    block: int
    in_channels: int
    out_channels: int
    groups: int
    kernel: tuple[int, int]
    weights: np.ndarray
    ib_begin: np.ndarray
    ib_end: np.ndarray
    #: :func:`conv2d_forward`'s launch plans for this filter, by shapes and options
    launches: dict = field(default_factory=dict, compare=False, repr=False)
    #: the Winograd transform of the weights, made by the first launch that needs it
    transformed: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def out_blocks(self) -> int:
        return -(-self.out_channels // self.block)

    @property
    def multiplier(self) -> int:
        """Output channels per input channel (depthwise)."""
        return self.out_channels // self.in_channels


def _blocks(channels: int, block: int) -> int:
    return -(-channels // block)


def aligned_empty(shape, dtype=np.float32, alignment: int = 64) -> np.ndarray:
    """``np.empty`` whose data starts on an ``alignment``-byte boundary.

    Packed weights are read as whole vectors: at an address 16 mod 32 (what
    a large ``np.empty`` often returns) every other ymm load splits a cache
    line, which cost up to 20 % of the direct conv's speed here. The runtime
    allocates every tensor buffer here too, so it is kept cheap: 2 us for
    a 0.8 MB array against ``np.empty``'s 0.7 (``np.prod`` of the shape,
    ``.ctypes.data`` and a slice, view and reshape made it 17.6 us).
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    address = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    return np.ndarray(shape, dtype, raw, -address % alignment)


def conv2d_path(kernel, in_channels: int, groups: int, input_is_plain: bool = False) -> str:
    """The path (and packed layout) of a filter: see :func:`pack_conv2d_filter`."""
    if input_is_plain:
        return "first_layer"
    if groups == in_channels and groups > 1:
        return "depthwise"
    return "1x1" if tuple(kernel) == (1, 1) else "direct"


def pack_conv2d_filter(w_oihw, in_channels: int, groups: int, block: int,
                       input_is_plain: bool = False) -> PackedConv2dFilter:
    """Choose the path for this filter and pack it.

    ``w_oihw``: ``(O, in_channels // groups, KH, KW)``, any strides (hwio, ohwi
    and ihwo filters come in as transposed views); cast to float32.
    ``input_is_plain``: the input will be plain ``nchw`` (the first-layer path,
    meant for ``in_channels < block``; it accepts any C). Otherwise depthwise
    when ``groups == in_channels > 1``, 1x1 for 1x1 kernels, else direct.
    """
    w = np.asarray(w_oihw)
    if w.ndim != 4:
        raise ValueError(f"conv2d filter must be 4-D oihw, got shape {w.shape}")
    if block not in BLOCK_SIZES:
        raise ValueError(f"block must be one of {BLOCK_SIZES}, got {block}")
    out_channels, group_in, kh, kw = (int(s) for s in w.shape)
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError(f"groups={groups} must divide in_channels={in_channels} "
                         f"and out_channels={out_channels}")
    if group_in != in_channels // groups:
        raise ValueError(f"filter {w.shape} expects {group_in * groups} input channels "
                         f"with groups={groups}, the input has {in_channels}")
    if min(out_channels, kh, kw) < 1:
        raise ValueError(f"conv2d filter has an empty dimension: {w.shape}")
    if w.dtype != np.float32:
        w = w.astype(np.float32)
    ob = _blocks(out_channels, block)
    path = conv2d_path((kh, kw), in_channels, groups, input_is_plain)
    if path == "first_layer":
        packed = aligned_empty((ob, 1, kh, kw, in_channels, block))
        pack_filter(w, groups, packed)
        begin, end = np.zeros(ob, np.int64), np.ones(ob, np.int64)
    elif path == "depthwise":
        padded = np.zeros((ob * block, kh, kw), np.float32)
        padded[:out_channels] = w[:, 0]
        packed = aligned_empty((ob, kh, kw, block))
        packed[...] = padded.reshape(ob, block, kh, kw).transpose(0, 2, 3, 1)
        begin = end = np.zeros(0, np.int64)
    else:
        packed = aligned_empty((ob, _blocks(in_channels, block), kh, kw, block, block))
        pack_filter(w, groups, packed)
        begin, end = group_input_block_ranges(in_channels, out_channels, groups, block, block)
    return PackedConv2dFilter(path, block, in_channels, out_channels, groups, (kh, kw),
                              packed, begin, end)


def conv2d_output_size(size: int, kernel: int, stride: int, dilation: int,
                       pad_begin: int, pad_end: int) -> int:
    """WebNN's output size (may be < 1 for impossible geometry)."""
    return (size - ((kernel - 1) * dilation + 1) + pad_begin + pad_end) // stride + 1


def _pair(value, name):
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"conv2d: {name} must be an int or a pair, got {value}")
    return value


def _check_buffer(name, array, shape):
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise ValueError(f"conv2d: {name} must be a float32 numpy array, "
                         f"got {getattr(array, 'dtype', type(array))}")
    if array.shape != tuple(shape):
        raise ValueError(f"conv2d: {name} has shape {array.shape}, expected {tuple(shape)}")
    if not array.flags.c_contiguous:
        raise ValueError(f"conv2d: {name} must be C-contiguous")


# activations that are a min/max, applied to the accumulators
_INF = np.float32(np.inf)


def _epilogue_args(activation, param0, param1):
    act = int(activation)
    if not 0 <= act <= GELU:
        raise ValueError(f"conv2d: unknown activation code {activation}")
    p0, p1 = np.float32(param0), np.float32(param1)
    if act == RELU:
        return True, np.float32(0.0), _INF, False, act, p0, p1
    if act == CLAMP:
        return True, p0, p1, False, act, p0, p1
    return False, -_INF, _INF, act != NONE, act, p0, p1


# Border pixels at least this share of the output: pad the input once
# instead (see pad_blocked). At 56x56 (7 % border) the two ways cost the same.
_PAD_COPY_SHARE = 0.1
# Depthwise, stride 1: pad the input (on the stack, or once) up to this output width (below).
_DW_PAD_WIDTH = 28
#: Floats of a depthwise task's zero-padded input rows on its stack (16 KiB:
#: a 14 x 14 plane of 8 lanes with its border takes 8 KiB).
_DW_PATCH_ELEMENTS = 4096

# All weights that fit comfortably in L2 (512 KiB here): then a task runs
# every output-block group over its pixels (og_inner), else one group.
_L2_WEIGHT_BYTES = 256 * 1024
# One group's weights that fit in L1 (32 KiB) beside the input: then a task
# runs all its tiles for one group before the next group.
_L1_WEIGHT_BYTES = 20 * 1024


# 1x1 as a GEMM: one output-block group's weights for a K-block stay in L1,
# the input of a task's pixels for that K-block in L2.
_L1_SLIVER_BYTES = 16 * 1024
_L2_CHUNK_BYTES = 128 * 1024


def k_blocks(CB: int, cb: int, B: int) -> int:
    """Input blocks per K-block of a GEMM on the register tile (the 1x1 path,
    Winograd's products): balanced, a group's weights for one in L1."""
    kcb = max(1, _L1_SLIVER_BYTES // (cb * cb * B * 4))
    nkb = -(-CB // kcb)
    return -(-CB // nkb)


def _gemm_blocking(N: int, CB: int, OB: int, pixels: int, cb: int, threads: int,
                   P: int, B: int):
    """``(chunk, kcb, gsets)`` for the 1x1 driver with tiles of P pixels x B
    blocks: pixels per task (whole tiles), input blocks per K-block, and how
    many sets the output-block groups are split into (tasks = N x chunks x sets)."""
    kcb = k_blocks(CB, cb, B)
    chunk = max(P, _L2_CHUNK_BYTES // (kcb * cb * 4) // P * P)
    nchunks = -(-pixels // chunk)
    threads = max(1, threads)
    gsets = 1
    if N * nchunks < 8 * threads and (N * nchunks) % threads:
        # balance the threads: more pixel chunks while they stay long (a
        # short chunk wastes its partial last tile), else split the groups
        if N == 1 and pixels >= 16 * P * threads:
            nchunks += -nchunks % threads
        else:
            gsets = min(-(-OB // B), threads)
    chunk = -(-(-(-pixels // nchunks)) // P) * P
    return chunk, kcb, gsets


_scratch = threading.local()


def _scratch_buffer(name: str, count: int) -> np.ndarray:
    """This thread's scratch buffer ``name`` of at least ``count`` floats
    (the first ``count``), valid until its next call; the largest stays
    allocated (a new one per call faulted its pages in again every time)."""
    scratch = getattr(_scratch, name, None)
    if scratch is None or scratch.size < count:
        scratch = aligned_empty((count,))
        setattr(_scratch, name, scratch)
    return scratch[:count]


def _pad_input(xf, N: int, CB: int, H: int, W: int, cb: int, pad):
    """``(xp, H + pt + pb, W + pl + pr)``: the flat blocked input ``xf``
    zero-padded by ``pad = (pt, pb, pl, pr)`` (:func:`pad_blocked`).

    ``xp`` is this thread's scratch buffer, valid until its next call: a new
    array per call cost more than the copy (~45 us for 500 KiB in a model,
    its pages faulted in again), so the largest one stays allocated."""
    pt, pb, pl, pr = pad
    Hp, Wp = H + pt + pb, W + pl + pr
    padded = _scratch_buffer("padded", N * CB * Hp * Wp * cb)
    pad_blocked(xf, padded, N, CB, H, W, cb, pt, pl, Hp, Wp)
    return padded, Hp, Wp


@dataclass(frozen=True)
class _Conv2dLaunch:
    """What :func:`conv2d_forward` derives from the shapes and options, once:
    the driver and its arguments after the five arrays (x, w, bias, residual,
    y), and the zero padding to copy the input into first (or None)."""
    driver: object
    weights: np.ndarray
    tail: tuple
    pad_copy: tuple | None           # (N, CB, H, W, cb, pad) for _pad_input
    bias_lanes: int                  # O_phys
    out_channels: int                # O
    zero_bias: np.ndarray
    x_shape: tuple                   # the shapes it was planned for
    out_shape: tuple
    path: str                        # what runs: the filter's path, or "winograd"
    scratch: int = 0                 # floats of a per-thread scratch argument (Winograd)


_MAX_LAUNCHES = 16                   # per filter: shapes x options seen


def conv2d_forward(x, packed: PackedConv2dFilter, out, strides=(1, 1), dilations=(1, 1),
                   padding=(0, 0, 0, 0), bias=None, residual=None, activation=NONE,
                   param0=0.0, param1=0.0, num_threads=None, algorithm="auto"):
    """``out = act(conv(x, w) + bias + residual)``, writing every element of ``out``.

    ``x``: ``(N, C_phys//cb, H, W, cb)``, or ``(N, C, H, W)`` for the
    first_layer path. ``out``: ``(N, O_phys//cb, OH, OW, cb)``. ``bias``:
    ``(O_phys,)`` or ``(O,)`` float32, or None. ``residual``: like ``out`` (may
    be ``out`` itself), or None. ``activation``: a code from
    :mod:`kernels.epilogue` with its two parameters. ``padding`` is
    ``[top, bottom, left, right]``. ``num_threads``: numba's current thread
    count, when the caller knows it (asking numba costs ~1.5 us).
    ``algorithm``: one of :data:`ALGORITHMS` (see :func:`conv2d_algorithm`).
    Raises ValueError on any mismatch (the kernels themselves do not check
    bounds). Returns ``out``.

    The geometry, path choice and blocking are worked out once per shapes and
    options and kept on ``packed`` (a model runs the same convolutions again
    and again: that work cost more than a small convolution); every call
    still checks its arrays. The same as ``run_conv2d_launch(conv2d_launch(...),
    x, out, bias, residual)``.
    """
    launch = conv2d_launch(x, packed, out, strides, dilations, padding, bias is None,
                           residual is None, activation, param0, param1, num_threads,
                           algorithm)
    return _run_conv2d(launch, x, out, bias, residual)


def conv2d_launch(x, packed: PackedConv2dFilter, out, strides=(1, 1), dilations=(1, 1),
                  padding=(0, 0, 0, 0), no_bias=True, no_residual=True, activation=NONE,
                  param0=0.0, param1=0.0, num_threads=None,
                  algorithm="auto") -> _Conv2dLaunch:
    """The launch :func:`conv2d_forward` runs for these shapes and options
    (planned once, then kept on ``packed``): a caller that runs one convolution
    again and again may keep it and call :func:`run_conv2d_launch`."""
    try:
        key = (x.shape, out.shape, _as_key(strides), _as_key(dilations), _as_key(padding),
               bool(no_bias), bool(no_residual), int(activation), float(param0),
               float(param1), algorithm,
               # only the 1x1 path's blocking depends on the thread count
               (num_threads or numba.get_num_threads()) if packed.path == "1x1" else 0)
        launch = packed.launches.get(key)
    except (AttributeError, TypeError, ValueError):
        key = launch = None              # malformed: the full checks below say why
    if launch is None:
        launch = _plan_conv2d(x, packed, out, strides, dilations, padding,
                              not no_residual, activation, param0, param1, algorithm)
        if key is not None:
            if len(packed.launches) >= _MAX_LAUNCHES:
                packed.launches.clear()
            packed.launches[key] = launch
    return launch


def _as_key(value):
    return value if isinstance(value, (int, tuple)) else tuple(value)


def _check_array(name, array):
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise ValueError(f"conv2d: {name} must be a float32 numpy array, "
                         f"got {getattr(array, 'dtype', type(array))}")
    if not array.flags.c_contiguous:
        raise ValueError(f"conv2d: {name} must be C-contiguous")


def run_conv2d_launch(launch: _Conv2dLaunch, x, out, bias=None, residual=None):
    """Run a launch from :func:`conv2d_launch` on arrays of the shapes it was
    planned for (checked, with everything else :func:`conv2d_forward` checks
    at every call). Returns ``out``."""
    return _run_conv2d(launch, x, out, bias, residual)


def _run_conv2d(launch: _Conv2dLaunch, x, out, bias, residual):
    """The per-call checks of the arrays (the plan checked everything else for
    these shapes), then the driver."""
    args = _checked_args(launch, x, out, bias, residual)
    if launch.pad_copy is not None:
        args = (_pad_input(args[0], *launch.pad_copy)[0],) + args[1:]
    if launch.scratch:
        args += (_scratch_buffer("winograd", launch.scratch),)
    launch.driver(*args)
    return out


def bind_conv2d_launch(launch: _Conv2dLaunch, x, out, bias=None, residual=None):
    """``(driver, args)``: ``driver(*args)`` runs ``run_conv2d_launch(launch,
    x, out, bias, residual)`` again, for a caller that runs one convolution on
    the same arrays again and again (they are checked here, once; their shapes,
    dtypes and addresses cannot change while the caller holds them). None
    when the launch pads the input first or needs scratch memory (Winograd):
    both come from a per-thread buffer at every run."""
    if launch.pad_copy is not None or launch.scratch:
        return None
    return launch.driver, _checked_args(launch, x, out, bias, residual)


def _checked_args(launch: _Conv2dLaunch, x, out, bias, residual) -> tuple:
    """The driver's arguments for these arrays, after every check
    :func:`run_conv2d_launch` makes (x unpadded: the caller pads it)."""
    _check_array("x", x)
    _check_array("out", out)
    if x.shape != launch.x_shape or out.shape != launch.out_shape:
        raise ValueError(f"conv2d: this launch was planned for x {launch.x_shape} and out "
                         f"{launch.out_shape}, got {x.shape} and {out.shape}")
    if np.may_share_memory(x, out):
        raise ValueError("conv2d: out must not overlap x")
    if bias is None:
        bias = launch.zero_bias
    else:
        if not isinstance(bias, np.ndarray) or bias.dtype != np.float32 or bias.ndim != 1:
            raise ValueError("conv2d: bias must be a 1-D float32 array")
        lanes, channels = launch.bias_lanes, launch.out_channels
        if bias.shape[0] == channels and channels != lanes:
            bias = np.concatenate([bias, np.zeros(lanes - channels, np.float32)])
        _check_buffer("bias", bias, (lanes,))
    # (ravel: a view of these C-contiguous arrays, cheaper than reshape)
    yf = out.ravel()
    if residual is not None:
        _check_buffer("residual", residual, out.shape)
        resf = residual.ravel()
        # the same buffer as out (a fused in-place add) or no overlap; two
        # arrays of one shape overlap at the same start iff their first
        # elements do (cheaper than asking for both data pointers)
        if residual is not out and np.may_share_memory(residual, out) and \
                not np.may_share_memory(resf[:1], yf[:1]):
            raise ValueError("conv2d: residual must be out itself or not overlap it")
    else:
        resf = yf
    return (x.ravel(), launch.weights, bias, resf, yf) + launch.tail


#: Winograd's scratch (one chunk's transformed input and products, at least
#: twice the transformed filter: see ``winograd.chunk_rows``) at most this
#: many bytes under "auto"; past it (thousands of channels) the direct path runs
_WINOGRAD_SCRATCH_BYTES = 256 << 20
#: with 512-bit registers (16-channel blocks), "auto" runs a batch of fewer
#: 4 x 4 output tiles than this direct: each transformed filter element (4x
#: the direct filter's bytes) then serves too few tiles. 512 channels at 7 x 7
#: (4 tiles), 1 thread: direct 1.90 ms, Winograd 2.14 ms in a loop, 3.7-4.1
#: ms in ResNet-50, its 38 MB filter from memory; with 8 tiles (batch 2)
#: Winograd 1.30x faster in a loop, 16 tiles (256 at 14 x 14) 1.66x
#: (/tmp/s32/wd.py). Measured on a Xeon (Emerald Rapids) only; on AVX2
#: (8-channel blocks) Winograd was faster at every ResNet-50 3x3 shape.
_WINOGRAD_MIN_TILES = 8


def conv2d_algorithm(path: str, kernel, strides, dilations, groups: int, in_channels: int,
                     out_channels: int, batch: int, out_h: int, out_w: int, block: int,
                     algorithm: str = "auto") -> str:
    """What runs a convolution: ``"winograd"`` or the filter's ``path``.

    Winograd F(4x4, 3x3) (:mod:`kernels.winograd`) applies to the direct
    path's 3x3 kernels with stride 1, dilation 1 and one group.
    ``algorithm="direct"`` never uses it, ``"winograd"`` wherever it
    applies, and ``"auto"`` where it applies and pays: 8 or more input and
    output channels (measured 1.5-3x faster than direct from there, 1 and
    2 threads, every ResNet-50 3x3 shape), within the scratch limit; with
    512-bit registers, also :data:`_WINOGRAD_MIN_TILES` output tiles."""
    if algorithm == "direct" or path != "direct" or tuple(kernel) != (3, 3) or \
            tuple(strides) != (1, 1) or tuple(dilations) != (1, 1) or groups != 1:
        return path
    if algorithm == "winograd":
        return "winograd"
    tile_rows, tile_cols = winograd.tile_counts(out_h, out_w)
    if AVX512_TUNED and block == 16 and batch * tile_rows * tile_cols < _WINOGRAD_MIN_TILES:
        return path
    CB, OB = _blocks(in_channels, block), _blocks(out_channels, block)
    _, tiles = winograd.chunk_rows(batch, CB, OB, tile_rows, tile_cols, block,
                                   conv1x1_tile_shape(block, OB)[0])
    scratch = 4 * winograd.scratch_floats(CB, OB, tiles, block)
    if min(in_channels, out_channels) >= 8 and scratch <= _WINOGRAD_SCRATCH_BYTES:
        return "winograd"
    return path


def _plan_conv2d(x, packed: PackedConv2dFilter, out, strides, dilations, padding,
                 has_res: bool, activation, param0, param1, algorithm) -> _Conv2dLaunch:
    """Check the shapes and options of a conv2d_forward call; choose the path,
    padding copy and blocking."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"conv2d: algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    cb = packed.block
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    pad = tuple(int(p) for p in padding)
    if len(pad) != 4:
        raise ValueError(f"conv2d: padding must be [top, bottom, left, right], got {padding}")
    if min(sh, sw, dh, dw) < 1 or min(pad) < 0:
        raise ValueError(f"conv2d: strides {strides} and dilations {dilations} must be >= 1 "
                         f"and padding {padding} >= 0")
    pt, pb, pl, pr = pad
    C, O = packed.in_channels, packed.out_channels
    KH, KW = packed.kernel
    if not isinstance(x, np.ndarray):
        raise ValueError(f"conv2d: x must be a numpy array, got {type(x)}")
    if packed.path == "first_layer":
        if x.ndim != 4:
            raise ValueError(f"conv2d: first-layer input must be nchw, got shape {x.shape}")
        N, _, H, W = x.shape
        _check_buffer("x", x, (N, C, H, W))
    else:
        if x.ndim != 5:
            raise ValueError(f"conv2d: input must be blocked (N, C/cb, H, W, cb), got {x.shape}")
        N, _, H, W, _ = x.shape
        _check_buffer("x", x, (N, _blocks(C, cb), H, W, cb))
    OH = conv2d_output_size(H, KH, sh, dh, pt, pb)
    OW = conv2d_output_size(W, KW, sw, dw, pl, pr)
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d: output would be {OH}x{OW} for input {H}x{W}, kernel "
                         f"{KH}x{KW}, strides {(sh, sw)}, dilations {(dh, dw)}, padding {pad}")
    OB = packed.out_blocks
    _check_buffer("out", out, (N, OB, OH, OW, cb))
    epilogue = _epilogue_args(activation, param0, param1)
    wf = packed.weights.reshape(-1)

    def launch(driver, tail, pad_copy=None, weights=wf, path=packed.path, scratch=0):
        return _Conv2dLaunch(driver, weights, tail, pad_copy, OB * cb, O,
                             np.zeros(OB * cb, np.float32), x.shape, out.shape, path,
                             scratch)

    if conv2d_algorithm(packed.path, packed.kernel, (sh, sw), (dh, dw), packed.groups, C, O,
                        N, OH, OW, cb, algorithm) == "winograd":
        CB = _blocks(C, cb)
        P, B = conv1x1_tile_shape(cb, OB)
        tile_rows, tile_cols = winograd.tile_counts(OH, OW)
        chunk, padded_tiles = winograd.chunk_rows(N, CB, OB, tile_rows, tile_cols, cb, P)
        geom = (N, CB, H, W, OB, OH, OW, pt, pl, O, tile_rows, tile_cols, padded_tiles, chunk)
        u = packed.transformed.get("winograd")
        if u is None:
            u = winograd.transform_filter(packed.weights,
                                          aligned_empty((winograd.POSITIONS, OB, CB, cb, cb)))
            u = packed.transformed.setdefault("winograd", u)
        return launch(winograd.winograd_driver(cb, P, B),
                      (geom, k_blocks(CB, cb, B), has_res) + epilogue,
                      weights=u.reshape(-1), path="winograd",
                      scratch=winograd.scratch_floats(CB, OB, padded_tiles, cb))

    if packed.path == "depthwise":
        CB = _blocks(C, cb)
        pad_copy = None
        # border columns run pixel by pixel, and so does a row whose interior
        # is narrower than a tile: then pad the input, each task its own rows
        # on its stack (pad_rows of them), or the whole input once when a row
        # is too wide for that buffer; with stride 1 up to 28 wide the two
        # single pixels per row cost more (14x14: 78 -> 68 us for 384 ch).
        owa, owb = _clip_range.py_func(-pl, sw, OW, W - (KW - 1) * dw)
        pad_rows = 0
        if packed.multiplier == 1 and (pl or pr) and (
                owb - owa < depthwise_tile_pixels(cb) or (sw == 1 and OW <= _DW_PAD_WIDTH)):
            # output rows per task whose padded input rows fit the stack buffer
            row_floats = ((OW - 1) * sw + (KW - 1) * dw + 1) * cb
            pad_rows = ((_DW_PATCH_ELEMENTS // row_floats - (KH - 1) * dh - 1) // sh + 1
                        if row_floats * ((KH - 1) * dh + 1) <= _DW_PATCH_ELEMENTS else 0)
            if pad_rows == 0:
                pad_copy = (N, CB, H, W, cb, pad)
                H, W = H + pt + pb, W + pl + pr
                pt = pl = 0
        geom = (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O, C,
                packed.multiplier)
        return launch(depthwise_driver(cb), (geom, has_res, pad_rows) + epilogue, pad_copy)

    P, B = conv_tile_shape(cb)
    if packed.path == "1x1" and packed.groups == 1 and not any(pad):
        CB = _blocks(C, cb)
        geom = (N, CB, H, W, OB, OH, OW, 1, 1, sh, sw, 1, 1, 0, 0, O,
                CB * H * W * cb, H * W * cb, W * cb, cb, 1, 0, OH, 0, OW)
        P, B = conv1x1_tile_shape(cb, OB)
        threads = numba.get_num_threads()
        chunk, kcb, gsets = _gemm_blocking(N, CB, OB, OH * OW, cb, threads, P, B)
        return launch(conv1x1_driver(cb, P, B),
                      (geom, chunk, kcb, gsets, threads, has_res) + epilogue)
    pad_copy = None
    if packed.path == "first_layer":
        CB, ci = 1, C
        x_n, x_ib, x_row, x_px, x_lane = C * H * W, 0, W, 1, H * W
    else:
        CB, ci = _blocks(C, cb), cb
        x_n, x_ib, x_row, x_px, x_lane = CB * H * W * cb, H * W * cb, W * cb, cb, 1
    # interior: output rows/columns whose taps all land inside the input
    r0, r1 = _clip_range.py_func(-pt, sh, OH, H - (KH - 1) * dh)
    c0, c1 = _clip_range.py_func(-pl, sw, OW, W - (KW - 1) * dw)
    if packed.path != "first_layer" and \
            OH * OW - (r1 - r0) * (c1 - c0) >= _PAD_COPY_SHARE * OH * OW:
        # many border pixels: pad the (blocked) input once, then every pixel
        # is interior
        pad_copy = (N, CB, H, W, cb, pad)
        H, W = H + pt + pb, W + pl + pr
        pt = pl = 0
        x_n, x_ib, x_row = CB * H * W * cb, H * W * cb, W * cb
        r0, r1 = _clip_range.py_func(0, sh, OH, H - (KH - 1) * dh)
        c0, c1 = _clip_range.py_func(0, sw, OW, W - (KW - 1) * dw)
    geom = (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O,
            x_n, x_ib, x_row, x_px, x_lane, r0, r1, c0, c1)
    og_inner = packed.weights.nbytes <= _L2_WEIGHT_BYTES
    # Pixels per task, whole tiles: about one output row; at least 16 tiles
    # when a task has one group, so it reuses that group's weights (loaded
    # into L2 once) over many tiles.
    P, B = direct_tile_shape(cb, packed.path == "first_layer")
    chunk = P * max(-(-OW // P), 1 if og_inner else 16)
    # a first-layer tile has few steps (9 over 3 channels for a 3x3 kernel):
    # setting up its pixels again for every group cost more than keeping a
    # group's weights in L1 saved (MobileNetV2's first conv: 399 -> 355 us)
    group_fits_l1 = packed.weights.nbytes // max(1, -(-OB // B)) <= _L1_WEIGHT_BYTES and \
        packed.path != "first_layer"
    return launch(conv_driver(cb, ci, packed.path == "first_layer"),
                  (geom, packed.ib_begin, packed.ib_end, chunk, og_inner, group_fits_l1,
                   has_res) + epilogue, pad_copy)


def conv2d_flops(packed: PackedConv2dFilter, batch: int, out_h: int, out_w: int) -> int:
    """Multiply-adds x 2 of the logical convolution (for GFLOP/s figures)."""
    KH, KW = packed.kernel
    group_in = packed.in_channels // packed.groups
    return 2 * batch * packed.out_channels * out_h * out_w * group_in * KH * KW
