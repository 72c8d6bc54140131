"""Kernel cases of the inverted-residual networks' convolutions (MobileNetV2,
EfficientNet, MnasNet), checked against the float64 reference (``run_case``):
the 1x1 driver's weight prefetch on short chunks (both of its compiles) and
its 6 x 4 tile, the first layer's 6 x 4 tile and its runs of row tiles, the
depthwise driver's row prefetch on large inputs."""

import numba
import numpy as np
import pytest

from jitnn.kernels import _config, conv2d as K, layout
from jitnn.kernels.conv2d import conv1x1, depthwise, plan as conv_plan
from jitnn.kernels.conv2d.geometry import (conv1x1_tile_shape, direct_tile_shape,
                                           gemm1x1_tile_shape)
from jitnn.kernels.epilogue import CLAMP, HARD_SWISH, RELU, SILU
from tests.helpers import apply_activation, per_block, random, reference


def _to_blocked(x, block):
    n, c, h, w = x.shape
    out = np.empty((n, -(-c // block), h, w, block), np.float32)
    layout.nchw_to_blocked(np.ascontiguousarray(x), out)
    return out


def run_case(n, c, o, h, w, kernel, strides=(1, 1), padding=(0, 0, 0, 0), groups=1, block=8,
             activation=(CLAMP, 0.0, 6.0), residual=False, plain=False, seed=0):
    """One convolution through the kernels (the direct algorithm for 3x3
    stride 1, never Winograd), checked against the float64 reference, every
    output element written and the padding lanes zero; returns the packed
    filter."""
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    x = random((n, c, h, w), rng)
    w_oihw = random((o, c // groups, kh, kw), rng)
    b = random((o,), rng)
    packed = K.pack_conv2d_filter(w_oihw, c, groups, block, input_is_plain=plain)
    oh = K.conv2d_output_size(h, kh, strides[0], 1, padding[0], padding[1])
    ow = K.conv2d_output_size(w, kw, strides[1], 1, padding[2], padding[3])
    r = random((n, o, oh, ow), rng) if residual else None
    xin = x if plain else _to_blocked(x, block)
    ob = -(-o // block)
    bias = np.zeros(ob * block, np.float32)
    bias[:o] = b
    out = np.full((n, ob, oh, ow, block), np.nan, np.float32)
    res = _to_blocked(r, block) if residual else None
    code, p0, p1 = activation
    launch = K.conv2d_launch(xin, packed, out, strides, (1, 1), padding, False, res is None,
                             code, p0, p1, algorithm="direct")
    K.run_conv2d_launch(launch, xin, out, bias, res)
    assert not np.isnan(out).any(), "some output element was not written"
    lanes = out.transpose(0, 1, 4, 2, 3).reshape(n, ob * block, oh, ow)
    assert np.all(lanes[:, o:] == 0), "padding lanes must be zero"
    got = np.empty((n, o, oh, ow), np.float32)
    layout.blocked_to_nchw(out, got)
    geometry = dict(strides=strides, dilations=(1, 1), padding=padding, groups=groups)
    expected = reference("conv2d")(x, w_oihw, b, **geometry)
    scale = reference("conv2d")(np.abs(x), np.abs(w_oihw), np.abs(b), **geometry)
    if r is not None:
        expected, scale = expected + r, scale + np.abs(r)
    expected = apply_activation(expected, code, p0, p1)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1.6e-6 * (1.0 + scale.max()))
    return packed

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
    P, B = gemm1x1_tile_shape(block, OB)
    chunk, _, _ = conv_plan._gemm_blocking(n, CB, OB, h * w, block, numba.get_num_threads(),
                                           P, B)
    return chunk <= conv1x1._PREFETCH_TILES * P


# blocks 4 and 16 by default: a case with the prefetch and one without
@pytest.mark.parametrize("case, block", per_block(
    PREFETCH_1X1, lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}", keep={0, 4}))
def test_1x1_weight_prefetch(block, case):
    n, c, o, h, w, ahead = case
    if block == 8:
        assert _ahead(n, c, o, h, w, block) == ahead      # both compiles are covered
    packed = run_case(n, c, o, h, w, (1, 1), block=block, residual=True, seed=c + o)
    assert packed.path == "1x1"


# (n, c, o, h, w, stride): output blocks in fours at cb 8 (the 6 x 4 tile
# where there are 32 vector registers) and not; partial last tiles, strided
# (copied) inputs, K-blocks, partial input lanes, two images
TILE_1X1 = [
    (2, 24, 32, 11, 13, 1),
    (1, 96, 64, 9, 9, 2),
    (1, 17, 96, 5, 7, 1),
    (2, 600, 160, 3, 5, 1),
    (1, 40, 40, 7, 7, 1),          # 5 blocks: not in fours
    (1, 3, 32, 1, 1, 1),           # one pixel
]


@pytest.mark.parametrize("case", TILE_1X1,
                         ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}s{c[5]}")
def test_1x1_tile_in_fours(case):
    n, c, o, h, w, s = case
    blocks = -(-o // 8)
    fours = _config.VECTOR_REGISTERS >= 32 and blocks % 4 == 0
    fives = _config.VECTOR_REGISTERS >= 32 and not fours and blocks % 5 == 0
    assert gemm1x1_tile_shape(8, blocks) == (
        (6, 4) if fours else (4, 5) if fives else conv1x1_tile_shape(8, blocks))
    for seed, residual in ((1, True), (2, False)):
        packed = run_case(n, c, o, h, w, (1, 1), (s, s), block=8, residual=residual,
                          seed=seed)
        assert packed.path == "1x1"


# (n, c, h, w, stride): depthwise 3x3, padding 1. Plain-mode inputs over
# depthwise._DW_AHEAD_BYTES prefetch rows ahead (the last rows' prefetches
# stop at the input's end); small ones, padded rows and multipliers do not.
DEPTHWISE_AHEAD = [
    (2, 131, 65, 67, 2),      # partial lanes, odd sizes, two images: ahead at cb 8
    (1, 33, 123, 121, 1),     # stride 1, wide rows: ahead at cb 8
    (1, 17, 9, 11, 2),        # small: no prefetch
    (3, 7, 13, 29, 1),        # C = 7, three images
    (1, 2, 30, 31, 2),        # C = 2 (C = 1 is not depthwise: the direct path)
    (1, 9, 60, 58, 1),        # C = 9
]


# blocks 4 and 16 by default: the two prefetching cases (strides 2 and 1)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case, block", per_block(
    DEPTHWISE_AHEAD, lambda c: f"n{c[0]}c{c[1]}_{c[2]}x{c[3]}s{c[4]}", keep={0, 1}))
def test_depthwise_rows_ahead(block, case, threads):
    """Against the float64 reference on 1 and 2 threads, with the row
    prefetch where the input is large."""
    n, c, h, w, s = case
    if block == 8 and c > 30:
        blocks = -(-c // block)
        assert n * blocks * h * w * block * 4 > depthwise._DW_AHEAD_BYTES   # the prefetch runs
    previous = numba.get_num_threads()
    try:
        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
        packed = run_case(n, c, c, h, w, (3, 3), (s, s), padding=(1, 1, 1, 1), groups=c,
                          block=block, residual=s == 1, seed=c + h)
    finally:
        numba.set_num_threads(previous)
    assert packed.path == "depthwise"


# (n, c, o, h, w, kernel, stride, pad): the first layer (plain input) at cb 8
# with output blocks in fours (the 6 x 4 tile with 32 vector registers), 1, 3,
# 5 or a multiple of 3 of them (a tile of those blocks), and 2 (6 x 2); C = 1,
# 3, 7, odd sizes, two images
FIRST_LAYER = [
    (1, 3, 32, 23, 21, 3, 2, 1),
    (2, 3, 64, 13, 17, 3, 1, 1),
    (1, 1, 32, 9, 11, 3, 2, 0),
    (1, 7, 96, 15, 15, 4, 4, 0),     # a patchify stem
    (2, 3, 16, 11, 9, 3, 2, 1),      # 2 blocks
    (1, 3, 24, 10, 12, 3, 2, 1),     # 3 blocks
    (2, 3, 7, 13, 11, 3, 2, 1),      # 1 block, not full
    (1, 3, 40, 9, 17, 3, 1, 1),      # 5 blocks
    (1, 3, 48, 11, 10, 3, 2, 1),     # 6 blocks: in threes
]


def _first_layer_tile(blocks: int) -> tuple[int, int]:
    if _config.VECTOR_REGISTERS < 32:
        return 6, 2
    if blocks % 4 == 0:
        return 6, 4
    return {1: (12, 1), 3: (8, 3), 5: (4, 5)}.get(blocks, (8, 3) if blocks % 3 == 0 else (6, 2))


@pytest.mark.parametrize("case", FIRST_LAYER,
                         ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}k{c[5]}s{c[6]}")
def test_first_layer_tile_in_fours(case):
    n, c, o, h, w, k, s, p = case
    assert direct_tile_shape(8, True, -(-o // 8)) == _first_layer_tile(-(-o // 8))
    packed = run_case(n, c, o, h, w, (k, k), (s, s), padding=(p, p, p, p), block=8,
                      plain=True, seed=o + h)
    assert packed.path == "first_layer"


# (n, c, o, h, w, kernel, stride, pad, block, activation, residual): the first
# layer's row tiles run in runs along each interior row, a task per row, the
# last tile moved back over the row's end (interior widths 13, 17, 26, 35 and
# 14: 2-5 tiles a row); C = 1-4, blocks 4/8/16, two images, post-store
# activations; 7 output blocks in twos (not whole groups: one tile a call)
FIRST_LAYER_RUNS = [
    (2, 3, 32, 21, 29, 3, 2, 1, 8, (HARD_SWISH, 0.0, 0.0), False),
    # (each case compiles its own tiles, 8-11 s: the default run keeps two)
    pytest.param((1, 2, 16, 15, 40, 7, 2, 3, 8, (CLAMP, 0.0, 6.0), True),
                 marks=pytest.mark.slow),
    pytest.param((1, 4, 8, 9, 30, 5, 1, 2, 4, (SILU, 0.0, 0.0), False),
                 marks=pytest.mark.slow),
    (1, 1, 32, 8, 37, 3, 1, 1, 16, (RELU, 0.0, 0.0), True),
    pytest.param((2, 3, 56, 10, 30, 3, 2, 1, 8, (CLAMP, 0.0, 6.0), False),
                 marks=pytest.mark.slow),
]


@pytest.mark.parametrize("case", FIRST_LAYER_RUNS,
                         ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_w{c[4]}k{c[5]}s{c[6]}b{c[8]}")
def test_first_layer_row_runs(case):
    n, c, o, h, w, k, s, p, block, activation, residual = case
    packed = run_case(n, c, o, h, w, (k, k), (s, s), padding=(p, p, p, p), block=block,
                      activation=activation, residual=residual, plain=True, seed=o + w)
    # the plan: a chunk per interior row, every one of them whole
    oh = K.conv2d_output_size(h, k, s, 1, p, p)
    ow = K.conv2d_output_size(w, k, s, 1, p, p)
    launch = K.conv2d_launch(np.zeros((n, c, h, w), np.float32), packed,
                             np.zeros((n, -(-o // block), oh, ow, block), np.float32),
                             (s, s), (1, 1), (p, p, p, p), algorithm="direct")
    regions, chunks = launch.tail[3], launch.tail[4]
    r0, r1, c0, c1 = regions[0, :4]
    interior = chunks[chunks[:, 0] >= 0]
    assert len(interior) == r1 - r0
    assert np.all(interior[:, 2] - interior[:, 1] == c1 - c0)
