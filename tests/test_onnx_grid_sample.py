"""ONNX GridSample (jitnn/onnx/_convert_grid_sample.py) against a float64
numpy reference written from the ONNX specification: every mode jitnn runs
(bilinear / linear, nearest), every padding mode, both corner conventions,
grids reaching outside the image, channel counts that do not fill a block,
odd sizes, N > 1, a grid computed at run time; bicubic and volumes refused
by name."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("onnx", reason="the ONNX tests need onnx (pip install -e \".[test]\")")

from onnx import TensorProto, helper

import jitnn
import jitnn.onnx


def grid_sample_reference(x: np.ndarray, grid: np.ndarray, mode: str, padding: str,
                          align_corners: bool) -> np.ndarray:
    """GridSample in float64, point by point: the ONNX reference's rules
    (unnormalize, reflect or clamp the point, then each neighbour read with
    zero padding outside the image)."""
    x = x.astype(np.float64)
    grid = grid.astype(np.float64)
    n, c, height, width = x.shape
    _, out_h, out_w, _ = grid.shape
    out = np.zeros((n, c, out_h, out_w))

    def unnormalize(g, size):
        return (g + 1) / 2 * (size - 1) if align_corners else ((g + 1) * size - 1) / 2

    def reflect(v, size):
        low, high = (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)
        span = high - low
        if span <= 0:
            return 0.0
        while v < low or v > high:             # fold back in, one edge at a time
            v = 2 * low - v if v < low else 2 * high - v
        return v

    def pixel(b, i, j):
        if 0 <= i < height and 0 <= j < width:
            return x[b, :, i, j]
        return np.zeros(c)

    for b, i, j in itertools.product(range(n), range(out_h), range(out_w)):
        px, py = unnormalize(grid[b, i, j, 0], width), unnormalize(grid[b, i, j, 1], height)
        if padding == "reflection":
            px, py = reflect(px, width), reflect(py, height)
        if padding != "zeros":
            px, py = min(max(px, 0.0), width - 1.0), min(max(py, 0.0), height - 1.0)
        if mode == "nearest":
            out[b, :, i, j] = pixel(b, int(np.rint(py)), int(np.rint(px)))
            continue
        x0, y0 = int(np.floor(px)), int(np.floor(py))
        dx, dy = px - x0, py - y0
        out[b, :, i, j] = ((1 - dx) * (1 - dy) * pixel(b, y0, x0)
                           + dx * (1 - dy) * pixel(b, y0, x0 + 1)
                           + (1 - dx) * dy * pixel(b, y0 + 1, x0)
                           + dx * dy * pixel(b, y0 + 1, x0 + 1))
    return out


def grid_model(x_shape, grid_shape, opset: int = 16, scale_grid: bool = False, **attrs):
    """GridSample of graph inputs x and grid (``scale_grid``: the grid times 1.5
    first, so that it is computed at run time)."""
    nodes = []
    grid_name = "grid"
    if scale_grid:
        nodes.append(helper.make_node("Constant", [], ["k"], value=helper.make_tensor(
            "k", TensorProto.FLOAT, [], [1.5])))
        nodes.append(helper.make_node("Mul", ["grid", "k"], ["scaled"]))
        grid_name = "scaled"
    nodes.append(helper.make_node("GridSample", ["x", grid_name], ["y"], name="the_node",
                                  **attrs))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape)),
                     helper.make_tensor_value_info("grid", TensorProto.FLOAT, list(grid_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(model, x, grid):
    return jitnn.onnx.prepare(model, jitnn.Context(num_threads=1)).run(
        {"x": x, "grid": grid})["y"]


def inputs(x_shape, grid_shape, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(np.float32)
    # beyond [-1, 1] on every side, and the exact corners and centre
    grid = rng.uniform(-1.4, 1.4, grid_shape).astype(np.float32)
    grid.reshape(-1, 2)[:3] = [[-1, -1], [1, 1], [0, 0]]
    return x, grid


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align_corners", [0, 1])
def test_grid_sample_against_a_float64_reference(mode, padding, align_corners):
    x, grid = inputs((2, 3, 5, 7), (2, 4, 9, 2))
    model = grid_model(x.shape, grid.shape, mode=mode, padding_mode=padding,
                       align_corners=align_corners)
    want = grid_sample_reference(x, grid, mode, padding, bool(align_corners))
    np.testing.assert_allclose(run(model, x, grid), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("channels, size, out", [(1, (1, 1), (3, 2)), (9, (3, 11), (1, 5)),
                                                 (17, (16, 16), (8, 8))])
def test_grid_sample_shapes(channels, size, out):
    """Channel counts that fill no block, a 1 x 1 image, odd and typical sizes,
    opset 20's ``linear``, a grid computed at run time."""
    x, grid = inputs((3, channels) + size, (3,) + out + (2,), seed=channels)
    for padding, align_corners in (("zeros", 0), ("reflection", 1), ("border", 0)):
        model = grid_model(x.shape, grid.shape, opset=20, scale_grid=True, mode="linear",
                           padding_mode=padding, align_corners=align_corners)
        want = grid_sample_reference(x, grid * np.float32(1.5), "bilinear", padding,
                                     bool(align_corners))
        np.testing.assert_allclose(run(model, x, grid), want, rtol=1e-5, atol=1e-5)


def test_grid_sample_refusals():
    with pytest.raises(jitnn.onnx.UnsupportedError, match=r"GridSample \(node 'the_node', "
                       r"opset 16\): mode 'bicubic' is not supported"):
        jitnn.onnx.prepare(grid_model((1, 3, 4, 4), (1, 2, 2, 2), mode="bicubic"))
    with pytest.raises(jitnn.onnx.UnsupportedError, match=r"a volume \(a rank-5 input of shape "
                       r"\(1, 3, 2, 4, 4\)\) is not supported"):
        jitnn.onnx.prepare(grid_model((1, 3, 2, 4, 4), (1, 2, 2, 2, 3), opset=20))
    with pytest.raises(jitnn.JitnnValueError, match=r"node 'the_node' \(GridSample\): an input "
                       r"of shape \(2, 3, 4, 4\) and a grid of shape \(1, 2, 2, 2\)"):
        jitnn.onnx.prepare(grid_model((2, 3, 4, 4), (1, 2, 2, 2)))
    with pytest.raises(jitnn.JitnnValueError, match=r"padding_mode 'wrap' is not one of"):
        jitnn.onnx.prepare(grid_model((1, 3, 4, 4), (1, 2, 2, 2), padding_mode="wrap"))


@pytest.mark.parametrize("padding", ["border", "reflection"])
def test_grid_sample_reads_no_pixel_past_the_edge(padding):
    """A point on the last column or row (border, reflection): its neighbour
    at floor + 1 has weight 0 and must not be read from the next row (an inf
    there would make 0 * inf = NaN)."""
    x = np.arange(2 * 1 * 3 * 4, dtype=np.float32).reshape(2, 1, 3, 4)
    x[:, :, 1, 0] = np.inf                      # the pixel after (row 0, last column)
    grid = np.array([[[[1.0, -1.0], [1.0, 1.0], [-1.0, 1.0], [0.2, 1.0]]]] * 2, np.float32)
    model = grid_model(x.shape, grid.shape, padding_mode=padding, align_corners=1)
    finite = np.nan_to_num(x, posinf=0.0)
    want = grid_sample_reference(finite, grid, "bilinear", padding, True)
    np.testing.assert_allclose(run(model, x, grid), want, rtol=1e-6)
