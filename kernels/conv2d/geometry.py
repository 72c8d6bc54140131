"""What every conv2d path shares: the geometry records, tile shapes and the
output-size and interior rules.

Records. The planner describes a convolution to a driver by one record per
path, built in one place, :func:`.plan._plan_conv2d` (the direct and 1x1
ones by :func:`.plan.direct_geometry`):

* :class:`ConvGeometry`: direct, 1x1 and first-layer drivers;
* :class:`DepthwiseGeometry`: the depthwise driver;
* :class:`.winograd.WinogradGeometry`: the Winograd driver;

and the epilogue by :class:`Epilogue`. A launch passes a geometry to its
driver as a plain tuple in the record's field order (``tuple(record)``):
numba's dispatcher types a plain tuple of ints in C, a namedtuple in Python
(a 25-field geometry: 0.6 against 1.8 us per call). The compiled code makes
the record again (``ConvGeometry(*geometry)``: the same struct of ints, no
instructions) and reads fields by name. The tiles' loops compile to the
same instructions as with the positional tuples the drivers took before
(compared instruction by instruction). The depthwise rows take the plain
tuple and make the record themselves: the padded rows' literal zero padding
then stays a compile-time constant.

Buffers, as in the package docstring: ``x: (N, CB, H, W, cb)`` (plain input:
``(N, C, H, W)``), ``y: (N, OB, OH, OW, cb)``, ``CB = ceil(C / cb)``,
``OB = ceil(O / cb)``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .._config import AVX512_TUNED, VECTOR_LANES, VECTOR_REGISTERS, jit

BLOCK_SIZES = (1, 4, 8, 16, 32)

_ZERO = np.float32(0.0)
#: stack-array size: the largest tile (P * B * cb) over every block size
#: (12 x 2 x 16 with 512-bit registers)
_TILE_ELEMENTS = 384
#: the depthwise tile's budget (its pixels: :func:`depthwise_tile_pixels`)
_DEPTHWISE_TILE_ELEMENTS = 96
_MAX_LANES = 32
_MAX_TILE_PIXELS = 28

#: the direct driver's passes (rows ``(first chunk, end chunk, mode)``): one
#: pass computes the whole result (bias, residual, the sum, activation); tap
#: by tap, a task per output-block group runs them in order: the first
#: stores the bias (and residual), each next one adds its chunks' taps to
#: what is stored, and the last activates
PASS_WHOLE, PASS_INIT, PASS_ADD, PASS_LAST = 0, 1, 2, 3


class ConvGeometry(NamedTuple):
    """A convolution as the direct, 1x1 and first-layer drivers see it.

    Input addressing is by element strides (``x_*``), so one loop reads both
    input kinds: a blocked input has CB blocks of ``cb`` lanes (``x_lane``
    1, ``x_px`` cb); a plain nchw input (the first layer) is one "block" of
    C lanes a plane apart (``x_lane`` H*W, ``x_px`` 1). When the wrapper
    pads the input first, H, W, padding and strides are the padded copy's.

    Interior output pixels (rows ``[r0, r1)``, columns ``[c0, c1)``) have
    every kernel tap inside the input; the rest are border pixels."""
    N: int          # images
    CB: int         # input blocks (1 for a plain input)
    H: int          # input rows
    W: int          # input columns
    OB: int         # output blocks
    OH: int         # output rows
    OW: int         # output columns
    KH: int         # kernel rows
    KW: int         # kernel columns
    sh: int         # stride along rows
    sw: int         # stride along columns
    dh: int         # dilation along rows
    dw: int         # dilation along columns
    pt: int         # padding above (the bottom's follows from OH)
    pl: int         # padding on the left (the right's follows from OW)
    O: int          # output channels; lanes past O are padding
    x_n: int        # input elements from one image to the next
    x_ib: int       # ... from one input block to the next
    x_row: int      # ... from one row to the next
    x_px: int       # ... from one pixel to the next
    x_lane: int     # ... from one lane (channel) to the next
    r0: int         # first interior output row
    r1: int         # end of the interior rows
    c0: int         # first interior output column
    c1: int         # end of the interior columns


class DepthwiseGeometry(NamedTuple):
    """A depthwise convolution (``groups == C``) as its driver sees it; the
    fields as in :class:`ConvGeometry`. Blocked input only:
    ``x: (N, CB, H, W, cb)``; output channel ``o`` reads input channel
    ``o // m``."""
    N: int
    CB: int
    H: int
    W: int
    OB: int
    OH: int
    OW: int
    KH: int
    KW: int
    sh: int
    sw: int
    dh: int
    dw: int
    pt: int
    pl: int
    O: int          # output channels
    C: int          # input channels
    m: int          # multiplier: output channels per input channel


class Epilogue(NamedTuple):
    """What a tile does after its sums: ``act(sum + bias + residual)``.

    ``clamp`` (relu, clamp) is a min/max with ``[lo, hi]`` on the
    accumulators before the store; ``post`` (the other activations) runs
    activation ``act`` with parameters ``p0``, ``p1`` on the stored pixels
    (:func:`..epilogue.activate_pixels`). Drivers take these as scalars
    (see the module docstring) and make the record."""
    has_res: bool   # add the residual
    clamp: bool
    lo: np.float32
    hi: np.float32
    post: bool
    act: int        # an activation code of :mod:`..epilogue`
    p0: np.float32
    p1: np.float32


# --- tile shapes -----------------------------------------------------------

def conv_tile_shape(cb: int) -> tuple[int, int]:
    """``(P, B)``: output pixels x output-channel blocks of the direct tile.

    ``P * B * cb / 8`` ymm accumulators must leave room for B weight vectors
    and one broadcast in 16 registers: cb 8 -> 6 x 2 (12 + 2 + 1), cb 16 ->
    6 x 1 (12 + 2 + 1), cb 32 -> 3 x 1 (12 + 4 + 1); cb 4 uses 12 xmm. With
    512-bit registers (:data:`.._config.AVX512_TUNED`), cb 16 -> 12 x 2 in
    the 32 zmm (24 + 2 + 1), as :func:`conv1x1_tile_shape`.
    """
    if cb >= 32:
        return 3, 1
    if cb >= 16:
        return (12, 2) if cb == 16 and AVX512_TUNED else (6, 1)
    return 6, 2


def direct_tile_shape(cb: int, plain: bool, out_blocks: int = 0) -> tuple[int, int]:
    """``(P, B)`` of the direct driver: :func:`conv_tile_shape`, but 6 x 1
    for a plain input (the first layer) on 16-channel blocks. Its tile has
    few steps (a 3x3 or 7x7 window over 3 channels), and with 12 x 2 on
    512-bit registers ResNet-50's 7x7/2 first conv ran at 0.28-0.33x
    PyTorch against 0.41-0.43x (1 thread, Emerald Rapids). The other
    direct convs gained from 12 x 2: the stride-2 3x3 convs of ResNet-50
    0.44-0.65x -> 0.63-0.82x PyTorch, 3x3 on 512 channels at 7 x 7
    0.52-0.55x -> 0.63-0.80x.

    A plain input with ``out_blocks`` in fours on 8-channel blocks and 32
    vector registers (Zen 4): 6 x 4, the input pixels broadcast once for 4
    blocks instead of 2 (MobileNetV2's 3 -> 32 channel stride-2 conv, 1
    thread, kernel alone: 341 -> 309 us). So does a blocked input's
    (3x3 stride-2 convs, 1 thread, in a one-conv model against ONNX
    Runtime's: 32 -> 32 channels at 112 x 112 84 -> 101 GFLOP/s, 64 -> 128
    at 56 x 56 94 -> 103, 128 -> 256 at 28 x 28 99 -> 109; ORT 98-110).

    A plain input with 1, 3 or 5 output blocks, or a multiple of 3 (the
    stems of LCNet, MobileNetV3, EfficientViT: 8, 16 or 24 channels): a tile
    of all (or 3) blocks and 24 accumulators, where 6 x 2 left a block of
    the last tile empty (3x3 stride 2 over 224 x 224, 1 thread, Zen 4,
    kernel and readback: 3 -> 8 channels 395 -> 172 us, 3 -> 24 601 -> 290,
    3 -> 40 813 -> 409)."""
    if plain and cb == 16:
        return 6, 1
    if cb == 8 and VECTOR_REGISTERS >= 32 and out_blocks:
        if out_blocks % 4 == 0:
            return 6, 4
        if plain and out_blocks in _PLAIN_TILES:
            return _PLAIN_TILES[out_blocks]
        if plain and out_blocks % 3 == 0:
            return 8, 3
    return conv_tile_shape(cb)


#: a plain input's tile (pixels, blocks) for a few output blocks, 32 registers, cb 8
_PLAIN_TILES = {1: (12, 1), 3: (8, 3), 5: (4, 5)}


def row_tile_pixels(cb: int, B: int, width: int, least: int, most: int | None = None,
                    largest: bool = False) -> int:
    """Pixels of the direct tile whose pixels are adjacent in one output row
    (``register_tile.conv_tile``'s ``pixel_step``), B output blocks, for an
    interior ``width`` pixels wide; 0 where none fits. The smallest (or
    ``largest``) divisor of the width from ``least`` to ``most`` that fits
    the vector registers beside B weight vectors and a broadcast, so that a
    row holds whole tiles (the
    tiles run along the interior's rows, wrapping at row ends: a tile across
    two rows, or a border tile, reads the offset tables with the same P).
    Only with 32 vector registers: with 16 the default tile fills them.

    Its addresses are one base pointer plus constants, where the offset
    tables' tile keeps one general register per pixel (there, 12 x 2 and
    8 x 2 ran 20-25 % slower than 6 x 2 on Zen 4). Block 8, 1 thread, Zen 4:
    7 x 2 and 14 x 2 ran the same, both 2-8 % faster than the tables' 6 x 2
    on RegNetX's grouped convs; the smallest divisor keeps border tiles
    cheap."""
    if VECTOR_REGISTERS < 32:
        return 0
    lanes = VECTOR_LANES if AVX512_TUNED else min(VECTOR_LANES, 8)
    registers = max(1, cb // lanes)             # per pixel and block
    fits = min(_MAX_TILE_PIXELS, _TILE_ELEMENTS // (B * cb),
               (VECTOR_REGISTERS - B * registers - 1) // (B * registers))
    most = fits if most is None else min(most, fits)
    for P in (range(most, least - 1, -1) if largest else range(least, most + 1)):
        if width % P == 0:
            return P
    return 0


def conv1x1_tile_shape(cb: int, out_blocks: int) -> tuple[int, int]:
    """``(P, B)`` of the 1x1 tile (and of Winograd's products) for
    ``out_blocks`` output blocks: the direct tile's, except

    * 4 x 3 for cb 8 when the blocks come in threes and not in pairs (O = 24:
      2 + 1 blocks ran the single block's tile at 7 loads per 6 FMAs, a third
      of the conv; 4 x 3 is 7 loads per 12 FMAs in all 16 ymm);
    * 12 x 2 for cb 16 on 512-bit registers (24 of the 32 zmm, 2 weight
      vectors and a broadcast). The direct tile's 6 x 1 keeps 6 sums, too few
      to cover the FMA latency on two ports: 1 thread, kernel alone (Xeon,
      Emerald Rapids, against PyTorch in the same
      rounds), ResNet-50's 1x1 convs 0.74-0.93x -> 0.91-1.25x PyTorch,
      Winograd on 64 channels at 56 x 56 2.33x -> 3.02-3.08x, on 256 at
      14 x 14 1.73-1.75x -> 1.81x (14 x 2 and 6 x 4 measured the same as
      12 x 2, within the host's noise)."""
    if cb == 8 and out_blocks % 2 == 1 and out_blocks % 3 == 0:
        return 4, 3
    return conv_tile_shape(cb)


def gemm1x1_tile_shape(cb: int, out_blocks: int) -> tuple[int, int]:
    """``(P, B)`` of the 1x1 path's tile: :func:`conv1x1_tile_shape`, but
    6 x 4 for cb 8 with 32 vector registers (AVX-512's ymm16-31: Zen 4) when
    the blocks come in fours: 24 sums, 4 weight vectors and a broadcast, 10
    loads per 24 FMAs instead of 8 per 12, and the pixels' input read once per
    4 blocks instead of 2 (a partial group of 4 would run the stack-array
    loop, hence whole fours only). MobileNetV2, 1 thread, in the network, old
    and new alternated: 1x1 convs 16 -> 96 channels at 112 x 112 487 -> 423
    us, the 7 x 7 projections 806 -> 741 us, all 1x1 convs -3 to -4 % at
    batch 1 and 8 (the same sums: bit-identical outputs).

    4 x 5 there when the blocks come in fives and not in fours (RegNetX's 400
    channels, EfficientNet's 40 and 240): 20 sums, 9 loads per 20 FMAs
    instead of the 6 x 2 tile's 8 per 12 (5 x 5 measured no better than 6 x
    2 at 7 x 7; 12 x 2 and 8 x 2 slower: 400 -> 400 channels 197 us against
    166)."""
    if cb == 8 and VECTOR_REGISTERS >= 32 and out_blocks % 4 == 0:
        return 6, 4
    if cb == 8 and VECTOR_REGISTERS >= 32 and out_blocks % 5 == 0:
        return 4, 5
    return conv1x1_tile_shape(cb, out_blocks)


def depthwise_tile_pixels(cb: int) -> int:
    """Output pixels per depthwise tile, along one row: 7 for cb <= 8.

    Depthwise work is load-bound (one input load per FMA), so longer tiles
    gain little, while the widths of real networks (224 / 2**k: 112, 56, 28,
    14, 7) are multiples of 7: tiles of 12 wasted up to 40 % of a 14-wide
    row and could not tile a 7-wide one at all."""
    return max(1, min(7, _DEPTHWISE_TILE_ELEMENTS // cb))


# --- output size, interior and border ---------------------------------------

def conv2d_output_size(size: int, kernel: int, stride: int, dilation: int,
                       pad_begin: int, pad_end: int) -> int:
    """WebNN's output size (may be < 1 for impossible geometry)."""
    return (size - ((kernel - 1) * dilation + 1) + pad_begin + pad_end) // stride + 1


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


# --- regions of in-input taps ---------------------------------------------------

def tap_intervals(out: int, size: int, kernel: int, stride: int, dilation: int,
                  pad: int) -> list[tuple[int, int, int, int]]:
    """Along one axis, the output positions cut into runs whose taps inside
    the input are the same: ``(o0, o1, k0, k1)``, positions ``[o0, o1)`` read
    the input at taps ``[k0, k1)`` only (maybe none: ``k0 == k1``). The taps
    inside the input of a position are consecutive, and both ends move
    monotonically with it, so there are at most ``2 * kernel + 1`` runs."""
    runs: list[tuple[int, int, int, int]] = []
    for o in range(out):
        k0, k1 = _clip_range.py_func(o * stride - pad, dilation, kernel, size)
        if runs and runs[-1][2:] == (k0, k1):
            runs[-1] = (runs[-1][0], o + 1, k0, k1)
        else:
            runs.append((o, o + 1, k0, k1))
    return runs


def tap_regions(geom: ConvGeometry) -> tuple[np.ndarray, float]:
    """``(regions, share)``: the output of ``geom`` (unpadded input) cut into
    rectangles whose pixels all read the input at the same rectangle of taps,
    rows ``(r0, r1, c0, c1, kh0, kh1, kw0, kw1)`` (int64, as the direct
    driver takes them), and the share of the window's taps that read the
    input, over all output pixels (1.0: no tap reads padding only).
    A 3x3 conv at dilation 12 with padding 12 on a 16 x 16 map: 9 regions,
    share 0.25; with padding 1 at dilation 1 on 56 x 56, share 0.96."""
    rows = tap_intervals(geom.OH, geom.H, geom.KH, geom.sh, geom.dh, geom.pt)
    cols = tap_intervals(geom.OW, geom.W, geom.KW, geom.sw, geom.dw, geom.pl)
    regions = np.array([(r0, r1, c0, c1, kh0, kh1, kw0, kw1)
                        for r0, r1, kh0, kh1 in rows for c0, c1, kw0, kw1 in cols],
                       np.int64).reshape(-1, 8)
    sizes = (regions[:, 1] - regions[:, 0]) * (regions[:, 3] - regions[:, 2])
    taps = (regions[:, 5] - regions[:, 4]) * (regions[:, 7] - regions[:, 6])
    share = float(np.sum(sizes * taps)) / (geom.OH * geom.OW * geom.KH * geom.KW)
    return regions, share


def direct_chunks(regions: np.ndarray, border: int, chunk: int) -> np.ndarray:
    """The direct driver's work per image: ``(region, start, end)`` rows,
    int64, each region's pixels in runs of ``chunk``, then the ``border``
    pixels' (region -1)."""
    rows = [(r, start, min(int(size), start + chunk))
            for r, size in enumerate((regions[:, 1] - regions[:, 0])
                                     * (regions[:, 3] - regions[:, 2]))
            for start in range(0, int(size), chunk)]
    rows += [(-1, start, min(border, start + chunk)) for start in range(0, border, chunk)]
    return np.array(rows, np.int64).reshape(-1, 3)


def tiny_region_share(regions: np.ndarray, pixels: int) -> float:
    """The share of the output in regions of fewer than ``pixels`` pixels
    (a tile's: they run the partial-tile loop, with its accumulators on the
    stack)."""
    sizes = (regions[:, 1] - regions[:, 0]) * (regions[:, 3] - regions[:, 2])
    return float(np.sum(sizes[sizes < pixels])) / max(1, int(np.sum(sizes)))


def tap_passes(geom: ConvGeometry, chunk: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(regions, chunks, passes)`` of the direct driver running ``geom``
    tap by tap: a pass storing the bias over the whole output, then one per
    tap over the rectangle of output pixels where it reads the input (so
    each tap's weights are read once per output-block group, not once per
    region of :func:`tap_regions` that runs it), then one activating the whole
    output. Chunks of ``chunk`` pixels."""
    rows = tap_intervals(geom.OH, geom.H, geom.KH, geom.sh, geom.dh, geom.pt)
    cols = tap_intervals(geom.OW, geom.W, geom.KW, geom.sw, geom.dw, geom.pl)

    def span(runs, k):               # the positions whose taps include k
        inside = [(o0, o1) for o0, o1, k0, k1 in runs if k0 <= k < k1]
        return (inside[0][0], inside[-1][1]) if inside else (0, 0)

    whole = (0, geom.OH, 0, geom.OW, 0, 0, 0, 0)
    regions = [whole]
    modes = [PASS_INIT]
    for kh in range(geom.KH):
        r0, r1 = span(rows, kh)
        for kw in range(geom.KW):
            c0, c1 = span(cols, kw)
            if r1 > r0 and c1 > c0:
                regions.append((r0, r1, c0, c1, kh, kh + 1, kw, kw + 1))
                modes.append(PASS_ADD)
    regions.append(whole)
    modes.append(PASS_LAST)
    regions_array = np.array(regions, np.int64)
    chunks, passes = [], []
    for r, mode in enumerate(modes):
        one = direct_chunks(regions_array[r:r + 1], 0, chunk)
        one[:, 0] = r
        passes.append((len(chunks), len(chunks) + len(one), mode))
        chunks.extend(one.tolist())
    return (regions_array, np.array(chunks, np.int64).reshape(-1, 3),
            np.array(passes, np.int64).reshape(-1, 3))
