"""Depthwise conv2d kernels (kernels/conv2d/depthwise.py) against the float64
reference (tests/conv2d_cases.py's ``run_case``): geometry at block 8,
multipliers 1 to 3, padding on the task's stack, the register tiles masked
over the borders, the tile moved back over stored pixels; the rows' packed
FMAs (slow)."""

import pytest

import jitnn
from jitnn.kernels.conv2d import depthwise
from jitnn.kernels.epilogue import CLAMP, RELU, SIGMOID
from tests.assembly import check_packed_fma, fresh_asm, needs_packed_fma
from tests.conv2d_cases import run_case

DEPTHWISE = [
    # (n, c, multiplier, h, w, kernel, strides, dilations, padding)
    (1, 8, 1, 9, 11, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),
    (3, 17, 1, 30, 29, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),     # tiles + border pixels
    (1, 16, 1, 13, 30, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0)),
    (1, 9, 1, 9, 20, (5, 5), (1, 1), (2, 2), (2, 2, 3, 1)),
    (1, 7, 1, 5, 8, (3, 2), (1, 3), (1, 1), (1, 1, 1, 1)),
    (1, 3, 1, 16, 31, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3)),
    (1, 8, 2, 9, 11, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),       # multiplier 2
    (3, 9, 2, 13, 14, (3, 3), (2, 2), (1, 1), (0, 2, 1, 1)),
    (1, 3, 3, 7, 9, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2)),        # multiplier 3
    (1, 64, 1, 4, 3, (3, 3), (2, 2), (1, 1), (2, 2, 2, 2)),       # no interior
    (2, 24, 1, 7, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),       # padded copy, one tile a row
    (1, 17, 1, 14, 14, (3, 3), (2, 2), (1, 1), (0, 1, 0, 1)),     # stride 2, padded copy
    (1, 16, 1, 5, 40, (3, 3), (3, 3), (1, 1), (1, 1, 1, 1)),      # stride 3: generic loop
    # 5x5, dilation 1: the sliding tile (each input column loaded once per row)
    (2, 17, 1, 19, 33, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),     # tiles + border pixels
    (1, 9, 1, 23, 37, (5, 5), (2, 2), (1, 1), (2, 2, 2, 2)),
    (3, 24, 1, 14, 14, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2)),     # padded on the stack
    (1, 7, 1, 9, 9, (5, 5), (2, 2), (1, 1), (1, 2, 2, 1)),
]

# Padded depthwise convs whose tasks pad their own input rows on the stack
# (kernels.conv2d.depthwise._DW_PATCH_ELEMENTS): several row chunks per plane, chunks
# limited by the buffer, stride 2; and one too wide for the buffer (the whole
# input is padded once instead).
DEPTHWISE_STACK_PADDED = [
    # (n, c, h, w, kernel, strides, dilations, padding, rows padded in the task)
    (1, 8, 40, 20, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), True),
    (1, 8, 60, 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), True),       # narrower than a tile
    (2, 9, 30, 16, (5, 5), (1, 1), (2, 2), (4, 4, 4, 4), True),
    (1, 17, 60, 12, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), True),
    (1, 8, 20, 28, (7, 7), (1, 1), (2, 2), (6, 6, 6, 6), False),
]


@pytest.mark.parametrize("case", DEPTHWISE_STACK_PADDED)
def test_depthwise_padding_on_the_stack(case):
    n, c, h, w, kernel, strides, dilations, padding, in_task = case
    packed = run_case(n, c, c, h, w, kernel, strides, dilations, padding, groups=c, block=8,
                      activation=(CLAMP, -1.0, 1.0), residual=True, seed=h + w)
    (launch,) = packed.launches.values()
    geom, has_res, pad_rows = launch.tail[:3]
    oh = geom[5]
    assert (pad_rows > 0) == in_task and (launch.pad_copy is None) == in_task
    if in_task:  # several row chunks per plane
        assert min(oh, 2048 // (geom[6] * 8), pad_rows) < oh


# 3x3 and 5x5 at stride 1 and 2 on rows at least a tile wide: every column in
# register tiles, masked over the borders (no padded copy), wide tiles inside
# (kernels.conv2d.depthwise._DW_WIDE). Channels that leave the last block
# partial (1, 3, 7, 9, 17: single pixels there), odd sizes, a batch, padding
# wider than the kernel reaches (tiles wholly in the padding), blocks 4/8/16.
# Each case compiles tiles of its own (10-18 s): the default run keeps one per
# kernel, stride and block, block 4 only on a block-4 host (tests/
# portable_check.py checks the depthwise path on it); the others are slow.
DEPTHWISE_EDGE_TILES = [
    # (n, c, h, w, kernel, strides, padding, block)
    (1, 16, 9, 7, (3, 3), (1, 1), (1, 1, 1, 1), 8),        # one tile, masked both sides
    pytest.param((2, 24, 11, 56, (3, 3), (1, 1), (1, 1, 1, 1), 8),     # edge, 3 wide, edge
                 marks=pytest.mark.slow),
    pytest.param((1, 8, 6, 112, (3, 3), (2, 2), (1, 1, 1, 1), 8), marks=pytest.mark.slow),
    (1, 17, 13, 29, (5, 5), (1, 1), (2, 2, 2, 2), 8),
    (3, 9, 7, 31, (5, 5), (2, 2), (2, 2, 2, 2), 8),
    (1, 7, 8, 33, (3, 3), (2, 2), (0, 1, 0, 1), 8),        # asymmetric, odd width
    pytest.param((1, 7, 8, 33, (3, 3), (2, 2), (0, 1, 0, 1), 4),
                 marks=pytest.mark.slow if jitnn.host_block() != 4 else ()),
    pytest.param((1, 3, 5, 23, (5, 5), (1, 1), (1, 3, 4, 6), 4),       # padding past the
                 marks=pytest.mark.slow),                               # kernel's reach
    pytest.param((1, 1, 9, 14, (3, 3), (1, 1), (1, 1, 1, 1), 4),       # one channel:
                 marks=pytest.mark.slow),                               # not depthwise
    pytest.param((1, 2, 9, 14, (3, 3), (1, 1), (1, 1, 1, 1), 4), marks=pytest.mark.slow),
    (2, 32, 10, 28, (3, 3), (1, 1), (1, 1, 1, 1), 16),
    pytest.param((1, 48, 8, 57, (5, 5), (2, 2), (2, 2, 2, 2), 16), marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case", DEPTHWISE_EDGE_TILES)
def test_depthwise_edge_tiles(case):
    n, c, h, w, kernel, strides, padding, block = case
    for residual, activation in ((True, (CLAMP, -1.0, 1.0)), (False, (SIGMOID, 0.0, 0.0))):
        packed = run_case(n, c, c, h, w, kernel, strides, (1, 1), padding, groups=c,
                          block=block, activation=activation, residual=residual, seed=h + w)
    if packed.path == "depthwise":     # (one channel is a plain conv)
        for launch in packed.launches.values():
            assert launch.tail[2] == 0 and launch.pad_copy is None    # no padded input


@pytest.mark.parametrize("case", DEPTHWISE, ids=lambda c: f"c{c[1]}m{c[2]}_{c[3]}x{c[4]}_k{c[5][0]}{c[5][1]}_s{c[6][0]}_d{c[7][0]}")
def test_depthwise_block8(case):
    n, c, m, h, w, kernel, strides, dilations, padding = case
    packed = run_case(n, c, c * m, h, w, kernel, strides, dilations, padding, groups=c,
                      block=8, activation=(CLAMP, -1.0, 1.0), residual=True, seed=c + m)
    assert packed.path == "depthwise"
    assert packed.multiplier == m


@pytest.mark.parametrize("width", [17, 20, 56])
def test_depthwise_moved_back_tile_with_in_place_residual(width):
    """A row's interior that is not a whole number of tiles ends with a tile
    moved back over pixels already stored: it must not store them again (an
    in-place residual was added twice there before this test)."""
    for activation in ((RELU, 0.0, 0.0), (SIGMOID, 0.0, 0.0)):
        run_case(1, 16, 16, 5, width, (3, 3), padding=(1, 1, 1, 1), groups=16, residual=True,
                 residual_in_place=True, activation=activation, seed=width)


@pytest.mark.slow     # a fresh compile of the driver for its assembly: 5-26 s
@needs_packed_fma
def test_depthwise_rows_use_packed_fma(monkeypatch):
    asms = fresh_asm(monkeypatch, "_dw_rows", lambda: run_case(
        1, 16, 16, 9, 30, (3, 3), padding=(1, 1, 1, 1), groups=16), module=depthwise,
        driver_tables=("_depthwise_drivers",))
    check_packed_fma(asms)
