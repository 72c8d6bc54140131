"""Register tiles written out in LLVM IR: P pixels x B output blocks of cb lanes.

A convolution's tile is a small GEMM: ``acc[p, b] (a cb-lane vector) +=
x[p, i] * w[i, b]`` over the input lanes ``i`` of every (input block, tap)
step. Written in numba with a stack array for the accumulators, LLVM keeps
that array in memory (its store loop over the pixels stays a loop, so the
array is not split into registers): every tile stores the initial values,
loads them before its k loop, stores them after it and loads them again to
write the output. That is ~110 cycles per tile, against 6 per input lane of
FMAs: with the 16 to 64 input channels of MobileNetV2's 1x1 convs, a third
to two thirds of the time. Here the accumulators are SSA values from the
first load to the last store, so they live in ymm registers throughout.

Three numba intrinsics, called from the conv2d kernels (direct.py,
conv1x1.py, depthwise.py, winograd.py). All offsets are flat element indices
into C-contiguous arrays (float32 data, int64 offset tables), and there is
no bounds check: the caller keeps every access in bounds. ``P``, ``B`` and
``cb`` are compile-time constants (literals).

``fma_tile`` (the 1x1 conv: pixels adjacent, input blocks a stride apart)::

    fma_tile(P, B, cb,
             x, x_offset, x_block_stride, blocks,
             w, w_offset, w_out_stride,
             init, init_offset, init_pixel_stride, init_block_stride,
             residual, use_residual,
             y, y_offset, y_block_stride, first_pixel,
             clamp, lo, hi)

* accumulator ``(p, b)`` starts as the vector at ``init_offset +
  p * init_pixel_stride + b * init_block_stride`` of ``init`` (a bias: pixel
  stride 0; partial sums in the output: the output's strides), plus, when
  ``use_residual``, the vector at the output position of ``residual``;
* input block ``k`` (``k < blocks``): pixel ``p``'s lane ``i`` is
  ``x[x_offset + k * x_block_stride + p * cb + i]``, and its weights for
  output block ``b`` the vector at ``w_offset + k * cb * cb + i * cb +
  b * w_out_stride`` of ``w`` (the packed filter's order);
* the result goes to ``y_offset + p * cb + b * y_block_stride`` of ``y``
  for the pixels ``p >= first_pixel`` (a tile moved back over pixels that
  are already done computes them again but does not store them).

Per input block it also prefetches the input of the tile after next
(``2 * P * cb`` floats ahead), which a first pass over a chunk reads from
memory.

``conv_tile`` (the direct conv: any pixel positions, taps within a block)::

    conv_tile(P, B, cb, lanes, lanes_apart, pixel_step,
              x, pixel_x, tap_x, taps, steps, x_offset, x_block_stride,
              w, w_offset, w_block_stride, w_out_stride,
              bias, bias_offset, residual, use_residual,
              y, y_offset, pixel_y, y_block_stride, first_pixel,
              clamp, lo, hi, tiles,
              edges, row, height, column, width, tap_rc, zeros)

* accumulator ``(p, b)`` starts as ``bias[bias_offset + b * cb ...]`` plus,
  when ``use_residual``, the residual at the output position;
* step ``s`` (``s < steps``) is tap ``t = s % taps`` of input block ``k = s
  // taps``: pixel ``p``'s lane ``i`` (``i < lanes``) is ``x[pixel_x[p] +
  x_offset + k * x_block_stride + tap_x[2 * t] + i]``, and its weights for
  output block ``b`` the vector at ``w_offset + k * w_block_stride +
  tap_x[2 * t + 1] + i * cb + b * w_out_stride`` of ``w``: each tap has
  its own weight offset, so a tile may run any subset of a window's taps
  (a dilated conv's output pixels whose other taps read only padding).
  ``lanes`` is ``cb`` for a blocked input. A plain input (the first layer:
  its C channels a plane apart, ``lanes`` of them a step, 3 or 1) sets
  ``lanes_apart``: then every lane has its own entry, lane ``i`` of step
  ``s`` at ``tap_x[s * lanes + i]`` (without the ``+ i``), there is one
  block (``steps`` = taps x C / ``lanes``) and the weights walk on by
  ``lanes * cb`` per step from ``w_offset`` (the packed filter's order).
  ``lanes`` and ``lanes_apart`` are literals;
* the result goes to ``y_offset + pixel_y[p] + b * y_block_stride`` of ``y``
  for the pixels ``p >= first_pixel``;
* ``pixel_step`` (a literal) 0 reads every pixel's offsets from
  ``pixel_x`` and ``pixel_y``; otherwise the tile's pixels are adjacent in
  one output row: pixel ``p`` is at ``pixel_x[0] + p * pixel_step`` of the
  input and ``pixel_y[0] + p * cb`` of the output. Then every address is a
  base pointer plus a constant, where P offsets from the tables take P
  general registers (more than 8 pixels spilled them in the hot loop).
  With a ``pixel_step``, ``tiles`` tiles run one after the other along the
  row, each P pixels (``P * pixel_step`` input, ``P * cb`` output elements)
  past the last: a first layer's tile has few steps (27 lanes for 3x3 over 3
  channels), and setting up each tile in numba cost about as much again.
  Without one, ``tiles`` is ignored (one tile).
* ``edges`` (a literal; a blocked input's row tiles only) 0, or the input
  read in place of a padded copy: tap ``t`` reads only where its input row
  ``row + tap_rc[2 t + 1]`` is in ``[0, height)``, and the first and last
  ``edges`` pixels only where their column ``column + p * stride +
  tap_rc[2 t]`` is in ``[0, width)``; elsewhere the ``zeros`` (at least
  ``(P - 1) * pixel_step + cb`` of them), through one pointer select per
  tap (and edge pixel), not per lane.

``depthwise_tile`` (one output block; each lane its own channel)::

    depthwise_tile(P, cb, pixel_step,      # pixel_step: a literal or not
                   x, x_offset, row_stride, tap_stride, rows, taps,
                   w, w_offset, bias, bias_offset, residual, use_residual,
                   y, y_offset, first_pixel, clamp, lo, hi)

* accumulator ``p`` starts as ``bias[bias_offset ...]`` (+ the residual);
* tap ``(r, t)`` (``r < rows``, ``t < taps``) adds ``x[x_offset + r *
  row_stride + t * tap_stride + p * pixel_step ...]`` times the weight
  vector ``w_offset + (r * taps + t) * cb`` (lane by lane: no broadcast);
  with ``taps`` a literal (dilation 1: ``tap_stride`` is ``cb``, and
  ``pixel_step`` a literal ``stride * cb``) each input column is loaded once
  per row;
* the result goes to ``y_offset + p * cb`` for the pixels ``p >= first_pixel``.

``depthwise_edge_tile(..., column_lo, column_hi)`` (the sliding case only:
literal taps and pixel step, no ``tap_stride``) is the same tile over the
input's left or right border: it loads only the tile's input columns in
``[column_lo, column_hi)`` (masked loads) and takes the others as zeros.

All three clamp the result to ``[lo, hi]`` when ``clamp`` (``min(max(v, lo),
hi)`` with NaN passing through, as numba's min and max do).
"""

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_I32 = ir.IntType(32)
_I64 = ir.IntType(64)


def _is_array(array, dtype=types.float32) -> bool:
    return isinstance(array, types.Array) and array.layout == "C" and array.dtype == dtype


def _tile_shape(P, B, cb):
    """The literal tile shape, or None when it is not constant."""
    if not all(isinstance(n, types.IntegerLiteral) for n in (P, B, cb)):
        return None
    return tuple(n.literal_value for n in (P, B, cb))


def _counted_loop(builder, name: str, count, initial: list, body) -> list:
    """Emit a loop that runs ``count`` times (a count-down: one register)
    with loop-carried values: ``body(values)`` emits one iteration and
    returns the next values. Returns the values after the loop (the builder
    is left after it)."""
    one = ir.Constant(_I64, 1)
    preheader = builder.block
    header = builder.append_basic_block(name)
    loop_body = builder.append_basic_block(name + ".body")
    done = builder.append_basic_block(name + ".done")
    builder.branch(header)
    builder.position_at_end(header)
    remaining = builder.phi(_I64)
    carried = [builder.phi(value.type) for value in initial]
    for phi, value in zip([remaining] + carried, [count] + list(initial)):
        phi.add_incoming(value, preheader)
    builder.cbranch(builder.icmp_signed(">", remaining, ir.Constant(_I64, 0)), loop_body, done)
    builder.position_at_end(loop_body)
    following = body(carried)
    body_end = builder.block
    for phi, value in zip([remaining] + carried, [builder.sub(remaining, one)] + following):
        phi.add_incoming(value, body_end)
    builder.branch(header)
    builder.position_at_end(done)
    return carried


class _TileEmitter:
    """IR building blocks shared by both tiles: loads, FMAs, the k loop, stores."""

    def __init__(self, builder, P: int, B: int, cb: int):
        self.builder, self.P, self.B, self.cb = builder, P, B, cb
        self.vector = ir.VectorType(ir.FloatType(), cb)
        self.tiles = [(p, b) for p in range(P) for b in range(B)]
        # fmuladd, not fma: one FMA instruction where the target has them,
        # a multiply and an add where it does not (``llvm.fma`` must round
        # once, so without FMA units it became a libm call per lane: x86-64's
        # baseline, SSE2)
        self.fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(self.vector, [self.vector] * 3),
            f"llvm.fmuladd.v{cb}f32")

    @staticmethod
    def const(value: int):
        return ir.Constant(_I64, value)

    def add(self, *terms):
        total = terms[0]
        for term in terms[1:]:
            total = self.builder.add(total, term)
        return total

    def times(self, value, factor: int):
        return self.builder.mul(value, self.const(factor))

    def pointer(self, data, offset):
        return self.builder.bitcast(self.builder.gep(data, [offset]), self.vector.as_pointer())

    def load(self, data, offset):
        return self.builder.load(self.pointer(data, offset), align=4)

    def splat(self, scalar):
        builder = self.builder
        one = builder.insert_element(ir.Constant(self.vector, None), scalar, ir.Constant(_I32, 0))
        return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, self.cb),
                                                            [0] * self.cb))

    def plus_residual(self, acc, use_residual, residual_data, output_offset):
        """``acc`` plus the residual at each output position when ``use_residual``."""
        builder = self.builder
        before = builder.block
        with builder.if_then(use_residual):
            summed = [builder.fadd(a, self.load(residual_data, output_offset(p, b)))
                      for a, (p, b) in zip(acc, self.tiles)]
            after = builder.block
        merged = []
        for plain, with_residual in zip(acc, summed):
            phi = builder.phi(self.vector)
            phi.add_incoming(plain, before)
            phi.add_incoming(with_residual, after)
            merged.append(phi)
        return merged

    def k_loop(self, acc, steps, x_data, pixel_x, tap_offset, block_start, block_stride,
               taps, w_data, w_offset, w_out_stride, prefetch_ahead=None, lanes=None,
               lanes_apart=False, tap_weights=None, w_block_stride=None, edge_pixels=(),
               edge_pointer=None, row_pointer=None):
        """The hot loop over ``steps`` (input block, tap) steps; returns the sums.

        Per step: the input offset is ``block + tap_offset(t)`` (``t`` the tap,
        ``block`` the block's start), pixel ``p``'s lane ``i`` at that plus
        ``pixel_x[p] + i`` for ``i < lanes`` (default ``cb``); with
        ``lanes_apart``, lane ``i`` is at ``block + tap_offset(t * lanes + i)
        + pixel_x[p]`` instead, and the steps are the taps of one block (a
        plain input: ``steps == taps``). Per lane, B weight vectors and P
        broadcasts. The weights walk on by ``lanes * cb`` per step, or with
        ``tap_weights``, tap ``t`` of a block reads them at the block's start
        plus ``tap_weights(t)``, and the next block starts ``w_block_stride``
        further (the taps a tile runs need not be consecutive).

        ``row_pointer(tap, pointer)``: the step's input (``pointer``: pixel
        0's lane 0 at that tap) or, where the tap's row falls in
        the padding, zeros as long as the tile's input; ``edge_pixels``:
        pixels whose lanes of a step are read through ``edge_pointer(tap,
        p, pointer)`` (``pointer``: lane 0 of pixel ``p``'s input at that
        tap), the same or ``cb`` zeros where the tap's column falls in the
        padding (a row tile's borders, read in place: a select per step, not
        per lane)."""
        builder, const, P, B, cb = self.builder, self.const, self.P, self.B, self.cb
        lanes = cb if lanes is None else lanes
        # Pointers and a count-down as loop variables: with 6 pixel offsets
        # also live, offsets from base pointers ran out of registers (a
        # spill in the hot loop of the 3x3 conv).
        first_block = builder.gep(x_data, [block_start])
        first_weights = builder.gep(w_data, [w_offset])

        def step(values):
            tap, block, w_carried = values[:3]
            # w_carried: this step's weights (walking), or the block's first
            w_at = w_carried if tap_weights is None else \
                builder.gep(w_carried, [tap_weights(tap)])
            new = list(values[3:])
            if lanes_apart:
                first_entry = self.times(tap, lanes)
                lane_bases = [builder.gep(block, [tap_offset(self.add(first_entry, const(i)))])
                              for i in range(lanes)]
            else:
                base = builder.gep(block, [tap_offset(tap)])
                if row_pointer is not None:
                    base = row_pointer(tap, base)
                lane_bases = [builder.gep(base, [const(i)]) for i in range(lanes)]
                edge_at = {p: edge_pointer(tap, p, builder.gep(base, [pixel_x[p]]))
                           for p in edge_pixels}
            if prefetch_ahead is not None:
                i8_pointer = ir.IntType(8).as_pointer()
                prefetch = cgutils.get_or_insert_function(
                    builder.module,
                    ir.FunctionType(ir.VoidType(), [i8_pointer, _I32, _I32, _I32]),
                    "llvm.prefetch.p0")
                for line in range((P * cb + 15) // 16):
                    ahead = builder.gep(lane_bases[0], [self.add(pixel_x[0],
                                                        const(prefetch_ahead + 16 * line))])
                    # (address, read, keep in all cache levels, data)
                    builder.call(prefetch, [builder.bitcast(ahead, i8_pointer),
                                            ir.Constant(_I32, 0), ir.Constant(_I32, 3),
                                            ir.Constant(_I32, 1)])
            for lane in range(lanes):
                weights = [self.load(w_at, self.add(const(lane * cb),
                                                    self.times(w_out_stride, b)))
                           for b in range(B)]
                for p in range(P):
                    if not lanes_apart and p in edge_at:
                        pixel = builder.load(builder.gep(edge_at[p], [const(lane)]), align=4)
                    else:
                        pixel = builder.load(builder.gep(lane_bases[lane], [pixel_x[p]]),
                                             align=4)
                    broadcast = self.splat(pixel)
                    for b in range(B):
                        new[p * B + b] = builder.call(self.fma,
                                                      [broadcast, weights[b], new[p * B + b]])
            next_tap = builder.add(tap, const(1))
            if lanes_apart:          # a plain input is one block: no wrap
                return [next_tap, block, builder.gep(w_at, [const(lanes * cb)])] + new
            wrapped = builder.icmp_signed("==", next_tap, taps)
            if tap_weights is None:
                w_next = builder.gep(w_at, [const(lanes * cb)])
            else:
                w_next = builder.select(wrapped, builder.gep(w_carried, [w_block_stride]),
                                        w_carried)
            return [builder.select(wrapped, const(0), next_tap),
                    builder.select(wrapped, builder.gep(block, [block_stride]), block),
                    w_next] + new

        return _counted_loop(builder, "tile.k", steps,
                             [const(0), first_block, first_weights] + acc, step)[3:]

    def store(self, sums, y_data, output_offset, clamp, lo, hi, first_pixel=None):
        """Store the sums, clamped when ``clamp``; with ``first_pixel``, the
        pixels before it go to a scratch vector instead (as a separate branch:
        the common whole tile stores without selects)."""
        builder = self.builder
        with builder.goto_entry_block():
            scratch = builder.alloca(self.vector)

        def store_all(cropped):
            def target(p, b):
                pointer = self.pointer(y_data, output_offset(p, b))
                if not cropped or p == self.P - 1:     # the last pixel is always stored
                    return pointer
                keep = builder.icmp_signed("<=", first_pixel, self.const(p))
                return builder.select(keep, pointer, scratch)

            with builder.if_else(clamp) as (clamped, unclamped):
                with clamped:
                    low, high = self.splat(lo), self.splat(hi)
                    for value, (p, b) in zip(sums, self.tiles):
                        # max(v, lo) then min(., hi) as numba writes them: NaN stays NaN
                        value = builder.select(builder.fcmp_ordered(">", low, value), low, value)
                        value = builder.select(builder.fcmp_ordered("<", high, value), high,
                                               value)
                        builder.store(value, target(p, b), align=4)
                with unclamped:
                    for value, (p, b) in zip(sums, self.tiles):
                        builder.store(value, target(p, b), align=4)

        if first_pixel is None:
            store_all(False)
            return
        with builder.if_else(builder.icmp_signed("==", first_pixel, self.const(0))) as (
                whole, cropped):
            with whole:
                store_all(False)
            with cropped:
                store_all(True)


def _array_data(context, builder, array_type, value):
    return context.make_array(array_type)(context, builder, value).data


@intrinsic
def fma_tile(typingctx, P, B, cb, x, x_offset, x_block_stride, blocks, w, w_offset,
             w_out_stride, init, init_offset, init_pixel_stride, init_block_stride,
             residual, use_residual, y, y_offset, y_block_stride, first_pixel, clamp, lo,
             hi):
    """The 1x1 conv's register tile (see the module docstring)."""
    shape = _tile_shape(P, B, cb)
    if shape is None or not all(_is_array(a) for a in (x, w, init, residual, y)):
        return None              # numba then reports the call it cannot type
    index = types.intp
    signature = types.void(P, B, cb, x, index, index, index, w, index, index,
                           init, index, index, index, residual, types.boolean,
                           y, index, index, index, types.boolean, types.float32,
                           types.float32)

    def codegen(context, builder, sig, args):
        (x_arg, x_offset, x_block_stride, blocks, w_arg, w_offset, w_out_stride,
         init_arg, init_offset, init_pixel_stride, init_block_stride,
         residual_arg, use_residual, y_arg, y_offset, y_block_stride, first_pixel,
         clamp, lo, hi) = args[3:]
        x_data, w_data, init_data, residual_data, y_data = (
            _array_data(context, builder, sig.args[3 + i], args[3 + i])
            for i in (0, 4, 7, 11, 13))
        tile = _TileEmitter(builder, *shape)
        const, add, times = tile.const, tile.add, tile.times
        P, B, cb = shape

        def output_offset(p, b):         # y's and the residual's element (p, b)
            return add(y_offset, const(p * cb), times(y_block_stride, b))

        acc = [tile.load(init_data, add(init_offset, times(init_pixel_stride, p),
                                        times(init_block_stride, b)))
               for p, b in tile.tiles]
        acc = tile.plus_residual(acc, use_residual, residual_data, output_offset)
        # one tap per input block
        sums = tile.k_loop(acc, blocks, x_data, [const(p * cb) for p in range(P)],
                           lambda tap: x_offset, const(0), x_block_stride, const(1),
                           w_data, w_offset, w_out_stride, prefetch_ahead=2 * P * cb)
        tile.store(sums, y_data, output_offset, clamp, lo, hi, first_pixel)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def conv_tile(typingctx, P, B, cb, lanes, lanes_apart, pixel_step, x, pixel_x, tap_x, taps,
              steps,
              x_offset, x_block_stride, w, w_offset, w_block_stride, w_out_stride, bias,
              bias_offset, residual, use_residual, y, y_offset, pixel_y, y_block_stride,
              first_pixel, clamp, lo, hi, tiles, edges, row, height, column, width, tap_rc,
              zeros):
    """The direct conv's register tile (see the module docstring)."""
    shape = _tile_shape(P, B, cb)
    if shape is None or not isinstance(lanes, types.IntegerLiteral) or \
            not isinstance(lanes_apart, types.BooleanLiteral) or \
            not isinstance(pixel_step, types.IntegerLiteral) or \
            not isinstance(edges, types.IntegerLiteral) or \
            lanes.literal_value < 1 or pixel_step.literal_value < 0 or \
            not all(_is_array(a) for a in (x, w, bias, residual, y, zeros)) or \
            not all(_is_array(a, types.int64) for a in (pixel_x, tap_x, pixel_y, tap_rc)):
        return None
    edge_count = edges.literal_value
    # edges: a blocked row tile's pixels (pixel_step = stride * cb)
    if edge_count and (lanes_apart.literal_value or not pixel_step.literal_value
                       or pixel_step.literal_value % shape[2]):
        return None
    lanes_per_step, separate_lanes = lanes.literal_value, lanes_apart.literal_value
    index = types.intp
    adjacent_step = pixel_step.literal_value
    signature = types.void(P, B, cb, lanes, lanes_apart, pixel_step, x, pixel_x, tap_x, index,
                           index,
                           index, index,
                           w, index, index, index, bias, index, residual, types.boolean,
                           y, index, pixel_y, index, index, types.boolean, types.float32,
                           types.float32, index, edges, index, index, index, index, tap_rc,
                           zeros)

    def codegen(context, builder, sig, args):
        (x_arg, pixel_x_arg, tap_x_arg, taps, steps, x_offset, x_block_stride,
         w_arg, w_offset, w_block_stride, w_out_stride, bias_arg, bias_offset, residual_arg,
         use_residual, y_arg, y_offset, pixel_y_arg, y_block_stride, first_pixel, clamp, lo,
         hi, tiles, _, row, height, column, width) = args[6:35]
        (x_data, pixel_x_data, tap_x_data, w_data, bias_data, residual_data, y_data,
         pixel_y_data, tap_rc_data, zeros_data) = (
            _array_data(context, builder, sig.args[6 + i], args[6 + i])
            for i in (0, 1, 2, 7, 11, 13, 15, 17, 29, 30))
        tile = _TileEmitter(builder, *shape)
        const, add, times = tile.const, tile.add, tile.times
        P, B, cb = shape

        def entry(data, i):
            return builder.load(builder.gep(data, [const(i)]), align=8)

        def entry_at(i):                 # tap_x[i], i not a constant
            return builder.load(builder.gep(tap_x_data, [i]), align=8)
        if adjacent_step:
            # pixel 0's offsets join the bases, the others are constants past them
            x_offset = add(x_offset, entry(pixel_x_data, 0))
            y_offset = add(y_offset, entry(pixel_y_data, 0))
            pixel_x = [const(p * adjacent_step) for p in range(P)]
            pixel_y = [const(p * cb) for p in range(P)]
        else:
            pixel_x = [entry(pixel_x_data, p) for p in range(P)]
            pixel_y = [entry(pixel_y_data, p) for p in range(P)]

        # edges: a tap reads the input only where its row (the tile's taps
        # (0, 0) at ``row``, tap t's ``tap_rc[2 t + 1]`` further) is in [0,
        # height), and the first and last ``edges`` pixels of the tile (a
        # row's border pixels) only where their column (pixel 0's at
        # ``column``, pixel p's ``p * stride`` further, tap t's ``tap_rc[2 t]``
        # further) is in [0, width); zeros elsewhere
        edge_pixels = sorted({p for p in range(P) if p < edge_count or p >= P - edge_count})
        stride = adjacent_step // cb

        def tap_entry(tap, second):
            return builder.load(builder.gep(tap_rc_data, [add(times(tap, 2), const(second))]),
                                align=8)

        def row_pointer(tap, pointer):
            inside = builder.icmp_unsigned("<", add(row, tap_entry(tap, 1)), height)
            return builder.select(inside, pointer, zeros_data)

        def one_tile(offsets):
            x_at, y_at, column_at = offsets

            def edge_pointer(tap, p, pointer):
                col = add(column_at, const(p * stride), tap_entry(tap, 0))
                inside = builder.icmp_unsigned("<", col, width)
                return builder.select(inside, pointer, zeros_data)

            def output_offset(p, b):
                return add(y_at, pixel_y[p], times(y_block_stride, b))

            acc = [tile.load(bias_data, add(bias_offset, const(b * cb))) for p, b in tile.tiles]
            acc = tile.plus_residual(acc, use_residual, residual_data, output_offset)
            if separate_lanes:
                sums = tile.k_loop(acc, steps, x_data, pixel_x, lambda entry: entry_at(entry),
                                   x_at, x_block_stride, taps, w_data, w_offset, w_out_stride,
                                   lanes=lanes_per_step, lanes_apart=True)
            else:
                # (x offset, weight offset) pairs: one cache line holds both
                sums = tile.k_loop(acc, steps, x_data, pixel_x,
                                   lambda tap: entry_at(times(tap, 2)),
                                   x_at, x_block_stride, taps, w_data, w_offset, w_out_stride,
                                   lanes=lanes_per_step,
                                   tap_weights=lambda tap: entry_at(add(times(tap, 2),
                                                                        const(1))),
                                   w_block_stride=w_block_stride,
                                   edge_pixels=edge_pixels if edge_count else (),
                                   edge_pointer=edge_pointer,
                                   row_pointer=row_pointer if edge_count else None)
            tile.store(sums, y_data, output_offset, clamp, lo, hi, first_pixel)
            return [add(x_at, const(P * adjacent_step)), add(y_at, const(P * cb)),
                    add(column_at, const(P * stride))]

        if adjacent_step:
            # a run of ``tiles`` tiles along the row, each P pixels past the last
            _counted_loop(builder, "tile.run", tiles, [x_offset, y_offset, column], one_tile)
        else:
            one_tile([x_offset, y_offset, column])
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def depthwise_tile(typingctx, P, cb, pixel_step, x, x_offset, row_stride, tap_stride, rows, taps,
                   w, w_offset, bias, bias_offset, residual, use_residual, y, y_offset,
                   first_pixel, clamp, lo, hi):
    """The depthwise conv's register tile (see the module docstring)."""
    shape = _tile_shape(P, types.IntegerLiteral(1), cb)
    if shape is None or not all(_is_array(a) for a in (x, w, bias, residual, y)):
        return None
    # the pixel step (stride x cb) as a constant when the caller has one:
    # then every load is a fixed offset from one pointer
    step_is_constant = isinstance(pixel_step, types.IntegerLiteral)
    # a constant tap count (dilation 1, tap stride cb, a constant pixel step
    # of a whole number of blocks) slides along the row instead (see below)
    sliding = isinstance(taps, types.IntegerLiteral)
    if sliding and not (step_is_constant and pixel_step.literal_value % cb.literal_value == 0):
        return None
    index = types.intp
    signature = types.void(P, cb, pixel_step if step_is_constant else index, x, index, index,
                           index, index, taps if sliding else index, w, index, bias, index,
                           residual,
                           types.boolean, y, index, index, types.boolean, types.float32,
                           types.float32)

    def codegen(context, builder, sig, args):
        (x_arg, x_offset, row_stride, tap_stride, rows, taps, w_arg, w_offset, bias_arg,
         bias_offset, residual_arg, use_residual, y_arg, y_offset, first_pixel, clamp, lo,
         hi) = args[3:]
        x_data, w_data, bias_data, residual_data, y_data = (
            _array_data(context, builder, sig.args[3 + i], args[3 + i])
            for i in (0, 6, 8, 10, 12))
        tile = _TileEmitter(builder, *shape)
        const, add = tile.const, tile.add
        P, _, cb = shape
        if step_is_constant:
            pixel_step = const(sig.args[2].literal_value)
        else:
            pixel_step = args[2]

        def output_offset(p, b):
            return add(y_offset, const(p * cb))

        start = tile.load(bias_data, bias_offset)
        acc = tile.plus_residual([start] * P, use_residual, residual_data, output_offset)
        if sliding:
            sums = _depthwise_rows_sliding(builder, tile, acc, x_data, x_offset, row_stride,
                                           rows, sig.args[8].literal_value,
                                           sig.args[2].literal_value // cb, w_data, w_offset)
            tile.store(sums, y_data, output_offset, clamp, lo, hi, first_pixel)
            return context.get_dummy_value()

        # taps in the packed order: kw inside kh; the weights walk on by cb
        first_x, first_w = builder.gep(x_data, [x_offset]), builder.gep(w_data, [w_offset])

        def tap_step(values):
            column, x_at, w_at = values[:3]
            weight = tile.load(w_at, const(0))
            new = []
            pixel = x_at
            for p in range(P):
                # a chain of pointer adds, not P offsets kept live (the runtime
                # stride ran out of registers); constant steps fold into the loads
                new.append(builder.call(tile.fma, [tile.load(pixel, const(0)), weight,
                                                   values[3 + p]]))
                pixel = builder.gep(pixel, [pixel_step])
            next_column = builder.add(column, const(1))
            wrapped = builder.icmp_signed("==", next_column, taps)
            # the next tap: one column on, or the first column of the next row
            next_row = builder.gep(x_at, [builder.sub(row_stride,
                                                      builder.mul(tap_stride, column))])
            return [builder.select(wrapped, const(0), next_column),
                    builder.select(wrapped, next_row, builder.gep(x_at, [tap_stride])),
                    builder.gep(w_at, [const(cb)])] + new

        sums = _counted_loop(builder, "dw.tap", builder.mul(rows, taps),
                             [const(0), first_x, first_w] + acc, tap_step)[3:]
        tile.store(sums, y_data, output_offset, clamp, lo, hi, first_pixel)
        return context.get_dummy_value()

    return signature, codegen


@intrinsic
def depthwise_edge_tile(typingctx, P, cb, pixel_step, x, x_offset, row_stride, rows, taps, w,
                        w_offset, bias, bias_offset, residual, use_residual, y, y_offset,
                        first_pixel, clamp, lo, hi, column_lo, column_hi):
    """``depthwise_tile`` with a literal ``taps`` and ``pixel_step`` (dilation
    1, the tap stride ``cb``) over the border of the input: it reads only its
    input columns ``column_lo <= c < column_hi`` (``c`` from 0, the tile's
    first input column, to ``(P - 1) * stride + taps``), the others are zero
    padding. Rows outside the input are the caller's: it clips ``rows``."""
    shape = _tile_shape(P, types.IntegerLiteral(1), cb)
    if (shape is None or not all(_is_array(a) for a in (x, w, bias, residual, y))
            or not isinstance(taps, types.IntegerLiteral)
            or not isinstance(pixel_step, types.IntegerLiteral)
            or pixel_step.literal_value % cb.literal_value):
        return None
    index = types.intp
    signature = types.void(P, cb, pixel_step, x, index, index, index, taps, w, index, bias,
                           index, residual, types.boolean, y, index, index, types.boolean,
                           types.float32, types.float32, index, index)

    def codegen(context, builder, sig, args):
        (x_offset, row_stride, rows, _, _, w_offset, _, bias_offset, _, use_residual, _,
         y_offset, first_pixel, clamp, lo, hi, column_lo, column_hi) = args[4:]
        x_data, w_data, bias_data, residual_data, y_data = (
            _array_data(context, builder, sig.args[i], args[i]) for i in (3, 8, 10, 12, 14))
        tile = _TileEmitter(builder, *shape)
        cb = shape[2]

        def output_offset(p, b):
            return tile.add(y_offset, tile.const(p * cb))

        acc = tile.plus_residual([tile.load(bias_data, bias_offset)] * shape[0], use_residual,
                                 residual_data, output_offset)
        sums = _depthwise_rows_sliding(builder, tile, acc, x_data, x_offset, row_stride, rows,
                                       sig.args[7].literal_value,
                                       sig.args[2].literal_value // cb, w_data, w_offset,
                                       (column_lo, column_hi))
        tile.store(sums, y_data, output_offset, clamp, lo, hi, first_pixel)
        return context.get_dummy_value()

    return signature, codegen


def _depthwise_rows_sliding(builder, tile, acc, x_data, x_offset, row_stride, rows, taps,
                            stride, w_data, w_offset, columns=None):
    """Dilation 1, ``taps`` and ``stride`` known: per kernel row, each of the
    ``(P - 1) * stride + taps`` input columns is loaded once and feeds the
    pixels it is a tap of (column ``c`` is tap ``t`` of pixel ``(c - t) /
    stride``). A 3x3 tile of 7 pixels loads ``3 x 9`` vectors at stride 1 and
    ``3 x 15`` at stride 2 instead of ``3 x 3 x 7``: FMA-bound instead of
    load-bound at stride 1. With ``columns`` (``(lo, hi)``, i64 values), only
    columns ``lo <= c < hi`` are read, the others are zero (masked loads: a
    tile over the input's border reads nothing outside it). Returns the sums."""
    const, P, cb = tile.const, tile.P, tile.cb
    first_x, first_w = builder.gep(x_data, [x_offset]), builder.gep(w_data, [w_offset])
    count = (P - 1) * stride + taps
    if columns is not None:
        # one mask per column, the same for every kernel row (hoisted here)
        i1s = ir.VectorType(ir.IntType(1), cb)
        masked_load = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(tile.vector, [tile.vector.as_pointer(), _I32, i1s, tile.vector]),
            f"llvm.masked.load.v{cb}f32.p0")
        masks = []
        for column in range(count):
            inside = builder.and_(builder.icmp_signed("<=", columns[0], const(column)),
                                  builder.icmp_signed(">", columns[1], const(column)))
            splat = builder.insert_element(ir.Constant(i1s, None), inside, ir.Constant(_I32, 0))
            masks.append(builder.shuffle_vector(splat, splat,
                                                ir.Constant(ir.VectorType(_I32, cb), [0] * cb)))

    def load_column(x_row, column):
        if columns is None:
            return tile.load(x_row, const(column * cb))
        return builder.call(masked_load, [tile.pointer(x_row, const(column * cb)),
                                          ir.Constant(_I32, 4), masks[column],
                                          ir.Constant(tile.vector, None)])

    def row_step(values):
        x_row, w_row = values[:2]
        weights = [tile.load(w_row, const(t * cb)) for t in range(taps)]
        new = list(values[2:])
        for column in range(count):
            value = load_column(x_row, column)
            for t in range(taps):
                p, off_grid = divmod(column - t, stride)   # the pixel this column is tap t of
                if off_grid == 0 and 0 <= p < P:
                    new[p] = builder.call(tile.fma, [value, weights[t], new[p]])
        return [builder.gep(x_row, [row_stride]), builder.gep(w_row, [const(taps * cb)])] + new

    return _counted_loop(builder, "dw.row", rows, [first_x, first_w] + acc, row_step)[2:]
