"""Filter packing: logical ``oihw`` filters into the blocked layout the
direct convolutions read.

Buffers (float32; ``ic_bn``, ``oc_bn`` the input and output channel blocks;
``C_phys = ceil(C / ic_bn) * ic_bn``, ``O_phys`` likewise):

* logical filter ``w: (O, C // groups, KH, KW)`` (``hwio``, ``ohwi`` and
  ``ihwo`` filters come in as transposed *views* in oihw order, so one
  kernel packs all four)
* packed ``OIhw{ic_bn}i{oc_bn}o``:
  ``w_packed: (O_phys // oc_bn, C_phys // ic_bn, KH, KW, ic_bn, oc_bn)``, where
  ``w_packed[ob, cb, kh, kw, i, o]`` is the weight from input channel
  ``cb * ic_bn + i`` to output channel ``ob * oc_bn + o``. With groups, the
  packed filter is the dense block-diagonal filter: weights between channels
  of different groups are zero (and a kernel may skip input blocks outside an
  output block's group; see :func:`group_input_block_ranges`).
* packed compactly (grouped convs): the same with ``R`` input blocks per
  output block, ``R < C_phys // ic_bn`` (at least the longest of
  :func:`group_input_block_ranges`): ``w_packed[ob, r, ...]`` holds input block
  ``window_begin(ob) + r`` (:func:`packed_window_begins`: the block's first
  input block, moved back so that the window ends inside the input). With
  ``R = C_phys // ic_bn`` that is the dense layout (every window begins at 0).

Every element of ``w_packed`` is written, padding lanes included, so it can
come from ``np.empty``. ``pack_filter`` has a serial compile that runs on one
thread (``_config.parallel_kernel``).
"""

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.extending import intrinsic

from ._config import jit, parallel_kernel
from .layout_simd import _check_arrays, _data, _load_transposed, _row_start
from .simd import move4, transpose4, transpose8, transpose8_split
from .stack import stack_empty


# --- register transposes into a packed tile ---------------------------------

@intrinsic
def transpose8_scatter(typingctx, src, src_start, src_stride, dst, dst_start, offsets,
                       offsets_start):
    """``f(src, src_start, src_stride, dst, dst_start, offsets, offsets_start)``:
    an 8 x 8 transpose whose output row ``r`` goes to
    ``dst_start + offsets[offsets_start + r]`` (``offsets``: C-contiguous int64),
    for filter packing, where consecutive transposed rows land at scattered
    places of the packed tile."""
    if not (_check_arrays(src, dst) and isinstance(offsets, types.Array)
            and offsets.dtype == types.int64 and offsets.layout == "C"):
        return None
    signature = types.void(src, types.intp, types.intp, dst, types.intp, offsets, types.intp)

    def codegen(context, builder, sig, args):
        vector = ir.VectorType(ir.FloatType(), 8)
        src_data = _data(context, builder, sig.args[0], args[0])
        dst_data = _data(context, builder, sig.args[3], args[3])
        offset_data = _data(context, builder, sig.args[5], args[5])
        out = _load_transposed(
            builder, [_row_start(builder, src_data, args[1], args[2], r) for r in range(8)], 8)
        for r in range(8):
            where = builder.load(builder.gep(
                offset_data, [builder.add(args[6], ir.Constant(args[6].type, r))]))
            target = builder.gep(dst_data, [builder.add(args[4], where)])
            builder.store(out[r], builder.bitcast(target, vector.as_pointer()), align=4)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def transpose8_to_taps(typingctx, src, src_start, src_stride, dst, dst_start, first, taps):
    """``f(src, src_start, src_stride, dst, dst_start, first, taps)``, ``taps``
    a literal: one 8 x 8 transpose of a dense filter's tile at block 8 (8
    output channels x one input block). Source row ``o`` (``src_stride``
    apart) holds the run of ``8 * taps`` floats ``f = i * taps + k``; the
    transpose takes its floats ``first .. first + 7`` and puts the 8 output
    channels of run position ``f`` at ``dst_start + (k * 8 + i) * 8``.

    :func:`transpose8_scatter` reads those offsets from a table; with
    ``taps`` known, ``f % taps`` and ``f // taps`` are a multiply and a shift
    each. ``pack_filter`` of a 3x3 filter, 1 thread, in one process, shuffled
    rounds against np.copyto (before -> after): 256 x 256 0.80-0.87 ->
    0.88-0.91x, 512 x 512 0.72-0.90 -> 0.88-0.91x. A whole tile per call, all
    72 offsets constants, was no faster and compiled slower."""
    if not (_check_arrays(src, dst) and isinstance(taps, types.IntegerLiteral)):
        return None
    count = taps.literal_value
    signature = types.void(src, types.intp, types.intp, dst, types.intp, types.intp, taps)

    def codegen(context, builder, sig, args):
        vector = ir.VectorType(ir.FloatType(), 8)
        src_data = _data(context, builder, sig.args[0], args[0])
        dst_data = _data(context, builder, sig.args[3], args[3])
        index = args[1].type
        first = args[5]
        start = builder.add(args[1], first)
        out = _load_transposed(
            builder, [_row_start(builder, src_data, start, args[2], r) for r in range(8)], 8)
        taps_constant, eight = ir.Constant(index, count), ir.Constant(index, 8)
        for r in range(8):
            f = builder.add(first, ir.Constant(index, r))
            tap, lane = builder.urem(f, taps_constant), builder.udiv(f, taps_constant)
            where = builder.mul(builder.add(builder.mul(tap, eight), lane), eight)
            target = builder.gep(dst_data, [builder.add(args[4], where)])
            builder.store(out[r], builder.bitcast(target, vector.as_pointer()), align=4)
        return context.get_dummy_value()

    return signature, codegen


# --- packing -------------------------------------------------------------------

@parallel_kernel
def pack_filter(w, groups, out):
    """Pack ``w`` (oihw order, any strides) into ``out: OIhw{ic_bn}i{oc_bn}o``.

    ``out`` has shape ``(O_phys // oc_bn, R, KH, KW, ic_bn, oc_bn)`` with
    ``C = groups * w.shape[1]``: ``R = C_phys // ic_bn`` dense, fewer packed
    compactly (output block ``ob``'s input blocks from
    :func:`packed_window_begins`'s ``ob``, the module docstring). Weights
    across groups, and padding lanes, are written as zero. One task per
    output block.

    The fast tile: 8 (or 4) output channels of one group and a whole input
    block inside that group. In C-contiguous oihw, output channel ``o``'s
    weights for the block are one run of ``ic_bn * KH * KW`` floats
    ``f = i * KH * KW + k``, so 8 rows x 8 consecutive ``f`` is one register
    transpose read with unit stride; transposed row ``f`` (8 output channels)
    lands at ``[k, i, :]`` (a table of those offsets, one per ``f``). Other
    tiles (block edges, tiles straddling groups, depthwise) go element by
    element, output channel by output channel; tiles outside the group are
    zeros. A dense 1x1 filter at block 8 (every pointwise conv of a CNN) has
    a loop of its own: one transpose per tile, all strides but the row known.
    Dense 3x3 filters at block 8 compute their target offsets from the
    constant 9 taps instead of the table.
    """
    wc = np.ascontiguousarray(w)  # views (hwio, ...) copy once; C arrays pass through
    out_channels, group_in, kernel_h, kernel_w = wc.shape
    ic_bn = out.shape[4]
    taps = kernel_h * kernel_w
    run = ic_bn * taps  # floats per (output channel, input block)
    # where[f]: the offset in a packed tile of transposed row f (input lane
    # i = f // taps, tap k = f % taps): a table, not a counter pair per row
    # (the counters ran at 0.5x np.copyto, the table at 0.8x)
    where = np.empty(run, np.int64)
    for f in range(run):
        where[f] = ((f % taps) * ic_bn + f // taps) * out.shape[5]
    for ob in prange(out.shape[0]):
        # (int64: a prange index is unsigned in the parallel compile, and each
        # integer type would be a specialization of its own)
        _pack_output_block(wc, groups, out, where, np.int64(ob))


@jit(standalone=True)
def _pack_output_block(wc, groups, out, where, ob):
    """Output block ``ob`` of :func:`pack_filter` (``wc``: the filter,
    C-contiguous; ``where``: the tile offsets of the transposed rows). A
    standalone kernel (kernels/_linking.py): the serial and the parallel
    compile of ``pack_filter`` share it."""
    out_channels, group_in, kernel_h, kernel_w = wc.shape
    in_blocks = out.shape[1]             # the window: every input block when dense
    ic_bn, oc_bn = out.shape[4], out.shape[5]
    taps = kernel_h * kernel_w
    group_out = out_channels // groups
    all_blocks = (groups * group_in + ic_bn - 1) // ic_bn
    row = group_in * taps  # floats per output channel in wc
    run = ic_bn * taps  # floats per (output channel, input block)
    tile_size = taps * ic_bn * oc_bn
    vec = 0
    if oc_bn % 8 == 0 and run % 8 == 0:
        vec = 8
    elif oc_bn % 4 == 0 and run % 4 == 0:
        vec = 4
    if (groups == 1 and taps == 1 and ic_bn == 8 and oc_bn == 8 and out_channels % 8 == 0
            and group_in % 8 == 0):
        # A dense 1x1 filter at block 8, the commonest packing in a CNN: one
        # 8 x 8 transpose per tile, tiles in memory order, with constant
        # strides and split loads (in one process against the general loop
        # below, paired rounds, 1 thread, median of 4 placements: 512 x 2048
        # 0.76 -> 0.92x np.copyto, 256 x 1024 0.71 -> 0.86x; benchmarks/RESULTS.md).
        for ib in range(in_blocks):
            transpose8_split(wc, ob * 8 * row + ib * 8, row, out, (ob * in_blocks + ib) * 64, 8)
        return
    if groups == 1 and vec == 8 and out_channels % oc_bn == 0 and group_in % ic_bn == 0:
        # Dense filters: every tile is a full one (one task per output block:
        # a task per tile ran 0.65x np.copyto for 512 x 2048 x 1 x 1, this 0.9x).
        if taps == 9 and ic_bn == 8 and oc_bn == 8:
            _pack_3x3_block8(wc, out, ob, in_blocks, row)
            return
        for ib in range(in_blocks):
            dst0 = (ob * in_blocks + ib) * tile_size
            for og in range(oc_bn // 8):
                src0 = (ob * oc_bn + og * 8) * row + ib * run
                if taps == 1:  # f = i: rows land oc_bn apart, no table needed
                    for f0 in range(0, run, 8):
                        transpose8(wc, src0 + f0, row, out, dst0 + f0 * oc_bn + og * 8, oc_bn)
                else:
                    for f0 in range(0, run, 8):
                        transpose8_scatter(wc, src0 + f0, row, out, dst0 + og * 8, where, f0)
        return
    src = wc.reshape(wc.size)
    dst = out.reshape(out.size)
    scratch = numba.carray(stack_empty(16, np.float32), (16,))
    oc0 = ob * oc_bn
    oc1 = min(oc0 + oc_bn, out_channels)
    g_first = oc0 // group_out
    g_last = (oc1 - 1) // group_out
    # the window's first input block (0 when dense): packed_window_begins
    first_block = min((g_first * group_in) // ic_bn, all_blocks - in_blocks)
    for rb in range(in_blocks):
        c0 = (first_block + rb) * ic_bn
        local0 = c0 - g_first * group_in
        dst0 = (ob * in_blocks + rb) * tile_size
        if (vec > 0 and oc1 - oc0 == oc_bn and g_first == g_last
                and local0 >= 0 and local0 + ic_bn <= group_in):
            for og in range(oc_bn // vec):
                src0 = (oc0 + og * vec) * row + local0 * taps
                for f0 in range(0, run, vec):
                    if vec == 8:
                        transpose8_scatter(wc, src0 + f0, row, out, dst0 + og * 8, where, f0)
                    else:
                        transpose4(wc, src0 + f0, row, scratch, 0, 4)
                        for j in range(4):
                            move4(scratch, j * 4, out, dst0 + where[f0 + j] + og * 4)
        elif (c0 + ic_bn <= g_first * group_in
              or c0 >= (g_last + 1) * group_in):
            for e in range(tile_size):  # no group of this block reads these inputs
                dst[dst0 + e] = 0.0
        else:
            # output channel outermost: one division per output channel,
            # not one per weight (64x3x7x7: 61-72 -> 32-34 us, 60x30x3x3: 19-25 -> 10-14)
            for o in range(oc_bn):
                oc = oc0 + o
                first_c = c0 - (oc // group_out) * group_in  # local channel of lane 0
                for k in range(taps):
                    for i in range(ic_bn):
                        local_c = first_c + i
                        value = np.float32(0.0)
                        if oc < out_channels and local_c >= 0 and local_c < group_in:
                            value = src[oc * row + local_c * taps + k]
                        dst[dst0 + (k * ic_bn + i) * oc_bn + o] = value


@jit()
def _pack_3x3_block8(wc, out, ob, in_blocks, row):
    """Output block ``ob`` of a dense 3x3 filter at block 8: the taps a
    constant (:func:`transpose8_to_taps`), no offset table."""
    for ib in range(in_blocks):
        src0 = ob * 8 * row + ib * 72
        dst0 = (ob * in_blocks + ib) * 576
        for first in range(0, 72, 8):
            transpose8_to_taps(wc, src0, row, out, dst0, first, 9)


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


def packed_window_begins(ib_begin, in_blocks, window):
    """Each output block's first input block in a filter packed with
    ``window`` input blocks per output block (``in_blocks``: all of the
    input's, ``C_phys // ic_bn``; ``ib_begin`` from
    :func:`group_input_block_ranges`): its range's begin, moved back so that
    the window ends at the last input block at most. All zeros when
    ``window == in_blocks`` (dense). :func:`pack_filter` computes the same
    per block."""
    return np.minimum(np.asarray(ib_begin, np.int64), in_blocks - window)
