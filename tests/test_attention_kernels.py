"""The fused attention kernel (kernels/attention.py) on its own: operands
read through strides (head-split layouts, a packed QKV projection, a strided
output), every key block size against the reference, rows and keys that do
not fill a tile, thread counts giving the same bits, masks of each mode and
broadcast, the wrapper's checks, and the register tiles' machine code."""

import numpy as np
import pytest

from jitnn.kernels import attention as A
from jitnn.kernels.matmul import VEC
from jitnn.ops.attention import scaled_dot_product_attention_reference as reference
from tests.assembly import check_packed_fma, needs_packed_fma
from tests.helpers import assert_close, random

TOL = 2e-5


def _run(q, k, v, mask=None, *, scale=0.25, causal=False, **options):
    out = np.full(q.shape[:3] + v.shape[3:], np.nan, np.float32)
    assert A.attention(q, k, v, out, mask, scale=scale, causal=causal, **options) is out
    return out


def _want(q, k, v, mask=None, *, scale=0.25, causal=False):
    return reference(q, k, v, mask, scale=scale, is_causal=causal)


@pytest.mark.parametrize("key_block", [1, 3, A.MR, A.KEY_BLOCK, 100, 1000])
@pytest.mark.parametrize("causal", [False, True])
def test_every_key_block_size(key_block, causal):
    q, k, v = random((2, 3, 45, 20), 1), random((2, 3, 130, 20), 2), random((2, 3, 130, 9), 3)
    mask = random((2, 1, 45, 130), 4)
    got = _run(q, k, v, mask, causal=causal, key_block=key_block)
    assert_close(got, _want(q, k, v, mask, causal=causal), tol=TOL)


@pytest.mark.parametrize("rows", [1, A.QB - 1, A.QB, A.QB + 1, 2 * A.QB + 3])
@pytest.mark.parametrize("keys", [1, A.MR - 1, A.MR + 1, A.KEY_BLOCK + 1])
def test_rows_and_keys_that_do_not_fill_a_tile(rows, keys):
    q, k, v = random((1, 2, rows, 7), rows), random((1, 2, keys, 7), keys), \
        random((1, 2, keys, A.MR + 1), 5)
    assert_close(_run(q, k, v), _want(q, k, v), tol=TOL)
    assert_close(_run(q, k, v, causal=True), _want(q, k, v, causal=True), tol=TOL)


def test_head_split_views_are_read_in_place():
    """(B, S, H, D) buffers as (B, H, S, D) views, and the output written the
    same way: no copies, the same values as contiguous operands."""
    B, S, H, D = 2, 37, 5, 24
    qs, ks, vs = (random((B, S, H, D), i) for i in range(3))
    q, k, v = (x.transpose(0, 2, 1, 3) for x in (qs, ks, vs))
    out = np.full((B, S, H, D), np.nan, np.float32)
    A.attention(q, k, v, out.transpose(0, 2, 1, 3), scale=0.3, causal=True)
    want = _want(q, k, v, scale=0.3, causal=True).transpose(0, 2, 1, 3)
    assert_close(out, want, tol=TOL)
    contiguous = _run(*(np.ascontiguousarray(x) for x in (q, k, v)), scale=0.3, causal=True)
    np.testing.assert_array_equal(out, contiguous.transpose(0, 2, 1, 3))


def test_packed_qkv_projection_is_read_in_place():
    """Q, K and V as strided views of one (B, S, 3, H, D) projection output."""
    B, S, H, D = 1, 29, 4, 16
    qkv = random((B, S, 3, H, D), 9)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    assert not q.flags.c_contiguous
    assert_close(_run(q, k, v), _want(q, k, v), tol=TOL)


@pytest.mark.parametrize("mode", ["float", "bool"])
@pytest.mark.parametrize("shape", [(2, 3, 11, 40), (2, 1, 1, 40), (1, 1, 11, 40), (11, 1),
                                   (1, 3, 1, 1), (40,), ()])
def test_mask_modes_and_broadcasts(mode, shape):
    q, k, v = random((2, 3, 11, 8), 1), random((2, 3, 40, 8), 2), random((2, 3, 40, 8), 3)
    rng = np.random.default_rng(len(shape))
    mask = np.asarray(random(shape, rng, scale=2.0)) if mode == "float" else \
        np.asarray(rng.random(shape) > 0.3, np.uint8)
    assert_close(_run(q, k, v, mask), _want(q, k, v, mask), tol=TOL)


def test_boolean_mask_drops_to_float32_lowest():
    q, k, v = random((1, 1, 3, 4), 1), random((1, 1, 9, 4), 2), random((1, 1, 9, 5), 3)
    mask = np.ones((3, 9), np.uint8)
    mask[1] = 0
    mask[2, 4:] = 0
    got = _run(q, k, v, mask)
    assert_close(got[0, 0, 1], v[0, 0].astype(np.float64).mean(axis=0), tol=1e-6)
    assert_close(got[0, 0, 2], _want(q, k[..., :4, :], v[..., :4, :])[0, 0, 2], tol=1e-6)


def test_thread_counts_give_the_same_bits():
    q, k, v = random((2, 5, 100, 32), 1), random((2, 5, 150, 32), 2), random((2, 5, 150, 32), 3)
    one = _run(q, k, v, causal=True, threads=1)
    two = _run(q, k, v, causal=True, threads=2)
    many = _run(q, k, v, causal=True, threads=64)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_array_equal(one, many)


def test_read_only_operands():
    q, k, v = random((1, 2, 5, 8), 1), random((1, 2, 6, 8), 2), random((1, 2, 6, 8), 3)
    want = _run(q, k, v)
    mask = np.zeros((5, 6), np.float32)
    for x in (q, k, v, mask):
        x.setflags(write=False)
    np.testing.assert_array_equal(_run(q, k, v, mask), want)
    broadcast = np.broadcast_to(np.zeros(6, np.float32), (1, 2, 5, 6))
    np.testing.assert_array_equal(_run(q, k, v, broadcast), want)


def test_empty_output_returns_at_once():
    q, k, v = random((1, 2, 0, 8), 1), random((1, 2, 0, 8), 2), random((1, 2, 0, 8), 3)
    assert _run(q, k, v).shape == (1, 2, 0, 8)


def test_the_wrapper_checks_what_the_kernel_indexes():
    q, k, v = random((1, 2, 5, 8), 1), random((1, 2, 6, 8), 2), random((1, 2, 6, 4), 3)
    out = np.empty((1, 2, 5, 4), np.float32)

    def fails(match, *args, **kwargs):
        with pytest.raises(ValueError, match="attention: " + match):
            A.attention(*args, **{"scale": 1.0, **kwargs})

    fails("q must be a 4-D float32", q.astype(np.float64), k, v, out)
    fails("k must be a 4-D float32", q, k[0], v, out)
    fails(r"k \(1, 2, 6, 7\) must be \(B, H, Sk, D\)", q, k[..., :7], v, out)
    fails(r"v \(1, 2, 5, 4\) must be \(B, H, Sk, Dv\)", q, k, v[:, :, :5], out)
    fails("out must have shape", q, k, v, out[..., :3])
    fails("q.s last axis must be contiguous", q[..., ::2], k[..., ::2], v, out)
    fails("q has stride -160 bytes on axis 1: strides must be non-negative", q[:, ::-1], k, v, out)
    fails("out must not overlap q", q, k, v, q[..., :4])
    fails("mask must be a float32 .* or uint8", q, k, v, out, np.zeros((5, 6), np.int32))
    fails(r"mask of shape \(4, 6\) does not broadcast to \(1, 2, 5, 6\)", q, k, v, out,
          np.zeros((4, 6), np.float32))
    fails("key_block must be >= 1", q, k, v, out, key_block=0)
    fails("queries need keys with at least one element", q, k[:, :, :0], v[:, :, :0], out)
    read_only = out.copy()
    read_only.setflags(write=False)
    fails("out must be writeable", q, k, v, read_only)


@needs_packed_fma
def test_register_tiles_use_packed_fma():
    """The score tile (MR x QB / VEC packed FMAs per step: 28 zmm on AVX-512,
    12 ymm on AVX2) and the P V tile (OR x NR / VEC: 16 zmm, 8 ymm), no scalar
    FMA, no spill."""
    from jitnn.kernels._config import jit
    f32 = np.float32
    D, Dv, keys = 24, 2 * A.NR, 2 * A.MR
    qt, st = np.ones(D * A.QB, f32), np.zeros(keys * A.QB, f32)
    flat = np.ones(keys * max(D, Dv), f32)
    scores = jit(cache=False)(A._scores.py_func)
    scores(flat, 0, D, keys, D, qt, st)
    accumulate = jit(cache=False)(A._accumulate.py_func)
    accumulate(flat, 0, Dv, keys, Dv, st, np.zeros(Dv * A.QB, f32), A.QB, False)
    check_packed_fma({"scores": scores.inspect_asm(scores.signatures[0])},
                     min_fma=A.MR * A.QB // VEC)
    check_packed_fma({"accumulate": accumulate.inspect_asm(accumulate.signatures[0])},
                     min_fma=A.OR * A.NR // VEC)


@pytest.mark.slow
@needs_packed_fma
def test_the_driver_keeps_the_tiles_vectorized():
    """The deployed driver (its own copies of the tiles, optimized with it;
    ~10 s of compiling)."""
    from jitnn.kernels._config import jit
    driver = jit(parallel=True, cache=False)(A.attention_parallel.parallel.py_func)
    q = random((1, 1, 3, 8), 1)
    g = np.array([1, 1, 3, 3, 8, 8] + [0, 0, 8] * 4 + [0, 0, 0, 0, A.MASK_NONE, 0,
                                                       A.KEY_BLOCK], np.int64)
    out = np.empty(24, np.float32)
    driver(q.reshape(-1), q.reshape(-1), q.reshape(-1), out, A._NO_FLOATS, A._NO_BITS, g,
           1.0, 1)
    assert_close(out.reshape(1, 1, 3, 8), _want(q, q, q, scale=1.0), tol=TOL)
    asms = {sig: driver.inspect_asm(sig) for sig in driver.signatures}
    check_packed_fma(asms, min_fma=A.MR * A.QB // VEC)


def test_one_compiled_driver_for_every_call():
    """Layouts, mask modes, read-only operands and sizes are runtime arguments:
    the driver has one signature (one compile)."""
    q, k, v = random((1, 2, 5, 8), 1), random((1, 2, 6, 8), 2), random((1, 2, 6, 3), 3)
    _run(q, k, v)
    _run(q, k, v, np.ones((5, 6), np.uint8), causal=True)
    _run(q, k, v, np.zeros((5, 6), np.float32), key_block=2)
    _run(q.transpose(0, 2, 1, 3).copy().transpose(0, 2, 1, 3), k, v)
    q.setflags(write=False)
    _run(q, k, v)
    _run(q, k, v, threads=2)
    for compiled in (A.attention_parallel.serial, A.attention_parallel.parallel):
        assert len(compiled.signatures) == 1, compiled.signatures


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("D", [8, 32, 33, 64])
def test_short_and_window_sizes(D, threads):
    """Swin's windows (49 tokens) and the sizes around the tiles' edges, with
    a per-window additive mask, one broadcast over heads and batch, and the
    causal flag."""
    for N in (1, 7, 49, 50, 127, 128, 129):
        q, k, v = random((2, 3, N, D), N), random((2, 3, N, D), N + 1), \
            random((2, 3, N, D), N + 2)
        for mask in (random((2, 3, N, N), N + 3, scale=2.0), random((1, 3, N, N), N + 4)):
            assert_close(_run(q, k, v, mask, threads=threads), _want(q, k, v, mask), tol=TOL)
        assert_close(_run(q, k, v, causal=True, threads=threads),
                     _want(q, k, v, causal=True), tol=TOL)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("mode", ["float", "bool"])
def test_row_masks_give_the_masks_bits(mode, threads):
    """A mask made a RowMask once gives the bits of the mask as given: per
    window and head (Swin's 49 tokens), broadcast over batch or heads, rows
    and keys around the tiles' edges, odd head sizes, batch > 1, several key
    blocks, and dead keys skipped (the causal values)."""
    rng = np.random.default_rng(5)
    for B, H, Sq, Sk, D, mshape in ((3, 2, 49, 49, 32, (3, 2, 49, 49)),
                                    (2, 3, 49, 49, 33, (1, 3, 49, 49)),
                                    (2, 2, 1, 7, 8, (2, 1, 1, 7)),
                                    (1, 2, 33, 150, 16, (33, 150)),
                                    (2, 1, 70, 70, 24, (2, 1, 70, 1))):
        q, k, v = random((B, H, Sq, D), rng), random((B, H, Sk, D), rng), \
            random((B, H, Sk, D + 3), rng)
        mask = np.asarray(random(mshape, rng, scale=2.0)) if mode == "float" else \
            np.asarray(rng.random(mshape) > 0.3, np.uint8)
        rows = A.row_mask(mask, Sq, Sk)
        got = _run(q, k, v, rows, threads=threads, key_block=A.KEY_BLOCK if Sk < 100 else 50)
        assert_close(got, _want(q, k, v, mask), tol=TOL)
        np.testing.assert_array_equal(got, _run(q, k, v, mask, threads=threads,
                                                key_block=A.KEY_BLOCK if Sk < 100 else 50))
    q, k, v = random((1, 2, 100, 16), 1), random((1, 2, 100, 16), 2), random((1, 2, 100, 8), 3)
    causal = _causal_mask(100, 100, np.finfo(np.float32).min)
    np.testing.assert_array_equal(_run(q, k, v, A.row_mask(causal, 100, 100), threads=threads),
                                  _run(q, k, v, causal=True, threads=threads))
    with pytest.raises(ValueError, match="does not broadcast"):
        _run(q, k, v, A.row_mask(causal[:50], 50, 100))


@pytest.mark.parametrize("threads", [1, 2])
def test_row_masks_keep_each_distinct_batch_once(threads):
    """A RowMask keeps each distinct batch of the mask once and maps the
    batches to them (a shifted Swin window's bias plus shift mask: 4 distinct
    windows of 64), with the bits of the mask as given: windows of two images,
    odd counts, a mask per head or broadcast over heads; every batch distinct
    keeps no map; a map that does not fit the batch is refused."""
    rng = np.random.default_rng(7)
    for images, windows, H, N, D in ((1, 64, 3, 49, 32), (2, 9, 2, 49, 16), (3, 5, 1, 9, 8)):
        B = images * windows
        kinds = np.stack([np.where(rng.random((N, N)) < 0.3, -100.0, 0.0) for _ in range(4)])
        shift = kinds[rng.integers(0, 4, windows)][:, None]                 # (windows, 1, N, N)
        for mask in (np.asarray(random((1, H, N, N), rng)) + shift, shift):
            mask = np.ascontiguousarray(np.tile(mask.astype(np.float32), (images, 1, 1, 1)))
            rows = A.row_mask(mask, N, N)
            assert rows.batches is not None and rows.batch <= 4 < B
            assert rows.data.size < A.row_mask(mask[:1], N, N).data.size * 5
            q, k, v = random((B, H, N, D), rng), random((B, H, N, D), rng), \
                random((B, H, N, D), rng)
            got = _run(q, k, v, rows, threads=threads)
            np.testing.assert_array_equal(got, _run(q, k, v, mask, threads=threads))
            assert_close(got, _want(q, k, v, mask), tol=TOL)
    distinct = np.asarray(random((3, 2, 9, 9), rng))
    assert A.row_mask(distinct, 9, 9).batches is None
    rows = A.row_mask(np.concatenate([distinct, distinct]), 9, 9)
    assert rows.batch == 3 and list(rows.batches) == [*rows.batches[:3]] * 2
    q = random((4, 2, 9, 8), rng)
    with pytest.raises(ValueError, match="mapped to 6 batches"):
        _run(q, q, q, rows)


def _causal_mask(rows, keys, fill):
    return np.triu(np.full((rows, keys), fill, np.float32), 1)


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fill", [-np.inf, np.finfo(np.float32).min])
def test_masked_out_keys_are_skipped_exactly(fill, threads):
    """A causal mask given as values (Llama's, two query heads per KV head:
    rows 0-127 and 128-255), and padding at the end of the keys: the keys
    past every row's last live one are not visited, with the causal flag's
    values and bits."""
    q, k, v = random((2, 4, 256, 64), 1), random((2, 4, 128, 64), 2), random((2, 4, 128, 64), 3)
    mask = np.concatenate([_causal_mask(128, 128, fill)] * 2)
    got = _run(q, k, v, mask, threads=threads)
    assert_close(got, _want(q, k, v, mask), tol=TOL)
    flagged = _run(q[:, :, :128], k, v, causal=True, threads=threads)
    np.testing.assert_array_equal(got[:, :, :128], flagged)
    padding = np.zeros((2, 1, 1, 128), np.float32)
    padding[0, ..., 100:] = fill
    padding[1, ..., 37:] = fill
    assert_close(_run(q, k, v, padding, threads=threads), _want(q, k, v, padding), tol=TOL)
    bits = np.asarray(padding == 0, np.uint8)
    np.testing.assert_array_equal(_run(q, k, v, bits, threads=threads),
                                  _run(q, k, v, padding, threads=threads))


def test_a_row_masked_out_everywhere_keeps_every_key():
    """A row masked out everywhere (float32 lowest) averages every key, as
    unfused: the skip of its task's other rows must not cut its keys."""
    q, k, v = random((1, 2, 40, 16), 1), random((1, 2, 90, 16), 2), random((1, 2, 90, 8), 3)
    lowest = np.finfo(np.float32).min
    mask = _causal_mask(40, 90, lowest)
    mask[5] = lowest                    # nothing to attend to
    got = _run(q, k, v, mask)
    assert_close(got, _want(q, k, v, mask), tol=TOL)
    assert_close(got[0, :, 5], v[0].astype(np.float64).mean(axis=1), tol=1e-6)
