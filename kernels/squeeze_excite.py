"""Squeeze-and-excitation in one launch (MobileNetV3, EfficientNet, RegNetY...).

A squeeze-and-excitation block scales each channel of ``x`` by a gate
computed from the whole plane: the mean over H, W (squeeze), a 1x1 conv
to ``R`` channels with an activation, a 1x1 conv back to ``C`` channels
with a gate activation (sigmoid, hard-sigmoid), then ``x * gate``. As
separate ops that is five launches, four of them on a few kilobytes,
and the two 1x1 convs on a 1x1 plane run a conv kernel's tiles for what is
a matrix-vector product. Here it is one pass: the plane means, the two small
matrix-vector products (vectorized over the output channels), the gate, and
the scaling of ``x``.

Buffers (``cb`` the block, ``C_phys`` = C rounded up to whole blocks)::

    x:       (N, C_phys // cb, H, W, cb)   blocked input (padding lanes zero)
    squeeze: (C, R)        the first conv's filter, transposed: hidden[r] = b1[r] + sum_c mean[c] squeeze[c, r]
    b1:      (R,)          its bias (zeros for none)
    excite:  (R, C_phys)   the second conv's filter, transposed, zero past C
    b2:      (C_phys,)     its bias, zero past C
    out:     (N, C_phys // cb, H, W, cb)   x * gate; may be x itself (each plane
                           is read for its means before any is scaled)

The activations are kernels/epilogue.py's codes with their two parameters.
Padding lanes of ``out`` are zero (their gate is set to zero).
"""

import numba
import numpy as np
from numba import prange

from ._config import jit, parallel_kernel
from .epilogue import activate_span
from .stack import stack_empty

_ZERO = np.float32(0.0)
#: widest block the stack accumulator holds
_MAX_LANES = 64


@jit()
def _plane_mean(xf, means, plane, pixels, cb):
    """``means[plane * cb + lane]``: the mean of one ``pixels`` x ``cb`` plane.
    With a literal ``cb`` (:func:`_planes`) the lanes unroll into vector
    registers; four pixels at a time, in four sums, so that the additions do
    not wait on one another."""
    a0 = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    a1 = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    a2 = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    a3 = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    for lane in range(cb):
        a0[lane] = _ZERO
        a1[lane] = _ZERO
        a2[lane] = _ZERO
        a3[lane] = _ZERO
    base = plane * pixels * cb
    quads = pixels // 4
    for q in range(quads):
        row = np.uint64(base + 4 * q * cb)
        for lane in range(cb):
            a0[lane] += xf[row + np.uint64(lane)]
            a1[lane] += xf[row + np.uint64(cb + lane)]
            a2[lane] += xf[row + np.uint64(2 * cb + lane)]
            a3[lane] += xf[row + np.uint64(3 * cb + lane)]
    for p in range(4 * quads, pixels):
        row = np.uint64(base + p * cb)
        for lane in range(cb):
            a0[lane] += xf[row + np.uint64(lane)]
    scale = np.float32(1.0) / np.float32(pixels)
    for lane in range(cb):
        means[plane * cb + lane] = ((a0[lane] + a1[lane]) + (a2[lane] + a3[lane])) * scale


@jit()
def _gate(means, squeeze, b1, act1, a1p0, a1p1, excite, b2, act2, a2p0, a2p1,
          hidden, gate, n, channels):
    """Sample ``n``'s gate (``gate[n]``, C_phys values) from its means. The
    activations as spans (one vectorized loop per activation code: a loop
    over a runtime code ran the gate's sigmoid one float at a time)."""
    lanes = gate.shape[1]
    reduced = squeeze.shape[1]
    h = hidden[n]
    for r in range(reduced):
        h[r] = b1[r]
    row = n * lanes
    for c in range(channels):
        mean = means[row + c]
        for r in range(reduced):
            h[r] += mean * squeeze[c, r]
    activate_span(h, 0, reduced, act1, a1p0, a1p1)
    g = gate[n]
    for c in range(lanes):
        g[c] = b2[c]
    for r in range(reduced):
        value = h[r]
        for c in range(lanes):
            g[c] += value * excite[r, c]
    activate_span(g, 0, channels, act2, a2p0, a2p1)
    for c in range(channels, lanes):
        g[c] = _ZERO


@jit()
def _gate_run(gate, rep, plane, blocks, cb):
    """``rep[:span]``: the plane's ``cb`` gate values repeated over ``span``
    floats, the most whole pixels that fit in :data:`_MAX_LANES`; returns
    ``span``. Scaling a plane is then one flat loop of ``span``-float chunks
    (64 with a literal ``cb``: whole vectors, no per-pixel loop of ``cb``
    lanes, which compiled to scalar or 1-vector steps)."""
    n, block = plane // blocks, plane % blocks
    span = cb * (_MAX_LANES // cb)
    for j in range(span):
        rep[j] = gate[n, block * cb + j % cb]
    return span


@jit()
def _scale_plane(xf, outf, gate, plane, blocks, pixels, cb):
    rep = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    span = _gate_run(gate, rep, plane, blocks, cb)
    base = np.uint64(plane * pixels * cb)
    total = pixels * cb
    chunks = total // span
    for q in range(chunks):
        row = base + np.uint64(q * span)
        for j in range(span):
            k = row + np.uint64(j)
            outf[k] = xf[k] * rep[j]
    for j in range(chunks * span, total):
        k = base + np.uint64(j)
        outf[k] = xf[k] * rep[j - chunks * span]


@jit()
def _scale_plane_in_place(xf, gate, plane, blocks, pixels, cb):
    """:func:`_scale_plane` with ``out`` being ``x``, as one array: given
    the same array twice, the compiled loop's overlap check sent it to the
    scalar path."""
    rep = numba.carray(stack_empty(_MAX_LANES, np.float32), _MAX_LANES)
    span = _gate_run(gate, rep, plane, blocks, cb)
    base = np.uint64(plane * pixels * cb)
    total = pixels * cb
    chunks = total // span
    for q in range(chunks):
        row = base + np.uint64(q * span)
        for j in range(span):
            k = row + np.uint64(j)
            xf[k] = xf[k] * rep[j]
    for j in range(chunks * span, total):
        k = base + np.uint64(j)
        xf[k] = xf[k] * rep[j - chunks * span]


@jit()
def _scale(xf, outf, gate, plane, blocks, pixels, cb, in_place):
    if in_place:
        _scale_plane_in_place(xf, gate, plane, blocks, pixels, cb)
    else:
        _scale_plane(xf, outf, gate, plane, blocks, pixels, cb)


@jit()
def _planes(xf, outf, means, gate, plane, blocks, pixels, cb, scale, in_place):
    """:func:`_plane_mean` (``scale`` False) or the scaling of one plane
    (``in_place``: ``outf`` is ``xf``), with ``cb`` a literal for the common
    blocks: an inner loop of a runtime count of 8 lanes ran them one at a time
    (the remainder of a 16-wide vector loop)."""
    if cb == 8:
        if scale:
            _scale(xf, outf, gate, plane, blocks, pixels, 8, in_place)
        else:
            _plane_mean(xf, means, plane, pixels, 8)
    elif cb == 16:
        if scale:
            _scale(xf, outf, gate, plane, blocks, pixels, 16, in_place)
        else:
            _plane_mean(xf, means, plane, pixels, 16)
    elif cb == 4:
        if scale:
            _scale(xf, outf, gate, plane, blocks, pixels, 4, in_place)
        else:
            _plane_mean(xf, means, plane, pixels, 4)
    elif scale:
        _scale(xf, outf, gate, plane, blocks, pixels, cb, in_place)
    else:
        _plane_mean(xf, means, plane, pixels, cb)


@parallel_kernel
def _squeeze_excite(xf, outf, squeeze, b1, act1, a1p0, a1p1, excite, b2, act2, a2p0, a2p1,
                    means, hidden, gate, batch, blocks, pixels, cb, channels, in_place):
    planes = batch * blocks
    for plane in prange(planes):
        _planes(xf, outf, means, gate, plane, blocks, pixels, cb, False, in_place)
    for n in range(batch):
        _gate(means, squeeze, b1, act1, a1p0, a1p1, excite, b2, act2, a2p0, a2p1,
              hidden, gate, n, channels)
    for plane in prange(planes):
        _planes(xf, outf, means, gate, plane, blocks, pixels, cb, True, in_place)


def squeeze_excite(x, squeeze, b1, activation1, excite, b2, activation2, channels, out):
    """``out = x * gate(x)`` (see the module docstring for the buffers);
    ``activation1``/``activation2``: ``(code, param0, param1)``. Returns ``out``."""
    kernel, args = bind_squeeze_excite(x, squeeze, b1, activation1, excite, b2, activation2,
                                       channels, out)
    kernel(*args)
    return out


def bind_squeeze_excite(x, squeeze, b1, activation1, excite, b2, activation2, channels, out):
    """``(kernel, args)``: ``kernel(*args)`` computes :func:`squeeze_excite`
    on these arrays, checked here once, with scratch arrays of its own; for a
    caller that runs the block on the same arrays again and again (one call
    at a time: the scratch is shared by the calls)."""
    if x.ndim != 5 or x.dtype != np.float32 or not x.flags.c_contiguous:
        raise ValueError(f"squeeze_excite: x must be a C-contiguous float32 (N, C/cb, H, W, cb) "
                         f"array, got {x.dtype} {x.shape}")
    batch, blocks, height, width, cb = x.shape
    lanes = blocks * cb
    reduced = squeeze.shape[1] if squeeze.ndim == 2 else -1
    if cb > _MAX_LANES or not 0 < channels <= lanes or lanes - channels >= cb:
        raise ValueError(f"squeeze_excite: {channels} channels do not fit {blocks} blocks of {cb}")
    for name, array, shape in (("squeeze", squeeze, (channels, reduced)), ("b1", b1, (reduced,)),
                               ("excite", excite, (reduced, lanes)), ("b2", b2, (lanes,)),
                               ("out", out, x.shape)):
        if array.shape != shape or array.dtype != np.float32 or not array.flags.c_contiguous:
            raise ValueError(f"squeeze_excite: {name} must be a C-contiguous float32 array of "
                             f"shape {shape}, got {array.dtype} {array.shape}")
    same = out.ctypes.data == x.ctypes.data and out.strides == x.strides
    if not same and np.may_share_memory(x, out):
        raise ValueError("squeeze_excite: out must be x itself or not overlap it")
    means = np.empty(batch * lanes, np.float32)
    hidden = np.empty((batch, reduced), np.float32)
    gate = np.empty((batch, lanes), np.float32)
    (code1, p10, p11), (code2, p20, p21) = activation1, activation2
    return _squeeze_excite, (x.reshape(-1), out.reshape(-1), squeeze, b1, np.int64(code1),
                             np.float32(p10), np.float32(p11), excite, b2, np.int64(code2),
                             np.float32(p20), np.float32(p21), means, hidden, gate,
                             batch, blocks, height * width, cb, channels, same)
