"""Explicit SIMD building blocks that LLVM's vectorizers do not find alone.

``transpose_tile(n)`` returns a numba intrinsic that transposes an ``n x n``
float32 tile between two C-contiguous arrays, with ``n`` row loads, ``n * log2(n)``
``shufflevector`` instructions and ``n`` row stores (for ``n = 8`` on AVX2:
8 ``vmovups`` in, 24 ``vshufps``/``vunpck*pd``/``vperm2f128``, 8 out). The SLP
vectorizer turns the same loop written in Python into 64 scalar moves, which
is why the reorder kernels use this.

Call it as ``transpose8(src, src_start, src_stride, dst, dst_start, dst_stride)``:
row ``r`` of the tile starts at flat element ``src_start + r * src_stride`` of
``src``; it becomes column ``r`` of the tile written at ``dst``. Offsets are flat
element indices into the arrays' data, so both arrays must be C-contiguous
(typing rejects other layouts) and the caller must keep every row in bounds:
there is no bounds check.
"""

from llvmlite import ir
from numba import types
from numba.extending import intrinsic


def _swap_masks(n: int, span: int) -> tuple[list[int], list[int]]:
    """Shuffle masks of one transpose stage.

    Rows ``a`` and ``b = a + span`` swap their off-diagonal ``span``-wide
    blocks: ``a`` keeps its columns without bit ``span`` and takes ``b``'s, and
    vice versa. After stages ``n/2, n/4, ..., 1`` the tile is transposed.
    """
    low = [j if not (j & span) else n + j - span for j in range(n)]
    high = [j + span if not (j & span) else n + j for j in range(n)]
    return low, high


def transpose_tile(n: int):
    """A numba intrinsic transposing an ``n x n`` float32 tile (``n`` a power of 2)."""
    if n < 2 or n & (n - 1):
        raise ValueError(f"transpose_tile: n must be a power of two >= 2, got {n}")

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

            rows = [builder.load(row_pointer(src_data, args[1], args[2], r), align=4)
                    for r in range(n)]
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
            for r in range(n):
                builder.store(rows[r], row_pointer(dst_data, args[4], args[5], r), align=4)
            return context.get_dummy_value()

        return signature, codegen

    return transpose


transpose4 = transpose_tile(4)
transpose8 = transpose_tile(8)
transpose16 = transpose_tile(16)


def move_vector(n: int):
    """A numba intrinsic copying ``n`` contiguous float32 from one C-contiguous
    array to another as one vector load and one vector store:
    ``move8(src, src_start, dst, dst_start)`` (flat element offsets, no bounds
    check). Written out because indexing ``dst[w, lane] = src[w, c0 + lane]``
    costs a negative-index fix-up per element that LLVM cannot remove."""

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
            builder.store(builder.load(source, align=4), target, align=4)
            return context.get_dummy_value()

        return signature, codegen

    return move


move4 = move_vector(4)
move8 = move_vector(8)
move16 = move_vector(16)
