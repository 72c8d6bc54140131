"""Fused scaled dot-product attention: flash attention on a CPU.

What :func:`attention` computes, for every batch ``b``, head ``h`` and query
row ``i``::

    s[j]   = scale * (q[b, h, i, :] . k[b, h, j, :]) + mask[b, h, i, j]
             (-inf where ``causal`` and j > i: PyTorch's top-left diagonal)
    out[b, h, i, :] = sum_j softmax(s)[j] * v[b, h, j, :]

without ever materializing the ``Sq x Sk`` score matrix.

Buffers (float32 unless said). Each operand is given to the kernel as a flat
1-D view of its memory plus element strides, so a head-split layout is read
in place (a ``(B, S, H, D)`` buffer is the logical ``(B, H, S, D)`` with
strides ``(S*H*D, D, H*D)``); the last axis is always contiguous:

* ``q: (B, H, Sq, D)``, strides ``(qb, qh, qs)``
* ``k: (B, H / G, Sk, D)``, strides ``(kb, kh, ks)``
* ``v: (B, H / G, Sk, Dv)``, strides ``(vb, vh, vs)``: grouped-query
  attention's ``G`` query heads a key-value head (query head ``h`` reads
  head ``h // G``, transformers' ``repeat_kv`` order; ``G = 1``: as many)
* ``out: (B, H, Sq, Dv)``, strides ``(ob, oh, os)``
* ``mask``: none, an additive float32 mask or a uint8 boolean mask (nonzero:
  keep; zero: add ``float32 lowest``, as ONNX Runtime's Attention does), each
  the logical ``(B, H, Sq, Sk)`` read with strides ``(mb, mh, mq, mk)``, 0 on
  broadcast axes (BERT's ``(B, 1, 1, Sk)`` has ``mh = mq = 0``); or a
  :class:`RowMask`: ``(MB, MH, ceil(Sq / QB), Sk, QB)``, a per-row mask's
  ``QB``-row blocks transposed as ``st`` is, added by vectors; its
  distinct batches only, with a ``(B,)`` map (the int64 geometry array's
  tail: where each batch's rows start) when batches repeat
* per worker, on the heap (allocated once per call and thread):
  ``qt: (D, QB)`` the task's query rows, transposed and times ``scale``;
  ``st: (KBP, QB)`` the scores of one key block, transposed (``st[j, i]``:
  key ``j``, query row ``i``), then their exponentials; ``ot: (QB, Dv)``
  the output accumulator, a row per query row; ``m, l, alpha: (QB,)`` the
  running maximum, running sum and rescale factor of each row
* per tile, on the stack: ``acc: (MR, QB)`` (scores) or ``(OR, NR)``
  (output), the register tile

``QB = NR`` (two vectors: 16 rows on AVX2, 32 on AVX-512) and ``MR`` (6 on
AVX2) are the matrix products' register tile (kernels/matmul/blocking.py);
``KBP`` is the key block rounded up to a multiple of ``MR``, plus ``TAIL``
(4); ``OR`` (8 on AVX-512, 4 on AVX2) divides ``QB``.

**Tasks**: (batch x head x block of ``QB`` query rows), handed out to the
threads by an atomic counter (with ``causal``, the longest tasks, the last
row blocks, first). A task packs its query rows (``qt``), then walks the
keys in blocks of ``key_block`` (a runtime argument; :data:`KEY_BLOCK`):

1. scores: ``st[j, :] = sum_d k[j, d] * qt[d, :]``, an ``MR``-keys x
   ``QB``-rows register tile (``MR * 2`` vector accumulators, a broadcast
   key element and two ``qt`` vectors per step: the GEMM's 6x16 on AVX2), K
   rows read in place; then the mask and the causal diagonal;
2. online softmax (FlashAttention): the block's row maxima, ``m_new =
   max(m, block max)``, ``alpha = e^(m - m_new)``, ``p = e^(s - m_new)``
   in place, ``l = l * alpha + sum p`` (vectorized over the ``QB`` rows with
   :func:`~.epilogue.vector_exp`), ``ot[i, :] *= alpha[i]`` (from the
   second block on);
3. ``ot[i, :] += sum_j p[j, i] * v[j, :]``: ``OR``-rows x ``NR``-columns
   register tiles (a broadcast ``p`` per row, a V row of ``NR / VEC``
   vectors per key, read in place), over the task's own rows only;

and at the end writes ``out[i, :] = ot[i, :] / l[i]``, row by row. With ``causal`` the
key loop stops at the block's last row: keys past it are never read. A mask
does the same (:func:`_live_end`): the keys past the last one that any of
the task's rows keeps (mask above ``float32 lowest``, or nonzero) are not
visited when every row keeps one above -1e30; they would add exactly 0.
Exporters give causal and padding masks as such values (Llama's: 128
tokens, 8 heads, 0.63 -> 0.43 ms, kernel alone, 1 thread); the skip changes
no bit, but a NaN in a skipped key's K or V no longer reaches the row.

**One compile**: sizes, strides, the key block, the mask mode and
``causal`` are runtime arguments (an int64 geometry array), both mask
buffers are always passed (a 1-element dummy for the absent one) and
read-only operands are copied, so :func:`attention_parallel` has one
signature. Cold compile 5.2 s on the quiet 2-core Zen 4 (the parallel
driver 2.3 s of it), 0.3 s to load from the kernel cache.

**Why the query rows are the vector lanes** (in both tiles, rather than D
or the keys): Q is transposed once per task (``QB x D`` floats, reused for
every key), so K and V are read in place with no per-block packing; the
softmax statistics are per-lane vectors (no horizontal reductions); and both
products are the GEMM's register tile. Measured on the 2-core Zen 4 (AVX-512,
MR x QB = 14 x 32), BERT-base B 1, H 12, D 64 with a (1, 1, 1, S) mask,
medians of interleaved runs through ``ctx.compute``: S = 512 10.1 ms on 1
thread (80 GFLOP/s), 5.3 ms on 2; S = 128 0.78 / 0.44 ms. PyTorch 2.13's
SDPA: 10.7 / 5.9 and 0.78 / 0.51 ms; jitnn's unfused matmul, mul, add,
softmax, matmul: 19.9 / 14.2 and 1.47 / 1.13 ms. The cost of the layout:
fewer than ``QB`` rows (decoding, ``Sq = 1``) still run a whole tile.
Short sequences too (Swin's 49-token windows: 64 lanes for 49 rows, about 35
GFLOP/s on 1 thread, as PyTorch's SDPA, before the two changes below). There
the work around the two products counts: a per-row mask read one row per
lane, and Q's and the output's transposes, each about a tenth of a window's
time; a mask made a :class:`RowMask` once is added by vectors, Q's
transpose goes through 8 x 8 tiles, and the output is accumulated row-major
(no transpose at the store; the second block of a 49-row window runs 24
rows of tiles, not 32): kernel alone, 1 thread, previous (transposed
accumulator, 8 x 8 store) and row-major alternated in one process, medians
of 21 rounds, host shared, Swin-T's stages (B, H) = (64, 3) 1.56 -> 1.46 ms,
(16, 6) 785 -> 691 us, (4, 12) 351 -> 326, (1, 24) 170 -> 158; BERT's 128
tokens 669 -> 652 us, ViT's 197 1.78 -> 1.75 ms, causal 256 1.01 -> 1.03
ms; the same bits. Tried there and dropped, no faster in
alternated runs: keys as the lanes (one block of keys, MR-row tiles, a row
softmax: as many FMAs once padded, plus horizontal reductions); Q, K and V
read as strided views of the (B, S, 3, H, D) projection instead of the
transposed copies (Swin: the 5-D transpose and the head merge not copied,
but the kernel 1.2-1.45x slower on the strided rows, Swin-T 1 % slower;
tried again: 1.15-1.3x slower on the strided rows even with every operand
in L2, and neither copying each head's K and V rows contiguous nor
prefetching the rows recovered it; Swin-T no faster).

**Rows with nothing to attend to.** A key masked by a boolean mask scores
``float32 lowest`` (``-3.4e38``), finite, so a row whose every key is masked
that way averages V uniformly (ONNX Runtime's Attention gives the same; its
mask value is the same). A row whose every score is ``-inf`` (an additive
``-inf`` mask) has ``l = 0`` and comes out NaN, as ``softmax`` of all ``-inf``
is (PyTorch and ONNX Runtime give NaN too); a block of ``-inf`` before finite
scores is skipped exactly (its shift is taken as 0, so no ``inf - inf``).
NaN anywhere in a row's inputs makes the row NaN; with ``nan_to_zero`` every
NaN output is stored as 0 instead (exporters' guard). Causal keys are excluded
outright: the row ``i`` sees keys ``0..i`` only, whatever the mask.

**Accuracy** (float32 throughout, float32 accumulators): a score carries
its dot product's rounding, about ``2^-24 * scale * sum_d |q_d k_d|``, which
multiplies its weight by ``e^error``: the output's error relative to
``max |v|`` follows the scores' magnitude more than the key count. Measured
against float64 (unit normal q, k, v, D = 64, 1/sqrt(D)): 1.2e-7 at Sk = 64,
0.7e-7 at 512, 0.4-1.1e-7 at 4096 (causal or not); with q and k three times
larger (scores of standard deviation 9) 1.6-1.7e-6 at every Sk. The sums
over keys (``l``, ``ot``: one rounding per key, rescaled per block) add
about ``sqrt(Sk) * 2^-24`` relative. The tests bound it at 2e-5.
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._config import jit, numba_threads, parallel_kernel
from .epilogue import vector_exp
from .matmul import MR, NR
from .stack import atomic_add, stack_empty

#: query rows per task: two SIMD vectors (the matrix products' NR; a multiple
#: of 8, the side of the transposing tiles)
QB = NR
assert QB % 8 == 0, QB
#: keys per block: about 64, a multiple of MR so that every score tile is whole
#: (66 on AVX2: 11 tiles; 70 on AVX-512: 5 tiles)
KEY_BLOCK = -(-64 // MR) * MR
_TILE = MR * QB
#: the tiles after the last whole MR-tile of keys or output columns: TAIL of
#: them (TAIL * QB / VEC accumulators, 8 on AVX-512), so the padding is < TAIL
TAIL = min(4, MR)
_TAIL_TILE = TAIL * QB
#: output rows per register tile of the V product: OR x NR accumulators (16 on
#: AVX-512, 8 on AVX2) beside a V row and a broadcast; divides QB
OR = 8 if MR >= 8 else 4
assert QB % OR == 0, (QB, OR)
_OUT_TILE = OR * NR


@jit()
def _padded(n):
    """The rows of scores that ``n`` keys fill:
    whole MR-tiles, then TAIL-tiles."""
    return n // MR * MR + (n % MR + TAIL - 1) // TAIL * TAIL


#: what the mask argument holds (MASK_ROWS: a :class:`RowMask`'s transposed values)
MASK_NONE, MASK_ADD, MASK_BOOL, MASK_ROWS = 0, 1, 2, 3

_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
_NEG_INF = np.float32(-np.inf)
#: the score of a key a boolean mask drops: finite, as ONNX Runtime's
_LOWEST = np.float32(np.finfo(np.float32).min)
#: a mask value above which a key surely sets its row's maximum (see _live_end)
_STRONG = np.float32(-1e30)

#: the fields of the int64 geometry array the driver reads
(_B, _H, _SQ, _SK, _D, _DV, _QB_, _QH, _QS, _KB_, _KH, _KS, _VB, _VH, _VS, _OB, _OH, _OS,
 _MB, _MH, _MQ, _MK, _MODE, _CAUSAL, _KEYS, _NAN_ZERO, _GROUPS, _MMAP, _GEOMETRY) = range(29)
#: with ``g[_MMAP]`` set, ``g[_GEOMETRY + b]`` is where batch ``b``'s rows of a
#: :class:`RowMask` start (its ``batches`` map), in place of ``b * g[_MB]``


# --- the tiles -----------------------------------------------------------------

@jit()
def _pack_queries(qf, base, qs, rows, D, scale, qt):
    """``qt[d, i] = scale * q[i, d]`` for the task's ``rows`` query rows (row
    ``i`` at ``base + i * qs``); the lanes past them repeat the last row
    (their scores are never stored). Through 8 x 8 tiles on the stack: 8 rows
    read along D, written along the rows (the row-by-row scalar transpose was
    about a tenth of a Swin window's time)."""
    tile = numba.carray(stack_empty(64, np.float32), (8, 8))
    for i0 in range(0, QB, 8):
        for d0 in range(0, D - 7, 8):
            for a in range(8):
                row = base + min(i0 + a, rows - 1) * qs + d0
                for c in range(8):
                    tile[a, c] = qf[np.uint64(row + c)] * scale
            for c in range(8):
                for a in range(8):
                    qt[np.uint64((d0 + c) * QB + i0 + a)] = tile[a, c]
        for d in range(D // 8 * 8, D):
            for a in range(8):
                row = base + min(i0 + a, rows - 1) * qs
                qt[np.uint64(d * QB + i0 + a)] = qf[np.uint64(row + d)] * scale


@jit()
def _store(of, base, os_, rows, Dv, o, l):
    """``out[i, :] = o[i, :] / l[i]`` for the task's ``rows`` rows (row ``i``
    at ``base + i * os_``): whole rows, no transpose."""
    for i in range(rows):
        inverse = _ONE / l[i]
        row = base + i * os_
        for c in range(Dv):
            of[np.uint64(row + c)] = o[np.uint64(i * Dv + c)] * inverse


@jit()
def _scores(kf, base, ks, keys, D, qt, st):
    """``st[j, :] = sum_d k[j, d] * qt[d, :]`` for ``j < keys`` rounded up
    by :func:`_padded` (key ``j`` at ``base + j * ks``; the rows past ``keys``
    repeat the last key and are never read): MR-key tiles, then TAIL-key ones."""
    acc = numba.carray(stack_empty(_TILE, np.float32), (MR, QB))
    rows = numba.carray(stack_empty(MR, np.int64), MR)
    full = keys // MR * MR
    for j0 in range(0, full, MR):
        for t in range(MR):
            rows[t] = base + (j0 + t) * ks
        for t in range(MR):
            for i in range(QB):
                acc[t, i] = _ZERO
        for d in range(D):
            for t in range(MR):
                kd = kf[np.uint64(rows[t] + d)]
                for i in range(QB):
                    acc[t, i] += kd * qt[np.uint64(d * QB + i)]
        for t in range(MR):
            for i in range(QB):
                st[np.uint64((j0 + t) * QB + i)] = acc[t, i]
    # the last keys % MR: a whole MR tile there did up to 2.4x the work (49
    # keys: 56 rows of scores for 49 with MR = 14; 52 with TAIL tiles)
    tail = numba.carray(stack_empty(_TAIL_TILE, np.float32), (TAIL, QB))
    for j0 in range(full, keys, TAIL):
        for t in range(TAIL):
            rows[t] = base + min(j0 + t, keys - 1) * ks
        for t in range(TAIL):
            for i in range(QB):
                tail[t, i] = _ZERO
        for d in range(D):
            for t in range(TAIL):
                kd = kf[np.uint64(rows[t] + d)]
                for i in range(QB):
                    tail[t, i] += kd * qt[np.uint64(d * QB + i)]
        for t in range(TAIL):
            for i in range(QB):
                st[np.uint64((j0 + t) * QB + i)] = tail[t, i]


@jit()
def _add_mask(st, keys, mode, mf, mbits, base, mq, mk, row0, last_row, offsets):
    """Add the mask to ``st[j, i]`` (key ``j``, row ``row0 + i``): the float
    mask, or ``_LOWEST`` where the boolean mask is 0. ``base`` is the mask's
    offset of (b, h, row 0, this block's first key); rows past ``last_row``
    read ``last_row``'s mask (their scores are never used)."""
    if mq == 0:                 # one value per key: (B, 1, 1, Sk), (1, 1, 1, Sk), ...
        for j in range(keys):
            at = np.uint64(base + j * mk)
            if mode == MASK_ADD:
                add = mf[at]
            else:
                add = _ZERO if mbits[at] != 0 else _LOWEST
            for i in range(QB):
                st[np.uint64(j * QB + i)] += add
        return
    for i in range(QB):
        offsets[i] = base + min(row0 + i, last_row) * mq
    if mode == MASK_ADD:
        for j in range(keys):
            for i in range(QB):
                st[np.uint64(j * QB + i)] += mf[np.uint64(offsets[i] + j * mk)]
    else:
        for j in range(keys):
            for i in range(QB):
                keep = mbits[np.uint64(offsets[i] + j * mk)] != 0
                st[np.uint64(j * QB + i)] += _ZERO if keep else _LOWEST


@jit()
def _add_rows(st, keys, mf, base):
    """``st[j, i] += rows[j, i]`` for ``j < keys``: a :class:`RowMask`'s block
    of ``keys`` keys at ``base``, laid out as ``st`` is (one vector add per
    key and ``QB / VEC`` rows, where the per-row mask read is a gather)."""
    for at in range(keys * QB):
        st[np.uint64(at)] += mf[np.uint64(base + at)]


@jit()
def _causal(st, keys, key0, row0):
    """``st[j, i] = -inf`` where key ``key0 + j`` comes after row ``row0 + i``
    (for key ``j``: the rows ``i < key0 + j - row0``)."""
    for j in range(keys):
        late = min(max(key0 + j - row0, 0), QB)
        for i in range(late):
            st[np.uint64(j * QB + i)] = _NEG_INF


@jit()
def _online_softmax(st, keys, m, l, alpha):
    """One key block of the running softmax: ``st`` becomes ``e^(s - m_new)``,
    ``m``, ``l`` are updated and ``alpha`` says how to rescale ``ot``. A row
    whose maximum is still ``-inf`` takes shift 0 (no ``-inf - -inf``).
    The per-row values live in stack arrays while the loops run: nothing
    else can point there, so the loops vectorize without alias checks."""
    shift = numba.carray(stack_empty(QB, np.float32), QB)
    sums = numba.carray(stack_empty(QB, np.float32), QB)
    for i in range(QB):
        shift[i] = _NEG_INF
        sums[i] = _ZERO
    for j in range(keys):
        for i in range(QB):
            shift[i] = max(shift[i], st[np.uint64(j * QB + i)])
    for i in range(QB):
        top = max(m[i], shift[i])
        shift[i] = top if top != _NEG_INF else _ZERO
        alpha[i] = vector_exp(m[i] - shift[i])
        m[i] = top
    for j in range(keys):
        for i in range(QB):
            at = np.uint64(j * QB + i)
            p = vector_exp(st[at] - shift[i])
            st[at] = p
            sums[i] += p
    for i in range(QB):
        l[i] = l[i] * alpha[i] + sums[i]


@jit()
def _accumulate(vf, base, vs, keys, Dv, st, o, rows, first):
    """``o[i, :] (+)= sum_j st[j, i] * v[j, :]`` for the task's ``rows`` rows,
    in ``OR``-row x ``NR``-column register tiles (``OR`` broadcasts of ``st``
    and ``NR / VEC`` vectors of a V row per key; key ``j`` at ``base + j *
    vs``); ``first``: the tiles start from 0 instead of ``o``. Rows are the
    output's own, so the store needs no transpose, and only the tiles that
    hold the task's rows run (Swin's 49-row windows: the second 32-row block
    runs 24 rows, not 32)."""
    acc = numba.carray(stack_empty(_OUT_TILE, np.float32), (OR, NR))
    for i0 in range(0, rows, OR):
        for c0 in range(0, Dv - NR + 1, NR):
            for t in range(OR):
                for c in range(NR):
                    acc[t, c] = _ZERO if first else o[np.uint64((i0 + t) * Dv + c0 + c)]
            for j in range(keys):
                row = base + j * vs + c0
                for t in range(OR):
                    p = st[np.uint64(j * QB + i0 + t)]
                    for c in range(NR):
                        acc[t, c] += p * vf[np.uint64(row + c)]
            for t in range(OR):
                for c in range(NR):
                    o[np.uint64((i0 + t) * Dv + c0 + c)] = acc[t, c]
        c0 = Dv // NR * NR
        if c0 < Dv:             # the last Dv % NR columns
            width = Dv - c0
            for t in range(OR):
                for c in range(width):
                    acc[t, c] = _ZERO if first else o[np.uint64((i0 + t) * Dv + c0 + c)]
            for j in range(keys):
                row = base + j * vs + c0
                for t in range(OR):
                    p = st[np.uint64(j * QB + i0 + t)]
                    for c in range(width):
                        acc[t, c] += p * vf[np.uint64(row + c)]
            for t in range(OR):
                for c in range(width):
                    o[np.uint64((i0 + t) * Dv + c0 + c)] = acc[t, c]


@jit()
def _rescale(o, rows, Dv, alpha):
    """``o[i, :] *= alpha[i]`` for the tiles of the task's ``rows`` rows."""
    for i in range(-(-rows // OR) * OR):
        factor = alpha[i]
        for c in range(Dv):
            o[np.uint64(i * Dv + c)] *= factor


@jit()
def _live_end(mode, mf, mbits, base, mq, mk, rows, Sk):
    """1 + the last key that some of the task's ``rows`` rows (row ``i``'s
    mask at ``base + i * mq``) does not mask out, or ``Sk``. Masked out: an
    additive ``-inf`` or ``float32 lowest`` (the value exporters fill causal
    and padding masks with), a boolean 0. Such keys past every row's last
    live one add exactly 0 to the sums when each row also has a key of mask
    above -1e30 (its maximum is then finite, ``e^(lowest + s - max)`` is 0),
    so the task stops before them; a row without one keeps every key (a row
    masked out everywhere averages them all, as unfused)."""
    end = 0
    for i in range(rows if mq != 0 else 1):
        row = base + i * mq
        j = 0
        if mode == MASK_ADD:
            while j < Sk and not mf[np.uint64(row + j * mk)] > _STRONG:
                j += 1
        else:
            while j < Sk and mbits[np.uint64(row + j * mk)] == 0:
                j += 1
        if j == Sk:
            return Sk
        last = j
        if mode == MASK_ADD:
            for j in range(max(end, last + 1), Sk):
                last = max(last, j if mf[np.uint64(row + j * mk)] > _LOWEST else -1)
        else:
            for j in range(max(end, last + 1), Sk):
                last = max(last, j if mbits[np.uint64(row + j * mk)] != 0 else -1)
        end = max(end, last + 1)
    return end


# --- one task ----------------------------------------------------------------------

@jit(standalone=True)
def _task(task, qf, kf, vf, of, mf, mbits, g, scale, qt, st, ot, m, l, alpha, offsets):
    """Rows ``[i0, i0 + QB)`` of one (batch, head): see the module docstring."""
    H, Sq, Sk, D, Dv = g[_H], g[_SQ], g[_SK], g[_D], g[_DV]
    causal = g[_CAUSAL] != 0
    mode = g[_MODE]
    key_block = g[_KEYS]
    blocks = (Sq + QB - 1) // QB
    heads = g[_B] * H
    if causal:                  # the longest tasks (the last row blocks) first
        block = blocks - 1 - task // heads
        bh = task % heads
    else:                       # a head's row blocks one after another (K, V in L2)
        block = task % blocks
        bh = task // blocks
    b = bh // H
    h = bh % H
    i0 = block * QB
    rows = min(QB, Sq - i0)
    _pack_queries(qf, b * g[_QB_] + h * g[_QH] + i0 * g[_QS], g[_QS], rows, D, scale, qt)
    for i in range(QB):
        m[i] = _NEG_INF
        l[i] = _ZERO
    end = min(Sk, i0 + rows) if causal else Sk
    # a RowMask's rows: (b, h, block) of (Sk, QB) values, row i of key j at j * QB + i
    b_mask = g[_GEOMETRY + b] if g[_MMAP] != 0 else b * g[_MB]
    r_base = b_mask + h * g[_MH] + block * Sk * QB
    if mode == MASK_ROWS:       # causal or padding masks given as values: skip the dead keys
        end = min(end, _live_end(MASK_ADD, mf, mbits, r_base, 1, QB, rows, Sk))
    elif mode != MASK_NONE:
        end = min(end, _live_end(mode, mf, mbits, b_mask + h * g[_MH] + i0 * g[_MQ],
                                 g[_MQ], g[_MK], rows, Sk))
    k_base = b * g[_KB_] + h // g[_GROUPS] * g[_KH]       # grouped-query: h's key-value head
    v_base = b * g[_VB] + h // g[_GROUPS] * g[_VH]
    m_base = b_mask + h * g[_MH]
    if end <= 0:                # no key to visit: the rows are 0 / 0, as unfused
        for c in range(QB * Dv):
            ot[np.uint64(c)] = _ZERO
    for j0 in range(0, end, key_block):
        keys = min(key_block, end - j0)
        _scores(kf, k_base + j0 * g[_KS], g[_KS], keys, D, qt, st)
        if mode == MASK_ROWS:
            _add_rows(st, keys, mf, r_base + j0 * QB)
        elif mode != MASK_NONE:
            _add_mask(st, keys, mode, mf, mbits, m_base + j0 * g[_MK], g[_MQ], g[_MK], i0,
                      Sq - 1, offsets)
        if causal and j0 + keys - 1 > i0:
            _causal(st, keys, j0, i0)
        _online_softmax(st, keys, m, l, alpha)
        if j0 > 0:
            _rescale(ot, rows, Dv, alpha)
        _accumulate(vf, v_base + j0 * g[_VS], g[_VS], keys, Dv, st, ot, rows, j0 == 0)
    o_base = b * g[_OB] + h * g[_OH] + i0 * g[_OS]
    if g[_NAN_ZERO] == 0:
        _store(of, o_base, g[_OS], rows, Dv, ot, l)
        return
    for i in range(rows):       # exporters' Where(IsNaN(x), 0, x) guard, in the store
        inverse = _ONE / l[i]
        row = o_base + i * g[_OS]
        for c in range(Dv):
            r = ot[np.uint64(i * Dv + c)] * inverse
            of[np.uint64(row + c)] = r if r == r else _ZERO


@parallel_kernel
def attention_parallel(qf, kf, vf, of, mf, mbits, g, scale, workers):
    """Every task on ``workers`` threads, taken from a shared atomic counter
    (numba's own schedule is static: a thread sharing its core would hold up
    the rest); one worker runs the serial compile (an OpenMP region starts
    numba's every thread, and waits for them all at its end, even those with
    no task: 16 ms a call instead of 0.2 while the other core was busy).
    Arguments: the flat views, the int64 geometry ``g`` (the ``_B ...``
    fields), ``scale`` as float64 (applied as float32)."""
    Sq, D, Dv = g[_SQ], g[_D], g[_DV]
    tasks = g[_B] * g[_H] * ((Sq + QB - 1) // QB)
    key_rows = (g[_KEYS] + MR - 1) // MR * MR + TAIL     # _padded(keys) for any keys <= it
    scale32 = np.float32(scale)
    counter = np.zeros(1, np.int64)
    for _ in prange(workers):
        qt = np.empty(D * QB, np.float32)
        st = np.empty(key_rows * QB, np.float32)
        ot = np.empty(QB * Dv, np.float32)
        stats = np.empty(3 * QB, np.float32)
        offsets = np.empty(QB, np.int64)
        while True:
            task = atomic_add(counter, 0, 1)
            if task >= tasks:
                break
            _task(task, qf, kf, vf, of, mf, mbits, g, scale32, qt, st, ot, stats[:QB],
                  stats[QB:2 * QB], stats[2 * QB:], offsets)


# --- the checked wrapper -------------------------------------------------------------

_F32 = np.dtype(np.float32)
_U8 = np.dtype(np.uint8)
_NO_FLOATS = np.zeros(1, np.float32)
_NO_BITS = np.zeros(1, np.uint8)


def _fail(message):
    raise ValueError(f"attention: {message}")


def _strided(name, x):
    """``x`` (4-D float32, last axis contiguous, strides >= 0) as a flat
    1-D view from its first element over all it addresses, and its element
    strides of the first three axes."""
    if type(x) is not np.ndarray or x.dtype != _F32 or x.ndim != 4:
        _fail(f"{name} must be a 4-D float32 numpy array, got "
              f"{getattr(x, 'dtype', type(x).__name__)} {getattr(x, 'shape', '')}")
    if x.size == 0:
        return _NO_FLOATS[:0], [0, 0, 0]
    if x.flags.c_contiguous and x.flags.writeable:      # the common case, quickly
        _, h, s, d = x.shape
        return x.reshape(-1), [h * s * d, s * d, d]
    strides = []
    for axis, (size, step) in enumerate(zip(x.shape, x.strides)):
        if size > 1 and (step < 0 or step % 4):
            _fail(f"{name} has stride {step} bytes on axis {axis}: strides must be "
                  "non-negative multiples of 4")
        strides.append(step // 4 if size > 1 else 0)
    if x.shape[3] > 1 and strides[3] != 1:
        _fail(f"{name}'s last axis must be contiguous, got strides {x.strides}")
    if not x.flags.writeable and name != "out":
        # numba compiles read-only arrays separately: one kernel, one copy here
        x = np.ascontiguousarray(x).copy()
        return _strided(name, x)
    span = 1 + sum((size - 1) * step for size, step in zip(x.shape, strides))
    flat = np.lib.stride_tricks.as_strided(x, (span,), (4,))
    return flat, strides[:3]


class RowMask:
    """A mask with a value per query row (Swin's relative bias and shift mask,
    a causal mask given as values) laid out as the kernel's scores are:
    ``data: (MB, MH, ceil(Sq / QB), Sk, QB)``, the rows of each ``QB``-row
    block transposed (row ``i`` of key ``j`` at ``[.., j, i]``; rows past
    ``Sq`` 0), float32 additive (a boolean mask's dropped keys ``float32
    lowest``, as the kernel adds them). Made once by :func:`row_mask` (a
    constant mask: once per model), it is added by vectors where the mask as
    given is read one row per lane. Swin-T's windows (N 49, D 32, a (B, H, 49,
    49) mask), kernel alone, 1 thread: 12-15 % faster, the same bits.

    ``batches`` (None or an int64 ``(B,)`` array): batch ``b`` reads the
    mask's batch ``batches[b]``. :func:`row_mask` keeps each distinct batch
    once: a shifted Swin window's mask (the relative bias plus the shift
    mask) has 4 distinct windows of the 64 of Swin-T's first stage, so the
    kernel reads 4 x 3 heads' rows from cache, not 64 x 3 from memory."""

    __slots__ = ("data", "batch", "heads", "rows", "keys", "batches")

    def __init__(self, data: np.ndarray, batch: int, heads: int, rows: int, keys: int,
                 batches: np.ndarray | None = None):
        self.data = data
        self.batch, self.heads, self.rows, self.keys = batch, heads, rows, keys
        self.batches = batches


def row_mask(mask: np.ndarray, rows: int, keys: int) -> RowMask:
    """``mask`` (float32 additive or uint8 boolean, rank <= 4, broadcastable
    to ``(MB, MH, rows, keys)``) as a :class:`RowMask`."""
    if type(mask) is not np.ndarray or mask.dtype not in (_F32, _U8) or mask.ndim > 4:
        _fail("row_mask: mask must be a float32 or uint8 numpy array of rank <= 4, got "
              f"{getattr(mask, 'dtype', type(mask).__name__)} {getattr(mask, 'shape', '')}")
    full = (1,) * (4 - mask.ndim) + mask.shape
    if full[2] not in (1, rows) or full[3] not in (1, keys):
        _fail(f"row_mask: mask of shape {mask.shape} does not broadcast to (.., {rows}, {keys})")
    values = mask.reshape(full)
    if mask.dtype == _U8:
        values = np.where(values != 0, _ZERO, _LOWEST)
    mb, mh = full[:2]
    batches = None
    if mb > 1:
        # each distinct batch once (compared bit for bit: the same sums), and a map
        # (by their bytes in a dict: np.unique(axis=0) sorts, ~100x slower for 2 batches,
        # and a padding mask is converted at every run)
        bits = np.ascontiguousarray(values, np.float32).reshape(mb, -1)
        first: dict[bytes, int] = {}
        inverse = np.array([first.setdefault(row.tobytes(), len(first)) for row in bits],
                           np.int64)
        if len(first) < mb:
            kept = np.unique(inverse, return_index=True)[1]
            values = bits[kept].reshape((len(first),) + values.shape[1:])
            batches = inverse
            mb = len(first)
    blocks = -(-rows // QB)
    padded = np.zeros((mb, mh, blocks * QB, keys), np.float32)
    padded[:, :, :rows] = values
    data = np.ascontiguousarray(
        padded.reshape(mb, mh, blocks, QB, keys).transpose(0, 1, 2, 4, 3)).reshape(-1)
    return RowMask(data, mb, mh, rows, keys, batches)


def _mask_view(mask, shape):
    """The mask's flat data, its element strides over the logical ``shape``
    (B, H, Sq, Sk) (0 on broadcast axes), its mode and, for a :class:`RowMask`
    with a ``batches`` map, where each batch's rows start (else None)."""
    if mask is None:
        return _NO_FLOATS, _NO_BITS, (0, 0, 0, 0), MASK_NONE, None
    if type(mask) is RowMask:
        B, H, Sq, Sk = shape
        mapped = mask.batches is not None
        if mask.rows != Sq or mask.keys != Sk or mask.heads not in (1, H) or (
                mask.batches.shape != (B,) if mapped else mask.batch not in (1, B)):
            _fail(f"row mask of ({mask.batch}, {mask.heads}, {mask.rows}, {mask.keys}) "
                  f"{'mapped to ' + str(mask.batches.shape[0]) + ' batches ' if mapped else ''}"
                  f"does not broadcast to {tuple(shape)}")
        head = -(-Sq // QB) * Sk * QB
        if mapped and (mask.batches.min() < 0 or mask.batches.max() >= mask.batch):
            _fail(f"row mask's batches must lie in [0, {mask.batch})")
        starts = mask.batches * (head * mask.heads) if mapped else None
        return mask.data, _NO_BITS, (head * mask.heads if mask.batch > 1 else 0,
                                     head if mask.heads > 1 else 0, 0, 0), MASK_ROWS, starts
    if type(mask) is not np.ndarray or mask.dtype not in (_F32, _U8):
        _fail("mask must be a float32 (additive) or uint8 (boolean) numpy array, got "
              f"{getattr(mask, 'dtype', type(mask).__name__)}")
    if mask.ndim > 4:
        _fail(f"mask has rank {mask.ndim}, more than 4")
    full = (1,) * (4 - mask.ndim) + mask.shape
    if any(got not in (1, want) for got, want in zip(full, shape)):
        _fail(f"mask of shape {mask.shape} does not broadcast to {tuple(shape)}")
    data = np.ascontiguousarray(mask).reshape(full)
    if not data.flags.writeable:
        data = data.copy()
    steps = [0, 0, 0, 0]
    step = 1
    for axis in range(3, -1, -1):
        if full[axis] > 1:
            steps[axis] = step
        step *= full[axis]
    flat = data.reshape(-1)
    if mask.dtype == _F32:
        return flat, _NO_BITS, tuple(steps), MASK_ADD, None
    return _NO_FLOATS, flat, tuple(steps), MASK_BOOL, None


def attention(q, k, v, out, mask=None, *, scale, causal=False, key_block=KEY_BLOCK,
              threads=None, nan_to_zero=False, groups=1):
    """``out = softmax(scale * q @ k^T + mask) @ v`` per (batch, head), fused
    (see the module docstring); returns ``out``.

    * ``q: (B, H, Sq, D)``, ``k: (B, H / groups, Sk, D)``, ``v: (B, H /
      groups, Sk, Dv)``, ``out: (B, H, Sq, Dv)`` (query head ``h`` reads
      key-value head ``h // groups``): float32 arrays whose last axis is contiguous
      and whose other strides are non-negative (views such as
      ``x.transpose(0, 2, 1, 3)`` of a ``(B, S, H, D)`` array are read in
      place); ``out`` writeable and not overlapping an input
    * ``mask``: None, a float32 additive mask or a uint8 boolean mask (0:
      masked out), broadcastable to ``(B, H, Sq, Sk)``, or such a mask made a
      :class:`RowMask` once (:func:`row_mask`)
    * ``scale``: the factor of the scores; ``causal``: key ``j`` is masked
      out for row ``i`` when ``j > i``
    * ``key_block``: keys per block (>= 1); ``threads``: None asks numba
    * ``nan_to_zero``: NaN outputs are stored as 0 (a row with every score
      ``-inf``, and NaN inputs): the ``Where(IsNaN(x), 0, x)`` guard that
      exporters put after the softmax, without a pass over the output
    """
    call = attention_call(q, k, v, out, mask, scale=scale, causal=causal,
                          key_block=key_block, threads=threads, nan_to_zero=nan_to_zero,
                          groups=groups)
    if call is not None:
        call[0](*call[1])
    return out


def attention_call(q, k, v, out, mask=None, *, scale, causal=False, key_block=KEY_BLOCK,
                   threads=None, nan_to_zero=False, groups=1):
    """The checked arguments of an :func:`attention` call (the same options):
    ``(kernel, args)`` with ``kernel(*args)`` computing it, or None when
    ``out`` is empty. A replayed plan keeps the pair (jitnn/ops/attention.py's
    binding): the kernel then reads the operands' and the mask's memory as
    the arrays given here lay it out (a read-only operand is copied here, so
    the call would not see its later values), and a :class:`RowMask`'s
    values from its ``data`` (:func:`rebind_rows` refreshes them)."""
    qf, qs = _strided("q", q)
    kf, ks = _strided("k", k)
    vf, vs = _strided("v", v)
    B, H, Sq, D = q.shape
    Sk, Dv = k.shape[2], v.shape[3]
    groups = int(groups)
    if groups < 1 or H % groups:
        _fail(f"groups must be >= 1 and divide the {H} query heads, got {groups}")
    Hk = H // groups
    heads = "H" if groups == 1 else "H / groups"
    if k.shape != (B, Hk, Sk, D):
        _fail(f"k {k.shape} must be (B, {heads}, Sk, D) = ({B}, {Hk}, Sk, {D}) for q {q.shape}")
    if v.shape != (B, Hk, Sk, Dv):
        _fail(f"v {v.shape} must be (B, {heads}, Sk, Dv) = ({B}, {Hk}, {Sk}, Dv) for k {k.shape}")
    if type(out) is not np.ndarray or out.shape != (B, H, Sq, Dv):
        _fail(f"out must have shape {(B, H, Sq, Dv)}, got {getattr(out, 'shape', out)}")
    if not out.flags.writeable:
        _fail("out must be writeable")
    of, os_ = _strided("out", out)
    if out.size == 0:
        return None
    if D < 1 or Sk < 1:
        _fail(f"queries need keys with at least one element (D = {D}, Sk = {Sk})")
    for name, x in (("q", q), ("k", k), ("v", v),
                    ("mask", mask.data if type(mask) is RowMask else mask)):
        if x is not None and np.may_share_memory(out, x):
            _fail(f"out must not overlap {name}")
    mf, mbits, ms, mode, starts = _mask_view(mask, (B, H, Sq, Sk))
    key_block = int(key_block)
    if key_block < 1:
        _fail(f"key_block must be >= 1, got {key_block}")
    scale = float(scale)
    g = np.array([B, H, Sq, Sk, D, Dv, *qs, *ks, *vs, *os_, *ms, mode, int(bool(causal)),
                  key_block, int(bool(nan_to_zero)), groups, int(starts is not None)], np.int64)
    assert g.shape == (_GEOMETRY,)
    if starts is not None:      # the RowMask's batch map, after the fields
        g = np.concatenate((g, starts.astype(np.int64)))
    tasks = B * H * (-(-Sq // QB))
    threads = numba_threads() if threads is None else int(threads)
    workers = max(1, min(threads, tasks))
    return attention_parallel.on_threads(workers), (qf, kf, vf, of, mf, mbits, g, scale,
                                                    workers)


def rebind_rows(args: tuple, mask: RowMask) -> bool:
    """Put ``mask`` (this run's :class:`RowMask` of a mask computed at every
    run) into the arguments of an :func:`attention_call` made with an earlier
    one: its values over the bound ones, its batch map into the geometry's
    tail. False (nothing written) when its layout differs (another number
    of distinct batches, or a map where there was none): the call must then
    be made anew."""
    mf, g = args[4], args[6]
    new, _, steps, mode, starts = _mask_view(mask, tuple(int(n) for n in g[_B:_SK + 1]))
    if g[_MODE] != MASK_ROWS or new.shape != mf.shape or (starts is None) != (g[_MMAP] == 0) \
            or (starts is not None and starts.shape[0] != g.shape[0] - _GEOMETRY):
        return False
    mf[:] = new
    g[_MB:_MK + 1] = steps
    if starts is not None:
        g[_GEOMETRY:] = starts
    return True
