"""The reductions (WebNN's ten reduce_* ops), arg_min / arg_max and
cumulative_sum: values against the float64 references on plain and blocked
inputs (blocks 4, 8, 16; C = 1, 3, 7, 9, 17; odd H, W; N > 1), every axes
subset of a rank-4 tensor, keep_dimensions both ways, the empty axes list,
ranks 0 to 5, integer dtypes, NaN and infinities, blocked results with zero
padding lanes and no reorder, a typical network shape, the kernel's serial
and parallel runs, and the errors."""

import itertools

import numpy as np
import pytest

import jitnn
from jitnn import layouts
from jitnn.kernels import reduce as reduce_kernels
from tests.helpers import (KINDS, assert_close, assert_padding_lanes_zero, assert_schedule,
                           expected_layout, make, random, reference)

OPS = ["l1", "l2", "log_sum", "log_sum_exp", "max", "mean", "min", "product", "sum",
       "sum_square"]
#: every (axes, keep_dimensions) the main test runs on a rank-4 tensor
AXES = [None, [2, 3], [3, 2], [2], [3], [], [1], [0, 2], [-1, -2], [0, 1, 2, 3]]

EPS32 = float(np.finfo(np.float32).eps)


def _data(op, shape, seed):
    """Data each op is defined on: log_sum needs positive sums, product
    factors near 1 (a product of many normals underflows float32)."""
    x = random(shape, seed)
    if op == "log_sum":
        return np.abs(x) + np.float32(0.1)
    if op == "product":
        return np.float32(1.0) + np.float32(0.1) * x
    return x


def _reduce(op, x, **options):
    return getattr(jitnn, f"reduce_{op}")(x, **options)


def _want(op, x, **options):
    return reference(f"reduce_{op}")(x, **options)


def _check(op, got, want):
    # float64 accumulation: one rounding of the result, a few for l2, log, exp
    assert_close(got, want, tol=8 * EPS32)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("channels", [1, 3, 7, 9, 17])
@pytest.mark.parametrize("op", OPS)
def test_reductions_against_reference(op, channels, kind):
    x = _data(op, (2, channels, 5, 7), channels)
    t = make(x, kind)
    for axes, keep in itertools.product(AXES, (False, True)):
        got = _reduce(op, t, axes=axes, keep_dimensions=keep)
        want = _want(op, x, axes=axes, keep_dimensions=keep)
        assert got.shape == want.shape and got.dtype == np.float32, (axes, keep)
        spatial = axes is not None and {a % 4 for a in axes} <= {2, 3}
        if kind != "plain" and spatial and (keep or not axes):
            assert got.layout == expected_layout(kind), (axes, keep)
            assert_padding_lanes_zero(got)
        else:
            assert got.layout == layouts.plain_tag(len(want.shape)), (axes, keep)
        _check(op, got.numpy(), want)


@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block16"])
@pytest.mark.parametrize("op", ["sum", "max", "log_sum_exp"])
def test_every_axes_subset_of_a_rank_4_tensor(op, kind):
    x = _data(op, (3, 9, 5, 3), 1)
    t = make(x, kind)
    for count in range(5):
        for axes in itertools.combinations(range(4), count):
            for keep in (False, True):
                got = _reduce(op, t, axes=list(axes), keep_dimensions=keep).numpy()
                _check(op, got, _want(op, x, axes=axes, keep_dimensions=keep))


@pytest.mark.parametrize("op", OPS)
def test_ranks_0_to_5(op):
    for rank in range(6):
        shape = (3, 1, 4, 2, 5)[:rank]
        x = _data(op, shape, rank)
        for axes in (None, [], list(range(rank))[-1:], list(range(rank))[::2]):
            for keep in (False, True):
                got = _reduce(op, x, axes=axes, keep_dimensions=keep)
                _check(op, got.numpy(), _want(op, x, axes=axes, keep_dimensions=keep))


@pytest.mark.parametrize("op", OPS)
def test_empty_axes_reduce_each_element_alone(op):
    x = _data(op, (2, 3, 4), 2)
    got = _reduce(op, x, axes=[]).numpy()
    assert got.shape == x.shape
    alone = {"l1": np.abs, "l2": np.abs, "log_sum": np.log,
             "sum_square": lambda v: v.astype(np.float64) ** 2}.get(op, lambda v: v)(x)
    _check(op, got, alone)


def test_nan_and_infinities():
    x = random((2, 5, 3, 4), 3)
    x[0, 1, 2, 3] = np.nan
    x[1, 2, 0, 0] = np.inf
    x[1, 3] = -np.inf                                  # a whole plane
    for kind in ("plain", "nChw8c"):
        t = make(x, kind)
        for op in ("sum", "max", "min", "mean", "log_sum_exp", "l2"):
            got = _reduce(op, t, axes=[2, 3]).numpy()
            with np.errstate(invalid="ignore", over="ignore"):
                want = _want(op, x, axes=[2, 3])
            np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=op)
            np.testing.assert_array_equal(got[np.isinf(want)], want[np.isinf(want)], err_msg=op)
            finite = np.isfinite(want)
            assert_close(got[finite], want[finite], tol=8 * EPS32)
    assert np.isnan(jitnn.reduce_max(x).numpy()) and np.isnan(jitnn.reduce_min(x).numpy())
    lse = jitnn.reduce_log_sum_exp(np.float32([-np.inf, -np.inf]), axes=[0]).numpy()
    assert lse == -np.inf
    big = jitnn.reduce_log_sum_exp(np.float32([1000.0, 1000.0])).numpy()
    assert_close(big, 1000.0 + np.log(2.0))             # no overflow: max + log(sum(exp(x - max)))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
@pytest.mark.parametrize("op", ["l1", "product", "sum", "sum_square", "max", "min"])
def test_integer_reductions(op, dtype):
    rng = np.random.default_rng(4)
    low = 0 if dtype == np.uint32 else -5
    x = rng.integers(low, 6, (2, 3, 4, 5)).astype(dtype)
    for axes, keep in ((None, False), ([1, 3], True), ([0, 2], False), ([], False)):
        got = _reduce(op, jitnn.tensor(x), axes=axes, keep_dimensions=keep)
        assert got.dtype == dtype
        want = _want(op, x, axes=axes, keep_dimensions=keep)
        np.testing.assert_array_equal(got.numpy(), want.astype(dtype))


def test_integer_sums_wrap_as_their_type():
    x = np.full((3,), 2 ** 30, np.int32)
    assert jitnn.reduce_sum(x).numpy() == np.int32(-(2 ** 30))    # 3 * 2^30 mod 2^32
    assert jitnn.reduce_product(np.full((2,), 2 ** 16, np.uint32)).numpy() == 0


@pytest.mark.parametrize("dtype", [np.int8, np.uint8])
def test_max_and_min_take_every_dtype(dtype):
    x = np.array([[3, 7, 1], [0, 5, 9]], dtype)
    np.testing.assert_array_equal(jitnn.reduce_max(x, axes=[1]).numpy(), np.array([7, 9], dtype))
    np.testing.assert_array_equal(jitnn.reduce_min(x, axes=[0], keep_dimensions=True).numpy(),
                                  np.array([[0, 5, 1]], dtype))


def test_blocked_spatial_reductions_need_no_reorder():
    ctx = jitnn.Context(block=8)
    x = random((2, 19, 7, 5), 5)
    t = ctx.tensor(x)
    blocked = jitnn.reorder(t, "nChw8c")
    blocked._materialize()
    with assert_schedule(ctx, kernels=4, reorders=0):
        kept = jitnn.reduce_mean(blocked, axes=[2, 3], keep_dimensions=True)
        flat = jitnn.reduce_max(blocked, axes=[2, 3])
        rows = jitnn.reduce_l2(blocked, axes=[2], keep_dimensions=True)
        plain = jitnn.reduce_sum(t, axes=[1])             # plain: read in place
        for r in (kept, flat, rows, plain):
            r._materialize()
    assert kept.layout == rows.layout == "nChw8c" and flat.layout == "nc"
    assert flat.shape == (2, 19)
    _check("mean", kept.numpy(), _want("mean", x, axes=[2, 3], keep_dimensions=True))
    _check("max", flat.numpy(), _want("max", x, axes=[2, 3]))
    _check("l2", rows.numpy(), _want("l2", x, axes=[2], keep_dimensions=True))
    _check("sum", plain.numpy(), _want("sum", x, axes=[1]))


@pytest.mark.parametrize("kind", ["nChw8c", "block16"])
def test_blocked_with_nhwc_axes(kind):
    nhwc = random((2, 5, 3, 9), 6)                       # (N, H, W, C)
    t = make(nhwc, kind, axes="nhwc")
    for op in ("mean", "log_sum_exp"):
        got = _reduce(op, t, axes=[1, 2], keep_dimensions=True)
        assert got.layout == expected_layout(kind) and got.shape == (2, 1, 1, 9)
        assert_padding_lanes_zero(got)
        _check(op, got.numpy(), _want(op, nhwc, axes=[1, 2], keep_dimensions=True))
        got = _reduce(op, t, axes=[1, 2])
        assert got.shape == (2, 9)
        _check(op, got.numpy(), _want(op, nhwc, axes=[1, 2]))
        _check(op, _reduce(op, t, axes=[2]).numpy(), _want(op, nhwc, axes=[2]))


def test_squeeze_excite_block_stays_blocked():
    """conv -> reduce_mean over H, W (kept) -> conv 1x1 -> sigmoid -> mul:
    one reorder in and one out."""
    ctx = jitnn.Context()
    x = random((1, 16, 9, 9), 7)
    w = random((16, 16, 3, 3), 8, 0.1)
    w1 = random((16, 16, 1, 1), 9, 0.3)
    with assert_schedule(ctx, reorders=2):
        y = jitnn.conv2d(ctx.tensor(x), ctx.tensor(w), padding=1)
        s = jitnn.sigmoid(jitnn.conv2d(jitnn.reduce_mean(y, axes=[2, 3], keep_dimensions=True),
                                       ctx.tensor(w1)))
        got = jitnn.mul(y, s).numpy()
    y64 = reference("conv2d")(x, w, padding=1)
    s64 = reference("sigmoid")(reference("conv2d")(y64.mean(axis=(2, 3), keepdims=True), w1))
    assert_close(got, y64 * s64, tol=1e-5)


def test_graph_builder():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (2, 3, 4, 5))
    outs = {"mean": b.reduce_mean(x, axes=[2, 3], keep_dimensions=True),
            "sum": b.reduce_sum(b.relu(x)), "argmax": b.arg_max(x, 1),
            "cumsum": b.cumulative_sum(x, 3, exclusive=True)}
    graph = b.build(outs)
    data = random((2, 3, 4, 5), 10)
    got = {name: np.zeros(o.shape, o.dtype) for name, o in outs.items()}
    ctx.compute(graph, {"x": data}, got)
    _check("mean", got["mean"], _want("mean", data, axes=[2, 3], keep_dimensions=True))
    _check("sum", got["sum"], _want("sum", np.maximum(data, 0)))
    np.testing.assert_array_equal(got["argmax"], data.argmax(1))
    assert got["argmax"].dtype == np.int32
    assert_close(got["cumsum"], reference("cumulative_sum")(data, 3, exclusive=True))


@pytest.mark.parametrize("block", [8, 16])
def test_network_shape_global_mean(block):
    """ResNet's 1x256x56x56 over H and W (3136 values per mean), blocked and plain."""
    ctx = jitnn.Context(block=block)
    x = random((1, 256, 56, 56), 11) + np.float32(0.5)
    want = x.astype(np.float64).mean(axis=(2, 3), keepdims=True)
    count = 56 * 56
    for t in (ctx.tensor(x), jitnn.reorder(ctx.tensor(x), f"nChw{block}c")):
        got = jitnn.reduce_mean(t, axes=[2, 3], keep_dimensions=True)
        assert got.layout == t.layout
        assert_close(got.numpy(), want, rtol=count * EPS32 / 64, atol=1e-7)


def _serial_run(data, out, op):
    """What :func:`reduce_kernels.reduce` computes, in one task on one thread."""
    outer, R, inner = data.shape
    code = reduce_kernels.OPS[op]
    xf, outf = data.reshape(-1), out.reshape(-1)
    if inner in reduce_kernels.LANE_INNERS and op != "log_sum_exp":
        kernel = reduce_kernels.lane_rows(inner, reduce_kernels.lane_family(code))
        kernel.serial(xf, outf, R, code, outer, 1)
    elif reduce_kernels.is_narrow(inner, code):
        lanes = reduce_kernels.narrow_lanes(R, inner, code)
        reduce_kernels._narrow_tasks(xf, outf, R, inner, code, lanes, 0, outer)
    else:
        reduce_kernels._reduce_tasks(xf, outf, R, inner, code, reduce_kernels._ROW_LANES, 0,
                                     outer * -(-inner // reduce_kernels._LANE_CHUNK))


@pytest.mark.parametrize("op", ["sum", "max", "log_sum_exp", "l1"])
def test_kernel_serial_and_parallel_runs_agree(op, threads):
    """Each output comes from one task, so the threads' split changes no bit."""
    x = _data(op, (4, 96, 130), 12)
    for view in ((4, 96, 130), (4 * 96, 130, 1), (1, 4 * 96 * 130, 1), (4, 1, 96 * 130),
                 (1, 4, 96 * 130), (4 * 130, 12, 8)):
        data = x.reshape(view)
        out = np.empty((view[0], view[2]), np.float32)
        reduce_kernels.reduce(data, out, op)
        single = np.empty_like(out)
        _serial_run(data, single, op)
        np.testing.assert_array_equal(out, single)
        want = _want(op, data, axes=[1])
        _check(op, out, want)


@pytest.mark.parametrize("inner", reduce_kernels.LANE_INNERS)
@pytest.mark.parametrize("op", [o for o in OPS if o != "log_sum_exp"])
def test_lane_rows_against_reference(op, inner):
    """The register-tile kernels (a plain row, blocks of 4, 8, 16): floats per
    row below, at and past one vector, the four chains and their multiples
    (the last whole vectors and the tail's pixels in the first chain), a NaN
    or an infinity in a chain, the last vectors or the tail for max and min."""
    code = reduce_kernels.OPS[op]
    lanes = max(inner, 8)
    per = lanes // inner                               # pixels per vector
    counts = {1, 2, 3, 7, 9, 17, 49, 130}
    for vectors in (1, 4, 5, 8, 11):
        counts |= {vectors * per - 1, vectors * per, vectors * per + 1}
    for R in sorted(c for c in counts if c > 0):
        data = _data(op, (3, R, inner), R)
        out = np.full((3, inner), np.nan, np.float32)
        reduce_kernels.reduce(data, out, op)
        _check(op, out, _want(op, data, axes=[1]))
        if op in ("max", "min"):
            for where in (R - 1, R // 2, 0):
                marked = data.copy()
                marked[1, where, inner - 1] = np.nan
                marked[2, where, 0] = np.inf if op == "max" else -np.inf
                reduce_kernels.reduce(marked, out, op)
                np.testing.assert_array_equal(
                    out, _want(op, marked, axes=[1]).astype(np.float32))


@pytest.mark.parametrize("inner", [1, 2, 4, 8, 16])
@pytest.mark.parametrize("op", [o for o in OPS if o != "log_sum_exp"])
def test_narrow_rows_against_reference(op, inner):
    """The narrow paths (:func:`lane_rows` for inner 1, 4, 8, 16; rows of
    16-128 lanes of ``_narrow_tasks`` for 2): pixel counts below, at and past
    a row and the point where the width doubles, a NaN in the rows or the
    tail for max and min."""
    code = reduce_kernels.OPS[op]
    assert reduce_kernels.is_narrow(inner, code)
    counts = {1, 3, 7, 9, 17, 49, 130, 1031}
    for lanes in (16, 32, 64, 128):                    # around each width's first rows
        per = lanes // inner
        counts |= {per - 1, per, per + 1, 6 * per - 1, 6 * per, 6 * per + 1, 7 * per + 3}
    for R in sorted(c for c in counts if c > 0):
        data = _data(op, (3, R, inner), R)
        out = np.empty((3, inner), np.float32)
        reduce_kernels.reduce(data, out, op)
        _check(op, out, _want(op, data, axes=[1]))
        if op in ("max", "min"):
            data[1, R - 1, inner - 1] = np.nan          # the tail's (or a row's) last lane
            data[2, 0, 0] = np.inf if op == "max" else -np.inf
            reduce_kernels.reduce(data, out, op)
            np.testing.assert_array_equal(out, _want(op, data, axes=[1]).astype(np.float32))


def test_reduction_errors():
    x = jitnn.tensor(random((2, 3, 4, 5), 13))
    with pytest.raises(jitnn.JitnnValueError, match=r"reduce_sum: axes must be in \[-4, 3\]"):
        jitnn.reduce_sum(x, axes=[4])
    with pytest.raises(jitnn.JitnnValueError, match=r"reduce_mean: axes must not repeat"):
        jitnn.reduce_mean(x, axes=[1, 1])
    with pytest.raises(jitnn.JitnnValueError, match=r"reduce_max: axes must not repeat"):
        jitnn.reduce_max(x, axes=[3, -1])
    with pytest.raises(jitnn.JitnnTypeError, match=r"reduce_l1: axes must be a list of ints"):
        jitnn.reduce_l1(x, axes=[1.0])
    with pytest.raises(jitnn.JitnnTypeError, match=r"reduce_l1: axes must be a list of ints"):
        jitnn.reduce_l1(x, axes=2)
    with pytest.raises(jitnn.JitnnTypeError, match=r"keep_dimensions must be a bool"):
        jitnn.reduce_sum(x, keep_dimensions=1)
    ints = jitnn.tensor(np.arange(6, dtype=np.int32))
    for op in ("mean", "l2", "log_sum", "log_sum_exp"):
        with pytest.raises(jitnn.JitnnTypeError,
                           match=rf"reduce_{op}: input must have dtype float32, got a int32"):
            _reduce(op, ints)
    with pytest.raises(jitnn.JitnnTypeError, match=r"reduce_sum: input must have dtype "
                                                   r"float32, int32, int64 or uint32"):
        jitnn.reduce_sum(jitnn.tensor(np.arange(6, dtype=np.int8)))
    with pytest.raises(jitnn.JitnnValueError, match=r"reduce_max: an integer maximum"):
        jitnn.reduce_max(jitnn.tensor(np.zeros((2, 0), np.int32)), axes=[1])


# --- arg_min, arg_max ------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "nChw8c", "block16"])
@pytest.mark.parametrize("op", ["min", "max"])
def test_arg_reductions(op, kind):
    x = random((2, 9, 5, 3), 14)
    x[1, 2, 3, :] = x[1, 2, 0, :]                        # ties: the first index wins
    x[0, :, 1, 1] = 7.0 if op == "max" else -7.0
    t = make(x, kind)
    function = getattr(jitnn, f"arg_{op}")
    for axis, keep, dtype in itertools.product((0, 1, 2, -1), (False, True), ("int32", "int64")):
        got = function(t, axis, keep_dimensions=keep, output_data_type=dtype)
        assert got.dtype == np.dtype(dtype)
        want = reference(f"arg_{op}")(x, axis, keep_dimensions=keep)
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32, np.int8, np.uint8])
def test_arg_reductions_of_every_dtype(dtype):
    x = np.array([[3, 9, 9, 1], [4, 4, 0, 0]], dtype)
    np.testing.assert_array_equal(jitnn.arg_max(x, 1).numpy(), [1, 0])
    np.testing.assert_array_equal(jitnn.arg_min(x, 1).numpy(), [3, 2])
    np.testing.assert_array_equal(jitnn.arg_min(x, 0, keep_dimensions=True).numpy(),
                                  [[0, 1, 1, 1]])


def test_arg_reduction_errors():
    x = jitnn.tensor(random((2, 3), 15))
    with pytest.raises(jitnn.JitnnValueError, match=r"arg_max: axis must be in \[-2, 1\]"):
        jitnn.arg_max(x, 2)
    with pytest.raises(jitnn.JitnnValueError, match=r"arg_min: input must have rank >= 1"):
        jitnn.arg_min(np.float32(1.0), 0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"arg_max: output_data_type must be 'int32' "
                                                   r"or 'int64', got 'float32'"):
        jitnn.arg_max(x, 0, output_data_type="float32")
    with pytest.raises(jitnn.JitnnTypeError, match=r"arg_min: keep_dimensions must be a bool"):
        jitnn.arg_min(x, 0, keep_dimensions="yes")


# --- cumulative_sum ----------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["plain", "nChw8c"])
def test_cumulative_sum(kind):
    x = random((2, 9, 5, 3), 16)
    t = make(x, kind)
    for axis, exclusive, backward in itertools.product((0, 1, 2, 3, -1), (False, True),
                                                       (False, True)):
        got = jitnn.cumulative_sum(t, axis, exclusive=exclusive, reversed=backward)
        assert got.shape == x.shape and got.dtype == np.float32
        want = reference("cumulative_sum")(x, axis, exclusive=exclusive, reversed=backward)
        assert_close(got.numpy(), want, tol=4 * EPS32)
    one = jitnn.cumulative_sum(np.float32([1, 2, 3, 4]), 0, exclusive=True, reversed=True)
    np.testing.assert_array_equal(one.numpy(), [9, 7, 4, 0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint32])
def test_integer_cumulative_sum(dtype):
    x = np.array([[1, 2, 3], [4, 5, 6]], dtype)
    got = jitnn.cumulative_sum(x, 1)
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), [[1, 3, 6], [4, 9, 15]])
    np.testing.assert_array_equal(jitnn.cumulative_sum(x, 0, exclusive=True).numpy(),
                                  [[0, 0, 0], [1, 2, 3]])
    wraps = jitnn.cumulative_sum(np.full(3, 2 ** 31 - 1, np.int32), 0).numpy()
    if dtype == np.int32:
        np.testing.assert_array_equal(wraps, np.cumsum(np.full(3, 2 ** 31 - 1, np.int32),
                                                       dtype=np.int32))


def test_cumulative_sum_errors():
    with pytest.raises(jitnn.JitnnValueError, match=r"cumulative_sum: axis must be in"):
        jitnn.cumulative_sum(random((2, 3), 17), 2)
    with pytest.raises(jitnn.JitnnValueError, match=r"cumulative_sum: input must have rank"):
        jitnn.cumulative_sum(np.float32(2.0), 0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"cumulative_sum: exclusive must be a bool"):
        jitnn.cumulative_sum(random((2, 3), 17), 0, exclusive=None)
    with pytest.raises(jitnn.JitnnTypeError, match=r"cumulative_sum: input must have dtype"):
        jitnn.cumulative_sum(jitnn.tensor(np.arange(3, dtype=np.uint8)), 0)


# the host's block by default (another block compiles its own conv: slow)
@pytest.mark.parametrize("op, keep, block", [
    pytest.param(op, keep, block, id=f"{block}-{op}-{keep}",
                 marks=pytest.mark.slow if block != jitnn.host_block() else ())
    for op, keep in [("mean", False), ("mean", True), ("log_sum", False), ("max", True)]
    for block in (4, 8, 16)])
def test_replayed_spatial_reduction_of_blocked_data_is_bound(op, keep, block):
    """conv -> reduce over H, W (kept blocked, or the plain (N, C) of a
    classifier head) -> matmul or conv, computed again on new inputs: the
    reduction runs as a bound call writing the plan's buffer, with the
    references' numbers at every run (log_sum: padding lanes rezeroed)."""
    ctx = jitnn.Context(num_threads=1, block=block)
    c = 17
    w1, w2 = random((c, 5, 1, 1), 80, 0.3), random((c, 6), 81, 0.3)
    b = jitnn.GraphBuilder(ctx)
    y = b.abs(b.conv2d(b.input("x", (2, 5, 7, 9)), b.constant(w1)))
    y = getattr(b, f"reduce_{op}")(y, axes=[2, 3], keep_dimensions=keep)
    y = b.conv2d(y, b.constant(w2.T.reshape(6, c, 1, 1).copy())) if keep else \
        b.matmul(y, b.constant(w2))
    graph = b.build({"y": y})
    out = np.empty((2, 6, 1, 1) if keep else (2, 6), np.float32)
    conv, reduce = reference("conv2d"), reference(f"reduce_{op}")
    for seed in range(3):
        x = random((2, 5, 7, 9), 82 + seed)
        ctx.compute(graph, {"x": x}, {"y": out})
        r = reduce(np.abs(conv(x, w1)), axes=[2, 3], keep_dimensions=keep)
        want = conv(r, w2.T.reshape(6, c, 1, 1)) if keep else r @ w2
        assert_close(out, want, tol=2e-5)
    (program,) = graph._programs
    kinds = [(c_.node.kind, bool(bound), bool(c_.step.buffer)) for c_, bound in
             zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
    assert ("reduce_blocked", True, True) in kinds, kinds


@pytest.mark.parametrize("op, axes, keep", [("mean", [2, 3], True), ("max", [2, 3], False),
                                            ("min", [1], True), ("sum", [1, 3], False),
                                            ("l2", [0, 2, 3], True)])
def test_replayed_reduction_of_plain_data(op, axes, keep, threads):
    """A graph's plain input reduced (adjacent axes: read in place; others:
    transposed first), computed again on new inputs: the references' numbers
    at every run, and a plain input read in place runs as a bound call."""
    ctx = jitnn.Context(num_threads=threads)
    shape = (3, 9, 7, 5)
    b = jitnn.GraphBuilder(ctx)
    y = getattr(b, f"reduce_{op}")(b.input("x", shape), axes=axes, keep_dimensions=keep)
    graph = b.build({"y": y})
    out = np.empty(y.shape, np.float32)
    for seed in range(3):
        x = _data(op, shape, 90 + seed)
        ctx.compute(graph, {"x": x}, {"y": out})
        _check(op, out, _want(op, x, axes=axes, keep_dimensions=keep))
    (program,) = graph._programs
    kinds = [(c_.node.kind, bool(bound)) for c_, bound in
             zip(program.steps, program.bindings.steps) if c_.step.kind == "op"]
    in_place = reduction_view(shape, axes)
    assert kinds == [("reduce_plain", in_place)], kinds


def reduction_view(shape, axes):
    """Whether the plain reduction reads ``shape`` in place over ``axes``."""
    from jitnn.ops.reduction import run_view
    return run_view(shape, tuple(a % len(shape) for a in axes))[0] is None


# --- top_k_indices -----------------------------------------------------------------------

@pytest.mark.parametrize("shape, k", [((17,), 5), ((3, 9), 9), ((2, 7, 13), 1), ((2, 3, 5, 9), 4)])
@pytest.mark.parametrize("largest", [True, False])
def test_top_k_indices_against_the_reference(shape, k, largest):
    """Rows of odd lengths, batches, k = 1 and k = n, many ties (few distinct
    values: equal ones by index), eager and in a graph, float32 and integers
    (the smallest int64, which a negation would overflow)."""
    rng = np.random.default_rng(len(shape) + k)
    x = rng.integers(-3, 4, shape).astype(np.float32) * np.float32(0.5)
    want = reference("top_k_indices")(x, k, largest)
    got = jitnn.top_k_indices(x, k, largest=largest).numpy()
    assert got.dtype == np.int64 and got.shape == shape[:-1] + (k,)
    np.testing.assert_array_equal(got, want)
    order = np.argsort(-x.astype(np.float64) if largest else x, axis=-1, kind="stable")
    np.testing.assert_array_equal(got, order[..., :k])
    ctx = jitnn.Context(num_threads=1)
    b = jitnn.GraphBuilder(ctx)
    graph = b.build({"i": b.top_k_indices(b.input("x", shape), k, largest=largest)})
    for run in range(2):
        np.testing.assert_array_equal(ctx.dispatch(graph, {"x": x + run})["i"].numpy(), want)
    ints = np.int64([[-2 ** 63, 5, 5, -2 ** 63, 0]])
    np.testing.assert_array_equal(jitnn.top_k_indices(ints, 3, largest=largest).numpy(),
                                  [[1, 2, 4]] if largest else [[0, 3, 4]])


def test_top_k_indices_errors():
    x = np.zeros((2, 5), np.float32)
    for k in (0, 6, 2.0, True):
        with pytest.raises(jitnn.JitnnValueError, match=r"top_k_indices: k must be an integer "
                           r"from 1 to the last axis' 5"):
            jitnn.top_k_indices(x, k)
    with pytest.raises(jitnn.JitnnValueError, match="top_k_indices: input must have rank >= 1"):
        jitnn.top_k_indices(np.float32(1.0), 1)
