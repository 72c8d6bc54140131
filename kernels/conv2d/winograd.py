"""Winograd F(4x4, 3x3) convolution on blocked ``nChw{cb}c`` tensors.

A 3x3 convolution with stride 1 computes each 4 x 4 tile of output pixels
from a 6 x 6 patch of input. Winograd's minimal filtering algorithm does it
with 36 multiplications per (input, output channel) pair instead of 144:
transform the patch (``V = Bt d B``) and the filter (``U = G g Gt``), multiply
them element by element and sum over the input channels (``M = sum U * V``),
and transform back (``Y = At M A``). Summed over channels, the element-wise
products are 36 independent GEMMs, one per position ``xi`` of the 6 x 6
transform: ``M[xi] (tiles x O) = V[xi] (tiles x C) @ U[xi] (C x O)``. They do
4x fewer FLOPs than the direct convolution, at the price of the transforms
(cheap: additions on vectors of cb lanes) and of rounding: the transforms'
constants (up to 8 and 1/24) make the result ~10x less exact than the direct
sum (relative error ~1e-6 -> ~1e-5 in float32; see the tests). Non-finite
input spreads further than in the direct sum: the transforms mix every pixel
of a patch (with subtractions, so inf - inf = NaN), and a NaN or inf input
pixel turns most of the 4 x 4 output tiles whose patches hold it NaN, not only
its 3 x 3 neighbours (measured: 2554 NaN outputs for one NaN and one inf
pixel at 64 channels, 28 x 28, where the direct sum gives 576 NaN and 576 inf).

Buffers (float32, C-contiguous; ``cb`` the channel block, ``CB = C_phys //
cb``, ``OB = O_phys // cb``; ``TH x TW`` tiles per image, numbered row-major;
the work goes in chunks of ``G`` tile rows, counted over all images (row
``g = n * TH + th``), ``T_pad`` = a chunk's ``G * TW`` tiles rounded up to
whole register tiles):

* input:   ``x: (N, CB, H, W, cb)``; padding lanes zero
* filter:  ``u: (36, OB, CB, cb, cb)``: ``u[xi, ob, ib, i, o]`` is position
  ``xi`` of ``G g Gt`` for input channel ``ib*cb + i`` and output channel
  ``ob*cb + o`` (:func:`transform_filter`; for each ``xi`` the 1x1 conv's
  packed layout, so the products are the 1x1 conv's register tile)
* scratch (one caller's buffer, :func:`scratch_floats`), one chunk's
  ``v: (36, CB, T_pad, cb)``, the transformed input tiles (tiles past the
  chunk's are zero), then ``m: (36, OB, T_pad, cb)``, the products; both
  strided (:func:`buffer_strides`): each block's row of ``T_pad * cb``
  floats and each position are padded to an odd number of 64-byte lines
* bias ``(O_phys,)``, residual and output ``y: (N, OB, OH, OW, cb)`` as in
  :mod:`conv2d` (every output element written, padding lanes zero)

For each chunk (:func:`chunk_rows`), three parallel phases, each over
independent tasks: input transform (one task per input block and tile
row), products (one task per position ``xi``: its ``V[xi]`` stays in L2
while every output-block group runs over it with that group's weights in
L1), output transform with the epilogue (one task per output block and
tile row: bias, residual, clamp or activation, padding lanes zeroed). A
chunk may hold tiles of several images: the products do not care whose
tiles they multiply.

The transform matrices (interpolation points 0, 1, -1, 2, -2 and infinity,
as in Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks")::

    Bt = [4  0 -5  0  1  0]    G = [ 1/4     0     0]    At = [1  1  1  1  1  0]
         [0 -4 -4  1  1  0]        [-1/6  -1/6  -1/6]         [0  1 -1  2 -2  0]
         [0  4 -4 -1  1  0]        [-1/6   1/6  -1/6]         [0  1  1  4  4  0]
         [0 -2 -1  2  1  0]        [1/24  1/12   1/6]         [0  1 -1  8 -8  1]
         [0  2 -1 -2  1  0]        [1/24 -1/12   1/6]
         [0  4  0 -5  0  1]        [   0     0     1]
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np
from llvmlite import ir
from numba import literally, prange, types
from numba.extending import intrinsic

from .._config import jit, parallel_kernel
from .._linking import made_by
from ..epilogue import activate_pixels
from ..stack import stack_empty
from .geometry import Epilogue
from .register_tile import fma_tile

#: output pixels per tile side, input pixels per patch side, positions
TILE = 4
PATCH = 6
POSITIONS = PATCH * PATCH
_MAX_LANES = 32
_PATCH_ELEMENTS = POSITIONS * _MAX_LANES
_ROW_ELEMENTS = TILE * _MAX_LANES
_ZERO = np.float32(0.0)

G = np.array([[1 / 4, 0, 0],
              [-1 / 6, -1 / 6, -1 / 6],
              [-1 / 6, 1 / 6, -1 / 6],
              [1 / 24, 1 / 12, 1 / 6],
              [1 / 24, -1 / 12, 1 / 6],
              [0, 0, 1]])
BT = np.array([[4, 0, -5, 0, 1, 0],
               [0, -4, -4, 1, 1, 0],
               [0, 4, -4, -1, 1, 0],
               [0, -2, -1, 2, 1, 0],
               [0, 2, -1, -2, 1, 0],
               [0, 4, 0, -5, 0, 1]], dtype=np.float64)
AT = np.array([[1, 1, 1, 1, 1, 0],
               [0, 1, -1, 2, -2, 0],
               [0, 1, 1, 4, 4, 0],
               [0, 1, -1, 8, -8, 1]], dtype=np.float64)


class WinogradGeometry(NamedTuple):
    """A convolution as the Winograd driver sees it (built by
    :func:`.plan._plan_conv2d`, passed as a plain tuple: see
    :mod:`.geometry`). The first ten fields as in :class:`.geometry.ConvGeometry`."""
    N: int
    CB: int
    H: int
    W: int
    OB: int
    OH: int
    OW: int
    pt: int
    pl: int
    O: int
    TH: int         # tile rows per image
    TW: int         # tile columns
    T_pad: int      # tiles of the largest chunk, rounded up to whole register tiles
    G: int          # tile rows per chunk (of all images' rows)


def transform_filter(packed_direct: np.ndarray, out: np.ndarray) -> np.ndarray:
    """``u = G g Gt`` for every (output, input) channel pair, into ``out``
    ``(36, OB, CB, cb, cb)``, from the direct path's packed 3x3 filter
    ``(OB, CB, 3, 3, cb, cb)`` (zero lanes stay zero). In float64, rounded once."""
    OB, CB, _, _, ci, co = packed_direct.shape
    # batched (6 x 3) products over (ob, ib): the rows (kh -> r), then the
    # columns (kw -> c); tensordot's transposed copies took 10x as long
    # (330 against 34 ms for 512 x 512 channels: ResNet-50's first run
    # spent 0.8 s here). A few output blocks at a time: the float64
    # temporaries of a whole 512 x 512 filter (g, rows, u: 132 MB) were most
    # of ResNet-50's peak memory while it packed; each slice's products are
    # the same, so are the bits.
    step = max(1, _TRANSFORM_FLOATS // (36 * CB * ci * co))
    view = out.reshape(6, 6, OB, CB, ci, co)
    for ob in range(0, OB, step):
        part = packed_direct[ob:ob + step]
        n = part.shape[0]
        g = part.astype(np.float64).reshape(n * CB, 3, 3 * ci * co)
        rows = np.matmul(G, g).reshape(n * CB * 6, 3, ci * co)    # (ob, ib, r), kw
        u = np.matmul(G, rows).reshape(n, CB, 6, 6, ci, co)       # (ob, ib, r, c, i, o)
        view[:, :, ob:ob + n] = u.transpose(2, 3, 0, 1, 4, 5)
    return out


#: float64 values of the transformed filter that :func:`transform_filter` makes at once
_TRANSFORM_FLOATS = 2**19


def tile_counts(out_h: int, out_w: int) -> tuple[int, int]:
    """``(tile rows, tile columns)`` covering an ``out_h x out_w`` output."""
    return -(-out_h // TILE), -(-out_w // TILE)


@jit()
def _odd_lines(floats):
    """``floats`` rounded up to an odd number of 64-byte lines (16 floats)."""
    return ((floats + 15) // 16 | 1) * 16


@jit()
def buffer_strides(CB, OB, T_pad, cb):
    """``(row, v_position, m_position)``: the floats from one block's row of
    ``T_pad`` tiles to the next in ``v`` and ``m``, and from one position
    ``xi`` to the next in ``v`` and in ``m``.

    Each is an odd number of 64-byte lines. Rows or positions an even
    number of lines apart fall into a few of the L1's 64 sets: a tile's
    transform writes (or reads) its 36 positions at once, the products read
    K-blocks rows, and they evicted each other. At 64 x 48 x 48 (T_pad 144)
    the 36 positions were 576 lines apart, all in one set: the input
    transform took 1.47 us per tile against 0.53 at 56 x 56."""
    row = _odd_lines(T_pad * cb)
    return row, _odd_lines(CB * row), _odd_lines(OB * row)


# --- the 1-D transforms, on vectors of cb lanes --------------------------------------
# Written once as formulas on "vectors" (anything with + - and * by a float:
# numpy arrays in the reference and the tests, LLVM values in the kernels),
# factored so each output takes 2-3 operations.

def input_transform_1d(d):
    """``Bt @ (d0 .. d5)``."""
    d0, d1, d2, d3, d4, d5 = d
    return [4.0 * d0 - 5.0 * d2 + d4,
            (d3 + d4) - 4.0 * (d1 + d2),
            4.0 * (d1 - d2) + (d4 - d3),
            2.0 * (d3 - d1) + (d4 - d2),
            2.0 * (d1 - d3) + (d4 - d2),
            4.0 * d1 - 5.0 * d3 + d5]


def output_transform_1d(m):
    """``At @ (m0 .. m5)``."""
    m0, m1, m2, m3, m4, m5 = m
    sum12, diff12, sum34, diff34 = m1 + m2, m1 - m2, m3 + m4, m3 - m4
    return [m0 + sum12 + sum34,
            diff12 + 2.0 * diff34,
            sum12 + 4.0 * sum34,
            diff12 + 8.0 * diff34 + m5]


class _IRVector:
    """An LLVM float vector with the arithmetic the formulas use (fmul and
    fadd may contract to an FMA)."""
    __slots__ = ("builder", "value")
    flags = ("contract",)

    def __init__(self, builder, value):
        self.builder, self.value = builder, value

    def __add__(self, other):
        return _IRVector(self.builder, self.builder.fadd(self.value, other.value,
                                                         flags=self.flags))

    def __sub__(self, other):
        return _IRVector(self.builder, self.builder.fsub(self.value, other.value,
                                                         flags=self.flags))

    def __rmul__(self, factor: float):
        constant = ir.Constant(self.value.type, [factor] * self.value.type.count)
        return _IRVector(self.builder, self.builder.fmul(constant, self.value,
                                                         flags=self.flags))


def _float32_c_arrays(*arrays) -> bool:
    return all(isinstance(a, types.Array) and a.layout == "C" and a.dtype == types.float32
               for a in arrays)


def _vector_pointer(builder, vector, data, offset, stride, k):
    """A pointer to the ``vector`` at flat float offset ``offset + k * stride`` of ``data``."""
    at = builder.add(offset, builder.mul(stride, ir.Constant(offset.type, k)))
    return builder.bitcast(builder.gep(data, [at]), vector.as_pointer())


def _load_six(builder, vector, data, offset, stride):
    """The 6 vectors at ``offset + k * stride`` (k < 6), as formula operands."""
    return [_IRVector(builder, builder.load(_vector_pointer(builder, vector, data, offset,
                                                            stride, k), align=4))
            for k in range(PATCH)]


def _vector_transform(formula):
    """A numba intrinsic ``t(cb, src, src_offset, src_stride, dst, dst_offset,
    dst_stride)``: load 6 vectors of ``cb`` (a literal) lanes at ``src_offset +
    k * src_stride`` (k < 6), apply ``formula``, store the vectors it returns
    at ``dst_offset + k * dst_stride``. Flat float32 offsets, no bounds check.
    (In numba, SLP-vectorized loops over a 6 x 6 x cb stack array came out
    at ~500 cycles per patch: the patch lived in registers and spilled.)"""

    @intrinsic
    def transform(typingctx, cb, src, src_offset, src_stride, dst, dst_offset, dst_stride):
        if not isinstance(cb, types.IntegerLiteral) or not _float32_c_arrays(src, dst):
            return None
        lanes = cb.literal_value
        index = types.intp
        signature = types.void(cb, src, index, index, dst, index, index)

        def codegen(context, builder, sig, args):
            _, src_arg, src_offset, src_stride, dst_arg, dst_offset, dst_stride = args
            vector = ir.VectorType(ir.FloatType(), lanes)
            src_data = context.make_array(sig.args[1])(context, builder, src_arg).data
            dst_data = context.make_array(sig.args[4])(context, builder, dst_arg).data
            values = _load_six(builder, vector, src_data, src_offset, src_stride)
            for k, result in enumerate(formula(values)):
                builder.store(result.value, _vector_pointer(builder, vector, dst_data,
                                                            dst_offset, dst_stride, k), align=4)
            return context.get_dummy_value()

        return signature, codegen

    return transform


input_transform6 = _vector_transform(input_transform_1d)
output_transform6 = _vector_transform(output_transform_1d)


@intrinsic
def output_columns_to_pixels(typingctx, cb, has_res, clamp, src, src_offset, src_stride, bias,
                             res, dst, dst_offset, dst_stride, rows, lo, hi):
    """``output_transform6`` with the epilogue, storing straight to the
    output: load 6 vectors of ``cb`` lanes at ``src_offset + k * src_stride``,
    transform them (``At``), and for each of the first ``rows`` (< 4) results
    ``i`` add the vector ``bias[0:cb]`` and, when ``has_res``, the residual
    at ``dst_offset + i * dst_stride`` of ``res``, clamp to ``[lo, hi]`` when
    ``clamp`` (NaN kept, as numba's ``min(max(v, lo), hi)``), and store it at
    ``dst_offset + i * dst_stride`` of ``dst``. ``cb``, ``has_res`` and
    ``clamp`` are literals (0 or 1 for the flags). The same additions, in the
    same order, as storing the column and adding bias and residual after."""
    if not all(isinstance(a, types.IntegerLiteral) for a in (cb, has_res, clamp)) or \
            not _float32_c_arrays(src, bias, res, dst):
        return None
    lanes = cb.literal_value
    add_residual, clamped = bool(has_res.literal_value), bool(clamp.literal_value)
    index = types.intp
    signature = types.void(cb, has_res, clamp, src, index, index, bias, res, dst, index, index,
                           index, types.float32, types.float32)

    def codegen(context, builder, sig, args):
        (_, _, _, src_arg, src_offset, src_stride, bias_arg, res_arg, dst_arg, dst_offset,
         dst_stride, rows, lo, hi) = args
        vector = ir.VectorType(ir.FloatType(), lanes)

        def data(position, value):
            return context.make_array(sig.args[position])(context, builder, value).data

        def splat(scalar):
            one = builder.insert_element(ir.Constant(vector, ir.Undefined), scalar,
                                         ir.Constant(ir.IntType(32), 0))
            return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                          ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                      [0] * lanes))

        src_data, bias_data = data(3, src_arg), data(6, bias_arg)
        res_data, dst_data = data(7, res_arg), data(8, dst_arg)
        values = _load_six(builder, vector, src_data, src_offset, src_stride)
        bias_vector = builder.load(builder.bitcast(bias_data, vector.as_pointer()), align=4)
        low, high = (splat(lo), splat(hi)) if clamped else (None, None)
        for i, result in enumerate(output_transform_1d(values)):
            # rows past the output (the last tile row) are neither read nor written
            with builder.if_then(builder.icmp_signed(">", rows, ir.Constant(rows.type, i))):
                value = builder.fadd(result.value, bias_vector)
                if add_residual:
                    value = builder.fadd(value, builder.load(_vector_pointer(
                        builder, vector, res_data, dst_offset, dst_stride, i), align=4))
                if clamped:
                    value = builder.select(builder.fcmp_ordered(">", low, value), low, value)
                    value = builder.select(builder.fcmp_ordered("<", high, value), high, value)
                builder.store(value, _vector_pointer(builder, vector, dst_data, dst_offset,
                                                     dst_stride, i), align=4)
        return context.get_dummy_value()

    return signature, codegen


# --- input transform ---------------------------------------------------------------

@jit(standalone=True)
def _input_row(xf, vf, geom, g0, g, g1, tiles_pad, ib, cb):
    """``V = Bt d B`` for the tiles of tile row ``g`` (of all images' rows,
    ``n * TH + th``), input block ``ib``, into chunk ``[g0, g1)``: the columns
    of each 6 x 6 patch (read in place, or from a zero-padded copy at the
    borders), then the rows, each row's 6 results to 6 positions of ``v``.
    The chunk's last row also zeroes its padding tiles, up to ``tiles_pad``.
    ``geom``: a :class:`WinogradGeometry`."""
    literally(cb)
    CB, H, W, OB, pt, pl = geom.CB, geom.H, geom.W, geom.OB, geom.pt, geom.pl
    TH, TW, T_pad = geom.TH, geom.TW, geom.T_pad
    n, th = g // TH, g % TH
    patch = numba.carray(stack_empty(_PATCH_ELEMENTS, np.float32), _PATCH_ELEMENTS)
    half = numba.carray(stack_empty(_PATCH_ELEMENTS, np.float32), _PATCH_ELEMENTS)
    x_base = (n * CB + ib) * H * W * cb
    row_stride, position_stride, _ = buffer_strides(CB, OB, T_pad, cb)
    v_base = ib * row_stride
    ih0 = th * TILE - pt
    rows_inside = ih0 >= 0 and ih0 + PATCH <= H
    row = PATCH * cb
    for tw in range(TW):
        iw0 = tw * TILE - pl
        if rows_inside and iw0 >= 0 and iw0 + PATCH <= W:
            # columns: half[r, c] = (Bt d)[r, c], read in place
            src = x_base + (ih0 * W + iw0) * cb
            for c in range(PATCH):
                input_transform6(cb, xf, src + c * cb, W * cb, half, c * cb, row)
        else:
            for r in range(PATCH):
                ih = ih0 + r
                for c in range(PATCH):
                    iw = iw0 + c
                    d = (r * PATCH + c) * cb
                    if 0 <= ih < H and 0 <= iw < W:
                        src = x_base + (ih * W + iw) * cb
                        for lane in range(cb):
                            patch[d + lane] = xf[np.uint64(src + lane)]
                    else:
                        for lane in range(cb):
                            patch[d + lane] = _ZERO
            for c in range(PATCH):
                input_transform6(cb, patch, c * cb, row, half, c * cb, row)
        # rows: V[r, c] = (half B)[r, c], to position r * 6 + c
        out = v_base + ((g - g0) * TW + tw) * cb
        for r in range(PATCH):
            input_transform6(cb, half, r * row, cb, vf, out + r * PATCH * position_stride,
                             position_stride)
    if g == g1 - 1:
        # tiles past the chunk's last: zero, so the products' whole register
        # tiles multiply zeros (never stored to the output)
        for xi in range(POSITIONS):
            base = v_base + xi * position_stride
            for k in range((g1 - g0) * TW * cb, tiles_pad * cb):
                vf[np.uint64(base + k)] = _ZERO


# --- products -----------------------------------------------------------------------

@jit(standalone=True)
def _products(vf, uf, mf, zero, geom, xi, tiles_pad, kcb, cb, P, B):
    """``M[xi] = V[xi] @ U[xi]`` for the chunk's ``tiles_pad`` tiles: the 1x1
    conv's register tile over the tiles as "pixels", input blocks in
    K-blocks of ``kcb`` (a group's weights for one K-block stay in L1); the
    first K-block starts from zero, later ones from the partial sums in ``m``."""
    literally(cb)
    literally(P)
    literally(B)
    CB, OB, T_pad = geom.CB, geom.OB, geom.T_pad
    # v and m: (CB or OB, T_pad, cb) per position, rows v_block floats apart
    v_block, v_position, m_position = buffer_strides(CB, OB, T_pad, cb)
    v_base = xi * v_position
    m_base = xi * m_position
    w_ib = cb * cb
    w_ob = CB * w_ib
    u_base = xi * OB * w_ob
    for kb0 in range(0, CB, kcb):
        nkb = min(kcb, CB - kb0)
        for ob0 in range(0, OB, B):
            wo = u_base + ob0 * w_ob + kb0 * w_ib
            for k0 in range(0, tiles_pad, P):
                xo = v_base + kb0 * v_block + k0 * cb
                yo = m_base + ob0 * v_block + k0 * cb
                if ob0 + B <= OB:
                    if kb0 == 0:
                        fma_tile(P, B, cb, vf, xo, v_block, nkb, uf, wo, w_ob, zero, 0, 0, 0,
                                 mf, False, mf, yo, v_block, 0, False, _ZERO, _ZERO)
                    else:
                        fma_tile(P, B, cb, vf, xo, v_block, nkb, uf, wo, w_ob, mf, yo, cb,
                                 v_block, mf, False, mf, yo, v_block, 0, False, _ZERO, _ZERO)
                else:                    # an odd last block: a tile of one block
                    if kb0 == 0:
                        fma_tile(P, 1, cb, vf, xo, v_block, nkb, uf, wo, w_ob, zero, 0, 0, 0,
                                 mf, False, mf, yo, v_block, 0, False, _ZERO, _ZERO)
                    else:
                        fma_tile(P, 1, cb, vf, xo, v_block, nkb, uf, wo, w_ob, mf, yo, cb,
                                 v_block, mf, False, mf, yo, v_block, 0, False, _ZERO, _ZERO)


# --- output transform ----------------------------------------------------------------

@jit(standalone=True)
def _output_row(mf, bias, resf, yf, geom, g0, g, ob, epilogue, cb):
    """``Y = At M A`` for the tiles of tile row ``g`` (``n * TH + th``) in
    the chunk that starts at row ``g0``, output block ``ob``, plus bias (and
    residual), clamped or activated (``epilogue``: a
    :class:`.geometry.Epilogue`), padding lanes zero; only the pixels inside
    the output are stored."""
    literally(cb)
    CB, OB, OH, OW, O = geom.CB, geom.OB, geom.OH, geom.OW, geom.O
    TH, TW, T_pad = geom.TH, geom.TW, geom.T_pad
    has_res, clamp, lo, hi = epilogue.has_res, epilogue.clamp, epilogue.lo, epilogue.hi
    post, act, p0, p1 = epilogue.post, epilogue.act, epilogue.p0, epilogue.p1
    n, th = g // TH, g % TH
    half = numba.carray(stack_empty(_PATCH_ELEMENTS, np.float32), _PATCH_ELEMENTS)
    result = numba.carray(stack_empty(_PATCH_ELEMENTS, np.float32), _PATCH_ELEMENTS)
    row_stride, _, position_stride = buffer_strides(CB, OB, T_pad, cb)
    m_base = ob * row_stride
    y_base = (n * OB + ob) * OH * OW * cb
    lanes = min(cb, O - ob * cb)
    b0 = ob * cb
    row = TILE * cb
    rows = min(TILE, OH - th * TILE)
    bias_row = numba.carray(stack_empty(_ROW_ELEMENTS, np.float32), _ROW_ELEMENTS)
    for k in range(row):
        bias_row[k] = bias[np.uint64(b0 + k % cb)]
    for tw in range(TW):
        src = m_base + ((g - g0) * TW + tw) * cb
        # rows: half[r, j] = (m A)[r, j]
        for r in range(PATCH):
            output_transform6(cb, mf, src + r * PATCH * position_stride, position_stride,
                              half, r * row, cb)
        cols = min(TILE, OW - tw * TILE)
        if cols == TILE:
            # columns: (At half)[i, j] with the epilogue, straight to pixel (i, j)
            # (through a result buffer and a loop: 0.084 -> 0.075 ms at 64 x 56 x 56)
            out = y_base + (th * TILE * OW + tw * TILE) * cb
            if has_res and clamp:
                for j in range(TILE):
                    output_columns_to_pixels(cb, 1, 1, half, j * cb, row, bias_row, resf, yf,
                                             out + j * cb, OW * cb, rows, lo, hi)
            elif has_res:
                for j in range(TILE):
                    output_columns_to_pixels(cb, 1, 0, half, j * cb, row, bias_row, resf, yf,
                                             out + j * cb, OW * cb, rows, lo, hi)
            elif clamp:
                for j in range(TILE):
                    output_columns_to_pixels(cb, 0, 1, half, j * cb, row, bias_row, resf, yf,
                                             out + j * cb, OW * cb, rows, lo, hi)
            else:
                for j in range(TILE):
                    output_columns_to_pixels(cb, 0, 0, half, j * cb, row, bias_row, resf, yf,
                                             out + j * cb, OW * cb, rows, lo, hi)
        else:
            # a partial tile at the right edge: result[i, j] = (At half)[i, j]
            for j in range(TILE):
                output_transform6(cb, half, j * cb, row, result, j * cb, row)
            for i in range(rows):
                _finish_pixels(result, i * row, yf, y_base + ((th * TILE + i) * OW
                                                              + tw * TILE) * cb,
                               cols, bias_row, resf, has_res, clamp, lo, hi, cb)
        for i in range(rows):
            out = y_base + ((th * TILE + i) * OW + tw * TILE) * cb
            if post:
                activate_pixels(yf, out, cols, cb, lanes, act, p0, p1)
            if lanes < cb:
                for c in range(cols):
                    for lane in range(lanes, cb):
                        yf[np.uint64(out + c * cb + lane)] = _ZERO


@jit()
def _finish_pixels(result, at, yf, out, cols, bias_row, resf, has_res, clamp, lo, hi, cb):
    """``cols`` pixels of a tile row from ``result[at:]`` to ``yf[out:]``:
    plus the bias (``bias_row``: the block's bias once per pixel of a tile
    row) and the residual, clamped when ``clamp`` (a partial tile's rows)."""
    count = cols * cb
    if has_res and clamp:
        for k in range(count):
            value = result[at + k] + bias_row[k] + resf[np.uint64(out + k)]
            yf[np.uint64(out + k)] = min(max(value, lo), hi)
    elif has_res:
        for k in range(count):
            yf[np.uint64(out + k)] = result[at + k] + bias_row[k] + resf[np.uint64(out + k)]
    elif clamp:
        for k in range(count):
            yf[np.uint64(out + k)] = min(max(result[at + k] + bias_row[k], lo), hi)
    else:
        for k in range(count):
            yf[np.uint64(out + k)] = result[at + k] + bias_row[k]


# --- the driver ------------------------------------------------------------------

def _make_winograd_driver(cb: int, P: int, B: int):
    """The parallel Winograd driver for block ``cb`` and product tiles of P
    tiles x B output blocks."""

    def winograd_driver(xf, uf, bias, resf, yf, geometry, kcb, has_res, clamp, lo, hi, post,
                        act, p0, p1, scratch):
        geom = WinogradGeometry(*geometry)
        N, CB, OB, TH, TW, T_pad, G = (geom.N, geom.CB, geom.OB, geom.TH, geom.TW, geom.T_pad,
                                       geom.G)
        _, v_position, m_position = buffer_strides(CB, OB, T_pad, cb)
        vf = scratch[:POSITIONS * v_position]
        mf = scratch[POSITIONS * v_position:POSITIONS * (v_position + m_position)]
        zero = np.zeros(cb, np.float32)
        for g0 in range(0, N * TH, G):     # chunk by chunk of G tile rows
            g1 = min(g0 + G, N * TH)
            rows = g1 - g0
            tiles_pad = -(-(rows * TW) // P) * P
            for task in prange(CB * rows):
                _input_row(xf, vf, geom, g0, g0 + task % rows, g1, tiles_pad, task // rows,
                           cb)
            for xi in prange(POSITIONS):
                # (int64: a prange index is unsigned in the parallel compile, and
                # each integer type would be a specialization of its own)
                _products(vf, uf, mf, zero, geom, np.int64(xi), tiles_pad, kcb, cb, P, B)
            for task in prange(OB * rows):
                _output_row(mf, bias, resf, yf, geom, g0, g0 + task % rows, task // rows,
                            Epilogue(has_res, clamp, lo, hi, post, act, p0, p1), cb)

    winograd_driver.__qualname__ = f"winograd_driver_cb{cb}_{P}x{B}"
    return parallel_kernel(winograd_driver)


_drivers: dict = {}


def winograd_driver(cb: int, P: int, B: int):
    """The compiled Winograd driver for block ``cb`` and tile ``P x B`` (made once)."""
    key = (cb, P, B)
    driver = _drivers.get(key)
    if driver is None:
        driver = _drivers.setdefault(
            key, made_by(winograd_driver, key, _make_winograd_driver(cb, P, B)))
    return driver


def scratch_floats(CB: int, OB: int, T_pad: int, cb: int) -> int:
    """Floats of the driver's ``scratch`` argument: one chunk's ``v`` then
    ``m``. The caller keeps it between calls (a new array per call had its
    pages faulted in by the worker threads every time: 0.44 -> 0.65 ms at
    64 x 56 x 56 on 2 threads)."""
    _, v_position, m_position = buffer_strides(CB, OB, T_pad, cb)
    return POSITIONS * (v_position + m_position)


#: bytes of one chunk's v and m together, at least (see :func:`chunk_rows`)
CHUNK_BYTES = 4 << 20


def chunk_rows(N: int, CB: int, OB: int, TH: int, TW: int, cb: int, P: int,
               threads: int = 2) -> tuple[int, int]:
    """``(G, T_pad)``: tile rows per chunk and the chunk's tiles rounded up
    to whole register tiles.

    The three phases run chunk by chunk of G tile rows (of all images,
    ``N * TH`` rows in all), so that a chunk's transformed input and
    products are still in the caches when the next phase reads them. But
    each chunk's products read all of the transformed filter ``u`` again,
    so a chunk takes ``CHUNK_BYTES`` or twice ``u``, whichever is more, at
    least one row, in chunks of equal size. Measured against one chunk per
    image (1 thread): 64 x 224 x 224 1.39x, 64 x 112 x 112 1.24x, 128 x 112 x
    112 1.19x, 64 x 56 x 56 x 8 images 1.23x; smaller chunks lost where ``u``
    is large (256 x 56 x 56, 9.4 MB of ``u``, in two chunks: 0.92-0.95x).

    On one thread a small ``u`` takes chunks of eight times its size (when
    less): they stay in the L2 cache, and no phase waits for another thread
    (1 thread, zen4, 16 -> 16 channels at 224 x 224 1.67 -> 1.22 ms, 32 -> 32
    at 112 x 112 0.98 -> 0.85 ms, 16 -> 64 at 55 x 55 with half the scratch).
    On more threads, each of the three phases a chunk runs is split among
    them, and small chunks lost to the waits (the same 224 x 224 conv, 2
    threads: 0.66 -> 1.18 ms)."""
    per_row = POSITIONS * (CB + OB) * TW * cb * 4
    filter_bytes = POSITIONS * CB * OB * cb * cb * 4
    rows = N * TH
    target = CHUNK_BYTES if threads > 1 else min(CHUNK_BYTES, 8 * filter_bytes)
    G = max(1, min(rows, max(target, 2 * filter_bytes) // per_row))
    chunks = -(-rows // G)
    G = -(-rows // chunks)
    return G, padded_tiles(G * TW, P)


def padded_tiles(tiles: int, P: int) -> int:
    return -(-tiles // P) * P
