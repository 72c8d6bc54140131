"""The ONNX frontend's API (load, prepare, run, errors, the optional import)
and the ops it added (lrn, gather, slice) against their numpy references."""

import subprocess
import sys

import numpy as np
import pytest

import jitnn
from jitnn.ops.gather import gather_reference
from jitnn.ops.lrn import lrn_reference
from jitnn.ops.slice import slice_reference


def test_import_jitnn_does_not_import_onnx():
    code = "import sys, jitnn; assert 'onnx' not in sys.modules, 'onnx imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_onnx_gives_a_clear_error():
    code = ("import sys; sys.modules['onnx'] = None\n"
            "import jitnn.onnx\n"
            "try:\n    jitnn.onnx.load('x.onnx')\n"
            "except ImportError as e:\n    assert 'pip install onnx' in str(e), e\n"
            "else:\n    raise SystemExit('no error')\n")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_lrn_matches_reference(size):
    x = np.random.default_rng(size).standard_normal((2, 11, 3, 4)).astype(np.float32)
    got = jitnn.lrn(jitnn.tensor(x), size, alpha=0.02, beta=0.6, bias=2.0).numpy()
    np.testing.assert_allclose(got, lrn_reference(x, size, alpha=0.02, beta=0.6, bias=2.0),
                               rtol=1e-5, atol=1e-6)


def test_lrn_on_blocked_input():
    x = np.random.default_rng(0).standard_normal((1, 13, 5, 5)).astype(np.float32)
    blocked = jitnn.reorder(jitnn.tensor(x), f"nChw{jitnn.default_context().block}c")
    np.testing.assert_allclose(jitnn.lrn(blocked, 3).numpy(), lrn_reference(x, 3), rtol=1e-5)


def test_gather_and_slice_match_references():
    x = np.arange(2 * 5 * 3 * 4, dtype=np.float32).reshape(2, 5, 3, 4)
    index = np.array([[4, -1], [0, 2]])
    np.testing.assert_array_equal(jitnn.gather(x, index, 1).numpy(), gather_reference(x, index, 1))
    got = jitnn.slice(x, [0, 1, 0, 1], [2, 2, 3, 2], strides=[1, 2, 1, 2]).numpy()
    np.testing.assert_array_equal(got, slice_reference(x, [0, 1, 0, 1], [2, 2, 3, 2],
                                                       [1, 2, 1, 2]))


def test_gather_and_slice_errors_name_the_op():
    x = jitnn.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(jitnn.JitnnValueError, match="gather: indices must be in"):
        jitnn.gather(x, np.array([3]), 1)
    with pytest.raises(jitnn.JitnnValueError, match="slice: axis 1"):
        jitnn.slice(x, [0, 2], [1, 2])


def test_graph_builder_has_the_new_ops():
    b = jitnn.GraphBuilder()
    x = b.input("x", (1, 8, 4, 4))
    y = b.slice(b.gather(b.lrn(x, 3), np.array([0, 2, 4]), 1), [0, 0, 0, 0], [1, 3, 2, 2])
    assert y.shape == (1, 3, 2, 2)


# --- the frontend -------------------------------------------------------------

onnx = pytest.importorskip("onnx", reason="the ONNX tests need onnx (in the test extra: pip install -e \".[test]\")")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import jitnn.onnx  # noqa: E402


def _small_model(opset=17, batch="N"):
    """conv -> bn -> relu -> global pool -> flatten -> gemm, with the shape
    arithmetic exporters emit (Shape -> Gather -> Unsqueeze -> Concat -> Reshape)."""
    rng = np.random.default_rng(0)
    inits = {
        "w": rng.standard_normal((16, 3, 3, 3)).astype(np.float32) * 0.2,
        "b": rng.standard_normal(16).astype(np.float32),
        "scale": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "bias": rng.standard_normal(16).astype(np.float32),
        "mean": rng.standard_normal(16).astype(np.float32),
        "var": rng.uniform(0.5, 1.5, 16).astype(np.float32),
        "fc_w": rng.standard_normal((10, 16)).astype(np.float32),
        "fc_b": rng.standard_normal(10).astype(np.float32),
        "zero": np.array(0, np.int64), "minus1": np.array([-1], np.int64),
        "axes0": np.array([0], np.int64),
    }
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Shape", ["p"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n0"], axis=0),
        helper.make_node("Unsqueeze", ["n0", "axes0"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["p", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), inits


def _reference(x, p):
    from jitnn.ops.conv2d import conv2d_reference
    c = conv2d_reference(x, p["w"], p["b"], strides=2, padding=1)
    n = (c - p["mean"][:, None, None]) / np.sqrt(p["var"][:, None, None] + 1e-5) \
        * p["scale"][:, None, None] + p["bias"][:, None, None]
    f = np.maximum(n, 0).mean(axis=(2, 3))
    return f @ p["fc_w"].T + p["fc_b"]


def test_load_returns_a_graph_that_dispatches():
    model, params = _small_model()
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx, input_shapes={"x": (2, 3, 9, 9)})
    assert isinstance(graph, jitnn.Graph)
    assert graph.inputs == {"x": (2, 3, 9, 9)} and graph.outputs == {"y": (2, 10)}
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 9)).astype(np.float32)
    y = ctx.dispatch(graph, {"x": x})["y"].numpy()
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)
    # the shape arithmetic was folded: no shape op in the graph
    assert "gather" not in repr(graph) and "concat" not in repr(graph)


def test_filters_are_packed_once_per_graph():
    model, _ = _small_model()
    ctx = jitnn.Context()
    graph = jitnn.onnx.load(model, ctx)            # dynamic batch defaults to 1
    x = np.ones((1, 3, 9, 9), np.float32)
    ctx.dispatch(graph, {"x": x})["y"].numpy()
    packs = ctx.stats.filter_packs
    for _ in range(3):
        ctx.dispatch(graph, {"x": x})["y"].numpy()
    assert ctx.stats.filter_packs == packs


def test_run_and_opset_7():
    model, params = _small_model(opset=7)
    # opset 7 Unsqueeze takes axes as an attribute
    for node in model.graph.node:
        if node.op_type == "Unsqueeze":
            del node.input[1]
            node.attribute.append(helper.make_attribute("axes", [0]))
    x = np.random.default_rng(2).standard_normal((3, 3, 9, 9)).astype(np.float32)
    y = jitnn.onnx.run(model, {"x": x})["y"]
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)


def test_unknown_op_names_op_node_and_opset():
    node = helper.make_node("Einsum", ["x"], ["y"], name="the_einsum", equation="i->i")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(jitnn.onnx.UnsupportedError, match=r"Einsum \(node 'the_einsum', opset 13\)"):
        jitnn.onnx.load(model)


def test_float64_model_is_rejected_clearly():
    node = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "x", TensorProto.DOUBLE, [2])], [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(jitnn.onnx.UnsupportedError, match="float64: jitnn computes in float32"):
        jitnn.onnx.load(model)


def test_backend_runs_a_model():
    from jitnn.onnx import backend
    model, params = _small_model()
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    x = np.random.default_rng(3).standard_normal((1, 3, 9, 9)).astype(np.float32)
    (y,) = backend.run_model(model, [x])
    np.testing.assert_allclose(y, _reference(x, params), rtol=1e-4, atol=1e-4)
    node = helper.make_node("HardSigmoid", ["a"], ["b"], alpha=0.3, beta=0.4)
    (out,) = backend.run_node(node, [np.linspace(-5, 5, 11, dtype=np.float32)])
    np.testing.assert_allclose(out, np.clip(np.linspace(-5, 5, 11) * 0.3 + 0.4, 0, 1), rtol=1e-6)
