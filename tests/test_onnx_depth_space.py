"""ONNX DepthToSpace (DCR and CRD: PyTorch's pixel_shuffle) and SpaceToDepth
(DCR and opset 28's CRD) against numpy written from the ONNX definitions,
on channel counts that fill no block, odd sizes, N > 1; indivisible shapes
refused as a broken model."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper

import jitnn
import jitnn.onnx


def model_of(op: str, shape, opset: int = 17, **attrs):
    node = helper.make_node(op, ["x"], ["y"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def depth_to_space(x, b, mode):
    """Output pixel (h·b + i, w·b + j) of channel c: DCR reads input channel
    (i·b + j)·C' + c, CRD channel c·b² + i·b + j (pixel_shuffle)."""
    n, c, h, w = x.shape
    depth = c // (b * b)
    y = np.zeros((n, depth, h * b, w * b), x.dtype)
    for k in range(depth):
        for i in range(b):
            for j in range(b):
                source = (i * b + j) * depth + k if mode == "DCR" else k * b * b + i * b + j
                y[:, k, i::b, j::b] = x[:, source]
    return y


@pytest.mark.parametrize("shape, block", [((2, 4, 3, 5), 2), ((1, 9 * 7, 5, 3), 3),
                                          ((3, 17 * 4, 1, 7), 2), ((2, 64, 8, 8), 4)])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_and_back(shape, block, mode):
    x = np.random.default_rng(block).standard_normal(shape).astype(np.float32)
    ctx = jitnn.Context(num_threads=1)
    got = jitnn.onnx.prepare(model_of("DepthToSpace", shape, blocksize=block, mode=mode),
                             ctx).run({"x": x})["y"]
    want = depth_to_space(x, block, mode)
    np.testing.assert_array_equal(got, want)
    # SpaceToDepth of the same mode undoes it (DCR: opset 13's only mode)
    opset = 13 if mode == "DCR" else 28
    extra = {} if mode == "DCR" else {"mode": mode}
    back = jitnn.onnx.prepare(model_of("SpaceToDepth", want.shape, opset, blocksize=block,
                                       **extra), ctx).run({"x": want})["y"]
    np.testing.assert_array_equal(back, x)


def test_indivisible_shapes_are_a_broken_model():
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(DepthToSpace\): 6 "
                       r"channels do not divide into blocks of 2 x 2"):
        jitnn.onnx.prepare(model_of("DepthToSpace", (1, 6, 3, 3), blocksize=2))
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(SpaceToDepth\): an "
                       r"input of 5 x 4 pixels does not divide into blocks of 2 x 2"):
        jitnn.onnx.prepare(model_of("SpaceToDepth", (1, 3, 5, 4), blocksize=2))
