"""conv2d kernels (kernels/conv2d/) against the float64 numpy reference.

Each case packs a random filter, runs ``conv2d_forward`` on blocked input (or
plain nchw for the first-layer path) into an output filled with NaN, converts
back with the layout kernels and compares with the op's float64 reference
(``reference("conv2d")``, plus the residual and the activation). Every case
also checks that every element was written and that padding lanes are zero.

Compile time dominates: the kernels specialize on the block size (and on C
for the first-layer path), so the default run uses blocks 4, 8, 16 and a few
first-layer channel counts; blocks 1 and 32 are in the slow set.
"""

import numba
import numpy as np
import pytest

from jitnn.kernels import _config, conv2d as K
from jitnn.kernels.conv2d import conv1x1, depthwise, direct, plan as conv_plan, winograd
from jitnn.kernels import layout
from jitnn.kernels.epilogue import (CLAMP, GELU, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, NONE, RELU,
                                    SIGMOID, SILU, TANH)
from tests.assembly import check_packed_fma, fresh_asm, needs_packed_fma
from tests.helpers import apply_activation, random, reference

#: Winograd's tolerance factor over the direct sum's 4 (see the Winograd tests:
#: its transforms' constants, up to 8 and 1/24, round ~10x more)
WINOGRAD_ERROR = 40

ACTIVATIONS = [(NONE, 0.0, 0.0), (RELU, 0.0, 0.0), (CLAMP, -0.5, 0.75),
               (CLAMP, 0.25, 6.0),  # min > 0: padding lanes must still be 0
               (LEAKY_RELU, 0.1, 0.0), (SIGMOID, 0.0, 0.0), (TANH, 0.0, 0.0),
               (HARD_SWISH, 0.0, 0.0), (GELU, 0.0, 0.0), (SILU, 0.0, 0.0),
               (HARD_SIGMOID, 0.2, 0.5)]  # hard_sigmoid(0) = 0.5: padding lanes


def _to_blocked(x, block):
    n, c, h, w = x.shape
    out = np.empty((n, -(-c // block), h, w, block), np.float32)
    layout.nchw_to_blocked(np.ascontiguousarray(x), out)
    return out


def run_case(n=1, c=8, o=8, h=7, w=9, kernel=(3, 3), strides=(1, 1), dilations=(1, 1),
             padding=(0, 0, 0, 0), groups=1, block=8, activation=(NONE, 0.0, 0.0),
             bias=True, residual=False, plain=False, seed=0, filter_view=None,
             residual_in_place=False, algorithm="direct", expect_path=None):
    """Run one convolution through the kernels and check it; returns the
    packed filter (so callers can check the path). The direct kernels by
    default (``algorithm="auto"`` would run Winograd on 3x3 stride-1 cases);
    the tolerance is Winograd's when Winograd ran; ``expect_path``: check
    what ran."""
    rng = np.random.default_rng(seed)
    kh, kw = kernel
    x = random((n, c, h, w), rng)
    w_oihw = random((o, c // groups, kh, kw), rng)
    if filter_view is not None:        # e.g. an hwio array passed as an oihw view
        w_oihw = filter_view(w_oihw)
    b = random((o,), rng) if bias else None
    packed = K.pack_conv2d_filter(w_oihw, c, groups, block, input_is_plain=plain)
    oh = K.conv2d_output_size(h, kh, strides[0], dilations[0], padding[0], padding[1])
    ow = K.conv2d_output_size(w, kw, strides[1], dilations[1], padding[2], padding[3])
    r = random((n, o, oh, ow), rng) if residual else None
    xin = x if plain else _to_blocked(x, block)
    ob = -(-o // block)
    bias_phys = None
    if b is not None:
        bias_phys = np.zeros(ob * block, np.float32)
        bias_phys[:o] = b
    if residual_in_place:
        out = _to_blocked(r, block)
        res = out
    else:
        out = np.full((n, ob, oh, ow, block), np.nan, np.float32)
        res = _to_blocked(r, block) if residual else None
    code, p0, p1 = activation
    launch = K.conv2d_launch(xin, packed, out, strides, dilations, padding, bias_phys is None,
                             res is None, code, p0, p1, algorithm=algorithm)
    K.run_conv2d_launch(launch, xin, out, bias_phys, res)

    assert not np.isnan(out).any(), "some output element was not written"
    lanes = out.transpose(0, 1, 4, 2, 3).reshape(n, ob * block, oh, ow)
    assert np.all(lanes[:, o:] == 0), "padding lanes must be zero"
    got = np.empty((n, o, oh, ow), np.float32)
    layout.blocked_to_nchw(out, got)

    geometry = dict(strides=strides, dilations=dilations, padding=padding, groups=groups)
    expected = reference("conv2d")(x, w_oihw, b, **geometry)
    # float32 rounding grows with the sum of |terms|; activations are 1-Lipschitz-ish
    scale = reference("conv2d")(np.abs(x), np.abs(w_oihw), None if b is None else np.abs(b),
                                **geometry)
    if r is not None:
        expected, scale = expected + r, scale + np.abs(r)
    expected = apply_activation(expected, code, p0, p1)
    atol = 4e-7 * (1.0 + scale.max()) * (WINOGRAD_ERROR if launch.path == "winograd" else 4)
    np.testing.assert_allclose(got, expected, rtol=0, atol=atol)
    if expect_path is not None:
        assert launch.path == expect_path
    return packed


# --- geometry, block 8 -------------------------------------------------------

GEOMETRY = [
    # (n, c, o, h, w, kernel, strides, dilations, padding, groups)
    (1, 8, 8, 7, 9, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (3, 3, 17, 9, 7, (3, 3), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (1, 1, 9, 11, 13, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1),
    (1, 7, 16, 13, 11, (7, 7), (2, 2), (1, 1), (3, 3, 3, 3), 1),
    (1, 9, 7, 9, 11, (3, 2), (1, 2), (1, 1), (1, 0, 0, 1), 1),
    (3, 17, 9, 11, 9, (3, 3), (3, 3), (1, 1), (2, 1, 1, 2), 1),
    (1, 16, 3, 15, 13, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 1),
    (1, 8, 8, 13, 11, (2, 3), (2, 1), (2, 2), (1, 3, 2, 0), 1),
    (1, 9, 8, 11, 11, (1, 1), (3, 3), (1, 1), (0, 0, 0, 0), 1),        # stride > kernel
    (1, 64, 64, 9, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 64, 17, 7, 5, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (3, 17, 64, 5, 7, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1),
    (1, 16, 16, 6, 5, (1, 1), (1, 1), (1, 1), (1, 0, 2, 1), 1),        # 1x1 with padding
    (1, 3, 8, 5, 5, (5, 5), (1, 1), (1, 1), (0, 0, 0, 0), 1),          # one output pixel
    (1, 7, 9, 3, 4, (5, 5), (1, 1), (1, 1), (2, 2, 2, 2), 1),          # no interior pixel
    (1, 8, 8, 9, 9, (3, 3), (4, 4), (1, 1), (0, 2, 1, 0), 1),          # stride > kernel
    # groups
    (1, 16, 16, 9, 7, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 2),
    (1, 12, 24, 9, 11, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),       # 4 ch per group
    (3, 18, 9, 7, 9, (3, 2), (2, 1), (1, 1), (0, 1, 1, 0), 9),         # 2 in, 1 out per group
    (1, 64, 64, 7, 7, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 4),
    (1, 9, 27, 7, 9, (3, 3), (1, 1), (2, 2), (2, 2, 2, 2), 3),
]


@pytest.mark.parametrize("case", GEOMETRY, ids=lambda c: "x".join(map(str, c[1:3])) + f"_k{c[5][0]}{c[5][1]}_s{c[6][0]}{c[6][1]}_d{c[7][0]}_g{c[9]}")
def test_geometry_block8(case):
    n, c, o, h, w, kernel, strides, dilations, padding, groups = case
    packed = run_case(n, c, o, h, w, kernel, strides, dilations, padding, groups, block=8,
                      activation=(RELU, 0.0, 0.0), seed=c * 100 + o)
    expected_path = "1x1" if kernel == (1, 1) else "direct"
    if groups == c and groups > 1:
        expected_path = "depthwise"
    assert packed.path == expected_path



PADDED = [case for case in GEOMETRY if any(case[8]) and case[5] != (1, 1)]


@pytest.mark.parametrize("pad_copy", [True, False], ids=["pad_copy", "border_tiles"])
@pytest.mark.parametrize("case", PADDED, ids=lambda c: "x".join(map(str, c[1:3])) + f"_k{c[5][0]}{c[5][1]}_s{c[6][0]}{c[6][1]}_p{''.join(map(str, c[8]))}_g{c[9]}")
def test_padding_both_ways(monkeypatch, case, pad_copy):
    """Padded convolutions agree whether the wrapper pads the whole input
    once (pad_blocked, every pixel interior) or runs border tiles on per-tile
    patches: forced both ways, whatever share the border has."""
    monkeypatch.setattr(conv_plan, "_PAD_COPY_SHARE", 0.0 if pad_copy else 2.0)
    if not pad_copy:          # (a strided conv also pads its input for a row tile)
        monkeypatch.setattr(conv_plan, "row_tile_pixels", lambda *args, **kwargs: 0)
    n, c, o, h, w, kernel, strides, dilations, padding, groups = case
    run_case(n, c, o, h, w, kernel, strides, dilations, padding, groups, block=8,
             activation=(RELU, 0.0, 0.0), residual=True, seed=c * 10 + o)


def test_pad_blocked_matches_numpy_pad(threads):
    """On 1 and 2 threads (its serial and parallel compiles)."""
    rng = np.random.default_rng(3)
    x = random((2, 3, 5, 7, 8), rng)
    pt, pb, pl, pr = 2, 1, 0, 3
    expected = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr), (0, 0)))
    got = np.full(expected.shape, np.nan, np.float32)
    K.pad_blocked(x.reshape(-1), got.reshape(-1), 2, 3, 5, 7, 8, pt, pl, 5 + pt + pb,
                  7 + pl + pr)
    np.testing.assert_array_equal(got, expected)

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
# kernel, stride and block; the others are slow.
DEPTHWISE_EDGE_TILES = [
    # (n, c, h, w, kernel, strides, padding, block)
    (1, 16, 9, 7, (3, 3), (1, 1), (1, 1, 1, 1), 8),        # one tile, masked both sides
    pytest.param((2, 24, 11, 56, (3, 3), (1, 1), (1, 1, 1, 1), 8),     # edge, 3 wide, edge
                 marks=pytest.mark.slow),
    pytest.param((1, 8, 6, 112, (3, 3), (2, 2), (1, 1, 1, 1), 8), marks=pytest.mark.slow),
    (1, 17, 13, 29, (5, 5), (1, 1), (2, 2, 2, 2), 8),
    (3, 9, 7, 31, (5, 5), (2, 2), (2, 2, 2, 2), 8),
    (1, 7, 8, 33, (3, 3), (2, 2), (0, 1, 0, 1), 4),        # asymmetric, odd width
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

@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("bias, residual", [(False, False), (True, False), (True, True),
                                            (False, True)])
@pytest.mark.parametrize("activation", ACTIVATIONS, ids=lambda a: f"act{a[0]}_{a[1]}")
def test_epilogue_direct(block, bias, residual, activation):
    run_case(1, 9, 19, 7, 9, (3, 3), (1, 1), (1, 1), (1, 0, 1, 2), 1, block, activation,
             bias, residual, seed=block)


@pytest.mark.parametrize("block", [4, 8, 16])
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
    (1, 3, 17, 23, 30, (3, 3), (2, 2), (1, 1, 1, 1), 1, True, False),     # first layer
    (2, 3, 9, 9, 13, (3, 3), (1, 1), (1, 0, 2, 1), 1, True, False),
    (2, 9, 17, 11, 14, (3, 3), (1, 1), (1, 1, 1, 1), 1, False, True),     # direct
    (1, 7, 3, 13, 5, (5, 3), (2, 1), (2, 2, 1, 1), 1, False, False)]


@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("activation", [(SILU, 0.0, 0.0), (SIGMOID, 0.0, 0.0), (GELU, 0.0, 0.0)],
                         ids=lambda a: f"act{a[0]}")
def test_activation_spans(block, activation):
    for n, c, o, h, w, kernel, strides, padding, groups, plain, in_place in SPAN_CASES:
        run_case(n, c, o, h, w, kernel, strides, (1, 1), padding, groups, block, activation,
                 residual=True, residual_in_place=in_place, plain=plain, seed=o + h)


# --- block sizes 4 and 16 on a spread of geometry --------------------------

BLOCK_GEOMETRY = [
    (3, 7, 17, 9, 11, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    (1, 17, 9, 11, 7, (5, 5), (2, 2), (2, 2), (4, 3, 2, 4), 1),
    (1, 64, 64, 7, 9, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1),
    (1, 16, 16, 9, 9, (3, 2), (3, 2), (1, 1), (0, 0, 1, 0), 1),
    (1, 24, 24, 9, 9, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 3),
    (1, 9, 18, 9, 10, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 9),   # depthwise x2
    (3, 17, 17, 11, 13, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 17),
]


@pytest.mark.parametrize("block", [4, 16])
@pytest.mark.parametrize("case", BLOCK_GEOMETRY, ids=lambda c: f"c{c[1]}o{c[2]}_k{c[5][0]}{c[5][1]}_g{c[9]}")
def test_geometry_blocks_4_16(block, case):
    n, c, o, h, w, kernel, strides, dilations, padding, groups = case
    run_case(n, c, o, h, w, kernel, strides, dilations, padding, groups, block,
             (LEAKY_RELU, 0.2, 0.0), residual=True, seed=block + c)


# --- the API ----------------------------------------------------------------

def test_residual_may_be_the_output():
    run_case(1, 16, 24, 9, 9, (3, 3), padding=(1, 1, 1, 1), residual=True,
             residual_in_place=True, activation=(RELU, 0.0, 0.0))
    run_case(1, 16, 16, 9, 9, (3, 3), padding=(1, 1, 1, 1), groups=16, residual=True,
             residual_in_place=True, activation=(SIGMOID, 0.0, 0.0))


@pytest.mark.parametrize("width", [17, 20, 56])
def test_depthwise_moved_back_tile_with_in_place_residual(width):
    """A row's interior that is not a whole number of tiles ends with a tile
    moved back over pixels already stored: it must not store them again (an
    in-place residual was added twice there before this test)."""
    for activation in ((RELU, 0.0, 0.0), (SIGMOID, 0.0, 0.0)):
        run_case(1, 16, 16, 5, width, (3, 3), padding=(1, 1, 1, 1), groups=16, residual=True,
                 residual_in_place=True, activation=activation, seed=width)


@pytest.mark.parametrize("block", [4, 8, 16])
def test_direct_moved_back_last_tile(block):
    """49 and 25 interior pixels: the last tile moves back over pixels already
    stored (register tile, and the stack-array path for partial output lanes
    at O = 20); with an in-place residual and an activation applied after the
    store, a pixel stored twice would come out wrong."""
    for o in (24, 20):
        run_case(1, 16, o, 7, 7, (3, 3), padding=(1, 1, 1, 1), block=block, residual=True,
                 residual_in_place=True, activation=(SIGMOID, 0.0, 0.0), seed=o)
        run_case(2, 9, o, 5, 5, (3, 3), padding=(1, 1, 1, 1), block=block, residual=True,
                 activation=(CLAMP, -0.5, 0.5), seed=o + 1)


@pytest.mark.parametrize("name, view", [
    ("hwio", lambda w: np.ascontiguousarray(w.transpose(2, 3, 1, 0)).transpose(3, 2, 0, 1)),
    ("ohwi", lambda w: np.ascontiguousarray(w.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)),
    ("ihwo", lambda w: np.ascontiguousarray(w.transpose(1, 2, 3, 0)).transpose(3, 0, 1, 2)),
])
def test_filter_views(name, view):
    run_case(1, 9, 17, 7, 8, (3, 2), padding=(1, 1, 0, 1), filter_view=view)
    run_case(1, 9, 18, 7, 8, (3, 3), padding=(1, 1, 1, 1), groups=9, filter_view=view)
    run_case(1, 3, 8, 7, 8, (3, 3), padding=(1, 1, 1, 1), plain=True, filter_view=view)


def test_bias_of_logical_length_is_accepted():
    rng = np.random.default_rng(1)
    x = _to_blocked(random((1, 5, 6, 6), rng), 8)
    w = random((5, 5, 3, 3), rng)
    b = random((5,), rng)
    packed = K.pack_conv2d_filter(w, 5, 1, 8)
    out = np.empty((1, 1, 4, 4, 8), np.float32)
    K.conv2d_forward(x, packed, out, bias=b)
    got = np.empty((1, 5, 4, 4), np.float32)
    layout.blocked_to_nchw(out, got)
    plain = np.empty((1, 5, 6, 6), np.float32)
    layout.blocked_to_nchw(x, plain)
    np.testing.assert_allclose(got, reference("conv2d")(plain, w, b), atol=1e-4)


def test_parallel_matches_serial():
    rng = np.random.default_rng(2)
    x = _to_blocked(random((2, 24, 13, 17), rng), 8)
    packed = K.pack_conv2d_filter(random((40, 24, 3, 3), rng), 24, 1, 8)
    outs = []
    saved = numba.get_num_threads()
    try:
        for threads in (1, numba.config.NUMBA_NUM_THREADS):
            numba.set_num_threads(threads)
            out = np.empty((2, 5, 13, 17, 8), np.float32)
            K.conv2d_forward(x, packed, out, padding=(1, 1, 1, 1), activation=RELU)
            outs.append(out)
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(outs[0], outs[1])


def test_launch_plans_are_reused_and_arrays_still_checked():
    """conv2d_forward plans a shape once per filter; a second call with other
    data reuses the plan, is right, and still rejects bad arrays."""
    rng = np.random.default_rng(5)
    w = random((24, 16, 1, 1), rng)
    packed = K.pack_conv2d_filter(w, 16, 1, 8)
    out = np.empty((2, 3, 5, 7, 8), np.float32)
    for trial in range(2):
        x = random((2, 16, 5, 7), rng)
        K.conv2d_forward(_to_blocked(x, 8), packed, out, activation=RELU)
        got = np.empty((2, 24, 5, 7), np.float32)
        layout.blocked_to_nchw(out, got)
        np.testing.assert_allclose(got, reference("conv2d")(x, w, activation="relu"),
                                   rtol=1e-5, atol=1e-5)
    assert len(packed.launches) == 1
    xb = _to_blocked(x, 8)
    with pytest.raises(ValueError, match="float32"):
        K.conv2d_forward(xb, packed, out.astype(np.float64), activation=RELU)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.conv2d_forward(np.asfortranarray(xb), packed, out, activation=RELU)
    with pytest.raises(ValueError, match="bias"):
        K.conv2d_forward(xb, packed, out, bias=np.zeros(23, np.float32))
    # the 1x1 blocking depends on the thread count: one plan per count
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        K.conv2d_forward(xb, packed, out, activation=RELU)
    finally:
        numba.set_num_threads(saved)
    # plans: (no bias, threads), (a bias: the bad one, planned before its check),
    # and (no bias, 1 thread) unless that was the count already
    assert len(packed.launches) == (2 if saved == 1 else 3)
    # the plans kept per filter are bounded
    for width in range(1, 2 * K._MAX_LAUNCHES):
        K.conv2d_forward(np.zeros((1, 2, 1, width, 8), np.float32), packed,
                         np.empty((1, 3, 1, width, 8), np.float32))
    assert len(packed.launches) <= K._MAX_LAUNCHES


def test_padded_convs_on_two_threads():
    """The padded-input scratch buffer is per thread: two threads running
    padded convolutions of different sizes at once get their own answers."""
    import threading
    rng = np.random.default_rng(6)
    cases = []
    for c, o, h in [(16, 16, 7), (24, 8, 9), (8, 16, 5)]:
        x = _to_blocked(random((1, c, h, h), rng), 8)
        packed = K.pack_conv2d_filter(random((o, c, 3, 3), rng), c, 1, 8)
        expected = np.empty((1, -(-o // 8), h, h, 8), np.float32)
        K.conv2d_forward(x, packed, expected, padding=(1, 1, 1, 1))
        cases.append((x, packed, expected))
    errors = []

    def work(order):
        for i in range(30):
            x, packed, expected = cases[order[i % 3]]
            out = np.empty_like(expected)
            K.conv2d_forward(x, packed, out, padding=(1, 1, 1, 1))
            if not np.array_equal(out, expected):
                errors.append(i)
    threads = [threading.Thread(target=work, args=(order,)) for order in ((0, 1, 2), (2, 0, 1))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_wrapper_rejects_bad_buffers():
    rng = np.random.default_rng(3)
    x = _to_blocked(random((1, 8, 6, 6), rng), 8)
    packed = K.pack_conv2d_filter(random((8, 8, 3, 3), rng), 8, 1, 8)
    out = np.empty((1, 1, 4, 4, 8), np.float32)
    with pytest.raises(ValueError, match="out has shape"):
        K.conv2d_forward(x, packed, np.empty((1, 1, 6, 6, 8), np.float32))
    with pytest.raises(ValueError, match="float32"):
        K.conv2d_forward(x.astype(np.float64), packed, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.conv2d_forward(np.asfortranarray(x), packed, out)
    with pytest.raises(ValueError, match="x has shape"):
        K.conv2d_forward(_to_blocked(random((1, 9, 6, 6), rng), 8), packed, out)
    with pytest.raises(ValueError, match="residual"):
        K.conv2d_forward(x, packed, out, residual=np.empty((1, 1, 4, 5, 8), np.float32))
    with pytest.raises(ValueError, match="bias"):
        K.conv2d_forward(x, packed, out, bias=np.zeros(7, np.float32))
    with pytest.raises(ValueError, match="output would be"):
        K.conv2d_forward(x, packed, np.empty((1, 1, 0, 0, 8), np.float32),
                         dilations=(4, 4))
    with pytest.raises(ValueError, match="activation"):
        K.conv2d_forward(x, packed, out, activation=99)
    with pytest.raises(ValueError, match="overlap"):
        K.conv2d_forward(x, packed, x.reshape(-1)[:128].reshape(1, 1, 4, 4, 8))
    # a residual sharing out's memory: accepted as another view of the same
    # buffer, rejected when it starts elsewhere
    big = np.zeros(136, np.float32)
    out_view = big[:128].reshape(1, 1, 4, 4, 8)
    K.conv2d_forward(x, packed, out_view, residual=big[:128].reshape(1, 1, 4, 4, 8))
    with pytest.raises(ValueError, match="residual must be out itself or not overlap"):
        K.conv2d_forward(x, packed, out_view, residual=big[8:].reshape(1, 1, 4, 4, 8))
    with pytest.raises(ValueError, match="groups"):
        K.pack_conv2d_filter(random((8, 3, 3, 3), rng), 8, 3, 8)
    with pytest.raises(ValueError, match="input channels"):
        K.pack_conv2d_filter(random((8, 4, 3, 3), rng), 8, 1, 8)
    with pytest.raises(ValueError, match="block"):
        K.pack_conv2d_filter(random((8, 8, 3, 3), rng), 8, 1, 6)


# --- the serial compiles (one thread) -------------------------------------------

_SERIAL_CASES = {   # (n, c, o, h, w, kernel, strides, padding, groups, plain, algorithm)
    "direct": (2, 16, 16, 9, 11, (3, 3), (2, 2), (1, 1, 1, 1), 1, False, "direct"),
    "1x1": (2, 16, 24, 7, 9, (1, 1), (1, 1), (0, 0, 0, 0), 1, False, "direct"),
    "depthwise": (2, 16, 16, 9, 11, (3, 3), (1, 1), (1, 1, 1, 1), 16, False, "direct"),
    "winograd": (2, 16, 16, 9, 11, (3, 3), (1, 1), (1, 1, 1, 1), 1, False, "winograd"),
    "first_layer": (2, 3, 16, 9, 11, (3, 3), (1, 1), (1, 1, 1, 1), 1, True, "direct"),
}


@pytest.mark.parametrize("block", [8, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("path", list(_SERIAL_CASES))
def test_each_driver_runs_its_serial_compile_on_one_thread(path, block, monkeypatch,
                                                           record_calls):
    """On one thread a conv driver runs its serial compile (kernels/_config.py,
    ThreadCountKernel), on two its parallel one; both match the reference,
    bias, residual and activation included."""
    n, c, o, h, w, kernel, strides, padding, groups, plain, algorithm = _SERIAL_CASES[path]
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread")
    rng = np.random.default_rng(block)
    x = random((n, c, h, w), rng)
    w_oihw = random((o, c // groups) + kernel, rng)
    packed = K.pack_conv2d_filter(w_oihw, c, groups, block, input_is_plain=plain)
    xin = x if plain else _to_blocked(x, block)
    oh = K.conv2d_output_size(h, kernel[0], strides[0], 1, padding[0], padding[1])
    ow = K.conv2d_output_size(w, kernel[1], strides[1], 1, padding[2], padding[3])
    ob = -(-o // block)
    bias = np.zeros(ob * block, np.float32)
    bias[:o] = random((o,), rng)
    residual_nchw = random((n, o, oh, ow), rng)
    residual = _to_blocked(residual_nchw, block)
    expected = apply_activation(reference("conv2d")(x, w_oihw, bias[:o], strides=strides,
                                                    padding=padding, groups=groups)
                                + residual_nchw, RELU)
    saved = numba.get_num_threads()
    results = {}
    try:
        for threads in (1, 2):
            numba.set_num_threads(threads)
            out = np.full((n, ob, oh, ow, block), np.nan, np.float32)
            launch = K.conv2d_launch(xin, packed, out, strides, (1, 1), padding, False, False,
                                     RELU, 0.0, 0.0, algorithm=algorithm)
            calls = record_calls(launch.driver, "serial", "parallel")
            K.run_conv2d_launch(launch, xin, out, bias, residual)
            monkeypatch.undo()
            assert calls == ["serial" if threads == 1 else "parallel"]
            got = out.transpose(0, 1, 4, 2, 3).reshape(n, ob * block, oh, ow)
            assert np.all(got[:, o:] == 0)
            tolerance = 2e-5 if algorithm == "winograd" else 2e-6
            np.testing.assert_allclose(got[:, :o], expected, rtol=tolerance,
                                       atol=tolerance * np.abs(expected).max())
            results[threads] = got
    finally:
        numba.set_num_threads(saved)
    np.testing.assert_array_equal(results[1], results[2])


# --- generated code -----------------------------------------------------------

@pytest.mark.slow     # a fresh compile of the driver for its assembly: 5-26 s
@needs_packed_fma
@pytest.mark.parametrize("kind", ["direct", "first_layer"])
def test_conv_tiles_use_packed_fma(monkeypatch, kind):
    if kind == "direct" and _config.HOST_AVX512:
        # On an AVX-512 Xeon (Emerald Rapids): the block-8 direct driver's
        # loops that this check takes for the tile's show ymm stores to the
        # stack, with numba's own target too (no AVX-512 tuning); the 12 x 2
        # block-16 tile's show stores of pointers. Not yet traced to the
        # register tile or to the partial tiles' stack loop.
        pytest.xfail("stack stores in the direct driver's FMA loops on AVX-512 hosts")
    plain = kind == "first_layer"
    asms = fresh_asm(monkeypatch, "_conv_tiles", lambda: run_case(
        1, 3 if plain else 16, 16, 9, 9, (3, 3), padding=(1, 1, 1, 1), plain=plain),
        module=direct, driver_tables=("_conv_drivers",))
    check_packed_fma(asms)


@pytest.mark.slow
@needs_packed_fma
def test_winograd_products_use_packed_fma(monkeypatch):
    asms = fresh_asm(monkeypatch, "_products", lambda: run_case(
        1, 16, 16, 9, 9, (3, 3), padding=(1, 1, 1, 1), algorithm="winograd",
        expect_path="winograd"), module=winograd, driver_tables=("_drivers",))
    check_packed_fma(asms)


@pytest.mark.slow     # a fresh compile of the driver for its assembly: 5-26 s
@needs_packed_fma
def test_depthwise_rows_use_packed_fma(monkeypatch):
    asms = fresh_asm(monkeypatch, "_dw_rows", lambda: run_case(
        1, 16, 16, 9, 30, (3, 3), padding=(1, 1, 1, 1), groups=16), module=depthwise,
        driver_tables=("_depthwise_drivers",))
    check_packed_fma(asms)


# --- slow: blocks 1 and 32, bigger shapes --------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("block", [1, 32])
@pytest.mark.parametrize("case", BLOCK_GEOMETRY[:6], ids=lambda c: f"c{c[1]}o{c[2]}_g{c[9]}")
def test_geometry_blocks_1_32(block, case):
    n, c, o, h, w, kernel, strides, dilations, padding, groups = case
    run_case(n, c, o, h, w, kernel, strides, dilations, padding, groups, block,
             (HARD_SWISH, 0.0, 0.0), residual=True, seed=block)


@pytest.mark.slow
@pytest.mark.parametrize("block", [4, 8, 16])
def test_resnet_shapes(block):
    run_case(1, 64, 64, 56, 56, (3, 3), padding=(1, 1, 1, 1), block=block,
             activation=(RELU, 0.0, 0.0), residual=True)
    run_case(1, 256, 64, 28, 28, (1, 1), block=block)
    run_case(3, 3, 64, 64, 64, (7, 7), (2, 2), padding=(3, 3, 3, 3), block=block, plain=True)
    run_case(1, 144, 144, 28, 28, (3, 3), padding=(1, 1, 1, 1), groups=144, block=block)
    run_case(1, 512, 512, 7, 7, (3, 3), padding=(1, 1, 1, 1), block=block)


# --- Winograd F(4x4, 3x3) ------------------------------------------------------------

# (n, c, o, h, w, padding): channels that do not fill a block in and out,
# odd sizes, outputs that end in partial tiles, asymmetric and no padding,
# images smaller than a tile, a batch
WINOGRAD = [
    (1, 1, 9, 7, 9, (1, 1, 1, 1)),
    (2, 3, 7, 9, 11, (0, 0, 0, 0)),
    (1, 7, 17, 11, 5, (2, 0, 1, 2)),
    (3, 9, 3, 5, 6, (1, 1, 1, 1)),
    (1, 17, 24, 13, 13, (0, 2, 2, 0)),
    (1, 16, 16, 3, 3, (0, 0, 0, 0)),          # one output pixel
    (2, 64, 40, 14, 14, (1, 1, 1, 1)),
    (2, 16, 8, 12, 12, (1, 1, 1, 1)),         # rows of tiles padded to odd lines
]


@pytest.mark.parametrize("case", WINOGRAD, ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}")
def test_winograd(case):
    n, c, o, h, w, padding = case
    for activation, residual in ((ACTIVATIONS[2], True), (ACTIVATIONS[3], False),
                                 (ACTIVATIONS[7], True)):
        run_case(n, c, o, h, w, padding=padding, activation=activation, residual=residual,
                 algorithm="winograd", expect_path="winograd", seed=c + o)
    run_case(n, c, o, h, w, padding=padding, residual=True, residual_in_place=True,
             algorithm="winograd", expect_path="winograd")


@pytest.mark.parametrize("block", [4, pytest.param(16, marks=pytest.mark.slow)])
def test_winograd_blocks_4_16(block):
    run_case(2, 9, 17, 9, 7, padding=(1, 1, 1, 1), block=block, residual=True,
             activation=(RELU, 0.0, 0.0), algorithm="winograd", expect_path="winograd")


@pytest.mark.slow
@pytest.mark.parametrize("block", [1, 32])
def test_winograd_blocks_1_32(block):
    run_case(2, 9, 33, 9, 7, padding=(1, 1, 1, 1), block=block, residual=True,
             activation=(GELU, 0.0, 0.0), algorithm="winograd", expect_path="winograd")


@pytest.mark.slow
def test_winograd_network_shapes():
    for n, c, h in ((1, 64, 56), (1, 128, 28), (2, 256, 14), (1, 512, 7)):
        run_case(n, c, c, h, h, padding=(1, 1, 1, 1), activation=(RELU, 0.0, 0.0),
                 residual=True, algorithm="winograd", expect_path="winograd")


def test_winograd_rounds_about_ten_times_more_than_the_direct_sum():
    """What WINOGRAD_ERROR allows for: on ResNet-like data (64 channels,
    weights ~1/sqrt(9 C)) Winograd's largest error against the float64
    reference is ~12x the direct kernel's (measured; the tolerance allows 10x
    the direct one's 4)."""
    rng = np.random.default_rng(7)
    x = random((1, 64, 20, 20), rng)
    w_oihw = random((64, 64, 3, 3), rng) / 24
    packed = K.pack_conv2d_filter(w_oihw, 64, 1, 8)
    expected = reference("conv2d")(x, w_oihw, padding=1)
    errors = {}
    for algorithm in ("direct", "winograd"):
        out = np.empty((1, 8, 20, 20, 8), np.float32)
        K.conv2d_forward(_to_blocked(x, 8), packed, out, padding=(1, 1, 1, 1),
                         algorithm=algorithm)
        got = np.empty((1, 64, 20, 20), np.float32)
        layout.blocked_to_nchw(out, got)
        errors[algorithm] = np.abs(got - expected).max()
    assert 2 * errors["direct"] < errors["winograd"] < 30 * errors["direct"]


@pytest.mark.parametrize("algorithm, expected", [("auto", "winograd"), ("direct", "direct"),
                                                 ("winograd", "winograd")])
def test_algorithm_choice(algorithm, expected):
    run_case(1, 16, 16, 9, 9, padding=(1, 1, 1, 1), algorithm=algorithm, expect_path=expected)


def test_winograd_applies_to_3x3_stride_1_only():
    choose = K.conv2d_algorithm
    base = dict(path="direct", kernel=(3, 3), strides=(1, 1), dilations=(1, 1), groups=1,
                in_channels=64, out_channels=64, batch=1, out_h=56, out_w=56, block=8)
    assert choose(**base) == "winograd"
    for change in (dict(kernel=(5, 5)), dict(strides=(2, 2)), dict(dilations=(2, 2)),
                   dict(groups=2), dict(path="first_layer"), dict(path="1x1", kernel=(1, 1))):
        assert choose(**dict(base, **change), algorithm="winograd") == \
            dict(base, **change)["path"]
    # "auto" keeps few channels (and huge scratch) on the direct kernel; a
    # big batch of big images goes chunk by chunk in little scratch
    assert choose(**dict(base, in_channels=4)) == "direct"
    assert choose(**dict(base, batch=64, out_h=224, out_w=224)) == "winograd"
    assert choose(**dict(base, in_channels=2048, out_channels=2048, out_h=224,
                         out_w=224)) == "direct"
    assert choose(**base, algorithm="direct") == "direct"
    # 512 channels at 7 x 7 is 4 output tiles: on 16-channel blocks with
    # 512-bit registers, "auto" runs a batch of 1 direct and of 2 Winograd
    late = dict(base, in_channels=512, out_channels=512, out_h=7, out_w=7)
    few_tiles = "direct" if _config.AVX512_TUNED else "winograd"
    assert choose(**dict(late, block=16)) == few_tiles
    assert choose(**dict(late, block=16, batch=2)) == "winograd"
    assert choose(**dict(late, block=8)) == "winograd"
    assert choose(**dict(late, block=16), algorithm="winograd") == "winograd"
    with pytest.raises(ValueError, match="algorithm must be one of"):
        run_case(algorithm="fast")


@pytest.mark.parametrize("rows_per_chunk, block", [(1, 8), (2, 8), (5, 8), (5, 4)])
def test_winograd_in_chunks_of_tile_rows(monkeypatch, rows_per_chunk, block):
    """The three phases chunk by chunk of tile rows: 3 images of 4 x 3 tiles
    in chunks of one row, of two (ending with each image), of five (chunks
    that hold rows of two images, a short last chunk)."""
    asked = []

    def forced(N, CB, OB, TH, TW, cb, P):
        asked.append((N, TH, TW))
        return rows_per_chunk, winograd.padded_tiles(rows_per_chunk * TW, P)
    monkeypatch.setattr(winograd, "chunk_rows", forced)
    run_case(3, 9, 17, 13, 11, padding=(1, 1, 1, 1), block=block, residual=True,
             activation=(RELU, 0.0, 0.0), algorithm="winograd", expect_path="winograd")
    assert asked == [(3, 4, 3)]


def test_winograd_chunks_hold_a_few_mb_or_twice_the_transformed_filter():
    P = K.conv_tile_shape(8)[0]
    for (N, C, size), rows in (((1, 64, 56), 14),      # one chunk: 3.6 MB
                               ((1, 64, 112), 7),      # 4 chunks of 7 rows
                               ((8, 64, 56), 16),      # 7 chunks of 16 rows
                               ((8, 512, 7), 16),      # 75 MB of filter: one chunk
                               ((1, 256, 56), 14)):    # 9.4 MB of filter: one chunk
        TH, TW = winograd.tile_counts(size, size)
        G, T_pad = winograd.chunk_rows(N, C // 8, C // 8, TH, TW, 8, P)
        assert (G, T_pad) == (rows, winograd.padded_tiles(rows * TW, P)), (N, C, size)


def test_winograd_filter_transform_in_slices_of_output_blocks(monkeypatch):
    # a few output blocks at a time (bounded float64 temporaries), the same bits as
    # all at once, and G g Gt of every channel pair
    OB, CB, cb = 7, 3, 8
    w = np.random.default_rng(5).standard_normal((OB, CB, 3, 3, cb, cb)).astype(np.float32)
    whole = winograd.transform_filter(w, K.aligned_empty((36, OB, CB, cb, cb)))
    monkeypatch.setattr(winograd, "_TRANSFORM_FLOATS", 2 * 36 * CB * cb * cb)  # 2 blocks
    sliced = winograd.transform_filter(w, K.aligned_empty((36, OB, CB, cb, cb)))
    np.testing.assert_array_equal(sliced, whole)
    g = w.astype(np.float64).transpose(0, 1, 4, 5, 2, 3)            # (ob, ib, i, o, kh, kw)
    u = np.einsum("rk,abiokl,cl->rcabio", winograd.G, g, winograd.G).reshape(whole.shape)
    np.testing.assert_allclose(sliced, u, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("cb", [1, 4, 8, 16, 32])
def test_winograd_buffer_rows_and_positions_are_an_odd_number_of_lines_apart(cb):
    """Strides in v and m: never less than the data, always an odd number of
    64-byte lines (so the 36 positions of a tile fall in different L1 sets),
    and the scratch holds both buffers."""
    for blocks_in, blocks_out, tiles in ((8, 8, 198), (8, 8, 144), (2, 1, 12), (64, 64, 6),
                                         (3, 5, 1), (1, 1, 7)):
        row, v_position, m_position = winograd.buffer_strides(blocks_in, blocks_out, tiles, cb)
        for stride, least in ((row, tiles * cb), (v_position, blocks_in * row),
                              (m_position, blocks_out * row)):
            assert stride >= least and stride % 16 == 0 and (stride // 16) % 2 == 1
            assert stride - least < 32
        assert winograd.scratch_floats(blocks_in, blocks_out, tiles, cb) == \
            winograd.POSITIONS * (v_position + m_position)


def test_transform_formulas_match_the_matrices():
    d = np.random.default_rng(3).standard_normal((6, 5))
    np.testing.assert_allclose(winograd.input_transform_1d(list(d)), winograd.BT @ d,
                               rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(winograd.output_transform_1d(list(d)), winograd.AT @ d,
                               rtol=1e-12, atol=1e-12)
    # the algorithm itself: At [(G g Gt) * (Bt d B)] A is the 4x4 valid correlation
    g, patch = np.random.default_rng(4).standard_normal((3, 3)), \
        np.random.default_rng(5).standard_normal((6, 6))
    product = (winograd.G @ g @ winograd.G.T) * (winograd.BT @ patch @ winograd.BT.T)
    direct = np.array([[np.sum(patch[i:i + 3, j:j + 3] * g) for j in range(4)]
                       for i in range(4)])
    np.testing.assert_allclose(winograd.AT @ product @ winograd.AT.T, direct, atol=1e-12)


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


@pytest.mark.parametrize("block", [4, 8, 16])
@pytest.mark.parametrize("case", GEMM_1X1, ids=lambda c: f"c{c[1]}o{c[2]}_{c[3]}x{c[4]}s{c[5]}")
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


@pytest.mark.parametrize("block", [4, 8, 16, 32])
@pytest.mark.parametrize("out_channels", [24, 40, 72, 20])
@pytest.mark.parametrize("pixels", [(7, 7), (1, 5), (3, 3), (9, 11)])
def test_1x1_short_tiles_and_tile_shapes(block, out_channels, pixels):
    """A run of pixels that ends in a short tile (every count below P), with
    the 4 x 3 tile (O = 24, 72 at cb 8) and the others; K-blocked, with a
    residual and an activation applied after the store."""
    h, w = pixels
    run_case(2, 300, out_channels, h, w, (1, 1), block=block, residual=True,
             activation=(LEAKY_RELU, 0.1, 0.0), seed=out_channels + h)
