"""Transposed 2-D convolution (WebNN ``convTranspose2d``) on blocked ``nChw{cb}c``
tensors, with the fused epilogue of :mod:`.conv2d`.

Computes ``y = act(conv_transpose(x, w) + bias)``::

    y[n, o, oh, ow] = sum over c in o's group, kh, kw with
                      oh + pad_top  = ih * sh + kh * dh,
                      ow + pad_left = iw * sw + kw * dw,
                      0 <= ih < H, 0 <= iw < W
                      of x[n, c, ih, iw] * w_iohw[c, o % (O // groups), kh, kw]

with WebNN's output size ``(in - 1) * s + (k - 1) * d + 1 - pad_begin -
pad_end + output_padding`` (``output_padding`` in ``[0, s)``; the kernel takes
the output size from ``out``'s shape, anywhere in ``[base, base + s)``).

Buffers (float32, C-contiguous; ``cb`` is the channel block: 1, 4, 8, 16 or
32, and ``ic_bn = oc_bn = cb``; ``C_phys = ceil(C / cb) * cb``, same for O;
C = in_channels, O = out_channels):

* input:   ``x: (N, C_phys // cb, H, W, cb)``; padding lanes zero
* output:  ``y: (N, O_phys // cb, OH, OW, cb)``; every element is written (so
  ``y`` may come from ``np.empty``) and its padding lanes are zero whatever the
  activation does to 0
* bias:    ``bias: (O_phys,)`` (padding lanes zero) or ``(O,)``
* logical filter, WebNN ``iohw``: ``w: (C, O // groups, KH, KW)`` (any
  strides; ``hwoi`` and ``ohwi`` filters come in as transposed views)
* packed filter, phase-major ``OIhw{cb}i{cb}o``: a flat, 64-byte-aligned
  ``w_packed: (KH * KW * O_phys * C_phys,)``, the concatenation over the
  stride phases ``(rh, rw)`` (row-major, ``sh x sw`` of them; see below) of
  ``(O_phys // cb, C_phys // cb, T, cb, cb)`` segments, ``T`` the phase's
  taps ``(kh, kw)`` in row-major order; ``[ob, ib, t, i, o]`` is the weight
  from input channel ``ib * cb + i`` to output channel ``ob * cb + o`` at tap
  ``t``; zero between channels of different groups and in padding lanes.
  With stride 1 it is conv2d's direct layout (``filter_packing.pack_filter`` of the
  filter seen as ``oihw``), with no spatial flip: the kernel gathers each tap
  where it lands. The packing depends on strides and dilations (which taps
  form a phase), not on padding or the input size. Phase-major, a tile's
  weights are one contiguous run per output block (in natural tap order they
  were 4 KiB-strided runs that thrashed a few L2 sets: 512 ch at 7x7, k4 s2).

How it works: **stride-phase decomposition.** Output row ``oh`` belongs to
row phase ``rh = (oh + pad_top) % sh``; tap ``kh`` contributes to it iff
``kh * dh % sh == rh`` (so each tap belongs to exactly one phase). Within a
phase, output rows ``oh0 + j * sh`` read input rows ``j + offh[kh]`` with
``offh[kh] = (oh0 + pad_top - kh * dh) / sh`` (exact): a stride-1 correlation
over the real input with that phase's taps, no zero-upsampled input and no
multiplication by zero. Columns likewise. Each phase grid runs conv2d's
scheme: interior pixels (every tap inside the input) are numbered row-major
and tiled ``P`` at a time across row ends, reading ``x`` in place; border
pixels go through the same loop on a small zero-padded copy of their taps.
The register tile is conv2d's (:func:`.conv2d.conv_tile_shape`: 6 pixels x 2
output blocks of 8 lanes on AVX2 = 12 ymm accumulators in a stack array),
the hot loop is one flat loop over (input block, tap of the phase) with a
tap table of input and weight offsets, and the epilogue (bias in the
accumulators, relu/clamp before the single store, other activations right
after it, padding lanes stored as zero) is conv2d's.

Parallel over (batch x phase x output-block groups x chunks of about one
row of a phase grid's pixels). Groups use the block-diagonal packed filter
and read only the input blocks of their groups
(``filter_packing.group_input_block_ranges``); a depthwise-like filter
(``groups == C``) therefore runs ``cb`` times the necessary FMAs.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np
from numba import literally, prange

from ._config import jit, parallel_kernel
from ._linking import made_by
from .buffers import aligned_empty
from .conv2d.geometry import (_MAX_TILE_PIXELS, _TILE_ELEMENTS, BLOCK_SIZES, _border_pixel,
                              conv_tile_shape)
from .conv2d.plan import _epilogue_args
from .epilogue import NONE, activate_pixels
from .filter_packing import group_input_block_ranges, pack_filter
from .stack import stack_empty

_ZERO = np.float32(0.0)


# --- the tile loop -----------------------------------------------------------
#
# geom: N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, O
# phases[ph]: oh0, ow0, OHp, OWp, r0, r1, c0, c1, t0, t1, wseg -- the phase
#   grid's first output row/column and size, its interior rectangle [r0, r1)
#   x [c0, c1) (grid coordinates), its taps taps[t0:t1] and the offset of its
#   weight segment (OB, CB, t1 - t0, cb, cb) in the packed filter
# taps[t]: offh, offw, kh * KW + kw -- grid pixel (j, i) reads input pixel
#   (j + offh, i + offw) with the weights of tap (kh, kw)
# tasks[k]: phase, interior, start, end, og0, og1, groups_outside


@jit()
def _ct_fill_patch(buf, xf, geom, taps, t0, nt, n, ib0, ib1, js, iis, cb, P):
    """Copy what a border tile reads from input blocks ``ib0 .. ib1-1`` into
    ``buf[(((ib - ib0) * nt + t) * P + p) * cb + i]``: lane ``i`` of tap ``t``
    of pixel ``p`` (input pixel ``(js[p] + offh, iis[p] + offw)``), zero where
    the tap falls outside the input."""
    literally(cb)
    literally(P)
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, O) = geom
    x_ib = H * W * cb
    for ib in range(ib0, ib1):
        xbase = (n * CB + ib) * x_ib
        for t in range(nt):
            offh = taps[t0 + t, 0]
            offw = taps[t0 + t, 1]
            for p in range(P):
                ih = js[p] + offh
                iw = iis[p] + offw
                d = (((ib - ib0) * nt + t) * P + p) * cb
                if ih >= 0 and ih < H and iw >= 0 and iw < W:
                    s = xbase + (ih * W + iw) * cb
                    for i in range(cb):
                        buf[np.uint64(d + i)] = xf[np.uint64(s + i)]
                else:
                    for i in range(cb):
                        buf[np.uint64(d + i)] = _ZERO


@jit(standalone=True)
def _ct_tiles(xf, wf, bias, yf, buf, geom, phases, taps, ib_begin, ib_end, n, ph, og0, og1,
              k_start, k_end, interior, groups_outside, clamp, lo, hi, post, act, p0, p1,
              cb, P, B):
    """Pixels ``k_start .. k_end-1`` of phase ``ph``'s interior (``interior``)
    or border, for output-block groups ``og0 .. og1-1`` (group ``og`` is blocks
    ``og*B .. og*B+B-1``), tile by tile: P pixels x B blocks.

    ``groups_outside``: every tile of one group, then the next group;
    otherwise every group of one tile, then the next tile.
    """
    literally(cb)
    literally(P)
    literally(B)
    (N, CB, H, W, OB, OH, OW, KH, KW, sh, sw, O) = geom
    oh0 = phases[ph, 0]
    ow0 = phases[ph, 1]
    OHp = phases[ph, 2]
    OWp = phases[ph, 3]
    r0 = phases[ph, 4]
    r1 = phases[ph, 5]
    c0 = phases[ph, 6]
    c1 = phases[ph, 7]
    t0 = phases[ph, 8]
    nt = phases[ph, 9] - t0
    wseg = phases[ph, 10]

    yos = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    js = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    iis = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    xb = numba.carray(stack_empty(_MAX_TILE_PIXELS, np.int64), _MAX_TILE_PIXELS)
    acc = numba.carray(stack_empty(_TILE_ELEMENTS, np.float32), _TILE_ELEMENTS)

    y_ob = OH * OW * cb                  # between output blocks
    x_row = W * cb
    x_ib = H * x_row
    x_n = CB * x_ib
    # packed weight strides in the phase's segment: (OB, CB, nt, cb, cb)
    w_kw = cb * cb
    w_ib = nt * w_kw
    w_ob = CB * w_ib
    # input blocks any group of this call reads (ranges grow with ob)
    u0 = ib_begin[og0 * B]
    u1 = ib_end[min(og1 * B, OB) - 1]
    if interior:
        src = xf
        s_ib = x_ib
    else:
        src = buf                        # patch of blocks u0 .. u1-1
        s_ib = nt * P * cb
    # per tap of the phase: input offset (from the pixel's own) and weight offset
    tap_x = np.empty(max(nt, 1), np.int64)
    tap_w = np.empty(max(nt, 1), np.int64)
    for t in range(nt):
        if interior:
            tap_x[t] = taps[t0 + t, 0] * x_row + taps[t0 + t, 1] * cb
        else:
            tap_x[t] = t * P * cb
        tap_w[t] = t * w_kw

    ntiles = (k_end - k_start + P - 1) // P
    ngroups = og1 - og0
    current = -1
    nvalid = 0
    width = c1 - c0
    for step in range(ntiles * ngroups):
        if groups_outside:
            tile = step % ntiles
            og = og0 + step // ntiles
        else:
            tile = step // ngroups
            og = og0 + step % ngroups
        if tile != current:
            current = tile
            k0 = k_start + tile * P
            nvalid = min(P, k_end - k0)
            # the tile's grid pixels; those past nvalid repeat the last one
            j = 0
            i = 0
            if interior:
                row = k0 // width
                j = r0 + row
                i = c0 + k0 - row * width
            for p in range(P):
                if not interior:
                    j, i = _border_pixel(k0 + min(p, nvalid - 1), OHp, OWp, r0, r1, c0, c1)
                js[p] = j
                iis[p] = i
                yos[p] = ((n * OB * OH + oh0 + j * sh) * OW + ow0 + i * sw) * cb
                if interior and p + 1 < nvalid:
                    i += 1
                    if i == c1:
                        i = c0
                        j += 1
            if interior:
                for p in range(P):
                    xb[p] = n * x_n + js[p] * x_row + iis[p] * cb
            else:
                _ct_fill_patch(buf, xf, geom, taps, t0, nt, n, u0, u1, js, iis, cb, P)
                for p in range(P):
                    xb[p] = p * cb - u0 * s_ib

        ob0 = og * B
        last = min(B, OB - ob0) - 1      # blocks past the last one re-read it
        # accumulators start from bias
        for p in range(P):
            for b in range(B):
                bo = (ob0 + min(b, last)) * cb
                for o in range(cb):
                    acc[(p * B + b) * cb + o] = bias[np.uint64(bo + o)]

        # The hot loop: one flat loop over (input block, tap of the phase);
        # per input lane, B weight vectors and P broadcasts.
        ib = ib_begin[ob0]
        xib = ib * s_ib
        wib = wseg + ob0 * w_ob + ib * w_ib
        t = 0
        for _ in range((ib_end[ob0 + last] - ib) * nt):
            xd = xib + tap_x[np.uint64(t)]
            wo = wib + tap_w[np.uint64(t)]
            for i in range(cb):
                xi = xd + i                  # blocked: lanes are adjacent
                wi = wo + i * cb
                for p in range(P):
                    xv = src[np.uint64(xb[p] + xi)]
                    for b in range(B):
                        wb = wi + min(b, last) * w_ob
                        for o in range(cb):
                            acc[(p * B + b) * cb + o] += xv * wf[np.uint64(wb + o)]
            t += 1
            if t == nt:
                t = 0
                xib += s_ib
                wib += w_ib

        # the store: relu/clamp in registers, padding lanes zero
        for p in range(P):
            if p < nvalid:
                for b in range(B):
                    if b <= last:
                        lim = O - (ob0 + b) * cb
                        yo = yos[p] + (ob0 + b) * y_ob
                        for o in range(cb):
                            v = acc[(p * B + b) * cb + o]
                            if clamp:
                                v = min(max(v, lo), hi)
                            yf[np.uint64(yo + o)] = v if o < lim else _ZERO
        if post:
            for p in range(nvalid):
                for b in range(last + 1):
                    lanes = min(cb, O - (ob0 + b) * cb)
                    activate_pixels(yf, yos[p] + (ob0 + b) * y_ob, 1, cb, lanes,
                                     act, p0, p1)


def _make_driver(cb: int):
    """The parallel driver for block ``cb`` (cb, P, B compile-time constants
    captured as ints, so numba's cache keeps one entry per block size), with
    its serial compile for one thread (``_config.parallel_kernel``)."""
    P, B = conv_tile_shape(cb)

    def conv_transpose_driver(xf, wf, bias, yf, geom, phases, taps, tasks, ib_begin, ib_end,
                              max_taps, clamp, lo, hi, post, act, p0, p1):
        N = geom[0]
        CB = geom[1]
        NT = tasks.shape[0]
        for task in prange(N * NT):
            n = task // NT
            k = task % NT
            interior = tasks[k, 1] != 0
            buf = np.empty(0 if interior else CB * max_taps * P * cb, np.float32)
            _ct_tiles(xf, wf, bias, yf, buf, geom, phases, taps, ib_begin, ib_end, n,
                      tasks[k, 0], tasks[k, 4], tasks[k, 5], tasks[k, 2], tasks[k, 3],
                      interior, tasks[k, 6] != 0, clamp, lo, hi, post, act, p0, p1,
                      cb, P, B)

    conv_transpose_driver.__qualname__ = f"conv_transpose_driver_cb{cb}"
    return parallel_kernel(conv_transpose_driver)


_drivers: dict = {}


def conv_transpose_driver(cb: int):
    """The compiled driver for block ``cb`` (made once)."""
    driver = _drivers.get(cb)
    if driver is None:
        driver = _drivers.setdefault(cb, made_by(conv_transpose_driver, (cb,), _make_driver(cb)))
    return driver


# --- the schedule (phases, taps, tasks), plain Python -------------------------

def _axis_phases(size, out_size, kernel, stride, dilation, pad_begin):
    """Per phase ``r`` of one axis: (first output index, grid length,
    [(tap, offset)], interior [lo, hi) in grid coordinates)."""
    result = []
    for r in range(stride):
        first = (r - pad_begin) % stride
        length = max(0, -(-(out_size - first) // stride))
        taps = [(k, (first + pad_begin - k * dilation) // stride)
                for k in range(kernel) if (k * dilation) % stride == r]
        lo = max([0] + [-off for _, off in taps])
        hi = min([length] + [size - off for _, off in taps])
        lo = min(lo, length)
        hi = max(hi, lo)
        result.append((first, length, taps, lo, hi))
    return result


def phase_taps(kernel: int, stride: int, dilation: int) -> list[list[int]]:
    """The taps of each phase of one axis: tap ``k`` is in phase ``k * d % s``."""
    return [[k for k in range(kernel) if (k * dilation) % stride == r] for r in range(stride)]


@lru_cache(maxsize=256)
def _schedule(N, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl, OB, CB, cb, og_inner,
              group_fits_l1):
    """phases, taps and tasks arrays (read-only) and the largest tap count.

    Phases differ in cost (k3 s2: 4, 2, 2 and 1 taps) and ``prange`` hands
    each thread a contiguous run of tasks, so the phases' task lists are
    interleaved in proportion (each thread gets a mix of every phase)."""
    P, B = conv_tile_shape(cb)
    OG = -(-OB // B)
    per_task = OG if og_inner else 1
    phases, taps, per_phase = [], [], []
    wseg = 0
    for first_h, len_h, taps_h, r0, r1 in _axis_phases(H, OH, KH, sh, dh, pt):
        for first_w, len_w, taps_w, c0, c1 in _axis_phases(W, OW, KW, sw, dw, pl):
            seg = wseg
            wseg += len(taps_h) * len(taps_w) * OB * CB * cb * cb
            if len_h == 0 or len_w == 0:
                continue
            t0 = len(taps)
            taps += [(oh, ow, kh * KW + kw) for kh, oh in taps_h for kw, ow in taps_w]
            ph = len(phases)
            phases.append((first_h, first_w, len_h, len_w, r0, r1, c0, c1, t0, len(taps),
                           seg))
            inner = (r1 - r0) * (c1 - c0)
            border = len_h * len_w - inner
            chunk = P * max(-(-len_w // P), 1 if og_inner else 16)
            tasks = []
            per_phase.append(tasks)
            for og0 in range(0, OG, per_task):
                for start in range(0, inner, chunk):
                    tasks.append((ph, 1, start, min(inner, start + chunk), og0,
                                  og0 + per_task, int(group_fits_l1)))
                for start in range(0, border, chunk):
                    tasks.append((ph, 0, start, min(border, start + chunk), og0,
                                  og0 + per_task, 0))
    keyed = [((i + 0.5) / len(tasks), ph, i, task) for ph, tasks in enumerate(per_phase)
             for i, task in enumerate(tasks)]
    tasks = [task for *_, task in sorted(keyed)]
    arrays = [np.array(a, np.int64).reshape(-1, width)
              for a, width in ((phases, 11), (taps, 3), (tasks, 7))]
    for a in arrays:
        a.flags.writeable = False
    max_taps = max([1] + [p[9] - p[8] for p in phases])
    return arrays[0], arrays[1], arrays[2], max_taps


# --- the Python API -------------------------------------------------------

@dataclass(frozen=True)
class PackedConvTranspose2dFilter:
    """A transposed-conv filter packed once for one block size.

    ``weights``: flat, phase-major (see the module docstring), for
    ``strides`` and ``dilations``; ``ib_begin``/``ib_end`` give each output
    block the input blocks ``[begin, end)`` it reads.
    """
    block: int
    in_channels: int
    out_channels: int
    groups: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilations: tuple[int, int]
    weights: np.ndarray
    ib_begin: np.ndarray
    ib_end: np.ndarray

    @property
    def out_blocks(self) -> int:
        return -(-self.out_channels // self.block)

    @property
    def in_blocks(self) -> int:
        return -(-self.in_channels // self.block)


def pack_conv_transpose2d_filter(w_iohw, in_channels: int | None = None, groups: int = 1,
                                 block: int = 8, strides=(1, 1),
                                 dilations=(1, 1)) -> PackedConvTranspose2dFilter:
    """Pack a WebNN ``iohw`` filter ``(C, O // groups, KH, KW)`` (any strides:
    ``hwoi``/``ohwi`` filters come in as transposed views) for block ``block``
    and the convolution's ``strides`` and ``dilations`` (they decide which
    taps form a phase; :func:`conv_transpose2d_forward` checks them).

    ``in_channels`` (optional) must equal ``w.shape[0]``; the output has
    ``O = groups * w.shape[1]`` channels. Raises ValueError on a mismatch.
    """
    w = np.asarray(w_iohw)
    if w.ndim != 4:
        raise ValueError(f"conv_transpose2d: filter must be 4-D iohw, got shape {w.shape}")
    if block not in BLOCK_SIZES:
        raise ValueError(f"conv_transpose2d: block must be one of {BLOCK_SIZES}, got {block}")
    C, group_out, kh, kw = (int(s) for s in w.shape)
    if in_channels is not None and int(in_channels) != C:
        raise ValueError(f"conv_transpose2d: filter {w.shape} has {C} input channels, "
                         f"in_channels is {in_channels}")
    if min(C, group_out, kh, kw) < 1:
        raise ValueError(f"conv_transpose2d: filter has an empty dimension: {w.shape}")
    if groups < 1 or C % groups:
        raise ValueError(f"conv_transpose2d: groups={groups} must divide the filter's "
                         f"{C} input channels")
    O = group_out * groups
    group_in = C // groups
    # as an oihw filter of a direct conv: [o, c_local, kh, kw] (o over all groups)
    oihw = (w.reshape(groups, group_in, group_out, kh, kw)
            .transpose(0, 2, 1, 3, 4).reshape(O, group_in, kh, kw))
    if oihw.dtype != np.float32:
        oihw = oihw.astype(np.float32)
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    if min(sh, sw, dh, dw) < 1:
        raise ValueError(f"conv_transpose2d: strides {strides} and dilations {dilations} "
                         f"must be >= 1")
    ob, cbk = -(-O // block), -(-C // block)
    natural = np.empty((ob, cbk, kh, kw, block, block), np.float32)
    pack_filter(oihw, groups, natural)
    natural = natural.reshape(ob, cbk, kh * kw, block, block)
    packed = aligned_empty((natural.size,))
    start = 0
    for taps_h in phase_taps(kh, sh, dh):
        for taps_w in phase_taps(kw, sw, dw):
            index = [a * kw + b for a in taps_h for b in taps_w]
            segment = natural[:, :, index]
            packed[start:start + segment.size] = segment.reshape(-1)
            start += segment.size
    begin, end = group_input_block_ranges(C, O, groups, block, block)
    return PackedConvTranspose2dFilter(block, C, O, groups, (kh, kw), (sh, sw), (dh, dw),
                                       packed, begin, end)


def conv_transpose2d_output_size(size: int, kernel: int, stride: int, dilation: int,
                                 pad_begin: int, pad_end: int, output_padding: int = 0) -> int:
    """WebNN: ``(in - 1) * s + (k - 1) * d + 1 - pad_begin - pad_end + output_padding``."""
    return ((size - 1) * stride + (kernel - 1) * dilation + 1 - pad_begin - pad_end
            + output_padding)


def _pair(value, name):
    if isinstance(value, (int, np.integer)):
        return int(value), int(value)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"conv_transpose2d: {name} must be an int or a pair, got {value}")
    return value


def _check_buffer(name, array, shape):
    if not isinstance(array, np.ndarray) or array.dtype != np.float32:
        raise ValueError(f"conv_transpose2d: {name} must be a float32 numpy array, "
                         f"got {getattr(array, 'dtype', type(array))}")
    if array.shape != tuple(shape):
        raise ValueError(f"conv_transpose2d: {name} has shape {array.shape}, "
                         f"expected {tuple(shape)}")
    if not array.flags.c_contiguous:
        raise ValueError(f"conv_transpose2d: {name} must be C-contiguous")


# weights that fit in L2 / one group's weights that fit in L1 (as in conv2d)
_L2_WEIGHT_BYTES = 256 * 1024
_L1_WEIGHT_BYTES = 20 * 1024


def conv_transpose2d_forward(x, packed: PackedConvTranspose2dFilter, out, strides=(1, 1),
                             dilations=(1, 1), padding=(0, 0, 0, 0), bias=None,
                             activation=NONE, param0=0.0, param1=0.0):
    """``out = act(conv_transpose(x, w) + bias)``, writing every element of ``out``.

    ``x``: ``(N, C_phys//cb, H, W, cb)``. ``out``: ``(N, O_phys//cb, OH, OW,
    cb)`` where ``OH`` is in ``[base, base + sh)`` with ``base`` the output
    size without output padding (``OH - base`` is the output padding), same
    for ``OW``. ``bias``: ``(O_phys,)`` or ``(O,)`` float32, or None.
    ``padding`` is ``[top, bottom, left, right]``; ``activation`` a code from
    :mod:`.epilogue` with its two parameters. Raises ValueError on any
    mismatch (the kernels do not check bounds). Returns ``out``.
    """
    cb = packed.block
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilations, "dilations")
    pad = tuple(int(p) for p in padding)
    if len(pad) != 4:
        raise ValueError(f"conv_transpose2d: padding must be [top, bottom, left, right], "
                         f"got {padding}")
    if min(sh, sw, dh, dw) < 1 or min(pad) < 0:
        raise ValueError(f"conv_transpose2d: strides {strides} and dilations {dilations} "
                         f"must be >= 1 and padding {padding} >= 0")
    pt, pb, pl, pr = pad
    if (sh, sw) != packed.strides or (dh, dw) != packed.dilations:
        raise ValueError(f"conv_transpose2d: the filter was packed for strides "
                         f"{packed.strides} and dilations {packed.dilations}, the call has "
                         f"{(sh, sw)} and {(dh, dw)}")
    O = packed.out_channels
    KH, KW = packed.kernel
    if not isinstance(x, np.ndarray) or x.ndim != 5:
        raise ValueError(f"conv_transpose2d: input must be blocked (N, C/cb, H, W, cb), "
                         f"got {getattr(x, 'shape', type(x))}")
    N, _, H, W, _ = x.shape
    _check_buffer("x", x, (N, packed.in_blocks, H, W, cb))
    if min(N, H, W) < 1:
        raise ValueError(f"conv_transpose2d: x has an empty dimension: {x.shape}")
    base_h = conv_transpose2d_output_size(H, KH, sh, dh, pt, pb)
    base_w = conv_transpose2d_output_size(W, KW, sw, dw, pl, pr)
    if not isinstance(out, np.ndarray) or out.ndim != 5:
        raise ValueError(f"conv_transpose2d: out must be blocked (N, O/cb, OH, OW, cb), "
                         f"got {getattr(out, 'shape', type(out))}")
    OH, OW = int(out.shape[2]), int(out.shape[3])
    if not (base_h <= OH < base_h + sh and base_w <= OW < base_w + sw) or min(OH, OW) < 1:
        raise ValueError(
            f"conv_transpose2d: out is {OH}x{OW}, expected [{base_h}, {base_h + sh}) x "
            f"[{base_w}, {base_w + sw}) (>= 1) for input {H}x{W}, kernel {KH}x{KW}, "
            f"strides {(sh, sw)}, dilations {(dh, dw)}, padding {pad}")
    OB = packed.out_blocks
    _check_buffer("out", out, (N, OB, OH, OW, cb))
    if np.may_share_memory(x, out):
        raise ValueError("conv_transpose2d: out must not overlap x")
    if bias is None:
        bias = np.zeros(OB * cb, np.float32)
    else:
        if not isinstance(bias, np.ndarray) or bias.dtype != np.float32 or bias.ndim != 1:
            raise ValueError("conv_transpose2d: bias must be a 1-D float32 array")
        if bias.shape[0] == O and O != OB * cb:
            bias = np.concatenate([bias, np.zeros(OB * cb - O, np.float32)])
        _check_buffer("bias", bias, (OB * cb,))
    try:
        clamp, lo, hi, post, act, p0, p1 = _epilogue_args(activation, param0, param1)
    except ValueError as error:
        raise ValueError(str(error).replace("conv2d", "conv_transpose2d")) from None

    P, B = conv_tile_shape(cb)
    og_inner = packed.weights.nbytes <= _L2_WEIGHT_BYTES
    group_fits_l1 = packed.weights.nbytes // max(1, -(-OB // B)) <= _L1_WEIGHT_BYTES
    phases, taps, tasks, max_taps = _schedule(N, H, W, OH, OW, KH, KW, sh, sw, dh, dw, pt, pl,
                                              OB, packed.in_blocks, cb, og_inner,
                                              group_fits_l1)
    geom = (N, packed.in_blocks, H, W, OB, OH, OW, KH, KW, sh, sw, O)
    conv_transpose_driver(cb)(x.reshape(-1), packed.weights, bias,
                              out.reshape(-1), geom, phases, taps, tasks, packed.ib_begin,
                              packed.ib_end, max_taps, clamp, lo, hi, post, act, p0, p1)
    return out


def conv_transpose2d_flops(packed: PackedConvTranspose2dFilter, batch: int, in_h: int,
                           in_w: int) -> int:
    """Multiply-adds x 2 of the logical transposed convolution (every input
    pixel times every tap; taps cropped by padding are counted too)."""
    KH, KW = packed.kernel
    group_out = packed.out_channels // packed.groups
    return 2 * batch * packed.in_channels * in_h * in_w * group_out * KH * KW
