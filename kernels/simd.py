"""Explicit SIMD building blocks that LLVM's vectorizers do not find alone.

``transpose_tile(n)`` returns a numba intrinsic that transposes an ``n x n``
float32 tile between two C-contiguous arrays, with ``n`` row loads, ``n * log2(n)``
``shufflevector`` instructions and ``n`` row stores (for ``n = 8`` on AVX2:
8 ``vmovups`` in, 24 ``vshufps``/``vunpck*pd``/``vperm2f128``, 8 out). The SLP
vectorizer turns the same loop written in Python into 64 scalar moves, which
is why the reorder kernels use this. ``transpose8_split`` is the 8 x 8 one
with split loads (:func:`load_transposed8`), measured faster for nchw ->
nChw8c.

Call it as ``transpose8(src, src_start, src_stride, dst, dst_start, dst_stride)``:
row ``r`` of the tile starts at flat element ``src_start + r * src_stride`` of
``src``; it becomes column ``r`` of the tile written at ``dst``. Offsets are flat
element indices into the arrays' data, so both arrays must be C-contiguous
(typing rejects other layouts) and the caller must keep every row in bounds:
there is no bounds check.

``streaming=True`` variants store with non-temporal hints (``vmovntps``: the
line goes to memory through a write-combining buffer, without being read
into the cache first and without evicting anything). They are for tensors
past the caches only, and every such store must be 32-byte aligned (a
misaligned one faults): the caller checks. (The reorders stream on x86
only, where they were measured.) A kernel that streams ends each
task with :func:`stream_fence`, so its stores are visible when it is done.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from . import _config


def store(builder: ir.IRBuilder, value, pointer, streaming: bool = False) -> None:
    """Store a vector: unaligned, or non-temporal at a 32-byte aligned ``pointer``."""
    if not streaming:
        builder.store(value, pointer, align=4)
        return
    instruction = builder.store(value, pointer, align=32)
    instruction.set_metadata(
        "nontemporal", builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))


@intrinsic
def stream_fence(typingctx):
    """Orders this thread's non-temporal stores before what follows: x86's
    ``sfence`` (LLVM's ``fence`` does not order them there), a sequentially
    consistent ``fence`` on other targets (AArch64: ``dmb ish``)."""
    def codegen(context, builder, sig, args):
        if _config.TARGET_X86:
            fence = builder.module.declare_intrinsic(
                "llvm.x86.sse.sfence", fnty=ir.FunctionType(ir.VoidType(), []))
            builder.call(fence, [])
        else:
            builder.fence("seq_cst")
        return context.get_dummy_value()

    return types.void(), codegen


def _swap_masks(n: int, span: int) -> tuple[list[int], list[int]]:
    """Shuffle masks of one transpose stage.

    Rows ``a`` and ``b = a + span`` swap their off-diagonal ``span``-wide
    blocks: ``a`` keeps its columns without bit ``span`` and takes ``b``'s, and
    vice versa. After stages ``n/2, n/4, ..., 1`` the tile is transposed.
    """
    low = [j if not (j & span) else n + j - span for j in range(n)]
    high = [j + span if not (j & span) else n + j for j in range(n)]
    return low, high


def transpose_halving(builder: ir.IRBuilder, rows: list, n: int) -> list:
    """Transpose n ``<n x float>`` vectors (an n x n tile) with the halving
    network: stages ``n/2, n/4, ..., 1`` of :func:`_swap_masks`, ``n * log2(n)``
    shuffles. Returns the n columns."""
    rows = list(rows)
    span = n // 2
    while span >= 1:
        low, high = _swap_masks(n, span)
        low_mask = ir.Constant(ir.VectorType(ir.IntType(32), n), low)
        high_mask = ir.Constant(ir.VectorType(ir.IntType(32), n), high)
        for a in range(n):
            if a & span:
                continue
            top, bottom = rows[a], rows[a + span]
            rows[a] = builder.shuffle_vector(top, bottom, low_mask)
            rows[a + span] = builder.shuffle_vector(top, bottom, high_mask)
        span //= 2
    return rows


def load_transposed8(builder: ir.IRBuilder, rows: list, columns: int = 8) -> list:
    """Load an 8 x 8 float32 tile and return its first ``columns`` (8 or 4)
    columns as ``<8 x float>`` (4: only the first 4 floats of each row are read).

    ``rows[r]`` is a ``float*`` to the first of row ``r``'s 8 floats, or None
    for a row of zeros (never read). The lane-crossing step of the transpose
    is done by the loads: vector ``k < 4`` is the first four floats of rows
    ``k`` and ``k + 4`` (``vmovups xmm`` + ``vinsertf128`` from memory), vector
    ``4 + k`` their last four. Two in-lane 4 x 4 transposes (16 unpck/shufps)
    finish it: column ``j < 4`` is ``(r0[j] .. r3[j] | r4[j] .. r7[j])``, the
    4 x 4 transpose of vectors 0-3 done in each 128-bit lane. The classic network (8 whole-row loads, 24 shuffles)
    spends 8 more ``vperm2f128`` on the shuffle port. Measured on 1 thread, in
    cache, in random order against it: nchw -> nChw8c 1-7 % faster; blocked ->
    nchw (-0.08 to +0.03 of np.copyto) and filter packing (-0.07 to +0.02) no
    better, so they keep whole-row loads.
    """
    i32 = ir.IntType(32)
    half = ir.VectorType(ir.FloatType(), 4)

    def shuffle(a, b, mask):
        return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(i32, len(mask)), mask))

    def load_half(r, first):
        if rows[r] is None:
            return ir.Constant(half, None)
        pointer = builder.gep(rows[r], [ir.Constant(i32, first)])
        return builder.load(builder.bitcast(pointer, half.as_pointer()), align=4)

    both_halves = list(range(8))
    transposed = []
    for first in range(0, columns, 4):      # columns 0-3, then 4-7
        a, b, c, d = (shuffle(load_half(k, first), load_half(k + 4, first), both_halves)
                      for k in range(4))
        ab_low = shuffle(a, b, [0, 8, 1, 9, 4, 12, 5, 13])
        ab_high = shuffle(a, b, [2, 10, 3, 11, 6, 14, 7, 15])
        cd_low = shuffle(c, d, [0, 8, 1, 9, 4, 12, 5, 13])
        cd_high = shuffle(c, d, [2, 10, 3, 11, 6, 14, 7, 15])
        low_pairs, high_pairs = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
        transposed += [shuffle(ab_low, cd_low, low_pairs), shuffle(ab_low, cd_low, high_pairs),
                       shuffle(ab_high, cd_high, low_pairs), shuffle(ab_high, cd_high, high_pairs)]
    return transposed


def transpose_tile(n: int, split_loads: bool = False, streaming: bool = False):
    """A numba intrinsic transposing an ``n x n`` float32 tile (``n`` a power of 2);
    ``split_loads`` (n = 8 only): load it with :func:`load_transposed8`;
    ``streaming``: non-temporal stores (see the module docstring)."""
    if n < 2 or n & (n - 1):
        raise ValueError(f"transpose_tile: n must be a power of two >= 2, got {n}")
    if split_loads and n != 8:
        raise ValueError(f"transpose_tile: split loads are for n = 8, got {n}")

    @intrinsic
    def transpose(typingctx, src, src_start, src_stride, dst, dst_start, dst_stride):
        for array in (src, dst):
            if not (isinstance(array, types.Array) and array.layout == "C"
                    and array.dtype == types.float32):
                return None
        signature = types.void(src, types.intp, types.intp, dst, types.intp, types.intp)

        def codegen(context, builder, sig, args):
            src_data = context.make_array(sig.args[0])(context, builder, args[0]).data
            dst_data = context.make_array(sig.args[3])(context, builder, args[3]).data
            vector = ir.VectorType(ir.FloatType(), n)
            index = args[1].type

            def row_pointer(data, start, stride, row):
                offset = builder.add(start, builder.mul(stride, ir.Constant(index, row)))
                return builder.bitcast(builder.gep(data, [offset]), vector.as_pointer())

            if split_loads:
                float_pointers = [builder.bitcast(row_pointer(src_data, args[1], args[2], r),
                                                  ir.FloatType().as_pointer()) for r in range(n)]
                rows = load_transposed8(builder, float_pointers)
            else:
                rows = [builder.load(row_pointer(src_data, args[1], args[2], r), align=4)
                        for r in range(n)]
                rows = transpose_halving(builder, rows, n)
            for r in range(n):
                store(builder, rows[r], row_pointer(dst_data, args[4], args[5], r), streaming)
            return context.get_dummy_value()

        return signature, codegen

    return transpose


transpose4 = transpose_tile(4)
transpose8 = transpose_tile(8)
transpose8_split = transpose_tile(8, split_loads=True)
transpose8_split_streaming = transpose_tile(8, split_loads=True, streaming=True)
transpose16 = transpose_tile(16)


def move_vector(n: int, streaming: bool = False):
    """A numba intrinsic copying ``n`` contiguous float32 from one C-contiguous
    array to another as one vector load and one vector store:
    ``move8(src, src_start, dst, dst_start)`` (flat element offsets, no bounds
    check). Written out because indexing ``dst[w, lane] = src[w, c0 + lane]``
    costs a negative-index fix-up per element that LLVM cannot remove.
    ``streaming``: a non-temporal store (see the module docstring)."""

    @intrinsic
    def move(typingctx, src, src_start, dst, dst_start):
        for array in (src, dst):
            if not (isinstance(array, types.Array) and array.layout == "C"
                    and array.dtype == types.float32):
                return None
        signature = types.void(src, types.intp, dst, types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), n)
            src_data = context.make_array(sig.args[0])(context, builder, args[0]).data
            dst_data = context.make_array(sig.args[2])(context, builder, args[2]).data
            source = builder.bitcast(builder.gep(src_data, [args[1]]), vector.as_pointer())
            target = builder.bitcast(builder.gep(dst_data, [args[3]]), vector.as_pointer())
            store(builder, builder.load(source, align=4), target, streaming)
            return context.get_dummy_value()

        return signature, codegen

    return move


move4 = move_vector(4)
move8 = move_vector(8)
move16 = move_vector(16)
move8_streaming = move_vector(8, streaming=True)


def _move8_straddle(streaming: bool):
    """``move8_straddle(src, first, second, dst, dst_start)``:
    ``dst[dst_start:+8] = src[first + 4:first + 8] ++ src[second:second + 4]``,
    the upper half of one 8-float vector and the lower half of another, as two
    whole-vector loads, one ``vperm2f128`` and one store (flat element offsets
    into C-contiguous float32 arrays, no bounds check). It lets a kernel whose
    target rows start 16 bytes past a 32-byte boundary store every vector
    aligned: two 16-byte loads and a ``vinsertf128`` instead measured slower
    than the unaligned stores they replaced. ``streaming``: a non-temporal
    store, which must be aligned anyway."""

    @intrinsic
    def move8_straddle(typingctx, src, first, second, dst, dst_start):
        if not all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
                   for a in (src, dst)):
            return None
        signature = types.void(src, types.intp, types.intp, dst, types.intp)

        def codegen(context, builder, sig, args):
            vector = ir.VectorType(ir.FloatType(), 8)
            src_data = context.make_array(sig.args[0])(context, builder, args[0]).data
            dst_data = context.make_array(sig.args[3])(context, builder, args[3]).data

            def pointer(data, offset):
                return builder.bitcast(builder.gep(data, [offset]), vector.as_pointer())

            upper_of = builder.load(pointer(src_data, args[1]), align=4)
            lower_of = builder.load(pointer(src_data, args[2]), align=4)
            halves = ir.Constant(ir.VectorType(ir.IntType(32), 8), [4, 5, 6, 7, 8, 9, 10, 11])
            store(builder, builder.shuffle_vector(upper_of, lower_of, halves),
                  pointer(dst_data, args[4]), streaming)
            return context.get_dummy_value()

        return signature, codegen

    return move8_straddle


move8_straddle = _move8_straddle(False)
move8_straddle_streaming = _move8_straddle(True)
