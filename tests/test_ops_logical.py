"""The comparisons, logical ops, is_nan / is_infinite and where
(jitnn/ops/logical.py): uint8 results of 0 and 1 against the references on
every data type, NaN and infinities, broadcasting, blocked float inputs (read
back once), graphs, and the errors raised at the call."""

import numpy as np
import pytest

import jitnn
from tests.helpers import assert_schedule, make, random, reference

COMPARISONS = ["equal", "not_equal", "greater", "greater_or_equal", "lesser", "lesser_or_equal"]
DTYPES = [np.float32, np.int32, np.int64, np.uint32, np.int8, np.uint8]
_NUMPY = {"equal": np.equal, "not_equal": np.not_equal, "greater": np.greater,
          "greater_or_equal": np.greater_equal, "lesser": np.less,
          "lesser_or_equal": np.less_equal}


def _values(dtype, shape, seed):
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.integers(-3, 4, shape).astype(dtype) / 2       # ties on purpose
    info = np.iinfo(dtype)
    pool = np.array([info.min, info.min + 1, 0, 1, 2, info.max - 1, info.max], dtype)
    return rng.choice(pool, shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_on_every_type(op, dtype):
    a, b = _values(dtype, (2, 3, 4, 5), 1), _values(dtype, (2, 3, 4, 5), 2)
    got = getattr(jitnn, op)(jitnn.tensor(a), jitnn.tensor(b))
    assert got.dtype == np.uint8 and got.shape == a.shape and got.layout == "nchw"
    np.testing.assert_array_equal(got.numpy(), _NUMPY[op](a, b).astype(np.uint8))
    np.testing.assert_array_equal(got.numpy(), reference(op)(a, b))


@pytest.mark.parametrize("op", COMPARISONS)
def test_comparisons_with_nan_infinities_and_broadcasting(op):
    """NaN is unequal to everything (not_equal true, the others false); a
    blocked operand is read back once; shapes broadcast both ways."""
    ctx = jitnn.Context()
    a = random((2, 9, 3, 5), 3)
    a[0, :, 0, :4] = [np.nan, np.inf, -np.inf, 0.0]
    b = np.float32([np.nan, np.inf, 0.0, -0.0, 1.0]).reshape(1, 1, 1, 5)
    blocked = jitnn.reorder(ctx.tensor(a), "nChw8c")
    blocked._materialize()
    with assert_schedule(ctx, reorders=1):
        got = getattr(jitnn, op)(blocked, b).numpy()
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, _NUMPY[op](a, b).astype(np.uint8))
    assert got[0, 0, 0, 0] == (op == "not_equal")                # NaN against NaN
    col, row = random((3, 1), 4), random((1, 4), 5)
    np.testing.assert_array_equal(getattr(jitnn, op)(col, row).numpy(),
                                  _NUMPY[op](col, row).astype(np.uint8))
    np.testing.assert_array_equal(getattr(jitnn, op)(make(a, "block16"), 0.5).numpy(),
                                  _NUMPY[op](a, np.float32(0.5)).astype(np.uint8))


@pytest.mark.parametrize("op", ["logical_and", "logical_or", "logical_xor"])
def test_binary_logical_ops(op):
    """Nonzero is true, results are 0 or 1; broadcasting."""
    a = np.array([0, 1, 2, 255, 0, 42], np.uint8)
    b = np.array([0, 0, 7, 1, 3, 0], np.uint8)
    logic = {"logical_and": np.logical_and, "logical_or": np.logical_or,
             "logical_xor": np.logical_xor}[op]
    got = getattr(jitnn, op)(jitnn.tensor(a), jitnn.tensor(b))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got.numpy(), logic(a != 0, b != 0).astype(np.uint8))
    np.testing.assert_array_equal(got.numpy(), reference(op)(a, b))
    grid = getattr(jitnn, op)(a.reshape(6, 1), b.reshape(1, 6)).numpy()
    np.testing.assert_array_equal(grid, logic(a.reshape(6, 1) != 0, b != 0).astype(np.uint8))


def test_host_truth_values_become_uint8():
    """Bools and small integers given as host data are uint8 truth values;
    others are refused (WebNN's logical operands are uint8)."""
    np.testing.assert_array_equal(jitnn.logical_not([0, 1, 5]).numpy(), [1, 0, 0])
    got = jitnn.logical_and(np.array([True, False, True]), 1)
    assert got.dtype == np.uint8 and got.numpy().tolist() == [1, 0, 1]
    picked = jitnn.where([[True], [False]], np.float32([1, 2]), np.float32(-1))
    np.testing.assert_array_equal(picked.numpy(), [[1, 2], [-1, -1]])
    with pytest.raises(jitnn.JitnnTypeError, match=r"logical_or: a must hold integers of "
                       r"uint8's range \(WebNN's truth values are uint8\), got int64 data"):
        jitnn.logical_or([0, 300], 1)
    with pytest.raises(jitnn.JitnnTypeError, match=r"logical_xor: a must hold integers"):
        jitnn.logical_xor([0.5], 1)


def test_logical_not_and_tests_of_floats():
    a = np.array([[0, 1], [200, 0]], np.uint8)
    np.testing.assert_array_equal(jitnn.logical_not(jitnn.tensor(a)).numpy(), [[1, 0], [0, 1]])
    x = random((2, 9, 3, 4), 6)
    x[1, :, 1, :] = [np.nan, np.inf, -np.inf, 3e38]
    for kind in ("plain", "nChw8c"):
        nan = jitnn.is_nan(make(x, kind))
        inf = jitnn.is_infinite(make(x, kind))
        assert nan.dtype == inf.dtype == np.uint8
        np.testing.assert_array_equal(nan.numpy(), np.isnan(x).astype(np.uint8))
        np.testing.assert_array_equal(inf.numpy(), np.isinf(x).astype(np.uint8))
        np.testing.assert_array_equal(inf.numpy(), reference("is_infinite")(x))


@pytest.mark.parametrize("dtype", DTYPES)
def test_where_on_every_type_with_broadcasting(dtype):
    """The condition (any nonzero uint8 is true) and both values broadcast
    together; the result has the values' type."""
    condition = np.array([[0], [1], [7]], np.uint8)                  # (3, 1)
    true_value = _values(dtype, (2, 1, 4), 7)                         # (2, 1, 4)
    false_value = _values(dtype, (4,), 8)
    got = jitnn.where(jitnn.tensor(condition), jitnn.tensor(true_value),
                      jitnn.tensor(false_value))
    assert got.dtype == dtype and got.shape == (2, 3, 4)
    want = np.where(condition != 0, true_value, false_value)
    np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(got.numpy(), reference("where")(condition, true_value,
                                                                  false_value))


def test_where_of_blocked_values_and_a_comparison():
    """relu as where(x > 0, x, 0) on a blocked tensor: the comparison's uint8
    feeds where; the values are read back (blocked) once."""
    ctx = jitnn.Context()
    x = random((2, 9, 3, 5), 9)
    t = jitnn.reorder(ctx.tensor(x), "nChw8c")
    got = jitnn.where(jitnn.greater(t, 0.0), t, 0.0)
    assert got.dtype == np.float32 and got.layout == "nchw"
    np.testing.assert_array_equal(got.numpy(), np.maximum(x, 0))


def test_builder_graph_computes_twice():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    xi = b.input("x", (2, 5))
    yi = b.input("y", (5,))
    mask = b.logical_or(b.greater_or_equal(xi, yi), b.is_nan(xi))
    g = b.build({"mask": mask, "pick": b.where(mask, xi, b.constant(np.zeros(5, np.float32))),
                 "ne": b.not_equal(xi, yi)})
    for seed in (10, 11):
        x, y = random((2, 5), seed), random((5,), seed + 5)
        x[0, 0] = np.nan
        out = {"mask": np.empty((2, 5), np.uint8), "pick": np.empty((2, 5), np.float32),
               "ne": np.empty((2, 5), np.uint8)}
        ctx.compute(g, {"x": x, "y": y}, out)
        with np.errstate(invalid="ignore"):
            want = (x >= y) | np.isnan(x)
        np.testing.assert_array_equal(out["mask"], want.astype(np.uint8))
        np.testing.assert_array_equal(out["pick"], np.where(want, x, 0))
        np.testing.assert_array_equal(out["ne"], (x != y).astype(np.uint8))


def test_errors_raise_at_the_call():
    ctx = jitnn.Context()
    x = ctx.tensor(random((2, 3, 4), 12))
    ints = ctx.tensor(np.zeros((2, 3, 4), np.int32))
    flags = ctx.tensor(np.ones((2, 3, 4), np.uint8))
    with assert_schedule(ctx, kernels=0, reorders=0):
        with pytest.raises(jitnn.JitnnTypeError, match=r"equal: a and b must have the same "
                           r"dtype, got float32 and int32"):
            jitnn.equal(x, ints)
        with pytest.raises(jitnn.JitnnValueError, match=r"greater: the shapes do not "
                           r"broadcast .* a \(2, 3, 4\), b \(3,\)"):
            jitnn.greater(x, np.ones(3, np.float32))
        with pytest.raises(jitnn.JitnnTypeError, match=r"logical_and: b must have dtype uint8, "
                           r"got a int32 tensor"):
            jitnn.logical_and(flags, ints)
        with pytest.raises(jitnn.JitnnTypeError, match=r"logical_not: a must have dtype uint8"):
            jitnn.logical_not(x)
        with pytest.raises(jitnn.JitnnTypeError, match=r"is_nan: x must have dtype float32"):
            jitnn.is_nan(ints)
        with pytest.raises(jitnn.JitnnTypeError, match=r"where: condition must have dtype "
                           r"uint8, got a float32 tensor"):
            jitnn.where(x, x, x)
        with pytest.raises(jitnn.JitnnTypeError, match=r"where: true_value and false_value "
                           r"must have the same dtype, got float32 and int32"):
            jitnn.where(flags, x, ints)
        with pytest.raises(jitnn.JitnnValueError, match=r"where: the shapes do not broadcast"
                           r" .* condition \(2, 3, 4\), true_value \(2, 3, 4\), "
                           r"false_value \(2,\)"):
            jitnn.where(flags, x, np.zeros(2, np.float32))
        with pytest.raises(jitnn.JitnnTypeError, match=r"lesser: b"):
            jitnn.lesser(x, "zero")
        with pytest.raises(jitnn.JitnnTypeError, match=r"equal: b must hold integers"):
            jitnn.equal(ints, 0.5)
