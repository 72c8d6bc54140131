"""Channel concatenation of blocked tensors (kernels/concat.py) against the
op's reference (``np.concatenate``); the output starts as NaN and its padding
lanes must be 0."""

import numpy as np
import pytest

from jitnn import layouts
from jitnn.kernels import concat as K
from tests.helpers import random, reference

BLOCKS = (4, 8, 16)
CHANNEL_LISTS = [
    (8, 16),            # aligned at cb 4 and 8
    (16, 32, 16),       # aligned at every tested block
    (3, 5),             # the second input starts at lane 3
    (7, 9, 1),          # three shifted inputs
    (8, 3, 17),         # aligned, then shifted (the first copies whole blocks)
    (1, 1),
    (17, 64, 9),
    (64, 3),
]


def _concat(xs, cb):
    channels = [x.shape[1] for x in xs]
    n, _, h, w = xs[0].shape
    out = np.full((n, -(-sum(channels) // cb), h, w, cb), np.nan, np.float32)
    K.concat_channels([layouts.reference_nchw_to_blocked(x, cb) for x in xs], channels, out)
    return out


def _check(out, expected):
    assert not np.isnan(out).any(), "NaN in the output (an element was not written)"
    n, blocks, h, w, cb = out.shape
    channels = expected.shape[1]
    full = out.transpose(0, 1, 4, 2, 3).reshape(n, blocks * cb, h, w)
    assert np.all(full[:, channels:] == 0), "padding lanes are not zero"
    np.testing.assert_array_equal(full[:, :channels], expected)


@pytest.mark.parametrize("cb", BLOCKS)
@pytest.mark.parametrize("channels", CHANNEL_LISTS, ids=str)
def test_concat(channels, cb):
    xs = [random((2, c, 5, 7), seed=i) for i, c in enumerate(channels)]
    _check(_concat(xs, cb), reference("concat")(xs, 1))


@pytest.mark.parametrize("cb", (1, 32))
def test_concat_other_block_sizes(cb):
    for channels in [(3, 5), (32, 7, 40)]:
        xs = [random((2, c, 3, 5), seed=i) for i, c in enumerate(channels)]
        _check(_concat(xs, cb), reference("concat")(xs, 1))


def test_aligned_detection():
    assert K.concat_offsets([3, 5, 8]) == [0, 3, 8]
    assert K.concat_is_aligned([8, 16, 5], 8)
    assert not K.concat_is_aligned([3, 5], 8)
    assert K.concat_is_aligned([3, 5], 1)


@pytest.mark.parametrize("channels", [(24, 40), (13, 22, 7)], ids=str)
def test_parallel_path(channels, threads, record_calls):
    """Large enough for the parallel copy (2 threads; on 1 the same rows in
    one plain call per input)."""
    calls = record_calls(K, "_copy_rows_parallel", "_copy_whole_blocks_parallel")
    xs = [random((2, c, 23, 29), seed=i) for i, c in enumerate(channels)]
    out = _concat(xs, 8)
    assert out.size >= K._PARALLEL_MIN
    assert (len(calls) > 0) == (threads == 2)   # the larger inputs only
    _check(out, reference("concat")(xs, 1))


@pytest.mark.parametrize("n, h, w", [(1, 14, 14), (2, 5, 7), (3, 9, 11)])
def test_many_whole_block_inputs_in_one_region(n, h, w, threads, record_calls):
    """DenseNet's concat: inputs of whole blocks (the last may end in a
    partial one) are copied together, up to _GROUP per call (11 inputs: two
    calls), on 2 threads in one parallel region each when large enough."""
    channels = [16] + [8] * 9 + [13]
    calls = record_calls(K, "_copy_whole_blocks", "_copy_whole_blocks_parallel",
                         "_copy_rows", "_copy_rows_parallel")
    xs = [random((n, c, h, w), seed=i) for i, c in enumerate(channels)]
    _check(_concat(xs, 8), reference("concat")(xs, 1))
    assert len(calls) == 2 and "_copy_rows" not in calls and "_copy_rows_parallel" not in calls
    big = n * 13 * h * w * 8 >= K._PARALLEL_MIN
    assert ("_copy_whole_blocks_parallel" in calls) == (threads == 2 and big)


def test_whole_block_inputs_skip_those_written_in_place():
    """A member its producer wrote into the concat's buffer is not copied;
    the others are, together."""
    cb, h, w = 8, 6, 5
    channels = [8, 16, 8, 24]
    xs = [random((1, c, h, w), seed=i) for i, c in enumerate(channels)]
    out = np.full((1, 7, h, w, cb), np.nan, np.float32)
    blocked = [layouts.reference_nchw_to_blocked(x, cb) for x in xs]
    out[:, 1:3] = blocked[1]                    # input 1 already in place
    inputs = [blocked[0], out[:, 1:3], blocked[2], blocked[3]]
    kernel, args = K.bind_concat_channels(inputs, channels, out, 2)
    assert kernel is K._copy_whole_blocks
    assert list(args[2]) == [0, 1, 2, 2, 2] and list(args[3]) == [0, 3, 4, 5, 6]  # owner, block
    kernel(*args)
    _check(out, reference("concat")(xs, 1))


def test_errors():
    a = layouts.reference_nchw_to_blocked(random((1, 3, 4, 4), 0), 8)
    b = layouts.reference_nchw_to_blocked(random((1, 5, 4, 4), 1), 8)
    out = np.empty((1, 1, 4, 4, 8), np.float32)
    with pytest.raises(ValueError, match="2 inputs but 1"):
        K.concat_channels([a, b], [3], out)
    with pytest.raises(ValueError, match="need 2 blocks"):
        K.concat_channels([a, b], [3, 13], out)
    with pytest.raises(ValueError, match="input 1 has shape"):
        K.concat_channels([a, b[:, :, :3].copy()], [3, 5], out)
    with pytest.raises(ValueError, match="overlaps out"):
        K.concat_channels([out, b], [3, 5], out)
