"""Concatenation along channels of blocked tensors into a blocked output.

Buffers (float32, C-contiguous; ``cb`` is the channel block, one of 1, 4, 8,
16, 32, the same for every tensor; ``ceil(C / cb) * cb`` physical channels):

* inputs: ``x_i: (N, ceil(C_i / cb), H, W, cb)``, padding lanes zero
* output: ``out: (N, ceil(C / cb), H, W, cb)`` with ``C = sum(C_i)``; input
  ``i``'s channels land at ``[offset_i, offset_i + C_i)``, ``offset_i =
  C_0 + ... + C_(i-1)``; every element is written and the padding lanes are zero

Two paths, chosen per input:

* **aligned** (``offset_i % cb == 0``): output block ``offset_i / cb + k`` is
  input block ``k``, so each of its rows (``W * cb`` floats) is one contiguous
  copy. Concats of channel counts that are multiples of the block (GoogLeNet,
  SqueezeNet, DenseNet at cb 8) take only this path.
* **shifted** (otherwise, e.g. C = 3 and 5 at cb = 8: the second input starts
  at lane 3): each output lane of a block gathers from the input lane it comes
  from, ``W`` floats ``cb`` apart.

Inputs are copied one after the other, in order, each in parallel over rows
``(n, output block, h)``. When every input but the last fills whole blocks
(DenseNet's 32-channel features at cb 8), each output block is one input's
and the inputs are copied together instead, up to :data:`_GROUP` per call, in
one parallel region over their blocks' rows (a DenseNet-121 concat of 24
inputs was 24 calls, most too small to split, so one thread copied it all;
the model on 2 threads 43.1 -> 38.8 ms in a slow spell of the host). An
aligned input whose last block is partial copies its zero padding lanes too;
the lanes it so overwrites belong to the next input (which is then shifted,
and copied afterwards) or are the output's padding lanes, which must be
zero. The last input's call also zeroes the output's padding lanes when it
is shifted.
"""

from __future__ import annotations

import numpy as np
from numba import prange

from ._config import jit, numba_threads

_ZERO = np.float32(0.0)
#: below this many copied elements run serially
_PARALLEL_MIN = 32768


@jit(standalone=True)
def _copy_rows(xf, outf, geom, first, last):
    """Copy one input's rows ``[first, last)`` (tasks ``(n, output block, h)``).

    ``geom``: ``(CBx, CBo, H, W, cb, offset, channels, fill_end, ob0, nob)``:
    the input's and output's channel blocks, the input's channel offset and
    count, the end of the output channels this call writes (``offset +
    channels``, or the output's physical channel count for the last input, whose
    call zeroes the padding lanes), and the output blocks ``[ob0, ob0 + nob)``
    it touches.
    """
    CBx, CBo, H, W, cb, offset, channels, fill_end, ob0, nob = geom
    row = W * cb
    shift = offset % cb
    for task in range(first, last):
        h = task % H
        ob = ob0 + (task // H) % nob
        n = task // (H * nob)
        o = ((n * CBo + ob) * H + h) * row
        if shift == 0:                  # aligned: a whole row, one contiguous copy
            xo = ((n * CBx + ob - ob0) * H + h) * row
            for j in range(row):
                outf[np.uint64(o + j)] = xf[np.uint64(xo + j)]
            continue
        # shifted: output lanes of this block that come from this input
        for c in range(max(offset, ob * cb), min(fill_end, ob * cb + cb)):
            lane = c - ob * cb
            if c < offset + channels:
                source = c - offset
                xo = ((n * CBx + source // cb) * H + h) * row + source % cb
                for w in range(W):
                    outf[np.uint64(o + w * cb + lane)] = xf[np.uint64(xo + w * cb)]
            else:                       # the output's padding lanes
                for w in range(W):
                    outf[np.uint64(o + w * cb + lane)] = _ZERO


@jit(parallel=True)
def _copy_rows_parallel(xf, outf, geom, tasks, groups):
    """``groups`` contiguous ranges of the ``tasks`` rows, in parallel."""
    for g in prange(groups):
        # int64: a prange index is unsigned in the parallel compile
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _copy_rows(xf, outf, geom, first, last)


#: inputs per call of the whole-block copy: a tuple of this many arrays (a
#: call with fewer repeats its first), so one compile serves every count
_GROUP = 8


@jit()
def _copy_whole_blocks(xs, outf, owner, out_block, in_block, geom, first, last):
    """Rows ``[first, last)`` of the tasks ``(n, h, k)``: output block
    ``out_block[k]`` is block ``in_block[k]`` of input ``xs[owner[k]]`` (flat;
    its block count from its size). ``geom``: ``(N, CBo, H, W, cb, blocks)``
    with ``blocks`` the length of the three tables."""
    N, CBo, H, W, cb, blocks = geom
    row = W * cb
    for task in range(first, last):
        # rows outer: a thread's share is a band of rows of every block, the
        # rows that the convs making the inputs mostly wrote on its own core
        # (DenseNet-121, 2 threads: 38.8 against 39.7-40.0 ms blocks outer)
        k = task % blocks
        h = (task // blocks) % H
        n = task // (H * blocks)
        x = xs[owner[k]]
        CBx = x.size // (N * H * row)
        o = ((n * CBo + out_block[k]) * H + h) * row
        xo = ((n * CBx + in_block[k]) * H + h) * row
        for j in range(row):
            outf[np.uint64(o + j)] = x[np.uint64(xo + j)]


@jit(parallel=True)
def _copy_whole_blocks_parallel(xs, outf, owner, out_block, in_block, geom, tasks, groups):
    """``groups`` contiguous ranges of the ``tasks`` rows, in parallel."""
    for g in prange(groups):
        first, last = np.int64(g) * tasks // groups, (np.int64(g) + 1) * tasks // groups
        _copy_whole_blocks(xs, outf, owner, out_block, in_block, geom, first, last)


def _whole_block_calls(inputs, copied, offsets, out, threads: int) -> list:
    """The calls that copy the ``copied`` inputs (indices; every one's blocks
    whole, or the last input's last block with its zero padding lanes), up to
    :data:`_GROUP` inputs per call."""
    N, CBo, H, W, cb = out.shape
    outf = out.reshape(-1)
    calls = []
    for start in range(0, len(copied), _GROUP):
        group = copied[start:start + _GROUP]
        flats = [inputs[i].reshape(-1) for i in group]
        xs = tuple(flats + [flats[0]] * (_GROUP - len(flats)))
        # per copied block: its input's slot in xs, its block in out and in the input
        counts = [inputs[i].shape[1] for i in group]
        in_block = np.concatenate([np.arange(count) for count in counts])
        owner = np.repeat(np.arange(len(group)), counts)
        out_block = in_block + np.repeat([offsets[i] // cb for i in group], counts)
        tables = [t.astype(np.int64) for t in (owner, out_block, in_block)]
        geom = (N, CBo, H, W, cb, len(owner))
        tasks = N * len(owner) * H
        if _serial(tasks, W * cb, threads):
            calls.append((_copy_whole_blocks, (xs, outf, *tables, geom, 0, tasks)))
        else:
            calls.append((_copy_whole_blocks_parallel, (xs, outf, *tables, geom, tasks,
                                                        min(tasks, threads))))
    return calls


def _serial(tasks: int, row: int, threads: int) -> bool:
    """Whether ``tasks`` rows of ``row`` floats are copied in a plain call
    (too few to split, or one thread: no OpenMP region)."""
    return tasks * row < _PARALLEL_MIN or tasks == 1 or threads == 1


def concat_offsets(channels):
    """The channel offset of each input: ``[0, C_0, C_0 + C_1, ...]``."""
    offsets, total = [], 0
    for c in channels:
        offsets.append(total)
        total += int(c)
    return offsets


def concat_is_aligned(channels, cb):
    """True when every input starts on a block boundary (only the fast path runs)."""
    return all(offset % cb == 0 for offset in concat_offsets(channels))


def _check_array(what, a):
    """``what``: a name, or an input's index."""
    if isinstance(a, np.ndarray) and a.dtype == np.float32 and a.ndim == 5 \
            and a.flags.c_contiguous:
        return
    what = f"input {what}" if isinstance(what, int) else what
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise ValueError(f"concat: {what} must be a float32 numpy array, "
                         f"got {getattr(a, 'dtype', type(a))}")
    if a.ndim != 5:
        raise ValueError(f"concat: {what} must be blocked (N, C_phys // cb, H, W, cb), "
                         f"got shape {a.shape}")
    raise ValueError(f"concat: {what} must be C-contiguous")


def concat_channels(inputs, channels, out):
    """Concatenate blocked ``inputs`` (with ``channels[i]`` logical channels
    each) along the channel axis into blocked ``out``. Returns ``out``."""
    kernel, args = bind_concat_channels(inputs, channels, out, numba_threads())
    kernel(*args)
    return out


def _run_calls(calls) -> None:
    for kernel, args in calls:
        kernel(*args)


def bind_concat_channels(inputs, channels, out, threads: int):
    """``(kernel, args)``: ``kernel(*args)`` computes :func:`concat_channels`
    on these arrays (checked here once) on ``threads`` numba threads: one
    copy call per input, in order, or one per :data:`_GROUP` inputs when
    every block is one input's (a replayed plan's bound step runs them again
    on the same arrays)."""
    if len(inputs) != len(channels) or not inputs:
        raise ValueError(f"concat: {len(inputs)} inputs but {len(channels)} channel counts")
    _check_array("out", out)
    N, CBo, H, W, cb = out.shape
    total = sum(int(c) for c in channels)
    if -(-total // cb) != CBo:
        raise ValueError(f"concat: the inputs have {total} channels, which need "
                         f"{-(-total // cb)} blocks of {cb}, but out has shape {out.shape}")
    for i, (x, c) in enumerate(zip(inputs, channels)):
        _check_array(i, x)
        expected = (N, -(-int(c) // cb), H, W, cb)
        if int(c) < 1 or x.shape != expected:
            raise ValueError(f"concat: input {i} has shape {x.shape}, expected {expected} "
                             f"for {c} channels and out {out.shape}")
    offsets = concat_offsets(channels)
    # (an input's whole blocks are its own: every one but the last fills them)
    in_place = [(i == len(inputs) - 1 or int(c) % cb == 0) and _in_place(x, out, offset)
                for i, (x, c, offset) in enumerate(zip(inputs, channels, offsets))]
    for i, x in enumerate(inputs):
        if not in_place[i] and np.may_share_memory(x, out):
            raise ValueError(f"concat: input {i} overlaps out")
    outf = out.reshape(-1)
    copied = [i for i in range(len(inputs)) if not in_place[i]]
    if len(copied) > 1 and all(int(c) % cb == 0 for c in channels[:-1]):
        calls = _whole_block_calls(inputs, copied, offsets, out, threads)
        return calls[0] if len(calls) == 1 else (_run_calls, (tuple(calls),))
    calls = []
    for i, (x, offset) in enumerate(zip(inputs, offsets)):
        if in_place[i]:
            continue
        c = int(channels[i])
        fill_end = CBo * cb if i == len(inputs) - 1 else offset + c
        ob0 = offset // cb
        nob = -(-fill_end // cb) - ob0
        geom = (x.shape[1], CBo, H, W, cb, offset, c, fill_end, ob0, nob)
        tasks = N * nob * H
        if _serial(tasks, W * cb, threads):
            # one thread: the same rows in a plain call (no OpenMP region)
            calls.append((_copy_rows, (x.reshape(-1), outf, geom, 0, tasks)))
        else:
            calls.append((_copy_rows_parallel, (x.reshape(-1), outf, geom, tasks,
                                                min(tasks, threads))))
    if len(calls) == 1:
        return calls[0]
    return _run_calls, (tuple(calls),)


def _in_place(x: np.ndarray, out: np.ndarray, offset: int) -> bool:
    """Whether input ``x`` already is its place in ``out``: one image, ``x``
    starting on a block boundary, exactly the output's blocks from there (its
    producer wrote it into the concat's buffer): nothing to copy."""
    N, _, H, W, cb = out.shape
    if N != 1 or offset % cb or x.shape[0] != 1:
        return False
    start = out.__array_interface__["data"][0] + (offset // cb) * H * W * cb * 4
    return x.__array_interface__["data"][0] == start and x.flags.c_contiguous
