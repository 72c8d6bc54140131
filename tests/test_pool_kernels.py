"""Pooling kernels (kernels/pool.py: max, average, l2, global average)
against the ops' float64 references.

Outputs start as NaN so an element the kernel forgets fails the test, and
the padding lanes of every output must be exactly zero.
"""

import re

import numpy as np
import pytest

from jitnn import layouts
from jitnn.kernels import pool as P
from jitnn.kernels._config import jit
from tests.assembly import needs_packed_fma
from tests.helpers import reference, uniform

BLOCKS = (4, 8, 16)
CHANNELS = (1, 3, 7, 8, 9, 16, 17, 64)
KINDS = ("max", "average", "average_include_pad", "l2")
#: the kinds that refuse a window with no input element (l2 gives 0)
REFUSING = ("max", "average", "average_include_pad")

# (kernel, strides, dilations, padding [t, b, l, r], rounding)
GEOMETRIES = [
    ((3, 3), (1, 1), (1, 1), (1, 1, 1, 1), "floor"),
    ((3, 3), (2, 2), (1, 1), (1, 1, 1, 1), "ceil"),
    ((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), "ceil"),     # last window past the input
    ((3, 2), (3, 2), (1, 1), (0, 2, 1, 0), "ceil"),     # asymmetric padding, stride 3
    ((3, 3), (1, 2), (2, 1), (2, 0, 0, 1), "floor"),    # dilation 2
    ((2, 3), (3, 3), (2, 2), (1, 2, 2, 1), "ceil"),
    ((1, 1), (2, 3), (1, 1), (0, 0, 0, 0), "floor"),
    ((5, 4), (1, 1), (1, 1), (2, 2, 1, 2), "floor"),    # window larger than the border
]


def _output_size(shape, geometry):
    (kh, kw), (sh, sw), (dh, dw), (pt, pb, pl, pr), rounding = geometry
    return (P.pool_output_size(shape[2], kh, sh, dh, pt, pb, rounding),
            P.pool_output_size(shape[3], kw, sw, dw, pl, pr, rounding))


def _run(kind, x, cb, geometry, out_size=None):
    """Pool NCHW ``x`` blocked at ``cb``; returns (blocked result, the op's reference)."""
    kernel, strides, dilations, padding, _ = geometry
    oh, ow = out_size or _output_size(x.shape, geometry)
    xb = layouts.reference_nchw_to_blocked(x, cb)
    out = np.full((x.shape[0], xb.shape[1], oh, ow, cb), np.nan, np.float32)
    if kind == "max":
        P.max_pool2d(xb, out, kernel, strides, dilations, padding)
    elif kind == "l2":
        P.l2_pool2d(xb, out, kernel, strides, dilations, padding)
    else:
        P.average_pool2d(xb, out, kernel, strides, dilations, padding,
                         count_include_pad=kind == "average_include_pad")
    options = {} if kind in ("max", "l2") else \
        {"count_include_pad": kind == "average_include_pad"}
    want = reference({"max": "max_pool2d", "l2": "l2_pool2d"}.get(kind, "average_pool2d"))(
        x, kernel, strides=strides, dilations=dilations, padding=padding, output_sizes=(oh, ow),
        **options)
    return out, want


def _check(out, expected, channels):
    assert not np.isnan(out).any(), "NaN in the output (an element was not written)"
    n, blocks, h, w, cb = out.shape
    full = out.transpose(0, 1, 4, 2, 3).reshape(n, blocks * cb, h, w)
    assert np.all(full[:, channels:] == 0), "padding lanes are not zero"
    np.testing.assert_allclose(full[:, :channels], expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", (3, 17))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
def test_pool_geometries(geometry, kind, channels, cb):
    x = uniform((2, channels, 11, 13), seed=channels)
    out, want = _run(kind, x, cb, geometry)
    _check(out, want, channels)


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("kind", KINDS)
def test_pool_channels(kind, channels, cb):
    x = uniform((2, channels, 9, 7), seed=channels + 1)
    out, want = _run(kind, x, cb, GEOMETRIES[1])
    _check(out, want, channels)


@pytest.mark.parametrize("cb", (1, 32))
@pytest.mark.parametrize("kind", KINDS)
def test_pool_other_block_sizes(kind, cb):
    """Block sizes 1 (one lane per vector) and 32 (four 8-lane groups)."""
    for channels, geometry in [(3, GEOMETRIES[1]), (33, GEOMETRIES[4])]:
        x = uniform((2, channels, 9, 10), seed=channels)
        out, want = _run(kind, x, cb, geometry)
        _check(out, want, channels)


@pytest.mark.parametrize("kind", REFUSING)
def test_windows_partly_and_wholly_outside(kind):
    """Ceil rounding: the last windows reach past the padding (partly outside);
    one more output row or column would lie wholly outside: refused."""
    x = uniform((2, 9, 5, 6), seed=3)
    geometry = ((3, 3), (2, 2), (1, 1), (1, 0, 0, 1), "ceil")
    oh, ow = _output_size(x.shape, geometry)
    assert (oh - 1) * 2 - 1 + 3 > 5 + 0       # the last window rows end past the padding
    out, want = _run(kind, x, 8, geometry)
    _check(out, want, 9)
    for size in ((oh + 1, ow), (oh, ow + 1)):
        with pytest.raises(ValueError, match="every window must hold an input element"):
            _run(kind, x, 8, geometry, out_size=size)


@pytest.mark.parametrize("kind", KINDS)
def test_parallel_path(kind, threads, record_calls):
    """Large enough for the parallel driver, which runs on 2 threads; on 1 the
    same rows go through one plain call."""
    calls = record_calls(P, "pool_parallel")
    x = uniform((2, 17, 40, 41), seed=4)
    out, want = _run(kind, x, 8, GEOMETRIES[0])
    assert out.size >= P._PARALLEL_MIN
    assert len(calls) == (0 if threads == 1 else 1)
    _check(out, want, 17)


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", CHANNELS)
def test_global_average_pool(channels, cb):
    x = uniform((2, channels, 7, 9), seed=channels)
    xb = layouts.reference_nchw_to_blocked(x, cb)
    out = np.full((2, xb.shape[1], 1, 1, cb), np.nan, np.float32)
    P.global_average_pool2d(xb, out)
    _check(out, reference("global_average_pool2d")(x), channels)


@pytest.mark.parametrize("cb", (8, 16))
def test_global_average_pool_many_planes(cb, threads):
    """More planes than one task takes (16): every task's planes, on the serial
    compile (1 thread) and the parallel one (2 threads)."""
    x = uniform((3, 300, 9, 11), seed=5)
    xb = layouts.reference_nchw_to_blocked(x, cb)
    out = np.full((3, xb.shape[1], 1, 1, cb), np.nan, np.float32)
    P.global_average_pool2d(xb, out)
    _check(out, reference("global_average_pool2d")(x), 300)


def test_max_ignores_padding_for_negative_inputs():
    """Padding never wins a max: an all-negative input stays negative."""
    x = -np.abs(uniform((1, 3, 4, 4), seed=5)) - 1
    out, want = _run("max", x, 4, GEOMETRIES[0])
    assert np.all(want < 0)
    _check(out, want, 3)


def test_pool_output_size():
    # floor((5 + 0 - 2) / 2) + 1 = 2; ceil -> 3 (the third window starts inside)
    assert P.pool_output_size(5, 2, 2) == 2
    assert P.pool_output_size(5, 2, 2, rounding="ceil") == 3
    # 4 + pad_end 1: ceil((4 + 1 - 2) / 2) + 1 = 3, but the third window would
    # start at 4 = in the end padding: ONNX / PyTorch drop it
    assert P.pool_output_size(4, 2, 2, pad_end=1, rounding="ceil") == 2
    assert P.pool_output_size(4, 2, 2, pad_end=1, rounding="ceil",
                              ceil_drops_window_in_padding=False) == 3
    # dilation: effective window (3 - 1) * 2 + 1 = 5
    assert P.pool_output_size(9, 3, 1, 2) == 5
    assert P.pool_output_size(112, 3, 2, 1, 1, 1) == 56
    assert P.pool_output_size(3, 5, 1) < 1             # the window does not fit
    with pytest.raises(ValueError, match="rounding"):
        P.pool_output_size(5, 2, 2, rounding="round")


def test_against_pytorch():
    """An independent oracle for ceil rounding and count_include_pad."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = uniform((2, 5, 10, 11), seed=6)
    tx = torch.from_numpy(x)
    for kernel, stride, pad in [(3, 2, 1), (2, 2, 0), (3, 3, 1), (4, 3, 2)]:
        geometry = ((kernel,) * 2, (stride,) * 2, (1, 1), (pad,) * 4, "ceil")
        for kind in REFUSING:
            out, _ = _run(kind, x, 8, geometry)
            if kind == "max":
                expected = F.max_pool2d(tx, kernel, stride, pad, ceil_mode=True)
            else:
                expected = F.avg_pool2d(tx, kernel, stride, pad, ceil_mode=True,
                                        count_include_pad=kind == "average_include_pad")
            assert out.shape[2:4] == tuple(expected.shape[2:])
            _check(out, expected.numpy(), 5)


def test_errors():
    x = layouts.reference_nchw_to_blocked(uniform((1, 5, 6, 6), 0), 4)
    with pytest.raises(ValueError, match="out has shape"):
        P.max_pool2d(x, np.empty((1, 2, 3, 3, 8), np.float32), 2, 2)
    with pytest.raises(ValueError, match="must not overlap"):
        P.max_pool2d(x, x.reshape(-1)[:72].reshape(1, 2, 3, 3, 4), 2, 2)
    with pytest.raises(ValueError, match=">= 0"):
        P.max_pool2d(x, np.empty((1, 2, 3, 3, 4), np.float32), 2, 2, padding=-1)
    with pytest.raises(ValueError, match="padding must be"):
        P.average_pool2d(x, np.empty((1, 2, 3, 3, 4), np.float32), 2, 2, padding=(1, 2, 3))
    with pytest.raises(ValueError, match="float32"):
        P.global_average_pool2d(x.astype(np.float64), np.empty((1, 2, 1, 1, 4)))


# --- ceil rounding and windows with no input element ----------------------------------

def test_pool_output_size_ceil_drops_a_window_past_the_input():
    """Strides larger than the window: plain ceil adds a window that starts
    past the input (it would hold nothing); the default drops it."""
    assert P.pool_output_size(8, 1, 3, rounding="ceil") == 3        # not 4 (a window at 9)
    assert P.pool_output_size(8, 1, 3, rounding="ceil",
                              ceil_drops_window_in_padding=False) == 4
    assert P.pool_output_size(5, 1, 3, rounding="ceil") == 2
    assert P.pool_output_size(5, 3, 3, 1, 1, 1, rounding="ceil") == 2  # webnn issue 935
    assert P.pool_output_size(11, 3, 3, 1, 1, 1, rounding="ceil") == 4
    assert P.pool_output_size(7, 3, 2, 1, 1, 1, rounding="ceil") == 4   # last starts inside


# strides larger than the window, ceil with and without padding
CEIL_GEOMETRIES = [
    ((1, 1), (1, 3), (1, 1), (0, 0, 0, 0), "ceil"),
    ((2, 2), (3, 3), (1, 1), (0, 0, 0, 0), "ceil"),
    ((2, 3), (3, 4), (1, 1), (1, 0, 0, 2), "ceil"),
    ((3, 3), (3, 3), (1, 1), (1, 1, 1, 1), "ceil"),
    ((3, 2), (4, 3), (1, 2), (1, 1, 1, 0), "ceil"),
    ((2, 2), (3, 4), (1, 1), (1, 1, 1, 1), "floor"),
]


@pytest.mark.parametrize("cb", (1, 8, 16))
@pytest.mark.parametrize("channels", (1, 3, 7, 17))
@pytest.mark.parametrize("kind", KINDS)
def test_ceil_and_large_strides(kind, channels, cb):
    """Negative inputs (a 0 for an empty window would be the max; the L2
    norms are > 0.5) on odd sizes, N = 2, against the float64 reference."""
    for shape in ((2, channels, 7, 11), (2, channels, 5, 8)):
        x = -np.abs(uniform(shape, seed=channels)) - 0.5
        for geometry in CEIL_GEOMETRIES:
            out, want = _run(kind, x, cb, geometry)
            assert np.all(want > 0.5) if kind == "l2" else np.all(want < 0)
            _check(out, want, channels)


@pytest.mark.parametrize("kind", REFUSING)
def test_windows_with_no_input_are_refused(kind):
    """Padding >= the window: the first window holds only padding. The kernel
    refuses it rather than write a value that is not in the window."""
    x = uniform((2, 3, 6, 6), seed=7)
    for geometry in [((2, 2), (1, 1), (1, 1), (2, 0, 0, 0), "floor"),
                     ((2, 2), (2, 2), (1, 1), (0, 0, 0, 3), "ceil"),
                     ((2, 2), (1, 1), (1, 7), (0, 0, 1, 1), "floor")]:   # taps skip the input
        with pytest.raises(ValueError, match=r"pool: every window must hold an input element"):
            _run(kind, x, 8, geometry)


@pytest.mark.parametrize("cb", (1, 8, 16))
def test_l2_windows_with_no_input_give_zero(cb):
    """The L2 norm of a window wholly in the padding, or past the input, is
    that of no element: 0 (the output starts as NaN: every element written)."""
    x = uniform((2, 3, 6, 6), seed=8)
    for geometry in [((2, 2), (1, 1), (1, 1), (2, 0, 0, 0), "floor"),
                     ((2, 2), (2, 2), (1, 1), (0, 0, 0, 3), "ceil"),
                     ((2, 2), (1, 1), (1, 7), (0, 0, 1, 1), "floor")]:
        out, want = _run("l2", x, cb, geometry)
        assert (want == 0).any()
        _check(out, want, 3)
    # one more column than the ceil size: a window starting past the input
    geometry = ((3, 3), (2, 2), (1, 1), (1, 0, 0, 1), "ceil")
    oh, ow = _output_size(x.shape, geometry)
    out, want = _run("l2", x, cb, geometry, out_size=(oh, ow + 1))
    assert not want[..., -1].any()
    _check(out, want, 3)


@pytest.mark.slow
@needs_packed_fma
def test_row_tile_is_8_wide():
    """The max and average row kernel for 8-lane groups runs on ymm vectors.
    Its code is fragile: a third accumulation (l2's squares) inside it once
    made LLVM vectorize its tiles 4 wide, so l2 runs it over ``x * x``.
    (Compiled here uncached: the cache keeps no assembly.)"""
    fresh = jit(cache=False)(P.pool_rows(8).py_func)
    x = uniform((1, 16, 9, 9), seed=9)
    xb = layouts.reference_nchw_to_blocked(x, 8)
    out = np.zeros((1, 2, 9, 9, 8), np.float32)
    rows = P._tap_table(9, 9, 3, 1, 1, 1, 1, False)
    for is_max in (0, 1):
        geom = (2, 9, 9, 8, 9, 9, 3, 3, 1, 1, 1, 1, 1, 1, is_max, 1, 8)
        fresh(xb.reshape(-1), out.reshape(-1), geom, rows, rows, 0, 18)
        want = reference("max_pool2d" if is_max else "average_pool2d")(x, 3, padding=1)
        _check(out, want, 16)
    (asm,) = fresh.inspect_asm().values()
    wide = lambda op: len(re.findall(rf"\t{op}\t.*%[yz]mm", asm))    # 8 or 16 lanes
    narrow = lambda op: len(re.findall(rf"\t{op}\t.*%xmm", asm))     # 4 lanes
    assert wide("vaddps") >= 8 and wide("vcmpunordps") >= 8
    assert narrow("vaddps") == 0 and narrow("vcmpunordps") == 0
