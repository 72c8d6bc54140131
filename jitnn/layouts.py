"""Layout tags and the numpy specification of every layout conversion.

Tags follow oneDNN: an activation tensor's logical axes are ``(N, C, H, W)``
(``nchw``) or ``(N, H, W, C)`` (``nhwc``); ``nChw8c`` stores the channels in
blocks of 8: element ``(n, c, h, w)`` sits at ``[n, c // 8, h, w, c % 8]``, and
channels past C up to the next multiple of 8 ("padding lanes") are zero.

Filters (WebNN's conv2d filter layouts): ``oihw``, ``hwio``, ``ohwi``, ``ihwo``,
where ``i`` counts the input channels of one group; packed for the kernels as
``OIhw{i}i{o}o`` (see ``jitnn.kernels.layout``).

The ``reference_*`` functions are the spec: plain numpy, obviously correct,
and the tests hold the Numba kernels to them.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from .errors import JitnnValueError

#: Block sizes the kernels support (channels per block).
BLOCK_SIZES = (1, 4, 8, 16, 32)

#: Plain (row-major) activation layouts of 4-D tensors.
ACTIVATION_LAYOUTS = ("nchw", "nhwc")

#: WebNN conv2d filter layouts, and how to view each as oihw.
FILTER_LAYOUTS = ("oihw", "hwio", "ohwi", "ihwo")
_FILTER_TO_OIHW = {"oihw": (0, 1, 2, 3), "hwio": (3, 2, 0, 1),
                   "ohwi": (0, 3, 1, 2), "ihwo": (3, 0, 1, 2)}

_BLOCKED = re.compile(r"^nChw(\d+)c$")
_PLAIN_TAGS = {0: "scalar", 1: "x", 2: "nc", 3: "ncw", 4: "nchw", 5: "ncdhw"}


def blocked_tag(block: int) -> str:
    """``8 -> "nChw8c"``."""
    return f"nChw{block}c"


@functools.lru_cache(maxsize=256)
def block_of(tag: str) -> int | None:
    """The block size of a blocked tag (``"nChw8c" -> 8``), None if plain.
    (Memoized: the runtime asks several times per op, a regex match is ~1 us.)"""
    match = _BLOCKED.match(tag)
    return int(match.group(1)) if match else None


def plain_tag(ndim: int) -> str:
    """The tag of a row-major tensor of this rank (``4 -> "nchw"``)."""
    return _PLAIN_TAGS.get(ndim, "plain")


def check_block(block: int, op: str = "Context") -> int:
    """Validate a block size, returning it as an int."""
    if isinstance(block, bool) or not isinstance(block, (int, np.integer)):
        raise JitnnValueError(f"{op}: block must be one of {BLOCK_SIZES}, got {block!r}")
    if int(block) not in BLOCK_SIZES:
        raise JitnnValueError(f"{op}: block must be one of {BLOCK_SIZES}, got {block}")
    return int(block)


def padded_channels(channels: int, block: int) -> int:
    """C rounded up to a multiple of the block (the physical channel count)."""
    return -(-channels // block) * block


def blocked_shape(nchw_shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    """Physical shape of an ``nChw{block}c`` buffer for logical ``(N, C, H, W)``."""
    n, c, h, w = nchw_shape
    return (n, padded_channels(c, block) // block, h, w, block)


def same_order_as_plain(shape: tuple[int, ...], axes: str, block: int) -> bool:
    """Whether a 4-D tensor of logical ``shape`` (``axes`` "nchw" or "nhwc")
    has the same memory order blocked by ``block`` as plain, so that its
    blocked buffer is its plain array (no padding lanes, no interleaving):
    ``(N, C, 1, 1)`` with C a multiple of the block, block 1 of NCHW, one
    block of NHWC."""
    n, c, h, w = shape if axes == "nchw" else (shape[0], shape[3], shape[1], shape[2])
    blocks = -(-c // block)
    return (n * c * h * w == 1
            or (h * w == 1 and c == blocks * block)
            or (axes == "nchw" and block == 1)
            or (axes == "nhwc" and blocks == 1 and block == c))


def filter_oihw_shape(shape: tuple[int, ...], layout: str) -> tuple[int, ...]:
    """A filter's shape in oihw order, from its shape in ``layout``."""
    if layout not in _FILTER_TO_OIHW:
        raise JitnnValueError(
            f"filter layout must be one of {FILTER_LAYOUTS}, got {layout!r}")
    return tuple(shape[axis] for axis in _FILTER_TO_OIHW[layout])


def filter_as_oihw(w: np.ndarray, layout: str) -> np.ndarray:
    """A view of a filter in any WebNN layout with its axes in oihw order."""
    if layout not in _FILTER_TO_OIHW:
        raise JitnnValueError(
            f"filter layout must be one of {FILTER_LAYOUTS}, got {layout!r}")
    return w.transpose(_FILTER_TO_OIHW[layout])


# --- the spec ----------------------------------------------------------------

def reference_nchw_to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """``(N, C, H, W)`` -> ``(N, ceil(C/b), H, W, b)`` with zero padding lanes."""
    n, c, h, w = x.shape
    padded = np.zeros((n, padded_channels(c, block), h, w), x.dtype)
    padded[:, :c] = x
    return np.ascontiguousarray(
        padded.reshape(n, -1, block, h, w).transpose(0, 1, 3, 4, 2))


def reference_blocked_to_nchw(x: np.ndarray, channels: int) -> np.ndarray:
    """``(N, Cb, H, W, b)`` -> ``(N, channels, H, W)``, padding lanes dropped."""
    n, blocks, h, w, block = x.shape
    full = x.transpose(0, 1, 4, 2, 3).reshape(n, blocks * block, h, w)
    return np.ascontiguousarray(full[:, :channels])


def reference_nhwc_to_blocked(x: np.ndarray, block: int) -> np.ndarray:
    """``(N, H, W, C)`` -> ``(N, ceil(C/b), H, W, b)`` with zero padding lanes."""
    return reference_nchw_to_blocked(x.transpose(0, 3, 1, 2), block)


def reference_blocked_to_nhwc(x: np.ndarray, channels: int) -> np.ndarray:
    """``(N, Cb, H, W, b)`` -> ``(N, H, W, channels)``, padding lanes dropped."""
    return np.ascontiguousarray(
        reference_blocked_to_nchw(x, channels).transpose(0, 2, 3, 1))


def reference_pack_filter(w: np.ndarray, layout: str, groups: int,
                          ic_bn: int, oc_bn: int) -> np.ndarray:
    """Pack a filter into ``OIhw{ic_bn}i{oc_bn}o`` (block-diagonal across groups).

    Result shape ``(ceil(O/oc_bn), ceil(C/ic_bn), KH, KW, ic_bn, oc_bn)`` with
    ``C = groups * I``; entry ``[ob, ib, kh, kw, i, o]`` is the weight from input
    channel ``ib*ic_bn + i`` to output channel ``ob*oc_bn + o``, zero between
    channels of different groups and in padding lanes.
    """
    oihw = filter_as_oihw(w, layout)
    out_c, group_in, kh, kw = oihw.shape
    in_c = group_in * groups
    group_out = out_c // groups
    dense = np.zeros((padded_channels(out_c, oc_bn), padded_channels(in_c, ic_bn), kh, kw),
                     w.dtype)
    for g in range(groups):
        dense[g * group_out:(g + 1) * group_out, g * group_in:(g + 1) * group_in] = \
            oihw[g * group_out:(g + 1) * group_out]
    o_blocks, i_blocks = dense.shape[0] // oc_bn, dense.shape[1] // ic_bn
    return np.ascontiguousarray(
        dense.reshape(o_blocks, oc_bn, i_blocks, ic_bn, kh, kw).transpose(0, 2, 4, 5, 3, 1))
