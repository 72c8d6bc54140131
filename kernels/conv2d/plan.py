"""Planning a convolution: which path and algorithm run, the geometry record
its driver gets, how the work is blocked, and the checks of shapes and
options. Plain Python, run once per filter, shapes and options (the launch
is kept on the packed filter: see :func:`..conv2d.conv2d_launch`).

Buffers as in the package docstring: ``x: (N, C_phys // cb, H, W, cb)``
(plain input: ``(N, C, H, W)``), ``y: (N, O_phys // cb, OH, OW, cb)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np

from .._config import AVX512_TUNED
from ..buffers import aligned_empty
from ..epilogue import CLAMP, LAST_ACTIVATION, NONE, RELU
from . import winograd
from .conv1x1 import conv1x1_driver
from .depthwise import _DW_PATCH_ELEMENTS, depthwise_driver, depthwise_mode, edge_tiles
from .direct import conv_driver, plain_step_lanes
from .geometry import (PASS_WHOLE, ConvGeometry, DepthwiseGeometry, _clip_range,
                       conv1x1_tile_shape, conv2d_output_size, depthwise_tile_pixels,
                       direct_chunks, direct_tile_shape, gemm1x1_tile_shape, row_tile_pixels,
                       tap_passes, tap_regions, tiny_region_share)

PATHS = ("direct", "1x1", "depthwise", "first_layer")
#: ``algorithm`` choices: Winograd F(4x4, 3x3) where it applies and pays
#: (:func:`conv2d_algorithm`), never, or wherever it applies
ALGORITHMS = ("auto", "direct", "winograd")

# Border pixels at least this share of the output: pad the input once
# instead (see pad_blocked). At 56x56 (7 % border) the two ways cost the same.
_PAD_COPY_SHARE = 0.1
# At most this share of the window's taps reading the input (the rest read
# only padding), and at most _TINY_REGION_SHARE of the output in regions of
# fewer pixels than a tile (they run the partial-tile loop): the direct path
# runs each region of the output on its in-input taps instead
# (geometry.tap_regions), without padding. 1 thread, block 8, Zen 4, against
# the padded copy: ASPP's dilation 12 on 16 x 16 (share 0.25) 3-6x faster,
# dilation 6 on 33 x 33 (0.77) 1.17x, dilation 2 on 9 x 9 (0.73, 20 % tiny)
# 1.14x; padding 1 at dilation 1 on 14 x 14 (0.91) 0.96x, on 7 x 7 (0.82, half
# the output in regions of 1 and 5 pixels) 0.70x, on 4 x 4 (0.69, all tiny) 0.81x.
_TAP_REGION_SHARE = 0.8
_TINY_REGION_SHARE = 0.25
# By regions, one output-block group's weights past this: run tap by tap
# instead (geometry.tap_passes), each tap's weights read once per group
# rather than once per region that runs it (2.8x the filter for a 3x3 at
# dilation 12 on 16 x 16). ASPP's 960 -> 256 channels (550 KiB a group):
# 8.6 -> 6.0 ms; 256 -> 256 (150 KiB): the same either way.
_TAP_PASS_GROUP_BYTES = 256 * 1024
# Tap by tap, a task runs one group of one image: at least this many of them
# (for the threads), else by regions
_TAP_PASS_MIN_TASKS = 4
# Depthwise, stride 1: pad the input (on the stack, or once) up to this output width (below).
# 56 rather than 28: 3x3 at 56 x 56, 1 thread, Zen 4, block 8, alternated, medians:
# 144 ch 216 -> 174 us, 96 ch 148 -> 122 us (each task pads 6 rows on its stack).
_DW_PAD_WIDTH = 56

# Grouped convs: row tiles as wide as the output read a padded input's
# borders in place, at most this many pixels masked at each end of a tile
# (register_tile.conv_tile's edges; 1 for 3x3 with padding 1)
_MAX_EDGE_PIXELS = 2
# ... in row tiles of at least this many pixels, fewer than the default
# tile's 12 on 16-channel blocks: 7 x 7 outputs then run 7-pixel row tiles
# (1 thread, Zen 4, block 16, kernel alone, alternated, shared host: ResNeXt-50's
# 1024 channels in groups of 32, 12 x 2 tables on a padded copy 632-749 us,
# 7 x 2 row tiles 324-348; stride 2 from 14 x 14 686-830 -> 333-371;
# RegNetX-400MF's 400 in groups of 16, 12 x 1 73 -> 59, stride 2 83 -> 62)
_EDGE_ROW_PIXELS = 7

# A tile of one output block that reads the offset tables: 12 pixels (6 and
# 16 measured slower: see _plan_conv2d)
_GROUPED_TABLE_PIXELS = 12

# All weights that fit comfortably in L2 (512 KiB here): then a task runs
# every output-block group over its pixels (og_inner), else one group.
_L2_WEIGHT_BYTES = 256 * 1024
# a plain input's tiles in runs along the interior's rows (see _plan_conv2d)
# when a tile has at most this many (tap, channel) lanes; False: the offset
# tables' tiles, one call each (for comparisons)
_PLAIN_ROW_RUNS = True
_PLAIN_RUN_LANES = 100
# One group's weights that fit in L1 (32 KiB) beside the input: then a task
# runs all its tiles for one group before the next group.
_L1_WEIGHT_BYTES = 20 * 1024

# 1x1 as a GEMM: one output-block group's weights for a K-block stay in L1,
# the input of a task's pixels for that K-block in L2.
_L1_SLIVER_BYTES = 16 * 1024
_L2_CHUNK_BYTES = 128 * 1024

#: Winograd's scratch (one chunk's transformed input and products, at least
#: twice the transformed filter: see ``winograd.chunk_rows``) at most this
#: many bytes under "auto"; past it (thousands of channels) the direct path runs
_WINOGRAD_SCRATCH_BYTES = 256 << 20
#: with 512-bit registers (16-channel blocks), "auto" runs a batch of fewer
#: 4 x 4 output tiles than this direct: each transformed filter element (4x
#: the direct filter's bytes) then serves too few tiles. 512 channels at 7 x 7
#: (4 tiles), 1 thread: direct 1.90 ms, Winograd 2.14 ms in a loop, 3.7-4.1
#: ms in ResNet-50, its 38 MB filter from memory; with 8 tiles (batch 2)
#: Winograd 1.30x faster in a loop, 16 tiles (256 at 14 x 14) 1.66x
#: Measured on a Xeon (Emerald Rapids) only; on AVX2
#: (8-channel blocks) Winograd was faster at every ResNet-50 3x3 shape.
_WINOGRAD_MIN_TILES = 8

# activations that are a min/max, applied to the accumulators
_INF = np.float32(np.inf)


@dataclass(frozen=True)
class _Conv2dLaunch:
    """What :func:`conv2d_forward` derives from the shapes and options, once:
    the driver and its arguments after the five arrays (x, w, bias, residual,
    y), and the zero padding to copy the input into first (or None)."""
    driver: object
    weights: np.ndarray
    tail: tuple
    pad_copy: tuple | None           # (N, CB, H, W, cb, pad) for _pad_input
    bias_lanes: int                  # O_phys
    out_channels: int                # O
    zero_bias: np.ndarray
    x_shape: tuple                   # the shapes it was planned for
    out_shape: tuple
    path: str                        # what runs: the filter's path, or "winograd"
    scratch: int = 0                 # floats of a per-thread scratch argument (Winograd)


def _blocks(channels: int, block: int) -> int:
    return -(-channels // block)


def _pair(value, name):
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"conv2d: {name} must be an int or a pair, got {value}")
    return value


def _check_buffer(name, array, shape):
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise ValueError(f"conv2d: {name} must be a float32 numpy array, "
                         f"got {getattr(array, 'dtype', type(array))}")
    if array.shape != tuple(shape):
        raise ValueError(f"conv2d: {name} has shape {array.shape}, expected {tuple(shape)}")
    if not array.flags.c_contiguous:
        raise ValueError(f"conv2d: {name} must be C-contiguous")


def _epilogue_args(activation, param0, param1):
    """The drivers' epilogue arguments ``(clamp, lo, hi, post, act, p0, p1)``
    (:class:`.geometry.Epilogue` without ``has_res``): relu and clamp become
    a min/max on the accumulators, the other activations run after the store."""
    act = int(activation)
    if not 0 <= act <= LAST_ACTIVATION:
        raise ValueError(f"conv2d: unknown activation code {activation}")
    p0, p1 = np.float32(param0), np.float32(param1)
    if act == RELU:
        return True, np.float32(0.0), _INF, False, act, p0, p1
    if act == CLAMP:
        return True, p0, p1, False, act, p0, p1
    return False, -_INF, _INF, act != NONE, act, p0, p1


# --- path and algorithm -------------------------------------------------------

def conv2d_path(kernel, in_channels: int, groups: int, input_is_plain: bool = False) -> str:
    """The path (and packed layout) of a filter: see :func:`pack_conv2d_filter`."""
    if input_is_plain:
        return "first_layer"
    if groups == in_channels and groups > 1:
        return "depthwise"
    return "1x1" if tuple(kernel) == (1, 1) else "direct"


def conv2d_algorithm(path: str, kernel, strides, dilations, groups: int, in_channels: int,
                     out_channels: int, batch: int, out_h: int, out_w: int, block: int,
                     algorithm: str = "auto") -> str:
    """What runs a convolution: ``"winograd"`` or the filter's ``path``.

    Winograd F(4x4, 3x3) (:mod:`.winograd`) applies to the direct
    path's 3x3 kernels with stride 1, dilation 1 and one group.
    ``algorithm="direct"`` never uses it, ``"winograd"`` wherever it
    applies, and ``"auto"`` where it applies and pays: 8 or more input and
    output channels (measured 1.5-3x faster than direct from there, 1 and
    2 threads, every ResNet-50 3x3 shape), within the scratch limit; with
    512-bit registers, also :data:`_WINOGRAD_MIN_TILES` output tiles."""
    if algorithm == "direct" or path != "direct" or tuple(kernel) != (3, 3) or \
            tuple(strides) != (1, 1) or tuple(dilations) != (1, 1) or groups != 1:
        return path
    if algorithm == "winograd":
        return "winograd"
    tile_rows, tile_cols = winograd.tile_counts(out_h, out_w)
    if AVX512_TUNED and block == 16 and batch * tile_rows * tile_cols < _WINOGRAD_MIN_TILES:
        return path
    if min(in_channels, out_channels) >= 8 and _winograd_scratch_bytes(
            batch, in_channels, out_channels, out_h, out_w, block) <= _WINOGRAD_SCRATCH_BYTES:
        return "winograd"
    return path


def _winograd_scratch_bytes(batch: int, in_channels: int, out_channels: int, out_h: int,
                            out_w: int, block: int) -> int:
    """Bytes of Winograd's per-thread scratch for this convolution."""
    tile_rows, tile_cols = winograd.tile_counts(out_h, out_w)
    CB, OB = _blocks(in_channels, block), _blocks(out_channels, block)
    _, tiles = winograd.chunk_rows(batch, CB, OB, tile_rows, tile_cols, block,
                                   conv1x1_tile_shape(block, OB)[0])
    return 4 * winograd.scratch_floats(CB, OB, tiles, block)


def conv2d_candidates(path: str, kernel, strides, dilations, groups: int, in_channels: int,
                      out_channels: int, batch: int, out_h: int, out_w: int,
                      block: int) -> tuple[str, ...]:
    """The ``algorithm`` arguments that run this convolution in different
    ways, for a caller that times them on its host and passes the fastest
    (the runtime's ``jitnn.tuning``): ``("direct", "winograd")`` where
    Winograd applies and its scratch is within the limit "auto" keeps, else
    ``()`` (one way only: :func:`conv2d_algorithm`'s). The thresholds above
    were measured on one machine each; which side of them pays differs
    between CPUs."""
    if conv2d_algorithm(path, kernel, strides, dilations, groups, in_channels, out_channels,
                        batch, out_h, out_w, block, "winograd") != "winograd":
        return ()
    if _winograd_scratch_bytes(batch, in_channels, out_channels, out_h, out_w,
                               block) > _WINOGRAD_SCRATCH_BYTES:
        return ()
    return ("direct", "winograd")


# --- blocking -----------------------------------------------------------------

def k_blocks(CB: int, cb: int, B: int) -> int:
    """Input blocks per K-block of a GEMM on the register tile (the 1x1 path,
    Winograd's products): balanced, a group's weights for one in L1."""
    kcb = max(1, _L1_SLIVER_BYTES // (cb * cb * B * 4))
    nkb = -(-CB // kcb)
    return -(-CB // nkb)


def _gemm_blocking(N: int, CB: int, OB: int, pixels: int, cb: int, threads: int,
                   P: int, B: int):
    """``(chunk, kcb, gsets)`` for the 1x1 driver with tiles of P pixels x B
    blocks: pixels per task (whole tiles), input blocks per K-block, and how
    many sets the output-block groups are split into (tasks = N x chunks x sets)."""
    kcb = k_blocks(CB, cb, B)
    chunk = max(P, _L2_CHUNK_BYTES // (kcb * cb * 4) // P * P)
    nchunks = -(-pixels // chunk)
    threads = max(1, threads)
    gsets = 1
    groups = -(-OB // B)
    if N * nchunks < threads and groups % threads == 0:
        # fewer chunks than threads and groups that split evenly: each thread
        # takes every pixel for its share of the groups, so it reads a share
        # of the weights, where shorter pixel chunks each read all of them
        # and end in partial tiles (14 x 14, 2 threads, block 8, kernel alone,
        # best of 150 alternated: 1024 -> 256 574 -> 494 us, 256 -> 1024 553
        # -> 515, 1024 -> 512 1002 -> 931; 96 -> 576 111 -> 106)
        gsets = threads
    elif N * nchunks < 8 * threads and (N * nchunks) % threads:
        # balance the threads: more pixel chunks while they stay long (a
        # short chunk wastes its partial last tile), else split the groups
        if N == 1 and pixels >= 16 * P * threads:
            nchunks += -nchunks % threads
        else:
            gsets = min(groups, threads)
    chunk = -(-(-(-pixels // nchunks)) // P) * P
    return chunk, kcb, gsets


def tile_input_share(ib_begin: np.ndarray, ib_end: np.ndarray, B: int) -> float:
    """Input blocks the direct tiles of B output blocks run (each block over
    the union of the tile's blocks' ranges) over those its blocks read: 1.0
    without groups, 2.0 for groups of one output block in tiles of 2 (half
    the products are with the zeros of the block-diagonal filter)."""
    run = need = 0
    for ob0 in range(0, len(ib_begin), B):
        last = min(ob0 + B, len(ib_begin)) - 1
        run += int(ib_end[last] - ib_begin[ob0]) * (last - ob0 + 1)
        need += int(np.sum(ib_end[ob0:last + 1] - ib_begin[ob0:last + 1]))
    return run / max(1, need)


def edge_pixels(OW: int, P: int, sw: int, dw: int, KW: int, pl: int, W: int) -> int:
    """The fewest pixels ``m`` at each end of a row tile (P pixels, tiles
    from column 0 of an output row OW wide, P dividing it) such that every
    other pixel of every tile reads only columns inside the input (its taps
    need no mask); -1 if more than :data:`_MAX_EDGE_PIXELS`."""
    for m in range(_MAX_EDGE_PIXELS + 1):
        if all(0 <= (ow0 + p) * sw - pl and (ow0 + p) * sw - pl + (KW - 1) * dw < W
               for ow0 in range(0, OW, P) for p in range(m, P - m)):
            return m
    return -1


# --- geometry -------------------------------------------------------------------

def direct_geometry(N, C, H, W, cb, plain, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl,
                    O) -> ConvGeometry:
    """The :class:`.geometry.ConvGeometry` of a direct, 1x1 or first-layer
    convolution: the input's element strides (blocked, or ``plain`` nchw:
    one "block" of C lanes a plane apart) and the interior rectangle, where
    every tap lands inside the input."""
    if plain:
        CB = 1
        x_n, x_ib, x_row, x_px, x_lane = C * H * W, 0, W, 1, H * W
    else:
        CB = _blocks(C, cb)
        x_n, x_ib, x_row, x_px, x_lane = CB * H * W * cb, H * W * cb, W * cb, cb, 1
    r0, r1 = _clip_range.py_func(-pt, sh, OH, H - (KH - 1) * dh)
    c0, c1 = _clip_range.py_func(-pl, sw, OW, W - (KW - 1) * dw)
    return ConvGeometry(N=N, CB=CB, H=H, W=W, OB=OB, OH=OH, OW=OW, KH=KH, KW=KW, sh=sh, sw=sw,
                        dh=dh, dw=dw, pt=pt, pl=pl, O=O, x_n=x_n, x_ib=x_ib, x_row=x_row,
                        x_px=x_px, x_lane=x_lane, r0=r0, r1=r1, c0=c0, c1=c1)


# --- the plan -------------------------------------------------------------------

def _plan_conv2d(x, packed, out, strides, dilations, padding, has_res: bool, activation,
                 param0, param1, algorithm) -> _Conv2dLaunch:
    """Check the shapes and options of a conv2d_forward call (``packed``: a
    :class:`..conv2d.PackedConv2dFilter`); choose the path, padding copy and
    blocking."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"conv2d: algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    cb = packed.block
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    pad = tuple(int(p) for p in padding)
    if len(pad) != 4:
        raise ValueError(f"conv2d: padding must be [top, bottom, left, right], got {padding}")
    if min(sh, sw, dh, dw) < 1 or min(pad) < 0:
        raise ValueError(f"conv2d: strides {strides} and dilations {dilations} must be >= 1 "
                         f"and padding {padding} >= 0")
    pt, pb, pl, pr = pad
    C, O = packed.in_channels, packed.out_channels
    KH, KW = packed.kernel
    if not isinstance(x, np.ndarray):
        raise ValueError(f"conv2d: x must be a numpy array, got {type(x)}")
    if packed.path == "first_layer":
        if x.ndim != 4:
            raise ValueError(f"conv2d: first-layer input must be nchw, got shape {x.shape}")
        N, _, H, W = x.shape
        _check_buffer("x", x, (N, C, H, W))
    else:
        if x.ndim != 5:
            raise ValueError(f"conv2d: input must be blocked (N, C/cb, H, W, cb), got {x.shape}")
        N, _, H, W, _ = x.shape
        _check_buffer("x", x, (N, _blocks(C, cb), H, W, cb))
    OH = conv2d_output_size(H, KH, sh, dh, pt, pb)
    OW = conv2d_output_size(W, KW, sw, dw, pl, pr)
    if OH < 1 or OW < 1:
        raise ValueError(f"conv2d: output would be {OH}x{OW} for input {H}x{W}, kernel "
                         f"{KH}x{KW}, strides {(sh, sw)}, dilations {(dh, dw)}, padding {pad}")
    OB = packed.out_blocks
    _check_buffer("out", out, (N, OB, OH, OW, cb))
    epilogue = _epilogue_args(activation, param0, param1)
    wf = packed.weights.reshape(-1)

    def launch(driver, tail, pad_copy=None, weights=wf, path=packed.path, scratch=0):
        return _Conv2dLaunch(driver, weights, tail, pad_copy, OB * cb, O,
                             np.zeros(OB * cb, np.float32), x.shape, out.shape, path,
                             scratch)

    # (geometries go to the drivers as plain tuples: see .geometry)
    if conv2d_algorithm(packed.path, packed.kernel, (sh, sw), (dh, dw), packed.groups, C, O,
                        N, OH, OW, cb, algorithm) == "winograd":
        CB = _blocks(C, cb)
        P, B = conv1x1_tile_shape(cb, OB)
        tile_rows, tile_cols = winograd.tile_counts(OH, OW)
        chunk, padded_tiles = winograd.chunk_rows(N, CB, OB, tile_rows, tile_cols, cb, P,
                                                  numba.get_num_threads())
        geom = winograd.WinogradGeometry(N=N, CB=CB, H=H, W=W, OB=OB, OH=OH, OW=OW, pt=pt,
                                         pl=pl, O=O, TH=tile_rows, TW=tile_cols,
                                         T_pad=padded_tiles, G=chunk)
        u = packed.transformed.get("winograd")
        if u is None:
            u = winograd.transform_filter(packed.weights,
                                          aligned_empty((winograd.POSITIONS, OB, CB, cb, cb)))
            u = packed.transformed.setdefault("winograd", u)
        return launch(winograd.winograd_driver(cb, P, B),
                      (tuple(geom), k_blocks(CB, cb, B), has_res) + epilogue,
                      weights=u.reshape(-1), path="winograd",
                      scratch=winograd.scratch_floats(CB, OB, padded_tiles, cb))

    if packed.path == "depthwise":
        CB = _blocks(C, cb)
        pad_copy = None
        # The common 3x3 and 5x5 at stride 1 and 2 run their border columns in
        # masked tiles (depthwise.edge_tiles: no padding). Otherwise border
        # columns run pixel by pixel, and so does a row whose interior
        # is narrower than a tile: then pad the input, each task its own rows
        # on its stack (pad_rows of them), or the whole input once when a row
        # is too wide for that buffer; with stride 1 up to _DW_PAD_WIDTH wide
        # the two single pixels per row cost more (14x14: 78 -> 68 us for 384
        # ch; 56 x 56: see _DW_PAD_WIDTH).
        owa, owb = _clip_range.py_func(-pl, sw, OW, W - (KW - 1) * dw)
        pad_rows = 0
        if packed.multiplier == 1 and (pl or pr) and not edge_tiles(cb, KW, sw, dw, OW) and (
                owb - owa < depthwise_tile_pixels(cb) or (sw == 1 and OW <= _DW_PAD_WIDTH)):
            # output rows per task whose padded input rows fit the stack buffer
            row_floats = ((OW - 1) * sw + (KW - 1) * dw + 1) * cb
            pad_rows = ((_DW_PATCH_ELEMENTS // row_floats - (KH - 1) * dh - 1) // sh + 1
                        if row_floats * ((KH - 1) * dh + 1) <= _DW_PATCH_ELEMENTS else 0)
            if pad_rows == 0:
                pad_copy = (N, CB, H, W, cb, pad)
                H, W = H + pt + pb, W + pl + pr
                pt = pl = 0
        geom = DepthwiseGeometry(N=N, CB=CB, H=H, W=W, OB=OB, OH=OH, OW=OW, KH=KH, KW=KW,
                                 sh=sh, sw=sw, dh=dh, dw=dw, pt=pt, pl=pl, O=O, C=C,
                                 m=packed.multiplier)
        # (the threads: one band of rows each, depthwise.py)
        return launch(depthwise_driver(cb, depthwise_mode(pad_rows, packed.multiplier)),
                      (tuple(geom), has_res, pad_rows, numba.get_num_threads()) + epilogue,
                      pad_copy)

    plain = packed.path == "first_layer"
    if packed.path == "1x1" and packed.groups == 1 and not any(pad):
        CB = _blocks(C, cb)
        geom = direct_geometry(N, C, H, W, cb, False, OB, OH, OW, 1, 1, sh, sw, 1, 1, 0, 0, O)
        P, B = gemm1x1_tile_shape(cb, OB)
        threads = numba.get_num_threads()
        chunk, kcb, gsets = _gemm_blocking(N, CB, OB, OH * OW, cb, threads, P, B)
        return launch(conv1x1_driver(cb, P, B),
                      (tuple(geom), chunk, kcb, gsets, threads, has_res) + epilogue)
    pad_copy = None
    geom = direct_geometry(N, C, H, W, cb, plain, OB, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, O)
    # (four blocks a tile without groups only, a grouped filter's windows of
    # two blocks would run one-block tiles, below; and while four blocks'
    # weights stay below the tap-by-tap size, whose passes want more groups)
    four = packed.groups == 1 and \
        packed.weights.nbytes // max(1, OB // 4) <= _TAP_PASS_GROUP_BYTES
    P, B = direct_tile_shape(cb, plain, OB if four else 0)
    # (a plain input's tile walks every tap's weights: no regions)
    regions, share = tap_regions(geom) if not plain else (None, 1.0)
    by_regions = share <= _TAP_REGION_SHARE and \
        tiny_region_share(regions, P) <= _TINY_REGION_SHARE
    # groups narrower than a tile's blocks: one block per tile, so that no
    # product is with zeros between groups, and more pixels in its place.
    # Required, too: a grouped filter keeps one window of input blocks per
    # output block (filter_packing.packed_window_begins), and a tile of B
    # blocks reads theirs from one start, so its blocks must share a range.
    narrow = not plain and B > 1 and tile_input_share(packed.ib_begin, packed.ib_end, B) > 1.0
    if narrow:
        B, P = 1, _GROUPED_TABLE_PIXELS
    border = OH * OW - (geom.r1 - geom.r0) * (geom.c1 - geom.c0)
    # Grouped convs with padding: every output pixel in row tiles as wide as
    # the output, reading the input in place, its taps in the padding
    # masked (register_tile.conv_tile's edges: rows per tap, columns for the
    # tiles' end pixels), instead of a padded copy of the input or border
    # tiles
    edges, row, row_step = -1, 0, 0
    if packed.groups > 1 and not plain and not by_regions and border and O % cb == 0 \
            and OB % B == 0:
        # the widest row tile: the masks cost a select per tile end and tap,
        # and 14 x 2 ran 0.70-0.93x the time of 7 x 2 (RegNetX's grouped
        # convs on 14 to 56 columns; block 8, 1 thread, Zen 4, alternated).
        # Down to _EDGE_ROW_PIXELS where the default tile is wider than the
        # row: 7 x 7 outputs on 16-channel blocks (the default 12 x 2 or
        # 12 x 1 otherwise ran the offset tables on a padded copy)
        row = row_tile_pixels(cb, B, OW, min(P, _EDGE_ROW_PIXELS), largest=True)
        masked = edge_pixels(OW, row, sw, dw, KW, pl, W) if row else -1
        if masked >= 0:
            edges = max(1, masked)       # (1 also when no column needs a mask)
    if edges > 0:
        regions = np.array([[0, OH, 0, OW, 0, KH, 0, KW]], np.int64)
        border, P, row_step = 0, row, sw * cb
    elif by_regions:
        # many taps read only padding: each region runs its in-input taps
        border = 0
    elif not plain and border and (
            border >= _PAD_COPY_SHARE * OH * OW
            or (narrow and row_tile_pixels(cb, 1, OW, P))
            or (sw > 1 and B > 1 and row_tile_pixels(cb, B, OW, P)
                and not row_tile_pixels(cb, B, geom.c1 - geom.c0, P, most=8))):
        # many border pixels: pad the (blocked) input once, then every pixel
        # is interior. So too for the narrow groups' long row tiles, whose
        # border tiles would read the offset tables (ResNeXt-50's 4-wide
        # groups, 128 channels at 56 x 56: 27 x 1 tiles and the border
        # 1006 us, padded and 28 x 1 824 us), and for a strided conv whose
        # interior has no row tile where the whole width has one: the row
        # tile of the other stride-2 convs, one driver fewer to compile, and
        # faster (3x3 stride 2, block 8, 1 thread, Zen 4, alternated: 128
        # channels on 56 x 56, the tables' 6 x 2 3.33 ms, padded 7 x 2 2.62;
        # 64 channels on 112 x 112, 3.21 and 2.83)
        pad_copy = (N, geom.CB, H, W, cb, pad)
        geom = direct_geometry(N, C, H + pt + pb, W + pl + pr, cb, False, OB, OH, OW, KH, KW,
                               sh, sw, dh, dw, 0, 0, O)
        border = 0
    if not by_regions and edges < 0:     # the interior, every tap, and the border
        regions = np.array([[geom.r0, geom.r1, geom.c0, geom.c1, 0, KH, 0, KW]], np.int64)
    if not plain and not by_regions and edges < 0:
        # tiles along the interior's rows (geometry.row_tile_pixels): one
        # block, the most pixels (ResNeXt-50's 8-wide groups, 256 channels
        # at 28 x 28, block 8, 1 thread, Zen 4: the tables' 6 x 2 697 us,
        # 12 x 1 539 us, 14 x 1 459 us, 28 x 1 417 us); two blocks, the
        # fewest from the default's, and at most 8 when border tiles read
        # the tables with the same P (11 x 2 on 55 columns: 4 % slower)
        row = row_tile_pixels(cb, B, geom.c1 - geom.c0, P, largest=B == 1,
                              most=None if B == 1 or not border else 8)
        if row:
            P, row_step = row, sw * cb
    og_inner = packed.weights.nbytes <= _L2_WEIGHT_BYTES
    # Pixels per task, whole tiles: about one output row; at least 16 tiles
    # when a task has one group, so it reuses that group's weights (loaded
    # into L2 once) over many tiles.
    chunk = P * max(-(-OW // P), 1 if og_inner else 16)
    if plain and _PLAIN_ROW_RUNS and geom.c1 - geom.c0 >= P and \
            KH * KW * C <= _PLAIN_RUN_LANES:
        # a plain input: a task per interior row, its tiles in runs along it
        # (direct._conv_tiles: one register-tile call per run; the last tile
        # moved back over the row's end). Setting up each tile in numba cost
        # about as much as its 27 lanes of FMAs. 224 x 224, 1 thread, Zen 4,
        # kernel alone: 3 -> 32 channels 3x3/2 307 -> 269 us, 3 -> 16 227 ->
        # 179, 3x3/1 1167 -> 927, 5x5/2 655 -> 637, 1 -> 32 7x7/2 489 -> 464;
        # ResNet's 7x7/2 over 3 channels (147 lanes) 1 % slower: not there
        row_step, chunk = sw, geom.c1 - geom.c0
    # a first-layer tile has few steps (9 over 3 channels for a 3x3 kernel):
    # setting up its pixels again for every group cost more than keeping a
    # group's weights in L1 saved (MobileNetV2's first conv: 399 -> 355 us)
    group_fits_l1 = packed.weights.nbytes // max(1, -(-OB // B)) <= _L1_WEIGHT_BYTES and \
        not plain
    chunks = direct_chunks(regions, border, chunk)
    passes = np.array([[0, len(chunks), PASS_WHOLE]], np.int64)
    group_bytes = packed.weights.nbytes // max(1, -(-OB // B))
    if by_regions and group_bytes > _TAP_PASS_GROUP_BYTES and \
            N * -(-OB // B) >= _TAP_PASS_MIN_TASKS:
        regions, chunks, passes = tap_passes(geom, chunk)
    return launch(conv_driver(cb, plain_step_lanes(C) if plain else cb, plain, P, B, row_step,
                              max(edges, 0)),
                  (tuple(geom), packed.ib_begin, packed.ib_end, regions, chunks, passes,
                   og_inner, group_fits_l1, has_res) + epilogue, pad_copy)
