"""The conv2d kernel tests' case runner (tests/test_conv2d_*kernels.py):
``run_case`` packs a random filter, runs ``conv2d_launch`` on blocked input
(or plain nchw for the first-layer path) into an output filled with NaN,
converts back with the layout kernels and compares with the op's float64
reference (``reference("conv2d")``, plus the residual and the activation).
Every case also checks that every element was written and that padding lanes
are zero. Shared by the test modules of each kernel family (a test module
imports no other: tests/test_architecture.py)."""

import numpy as np

from jitnn.kernels import conv2d as K, layout
from jitnn.kernels.epilogue import (CLAMP, GELU, HARD_SIGMOID, HARD_SWISH, LEAKY_RELU, NONE, RELU,
                                    SIGMOID, SILU, TANH)
from tests.helpers import apply_activation, random, reference

#: Winograd's tolerance factor over the direct sum's 4 (see the Winograd tests:
#: its transforms' constants, up to 8 and 1/24, round ~10x more)
WINOGRAD_ERROR = 40

ACTIVATIONS = [(NONE, 0.0, 0.0), (RELU, 0.0, 0.0), (CLAMP, -0.5, 0.75),
               (CLAMP, 0.25, 6.0),  # min > 0: padding lanes must still be 0
               (LEAKY_RELU, 0.1, 0.0), (SIGMOID, 0.0, 0.0), (TANH, 0.0, 0.0),
               (HARD_SWISH, 0.0, 0.0), (GELU, 0.0, 0.0), (SILU, 0.0, 0.0),
               (HARD_SIGMOID, 0.2, 0.5)]  # hard_sigmoid(0) = 0.5: padding lanes


def to_blocked(x, block):
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
    xin = x if plain else to_blocked(x, block)
    ob = -(-o // block)
    bias_phys = None
    if b is not None:
        bias_phys = np.zeros(ob * block, np.float32)
        bias_phys[:o] = b
    if residual_in_place:
        out = to_blocked(r, block)
        res = out
    else:
        out = np.full((n, ob, oh, ow, block), np.nan, np.float32)
        res = to_blocked(r, block) if residual else None
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

