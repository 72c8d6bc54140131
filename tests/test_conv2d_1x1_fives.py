"""The 1x1 path's 4 x 5 tile (kernels/conv2d/geometry.py's gemm1x1_tile_shape:
output blocks in fives and not in fours, 8-channel blocks, 32 vector
registers) against the float64 reference: few-pixel images whose last tile is
partial, K-blocks, input channels that end in a partial block, batches,
residuals, activations, 1 and 2 threads."""

import numba
import pytest

from jitnn.kernels import _config
from jitnn.kernels.conv2d.geometry import conv1x1_tile_shape, gemm1x1_tile_shape
from jitnn.kernels.epilogue import CLAMP, RELU, SIGMOID
from tests.conv2d_cases import run_case
from tests.helpers import portable_block_slow

# (n, c, o, h, w): o = 40 and 400 are 5 and 50 blocks at cb 8
FIVES = [
    (1, 400, 400, 7, 7),          # RegNetX's 7 x 7: 49 pixels = 12 tiles + 1, K-blocks
    (1, 1, 40, 7, 7),             # C = 1
    (2, 3, 40, 5, 3),             # C = 3, 15 pixels, two images
    (1, 7, 80, 1, 1),             # one pixel: a copied tile
    (1, 9, 120, 5, 3),            # 15 blocks: fives and threes
    (3, 17, 40, 9, 7),            # partial input lanes, three images
]


def test_fives_tile_shape():
    """4 x 5 only where the fours' tile does not apply, on 32 registers."""
    wide = _config.VECTOR_REGISTERS >= 32
    assert gemm1x1_tile_shape(8, 50) == ((4, 5) if wide else conv1x1_tile_shape(8, 50))
    assert gemm1x1_tile_shape(8, 20) == ((6, 4) if wide else conv1x1_tile_shape(8, 20))
    assert gemm1x1_tile_shape(8, 7) == conv1x1_tile_shape(8, 7)
    assert gemm1x1_tile_shape(16, 50) == conv1x1_tile_shape(16, 50)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", FIVES, ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}")
def test_1x1_fives(case, threads):
    n, c, o, h, w = case
    prev = numba.get_num_threads()
    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    try:
        packed = run_case(n, c, o, h, w, (1, 1), block=8, residual=True,
                          activation=(CLAMP, 0.0, 6.0), seed=c + o)
        assert packed.path == "1x1"
        run_case(n, c, o, h, w, (1, 1), block=8, activation=(RELU, 0.0, 0.0), seed=o)
        run_case(n, c, o, h, w, (1, 1), block=8, residual=True, residual_in_place=True,
                 activation=(SIGMOID, 0.0, 0.0), seed=c)
    finally:
        numba.set_num_threads(prev)


@pytest.mark.parametrize("block", portable_block_slow((4, 16)))
def test_1x1_fives_other_blocks(block):
    """The same shapes on the other blocks (their own tiles), 7 x 7 and 5 x 3."""
    run_case(1, 400, 400, 7, 7, (1, 1), block=block, residual=True,
             activation=(CLAMP, 0.0, 6.0), seed=block)
    run_case(2, 9, 40, 5, 3, (1, 1), block=block, residual=True, seed=block + 1)
