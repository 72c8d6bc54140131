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

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from ._config import jit, numba_threads, parallel_kernel
from .simd import (load_transposed8, move4, move8, move8_straddle, move8_straddle_streaming,
                   move8_streaming, stream_fence, transpose4, transpose8, transpose8_split,
                   transpose8_split_streaming, transpose_halving)
from .stack import stack_empty

#: Pixels per task in the activation reorders: a multiple of 16, large enough
#: that per-task work dwarfs the scheduling (4 KiB of each source plane).
_CHUNK = 1024
#: Pixels per tile of nChw8c -> nchw: the tile's source (8 KiB) stays in L1
#: between its two passes of 4 channels.
_PLANAR_TILE = 256
#: Pixels per tile in the nhwc kernels: each block's run of the tile is 2 KiB
#: of whole lines, and the tile's nhwc side (64 x C floats) stays in L1 up to
#: C = 64 (measured: 16 -> 64 pixels +5-20 %, 128 slower).
_TILE = 64
#: Most floats in a tile's nhwc side (16 KiB, half of L1): from C = 128 up a
#: tile has fewer pixels. With 64 pixels at C >= 256 the tile's pixels, C * 4
#: bytes apart, fought over a few L1 sets and every block reread them from L2
#: (1 thread, nhwc -> / -> nhwc against np.copyto: 1x256x56x56 0.61 / 0.47x
#: -> 0.85 / 0.89x, 1x2048x7x7 0.33 / 0.28x -> 0.68 / 0.57x).
_TILE_FLOATS = 4096
#: Tensors from this size on stream from and to memory: there nChw8c -> nchw
#: keeps its 8-plane pair transposes, and the nhwc kernels move groups of 4
#: pixels, block-major inside, so every block plane is written continuously
#: (two 64-byte lines per step at cb = 8) and the memory
#: sees steady streams; 64-pixel tiles jump every 2 KiB (measured at 16 and
#: 64 MB, 1 thread: 0.66-0.76x np.copyto -> 1.07-1.38x). In cache the 64-pixel
#: tiles are as fast or faster (256 KiB: 0.75x against 0.61x).
_STREAM_BYTES = 8 << 20
# From this size per thread, where the target's alignment allows, nchw ->
# nChw8c, nhwc -> nChw8c and nChw8c -> nhwc (cb = 8) also store with
# non-temporal hints (see :func:`_stores_stream`).


@jit()
def _stores_stream(nbytes, threads):
    """Whether a reorder writing ``nbytes`` stores with non-temporal hints
    (simd's streaming moves): from ``_STREAM_BYTES`` per thread. A plain store
    first reads its target line from memory; these write whole lines without
    reading them. A copy with them against one without (1 thread, paired
    rounds against np.copyto, 2026-11-23): 2-6 MB 0.50-0.69x against
    0.96-0.98x (in cache they only lose), 8 MB 0.94 against 0.95x, 12-32 MB
    1.53-1.67x against 0.85-0.95x. On 2 threads the plain copy stays fast
    further up (12 MB 2.30x against 1.81x) and the crossing is at 16 MB
    (2.13x against 1.64x): so the size per thread. (``threads`` comes from
    the Python side: numba's thread count asked in a kernel would keep it out
    of the cache.)"""
    return nbytes >= _STREAM_BYTES * threads


# --- partial-block intrinsics ----------------------------------------------
# Like simd.transpose_tile / move_vector (same argument conventions: flat
# element offsets into C-contiguous float32 arrays, no bounds check), with a
# runtime count of valid rows or lanes.

def _check_arrays(*arrays):
    return all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
               for a in arrays)


def _data(context, builder, array_type, value):
    return context.make_array(array_type)(context, builder, value).data


def _transpose_rows(builder, rows, n):
    """Transpose a list of n vectors (n x n floats). For n = 8 the classic AVX
    network, 24 shuffles (unpck*ps, shufps, vperm2f128), each mask one
    instruction; the halving network of simd.transpose_tile came out as 32
    with extra in-lane permutes and spilled in the two-tile version."""
    if n == 8:
        i32 = ir.IntType(32)

        def shuffle(a, b, mask):
            return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, 8), mask))
        unpack = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])
        pairs = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])
        lanes = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])
        t = []
        for a in range(0, 8, 2):
            t += [shuffle(rows[a], rows[a + 1], unpack[0]),
                  shuffle(rows[a], rows[a + 1], unpack[1])]
        s = []
        for a in (0, 4):  # t[a], t[a + 2] hold rows a..a+3
            for lo_hi in (0, 1):
                s += [shuffle(t[a + lo_hi], t[a + 2 + lo_hi], pairs[0]),
                      shuffle(t[a + lo_hi], t[a + 2 + lo_hi], pairs[1])]
        # s[0..3]: columns (0|4), (1|5), (2|6), (3|7) of rows 0-3; s[4..7] of rows 4-7
        out = [None] * 8
        for c in range(4):
            out[c] = shuffle(s[c], s[4 + c], lanes[0])
            out[c + 4] = shuffle(s[c], s[4 + c], lanes[1])
        return out
    return transpose_halving(builder, rows, n)


def _load_transposed(builder, rows, n, split_loads=False):
    """Load an n x n tile and return its n columns as vectors; ``rows[r]``: a
    ``float*`` to row ``r``, or None for a row of zeros (never read).
    ``split_loads`` (n = 8): :func:`simd.load_transposed8` (nchw -> nChw{cb}c,
    where it measured faster); else n whole-row loads and :func:`_transpose_rows`."""
    if split_loads:
        return load_transposed8(builder, rows)
    vector = ir.VectorType(ir.FloatType(), n)
    return _transpose_rows(builder, [
        ir.Constant(vector, None) if row is None
        else builder.load(builder.bitcast(row, vector.as_pointer()), align=4)
        for row in rows], n)


def _row_start(builder, data, start, stride, row):
    """``float*`` to flat element ``start + row * stride`` of ``data``."""
    offset = builder.add(start, builder.mul(stride, ir.Constant(start.type, row)))
    return builder.gep(data, [offset])


def _row_pointer(builder, data, start, stride, row, vector):
    return builder.bitcast(_row_start(builder, data, start, stride, row), vector.as_pointer())


def _transpose_zero_padded(n, max_rows=None):
    """``f(src, src_start, src_stride, rows, dst, dst_start, dst_stride)``: an
    n x n transpose whose source rows ``>= rows`` read as zeros (never touched:
    their loads are redirected to a zero vector on the stack), so a partial
    block comes out zero-padded in one pass. For nchw -> nChw{cb}c (the rows
    are channel planes): split loads at n = 8."""

    @intrinsic
    def transpose(typingctx, src, src_start, src_stride, rows, dst, dst_start, dst_stride):
        if not _check_arrays(src, dst):
            return None
        signature = types.void(src, types.intp, types.intp, types.intp,
                               dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), n)
            src_data = _data(context, builder, sig.args[0], args[0])
            dst_data = _data(context, builder, sig.args[4], args[4])
            zero = cgutils.alloca_once(builder, vector)
            builder.store(ir.Constant(vector, None), zero)
            zero = builder.bitcast(zero, ir.FloatType().as_pointer())
            rows = []
            for r in range(n):
                if max_rows is not None and r >= max_rows:
                    # a constant zero row: LLVM folds the shuffles that read it
                    rows.append(None)
                    continue
                valid = builder.icmp_signed("<", ir.Constant(args[3].type, r), args[3])
                rows.append(builder.select(
                    valid, _row_start(builder, src_data, args[1], args[2], r), zero))
            out = _load_transposed(builder, rows, n, split_loads=n == 8)
            for r in range(n):
                builder.store(out[r], _row_pointer(builder, dst_data, args[5], args[6], r, vector),
                              align=4)
            return context.get_dummy_value()

        return signature, codegen

    return transpose


def _transpose_cropped(n):
    """``f(src, src_start, src_stride, dst, dst_start, dst_stride, rows)``: an
    n x n transpose that stores only output rows ``< rows`` (the others go to a
    scratch vector on the stack): the valid channels of a partial block."""

    @intrinsic
    def transpose(typingctx, src, src_start, src_stride, dst, dst_start, dst_stride, rows):
        if not _check_arrays(src, dst):
            return None
        signature = types.void(src, types.intp, types.intp, dst, types.intp, types.intp,
                               types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), n)
            src_data = _data(context, builder, sig.args[0], args[0])
            dst_data = _data(context, builder, sig.args[3], args[3])
            scratch = cgutils.alloca_once(builder, vector)
            out = _load_transposed(
                builder, [_row_start(builder, src_data, args[1], args[2], r) for r in range(n)], n)
            for r in range(n):
                valid = builder.icmp_signed("<", ir.Constant(args[6].type, r), args[6])
                pointer = builder.select(
                    valid, _row_pointer(builder, dst_data, args[4], args[5], r, vector), scratch)
                builder.store(out[r], pointer, align=4)
            return context.get_dummy_value()

        return signature, codegen

    return transpose


def _transpose_pair_cropped(n, full=False):
    """``f(src, src_start, src_stride, dst, dst_start, dst_stride, rows)``: two
    n x n transposes side by side: 2n source rows of n floats become n rows of
    2n floats, stored as two back-to-back vectors so each target line is
    written whole at once (``rows``: how many output rows to store). For
    blocked -> nchw: with the planes a multiple of 4 KiB apart, 8 half-written
    lines in one L1 set thrashed (0.45x np.copyto, vs 0.9x at 60 x 60).
    ``full``: no crop code at all (``rows`` ignored): a separate function on
    purpose, LLVM merged a literal-8 call with a cropped one into branchy code."""

    @intrinsic
    def transpose(typingctx, src, src_start, src_stride, dst, dst_start, dst_stride, rows):
        if not _check_arrays(src, dst):
            return None
        signature = types.void(src, types.intp, types.intp, dst, types.intp, types.intp,
                               types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), n)
            src_data = _data(context, builder, sig.args[0], args[0])
            dst_data = _data(context, builder, sig.args[3], args[3])
            scratch = cgutils.alloca_once(builder, ir.ArrayType(vector, 2))
            halves = []
            for half in range(2):
                halves.append(_load_transposed(
                    builder, [_row_start(builder, src_data, args[1], args[2], half * n + r)
                              for r in range(n)], n))
            for r in range(n):
                row = builder.gep(dst_data, [builder.add(
                    args[4], builder.mul(args[5], ir.Constant(args[5].type, r)))])
                pointer = builder.bitcast(row, vector.as_pointer())
                if not full:
                    valid = builder.icmp_signed("<", ir.Constant(args[6].type, r), args[6])
                    pointer = builder.select(valid, pointer,
                                             builder.bitcast(scratch, vector.as_pointer()))
                builder.store(halves[0][r], pointer, align=4)
                builder.store(halves[1][r], builder.gep(pointer, [ir.Constant(ir.IntType(32), 1)]),
                              align=4)
            return context.get_dummy_value()

        return signature, codegen

    return transpose


@intrinsic
def transpose16_low4_cropped(typingctx, src, src_start, dst, dst_start, dst_stride, rows):
    """``f(src, src_start, dst, dst_start, dst_stride, rows)``, for nChw8c ->
    nchw: 16 source rows of 8 floats (pixels of a block; ``src_start``: the
    first one's channel ``c``) give ``rows <= 4`` target rows (channels c..c+3)
    of 16 pixels, each stored as two back-to-back vectors. Only the first 4
    floats of each row are read (:func:`simd.load_transposed8`'s first 4
    columns: 4 inserts and 8 shuffles per 8 pixels, not 8 loads and 24).
    Against 8 pixels per step (1 thread, in cache, 80 paired rounds against
    np.copyto, three placements): +0.01 to +0.07 on four shapes."""
    if not _check_arrays(src, dst):
        return None
    signature = types.void(src, types.intp, dst, types.intp, types.intp, types.intp)

    def codegen(context, builder, sig, args):
        vector = ir.VectorType(ir.FloatType(), 8)
        src_data = _data(context, builder, sig.args[0], args[0])
        dst_data = _data(context, builder, sig.args[2], args[2])
        scratch = cgutils.alloca_once(builder, ir.ArrayType(vector, 2))
        block = ir.Constant(args[1].type, 8)
        halves = [load_transposed8(
            builder, [_row_start(builder, src_data, args[1], block, half * 8 + r)
                      for r in range(8)], columns=4) for half in range(2)]
        for r in range(4):
            valid = builder.icmp_signed("<", ir.Constant(args[5].type, r), args[5])
            pointer = builder.select(
                valid, _row_pointer(builder, dst_data, args[3], args[4], r, vector),
                builder.bitcast(scratch, vector.as_pointer()))
            builder.store(halves[0][r], pointer, align=4)
            builder.store(halves[1][r], builder.gep(pointer, [ir.Constant(ir.IntType(32), 1)]),
                          align=4)
        return context.get_dummy_value()

    return signature, codegen


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


def _lane_mask(builder, n, count):
    i32 = ir.IntType(32)
    count = builder.trunc(count, i32)
    splat = builder.insert_element(ir.Constant(ir.VectorType(i32, n), None), count,
                                   ir.Constant(i32, 0))
    splat = builder.shuffle_vector(splat, splat, ir.Constant(ir.VectorType(i32, n), [0] * n))
    return builder.icmp_signed("<", ir.Constant(ir.VectorType(i32, n), list(range(n))), splat)


def _move_zero_padded(n, masked):
    """``f(src, src_start, lanes, dst, dst_start)``: stores the first ``lanes``
    floats at ``src_start`` as n lanes, the rest zero (``lanes <= 0``: zeros).
    ``masked``: a masked load, which reads nothing past ``lanes`` (for the end of
    the array); otherwise a plain n-wide load and a select, which is cheaper
    but reads all n floats."""

    @intrinsic
    def move(typingctx, src, src_start, lanes, dst, dst_start):
        if not _check_arrays(src, dst):
            return None
        signature = types.void(src, types.intp, types.intp, dst, types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), n)
            i32 = ir.IntType(32)
            source = builder.bitcast(
                builder.gep(_data(context, builder, sig.args[0], args[0]), [args[1]]),
                vector.as_pointer())
            target = builder.bitcast(
                builder.gep(_data(context, builder, sig.args[3], args[3]), [args[4]]),
                vector.as_pointer())
            mask = _lane_mask(builder, n, args[2])
            if masked:
                function = cgutils.get_or_insert_function(
                    builder.module,
                    ir.FunctionType(vector, [vector.as_pointer(), i32,
                                             ir.VectorType(ir.IntType(1), n), vector]),
                    f"llvm.masked.load.v{n}f32.p0")
                value = builder.call(function, [source, ir.Constant(i32, 4), mask,
                                                ir.Constant(vector, None)])
            else:
                # an AND with the sign-extended mask: LLVM rewrites a select of a
                # load into the (slower) masked load
                ints = ir.VectorType(i32, n)
                bits = builder.and_(builder.bitcast(builder.load(source, align=4), ints),
                                    builder.sext(mask, ints))
                value = builder.bitcast(bits, vector)
            builder.store(value, target, align=4)
            return context.get_dummy_value()

        return signature, codegen

    return move


def _move_cropped(n):
    """``f(src, src_start, dst, dst_start, lanes)``: loads n floats and stores
    the first ``lanes`` (a masked store: nothing past them is written)."""

    @intrinsic
    def move(typingctx, src, src_start, dst, dst_start, lanes):
        if not _check_arrays(src, dst):
            return None
        signature = types.void(src, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), n)
            i32 = ir.IntType(32)
            source = builder.bitcast(
                builder.gep(_data(context, builder, sig.args[0], args[0]), [args[1]]),
                vector.as_pointer())
            target = builder.bitcast(
                builder.gep(_data(context, builder, sig.args[2], args[2]), [args[3]]),
                vector.as_pointer())
            function = cgutils.get_or_insert_function(
                builder.module,
                ir.FunctionType(ir.VoidType(), [vector, vector.as_pointer(), i32,
                                                ir.VectorType(ir.IntType(1), n)]),
                f"llvm.masked.store.v{n}f32.p0")
            builder.call(function, [builder.load(source, align=4), target, ir.Constant(i32, 4),
                                    _lane_mask(builder, n, args[4])])
            return context.get_dummy_value()

        return signature, codegen

    return move


transpose4_padded = _transpose_zero_padded(4)
transpose8_padded = _transpose_zero_padded(8)
#: for at most 4 valid rows (C = 3 at cb = 8): a third fewer shuffles
transpose8_padded4 = _transpose_zero_padded(8, 4)
transpose4_cropped = _transpose_cropped(4)
transpose8_cropped = _transpose_cropped(8)
transpose8_pair_cropped = _transpose_pair_cropped(8)
transpose8_pair = _transpose_pair_cropped(8, full=True)
move4_padded = _move_zero_padded(4, False)
move8_padded = _move_zero_padded(8, False)
move4_padded_masked = _move_zero_padded(4, True)
move8_padded_masked = _move_zero_padded(8, True)
move4_cropped = _move_cropped(4)
move8_cropped = _move_cropped(8)


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
    """:func:`nchw_to_blocked` on ``threads`` threads (numba's count in the caller)."""
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
    for task in prange(batch * channel_blocks * chunks):
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


@parallel_kernel
def blocked_to_nchw(x, out):
    """``x: (N, C_phys // cb, H, W, cb)`` -> ``out: (N, C, H, W)``, padding dropped.

    The inverse of :func:`nchw_to_blocked`, same tasks; a partial block's
    transpose stores only its valid rows. Mostly 16 pixels of all cb channels
    at a time (pairs of 8 x 8 transposes). With cb = 8 in cache, where the
    planes are a multiple of 4 KiB apart or a block is partial, a tile of
    ``_PLANAR_TILE`` pixels goes out in two passes of 4 channels instead, 16
    pixels x 4 channels per step. ``out`` may be the caller's array (one
    copy, no temp).
    """
    batch, channels, height, width = out.shape
    channel_blocks, cb = x.shape[1], x.shape[4]
    plane = height * width
    src = x.reshape(x.size)
    dst = out.reshape(out.size)
    chunks = (plane + _CHUNK - 1) // _CHUNK
    step = 4 if cb == 4 else 8
    streaming = x.size * 4 >= _STREAM_BYTES
    out_floats = out.ctypes.data // 4      # the target's address, in floats
    for task in prange(batch * channel_blocks * chunks):
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


# --- nhwc <-> nChw{cb}c ------------------------------------------------------

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
    """:func:`nhwc_to_blocked` on ``threads`` threads (numba's count in the caller)."""
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
    for task in prange(batch * chunks):
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
    """:func:`blocked_to_nhwc` on ``threads`` threads (numba's count in the caller)."""
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
    for task in prange(batch * chunks):
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


# --- filters -----------------------------------------------------------------

@parallel_kernel
def pack_filter(w, groups, out):
    """Pack ``w`` (oihw order, any strides) into ``out: OIhw{ic_bn}i{oc_bn}o``.

    ``out`` has shape ``(O_phys // oc_bn, C_phys // ic_bn, KH, KW, ic_bn, oc_bn)``
    with ``C = groups * w.shape[1]``. Weights across groups, and padding
    lanes, are written as zero. One task per output block.

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
    out_blocks, in_blocks = out.shape[0], out.shape[1]
    ic_bn, oc_bn = out.shape[4], out.shape[5]
    taps = kernel_h * kernel_w
    group_out = out_channels // groups
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
        for ob in prange(out_blocks):
            for ib in range(in_blocks):
                transpose8_split(wc, ob * 8 * row + ib * 8, row,
                                 out, (ob * in_blocks + ib) * 64, 8)
        return
    src = wc.reshape(wc.size)
    dst = out.reshape(out.size)
    # where[f]: the offset in a packed tile of transposed row f (input lane
    # i = f // taps, tap k = f % taps): a table, not a counter pair per row
    # (the counters ran at 0.5x np.copyto, the table at 0.8x)
    where = np.empty(run, np.int64)
    for f in range(run):
        where[f] = ((f % taps) * ic_bn + f // taps) * oc_bn
    if groups == 1 and vec == 8 and out_channels % oc_bn == 0 and group_in % ic_bn == 0:
        # Dense filters: every tile is a full one, a loop of its own with one
        # task per output block (a task per tile ran 0.65x np.copyto for
        # 512 x 2048 x 1 x 1, this 0.9x).
        for ob in prange(out_blocks):
            if taps == 9 and ic_bn == 8 and oc_bn == 8:
                # 3x3 at block 8 (a prange loop of its own added ~1.3 s to the
                # parallel compile)
                _pack_3x3_block8(wc, out, ob, in_blocks, row)
                continue
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
    for ob in prange(out_blocks):
        scratch = numba.carray(stack_empty(16, np.float32), (16,))
        oc0 = ob * oc_bn
        oc1 = min(oc0 + oc_bn, out_channels)
        g_first = oc0 // group_out
        g_last = (oc1 - 1) // group_out
        for ib in range(in_blocks):
            c0 = ib * ic_bn
            local0 = c0 - g_first * group_in
            dst0 = (ob * in_blocks + ib) * tile_size
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
