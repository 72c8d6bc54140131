"""Kernel cases of the inverted-residual networks' convolutions (MobileNetV2,
EfficientNet, MnasNet): the 1x1 driver's weight prefetch on short chunks,
checked against the float64 reference (``run_case``) on both of its compiles."""

import numba
import pytest

from jitnn.kernels import conv2d as K
from jitnn.kernels.conv2d import conv1x1, plan as conv_plan
from jitnn.kernels.epilogue import CLAMP
from tests.test_conv2d_kernels import run_case

# (n, c, o, h, w, ahead): chunks of at most _PREFETCH_TILES tiles prefetch the
# next output-block group's weights; K-blocks, partial output and input lanes,
# batches, and a map whose chunk is too long for it
PREFETCH_1X1 = [
    (1, 960, 160, 7, 7, True),      # MobileNetV2's 7 x 7 project: 49 pixels, K-blocks
    (2, 600, 40, 9, 9, True),       # groups of 2, 2, 1 blocks at cb 8; two images
    (1, 17, 9, 7, 3, True),         # partial lanes in and out, one K-block
    (3, 1, 7, 5, 5, True),          # C = 1
    (2, 17, 40, 20, 20, False),     # 400 pixels in one chunk: no prefetch
    (1, 3, 24, 31, 17, False),      # C = 3, odd sizes
]


def _ahead(n, c, o, h, w, block):
    """Whether the driver runs this case with the prefetch (its own rule)."""
    CB, OB = -(-c // block), -(-o // block)
    P, B = K.conv1x1_tile_shape(block, OB)
    chunk, _, _ = conv_plan._gemm_blocking(n, CB, OB, h * w, block, numba.get_num_threads(),
                                           P, B)
    return chunk <= conv1x1._PREFETCH_TILES * P


@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("case", PREFETCH_1X1, ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}")
def test_1x1_weight_prefetch(block, case):
    n, c, o, h, w, ahead = case
    if block == 8:
        assert _ahead(n, c, o, h, w, block) == ahead      # both compiles are covered
    packed = run_case(n, c, o, h, w, (1, 1), block=block, activation=(CLAMP, 0.0, 6.0),
                      residual=True, seed=c + o)
    assert packed.path == "1x1"
