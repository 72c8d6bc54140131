"""A register tile written out in LLVM IR: P pixels x B output blocks of cb lanes.

The 1x1 convolution's tile is a small GEMM: ``acc[p, b] (a cb-lane vector)
+= x[p, i] * w[i, b]`` over the input lanes ``i`` of ``blocks`` input blocks.
Written in numba with a stack array for the accumulators, LLVM keeps that
array in memory (its store loop over the pixels stays a loop, so the array
is not split into registers): every tile stores the initial values, loads
them before its k loop, stores them after it and loads them again to write
the output. That is ~110 cycles per tile, against 6 per input lane of FMAs:
with the 16 to 64 input channels of MobileNetV2's 1x1 convs, a third to
two thirds of the time. Here the accumulators are SSA values from the first
load to the last store, so they live in ymm registers throughout.

``fma_tile`` is a numba intrinsic, called from a kernel as::

    fma_tile(P, B, cb,                 # compile-time constants (literals)
         x, x_offset, x_block_stride, blocks,
         w, w_offset, w_out_stride, w_in_stride,
         init, init_offset, init_pixel_stride, init_block_stride,
         residual, use_residual,
         y, y_offset, y_block_stride, first_pixel,
         clamp, lo, hi)

All offsets are flat element indices into C-contiguous float32 arrays, and
there is no bounds check: the caller keeps every access in bounds.

* accumulator ``(p, b)`` starts as the vector at ``init_offset +
  p * init_pixel_stride + b * init_block_stride`` of ``init`` (a bias: pixel
  stride 0; partial sums in the output: the output's strides), plus, when
  ``use_residual``, the vector at the output position of ``residual``;
* input block ``k`` (``k < blocks``): pixel ``p``'s lane ``i`` is
  ``x[x_offset + k * x_block_stride + p * cb + i]``, and its weights for
  output block ``b`` the vector at ``w_offset + k * w_in_stride + i * cb +
  b * w_out_stride`` of ``w``;
* the result goes to ``y_offset + p * cb + b * y_block_stride`` of ``y``
  for the pixels ``p >= first_pixel`` (a tile moved back over pixels that
  are already done computes them again but does not store them),
  clamped to ``[lo, hi]`` when ``clamp`` (``min(max(v, lo), hi)`` with NaN
  passing through, as numba's min and max do).

Per input block it also prefetches the input of the tile after next
(``2 * P * cb`` floats ahead), which a first pass over a chunk reads from
memory.
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


def _is_float_array(array) -> bool:
    return isinstance(array, types.Array) and array.layout == "C" and \
        array.dtype == types.float32


@intrinsic
def fma_tile(typingctx, P, B, cb, x, x_offset, x_block_stride, blocks, w, w_offset,
             w_out_stride, w_in_stride, init, init_offset, init_pixel_stride, init_block_stride,
             residual, use_residual, y, y_offset, y_block_stride, first_pixel, clamp, lo,
             hi):
    """The register tile of ``P`` pixels x ``B`` blocks of ``cb`` lanes (see
    the module docstring)."""
    if not all(isinstance(n, types.IntegerLiteral) for n in (P, B, cb)):
        return None          # numba then says the tile shape must be constant
    if not all(_is_float_array(a) for a in (x, w, init, residual, y)):
        return None
    shape_types = (P, B, cb)
    P, B, cb = (n.literal_value for n in shape_types)
    index = types.intp
    signature = types.void(*shape_types, x, index, index, index, w, index, index,
                           index, init, index, index, index, residual, types.boolean,
                           y, index, index, index, types.boolean, types.float32,
                           types.float32)

    def codegen(context, builder, sig, args):
        args = args[3:]
        (x_arg, x_offset, x_block_stride, blocks, w_arg, w_offset, w_out_stride,
         w_in_stride, init_arg, init_offset, init_pixel_stride, init_block_stride,
         residual_arg, use_residual, y_arg, y_offset, y_block_stride, first_pixel,
         clamp, lo, hi) = args

        def data(position):
            return context.make_array(sig.args[3 + position])(
                context, builder, args[position]).data
        x_data, w_data, init_data, residual_data, y_data = (
            data(0), data(4), data(8), data(12), data(14))
        i32, i64 = ir.IntType(32), ir.IntType(64)
        vector = ir.VectorType(ir.FloatType(), cb)

        def const(value):
            return ir.Constant(i64, value)

        def address(base, *terms):
            offset = base
            for term in terms:
                offset = builder.add(offset, term)
            return offset

        def vector_pointer(array_data, offset):
            return builder.bitcast(builder.gep(array_data, [offset]), vector.as_pointer())

        def load(array_data, offset):
            return builder.load(vector_pointer(array_data, offset), align=4)

        def splat(scalar):
            one = builder.insert_element(ir.Constant(vector, None), scalar, ir.Constant(i32, 0))
            return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(i32, cb),
                                                                [0] * cb))

        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{cb}f32")
        i8_pointer = ir.IntType(8).as_pointer()
        prefetch = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8_pointer, i32, i32, i32]),
            "llvm.prefetch.p0")
        tiles = [(p, b) for p in range(P) for b in range(B)]

        def output_offset(p, b):       # y's and the residual's element (p, b)
            return address(y_offset, const(p * cb), builder.mul(y_block_stride, const(b)))

        # --- initial values: init, plus the residual when asked ---------
        acc = [load(init_data, address(init_offset,
                                       builder.mul(init_pixel_stride, const(p)),
                                       builder.mul(init_block_stride, const(b))))
               for p, b in tiles]
        before = builder.block
        with builder.if_then(use_residual):
            with_residual = [builder.fadd(a, load(residual_data, output_offset(p, b)))
                             for a, (p, b) in zip(acc, tiles)]
            residual_end = builder.block
        merged = []
        for plain, summed in zip(acc, with_residual):
            phi = builder.phi(vector)
            phi.add_incoming(plain, before)
            phi.add_incoming(summed, residual_end)
            merged.append(phi)
        acc = merged

        # --- the k loop: per input lane, B weight vectors, P broadcasts --
        preheader = builder.block
        header = builder.append_basic_block("tile.k")
        body = builder.append_basic_block("tile.k.body")
        done = builder.append_basic_block("tile.k.done")
        builder.branch(header)
        builder.position_at_end(header)
        k = builder.phi(i64)
        x_at = builder.phi(i64)
        w_at = builder.phi(i64)
        acc_phis = [builder.phi(vector) for _ in tiles]
        for phi, value in zip([k, x_at, w_at] + acc_phis,
                              [const(0), x_offset, w_offset] + acc):
            phi.add_incoming(value, preheader)
        builder.cbranch(builder.icmp_signed("<", k, blocks), body, done)

        builder.position_at_end(body)
        for line in range((P * cb + 15) // 16):
            ahead = builder.gep(x_data, [address(x_at, const(2 * P * cb + 16 * line))])
            builder.call(prefetch, [builder.bitcast(ahead, i8_pointer), ir.Constant(i32, 0),
                                    ir.Constant(i32, 3), ir.Constant(i32, 1)])
        new = list(acc_phis)
        for lane in range(cb):
            weights = [load(w_data, address(w_at, const(lane * cb),
                                            builder.mul(w_out_stride, const(b))))
                       for b in range(B)]
            for p in range(P):
                pixel = builder.load(builder.gep(x_data, [address(x_at, const(p * cb + lane))]),
                                     align=4)
                broadcast = splat(pixel)
                for b in range(B):
                    new[p * B + b] = builder.call(fma, [broadcast, weights[b], new[p * B + b]])
        body_end = builder.block
        for phi, value in zip([k, x_at, w_at] + acc_phis,
                              [builder.add(k, const(1)), builder.add(x_at, x_block_stride),
                               builder.add(w_at, w_in_stride)] + new):
            phi.add_incoming(value, body_end)
        builder.branch(header)

        # --- store, clamped or not; pixels before first_pixel go to a scratch
        builder.position_at_end(done)
        with builder.goto_entry_block():
            scratch = builder.alloca(vector)

        def store_all(cropped):
            def target(p, b):
                pointer = vector_pointer(y_data, output_offset(p, b))
                if not cropped or p == P - 1:      # the last pixel is always stored
                    return pointer
                keep = builder.icmp_signed("<=", first_pixel, const(p))
                return builder.select(keep, pointer, scratch)

            with builder.if_else(clamp) as (clamped, unclamped):
                with clamped:
                    low, high = splat(lo), splat(hi)
                    for value, (p, b) in zip(acc_phis, tiles):
                        # max(v, lo) then min(., hi) as numba writes them: NaN stays NaN
                        value = builder.select(builder.fcmp_ordered(">", low, value), low, value)
                        value = builder.select(builder.fcmp_ordered("<", high, value), high,
                                               value)
                        builder.store(value, target(p, b), align=4)
                with unclamped:
                    for value, (p, b) in zip(acc_phis, tiles):
                        builder.store(value, target(p, b), align=4)

        # the cropped stores (a moved-back tile) as a separate branch: the
        # common whole tile stores without selects
        with builder.if_else(builder.icmp_signed("==", first_pixel, const(0))) as (whole, cropped):
            with whole:
                store_all(False)
            with cropped:
                store_all(True)
        return context.get_dummy_value()

    return signature, codegen
