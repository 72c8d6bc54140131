"""The zero-padded input copy, and the per-thread scratch buffers it and
Winograd run in, and :class:`BoundScratchRun`, a bound conv call that pads
or takes scratch memory first.

Buffers (flat float32, C-contiguous):

* ``x: (N, CB, H, W, cb)``: the blocked input
* ``xp: (N, CB, H + pt + pb, W + pl + pr, cb)``: ``x`` with zero borders,
  in this thread's scratch buffer ``"padded"``

When border pixels are a large share of the output (small images), the
direct path pads the whole input once and runs every pixel as interior
(:mod:`.direct`); the depthwise path does so when a row's interior is too
narrow to tile and its padded rows do not fit a task's stack buffer
(:mod:`.depthwise`). :mod:`.plan` decides.
"""

from __future__ import annotations

import threading

import numpy as np
from numba import prange

from .._config import numba_threads, parallel_kernel
from ..buffers import aligned_empty
from .geometry import _ZERO


@parallel_kernel
def pad_blocked(xf, xpf, N, CB, H, W, cb, pt, pl, Hp, Wp):
    """``xp[n, ib, pt + h, pl + w, :] = x[n, ib, h, w, :]``, zero elsewhere.

    ``x: (N, CB, H, W, cb)`` and ``xp: (N, CB, Hp, Wp, cb)``, both flat."""
    row_in = W * cb
    row_out = Wp * cb
    left = pl * cb
    right = row_out - left - row_in
    for task in prange(N * CB * Hp):
        plane = task // Hp
        h = task % Hp - pt
        d = task * row_out
        if h < 0 or h >= H:
            for i in range(row_out):
                xpf[np.uint64(d + i)] = _ZERO
        else:
            s = (plane * H + h) * row_in
            for i in range(left):
                xpf[np.uint64(d + i)] = _ZERO
            d += left
            for i in range(row_in):
                xpf[np.uint64(d + i)] = xf[np.uint64(s + i)]
            d += row_in
            for i in range(right):
                xpf[np.uint64(d + i)] = _ZERO


_scratch = threading.local()


def _scratch_buffer(name: str, count: int) -> np.ndarray:
    """This thread's scratch buffer ``name`` of at least ``count`` floats
    (the first ``count``), valid until its next call; the largest stays
    allocated (a new one per call faulted its pages in again every time)."""
    scratch = getattr(_scratch, name, None)
    if scratch is None or scratch.size < count:
        scratch = aligned_empty((count,))
        setattr(_scratch, name, scratch)
    return scratch[:count]


def _pad_input(xf, N: int, CB: int, H: int, W: int, cb: int, pad):
    """``(xp, H + pt + pb, W + pl + pr)``: the flat blocked input ``xf``
    zero-padded by ``pad = (pt, pb, pl, pr)`` (:func:`pad_blocked`).

    ``xp`` is this thread's scratch buffer, valid until its next call: a new
    array per call cost more than the copy (~45 us for 500 KiB in a model,
    its pages faulted in again), so the largest one stays allocated."""
    pt, pb, pl, pr = pad
    Hp, Wp = H + pt + pb, W + pl + pr
    padded = _scratch_buffer("padded", N * CB * Hp * Wp * cb)
    pad_blocked(xf, padded, N, CB, H, W, cb, pt, pl, Hp, Wp)
    return padded, Hp, Wp


def _entry(kernel, args: tuple):
    """The compiled entry point of numba kernel ``kernel`` (a
    :class:`.._config.ThreadCountKernel`: its compile for this thread's count)
    for ``args``' types, or the kernel itself if that compile is not found:
    the dispatcher types every argument at every call (2-5 us for a conv
    driver's 18 arguments)."""
    if hasattr(kernel, "on_threads"):
        kernel = kernel.on_threads(numba_threads())
    try:
        compiled = kernel.overloads.get(tuple(kernel.typeof_pyval(a) for a in args))
    except (AttributeError, TypeError, ValueError):
        return kernel
    return kernel if compiled is None else compiled.entry_point


class BoundScratchRun:
    """``run(xf, *rest)`` does what ``conv2d.run_conv2d_launch`` does for a
    launch that pads its input first (``pad``: ``(N, CB, H, W, cb, (pt, pb,
    pl, pr))``) and/or takes a scratch argument of ``scratch`` floats
    (Winograd): both from this thread's scratch buffers at every call, as
    there, then ``driver(xp, *rest[, scratch])``. A replay binds this object
    like a driver (jitnn/executor.py), so such a conv also runs without its
    op's per-call checks and planning (a 3x3 with one group on 7 x 7 or 14 x
    14 without Winograd; a grouped conv reads its input in place: see
    :mod:`.direct`). The compiled entries are looked up once per thread count."""

    __slots__ = ("driver", "pad", "scratch", "_entries")

    def __init__(self, driver, pad: tuple | None, scratch: int):
        self.driver, self.pad, self.scratch = driver, pad, scratch
        self._entries: dict[int, tuple] = {}

    def __call__(self, xf, *rest) -> None:
        threads = numba_threads()
        entries = self._entries.get(threads)
        if self.pad is not None:
            N, CB, H, W, cb, (pt, pb, pl, pr) = self.pad
            Hp, Wp = H + pt + pb, W + pl + pr
            padded = _scratch_buffer("padded", N * CB * Hp * Wp * cb)
            pad_args = (xf, padded, N, CB, H, W, cb, pt, pl, Hp, Wp)
            xf = padded
        args = (xf,) + rest
        if self.scratch:
            args += (_scratch_buffer("winograd", self.scratch),)
        if entries is None:
            entries = self._entries[threads] = (
                _entry(pad_blocked, pad_args) if self.pad is not None else None,
                _entry(self.driver, args))
        if self.pad is not None:
            entries[0](*pad_args)
        entries[1](*args)
