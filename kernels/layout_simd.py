"""Register intrinsics for partial channel blocks, used by the reorders
(:mod:`.layout`, :mod:`.layout_nhwc`) and by filter packing
(:mod:`.filter_packing`).

Like :func:`.simd.transpose_tile` and :func:`.simd.move_vector` (the same
argument conventions: flat element offsets into C-contiguous float32
arrays, no bounds check), with a runtime count of valid rows or lanes: a
partial block (C = 3 at cb = 8) goes through the same vector code with zero
rows or masked lanes instead of element loops.

* ``transpose{4,8}_padded``: source rows past ``rows`` read as zeros (nchw ->
  nChw{cb}c: the missing channels of the last block);
* ``transpose{4,8}_cropped``, ``transpose8_pair_cropped``: only the first
  ``rows`` output rows are stored (nChw{cb}c -> nchw: the real channels);
* ``move{4,8}_padded``: a pixel's last ``lanes < cb`` channels into a whole
  block, the rest zero (nhwc -> nChw{cb}c); ``move{4,8}_cropped``: the
  reverse, storing only the real lanes.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd import load_transposed8, transpose_halving


# --- IR helpers -----------------------------------------------------------------

def _check_arrays(*arrays):
    return all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
               for a in arrays)


def _data(context, builder, array_type, value):
    return context.make_array(array_type)(context, builder, value).data


# --- transposes -----------------------------------------------------------------

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


# --- moves of one pixel's block ---------------------------------------------------

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
