"""The conv2d kernels' epilogues against the float64 reference
(tests/conv2d_cases.py's ``run_case``): every activation, with and without
bias and residual, on the host's block (4, 8 and 16 in the slow run) for
the direct, depthwise and first-layer paths; post-store activations over each driver's spans (padding
lanes stay zero); and the first-layer path's geometry at block 8."""

import pytest

from jitnn.kernels.epilogue import GELU, RELU, SIGMOID, SILU
from tests.conv2d_cases import ACTIVATIONS, run_case
from tests.helpers import other_blocks_slow

FIRST_LAYER = [
    # (n, c, o, h, w, kernel, strides, dilations, padding, groups)
    (1, 3, 64, 31, 29, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),  # ResNet stem, small
    (3, 3, 17, 11, 9, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 3, 9, 12, 13, (3, 2), (3, 1), (2, 1), (0, 2, 1, 1), 1),
    (1, 3, 6, 9, 9, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),     # grouped, plain input
    # C = the block: its 8 channels are a plane apart, not one blocked pixel
    # (the border share once padded it as if blocked); 3 output blocks: a
    # group of one
    (2, 8, 24, 11, 10, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    # the register tile takes 3 channels a step where 3 divides C (6: two
    # steps a tap), else one (5, 2): direct.plain_step_lanes
    (3, 5, 17, 11, 9, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 6, 17, 11, 9, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (2, 2, 9, 7, 5, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1),
    (1, 4, 8, 1, 1, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),     # a one-pixel plane
    pytest.param((1, 9, 16, 13, 12, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
                 marks=pytest.mark.slow),                          # C over a block
    pytest.param((1, 1, 8, 9, 7, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1),  # grayscale:
                 marks=pytest.mark.slow),                          # one more compile
]


@pytest.mark.parametrize("case", FIRST_LAYER, ids=lambda c: f"c{c[1]}o{c[2]}_k{c[5][0]}{c[5][1]}_s{c[6][0]}")
def test_first_layer_block8(case):
    n, c, o, h, w, kernel, strides, dilations, padding, groups = case
    packed = run_case(n, c, o, h, w, kernel, strides, dilations, padding, groups, block=8,
                      activation=(RELU, 0.0, 0.0), residual=True, plain=True, seed=o)
    assert packed.path == "first_layer"
    assert packed.weights.shape == (-(-o // 8), 1) + kernel + (c, 8)


# --- every activation, with and without bias and residual, every block -----

# (the host's block; the others slow: the epilogue is the same code on every
# block, whose kernels the per-block cases compile, and every activation on
# another block cost a cold default run ~1 min of compiles)
@pytest.mark.parametrize("block", other_blocks_slow())
@pytest.mark.parametrize("bias, residual", [(False, False), (True, False), (True, True),
                                            (False, True)])
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: f"act{a[0]}_{a[1]}")
def test_epilogue_direct(block, bias, residual, activation):
    run_case(1, 9, 19, 7, 9, (3, 3), (1, 1), (1, 1), (1, 0, 1, 2), 1, block, activation,
             bias, residual, seed=block)


@pytest.mark.parametrize("block", other_blocks_slow())
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: f"act{a[0]}_{a[1]}")
def test_epilogue_depthwise_and_first_layer(block, activation):
    run_case(1, 19, 19, 7, 15, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 19, block, activation,
             bias=True, residual=True, seed=block)
    run_case(1, 5, 10, 7, 15, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 5, block, activation,
             bias=True, residual=False, seed=block)
    run_case(1, 3, 9, 9, 8, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 1, block, activation,
             bias=True, residual=True, plain=True, seed=block)


# Post-store activations run over a depthwise task's rows, 8-tile runs (1x1) and a
# direct region's rows: padding lanes (sigmoid(0) = 0.5 must not reach them).
# (The first layer's 27 outputs take the 6 x 4 row tile other tests compile
# too; 17 took a driver of its own, ~6 s of a cold default run.)
# (n, c, o, h, w, kernel, strides, padding, groups, plain, in place)
SPAN_CASES = [
    (2, 17, 17, 23, 30, (3, 3), (1, 1), (1, 1, 1, 1), 17, False, False),  # border pixels
    (1, 1, 1, 9, 13, (5, 5), (2, 2), (2, 2, 2, 2), 1, False, False),
    (2, 17, 17, 19, 33, (5, 5), (1, 1), (2, 2, 2, 2), 17, False, False),  # 5x5 sliding
    (3, 7, 7, 7, 7, (5, 5), (1, 1), (2, 2, 2, 2), 7, False, True),        # stack-padded
    (1, 9, 9, 40, 20, (3, 3), (2, 2), (1, 1, 1, 1), 9, False, False),
    (1, 3, 3, 5, 5, (3, 3), (1, 1), (0, 0, 0, 0), 3, False, False),       # < one tile
    (2, 9, 17, 20, 11, (1, 1), (1, 1), (0, 0, 0, 0), 1, False, False),    # 1x1, 37 tiles
    (3, 3, 7, 9, 13, (1, 1), (2, 2), (0, 0, 0, 0), 1, False, True),       # copied tiles
    (1, 300, 20, 13, 7, (1, 1), (1, 1), (0, 0, 0, 0), 1, False, False),   # K-blocks
    (2, 16, 1, 1, 3, (1, 1), (1, 1), (0, 0, 0, 0), 1, False, False),
    (1, 3, 27, 23, 30, (3, 3), (2, 2), (1, 1, 1, 1), 1, True, False),     # first layer
    (2, 3, 9, 9, 13, (3, 3), (1, 1), (1, 0, 2, 1), 1, True, False),
    (2, 9, 17, 11, 14, (3, 3), (1, 1), (1, 1, 1, 1), 1, False, True),     # direct
    (1, 7, 3, 13, 5, (5, 3), (2, 1), (2, 2, 1, 1), 1, False, False)]


@pytest.mark.parametrize("block", other_blocks_slow())
@pytest.mark.parametrize("activation", [(SILU, 0.0, 0.0), (SIGMOID, 0.0, 0.0), (GELU, 0.0, 0.0)],
                         ids=lambda a: f"act{a[0]}")
def test_activation_spans(block, activation):
    for n, c, o, h, w, kernel, strides, padding, groups, plain, in_place in SPAN_CASES:
        run_case(n, c, o, h, w, kernel, strides, (1, 1), padding, groups, block, activation,
                 residual=True, residual_in_place=in_place, plain=plain, seed=o + h)


