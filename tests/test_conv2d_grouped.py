"""Grouped direct convolutions (kernels/conv2d/) against the float64 reference:
group widths of 1 to 4 blocks and widths that are not a multiple of the
block (3, 7, 9 channels), odd sizes, strides 1 and 2, batches of 2, blocks
4, 8 and 16, 1 and 2 threads; and the tiles the plan picks for them (one
block per tile when a tile's blocks would read each other's groups, tiles
along the rows with constant pixel offsets: ``geometry.row_tile_pixels``),
and the row tiles that read a padded conv's input in place, its taps in the
padding masked (``register_tile.conv_tile``'s edges).
"""

import re

import numba
import numpy as np
import pytest

import jitnn
from jitnn.kernels import _config, conv2d as K, layout
from jitnn.kernels.conv2d import geometry, plan as conv_plan
from jitnn.kernels.epilogue import RELU
from jitnn import layouts
from jitnn.kernels.filter_packing import group_input_block_ranges, packed_window_begins
from jitnn.ops.conv2d import unpacked_filter
from tests.helpers import random, reference


def _blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    out = np.empty((n, -(-c // block), h, w, block), np.float32)
    layout.nchw_to_blocked(np.ascontiguousarray(x), out)
    return out


def run_grouped(n, c, o, h, w, strides, groups, block, padding=(1, 1, 1, 1), seed=0,
                kernel=3, dilation=1):
    """Run a grouped conv (``kernel`` x ``kernel``, 3 by default) with bias
    and relu through the kernels, check it against the reference; returns
    (launch, blocked output)."""
    rng = np.random.default_rng(seed)
    x = random((n, c, h, w), rng)
    w_oihw = random((o, c // groups, kernel, kernel), rng)
    b = random((o,), rng)
    packed = K.pack_conv2d_filter(w_oihw, c, groups, block)
    oh = K.conv2d_output_size(h, kernel, strides, dilation, padding[0], padding[1])
    ow = K.conv2d_output_size(w, kernel, strides, dilation, padding[2], padding[3])
    ob = -(-o // block)
    bias = np.zeros(ob * block, np.float32)
    bias[:o] = b
    xin = _blocked(x, block)
    out = np.full((n, ob, oh, ow, block), np.nan, np.float32)
    launch = K.conv2d_launch(xin, packed, out, (strides, strides), (dilation, dilation),
                             padding, False, True, RELU, algorithm="direct")
    K.run_conv2d_launch(launch, xin, out, bias)
    assert not np.isnan(out).any(), "some output element was not written"
    lanes = out.transpose(0, 1, 4, 2, 3).reshape(n, ob * block, oh, ow)
    assert np.all(lanes[:, o:] == 0), "padding lanes must be zero"
    got = np.empty((n, o, oh, ow), np.float32)
    layout.blocked_to_nchw(out, got)
    geom = dict(strides=strides, padding=padding, groups=groups, dilations=dilation)
    expected = np.maximum(reference("conv2d")(x, w_oihw, b, **geom), 0)
    scale = reference("conv2d")(np.abs(x), np.abs(w_oihw), np.abs(b), **geom)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1.6e-6 * (1.0 + scale.max()))
    return launch, out


# (n, c, o, h, w, stride, groups): group widths 1-4 blocks of 8, 3 / 7 / 9
# channels, more outputs than inputs per group, a map with border tiles (58).
# (Sizes whose row tiles other cases' drivers run: each new output width
# compiles a driver of its own, ~7 s of a cold run.)
CASES = [
    (1, 16, 16, 14, 14, 1, 2),       # 1 block per group
    (2, 32, 32, 28, 28, 1, 2),       # 2 blocks
    (1, 48, 48, 13, 11, 2, 2),       # 3 blocks: a tile of 2 across two groups
    (1, 64, 64, 9, 7, 1, 2),         # 4 blocks
    (2, 12, 12, 10, 10, 1, 4),       # 3 channels a group, a partial last block
    (1, 28, 28, 7, 12, 2, 4),        # 7 channels
    (1, 36, 36, 15, 14, 1, 4),       # 9 channels: blocks across groups
    (1, 32, 64, 14, 14, 2, 4),       # 8 in, 16 out per group
    (1, 32, 32, 58, 58, 1, 2),       # interior 56 wide, border tiles
    (1, 16, 16, 58, 58, 1, 2),       # narrow groups: padded, one long row tile
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"c{c[1]}o{c[2]}_{c[3]}x{c[4]}_s{c[5]}_g{c[6]}")
def test_grouped_block8(case):
    n, c, o, h, w, stride, groups = case
    run_grouped(n, c, o, h, w, stride, groups, 8)


# (c, o, groups, block, kernel): RegNetX-400MF's last grouped conv (25 groups
# of 16: 2 blocks of 8 a window, 1 of 16, of 50 and 25); 4 channels a group
# (2 groups a block); 9 (windows of 3 that straddle groups, the last moved
# back to end at the last block); 17; a grouped 1x1 with more outputs; one
# group (the dense layout); block 4
PACKINGS = [(400, 400, 25, 8, 3), (400, 400, 25, 16, 3), (32, 32, 8, 8, 3), (36, 36, 4, 8, 3),
            (34, 34, 2, 8, 3), (64, 128, 4, 8, 1), (24, 40, 1, 8, 3), (24, 24, 3, 4, 3)]


@pytest.mark.parametrize("case", PACKINGS, ids=str)
def test_grouped_filters_keep_only_their_windows(case):
    """Each output block keeps the window of input blocks its groups read:
    the dense block-diagonal packing's blocks there, nothing non-zero left
    outside; and ``unpacked_filter`` gives the filter back."""
    c, o, groups, block, kernel = case
    w = random((o, c // groups, kernel, kernel), np.random.default_rng(1))
    packed = K.pack_conv2d_filter(w, c, groups, block)
    dense = layouts.reference_pack_filter(w, "oihw", groups, block, block)
    in_blocks = dense.shape[1]
    window = packed.weights.shape[1]
    assert window == int(np.max(packed.ib_end - packed.ib_begin))
    # (2 groups of 17 on 5 blocks: the block of channels 16-23 reads all 5)
    assert window == in_blocks if groups == 1 or (c, groups) == (34, 2) else window < in_blocks
    begins = packed_window_begins(packed.ib_begin, in_blocks, window)
    for ob in range(dense.shape[0]):
        first = begins[ob]
        assert first <= packed.ib_begin[ob] and packed.ib_end[ob] <= first + window
        np.testing.assert_array_equal(packed.weights[ob], dense[ob, first:first + window])
        outside = np.delete(dense[ob], np.s_[first:first + window], axis=0)
        assert not outside.any()
    np.testing.assert_array_equal(unpacked_filter(packed), w)
    if (c, groups, block) == (400, 25, 8):
        assert packed.weights.nbytes * 25 == dense.nbytes   # 2 of 50 blocks a window


# grouped convs packed compactly, run through the kernels: (n, c, o, h, w,
# stride, groups, padding, kernel, dilation, block)
COMPACT_CASES = [
    (1, 80, 80, 7, 7, 1, 5, (1, 1, 1, 1), 3, 1, 8),     # RegNet's 16 a group, 7 x 7
    (2, 32, 32, 12, 12, 2, 8, (1, 1, 1, 1), 3, 1, 8),   # 4 a group: 2 groups a block
    (1, 34, 34, 9, 9, 1, 2, (1, 1, 1, 1), 3, 1, 8),     # 17: windows straddle groups
    (1, 36, 36, 10, 10, 1, 4, (2, 2, 2, 2), 3, 2, 8),   # 9, dilated; last window moved
    (1, 32, 64, 9, 9, 1, 4, (0, 0, 0, 0), 1, 1, 8),     # grouped 1x1
    pytest.param((1, 24, 24, 9, 9, 1, 3, (1, 1, 1, 1), 3, 1, 4),  # 8 a group on block 4:
                 marks=pytest.mark.slow if jitnn.host_block() != 4 else ()),  # portable's
]


@pytest.mark.parametrize("case", COMPACT_CASES, ids=str)
def test_compact_grouped_convs(case):
    n, c, o, h, w, stride, groups, padding, kernel, dilation, block = case
    run_grouped(n, c, o, h, w, stride, groups, block, padding, kernel=kernel,
                dilation=dilation)


@pytest.mark.parametrize("case", [
    (1, 64, 64, 7, 7, 1, 2),       # 32 channels a group: 2 blocks a tile
    # 16 a group, stride 2 to 7 x 7: 1 block a tile (a driver of its own)
    pytest.param((2, 64, 64, 14, 14, 2, 4), marks=pytest.mark.slow
                 if jitnn.host_block() != 16 else ()),
], ids=str)
def test_seven_wide_grouped_outputs_run_row_tiles_on_block_16(case):
    """A 7 x 7 output on 16-channel blocks, where the default tile (12 pixels
    with 512-bit registers) is wider than the row: 7-pixel row tiles on the
    input in place, edges masked (plan._EDGE_ROW_PIXELS)."""
    n, c, o, h, w, stride, groups = case
    launch, _ = run_grouped(n, c, o, h, w, stride, groups, 16)
    if geometry.VECTOR_REGISTERS >= 32 and geometry.direct_tile_shape(16, False)[0] > 7:
        assert "_7x" in launch.driver.serial.py_func.__qualname__ and _edges(launch) == 1
        assert launch.pad_copy is None


# the host's block's cases by default, the others slow: each compiles
# row-tile drivers of its own (block 4 is the portable check's,
# tests/portable_check.py; block 16's grouped row tiles keep a default case in
# test_seven_wide_grouped_outputs_run_row_tiles_on_block_16)
@pytest.mark.parametrize("block, case", [
    pytest.param(block, case, id=str((block, case)),
                 marks=pytest.mark.slow if block != jitnn.host_block() else ())
    for block, cases in [(4, [(1, 8, 8, 12, 12, 1, 2), (2, 12, 12, 9, 13, 2, 2),
                              (1, 16, 16, 14, 14, 1, 2)]),
                         (16, [(1, 32, 32, 12, 12, 1, 2), (2, 48, 48, 14, 14, 1, 3),
                               (1, 36, 36, 11, 9, 2, 4)])]
    for case in cases])
def test_grouped_blocks_4_16(block, case):
    n, c, o, h, w, stride, groups = case
    run_grouped(n, c, o, h, w, stride, groups, block)


@pytest.mark.parametrize("case", [CASES[1], CASES[2], CASES[8], CASES[9]], ids=str)
def test_grouped_two_threads_match_one(case):
    saved = numba.get_num_threads()
    results = []
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            results.append(run_grouped(*case, 8)[1])
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(results[0], results[1])


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[3], CASES[8]], ids=str)
def test_row_tiles_sum_as_the_tables(monkeypatch, case):
    """Row tiles run the same sums in the same order as the offset tables'
    tile: the same bits, tile shape aside (where both run whole tiles: the
    partial tiles' loop in numba rounds differently)."""
    launch, rows = run_grouped(*case, 8)
    monkeypatch.setattr(conv_plan, "row_tile_pixels", lambda *args, **kwargs: 0)
    tables, out = run_grouped(*case, 8)
    assert launch.driver is not tables.driver or geometry.VECTOR_REGISTERS < 32
    np.testing.assert_array_equal(rows, out)


def test_tile_input_share():
    # 16 channels a group on blocks of 8: 2 blocks a group, tiles of 2 share it
    assert conv_plan.tile_input_share(*group_input_block_ranges(64, 64, 4, 8, 8), 2) == 1.0
    # 8 channels a group: each tile of 2 runs both blocks' inputs for each
    assert conv_plan.tile_input_share(*group_input_block_ranges(64, 64, 8, 8, 8), 2) == 2.0
    assert conv_plan.tile_input_share(*group_input_block_ranges(64, 64, 8, 8, 8), 1) == 1.0
    assert conv_plan.tile_input_share(*group_input_block_ranges(64, 64, 1, 8, 8), 2) == 1.0


@pytest.mark.skipif(geometry.VECTOR_REGISTERS < 32, reason="row tiles need 32 vector registers")
def test_row_tile_pixels_divide_the_row():
    assert geometry.row_tile_pixels(8, 2, 28, 6) == 7
    assert geometry.row_tile_pixels(8, 2, 54, 6) == 6
    assert geometry.row_tile_pixels(8, 2, 55, 6, most=8) == 0
    assert geometry.row_tile_pixels(8, 1, 28, 12, largest=True) == 28
    assert geometry.row_tile_pixels(8, 1, 7, 12, largest=True) == 0
    # never more accumulators than the registers hold beside the weights
    for cb in (4, 8, 16, 32):
        for B in (1, 2):
            P = geometry.row_tile_pixels(cb, B, 2 * 3 * 5 * 7, 1, largest=True)
            lanes = _config.VECTOR_LANES if _config.AVX512_TUNED else min(_config.VECTOR_LANES, 8)
            registers = max(1, cb // lanes)
            assert P * B * registers + B + 1 <= geometry.VECTOR_REGISTERS
            assert P * B * cb <= geometry._TILE_ELEMENTS


@pytest.mark.skipif(geometry.VECTOR_REGISTERS < 32, reason="row tiles need 32 vector registers")
def test_plan_picks_one_block_tiles_for_narrow_groups():
    launch, _ = run_grouped(1, 16, 16, 28, 28, 1, 2, 8)       # 8 channels a group
    name = launch.driver.serial.py_func.__qualname__
    assert "_28x1_row8" in name, name
    launch, _ = run_grouped(1, 32, 32, 28, 28, 1, 2, 8)       # 16: 2 blocks a tile
    name = launch.driver.serial.py_func.__qualname__
    assert "_14x2_row8_edges1" in name, name                  # (the widest row tile)


@pytest.mark.skipif(geometry.VECTOR_REGISTERS < 32, reason="row tiles need 32 vector registers")
def test_a_strided_conv_pads_its_input_for_the_row_tile_the_others_run():
    """3x3 stride 2 on 56 x 56: the interior (27 columns) has no row tile and
    the border is 7 % of the output; padded, its 28 columns take the 7 x 2 row
    tile, the driver of the stride-2 conv on 28 x 28 (padded for its 14 %
    border): one driver to compile, not two."""
    launch, out = run_grouped(1, 16, 16, 56, 56, 2, 1, 8)
    other, _ = run_grouped(1, 16, 16, 28, 28, 2, 1, 8)
    assert launch.pad_copy is not None and launch.driver is other.driver
    assert "_7x2_row16" in launch.driver.serial.py_func.__qualname__


def _edges(launch) -> int:
    """The launch's edge-masked pixels per tile end (0: none, or not that driver)."""
    found = re.search(r"_edges(\d+)", launch.driver.serial.py_func.__qualname__)
    return int(found.group(1)) if found else 0


# (n, c, o, h, w, stride, groups, padding, kernel, dilation, block): padded
# grouped convs whose row tiles read the input in place. RegNet's 16-channel
# groups (7 x 2 tiles) on 7 x 7 to 56 x 56; 3, 9 and 17 channels a group on
# 14 columns (14 x 1 tiles), 7 at stride 2; odd and non-square sizes, two
# images, asymmetric padding, 5x5 with 2 masked pixels a tile end, dilation
# 2; blocks 4 and 16 (slow: drivers of their own to compile)
_SLOW = pytest.mark.slow
EDGE_CASES = [
    (1, 32, 32, 7, 7, 1, 2, (1, 1, 1, 1), 3, 1, 8),
    (2, 64, 64, 14, 14, 2, 4, (1, 1, 1, 1), 3, 1, 8),
    (1, 32, 32, 56, 56, 1, 2, (1, 1, 1, 1), 3, 1, 8),
    (1, 48, 48, 15, 13, 2, 3, (1, 1, 1, 1), 3, 1, 8),
    (1, 32, 32, 12, 15, 1, 2, (1, 0, 0, 1), 3, 1, 8),
    (1, 24, 24, 11, 14, 1, 8, (1, 1, 1, 1), 3, 1, 8),
    (1, 72, 72, 10, 14, 1, 8, (1, 1, 1, 1), 3, 1, 8),
    (2, 136, 136, 9, 14, 1, 8, (1, 1, 1, 1), 3, 1, 8),
    (1, 32, 32, 14, 14, 1, 2, (2, 2, 2, 2), 5, 1, 8),
    (1, 32, 32, 14, 14, 1, 2, (2, 2, 2, 2), 3, 2, 8),
    pytest.param((2, 56, 56, 27, 28, 2, 8, (1, 1, 1, 1), 3, 1, 8), marks=_SLOW),
    pytest.param((1, 16, 16, 12, 12, 1, 2, (1, 1, 1, 1), 3, 1, 4), marks=_SLOW),
    pytest.param((1, 32, 32, 14, 14, 1, 2, (1, 1, 1, 1), 3, 1, 16), marks=_SLOW),
]


@pytest.mark.skipif(geometry.VECTOR_REGISTERS < 32, reason="row tiles need 32 vector registers")
@pytest.mark.parametrize("case", EDGE_CASES, ids=lambda c: (
    f"n{c[0]}c{c[1]}_{c[3]}x{c[4]}_s{c[5]}_g{c[6]}_p{''.join(map(str, c[7]))}_k{c[8]}d{c[9]}"
    f"_b{c[10]}"))
def test_padded_grouped_convs_read_the_input_in_place(monkeypatch, case):
    """Against the float64 reference, without a padded copy of the input;
    and the same bits as the padded copy's row tiles (the same sums in the
    same order, a tap in the padding adding zeros either way)."""
    n, c, o, h, w, stride, groups, padding, kernel, dilation, block = case
    launch, out = run_grouped(n, c, o, h, w, stride, groups, block, padding, kernel=kernel,
                              dilation=dilation)
    assert launch.pad_copy is None and _edges(launch) >= (2 if kernel == 5 else 1)
    monkeypatch.setattr(conv_plan, "edge_pixels", lambda *args: -1)
    padded, expected = run_grouped(n, c, o, h, w, stride, groups, block, padding,
                                   kernel=kernel, dilation=dilation)
    assert _edges(padded) == 0
    np.testing.assert_array_equal(out, expected)


@pytest.mark.skipif(geometry.VECTOR_REGISTERS < 32, reason="row tiles need 32 vector registers")
def test_edge_tiles_two_threads_match_one():
    saved = numba.get_num_threads()
    results = []
    try:
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            launch, out = run_grouped(2, 64, 64, 14, 14, 1, 4, 8)
            assert _edges(launch) == 1
            results.append(out)
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(results[0], results[1])


def test_edge_pixels():
    # 3x3, padding 1: only the row's first and last pixels read the padding
    assert conv_plan.edge_pixels(7, 7, 1, 1, 3, 1, 7) == 1
    assert conv_plan.edge_pixels(28, 7, 2, 1, 3, 1, 56) == 1
    # stride 2 on an even width: the right end reads no padding, the left does
    assert conv_plan.edge_pixels(28, 14, 2, 1, 3, 1, 56) == 1
    # 5x5, padding 2: two pixels at each end; no padding: none
    assert conv_plan.edge_pixels(14, 7, 1, 1, 5, 2, 14) == 2
    assert conv_plan.edge_pixels(12, 6, 1, 1, 3, 0, 14) == 0
    # 7x7, padding 3: more than _MAX_EDGE_PIXELS
    assert conv_plan.edge_pixels(14, 7, 1, 1, 7, 3, 14) == -1
