"""slice (WebNN: a window of ``sizes`` input elements per axis, every
``strides``-th of them), reverse and triangular: values against the
references on every data type, plain and blocked inputs (read back once),
0-D and 5-D tensors, a graph, and the errors of bad windows and axes."""

import numpy as np
import pytest

import jitnn
from jitnn.ops.slice import reverse_reference, slice_reference, triangular_reference
from tests.helpers import KINDS, assert_schedule, make, random, typed_data




# --- slice ---------------------------------------------------------------------------------

WINDOWS = [
    # (starts, sizes, strides) on a (2, 9, 7, 5) input
    ((0, 0, 0, 0), (2, 9, 7, 5), None),                   # the whole tensor
    ((1, 2, 1, 0), (1, 5, 6, 5), None),
    ((0, 1, 0, 2), (2, 8, 7, 3), (1, 2, 3, 2)),           # ceil(8 / 2), ceil(7 / 3), ...
    ((0, 3, 6, 4), (2, 1, 1, 1), (5, 7, 2, 9)),           # a stride beyond the window
    ((1, 0, 0, 0), (1, 9, 0, 5), None),                   # an empty window
]


@pytest.mark.parametrize("kind", KINDS)
def test_slice_windows_and_strides(kind):
    x = random((2, 9, 7, 5), 1)
    t = make(x, kind)
    t._materialize()
    with assert_schedule(t.context, reorders=0 if kind == "plain" else 1):  # one readback
        got = [jitnn.slice(t, b, n, strides=s) for b, n, s in WINDOWS]
        values = [g.numpy() for g in got]
    for (b, n, s), g, value in zip(WINDOWS, got, values):
        want = slice_reference(x, b, n, s)
        assert g.shape == want.shape == tuple(-(-m // k) for m, k in zip(n, s or (1,) * 4))
        assert jitnn.layouts.block_of(g.layout) is None
        np.testing.assert_array_equal(value, want)


@pytest.mark.parametrize("dtype", jitnn.DTYPES, ids=str)
def test_slice_reverse_triangular_every_dtype(dtype):
    x = typed_data((3, 4, 5), dtype, 2)
    t = jitnn.tensor(x)
    cases = [
        (jitnn.slice(t, (1, 0, 1), (2, 4, 4), strides=(1, 3, 2)),
         slice_reference(x, (1, 0, 1), (2, 4, 4), (1, 3, 2))),
        (jitnn.reverse(t), reverse_reference(x)),
        (jitnn.reverse(t, axes=[2, 0]), reverse_reference(x, [2, 0])),
        (jitnn.reverse(t, axes=[-1]), reverse_reference(x, [2])),
        (jitnn.reverse(t, axes=[]), reverse_reference(x, [])),
        (jitnn.triangular(t), triangular_reference(x)),
        (jitnn.triangular(t, upper=False, diagonal=-1), triangular_reference(x, False, -1)),
    ]
    for got, want in cases:
        assert got.dtype == dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_scalars_and_five_dimensions():
    scalar = np.float32(3.5)
    np.testing.assert_array_equal(jitnn.slice(scalar, [], []).numpy(), scalar)
    np.testing.assert_array_equal(jitnn.reverse(scalar).numpy(), scalar)
    x = random((2, 2, 3, 2, 1), 3)
    got = jitnn.slice(x, (1, 0, 2, 1, 0), (1, 2, 1, 1, 1))
    np.testing.assert_array_equal(got.numpy(), slice_reference(x, (1, 0, 2, 1, 0), (1, 2, 1, 1, 1)))
    np.testing.assert_array_equal(jitnn.reverse(x, (1, 3)).numpy(), reverse_reference(x, (1, 3)))


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("diagonal", [-7, -2, -1, 0, 1, 3, 9])
def test_triangular_diagonals(upper, diagonal):
    x = random((2, 3, 4, 6), 4)
    got = jitnn.triangular(x, upper=upper, diagonal=diagonal).numpy()
    np.testing.assert_array_equal(got, triangular_reference(x, upper, diagonal))
    keep = np.triu(np.ones((4, 6)), diagonal) if upper else np.tril(np.ones((4, 6)), diagonal)
    np.testing.assert_array_equal(got != 0, np.broadcast_to(keep != 0, got.shape))


def test_triangular_makes_a_causal_mask():
    """A decoder's causal mask: 1 on and below the diagonal, as uint8 (WebNN's bool)."""
    mask = jitnn.triangular(np.ones((128, 128), np.uint8), upper=False)
    assert mask.dtype == np.uint8
    np.testing.assert_array_equal(mask.numpy(), np.tril(np.ones((128, 128), np.uint8)))


@pytest.mark.parametrize("kind", KINDS)
def test_reverse_and_triangular_blocked(kind):
    x = random((2, 9, 5, 5), 5)
    t = make(x, kind)
    np.testing.assert_array_equal(jitnn.reverse(t, (1, 2)).numpy(), reverse_reference(x, (1, 2)))
    np.testing.assert_array_equal(jitnn.triangular(t, diagonal=1).numpy(),
                                  triangular_reference(x, True, 1))


def test_in_a_graph():
    ctx = jitnn.Context()
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", (4, 6), dtype="int32")
    y = b.reverse(b.slice(x, [1, 0], [3, 6], strides=[1, 2]), axes=[1])
    graph = b.build({"y": b.triangular(y, upper=False)})
    for seed in (1, 2):
        xv = typed_data((4, 6), np.int32, seed)
        out = np.empty((3, 3), np.int32)
        ctx.compute(graph, {"x": xv}, {"y": out})
        np.testing.assert_array_equal(out, np.tril(xv[1:4, 0:6:2][:, ::-1]))


def test_errors():
    x = jitnn.tensor(random((3, 4, 5)))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"slice: axis 1 of x \(3, 4, 5\): start 2, size 3, stride 1 do not "
                             r"fit \(need start >= 0, size >= 0, start \+ size <= 4"):
        jitnn.slice(x, [0, 2, 0], [3, 3, 5])
    with pytest.raises(jitnn.JitnnValueError, match=r"slice: axis 2 .* start 6, size 0"):
        jitnn.slice(x, [0, 0, 6], [1, 1, 0])
    with pytest.raises(jitnn.JitnnValueError, match=r"slice: axis 0 .* start -1"):
        jitnn.slice(x, [-1, 0, 0], [1, 1, 1])
    with pytest.raises(jitnn.JitnnValueError, match=r"slice: axis 1 .* stride 0"):
        jitnn.slice(x, [0, 0, 0], [1, 1, 1], strides=[1, 0, 1])
    with pytest.raises(jitnn.JitnnValueError, match=r"slice: sizes must have 3 item\(s\)"):
        jitnn.slice(x, [0, 0, 0], [1, 1])
    with pytest.raises(jitnn.JitnnValueError, match=r"slice: starts must have 3 item\(s\)"):
        jitnn.slice(x, [0, 0, 0, 0], [1, 1, 1])
    with pytest.raises(jitnn.JitnnTypeError, match=r"slice: starts must be a sequence of ints"):
        jitnn.slice(x, [0, 0.5, 0], [1, 1, 1])
    with pytest.raises(jitnn.JitnnValueError, match=r"slice: starts must have 0 item"):
        jitnn.slice(np.float32(1), [0], [1])
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"reverse: axes must be in \[-3, 2\] .* got \(3,\)"):
        jitnn.reverse(x, [3])
    with pytest.raises(jitnn.JitnnValueError, match=r"reverse: axes must not repeat an axis"):
        jitnn.reverse(x, [2, -1])
    with pytest.raises(jitnn.JitnnTypeError, match=r"reverse: axes must be a sequence of ints"):
        jitnn.reverse(x, 1)
    with pytest.raises(jitnn.JitnnValueError, match=r"triangular: x must have rank >= 2"):
        jitnn.triangular(np.zeros(4, np.float32))
    with pytest.raises(jitnn.JitnnTypeError, match=r"triangular: diagonal must be an int"):
        jitnn.triangular(x, diagonal=1.0)
    with pytest.raises(jitnn.JitnnTypeError, match=r"triangular: upper must be a bool"):
        jitnn.triangular(x, upper="lower")
    with pytest.raises(jitnn.JitnnValueError, match=r"triangular: diagonal must be <= 2147483647"):
        jitnn.triangular(x, diagonal=-2**40)
