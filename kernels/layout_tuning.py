"""Tuning shared by the activation reorders (:mod:`.layout`,
:mod:`.layout_nhwc`): task and tile sizes, and when stores stream past the
caches. Measured on this project's targets; see each constant.
"""

from ._config import TARGET_X86, jit

#: Pixels per task in the activation reorders: a multiple of 16, large enough
#: that per-task work dwarfs the scheduling (4 KiB of each source plane).
_CHUNK = 1024
#: Pixels per tile of nChw8c -> nchw: the tile's source (8 KiB) stays in L1
#: between its two passes of 4 channels.
_PLANAR_TILE = 256
#: Pixels per tile in the nhwc kernels: each block's run of the tile is 2 KiB
#: of whole lines, and the tile's nhwc side (64 x C floats) stays in L1 up to
#: C = 64 (measured: 16 -> 64 pixels +5-20 %, 128 slower).
_TILE = 64
#: Most floats in a tile's nhwc side (16 KiB, half of L1): from C = 128 up a
#: tile has fewer pixels. With 64 pixels at C >= 256 the tile's pixels, C * 4
#: bytes apart, fought over a few L1 sets and every block reread them from L2
#: (1 thread, nhwc -> / -> nhwc against np.copyto: 1x256x56x56 0.61 / 0.47x
#: -> 0.85 / 0.89x, 1x2048x7x7 0.33 / 0.28x -> 0.68 / 0.57x).
_TILE_FLOATS = 4096
#: Tensors from this size on stream from and to memory: there nChw8c -> nchw
#: keeps its 8-plane pair transposes, and the nhwc kernels move groups of 4
#: pixels, block-major inside, so every block plane is written continuously
#: (two 64-byte lines per step at cb = 8) and the memory
#: sees steady streams; 64-pixel tiles jump every 2 KiB (measured at 16 and
#: 64 MB, 1 thread: 0.66-0.76x np.copyto -> 1.07-1.38x). In cache the 64-pixel
#: tiles are as fast or faster (256 KiB: 0.75x against 0.61x).
_STREAM_BYTES = 8 << 20
# From this size per thread, where the target's alignment allows, nchw ->
# nChw8c, nhwc -> nChw8c and nChw8c -> nhwc (cb = 8) also store with
# non-temporal hints (see :func:`_stores_stream`).

#: non-temporal stores only where they were measured: x86
_STREAMS_ON_TARGET = TARGET_X86


@jit()
def _stores_stream(nbytes, threads):
    """Whether a reorder writing ``nbytes`` stores with non-temporal hints
    (simd's streaming moves): from ``_STREAM_BYTES`` per thread. A plain store
    first reads its target line from memory; these write whole lines without
    reading them. A copy with them against one without (1 thread, paired
    rounds against np.copyto, 2026-11-23): 2-6 MB 0.50-0.69x against
    0.96-0.98x (in cache they only lose), 8 MB 0.94 against 0.95x, 12-32 MB
    1.53-1.67x against 0.85-0.95x. On 2 threads the plain copy stays fast
    further up (12 MB 2.30x against 1.81x) and the crossing is at 16 MB
    (2.13x against 1.64x): so the size per thread. (``threads`` comes from
    the Python side: numba's thread count asked in a kernel would keep it out
    of the cache.)"""
    return _STREAMS_ON_TARGET and nbytes >= _STREAM_BYTES * threads
