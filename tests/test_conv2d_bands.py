"""Thread shares of the 1x1 and depthwise conv drivers (kernels/conv2d/conv1x1.py
``claim_task``, the depthwise driver's bands of rows): every task claimed once,
each worker's own contiguous share first; the depthwise bands against the
float64 reference on 1 and 2 threads (odd channels and sizes, N > 1, blocks 4,
8 and 16, stride 1 and 2, with and without a residual) and the same bits on
both thread counts."""

import numba
import numpy as np
import pytest

import jitnn
from jitnn.kernels import conv2d as K
from jitnn.kernels.conv2d import conv1x1
from jitnn.kernels.epilogue import CLAMP, RELU
from tests.helpers import random, reference


def _blocked(x: np.ndarray, block: int) -> np.ndarray:
    """``(N, C, H, W)`` as ``(N, C_phys // block, H, W, block)``, zero padding lanes."""
    n, c, h, w = x.shape
    cb = -(-c // block)
    padded = np.zeros((n, cb * block, h, w), np.float32)
    padded[:, :c] = x
    return np.ascontiguousarray(padded.reshape(n, cb, block, h, w).transpose(0, 1, 3, 4, 2))


def _plain(y: np.ndarray, c: int) -> np.ndarray:
    n, cb, h, w, block = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * block, h, w)[:, :c]


def _depthwise(x, packed, block, n, c, oh, ow, strides, residual, threads):
    out = np.full((n, -(-c // block), oh, ow, block), np.nan, np.float32)
    saved = numba.get_num_threads()
    try:
        numba.set_num_threads(threads)
        K.conv2d_forward(_blocked(x, block), packed, out, strides, padding=(1, 1, 1, 1),
                         residual=None if residual is None else _blocked(residual, block),
                         activation=CLAMP, param0=0.0, param1=6.0)
    finally:
        numba.set_num_threads(saved)
    return out


@pytest.mark.parametrize("workers, tasks", [(1, 5), (2, 1), (2, 7), (2, 40), (3, 10), (4, 3)])
def test_claim_task_shares_then_steals(workers, tasks):
    """A worker takes its own contiguous share in order first, then what is
    left of the others'; every task is claimed exactly once, however the
    claims interleave."""
    claim, stride = conv1x1.claim_task, conv1x1.COUNTER_STRIDE
    shares = [range(w * tasks // workers, (w + 1) * tasks // workers) for w in range(workers)]
    for w in range(workers):            # alone: its share, then the others' in turn
        counters = np.zeros(workers * stride, np.int64)
        got = []
        while (task := claim(counters, w, workers, tasks)) >= 0:
            got.append(task)
        assert got == [t for k in range(workers) for t in shares[(w + k) % workers]]
    rng = np.random.default_rng(workers * 100 + tasks)
    for _ in range(20):                 # interleaved at random: each task once
        counters = np.zeros(workers * stride, np.int64)
        done, claimed = [False] * workers, []
        while not all(done):
            w = int(rng.integers(workers))
            if not done[w]:
                task = claim(counters, w, workers, tasks)
                done[w] = task < 0
                if task >= 0:
                    claimed.append(task)
        assert sorted(claimed) == list(range(tasks))


# batch 1, and batches that do not divide among the threads, run in bands of
# rows, one per thread; batches that do, image by image. (Block 4, unless it
# is the host's, in the slow run: its depthwise drivers are the case's own.)
BANDS = [
    # (n, c, h, w, strides, block, residual)
    (1, 1, 9, 7, (1, 1), 8, True),
    pytest.param((1, 3, 23, 13, (2, 2), 4, False), marks=pytest.mark.slow
                 if jitnn.host_block() != 4 else ()),
    (1, 7, 31, 9, (1, 1), 16, True),
    (3, 9, 17, 15, (2, 2), 8, True),          # 3 images on 2 threads: bands
    (2, 17, 21, 11, (1, 1), 8, False),        # 2 images on 2 threads: an image each
    (1, 17, 112, 20, (2, 2), 8, True),        # many row chunks per band
    (1, 24, 29, 13, (1, 1), 8, False),
]


@pytest.mark.parametrize("case", BANDS,
                         ids=lambda c: f"n{c[0]}c{c[1]}_{c[2]}x{c[3]}_s{c[4][0]}_b{c[5]}")
def test_depthwise_bands_of_rows(case):
    n, c, h, w, strides, block, residual = case
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has fewer than 2 threads")
    rng = np.random.default_rng(h + c)
    x = random((n, c, h, w), rng)
    weights = random((c, 1, 3, 3), rng)
    packed = K.pack_conv2d_filter(weights, c, c, block)
    oh, ow = (h + 2 - 3) // strides[0] + 1, (w + 2 - 3) // strides[1] + 1
    res = random((n, c, oh, ow), rng) if residual else None
    want = reference("conv2d")(x.astype(np.float64), weights.astype(np.float64), None,
                               strides=strides, padding=(1, 1, 1, 1), groups=c)
    if res is not None:
        want = want + res
    want = np.clip(want, 0.0, 6.0)
    outs = [_depthwise(x, packed, block, n, c, oh, ow, strides, res, t) for t in (1, 2)]
    for out in outs:
        assert not np.isnan(out).any()
        np.testing.assert_allclose(_plain(out, c), want, rtol=1e-5, atol=1e-5)
        assert not out[:, -1, ..., c % block or block:].any()      # padding lanes zero
    np.testing.assert_array_equal(outs[0], outs[1])   # the order moves tasks, not sums


# (n, c, o, h, w, block): one chunk of pixels at batch 1 on 2 threads, output-
# block groups that split evenly (2, 4, 8 groups: each thread takes every
# pixel for half of them); odd channels and sizes, partial lanes in and out;
# two images (one chunk each: no group split) and groups that do not split
# evenly (3 at block 8: the pixel chunks) for the other rules. (Block 4,
# unless it is the host's, in the slow run: its 1x1 drivers are the case's
# own, ~10 s of a cold default run, for the rules the block-8 cases check.)
GROUP_SPLITS = [
    (1, 1, 64, 9, 7, 8),
    (1, 3, 40, 13, 11, 16),
    pytest.param((1, 7, 32, 14, 14, 4), marks=pytest.mark.slow
                 if jitnn.host_block() != 4 else ()),
    (1, 9, 128, 7, 7, 8),
    (1, 17, 64, 14, 14, 16),
    (1, 300, 120, 11, 13, 8),
    (2, 17, 64, 9, 9, 8),
    (1, 40, 96, 14, 14, 8),
]


@pytest.mark.parametrize("case", GROUP_SPLITS,
                         ids=lambda c: f"n{c[0]}c{c[1]}o{c[2]}_{c[3]}x{c[4]}_b{c[5]}")
def test_1x1_group_split_on_two_threads(case):
    """Fewer pixel chunks than threads: groups that split evenly go to the
    threads in equal shares (every pixel each); against float64 on 1 and 2
    threads, the same bits on both (each output sums its K-blocks in order
    whichever thread runs it)."""
    n, c, o, h, w, block = case
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has fewer than 2 threads")
    from jitnn.kernels.conv2d import plan as conv_plan
    CB, OB = -(-c // block), -(-o // block)
    P, B = K.conv1x1_tile_shape(block, OB)
    groups = -(-OB // B)
    chunk, _, gsets = conv_plan._gemm_blocking(n, CB, OB, h * w, block, 2, P, B)
    one_chunk = n * -(-h * w // conv_plan._gemm_blocking(n, CB, OB, h * w, block, 1, P, B)[0])
    if one_chunk < 2 and groups % 2 == 0:
        assert gsets == 2 and chunk >= h * w
    rng = np.random.default_rng(c + o)
    x = random((n, c, h, w), rng)
    weights = random((o, c, 1, 1), rng, scale=c ** -0.5)     # outputs of order 1
    bias = random((o,), rng)
    res = random((n, o, h, w), rng)
    packed = K.pack_conv2d_filter(weights, c, 1, block)
    want = reference("conv2d")(x.astype(np.float64), weights.astype(np.float64),
                               bias.astype(np.float64)) + res
    want = np.maximum(want, 0.0)
    outs = []
    for threads in (1, 2):
        out = np.full((n, OB, h, w, block), np.nan, np.float32)
        saved = numba.get_num_threads()
        try:
            numba.set_num_threads(threads)
            K.conv2d_forward(_blocked(x, block), packed, out, bias=bias,
                             residual=_blocked(res, block), activation=RELU)
        finally:
            numba.set_num_threads(saved)
        assert not np.isnan(out).any()
        np.testing.assert_allclose(_plain(out, o), want, rtol=1e-5, atol=1e-5)
        assert not out[:, -1, ..., o % block or block:].any()      # padding lanes zero
        outs.append(out)
    np.testing.assert_array_equal(outs[0], outs[1])
