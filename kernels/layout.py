"""Layout conversions (reorders) and filter packing.

Buffers (``cb`` is the channel block, any of 1, 4, 8, 16, 32;
``C_phys = ceil(C / cb) * cb``; lanes past ``C`` are padding and are zero):

* ``nchw``:      ``x: (N, C, H, W)``
* ``nhwc``:      ``x: (N, H, W, C)``
* ``nChw{cb}c``: ``x: (N, C_phys // cb, H, W, cb)``; element ``(n, c, h, w)``
  sits at ``[n, c // cb, h, w, c % cb]``
* filters, logical ``oihw``: ``w: (O, C // groups, KH, KW)`` (``hwio``, ``ohwi``
  and ``ihwo`` are passed in as transposed *views* in oihw order, so one
  kernel packs all four)
* packed ``OIhw{ic_bn}i{oc_bn}o``:
  ``w_packed: (O_phys // oc_bn, C_phys // ic_bn, KH, KW, ic_bn, oc_bn)``, where
  ``w_packed[ob, cb, kh, kw, i, o]`` is the weight from input channel
  ``cb * ic_bn + i`` to output channel ``ob * oc_bn + o``. With groups, the
  packed filter is the dense block-diagonal filter: weights between channels
  of different groups are zero (and a kernel may skip input blocks outside an
  output block's group; see :func:`group_input_block_ranges`).

Every kernel writes every element of its output, padding lanes included, so
outputs can come from ``np.empty``. Drivers are parallel over (N x blocks x
rows): each thread writes whole contiguous rows.
"""

import numpy as np
from numba import prange

from ._config import jit
from .simd import move4, move8, move16, transpose4, transpose8, transpose16


@jit(parallel=True)
def nchw_to_blocked(x, out):
    """``x: (N, C, H, W)`` -> ``out: (N, C_phys // cb, H, W, cb)``.

    One task per output row ``out[n, block, h]``: full blocks move as
    ``cb x cb`` register transposes (cb pixels of cb channels at a time), the
    rest (the row's tail, a partial last block, cb 1 or 32) element by element.
    """
    batch, channels, height, width = x.shape
    channel_blocks, cb = out.shape[1], out.shape[4]
    plane = height * width
    for task in prange(batch * channel_blocks * height):
        n = task // (channel_blocks * height)
        block = (task // height) % channel_blocks
        h = task % height
        c0 = block * cb
        valid = min(cb, channels - c0)
        src_start = ((n * channels + c0) * height + h) * width
        dst_start = ((n * channel_blocks + block) * height + h) * width * cb
        done = 0
        if valid == cb:
            if cb == 8:
                while done + 8 <= width:
                    transpose8(x, src_start + done, plane, out, dst_start + done * 8, 8)
                    done += 8
            elif cb == 4:
                while done + 4 <= width:
                    transpose4(x, src_start + done, plane, out, dst_start + done * 4, 4)
                    done += 4
            elif cb == 16:
                while done + 16 <= width:
                    transpose16(x, src_start + done, plane, out, dst_start + done * 16, 16)
                    done += 16
        elif cb == 8:
            # A partial last block (C = 3 for an RGB image): stage its rows in
            # a zeroed 8 x 8 tile so the missing channels come out as zeros.
            tile = np.zeros((8, 8), np.float32)
            while done + 8 <= width:
                for lane in range(valid):
                    for j in range(8):
                        tile[lane, j] = x[n, c0 + lane, h, done + j]
                transpose8(tile, 0, 8, out, dst_start + done * 8, 8)
                done += 8
        row = out[n, block, h]
        for lane in range(valid):
            src = x[n, c0 + lane, h]
            for w in range(done, width):
                row[w, lane] = src[w]
        for lane in range(valid, cb):
            for w in range(done, width):
                row[w, lane] = 0.0


@jit(parallel=True)
def blocked_to_nchw(x, out):
    """``x: (N, C_phys // cb, H, W, cb)`` -> ``out: (N, C, H, W)``, padding dropped.

    The inverse of :func:`nchw_to_blocked`, one task per input row
    ``x[n, block, h]``; ``out`` may be the caller's array (one copy, no temp).
    """
    batch, channels, height, width = out.shape
    channel_blocks, cb = x.shape[1], x.shape[4]
    plane = height * width
    for task in prange(batch * channel_blocks * height):
        n = task // (channel_blocks * height)
        block = (task // height) % channel_blocks
        h = task % height
        c0 = block * cb
        valid = min(cb, channels - c0)
        src_start = ((n * channel_blocks + block) * height + h) * width * cb
        dst_start = ((n * channels + c0) * height + h) * width
        done = 0
        if valid == cb:
            if cb == 8:
                while done + 8 <= width:
                    transpose8(x, src_start + done * 8, 8, out, dst_start + done, plane)
                    done += 8
            elif cb == 4:
                while done + 4 <= width:
                    transpose4(x, src_start + done * 4, 4, out, dst_start + done, plane)
                    done += 4
            elif cb == 16:
                while done + 16 <= width:
                    transpose16(x, src_start + done * 16, 16, out, dst_start + done, plane)
                    done += 16
        elif cb == 8:
            # A partial last block: transpose into a tile, keep the valid rows.
            tile = np.empty((8, 8), np.float32)
            while done + 8 <= width:
                transpose8(x, src_start + done * 8, 8, tile, 0, 8)
                for lane in range(valid):
                    for j in range(8):
                        out[n, c0 + lane, h, done + j] = tile[lane, j]
                done += 8
        src = x[n, block, h]
        for lane in range(valid):
            dst = out[n, c0 + lane, h]
            for w in range(done, width):
                dst[w] = src[w, lane]


@jit(parallel=True)
def nhwc_to_blocked(x, out):
    """``x: (N, H, W, C)`` -> ``out: (N, C_phys // cb, H, W, cb)``.

    One task per input row ``x[n, h]``, read in order: each pixel's channels
    are split into runs of cb floats, one vector move each, one output row
    per block.
    """
    batch, height, width, channels = x.shape
    channel_blocks, cb = out.shape[1], out.shape[4]
    full_blocks = channels // cb
    for task in prange(batch * height):
        n = task // height
        h = task % height
        src_row = (n * height + h) * width * channels
        for w in range(width):
            src_start = src_row + w * channels
            for block in range(full_blocks):
                dst_start = (((n * channel_blocks + block) * height + h) * width + w) * cb
                if cb == 8:
                    move8(x, src_start + block * 8, out, dst_start)
                elif cb == 4:
                    move4(x, src_start + block * 4, out, dst_start)
                elif cb == 16:
                    move16(x, src_start + block * 16, out, dst_start)
                else:
                    for lane in range(cb):
                        out[n, block, h, w, lane] = x[n, h, w, block * cb + lane]
            if full_blocks < channel_blocks:  # the partial last block, zero-padded
                c0 = full_blocks * cb
                for lane in range(cb):
                    value = np.float32(0.0)
                    if c0 + lane < channels:
                        value = x[n, h, w, c0 + lane]
                    out[n, full_blocks, h, w, lane] = value


@jit(parallel=True)
def blocked_to_nhwc(x, out):
    """``x: (N, C_phys // cb, H, W, cb)`` -> ``out: (N, H, W, C)``, padding dropped."""
    batch, height, width, channels = out.shape
    channel_blocks, cb = x.shape[1], x.shape[4]
    for task in prange(batch * height):
        n = task // height
        h = task % height
        dst = out[n, h]
        for block in range(channel_blocks):
            c0 = block * cb
            valid = min(cb, channels - c0)
            src = x[n, block, h]
            src_start = ((n * channel_blocks + block) * height + h) * width * cb
            dst_start = (n * height + h) * width * channels + c0
            if valid == 8 and cb == 8:
                for w in range(width):
                    move8(x, src_start + w * 8, out, dst_start + w * channels)
            elif valid == 4 and cb == 4:
                for w in range(width):
                    move4(x, src_start + w * 4, out, dst_start + w * channels)
            elif valid == 16 and cb == 16:
                for w in range(width):
                    move16(x, src_start + w * 16, out, dst_start + w * channels)
            else:
                for w in range(width):
                    for lane in range(valid):
                        dst[w, c0 + lane] = src[w, lane]


@jit(parallel=True)
def pack_filter(w, groups, out):
    """Pack ``w`` (oihw order, any strides) into ``out: OIhw{ic_bn}i{oc_bn}o``.

    ``out`` has shape ``(O_phys // oc_bn, C_phys // ic_bn, KH, KW, ic_bn, oc_bn)``
    with ``C = groups * w.shape[1]``. Weights across groups, and padding
    lanes, are written as zero. One task per (output block, input block)
    tile, written in memory order (the reads gather; packing runs once per
    filter).
    """
    out_channels, group_in, kernel_h, kernel_w = w.shape
    out_blocks, in_blocks = out.shape[0], out.shape[1]
    ic_bn, oc_bn = out.shape[4], out.shape[5]
    group_out = out_channels // groups
    for task in prange(out_blocks * in_blocks):
        ob = task // in_blocks
        ib = task % in_blocks
        for kh in range(kernel_h):
            for kw in range(kernel_w):
                for i in range(ic_bn):
                    row = out[ob, ib, kh, kw, i]
                    c = ib * ic_bn + i
                    for o in range(oc_bn):
                        oc = ob * oc_bn + o
                        local_c = c - (oc // group_out) * group_in
                        value = np.float32(0.0)
                        if oc < out_channels and local_c >= 0 and local_c < group_in:
                            value = w[oc, local_c, kh, kw]
                        row[o] = value


def group_input_block_ranges(in_channels, out_channels, groups, ic_bn, oc_bn):
    """For each output block, the input blocks ``[begin, end)`` that can hold
    non-zero weights in a packed grouped filter. Returns two int64 arrays.

    With ``groups == 1`` every output block reads every input block.
    """
    out_blocks = -(-out_channels // oc_bn)
    group_in = in_channels // groups
    group_out = out_channels // groups
    begin = np.empty(out_blocks, np.int64)
    end = np.empty(out_blocks, np.int64)
    for ob in range(out_blocks):
        first_oc = ob * oc_bn
        last_oc = min(first_oc + oc_bn, out_channels) - 1
        first_c = (first_oc // group_out) * group_in
        last_c = (last_oc // group_out + 1) * group_in - 1
        begin[ob] = first_c // ic_bn
        end[ob] = last_c // ic_bn + 1
    return begin, end
