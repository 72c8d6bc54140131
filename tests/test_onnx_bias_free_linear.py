"""The ONNX linear pattern without a bias (jitnn/onnx/_patterns.py): a
``MatMul`` of 3-D (or higher) activations by a constant 2-D weight, as
Llama's and Mistral's projections export, runs as the 2-D product of the rows
and a reshape back, so that a residual ``Add`` after it is the GEMM's
epilogue (one launch); 2-D activations, weights from an input and a product
read twice convert as before. Each against a float64 numpy reference."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn  # noqa: E402
import jitnn.onnx  # noqa: E402
from tests.helpers import assert_schedule, random  # noqa: E402


def _model(x_shape, n: int, *, residual: bool = True, weight_input: bool = False,
           read_twice: bool = False):
    k = x_shape[-1]
    w = random((k, n), 3, 1.0 / np.sqrt(k))
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))]
    inits, feed = [], {"x": random(x_shape, 1)}
    if weight_input:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [k, n]))
        feed["w"] = w
    else:
        inits.append(numpy_helper.from_array(w, "w"))
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    outputs, out_shape = ["y"], tuple(x_shape[:-1]) + (n,)
    want = {"y": feed["x"].astype(np.float64) @ w}
    if residual:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, list(out_shape)))
        feed["r"] = random(out_shape, 2)
        nodes.append(helper.make_node("Add", ["y", "r"], ["z"]))
        want["z"] = want["y"] + feed["r"]
        outputs = ["z"] + (["y"] if read_twice else [])
    graph = helper.make_graph(nodes, "linear", inputs, [
        helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return model, feed, {o: want[o] for o in outputs}


def _run(model, feed, want, launches: int | None = None):
    ctx = jitnn.Context(num_threads=1)
    converted = jitnn.onnx.prepare(model, ctx, input_shapes={k: v.shape for k, v in feed.items()})
    converted.run(feed)                                 # compile and record first
    with assert_schedule(ctx, kernels=launches):
        got = converted.run(feed)
    for name, value in want.items():
        assert got[name].shape == value.shape
        assert np.abs(got[name] - value).max() <= 1e-5 * np.abs(value).max(), name


@pytest.mark.parametrize("x_shape, n", [((1, 13, 24), 17), ((2, 7, 40), 70),
                                        ((2, 3, 5, 9), 33)])
def test_bias_free_projection_and_residual_are_one_gemm(x_shape, n):
    model, feed, want = _model(x_shape, n)
    _run(model, feed, want, launches=1)


@pytest.mark.parametrize("options", [{"weight_input": True}, {"read_twice": True},
                                     {"residual": False}])
def test_other_bias_free_products_keep_their_numbers(options):
    model, feed, want = _model((2, 5, 12), 9, **options)
    _run(model, feed, want)


def test_two_d_activations_convert_as_they_are():
    model, feed, want = _model((6, 12), 10)
    _run(model, feed, want, launches=1)
