"""conv2d kernels (kernels/conv2d/) against the float64 numpy reference: the
direct kernel's geometry (block 8; blocks 4 and 16 on a spread of it), padding
by a padded copy and by border tiles, the wrapper's checks and plans, each
driver's serial compile; tests/conv2d_cases.py's ``run_case`` checks each case
(every element written, padding lanes zero). The other kernel families are in
test_conv2d_depthwise_kernels.py, test_conv2d_epilogue_kernels.py,
test_conv2d_winograd_kernels.py and test_conv2d_1x1_kernels.py: one file each,
so that pytest-xdist (one file per worker) compiles them on both cores.

Compile time dominates: the kernels specialize on the block size (and on C
for the first-layer path), so the default run uses blocks 4, 8, 16 and a few
first-layer channel counts; blocks 1 and 32 are in the slow set.
"""

import numba
import numpy as np
import pytest

from jitnn.kernels import _config, conv2d as K, layout
from jitnn.kernels.conv2d import direct, plan as conv_plan
from jitnn.kernels.epilogue import CLAMP, HARD_SWISH, LEAKY_RELU, RELU, SIGMOID
from tests.assembly import check_packed_fma, fresh_asm, needs_packed_fma
from tests.conv2d_cases import run_case, to_blocked
from tests.helpers import apply_activation, other_blocks_slow, per_block, random, reference

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


# the first case is the direct kernel's default cover on these blocks (the
# others' kernels: tests/test_conv2d_1x1_kernels.py, _depthwise_kernels.py,
# _epilogue_kernels.py and test_conv2d_grouped.py)
@pytest.mark.parametrize("case, block", per_block(
    BLOCK_GEOMETRY, lambda c: f"c{c[1]}o{c[2]}_k{c[5][0]}{c[5][1]}_g{c[9]}", keep={0},
    blocks=(4, 16)))
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


@pytest.mark.parametrize("block", other_blocks_slow())
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
    x = to_blocked(random((1, 5, 6, 6), rng), 8)
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
    x = to_blocked(random((2, 24, 13, 17), rng), 8)
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
        K.conv2d_forward(to_blocked(x, 8), packed, out, activation=RELU)
        got = np.empty((2, 24, 5, 7), np.float32)
        layout.blocked_to_nchw(out, got)
        np.testing.assert_allclose(got, reference("conv2d")(x, w, activation="relu"),
                                   rtol=1e-5, atol=1e-5)
    assert len(packed.launches) == 1
    xb = to_blocked(x, 8)
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
        x = to_blocked(random((1, c, h, h), rng), 8)
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
    x = to_blocked(random((1, 8, 6, 6), rng), 8)
    packed = K.pack_conv2d_filter(random((8, 8, 3, 3), rng), 8, 1, 8)
    out = np.empty((1, 1, 4, 4, 8), np.float32)
    with pytest.raises(ValueError, match="out has shape"):
        K.conv2d_forward(x, packed, np.empty((1, 1, 6, 6, 8), np.float32))
    with pytest.raises(ValueError, match="float32"):
        K.conv2d_forward(x.astype(np.float64), packed, out)
    with pytest.raises(ValueError, match="C-contiguous"):
        K.conv2d_forward(np.asfortranarray(x), packed, out)
    with pytest.raises(ValueError, match="x has shape"):
        K.conv2d_forward(to_blocked(random((1, 9, 6, 6), rng), 8), packed, out)
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
    xin = x if plain else to_blocked(x, block)
    oh = K.conv2d_output_size(h, kernel[0], strides[0], 1, padding[0], padding[1])
    ow = K.conv2d_output_size(w, kernel[1], strides[1], 1, padding[2], padding[3])
    ob = -(-o // block)
    bias = np.zeros(ob * block, np.float32)
    bias[:o] = random((o,), rng)
    residual_nchw = random((n, o, oh, ow), rng)
    residual = to_blocked(residual_nchw, block)
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


