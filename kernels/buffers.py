"""Aligned buffers: :func:`aligned_empty`, how the runtime and the kernels
allocate every tensor buffer and packed filter.

Buffers are plain numpy arrays whose data starts on a 64-byte boundary (one
cache line, a whole zmm register). Blocked tensors, e.g. ``x: (N, C // cb,
H, W, cb)``, then start every ``cb``-lane vector at a multiple of
``cb * 4`` bytes from that boundary.
"""

from __future__ import annotations

import ctypes
import math

import numpy as np


def aligned_empty(shape, dtype=np.float32, alignment: int = 64) -> np.ndarray:
    """``np.empty`` whose data starts on an ``alignment``-byte boundary.

    Packed weights are read as whole vectors: at an address 16 mod 32 (what
    a large ``np.empty`` often returns) every other ymm load splits a cache
    line, which cost up to 20 % of the direct conv's speed here. The runtime
    allocates every tensor buffer here too, so it is kept cheap: 2 us for
    a 0.8 MB array against ``np.empty``'s 0.7 (``np.prod`` of the shape,
    ``.ctypes.data`` and a slice, view and reshape made it 17.6 us).
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + alignment, np.uint8)
    address = ctypes.addressof(ctypes.c_char.from_buffer(raw))
    return np.ndarray(shape, dtype, raw, -address % alignment)
