"""Reorder kernels against their numpy spec, for every block size."""

import numba
import numpy as np
import pytest

from jitnn import layouts
from jitnn.kernels import layout as kernels, layout_nhwc
from tests.helpers import random

BLOCKS = layouts.BLOCK_SIZES
CHANNELS = (1, 3, 7, 8, 9, 17, 64)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("channels", CHANNELS)
def test_nchw_blocked_round_trip(block, channels, threads):
    x = random((2, channels, 5, 7), seed=channels)
    blocked = np.full(layouts.blocked_shape(x.shape, block), np.nan, np.float32)
    kernels.nchw_to_blocked(x, blocked)
    expected = layouts.reference_nchw_to_blocked(x, block)
    np.testing.assert_array_equal(blocked, expected)
    # padding lanes are zero (the buffer started as NaN)
    flat = blocked.transpose(0, 1, 4, 2, 3).reshape(2, -1, 5, 7)
    assert np.all(flat[:, channels:] == 0)
    back = np.full(x.shape, np.nan, np.float32)
    kernels.blocked_to_nchw(blocked, back)
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(layouts.reference_blocked_to_nchw(expected, channels), x)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("channels", CHANNELS)
def test_nhwc_blocked_round_trip(block, channels, threads):
    x = random((3, 3, 9, channels), seed=channels + 100)
    nchw_shape = (3, channels, 3, 9)
    blocked = np.full(layouts.blocked_shape(nchw_shape, block), np.nan, np.float32)
    kernels.nhwc_to_blocked(x, blocked)
    np.testing.assert_array_equal(blocked, layouts.reference_nhwc_to_blocked(x, block))
    back = np.full(x.shape, np.nan, np.float32)
    kernels.blocked_to_nhwc(blocked, back)
    np.testing.assert_array_equal(back, x)
    np.testing.assert_array_equal(layouts.reference_blocked_to_nhwc(blocked, channels), x)


def test_spec_on_a_hand_worked_example():
    # 1 image, 3 channels, 1x2 pixels, block 2: channels (0, 1) then (2, pad)
    x = np.arange(6, dtype=np.float32).reshape(1, 3, 1, 2)
    blocked = layouts.reference_nchw_to_blocked(x, 2)
    assert blocked.shape == (1, 2, 1, 2, 2)
    np.testing.assert_array_equal(blocked[0, 0, 0], [[0, 2], [1, 3]])
    np.testing.assert_array_equal(blocked[0, 1, 0], [[4, 0], [5, 0]])


def _spec_filter(out_c, group_in, kh, kw, seed):
    return random((out_c, group_in, kh, kw), seed)


@pytest.mark.parametrize("layout", layouts.FILTER_LAYOUTS)
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("in_c,out_c,groups", [(3, 17, 1), (9, 7, 1), (8, 16, 2),
                                                (6, 9, 3), (17, 17, 17), (4, 8, 4)])
def test_pack_filter_from_every_layout(layout, block, in_c, out_c, groups, threads):
    oihw = _spec_filter(out_c, in_c // groups, 3, 2, seed=in_c * out_c)
    # the filter as a caller holds it in `layout`
    to_layout = {"oihw": (0, 1, 2, 3), "hwio": (2, 3, 1, 0),
                 "ohwi": (0, 2, 3, 1), "ihwo": (1, 2, 3, 0)}[layout]
    given = np.ascontiguousarray(oihw.transpose(to_layout))
    np.testing.assert_array_equal(layouts.filter_as_oihw(given, layout), oihw)
    expected = layouts.reference_pack_filter(given, layout, groups, block, block)
    packed = np.full(expected.shape, np.nan, np.float32)
    kernels.pack_filter(layouts.filter_as_oihw(given, layout), groups, packed)
    np.testing.assert_array_equal(packed, expected)


def test_packed_filter_entries_by_hand():
    # 2 groups, 2 input and 2 output channels each, 1x1 kernel, block 4
    w = np.arange(1, 9, dtype=np.float32).reshape(4, 2, 1, 1)
    packed = layouts.reference_pack_filter(w, "oihw", 2, 4, 4)[0, 0, 0, 0]  # [i, o]
    expected = np.array([[1, 3, 0, 0], [2, 4, 0, 0], [0, 0, 5, 7], [0, 0, 6, 8]], np.float32)
    np.testing.assert_array_equal(packed, expected)


@pytest.mark.parametrize("in_c,out_c,groups,block", [(17, 17, 17, 8), (6, 9, 3, 4),
                                                      (64, 64, 1, 8), (12, 6, 2, 4)])
def test_group_input_block_ranges_cover_every_nonzero_weight(in_c, out_c, groups, block):
    w = np.ones((out_c, in_c // groups, 1, 1), np.float32)
    packed = layouts.reference_pack_filter(w, "oihw", groups, block, block)
    begin, end = kernels.group_input_block_ranges(in_c, out_c, groups, block, block)
    for ob in range(packed.shape[0]):
        nonzero = np.nonzero(packed[ob].reshape(packed.shape[1], -1).any(axis=1))[0]
        assert begin[ob] <= nonzero.min() and nonzero.max() < end[ob]


# Shapes that reach the kernels' other paths: several tasks per image (planes
# longer than the kernels' pixel chunk, not a multiple of it or of 16), widths
# narrower than a block, partial blocks with every block size, N > 1. The deep
# ones get the nhwc kernels' shorter tasks and tiles (C = 1030: 63-pixel
# tasks, 2 per image, 4-pixel tiles; C = 259: 253 and 2 pixels, 12-pixel tiles);
# C = 37 and 64 take nChw8c -> nhwc's pixel-major path (4 to 8 full blocks).
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("shape", [(2, 3, 37, 41), (1, 9, 45, 47), (3, 17, 1, 5),
                                   (2, 1, 33, 31), (1, 32, 40, 40), (2, 7, 3, 3),
                                   (1, 40, 35, 61), (2, 12, 33, 35), (1, 4, 9, 11),
                                   (2, 131, 9, 13), (1, 1030, 9, 13), (2, 259, 15, 17),
                                   (2, 37, 9, 11), (1, 64, 33, 35)])
def test_reorders_on_multi_task_and_partial_shapes(block, shape, threads):
    n, c, h, w = shape
    x = random(shape, seed=c * h + w)
    blocked = np.full(layouts.blocked_shape(shape, block), np.nan, np.float32)
    kernels.nchw_to_blocked(x, blocked)
    expected = layouts.reference_nchw_to_blocked(x, block)
    np.testing.assert_array_equal(blocked, expected)
    back = np.full(shape, np.nan, np.float32)
    kernels.blocked_to_nchw(expected, back)
    np.testing.assert_array_equal(back, x)

    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    blocked = np.full(layouts.blocked_shape(shape, block), np.nan, np.float32)
    kernels.nhwc_to_blocked(nhwc, blocked)
    np.testing.assert_array_equal(blocked, expected)
    back = np.full(nhwc.shape, np.nan, np.float32)
    kernels.blocked_to_nhwc(expected, back)
    np.testing.assert_array_equal(back, nhwc)


# Past kernels.layout_tuning._STREAM_BYTES (8 MiB) the nhwc kernels switch to short
# tiles and nChw8c -> nchw to 8-plane pair transposes: a partial block and odd
# sizes there too.
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("shape", [(2, 17, 250, 251), (1, 72, 181, 163), (1, 260, 91, 93)])
def test_reorders_on_tensors_past_the_caches(block, shape):
    assert np.prod(shape) * 4 >= kernels._STREAM_BYTES
    x = random(shape)
    expected = layouts.reference_nchw_to_blocked(x, block)
    back = np.full(shape, np.nan, np.float32)
    kernels.blocked_to_nchw(expected, back)
    np.testing.assert_array_equal(back, x)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    blocked = np.full(expected.shape, np.nan, np.float32)
    kernels.nhwc_to_blocked(nhwc, blocked)
    np.testing.assert_array_equal(blocked, expected)
    back = np.full(nhwc.shape, np.nan, np.float32)
    kernels.blocked_to_nhwc(expected, back)
    np.testing.assert_array_equal(back, nhwc)


@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("channels", (1, 3, 7, 9, 17))
def test_blocked_to_nhwc_ignores_padding_lane_values(block, channels):
    # the partial block is stored as whole vectors that spill padding lanes
    # onto the next pixel before that pixel is written: garbage there must
    # never survive (nor reach past the output)
    x = random((2, channels, 40, 30), seed=5)
    blocked = layouts.reference_nchw_to_blocked(x, block)
    partial = channels % block
    if partial:
        blocked[:, -1, :, :, partial:] = np.nan
    spare = 40  # floats past the output
    storage = np.full(x.size + spare, -1.0, np.float32)
    nhwc = storage[:-spare].reshape(2, 40, 30, channels)
    kernels.blocked_to_nhwc(blocked, nhwc)
    np.testing.assert_array_equal(nhwc, x.transpose(0, 2, 3, 1))
    assert np.all(storage[-spare:] == -1.0)


# nChw8c -> nchw shifts its pixel chunks to where the target planes reach a
# 64-byte boundary (planes of a multiple of 16 pixels), with overlapping
# unaligned steps at both ends of a plane: targets at each 16-byte offset,
# planes of 2 full chunks and a rest, a last chunk shorter than 16 pixels
# after the shift (40 x 26 = 1040), planes of exactly 16, partial blocks.
@pytest.mark.parametrize("offset", [0, 4, 8, 12])
@pytest.mark.parametrize("shape", [(2, 13, 48, 48), (1, 8, 40, 26), (3, 5, 4, 4),
                                   (1, 20, 32, 32), (2, 3, 16, 16)])
def test_blocked_to_nchw_into_targets_at_every_alignment(offset, shape, threads):
    x = random(shape, seed=shape[1] + offset)
    blocked = np.ascontiguousarray(layouts.reference_nchw_to_blocked(x, 8))
    storage = np.full(x.size + 48, np.nan, np.float32)
    start = (-(storage.ctypes.data // 4)) % 16 + offset     # floats to a 64-byte line, + offset
    out = storage[start:start + x.size].reshape(shape)
    assert out.ctypes.data % 64 == 4 * offset
    kernels.blocked_to_nchw(blocked, out)
    np.testing.assert_array_equal(out, x)
    assert np.isnan(storage[:start]).all() and np.isnan(storage[start + x.size:]).all()


def _at_offset(size, offset):
    """A NaN-filled float32 array of ``size`` starting ``offset`` floats past a
    64-byte boundary, and the storage around it (to check nothing else is
    written)."""
    storage = np.full(size + 48, np.nan, np.float32)
    start = (-(storage.ctypes.data // 4)) % 16 + offset
    assert (storage.ctypes.data + 4 * start) % 64 == 4 * offset
    return storage[start:start + size], storage, start


# At C = 8k, an nhwc side 16 bytes past a 32-byte boundary (offsets 4 and 12
# floats) takes the shifted paths: each vector the upper half of one aligned
# vector and the lower half of the next. Groups of 8 pixels (C <= 512) and of
# 4 (C = 1024, nChw8c -> nhwc only), the pixel-major loop (C = 32, 64), tasks
# of several chunks, single pixels, images of one pixel (the first and last
# pixel of the array are loaded whole), and C not a multiple of 8 (unshifted).
@pytest.mark.parametrize("offset", [0, 4, 8, 12])
@pytest.mark.parametrize("shape", [(2, 64, 13, 11), (1, 8, 5, 5), (3, 32, 7, 9), (1, 72, 9, 9),
                                   (2, 256, 14, 15), (1, 1024, 5, 7), (2, 64, 1, 1),
                                   (3, 8, 1, 2), (1, 16, 40, 40), (2, 17, 6, 6)])
def test_nhwc_kernels_at_every_alignment(offset, shape, threads):
    x = random(shape, seed=shape[1] + offset)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    expected = np.ascontiguousarray(layouts.reference_nchw_to_blocked(x, 8))
    out, storage, start = _at_offset(nhwc.size, offset)
    kernels.blocked_to_nhwc(expected, out.reshape(nhwc.shape))
    np.testing.assert_array_equal(out.reshape(nhwc.shape), nhwc)
    assert np.isnan(storage[:start]).all() and np.isnan(storage[start + nhwc.size:]).all()
    source, _, _ = _at_offset(nhwc.size, offset)
    source[...] = nhwc.reshape(-1)
    blocked = np.full(expected.shape, np.nan, np.float32)
    kernels.nhwc_to_blocked(source.reshape(nhwc.shape), blocked)
    np.testing.assert_array_equal(blocked, expected)


def _check_streaming_reorders(shape, offset, threads):
    """The three streaming reorders of ``shape`` into targets ``offset`` floats
    past a 64-byte boundary, on numba's ``threads`` threads: right, and
    nothing written outside the target."""
    saved = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        x = random(shape, seed=shape[1] + offset)
        expected = np.ascontiguousarray(layouts.reference_nchw_to_blocked(x, 8))
        assert kernels._stores_stream(expected.nbytes, threads)
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        for convert, source, reference in ((kernels.nchw_to_blocked, x, expected),
                                           (kernels.nhwc_to_blocked, nhwc, expected),
                                           (kernels.blocked_to_nhwc, expected, nhwc)):
            out, storage, start = _at_offset(reference.size, offset)
            convert(source, out.reshape(reference.shape))
            np.testing.assert_array_equal(out.reshape(reference.shape), reference)
            assert np.isnan(storage[:start]).all()
            assert np.isnan(storage[start + reference.size:]).all()
    finally:
        numba.set_num_threads(saved)


# Past the caches (kernels._STREAM_BYTES per thread) nchw -> nChw8c, nhwc ->
# nChw8c (C >= 128) and nChw8c -> nhwc (C = 8k) store with non-temporal
# hints, which must be 32-byte aligned: targets at each 16-byte offset (0 and
# 8 floats: aligned; 4 and 12: other paths for the blocked targets, the
# half-vector shift for nhwc), pixel counts that leave tails in every task,
# groups of 16 (C = 136, 256) and 8 (C = 1024) pixels, C = 8 and N > 1.
# Nothing outside the target may be written.
@pytest.mark.parametrize("offset", [0, 4, 8, 12])
@pytest.mark.parametrize("shape", [(2, 64, 129, 129), (1, 256, 91, 93), (1, 1024, 45, 47),
                                   (3, 8, 301, 299), (1, 136, 127, 129)])
def test_reorders_with_streaming_stores_at_every_alignment(offset, shape):
    _check_streaming_reorders(shape, offset, 1)


# The same on 2 threads (the parallel compiles), where streaming starts at
# twice the size: C = 256 (groups of 16 pixels) and C = 8, tails in each task.
@pytest.mark.skipif(numba.config.NUMBA_NUM_THREADS < 2, reason="numba has one thread")
@pytest.mark.parametrize("offset", [0, 4])
@pytest.mark.parametrize("shape", [(1, 256, 129, 129), (9, 8, 301, 299)])
def test_parallel_reorders_with_streaming_stores(offset, shape):
    _check_streaming_reorders(shape, offset, 2)


@pytest.mark.parametrize("name", ["_nchw_to_blocked", "_blocked_to_nchw", "_nhwc_to_blocked",
                                  "_blocked_to_nhwc", "pack_filter"])
def test_each_reorder_runs_its_serial_compile_on_one_thread(name, threads, record_calls):
    calls = record_calls(getattr(layout_nhwc if "nhwc" in name else kernels, name), "serial",
                         "parallel")
    x = random((1, 9, 5, 7))
    blocked = np.empty(layouts.blocked_shape(x.shape, 8), np.float32)
    nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    run = {"_nchw_to_blocked": lambda: kernels.nchw_to_blocked(x, blocked),
           "_blocked_to_nchw": lambda: kernels.blocked_to_nchw(blocked, np.empty_like(x)),
           "_nhwc_to_blocked": lambda: kernels.nhwc_to_blocked(nhwc, blocked),
           "_blocked_to_nhwc": lambda: kernels.blocked_to_nhwc(blocked, np.empty_like(nhwc)),
           "pack_filter": lambda: kernels.pack_filter(random((9, 9, 3, 3)), 1, np.empty(
               (2, 2, 3, 3, 8, 8), np.float32))}
    kernels.nchw_to_blocked(x, blocked)
    calls.clear()
    run[name]()
    assert calls == ["serial" if threads == 1 else "parallel"]


@pytest.mark.parametrize("kernel", [(1, 1), (3, 3), (3, 2)])
@pytest.mark.parametrize("block", BLOCKS)
@pytest.mark.parametrize("in_c,out_c,groups", [(16, 24, 1), (64, 40, 1), (64, 96, 1), (32, 16, 2),
                                                (48, 24, 3), (24, 20, 1)])
def test_pack_filter_full_tiles(kernel, block, in_c, out_c, groups, threads):
    oihw = _spec_filter(out_c, in_c // groups, *kernel, seed=in_c + out_c)
    expected = layouts.reference_pack_filter(oihw, "oihw", groups, block, block)
    packed = np.full(expected.shape, np.nan, np.float32)
    kernels.pack_filter(oihw, groups, packed)
    np.testing.assert_array_equal(packed, expected)
    # the same filter handed over as a non-contiguous view
    view = np.ascontiguousarray(oihw.transpose(2, 3, 1, 0)).transpose(3, 2, 0, 1)
    packed = np.full(expected.shape, np.nan, np.float32)
    kernels.pack_filter(view, groups, packed)
    np.testing.assert_array_equal(packed, expected)


@pytest.mark.parametrize("ic_bn,oc_bn", [(3, 8), (4, 8), (16, 8), (8, 16), (12, 4), (3, 32)])
@pytest.mark.parametrize("kernel", [(1, 1), (7, 7), (3, 3)])
def test_pack_filter_unequal_blocks(ic_bn, oc_bn, kernel):
    # the conv's first-layer path packs with ic_bn = the input's channel count
    in_c = ic_bn if ic_bn in (3, 12) else 2 * ic_bn
    oihw = _spec_filter(20, in_c, *kernel, seed=ic_bn * oc_bn)
    expected = layouts.reference_pack_filter(oihw, "oihw", 1, ic_bn, oc_bn)
    packed = np.full(expected.shape, np.nan, np.float32)
    kernels.pack_filter(oihw, 1, packed)
    np.testing.assert_array_equal(packed, expected)
