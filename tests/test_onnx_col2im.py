"""ONNX Col2Im (jitnn/onnx/_convert_col2im.py: a grouped ConvTranspose with a
one-hot filter) against a float64 numpy fold: channel counts that fill no
block, odd image sizes, N > 1, strides, dilations, pads, overlapping blocks,
a grid whose blocks do not reach the image's last rows, 1-D, 2-D and 3-D
images; inconsistent shapes refused as a broken model."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper, numpy_helper

import jitnn
import jitnn.onnx


def fold_reference(columns, image, block, strides, dilations, pads):
    """Each column's block added at its place in the padded image, the padding cut."""
    nd = len(image)
    n, channels_blocks, _ = columns.shape
    channels = channels_blocks // int(np.prod(block))
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    grid = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    out = np.zeros((n, channels, *padded))
    values = columns.astype(np.float64).reshape(n, channels, *block, *grid)
    for corner in itertools.product(*(range(g) for g in grid)):
        for offset in itertools.product(*(range(b) for b in block)):
            at = tuple(corner[i] * strides[i] + offset[i] * dilations[i] for i in range(nd))
            out[(slice(None), slice(None)) + at] += values[(slice(None), slice(None))
                                                           + offset + corner]
    return out[(slice(None), slice(None)) + tuple(slice(pads[i], pads[i] + image[i])
                                                  for i in range(nd))]


def col2im_model(shape, image, block, **attrs):
    node = helper.make_node("Col2Im", ["x", "image", "block"], ["y"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.array(image, np.int64), "image"),
         numpy_helper.from_array(np.array(block, np.int64), "block")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("channels, image, block, strides, dilations, pads", [
    (1, [5, 7], [2, 3], [1, 1], [1, 1], [0, 0, 0, 0]),
    (3, [9, 9], [3, 3], [2, 2], [1, 1], [1, 1, 1, 1]),       # VOLO's overlapping 3 x 3, stride 2
    (7, [8, 11], [3, 2], [2, 3], [2, 1], [0, 1, 2, 0]),      # last rows reached by no block
    (17, [13], [4], [3], [1], [2, 1]),                        # 1-D
    (3, [3, 5, 4], [2, 2, 3], [1, 2, 1], [1, 1, 1], [0, 1, 0, 0, 0, 1]),   # 3-D
])
def test_col2im_against_a_numpy_fold(channels, image, block, strides, dilations, pads):
    nd = len(image)
    padded = [image[i] + pads[i] + pads[i + nd] for i in range(nd)]
    grid = [(padded[i] - dilations[i] * (block[i] - 1) - 1) // strides[i] + 1 for i in range(nd)]
    shape = (2, channels * int(np.prod(block)), int(np.prod(grid)))
    x = np.random.default_rng(channels).standard_normal(shape).astype(np.float32)
    model = col2im_model(shape, image, block, strides=strides, dilations=dilations, pads=pads)
    got = jitnn.onnx.prepare(model, jitnn.Context(num_threads=1)).run({"x": x})["y"]
    want = fold_reference(x, image, block, strides, dilations, pads)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_col2im_with_inconsistent_shapes_is_a_broken_model():
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(Col2Im\): an input of "
                       r"shape \(1, 12, 10\): image \[5, 7\], blocks \[2, 3\].* make 20 blocks "
                       r"of 6 values a channel"):
        jitnn.onnx.prepare(col2im_model((1, 12, 10), [5, 7], [2, 3]))
    with pytest.raises(jitnn.JitnnValueError, match=r"as many block dims as image dims"):
        jitnn.onnx.prepare(col2im_model((1, 12, 10), [5, 7], [2]))
