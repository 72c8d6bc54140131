"""Sizes taken from the user are checked at the call (jitnn/limits.py).

Shapes, dimensions, paddings, windows, strides, dilations and activation
parameters that are not ints (floats, strs, bools), negative, too large
(a dimension, padding or window above 2**31 - 1, a tensor of more than 2**38
elements), or not finite raise a :class:`jitnn.JitnnError` naming the op at
the call, before anything is recorded; numpy integers stay accepted.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import jitnn
from jitnn.limits import MAX_DIM, MAX_ELEMENTS

F32 = np.float32
NAN, INF = float("nan"), float("inf")


@pytest.fixture
def ctx():
    # the blocked policy keeps pending work: a refused call must add none
    return jitnn.Context(num_threads=1, policy="blocked")


def _ones(*shape):
    return np.ones(shape, F32)


def _refused(ctx, call, error, message):
    """``call()`` raises ``error`` matching ``message`` and records nothing with ``ctx``."""
    before = len(ctx._pending)
    with pytest.raises(error, match=message):
        call()
    assert len(ctx._pending) == before


def test_limits_are_what_the_docs_say():
    assert MAX_DIM == 2**31 - 1
    assert MAX_ELEMENTS == 2**38            # 2**40 bytes of float32


# --- reshape ---------------------------------------------------------------------------

def test_reshape_product_that_wraps_in_int64_is_refused(ctx):
    x = ctx.tensor(_ones(2, 2))
    _refused(ctx, lambda: jitnn.reshape(x, [4, 2**62 + 1]), jitnn.JitnnValueError,
             r"reshape: new_shape \(4, 4611686018427387905\) has 18446744073709551620 "
             r"elements but x \(2, 2\) has 4")
    # the -1 is not inferred from a wrapped product either
    _refused(ctx, lambda: jitnn.reshape(x, [-1, 2**62 + 1, 4]), jitnn.JitnnValueError,
             r"reshape: cannot infer the -1")


def test_reshape_takes_numpy_ints_and_refuses_other_kinds(ctx):
    x = ctx.tensor(np.arange(6, dtype=F32))
    y = jitnn.reshape(x, np.array([2, -1], np.int64))
    np.testing.assert_array_equal(y.numpy(), np.arange(6).reshape(2, 3))
    for bad in ([2.0, 3], ["2", 3], [True, 6], "23"):
        _refused(ctx, lambda bad=bad: jitnn.reshape(x, bad), jitnn.JitnnTypeError,
                 r"reshape: new_shape must be a sequence of ints")


# --- GraphBuilder.input -----------------------------------------------------------------

@pytest.mark.parametrize("shape, error, message", [
    ((2**40, 2**40), jitnn.JitnnValueError,
     (r"GraphBuilder.input: shape \(1099511627776, 1099511627776\) has a dimension of "
      r"1099511627776, more than 2147483647")),
    ((2**30, 2**30), jitnn.JitnnValueError,
     (r"GraphBuilder.input: shape \(1073741824, 1073741824\) has 1152921504606846976 "
      r"elements, more than 274877906944")),
    ((2.7, 3), jitnn.JitnnTypeError,
     r"GraphBuilder.input: shape must be a sequence of ints, got \(2.7, 3\)"),
    ("22", jitnn.JitnnTypeError, r"GraphBuilder.input: shape must be a sequence of ints, got '22'"),
    ((2, True), jitnn.JitnnTypeError, r"GraphBuilder.input: shape must be a sequence of ints"),
    (("2", 3), jitnn.JitnnTypeError, r"GraphBuilder.input: shape must be a sequence of ints"),
    (3, jitnn.JitnnTypeError, r"GraphBuilder.input: shape must be a sequence of ints, got 3"),
    ((2, -1), jitnn.JitnnValueError, r"GraphBuilder.input: shape must be >= 0, got \(2, -1\)"),
])
def test_graph_input_refuses_bad_shapes(ctx, shape, error, message):
    b = jitnn.GraphBuilder(ctx)
    with pytest.raises(error, match=message):
        b.input("x", shape)
    # nothing recorded: the name is still free
    x = b.input("x", (1, 2))
    assert x.shape == (1, 2)


def test_graph_input_takes_numpy_ints(ctx):
    b = jitnn.GraphBuilder(ctx)
    x = b.input("x", np.array([2, 3], np.int64))
    y = b.input("y", (np.int32(3), np.uint8(2)))
    assert x.shape == (2, 3) and y.shape == (3, 2)
    assert all(type(d) is int for d in x.shape + y.shape)
    g = b.build({"z": b.matmul(x, y)})
    z = ctx.compute(g, {"x": _ones(2, 3), "y": _ones(3, 2)}, {"z": np.empty((2, 2), F32)})
    np.testing.assert_array_equal(z["z"], np.full((2, 2), 3.0))


# --- results too large for any memory -------------------------------------------------

def test_results_of_too_many_elements_are_refused_at_the_call(ctx):
    b = jitnn.GraphBuilder(ctx)
    col, row = b.input("col", (2**20, 1)), b.input("row", (1, 2**20))
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"matmul: the result's shape \(1048576, 1048576\) has 1099511627776 "
                             r"elements, more than 274877906944"):
        b.matmul(col, row)
    with pytest.raises(jitnn.JitnnValueError, match=r"add: the result's shape"):
        b.add(col, row)
    big = b.input("big", (2**18, 2**19))     # 2**37 elements: allowed
    with pytest.raises(jitnn.JitnnValueError,
                       match=r"concat: the result's shape \(786432, 524288\) has 412316860416 "
                             r"elements"):
        b.concat([big, big, big], 0)
    with pytest.raises(jitnn.JitnnValueError, match=r"gather: the result's shape"):
        b.gather(big, np.zeros((2**10, 2**10), np.int64), 0)
    assert not b._ops                         # nothing recorded
    # eager: refused before anything is allocated or recorded
    _refused(ctx, lambda: jitnn.add(_ones(2**19, 1), _ones(1, 2**20)), jitnn.JitnnValueError,
             r"add: the result's shape \(524288, 1048576\) has 549755813888 elements")


def test_conv_transpose2d_output_too_large_is_refused(ctx):
    x = ctx.tensor(_ones(1, 1, 4, 4))
    w = _ones(1, 1, 1, 1)
    _refused(ctx, lambda: jitnn.conv_transpose2d(x, w, strides=2**30), jitnn.JitnnValueError,
             r"conv_transpose2d: the result's shape \(1, 1, 3221225473, 3221225473\) has a "
             r"dimension of 3221225473")


# --- paddings, windows, strides, dilations ----------------------------------------------

HUGE = 2**31


def _beyond(name: str) -> str:
    """The message of a padding, window, stride... above 2**31 - 1."""
    return rf"{name} must be <= 2147483647 \(2\*\*31 - 1\)"


@pytest.mark.parametrize("op, call, message", [
    ("conv2d", lambda x: jitnn.conv2d(x, _ones(2, 3, 1, 1), padding=HUGE),
     r"padding must be <= 2147483647 \(2\*\*31 - 1\), got 2147483648"),
    ("conv2d", lambda x: jitnn.conv2d(x, _ones(2, 3, 1, 1), padding=[0, 0, 0, 2**40]),
     r"padding must be <= 2147483647 \(2\*\*31 - 1\), got \[0, 0, 0, 1099511627776\]"),
    ("conv2d", lambda x: jitnn.conv2d(x, _ones(2, 3, 1, 1), strides=(1, HUGE)),
     r"strides must be <= 2147483647"),
    ("conv2d", lambda x: jitnn.conv2d(x, _ones(2, 3, 1, 1), dilations=HUGE), _beyond("dilations")),
    ("conv2d", lambda x: jitnn.conv2d(x, _ones(2, 3, 1, 1), padding=(1.0, 1)), "padding must be"),
    ("max_pool2d", lambda x: jitnn.max_pool2d(x, (1, HUGE)),
     r"window_dimensions must be <= 2147483647"),
    ("max_pool2d", lambda x: jitnn.max_pool2d(x, 2, padding=HUGE), _beyond("padding")),
    ("max_pool2d", lambda x: jitnn.max_pool2d(x, 2, output_sizes=(HUGE, 1)),
     _beyond("output_sizes")),
    ("average_pool2d", lambda x: jitnn.average_pool2d(x, 2, strides=2**62), _beyond("strides")),
    ("average_pool2d", lambda x: jitnn.average_pool2d(x, 2, dilations=(HUGE, 1)),
     _beyond("dilations")),
    ("conv_transpose2d", lambda x: jitnn.conv_transpose2d(x, _ones(3, 2, 1, 1), padding=HUGE),
     _beyond("padding")),
    ("conv_transpose2d",
     lambda x: jitnn.conv_transpose2d(x, _ones(3, 2, 1, 1), strides=HUGE, output_padding=1),
     _beyond("strides")),
    ("conv_transpose2d",
     lambda x: jitnn.conv_transpose2d(x, _ones(3, 2, 1, 1), output_sizes=(4, HUGE)),
     _beyond("output_sizes")),
    ("slice", lambda x: jitnn.slice(x, [0, 0, 0, 0], [1, 1, 1, 1], strides=[1, 1, 1, 2**64]),
     r"stride 18446744073709551616"),
    ("lrn", lambda x: jitnn.lrn(x, HUGE), r"size must be <= 2147483647"),
    ("lrn", lambda x: jitnn.lrn(x, 2.7), r"size must be an int"),
])
def test_sizes_of_2_to_the_31_and_more_are_refused(ctx, op, call, message):
    x = ctx.tensor(_ones(1, 3, 4, 4))
    _refused(ctx, lambda: call(x), jitnn.JitnnError, rf"{op}: .*{message}")


def test_large_but_valid_sizes_and_numpy_ints_are_accepted(ctx):
    x = ctx.tensor(np.arange(16, dtype=F32).reshape(1, 1, 4, 4))
    y = jitnn.max_pool2d(x, 2, strides=MAX_DIM)                  # one window
    np.testing.assert_array_equal(y.numpy(), [[[[5.0]]]])
    y = jitnn.conv2d(x, _ones(1, 1, 1, 1), strides=np.int64(2), padding=np.int32(0),
                     dilations=(np.uint16(1), 1))
    np.testing.assert_array_equal(y.numpy(), [[[[0.0, 2.0], [8.0, 10.0]]]])
    y = jitnn.slice(x, np.array([0, 0, 1, 0]), [1, 1, 1, 1], strides=[1, 1, np.int64(MAX_DIM), 1])
    np.testing.assert_array_equal(y.numpy(), [[[[4.0]]]])


# --- activation parameters ------------------------------------------------------------

@pytest.mark.parametrize("activation, message", [
    (("leaky_relu", NAN), r"activation 'leaky_relu': alpha must be finite, got nan"),
    (("leaky_relu", INF), r"activation 'leaky_relu': alpha must be finite, got inf"),
    (("leaky_relu", -np.float32(INF)), r"activation 'leaky_relu': alpha must be finite"),
    (("leaky_relu", 10**400), r"activation 'leaky_relu': alpha must be finite"),
    (("clamp", NAN, 1.0), r"activation 'clamp': min must not be NaN"),
    (("clamp", 0.0, NAN), r"activation 'clamp': max must not be NaN"),
])
def test_non_finite_activation_parameters_are_refused(ctx, activation, message):
    x = ctx.tensor(_ones(1, 3, 4, 4))
    calls = {
        "conv2d": lambda: jitnn.conv2d(x, _ones(2, 3, 1, 1), activation=activation),
        "conv_transpose2d": lambda: jitnn.conv_transpose2d(x, _ones(3, 2, 1, 1),
                                                           activation=activation),
        "matmul": lambda: jitnn.matmul(_ones(2, 3), _ones(3, 2), activation=activation),
        "batch_normalization": lambda: jitnn.batch_normalization(
            x, _ones(3), _ones(3), activation=activation),
    }
    for op, call in calls.items():
        _refused(ctx, call, jitnn.JitnnValueError, rf"{op}: {message}")


def test_infinite_clamp_bounds_stay_accepted(ctx):
    x = ctx.tensor(np.float32([[-2.0, 3.0]]))
    y = jitnn.matmul(x, np.eye(2, dtype=F32), activation=("clamp", -INF, 1.0))
    np.testing.assert_array_equal(y.numpy(), [[-2.0, 1.0]])
    np.testing.assert_array_equal(jitnn.clamp(x, 0.0, INF).numpy(), [[0.0, 3.0]])


@pytest.mark.parametrize("op, call, error, message", [
    ("leaky_relu", lambda x: jitnn.leaky_relu(x, NAN), jitnn.JitnnValueError,
     "alpha must be finite"),
    ("leaky_relu", lambda x: jitnn.leaky_relu(x, INF), jitnn.JitnnValueError,
     "alpha must be finite"),
    ("leaky_relu", lambda x: jitnn.leaky_relu(x, 10**400), jitnn.JitnnValueError,
     "alpha must be finite"),
    ("clamp", lambda x: jitnn.clamp(x, 10**400), jitnn.JitnnValueError, "min_value must be"),
    ("gemm", lambda x: jitnn.gemm(_ones(2, 3), _ones(3, 2), alpha=NAN), jitnn.JitnnValueError,
     "alpha must be finite"),
    ("gemm", lambda x: jitnn.gemm(_ones(2, 3), _ones(3, 2), beta=-INF), jitnn.JitnnValueError,
     "beta must be finite"),
    ("lrn", lambda x: jitnn.lrn(x, 3, alpha=NAN), jitnn.JitnnValueError, "alpha must be finite"),
    ("lrn", lambda x: jitnn.lrn(x, 3, bias=INF), jitnn.JitnnValueError, "bias must be finite"),
    ("batch_normalization",
     lambda x: jitnn.batch_normalization(x, _ones(3), _ones(3), epsilon=INF),
     jitnn.JitnnValueError, "epsilon must be"),
])
def test_non_finite_op_parameters_are_refused(ctx, op, call, error, message):
    x = ctx.tensor(_ones(1, 3, 4, 4))
    _refused(ctx, lambda: call(x), error, rf"{op}: {message}")


def test_finite_parameters_given_as_numpy_numbers_are_accepted(ctx):
    x = ctx.tensor(np.float32([[-2.0, 3.0]]))
    np.testing.assert_allclose(jitnn.leaky_relu(x, np.float32(0.5)).numpy(), [[-1.0, 3.0]])
    y = jitnn.matmul(x, np.eye(2, dtype=F32), activation=("leaky_relu", np.float64(0.25)))
    np.testing.assert_allclose(y.numpy(), [[-0.5, 3.0]])
    y = jitnn.gemm(_ones(1, 1), _ones(1, 1), alpha=np.int64(3), beta=np.float32(0.5))
    assert math.isclose(float(y.numpy()[0, 0]), 3.0)


# --- the ONNX frontend's input shapes ----------------------------------------------------

def test_onnx_input_shapes_are_checked_as_graph_inputs():
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    import jitnn.onnx
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    with pytest.raises(jitnn.JitnnTypeError, match=r"GraphBuilder.input: shape must be a "
                                                   r"sequence of ints, got \(2.7, 3\)"):
        jitnn.onnx.prepare(model, input_shapes={"x": (2.7, 3)})
