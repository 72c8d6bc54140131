"""ONNX TopK (jitnn/onnx/_convert_topk.py) against numpy's stable sort: largest
and smallest, every axis, k = 1, k = n, ties (ONNX: the lower index first), a
long axis, NaN, integer and float inputs, one output or both; k = 0 and a
run-time k refused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper, numpy_helper

import jitnn
import jitnn.onnx


def top_k_model(shape, k: int, dtype=TensorProto.FLOAT, outputs=("values", "indices"),
                **attrs):
    node = helper.make_node("TopK", ["x", "k"], [*outputs], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", dtype, list(shape))],
        [helper.make_tensor_value_info(o, dtype if o == "values" else TensorProto.INT64, None)
         for o in outputs], [numpy_helper.from_array(np.array([k], np.int64), "k")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def reference(x: np.ndarray, k: int, axis: int, largest: bool):
    """ONNX's order: by value, equal values by index (a stable sort)."""
    order = np.argsort(-x.astype(np.float64) if largest else x, axis=axis, kind="stable")
    index = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, index, axis=axis), index


def run(model, x):
    return jitnn.onnx.prepare(model, jitnn.Context(num_threads=1)).run({"x": x})


@pytest.mark.parametrize("shape, axis, k", [((3, 7), -1, 3), ((2, 17, 5), 1, 4),
                                            ((4, 9), 0, 4), ((2, 3, 9), 2, 9),
                                            ((3, 11), 1, 1), ((1, 300), 1, 17)])
@pytest.mark.parametrize("largest", [1, 0])
def test_top_k_against_a_stable_sort(shape, axis, k, largest):
    rng = np.random.default_rng(k)
    # few distinct values: many ties, whose order ONNX fixes
    x = rng.integers(-3, 4, shape).astype(np.float32) + np.float32(0.5)
    got = run(top_k_model(shape, k, axis=axis, largest=largest), x)
    values, index = reference(x, k, axis % len(shape), bool(largest))
    np.testing.assert_array_equal(got["indices"], index)
    assert got["indices"].dtype == np.int64
    np.testing.assert_array_equal(got["values"], values)


def test_top_k_of_a_long_axis_and_nan():
    """RT-DETR's 300 best of 8400 anchors (a sort, not pairwise comparisons),
    and NaN, which counts as the largest value (PyTorch's topk): first among
    the largest, last among the smallest, by index among themselves."""
    x = np.random.default_rng(4).standard_normal((1, 8400)).astype(np.float32)
    got = run(top_k_model(x.shape, 300), x)
    values, index = reference(x, 300, 1, True)
    np.testing.assert_array_equal(got["indices"], index)
    np.testing.assert_array_equal(got["values"], values)
    y = np.float32([[1.0, np.nan, 3.0, np.nan, -2.0, 3.0]])
    got = run(top_k_model(y.shape, 4), y)
    np.testing.assert_array_equal(got["indices"], [[1, 3, 2, 5]])
    got = run(top_k_model(y.shape, 4, largest=0), y)
    np.testing.assert_array_equal(got["indices"], [[4, 0, 2, 5]])


def test_top_k_of_integers_and_of_one_output():
    x = np.random.default_rng(1).integers(-50, 50, (3, 13)).astype(np.int32)
    got = run(top_k_model(x.shape, 5, TensorProto.INT32), x)
    values, index = reference(x, 5, 1, True)
    np.testing.assert_array_equal(got["values"], values)
    np.testing.assert_array_equal(got["indices"], index)
    y = np.random.default_rng(2).standard_normal((2, 7, 3)).astype(np.float32)
    got = run(top_k_model(y.shape, 2, outputs=("values",), axis=1, largest=0), y)
    np.testing.assert_array_equal(got["values"], reference(y, 2, 1, False)[0])


def test_top_k_refusals():
    with pytest.raises(jitnn.onnx.UnsupportedError, match=r"TopK \(node 'the_node', opset "
                       r"17\): k = 0: jitnn does not make empty tensors"):
        jitnn.onnx.prepare(top_k_model((2, 5), 0))
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(TopK\): k = 6 for an "
                       r"axis of 5: TopK needs 0 <= k <= 5"):
        jitnn.onnx.prepare(top_k_model((2, 5), 6))
    model = top_k_model((2, 5), 2)
    del model.graph.initializer[:]
    model.graph.input.append(helper.make_tensor_value_info("k", TensorProto.INT64, [1]))
    with pytest.raises(jitnn.onnx.LoadTimeValueError, match=r"k must be known when the model "
                       r"is loaded"):
        jitnn.onnx.prepare(model)
