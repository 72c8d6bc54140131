"""The 1x1 GEMM path of conv2d (kernels/conv2d/conv1x1.py) against the float64
reference (tests/conv2d_cases.py's ``run_case``): K-blocks, strides, every
partial tile, the tile shapes, the blocking over threads; its tiles' packed
FMAs (slow)."""

import numba
import pytest

from jitnn.kernels import conv2d as K
from jitnn.kernels.conv2d import conv1x1, plan as conv_plan
from jitnn.kernels.epilogue import CLAMP, LEAKY_RELU, SIGMOID
from tests.assembly import check_packed_fma, fresh_asm, needs_packed_fma
from tests.conv2d_cases import run_case
from tests.helpers import per_block, portable_block_slow

# --- the 1x1 GEMM path ------------------------------------------------------------

# (n, c, o, h, w, stride): K-blocks (c over 256 / 512 channels for blocks 16 / 4-8,
# not a multiple of the K-block), pixel counts that end in a partial tile, strides
GEMM_1X1 = [
    (1, 300, 40, 7, 9, 1),        # 63 pixels, 2 K-blocks of unequal width
    (2, 600, 24, 5, 5, 1),        # block 4: 2 K-blocks; 25 pixels
    (1, 72, 24, 13, 3, 2),        # strided, rows shorter than a tile
    (3, 17, 9, 11, 9, 3),         # stride 3, partial lanes in and out
    (1, 520, 33, 9, 10, 2),       # strided with K-blocks
    (2, 8, 8, 1, 1, 1),           # one pixel
    (3, 24, 40, 2, 2, 1),         # images shorter than a tile: copied
    (2, 40, 24, 7, 7, 1),         # 49 pixels: the last tile moved back
]


# blocks 4 and 16 by default: the first two cases (K-blocks at either block)
@pytest.mark.parametrize("case, block", per_block(
    GEMM_1X1, lambda c: f"c{c[1]}o{c[2]}_{c[3]}x{c[4]}s{c[5]}", keep={0, 1}))
def test_1x1_gemm_path(block, case):
    n, c, o, h, w, s = case
    packed = run_case(n, c, o, h, w, (1, 1), (s, s), block=block,
                      activation=(CLAMP, 0.25, 6.0), residual=True, seed=c)
    assert packed.path == "1x1"
    run_case(n, c, o, h, w, (1, 1), (s, s), block=block, activation=(SIGMOID, 0.0, 0.0),
             residual=True, residual_in_place=True, seed=o)


@pytest.mark.parametrize("pixels", range(1, 26))
def test_1x1_every_partial_tile(pixels):
    """Images of 1 to 25 pixels: every count of a partial last tile (1 to P - 1,
    in place and copied; P is 12 for block 16 on AVX-512 hosts), whole
    and partial output blocks (O = 32 and 24 at block 16), and more tiles."""
    block = 16
    for o in (32, 24):
        run_case(1, 20, o, 1, pixels, (1, 1), block=block, activation=(CLAMP, 0.25, 6.0),
                 residual=True, seed=pixels)
        run_case(2, 16, o, 1, pixels, (1, 1), block=block, residual=True, seed=o)
    run_case(1, 16, 32, 3, 2 * pixels + 1, (1, 1), (3, 2), block=block, seed=pixels)


@pytest.mark.slow
@pytest.mark.parametrize("block", [1, 32])
@pytest.mark.parametrize("case", GEMM_1X1[:2] + GEMM_1X1[-1:],
                         ids=lambda c: f"c{c[1]}o{c[2]}_{c[3]}x{c[4]}s{c[5]}")
def test_1x1_gemm_path_blocks_1_32(block, case):
    """The register tile at its narrowest and widest vectors (1 and 32 lanes)."""
    n, c, o, h, w, s = case
    run_case(n, c, o, h, w, (1, 1), (s, s), block=block, activation=(CLAMP, 0.25, 6.0),
             residual=True, seed=c)


@pytest.mark.parametrize("threads", [1, 2])
def test_1x1_gemm_blocking(threads):
    for N, C, O, pixels, cb in [(1, 2048, 512, 49, 8), (1, 64, 256, 3136, 8),
                                (8, 256, 64, 49, 16), (1, 9, 1, 1, 4), (3, 1024, 256, 7, 8),
                                (1, 144, 24, 3136, 8)]:
        CB, OB = -(-C // cb), -(-O // cb)
        P, B = K.conv1x1_tile_shape(cb, OB)
        chunk, kcb, gsets = conv_plan._gemm_blocking(N, CB, OB, pixels, cb, threads, P, B)
        assert chunk % P == 0 and chunk >= P and 1 <= kcb <= CB
        assert 1 <= gsets <= max(1, -(-OB // B))
        assert kcb * cb * cb * B * 4 <= conv_plan._L1_SLIVER_BYTES or kcb == 1
    # one image of few pixels on 2 threads: the groups are split
    assert conv_plan._gemm_blocking(1, 256, 64, 49, 8, 2, 6, 2)[2] == 2


def test_1x1_gemm_split_groups_and_threads():
    """The group split (2 threads, one short image) and the serial result agree."""
    prev = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        run_case(1, 520, 40, 7, 7, (1, 1), block=8, residual=True, seed=3)
        run_case(1, 64, 256, 3, 5, (1, 1), (2, 2), block=8, seed=4)
    finally:
        numba.set_num_threads(prev)


@pytest.mark.slow     # a fresh compile of the driver for its assembly: 5-26 s
@needs_packed_fma
def test_conv1x1_tiles_use_packed_fma(monkeypatch):
    # 81 pixels: whole tiles and a short one; O = 24: the 4 x 3 tile
    asms = fresh_asm(monkeypatch, "_conv1x1_tiles", lambda: (
        run_case(1, 32, 16, 9, 9, (1, 1)), run_case(1, 32, 24, 9, 9, (1, 1))),
        module=conv1x1, driver_tables=("_conv1x1_drivers",))
    # the driver's copy is checked with the kernel's
    check_packed_fma(asms)


@pytest.mark.parametrize("block", portable_block_slow() + [pytest.param(32, marks=pytest.mark.slow)])
@pytest.mark.parametrize("out_channels", [24, 40, 72, 20])
@pytest.mark.parametrize("pixels", [(7, 7), (1, 5), (3, 3), (9, 11)])
def test_1x1_short_tiles_and_tile_shapes(block, out_channels, pixels):
    """A run of pixels that ends in a short tile (every count below P), with
    the 4 x 3 tile (O = 24, 72 at cb 8) and the others; K-blocked, with a
    residual and an activation applied after the store."""
    h, w = pixels
    run_case(2, 300, out_channels, h, w, (1, 1), block=block, residual=True,
             activation=(LEAKY_RELU, 0.1, 0.0), seed=out_channels + h)
