"""Dilated and heavily padded direct convolutions (kernels/conv2d/) against the
float64 reference, and the regions of in-input taps they run by
(``geometry.tap_regions``): when most of a window's taps read only padding
(DeepLab's ASPP: dilation 12 with padding 12 on a 16 x 16 map), the output
is cut into rectangles whose pixels run the same rectangle of taps, read in
place, instead of a zero-padded copy of the input.

Each case runs ``conv2d_forward`` on blocked input into an output filled with
NaN and checks every element was written, padding lanes are zero and the
result is the reference's (with the bias, residual and activation)."""

import itertools

import numpy as np
import pytest

from jitnn.kernels import conv2d as K
from jitnn.kernels import layout
from jitnn.kernels.conv2d import geometry, plan as conv_plan
from jitnn.kernels.epilogue import HARD_SWISH, NONE, RELU
from tests.helpers import apply_activation, per_block, random, reference


def _blocked(x: np.ndarray, block: int) -> np.ndarray:
    n, c, h, w = x.shape
    out = np.empty((n, -(-c // block), h, w, block), np.float32)
    layout.nchw_to_blocked(np.ascontiguousarray(x), out)
    return out


def check_conv(n, c, o, h, w, kernel, strides, dilations, padding, block, activation=RELU,
               residual=False, seed=0):
    """Run one direct convolution and compare it with the reference; returns the launch."""
    rng = np.random.default_rng(seed)
    x = random((n, c, h, w), rng)
    filters = random((o, c) + kernel, rng)
    bias = random((o,), rng)
    packed = K.pack_conv2d_filter(filters, c, 1, block)
    oh = K.conv2d_output_size(h, kernel[0], strides[0], dilations[0], padding[0], padding[1])
    ow = K.conv2d_output_size(w, kernel[1], strides[1], dilations[1], padding[2], padding[3])
    r = random((n, o, oh, ow), rng) if residual else None
    ob = -(-o // block)
    bias_phys = np.zeros(ob * block, np.float32)
    bias_phys[:o] = bias
    out = np.full((n, ob, oh, ow, block), np.nan, np.float32)
    launch = K.conv2d_launch(_blocked(x, block), packed, out, strides, dilations, padding,
                             False, r is None, activation, 0.0, 0.0, algorithm="direct")
    K.run_conv2d_launch(launch, _blocked(x, block), out, bias_phys,
                        None if r is None else _blocked(r, block))
    assert not np.isnan(out).any(), "some output element was not written"
    lanes = out.transpose(0, 1, 4, 2, 3).reshape(n, ob * block, oh, ow)
    assert np.all(lanes[:, o:] == 0), "padding lanes must be zero"
    got = np.empty((n, o, oh, ow), np.float32)
    layout.blocked_to_nchw(out, got)
    options = dict(strides=strides, dilations=dilations, padding=padding)
    expected = reference("conv2d")(x, filters, bias, **options)
    scale = reference("conv2d")(np.abs(x), np.abs(filters), np.abs(bias), **options)
    if r is not None:
        expected, scale = expected + r, scale + np.abs(r)
    expected = apply_activation(expected, activation)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1.6e-6 * (1.0 + scale.max()))
    return launch


def _regions_of(launch) -> np.ndarray:
    return launch.tail[3]            # the direct driver's regions (plan._plan_conv2d)


def test_aspp_960_channels_runs_tap_by_tap():
    """A group's weights past L2 (960 input channels, 2 output blocks of 8:
    540 KiB): tap by tap, each tap's weights read once per group; with one
    group only (16 output channels), by regions (one task could not use the
    threads)."""
    launch = check_conv(1, 960, 64, 16, 16, (3, 3), (1, 1), (12, 12), (12,) * 4, 8)
    assert len(launch.tail[5]) == 11
    launch = check_conv(1, 960, 16, 16, 16, (3, 3), (1, 1), (12, 12), (12,) * 4, 8)
    assert len(launch.tail[5]) == 1 and len(_regions_of(launch)) == 9


# dilation d, padding d, 3x3 on maps of 7, 9, 17, 33: from most taps reading
# padding (d 18 on 7 x 7: only the centre tap) to few (d 2 on 33 x 33)
DILATED = list(itertools.product([2, 6, 12, 18], [7, 9, 17, 33], [3, 9, 17]))


# blocks 4 and 16 by default: d 12 on 17 x 17, 17 channels (regions, partial
# lanes); tests/test_conv2d_kernels.py's direct cases cover those blocks too
@pytest.mark.parametrize("dilation, size, channels, block", per_block(
    DILATED, lambda case: "d{}_{}x{}_c{}".format(case[0], case[1], case[1], case[2]),
    keep={DILATED.index((12, 17, 17))}, unpack=True))
def test_dilated_3x3_padding_equal_to_dilation(block, dilation, size, channels):
    check_conv(2, channels, channels + 4, size, size, (3, 3), (1, 1), (dilation, dilation),
               (dilation,) * 4, block, seed=dilation * 100 + size + channels)


FORCED = [
    # (n, c, o, h, w, kernel, strides, dilations, padding)
    (2, 9, 17, 16, 16, (3, 3), (1, 1), (12, 12), (12, 12, 12, 12)),
    (1, 17, 9, 11, 13, (3, 3), (2, 2), (3, 3), (4, 2, 1, 5)),     # strides, uneven padding
    (1, 9, 16, 9, 7, (5, 3), (1, 2), (4, 2), (6, 5, 3, 3)),       # taps differ per axis
    (2, 16, 8, 6, 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1)),       # dilation 1, a small map
    (1, 8, 8, 4, 4, (3, 3), (1, 1), (5, 5), (6, 6, 6, 6)),        # pixels with no tap: bias
    (1, 12, 12, 3, 20, (1, 3), (1, 1), (1, 7), (2, 1, 7, 7)),     # 1 x k, padded rows
]


# blocks 4 and 16 by default: each way on the strided, unevenly padded case
@pytest.mark.parametrize("way", ["padded", "regions", "tap_passes"])
@pytest.mark.parametrize("case, block", per_block(
    FORCED, lambda c: f"{c[3]}x{c[4]}_k{c[5][0]}{c[5][1]}"
    f"_s{c[6][0]}_d{c[7][0]}{c[7][1]}_p{''.join(map(str, c[8]))}", keep={1}))
def test_regions_tap_passes_and_padding_agree(monkeypatch, way, block, case):
    """Forced each way (regions whatever share of taps reads the input, tap
    by tap whatever the weights' size, or never): the same results, with a
    residual and an activation applied after the store."""
    share = 0.0 if way == "padded" else 1.0
    monkeypatch.setattr(conv_plan, "_TAP_REGION_SHARE", share)
    monkeypatch.setattr(conv_plan, "_TINY_REGION_SHARE", share)
    monkeypatch.setattr(conv_plan, "_TAP_PASS_GROUP_BYTES",
                        0 if way == "tap_passes" else 1 << 40)
    monkeypatch.setattr(conv_plan, "_TAP_PASS_MIN_TASKS", 0)
    n, c, o, h, w, kernel, strides, dilations, padding = case
    launch = check_conv(n, c, o, h, w, kernel, strides, dilations, padding, block,
                        activation=HARD_SWISH, residual=True, seed=c + o)
    assert (len(_regions_of(launch)) > 1) == (way != "padded")
    passes = launch.tail[5]
    assert (len(passes) > 1) == (way == "tap_passes")


def test_aspp_shape_runs_by_regions_without_a_padded_copy():
    launch = check_conv(1, 24, 16, 16, 16, (3, 3), (1, 1), (12, 12), (12,) * 4, 8)
    regions = _regions_of(launch)
    assert launch.pad_copy is None and len(regions) == 9
    # the centre 8 x 8 reads the centre tap only
    assert [4, 12, 4, 12, 1, 2, 1, 2] in regions.tolist()
    # a 3x3 with padding 1 on 56 x 56 keeps the interior and its border tiles
    launch = check_conv(1, 8, 8, 56, 56, (3, 3), (1, 1), (1, 1), (1,) * 4, 8, activation=NONE)
    assert _regions_of(launch).tolist() == [[1, 55, 1, 55, 0, 3, 0, 3]]


@pytest.mark.parametrize("size, dilation, by_regions", [
    (16, 12, True),      # a quarter of the taps read the input
    (9, 2, True),        # 73 %, 20 % of the output in 2 x 2 corners
    (33, 6, True),       # 77 %
    (14, 1, False),      # 91 %
    (7, 1, False),       # 82 %
    (4, 1, False),       # 69 %, but every region smaller than a tile
])
def test_regions_where_most_taps_read_padding_and_regions_hold_whole_tiles(size, dilation,
                                                                          by_regions):
    launch = check_conv(1, 16, 16, size, size, (3, 3), (1, 1), (dilation, dilation),
                        (dilation,) * 4, 8)
    assert (len(_regions_of(launch)) > 1) == by_regions


@pytest.mark.parametrize("out, size, kernel, stride, dilation, pad", [
    (16, 16, 3, 1, 12, 12), (7, 9, 3, 2, 3, 4), (9, 4, 3, 1, 5, 6), (5, 5, 5, 1, 1, 2),
    (12, 3, 1, 1, 1, 5)])
def test_tap_intervals_are_the_taps_inside_the_input(out, size, kernel, stride, dilation, pad):
    runs = geometry.tap_intervals(out, size, kernel, stride, dilation, pad)
    assert runs[0][0] == 0 and runs[-1][1] == out
    assert all(a[1] == b[0] and a[2:] != b[2:] for a, b in zip(runs, runs[1:]))
    for o0, o1, k0, k1 in runs:
        for o in range(o0, o1):
            inside = [k for k in range(kernel) if 0 <= o * stride - pad + k * dilation < size]
            assert inside == list(range(k0, k1))


def test_tiny_region_share():
    regions = np.array([[0, 1, 0, 1, 0, 2, 0, 2], [0, 1, 1, 7, 0, 2, 0, 3],
                        [1, 3, 0, 7, 0, 3, 0, 3]], np.int64)
    assert geometry.tiny_region_share(regions, 6) == pytest.approx(1 / 21)
    assert geometry.tiny_region_share(regions, 7) == pytest.approx(7 / 21)


def test_tap_passes_run_each_tap_over_its_pixels_once():
    geom = conv_plan.direct_geometry(1, 8, 16, 16, 8, False, 1, 16, 16, 3, 3, 1, 1, 12, 12,
                                     12, 12, 8)
    regions, chunks, passes = geometry.tap_passes(geom, 12)
    assert passes[:, 2].tolist() == [geometry.PASS_INIT] + [geometry.PASS_ADD] * 9 + \
        [geometry.PASS_LAST]
    assert regions[0].tolist() == regions[-1].tolist() == [0, 16, 0, 16, 0, 0, 0, 0]
    # tap (0, 1) reads the input from output rows 12 to 15, every column
    assert [12, 16, 0, 16, 0, 1, 1, 2] in regions.tolist()
    for first, end, _ in passes:     # a pass's chunks cover its region once
        r = chunks[first, 0]
        r0, r1, c0, c1 = regions[r, :4]
        assert all(chunks[first:end, 0] == r)
        assert chunks[first:end, 1:].tolist() == [[s, min(s + 12, (r1 - r0) * (c1 - c0))]
                                                 for s in range(0, (r1 - r0) * (c1 - c0), 12)]


def test_tap_regions_cover_the_output_once():
    geom = conv_plan.direct_geometry(1, 8, 16, 16, 8, False, 1, 16, 16, 3, 3, 1, 1, 12, 12,
                                     12, 12, 8)
    regions, share = geometry.tap_regions(geom)
    covered = np.zeros((16, 16), int)
    for r0, r1, c0, c1, *_ in regions:
        covered[r0:r1, c0:c1] += 1
    assert np.all(covered == 1)
    assert share == pytest.approx(0.25)    # (4 * 2 + 8 + 4 * 2) / 48, per axis
