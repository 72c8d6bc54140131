"""Winograd F(4x4, 3x3) conv2d (kernels/conv2d/winograd.py) against the float64
reference (tests/conv2d_cases.py's ``run_case``, Winograd's tolerance):
partial tiles and blocks, chunks of tile rows, the filter transform, the
buffers' strides, the algorithm choice; its products' packed FMAs (slow)."""

import numpy as np
import pytest

from jitnn.kernels import _config, conv2d as K, layout
from jitnn.kernels.conv2d import winograd
from jitnn.kernels.epilogue import GELU, RELU
from tests.assembly import check_packed_fma, fresh_asm, needs_packed_fma
from tests.conv2d_cases import ACTIVATIONS, run_case, to_blocked
from tests.helpers import portable_block_slow, random, reference


@pytest.mark.slow
@needs_packed_fma
def test_winograd_products_use_packed_fma(monkeypatch):
    asms = fresh_asm(monkeypatch, "_products", lambda: run_case(
        1, 16, 16, 9, 9, (3, 3), padding=(1, 1, 1, 1), algorithm="winograd",
        expect_path="winograd"), module=winograd, driver_tables=("_drivers",))
    check_packed_fma(asms)


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


# (block 16 by default, the Winograd driver's cover off the host's block;
# block 4, unless it is the host's, in the slow run: tests/portable_check.py
# runs Winograd on it)
@pytest.mark.parametrize("block", portable_block_slow((4, 16)))
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
        K.conv2d_forward(to_blocked(x, 8), packed, out, padding=(1, 1, 1, 1),
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

    def forced(N, CB, OB, TH, TW, cb, P, threads=2):
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
    # on one thread a small filter (C = 16: 36 x 2 x 2 x 8 x 8 floats, 36.9 KB) takes
    # chunks of 8 times its size: 1 tile row of 224 x 224 (258 KB a row), not 14
    TH, TW = winograd.tile_counts(224, 224)
    assert winograd.chunk_rows(1, 2, 2, TH, TW, 8, P, threads=2)[0] == 14   # 4 chunks
    assert winograd.chunk_rows(1, 2, 2, TH, TW, 8, P, threads=1)[0] == 1
    # ... and a large one as on more threads
    TH, TW = winograd.tile_counts(56, 56)
    assert winograd.chunk_rows(1, 8, 8, TH, TW, 8, P, threads=1)[0] == 14


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


