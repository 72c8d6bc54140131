"""cast between every pair of jitnn data types against the exact reference:
float to integer truncates toward zero and saturates (NaN gives 0), integer
to integer keeps the low bits, to float32 rounds to nearest; a cast to its
own type is the tensor itself (a blocked one stays blocked); blocked inputs
read back once; casts in a graph; float16 and other types refused."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.cast import cast_reference
from tests.helpers import KINDS, assert_schedule, make, random

#: float32 values that probe every rule: fractions both ways, halves, the
#: edges of each integer type, beyond them, infinities, NaN, -0
FLOATS = np.array([0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 102.9, -43.5, 127.0, 127.9, 128.0, -128.0,
                   -128.9, -129.0, 255.0, 255.5, 256.0, -1.0, -0.99, 2.0**31, -2.0**31,
                   2.0**31 - 128, 2.0**32, 2.0**32 - 256, 2.0**63, -2.0**63, 2.0**63 - 2.0**39,
                   1e20, -1e20, np.inf, -np.inf, np.nan, 16777217.0, 3.4e38], np.float32)


def values(dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return FLOATS
    info = np.iinfo(dtype)
    edges = [info.min, info.min + 1, -1, 0, 1, 127, 128, 255, 256, 2**24 + 1, 2**31 - 1, 2**31,
             2**32 - 1, 2**32, 2**53 + 1, 2**62 + 3, info.max - 1, info.max]
    return np.array([v for v in edges if info.min <= v <= info.max], dtype)


@pytest.mark.parametrize("target", jitnn.DTYPES, ids=str)
@pytest.mark.parametrize("source", jitnn.DTYPES, ids=str)
def test_every_pair_against_the_reference(source, target):
    x = values(source)
    got = jitnn.cast(jitnn.tensor(x), target.name)
    want = cast_reference(x, target)
    assert got.dtype == target and got.shape == x.shape and want.dtype == target
    np.testing.assert_array_equal(got.numpy(), want)
    grid = np.resize(x, (2, 3, 4))                         # N > 1, and a numpy dtype as type
    np.testing.assert_array_equal(jitnn.cast(grid, target).numpy(), cast_reference(grid, target))


def test_the_rules_by_example():
    f = np.array([102.9, -43.5, -2.5, 2.5, 300.0, -1.0, np.nan, np.inf, -np.inf, 1e20],
                 np.float32)
    np.testing.assert_array_equal(jitnn.cast(f, "int32").numpy(),
                                  [102, -43, -2, 2, 300, -1, 0, 2**31 - 1, -2**31, 2**31 - 1])
    np.testing.assert_array_equal(jitnn.cast(f, "uint8").numpy(),
                                  [102, 0, 0, 2, 255, 0, 0, 255, 0, 255])
    np.testing.assert_array_equal(jitnn.cast(f, "int8").numpy(),
                                  [102, -43, -2, 2, 127, -1, 0, 127, -128, 127])
    np.testing.assert_array_equal(jitnn.cast(f, "uint32").numpy(),
                                  [102, 0, 0, 2, 300, 0, 0, 2**32 - 1, 0, 2**32 - 1])
    np.testing.assert_array_equal(jitnn.cast(np.float32([2.0**63, -2.0**64]), "int64").numpy(),
                                  [2**63 - 1, -2**63])
    i = np.array([300, -1, 2**31 - 1, -2**31], np.int32)
    np.testing.assert_array_equal(jitnn.cast(i, "uint8").numpy(), [44, 255, 255, 0])
    np.testing.assert_array_equal(jitnn.cast(i, "int8").numpy(), [44, -1, -1, 0])
    np.testing.assert_array_equal(jitnn.cast(i, "uint32").numpy(),
                                  [300, 2**32 - 1, 2**31 - 1, 2**31])
    np.testing.assert_array_equal(jitnn.cast(np.array([2**40 + 5, -2**40 - 5]), "int32").numpy(),
                                  [5, -5])
    np.testing.assert_array_equal(jitnn.cast(np.array([2**24 + 1, 2**53 + 1]), "float32").numpy(),
                                  np.float32([2**24, 2**53]))


@pytest.mark.parametrize("kind", KINDS)
def test_own_type_is_the_tensor_itself(kind):
    t = make(random((2, 9, 3, 3), 1), kind)
    assert jitnn.cast(t, "float32") is t
    ids = jitnn.tensor(np.arange(6, dtype=np.uint8))
    assert jitnn.cast(ids, np.uint8) is ids


@pytest.mark.parametrize("kind", KINDS)
def test_blocked_input_is_read_back_once(kind):
    x = random((2, 9, 3, 5), 2, scale=50.0)
    t = make(x, kind)
    t._materialize()
    with assert_schedule(t.context, reorders=0 if kind == "plain" else 1):
        got = [jitnn.cast(t, dtype) for dtype in ("int32", "int8", "uint8")]
        results = [g.numpy() for g in got]
    for g, r, dtype in zip(got, results, ("int32", "int8", "uint8")):
        assert g.layout == "nchw" and g.dtype == dtype
        np.testing.assert_array_equal(r, cast_reference(x, dtype))


def test_casts_in_a_graph():
    """int64 ids to a float mask and back: each compute reads its own input."""
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    ids = b.input("ids", (2, 5), dtype="int64")
    x = b.input("x", (2, 5))
    scaled = b.mul(b.cast(ids, "float32"), x)
    graph = b.build({"y": b.cast(scaled, "int32"), "same": b.cast(x, "float32"),
                     "mask": b.cast(ids, "uint8")})
    for seed in (1, 2):
        rng = np.random.default_rng(seed)
        iv, xv = rng.integers(-300, 300, (2, 5)), random((2, 5), seed)
        outs = {"y": np.empty((2, 5), np.int32), "same": np.empty((2, 5), np.float32),
                "mask": np.empty((2, 5), np.uint8)}
        ctx.compute(graph, {"ids": iv, "x": xv}, outs)
        np.testing.assert_array_equal(outs["y"], np.trunc(iv.astype(np.float32) * xv))
        np.testing.assert_array_equal(outs["same"], xv)
        np.testing.assert_array_equal(outs["mask"], iv.astype(np.uint8))


def test_errors():
    x = jitnn.tensor(random((2, 3)))
    for float16 in ("float16", np.float16, np.dtype(np.float16)):
        with pytest.raises(jitnn.JitnnTypeError,
                           match=r"cast: type float16 is not a jitnn data type .* cast to "
                                 r"'float32' instead"):
            jitnn.cast(x, float16)
    for bad in ("float64", "bool", "int16", 3, None, "tensor"):
        with pytest.raises(jitnn.JitnnTypeError,
                           match=r"cast: type must be one of float32, int32, int64, uint32, "
                                 r"int8, uint8"):
            jitnn.cast(x, bad)
    with pytest.raises(jitnn.JitnnTypeError, match=r"conv2d: x must have dtype float32, got a "
                                                   r"int32 tensor \(convert it with jitnn.cast\)"):
        jitnn.conv2d(jitnn.cast(x.numpy().reshape(1, 1, 2, 3), "int32"),
                     np.ones((1, 1, 1, 1), np.float32))
    b = jitnn.GraphBuilder()
    with pytest.raises(jitnn.JitnnTypeError, match=r"cast: type float16"):
        b.cast(b.input("x", (2,)), "float16")
